"""Audio as it arrives (any dtype, channel count, sample rate, chunk length) → float32 mono
at the model's rate, as one stream.

numpy + soxr only. A chunk that cannot be audio raises ValueError before anything changes, so
the stream it belongs to goes on with the next good chunk.
"""
import numpy as np
import soxr

from corpus.rate import RESAMPLE_QUALITY

INT_FULL_SCALE = {np.dtype(np.int16): 2.0 ** 15, np.dtype(np.int32): 2.0 ** 31}   # → [−1, 1)
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
MAX_CHANNELS = 32          # more "channels" than this is a (channels, samples) array the wrong way round
FLOAT_PEAK_LIMIT = 4.0     # float audio is [−1, 1]; far beyond, it is integer samples stored as floats


def describe(chunk) -> str:
    """`int16 (480, 2)`: what a caller passed, for error messages."""
    return f"{getattr(chunk, 'dtype', type(chunk).__name__)} {getattr(chunk, 'shape', '')}".strip()


def check_rate(sample_rate) -> int:
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer, float, np.floating)) \
            or sample_rate != int(sample_rate) or sample_rate <= 0:
        raise ValueError(f"expected a sample rate in Hz as a positive integer, got {sample_rate!r}")
    return int(sample_rate)


def to_mono_float32(chunk) -> np.ndarray:
    """(n,) or (n, channels) int16/int32/float32/float64 → (n,) float32 in [−1, 1]; channels averaged.

    Raises ValueError, naming what was expected, for another type, dtype or shape, for NaN or
    Inf samples, and for floats far outside [−1, 1].
    """
    if not isinstance(chunk, np.ndarray):
        raise ValueError(f"expected audio as a numpy array, got {type(chunk).__name__}")
    if chunk.dtype not in INT_FULL_SCALE and chunk.dtype not in FLOAT_DTYPES:
        raise ValueError(f"expected int16, int32, float32 or float64 samples, got {describe(chunk)}")
    if chunk.ndim not in (1, 2) or (chunk.ndim == 2 and not 1 <= chunk.shape[1] <= MAX_CHANNELS):
        raise ValueError(f"expected shape (samples,) or (samples, channels) with at most "
                         f"{MAX_CHANNELS} channels, got {describe(chunk)}")
    channels = 1 if chunk.ndim == 1 else chunk.shape[1]
    if chunk.dtype in INT_FULL_SCALE:                    # always finite, always in range
        wide = np.float32 if chunk.dtype == np.int16 else np.float64   # where the sum is exact
        scale = 1.0 / (INT_FULL_SCALE[chunk.dtype] * channels)
        x = chunk.astype(wide)
        mono = x * wide(scale) if chunk.ndim == 1 else x @ np.full(channels, scale, wide)
        return mono.astype(np.float32, copy=False)
    mono = chunk if chunk.ndim == 1 else chunk @ np.full(channels, 1 / channels, chunk.dtype)
    if not np.isfinite(mono).all():
        raise ValueError(f"expected finite samples, got NaN or Inf in {describe(chunk)}")
    peak = np.abs(mono).max() if mono.size else 0.0
    if peak > FLOAT_PEAK_LIMIT:
        raise ValueError(f"expected float samples in [−1, 1], got a peak of {peak:.4g} in "
                         f"{describe(chunk)} (pass integer PCM as int16/int32, not as floats)")
    return mono.astype(np.float32, copy=False)


class StreamResampler:
    """float32 mono at any rate → `out_rate`, with the filter state carried across chunks.

    The output is the same whatever the chunking (soxr streams exactly), delayed by the
    filter's latency until `flush()`. A chunk at a new rate flushes the old stream (nothing is
    lost) and starts a fresh one.
    """

    def __init__(self, out_rate: int):
        self.out_rate = out_rate
        self.rate: int | None = None
        self._stream: soxr.ResampleStream | None = None

    def reset(self) -> None:
        self.rate, self._stream = None, None

    def __call__(self, x: np.ndarray, rate: int) -> np.ndarray:
        head = np.zeros(0, np.float32)
        if rate != self.rate:
            head = self.flush()
            self.rate = rate
            if rate != self.out_rate:
                self._stream = soxr.ResampleStream(rate, self.out_rate, 1, dtype="float32",
                                                   quality=RESAMPLE_QUALITY)
        body = x if self._stream is None else self._stream.resample_chunk(x, last=False)
        return np.concatenate([head, body]) if head.size else body

    def flush(self) -> np.ndarray:
        """What the filter still holds; the stream then starts afresh."""
        out = np.zeros(0, np.float32)
        if self._stream is not None:
            out = self._stream.resample_chunk(np.zeros(0, np.float32), last=True)
        self.reset()
        return out
