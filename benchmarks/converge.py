"""The ablation trained to the end, a few hours at a time: each arm of benchmarks/ablation.py at
its own learning rate, several seeds, until validation accuracy stops improving.

    python -m benchmarks.converge [--arms rotrnn,rotrnn_no_xi,lru,dscnn] [--seeds 3] [--epochs 8]
        [--patience 2] [--jobs 1] [--hours H] [--out bench/converge] [--data DIR] [--quick]
    python -m benchmarks.converge --report [--out bench/converge]   # measure what is finished

1. The learning-rate sweep, once per arm: its config's learning rates (both groups) times each of
   SWEEP_FACTORS, seed 0, one epoch over SWEEP_SHARE of the training batches; the factor with the
   best validation accuracy is the arm's (`choose`). A factor added to the grid later is swept
   then; a run trained at a rate no longer chosen is moved to OUT/superseded/ and starts again.
2. Every (arm, seed), seeds in turn, at that learning rate: trained until val/acc has not improved
   for --patience epochs, or for --epochs (the same for every arm; the cosine schedule spans them).
   A run with a last.ckpt continues from it. --hours: no run starts once they are spent, and a
   running one stops at the first epoch end from which another epoch would pass them, its
   last.ckpt (written every epoch) left for the next session's same command.
3. OUT/state.json: the budget, the sweep's scores and, per arm and seed, epochs and steps done,
   val/acc and seconds of each epoch, finished or not and why; rewritten after every phase. An OUT
   started with another budget is refused.
4. The report: the finished runs' best-val weights on the testing split (mean, 95 % interval,
   Welch + Holm against RotRNN), their validation curves, weights, FLOPs and ONNX CPU ms per second
   of audio streaming; OUT/report.md and report.json, BENCHMARKS.md's section `converge` and the
   README's headline rows (`rotkws bench`'s table, re-rendered) unless --quick.
5. What lasts: each session may run on a fresh clone, so git keeps of OUT (bench/converge,
   .gitignore) only state.json, report.md, report.json and each run's checkpoints/last.ckpt (the
   resume point; removed once the run has finished, its record being in state.json) and
   checkpoints/best.ckpt (cut to the weights the report reads: `trim`). Logs, the sweep's runs and
   superseded/ stay behind: what they held is in state.json. A session ends with `git add bench/converge` and a commit.

Cost: on this project's 2-core CPUs a one-epoch run of an arm takes 250–380 s (bench/report.md), so
the sweep is about 50 min and each run of 8 epochs 30–50 min. On one H200
(gpu/converge.sh: --accelerator gpu --jobs 16, the data packed by gpu/carry.py)
the whole of it, sweep and twelve runs of 8 epochs, took 6 min (2026-12-04, BENCHMARKS.md
"Training runs"). --quick: tiny networks, three steps an epoch on the 300-clip sample folder: the
machinery in a minute, figures that mean nothing.
"""
import argparse
import concurrent.futures
import csv
import datetime
import json
import math
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks import ablation, headline, stats
from benchmarks.ablation import ARMS, REFERENCE, Budget
from benchmarks.bench_runtime import onnx_cost
from benchmarks.headline import BENCH_DIR, interval_text, read_report, write_readme
from benchmarks.report import git_commit, log, write_section
from corpus.clips import ClipError
from corpus.folders import default_data_root
from training.config import load_config

OUT = Path(__file__).resolve().parents[1] / "bench" / "converge"
SWEEP_FACTORS = (1 / 3, 1.0, 3.0, 9.0)   # × the config's lr and recurrent_lr: a grid a factor 3 apart
                                         # (×9 added when ×3, the old edge, won for three of four arms)
SWEEP_SHARE = 0.5                        # of one epoch's training batches per sweep run: 16 runs ≈ 8 epochs
TIMING = {"seconds": 20.0, "rounds": 7}   # the ONNX timing of each arm's first finished seed
BEST_KEYS = ("epoch", "global_step", "state_dict", "rotkws")   # what the report reads of a best.ckpt
                                         # (load_network, score_run); not the optimiser's, twice the weights


def factor_name(f: float) -> str:
    return f"x{f:.3g}"


def best_checkpoint(out: Path, arm: str, seed: int) -> Path:
    return ablation.run_dir(out, arm, seed) / "checkpoints" / "best.ckpt"


# -- one run's record -------------------------------------------------------------------------------
def logged(directory: Path, column: str) -> dict[int, float]:
    """{epoch: value} of a metric over every CSV log of the run (a resumed run writes version_N+1;
    a later version's epoch wins)."""
    out = {}
    versions = sorted((directory / "logs").glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
    for version in versions:
        if not (version / "metrics.csv").is_file():
            continue
        with open(version / "metrics.csv", newline="") as f:
            for row in csv.DictReader(f):
                if row.get(column):
                    out[int(row["epoch"])] = float(row[column])
    return out


def history(directory: Path, column: str, before: list[float], epochs: int) -> list[float]:
    """A metric's value at each of the run's first `epochs` epochs: its logs', and for epochs they
    lack (logs are not kept between sessions) `before`'s, the state file's list of the same."""
    values = dict(enumerate(before)) | logged(directory, column)
    return [values[e] for e in sorted(values) if e < epochs]


def survey(directory: Path, budget: Budget, before: dict | None = None) -> dict:
    """Where a run stands: epochs and steps done, its val/acc curve and seconds per epoch, finished
    or not and why (`patience`: early stopping; `epochs`: the budget), its learning rates.
    `before`: its record in the state file, for what the directory no longer holds: the val/acc
    and seconds of epochs whose logs are gone, and the whole record of a finished run whose
    last.ckpt `trim` removed (while its best.ckpt is there)."""
    before = before or {}
    checkpoints = directory / "checkpoints"
    if not (checkpoints / "last.ckpt").is_file():
        if before.get("finished") and (checkpoints / "best.ckpt").is_file():
            return before
        return {"epochs": 0, "step": 0, "curve": [], "seconds": [], "best_val": None, "finished": False,
                "stopped": None}
    c = torch.load(checkpoints / "last.ckpt", map_location="cpu", weights_only=True)
    epochs = int(c["epoch"]) + 1                     # saved at the end of epoch c["epoch"] (from 0)
    early = next((v for k, v in c.get("callbacks", {}).items() if k.startswith("EarlyStopping")), None)
    stopped = ("patience" if early and early["wait_count"] >= early["patience"] else
               "epochs" if epochs >= budget.epochs else None)
    curve = history(directory, "val/acc", before.get("curve", []), epochs)
    seconds = history(directory, "train/epoch_seconds", before.get("seconds", []), epochs)
    optim = c["rotkws"]["train_config"]["optim"]
    return {"epochs": epochs, "step": int(c["global_step"]), "curve": curve, "seconds": seconds,
            "best_val": max(curve) if curve else None, "finished": stopped is not None,
            "stopped": stopped, "lr": optim["lr"], "recurrent_lr": optim["recurrent_lr"],
            "epoch_seconds": float(np.median(seconds)) if seconds else None}


def mend_last(out: Path, arm: str, seed: int) -> None:
    """Make what the run's last.ckpt restores of its best.ckpt the file as it is: the best val/acc
    so far, which a new best.ckpt must beat. Lightning's ModelCheckpoint restores it only from a
    checkpoint saved in its own folder (a clone of the repository elsewhere moves the folder), and
    a last.ckpt written before training/cli.py saved best.ckpt first held it as of the epoch before.
    A run without both files is left as it is."""
    last, best = ablation.last_checkpoint(out, arm, seed), best_checkpoint(out, arm, seed)
    if not (last.is_file() and best.is_file()):
        return
    here = os.path.realpath(last.parent)
    c = torch.load(last, map_location="cpu", weights_only=True)
    metrics = torch.load(best, map_location="cpu", weights_only=True)["rotkws"]["metrics"]
    score, path = torch.tensor(metrics["val/acc"]), os.path.join(here, best.name)
    for name, s in c["callbacks"].items():
        if not name.startswith("ModelCheckpoint"):
            continue
        s |= {"dirpath": here, "best_model_path": os.path.join(here, last.name)}
        if s["monitor"] == "val/acc":
            s |= {"best_model_score": score, "best_model_path": path, "best_k_models": {path: score},
                  "kth_best_model_path": path, "kth_value": score}
    torch.save(c, last)


# -- 1. the learning-rate sweep -------------------------------------------------------------------
def sweep_budget(quick: bool) -> Budget:
    return Budget(1, quick, train_share=SWEEP_SHARE)


def learning_rates(arm: str, factor: float) -> dict:
    """The arm's config's learning rates × factor, as training overrides."""
    a = ARMS[arm]
    optim = load_config(ablation.CONFIGS / a.config, a.overrides).optim
    return {"optim.lr": optim.lr * factor, "optim.recurrent_lr": optim.recurrent_lr * factor}


def choose(scores: dict[float, float]) -> float:
    """The factor of the best validation accuracy; a tie goes to the one nearer the config's own (1)."""
    return max(scores, key=lambda f: (scores[f], -abs(math.log(f))))


def sweep_dir(out: Path, factor: float) -> Path:
    return out / "sweep" / factor_name(factor)


def sweep_state(out: Path, arms, quick: bool, before: dict) -> dict:
    """{arm: {"scores": {factor name: best val/acc or None}, "chosen": name or None, "lr": overrides}}:
    each score a finished sweep run's, or where the run is gone (git keeps none of them) the one
    `before` (the state file) records: a sweep run has one epoch, so a run with a score has finished."""
    budget, state = sweep_budget(quick), {}
    for arm in arms:
        saved = before.get("sweep", {}).get("arms", {}).get(arm, {}).get("scores", {})
        runs = {f: survey(ablation.run_dir(sweep_dir(out, f), arm, 0), budget) for f in SWEEP_FACTORS}
        scores = {f: r["best_val"] if r["finished"] else saved.get(factor_name(f)) for f, r in runs.items()}
        done = {f: v for f, v in scores.items() if v is not None}
        chosen = choose(done) if len(done) == len(SWEEP_FACTORS) else None
        state[arm] = {"scores": {factor_name(f): v for f, v in scores.items()},
                      "chosen": None if chosen is None else factor_name(chosen),
                      "lr": None if chosen is None else learning_rates(arm, chosen)}
    return state


def sweep(arms, data: Path, out: Path, jobs: int, deadline: float | None, quick: bool,
          record=lambda: None, **how) -> None:
    """Train what the sweep lacks: one process per arm and factor; `record()` after each factor (the
    state file then holds its scores, which git keeps where it keeps none of the sweep's runs).
    Factors run one after another, or side by side where `jobs` holds every run of several
    (a GPU's many processes). `how`: train_all's accelerator and overrides."""
    budget = sweep_budget(quick)
    scores = {arm: s["scores"] for arm, s in sweep_state(out, arms, quick, recorded(out)).items()}
    todo = {f: [(arm, 0) for arm in arms if scores[arm][factor_name(f)] is None] for f in SWEEP_FACTORS}
    todo = {f: runs for f, runs in todo.items() if runs}
    if not todo:
        return
    lock = threading.Lock()
    side_by_side = max(1, min(len(todo), jobs // max(len(runs) for runs in todo.values())))

    def factor(f: float) -> None:
        log(f"sweep: learning rates × {f:.3g} for {', '.join(a for a, _ in todo[f])}")
        ablation.train_all(todo[f], budget, data, sweep_dir(out, f), max(1, jobs // side_by_side), log,
                           deadline=deadline, settings={arm: learning_rates(arm, f) for arm, _ in todo[f]},
                           **how)
        with lock:
            record()

    with concurrent.futures.ThreadPoolExecutor(side_by_side) as pool:
        for done in [pool.submit(factor, f) for f in todo]:
            done.result()


# -- 2.–3. the runs and the state file --------------------------------------------------------------
def budget_record(budget: Budget, overrides: dict | None = None) -> dict:
    """What every run of an OUT shares: the budget and the overrides of all runs (--set)."""
    return {"epochs": budget.epochs, "patience": budget.patience, "quick": budget.quick,
            "overrides": dict(overrides or {})}


def recorded(out: Path) -> dict:
    """The state file's content; {} before the first."""
    path = out / "state.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def check_budget(out: Path, budget: Budget, overrides: dict | None = None) -> None:
    was, now = recorded(out).get("budget"), budget_record(budget, overrides)
    if was is not None and {"overrides": {}} | was != now:
        raise ClipError(f"{out} was started with {was}, not {now}: pass the same --epochs, "
                        f"--patience, --quick and --set, or another --out")


def run_state(out: Path, budget: Budget, arms, seeds, before: dict) -> dict:
    """{arm: {seed: survey}} for the asked runs and every run already under out/runs, each
    completed by its record in `before` (the state file)."""
    found = {(p.parent.name, int(p.name[4:])) for p in (out / "runs").glob("*/seed*") if p.parent.name in ARMS}
    keys = sorted(found | {(a, s) for a in arms for s in seeds}, key=lambda k: (list(ARMS).index(k[0]), k[1]))
    state = {}
    for arm, seed in keys:
        was = before.get("runs", {}).get(arm, {}).get(str(seed))
        state.setdefault(arm, {})[str(seed)] = survey(ablation.run_dir(out, arm, seed), budget, was)
    return state


def snapshot(out: Path, budget: Budget, arms, seeds, overrides: dict | None = None,
             accelerator: str | None = None) -> dict:
    """The state file's content, read from the run directories and, for what they no longer hold,
    from the state file before: the sweep of `arms` and of the arms it records, and every run.
    `accelerator`: this session's, added to the list of those the runs were trained on."""
    before = recorded(out)
    swept = [a for a in ARMS if a in arms or a in before.get("sweep", {}).get("arms", {})]
    trained_on = before.get("trained_on", [])
    trained_on += [accelerator] if accelerator and accelerator not in trained_on else []
    return {"updated": datetime.datetime.now().isoformat(timespec="seconds"), "commit": git_commit(),
            "budget": budget_record(budget, overrides), "trained_on": trained_on,
            "sweep": {"factors": [factor_name(f) for f in SWEEP_FACTORS], "share": SWEEP_SHARE,
                      "arms": sweep_state(out, swept, budget.quick, before)},
            "runs": run_state(out, budget, arms, seeds, before)}


def write_state(out: Path, state: dict) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    (out / "state.json").write_text(json.dumps(state, indent=1))
    return state


def trim(out: Path, state: dict) -> None:
    """Cut the runs of the state, once it is written, to what git keeps of them: each best.ckpt to
    BEST_KEYS, and the last.ckpt of each finished run (its record is in the state file) removed."""
    for arm, seeds in state["runs"].items():
        for seed, r in seeds.items():
            checkpoints = ablation.run_dir(out, arm, int(seed)) / "checkpoints"
            best = checkpoints / "best.ckpt"
            if best.is_file():
                c = torch.load(best, map_location="cpu", weights_only=True)
                if set(c) != set(BEST_KEYS):
                    torch.save({k: c[k] for k in BEST_KEYS}, best)
            if r["finished"]:
                (checkpoints / "last.ckpt").unlink(missing_ok=True)


def saved_state(out: Path) -> dict:
    """The state of an OUT trained before, surveyed again (its budget from state.json)."""
    was = recorded(out)
    if not was:
        raise ClipError(f"{out / 'state.json'} does not exist: nothing was trained there")
    budget = Budget(was["budget"]["epochs"], was["budget"]["quick"], was["budget"]["patience"])
    state = snapshot(out, budget, list(was["sweep"]["arms"]), [], was["budget"].get("overrides"))
    return state | {k: was[k] for k in ("updated", "commit") if k in was}     # when and what trained


def status_lines(state: dict) -> list[str]:
    lines = []
    for arm, seeds in state["runs"].items():
        for seed, r in seeds.items():
            how = f"finished ({r['stopped']})" if r["finished"] else "unfinished"
            best = "—" if r["best_val"] is None else f"{r['best_val']:.4f}"
            lines.append(f"  {arm} seed {seed}: {r['epochs']} epochs, step {r['step']}, best val {best}, {how}")
    return lines


def set_aside_stale(out: Path, state: dict, ready: dict) -> list[Path]:
    """Move runs trained at other learning rates than the sweep now chooses (the grid grew) to
    out/superseded/, where nothing reads them; the runs then start again. Returns where they went."""
    moved = []
    for arm, seeds in state["runs"].items():
        for seed, r in seeds.items():
            lr = ready.get(arm)
            if lr is None or r["epochs"] == 0 or math.isclose(r["lr"], lr["optim.lr"], rel_tol=1e-6):
                continue
            target = out / "superseded" / arm / f"seed{seed}_lr{r['lr']:.4g}"
            target.parent.mkdir(parents=True, exist_ok=True)
            ablation.run_dir(out, arm, int(seed)).rename(target)
            log(f"{arm} seed {seed} trained at lr {r['lr']:.4g}, the sweep now chooses "
                f"{lr['optim.lr']:.4g}: set aside in {target}")
            moved.append(target)
    return moved


def converge(args) -> dict:
    out, data = Path(args.out), Path(args.data)
    budget = Budget(args.epochs, args.quick, args.patience)
    check_budget(out, budget, args.overrides)
    deadline = time.time() + 3600 * args.hours if args.hours else None
    seeds = list(range(args.seeds))
    how = {"accelerator": args.accelerator, "overrides": args.overrides}

    def state_now() -> dict:
        return write_state(out, snapshot(out, budget, args.arms, seeds, args.overrides, args.accelerator))

    sweep(args.arms, data, out, args.jobs, deadline, args.quick, record=state_now, **how)
    state = state_now()
    ready = {arm: s["lr"] for arm, s in state["sweep"]["arms"].items() if s["lr"] is not None}
    if set_aside_stale(out, state, ready):
        state = state_now()
    runs = state["runs"]
    todo = [(arm, s) for s in seeds for arm in args.arms if arm in ready and not runs[arm][str(s)]["finished"]]
    try:
        if todo:
            log(f"training {len(todo)} runs: {', '.join(f'{a} seed {s}' for a, s in todo)}")
            for arm, s in todo:
                mend_last(out, arm, s)
            ablation.train_all(todo, budget, data, out, args.jobs, log, settings=ready, resume=True,
                               deadline=deadline, longest_first=False, **how)
    finally:                                           # a failed run: the others' epochs recorded
        state = state_now()
        trim(out, state)
    log("state:\n" + "\n".join(status_lines(state)))
    return state


# -- 4. the report --------------------------------------------------------------------------------
def summarise(runs: list[dict], reference: str = REFERENCE) -> dict:
    """{arm: {"accuracy": mean and interval over its seeds, "p_vs_reference", "significant"}}
    from scored runs ({"arm", "seed", "accuracy"}): Welch's t-test of each other arm against
    `reference`, Holm-corrected over them."""
    arms = {}
    for r in runs:
        arms.setdefault(r["arm"], []).append(r["accuracy"])
    out = {arm: {"accuracy": stats.mean_interval(v)} for arm, v in arms.items()}
    if reference in arms:
        p = {arm: stats.welch_p(v, arms[reference]) for arm, v in arms.items() if arm != reference}
        for arm, significant in stats.holm(p).items():
            out[arm] |= {"p_vs_reference": p[arm], "significant": significant}
    return out


def median(values) -> float:
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else math.nan


def timed(runs: dict[str, int], out: Path) -> dict[str, dict]:
    """{arm: cost}: each run's ({arm: seed}) best weights exported and timed as bench.py times a
    model (1 thread), the arms in turn within each round, so that whatever else the machine runs
    weighs on each alike; the median round's ms."""
    from export.onnx import export_onnx
    from training.checkpoint_scorer import load_network
    paths = {}
    for arm, seed in runs.items():
        paths[arm] = ablation.run_dir(out, arm, seed) / "best.onnx"
        export_onnx(load_network(best_checkpoint(out, arm, seed)), paths[arm])
    costs = {arm: [] for arm in paths}
    for _ in range(TIMING["rounds"]):
        for arm, path in paths.items():
            costs[arm].append(onnx_cost(path, TIMING["seconds"], 1, threads=(1,)))
    return {arm: c[0] | {"ms": {"1": {m: float(np.median([x["ms"]["1"][m] for x in c])) for m in ("stream", "clip")}},
                         "load_average": os.getloadavg()[0]}
            for arm, c in costs.items()}


def report(state: dict, data: Path, out: Path, timing: bool) -> dict:
    """Score every finished run of the state; {"arms": {arm: …}, "runs": [...], "unfinished": [...]}."""
    finished = [(arm, int(s)) for arm, seeds in state["runs"].items() for s, r in seeds.items() if r["finished"]]
    torch.set_num_threads(1)                           # the CPU is shared with the training runs
    labels = {tuple(ablation.load_network(best_checkpoint(out, *key)).cfg.labels) for key in finished}
    clips = {lab: ablation.held_out(data, lab) for lab in labels}      # read once for every run
    runs = [ablation.score_run(arm, seed, out, clips, "best") | state["runs"][arm][str(seed)]
            for arm, seed in finished]
    arms = summarise(runs)
    first = {arm: min(r["seed"] for r in runs if r["arm"] == arm) for arm in arms}
    for arm, a in arms.items():
        mine = next(r for r in runs if r["arm"] == arm and r["seed"] == first[arm])
        a |= {"title": ARMS[arm].title, "parameters": mine["parameters"],
              "flops_per_second": mine["flops_per_second"], "sweep": state["sweep"]["arms"].get(arm)}
        a["minutes_per_epoch"] = median([r["epoch_seconds"] for r in runs if r["arm"] == arm]) / 60
    if timing and arms:
        log(f"  exporting and timing {', '.join(f'{arm} seed {s}' for arm, s in first.items())}")
        for arm, cost in timed(first, out).items():
            arms[arm]["onnx_cost"] = cost
    unfinished = [{"arm": arm, "seed": int(s), **r} for arm, seeds in state["runs"].items()
                  for s, r in seeds.items() if not r["finished"]]
    return {"arms": dict(sorted(arms.items(), key=lambda kv: list(ARMS).index(kv[0]))), "runs": runs,
            "unfinished": unfinished, "state": state, "n_test": runs[0]["n"] if runs else None}


def curve_text(values: list[float]) -> str:
    return " ".join(f"{v:.3f}" for v in values) or "—"


def sweep_rows(state: dict) -> list[str]:
    names = state["sweep"]["factors"]
    rows = ["| arm | " + " | ".join(f"lr {n}" for n in names) + " | chosen |",
            "| --- | " + " | ".join("---:" for _ in names) + " | --- |"]
    for arm, s in state["sweep"]["arms"].items():
        cells = ["—" if s["scores"][n] is None else f"{s['scores'][n]:.3f}" for n in names]
        edge = s["chosen"] in (names[0], names[-1])
        chosen = "—" if s["chosen"] is None else (f"{s['chosen']} (lr {s['lr']['optim.lr']:.3g})"
                                                 + (", the grid's edge" if edge else ""))
        rows.append(f"| {arm} | " + " | ".join(cells) + f" | {chosen} |")
    return rows


def arm_rows(rep: dict) -> list[str]:
    rows = ["| arm | weights | seeds finished | accuracy, mean [95 % interval] | per seed | p vs RotRNN "
            "(Welch) | significant (Holm) | matmul FLOPs per s, streaming | ms per s, streaming (ONNX, 1 "
            "thread) | min per epoch | epochs (why it stopped) |",
            "| --- | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | --- |"]
    for arm, a in rep["arms"].items():
        mine = [r for r in rep["runs"] if r["arm"] == arm]
        p = a.get("p_vs_reference")
        tested = p is not None and not math.isnan(p)
        ms = a.get("onnx_cost", {}).get("ms", {}).get("1", {}).get("stream")
        per_seed = ", ".join(f"{100 * r['accuracy']:.1f}" for r in mine)
        epochs = ", ".join(f"{r['epochs']} ({r['stopped']})" for r in mine)
        rows.append(f"| {arm}: {a['title']} | {a['parameters']:,} | {len(mine)} | "
                    f"{interval_text(a['accuracy'])} | {per_seed} | {f'{p:.3f}' if tested else '—'} | "
                    f"{('yes' if a['significant'] else 'no') if tested else '—'} | "
                    f"{a['flops_per_second']['stream'] / 1e6:.1f} M | {'—' if ms is None else f'{ms:.2f}'} | "
                    f"{a['minutes_per_epoch']:.1f} | {epochs} |")
    return rows


def markdown(rep: dict) -> str:
    state, budget = rep["state"], rep["state"]["budget"]
    quick = " **--quick: tiny networks, three steps an epoch; these figures mean nothing.**" if budget["quick"] else ""
    lines = [f"State of {state['updated']} (commit {state['commit']}).{quick}", "",
             f"Each arm trained from scratch by `rotkws train` at the learning rate its "
             f"sweep chose, until val/acc had not improved for {budget['patience']} epochs, or for at "
             f"most {budget['epochs']} epochs, the same for every arm (the cosine schedule spans them; "
             f"the default model's recipe has 12). Scored with each run's best-val/acc weights on the "
             f"testing split ({rep['n_test'] or '—'} clips of held-out speakers). Interval: Student's t, "
             f"95 %, over the finished seeds; Welch's t-test of each arm against `{REFERENCE}`, "
             f"significant when Holm-corrected p < {stats.ALPHA}.", "",
             f"Trained on: {', '.join(state.get('trained_on', [])) or 'cpu'} (gpu: every run a process of "
             f"its own on the one GPU, one CPU thread each; cpu: one thread; precision `trainer.precision`'s, "
             f"by default bf16 mixed on a GPU, float32 on a CPU). Overrides of every run: "
             f"{', '.join(f'`{k}={v}`' for k, v in budget.get('overrides', {}).items()) or 'none'}.", "",
             f"Learning-rate sweep (seed 0, one epoch over {SWEEP_SHARE:.0%} of the training batches, "
             f"best val/acc; lr × the config's, both groups):", ""] + sweep_rows(state)
    lines += ["", "Finished runs:", ""] + (arm_rows(rep) if rep["arms"] else ["None yet."])
    if any("onnx_cost" in a for a in rep["arms"].values()):
        load = next(a["onnx_cost"] for a in rep["arms"].values() if "onnx_cost" in a)
        lines += ["", f"CPU ms: each arm's first finished seed exported and timed as `rotkws bench` "
                  f"times a model (one thread, the arms in turn within each round, the median of {TIMING['rounds']} rounds over "
                  f"{TIMING['seconds']:g} s of audio, load average {load['load_average']:.1f}); a clip "
                  f"model (the DS-CNN) scores a 1 s window every 100 ms. Minutes per epoch: the median "
                  f"logged epoch (validation included), where the runs trained, beside whatever else ran."]
    lines += ["", "Validation curves (val/acc after each epoch):", "", "| run | curve |", "| --- | --- |"]
    lines += [f"| {r['arm']} seed {r['seed']} | {curve_text(r['curve'])} |" for r in rep["runs"]]
    lines += ["", "Unfinished (the same command resumes them):", ""]
    lines += [f"- {u['arm']} seed {u['seed']}: {u['epochs']} of {budget['epochs']} epochs, step "
              f"{u['step']}, val/acc {curve_text(u['curve'])}" for u in rep["unfinished"]] or ["- none"]
    return "\n".join(lines)


# -- the command ----------------------------------------------------------------------------------
def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.converge", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arms", default=",".join(ARMS), help="comma-separated, of " + ", ".join(ARMS))
    p.add_argument("--seeds", type=int, default=3, help="seeds 0 … N−1 per arm (default 3)")
    p.add_argument("--epochs", type=int, default=8, help="the epoch budget, every arm (default 8)")
    p.add_argument("--patience", type=int, default=2, help="epochs without a better val/acc that end a run (default 2)")
    p.add_argument("--jobs", type=int, default=1, help="training processes at once, one thread each (default 1)")
    p.add_argument("--accelerator", choices=("cpu", "gpu"), default="cpu",
                   help="where the runs train (gpu: every process on the one GPU; default cpu)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="an override of every run (e.g. data.sources where the data is packed "
                        "otherwise: gpu/carry.py), recorded in state.json; an OUT keeps its own")
    p.add_argument("--train-only", action="store_true",
                   help="train and record the state, report nothing (where the testing clips are not)")
    p.add_argument("--hours", type=float, default=0.0, help="this session's wall-clock budget (0: none)")
    p.add_argument("--out", default=str(OUT), help=f"runs, state.json, report.md (default {OUT})")
    p.add_argument("--data", default=str(default_data_root()), help="the shared data folder")
    p.add_argument("--report", action="store_true", help="train nothing: report the finished runs")
    p.add_argument("--no-write", action="store_true", help="leave BENCHMARKS.md alone")
    p.add_argument("--quick", action="store_true", help="tiny networks, three steps an epoch: the machinery")
    args = p.parse_args(argv)
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    bad = [kv for kv in args.set if "=" not in kv or not kv.split("=", 1)[0].strip()]
    if bad:
        p.error(f"--set: expected KEY=VALUE (e.g. data.batch_size=256), got {bad}")
    args.overrides = {k.strip(): v for k, v in (kv.split("=", 1) for kv in args.set)}
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown or not args.arms:
        p.error(f"--arms: unknown {unknown}; expected some of {', '.join(ARMS)}")
    if args.seeds < 1 or args.epochs < 1 or args.patience < 0 or args.jobs < 1 or args.hours < 0:
        p.error("--seeds, --epochs and --jobs must be ≥ 1, --patience and --hours ≥ 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    out = Path(args.out)
    try:
        state = saved_state(out) if args.report else converge(args)
        if args.train_only:
            log(f"state in {out / 'state.json'}; the report: python -m benchmarks.converge --report")
            return 0
        rep = report(state, Path(args.data), out, timing=not state["budget"]["quick"])
    except ClipError as e:
        print(f"benchmarks.converge: {e}", file=sys.stderr)
        return 2
    text = markdown(rep)
    (out / "report.md").write_text(f"# The ablation trained to the end\n\n{text}\n")
    (out / "report.json").write_text(json.dumps(rep, indent=1, default=float))
    if not state["budget"]["quick"] and not args.no_write and rep["runs"]:
        write_section("converge", "The ablation trained to the end: RotRNN, no ξ, LRU, DS-CNN", text,
                      script="benchmarks/converge.py")
        last = BENCH_DIR / "report.json"                # rotkws bench's: the rest of the headline
        if out.resolve() == OUT.resolve() and last.is_file() and read_report(last)["mode"] != "quick":
            write_readme(read_report(last), converged=headline.converged_report())
    log(f"wrote {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
