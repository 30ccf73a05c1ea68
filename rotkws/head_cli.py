"""`python -m rotkws.head_cli TEXT -o HEAD.onnx [--seed N]`: a wake word on the frozen speech
embedding alone (the recipe: training/embedding_head.py; docs/ears.md), exported as a head file
(app/wakehead.py), its threshold chosen on the validation stream (export/embedding_head.py). The
bench's head rows were made by it; `rotkws enroll` trains the same heads beside a wake
file.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from app.wake_rule import VALIDATION_FA_PER_HOUR
from corpus.folders import default_data_root
from corpus.labels import OTHER
from export.embedding_head import HEAD_RULE, choose_threshold, export_head, write_threshold
from export.wake_threshold import Validation
from training import embedding_head as recipe
from training import progress, tts
from training.enroll import EnrollConfig


def enroll_head(phrase: str, output: Path, data: Path, cfg: EnrollConfig, head_cfg: recipe.HeadConfig) -> dict:
    started = time.perf_counter()
    head, meta, items = recipe.fit(phrase, data, cfg, head_cfg)
    export_head(head, output, meta | {"labels": [phrase, OTHER], "detection": HEAD_RULE | {"threshold": 0.5}})
    with progress.stage("threshold"):
        stream = Validation.of(data, items.noise, cfg.validation_hours, np.random.default_rng(cfg.seed), phrase)
        chosen = choose_threshold(output, stream, cfg.fa_per_hour)
    meta["enroll"] |= chosen | {"seconds_with_export": round(time.perf_counter() - started, 1)}
    write_threshold(output, chosen, meta["enroll"])
    return meta["enroll"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m rotkws.head_cli", description=__doc__)
    p.add_argument("phrase")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--data", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=recipe.HeadConfig.steps)
    p.add_argument("--copies", type=int, default=recipe.HeadConfig.copies)
    p.add_argument("--heads", type=int, default=recipe.HeadConfig.heads,
                   help="heads trained on the same examples, their logits averaged in the one file")
    p.add_argument("--fa-per-hour", type=float, default=VALIDATION_FA_PER_HOUR)
    p.add_argument("--progress", choices=progress.MODES, default="bar")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(1)
    progress.configure(args.progress)
    phrase = tts.check_phrase(args.phrase)
    data = Path(args.data).resolve() if args.data else default_data_root()
    cfg = EnrollConfig(seed=args.seed, fa_per_hour=args.fa_per_hour, images=0)
    report = enroll_head(phrase, Path(args.output), data, cfg,
                         recipe.HeadConfig(seed=args.seed, steps=args.steps, copies=args.copies,
                                           heads=args.heads))
    print(json.dumps({k: report[k] for k in ("threshold", "validation_stream_false_accepts", "rows", "phrase_rows",
                                             "final_loss", "seconds_with_export")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
