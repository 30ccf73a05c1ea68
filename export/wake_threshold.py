"""An enrolled wake word's threshold, chosen on a stream of real speech through the runtime (step 5
of `rotkws enroll`, rotkws/enroll_cli.py; `rotkws calibrate` on an enrolled file): the validation
speakers (evaluation/speech.py: VCC2016 and 25 speechocean762 speakers, in neither training nor
the bench) in the wake-word bench's mix (evaluation/streams.py), the stored threshold the lowest
that keeps them to ≤ `fa_per_hour` false accepts per hour (VALIDATION_FA_PER_HOUR by default),
one per thing said (`Validation.count`), under the rule the file stores (app/wake_rule.py).
"""
import json
from pathlib import Path

import numpy as np

from app.embedding import SpeechEmbedding, cache_folder, cache_key
from app.spotter import KeywordModel
from app.sweep import THRESHOLDS, model_rule, score_track, sweep_detections
from app.wake_rule import HELD_OUT_RATES, MAX_THRESHOLD, MIN_THRESHOLD, VALIDATION_FA_PER_HOUR
from corpus.rate import SAMPLE_RATE
from evaluation import speech as real_speech
from evaluation import streams

from .onnx import read_metadata, write_metadata


def validation_stream(data: Path, noise: np.ndarray, hours: float, rng, phrase: str | None = None
                      ) -> tuple[np.ndarray, float, np.ndarray, np.ndarray, list[str]]:
    """(audio, hours, marked, spoken, said): the validation speakers' speech (evaluation/speech.py)
    in the wake-word bench's mix, `hours` long (0: every utterance once). The audio is the same
    whatever the phrase, so its speech embeddings are computed once a machine; the utterances whose
    transcript holds the phrase or one of its words are `marked` instead, (n, 2) spans in seconds
    from their start to HIT_WINDOW_S after their end: a detection there is no false accept, and
    their time is not in `hours`. The others are `spoken`, (m, 2) spans alike, each with what it
    `said` (evaluation/speech.py: said)."""
    found = real_speech.utterances(data, "validation")
    heard = [real_speech.read(u.path) for u in found]
    items = [streams.Item(a, streams.PHRASE if phrase and real_speech.holds_phrase(u.text, phrase) else streams.SPEECH,
                          real_speech.said(u)) for a, u in zip(heard, found)]
    seconds = hours * 3600 or (sum(map(len, heard)) / SAMPLE_RATE + len(heard) * np.mean(streams.PAUSE_S))
    audio, events = streams.build(items, noise, seconds, rng)
    spans = lambda kind: np.array([(e.start_s, e.end_s + streams.HIT_WINDOW_S) for e in events
                                   if e.kind == kind], np.float64).reshape(-1, 2)
    marked, spoken = spans(streams.PHRASE), spans(streams.SPEECH)
    said = [e.label for e in events if e.kind == streams.SPEECH]
    hours = (len(audio) / SAMPLE_RATE - float((marked[:, 1] - marked[:, 0]).sum())) / 3600
    return audio, hours, marked, spoken, said


class Validation:
    """One validation stream of a phrase (`validation_stream`) and what is computed from it once:
    each model's score track through the runtime (by file: its network must not change while the
    stream is held) and the speech embedding's hops, shared by the thresholds `rotkws enroll`
    chooses (the wake file's, its verifier head's, the cascade's).

    A false accept is counted once per thing said (`count`): VCC2016's ten voices read the same
    216 sentences, and one that sounds like the phrase fires in many of them (`alexa` seed 0: one
    sentence in 5 voices, 5 of the 7 false accepts at the confirm where the bench's stream reached
    1 an hour); counted each time, a sentence or two set the threshold for all else a room says."""

    def __init__(self, audio: np.ndarray, hours: float, marked: np.ndarray | None = None,
                 spoken: np.ndarray | None = None, said: list[str] | None = None):
        self.audio, self.hours = audio, hours
        self.marked = np.zeros((0, 2)) if marked is None else np.asarray(marked, np.float64)   # (n, 2) s
        self.spoken = np.zeros((0, 2)) if spoken is None else np.asarray(spoken, np.float64)   # (m, 2) s, by start
        self.said = np.unique(list(said or []), return_inverse=True)[1].astype(int)   # (m,) what each said
        if len(self.said) != len(self.spoken):
            raise ValueError(f"expected what each of the {len(self.spoken)} spoken spans said, got {len(self.said)}")
        self._tracks, self._embeddings = {}, None

    @classmethod
    def of(cls, data: Path, noise: np.ndarray, hours: float, rng, phrase: str | None = None) -> "Validation":
        return cls(*validation_stream(data, noise, hours, rng, phrase))

    def track(self, model: KeywordModel) -> tuple[np.ndarray, np.ndarray]:
        """(times, scores) of `model` over the stream (app/sweep.py: score_track), once per file."""
        key = str(Path(model.path).resolve())
        if key not in self._tracks:
            self._tracks[key] = score_track(model, self.audio)
        return self._tracks[key]

    def embeddings(self, ears: SpeechEmbedding) -> np.ndarray:
        """The stream's speech embeddings by `ears`, made once a machine: from the cache where an
        earlier run made them (app/embedding.py: cache_folder), else embedded and kept there."""
        if self._embeddings is None:
            path = cache_folder() / f"stream-{cache_key(self.audio)}.npy"
            if path.is_file():
                self._embeddings = np.load(path)
            else:
                self._embeddings = ears.embed(self.audio)
                path.parent.mkdir(parents=True, exist_ok=True)
                np.save(path, self._embeddings)
        return self._embeddings

    def outside(self, times) -> np.ndarray:
        """The detection times (s) outside the marked spans."""
        t = np.asarray(times, np.float64).reshape(-1)
        inside = ((t[:, None] >= self.marked[:, 0]) & (t[:, None] <= self.marked[:, 1])).any(1)
        return t[~inside]

    def count(self, times) -> int:
        """How many false accepts the detections at `times` (s) are: those outside the marked spans,
        one per thing said among the spoken spans they fell in (the latest begun), each of the
        rest (in the pauses) one."""
        t = self.outside(times)
        last = np.searchsorted(self.spoken[:, 0], t, side="right") - 1
        within = ((last >= 0) & (t <= self.spoken[np.maximum(last, 0), 1]) if len(self.spoken)
                  else np.zeros(len(t), bool))
        return len(np.unique(self.said[last[within]])) + int((~within).sum())

    def false_accepts(self, times: np.ndarray, scores: np.ndarray, labels, keywords, thresholds,
                      rule: dict) -> dict[float, int]:
        """{threshold: false accepts} over the stream, each threshold of the sweep under `rule`
        (smoothing, min_hops, refractory_s), as `count` counts them."""
        sweep = sweep_detections(times, scores, labels, keywords, thresholds, **rule)
        return {th: self.count([d.time_s for d in found]) for th, found in sweep.items()}

    def threshold(self, counts: dict[float, int], fa_per_hour: float, top: float = MAX_THRESHOLD) -> dict:
        """`stream_threshold` over this stream's hours, and what the stream measured there."""
        th = stream_threshold(counts, self.hours, fa_per_hour, top)
        return {"threshold": th, "fa_per_hour": fa_per_hour, "validation_stream_hours": round(self.hours, 3),
                "validation_stream_false_accepts": counts[min(counts, key=lambda t: abs(t - th))]}


def stream_threshold(counts: dict[float, int], hours: float, fa_per_hour: float = VALIDATION_FA_PER_HOUR,
                     top: float = MAX_THRESHOLD) -> float:
    """The lowest threshold of the sweep ({threshold: false accepts in `hours`}) at which it and
    every higher threshold keep to `fa_per_hour`, within [MIN_THRESHOLD, top]."""
    ths = sorted(counts)
    ok = [th for i, th in enumerate(ths) if all(counts[t] <= fa_per_hour * hours for t in ths[i:])]
    return float(np.clip(ok[0] if ok else top, MIN_THRESHOLD, top))


def choose_on_stream(model_path: Path, validation: Validation, fa_per_hour: float) -> dict:
    """The threshold the runtime fires at no more than `fa_per_hour` on the validation stream of
    its phrase (`Validation`, `stream_threshold`), and what that stream measured."""
    model = KeywordModel(model_path)
    counts = validation.false_accepts(*validation.track(model), model.labels, model.keywords, THRESHOLDS,
                                      model_rule(model))
    return validation.threshold(counts, fa_per_hour) | {
        "validation_stream_fa_per_hour_at_0.5": round(counts[min(counts, key=lambda t: abs(t - 0.5))] / validation.hours, 2)}


def retune(model_path: Path, out: Path, data: Path, fa_per_hour: float = VALIDATION_FA_PER_HOUR) -> dict:
    """Choose an enrolled file's threshold again, for `fa_per_hour`, on the stream `enroll` chose
    it on (the same seed and noise: its metadata's), and write the file to `out`. The held-out
    rates of training, measured at the old threshold, are dropped from its `enroll` record."""
    meta = read_metadata(model_path)
    if "enroll" not in meta or "detection" not in meta:
        raise ValueError(f"{model_path}: not a file `rotkws enroll` wrote (no `enroll` metadata)")
    before = json.loads(meta["enroll"])
    made = before.get("config", {})
    seed = int(made.get("seed", 0))
    stream = Validation.of(data, real_speech.noise_bed(data), float(made.get("validation_hours", 0.0)),
                           np.random.default_rng(seed), KeywordModel(model_path).keywords[0])
    chosen = choose_on_stream(model_path, stream, fa_per_hour)
    detection = json.loads(meta["detection"])
    record = {k: v for k, v in before.items() if k not in HELD_OUT_RATES} | chosen
    record["retuned_from"] = detection.get("threshold")
    write_metadata(model_path, out, {"detection": detection | {"threshold": chosen["threshold"]}, "enroll": record})
    return record
