"""From score tracks to detections: plain numpy, no model.

Every hop t (one row of class probabilities):

1. smooth: the mean of the last `smoothing` rows (fewer at the start of a stream);
2. the best keyword of the smoothed row is a candidate when its score ≥ its `threshold` (one
   number for every keyword, or one per keyword: a model's calibrated operating point);
3. a run of `min_hops` consecutive hops with the same candidate fires one detection, at the
   hop that completes the run, with that hop's smoothed score; a longer run fires nothing more;
4. refractory: no detection of any keyword within `refractory_s` seconds after one (one spoken
   word, one detection, even when two confusable keywords both pass the threshold).

`Detector` is the streaming form (state carried between calls); `detect` the offline one. The
same rows give the same detections however they are split between calls.
"""
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

# Defaults, for a model without its own operating point. A model carries one in its metadata
# (`detection`): `rotkws calibrate` chooses a threshold per keyword on validation streams for a
# false-accept budget; BENCHMARKS.md (bench_stream) measures what it buys on testing streams.
THRESHOLD = 0.5        # smoothed keyword probability that counts as heard
SMOOTHING_HOPS = 3     # moving-average window: 3 hops = 300 ms at the 100 ms hop
MIN_HOPS = 2           # consecutive hops above the threshold before a detection
REFRACTORY_S = 1.0     # after a detection, none for this long: about one spoken word
FLUSH_S = 1.0          # at the end of a stream, this much silence still goes through the model
                       # and the detector: a keyword at the very end of a file is still heard
SETTINGS = ("threshold", "smoothing", "min_hops", "refractory_s", "flush_s")   # metadata keys


@dataclass(frozen=True)
class Detection:
    keyword: str
    time_s: float      # end of the hop that fired, seconds since the stream (re)started
    score: float       # the keyword's smoothed probability there


def check_threshold(threshold, keywords) -> dict[str, float]:
    """A threshold (one number, or {keyword: number} naming every keyword) → {keyword: number}."""
    if isinstance(threshold, Mapping):
        if set(threshold) != set(keywords):
            raise ValueError(f"expected a threshold for each keyword {list(keywords)}, got {dict(threshold)}")
        out = {k: threshold[k] for k in keywords}
    else:
        out = dict.fromkeys(keywords, threshold)
    for k, value in out.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise ValueError(f"expected a threshold in (0, 1], got {value!r}"
                             + (f" for {k!r}" if isinstance(threshold, Mapping) else ""))
    return {k: float(v) for k, v in out.items()}


def check_settings(smoothing, min_hops, refractory_s) -> None:
    for name, value in (("smoothing", smoothing), ("min_hops", min_hops)):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"expected {name} as a whole number of hops ≥ 1, got {value!r}")
    if not refractory_s >= 0:
        raise ValueError(f"expected refractory_s ≥ 0 seconds, got {refractory_s!r}")


def moving_average(scores: np.ndarray, window: int, history: np.ndarray) -> np.ndarray:
    """Causal mean over `window` rows of (T, C) scores, preceded by `history` (< window rows,
    C) of the same stream; row t averages the rows it has, at most `window`. Each mean sums the
    same rows in the same order however the stream was split, so the result is bit-identical."""
    if len(scores) == 0:
        return np.zeros((0, scores.shape[1]))
    lead = np.zeros((window - 1 - len(history), scores.shape[1]))
    rows = np.concatenate([lead, history, scores]).astype(np.float64)
    sums = np.lib.stride_tricks.sliding_window_view(rows, window, axis=0).sum(-1)   # (T, C)
    counts = np.minimum(window, len(history) + np.arange(1, len(scores) + 1))
    return sums / counts[:, None]


class Detector:
    """Streaming detection over (times, scores) rows; see the module docstring for the rule.

    labels:   the class names, one per score column
    keywords: the labels that can fire (the others, _silence_ and _unknown_, never do)
    """

    def __init__(self, labels, keywords, *, threshold: float | Mapping[str, float] = THRESHOLD,
                 smoothing: int = SMOOTHING_HOPS, min_hops: int = MIN_HOPS,
                 refractory_s: float = REFRACTORY_S):
        check_settings(smoothing, min_hops, refractory_s)
        self.labels = tuple(labels)
        missing = [k for k in keywords if k not in self.labels]
        if missing or not keywords:
            raise ValueError(f"expected keywords among the labels {list(self.labels)}, got {list(keywords)}")
        self.keywords = tuple(keywords)
        self._columns = np.array([self.labels.index(k) for k in self.keywords])
        self.threshold = threshold
        self.smoothing, self.min_hops, self.refractory_s = int(smoothing), int(min_hops), float(refractory_s)
        self.reset()

    @property
    def threshold(self) -> float | dict[str, float]:
        """One number when every keyword has the same threshold, else {keyword: threshold}."""
        values = set(self._thresholds.tolist())
        return values.pop() if len(values) == 1 else dict(zip(self.keywords, self._thresholds.tolist()))

    @threshold.setter
    def threshold(self, value: float | Mapping[str, float]) -> None:
        self._thresholds = np.array(list(check_threshold(value, self.keywords).values()))

    def reset(self) -> None:
        self._history = np.zeros((0, len(self.labels)))
        self._candidate, self._run = -1, 0            # keyword index of the current run, its length
        self._last_fired = -np.inf                     # time of the last detection

    def update(self, times: np.ndarray, scores: np.ndarray) -> list[Detection]:
        """times: (T,) seconds, increasing; scores: (T, classes) → detections among these rows."""
        times, scores = np.asarray(times, np.float64), np.asarray(scores, np.float64)
        if scores.ndim != 2 or scores.shape != (len(times), len(self.labels)):
            raise ValueError(f"expected scores of shape ({len(times)}, {len(self.labels)}), "
                             f"got {scores.shape}")
        if len(times) == 0:
            return []
        smooth = moving_average(scores, self.smoothing, self._history)[:, self._columns]
        rows = np.concatenate([self._history, scores])
        self._history = rows[max(0, len(rows) - (self.smoothing - 1)):]     # what the next row needs
        out = []
        for t, row in zip(times, smooth):
            fired = self._step(float(t), row)
            if fired is not None:
                out.append(fired)
        return out

    def _step(self, t: float, row: np.ndarray) -> Detection | None:
        best = int(np.argmax(row))
        if row[best] < self._thresholds[best]:
            self._candidate, self._run = -1, 0
            return None
        self._run = self._run + 1 if best == self._candidate else 1
        self._candidate = best
        if self._run != self.min_hops or t - self._last_fired < self.refractory_s:
            return None
        self._last_fired = t
        return Detection(self.keywords[best], t, float(row[best]))


def detect(times: np.ndarray, scores: np.ndarray, labels, keywords, **settings) -> list[Detection]:
    """Offline: the detections of a whole score track, as a fresh Detector would give them."""
    return Detector(labels, keywords, **settings).update(times, scores)
