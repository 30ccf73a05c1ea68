"""The fixed log-mel front-end: 16 kHz audio → the 8-bit log-mel "pixels" of the image corpus.

The Speech Commands log-mel images in ../shared/data (speech_commands_v0.02_logmel/, see its
README) were made by this formula, measured against their WAVs:

1. frames of FRAME = 480 samples (30 ms, periodic Hann window) every HOP = 160 samples (10 ms),
   no centring;
2. power spectrum |rfft(frame, N_FFT = 512)|² of audio in [−1, 1];
3. N_MELS = 40 triangular filters on the HTK mel scale (mel = 1127 ln(1 + f/700)), spaced evenly
   from F_MIN = 20 Hz to F_MAX = 4,000 Hz, applied to the power;
4. pixel = PIXEL_SLOPE · ln(band power) + PIXEL_OFFSET, clipped to [0, PIXEL_MAX].

A network whose first stage is this module learns from the images (fed in at its output) and
from audio alike, and in deployment reads raw audio. Built from ops that export to ONNX as they
are: one strided Conv1d whose kernels are the windowed DFT basis (only the bins the filters
reach), squares, a matmul by the mel matrix, a log, a clip. Streaming: the last FRAME − HOP
samples are carried, so frame t of a call ends at that call's sample (t + 1)·HOP.
"""
import math

import torch
from torch import Tensor, nn

from corpus.rate import SAMPLE_RATE   # Hz: the corpus's audio, and every model's

FRAME = 480             # samples per analysis frame (30 ms), periodic Hann window
HOP = 160               # samples between frames (10 ms)
FRAME_RATE = SAMPLE_RATE / HOP      # 100 frames per second
N_FFT = 512             # the frame is zero-padded to this for the rfft
N_MELS = 40             # mel bands
F_MIN, F_MAX = 20.0, 4000.0          # Hz: the lowest and highest filter edges
PIXEL_SLOPE = 9.7       # pixel = PIXEL_SLOPE · ln(power) + PIXEL_OFFSET (the README's fit:
PIXEL_OFFSET = 145.2    # median per-clip slope 9.71, offset 145.2)
PIXEL_MAX = 255.0       # 8-bit images: pixels are clipped to [0, PIXEL_MAX]
CLIP_FRAMES = 98        # frames of a 1 s clip in the corpus: (16,000 − FRAME) // HOP + 1
PIXEL_MEAN = 85.0       # mean and standard deviation of the training images' pixels (every 50th
PIXEL_STD = 50.0        # image: 85.1 and 50.7): networks read (pixel − PIXEL_MEAN) / PIXEL_STD
# the power that maps to pixel 0: below it every power is pixel 0 (also keeps ln finite)
POWER_FLOOR = math.exp(-PIXEL_OFFSET / PIXEL_SLOPE)


def hz_to_mel(f):
    return 1127.0 * math.log1p(f / 700.0)


def mel_to_hz(m):
    return 700.0 * (math.exp(m / 1127.0) - 1.0)


def mel_matrix(n_fft: int = N_FFT, n_mels: int = N_MELS, f_min: float = F_MIN,
               f_max: float = F_MAX, sample_rate: int = SAMPLE_RATE) -> Tensor:
    """(n_fft // 2 + 1, n_mels) float64 triangular HTK-mel filters over the rfft bins' frequencies."""
    freqs = torch.linspace(0, sample_rate / 2, n_fft // 2 + 1, dtype=torch.float64)   # (bins,)
    mels = torch.linspace(hz_to_mel(f_min), hz_to_mel(f_max), n_mels + 2, dtype=torch.float64)
    edges = torch.tensor([mel_to_hz(m) for m in mels.tolist()], dtype=torch.float64)  # (n_mels + 2,)
    lo, mid, hi = edges[:-2], edges[1:-1], edges[2:]
    up = (freqs[:, None] - lo) / (mid - lo)
    down = (hi - freqs[:, None]) / (hi - mid)
    return torch.clamp(torch.minimum(up, down), min=0.0)


def dft_basis(frame: int, n_fft: int, bins: int) -> Tensor:
    """(2·bins, 1, frame) float32 Conv1d kernels: periodic-Hann-windowed cos (real part) and −sin
    (imaginary part) of the first `bins` bins of a DFT of size n_fft (the frame zero-padded)."""
    n = torch.arange(frame, dtype=torch.float64)
    k = torch.arange(bins, dtype=torch.float64)[:, None]
    phase = 2 * math.pi * k * n / n_fft                                     # (bins, frame)
    hann = torch.hann_window(frame, periodic=True, dtype=torch.float64)
    return torch.cat([hann * torch.cos(phase), -hann * torch.sin(phase)]).float().unsqueeze(1)


def mel_power(audio: Tensor, basis: Tensor, mel: Tensor, hop: int) -> Tensor:
    """audio (B, S) → band power (B, T, n_mels) in float32 (also under bf16 autocast: powers span
    decades): frames by a strided Conv1d with `basis` (dft_basis), |·|², then @ mel (bins, n_mels)."""
    with torch.autocast(audio.device.type, enabled=False):
        spec = nn.functional.conv1d(audio.float().unsqueeze(1), basis, stride=hop)   # (B, 2·bins, T)
        re, im = spec.chunk(2, 1)
        return (re * re + im * im).transpose(1, 2) @ mel


def pixels_from_power(power: Tensor) -> Tensor:
    """Band power → pixels in [0, PIXEL_MAX] (unrounded)."""
    return (PIXEL_SLOPE * torch.log(power.clamp(min=POWER_FLOOR)) + PIXEL_OFFSET).clamp(max=PIXEL_MAX)


def power_from_pixels(pixels: Tensor) -> Tensor:
    """The inverse of pixels_from_power inside (0, PIXEL_MAX): what feature-domain mixing adds."""
    return torch.exp((pixels - PIXEL_OFFSET) / PIXEL_SLOPE)


class LogMelPixels(nn.Module):
    """Raw audio → the corpus's log-mel pixels, "valid" framing.

    audio: (B, S) float32 @ 16 kHz in [−1, 1], S ≥ FRAME → (B, T, N_MELS) float32 pixels in
    [0, PIXEL_MAX] (not rounded), T = (S − FRAME) // HOP + 1; frame t reads samples
    [t·HOP, t·HOP + FRAME). The DFT basis and the mel matrix are fixed buffers, not parameters.
    """

    def __init__(self):
        super().__init__()
        mel = mel_matrix()                                                  # (257, N_MELS)
        bins = int(mel.sum(1).nonzero().max()) + 1                          # bins the filters reach
        self.register_buffer("basis", dft_basis(FRAME, N_FFT, bins), persistent=False)
        self.register_buffer("mel", mel[:bins].float(), persistent=False)       # (bins, N_MELS)

    def forward(self, audio: Tensor) -> Tensor:
        return pixels_from_power(mel_power(audio, self.basis, self.mel, HOP))   # (B, T, N_MELS)
