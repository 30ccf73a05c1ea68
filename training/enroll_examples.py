"""How `rotkws enroll` renders its examples (step 3 of its recipe: the command's docstring,
rotkws/enroll_cli.py): every example is EXAMPLE_S of log-mel pixels after a WARMUP_S warm-up that
is not scored (WARM_SPEECH_SHARE of the time real speech ending WARM_GAP_S before it; the network's
slowest channels remember ~8 s, and a state warmed by running audio is the state the runtime has):
an optional other word or the end of a real sentence before, the item, room reverberation
(synthetic speech), background noise at SNR_DB; a speech example is a window of utterances run
together. Then every example is made quieter as a whole (LEVEL_DB). Frame labels: the phrase from
POSITIVE_BEFORE_END_S before its end to POSITIVE_AFTER_END_S after it; `_other_` before it and on
every negative; the rest is not scored.

Audio becomes pixels through the backbone's own fixed front-end (`Renderer`); noise is mixed as
power in the pixel domain.
"""
import io

import numpy as np
import soundfile as sf
import torch

from app.wake_rule import PHRASE, REAL, SPEECH, SYNTHETIC
from corpus.rate import SAMPLE_RATE
from model.logmel import FRAME, FRAME_RATE, N_MELS, LogMelPixels, power_from_pixels
from training.augment import gain_pixels, mix_pixels
from training.enroll import Items
from training.streams import IGNORE   # frame targets that are not scored

from . import progress, tts

EXAMPLE_S = 3.0              # seconds of pixels per example that are scored …
WARMUP_S = 3.0               # … after this much that is not: the state warmed up as a stream's is
WARM_SPEECH_SHARE = 0.5      # of the examples that are not speech windows: real speech in the warm-up
WARM_GAP_S = (0.5, 3.0)      # … ending this long before the example's scored part
POSITIVE_BEFORE_END_S = 0.05 # the phrase label starts this long before the phrase ends …
POSITIVE_AFTER_END_S = 0.5   # … and lasts this long after (the model's pooling time constant)
PHRASE_END_S = (1.0, 2.3)    # a positive ends this far into the scored part, uniform (in frames)
SNR_DB = (0.0, 25.0)         # background noise under each example
NOISE_ONLY_DB = (-30.0, 6.0)  # noise-only examples: the recordings' level changed by this
CLEAN_SHARE = 0.1            # examples with no added noise
CONTEXT_SHARE = 0.5          # examples with another word before the item
CONTEXT_GAP_FRAMES = (10, 60)  # … ending this many frames (0.1–0.6 s) before the item
REVERB_SHARE = 0.6           # synthetic clips played in a simulated room
RT60_S = (0.1, 0.6)          # the room's reverberation time
RT60_DECAY = 6.9             # ≈ ln 1000: the room's tail falls by 60 dB (1/1000) over RT60
TAIL_GAIN = (0.1, 0.4)       # the room's tail against the direct path (unit gain)
SPEED = (0.9, 1.1)           # synthetic clips resampled by this factor (tempo and pitch)
GAIN_DB = (-12.0, 6.0)       # level of the item relative to its normalised peak
LEVEL_DB = (-24.0, 0.0)      # then the whole example (item, noise, speech) by this: a quieter microphone
                             # (the real `alexa` recordings peak at −22 to 0 dBFS, 5th to 95th percentile)
CLIP_PAD_S = 0.05            # silence on each side of a clip before it is rendered
LOUD_PIXELS = 25             # a phrase ends at its last frame this close to its loudest (band-mean pixels)
PHRASE_CLASS, OTHER_CLASS = 0, 1   # the label order: (phrase, OTHER)
SPEECH_PAUSE_S = (0.05, 0.8)  # silence between the utterances of a speech example
SPEECH_CONTEXT_SHARE = 0.3    # of the examples with something before the item: the end of a sentence
SPEECH_CONTEXT_S = 2.0        # … at most this much of it
CODEC_SHARE = 0.5             # synthetic clips coded as Opus (and decoded) like the real speech


# -- audio ----------------------------------------------------------------------------------------
def opus(audio: np.ndarray) -> np.ndarray:
    """The clip coded as Ogg Opus and decoded, as the real continuous speech was stored."""
    buf = io.BytesIO()
    sf.write(buf, np.clip(audio, -1, 1), SAMPLE_RATE, format="OGG", subtype="OPUS")
    buf.seek(0)
    out, _ = sf.read(buf, dtype="float32")
    return out[: len(audio)]


def room(audio: np.ndarray, rng) -> np.ndarray:
    """Simple reverberation: convolution with exponentially decaying noise of a random RT60,
    the direct path kept at unit gain."""
    rt60 = rng.uniform(*RT60_S)
    t = np.arange(int(rt60 * SAMPLE_RATE)) / SAMPLE_RATE
    ir = rng.standard_normal(len(t)) * np.exp(-RT60_DECAY * t / rt60) * rng.uniform(*TAIL_GAIN)
    ir[0] = 1.0
    wet = np.convolve(audio, ir)[: len(audio) + len(ir) // 2]
    return (wet / (np.abs(wet).max() + 1e-9) * np.abs(audio).max()).astype(np.float32)


def vary(audio: np.ndarray, rng, reverb: bool) -> np.ndarray:
    """Speed (resampling), room, codec, gain (a synthetic clip: `reverb`)."""
    audio = tts.to_16k(audio, int(SAMPLE_RATE * rng.uniform(*SPEED)))
    if reverb and rng.random() < REVERB_SHARE:
        audio = room(audio, rng)
    if reverb and rng.random() < CODEC_SHARE:
        audio = opus(audio)
    return audio * 10 ** (rng.uniform(*GAIN_DB) / 20)


class Renderer:
    """Audio → pixels through the model's own fixed front-end; noise pixels to mix."""

    def __init__(self, noise: np.ndarray):
        self.logmel = LogMelPixels()
        self.noise = self.pixels(noise)                                     # (M, N_MELS)

    def pixels(self, audio: np.ndarray) -> np.ndarray:
        audio = np.pad(np.asarray(audio, np.float32), (0, max(0, FRAME - len(audio))))
        with torch.no_grad():
            return self.logmel(torch.from_numpy(audio)[None])[0].numpy()


# -- one example ----------------------------------------------------------------------------------
def paste(canvas: np.ndarray, pixels: np.ndarray, at: int) -> None:
    """canvas[at:at + len(pixels)] = pixels, cut to the canvas (at may be negative)."""
    lo, hi = max(0, at), min(len(canvas), at + len(pixels))
    if hi > lo:
        canvas[lo:hi] = pixels[lo - at:hi - at]


def targets(frames: int, at: int, end: int | None, warm: int = 0) -> np.ndarray:
    """(frames,) class per frame: OTHER_CLASS, or for a positive placed at `at` and ending at
    frame at + end: IGNORE while it is said, PHRASE_CLASS from just before its end, IGNORE later;
    IGNORE over the first `warm` frames whatever they hold (the warm-up)."""
    y = np.full(frames, OTHER_CLASS, np.int64)
    if end is not None:
        e = at + end
        on, off = e - round(POSITIVE_BEFORE_END_S * FRAME_RATE), e + round(POSITIVE_AFTER_END_S * FRAME_RATE)
        y[max(0, at):] = IGNORE
        y[max(0, on):max(0, off)] = PHRASE_CLASS
    y[:warm] = IGNORE
    return y


def add_noise(canvas: np.ndarray, item: np.ndarray, noise: np.ndarray, rng,
              snr_db: tuple[float, float] = SNR_DB) -> np.ndarray:
    """Noise pixels mixed as power, at a random SNR to the item's mean power (an empty item, a
    noise-only example: the recording's own level, NOISE_ONLY_DB)."""
    start = int(rng.integers(0, len(noise) - len(canvas)))
    crop = torch.from_numpy(noise[start:start + len(canvas)])[None]
    if item.max() > 0:
        level = power_from_pixels(torch.from_numpy(item)[None]).mean() / power_from_pixels(crop).mean()
        gain = level / 10 ** (rng.uniform(*snr_db) / 10)
    else:
        gain = torch.tensor(10 ** (rng.uniform(*NOISE_ONLY_DB) / 10))
    return mix_pixels(torch.from_numpy(canvas)[None], crop, gain.reshape(1))[0].numpy()


def example(item: np.ndarray, end: int | None, context: np.ndarray | None, frames: int,
            noise: np.ndarray, rng, snr_db: tuple[float, float] = SNR_DB, warm: int = 0,
            before: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(pixels (warm + frames, N_MELS) float32, targets (warm + frames,) int64): `warm` frames
    that are not scored (`before` pasted at their start, if given), then `item` pixels placed in
    the scored `frames` (a positive so that it ends PHRASE_END_S into them), after `context` if
    given (CONTEXT_GAP_FRAMES before the item), all over noise. end: the frame of the item where
    the phrase ends, None for a negative."""
    canvas = np.zeros((warm + frames, N_MELS), np.float32)
    if end is None:
        at = warm + int(rng.integers(0, max(1, frames - len(item) // 2)))
    else:
        at = warm + int(rng.integers(int(PHRASE_END_S[0] * FRAME_RATE), int(PHRASE_END_S[1] * FRAME_RATE))) - end
    if before is not None:
        paste(canvas, before, 0)
    if context is not None:
        paste(canvas, context, at - int(rng.integers(*CONTEXT_GAP_FRAMES)) - len(context))
    paste(canvas, item, at)
    if rng.random() >= CLEAN_SHARE:
        canvas = add_noise(canvas, item, noise, rng, snr_db)
    return canvas, targets(warm + frames, at, end, warm)


def last_loud_frame(pixels: np.ndarray) -> int:
    """The last frame within LOUD_PIXELS of the loudest (by band-mean pixels): where the phrase
    ends."""
    energy = pixels.mean(1)
    return int(np.flatnonzero(energy > energy.max() - LOUD_PIXELS)[-1]) + 1


def speech_window(utterances: list[np.ndarray], frames: int, rng) -> np.ndarray:
    """(frames, N_MELS) pixels of utterances run together, SPEECH_PAUSE_S apart, the window
    starting anywhere in the first but its last second."""
    canvas = np.zeros((frames, N_MELS), np.float32)
    first = utterances[int(rng.integers(len(utterances)))]
    pos = -int(rng.integers(0, max(1, len(first) - FRAME_RATE)))
    item = first
    while pos < frames:
        paste(canvas, item, pos)
        pos += len(item) + int(rng.uniform(*SPEECH_PAUSE_S) * FRAME_RATE)
        item = utterances[int(rng.integers(len(utterances)))]
    return canvas


# -- all of them ----------------------------------------------------------------------------------
def example_kinds(items: Items) -> np.ndarray:
    """(N,) PHRASE, SYNTHETIC, REAL or SPEECH for each example, in the order examples() builds them."""
    n = [len(items.positives), len(items.synthetic),
         len(items.real) + len(items.images) + items.sources["noise_examples"],
         items.sources["speech_examples"]]
    return np.repeat([PHRASE, SYNTHETIC, REAL, SPEECH], n)


def examples(items: Items, rng) -> tuple[np.ndarray, np.ndarray]:
    """All examples: (N, frames, N_MELS) float16 pixels and (N, frames) int64 targets, in the
    order of example_kinds. Consumes `items.speech`: it is empty afterwards, each utterance's
    audio let go once rendered (the utterances are most of enroll's memory)."""
    frames, warm = int(EXAMPLE_S * FRAME_RATE), int(WARMUP_S * FRAME_RATE)
    pad = round(CLIP_PAD_S * SAMPLE_RATE)
    render = Renderer(items.noise)
    to_pix = lambda audio, synthetic: render.pixels(np.pad(vary(audio, rng, synthetic), (pad, pad)))
    pos = [to_pix(a, True) for a in progress.bar(items.positives, desc="rendering", unit="clip")]
    neg = ([to_pix(a, True) for a in items.synthetic] + [to_pix(a, False) for a in items.real]
           + [im.astype(np.float32) for im in items.images])
    items.speech.reverse()
    speech = [to_pix(items.speech.pop(), False)
              for _ in progress.bar(range(len(items.speech)), desc="speech", unit="utterance")]
    n_noise = items.sources["noise_examples"]
    contexts = list(neg)
    neg += [np.zeros((frames, N_MELS), np.float32)] * n_noise
    tails = [u[-int(SPEECH_CONTEXT_S * FRAME_RATE):] for u in speech]

    def pick():
        if rng.random() >= CONTEXT_SHARE:
            return None
        pool = tails if tails and rng.random() < SPEECH_CONTEXT_SHARE else contexts
        return pool[int(rng.integers(len(pool)))]

    def before():
        """Real speech in the warm-up, ending WARM_GAP_S before the scored part, or nothing."""
        if not (warm and speech) or rng.random() >= WARM_SPEECH_SHARE:
            return None
        return speech_window(speech, max(1, warm - int(rng.uniform(*WARM_GAP_S) * FRAME_RATE)), rng)

    n = len(pos) + len(neg) + items.sources["speech_examples"]
    x, y = np.empty((n, warm + frames, N_MELS), np.float16), np.empty((n, warm + frames), np.int64)
    for i, p in enumerate(pos):
        x[i], y[i] = example(p, last_loud_frame(p), pick(), frames, render.noise, rng, warm=warm, before=before())
    for i, m in enumerate(neg, len(pos)):
        x[i], y[i] = example(m, None, pick(), frames, render.noise, rng, warm=warm, before=before())
    for i in range(len(pos) + len(neg), n):
        window = speech_window(speech, warm + frames, rng)
        if rng.random() >= CLEAN_SHARE:
            window = add_noise(window, window, render.noise, rng)
        x[i], y[i] = window, targets(warm + frames, 0, None, warm)
    return quieter(x, rng), y


def quieter(pixels: np.ndarray, rng, batch: int = 512) -> np.ndarray:
    """(N, T, N_MELS) examples, each one's audio scaled by a gain uniform in LEVEL_DB (a quieter
    microphone, or a talker further away), in place in the pixel domain (`gain_pixels`, in float32
    whatever the array's type)."""
    levels = torch.from_numpy(rng.uniform(*LEVEL_DB, len(pixels)))
    for i in range(0, len(pixels), batch):
        chunk = torch.from_numpy(pixels[i:i + batch]).float()
        pixels[i:i + batch] = gain_pixels(chunk, levels[i:i + batch]).numpy()
    return pixels
