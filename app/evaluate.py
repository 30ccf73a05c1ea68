"""`rotkws eval --model M --data DIR [--split S] [--json]`: clip accuracy of an ONNX model, no torch.

Every clip of a folder (or of one split of it: app/splits.py) in the Speech Commands layout (app/clips.py: words that are not labels
count as `_unknown_`), each fitted to one second as training's eval fits it (zeros on both
sides of a short clip, the loudest second of a long one), scored in one call from silence. The
JSON has training's eval keys: `accuracy`, `per_class`, `n` (and `support`, `confusion`).
"""
import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import soxr

from app.clips import ClipError, fit_length, read_audio
from app.splits import SPLITS, folder_splits
from app.spotter import DEFAULT_MODEL, KeywordModel

CLIP_SECONDS = 1.0    # Speech Commands clips; what the models are trained on
BATCH = 64            # clips per onnxruntime call


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
        if rate != sample_rate:
            x = soxr.resample(x, rate, sample_rate).astype(np.float32)
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


def evaluate(model: KeywordModel, data: Path, split: str = "all") -> dict:
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
    print(f"accuracy {result['accuracy']:.4f} on {result['n']} clips of {result['data']} ({result['split']}) "
          f"({result['skipped_corrupt']} corrupt skipped)")
    for lab in result["labels"]:
        acc = result["per_class"][lab]
        print(f"  {lab:<12}{'—' if acc is None else f'{acc:.3f}':>7}  n={result['support'][lab]}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rotkws eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help=f"rotkws ONNX file (default: {DEFAULT_MODEL})")
    p.add_argument("--data", required=True, help="folder in the Speech Commands layout")
    p.add_argument("--split", choices=("all",) + SPLITS, default="all",
                   help="only this split: the folder's lists, else the speaker hash of app/splits.py")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        result = evaluate(KeywordModel(args.model), Path(args.data), args.split)
    except ValueError as e:                     # ModelError, ClipError
        print(f"rotkws eval: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
