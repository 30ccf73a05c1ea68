"""`rotkws eval (--model M | --checkpoint CKPT) --data DIR [--split S] [--json] [--png FILE]`.

Clip accuracy of an ONNX model (the torch-free runtime) or of a checkpoint of `rotkws train`
(PyTorch; needs the train extra), one program for both: every clip of a folder in the Speech
Commands layout (corpus/clips.py: words that are not labels count as `_unknown_`), or of one split
of it (the folder's lists, else the speaker hash of corpus/splits.py); clips at another rate are
resampled; each is fitted to one second (zeros on both sides of a short clip, the loudest second
of a long one) and scored from silence. Corrupt clips are skipped, named and counted. Prints the
accuracy, per class, and the confusion matrix (or one JSON object with `accuracy`, `per_class`,
`n`, `support`, `confusion`, `skipped_corrupt`); --png also draws the matrix (needs matplotlib).
"""
import argparse
import importlib
import json
import sys
import warnings
from pathlib import Path
from typing import Protocol

import numpy as np

from app.spotter import DEFAULT_MODEL, KeywordModel
from corpus.clips import ClipError, fit_length, read_audio
from corpus.rate import resample
from corpus.splits import SPLITS, folder_splits

CLIP_SECONDS = 1.0    # Speech Commands clips; what the models are trained on
BATCH = 64            # clips per call of the scorer


class ClipScorer(Protocol):
    """What eval scores with: a KeywordModel (ONNX), or training.evaluate.CheckpointScorer."""

    labels: tuple[str, ...]
    sample_rate: int

    def clip_scores(self, audio: np.ndarray) -> np.ndarray:
        """(n, samples) float32 clips → (n, classes) probabilities, each scored from silence."""


def load_clips(clips, sample_rate: int) -> tuple[list, np.ndarray]:
    """The clips that read and their audio (n, CLIP_SECONDS · sample_rate); corrupt ones warned."""
    kept, audio = [], []
    samples = int(CLIP_SECONDS * sample_rate)
    for clip in clips:
        try:
            x, rate = read_audio(clip.path)
        except ClipError as e:
            warnings.warn(f"skipping a corrupt clip: {e}", stacklevel=2)
            continue
        x = resample(x, rate, sample_rate)
        kept.append(clip)
        audio.append(fit_length(x, samples))
    return kept, np.stack(audio) if audio else np.zeros((0, samples), np.float32)


def summarise(labels, truth: np.ndarray, pred: np.ndarray) -> dict:
    n = len(labels)
    confusion = np.zeros((n, n), np.int64)                          # rows: truth, columns: prediction
    np.add.at(confusion, (truth, pred), 1)
    support = confusion.sum(1)
    per_class = {lab: (float(confusion[i, i] / support[i]) if support[i] else None)
                 for i, lab in enumerate(labels)}
    return {"accuracy": float(np.trace(confusion) / max(1, len(truth))), "n": int(len(truth)),
            "per_class": per_class, "support": {lab: int(s) for lab, s in zip(labels, support)},
            "confusion": confusion.tolist()}


def evaluate(model: ClipScorer, data: Path, split: str = "all") -> dict:
    labels = list(model.labels)
    splits = folder_splits(data, labels)
    listed = [c for s in SPLITS if split in ("all", s) for c in splits[s]]
    clips, audio = load_clips(listed, model.sample_rate)
    if not clips:
        raise ClipError(f"no readable clips in {data}")
    scores = np.concatenate([model.clip_scores(audio[i:i + BATCH]) for i in range(0, len(audio), BATCH)])
    truth = np.array([labels.index(c.label) for c in clips])
    return summarise(labels, truth, scores.argmax(1)) | {
        "data": str(data), "split": split, "model": str(model.path), "labels": labels,
        "skipped_corrupt": len(listed) - len(clips)}


def print_table(result: dict) -> None:
    labels = result["labels"]
    print(f"accuracy {result['accuracy']:.4f} on {result['n']} clips of {result['data']} ({result['split']}) "
          f"({result['skipped_corrupt']} corrupt skipped)")
    for lab in labels:
        acc = result["per_class"][lab]
        print(f"  {lab:<12}{'—' if acc is None else f'{acc:.3f}':>7}  n={result['support'][lab]}")
    width = max(4, max(len(str(v)) for row in result["confusion"] for v in row))
    print("confusion (rows true, columns predicted, in label order):")
    for lab, row in zip(labels, result["confusion"]):
        print(f"  {lab:<12}" + " ".join(f"{v:>{width}}" for v in row))


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
    try:   # by name, and only for --checkpoint: the runtime itself never imports torch
        checkpoints = importlib.import_module("training.evaluate")
    except ImportError as e:
        raise ValueError(f"--checkpoint needs PyTorch and the train extra (pip install -e '.[train]'), "
                         f"which this environment lacks ({e}); export the checkpoint and use --model") from None
    return checkpoints.CheckpointScorer(Path(args.checkpoint))


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


def save_confusion_png(result: dict, path: Path) -> None:
    """The confusion matrix of an eval result as a PNG (matplotlib: the train extra's)."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise ValueError("--png needs matplotlib (pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels, m = result["labels"], np.array(result["confusion"])
    fig, ax = plt.subplots(figsize=(1 + 0.5 * len(labels), 1 + 0.45 * len(labels)))
    ax.imshow(m, cmap="Blues")
    ax.set_xticks(range(len(labels)), labels, rotation=90)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    for (i, j), v in np.ndenumerate(m):
        if v:
            ax.text(j, i, str(v), ha="center", va="center", fontsize=7,
                    color="white" if v > m.max() / 2 else "black")
    ax.set_title(f"accuracy {result['accuracy']:.3f} on {result['n']} clips")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
