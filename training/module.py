"""The LightningModule: loss, metrics, optimiser and schedule around a classifier (`net`): a
RotRNNClassifier, or the DS-CNN baseline (model/classifiers.py picks by the config's `arch`).

The network knows nothing of training; this module knows nothing of files (the DataModule does).
"""
import math
import time
from dataclasses import dataclass

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from corpus.labels import NOT_KEYWORDS
from model import build_classifier, classifier_config
from model.classifiers import Recurrent
from model.network import CHECKPOINT_KEY

from .augment import AugmentConfig, augment, augment_pixels
from .streams import IGNORE, peak_loss

STREAM_RESTART = 0.05   # stream training: chance that a row's next sequence starts from silence


@dataclass
class OptimConfig:
    lr: float = 0.008                  # AdamW, every weight but the recurrent ones
    weight_decay: float = 0.04
    recurrent_lr: float = 0.001        # Adam (no weight decay) for B, C, D, γ, θ
    warmup_epochs: float = 1.0         # linear warm-up, then cosine decay to 0, per step
    label_smoothing: float = 0.0
    peak_loss: float = 0.0             # stream training: weight of the peaks' loss beside the
                                       # frames' cross-entropy (training/streams.py: peak_loss)
    clips_after_streams: bool = False  # stream training: each step's clips start from the states
                                       # its stream rows reached (`clip_states`), not from zeros
    keyword_weight: float = 1.0        # stream training: weight of the frames that ask for a keyword
                                       # in the frames' cross-entropy (the rest weigh 1)


def warmup_cosine(step: int, warmup: int, total: int) -> float:
    """Learning-rate factor: linear from 0 to 1 over `warmup` steps, then cosine down to 0."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.5 * (1 + math.cos(math.pi * progress))


def optimizer(params, recurrent, lr: float, recurrent_lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW over `params`: the `recurrent` ones among them (from `recurrent_parameters()`, never
    from names) at their own lr with no weight decay, which makes AdamW exactly Adam there."""
    ids = {id(p) for p in recurrent}
    rest = [p for p in params if id(p) not in ids]
    return torch.optim.AdamW([{"params": rest, "lr": lr, "weight_decay": weight_decay},
                              {"params": list(recurrent), "lr": recurrent_lr, "weight_decay": 0.0}])


def schedule(opt: torch.optim.Optimizer, warmup: int, total: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Every group's lr by `warmup_cosine`, stepped once per optimiser step."""
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_cosine(s, warmup, total))


class KWSModule(L.LightningModule):
    """Arguments are plain dicts (the config sections), so `hyper_parameters` stays plain and a
    checkpoint loads with `torch.load(weights_only=True)`."""

    def __init__(self, model: dict, optim: dict, augment: dict | None = None, task: str = "kws12",
                 seed: int = 0, data: list | None = None, train_config: dict | None = None):
        super().__init__()
        self.save_hyperparameters()
        self.net = build_classifier(model)             # model: {"arch": ..., **config fields}
        self.optim = OptimConfig(**optim)
        self.aug = AugmentConfig(**(augment or {}))
        self.task, self.seed, self.data = task, seed, data or []
        # True: batches are log-mel pixels (B, frames, N_MELS), not audio (the logmel front-end)
        self.features = getattr(self.net.cfg, "reads_pixels", False)
        self.noise: Tensor | None = None               # background noise, set by the trainer: flat
                                                       # samples, or (M, N_MELS) pixel frames
        self._epoch_started: float | None = None       # None in an epoch resumed mid-way
        self._carry: Tensor | None = None              # stream training: each row's state
        n = self.net.cfg.n_classes
        self.acc = torch.nn.ModuleDict({s: MulticlassAccuracy(n, average="micro")
                                        for s in ("train_", "val_", "test_")})
        self.recurrent = isinstance(self.net, Recurrent)   # a CNN has no state norms, no recurrent group
        if self.recurrent:
            self.net.track_state_norms()
        self.keyword_columns = [i for i, label in enumerate(self.net.cfg.labels)
                                if label not in NOT_KEYWORDS]         # the labels that can fire

    # -- one step for every stage ------------------------------------------------------------
    def forward(self, x: Tensor, state: Tensor | None = None) -> Tensor:
        """x: audio (B, samples) float32 @ 16 kHz, or (B, frames, N_MELS) log-mel pixels when
        the network reads them (`self.features`) → logits (B, n_classes); `state`: the network's
        state before x (None: zeros)."""
        return (self.net.forward_features(x, state) if self.features else self.net(x, state))[0]

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        if isinstance(batch, dict):                             # streams and clips in one step
            return {k: self.on_after_batch_transfer(b, dataloader_idx) for k, b in batch.items()}
        x, labels = batch
        x = x.float()                                           # pixels come as uint8
        if labels.ndim == 1 and self.training and self.trainer is not None and self.trainer.training:
            x = self._augment(x)                                # streams come augmented
        return x, labels

    def _augment(self, x: Tensor) -> Tensor:
        g = torch.Generator(device=x.device)
        g.manual_seed(self.seed * 1_000_003 + self.global_step * 7919 + self.global_rank)
        if self.noise is not None and (self.noise.device != x.device or self.noise.dtype != x.dtype):
            self.noise = self.noise.to(x.device, x.dtype)
        if self.features:
            return augment_pixels(x, self.noise, self.aug, g)
        cfg = self.net.cfg
        return augment(x, self.noise, self.aug, cfg.frontend_stride, cfg.sample_rate, g)

    def stream_step(self, batch, name: str = "train/") -> Tensor:
        """Sequences with a target per frame (training/streams.py). Each row's state carries on
        into the same row of the next batch (detached; a row restarts from silence with
        probability STREAM_RESTART), so the network learns from states carried for minutes."""
        pixels, targets = batch                                 # (B, T, F), (B, T)
        B = len(targets)
        carry = self._carry
        if carry is None or carry.shape[0] != B:
            carry = pixels.new_zeros(B, self.net.state_size)
        keep = torch.rand(B, 1, device=pixels.device) >= STREAM_RESTART
        logits, state = self.net.frame_logits(pixels, carry * keep)
        self._carry = state.detach()
        C = logits.shape[-1]
        weight = None
        if self.optim.keyword_weight != 1.0:
            weight = logits.new_ones(C)
            weight[self.keyword_columns] = self.optim.keyword_weight
        loss = F.cross_entropy(logits.reshape(-1, C), targets.reshape(-1), weight=weight, ignore_index=IGNORE,
                               label_smoothing=self.optim.label_smoothing)
        if self.optim.peak_loss > 0:
            hit, false = peak_loss(logits, targets, self.keyword_columns)
            self.log(f"{name}peak_hit", hit, on_step=True, on_epoch=True, batch_size=B)
            self.log(f"{name}peak_false", false, on_step=True, on_epoch=True, batch_size=B)
            loss = loss + self.optim.peak_loss * (hit + false)
        scored = targets.reshape(-1) != IGNORE
        self.log(f"{name}loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=B)
        if name == "train/":                                    # alone: the frames' accuracy
            self.acc["train_"](logits.reshape(-1, C)[scored], targets.reshape(-1)[scored])
            self.log("train/acc", self.acc["train_"], on_step=False, on_epoch=True, prog_bar=True)
        return loss

    def clip_states(self, n: int) -> Tensor:
        """States for n clips (`clips_after_streams`): the stream rows' carried states (detached),
        row i mod B for clip i. A word is heard after whatever the stream held: another word, a
        keyword's tail, noise, silence; from zeros only at a stream's very start. The clip stage
        starts every clip from zeros, and the stream-trained default is surest of a word heard
        first: after another word and 1 s of silence it finds about a third fewer keywords at 0.96
        (BENCHMARKS.md, What came before a keyword). Measured: this alone does not remove that gap."""
        if self._carry is None:
            raise RuntimeError("clip_states needs a stream step first: it reads the rows' states")
        return self._carry[torch.arange(n, device=self._carry.device) % len(self._carry)]

    def model_step(self, batch, stage: str, state: Tensor | None = None) -> Tensor:
        audio, labels = batch                                   # (B, S), (B,)
        logits = self(audio, state)                             # (B, n_classes)
        loss = F.cross_entropy(logits, labels, label_smoothing=self.optim.label_smoothing)
        acc = self.acc[stage + "_"]
        acc(logits, labels)
        on_step = stage == "train"
        self.log(f"{stage}/loss", loss, on_step=on_step, on_epoch=True, prog_bar=True,
                 batch_size=len(labels), sync_dist=not on_step)
        self.log(f"{stage}/acc", acc, on_step=False, on_epoch=True, prog_bar=True)
        for i, norm in enumerate(self.net.state_norms() if self.recurrent else []):
            self.log(f"{stage}/state_norm_{i}", norm, on_step=False, on_epoch=True,
                     batch_size=len(labels), sync_dist=True)
        return loss

    def training_step(self, batch, batch_idx):
        if isinstance(batch, dict):                             # data.stream_clip_batch > 0
            loss = self.stream_step(batch["streams"], "train/stream_")
            state = self.clip_states(len(batch["clips"][1])) if self.optim.clips_after_streams else None
            loss = loss + self.model_step(batch["clips"], "train", state)
        else:
            loss = self.stream_step(batch) if batch[1].ndim == 2 else self.model_step(batch, "train")
        for i, group in enumerate(self.optimizers().param_groups):
            self.log(f"lr/group{i}", group["lr"], on_step=False, on_epoch=True, batch_size=1)
        return loss

    def on_train_epoch_start(self):
        self._epoch_started = time.monotonic()

    def on_train_epoch_end(self):
        if self._epoch_started is not None:
            self.log("train/epoch_seconds", time.monotonic() - self._epoch_started, batch_size=1)

    def validation_step(self, batch, batch_idx):
        return self.model_step(batch, "val")

    def test_step(self, batch, batch_idx):
        return self.model_step(batch, "test")

    # -- optimiser ---------------------------------------------------------------------------
    def configure_optimizers(self):
        """AdamW for most weights; the recurrent group (from `net.recurrent_parameters()`, never
        from names) at its own lr with no weight decay, which makes AdamW exactly Adam there."""
        recurrent = self.net.recurrent_parameters() if self.recurrent else []
        o = self.optim
        opt = optimizer(self.net.parameters(), recurrent, o.lr, o.recurrent_lr, o.weight_decay)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        epochs = self.trainer.max_epochs if self.trainer.max_epochs and self.trainer.max_epochs > 0 else 1
        sched = schedule(opt, max(1, int(round(o.warmup_epochs * total / epochs))), total)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # -- checkpoint contract (model/classifiers.py: checkpoint_payload) ----------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        metrics = {k: float(v) for k, v in self.trainer.callback_metrics.items()
                   if isinstance(v, Tensor) and v.numel() == 1}
        checkpoint[CHECKPOINT_KEY] = {"config": classifier_config(self.net), "task": self.task,
                                      "labels": list(self.net.cfg.labels), "data": self.data,
                                      "metrics": metrics, "train_config": self.hparams.train_config}
