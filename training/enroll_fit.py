"""The fit of `rotkws enroll` (step 4 of its recipe: rotkws/enroll_cli.py): the default
checkpoint's front-end and lower blocks stay frozen (their output is computed once); its top block,
final norm and a new two-class head (the phrase, `_other_`) train for a few minutes. From
MINE_FROM_EPOCH on, the speech examples are drawn by how close the model being trained comes to
firing on them under the rule the file will store (app/wake_rule.py: hard negatives mined from the
speech). The loss is the frames' cross-entropy plus, per example, the cross-entropy at the
`_other_` frame where the phrase scores highest (a max-pooling term: a false accept is one peak).

`fit` runs steps 1–4: the items (training/enroll.py: `gather`), the examples
(training/enroll_examples.py), VALIDATION_SHARE of them held out, the training.
"""
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from app.wake_rule import MAX_THRESHOLD, SPEECH, WAKE_RULE, best_runs, smooth
from corpus.labels import OTHER
from model.classifiers import load_checkpoint
from model.network import RotRNNClassifier, RotRNNConfig
from training.enroll import EnrollConfig, Items, gather
from training.enroll_examples import OTHER_CLASS, PHRASE_CLASS, example_kinds, examples
from training.module import optimizer, schedule
from training.paths import REPO
from training.streams import HOP_FRAMES, IGNORE   # frames per hop; frame targets that are not scored

from . import progress, tts

DEFAULT_CHECKPOINT = REPO / "training" / "checkpoints" / "kws12.ckpt"      # the wake file alone (--no-verifier)
PROPOSER_CHECKPOINT = REPO / "training" / "checkpoints" / "distilled.ckpt"  # the cascade's proposer: it
# proposes more of the phrase (BENCHMARKS.md, "The ears or the negatives": `athena` 32.8 / 29.5 % missed
# at 1 FA/h against kws12's 42.2 / 38.9, `alexa` 8.0 / 12.0 against 8.0 / 12.8)
WEIGHT_DECAY = 0.01          # AdamW's, on all but the recurrent weights (training/module.py: optimizer)
WARMUP_SHARE = 0.1           # of the steps, the learning rate's linear warm-up before its cosine decay
HARD_GAIN = 4.0               # draw weight of a speech example: 1 + this × its best phrase score
MINE_FROM_EPOCH = 1           # from this epoch (0-based) on, speech examples are drawn by that weight
VALIDATION_SHARE = 0.1        # examples held out (the report's detection rates)
BACKBONE_BATCH = 256          # examples per batch through the frozen part (`features`)


# -- the network ----------------------------------------------------------------------------------
def enrolled_network(backbone: RotRNNClassifier, phrase: str) -> RotRNNClassifier:
    """The backbone's weights under a two-class head (phrase, OTHER), freshly initialised."""
    cfg = RotRNNConfig(**(backbone.cfg.to_dict() | {"labels": (phrase, OTHER)}))
    net = RotRNNClassifier(cfg)
    weights = {k: v for k, v in backbone.state_dict().items() if not k.startswith("head.")}
    net.load_state_dict(weights, strict=False)
    return net


def lower(net: RotRNNClassifier, pixels: Tensor, trained: int = 1) -> Tensor:
    """The frozen part: embed and every block but the `trained` top ones. (B, T, N_MELS) → (B, T, d_model)."""
    h = net.frontend.embed(pixels)
    for block in net.blocks[:len(net.blocks) - trained]:
        h, _ = block(h, None)
    return h


def frame_logits(net: RotRNNClassifier, h: Tensor, trained: int = 1) -> Tensor:
    """The trained part at every frame: the `trained` top blocks, causal EMA pooling, norm, head.
    (B, T, d_model) → (B, T, classes)."""
    return net.logits_from_block(h, len(net.blocks) - trained)


def features(net: RotRNNClassifier, x: np.ndarray, batch: int, trained: int = 1) -> Tensor:
    """The frozen part's output for every example, (N, T, d_model) float16."""
    out = torch.empty(len(x), x.shape[1], net.cfg.d_model, dtype=torch.half)
    with torch.no_grad():
        for i in progress.bar(range(0, len(x), batch), desc="backbone", unit="batch"):
            out[i:i + batch] = lower(net, torch.from_numpy(x[i:i + batch]).float(), trained)
    return out


# -- the training ---------------------------------------------------------------------------------
def loss_fn(logits: Tensor, y: Tensor, negative_weight: float = 1.0, peak_weight: float = 0.0) -> Tensor:
    """Cross-entropy with the phrase's frames and the others' frames weighted 1 : negative_weight
    (each the mean over its frames), plus peak_weight × the cross-entropy at each example's
    `_other_` frame where the phrase scores highest (a max-pooling loss: a false accept is one
    peak, which a mean over frames hardly sees), averaged over the examples that have one."""
    other = y == OTHER_CLASS
    peak = None
    if peak_weight and other.any():
        margin = (logits[..., PHRASE_CLASS] - logits[..., OTHER_CLASS]).masked_fill(~other, float("-inf"))
        top = margin.amax(1)[other.any(1)]
        peak = F.softplus(top).mean()                     # −log p(OTHER) at that frame
    ce = F.cross_entropy(logits.reshape(-1, 2), y.reshape(-1), ignore_index=IGNORE, reduction="none")
    y = y.reshape(-1)
    parts = [(w, ce[y == c].mean()) for c, w in ((PHRASE_CLASS, 1.0), (OTHER_CLASS, negative_weight)) if (y == c).any()]
    mean = sum(w * v for w, v in parts) / sum(w for w, _ in parts)
    return mean if peak is None else mean + peak_weight * peak


def draws(net: RotRNNClassifier, h: Tensor, hard: np.ndarray, epoch: int, g: torch.Generator,
          trained: int = 1) -> Tensor:
    """One epoch's example order: a permutation, or from MINE_FROM_EPOCH on, len(h) draws in
    which each `hard` example (speech) weighs 1 + HARD_GAIN × the highest phrase score the model
    now holds on it (the others 1): hard negatives mined from the speech."""
    if epoch < MINE_FROM_EPOCH or not hard.any():
        return torch.randperm(len(h), generator=g)
    weights = torch.ones(len(h), dtype=torch.float64)
    idx = np.flatnonzero(hard)
    weights[idx] = torch.from_numpy(1 + HARD_GAIN * best_runs(hop_scores(net, h[idx], trained=trained)))
    net.train()
    return torch.multinomial(weights, len(h), replacement=True, generator=g)


def train(net: RotRNNClassifier, h: Tensor, y: Tensor, cfg: EnrollConfig,
          hard: np.ndarray | None = None, threads=None) -> list[float]:
    """Train the cfg.blocks top blocks, norm and head on precomputed lower features h (N, T, d);
    `hard` (N,) marks the examples mined for hard negatives (`draws`). `threads`: a callable that
    says torch's thread count for the next step (enroll: more once the work beside it is done);
    the count this thread had is restored after."""
    before = torch.get_num_threads()
    try:
        return _train(net, h, y, cfg, hard, threads)
    finally:
        torch.set_num_threads(before)


def _train(net: RotRNNClassifier, h: Tensor, y: Tensor, cfg: EnrollConfig, hard, threads) -> list[float]:
    top = list(net.blocks[len(net.blocks) - cfg.blocks:])
    opt = optimizer([p for m in (*top, net.norm, net.head) for p in m.parameters()],
                    [p for b in top for p in b.rnn.recurrent_parameters()], cfg.lr, cfg.recurrent_lr, WEIGHT_DECAY)
    steps = math.ceil(len(h) / cfg.batch_size) * cfg.epochs
    steps = min(steps, cfg.max_steps) if cfg.max_steps > 0 else steps
    sched = schedule(opt, max(1, round(WARMUP_SHARE * steps)), steps)
    g = torch.Generator().manual_seed(cfg.seed)
    net.train()
    hard = np.zeros(len(h), bool) if hard is None else np.asarray(hard, bool)
    losses, epoch = [], 0
    with progress.bar(total=steps, desc="training", unit="step") as bar:
        while len(losses) < steps:
            order = draws(net, h, hard, epoch, g, cfg.blocks)
            epoch += 1
            for idx in order.split(cfg.batch_size):
                if threads is not None and threads() != torch.get_num_threads():
                    torch.set_num_threads(threads())
                loss = loss_fn(frame_logits(net, h[idx].float(), cfg.blocks), y[idx], cfg.negative_weight,
                               cfg.peak_weight)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                losses.append(loss.item())
                bar.update(1)
                bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
                if len(losses) >= steps:
                    break
    return losses


def hop_scores(net: RotRNNClassifier, h: Tensor, batch: int = 256, trained: int = 1) -> np.ndarray:
    """The phrase's probability at every 100 ms hop, smoothed as the runtime smooths it: (N, hops)."""
    net.eval()
    step = HOP_FRAMES
    out = [np.zeros((0, h.shape[1] // step))]
    with torch.no_grad():
        for i in range(0, len(h), batch):
            p = frame_logits(net, h[i:i + batch].float(), trained).softmax(-1)[..., PHRASE_CLASS]
            out.append(p[:, step - 1::step].numpy())                           # the end of each hop
    return smooth(np.concatenate(out))


# -- steps 1–4 ------------------------------------------------------------------------------------
@dataclass
class Fit:
    net: RotRNNClassifier        # labels (phrase, OTHER), in eval mode
    meta: dict                   # provenance and training figures, for the file's metadata
    positives: list[np.ndarray]  # the positives trained on, 16 kHz (the export verifies on some)
    noise: np.ndarray            # the background noise the examples were mixed with, 16 kHz
    held_scores: np.ndarray      # (N, hops) smoothed phrase scores of the held-out examples
    held_kind: np.ndarray        # (N,) their kinds


def fit(phrase: str, checkpoint: Path, data: Path, cfg: EnrollConfig, say=tts.synthesize,
        items: Items | None = None, threads=None) -> Fit:
    """Steps 1–4 of the recipe (rotkws/enroll_cli.py): the network for `phrase`, trained (on
    `items` where given: what `gather` made for another recipe too; `threads`: `train`'s)."""
    started = time.perf_counter()
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    backbone, entry = load_checkpoint(checkpoint)
    if not isinstance(backbone, RotRNNClassifier) or backbone.cfg.bidirectional or not backbone.cfg.reads_pixels:
        raise ValueError(f"{checkpoint}: enroll needs a causal RotRNN with the logmel front-end")
    if not 1 <= cfg.blocks <= backbone.cfg.layers:
        raise ValueError(f"expected --blocks from 1 to the backbone's {backbone.cfg.layers} layers, got {cfg.blocks}")
    items = items or gather(phrase, data, cfg, rng, say)
    kind = example_kinds(items)
    held = rng.random(len(kind)) < VALIDATION_SHARE
    x, y = examples(items, rng)                  # items.speech is let go as it is rendered
    order = np.concatenate([np.flatnonzero(~held), np.flatnonzero(held)])   # training rows first: views, not copies
    n_train = int((~held).sum())
    net = enrolled_network(backbone, phrase)
    x, y, kind = x[order], torch.from_numpy(y[order]), kind[order]
    h = features(net, x, BACKBONE_BATCH, cfg.blocks)
    del x
    losses = train(net, h[:n_train], y[:n_train], cfg, hard=kind[:n_train] == SPEECH, threads=threads)
    held_scores = hop_scores(net, h[n_train:], trained=cfg.blocks)
    meta = {"training_data": {"enrolled_phrase": phrase, "backbone": str(Path(checkpoint).name),
                              "backbone_data": entry.get("data", "unknown"), **items.sources},
            "task": "enroll", "detection": {"threshold": MAX_THRESHOLD} | WAKE_RULE,
            "enroll": {"examples": int(len(y)), "steps": len(losses), "final_loss": float(np.mean(losses[-20:])),
                       "train_seconds": round(time.perf_counter() - started, 1), "config": vars(cfg)}}
    return Fit(net.eval(), meta, items.positives, items.noise, held_scores, kind[n_train:])
