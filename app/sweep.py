"""A spotter's score track over a long stream, and its detections at every threshold of a sweep
(a DET curve's raw material), exactly as the runtime's rule would give them one threshold at a
time. The runtime's own rule run fast; used by training/, export/ and benchmarks/ (evaluation/
matches what it detects, without running a model)."""
import numpy as np

from app.detection import MIN_HOPS, REFRACTORY_S, SMOOTHING_HOPS, detect, moving_average
from app.spotter import KeywordModel, KeywordSpotter, detection_settings

FEED_SECONDS = 1.0            # audio handed to the spotter per call, as a live microphone would
# the sweep: every 0.005 from 0.30, then 1 − 10^−x for x = 2 … 4 by 0.1 (a model trained without
# label smoothing puts its confident keywords above 0.99, where the low false-accept rates are)
THRESHOLDS = np.unique(np.round(np.concatenate([np.arange(0.30, 0.99, 0.005),
                                                1 - 10.0 ** -np.arange(2.0, 4.05, 0.1)]), 5))


def score_track(model: KeywordModel, stream: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(times, scores) of the spotter over the stream, fed FEED_SECONDS at a time as live audio."""
    spotter = KeywordSpotter(model)
    step = int(FEED_SECONDS * model.sample_rate)
    parts = [spotter.process(stream[i:i + step], model.sample_rate) for i in range(0, len(stream), step)]
    return np.concatenate([r.times for r in parts]), np.concatenate([r.scores for r in parts])


def model_rule(model: KeywordModel) -> dict:
    """The detection rule the runtime applies to `model` but for its threshold: smoothing, min_hops
    and refractory_s from its metadata (an enrolled wake word stores its own), else the defaults."""
    settings = detection_settings(model, {})
    return {k: settings[k] for k in ("smoothing", "min_hops", "refractory_s")}


def sweep_detections(times: np.ndarray, scores: np.ndarray, labels, keywords, thresholds, *,
                     smoothing: int = SMOOTHING_HOPS, min_hops: int = MIN_HOPS,
                     refractory_s: float = REFRACTORY_S):
    """{threshold: detections}, each exactly what `detect(times, scores, …)` gives with that
    smoothing, run length and refractory time (the runtime's defaults, or a model's
    `model_rule`) at that threshold, in less time: the
    rows are smoothed once, and each threshold keeps only the rows where a keyword reaches it,
    with one zero row for every run of dropped ones (a row below the threshold only resets the
    run, however many there are)."""
    smooth = moving_average(np.asarray(scores, np.float64), smoothing, np.zeros((0, len(labels))))
    columns = [list(labels).index(k) for k in keywords]
    best = smooth[:, columns].max(1)
    out = {}
    for th in thresholds:
        keep = np.flatnonzero(best >= th)
        gap = np.diff(keep, prepend=-2) > 1                       # a dropped run before this row
        rows = np.zeros((len(keep) + int(gap.sum()), len(labels)))
        at = np.arange(len(keep)) + np.cumsum(gap)                 # kept rows after their zero rows
        rows[at] = smooth[keep]
        t = np.zeros(len(rows))
        t[at] = times[keep]
        t[at[gap] - 1] = times[keep[gap]] - 1e-9                    # a zero row: just before
        out[float(th)] = detect(t, rows, labels, keywords, smoothing=1, min_hops=min_hops,
                                refractory_s=refractory_s, threshold=float(th))
    return out
