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
4. The backbone's lower blocks stay frozen; its top block, final norm and a new two-class head
   (the phrase, `_other_`) train for a few minutes, hard negatives mined from the speech, with a
   max-pooling term in the loss (training/enroll_fit.py). The backbone is the RotRNN taught to
   predict the speech embedding (training/distill.py: PROPOSER_CHECKPOINT), as the cascade's
   proposer (6); with --no-verifier the default kws12 network (DEFAULT_CHECKPOINT).
5. This command exports the network as the streaming ONNX file `rotkws export` writes and
   chooses its threshold on a stream through the runtime (export/wake_threshold.py): the validation speakers' speech
   (evaluation/speech.py: VCC2016 and 25 speechocean762 speakers, in neither training nor the
   bench; an utterance that says a word of the phrase is marked, a detection there not counted)
   in the wake-word bench's mix (evaluation/streams.py: 1–3 s pauses, noise at 10 dB by
   peak frame energy); the stored threshold is the lowest that keeps them to ≤
   VALIDATION_FA_PER_HOUR false accepts per hour (`--fa-per-hour`), under the detection rule the
   file stores with it (app/wake_rule.py, WAKE_RULE: 800 ms of smoothing, two hops in a row),
   which training's mining applies as well. `rotkws calibrate FILE.onnx --fa-per-hour F` chooses
   it again for an enrolled file, on the same stream, without training (`retune`).
6. Beside the wake file, from the same items, three heads on Google's frozen speech embedding train
   in a thread of their own (training/embedding_head.py: `Beside`), which then embeds the
   validation stream (cached per machine); the wake file's training takes their core once they
   are done. They are written beside it as OUT.head.onnx, its verifier
   (export/cascade.py): the wake file proposes, the heads confirm what it proposed, both thresholds
   chosen on the same validation stream and score track as the wake file's (`--no-verifier`: the
   wake file alone).
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from app.embedding import SpeechEmbedding
from app.wake_rule import held_out_rates
from corpus.clips import ClipError
from corpus.folders import default_data_root
from corpus.labels import OTHER
from export.cascade import attach_head
from export.onnx import export_onnx, write_metadata
from export.wake_threshold import Validation, choose_on_stream
from training import progress, tts
from training.embedding_head import Beside, HeadConfig
from training.enroll import EnrollConfig, gather
from training.enroll_fit import DEFAULT_CHECKPOINT, PROPOSER_CHECKPOINT, fit
from training.paths import REPO
from training.kokoro import KokoroError
from training.tts import PhraseError


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
    p.add_argument("--checkpoint", default=None,
                   help=f"the backbone (default: {PROPOSER_CHECKPOINT.relative_to(REPO)}, the RotRNN taught to predict "
                        f"the speech embedding, as the cascade's proposer; with --no-verifier "
                        f"{DEFAULT_CHECKPOINT.relative_to(REPO)})")
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
    p.add_argument("--speech", nargs="+", default=[], metavar="DIR",
                   help="your own folders of speech, negatives beside the shipped ones: LibriSpeech's layout "
                        "(its .trans.txt transcripts) or audio files (a .txt transcript beside each, where there "
                        "is one); an utterance that says the phrase is left out")
    p.add_argument("--verifier", action=argparse.BooleanOptionalAction, default=True,
                   help="also train heads on Google's frozen speech embedding (docs/ears.md) and write them beside "
                        "the file as its verifier, OUT.head.onnx: the wake file proposes, the heads confirm "
                        "(app/cascade.py; the default); --no-verifier: the wake file alone")
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
           say=tts.synthesize, verifier: bool = True) -> dict:
    """The whole recipe; returns what it measured (also in the file's metadata). `verifier`:
    heads on the speech embedding train on the same items beside it (docs/ears.md), and the file
    names them as its verifier; the three thresholds are chosen on one validation stream."""
    started = time.perf_counter()
    stream = lambda noise: Validation.of(data, noise, cfg.validation_hours, np.random.default_rng(cfg.seed), phrase)
    items, beside = None, None
    if verifier:
        items = gather(phrase, data, cfg, np.random.default_rng(cfg.seed), say)
        head_cfg = HeadConfig(seed=cfg.seed, steps=cfg.max_steps or HeadConfig.steps)
        beside = Beside(phrase, items, head_cfg, then=lambda: embedded(stream(items.noise)))   # while the file trains
    trained = fit(phrase, checkpoint, data, cfg, say, items=items, threads=beside and beside.threads)
    meta = trained.meta
    export_onnx(trained.net, output, meta=meta, clips=trained.positives[:VERIFY_CLIPS])
    with progress.stage("threshold"):
        heads = beside.result() if beside is not None else None
        validation = heads[2] if heads else stream(trained.noise)
        chosen = choose_on_stream(output, validation, cfg.fa_per_hour)
    meta["enroll"] |= chosen | held_out_rates(trained.held_scores, trained.held_kind, chosen["threshold"])
    write_metadata(output, output, {"detection": meta["detection"] | {"threshold": chosen["threshold"]},
                                    "enroll": meta["enroll"]})
    if beside is not None:
        with progress.stage("verifier"):
            meta["enroll"]["verifier"] = attach_head(*heads[:2], output, data, validation, cfg.fa_per_hour)
        write_metadata(output, output, {"enroll": meta["enroll"]})
    return meta["enroll"] | {"seconds_with_export": round(time.perf_counter() - started, 1)}


def embedded(validation: Validation) -> Validation:
    """The validation stream with its speech embeddings computed (or read from the cache)."""
    ears = SpeechEmbedding()
    validation.embeddings(ears)
    return validation


def verifier_line(report: dict) -> str:
    v = report.get("verifier")
    return (f"; its verifier {v['head']} beside it confirms what it proposes at {v['propose']:g} from "
            f"{v['confirm']:g} ({v['validation_stream_false_accepts']} false accepts there)") if v else ""


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    if not args.fa_per_hour > 0:
        print("rotkws enroll: --fa-per-hour must be > 0", file=sys.stderr)
        return 2
    cfg = EnrollConfig(**{k: getattr(args, k) for k in INT_OPTIONS}, validation_hours=args.validation_hours,
                       fa_per_hour=args.fa_per_hour,
                       negative_weight=args.negative_weight,
                       peak_weight=args.peak_weight, recordings=tuple(args.recordings),
                       speech_dirs=tuple(args.speech))
    torch.set_num_threads(cfg.threads)
    progress.configure(args.progress)
    try:
        phrase = tts.check_phrase(args.phrase)
        data = Path(args.data).resolve() if args.data else default_data_root()
        checkpoint = Path(args.checkpoint or (PROPOSER_CHECKPOINT if args.verifier else DEFAULT_CHECKPOINT))
        report = enroll(phrase, Path(args.output), checkpoint, data, cfg, verifier=args.verifier)
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
          f"{report['steps']} steps in {report['seconds_with_export']:.0f} s" + verifier_line(report),
          file=sys.stderr if args.progress == "json" else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
