"""`rotkws enroll TEXT -o MODEL.onnx`: a wake word of your own, from text alone (or with recordings
of it beside the text, `--recordings`). The recipe:

1. The phrase is checked and spoken by Kokoro-82M's neural voices and by espeak-ng, flite and
   festival in many voices (the positives), with the same engines saying other words and pieces
   of the phrase (training/enroll.py: `gather`).
2. Real negatives: the training split's continuous speech (every utterance whose transcript holds
   the phrase or one of its words left out), Speech Commands words, other wake words' recordings,
   background noise; synthetic sentences beside them (training/enroll.py). Never a recording of
   the phrase, nor the bench's or the validation stream's speakers.
3. Every example is 3 s of log-mel pixels after a 3-s warm-up that is not scored: an optional other
   word or the end of a real sentence before, the item, room reverberation, background noise, then
   the whole made quieter; synthetic clips go through the Opus codec as often as not, as the real
   speech did (training/enroll_examples.py).
4. The default checkpoint's lower blocks stay frozen; its top block, final norm and a new
   two-class head (the phrase, `_other_`) train for a few minutes, hard negatives mined from the
   speech, with a max-pooling term in the loss (training/enroll_fit.py).
5. This command exports the network as the streaming ONNX file `rotkws export` writes and
   chooses its threshold on a stream through the runtime: the validation speakers' speech
   (evaluation/speech.py: VCC2016 and 25 speechocean762 speakers, in neither training nor the
   bench) in the wake-word bench's mix (evaluation/streams.py: 1–3 s pauses, noise at 10 dB by
   peak frame energy); the stored threshold is the lowest that keeps them to ≤
   VALIDATION_FA_PER_HOUR false accepts per hour (`--fa-per-hour`), under the detection rule the
   file stores with it (app/wake_rule.py, WAKE_RULE: 800 ms of smoothing, two hops in a row),
   which training's mining applies as well. `rotkws calibrate FILE.onnx --fa-per-hour F` chooses
   it again for an enrolled file, on the same stream, without training (`retune`).
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from app.spotter import KeywordModel
from app.sweep import THRESHOLDS, model_rule, score_track, sweep_detections
from corpus.clips import ClipError
from corpus.folders import default_data_root
from corpus.labels import OTHER
from app.wake_rule import HELD_OUT_RATES, MAX_THRESHOLD, MIN_THRESHOLD, VALIDATION_FA_PER_HOUR, held_out_rates
from corpus.rate import SAMPLE_RATE
from evaluation import speech as real_speech
from evaluation import streams
from training import progress, tts
from training.enroll import EnrollConfig
from training.enroll_fit import DEFAULT_CHECKPOINT, fit
from training.kokoro import KokoroError
from training.tts import PhraseError

from .onnx import export_onnx, read_metadata, write_metadata


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


def stream_threshold(counts: dict[float, int], hours: float, fa_per_hour: float = VALIDATION_FA_PER_HOUR) -> float:
    """The lowest threshold of the sweep ({threshold: false accepts in `hours`}) at which it and
    every higher threshold keep to `fa_per_hour`, within [MIN_THRESHOLD, MAX_THRESHOLD]."""
    ths = sorted(counts)
    ok = [th for i, th in enumerate(ths) if all(counts[t] <= fa_per_hour * hours for t in ths[i:])]
    return float(np.clip(ok[0] if ok else MAX_THRESHOLD, MIN_THRESHOLD, MAX_THRESHOLD))


def choose_on_stream(model_path: Path, data: Path, noise: np.ndarray, cfg: EnrollConfig, rng) -> dict:
    """The threshold the runtime fires at no more than cfg.fa_per_hour on the validation stream of
    its phrase (`validation_stream`, `stream_threshold`), and what that stream measured."""
    model = KeywordModel(model_path)
    audio, hours = validation_stream(data, noise, cfg.validation_hours, rng, model.keywords[0])
    times, scores = score_track(model, audio)
    sweep = sweep_detections(times, scores, model.labels, model.keywords, THRESHOLDS, **model_rule(model))
    counts = {th: len(d) for th, d in sweep.items()}
    th = stream_threshold(counts, hours, cfg.fa_per_hour)
    near = min(counts, key=lambda t: abs(t - th))
    return {"threshold": th, "fa_per_hour": cfg.fa_per_hour, "validation_stream_hours": round(hours, 3),
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
    cfg = EnrollConfig(seed=int(made.get("seed", 0)), fa_per_hour=fa_per_hour,
                       validation_hours=float(made.get("validation_hours", 0.0)))
    chosen = choose_on_stream(model_path, data, real_speech.noise_bed(data), cfg, np.random.default_rng(cfg.seed))
    detection = json.loads(meta["detection"])
    record = {k: v for k, v in before.items() if k not in HELD_OUT_RATES} | chosen
    record["retuned_from"] = detection.get("threshold")
    write_metadata(model_path, out, {"detection": detection | {"threshold": chosen["threshold"]}, "enroll": record})
    return record


VERIFY_CLIPS = 4              # positives the export is verified on against PyTorch
INT_OPTIONS = ("positives", "tts_negatives", "images", "wav_negatives", "noise_negatives",
               "speech_negatives", "tts_sentences", "kokoro_positives", "kokoro_negatives",
               "kokoro_sentences", "blocks", "epochs", "max_steps", "seed", "threads")


def parse_args(argv: list[str]) -> argparse.Namespace:
    d = EnrollConfig()
    p = argparse.ArgumentParser(prog="rotkws enroll", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("phrase", help="the words to spot, e.g. \"computer\"")
    p.add_argument("-o", "--output", required=True, help="the .onnx file to write")
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT), help="the backbone (default: %(default)s)")
    p.add_argument("--data", default=None, help="data root (default: $ROTKWS_DATA or ../shared/data)")
    for name in INT_OPTIONS:
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name))
    p.add_argument("--negative-weight", type=float, default=d.negative_weight,
                   help="weight of the frames that are not the phrase in the loss (default: %(default)s)")
    p.add_argument("--peak-weight", type=float, default=d.peak_weight,
                   help="weight of the loss on the frame of each example that comes closest to "
                        "firing where it should not (default: %(default)s; 0: none)")
    p.add_argument("--recordings", nargs="+", default=[], metavar="FILE",
                   help="real recordings of the phrase, trained on beside the synthetic ones "
                        "(augmented as they are); default: none, text alone")
    p.add_argument("--fa-per-hour", type=float, default=d.fa_per_hour,
                   help="false accepts per hour the stored threshold allows on the validation stream "
                        "(default: %(default)s)")
    p.add_argument("--validation-hours", type=float, default=d.validation_hours,
                   help="hours of validation stream the threshold is chosen on (default: every "
                        "validation utterance once, about 4.3 h)")
    p.add_argument("--progress", choices=progress.MODES, default="bar",
                   help="bar: progress bars on stderr; json: one JSON line per stage and per percent "
                        "on stdout, then a `done` or `error` line (training/progress.py); none")
    return p.parse_args(argv)


def enroll(phrase: str, output: Path, checkpoint: Path, data: Path, cfg: EnrollConfig,
           say=tts.synthesize) -> dict:
    """The whole recipe; returns what it measured (also in the file's metadata)."""
    started = time.perf_counter()
    trained = fit(phrase, checkpoint, data, cfg, say)
    meta = trained.meta
    export_onnx(trained.net, output, meta=meta, clips=trained.positives[:VERIFY_CLIPS])
    with progress.stage("threshold"):
        chosen = choose_on_stream(output, data, trained.noise, cfg, np.random.default_rng(cfg.seed))
    meta["enroll"] |= chosen | held_out_rates(trained.held_scores, trained.held_kind, chosen["threshold"])
    write_metadata(output, output, {"detection": meta["detection"] | {"threshold": chosen["threshold"]},
                                    "enroll": meta["enroll"]})
    return meta["enroll"] | {"seconds_with_export": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    if not args.fa_per_hour > 0:
        print("rotkws enroll: --fa-per-hour must be > 0", file=sys.stderr)
        return 2
    cfg = EnrollConfig(**{k: getattr(args, k) for k in INT_OPTIONS}, validation_hours=args.validation_hours,
                       fa_per_hour=args.fa_per_hour,
                       negative_weight=args.negative_weight,
                       peak_weight=args.peak_weight, recordings=tuple(args.recordings))
    torch.set_num_threads(cfg.threads)
    progress.configure(args.progress)
    try:
        phrase = tts.check_phrase(args.phrase)
        data = Path(args.data).resolve() if args.data else default_data_root()
        report = enroll(phrase, Path(args.output), Path(args.checkpoint), data, cfg)
    except (PhraseError, ClipError, KokoroError, ValueError) as e:
        print(f"rotkws enroll: {e}", file=sys.stderr)
        progress.emit("error", message=str(e))
        return 1
    progress.emit("done", output=str(args.output), phrase=phrase, **report)
    print(f"wrote {args.output}: labels [{phrase!r}, {OTHER!r}], threshold {report['threshold']}: "
          f"{report['validation_stream_false_accepts']} false accepts in "
          f"{report['validation_stream_hours']:.1f} h of validation speech (expect ≤ "
          f"{cfg.fa_per_hour:g} per hour in speech like it); held out: synthetic phrases "
          f"detected {report['validation_positives_detected']:.0%}, speech windows firing "
          f"{report['validation_speech_firing']:.2%}, real words "
          f"{report['validation_real_negatives_firing']:.2%}, synthetic words "
          f"{report['validation_synthetic_negatives_firing']:.2%}; "
          f"{report['steps']} steps in {report['seconds_with_export']:.0f} s",
          file=sys.stderr if args.progress == "json" else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
