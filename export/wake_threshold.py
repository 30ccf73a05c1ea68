"""An enrolled wake word's threshold, chosen on a stream of real speech through the runtime (step 5
of `rotkws enroll`, rotkws/enroll_cli.py; `rotkws calibrate` on an enrolled file): the validation
speakers (evaluation/speech.py: VCC2016 and 25 speechocean762 speakers, in neither training nor
the bench) in the wake-word bench's mix (evaluation/streams.py), the stored threshold the lowest
that keeps them to ≤ `fa_per_hour` false accepts per hour (VALIDATION_FA_PER_HOUR by default),
under the rule the file stores (app/wake_rule.py).
"""
import json
from pathlib import Path

import numpy as np

from app.spotter import KeywordModel
from app.sweep import THRESHOLDS, model_rule, score_track, sweep_detections
from app.wake_rule import HELD_OUT_RATES, MAX_THRESHOLD, MIN_THRESHOLD, VALIDATION_FA_PER_HOUR
from corpus.rate import SAMPLE_RATE
from evaluation import speech as real_speech
from evaluation import streams

from .onnx import read_metadata, write_metadata


def validation_stream(data: Path, noise: np.ndarray, hours: float, rng, phrase: str | None = None
                      ) -> tuple[np.ndarray, float]:
    """(audio, hours): the validation speakers' speech (evaluation/speech.py) in the wake-word
    bench's mix, every utterance whose transcript holds the phrase or one of its words left out;
    `hours` 0: every utterance once."""
    said = [real_speech.read(u.path) for u in real_speech.utterances(data, "validation", phrase)]
    items = [streams.Item(a, streams.SPEECH, "validation") for a in said]
    seconds = hours * 3600 or (sum(map(len, said)) / SAMPLE_RATE + len(said) * np.mean(streams.PAUSE_S))
    audio, _ = streams.build(items, noise, seconds, rng)
    return audio, len(audio) / SAMPLE_RATE / 3600


def stream_threshold(counts: dict[float, int], hours: float, fa_per_hour: float = VALIDATION_FA_PER_HOUR,
                     top: float = MAX_THRESHOLD) -> float:
    """The lowest threshold of the sweep ({threshold: false accepts in `hours`}) at which it and
    every higher threshold keep to `fa_per_hour`, within [MIN_THRESHOLD, top]."""
    ths = sorted(counts)
    ok = [th for i, th in enumerate(ths) if all(counts[t] <= fa_per_hour * hours for t in ths[i:])]
    return float(np.clip(ok[0] if ok else top, MIN_THRESHOLD, top))


def choose_on_stream(model_path: Path, data: Path, noise: np.ndarray, hours: float, fa_per_hour: float,
                     rng) -> dict:
    """The threshold the runtime fires at no more than `fa_per_hour` on `hours` of the validation
    stream of its phrase (`validation_stream`, `stream_threshold`), and what that stream measured."""
    model = KeywordModel(model_path)
    audio, hours = validation_stream(data, noise, hours, rng, model.keywords[0])
    times, scores = score_track(model, audio)
    sweep = sweep_detections(times, scores, model.labels, model.keywords, THRESHOLDS, **model_rule(model))
    counts = {th: len(d) for th, d in sweep.items()}
    th = stream_threshold(counts, hours, fa_per_hour)
    near = min(counts, key=lambda t: abs(t - th))
    return {"threshold": th, "fa_per_hour": fa_per_hour, "validation_stream_hours": round(hours, 3),
            "validation_stream_false_accepts": counts[near],
            "validation_stream_fa_per_hour_at_0.5": round(counts[min(counts, key=lambda t: abs(t - 0.5))] / hours, 2)}


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
    chosen = choose_on_stream(model_path, data, real_speech.noise_bed(data), float(made.get("validation_hours", 0.0)),
                              fa_per_hour, np.random.default_rng(seed))
    detection = json.loads(meta["detection"])
    record = {k: v for k, v in before.items() if k not in HELD_OUT_RATES} | chosen
    record["retuned_from"] = detection.get("threshold")
    write_metadata(model_path, out, {"detection": detection | {"threshold": chosen["threshold"]}, "enroll": record})
    return record
