"""`rotkws eval (--model M | --checkpoint CKPT) --data DIR [--split S] [--json] [--png FILE]`.

Clip accuracy (app/clip_accuracy.py) of an ONNX model (the torch-free runtime) or of a checkpoint
of `rotkws train` (PyTorch, training/checkpoint_scorer.py; needs the train extra), one program for
both: every clip of a folder in the Speech Commands layout (corpus/clips.py: words that are not
labels count as `_unknown_`), or of one split of it (the folder's lists, else the speaker hash of
corpus/splits.py); clips at another rate are resampled; each is fitted to one second (zeros on
both sides of a short clip, the loudest second of a long one) and scored from silence. Corrupt
clips are skipped, named and counted. Prints the accuracy, per class, and the confusion matrix
(or one JSON object with `accuracy`, `per_class`, `n`, `support`, `confusion`,
`skipped_corrupt`); --png also draws the matrix (needs matplotlib).
"""
import argparse
import json
import sys
from pathlib import Path

from app.clip_accuracy import ClipScorer, evaluate, print_table, save_confusion_png
from app.spotter import DEFAULT_MODEL, KeywordModel
from corpus.splits import SPLITS


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rotkws eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--model", default=None, help=f"rotkws ONNX file (default: {DEFAULT_MODEL})")
    which.add_argument("--checkpoint", help="a .ckpt written by rotkws train (needs the train extra)")
    p.add_argument("--data", required=True, help="folder in the Speech Commands layout")
    p.add_argument("--split", choices=("all",) + SPLITS, default="all",
                   help="only this split (default: all): the folder's lists, else the speaker hash of corpus/splits.py")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--png", help="also draw the confusion matrix into this PNG file (needs matplotlib)")
    return p.parse_args(argv)


def scorer(args) -> ClipScorer:
    if args.checkpoint is None:
        return KeywordModel(args.model)
    try:   # only for --checkpoint: `rotkws eval --model` never imports torch
        from training.checkpoint_scorer import CheckpointScorer
    except ImportError as e:
        raise ValueError(f"--checkpoint needs PyTorch and the train extra (pip install -e '.[train]'), "
                         f"which this environment lacks ({e}); export the checkpoint and use --model") from None
    return CheckpointScorer(Path(args.checkpoint))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        result = evaluate(scorer(args), Path(args.data), args.split)
        if args.png:
            save_confusion_png(result, Path(args.png))
            result["png"] = args.png
    except ValueError as e:                     # ModelError, ClipError, a checkpoint that does not load
        print(f"rotkws eval: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
