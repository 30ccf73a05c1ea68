"""The detection rule an enrolled wake word stores (its metadata's `detection`), how its threshold
is bounded and budgeted, and what that rule scores on a batch of examples: app/detection.py's
smoothing and run, over (examples, hops) arrays instead of one stream.

Used by training (the mining of hard negatives: training/enroll_fit.py) and by `rotkws enroll`
(the held-out rates it reports, the threshold it stores); the runtime itself reads the rule
from the file. numpy only.
"""
import numpy as np

from app.detection import moving_average
from app.sweep import THRESHOLDS

WAKE_SMOOTHING_HOPS = 8       # the detection rule an enrolled file stores (its metadata's `detection`): a
WAKE_MIN_HOPS = 2             # mean over 800 ms, two hops in a row. On the wake-word bench (2026-12-04,
                              # BENCHMARKS.md) the runtime's default, 3 hops, missed 1–13 points more at 1 FA/h and
                              # 12–25 more at 1 FA/10 h (six models): a said phrase holds its score for the half
                              # second its label lasts, speech's false peaks are brief
WAKE_RULE = {"smoothing": WAKE_SMOOTHING_HOPS, "min_hops": WAKE_MIN_HOPS}
VALIDATION_FA_PER_HOUR = 0.5  # the stored threshold keeps the validation stream to this (4.3 h: 2 false accepts,
                              # one per thing said: export/wake_threshold.py, Validation.count):
                              # half the budget, as other speakers set it off more often (at 1.0, three of four
                              # models went over 1 FA/h on the bench; at 0.1 they missed 10–30 points more)
MIN_THRESHOLD, MAX_THRESHOLD = 0.5, float(THRESHOLDS[-1])   # the stored threshold's bounds
PHRASE, SYNTHETIC, REAL, SPEECH = 0, 1, 2, 3   # kinds of enroll example (training/enroll_examples.py:
                                               # example_kinds), for the held-out rates and the mining
HELD_OUT_RATES = {"validation_positives_detected": PHRASE, "validation_real_negatives_firing": REAL,
                  "validation_synthetic_negatives_firing": SYNTHETIC, "validation_speech_firing": SPEECH}


def smooth(hops: np.ndarray) -> np.ndarray:
    """(N, hops) → each row smoothed as the runtime smooths an enrolled file's scores
    (app.detection.moving_average over WAKE_SMOOTHING_HOPS, as a stream that starts with the
    example): the examples are its columns."""
    return moving_average(hops.T, WAKE_SMOOTHING_HOPS, np.zeros((0, len(hops)))).T


def best_runs(scores: np.ndarray) -> np.ndarray:
    """(N, hops) smoothed phrase probabilities → (N,) the highest level held WAKE_MIN_HOPS hops in
    a row (the detector's run): what a threshold must exceed to fire."""
    if scores.shape[1] < WAKE_MIN_HOPS:
        return np.zeros(len(scores))
    windows = np.lib.stride_tricks.sliding_window_view(scores, WAKE_MIN_HOPS, axis=1)
    return windows.min(-1).max(1)


def held_out_rates(scores: np.ndarray, kind: np.ndarray, threshold: float) -> dict:
    """The share of each kind of held-out example (`scores` (N, hops), `kind` (N,)) whose best run
    reaches `threshold`: synthetic phrases detected, negatives firing."""
    runs = best_runs(scores)
    rate = lambda k: float(np.mean(runs[kind == k] >= threshold)) if (kind == k).any() else 0.0
    return {name: rate(k) for name, k in HELD_OUT_RATES.items()} | {"validation_examples": int(len(runs))}
