"""A checkpoint of `rotkws train` as a clip scorer (`rotkws eval --checkpoint`, rotkws/eval_cli.py),
and the helpers the bench scores its training runs with.
"""
from pathlib import Path

import numpy as np
import torch
from torch import nn

from corpus.clips import ClipError, list_clips
from model.classifiers import load_checkpoint

from .data import folder_splits


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


class CheckpointScorer:
    """app.clip_accuracy's ClipScorer for a checkpoint: the PyTorch network, each clip in one call."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.net = load_network(self.path)
        self.labels = tuple(self.net.cfg.labels)
        self.sample_rate = self.net.cfg.sample_rate

    @torch.no_grad()
    def clip_scores(self, audio: np.ndarray) -> np.ndarray:
        """(n, samples) float32 → (n, classes) softmax probabilities."""
        logits = self.net(torch.from_numpy(np.ascontiguousarray(audio, np.float32)))[0]
        return torch.softmax(logits, -1).numpy()
