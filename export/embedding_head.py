"""A head on the frozen speech embedding (training/embedding_head.py) as a head file
(app/wakehead.py), checked against PyTorch, and its threshold chosen as `enroll` chooses one: on
the validation speakers' stream in the bench's mix, the lowest with ≤ fa_per_hour false accepts
per hour under the file's rule (raw score, 1 s refractory: the peers' rule). The validation
stream's embeddings are cached per machine (export/wake_threshold.py: Validation.embeddings).
"""
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

from app.detection import REFRACTORY_S
from app.embedding import EMBED_DIM, FILES, HOP, SAMPLE_RATE
from app.wakehead import HEAD_HOPS, HEAD_TASK, HEAD_THRESHOLDS, HeadModel

from .wake_threshold import Validation
from .onnx import set_metadata

HEAD_RULE = {"smoothing": 1, "min_hops": 1, "refractory_s": REFRACTORY_S}   # the peers' rule
TOLERANCE = 1e-5              # |ONNX − PyTorch| on the head's probabilities


def export_head(head: torch.nn.Module, path: Path, meta: dict) -> Path:
    """The head as ONNX, `embeddings` (B, HEAD_HOPS, EMBED_DIM) → `score` (B,), checked against
    PyTorch, its metadata naming the embedding files and the rule."""
    x = torch.randn(3, HEAD_HOPS, EMBED_DIM)
    wrapped = torch.nn.Sequential(head, torch.nn.Sigmoid()).eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(wrapped, (x,), str(path), input_names=["embeddings"], output_names=["score"],
                      dynamic_axes={"embeddings": {0: "batch"}, "score": {0: "batch"}}, dynamo=False)
    proto = onnx.load(str(path))
    set_metadata(proto, {k: json.dumps(v) for k, v in (meta | {
        "task": HEAD_TASK, "embedding": FILES, "head_hops": HEAD_HOPS, "hop_samples": HOP,
        "sample_rate": SAMPLE_RATE}).items()})
    onnx.save(proto, str(path))
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"embeddings": x.numpy()})[0]
    with torch.no_grad():
        diff = float(np.abs(got - wrapped(x).numpy()).max())
    if diff > TOLERANCE:
        raise ValueError(f"{path}: ONNX and PyTorch differ by {diff:.2e} (> {TOLERANCE})")
    return path


def choose_threshold(path: Path, validation: Validation, fa_per_hour: float) -> dict:
    """The head file's threshold for `fa_per_hour` on the validation stream of its phrase, and what
    that stream measured."""
    model = HeadModel(path)
    scores = model.scores(validation.embeddings(model.ears))
    times = np.arange(1, len(scores) + 1) * HOP / SAMPLE_RATE
    counts = validation.false_accepts(times, np.stack([scores, 1 - scores], 1), model.labels, (model.phrase,),
                                      HEAD_THRESHOLDS, {k: HEAD_RULE[k] for k in ("smoothing", "min_hops", "refractory_s")})
    return validation.threshold(counts, fa_per_hour, top=float(HEAD_THRESHOLDS[-1]))


def write_threshold(path: Path, chosen: dict, record: dict | None = None) -> None:
    """The chosen threshold into the head file's `detection` (and `record` as its `enroll`)."""
    proto = onnx.load(str(path))
    set_metadata(proto, {"detection": json.dumps(HEAD_RULE | {"threshold": chosen["threshold"]})}
                 | ({"enroll": json.dumps(record)} if record is not None else {}))
    onnx.save(proto, str(path))
