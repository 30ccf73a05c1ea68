"""`python -m export.embedding_head TEXT -o HEAD.onnx [--seed N]`: a wake word on the frozen speech
embedding (the recipe: training/embedding_head.py), exported as a head file (app/wakehead.py),
its threshold chosen as `enroll` chooses one: on the validation speakers' stream in the bench's
mix, the lowest with ≤ --fa-per-hour false accepts per hour under the file's rule (raw score,
1 s refractory: the peers' rule). The validation stream's embeddings are cached per machine.
"""
import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from app.detection import REFRACTORY_S
from app.embedding import EMBED_DIM, FILES, HOP, SAMPLE_RATE
from app.wakehead import HEAD_TASK, HEAD_THRESHOLDS, HeadModel
from corpus.folders import default_data_root
from corpus.labels import OTHER
from app.sweep import sweep_detections
from training import embedding_head as recipe
from training import progress, tts
from app.wake_rule import VALIDATION_FA_PER_HOUR
from training.enroll import EnrollConfig

from .wake_threshold import stream_threshold, validation_stream
from .onnx import set_metadata

HEAD_RULE = {"smoothing": 1, "min_hops": 1, "refractory_s": REFRACTORY_S}   # the peers' rule
TOLERANCE = 1e-5              # |ONNX − PyTorch| on the head's probabilities


def export_head(head: recipe.Head, path: Path, meta: dict) -> Path:
    """The head as ONNX, `embeddings` (B, HEAD_HOPS, EMBED_DIM) → `score` (B,), checked against
    PyTorch, its metadata naming the embedding files and the rule."""
    import onnx
    x = torch.randn(3, recipe.HEAD_HOPS, EMBED_DIM)
    wrapped = torch.nn.Sequential(head, torch.nn.Sigmoid()).eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(wrapped, (x,), str(path), input_names=["embeddings"], output_names=["score"],
                      dynamic_axes={"embeddings": {0: "batch"}, "score": {0: "batch"}}, dynamo=False)
    proto = onnx.load(str(path))
    set_metadata(proto, {k: json.dumps(v) for k, v in (meta | {
        "task": HEAD_TASK, "embedding": FILES, "head_hops": recipe.HEAD_HOPS, "hop_samples": HOP,
        "sample_rate": SAMPLE_RATE}).items()})
    onnx.save(proto, str(path))
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"embeddings": x.numpy()})[0]
    with torch.no_grad():
        diff = float(np.abs(got - wrapped(x).numpy()).max())
    if diff > TOLERANCE:
        raise ValueError(f"{path}: ONNX and PyTorch differ by {diff:.2e} (> {TOLERANCE})")
    return path


def cached_embeddings(model: HeadModel, audio: np.ndarray) -> np.ndarray:
    """The stream's embeddings, from the cache where an earlier run made them."""
    key = hashlib.sha1(recipe.CACHE_VERSION.encode() + audio.tobytes()).hexdigest()
    path = recipe.cache_folder() / f"stream-{key}.npy"
    if path.is_file():
        return np.load(path)
    e = model.ears.embed(audio)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, e)
    return e


def choose_threshold(path: Path, data: Path, noise: np.ndarray, cfg: EnrollConfig, rng) -> dict:
    model = HeadModel(path)
    audio, hours = validation_stream(data, noise, cfg.validation_hours, rng, model.phrase)   # as export/cascade.py's
    e = cached_embeddings(model, audio)
    scores = model.scores(e)
    times = np.arange(1, len(scores) + 1) * HOP / SAMPLE_RATE
    sweep = sweep_detections(times, np.stack([scores, 1 - scores], 1), model.labels, (model.phrase,),
                             HEAD_THRESHOLDS, **{k: HEAD_RULE[k] for k in ("smoothing", "min_hops", "refractory_s")})
    counts = {th: len(d) for th, d in sweep.items()}
    th = stream_threshold(counts, hours, cfg.fa_per_hour, top=float(HEAD_THRESHOLDS[-1]))
    return {"threshold": th, "fa_per_hour": cfg.fa_per_hour, "validation_stream_hours": round(hours, 3),
            "validation_stream_false_accepts": counts[min(counts, key=lambda t: abs(t - th))]}


def enroll_head(phrase: str, output: Path, data: Path, cfg: EnrollConfig, head_cfg: recipe.HeadConfig) -> dict:
    started = time.perf_counter()
    head, meta, items = recipe.fit(phrase, data, cfg, head_cfg)
    export_head(head, output, meta | {"labels": [phrase, OTHER], "detection": HEAD_RULE | {"threshold": 0.5}})
    with progress.stage("threshold"):
        chosen = choose_threshold(output, data, items.noise, cfg, np.random.default_rng(cfg.seed))
    meta["enroll"] |= chosen | {"seconds_with_export": round(time.perf_counter() - started, 1)}
    import onnx
    proto = onnx.load(str(output))
    set_metadata(proto, {"detection": json.dumps(HEAD_RULE | {"threshold": chosen["threshold"]}),
                         "enroll": json.dumps(meta["enroll"])})
    onnx.save(proto, str(output))
    return meta["enroll"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m export.embedding_head", description=__doc__)
    p.add_argument("phrase")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--data", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=recipe.HeadConfig.steps)
    p.add_argument("--copies", type=int, default=recipe.HeadConfig.copies)
    p.add_argument("--fa-per-hour", type=float, default=VALIDATION_FA_PER_HOUR)
    p.add_argument("--progress", choices=progress.MODES, default="bar")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(1)
    progress.configure(args.progress)
    phrase = tts.check_phrase(args.phrase)
    data = Path(args.data).resolve() if args.data else default_data_root()
    cfg = EnrollConfig(seed=args.seed, fa_per_hour=args.fa_per_hour, images=0)
    report = enroll_head(phrase, Path(args.output), data, cfg,
                         recipe.HeadConfig(seed=args.seed, steps=args.steps, copies=args.copies))
    print(json.dumps({k: report[k] for k in ("threshold", "validation_stream_false_accepts", "rows", "phrase_rows",
                                             "final_loss", "seconds_with_export")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
