"""A phrase spoken by Debian's text-to-speech engines, in many voices: the positives of `rotkws
enroll`, and the synthetic negatives that keep a model from learning "synthetic = keyword".

Engines (each used when its program is installed: `apt-get install espeak-ng flite festival
festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts`):

- espeak-ng: every English voice that is not an MBROLA one (en, en-us, en-gb-scotland, …), each
  with any of ~100 variants (+m3, +f2, +croak, …), rate, pitch, amplitude and word gap drawn at
  random; other languages' voices read the English text with their accent;
- flite: its built-in voices (kal, awb, rms, slt), duration stretch and pitch drawn at random;
- festival: every installed voice, one process per voice for a batch of duration stretches;
- Kokoro-82M, a neural many-voice model (training/kokoro.py; the `train` extra): its 28 English
  voices and blends of them, the phrase alone and after a word ("okay, alexa"), cached per phrase
  and speaker (`say_kokoro`, `kokoro_random`).

`synthesize(text, n, rng)` returns n clips, (samples,) float32 @ 16 kHz, peak-normalised; the
caller adds rooms and noise (training/enroll_examples.py). `check_phrase` rejects what cannot be said.
"""
import io
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import soundfile as sf

from corpus.phrases import MAX_PHRASE_CHARS, PhraseError, check_text, normalize_phrase  # noqa: F401
from corpus.rate import SAMPLE_RATE, resample

MAX_PHRASE_SECONDS = 2.5         # a wake phrase says in well under this at espeak-ng's default rate
SILENCE_RMS = 1e-3               # a probe quieter than this (−60 dBFS) is silence
MIN_VOICED_SECONDS = 0.15        # … and one with less sound than this has said nothing
ACCENT_VOICES = ("de", "fr", "nl", "es", "it", "pl", "sv", "hi", "pt")   # espeak-ng accents
NO_VARIANTS = ("whisper", "whisperf")   # variants that are not a wake-word voice
ESPEAK_RATE = (110, 230)         # words per minute (default 175)
ESPEAK_PITCH = (15, 85)          # 0–99 (default 50)
ESPEAK_AMPLITUDE = (60, 160)     # 0–200 (default 100)
FLITE_VOICES = ("kal", "awb", "rms", "slt")
STRETCH = (0.8, 1.3)             # flite/festival duration stretch (1: the voice's own rate)
FLITE_PITCH = (80, 200)          # Hz, flite's int_f0_target_mean
ENGINE_SHARE = {"espeak-ng": 0.4, "flite": 0.35, "festival": 0.25}   # of the clips, when installed
SUBPROCESS_TIMEOUT_S = 60
KOKORO_FORMS = ("{}.", "{}!", "{}?", "{},", "{}", "okay, {}.", "so {}.", "um, {}!", "hey {}?")  # the
                                 # i-th Kokoro clip of a phrase says form i mod len: how it ends, a word before
KOKORO_NEGATIVE_SPEAKERS = 8     # a negative text is said by one of its first this many speakers
                                 # (cached: the next enroll hears the same ones for free)


def check_phrase(text: str, say=None) -> str:
    """check_text, then one probe spoken at the default voice (`say(phrase) -> audio`, espeak-ng
    by default) must be sound, and short enough for a wake phrase."""
    phrase = check_text(text)
    audio = (say or probe)(phrase)
    voiced = np.sum(np.abs(audio) > 10 * SILENCE_RMS) / SAMPLE_RATE
    if audio.size == 0 or np.sqrt(np.mean(audio ** 2)) < SILENCE_RMS or voiced < MIN_VOICED_SECONDS:
        raise PhraseError(f"the text-to-speech engines say nothing for {phrase!r} (silence): "
                          f"write the words as they are spoken")
    if len(trim(audio)) / SAMPLE_RATE > MAX_PHRASE_SECONDS:
        raise PhraseError(f"{phrase!r} takes {len(trim(audio)) / SAMPLE_RATE:.1f} s to say; a wake "
                          f"phrase takes at most {MAX_PHRASE_SECONDS} s")
    return phrase


# -- engines --------------------------------------------------------------------------------------
def installed(engine: str) -> bool:
    program = {"espeak-ng": "espeak-ng", "flite": "flite", "festival": "festival"}[engine]
    return shutil.which(program) is not None


def engines() -> list[str]:
    return [e for e in ENGINE_SHARE if installed(e)]


def run(cmd: list[str], text: str | None = None) -> bytes:
    done = subprocess.run(cmd, input=None if text is None else text.encode(), capture_output=True,
                          timeout=SUBPROCESS_TIMEOUT_S)
    if done.returncode:
        raise RuntimeError(f"{cmd[0]} failed ({done.returncode}): {done.stderr.decode()[-300:]}")
    return done.stdout


def to_16k(data, rate: int) -> np.ndarray:
    audio = np.asarray(data, np.float32)
    audio = audio.mean(1) if audio.ndim == 2 else audio
    return resample(audio, rate)


def read_wav(data: bytes | Path) -> np.ndarray:
    audio, rate = sf.read(io.BytesIO(data) if isinstance(data, bytes) else data, dtype="float32")
    return to_16k(audio, rate)


@cache
def espeak_voices() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(English voices without MBROLA, variants) as espeak-ng lists them."""
    def listing(arg):
        rows = [line.split() for line in run(["espeak-ng", f"--voices={arg}"]).decode().splitlines()[1:]]
        return [r for r in rows if len(r) >= 5]
    english = [r[1] for r in listing("en") if not r[4].startswith("mb/") and r[1].startswith("en")]
    variants = [r[4].split("/")[-1] for r in listing("variant")]
    return (tuple(dict.fromkeys(english)) + ACCENT_VOICES,
            tuple(v for v in variants if v not in NO_VARIANTS))


def espeak(text: str, voice: str, rate: int = 175, pitch: int = 50, amplitude: int = 100,
           gap: int = 0) -> np.ndarray:
    cmd = ["espeak-ng", "-v", voice, "-s", str(rate), "-p", str(pitch), "-a", str(amplitude),
           "-g", str(gap), "--stdout"]
    return read_wav(run(cmd, text))


def espeak_random(text: str, rng) -> np.ndarray:
    voices, variants = espeak_voices()
    voice = str(rng.choice(voices))
    if rng.random() < 0.8:
        voice += "+" + str(rng.choice(variants))
    return espeak(text, voice, int(rng.integers(*ESPEAK_RATE)), int(rng.integers(*ESPEAK_PITCH)),
                  int(rng.integers(*ESPEAK_AMPLITUDE)), int(rng.integers(0, 4)))


def flite_random(text: str, rng) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "a.wav"
        run(["flite", "-voice", str(rng.choice(FLITE_VOICES)),
             "--setf", f"duration_stretch={rng.uniform(*STRETCH):.2f}",
             "--setf", f"int_f0_target_mean={rng.uniform(*FLITE_PITCH):.0f}",
             "-t", text, "-o", str(out)])
        return read_wav(out)


def festival_voices() -> list[str]:
    roots = [Path("/usr/share/festival/voices"), Path("/usr/lib/festival/voices")]
    return sorted({d.name for r in roots if r.is_dir() for d in r.glob("*/*") if d.is_dir()})


def festival_batch(texts: list[str], voice: str, stretches: list[float]) -> list[np.ndarray]:
    """One festival process: texts[i] at stretches[i] in `voice`."""
    quote = lambda s: '"' + s.replace("\\", " ").replace('"', " ") + '"'
    with tempfile.TemporaryDirectory() as tmp:
        lines = [f"(voice_{voice})"]
        for i, (text, stretch) in enumerate(zip(texts, stretches)):
            lines += [f"(Parameter.set 'Duration_Stretch {stretch:.2f})",
                      f"(utt.save.wave (utt.synth (Utterance Text {quote(text)})) \"{tmp}/{i}.wav\" 'riff)"]
        script = Path(tmp) / "say.scm"
        script.write_text("\n".join(lines) + "\n")
        run(["festival", "-b", str(script)])
        return [read_wav(Path(tmp) / f"{i}.wav") for i in range(len(texts))
                if (Path(tmp) / f"{i}.wav").is_file()]


def festival_random(texts: list[str], rng) -> list[np.ndarray]:
    voices = festival_voices()
    if not voices:
        return []
    out = []
    for v, part in enumerate(np.array_split(np.arange(len(texts)), len(voices))):
        stretches = rng.uniform(*STRETCH, size=len(part)).tolist()
        try:
            out += festival_batch([texts[i] for i in part], voices[v], stretches)
        except RuntimeError:
            continue                                  # a voice that fails to load: the others say it
    return out


# -- clips ----------------------------------------------------------------------------------------
def trim(audio: np.ndarray, floor: float = 0.02) -> np.ndarray:
    """Cut leading and trailing samples below `floor` of the peak."""
    loud = np.flatnonzero(np.abs(audio) > floor * (np.abs(audio).max() + 1e-9))
    return audio[loud[0]:loud[-1] + 1] if loud.size else audio[:0]


def normalise(audio: np.ndarray) -> np.ndarray:
    audio = trim(audio)
    return (audio / (np.abs(audio).max() + 1e-9) * 0.9).astype(np.float32)


def probe(phrase: str) -> np.ndarray:
    """The phrase in espeak-ng's default English voice (PhraseError when espeak-ng is missing)."""
    if not installed("espeak-ng"):
        raise PhraseError("espeak-ng is not installed: apt-get install espeak-ng flite festival "
                          "festvox-kallpc16k")
    return espeak(phrase, "en-us")


def audible(clips: list[np.ndarray]) -> list[np.ndarray]:
    """The clips with more than MIN_VOICED_SECONDS of sound, each trimmed and normalised."""
    return [normalise(a) for a in clips if len(trim(a)) > MIN_VOICED_SECONDS * SAMPLE_RATE]


@dataclass
class Synthesis:
    clips: list[np.ndarray]          # (samples,) float32 @ 16 kHz, trimmed, peak 0.9
    engines: dict[str, int]          # clips made by each engine


def synthesize(texts, n: int, rng, progress=None) -> Synthesis:
    """n clips, texts drawn in turn (one phrase, or many negatives), engines in ENGINE_SHARE;
    `progress(k)` after each k clips. Clips that come out silent are dropped."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    have = engines()
    if "espeak-ng" not in have:
        raise PhraseError("espeak-ng is not installed: apt-get install espeak-ng flite festival "
                          "festvox-kallpc16k")
    share = np.array([ENGINE_SHARE[e] for e in have])
    counts = dict(zip(have, rng.multinomial(n, share / share.sum()).tolist()))
    said = {e: [] for e in have}
    pick = lambda k: [texts[int(i)] for i in rng.integers(0, len(texts), k)]
    for text in pick(counts.get("flite", 0)):
        said["flite"].append(flite_random(text, rng))
        progress and progress(1)
    if counts.get("festival"):
        said["festival"] = festival_random(pick(counts["festival"]), rng)
        progress and progress(counts["festival"])
    for text in pick(n - sum(len(v) for v in said.values())):   # espeak-ng makes up the rest
        said["espeak-ng"].append(espeak_random(text, rng))
        progress and progress(1)
    clips = {e: audible(v) for e, v in said.items()}
    return Synthesis([a for v in clips.values() for a in v], {e: len(v) for e, v in clips.items()})


def syllable_splits(word: str) -> list[int]:
    """Where a written word breaks between syllables, roughly: before the last consonant between
    two vowel groups ("snowboy" → [4]: snow|boy; "computer" → [3, 5]: com|pu|ter)."""
    groups = [m.span() for m in re.finditer(r"[aeiouy]+", word.lower())]
    return [max(end, start - 1) for (_, end), (start, _) in zip(groups, groups[1:])]


def phrase_parts(phrase: str) -> list[str]:
    """Confusable negatives: each word of a multi-word phrase, and the beginnings and endings of
    each word at its syllable breaks ("snowboy" → snow, boy; "computer" → com, compu, puter, ter)."""
    words = re.findall(r"\w+", phrase)
    parts = list(words) if len(words) > 1 else []
    for w in words:
        for cut in syllable_splits(w):
            parts += [w[:cut], w[cut:]]
    return [p for p in dict.fromkeys(parts) if len(p) > 1 and p.lower() != phrase.lower()]


# -- Kokoro ---------------------------------------------------------------------------------------
def say_kokoro(phrase: str, n: int, progress=None, engine=None) -> Synthesis:
    """n clips of `phrase` by Kokoro: clip i is speaker i (training/kokoro.py: the same speakers
    for the same phrase on every call, so a second enroll reads them from the cache) saying form
    i of KOKORO_FORMS. Clips that come out silent are dropped."""
    from . import kokoro
    engine = engine or kokoro.Kokoro()
    texts = [KOKORO_FORMS[i % len(KOKORO_FORMS)].format(phrase) for i in range(n)]
    jobs = [(t, kokoro.speaker(t, i // len(KOKORO_FORMS), tuple(engine.table))) for i, t in enumerate(texts)]
    kept = audible(engine.say_all(jobs, progress))
    return Synthesis(kept, {"kokoro": len(kept)})


def kokoro_random(texts, n: int, rng, progress=None, engine=None) -> Synthesis:
    """n clips of `texts` by Kokoro, each text drawn at random (`rng`) and said by one of its
    first KOKORO_NEGATIVE_SPEAKERS speakers."""
    from . import kokoro
    engine = engine or kokoro.Kokoro()
    texts = [texts] if isinstance(texts, str) else list(texts)
    jobs = []
    for _ in range(n):
        text = texts[int(rng.integers(len(texts)))]
        jobs.append((text, kokoro.speaker(text, int(rng.integers(KOKORO_NEGATIVE_SPEAKERS)), tuple(engine.table))))
    kept = audible(engine.say_all(jobs, progress))
    return Synthesis(kept, {"kokoro": len(kept)})

