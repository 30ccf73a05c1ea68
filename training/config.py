"""A training run's configuration: a YAML file of five sections, overridable from the command
line (`--model.d_model 64`). Every key is typed by a dataclass; an unknown key is an error that
names it.

    model:   `arch` (rotrnn, the default, or dscnn: model/classifiers.py), then that arch's
             config fields (RotRNNConfig in model/network.py, CNNConfig in model/cnn.py), except
             labels (they come from the task)
    data:    DataConfig (training/data.py)
    augment: AugmentConfig (training/augment.py)
    optim:   OptimConfig (training/module.py)
    trainer: TrainerConfig (below)
"""
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from model import RotRNNConfig, build_classifier
from model.classifiers import ARCHS, DEFAULT_ARCH, config_class

from .augment import AugmentConfig
from .data import DataConfig
from .module import OptimConfig
from corpus.labels import task_labels


class ConfigError(ValueError):
    """A configuration that cannot run: the message names the key or file."""


@dataclass
class TrainerConfig:
    max_epochs: int = 10
    max_steps: int = -1                  # stop after this many optimiser steps (−1: epochs decide)
    accelerator: str = "auto"            # cpu, gpu, auto
    devices: int | str = "auto"          # per node; > 1 runs DDP
    num_nodes: int = 1
    strategy: str = "auto"               # auto, ddp, …
    precision: str = "auto"              # auto: bf16-mixed on GPU, 32-true on CPU
    run_dir: str | None = None           # checkpoints and logs; None: runs/<config name>
    checkpoint_every_n_steps: int = 0    # also write last.ckpt every N steps (0: epoch ends only)
    log_every_n_steps: int = 10
    limit_train_batches: int | float = 1.0   # a share (float ≤ 1.0) or a count (int) of batches
    limit_val_batches: int | float = 1.0
    seed: int = 0                        # weights, augmentation and data order
    init_from: str | None = None         # start from this checkpoint's weights (fine-tuning; its
                                         # network must be the config's); --resume wins over it
    threads: int = 0                     # torch CPU threads in each process (0: torch's default)
    progress_bar: bool = True
    patience: int = 0                    # stop when val/acc has not improved for this many epochs
                                         # (0: every epoch of max_epochs); --resume keeps the count
    stop_at: float | None = None         # Unix time: stop at the first epoch end from which one more
                                         # epoch (the longest of this process) would pass it; the
                                         # first epoch always runs. For sessions that end; --resume


SECTIONS = {"model": RotRNNConfig, "data": DataConfig, "augment": AugmentConfig,
            "optim": OptimConfig, "trainer": TrainerConfig}
NOT_CONFIGURABLE = {"model": {"labels"}}   # derived from data.task
ARCH_KEY = "model.arch"                    # picks the model section's dataclass (SECTIONS: the default)


@dataclass
class TrainConfig:
    model: dict = field(default_factory=dict)         # arch + its config's keyword arguments (no labels)
    data: DataConfig = field(default_factory=DataConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    name: str = "run"                                  # the config file's stem

    def to_dict(self) -> dict:
        out = {k: dataclasses.asdict(getattr(self, k)) for k in ("data", "augment", "optim", "trainer")}
        return {"model": dict(self.model), **out, "name": self.name}


def section_class(section: str, arch: str = DEFAULT_ARCH) -> type:
    return config_class(arch) if section == "model" else SECTIONS[section]


def known_keys(section: str, arch: str = DEFAULT_ARCH) -> list[str]:
    names = [f.name for f in dataclasses.fields(section_class(section, arch))
             if f.name not in NOT_CONFIGURABLE.get(section, set())]
    return ["arch"] + names if section == "model" else names


def check_value(section: str, key: str, value, arch: str = DEFAULT_ARCH):
    """Coerce ints to floats where a float is expected; refuse values of the wrong kind."""
    if f"{section}.{key}" == ARCH_KEY:
        if not isinstance(value, str) or value not in ARCHS:
            raise ConfigError(f"{ARCH_KEY}: expected {' or '.join(ARCHS)}, got {value!r}")
        return value
    default = {f.name: f for f in dataclasses.fields(section_class(section, arch))}[key]
    base = default.default if default.default is not dataclasses.MISSING else None
    if isinstance(base, bool) and not isinstance(value, bool):
        raise ConfigError(f"{section}.{key}: expected true or false, got {value!r}")
    if default.type is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(base, (int, float)) and not isinstance(base, bool) and not isinstance(value, (int, float)):
        raise ConfigError(f"{section}.{key}: expected a number, got {value!r}")
    return value


def set_key(tree: dict, dotted: str, value, arch: str = DEFAULT_ARCH) -> None:
    """tree[section][key] = value, checked against the section's dataclass (the model section's:
    the one of `arch`)."""
    section, _, key = dotted.partition(".")
    if section not in SECTIONS:
        raise ConfigError(f"unknown config key {dotted!r}: sections are {', '.join(SECTIONS)}")
    if key not in known_keys(section, arch):
        of = f" (arch {arch})" if section == "model" else ""
        raise ConfigError(f"unknown config key {dotted!r}: {section}{of} has "
                          f"{', '.join(known_keys(section, arch))}")
    tree.setdefault(section, {})[key] = check_value(section, key, value, arch)


def read_yaml(path: Path) -> dict:
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        tree = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: expected a mapping of sections ({', '.join(SECTIONS)})")
    return tree


def load_config(path, overrides: dict[str, str] | None = None) -> TrainConfig:
    """The YAML file, then `overrides` ({'model.d_model': '64'}, values parsed as YAML)."""
    path = Path(path)
    pairs = []
    for section, values in read_yaml(path).items():
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: section {section!r} must be a mapping of keys")
        pairs += [(f"{section}.{key}", value) for key, value in values.items()]
    pairs += [(dotted, yaml.safe_load(text) if isinstance(text, str) else text)
              for dotted, text in (overrides or {}).items()]
    arch = next((value for dotted, value in reversed(pairs) if dotted == ARCH_KEY), DEFAULT_ARCH)
    arch = check_value("model", "arch", arch)    # first: it decides which model keys exist
    tree: dict = {}
    for dotted, value in pairs:
        set_key(tree, dotted, value, arch)
    return build_config(tree, path.stem)


def build_config(tree: dict, name: str) -> TrainConfig:
    try:
        sections = {s: SECTIONS[s](**tree.get(s, {})) for s in ("data", "augment", "optim", "trainer")}
        cfg = TrainConfig(model=dict(tree.get("model", {})), name=name, **sections)
        cfg.data.source_list()
        labels = task_labels(cfg.data.task)
        build_classifier({**cfg.model, "labels": labels})   # impossible nets fail now
    except (TypeError, ValueError) as e:
        raise ConfigError(f"invalid configuration: {e}") from None
    return cfg
