"""`rotkws train --config FILE [--section.key VALUE …] [--resume]`.

Writes into the run directory (trainer.run_dir, default runs/<config name>):
  checkpoints/last.ckpt   every epoch (and every trainer.checkpoint_every_n_steps steps)
  checkpoints/best.ckpt   the best validation accuracy so far
  logs/                   metrics.csv (and TensorBoard events when tensorboard is installed)

A run ends at trainer.max_epochs, or earlier at trainer.patience epochs without a better val/acc,
or at an epoch end when trainer.stop_at (a Unix time) leaves no room for another epoch: then
`--resume` continues it from that epoch's last.ckpt.
"""
import argparse
import importlib.util
import os
import sys
import time
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.loggers import CSVLogger

from corpus.clips import ClipError
from model.classifiers import DEFAULT_ARCH, config_class, load_checkpoint

from .config import ConfigError, TrainConfig, load_config
from .data import KWSDataModule
from .module import KWSModule
from .streams import hard_weights
from corpus.labels import task_labels

USAGE = "rotkws train --config FILE [--section.key VALUE ...] [--resume]"


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, dict[str, str]]:
    """Known flags, then `--section.key value` / `--section.key=value` pairs as overrides."""
    parser = argparse.ArgumentParser(prog="rotkws train", usage=USAGE, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="YAML file (training/configs/*.yaml)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the run directory's last.ckpt")
    args, rest = parser.parse_known_args(argv)
    overrides, i = {}, 0
    while i < len(rest):
        flag = rest[i]
        if not flag.startswith("--") or "." not in flag:
            raise ConfigError(f"unexpected argument {flag!r}: expected --section.key VALUE")
        if "=" in flag:
            key, value = flag[2:].split("=", 1)
            i += 1
        elif i + 1 < len(rest):
            key, value = flag[2:], rest[i + 1]
            i += 2
        else:
            raise ConfigError(f"{flag} needs a value")
        overrides[key] = value
    return args, overrides


def run_dir(cfg: TrainConfig) -> Path:
    return Path(cfg.trainer.run_dir or Path("runs") / cfg.name)


def precision(cfg: TrainConfig) -> str:
    """bf16 mixed precision on GPUs, full float32 elsewhere, unless the config says."""
    if cfg.trainer.precision != "auto":
        return cfg.trainer.precision
    on_gpu = cfg.trainer.accelerator in ("gpu", "cuda") or (
        cfg.trainer.accelerator == "auto" and torch.cuda.is_available())
    return "bf16-mixed" if on_gpu else "32-true"


def loggers(directory: Path) -> list:
    out = [CSVLogger(directory, name="logs")]             # a resumed run adds version_N+1
    if importlib.util.find_spec("tensorboard") is not None:
        from lightning.pytorch.loggers import TensorBoardLogger
        out.append(TensorBoardLogger(directory, name="logs", default_hp_metric=False))
    return out


def checkpoints(directory: Path, cfg: TrainConfig, has_val: bool) -> list[ModelCheckpoint]:
    """best.ckpt at the best val/acc, then last.ckpt at every epoch end (and every N steps): in that
    order, so that last.ckpt holds the best score as of its own epoch, which a resumed run must beat."""
    last = dict(dirpath=directory, filename="last", save_top_k=1, enable_version_counter=False)
    out = [ModelCheckpoint(directory, filename="best", monitor="val/acc", mode="max", save_top_k=1,
                           enable_version_counter=False)] if has_val else []
    out.append(ModelCheckpoint(**last))
    if cfg.trainer.checkpoint_every_n_steps > 0:
        out.append(ModelCheckpoint(**last, every_n_train_steps=cfg.trainer.checkpoint_every_n_steps))
    return out


class StopAt(L.Callback):
    """Stops at the first epoch end from which one more epoch, as long as the longest this process
    has run (validation included), would end after `deadline` (Unix time). Keeps no state: a
    resumed run gets its own deadline. Not Lightning's `max_time`: that stops mid-epoch and counts
    the resumed checkpoint's time against the new process."""

    def __init__(self, deadline: float):
        self.deadline, self.longest, self._started = deadline, 0.0, None

    def on_train_epoch_start(self, trainer, module):
        self._started = time.time()

    def on_train_epoch_end(self, trainer, module):     # after validation, before the checkpoints
        now = time.time()
        self.longest = max(self.longest, now - self._started)
        if now + self.longest > self.deadline:
            trainer.should_stop = True


def stopping(cfg: TrainConfig, has_val: bool) -> list[L.Callback]:
    """Early stopping on val/acc (trainer.patience) and the deadline (trainer.stop_at)."""
    t, out = cfg.trainer, []
    if t.patience > 0:
        if not has_val:
            raise ConfigError("trainer.patience needs a validation split: this run's data has none")
        out.append(EarlyStopping(monitor="val/acc", mode="max", patience=t.patience))
    if t.stop_at is not None:
        out.append(StopAt(float(t.stop_at)))
    return out


def datamodule(cfg: TrainConfig) -> KWSDataModule:
    """The run's data, read and split (downloaded first where the config asks)."""
    net_cfg = config_class(cfg.model.get("arch", DEFAULT_ARCH))(**{k: v for k, v in cfg.model.items()
                                                                  if k != "arch"})
    dm = KWSDataModule(cfg.data, sample_rate=net_cfg.sample_rate,
                       features=getattr(net_cfg, "reads_pixels", False))
    if os.environ.get("LOCAL_RANK", "0") == "0":          # downloads once per machine: the
        dm.prepare_data()                                 # launcher starts other ranks later
    dm.setup("fit")
    return dm


def trainer_for(cfg: TrainConfig, has_val: bool, callbacks: list) -> L.Trainer:
    t, directory = cfg.trainer, run_dir(cfg)
    callbacks = checkpoints(directory / "checkpoints", cfg, has_val) + stopping(cfg, has_val) + list(callbacks)
    if t.progress_bar:
        callbacks.append(TQDMProgressBar(refresh_rate=1))
    return L.Trainer(max_epochs=t.max_epochs, max_steps=t.max_steps, accelerator=t.accelerator,
                     devices=t.devices, num_nodes=t.num_nodes, strategy=t.strategy,
                     precision=precision(cfg), default_root_dir=directory,
                     logger=loggers(directory), callbacks=callbacks,
                     log_every_n_steps=t.log_every_n_steps, enable_progress_bar=t.progress_bar,
                     limit_train_batches=t.limit_train_batches,
                     limit_val_batches=t.limit_val_batches, num_sanity_val_steps=0,
                     enable_model_summary=False)


def build(cfg: TrainConfig, callbacks: list | tuple = ()) -> tuple[L.Trainer, KWSModule, KWSDataModule]:
    """The trainer, module and (set-up) data module of a run; nothing trained yet. `callbacks`
    join the checkpoint and progress-bar callbacks."""
    dm = datamodule(cfg)
    model = {**cfg.model, "labels": list(task_labels(cfg.data.task))}
    data = dm.described + [{"skipped_corrupt": len(dm.skipped) + dm.corrupt_images}]
    module = KWSModule(model, vars(cfg.optim), vars(cfg.augment), cfg.data.task,
                       cfg.trainer.seed, data, cfg.to_dict())
    module.noise = None if dm.noise is None else torch.from_numpy(dm.noise)
    if cfg.trainer.init_from:
        init_weights(module, Path(cfg.trainer.init_from))
    if dm.streams is not None:                            # hard examples of the starting weights
        pool = dm.streams.pool
        columns = module.keyword_columns
        pool.other_weights = hard_weights(module.net, pool.others, columns)
        pool.keyword_weights = hard_weights(module.net, pool.keywords, columns, own=pool.keyword_labels)
    return trainer_for(cfg, len(dm.sets["validation"]) > 0, list(callbacks)), module, dm


def init_weights(module: KWSModule, path: Path) -> None:
    """Copy a checkpoint's classifier weights into the module's network (same architecture). A
    checkpoint with other labels gives everything but its head, which starts afresh."""
    try:
        net, entry = load_checkpoint(path)
    except ValueError as e:
        raise ConfigError(f"trainer.init_from: {e}") from None
    weights = net.state_dict()
    if tuple(net.cfg.labels) != tuple(module.net.cfg.labels):
        weights = {k: v for k, v in weights.items() if not k.startswith("head.")}
        weights |= {k: v for k, v in module.net.state_dict().items() if k.startswith("head.")}
        print(f"trainer.init_from: {path} has {len(net.cfg.labels)} labels, the config "
              f"{len(module.net.cfg.labels)}: every weight but the head's copied", file=sys.stderr)
    try:
        module.net.load_state_dict(weights)
    except RuntimeError as e:                             # other widths, depths or labels
        raise ConfigError(f"trainer.init_from: {path} holds another network than the config's "
                          f"({entry['config']}): {str(e).splitlines()[0]}") from None


def resume_path(cfg: TrainConfig) -> Path:
    path = run_dir(cfg) / "checkpoints" / "last.ckpt"
    if not path.is_file():
        raise ConfigError(f"nothing to resume: {path} does not exist (train without --resume first)")
    return path


def train(cfg: TrainConfig, resume: bool = False, callbacks: list | tuple = ()) -> KWSModule:
    if cfg.trainer.threads > 0:
        torch.set_num_threads(cfg.trainer.threads)
    # augmentation lives in the module's on_after_batch_transfer on purpose (it runs on the device)
    warnings.filterwarnings("ignore", message=r".*overridden `on_after_batch_transfer`")
    L.seed_everything(cfg.trainer.seed, workers=True, verbose=False)
    ckpt = resume_path(cfg) if resume else None
    trainer, module, dm = build(cfg, callbacks)
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt, weights_only=True)
    return module


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args, overrides = parse_args(argv)
        train(load_config(args.config, overrides), resume=args.resume)
    except (ConfigError, ClipError) as e:
        print(f"rotkws train: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
