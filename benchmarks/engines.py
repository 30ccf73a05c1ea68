"""The engines the wake-word bench (benchmarks/wakeword.py) runs on one long stream, each fed as
a microphone feeds it, its state carried throughout, on one thread: rotkws models through the
project's runtime, and the peers a user would install instead, their weights inside their wheels
(`pip install -e ".[peers]"`):

- openWakeWord (`pyopen-wakeword`): its `alexa` model on its melspectrogram and embedding
  models, one probability per 80 ms; a detection when it passes the threshold (its default 0.5).
- microWakeWord (`pymicro-wakeword`): its `alexa` model; its own rule is the mean of its last
  `sliding_window_size` probabilities above `probability_cutoff` (0.9, from the model's JSON).
- PocketSphinx (`pocketsphinx`): keyphrase search from text with its bundled US English model,
  any phrase whose words its dictionary knows. Its threshold is inside the search, so each
  threshold of its sweep is a pass over the stream (KWS_THRESHOLDS: three, at 25 ms of CPU per
  second of audio each); the Run's thresholds are log10 of kws_threshold (ascending: stricter),
  its default 1e-30 → −30. Its CPU figure is one pass's.

Threads: rotkws runs one onnxruntime thread (app.spotter.ORT_THREADS). The two TFLite peers
create their interpreters with no options, i.e. TFLite's default thread count: openWakeWord then
started 8 threads and spent 52 ms of CPU per second of audio against 31 ms of wall time on a
2-core machine (microWakeWord's int8 model started none); each of their interpreters is rebuilt
here with one thread (`one_thread`: openWakeWord 33 ms of CPU and of wall, its probabilities the
same within 4e-6). PocketSphinx runs on one thread.

Every engine's score track (rotkws: the runtime's own rule) is turned into detections at each
threshold of a sweep with the same 1 s refractory time (app.detection.REFRACTORY_S), so one
spoken phrase is one detection whatever the engine.
"""
import ctypes
import importlib
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.detection import REFRACTORY_S, THRESHOLD
from app.spotter import KeywordModel
from app.embedding import HOP as HEAD_HOP
from app.sweep import FEED_SECONDS, THRESHOLDS, model_rule, score_track, sweep_detections
from app.wakehead import HEAD_THRESHOLDS, HeadModel, is_head
from corpus.rate import SAMPLE_RATE

CHUNK = 1280                  # samples per call for the peers: 80 ms, as their own microphone loops read
PEERS = ("openwakeword", "microwakeword", "pocketsphinx")
PEER_MODULES = {"openwakeword": "pyopen_wakeword", "microwakeword": "pymicro_wakeword",
                "pocketsphinx": "pocketsphinx"}
BUILTIN = ("alexa",)          # the bench phrases openWakeWord and microWakeWord ship a model for
PROB_THRESHOLDS = np.unique(np.round(np.concatenate([np.arange(0.05, 0.951, 0.05),
                                                     1 - 10.0 ** -np.arange(1.4, 4.05, 0.2)]), 5))
KWS_THRESHOLDS = (1e-30, 1e-20, 1e-10)   # PocketSphinx's sweep: its default 1e-30 and stricter
KWS_DEFAULT = 1e-30
HEAD_ENGINE = "rotkws ears"   # a head file alone (the embedding over the whole stream): BENCHMARKS.md's rows only


@dataclass
class Run:
    engine: str                          # "rotkws (alexa.onnx)", "openWakeWord", …
    phrase: str                          # what it listens for
    thresholds: np.ndarray               # the sweep, ascending: stricter
    default: float                       # the engine's own default, one of `thresholds`
    detections: dict                     # threshold → (n,) detection times in seconds, ascending
    cpu_s: float                         # process CPU time spent on the audio
    audio_s: float                       # seconds of audio heard


def debounce(times: np.ndarray, scores: np.ndarray, threshold: float,
             refractory_s: float = REFRACTORY_S) -> np.ndarray:
    """The times at which `scores` pass `threshold` (strictly, as the peers' own loops test
    `prob > threshold`), none within `refractory_s` after the last."""
    out, last = [], -np.inf
    for i in np.flatnonzero(np.asarray(scores) > threshold):
        if times[i] - last >= refractory_s:
            out.append(float(times[i]))
            last = times[i]
    return np.array(out)


def int16_bytes(audio: np.ndarray) -> bytes:
    return (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()


def chunks(audio: np.ndarray, size: int = CHUNK):
    """(end sample, int16 bytes) of consecutive chunks."""
    for i in range(0, len(audio), size):
        yield min(i + size, len(audio)), int16_bytes(audio[i:i + size])


def unavailable(name: str) -> str | None:
    """Why a peer cannot run here (its package does not import), or None."""
    try:
        importlib.import_module(PEER_MODULES[name])
    except Exception as e:                                  # noqa: BLE001  (any failure is the reason)
        return f"`{PEER_MODULES[name]}` does not import ({type(e).__name__}: {e}); pip install -e \".[peers]\""
    return None


class Rotkws:
    def __init__(self, path: Path):
        self.path = Path(path)
        model = KeywordModel(self.path)
        if len(model.keywords) != 1:
            raise ValueError(f"{path}: expected a wake-word model (one keyword), got {list(model.keywords)}")
        self.phrase = model.keywords[0]
        self.engine = f"rotkws (`{self.path.name}`)"

    def run(self, audio: np.ndarray) -> Run:
        self.model = KeywordModel(self.path)              # a session of the process that runs it
        own = float(self.model.meta.get("detection", {}).get("threshold", THRESHOLD))
        thresholds = np.unique(np.append(THRESHOLDS, own))
        started = time.process_time()
        times, scores = score_track(self.model, audio)
        cpu = time.process_time() - started
        sweep = sweep_detections(times, scores, self.model.labels, self.model.keywords, thresholds,
                                 **model_rule(self.model))
        return Run(self.engine, self.phrase, thresholds, own,
                   {th: np.array([d.time_s for d in dets]) for th, dets in sweep.items()},
                   cpu, len(audio) / SAMPLE_RATE)


class Heads:
    """Head files (app/wakehead.py) on one pass of the speech embedding over the stream: a Run per
    head, each one's CPU the pass's plus its own head's (what one such file costs alone)."""

    def __init__(self, paths):
        self.paths = [Path(p) for p in paths]

    def run(self, audio: np.ndarray) -> list[Run]:
        from app.embedding import HOP, SpeechEmbedding
        ears = SpeechEmbedding()
        started = time.process_time()
        embeddings = ears.embed(audio)
        shared = time.process_time() - started
        times = np.arange(1, len(embeddings) + 1) * HOP / SAMPLE_RATE
        runs = []
        for path in self.paths:
            model = HeadModel(path, ears)
            started = time.process_time()
            scores = model.scores(embeddings)
            cpu = shared + time.process_time() - started
            rule = {k: model.detection[k] for k in ("smoothing", "min_hops", "refractory_s")}
            own = float(model.detection.get("threshold", 0.5))
            thresholds = np.unique(np.concatenate([HEAD_THRESHOLDS, [own]]))
            sweep = sweep_detections(times, np.stack([scores, 1 - scores], 1), model.labels, (model.phrase,),
                                     thresholds, **rule)
            runs.append(Run(f"{HEAD_ENGINE} (`{path.name}`)", model.phrase, thresholds, own,
                            {float(th): np.array([d.time_s for d in dets]) for th, dets in sweep.items()},
                            cpu, len(audio) / SAMPLE_RATE))
        return runs


class Cascaded:
    """A wake file whose metadata names a verifier (export/cascade.py), run live as app/cascade.py
    runs it, at its stored thresholds, recording every head hop near a proposal: the sweep over
    the confirming threshold comes from those (and must agree with the live detections at the
    stored one). Its CPU is that pass's, the recording included: an upper bound on the live
    cascade's (which stops scoring a proposal's hops at the first that confirms it)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        model = KeywordModel(self.path)
        self.verifier = model.meta["verifier"]
        self.phrase = model.keywords[0]
        self.engine = f"rotkws cascade (`{self.path.name}`)"

    def run(self, audio: np.ndarray) -> Run:
        from app.cascade import CascadeSpotter, cascade_detections
        v = self.verifier
        cascade = CascadeSpotter(KeywordModel(self.path), HeadModel(self.path.parent / v["head"]),
                                 v["propose"], v["confirm"], record=True)
        feed = int(FEED_SECONDS * SAMPLE_RATE)          # fed as the wake file alone is (score_track)
        started = time.process_time()
        found = [d.time_s for i in range(0, len(audio), feed) for d in cascade.process(audio[i:i + feed]).detections]
        found += [d.time_s for d in cascade.flush().detections]
        cpu = time.process_time() - started
        hops = np.array(sorted(cascade.recorded))
        times = (hops + 1) * HEAD_HOP / SAMPLE_RATE
        scores = np.array([cascade.recorded[k] for k in hops])
        confirm = float(v["confirm"])
        thresholds = np.unique(np.concatenate([HEAD_THRESHOLDS, [confirm]]))
        sweep = {float(th): cascade_detections(np.array(cascade.proposals), times, scores, th) for th in thresholds}
        if len(sweep[confirm]) != len(found) or not np.allclose(sweep[confirm], found):
            raise AssertionError(f"{self.path}: the recorded sweep and the live cascade disagree at {confirm}")
        return Run(self.engine, self.phrase, thresholds, confirm, sweep, cpu, len(audio) / SAMPLE_RATE)


def one_thread(peer, prefix: str = "", shape: tuple | None = None) -> None:
    """Rebuild the TFLite interpreter `peer.<prefix>interpreter` of `peer.<prefix>model` with one
    thread, resized to `shape` as the peer resized it, and point `peer.<prefix>input_tensor` and
    `…output_tensor` at its tensors (the attribute names of the pinned pyopen-wakeword 1.1.0 and
    pymicro-wakeword 2.5.0; a peer's `reset()` would rebuild it with the default again)."""
    lib = peer.lib
    lib.TfLiteInterpreterOptionsCreate.restype = ctypes.c_void_p
    lib.TfLiteInterpreterOptionsSetNumThreads.argtypes = [ctypes.c_void_p, ctypes.c_int32]
    lib.TfLiteInterpreterOptionsDelete.argtypes = lib.TfLiteInterpreterDelete.argtypes = [ctypes.c_void_p]
    options = lib.TfLiteInterpreterOptionsCreate()
    lib.TfLiteInterpreterOptionsSetNumThreads(options, 1)
    interpreter = lib.TfLiteInterpreterCreate(getattr(peer, prefix + "model"), options)
    lib.TfLiteInterpreterOptionsDelete(options)
    lib.TfLiteInterpreterDelete(getattr(peer, prefix + "interpreter"))
    if shape:
        lib.TfLiteInterpreterResizeInputTensor(interpreter, 0, (ctypes.c_int32 * len(shape))(*shape), len(shape))
    lib.TfLiteInterpreterAllocateTensors(interpreter)
    setattr(peer, prefix + "interpreter", interpreter)
    setattr(peer, prefix + "input_tensor", lib.TfLiteInterpreterGetInputTensor(interpreter, 0))
    setattr(peer, prefix + "output_tensor", lib.TfLiteInterpreterGetOutputTensor(interpreter, 0))


class _Track:
    """A peer whose score track is recorded once and swept offline."""
    engine, default = "", 0.5

    def track(self, audio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def run(self, audio: np.ndarray) -> Run:
        started = time.process_time()
        times, scores = self.track(audio)
        cpu = time.process_time() - started
        thresholds = np.unique(np.append(PROB_THRESHOLDS, self.default))
        return Run(self.engine, self.phrase, thresholds, self.default,
                   {float(th): debounce(times, scores, th) for th in thresholds}, cpu, len(audio) / SAMPLE_RATE)


class OpenWakeWord(_Track):
    engine, default = "openWakeWord", 0.5

    def __init__(self, phrase: str):
        from pyopen_wakeword import Model
        self.phrase, self.model = phrase, Model(phrase)

    def make(self):
        """(classifier, features) of its own, each interpreter on one thread."""
        from pyopen_wakeword import OpenWakeWord as Oww, OpenWakeWordFeatures
        from pyopen_wakeword.openwakeword import EMB_SHAPE, MEL_SHAPE
        oww, features = Oww.from_builtin(self.model), OpenWakeWordFeatures.from_builtin()
        one_thread(oww)
        one_thread(features, "mel_", MEL_SHAPE)
        one_thread(features, "emb_", EMB_SHAPE)
        return oww, features

    def track(self, audio):
        oww, features = self.make()
        times, scores = [], []
        for end, data in chunks(audio):
            for f in features.process_streaming(data):
                for p in oww.process_streaming(f):
                    times.append(end / SAMPLE_RATE)
                    scores.append(float(p))
        return np.array(times), np.array(scores)


class MicroWakeWord(_Track):
    engine = "microWakeWord"

    def __init__(self, phrase: str):
        from pymicro_wakeword import Model
        self.phrase, self.model = phrase, Model(phrase)
        self.default = float(self.make()[0].probability_cutoff)

    def make(self):
        """(classifier, features) of its own, its interpreter on one thread."""
        from pymicro_wakeword import MicroWakeWord as Mww, MicroWakeWordFeatures
        mww = Mww.from_builtin(self.model)
        one_thread(mww)
        return mww, MicroWakeWordFeatures()

    def track(self, audio):
        mww, features = self.make()
        times, scores = [], []
        for end, data in chunks(audio):
            for f in features.process_streaming(data):
                p = mww.process_streaming_prob(f)
                if p is not None:
                    times.append(end / SAMPLE_RATE)
                    scores.append(float(p))
        return np.array(times), np.array(scores)


class PocketSphinx:
    engine = "PocketSphinx"

    def __init__(self, phrase: str, spelling: str | None = None, thresholds=KWS_THRESHOLDS):
        from pocketsphinx import Decoder
        self.phrase, self.words, self.kws_thresholds = phrase, (spelling or phrase).lower(), tuple(thresholds)
        self._decoder = lambda th: Decoder(keyphrase=self.words, kws_threshold=th, samprate=SAMPLE_RATE,
                                           loglevel="FATAL")
        d = self._decoder(KWS_DEFAULT)
        unknown = [w for w in self.words.split() if d.lookup_word(w) is None]
        if unknown:
            raise ValueError(f"PocketSphinx's dictionary lacks {unknown} of {self.words!r}")

    def detections(self, audio: np.ndarray, kws_threshold: float) -> np.ndarray:
        d = self._decoder(kws_threshold)
        d.start_utt()
        found, last = [], -np.inf
        for end, data in chunks(audio):
            d.process_raw(data, False, False)
            if d.hyp() is not None:
                t = end / SAMPLE_RATE
                if t - last >= REFRACTORY_S:
                    found.append(t)
                    last = t
                d.end_utt()
                d.start_utt()
        d.end_utt()
        return np.array(found)

    def split(self) -> list["PocketSphinx"]:
        """One engine per threshold of its sweep: passes that can run side by side (`merge`)."""
        return [PocketSphinx(self.phrase, self.words, [th]) for th in self.kws_thresholds]

    def run(self, audio: np.ndarray) -> Run:
        started = time.process_time()
        found = {float(np.log10(th)): self.detections(audio, th) for th in self.kws_thresholds}
        cpu = (time.process_time() - started) / len(self.kws_thresholds)    # one pass's cost
        return Run(self.engine, self.phrase, np.array(sorted(found)), float(np.log10(KWS_DEFAULT)), found,
                   cpu, len(audio) / SAMPLE_RATE)


PEER_CLASSES = {"openwakeword": OpenWakeWord, "microwakeword": MicroWakeWord, "pocketsphinx": PocketSphinx}


def engines_for(phrases, models, peers=PEERS, spellings=None) -> tuple[list, list[tuple[str, str]]]:
    """(engines to run, [(name, why not)]): a Rotkws for each model file, and each peer for each
    phrase it can listen for (openWakeWord and microWakeWord: their built-in models; PocketSphinx:
    any phrase, `spellings` giving the words its dictionary knows)."""
    heads = [m for m in models if is_head(m)]
    cascades = [m for m in models if m not in heads and "verifier" in KeywordModel(m).meta]
    runnable = ([Rotkws(m) for m in models if m not in heads + cascades] + [Cascaded(m) for m in cascades]
                + ([Heads(heads)] if heads else []))
    missing = []
    for name in peers:
        if name not in PEER_CLASSES:
            raise ValueError(f"expected peers among {PEERS}, got {name!r}")
        why = unavailable(name)
        if why:
            missing.append((name, why))
            continue
        for phrase in phrases:
            if name != "pocketsphinx" and phrase not in BUILTIN:
                continue
            try:
                runnable.append(PocketSphinx(phrase, (spellings or {}).get(phrase)) if name == "pocketsphinx"
                                else PEER_CLASSES[name](phrase))
            except Exception as e:                      # noqa: BLE001  (reported, never dropped)
                missing.append((f"{name} `{phrase}`", f"{type(e).__name__}: {e}"))
    return runnable, missing


def merge(runs: list[Run]) -> Run:
    """Runs of one engine and phrase over the same audio at different thresholds (PocketSphinx's
    `split`) as one: their sweeps together, the CPU of one pass (their mean)."""
    first = runs[0]
    detections = {th: d for r in runs for th, d in r.detections.items()}
    return Run(first.engine, first.phrase, np.array(sorted(detections)), first.default, detections,
               float(np.mean([r.cpu_s for r in runs])), first.audio_s)
