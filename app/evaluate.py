"""`rotkws eval --model M --data DIR [--json]`: clip accuracy of an ONNX model, no torch.

Every clip of a folder in the Speech Commands layout (app/clips.py: words that are not labels
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

from app.clips import ClipError, list_clips, read_audio
from app.spotter import DEFAULT_MODEL, KeywordModel

CLIP_SECONDS = 1.0    # Speech Commands clips; what the models are trained on
BATCH = 64            # clips per onnxruntime call


def fit_length(x: np.ndarray, n: int) -> np.ndarray:
    """Pad a short clip with zeros on both sides; crop a long one to its loudest n samples
    (the same fitting as training/data.py, so both evals score the same audio)."""
    if len(x) < n:
        left = (n - len(x)) // 2
        return np.pad(x, (left, n - len(x) - left))
    energy = np.concatenate([[0.0], np.cumsum(x.astype(np.float64) ** 2)])
    start = int(np.argmax(energy[n:] - energy[:-n]))
    return x[start:start + n]


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


def evaluate(model: KeywordModel, data: Path) -> dict:
    labels = list(model.labels)
    listed = list_clips(data, labels)
    clips, audio = load_clips(listed, model.sample_rate)
    if not clips:
        raise ClipError(f"no readable clips in {data}")
    scores = np.concatenate([model.clip_scores(audio[i:i + BATCH]) for i in range(0, len(audio), BATCH)])
    truth = np.array([labels.index(c.label) for c in clips])
    return summarise(labels, truth, scores.argmax(1)) | {
        "data": str(data), "model": str(model.path), "labels": labels,
        "skipped_corrupt": len(listed) - len(clips)}


def print_table(result: dict) -> None:
    print(f"accuracy {result['accuracy']:.4f} on {result['n']} clips of {result['data']} "
          f"({result['skipped_corrupt']} corrupt skipped)")
    for lab in result["labels"]:
        acc = result["per_class"][lab]
        print(f"  {lab:<12}{'—' if acc is None else f'{acc:.3f}':>7}  n={result['support'][lab]}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rotkws eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help=f"rotkws ONNX file (default: {DEFAULT_MODEL})")
    p.add_argument("--data", required=True, help="folder in the Speech Commands layout")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        result = evaluate(KeywordModel(args.model), Path(args.data))
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
