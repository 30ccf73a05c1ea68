"""`rotkws export CHECKPOINT -o model.onnx [--int8] [--data DIR [--split S]] [--max-samples N]`.

Loads a checkpoint written by `rotkws train` (a RotRNN or a DS-CNN), writes one ONNX file with
its metadata (streaming for a causal RotRNN, a clip classifier otherwise), verifies it against
PyTorch (random audio, real clips from --data, one call vs uneven pieces) and fails if they
differ by more than 1e-4. With --data the file's clip accuracy there (on --split of it: the
held-out speakers are `testing`) is measured and written into its metadata; --int8 also writes
`<name>.int8.onnx` beside it and reports the accuracy change on the --data clips.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnx

from model.classifiers import load_checkpoint

from .onnx import MAX_SAMPLES, STREAM_GRAPH_MAX_SAMPLES, ExportError, export_onnx, read_metadata, set_metadata
from .verify import VerificationError

VERIFY_CLIPS = 24   # real clips from --data that the verification also runs


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rotkws export", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="a .ckpt written by rotkws train")
    p.add_argument("-o", "--output", required=True, help="the .onnx file to write")
    p.add_argument("--int8", action="store_true", help="also write a dynamically quantised int8 file")
    p.add_argument("--data", help="folder in the Speech Commands layout: verification clips and accuracy")
    p.add_argument("--split", choices=("all", "training", "validation", "testing"), default="all",
                   help="which split of --data the accuracy is measured on (corpus/splits.py)")
    p.add_argument("--max-samples", type=int, default=None,
                   help=f"longest single call the graph accepts (default: {STREAM_GRAPH_MAX_SAMPLES} "
                        f"for a causal log-mel network's stream graph, else {MAX_SAMPLES} = 1 s)")
    return p.parse_args(argv)


def provenance(entry: dict) -> dict:
    """What the checkpoint says about its training, for the ONNX metadata."""
    metrics = entry.get("metrics", {})
    meta = {"training_data": entry.get("data", "unknown"), "task": entry.get("task", "unknown"),
            "accuracy": {"checkpoint": {k: v for k, v in metrics.items() if k.endswith("/acc")}}}
    if "detection" in entry:
        meta["detection"] = entry["detection"]
    return meta


def real_clips(data: Path | None, labels) -> list[np.ndarray]:
    if data is None:
        return []
    from corpus.clips import list_clips, read_audio
    clips = list_clips(data, labels)
    step = max(1, len(clips) // VERIFY_CLIPS)                    # spread over the classes
    return [read_audio(c.path)[0] for c in clips[::step][:VERIFY_CLIPS]]


def onnx_accuracy(model: Path | bytes, data: Path, split: str) -> dict:
    """The clip accuracy of an ONNX file (or serialised graph) on --data's split."""
    from app.clip_accuracy import evaluate
    from app.spotter import KeywordModel
    r = evaluate(KeywordModel(model), data, split)
    clips = "every clip in the folder" if split == "all" else f"the {split} split (corpus/splits.py)"
    return {"data": str(data), "clips": clips, "n": r["n"], "accuracy": r["accuracy"],
            "per_class": r["per_class"]}


def describe_export(proto: onnx.ModelProto, path: Path) -> str:
    info = json.loads(read_metadata(proto)["export"])
    diffs = ", ".join(f"{k} {v:.1e}" for k, v in info["verified_max_abs_diff"].items()
                      if isinstance(v, float))
    return (f"wrote {path} ({info['nodes']} nodes) in {info['seconds']:.1f} s; verified against "
            f"PyTorch, max |Δ score|: {diffs} (tolerance {info['tolerance']})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    out, data = Path(args.output), (Path(args.data) if args.data else None)
    try:
        net, entry = load_checkpoint(Path(args.checkpoint))
        meta = provenance(entry)

        def accuracy(graph: bytes) -> dict:             # measured before the file is written
            meta["accuracy"]["onnx"] = onnx_accuracy(graph, data, args.split)
            return {"accuracy": meta["accuracy"]}

        export_onnx(net, out, max_samples=args.max_samples, meta=meta,
                    clips=real_clips(data, net.cfg.labels), measure=accuracy if data else None)
    except (ValueError, ExportError, VerificationError) as e:
        print(f"rotkws export: {e}", file=sys.stderr)
        return 1
    proto = onnx.load(out)                              # read once: described, and --int8's source
    print(describe_export(proto, out))
    if data is not None:
        print(f"accuracy on {data}: {meta['accuracy']['onnx']['accuracy']:.4f} "
              f"({meta['accuracy']['onnx']['n']} clips)")
    if args.int8:
        print(write_int8(proto, out.with_name(out.stem + ".int8.onnx"), data, args.split, meta["accuracy"]))
    return 0


def write_int8(proto: onnx.ModelProto, path: Path, data: Path | None, split: str, accuracy: dict) -> str:
    """Quantise in memory, measure the int8 graph's accuracy on --data (when given) into its
    metadata, then write its file once; the line to print."""
    from .quantize import quantize_int8
    int8 = quantize_int8(proto)
    line = f"wrote {path}"
    if data is not None:
        acc8 = onnx_accuracy(int8.SerializeToString(), data, split)["accuracy"]
        float_acc = accuracy["onnx"]["accuracy"]
        line += f"; accuracy {acc8:.4f} vs float {float_acc:.4f} ({acc8 - float_acc:+.4f})"
        set_metadata(int8, {"accuracy": json.dumps(accuracy | {"onnx_int8": {"data": str(data), "split": split,
                                                                             "accuracy": acc8}})})
    onnx.save(int8, path)
    return line


if __name__ == "__main__":
    sys.exit(main())
