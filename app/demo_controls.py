"""Where the demo page's controls start, for whatever it serves (`Served`: one model, or a wake
word and its commands): the threshold slider's span and first value, and one fixed colour per
series of the plot. Shared by the page (app/demo.py) and its enroll tab (app/demo_enroll.py),
which switches the page to a visitor's own wake word."""
import numpy as np

from app.demo_session import WINDOW_SERIES, Assistant, wake_series
from app.spotter import KeywordModel, detection_settings

THRESHOLD_RANGE = (0.05, 0.99)  # the threshold slider's span; it starts at the model's operating point
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]   # one fixed colour per keyword, so a line keeps its colour
WAKE_COLOR = "#000000"       # on a two-stage page: the wake word's line
WINDOW_COLOR = "#b0b0b0"     # … and the command window's

Served = KeywordModel | Assistant   # what the page runs: one model, or a wake word and its commands


def slider_start(model: Served) -> tuple[float, str]:
    """The threshold slider's first value (the model's operating point; on a two-stage page the
    wake word's, a cascade's `propose`; its median when the model has one threshold per keyword) and, then, those
    thresholds as text."""
    point = model.operating_point if isinstance(model, Assistant) else detection_settings(model, {})["threshold"]
    if not isinstance(point, dict):
        return float(np.clip(point, *THRESHOLD_RANGE)), ""
    start = float(np.clip(np.round(np.median(list(point.values())), 2), *THRESHOLD_RANGE))
    return start, ", ".join(f"{k} {v:.2f}" for k, v in point.items())


def slider_threshold(model: Served, value: float | None) -> float | None:
    """The slider's value as a threshold: None (the model's own operating point, per keyword
    where it has one) while the slider stays where it started."""
    return None if value is None or value == slider_start(model)[0] else value


def plot_colors(model: Served) -> dict[str, str]:
    """One fixed colour per series of the plot: each keyword's from PALETTE; on a two-stage page
    the wake words' WAKE_COLOR, the commands' and the window's WINDOW_COLOR."""
    if not isinstance(model, Assistant):
        return {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(model.keywords)}
    wake = {wake_series(k): WAKE_COLOR for k in model.wake_words}
    commands = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(model.commands.keywords)}
    return wake | commands | {WINDOW_SERIES: WINDOW_COLOR}
