"""One visitor of the demo page: their own spotter, score history, detection log and timings.

Plain Python over the runtime's results, no Gradio, so the page's logic is tested without a
server. The page keeps one `DemoSession` per browser session (in a `gr.State`); every session
shares one `KeywordModel` and owns its `KeywordSpotter` (model state, resampler, detector); a
cascade wake file (a `CascadeModel`) shares its head too, and each owns a `CascadeKeywordSpotter`.
On a two-stage page (`rotkws demo --wake`) every session shares one `Assistant` (the wake
model, the command model and, for a cascade wake file, its head on the speech embedding) and
owns its `WakeCommandSpotter` (a `CascadeWakeCommandSpotter` for a cascade): a `WakeSession`.
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
from app.cascade import Verifier
from app.keyword_cascade import CascadeKeywordSpotter, CascadeModel
from app.spotter import Detection, KeywordModel, KeywordSpotter, detection_settings, listened
from app.twostage import COMMAND_THRESHOLD, WakeCommandSpotter, WakeEvent
from app.twostage_cascade import CascadeWakeCommandSpotter
from corpus.clips import ClipError, read_audio

GAIN_RANGE_DB = (-12.0, 24.0)  # the sensitivity control: input gain in dB, 0 = the audio as sent
PLOT_WINDOW_S = 10.0         # seconds of score history on the scrolling plot
PLOT_RATE_HZ = 5             # plot points per second (the max of the hops in each bin)
PLOT_FLOOR = 0.1             # below this all along the window, a keyword's line is sent flat
WINDOW_SERIES = "command window"   # the plot's trace at WINDOW_MARK while a command window is open,
WINDOW_MARK = COMMAND_THRESHOLD    # … drawn at the level a command's score must reach in it
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
        self.spotter = self.new_spotter(threshold)
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

    def new_spotter(self, threshold: float | None) -> KeywordSpotter:
        """The visitor's own spotter; on a cascade wake file (`--model W.onnx` with a verifier), its
        own cascade state on the shared head (app/keyword_cascade.py)."""
        if isinstance(self.model, CascadeModel):
            return CascadeKeywordSpotter(self.model, threshold=threshold)
        return KeywordSpotter(self.model, threshold=threshold)

    @property
    def listener(self) -> KeywordSpotter:
        """The spotter whose keywords the page's listen control chooses."""
        return self.spotter

    def configure(self, threshold: float | None = None, gain_db: float | None = None, keywords=None) -> None:
        """threshold: one for every keyword; None: the model's operating point. keywords: the ones
        to listen for (None: as before); none of the model's → ValueError, nothing changed."""
        with self.lock:
            if keywords is not None and set(keywords) != set(self.listener.keywords):
                self.listener.listen(keywords)
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
        self._remember(res)
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

    def _remember(self, res) -> None:
        if not len(res.times):
            return
        self.times = np.concatenate([self.times, res.times])
        self.scores = np.concatenate([self.scores, res.scores])
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
        return columns([self._track(k, times, peaks[:, self.model.labels.index(k)]) for k in self.model.keywords])

    @staticmethod
    def _track(keyword: str, times: np.ndarray, scores: np.ndarray) -> tuple:
        """A series of the plot: NaN where nothing was scored (the page breaks the line there)."""
        if len(times) > 2 and (np.isnan(scores).all() or scores.max() < PLOT_FLOOR):
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


@dataclass(frozen=True)
class Assistant:
    """What a two-stage page runs (`rotkws demo --wake`), shared by every visitor: the wake
    model, the command model listening in the window each wake word opens, the wake words
    listened for and, for a cascade wake file, its verifier (the head that confirms the wake
    word: app/twostage_cascade.py). A pair that cannot run together (a wake keyword the model
    lacks, rates or hops that differ) is a ValueError that says so, at start-up."""
    wake: KeywordModel
    commands: KeywordModel
    wake_keywords: tuple[str, ...] | None = None     # None: all the wake model's keywords
    verifier: Verifier | None = None                 # verifier_of(wake): None, the wake file alone

    def __post_init__(self):
        self.spotter()

    @property
    def wake_words(self) -> tuple[str, ...]:
        return listened(self.wake, self.wake_keywords)

    @property
    def operating_point(self) -> float | dict[str, float]:
        """The wake word's threshold when the page's slider is left alone: a cascade's `propose`,
        else the wake model's own (its metadata, else app/detection.py's)."""
        return self.verifier.propose if self.verifier else detection_settings(self.wake, {})["threshold"]

    def spotter(self, threshold: float | None = None) -> WakeCommandSpotter:
        """A visitor's own spotter; threshold: the wake word's (None: the operating point)."""
        if self.verifier is not None:
            return CascadeWakeCommandSpotter(self.wake, self.commands, self.verifier, keywords=self.wake_keywords,
                                             threshold=threshold)
        return WakeCommandSpotter(self.wake, self.commands, keywords=self.wake_keywords, threshold=threshold)


class WakeSession(DemoSession):
    """A visitor of the two-stage page. `self.model` and the threshold are the wake word's, the
    listen control chooses the commands; the plot has the wake words' scores all along, the
    commands' while a window is open (NaN elsewhere) and the window itself (WINDOW_SERIES);
    the log has each wake word and then the command heard after it, or "no command"."""

    def __init__(self, assistant: Assistant, threshold: float | None = None):
        self.assistant = assistant
        super().__init__(assistant.wake, threshold)
        self.operating_point = assistant.operating_point

    def new_spotter(self, threshold: float | None) -> WakeCommandSpotter:
        return self.assistant.spotter(threshold)

    @property
    def listener(self) -> KeywordSpotter:
        return self.spotter.commands

    def clear(self) -> None:
        with self.lock:
            super().clear()
            self.command_scores = np.zeros((0, len(self.assistant.commands.labels)))   # (hops, classes), NaN: not run
            self.events: list[WakeEvent] = []

    def _record(self, res) -> list:
        """The wake words and the closed windows, logged in the order they happened."""
        self._remember(res)
        self.detections += res.detections
        self.events += res.events
        lines = [(d.time_s, wake_line(d, self.spotter.window_s)) for d in res.detections]
        lines += [(self._closed_s(e), event_line(e, self._closed_s(e))) for e in res.events]
        for _, line in sorted(lines, key=lambda tl: tl[0]):   # stable: a wake word before its window's end
            self.log.appendleft(line)
        return list(res.detections)

    def _closed_s(self, e: WakeEvent) -> float:
        """When e's window closed: at its command, else after its last hop or at the input's end."""
        if e.command is not None:
            return e.command_time_s
        end = e.time_s + self.spotter.window_hops * self.spotter.hop_s
        return min(end, self.times[-1]) if len(self.times) else end

    def _remember(self, res) -> None:
        super()._remember(res)
        if len(res.times):                                   # the rows of the hops kept
            rows = np.concatenate([self.command_scores, res.command_scores])
            self.command_scores = rows[len(rows) - len(self.times):]

    def current_scores(self) -> dict[str, float]:
        """The command model's classes at the latest hop when it ran then, else the wake model's."""
        if len(self.command_scores) and not np.isnan(self.command_scores[-1]).any():
            return {label: float(p) for label, p in zip(self.assistant.commands.labels, self.command_scores[-1])}
        return super().current_scores()

    def plot_points(self) -> dict[str, np.ndarray]:
        """The series of `plot_series`, every one always (see DemoSession.plot_points)."""
        times, wake = binned_max(self.times, self.scores, PLOT_RATE_HZ)
        _, heard = binned_max(self.times, self.command_scores, PLOT_RATE_HZ)
        window = np.where(np.isnan(heard).all(axis=1), np.nan, WINDOW_MARK)   # the command model ran
        labels = self.assistant.commands.labels
        parts = [self._track(wake_series(k), times, wake[:, self.model.labels.index(k)])
                 for k in self.assistant.wake_words]
        parts += [self._track(k, times, heard[:, labels.index(k)]) for k in self.assistant.commands.keywords]
        return columns(parts + [self._track(WINDOW_SERIES, times, window)])


def new_session(runs: KeywordModel | Assistant, threshold: float | None = None) -> DemoSession:
    """A new visitor's session on what the page runs: one model, or a wake word and its commands."""
    return WakeSession(runs, threshold) if isinstance(runs, Assistant) else DemoSession(runs, threshold)


def plot_series(runs: KeywordModel | Assistant) -> list[str]:
    """The plot's series, in the order its colours are given: the keywords; on a two-stage page
    the wake words, the commands and the command window."""
    if not isinstance(runs, Assistant):
        return list(runs.keywords)
    return [wake_series(k) for k in runs.wake_words] + list(runs.commands.keywords) + [WINDOW_SERIES]


def wake_series(keyword: str) -> str:
    """A wake word's series on the plot, apart from a command of the same name."""
    return f"{keyword} (wake)"


def columns(tracks: list[tuple]) -> dict[str, np.ndarray]:
    """(times, scores, names) per series → the plot's columns time / score / keyword."""
    return {name: np.concatenate([t[i] for t in tracks]) for i, name in enumerate(("time", "score", "keyword"))}


def stamp(time_s: float) -> str:
    """`14:03:05  t=   3.21 s`: wall clock, stream time."""
    return f"{datetime.datetime.now().strftime('%H:%M:%S')}  t={time_s:7.2f} s"


def log_line(d) -> str:
    """`14:03:05  t=   3.21 s  yes      0.93`: wall clock, stream time, keyword, score."""
    return f"{stamp(d.time_s)}  {d.keyword:<8} {d.score:.2f}"


def wake_line(d: Detection, window_s: float) -> str:
    """`14:03:05  t=   1.21 s  alexa    0.97  wake word: listening 3 s for a command`."""
    return f"{log_line(d)}  wake word: listening {window_s:g} s for a command"


def event_line(e: WakeEvent, closed_s: float) -> str:
    """`14:03:06  t=   2.31 s  left     0.88  command after alexa`, or, when the window closed
    with none, `14:03:08  t=   4.21 s  no command after alexa`."""
    if e.command is None:
        return f"{stamp(closed_s)}  no command after {e.wake}"
    return f"{log_line(Detection(e.command, e.command_time_s, e.command_score))}  command after {e.wake}"


def binned_max(times: np.ndarray, scores: np.ndarray, rate_hz: float) -> tuple[np.ndarray, np.ndarray]:
    """The max of the scores in each 1/rate_hz bin: (bins,) bin ends in s, (bins, classes);
    NaN scores (hops a model did not run) count only where the whole bin is NaN."""
    if not len(times):
        return np.zeros(0), np.zeros((0, scores.shape[1]))
    bins = np.floor(times * rate_hz).astype(np.int64)          # sorted: times only grow
    starts = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]])
    return (bins[starts] + 1) / rate_hz, np.fmax.reduceat(scores, starts, axis=0)


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
