"""Takes of a wake phrase recorded on the demo page: checked before they train anything.

    audio = check_take(chunk, 48_000, "hey computer")   # (samples,) float32 @ 16 kHz, or TakeError

A take is refused, with the reason, when it is

1. too short (under MIN_TAKE_S) or too long (over MAX_TAKE_S) as recorded;
2. silent: its loudest 20-ms frame under SILENT_DBFS (the quietest of the 730 real wake-word
   recordings of the shared data peaks at −41 dBFS);
3. clipped: more than CLIPPED_SHARE of its samples in runs of CLIP_RUN or more at full scale
   (CLIP_LEVEL); the real recordings have at most 0.14 %;
4. far longer than the phrase: more voiced time (20-ms frames within VOICED_DB of the loudest)
   than FAR_LONGER times what the phrase's letters take at LETTERS_PER_S, and at least
   MIN_VOICED_LIMIT_S. The real `alexa` recordings are voiced 0.3–2.6 s (median 0.6 s); the limit
   for `alexa` is 2.5 s: a sentence, or the phrase said several times, is refused.
"""
import numpy as np

from app.audio import check_rate, to_mono_float32
from corpus.rate import SAMPLE_RATE, resample   # takes are kept as enroll reads recordings: 16 kHz mono

MIN_TAKES, MAX_TAKES = 3, 8  # takes the page asks for (none at all: text alone)
MIN_TAKE_S = 0.3
MAX_TAKE_S = 15.0
FRAME_S = 0.02               # the frames levels are measured on
SILENT_DBFS = -45.0          # loudest frame's RMS under this: nothing was said
CLIP_LEVEL = 0.99            # |sample| at or above this is at full scale
CLIP_RUN = 3                 # … for this many samples in a row: clipped
CLIPPED_SHARE = 0.002        # share of samples clipped above which a take is refused
VOICED_DB = 25.0             # a frame within this of the loudest is voiced
LETTERS_PER_S = 8.0          # what a phrase's letters take to say, roughly (espeak-ng: ~14 per s)
FAR_LONGER = 4.0             # voiced time above this many times that is "far longer than the phrase"
MIN_VOICED_LIMIT_S = 2.0     # … and never a limit under this


class TakeError(ValueError):
    """A take the page refuses: the message says why, on one line."""


def check_take(chunk, sample_rate: int, phrase: str) -> np.ndarray:
    """A recorded take (any dtype, channels, rate) as (samples,) float32 @ 16 kHz, or TakeError."""
    audio = to_mono_float32(chunk)
    rate = check_rate(sample_rate)
    seconds = len(audio) / rate
    if not MIN_TAKE_S <= seconds <= MAX_TAKE_S:
        raise TakeError(f"the take lasts {seconds:.1f} s; a take lasts {MIN_TAKE_S:g}–{MAX_TAKE_S:g} s: "
                        f"press record, say the phrase once, press stop")
    audio = resample(audio, rate)
    levels = frame_dbfs(audio)
    if levels.max() < SILENT_DBFS:
        raise TakeError(f"the take is silent (loudest {levels.max():.0f} dBFS, under {SILENT_DBFS:g}): "
                        f"is the microphone on? speak closer to it")
    clipped = clipped_share(audio)
    if clipped > CLIPPED_SHARE:
        raise TakeError(f"the take is clipped ({clipped:.1%} of it at full scale): speak further from "
                        f"the microphone or turn its level down")
    voiced, limit = voiced_seconds(levels), voiced_limit(phrase)
    if voiced > limit:
        raise TakeError(f"the take has {voiced:.1f} s of sound, far longer than {phrase!r} takes to say "
                        f"(at most {limit:.1f} s): say the phrase once, alone")
    return audio


def frame_dbfs(audio: np.ndarray) -> np.ndarray:
    """(frames,) RMS level of each FRAME_S frame in dBFS."""
    n = int(FRAME_S * SAMPLE_RATE)
    frames = np.pad(audio, (0, -len(audio) % n)).reshape(-1, n)
    return 20 * np.log10(np.sqrt(np.mean(frames.astype(np.float64) ** 2, axis=1)) + 1e-10)


def clipped_share(audio: np.ndarray) -> float:
    """Share of the samples in runs of CLIP_RUN or more at CLIP_LEVEL."""
    full = (np.abs(audio) >= CLIP_LEVEL).astype(np.int32)
    in_run = np.convolve(full, np.ones(CLIP_RUN, np.int32), "valid") >= CLIP_RUN
    return float(in_run.sum() / max(1, len(audio)))


def voiced_seconds(levels: np.ndarray) -> float:
    return float(np.sum(levels > levels.max() - VOICED_DB) * FRAME_S)


def voiced_limit(phrase: str) -> float:
    """The most voiced time a take of `phrase` may have."""
    letters = sum(c.isalnum() for c in phrase)
    return max(MIN_VOICED_LIMIT_S, FAR_LONGER * letters / LETTERS_PER_S)
