"""`rotkws bench`: measure a keyword spotter as the field does, in one run, into bench/report.md.

    rotkws bench [--model M.onnx | --checkpoint C.ckpt] [--data DIR] [--out bench] [--quick]

1. clip accuracy of the model on the held-out speakers: overall, per class, confusion matrix;
2. streaming detection: the runtime's spotter over hours of seeded stream (keywords, other
   words and wake-word recordings over noise), a DET curve, the operating points at 1 false
   accept per hour and per 10 hours;
3. cost: FLOPs per second of audio from the graph, CPU ms per second of audio on 1 and 2
   threads streaming and per clip, the ratio to the FLOP floor at a matmul peak measured in
   the same run, file size, int8 against float32;
4. the peer and the ablations (benchmarks/ablation.py): DS-CNN, RotRNN, RotRNN without ξ and
   the LRU trained here with one budget and several seeds; mean, 95 % interval, Welch's t-test
   against RotRNN with Holm's correction.

Writes report.md, report.json and PNG figures into --out; a full run (not --quick) into the
default folder also rewrites the README's headline table. Every figure comes from this run.
`--quick` runs the same steps with tiny networks, a few training steps and a short stream:
it checks the machinery in about a minute and its figures mean nothing.
"""
import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import onnx

from app.clip_accuracy import evaluate as evaluate_onnx
from app.clip_accuracy import save_confusion_png
from app.spotter import DEFAULT_MODEL, HOP_SECONDS, KeywordModel, ModelError
from app.sweep import FEED_SECONDS, THRESHOLDS
from benchmarks import ablation, bench_runtime, bench_stream, plots, stats
from benchmarks.bench_runtime import THREADS, onnx_cost
from benchmarks.headline import (BENCH_DIR, converged_report, headline_rows, interval_text, pct, plural,
                                 read_report, write_readme)
from evaluation import streams as stream
from benchmarks.report import git_commit, log, machine
from corpus.clips import ClipError
from corpus.folders import KEYWORD_FOLDER, NOISE_FOLDER, WAKEWORD_FOLDER, default_data_root
from corpus.splits import folder_splits

REPO = Path(__file__).resolve().parents[1]
# one epoch is one pass over the 40k training examples of kws12.yaml's sources (the 2.4k WAV clips
# alone took 15): 12 such runs, two at a time on one thread each; the whole bench took 45 min here
# (2026-12-01, bench/report.md), inside the 2 hours a session can give it
FULL = {"seeds": 3, "epochs": 1, "stream_hours": 10.0, "timing_seconds": 10.0, "rounds": 3}
QUICK = {"seeds": 2, "epochs": 1, "stream_hours": 2 / 60, "timing_seconds": 2.0, "rounds": 1}
FA_POINTS = {"1 FA/h": 1.0, "1 FA/10 h": 0.1}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rotkws bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", help=f"rotkws ONNX file (default: {DEFAULT_MODEL.relative_to(REPO)})")
    src.add_argument("--checkpoint", help="a .ckpt of rotkws train: exported here first")
    p.add_argument("--data", default=str(default_data_root()), help="the shared data folder "
                   "(speech_commands_v0.02_test_dev, background noise, wake-word recordings)")
    p.add_argument("--out", default=str(BENCH_DIR), help="where report.md/json and the figures go")
    p.add_argument("--quick", action="store_true", help="seconds, not an hour: checks the machinery")
    p.add_argument("--seeds", type=int, help=f"seeds per arm (default {FULL['seeds']}, quick {QUICK['seeds']})")
    p.add_argument("--epochs", type=int, help=f"training budget per arm (default {FULL['epochs']})")
    p.add_argument("--stream-hours", type=float, help=f"streaming test length (default {FULL['stream_hours']:g})")
    p.add_argument("--arms", default=",".join(ablation.ARMS), help="comma-separated, of " + ", ".join(ablation.ARMS))
    p.add_argument("--jobs", type=int, default=2, help="training processes at once (one thread each)")
    p.add_argument("--no-readme", action="store_true", help="leave README.md alone")
    p.add_argument("--wake", action="append", metavar="WAKE_ONNX", help="run the wake-word section "
                   "alone instead (benchmarks/wakeword.py): these enrolled models beside the peer "
                   "engines on the bench's speech stream (repeat for each phrase)")
    p.add_argument("--wake-hours", type=float, default=None, help="the wake-word stream's length "
                   "(default: benchmarks/wakeword.py's)")
    p.add_argument("--render", metavar="REPORT_JSON", help="measure nothing: rewrite report.md "
                   "(and the README's table) from an earlier run's report.json")
    args = p.parse_args(argv)
    mode = QUICK if args.quick else FULL
    for key in ("seeds", "epochs", "stream_hours"):
        if getattr(args, key) is None:
            setattr(args, key, mode[key])
    args.timing_seconds, args.rounds = mode["timing_seconds"], mode["rounds"]
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in args.arms if a not in ablation.ARMS]
    if unknown or not args.arms:
        p.error(f"--arms: unknown {unknown}; expected some of {', '.join(ablation.ARMS)}")
    if ablation.REFERENCE not in args.arms:
        p.error(f"--arms must include {ablation.REFERENCE!r}: the others are tested against it")
    if args.seeds < 1 or args.epochs < 1 or args.stream_hours <= 0 or args.jobs < 1:
        p.error("--seeds, --epochs and --jobs must be ≥ 1 and --stream-hours > 0")
    return args


# -- 1. clip accuracy ------------------------------------------------------------------------------
def clip_accuracy(path: Path, data: Path) -> dict:
    result = evaluate_onnx(KeywordModel(path), data / KEYWORD_FOLDER, "testing")
    labels = result["labels"]
    speakers = {c.speaker for c in folder_splits(data / KEYWORD_FOLDER, labels)["testing"]}
    result["speakers"] = len(speakers)
    return result


def floor_ratio(cost: dict, peak_gflops: float, mode: str) -> float:
    floor_ms = 1e3 * cost["flops"][mode] / (peak_gflops * 1e9)
    return cost["ms"]["1"][mode] / floor_ms


# -- the run -------------------------------------------------------------------------------------------
def model_path(args, out: Path) -> Path:
    if not args.checkpoint:
        return Path(args.model) if args.model else DEFAULT_MODEL
    from export.onnx import export_onnx
    from training.checkpoint_scorer import load_network
    path = out / "model.onnx"
    export_onnx(load_network(Path(args.checkpoint)), path,
                meta={"training_data": f"checkpoint {args.checkpoint}"})
    return path


def check_data(data: Path) -> None:
    needed = [KEYWORD_FOLDER, NOISE_FOLDER, WAKEWORD_FOLDER]
    missing = [n for n in needed if not (data / n).is_dir()]
    if missing:
        raise ClipError(f"{data} lacks {', '.join(missing)}: expected the shared data folder "
                        f"(--data or ROTKWS_DATA; see ../shared/data/README.md)")


def run(args) -> dict:
    out, data = Path(args.out), Path(args.data)
    check_data(data)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    report = {"date": datetime.date.today().isoformat(), "machine": machine(), "commit": git_commit(),
              "mode": "quick" if args.quick else "full", "data": str(data), "python": platform.python_version()}
    path = model_path(args, out)
    model = KeywordModel(path)
    report["model"] = {"path": str(path), "metadata": model.meta | {"labels": list(model.labels)}}

    log(f"1. clip accuracy of {path.name} on the held-out speakers")
    report["clip"] = clip_accuracy(path, data)

    log("3. cost: float32 and int8, 1 and 2 threads")
    from export.quantize import quantize_int8
    int8 = out / "model.int8.onnx"
    onnx.save(quantize_int8(path), int8)
    peak, peak_n = bench_runtime.matmul_peak_gflops()
    report["cost"] = {"peak_gflops": peak, "peak_size": peak_n, "load_average": os.getloadavg()[0],
                      "rounds": args.rounds, "audio_seconds": args.timing_seconds,
                      "float32": onnx_cost(path, args.timing_seconds, args.rounds),
                      "int8": onnx_cost(int8, args.timing_seconds, args.rounds)}
    report["cost"]["int8"]["accuracy"] = clip_accuracy(int8, data)["accuracy"]

    log(f"2. streaming detection over {args.stream_hours:g} h")
    t = time.monotonic()
    sweep = bench_stream.det(model, data, "testing", args.stream_hours, seed=0)
    sweep["seconds"] = time.monotonic() - t
    sweep["points"] = {name: stream.operating_point(sweep["rows"], fa) for name, fa in FA_POINTS.items()}
    report["stream"] = sweep

    log(f"4. peer and ablations: {', '.join(args.arms)} × {args.seeds} seeds, {args.epochs} epochs each")
    budget = ablation.Budget(args.epochs, args.quick)
    jobs = [(arm, s) for s in range(args.seeds) for arm in args.arms]
    seconds = ablation.train_all(jobs, budget, data, out, args.jobs, log)
    import torch
    torch.set_num_threads(2)
    labels = {tuple(ablation.load_network(ablation.run_dir(out, arm, 0) / "checkpoints" / "last.ckpt").cfg.labels)
              for arm in args.arms}
    clips = {lab: ablation.held_out(data, lab) for lab in labels}
    runs = [ablation.score_run(arm, s, out, clips) | {"train_seconds": seconds[(arm, s)]} for arm, s in jobs]
    arms = {}
    for arm in args.arms:
        mine = [r for r in runs if r["arm"] == arm]
        arms[arm] = {"title": ablation.ARMS[arm].title, "runs": mine,
                     "accuracy": stats.mean_interval([r["accuracy"] for r in mine]),
                     "parameters": mine[0]["parameters"], "flops_per_second": mine[0]["flops_per_second"],
                     "train_seconds": float(np.median([r["train_seconds"] for r in mine]))}
    ref = [r["accuracy"] for r in arms[ablation.REFERENCE]["runs"]]
    pvalues = {a: stats.welch_p([r["accuracy"] for r in arms[a]["runs"]], ref) for a in arms if a != ablation.REFERENCE}
    significant = stats.holm(pvalues)
    for a in pvalues:
        arms[a]["p_vs_reference"], arms[a]["significant"] = pvalues[a], significant[a]
    if not args.quick:   # each arm's first seed exported and timed like the model above
        for arm in args.arms:
            log(f"  exporting and timing {arm} seed 0")
            from export.onnx import export_onnx
            from training.checkpoint_scorer import load_network
            onnx_path = ablation.run_dir(out, arm, 0) / "model.onnx"
            export_onnx(load_network(Path(arms[arm]["runs"][0]["checkpoint"])), onnx_path)
            arms[arm]["onnx_cost"] = onnx_cost(onnx_path, args.timing_seconds, args.rounds, threads=(1,))
    report["ablation"] = {"epochs": args.epochs, "quick": args.quick, "seeds": args.seeds,
                          "arms": arms, "reference": ablation.REFERENCE, "alpha": stats.ALPHA}
    report["wall_seconds"] = time.monotonic() - started
    return report


# -- the report ------------------------------------------------------------------------------------------
def recipe_epochs() -> int:
    """The default model's training budget, as its config file says."""
    from training.config import load_config
    return load_config(ablation.CONFIGS / ablation.ARMS[ablation.REFERENCE].config).trainer.max_epochs


def point_text(p: dict | None, hours: float) -> str:
    if p is None:
        return f"not reached (the stream has {hours:.1f} h)"
    return f"{pct(p['miss_rate'])} missed (threshold {p['threshold']:.3f}, {p['false_accepts']} false accepts)"


def markdown(r: dict) -> str:
    clip, st, cost, ab = r["clip"], r["stream"], r["cost"], r["ablation"]
    labels = r["model"]["metadata"]["labels"]
    lines = [f"# rotkws bench report ({r['mode']})", "",
             f"_Measured {r['date']} on {r['machine']}, commit {r['commit']}, by `rotkws bench"
             f"{' --quick' if r['mode'] == 'quick' else ''}` in {r['wall_seconds'] / 60:.0f} min. "
             f"Every figure below comes from this run._", ""]
    if r["mode"] == "quick":
        lines += ["**Quick mode: tiny networks, a few training steps and a short stream. These figures "
                  "check the machinery and mean nothing.**", ""]
    lines += ["## Headline", ""] + headline_rows(r, converged_report()) + [
        "", "The published rows are other models on other data (see *data*): they are the field's "
            "marks, not results of this run.", "",
        "## Data", "",
        f"- Held-out test: the `testing` speakers of `speech_commands_v0.02_test_dev` (a salted speaker "
        f"hash, `corpus/splits.py`): {clip['n']} clips from {clip['speakers']} speakers, none trained on.",
        f"- Streaming: {st['hours']:.2f} h in {st['segments']} seeded segments (seeds {st['seeds'][0]}–"
        f"{st['seeds'][-1]}) of those speakers' keyword and `_unknown_` clips plus wake-word recordings "
        f"(`wakeword_benchmark_dev`) as non-keyword speech, at {stream.GAP_S[0]:g}–{stream.GAP_S[1]:g} s gaps over "
        f"`speech_commands_background_noise` at {', '.join(f'{s:g}' for s in stream.SNRS_DB)} dB SNR: "
        f"{st['keyword_events']} keyword and {st['other_events']} other utterances (clips recur across segments).",
        f"- Training (section 4): the sources of `training/configs/{ablation.ARMS[ablation.REFERENCE].config}` "
        f"(`training` split only).", "",
        f"## 1. Clip accuracy: `{Path(r['model']['path']).name}`", "",
        f"**{pct(clip['accuracy'])}** on {clip['n']} clips ({clip['skipped_corrupt']} corrupt skipped).", "",
        "| class | accuracy | clips |", "| --- | ---: | ---: |"]
    lines += [f"| {lab} | {pct(clip['per_class'][lab])} | {clip['support'][lab]} |" for lab in labels]
    lines += ["", "![confusion matrix](confusion.png)", "",
              "## 2. Streaming detection", "",
              f"The runtime's `KeywordSpotter` as the demo runs it ({1000 * HOP_SECONDS:.0f} ms hops, the "
              f"detection rules of `app/detection.py`), fed {FEED_SECONDS:g} s at a time; a hit is the "
              f"right keyword from the clip's start to {stream.HIT_WINDOW_S:g} s after its end, anything else "
              f"a false accept. Sweep: thresholds {THRESHOLDS[0]:.2f}–{THRESHOLDS[-1]:.4f}; "
              f"{st['seconds'] / 60:.1f} min to run.", "",
              "| operating point | result |", "| --- | --- |"]
    lines += [f"| ≤ {name} | {point_text(p, st['hours'])} |" for name, p in st["points"].items()]
    for th in (0.5, 0.7, 0.9):
        row = min(st["rows"], key=lambda x: abs(x["threshold"] - th))
        lines.append(f"| threshold {row['threshold']:.2f} | {pct(row['miss_rate'])} missed, "
                     f"{row['fa_per_hour']:.1f} false accepts/h |")
    lines += ["", "![DET curve](det.png)", "",
              "## 3. Cost", "",
              f"onnxruntime, CPUExecutionProvider; CPU time of this process (every thread counted), median of "
              f"{cost['rounds']} interleaved rounds over {cost['audio_seconds']:g} s of audio; load average "
              f"{cost['load_average']:.1f} when it started. Matmul peak {cost['peak_gflops']:.1f} GFLOP/s "
              f"(one thread, float32, {cost['peak_size']}²); FLOPs counted from the graph's tensors "
              f"(`benchmarks/bench_runtime.py`).", "",
              "| | float32 | int8 (dynamic, dense layers) |", "| --- | ---: | ---: |"]
    f32, i8 = cost["float32"], cost["int8"]
    lines += [f"| file size | {f32['bytes'] / 1e6:.2f} MB | {i8['bytes'] / 1e6:.2f} MB |",
              f"| accuracy, held-out speakers | {pct(clip['accuracy'])} | {pct(i8['accuracy'])} |",
              f"| FLOPs per s of audio, streaming / clip | {f32['flops']['stream'] / 1e6:.1f} M / {f32['flops']['clip'] / 1e6:.1f} M | "
              f"{i8['flops']['stream'] / 1e6:.1f} M / {i8['flops']['clip'] / 1e6:.1f} M |"]
    for t in THREADS:
        for mode, name in (("stream", f"streaming, {1000 * HOP_SECONDS:.0f} ms hops"), ("clip", "one 1 s clip")):
            lines.append(f"| ms CPU per s of audio, {t} thread{'s' if t > 1 else ''}, {name} | "
                         f"{f32['ms'][str(t)][mode]:.2f} | {i8['ms'][str(t)][mode]:.2f} |")
    lines += [f"| × the FLOP floor (1 thread), streaming / clip | {floor_ratio(f32, cost['peak_gflops'], 'stream'):.0f}× / "
              f"{floor_ratio(f32, cost['peak_gflops'], 'clip'):.0f}× | — |", "",
              "## 4. The peer and the ablations", "",
              f"Same data, same budget, same run: each arm trained {plural(ab['epochs'], 'epoch')} "
              f"({recipe_epochs()} in the default model's recipe) by `rotkws train` with its config, one thread, "
              f"{ab['seeds']} seeds (0–{ab['seeds'] - 1}); accuracy of the last weights on the held-out "
              f"clips above. Interval: Student's t, 95 %. Test: Welch's t-test of each arm against "
              f"`{ab['reference']}`, significant when Holm-corrected p < {ab['alpha']}.", "",
              "| arm | weights | accuracy, mean [95 % interval] | per seed | p vs RotRNN | significant | "
              "matmul FLOPs per s, streaming | ms per s, streaming (ONNX, 1 thread) | training, s per run |",
              "| --- | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: |"]
    for arm, a in ab["arms"].items():
        p = a.get("p_vs_reference")
        ms = a.get("onnx_cost", {}).get("ms", {}).get("1", {}).get("stream")
        lines.append(f"| {arm}: {a['title']} | {a['parameters']:,} | {interval_text(a['accuracy'])} | "
                     f"{', '.join(f'{100 * v:.1f}' for v in a['accuracy']['values'])} | "
                     f"{'—' if p is None else f'{p:.3f}'} | {'—' if p is None else ('yes' if a['significant'] else 'no')} | "
                     f"{a['flops_per_second']['stream'] / 1e6:.1f} M | {'—' if ms is None else f'{ms:.2f}'} | "
                     f"{a['train_seconds']:.0f} |")
    lines += ["", "Streaming cost of a clip model (the DS-CNN) is its 1 s window scored every hop, as "
              "the spotter runs it; matmul FLOPs are counted by `torch.utils.flop_counter` on the network.",
              "", "![ablation](ablation.png)", ""]
    return "\n".join(lines)


def figures(r: dict, out: Path) -> None:
    save_confusion_png(r["clip"], out / "confusion.png")
    plots.det_png(r["stream"]["rows"], r["stream"]["hours"], r["stream"]["points"], out / "det.png")
    plots.ablation_png(r["ablation"]["arms"], out / "ablation.png")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.wake:
        from benchmarks import wakeword
        hours = [] if args.wake_hours is None else ["--hours", str(args.wake_hours)]
        return wakeword.main([a for m in args.wake for a in ("--model", m)] + hours + ["--data", args.data]
                             + (["--no-write"] if args.no_readme else []))
    out = Path(args.out)
    try:
        report = read_report(Path(args.render)) if args.render else run(args)
    except (ClipError, ModelError) as e:
        print(f"rotkws bench: {e}", file=sys.stderr)
        return 2
    args.quick = report["mode"] == "quick"
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=float))
    (out / "report.md").write_text(markdown(report))
    figures(report, out)
    if not args.quick and not args.no_readme and out.resolve() == BENCH_DIR.resolve():
        write_readme(report, converged=converged_report())
    log(f"wrote {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
