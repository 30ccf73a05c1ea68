"""Which classifier a model config builds, the contract they keep, and checkpoints that rebuild
either kind.

A model config is a plain dict: one config dataclass's fields plus `arch`, which names the
network — "rotrnn" (RotRNNConfig → RotRNNClassifier; the default when `arch` is absent, as in
every checkpoint written before there was a choice) or "dscnn" (CNNConfig → DSCNN). Every
network is a `Classifier`; those with recurrent layers are also `Recurrent` (training gives
their recurrent weights their own optimiser group; export precomputes their kernels).
"""
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from .cnn import DSCNN, CNNConfig
from .network import CHECKPOINT_KEY, STATE_PREFIX, RotRNNClassifier, RotRNNConfig

class Classifier(Protocol):
    """`net(audio, state=None) -> (logits, state_out)`: audio (B, samples) float32 at
    cfg.sample_rate, samples a multiple of cfg.frontend_stride. `cfg` has labels, n_classes,
    sample_rate, frontend_stride, reads_pixels and bidirectional (True: a clip classifier that
    takes no state and returns None for it)."""

    cfg: Any

    def __call__(self, audio: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor | None]: ...


@runtime_checkable
class Recurrent(Protocol):
    """A classifier with recurrent layers and, when causal, a carried state."""

    state_size: int

    def state_layout(self) -> list[tuple[str, int]]: ...

    def initial_state(self, batch: int) -> Tensor: ...

    def recurrent_parameters(self) -> list[nn.Parameter]: ...

    def state_norms(self) -> list[float]: ...

    def track_state_norms(self, on: bool = True) -> None: ...

    def freeze_kernels(self, max_samples: int) -> None: ...


def streams(net: Classifier) -> bool:
    """True for a causal network that carries a state from call to call."""
    return isinstance(net, Recurrent) and not net.cfg.bidirectional


ARCHS = {"rotrnn": (RotRNNConfig, RotRNNClassifier), "dscnn": (CNNConfig, DSCNN)}
DEFAULT_ARCH = "rotrnn"


def check_arch(arch: str) -> str:
    if arch not in ARCHS:
        raise ValueError(f"arch must be {' or '.join(ARCHS)}, got {arch!r}")
    return arch


def config_class(arch: str = DEFAULT_ARCH) -> type:
    """The config dataclass whose fields a model config of this arch holds."""
    return ARCHS[check_arch(arch)][0]


def build_classifier(config: dict) -> nn.Module:
    """{"arch": ..., **config fields} → a fresh network (arch absent: a RotRNN)."""
    config = dict(config)
    config_cls, net_cls = ARCHS[check_arch(config.pop("arch", DEFAULT_ARCH))]
    return net_cls(config_cls(**config))


def classifier_arch(net: nn.Module) -> str:
    for arch, (_, net_cls) in ARCHS.items():
        if isinstance(net, net_cls):
            return arch
    raise TypeError(f"expected one of {', '.join(c.__name__ for _, c in ARCHS.values())}, "
                    f"got {type(net).__name__}")


def classifier_config(net: nn.Module) -> dict:
    """The plain dict that build_classifier rebuilds `net` from: its arch and config."""
    return {"arch": classifier_arch(net), **net.cfg.to_dict()}


def checkpoint_payload(net: nn.Module, **meta) -> dict:
    """What a checkpoint must hold so that loading rebuilds the network without guessing:
    {"rotkws": {"config": {"arch": ..., ...}, **meta}, "state_dict": {"net.<name>": tensor}}.
    Plain types only, so `torch.load(..., weights_only=True)` reads it."""
    return {CHECKPOINT_KEY: {"config": classifier_config(net), **meta},
            "state_dict": {STATE_PREFIX + k: v for k, v in net.state_dict().items()}}


def classifier_from_checkpoint(ckpt: dict) -> nn.Module:
    """Rebuild a classifier (either arch) from a loaded checkpoint dict (see checkpoint_payload)."""
    if CHECKPOINT_KEY not in ckpt:
        raise ValueError(f"not a rotkws checkpoint: no {CHECKPOINT_KEY!r} entry "
                         f"(keys: {sorted(ckpt)[:8]})")
    net = build_classifier(ckpt[CHECKPOINT_KEY]["config"])
    weights = {k[len(STATE_PREFIX):]: v for k, v in ckpt["state_dict"].items() if k.startswith(STATE_PREFIX)}
    net.load_state_dict(weights)
    return net


def load_checkpoint(path) -> tuple[nn.Module, dict]:
    """(the checkpoint file's classifier in eval mode, its rotkws entry); ValueError naming the
    file when it is missing, unreadable or not a rotkws checkpoint."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint {path} does not exist")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:   # a file that is not a checkpoint raises many kinds of errors
        raise ValueError(f"{path}: not a readable checkpoint: {e}") from None
    try:
        return classifier_from_checkpoint(ckpt).eval(), ckpt[CHECKPOINT_KEY]
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
