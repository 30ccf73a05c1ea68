"""The sample rate of every corpus and model here, and the one offline resampler to it.

    audio = resample(audio, 44_100)                # (samples,) float32 @ 44.1 kHz → @ 16 kHz

A live stream is resampled chunk by chunk by app/audio.py's StreamResampler, at the same
RESAMPLE_QUALITY, so that a stream and the same audio resampled at once agree exactly.
"""
import numpy as np
import soxr

SAMPLE_RATE = 16_000        # Hz: the corpora's audio, every model's input, every stream's
RESAMPLE_QUALITY = "HQ"     # soxr's high quality: streamed output equals the offline resample exactly


def resample(audio, rate: int, to: int = SAMPLE_RATE) -> np.ndarray:
    """(samples,) float32 at `rate` Hz → (samples',) float32 at `to` Hz; the array itself when
    the rates agree."""
    audio = np.asarray(audio, np.float32)
    return audio if rate == to else soxr.resample(audio, rate, to, quality=RESAMPLE_QUALITY).astype(np.float32)
