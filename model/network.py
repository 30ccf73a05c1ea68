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

from .logmel import FRAME, HOP, N_MELS, PIXEL_MEAN, PIXEL_STD, SAMPLE_RATE, LogMelPixels
from .lru import LRU
from .rotrnn import RotRNN

FRONTENDS = ("linear", "conv", "filterbank", "logmel")


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
    labels: tuple[str, ...] = ("yes", "no")   # class names; the class count is len(labels)
    sample_rate: int = SAMPLE_RATE            # Hz of the audio the network reads
    d_model: int = 96                         # width of the residual stream
    state: int = 128                          # RotRNN state size per layer (all heads)
    heads: int = 32                           # RotRNN heads; state / heads must be even
    layers: int = 6                           # number of blocks
    bidirectional: bool = False               # True: clip classifier (the paper); False: streams
    normalize_input: bool = True              # ξ on/off (the reviewers' ablation); the LRU's γ
    layer: str = "rotrnn"                     # "rotrnn", or "lru": the LRU in the same block (the
                                              # reviewers' comparison; gamma_min/max are its ring)
    dropout: float = 0.1                      # in every block
    chunk: int = 64                           # steps per chunk of the parallel scan
    gamma_min: float = 0.9                    # slowest/fastest decays at initialisation
    gamma_max: float = 0.999
    max_phase: float = 2 * math.pi            # θ ~ U[0, max_phase)
    frontend: str = "linear"                  # "linear": 1 → d_model per sample (the paper);
                                              # "conv": strided learned conv; "filterbank": learned
                                              # complex filterbank → log power → d_model;
                                              # "logmel": the image corpus's fixed log-mel pixels
                                              # (model/logmel.py) → d_model; it sets stride/kernel
    frontend_stride: int = 1                  # samples per RotRNN step
    frontend_kernel: int = 1                  # samples each step sees (≥ stride)
    frontend_filters: int = 40                # filterbank channels ("filterbank" only)
    frontend_norm: str = "none"               # normalising the log powers ("filterbank"): "frame" a
                                              # LayerNorm over each frame's bands; "batch" a
                                              # BatchNorm per band (a fixed affine when streaming,
                                              # keeps the energy envelope). Without one, the large
                                              # constant offset swamps them (64 clips, 40 steps:
                                              # loss 2.2 without, 0.04 with "frame")
    pool_seconds: float = 0.5                 # time constant of the causal EMA pooling
    mask_bands: int = 0                       # training only ("filterbank", "logmel"): SpecAugment,
    mask_frames: int = 0                      # zero 2 random spans of ≤ this many bands / frames

    def __post_init__(self):
        self.labels = tuple(self.labels)
        if isinstance(self.frontend_norm, bool):                     # configs written before "batch"
            self.frontend_norm = "frame" if self.frontend_norm else "none"
        if self.frontend_norm not in ("none", "frame", "batch"):
            raise ValueError(f"frontend_norm must be none, frame or batch, got {self.frontend_norm!r}")
        if self.layer not in ("rotrnn", "lru"):
            raise ValueError(f"layer must be rotrnn or lru, got {self.layer!r}")
        if self.frontend not in FRONTENDS:
            raise ValueError(f"frontend must be {', '.join(FRONTENDS)}, got {self.frontend!r}")
        if self.frontend == "logmel":
            if (self.frontend_stride, self.frontend_kernel) not in ((1, 1), (HOP, FRAME)):
                raise ValueError(f"the logmel front-end fixes stride {HOP} and kernel {FRAME}, got "
                                 f"{self.frontend_stride} and {self.frontend_kernel}")
            self.frontend_stride, self.frontend_kernel = HOP, FRAME
        if self.frontend == "linear" and (self.frontend_stride, self.frontend_kernel) != (1, 1):
            raise ValueError("the linear front-end reads one sample per step: stride = kernel = 1")
        if self.frontend_kernel < self.frontend_stride:
            raise ValueError(f"frontend_kernel ({self.frontend_kernel}) < frontend_stride "
                             f"({self.frontend_stride}) would skip samples")

    @property
    def frame_rate(self) -> float:
        """RotRNN steps per second of audio."""
        return self.sample_rate / self.frontend_stride

def paper_sc35_config(labels) -> RotRNNConfig:
    """The authors' Speech Commands (35 classes, raw 16 kHz, 16,000 steps) network."""
    return RotRNNConfig(labels=tuple(labels), d_model=96, state=128, heads=32, layers=6,
                        bidirectional=True, dropout=0.1, frontend="linear")


def gabor_filterbank(filters: int, kernel: int, sample_rate: int) -> Tensor:
    """(2F, 1, kernel) cos/sin Gabor filters at mel-spaced centres, for the filterbank init."""
    mel = lambda f: 2595 * math.log10(1 + f / 700)
    hz = lambda m: 700 * (10 ** (m / 2595) - 1)
    mels = torch.linspace(mel(60.0), mel(sample_rate / 2 * 0.95), filters + 2)
    centres = torch.tensor([hz(m) for m in mels.tolist()])
    bw = (centres[2:] - centres[:-2]) / 2                               # (F,) Hz, mel-like widths
    fc = centres[1:-1]
    sigma_t = (sample_rate / (2 * math.pi * bw / 2.355)).clamp(max=kernel / 6)   # samples
    t = torch.arange(kernel) - (kernel - 1) / 2
    window = torch.exp(-0.5 * (t / sigma_t[:, None]) ** 2)              # (F, kernel)
    phase = 2 * math.pi * fc[:, None] / sample_rate * t
    w = torch.cat([window * torch.cos(phase), window * torch.sin(phase)])
    return (w / w.norm(dim=1, keepdim=True)).unsqueeze(1)


def spec_mask(x: Tensor, width: int, dim: int, spans: int = 2) -> Tensor:
    """Zero `spans` random spans of up to `width` positions along `dim` (1: time, 2: bands) of
    (B, T, F) features, independently per example (SpecAugment's masks)."""
    if width <= 0:
        return x
    B, size = x.shape[0], x.shape[dim]
    pos = torch.arange(size, device=x.device)
    keep = torch.ones(B, size, dtype=torch.bool, device=x.device)
    for _ in range(spans):
        w = torch.randint(0, width + 1, (B, 1), device=x.device)
        start = (torch.rand(B, 1, device=x.device) * (size - w + 1).clamp(min=1)).long()
        keep &= ~((pos >= start) & (pos < start + w))
    return x * (keep.unsqueeze(2) if dim == 1 else keep.unsqueeze(1)).to(x.dtype)


class BandNorm(nn.BatchNorm1d):
    """BatchNorm over (B, T, bands) features, per band: batch statistics while training, a fixed
    affine (running statistics) in eval, so streaming stays exact."""

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class Frontend(nn.Module):
    """Raw samples → (B, T, d_model) with T = samples / stride; keeps `kernel − stride` samples.

    The "logmel" kind splits in two: `features` (audio → the corpus's pixels, fixed) and `embed`
    (pixels → d_model, learned), so that training can feed the image corpus in between."""

    def __init__(self, cfg: RotRNNConfig):
        super().__init__()
        self.kind, self.stride, self.kernel = cfg.frontend, cfg.frontend_stride, cfg.frontend_kernel
        self.tail = self.kernel - self.stride
        self.mask_bands, self.mask_frames = cfg.mask_bands, cfg.mask_frames
        if self.kind == "filterbank":
            self.conv = nn.Conv1d(1, 2 * cfg.frontend_filters, self.kernel, self.stride, bias=False)
            self.conv.weight.data.copy_(gabor_filterbank(cfg.frontend_filters, self.kernel, cfg.sample_rate))
            self.proj = nn.Linear(cfg.frontend_filters, cfg.d_model)
            self.norm = {"none": nn.Identity, "frame": nn.LayerNorm,
                         "batch": BandNorm}[cfg.frontend_norm](cfg.frontend_filters)
        elif self.kind == "logmel":
            self.logmel = LogMelPixels()
            self.proj = nn.Linear(N_MELS, cfg.d_model)
        else:
            self.conv = nn.Conv1d(1, cfg.d_model, self.kernel, self.stride)

    def forward(self, audio: Tensor, tail: Tensor | None) -> tuple[Tensor, Tensor]:
        """audio: (B, S) float32, S a multiple of stride; tail: (B, kernel − stride) or None."""
        if audio.shape[1] % self.stride:
            raise ValueError(f"expected a multiple of {self.stride} samples, got {audio.shape[1]}")
        if tail is None:
            tail = audio.new_zeros(audio.shape[0], self.tail)
        x = torch.cat([tail, audio], 1)                                   # (B, tail + S)
        if self.kind == "logmel":
            return self.embed(self.logmel(x)), x[:, x.shape[1] - self.tail:]
        h = self.conv(x.unsqueeze(1))                                     # (B, channels, T)
        if self.kind == "filterbank":
            re, im = h.chunk(2, 1)
            feats = self.norm(torch.log(re * re + im * im + 1e-6).transpose(1, 2))   # (B, T, F)
            if self.training and (self.mask_bands or self.mask_frames):
                feats = spec_mask(spec_mask(feats, self.mask_bands, 2), self.mask_frames, 1)
            h = self.proj(feats)
        else:
            h = h.transpose(1, 2)
        return h, x[:, x.shape[1] - self.tail:]

    def embed(self, pixels: Tensor) -> Tensor:
        """"logmel": (B, T, N_MELS) pixels in [0, 255] → (B, T, d_model), masked when training."""
        feats = (pixels - PIXEL_MEAN) / PIXEL_STD
        if self.training and (self.mask_bands or self.mask_frames):
            feats = spec_mask(spec_mask(feats, self.mask_bands, 2), self.mask_frames, 1)
        return self.proj(feats)


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
        self.frontend = Frontend(cfg)
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
