"""Clip accuracy, as `rotkws eval` reports it (the command: rotkws/eval_cli.py): every clip of a
folder in the Speech Commands layout (corpus/clips.py: words that are not labels count as
`_unknown_`), or of one split of it (the folder's lists, else the speaker hash of
corpus/splits.py); clips at another rate are resampled; each is fitted to one second (zeros on
both sides of a short clip, the loudest second of a long one) and scored from silence by a
`ClipScorer`: a KeywordModel (ONNX, this runtime) or a checkpoint's network
(training/checkpoint_scorer.py). Corrupt clips are skipped, named and counted. The accuracy, per
class, and the confusion matrix; `save_confusion_png` draws the matrix (needs matplotlib).
"""
import warnings
from pathlib import Path
from typing import Protocol

import numpy as np

from corpus.clips import ClipError, fit_length, read_audio
from corpus.rate import resample
from corpus.splits import SPLITS, folder_splits

CLIP_SECONDS = 1.0    # Speech Commands clips; what the models are trained on
BATCH = 64            # clips per call of the scorer


class ClipScorer(Protocol):
    """What eval scores with: a KeywordModel (ONNX), or training.checkpoint_scorer.CheckpointScorer."""

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
