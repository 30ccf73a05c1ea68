"""Small random-weight classifiers, exported once and shared by test_export.py and test_runtime.py.

An export traces the network symbolically and takes 5–15 s of CPU per model here, so each
verified file is kept in pytest's cache under a key made of everything its bytes depend on
(the sources of model/ and export/, the configuration, the torch and onnx versions); a change
to any of them exports afresh, and `pytest --cache-clear` forces it.
"""
import hashlib
import shutil
from pathlib import Path

import onnx
import torch

from export.onnx import export_onnx
from model import RotRNNClassifier, RotRNNConfig

REPO = Path(__file__).resolve().parents[1]
LABELS = ("yes", "no", "up", "_unknown_", "_silence_")   # real words, so tests/data/clips map onto them
FILTERBANK = dict(frontend="filterbank", frontend_stride=160, frontend_kernel=400, frontend_filters=8, chunk=16)
KINDS = {   # the streaming model scaled down (its front-end norm too); stride 1; a clip classifier
    "filterbank": dict(FILTERBANK, layers=2, frontend_norm="batch"),
    "linear": dict(frontend="linear", chunk=64, layers=1),
    "bidirectional": dict(FILTERBANK, layers=1, bidirectional=True, frontend_norm="frame"),
    "logmel": dict(frontend="logmel", chunk=16, layers=2),   # the default model's kind: a stream graph
}
MAX_SAMPLES = {"filterbank": 16_000, "linear": 3_200, "bidirectional": 16_000, "logmel": 1_600}
SEED = 0
META = {"training_data": "random weights (tests)", "accuracy": {"note": "untrained"},
        "detection": {"threshold": 0.9}}    # what every test export carries as provenance


def build(kind: str) -> RotRNNClassifier:
    torch.manual_seed(SEED)
    cfg = RotRNNConfig(labels=LABELS, d_model=16, state=16, heads=4, dropout=0.0, **KINDS[kind])
    return RotRNNClassifier(cfg).eval()


def source_key(*parts) -> str:
    h = hashlib.sha256(repr((parts, torch.__version__, onnx.__version__)).encode())
    for folder in ("model", "export"):
        for path in sorted((REPO / folder).glob("*.py")):
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def exported(kind: str, cache_dir: Path, max_samples: int | None = None, **meta) -> tuple[RotRNNClassifier, Path]:
    """(the network, its verified ONNX file), from the cache when nothing it depends on changed."""
    net = build(kind)
    max_samples = max_samples or MAX_SAMPLES[kind]
    path = Path(cache_dir) / f"{kind}-{max_samples}-{source_key(kind, KINDS[kind], max_samples, meta)}.onnx"
    if not path.is_file():
        tmp = path.with_name("tmp-" + path.name)
        export_onnx(net, tmp, max_samples=max_samples, meta=meta or None)
        shutil.move(tmp, path)
        for stale in Path(cache_dir).glob(f"*{kind}-{max_samples}-*.onnx"):   # older sources' files
            if stale != path:
                stale.unlink()
    return net, path
