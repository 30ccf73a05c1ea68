"""The peer baseline and the reviewers' ablations, trained here on the same data with the same
budget, several seeds each, each seed a real `rotkws train` process (one thread; `jobs` at once).

Arms: RotRNN with the default model's recipe; RotRNN without ξ; the LRU in the same block; a
DS-CNN on log-mel features (the conventional keyword spotter). Each is scored on the held-out
speakers by `rotkws eval`'s own function, with the weights of the budget's last step.
"""
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from app.spotter import HOP_SECONDS
from corpus.clips import ClipError
from corpus.folders import KEYWORD_FOLDER
from corpus.rate import SAMPLE_RATE
from model import count_parameters
from training.data import read_clips
from training.checkpoint_scorer import load_network, predict, select_clips

CONFIGS = Path(__file__).resolve().parents[1] / "training" / "configs"


@dataclass(frozen=True)
class Arm:
    title: str
    config: str                                   # a file in training/configs
    overrides: dict = field(default_factory=dict)
    quick: dict = field(default_factory=dict)     # --quick: a network small enough for seconds
    epoch_cost: float = 1.0                       # relative time per epoch: the longest start first


ROTRNN_QUICK = {"model.d_model": 16, "model.state": 16, "model.heads": 4, "model.layers": 1}
ARMS = {
    "rotrnn": Arm("RotRNN (the default model's recipe)", "kws12.yaml", {}, ROTRNN_QUICK),
    "rotrnn_no_xi": Arm("RotRNN without ξ", "kws12.yaml", {"model.normalize_input": "false"},
                        ROTRNN_QUICK),
    "lru": Arm("LRU in the same block", "kws12.yaml", {"model.layer": "lru"}, ROTRNN_QUICK),
    "dscnn": Arm("DS-CNN on the same log-mel features (the peer)", "dscnn_logmel.yaml", {},
                 {"model.channels": 16, "model.blocks": 1},
                 epoch_cost=2.0),   # measured: 1.7 s per batch of 128 against RotRNN's 0.55 (2 threads,
                                    # shared); the log-mel front-end is precomputed for both
}
REFERENCE = "rotrnn"                                       # what the others are tested against
QUICK_SOURCES = "[{path: speech_commands_v0.01_sample}]"   # 300 clips: reads in a second


@dataclass(frozen=True)
class Budget:
    epochs: int
    quick: bool = False
    patience: int = 0            # stop a run after this many epochs without a better val/acc (0: never)
    train_share: float = 1.0     # of each epoch's training batches (the learning-rate sweep's short runs)

    def overrides(self) -> dict:
        out = {"trainer.max_epochs": self.epochs}
        if self.patience:
            out["trainer.patience"] = self.patience
        if self.quick:   # a few optimiser steps on the small folder: the machinery, not the figures
            return out | {"trainer.limit_train_batches": 3, "trainer.limit_val_batches": 1,
                          "data.sources": QUICK_SOURCES}
        return out | ({"trainer.limit_train_batches": self.train_share} if self.train_share < 1 else {})


def run_dir(out: Path, arm: str, seed: int) -> Path:
    return out / "runs" / arm / f"seed{seed}"


def last_checkpoint(out: Path, arm: str, seed: int) -> Path:
    return run_dir(out, arm, seed) / "checkpoints" / "last.ckpt"


def train_command(arm: str, seed: int, budget: Budget, data: Path, out: Path,
                  extra: dict | None = None, resume: bool = False, accelerator: str = "cpu") -> list[str]:
    """`python -m training.cli` for one run; `extra` overrides go last (a learning rate, a deadline,
    the data's sources)."""
    a = ARMS[arm]
    overrides = {**a.overrides, **(a.quick if budget.quick else {}), **budget.overrides(),
                 "trainer.seed": seed, "trainer.threads": 1, "trainer.progress_bar": "false",
                 "trainer.checkpoint_every_n_steps": 0, "trainer.accelerator": accelerator,
                 "trainer.devices": 1, "trainer.run_dir": str(run_dir(out, arm, seed)),
                 "data.root": str(data), **(extra or {})}
    flags = [s for k, v in overrides.items() for s in (f"--{k}", str(v))]
    return [sys.executable, "-m", "training.cli", "--config", str(CONFIGS / a.config), *flags,
            *(["--resume"] if resume else [])]


def train_all(jobs: list[tuple[str, int]], budget: Budget, data: Path, out: Path,
              parallel: int, log=print, *, settings: dict | None = None, resume: bool = False,
              deadline: float | None = None, longest_first: bool = True, accelerator: str = "cpu",
              overrides: dict | None = None) -> dict:
    """Run every (arm, seed) as its own process, `parallel` at a time, one torch thread each.
    {(arm, seed): wall seconds}; a failed run raises with its log's tail.

    settings: {arm: overrides} on top of the arm's and the budget's (its learning rate);
    resume: a run with a last.ckpt continues from it (its log appended to);
    deadline: a Unix time: no run starts after it, and each stops at the first epoch end from
    which another epoch would pass it (`trainer.stop_at`), so a run overruns it by one epoch at most;
    longest_first: the costliest arms start first (shortest wall time), else the jobs' order;
    accelerator: Lightning's ("cpu", "gpu": every process on the one GPU, one CPU thread each);
    overrides: for every run, after all others (the data's sources where they are elsewhere)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    waiting = sorted(jobs, key=lambda job: -ARMS[job[0]].epoch_cost) if longest_first else list(jobs)
    extra = ({"trainer.stop_at": deadline} if deadline is not None else {}) | (overrides or {})
    running, seconds = {}, {}
    while waiting or running:
        if deadline is not None and time.time() >= deadline:
            waiting.clear()
        while waiting and len(running) < parallel:
            arm, seed = waiting.pop(0)
            directory = run_dir(out, arm, seed)
            directory.mkdir(parents=True, exist_ok=True)
            again = resume and last_checkpoint(out, arm, seed).is_file()
            logfile = open(directory / "train.log", "a" if again else "w")
            own = {**(settings or {}).get(arm, {}), **extra}
            proc = subprocess.Popen(train_command(arm, seed, budget, data, out, own, again, accelerator),
                                    stdout=logfile, stderr=subprocess.STDOUT, env=env)
            running[(arm, seed)] = (proc, time.monotonic(), logfile)
            log(f"  {'resuming' if again else 'training'} {arm} seed {seed}")
        time.sleep(0.5)
        for key, (proc, started, logfile) in list(running.items()):
            if proc.poll() is None:
                continue
            logfile.close()
            del running[key]
            if proc.returncode != 0:
                for other, _, f in running.values():
                    other.kill()
                    f.close()
                tail = (run_dir(out, *key) / "train.log").read_text()[-3000:]
                raise RuntimeError(f"training {key[0]} seed {key[1]} failed "
                                   f"(exit {proc.returncode}):\n{tail}")
            seconds[key] = time.monotonic() - started
            log(f"  trained {key[0]} seed {key[1]} in {seconds[key]:.0f} s")
    return seconds


def flops_per_second(net) -> dict:
    """Multiply-add FLOPs (×2; torch.utils.flop_counter: matmuls and convolutions) per second of
    audio: "clip", one 1 s call; "stream", as the spotter runs it: a streaming network one
    call per HOP_SECONDS hop with its state, a clip network a 1 s window every hop."""
    rate = net.cfg.sample_rate
    hop = int(HOP_SECONDS * rate)
    hops = round(1 / HOP_SECONDS)
    audio = torch.zeros(1, rate)
    with torch.no_grad():
        with FlopCounterMode(display=False) as clip:
            net(audio)
        streaming = not getattr(net.cfg, "bidirectional", True)
        with FlopCounterMode(display=False) as stream:
            if streaming:
                state = net.initial_state(1)
                for k in range(hops):
                    _, state = net(audio[:, k * hop:(k + 1) * hop], state)
            else:
                for _ in range(hops):
                    net(audio)
    return {"clip": clip.get_total_flops(), "stream": stream.get_total_flops()}


def held_out(data: Path, labels) -> tuple[np.ndarray, np.ndarray]:
    """The test speakers' clips as `rotkws eval --checkpoint` reads them: (audio (n, samples), truth (n,))."""
    rate = SAMPLE_RATE
    clips, audio, _ = read_clips(select_clips(data / KEYWORD_FOLDER, labels, "testing"), rate, rate)
    if not clips:
        raise ClipError(f"no testing clips in {data / KEYWORD_FOLDER}")
    return np.stack(audio), np.array([list(labels).index(c.label) for c in clips])


def score_run(arm: str, seed: int, out: Path, clips: dict, weights: str = "last") -> dict:
    """Test-split accuracy of the run's `weights` ("last", or "best": the best val/acc's; the
    clips read once: {labels: held_out}), its validation accuracy, size and FLOPs."""
    ckpt = run_dir(out, arm, seed) / "checkpoints" / f"{weights}.ckpt"
    if not ckpt.is_file():
        raise ClipError(f"{arm} seed {seed}: no checkpoint at {ckpt}")
    net = load_network(ckpt)
    audio, truth = clips[tuple(net.cfg.labels)]
    accuracy = float(np.mean(predict(net, audio, 64) == truth))
    meta = torch.load(ckpt, map_location="cpu", weights_only=True)
    metrics = meta.get("rotkws", {}).get("metrics", {})
    return {"arm": arm, "seed": seed, "accuracy": accuracy, "n": int(len(truth)),
            "val_accuracy": metrics.get("val/acc"), "steps": int(meta.get("global_step", 0)),
            "parameters": count_parameters(net),
            "flops_per_second": flops_per_second(net), "checkpoint": str(ckpt)}
