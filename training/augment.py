"""Batch augmentation in torch, on whatever device the batch is on (the GPU when there is one).

`augment(audio, noise, cfg, stride, generator)`: every random draw comes from `generator`, so a
seeded generator gives the same batch twice. Order: speed + time shift (one resampling gather),
gain, background noise at a random SNR, then the streaming pre-roll.

The pre-roll puts 0.2–1.0 s of noise, or of another clip of the batch, before each clip: a
causal network then learns to classify with an arbitrary state behind it, as it will on an
endless stream. The label stays the clip's own (the last one heard).
"""
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from model.logmel import FRAME_RATE, PIXEL_MAX, PIXEL_SLOPE, pixels_from_power, power_from_pixels

PREROLL_NOISE_DB = (-40.0, 0.0)   # pixel pre-roll: the noise's level range (volume 0.01 to 1)


@dataclass
class AugmentConfig:
    enabled: bool = True
    speed_min: float = 0.9            # speed (tempo and pitch) factor range; 1 = unchanged
    speed_max: float = 1.1
    shift_seconds: float = 0.1        # time shift, uniform in ±shift_seconds
    gain_db: float = 6.0              # gain, uniform in ±gain_db
    noise_prob: float = 0.8           # share of clips that get background noise
    snr_min_db: float = 0.0           # its signal-to-noise ratio range
    snr_max_db: float = 20.0
    preroll_prob: float = 0.0         # share of batches with a pre-roll (causal models: 1)
    preroll_min_seconds: float = 0.2  # pre-roll length range, rounded to the front-end stride
    preroll_max_seconds: float = 1.0
    preroll_clip_prob: float = 0.5    # pre-roll from another clip of the batch (else noise)


def uniform(n: int, lo: float, hi: float, g: torch.Generator, device) -> Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=g, device=device)


def noise_crops(noise: Tensor, n: int, samples: int, g: torch.Generator) -> Tensor:
    """(n, samples) random crops of the flat noise recording (samples,) → same device."""
    start = torch.randint(0, noise.shape[0] - samples, (n, 1), generator=g, device=noise.device)
    return noise[start + torch.arange(samples, device=noise.device)]


def speed_and_shift(audio: Tensor, speed: Tensor, shift: Tensor) -> Tensor:
    """Resample each clip about its centre by `speed` (B,) and move it by `shift` (B,) samples,
    by linear interpolation; samples from outside the clip are zeros."""
    B, S = audio.shape
    t = torch.arange(S, device=audio.device, dtype=audio.dtype)
    centre = (S - 1) / 2
    src = centre + (t - centre) * speed[:, None] - shift[:, None]          # (B, S)
    lo = src.floor()
    frac = src - lo
    padded = torch.nn.functional.pad(audio, (1, 1))                         # index −1 and S → 0
    i0 = (lo.long() + 1).clamp(0, S + 1)
    i1 = (lo.long() + 2).clamp(0, S + 1)
    a, b = padded.gather(1, i0), padded.gather(1, i1)
    inside = (src > -1) & (src < S)
    return torch.where(inside, a + frac * (b - a), torch.zeros_like(a))


def add_noise(audio: Tensor, noise: Tensor, cfg: AugmentConfig, g: torch.Generator) -> Tensor:
    B, S = audio.shape
    crops = noise_crops(noise, B, S, g)
    snr = uniform(B, cfg.snr_min_db, cfg.snr_max_db, g, audio.device)
    rms = lambda x: x.pow(2).mean(1).add(1e-8).sqrt()
    scale = rms(audio) / rms(crops) / 10 ** (snr / 20)                      # (B,)
    on = torch.rand(B, generator=g, device=audio.device) < cfg.noise_prob
    return audio + (on * scale)[:, None] * crops


def preroll(audio: Tensor, noise: Tensor | None, cfg: AugmentConfig, stride: int,
            sample_rate: int, g: torch.Generator) -> Tensor:
    """(B, S) → (B, P + S): P samples (one length for the batch, a multiple of stride) of noise
    or of another clip's end before each clip."""
    B, S = audio.shape
    lo, hi = (round(s * sample_rate / stride) for s in (cfg.preroll_min_seconds, cfg.preroll_max_seconds))
    P = int(torch.randint(lo, hi + 1, (1,), generator=g, device=audio.device)) * stride
    P = min(P, S) if noise is None else P
    other = audio[torch.randperm(B, generator=g, device=audio.device)][:, S - min(P, S):]
    other = torch.nn.functional.pad(other, (P - other.shape[1], 0))           # (B, P)
    if noise is None:
        return torch.cat([other, audio], 1)
    volume = torch.rand(B, 1, generator=g, device=audio.device)
    background = noise_crops(noise, B, P, g) * volume
    use_clip = torch.rand(B, 1, generator=g, device=audio.device) < cfg.preroll_clip_prob
    return torch.cat([torch.where(use_clip, other, background), audio], 1)


def augment(audio: Tensor, noise: Tensor | None, cfg: AugmentConfig, stride: int,
            sample_rate: int, g: torch.Generator) -> Tensor:
    """audio: (B, S) float32 @ sample_rate, S a multiple of stride → (B, S') with S' − S a
    multiple of stride (the pre-roll); noise: (M,) flat background recording on audio's device."""
    if not cfg.enabled:
        return audio
    B, S = audio.shape
    dev = audio.device
    speed = uniform(B, cfg.speed_min, cfg.speed_max, g, dev)
    shift = uniform(B, -cfg.shift_seconds, cfg.shift_seconds, g, dev) * sample_rate
    audio = speed_and_shift(audio, speed, shift)
    audio = audio * 10 ** (uniform(B, -cfg.gain_db, cfg.gain_db, g, dev) / 20)[:, None]
    if noise is not None and noise.shape[0] > S and cfg.noise_prob > 0:
        audio = add_noise(audio, noise, cfg, g)
    if cfg.preroll_prob > 0 and float(torch.rand(1, generator=g, device=dev)) < cfg.preroll_prob:
        audio = preroll(audio, noise, cfg, stride, sample_rate, g)
    return audio.clamp(-1, 1)


# -- the same augmentation in the feature domain (networks with the "logmel" front-end) ----------
def mix_pixels(pixels: Tensor, noise: Tensor, gain: Tensor) -> Tensor:
    """Add noise to log-mel pixels as power: p = e^((x−b)/a) + gain·e^((n−b)/a), back to pixels.
    pixels, noise: (B, T, F); gain: (B,) power factors."""
    power = power_from_pixels(pixels) + gain[:, None, None] * power_from_pixels(noise)
    return pixels_from_power(power)


def noise_frames(noise: Tensor, n: int, frames: int, g: torch.Generator) -> Tensor:
    """(n, frames, F) random crops of a long run of noise pixels (M, F)."""
    start = torch.randint(0, noise.shape[0] - frames, (n, 1), generator=g, device=noise.device)
    return noise[start + torch.arange(frames, device=noise.device)]


def gain_pixels(pixels: Tensor, db: Tensor) -> Tensor:
    """Scale the audio by `db` (B,) decibels: an offset of the pixels that are above 0."""
    offset = PIXEL_SLOPE * math.log(10) / 10 * db[:, None, None]
    return torch.where(pixels > 0, (pixels + offset).clamp(0, PIXEL_MAX), pixels)


def augment_pixels(pixels: Tensor, noise: Tensor | None, cfg: AugmentConfig,
                   g: torch.Generator) -> Tensor:
    """pixels: (B, T, F) float32 log-mel pixels (100 frames/s) → (B, T', F), T' − T the pre-roll.

    The waveform recipe of `augment`, in the feature domain: speed (tempo) and time shift by
    interpolating frames, gain as an offset, background noise mixed as power at a random SNR,
    then the streaming pre-roll (noise, or the end of another clip of the batch). noise: (M, F)
    pixels of long noise recordings, on pixels' device."""
    if not cfg.enabled:
        return pixels
    B, T, F = pixels.shape
    dev = pixels.device
    speed = uniform(B, cfg.speed_min, cfg.speed_max, g, dev)
    shift = uniform(B, -cfg.shift_seconds, cfg.shift_seconds, g, dev) * FRAME_RATE
    rows = pixels.transpose(1, 2).reshape(B * F, T)                           # one row per band
    moved = speed_and_shift(rows, speed.repeat_interleave(F), shift.repeat_interleave(F))
    pixels = moved.view(B, F, T).transpose(1, 2)
    pixels = gain_pixels(pixels, uniform(B, -cfg.gain_db, cfg.gain_db, g, dev))
    if noise is not None and noise.shape[0] > T and cfg.noise_prob > 0:
        crops = noise_frames(noise, B, T, g)
        snr = uniform(B, cfg.snr_min_db, cfg.snr_max_db, g, dev)
        mean_power = lambda x: power_from_pixels(x).mean((1, 2))
        gain = mean_power(pixels) / mean_power(crops) / 10 ** (snr / 10)
        on = torch.rand(B, generator=g, device=dev) < cfg.noise_prob
        pixels = mix_pixels(pixels, crops, gain * on)
    if cfg.preroll_prob > 0 and float(torch.rand(1, generator=g, device=dev)) < cfg.preroll_prob:
        pixels = preroll_pixels(pixels, noise, cfg, g)
    return pixels


def preroll_pixels(pixels: Tensor, noise: Tensor | None, cfg: AugmentConfig,
                   g: torch.Generator) -> Tensor:
    """(B, T, F) → (B, P + T, F): P frames (one length for the batch) of noise at a random level,
    or of another clip's end, before each clip."""
    B, T, F = pixels.shape
    lo, hi = (round(s * FRAME_RATE) for s in (cfg.preroll_min_seconds, cfg.preroll_max_seconds))
    P = int(torch.randint(lo, hi + 1, (1,), generator=g, device=pixels.device))
    other = pixels[torch.randperm(B, generator=g, device=pixels.device)][:, max(0, T - P):]
    other = torch.nn.functional.pad(other, (0, 0, P - other.shape[1], 0))     # (B, P, F)
    if noise is None or noise.shape[0] <= P:
        return torch.cat([other, pixels], 1)
    level_db = uniform(B, *PREROLL_NOISE_DB, g, pixels.device)
    background = gain_pixels(noise_frames(noise, B, P, g), level_db)
    use_clip = torch.rand(B, 1, 1, generator=g, device=pixels.device) < cfg.preroll_clip_prob
    return torch.cat([torch.where(use_clip, other, background), pixels], 1)
