"""benchmarks/converge.py (and the training processes of benchmarks/ablation.py it drives): the
learning rate it chooses, its statistics on known numbers, and, as real `rotkws train` processes
on the 300-clip sample folder, a run stopped by its deadline that resumes from its checkpoint and
stops on patience, the whole --quick experiment with its sweep, and sessions that continue from
only what git keeps of the previous one (.gitignore)."""
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

import pytest
import torch
from scipy import stats as scipy_stats

from benchmarks import ablation, converge
from benchmarks.ablation import Budget
from conftest import REPO

KEPT = converge.OUT.relative_to(REPO).as_posix()     # bench/converge: what .gitignore keeps of it
REPORT = {"report.md", "report.json"}


def test_choose_takes_the_best_validation_accuracy_and_a_tie_nearest_the_config():
    assert converge.choose({1 / 3: 0.71, 1.0: 0.74, 3.0: 0.78}) == 3.0
    assert converge.choose({1 / 3: 0.80, 1.0: 0.74, 3.0: 0.78}) == 1 / 3
    assert converge.choose({1 / 3: 0.78, 1.0: 0.78, 3.0: 0.78}) == 1.0
    assert converge.choose({1 / 3: 0.78, 3.0: 0.78}) in (1 / 3, 3.0)      # equally near: either


def test_runs_at_a_learning_rate_the_sweep_no_longer_chooses_are_set_aside(tmp_path):
    for arm, seed in (("rotrnn", 0), ("lru", 0), ("lru", 1)):
        d = ablation.run_dir(tmp_path, arm, seed) / "checkpoints"
        d.mkdir(parents=True)
        (d / "last.ckpt").write_bytes(b"x")
    state = {"runs": {"rotrnn": {"0": {"epochs": 8, "lr": 0.012}},
                      "lru": {"0": {"epochs": 5, "lr": 0.012}, "1": {"epochs": 2, "lr": 0.036},
                              "2": {"epochs": 0, "lr": None}}}}
    ready = {"rotrnn": {"optim.lr": 0.036, "optim.recurrent_lr": 0.018},
             "lru": {"optim.lr": 0.036, "optim.recurrent_lr": 0.018}}
    moved = converge.set_aside_stale(tmp_path, state, ready)
    assert moved == [tmp_path / "superseded" / "rotrnn" / "seed0_lr0.012",
                     tmp_path / "superseded" / "lru" / "seed0_lr0.012"]
    assert (moved[0] / "checkpoints" / "last.ckpt").is_file()
    assert not ablation.run_dir(tmp_path, "rotrnn", 0).exists()
    assert ablation.run_dir(tmp_path, "lru", 1).is_dir()            # at the chosen rate: kept
    assert converge.set_aside_stale(tmp_path, state | {"runs": {}}, ready) == []


def welch_by_hand(a, b) -> float:
    """Two-sided p of Welch's t: t = Δmean / √(s²a/na + s²b/nb), Welch–Satterthwaite df."""
    va, vb = (statistics.variance(x) / len(x) for x in (a, b))
    t = abs(sum(a) / len(a) - sum(b) / len(b)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return 2 * scipy_stats.t.sf(t, df)


def test_summarise_gives_the_interval_and_holm_on_known_runs():
    accuracy = {"rotrnn": [0.80, 0.82, 0.84], "rotrnn_no_xi": [0.70, 0.71, 0.69],
                "lru": [0.80, 0.85, 0.75], "dscnn": [0.78, 0.79, 0.80]}
    runs = [{"arm": arm, "seed": s, "accuracy": v} for arm, values in accuracy.items()
            for s, v in enumerate(values)]
    arms = converge.summarise(runs)
    half = 4.302652729911275 * 0.02 / math.sqrt(3)              # t(0.975, 2) · sd / √n
    assert arms["rotrnn"]["accuracy"]["mean"] == pytest.approx(0.82)
    assert (arms["rotrnn"]["accuracy"]["low"], arms["rotrnn"]["accuracy"]["high"]) == pytest.approx(
        (0.82 - half, 0.82 + half))
    assert "p_vs_reference" not in arms["rotrnn"]
    for arm in ("rotrnn_no_xi", "lru", "dscnn"):
        assert arms[arm]["p_vs_reference"] == pytest.approx(welch_by_hand(accuracy[arm], accuracy["rotrnn"]))
    # p: no ξ 0.0029, DS-CNN 0.10, LRU 0.57; Holm over 3: 0.0029 ≤ 0.05/3, then 0.10 > 0.05/2 stops
    assert arms["rotrnn_no_xi"]["p_vs_reference"] < 0.05 / 3 < 0.05 / 2 < arms["dscnn"]["p_vs_reference"]
    assert {a: arms[a]["significant"] for a in ("rotrnn_no_xi", "lru", "dscnn")} == {
        "rotrnn_no_xi": True, "lru": False, "dscnn": False}


FROZEN = {"rotrnn": {"optim.lr": 0.0, "optim.recurrent_lr": 0.0}}   # constant weights: val/acc never improves


@pytest.mark.slow
def test_a_run_stopped_by_its_deadline_resumes_and_then_stops_on_patience(shared_data, tmp_path):
    budget = Budget(epochs=6, quick=True, patience=2)
    train = lambda **kw: ablation.train_all([("rotrnn", 0)], budget, shared_data, tmp_path, 1,
                                           lambda _: None, settings=FROZEN, resume=True, **kw)
    assert train(deadline=time.time() - 1) == {}                      # spent: nothing starts
    train(deadline=time.time() + 0.5)        # starts, and its first epoch ends past the deadline
    directory = ablation.run_dir(tmp_path, "rotrnn", 0)
    first = converge.survey(directory, budget)
    assert first["epochs"] == 1 and not first["finished"] and first["step"] > 0
    train()                                                          # the next session
    last = converge.survey(directory, budget)
    # epoch 0 set the best; epochs 1 and 2, resumed with early stopping's count, never beat it
    assert last["epochs"] == 3 and last["finished"] and last["stopped"] == "patience"
    assert last["step"] == 3 * first["step"]
    assert len(last["curve"]) == 3 and len(set(last["curve"])) == 1
    resumed = converge.logged(directory, "val/acc")
    second = (directory / "logs" / "version_1" / "metrics.csv").read_text().splitlines()
    assert sorted(resumed) == [0, 1, 2] and {line.split(",")[0] for line in second[1:]} == {"1", "2"}
    assert "Restoring states from the checkpoint" in (directory / "train.log").read_text()


def run_converge(*args, data):
    env = dict(os.environ, ROTKWS_DATA=str(data), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "benchmarks.converge", "--quick", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.slow
def test_quick_converge_sweeps_trains_at_the_chosen_rate_and_reports(shared_data, tmp_path):
    benchmarks_md = (REPO / "BENCHMARKS.md").read_text()
    args = ["--arms", "rotrnn", "--seeds", "1", "--epochs", "2", "--out", str(tmp_path)]
    r = run_converge(*args, data=shared_data)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    state = json.loads((tmp_path / "state.json").read_text())
    sweep = state["sweep"]["arms"]["rotrnn"]
    scores = {f: sweep["scores"][converge.factor_name(f)] for f in converge.SWEEP_FACTORS}
    assert None not in scores.values()
    assert sweep["chosen"] == converge.factor_name(converge.choose(scores))
    run = state["runs"]["rotrnn"]["0"]
    assert run["finished"] and run["epochs"] == 2 and len(run["curve"]) == 2
    ckpt = torch.load(converge.best_checkpoint(tmp_path, "rotrnn", 0), map_location="cpu", weights_only=True)
    assert ckpt["rotkws"]["train_config"]["optim"]["lr"] == pytest.approx(sweep["lr"]["optim.lr"])
    md = (tmp_path / "report.md").read_text()
    assert "--quick" in md and "| rotrnn seed 0 |" in md and "| rotrnn: " in md
    assert (REPO / "BENCHMARKS.md").read_text() == benchmarks_md        # quick never writes there
    again = run_converge(*args, data=shared_data)                        # all done: nothing retrained
    assert again.returncode == 0 and "training" not in again.stdout and "sweep:" not in again.stdout
    other = run_converge(*args[:4], "--epochs", "3", "--out", str(tmp_path), data=shared_data)
    assert other.returncode == 2 and "was started with" in other.stderr


def ignored(names) -> set[str]:
    """Those of `names` (paths in an OUT) that git ignores in bench/converge, tracked or not."""
    r = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=REPO, capture_output=True,
                       text=True, input="".join(f"{KEPT}/{n}\n" for n in names))
    assert r.returncode in (0, 1), r.stderr                          # 1: none ignored
    return {line[len(KEPT) + 1:] for line in r.stdout.splitlines()}


def kept(out) -> set[str]:
    """The files of `out` that git keeps were it bench/converge."""
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    return files - ignored(files)


def clone(out, to) -> None:
    """Only what git keeps of `out`, copied into `to`: the next session on a fresh clone."""
    for name in kept(out):
        (to / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(out / name, to / name)


def test_git_keeps_the_state_the_report_and_the_runs_checkpoints_and_nothing_else():
    run = "runs/rotrnn_no_xi/seed2"
    keep = {"state.json", "report.md", "report.json", f"{run}/checkpoints/last.ckpt",
            f"{run}/checkpoints/best.ckpt"}
    leave = {f"{run}/train.log", f"{run}/best.onnx",
             f"{run}/logs/version_1/metrics.csv", f"{run}/logs/version_1/hparams.yaml",
             "sweep/x0.333/runs/lru/seed0/checkpoints/last.ckpt",
             "sweep/x0.333/runs/lru/seed0/checkpoints/best.ckpt",
             "superseded/lru/seed0_lr0.012/checkpoints/last.ckpt",
             "superseded/lru/seed0_lr0.012/checkpoints/best.ckpt"}
    assert ignored(keep | leave) == leave


def test_mend_last_makes_the_resumed_best_what_best_ckpt_holds_where_it_lies(tmp_path):
    # as training/cli.py leaves them after epoch 0 in another folder: last.ckpt written before
    # best.ckpt, so with the best-checkpoint callback's state of before that epoch
    was = "/elsewhere/bench/converge/runs/rotrnn/seed0/checkpoints"
    empty = {"monitor": "val/acc", "best_model_score": None, "best_model_path": "", "current_score": None,
             "dirpath": was, "best_k_models": {}, "kth_best_model_path": "",
             "kth_value": torch.tensor(-math.inf), "last_model_path": ""}
    last = {"monitor": None, "best_model_score": None, "best_model_path": f"{was}/last.ckpt", "dirpath": was,
            "best_k_models": {}, "kth_best_model_path": "", "last_model_path": ""}
    early = {"wait_count": 0, "patience": 2, "best_score": torch.tensor(0.25)}
    keys = {"best": "ModelCheckpoint{'monitor': 'val/acc'}", "last": "ModelCheckpoint{'monitor': None}",
            "early": "EarlyStopping{'monitor': 'val/acc'}"}
    (ablation.run_dir(tmp_path, "rotrnn", 0) / "checkpoints").mkdir(parents=True)
    torch.save({"epoch": 0, "callbacks": {keys["best"]: empty, keys["last"]: last, keys["early"]: early}},
               ablation.last_checkpoint(tmp_path, "rotrnn", 0))
    torch.save({"rotkws": {"metrics": {"val/acc": 0.25}}}, converge.best_checkpoint(tmp_path, "rotrnn", 0))
    converge.mend_last(tmp_path, "rotrnn", 0)
    c = torch.load(ablation.last_checkpoint(tmp_path, "rotrnn", 0), weights_only=True)["callbacks"]
    here = os.path.realpath(ablation.run_dir(tmp_path, "rotrnn", 0) / "checkpoints")
    best = c[keys["best"]]
    assert best["dirpath"] == c[keys["last"]]["dirpath"] == here
    assert best["best_model_path"] == best["kth_best_model_path"] == f"{here}/best.ckpt"
    assert best["best_model_score"] == best["kth_value"] == 0.25
    assert best["best_k_models"] == {f"{here}/best.ckpt": 0.25}
    assert c[keys["last"]]["best_model_path"] == f"{here}/last.ckpt" and c[keys["early"]] == early
    converge.mend_last(tmp_path, "lru", 0)                             # nothing to mend: no files


@pytest.mark.slow
def test_sessions_on_fresh_clones_continue_from_what_git_keeps(shared_data, tmp_path):
    first, second, third = (tmp_path / name for name in ("first", "second", "third"))
    args = ["--arms", "rotrnn", "--seeds", "1", "--epochs", "4", "--patience", "2"]
    ckpts = "runs/rotrnn/seed0/checkpoints"
    # the sweep, done before: only its scores in state.json (git keeps none of its runs). ×1/3 best:
    # the least rate, a flat curve whose best (epoch 0) the resumed epochs must not overwrite
    scores = {converge.factor_name(f): 0.5 - 0.1 * i for i, f in enumerate(converge.SWEEP_FACTORS)}
    first.mkdir()
    (first / "state.json").write_text(json.dumps({"budget": converge.budget_record(Budget(4, True, 2)),
                                                  "sweep": {"arms": {"rotrnn": {"scores": scores}}}}))
    r = run_converge(*args, "--hours", str(2 / 3600), "--out", str(first), data=shared_data)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "sweep:" not in r.stdout                    # nothing swept again
    state = json.loads((first / "state.json").read_text())
    assert state["sweep"]["arms"]["rotrnn"]["chosen"] == converge.factor_name(converge.SWEEP_FACTORS[0])
    run = state["runs"]["rotrnn"]["0"]                 # stopped by --hours at an epoch end
    assert run["epochs"] >= 1 and not run["finished"] and len(run["curve"]) == run["epochs"]
    assert kept(first) == REPORT | {"state.json", f"{ckpts}/last.ckpt", f"{ckpts}/best.ckpt"}

    clone(first, second)                               # no logs: the curve so far is state.json's
    r = run_converge(*args, "--out", str(second), data=shared_data)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "resuming rotrnn seed 0" in r.stdout and "sweep:" not in r.stdout
    done = json.loads((second / "state.json").read_text())["runs"]["rotrnn"]["0"]
    assert done["finished"] and done["epochs"] > run["epochs"]
    assert done["curve"][:run["epochs"]] == run["curve"] and done["seconds"][:run["epochs"]] == run["seconds"]
    assert len(done["curve"]) == len(done["seconds"]) == done["epochs"]
    assert done["step"] * run["epochs"] == run["step"] * done["epochs"]          # continued, not from 0
    best = torch.load(second / ckpts / "best.ckpt", map_location="cpu", weights_only=True)
    assert set(best) == set(converge.BEST_KEYS)                                  # no optimiser state
    assert best["epoch"] == done["curve"].index(max(done["curve"]))              # best over both sessions
    assert kept(second) == REPORT | {"state.json", f"{ckpts}/best.ckpt"}         # finished: no last.ckpt

    clone(second, third)
    r = run_converge(*args, "--out", str(third), data=shared_data)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "training" not in r.stdout and "sweep:" not in r.stdout
    assert json.loads((third / "state.json").read_text())["runs"]["rotrnn"]["0"] == done
    assert f"| rotrnn seed 0 | {converge.curve_text(done['curve'])} |" in (third / "report.md").read_text()


@pytest.mark.slow
def test_overrides_of_every_run_are_recorded_kept_to_and_train_only_reports_nothing(shared_data, tmp_path):
    args = ["--arms", "rotrnn", "--seeds", "1", "--epochs", "1", "--out", str(tmp_path), "--jobs", "8"]
    r = run_converge(*args, "--set", "data.batch_size=16", "--train-only", data=shared_data)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = r.stdout.splitlines()                                      # whole lines (benchmarks/report.py: log)
    started = [i for i, line in enumerate(lines) if "] sweep: learning rates" in line]
    assert len(started) == len(converge.SWEEP_FACTORS)                # every factor side by side:
    assert max(started) < min(i for i, line in enumerate(lines) if "trained rotrnn" in line)
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["budget"]["overrides"] == {"data.batch_size": "16"} and state["trained_on"] == ["cpu"]
    assert None not in state["sweep"]["arms"]["rotrnn"]["scores"].values()
    assert state["runs"]["rotrnn"]["0"]["finished"] and not (tmp_path / "report.md").exists()
    ckpt = torch.load(converge.best_checkpoint(tmp_path, "rotrnn", 0), map_location="cpu", weights_only=True)
    assert ckpt["rotkws"]["train_config"]["data"]["batch_size"] == 16
    other = run_converge(*args, "--set", "data.batch_size=32", data=shared_data)
    assert other.returncode == 2 and "was started with" in other.stderr and "--set" in other.stderr
    r = run_converge("--report", "--out", str(tmp_path), data=shared_data)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    md = (tmp_path / "report.md").read_text()
    assert "Overrides of every run: `data.batch_size=16`" in md and "Trained on: cpu" in md


def test_set_needs_key_value_and_the_accelerator_reaches_every_run(tmp_path):
    with pytest.raises(SystemExit):
        converge.parse_args(["--set", "data.batch_size"])
    assert converge.parse_args(["--set", "a.b=c=d"]).overrides == {"a.b": "c=d"}
    command = ablation.train_command("lru", 0, Budget(1), tmp_path, tmp_path, {"data.batch_size": 8},
                                     accelerator="gpu")
    flags = dict(zip(command[5::2], command[6::2]))
    assert flags["--trainer.accelerator"] == "gpu" and flags["--data.batch_size"] == "8"
    assert flags["--model.layer"] == "lru"
    old = {"epochs": 8, "patience": 2, "quick": False}               # a state file from before --set
    (tmp_path / "state.json").write_text(json.dumps({"budget": old}))
    converge.check_budget(tmp_path, Budget(8, False, 2))
    with pytest.raises(converge.ClipError, match="was started with"):
        converge.check_budget(tmp_path, Budget(8, False, 2), {"data.batch_size": "8"})
