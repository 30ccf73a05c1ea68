"""The keyword spotter: a rotkws ONNX file, driven over an endless stream of audio.

    model = KeywordModel("kws12.onnx")                 # one per process, shared by every stream
    spotter = KeywordSpotter(model, threshold=0.7)     # one per stream
    res = spotter.process(chunk, 48_000)               # any dtype, channels, rate, length
    res.times, res.scores, res.detections              # (hops,), (hops, classes), [Detection]

numpy + onnxruntime + soxr; never torch. The file's metadata says everything: labels, sample
rate, state size, which input lengths the graph takes (see export/onnx.py).
"""
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort

from app.audio import StreamResampler, check_rate, to_mono_float32
from app.detection import (FLUSH_S, MIN_HOPS, REFRACTORY_S, SETTINGS, SMOOTHING_HOPS, THRESHOLD,
                           Detection, Detector)
from corpus.labels import NOT_KEYWORDS, OTHER, SILENCE, UNKNOWN   # noqa: F401  (the runtime's labels)

DEFAULT_MODEL = Path(__file__).resolve().parent / "models" / "kws12.onnx"
WAKE_MODEL = DEFAULT_MODEL.parent / "alexa.onnx"   # the bundled wake word (app/models/MODEL_CARD.md)
COMMAND_MODEL = DEFAULT_MODEL.parent / "commands.onnx"   # the bundled command stage after a wake word
HOP_SECONDS = 0.1                 # the spotter scores every 100 ms of audio
REQUIRED_METADATA = ("labels", "sample_rate", "input_multiple", "max_samples", "streaming",
                     "state_size")
ORT_THREADS = 1                   # measured (benchmarks/bench_runtime.py): a second thread costs
                                  # 2-3x the CPU per 100 ms hop, a job too small to split

__all__ = ["COMMAND_MODEL", "DEFAULT_MODEL", "Detection", "KeywordModel", "KeywordSpotter", "ModelError", "SpotResult"]


class ModelError(ValueError):
    """A file that is not a usable rotkws model: the message names it and says why."""


def session_options(threads: int = ORT_THREADS) -> ort.SessionOptions:
    """One thread, sequential, ORT's default full graph optimisation (the levels measured within
    noise of each other for this model: benchmarks/bench_runtime.py)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return options


IN_MEMORY = Path("<in-memory model>")   # KeywordModel.path of a model given as bytes


def open_session(path: Path, threads: int) -> ort.InferenceSession:
    if not path.is_file():
        hint = (" (the default model is not bundled yet: pass a model exported with `rotkws export`)"
                if path == DEFAULT_MODEL else "")
        raise ModelError(f"no model at {path}{hint}")
    try:
        return ort.InferenceSession(str(path), session_options(threads), providers=["CPUExecutionProvider"])
    except Exception as e:   # onnxruntime raises its own exception types for unreadable files
        raise ModelError(f"{path}: not a readable ONNX model ({type(e).__name__}: {e})") from None


def read_metadata(session: ort.InferenceSession, path: Path) -> dict:
    meta = session.get_modelmeta().custom_metadata_map
    missing = [k for k in REQUIRED_METADATA if k not in meta]
    if missing:
        raise ModelError(f"{path}: not a rotkws model: its metadata lacks {', '.join(missing)} "
                         f"(expected a file written by `rotkws export`)")
    try:
        return {"labels": tuple(json.loads(meta["labels"])), "sample_rate": int(meta["sample_rate"]),
                "input_multiple": int(meta["input_multiple"]), "max_samples": int(meta["max_samples"]),
                "streaming": json.loads(meta["streaming"]), "state_size": int(meta["state_size"]),
                "detection": json.loads(meta.get("detection", "{}"))} | (
            {"verifier": json.loads(meta["verifier"])} if "verifier" in meta else {})   # app/cascade.py
    except (ValueError, TypeError) as e:
        raise ModelError(f"{path}: unreadable rotkws metadata ({e})") from None


class KeywordModel:
    """An ONNX session and what its metadata says; thread-safe, shared by every stream.

    labels, keywords (labels minus _silence_/_unknown_), sample_rate (Hz), hop_samples (the
    spotter's step, HOP_SECONDS rounded to the graph's input multiple), streaming (False: a
    clip classifier, which the spotter runs on a sliding window of max_samples).
    """

    def __init__(self, path=None, *, threads: int = ORT_THREADS):
        """path: an ONNX file (None: the bundled default model), or a serialised model (bytes)."""
        if isinstance(path, bytes):                          # e.g. export measuring before it writes
            self.path = IN_MEMORY
            self.session = ort.InferenceSession(path, session_options(threads), providers=["CPUExecutionProvider"])
        else:
            self.path = Path(path) if path is not None else DEFAULT_MODEL
            self.session = open_session(self.path, threads)
        self.meta = read_metadata(self.session, self.path)
        self.labels: tuple[str, ...] = self.meta["labels"]
        self.keywords = tuple(k for k in self.labels if k not in NOT_KEYWORDS)
        self.sample_rate: int = self.meta["sample_rate"]
        self.input_multiple: int = self.meta["input_multiple"]
        self.max_samples: int = self.meta["max_samples"]
        self.streaming: bool = bool(self.meta["streaming"])
        self.state_size: int = self.meta["state_size"] if self.streaming else 0
        steps = max(1, round(HOP_SECONDS * self.sample_rate / self.input_multiple))
        self.hop_samples = min(steps * self.input_multiple, self.max_samples)
        self._check_graph()

    def _check_graph(self) -> None:
        inputs = {i.name: i.shape for i in self.session.get_inputs()}
        expected = {"audio", "state"} if self.streaming else {"audio"}
        if set(inputs) != expected or (self.streaming and inputs["state"][1] != self.state_size):
            raise ModelError(f"{self.path}: graph inputs {inputs} do not match its metadata "
                             f"(expected {sorted(expected)}, state size {self.state_size})")

    def __repr__(self) -> str:
        return (f"KeywordModel({str(self.path)!r}: {len(self.labels)} classes, "
                f"{'streaming' if self.streaming else 'clip'}, {self.sample_rate} Hz)")

    def initial_state(self, batch: int = 1) -> np.ndarray | None:
        return np.zeros((batch, self.state_size), np.float32) if self.streaming else None

    def run(self, audio: np.ndarray, state: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        """audio: (batch, samples) float32 @ sample_rate, samples a multiple of input_multiple and
        ≤ max_samples; state: (batch, state_size) or None → scores (batch, classes), state_out."""
        samples = np.shape(audio)[-1]
        if samples % self.input_multiple or not 0 < samples <= self.max_samples:
            # the graph does not check this itself: it would return wrong scores
            raise ValueError(f"expected a multiple of {self.input_multiple} samples, at most "
                             f"{self.max_samples}, got {samples}")
        feed = {"audio": np.ascontiguousarray(audio, np.float32)}
        if self.streaming:
            feed["state"] = state
        out = self.session.run(None, feed)
        return out[0], (out[1] if self.streaming else None)

    def clip_scores(self, audio: np.ndarray) -> np.ndarray:
        """Clips from silence: (samples,) → (classes,) or (batch, samples) → (batch, classes),
        float32 @ sample_rate. Zeros pad the end to the input multiple; a streaming model reads
        a long clip in pieces of max_samples, a clip model its first max_samples."""
        audio = np.asarray(audio, np.float32)
        batch = audio if audio.ndim == 2 else audio[None]
        padded = -(-max(batch.shape[1], 1) // self.input_multiple) * self.input_multiple
        batch = np.pad(batch, ((0, 0), (0, padded - batch.shape[1])))
        if not self.streaming:
            scores = self.run(batch[:, : self.max_samples], None)[0]
        else:
            state = self.initial_state(len(batch))
            for start in range(0, batch.shape[1], self.max_samples):
                scores, state = self.run(batch[:, start:start + self.max_samples], state)
        return scores if audio.ndim == 2 else scores[0]


@dataclass
class SpotResult:
    """What one `process` call heard: one row per hop completed during the call."""
    times: np.ndarray                      # (hops,) float seconds since reset, end of each hop
    scores: np.ndarray                     # (hops, classes) float32 probabilities
    detections: list[Detection] = field(default_factory=list)


class KeywordSpotter:
    """One stream's spotter: resampler, model state, hop buffer and detector.

    `process(chunk, sample_rate)` takes int16/int32/float32/float64 samples, (n,) or
    (n, channels), any n ≥ 0 and any rate; a bad chunk raises ValueError and changes nothing.
    Settings left None come from the model's metadata (`detection`), else app/detection.py.
    """

    def __init__(self, model, *, keywords=None, threshold: float | dict[str, float] | None = None,
                 smoothing: int | None = None, min_hops: int | None = None,
                 refractory_s: float | None = None, flush_s: float | None = None):
        """keywords: the ones to listen for (None: all the model's); the others never fire."""
        self.model = model if isinstance(model, KeywordModel) else KeywordModel(model)
        given = {"threshold": threshold, "smoothing": smoothing, "min_hops": min_hops,
                 "refractory_s": refractory_s, "flush_s": flush_s}
        self.settings = detection_settings(self.model, given)     # the threshold for every keyword
        self.flush_s = self.settings.pop("flush_s")
        self.listen(keywords)
        self._resampler = StreamResampler(self.model.sample_rate)
        self.reset()

    def listen(self, keywords=None) -> None:
        """Listen for `keywords` (None: all the model's) from now on, each at its threshold; the
        detector starts afresh (a run in progress is dropped), the model's state goes on."""
        chosen = listened(self.model, keywords)
        rule = self.settings | {"threshold": for_keywords(self.settings["threshold"], chosen)}
        self.detector = Detector(self.model.labels, chosen, **rule)
        self.keywords = chosen

    @property
    def threshold(self) -> float | dict[str, float]:
        return self.detector.threshold

    @threshold.setter
    def threshold(self, value: float | dict[str, float]) -> None:
        """One number for every keyword, or {keyword: number} naming at least those listened for
        (the others' numbers are kept for a later `listen`)."""
        self.detector.threshold = for_keywords(value, self.keywords)
        before = self.settings["threshold"]
        if isinstance(value, dict) and isinstance(before, dict):
            value = before | value
        self.settings["threshold"] = value

    @property
    def hop_s(self) -> float:
        return self.model.hop_samples / self.model.sample_rate

    def reset(self) -> None:
        """Start a new stream: silence before it, time 0 at its first sample."""
        self._resampler.reset()
        self.detector.reset()
        self.forget()
        self._pending = np.zeros(0, np.float32)            # samples not yet in a hop
        self._samples_done = 0                              # samples scored since reset

    def forget(self) -> None:
        """The model's memory back to silence: the zero state (clip models: a window of zeros);
        the time, the detector and the audio not yet scored go on."""
        self._state = self.model.initial_state()
        self._window = np.zeros(self.model.max_samples, np.float32)   # clip models: the last second

    def process(self, chunk: np.ndarray, sample_rate: int) -> SpotResult:
        """Feed a chunk; score every hop it completes; return those hops and any detections."""
        mono = to_mono_float32(chunk)
        rate = check_rate(sample_rate)
        return self._consume(self._resampler(mono, rate))

    def flush(self) -> SpotResult:
        """End of the stream (a file's end): score what the resampler and the hop buffer still
        hold, padded with zeros to the graph's input multiple; then `flush_s` of silence, whose
        rows are not returned but whose detections are, at the time the input ended (a keyword
        said at the very end is still heard). Call reset() before another stream."""
        result = self._consume(self._resampler.flush())
        rest = len(self._pending)
        if rest:
            padded = -(-rest // self.model.input_multiple) * self.model.input_multiple
            result = merge(result, self._score_hops(np.pad(self._pending, (0, padded - rest)), padded, rest))
            self._pending = self._pending[:0]
        end_s = self._samples_done / self.model.sample_rate
        hops = int(np.floor(self.flush_s / self.hop_s + 0.5))       # as JavaScript's Math.round
        tail = self._score_hops(np.zeros(hops * self.model.hop_samples, np.float32),
                                self.model.hop_samples, self.model.hop_samples)
        self._samples_done -= hops * self.model.hop_samples     # the silence was not input
        heard = [Detection(d.keyword, end_s, d.score) for d in tail.detections]
        return SpotResult(result.times, result.scores, result.detections + heard)

    def _consume(self, audio: np.ndarray) -> SpotResult:
        self._pending = np.concatenate([self._pending, audio]) if self._pending.size else audio
        hop = self.model.hop_samples
        n = len(self._pending) // hop * hop
        result = self._score_hops(self._pending[:n], hop, hop)
        self._pending = self._pending[n:].copy()
        return self._detect(audio, result)

    def _detect(self, audio: np.ndarray, result: SpotResult) -> SpotResult:
        """The detections of the hops `audio` (the stream's next samples, at the model's rate)
        completed: the detector's as they are; a cascade confirms them first (app/keyword_cascade.py)."""
        return result

    def _score_hops(self, audio: np.ndarray, hop: int, advance: int) -> SpotResult:
        """Score `audio` in hops of `hop` samples, each advancing time by `advance` samples."""
        times, rows = [], []
        for start in range(0, len(audio), hop):
            rows.append(self._score_one(audio[start:start + hop]))
            self._samples_done += advance
            times.append(self._samples_done / self.model.sample_rate)
        scores = np.array(rows, np.float32).reshape(len(rows), len(self.model.labels))
        times = np.array(times, np.float64)
        return SpotResult(times, scores, self.detector.update(times, scores))

    def _score_one(self, hop: np.ndarray) -> np.ndarray:
        if self.model.streaming:
            scores, self._state = self.model.run(hop[None], self._state)
            return scores[0]
        self._window = np.concatenate([self._window[len(hop):], hop])
        return self.model.run(self._window[None], None)[0][0]


def listened(model: KeywordModel, keywords) -> tuple[str, ...]:
    """The keywords a spotter listens for: None → all the model's; else a name or names among
    them (in the model's order)."""
    if keywords is None:
        return model.keywords
    chosen = [keywords] if isinstance(keywords, str) else list(keywords)
    if not chosen or len(set(chosen)) != len(chosen) or any(k not in model.keywords for k in chosen):
        raise ValueError(f"expected one or more of the model's keywords {list(model.keywords)}, each once, "
                         f"got {chosen}")
    return tuple(k for k in model.keywords if k in chosen)


def for_keywords(threshold: float | dict[str, float], keywords) -> float | dict[str, float]:
    """A threshold for the detector of `keywords`: one number as it is, {keyword: number} with
    only theirs."""
    return {k: v for k, v in threshold.items() if k in keywords} if isinstance(threshold, dict) else threshold


def detection_settings(model: KeywordModel, given: dict) -> dict:
    """The detection rule's settings for `model`: those `given` (not None), else the model's
    metadata (`detection`: its calibrated operating point), else app/detection.py's defaults."""
    settings = {"threshold": THRESHOLD, "smoothing": SMOOTHING_HOPS, "min_hops": MIN_HOPS,
                "refractory_s": REFRACTORY_S, "flush_s": FLUSH_S}
    settings |= {k: v for k, v in model.meta["detection"].items() if k in SETTINGS}
    settings |= {k: v for k, v in given.items() if v is not None}
    if not (isinstance(settings["flush_s"], (int, float)) and settings["flush_s"] >= 0):
        raise ValueError(f"expected flush_s ≥ 0 seconds, got {settings['flush_s']!r}")
    return settings


def merge(a: SpotResult, b: SpotResult) -> SpotResult:
    return SpotResult(np.concatenate([a.times, b.times]), np.concatenate([a.scores, b.scores]),
                      a.detections + b.detections)
