"""The RotRNN's front-end: raw samples → (B, T, d_model), one step per `stride` samples.

Its settings are a `FrontendConfig`. Configs, checkpoints and `--model.*` overrides write them as
flat keys of RotRNNConfig (`frontend`, `frontend_stride`, `frontend_kernel`, `frontend_filters`,
`frontend_norm`, `mask_bands`, `mask_frames`), the format every YAML file and checkpoint already
holds; `RotRNNConfig.frontend_config` gathers them, and the errors name those keys.
"""
import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .logmel import FRAME, HOP, N_MELS, PIXEL_MEAN, PIXEL_STD, LogMelPixels

FRONTENDS = ("linear", "conv", "filterbank", "logmel")
NORMS = ("none", "frame", "batch")


def check_masks(mask_bands: int, mask_frames: int) -> None:
    if min(mask_bands, mask_frames) < 0:
        raise ValueError(f"mask_bands and mask_frames must be ≥ 0, got {mask_bands} and {mask_frames}")


@dataclass
class FrontendConfig:
    """What the Frontend module is built from; __post_init__ checks it ("logmel" fixes stride and
    kernel)."""

    kind: str = "linear"       # linear (1 sample → d_model per step, the paper), conv, filterbank or logmel
    stride: int = 1            # samples per step
    kernel: int = 1            # samples each step sees (≥ stride)
    filters: int = 40          # filterbank channels ("filterbank" only)
    norm: str = "none"         # the filterbank's log powers: none, frame (LayerNorm) or batch (per band)
    mask_bands: int = 0        # training only ("filterbank", "logmel"): SpecAugment, 2 spans of ≤ this
    mask_frames: int = 0       # many bands / frames zeroed

    def __post_init__(self):
        if isinstance(self.norm, bool):                              # configs written before "batch"
            self.norm = "frame" if self.norm else "none"
        if self.norm not in NORMS:
            raise ValueError(f"frontend_norm must be none, frame or batch, got {self.norm!r}")
        if self.kind not in FRONTENDS:
            raise ValueError(f"frontend must be {', '.join(FRONTENDS)}, got {self.kind!r}")
        if self.kind == "logmel":
            if (self.stride, self.kernel) not in ((1, 1), (HOP, FRAME)):
                raise ValueError(f"the logmel front-end fixes stride {HOP} and kernel {FRAME}, got "
                                 f"{self.stride} and {self.kernel}")
            self.stride, self.kernel = HOP, FRAME
        if self.kind == "linear" and (self.stride, self.kernel) != (1, 1):
            raise ValueError("the linear front-end reads one sample per step: stride = kernel = 1")
        if self.kernel < self.stride:
            raise ValueError(f"frontend_kernel ({self.kernel}) < frontend_stride ({self.stride}) "
                             f"would skip samples")
        check_masks(self.mask_bands, self.mask_frames)


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


class SpecAugment(nn.Module):
    """(B, T, F) features with band and frame spans zeroed while training; unchanged in eval.
    No weights: the RotRNN's front-end and the DS-CNN share it."""

    def __init__(self, mask_bands: int = 0, mask_frames: int = 0):
        super().__init__()
        check_masks(mask_bands, mask_frames)
        self.mask_bands, self.mask_frames = mask_bands, mask_frames

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or not (self.mask_bands or self.mask_frames):
            return x
        return spec_mask(spec_mask(x, self.mask_bands, 2), self.mask_frames, 1)


class BandNorm(nn.BatchNorm1d):
    """BatchNorm over (B, T, bands) features, per band: batch statistics while training, a fixed
    affine (running statistics) in eval, so streaming stays exact."""

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class Frontend(nn.Module):
    """Raw samples → (B, T, d_model) with T = samples / stride; keeps `kernel − stride` samples.

    The "logmel" kind splits in two: `features` (audio → the corpus's pixels, fixed) and `embed`
    (pixels → d_model, learned), so that training can feed the image corpus in between."""

    def __init__(self, cfg: FrontendConfig, d_model: int, sample_rate: int):
        super().__init__()
        self.kind, self.stride, self.kernel = cfg.kind, cfg.stride, cfg.kernel
        self.tail = self.kernel - self.stride
        self.augment = SpecAugment(cfg.mask_bands, cfg.mask_frames)
        if self.kind == "filterbank":
            self.conv = nn.Conv1d(1, 2 * cfg.filters, self.kernel, self.stride, bias=False)
            self.conv.weight.data.copy_(gabor_filterbank(cfg.filters, self.kernel, sample_rate))
            self.proj = nn.Linear(cfg.filters, d_model)
            self.norm = {"none": nn.Identity, "frame": nn.LayerNorm, "batch": BandNorm}[cfg.norm](cfg.filters)
        elif self.kind == "logmel":
            self.logmel = LogMelPixels()
            self.proj = nn.Linear(N_MELS, d_model)
        else:
            self.conv = nn.Conv1d(1, d_model, self.kernel, self.stride)

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
            h = self.proj(self.augment(feats))
        else:
            h = h.transpose(1, 2)
        return h, x[:, x.shape[1] - self.tail:]

    def embed(self, pixels: Tensor) -> Tensor:
        """"logmel": (B, T, N_MELS) pixels in [0, 255] → (B, T, d_model), masked when training."""
        return self.proj(self.augment((pixels - PIXEL_MEAN) / PIXEL_STD))
