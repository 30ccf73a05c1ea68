"""One visitor of the demo page: their own spotter, score history, detection log and timings.

Plain Python over the runtime's results, no Gradio, so the page's logic is tested without a
server. The page keeps one `DemoSession` per browser session (in a `gr.State`); every session
shares one `KeywordModel` and owns its `KeywordSpotter` (model state, resampler, detector).
A file goes through `feed` in browser-sized pieces: one streaming path for microphone and file.
"""
import datetime
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.audio import to_mono_float32
from app.spotter import KeywordModel, KeywordSpotter, detection_settings
from corpus.clips import ClipError, read_audio

GAIN_RANGE_DB = (-12.0, 24.0)  # the sensitivity control: input gain in dB, 0 = the audio as sent
PLOT_WINDOW_S = 10.0         # seconds of score history on the scrolling plot
PLOT_RATE_HZ = 5             # plot points per second (the max of the hops in each bin)
PLOT_FLOOR = 0.1             # below this all along the window, a keyword's line is sent flat
LOG_LINES = 100              # detection log lines kept, newest first
TIMINGS_KEPT = 200           # pieces whose callback time is kept for the latency line
FILE_PIECE_S = 0.5           # a file is fed in pieces of this length, as a browser would send it
MAX_FILE_S = 600.0           # longest file accepted (10 min)


@dataclass(frozen=True)
class Timing:
    audio_s: float     # seconds of audio in the piece
    rate: int          # its sample rate, Hz, as sent
    compute_s: float   # seconds from the piece's arrival in `feed` to its scores


class DemoSession:
    """A visitor's spotter and what the page shows of it.

    `feed(chunk, sample_rate)` takes a piece as the browser sends it (int16 or float, (n,) or
    (n, channels), any rate) and updates the scores, the plot history and the log.
    """

    def __init__(self, model: KeywordModel, threshold: float | None = None):
        """threshold: None → the model's operating point (its metadata, else app/detection.py)."""
        self.model = model
        self.lock = threading.RLock()     # a file upload and the microphone may arrive at once
        self.spotter = KeywordSpotter(model, threshold=threshold)
        self.operating_point = detection_settings(model, {})["threshold"]   # maybe per keyword
        self.gain_db = 0.0
        self.log: deque[str] = deque(maxlen=LOG_LINES)
        self.timings: deque[Timing] = deque(maxlen=TIMINGS_KEPT)
        self.clear()

    def clear(self) -> None:
        """Forget the audio heard so far (model state, resampler, detector) and the plot."""
        with self.lock:
            self.spotter.reset()
            self.ended = False                                         # a file's end was flushed
            self.times = np.zeros(0)                                   # (hops,) s since reset
            self.scores = np.zeros((0, len(self.model.labels)))        # (hops, classes)
            self.detections: list = []

    def configure(self, threshold: float | None = None, gain_db: float | None = None, keywords=None) -> None:
        """threshold: one for every keyword; None: the model's operating point. keywords: the ones
        to listen for (None: as before); none of the model's → ValueError, nothing changed."""
        with self.lock:
            if keywords is not None and set(keywords) != set(self.spotter.keywords):
                self.spotter.listen(keywords)
            self.spotter.threshold = self.operating_point if threshold is None else float(threshold)
        if gain_db is not None:
            self.gain_db = float(np.clip(gain_db, *GAIN_RANGE_DB))

    def feed(self, chunk: np.ndarray, sample_rate: int) -> list:
        """Score one piece of audio; returns the detections it brought."""
        with self.lock:
            if self.ended:                       # after a file, the microphone starts afresh
                self.clear()
            start = time.perf_counter()
            res = self.spotter.process(self._gained(chunk), sample_rate)
            self.timings.append(Timing(len(chunk) / sample_rate, sample_rate, time.perf_counter() - start))
            return self._record(res)

    def finish(self) -> list:
        """End of a stream (a file's end): score what the spotter still holds."""
        with self.lock:
            found = self._record(self.spotter.flush())
            self.ended = True
            return found

    def _record(self, res) -> list:
        self._remember(res.times, res.scores)
        for d in res.detections:
            self.detections.append(d)
            self.log.appendleft(log_line(d))
        return list(res.detections)

    def feed_file(self, path: str | Path, piece_s: float = FILE_PIECE_S) -> list:
        """Run a whole file through `feed` from a fresh state; returns its detections."""
        audio, rate = read_upload(path)
        step = max(1, int(piece_s * rate))
        with self.lock:
            self.clear()
            self.log.appendleft(f"── {Path(path).name}: {len(audio) / rate:.1f} s at {rate} Hz ──")
            found = [d for i in range(0, len(audio), step) for d in self.feed(audio[i:i + step], rate)]
            return found + self.finish()

    def _gained(self, chunk: np.ndarray) -> np.ndarray:
        if self.gain_db == 0.0:
            return chunk
        return np.clip(to_mono_float32(chunk) * np.float32(10 ** (self.gain_db / 20)), -1.0, 1.0)

    def _remember(self, times: np.ndarray, scores: np.ndarray) -> None:
        if not len(times):
            return
        self.times = np.concatenate([self.times, times])
        self.scores = np.concatenate([self.scores, scores])
        keep = self.times > self.times[-1] - PLOT_WINDOW_S
        self.times, self.scores = self.times[keep], self.scores[keep]

    # what the page shows

    def current_scores(self) -> dict[str, float]:
        """Class → probability at the latest hop (empty before any audio)."""
        if not len(self.scores):
            return {}
        return {label: float(p) for label, p in zip(self.model.labels, self.scores[-1])}

    def plot_points(self) -> dict[str, np.ndarray]:
        """Every keyword's score over the last PLOT_WINDOW_S, as columns time / score / keyword.

        Always every keyword: the page's plot fixes its colours to the keywords of its first data,
        so a keyword that joined later would be drawn in no colour (Gradio 6.31). A keyword that
        stayed below PLOT_FLOOR is sent as a flat line at its highest score (two points), which
        keeps what each piece sends small."""
        times, peaks = binned_max(self.times, self.scores, PLOT_RATE_HZ)
        parts = [self._track(k, times, peaks[:, self.model.labels.index(k)]) for k in self.model.keywords]
        return {name: np.concatenate([part[i] for part in parts]) for i, name in
                enumerate(("time", "score", "keyword"))}

    @staticmethod
    def _track(keyword: str, times: np.ndarray, scores: np.ndarray) -> tuple:
        if len(times) > 2 and scores.max() < PLOT_FLOOR:
            times, scores = times[[0, -1]], np.full(2, scores.max())
        return times, scores, np.full(len(times), keyword)

    def log_text(self) -> str:
        return "\n".join(self.log)

    def latency_text(self) -> str:
        if not self.timings:
            return "Waiting for audio."
        last = self.timings[-1]
        compute = np.array([t.compute_s for t in self.timings])
        audio = sum(t.audio_s for t in self.timings)
        return (f"Last piece: {last.audio_s * 1000:.0f} ms at {last.rate / 1000:g} kHz, scored in "
                f"{last.compute_s * 1000:.1f} ms. Median {np.median(compute) * 1000:.1f} ms, "
                f"max {compute.max() * 1000:.1f} ms over {len(compute)} pieces "
                f"({audio / max(compute.sum(), 1e-9):.0f}× real time).")


def log_line(d) -> str:
    """`14:03:05  t=   3.21 s  yes      0.93`: wall clock, stream time, keyword, score."""
    wall = datetime.datetime.now().strftime("%H:%M:%S")
    return f"{wall}  t={d.time_s:7.2f} s  {d.keyword:<8} {d.score:.2f}"


def binned_max(times: np.ndarray, scores: np.ndarray, rate_hz: float) -> tuple[np.ndarray, np.ndarray]:
    """The max of the scores in each 1/rate_hz bin: (bins,) bin ends in s, (bins, classes)."""
    if not len(times):
        return np.zeros(0), np.zeros((0, scores.shape[1]))
    bins = np.floor(times * rate_hz).astype(np.int64)          # sorted: times only grow
    starts = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]])
    return (bins[starts] + 1) / rate_hz, np.maximum.reduceat(scores, starts, axis=0)


def read_upload(path: str | Path) -> tuple[np.ndarray, int]:
    """A file as (samples,) float32 mono and its rate; ValueError if corpus/clips.py refuses it
    (a folder, missing, not audio, truncated, empty, non-finite, far out of range, or longer
    than MAX_FILE_S), naming the file but no server path."""
    path = Path(path)
    try:
        return read_audio(path, max_seconds=MAX_FILE_S)
    except ClipError as e:
        name = path.name                                   # no server paths on the page
        raise ValueError(str(e).replace(f"'{path}'", name).replace(str(path), name)) from None
