"""`rotkws eval --checkpoint CKPT --data DIR [--split testing|validation|all] [--json]`.

Clip accuracy of a PyTorch checkpoint on a folder in the Speech Commands layout, read with the
same conventions as training (app/clips.py: words that are not labels count as `_unknown_`; the
folder's split lists, else the speaker split of app/splits.py). Prints accuracy, per-class
accuracy and the confusion matrix, and saves the matrix as a PNG.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

from app.clips import ClipError, list_clips
from app.evaluate import summarise
from model.classifiers import load_checkpoint

from .data import folder_splits, read_clips

SPLIT_CHOICES = ("testing", "validation", "training", "all")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rotkws eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="a .ckpt written by rotkws train")
    p.add_argument("--data", required=True, help="folder in the Speech Commands layout")
    p.add_argument("--split", default="testing", choices=SPLIT_CHOICES,
                   help="which speaker-disjoint part of the folder (default: testing)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--png", help="where to save the confusion matrix (default: beside the checkpoint)")
    p.add_argument("--batch-size", type=int, default=64)
    return p.parse_args(argv)


def load_network(path: Path) -> nn.Module:
    """The checkpoint's classifier (either arch: model/classifiers.py), in eval mode."""
    try:
        return load_checkpoint(path)[0]
    except ValueError as e:
        raise ClipError(str(e)) from None


def select_clips(folder: Path, labels, split: str):
    if split == "all":
        return list_clips(folder, labels)
    return folder_splits(folder, labels)[split]


@torch.no_grad()
def predict(net: nn.Module, audio: np.ndarray, batch_size: int) -> np.ndarray:
    """audio: (n, samples) float32 → predicted class indices (n,)."""
    out = [net(torch.from_numpy(audio[i:i + batch_size]))[0].argmax(1)
           for i in range(0, len(audio), batch_size)]
    return torch.cat(out).numpy() if out else np.zeros(0, np.int64)


def save_confusion_png(result: dict, labels, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    m = np.array(result["confusion"])
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


def print_tables(result: dict, labels) -> None:
    print(f"accuracy {result['accuracy']:.4f} on {result['n']} clips ({result['split']} split "
          f"of {result['data']}; {result['skipped_corrupt']} corrupt skipped)")
    for lab in labels:
        acc = result["per_class"][lab]
        print(f"  {lab:<12}{'—' if acc is None else f'{acc:.3f}':>7}  n={result['support'][lab]}")
    width = max(4, max(len(str(v)) for row in result["confusion"] for v in row))
    print("confusion (rows true, columns predicted, in label order):")
    for lab, row in zip(labels, result["confusion"]):
        print(f"  {lab:<12}" + " ".join(f"{v:>{width}}" for v in row))
    print(f"confusion matrix: {result['png']}")


def evaluate(checkpoint: Path, data: Path, split: str, batch_size: int = 64) -> dict:
    net = load_network(checkpoint)
    labels = list(net.cfg.labels)
    rate = net.cfg.sample_rate
    clips, audio, skipped = read_clips(select_clips(data, labels, split), rate, rate)
    if not clips:
        raise ClipError(f"no clips in the {split} split of {data}")
    audio = np.stack(audio)
    truth = np.array([labels.index(c.label) for c in clips])
    result = summarise(labels, truth, predict(net, audio, batch_size))
    return result | {"split": split, "data": str(data), "checkpoint": str(checkpoint),
                     "labels": labels, "skipped_corrupt": len(skipped)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    checkpoint, data = Path(args.checkpoint), Path(args.data)
    try:
        result = evaluate(checkpoint, data, args.split, args.batch_size)
    except ClipError as e:
        print(f"rotkws eval: {e}", file=sys.stderr)
        return 2
    png = Path(args.png) if args.png else checkpoint.with_name(
        f"{checkpoint.stem}_confusion_{data.name}_{args.split}.png")
    result["png"] = str(png)
    save_confusion_png(result, result["labels"], png)
    if args.json:
        print(json.dumps(result))
    else:
        print_tables(result, result["labels"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
