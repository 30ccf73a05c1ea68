"""The RotRNN keyword classifier: raw audio → front-end → S5-style blocks → pooling → head.

A causal network streams: `net(audio, state) -> (logits, state_out)` where `state` is one flat
float32 vector per batch row holding everything the network remembers (the front-end's last
samples, every layer's RotRNN state, the pooled features), so one call on a clip equals many
calls on its pieces with the state carried.
"""
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .frontend import Frontend, FrontendConfig
from .logmel import SAMPLE_RATE
from .lru import LRU
from .rotrnn import RotRNN

EMA_BLOCK = 128   # frames per block of the per-frame pooling (stream training): a (128, 128) weight


class ClassifierConfig:
    """What every classifier config (a dataclass with `labels` and `frontend`) derives alike."""

    @property
    def n_classes(self) -> int:
        return len(self.labels)

    @property
    def reads_pixels(self) -> bool:
        """True when the network can be fed the log-mel image corpus (`forward_features`)."""
        return self.frontend == "logmel"

    def to_dict(self) -> dict:
        return asdict(self) | {"labels": list(self.labels)}


@dataclass
class RotRNNConfig(ClassifierConfig):
    """The network's settings as configs and checkpoints write them. The front-end's keys
    (`frontend*`, `mask_*`) stay flat here; `frontend_config` is them as a FrontendConfig
    (model/frontend.py), which checks them."""

    labels: tuple[str, ...] = ("yes", "no")   # class names; the class count is len(labels)
    sample_rate: int = SAMPLE_RATE            # Hz of the audio the network reads
    d_model: int = 96                         # width of the residual stream
    state: int = 128                          # RotRNN state size per layer (all heads)
    heads: int = 32                           # RotRNN heads; state / heads must be even
    layers: int = 6                           # number of blocks
    bidirectional: bool = False               # True: clip classifier (the paper); False: streams
    normalize_input: bool = True              # ξ on/off (the reviewers' ablation); the LRU's γ
    layer: str = "rotrnn"                     # "rotrnn", or "lru" (the LRU in the block; gamma_* its ring)
    dropout: float = 0.1                      # in every block
    chunk: int = 64                           # steps per chunk of the parallel scan
    gamma_min: float = 0.9                    # slowest/fastest decays at initialisation
    gamma_max: float = 0.999
    max_phase: float = 2 * math.pi            # θ ~ U[0, max_phase)
    frontend: str = "linear"                  # linear (the paper), conv, filterbank or logmel
    frontend_stride: int = 1                  # samples per RotRNN step ("logmel": 160, fixed)
    frontend_kernel: int = 1                  # samples each step sees, ≥ stride ("logmel": 480)
    frontend_filters: int = 40                # filterbank channels ("filterbank" only)
    frontend_norm: str = "none"               # the filterbank's log powers: none, frame or batch
    pool_seconds: float = 0.5                 # time constant of the causal EMA pooling
    mask_bands: int = 0                       # training only ("filterbank", "logmel"): SpecAugment,
    mask_frames: int = 0                      # zero 2 random spans of ≤ this many bands / frames

    def __post_init__(self):
        self.labels = tuple(self.labels)
        if self.layer not in ("rotrnn", "lru"):
            raise ValueError(f"layer must be rotrnn or lru, got {self.layer!r}")
        front = self.frontend_config                                  # checks the front-end keys
        self.frontend_stride, self.frontend_kernel, self.frontend_norm = front.stride, front.kernel, front.norm

    @property
    def frontend_config(self) -> FrontendConfig:
        return FrontendConfig(kind=self.frontend, stride=self.frontend_stride, kernel=self.frontend_kernel,
                              filters=self.frontend_filters, norm=self.frontend_norm,
                              mask_bands=self.mask_bands, mask_frames=self.mask_frames)

    @property
    def frame_rate(self) -> float:
        """RotRNN steps per second of audio."""
        return self.sample_rate / self.frontend_stride

def paper_sc35_config(labels) -> RotRNNConfig:
    """The authors' Speech Commands (35 classes, raw 16 kHz, 16,000 steps) network."""
    return RotRNNConfig(labels=tuple(labels), d_model=96, state=128, heads=32, layers=6,
                        bidirectional=True, dropout=0.1, frontend="linear")


class Block(nn.Module):
    """norm → RotRNN (or LRU) → GELU → half-GLU (x·σ(Wx)) → dropout → residual (the S5 layout)."""

    def __init__(self, cfg: RotRNNConfig):
        super().__init__()
        self.norm = nn.LayerNorm(cfg.d_model)
        common = dict(bidirectional=cfg.bidirectional, normalize_input=cfg.normalize_input,
                      chunk=cfg.chunk, max_phase=cfg.max_phase)
        self.rnn = (RotRNN(cfg.d_model, cfg.state, cfg.heads, gamma_min=cfg.gamma_min,
                           gamma_max=cfg.gamma_max, **common) if cfg.layer == "rotrnn" else
                    LRU(cfg.d_model, cfg.state, r_min=cfg.gamma_min, r_max=cfg.gamma_max, **common))
        self.gate = nn.Linear(cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, h: Tensor, state: Tensor | None) -> tuple[Tensor, Tensor | None]:
        y, state = self.rnn(self.norm(h), state)                          # (B, T, d)
        y = F.gelu(y)
        y = y * torch.sigmoid(self.gate(y))
        return h + self.drop(y), state


class RotRNNClassifier(nn.Module):
    """`net(audio, state=None) -> (logits, state_out)`.

    audio: (B, samples) float32 @ cfg.sample_rate in [−1, 1]; samples a multiple of the
           front-end stride
    state: (B, net.state_size) float32 (zeros to start) or None; causal networks only
    logits: (B, n_classes) for the audio heard so far; state_out: (B, state_size) or None
    """

    def __init__(self, cfg: RotRNNConfig):
        super().__init__()
        self.cfg = cfg
        self.frontend = Frontend(cfg.frontend_config, cfg.d_model, cfg.sample_rate)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.n_classes)
        self.pool_decay = math.exp(-1 / (cfg.pool_seconds * cfg.frame_rate))   # EMA α per step

    def state_layout(self) -> list[tuple[str, int]]:
        """The flat state's segments, in order: (name, size)."""
        if self.cfg.bidirectional:
            return []
        return ([("frontend_tail", self.frontend.tail)]
                + [(f"rotrnn_{i}", self.cfg.state) for i in range(self.cfg.layers)]
                + [("pooled", self.cfg.d_model)])

    @property
    def state_size(self) -> int:
        return sum(size for _, size in self.state_layout())

    def initial_state(self, batch: int) -> Tensor:
        return torch.zeros(batch, self.state_size)

    def recurrent_parameters(self) -> list[nn.Parameter]:
        """Every recurrent layer's own (RotRNN: B, C, D, γ, θ; LRU: ν, φ, γ, B, C, D): their own
        optimiser group (no weight decay)."""
        return [p for block in self.blocks for p in block.rnn.recurrent_parameters()]

    def state_norms(self) -> list[float]:
        """Mean per-head ‖x_t‖ of each layer in the last forward (set `track_norm` first)."""
        return [float(b.rnn.last_state_norm) for b in self.blocks if b.rnn.last_state_norm is not None]

    def track_state_norms(self, on: bool = True) -> None:
        for b in self.blocks:
            b.rnn.track_norm = on

    def freeze_kernels(self, max_samples: int) -> None:
        """Precompute every layer's scan kernels for calls of up to `max_samples` (export)."""
        for b in self.blocks:
            b.rnn.freeze(max_samples // self.cfg.frontend_stride)

    def forward(self, audio: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        parts = self._split(state, audio.shape[0])
        h, tail = self.frontend(audio, parts[0])                              # (B, T, d)
        return self._body(h, tail, parts)

    def forward_features(self, pixels: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """The network after its fixed log-mel stage ("logmel" front-end only).

        pixels: (B, T, N_MELS) in [0, 255] at 100 frames per second, as the image corpus holds
        them and `frontend.logmel` computes them from audio. The state's front-end tail (audio
        samples) passes through unchanged; zeros when no state comes in.
        """
        if not self.cfg.reads_pixels:
            raise ValueError(f"forward_features needs the logmel front-end, not {self.cfg.frontend!r}")
        parts = self._split(state, pixels.shape[0])
        tail = parts[0] if parts[0] is not None else pixels.new_zeros(pixels.shape[0], self.frontend.tail)
        return self._body(self.frontend.embed(pixels), tail, parts)

    def _body(self, h: Tensor, tail: Tensor, parts: list[Tensor | None]) -> tuple[Tensor, Tensor | None]:
        """Blocks, pooling and head over the front-end's (B, T, d_model) output."""
        if self.cfg.bidirectional:
            for block in self.blocks:
                h, _ = block(h, None)
            return self.head(self.norm(h.mean(1))), None
        states = [tail]
        for block, s in zip(self.blocks, parts[1:-1]):
            h, s = block(h, s)
            states.append(s)
        pooled = self._ema(h, parts[-1])
        states.append(pooled)
        return self.head(self.norm(pooled)), torch.cat(states, 1)

    def frame_logits(self, pixels: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Logits after every frame (stream training): (B, T, N_MELS) pixels → (B, T, n_classes)
        and the state after the last frame. Row t equals `forward_features(pixels[:, :t + 1],
        state)[0]`, in one pass (causal networks only)."""
        if self.cfg.bidirectional or not self.cfg.reads_pixels:
            raise ValueError("frame_logits needs a causal network with the logmel front-end")
        parts = self._split(state, pixels.shape[0])
        tail = parts[0] if parts[0] is not None else pixels.new_zeros(pixels.shape[0], self.frontend.tail)
        h, states = self.frontend.embed(pixels), [tail]
        for block, s in zip(self.blocks, parts[1:-1]):
            h, s = block(h, s)
            states.append(s)
        pooled = self._ema_frames(h, parts[-1])                              # (B, T, d)
        states.append(pooled[:, -1])
        return self.head(self.norm(pooled)), torch.cat(states, 1)

    def logits_from_block(self, h: Tensor, first: int) -> Tensor:
        """The end of `frame_logits` (every state zero at the start): blocks `first`… on their
        input h (B, T, d_model), the pooling at every frame, norm, head → (B, T, n_classes).
        `rotkws enroll` computes the frozen blocks below `first` once and trains the rest."""
        for block in self.blocks[first:]:
            h, _ = block(h, None)
        return self.head(self.norm(self._ema_frames(h, None)))

    def _ema_frames(self, h: Tensor, p0: Tensor | None) -> Tensor:
        """Every p_t of `_ema`: (B, T, d), by EMA_BLOCK-frame blocks of relative exponents."""
        alpha, out = self.pool_decay, []
        p = p0 if p0 is not None else h.new_zeros(h.shape[0], h.shape[2])
        for start in range(0, h.shape[1], EMA_BLOCK):
            x = h[:, start:start + EMA_BLOCK]
            n = x.shape[1]
            i = torch.arange(n, device=h.device, dtype=torch.float64)
            lag = i[:, None] - i[None, :]                                     # t − s
            w = torch.where(lag >= 0, (1 - alpha) * alpha ** lag.clamp(min=0), torch.zeros_like(lag))
            y = torch.einsum("ts,bsd->btd", w.to(h.dtype), x) + (alpha ** (i + 1)).to(h.dtype)[None, :, None] * p[:, None]
            out.append(y)
            p = y[:, -1]
        return torch.cat(out, 1)

    def _split(self, state: Tensor | None, batch: int) -> list[Tensor | None]:
        if self.cfg.bidirectional and state is not None:
            raise ValueError("a bidirectional network classifies whole clips: it takes no state")
        if state is None:
            return [None] * (len(self.blocks) + 1) + [None]
        if state.shape != (batch, self.state_size):
            raise ValueError(f"expected state of shape ({batch}, {self.state_size}), got {tuple(state.shape)}")
        return list(state.split([size for _, size in self.state_layout()], 1))

    def _ema(self, h: Tensor, p0: Tensor | None) -> Tensor:
        """p_T = α^T p0 + (1 − α) Σ_t α^(T−1−t) h_t, from relative exponents."""
        T = h.shape[1]
        e = torch.arange(T - 1, -1, -1, device=h.device, dtype=torch.float64)
        alpha = self.pool_decay
        w = (1 - alpha) * alpha ** e                                          # (T,) float64
        pooled = torch.einsum("btd,t->bd", h, w.to(h.dtype))
        if p0 is not None:
            pooled = pooled + (w[0] * alpha / (1 - alpha)).to(h.dtype) * p0     # α^T p0
        return pooled


def count_parameters(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


CHECKPOINT_KEY = "rotkws"   # where a checkpoint keeps its config, labels and provenance
STATE_PREFIX = "net."       # the classifier's weights inside a (Lightning) checkpoint's state_dict
                            # (checkpoint_payload, classifier_from_checkpoint: model/classifiers.py)
