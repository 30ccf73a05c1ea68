"""`python -m export.cascade WAKE.onnx HEAD.onnx -o OUT.onnx`: a wake file that names its verifier
(app/cascade.py), both thresholds chosen on `enroll`'s validation stream of its phrase:

1. propose: the lowest of the sweep at which the wake file's own rule proposes at most
   PROPOSALS_PER_HOUR times an hour outside the phrase's utterances (what the head stage may cost;
   every proposal counted);
2. confirm: with those proposals, the lowest head score at which the cascade keeps to
   --fa-per-hour false accepts per hour, as `enroll` chooses a threshold (export/enroll.py).

The head file is copied beside OUT as OUT's stem + HEAD_SUFFIX; OUT's metadata `verifier` names it.
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

from app.cascade import cascade_detections
from app.embedding import HOP, SAMPLE_RATE
from app.spotter import KeywordModel
from app.sweep import THRESHOLDS, model_rule, sweep_detections
from app.wake_rule import VALIDATION_FA_PER_HOUR
from app.wakehead import HEAD_THRESHOLDS, HeadModel
from corpus.folders import default_data_root
from corpus.labels import OTHER
from evaluation.speech import noise_bed

from .embedding_head import HEAD_RULE, choose_threshold, export_head, write_threshold
from .onnx import read_metadata, write_metadata
from .wake_threshold import Validation

PROPOSALS_PER_HOUR = 60.0     # the head stage's budget on validation speech: ~40 ms of CPU each
HEAD_SUFFIX = ".head.onnx"


def choose(wake: KeywordModel, head: HeadModel, validation: Validation, fa_per_hour: float) -> dict:
    hours = validation.hours
    times, scores = validation.track(wake)
    sweep = sweep_detections(times, scores, wake.labels, wake.keywords, THRESHOLDS, **model_rule(wake))
    proposed = {th: validation.outside([d.time_s for d in found]) for th, found in sweep.items()}
    propose = min((th for th in sorted(proposed) if all(len(proposed[t]) <= PROPOSALS_PER_HOUR * hours
                                                          for t in proposed if t >= th)), default=max(proposed))
    proposals = np.array([d.time_s for d in sweep[propose]])
    head_scores = head.scores(validation.embeddings(head.ears))
    head_times = np.arange(1, len(head_scores) + 1) * HOP / SAMPLE_RATE
    fas = {float(c): validation.count(cascade_detections(proposals, head_times, head_scores, c)) for c in HEAD_THRESHOLDS}
    chosen = validation.threshold(fas, fa_per_hour, top=float(HEAD_THRESHOLDS[-1]))
    return {"propose": float(propose), "confirm": chosen["threshold"], "validation_stream_hours": round(hours, 3),
            "proposals_per_hour": round(len(proposals) / hours, 1),
            "validation_stream_false_accepts": chosen["validation_stream_false_accepts"]}


def attach(wake_path: Path, head_path: Path, out: Path, data: Path, fa_per_hour: float, hours: float = 0.0,
           validation: Validation | None = None) -> dict:
    """Both thresholds chosen (on `validation`, or the stream `enroll` chose the wake file's on: its
    seed, `hours`), the head copied beside `out`, `out` written naming it."""
    wake, head = KeywordModel(wake_path), HeadModel(head_path)
    if head.phrase != wake.keywords[0]:
        raise ValueError(f"{head_path} listens for {head.phrase!r}, {wake_path} for {wake.keywords[0]!r}")
    if validation is None:
        seed = json.loads(read_metadata(wake_path).get("enroll", "{}")).get("config", {}).get("seed", 0)
        validation = Validation.of(data, noise_bed(data), hours, np.random.default_rng(seed), wake.keywords[0])
    chosen = choose(wake, head, validation, fa_per_hour)
    verifier = out.with_name(out.stem + HEAD_SUFFIX)
    if head_path.resolve() != verifier.resolve():
        shutil.copyfile(head_path, verifier)
    chosen = {"head": verifier.name, **chosen}
    write_metadata(wake_path, out, {"verifier": chosen})
    return chosen


def attach_head(head: torch.nn.Module, head_meta: dict, wake_path: Path, data: Path, validation: Validation,
                fa_per_hour: float) -> dict:
    """`rotkws enroll`'s verifier: the trained head written beside the wake file, its own threshold
    chosen as a head file's is, then both of the cascade's, all on the wake file's `validation`."""
    phrase = KeywordModel(wake_path).keywords[0]
    verifier = wake_path.with_name(wake_path.stem + HEAD_SUFFIX)
    export_head(head, verifier, head_meta | {"labels": [phrase, OTHER], "detection": HEAD_RULE | {"threshold": 0.5}})
    write_threshold(verifier, choose_threshold(verifier, validation, fa_per_hour))
    return attach(wake_path, verifier, wake_path, data, fa_per_hour, validation=validation)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m export.cascade", description=__doc__)
    p.add_argument("wake")
    p.add_argument("head")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--data", default=None)
    p.add_argument("--fa-per-hour", type=float, default=VALIDATION_FA_PER_HOUR)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    data = Path(args.data).resolve() if args.data else default_data_root()
    print(json.dumps(attach(Path(args.wake), Path(args.head), Path(args.output), data, args.fa_per_hour)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
