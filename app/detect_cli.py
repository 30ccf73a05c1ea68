"""`rotkws detect [--model M] [--keywords K,…] [--scores] AUDIO...`: the keyword spotter over audio files.
`rotkws detect --wake W.onnx [--commands C.onnx] AUDIO...`: a wake word, then a command (app/twostage.py).

Each file is read from disk in blocks and fed to the spotter as a stream, the path live audio
takes, so an hour-long file needs no more memory than a second of it. One JSON line per
detection on stdout (`file`, `keyword`, `time_s`, `score`); with `--scores`, the score track as
CSV instead (`file,time_s,<one column per label>`). With `--wake`, one JSON line per wake word
(`file`, `wake`, `time_s`, `score`, `command`, `command_time_s`, `command_score`; `command` null
when none was heard in its window), the command model (`--commands`, default the bundled
commands.onnx) listening for `--window` seconds after each; --keywords are then the commands
listened for and --threshold the wake word's. A file that cannot be read is reported on
stderr and the next one goes on; the exit status is then 1.
"""
import argparse
import csv
import json
import os
import sys
from pathlib import Path

from app.cascade import CascadeSpotter
from app.spotter import COMMAND_MODEL, DEFAULT_MODEL, KeywordModel, KeywordSpotter, detection_settings
from app.twostage import (COMMAND_CONFIDENT, COMMAND_STATE, COMMAND_STATES, COMMAND_THRESHOLD, WINDOW_S,
                          WakeCommandSpotter)
from corpus.clips import ClipError, audio_blocks

BLOCK_SECONDS = 1.0   # read files in blocks of this length


def model_settings(argv: list[str]) -> dict:
    """The detection settings that apply to the model the command line names (its metadata's,
    else app/detection.py's) and its keywords, for --help to show; {} when it cannot be read
    (the run says why)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--model")
    pre.add_argument("--wake")
    try:
        known = pre.parse_known_args(argv)[0]
        model = KeywordModel(known.wake or known.model)
        return detection_settings(model, {}) | {"keywords": model.keywords}
    except ValueError:
        return {}


def keyword_list(text: str) -> list[str]:
    """--keywords: names separated by commas."""
    names = [k.strip() for k in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected keyword names separated by commas, got {text!r}")
    return names


def shown(settings: dict, key: str) -> str:
    value = settings.get(key)
    if value is None:
        return "the model's metadata, else app/detection.py's"
    if isinstance(value, dict):
        return "per keyword, " + ", ".join(f"{k} {v:g}" for k, v in value.items())
    return f"{value:g}"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rotkws detect", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    m = model_settings(argv) if any(a in ("-h", "--help") for a in argv) else {}
    p.add_argument("audio", nargs="+", help="audio files (WAV/FLAC/OGG, any rate, channels, bit depth)")
    p.add_argument("--model", default=None, help=f"rotkws ONNX file (default: {DEFAULT_MODEL})")
    p.add_argument("--scores", action="store_true", help="print the score track as CSV instead")
    every = ", ".join(m["keywords"]) if "keywords" in m else "all of the model's"
    p.add_argument("--keywords", type=keyword_list, help="the keywords to listen for, separated by "
                   f"commas; the others never fire (default: {every})")
    p.add_argument("--threshold", type=float, help="smoothed probability that fires, one for every "
                   f"keyword (default: {shown(m, 'threshold')})")
    p.add_argument("--smoothing", type=int, help=f"moving-average window in hops (default: {shown(m, 'smoothing')})")
    p.add_argument("--min-hops", type=int, help="consecutive hops above the threshold to fire "
                   f"(default: {shown(m, 'min_hops')})")
    p.add_argument("--refractory", type=float, help="seconds without detections after one "
                   f"(default: {shown(m, 'refractory_s')})")
    p.add_argument("--flush", type=float, help="seconds of silence run through after each file's end, "
                   f"so a keyword at the very end is heard (default: {shown(m, 'flush_s')})")
    two = p.add_argument_group("a wake word, then a command")
    two.add_argument("--wake", default=None, help="a wake-word ONNX file (`rotkws enroll`): report each wake "
                     "word and the command heard after it")
    two.add_argument("--commands", default=None, help=f"the command model (default: {COMMAND_MODEL})")
    two.add_argument("--window", type=float, default=None, help="seconds the command model listens after a "
                     f"wake word (default: the wake model's metadata, else {WINDOW_S:g})")
    two.add_argument("--command-threshold", type=float, default=COMMAND_THRESHOLD,
                     help="the smoothed probability a command's peak in the window must reach (default: %(default)s)")
    two.add_argument("--command-confident", type=float, default=COMMAND_CONFIDENT,
                     help="a command this sure closes the window at once (default: %(default)s)")
    two.add_argument("--command-state", choices=COMMAND_STATES, default=COMMAND_STATE,
                     help="reset: the command model runs in the window only, from the zero state; carried: "
                     "on every hop (default: %(default)s)")
    args = p.parse_args(argv)
    if args.wake is None and args.commands is not None:
        p.error("--commands needs --wake (the wake word that opens each command window)")
    if args.wake is not None and args.scores:
        p.error("--scores is for one model: leave out --wake, or --scores")
    return args


def make_spotter(args) -> KeywordSpotter:
    """The spotter the arguments ask for (ValueError, ModelError: what is wrong)."""
    rule = {"threshold": args.threshold, "smoothing": args.smoothing, "min_hops": args.min_hops,
            "refractory_s": args.refractory, "flush_s": args.flush}
    if args.wake is None:
        model = KeywordModel(args.model)
        if "verifier" in model.meta and not args.scores:     # a wake file with its head: the cascade
            return CascadeSpotter.from_file(model.path)
        return KeywordSpotter(model, keywords=args.keywords, **rule)
    if args.model is not None:
        raise ValueError("--model and --wake: give the wake word as --wake and the commands as --commands")
    return WakeCommandSpotter(KeywordModel(args.wake), KeywordModel(args.commands or COMMAND_MODEL),
                              window_s=args.window, command_state=args.command_state, command_keywords=args.keywords,
                              command_threshold=args.command_threshold,
                              command_confident=args.command_confident, **rule)


def stream_file(spotter: KeywordSpotter, path: Path):
    """Yield the spotter's result for each block of the file, then for its end."""
    spotter.reset()
    for data, rate in audio_blocks(path, BLOCK_SECONDS):   # ClipError names a file it refuses
        yield spotter.process(data, rate)
    yield spotter.flush()


def emit(writer, path: Path, result, scores: bool) -> None:
    if scores:
        for t, row in zip(result.times, result.scores):
            writer.writerow([str(path), f"{t:.3f}"] + [f"{v:.6f}" for v in row])
        return
    if hasattr(result, "events"):
        for e in result.events:
            print(json.dumps({"file": str(path)} | e.to_json()), flush=True)
        return
    for d in result.detections:
        print(json.dumps({"file": str(path), "keyword": d.keyword, "time_s": round(d.time_s, 3),
                          "score": round(d.score, 4)}), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        spotter = make_spotter(args)
    except ValueError as e:                     # ModelError, a keyword it lacks, or a setting out of range
        print(f"rotkws detect: {e}", file=sys.stderr)
        return 2
    writer = csv.writer(sys.stdout, lineterminator="\n")
    if args.scores:
        writer.writerow(["file", "time_s", *spotter.model.labels])
    failed = 0
    for name in args.audio:
        path = Path(name)
        try:
            for result in stream_file(spotter, path):
                emit(writer, path, result, args.scores)
        except ValueError as e:                 # ClipError names the file itself
            print(f"rotkws detect: {'' if isinstance(e, ClipError) else f'{path}: '}{e}", file=sys.stderr)
            failed += 1
        except BrokenPipeError:                 # `rotkws detect … | head`: the reader has had enough
            sys.stdout = open(os.devnull, "w")
            return 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
