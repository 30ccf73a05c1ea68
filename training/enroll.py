"""What `rotkws enroll` trains on and where it comes from (steps 1–2 of its recipe: the command's
docstring, rotkws/enroll_cli.py): its settings (`EnrollConfig`) and the items its examples are built
from (`gather` → `Items`).

1. The phrase (checked by training/tts.py: not empty, something to say, short) spoken by
   Kokoro-82M (training/kokoro.py: stock and blended neural voices, both accents, alone and after a
   word, cached per phrase and speaker) and by espeak-ng, flite and festival in many voices, rates,
   pitches and volumes (the positives), with the same engines saying other words and pieces of the
   phrase ("snow", "boy"); real recordings of the phrase beside them, if given (`--recordings`),
   each RECORDING_COPIES times.
2. Real negatives: continuous speech (the training split of evaluation/speech.py: speechocean762
   and LibriSpeech speakers as the backbone's speaker hash splits them, Picovoice's coffee orders,
   Mycroft's utterances; every utterance whose transcript holds the phrase or one of its words left
   out), Speech Commands words (the log-mel image corpus, and the v0.01 sample WAVs of speakers not
   in the test folder), the even-numbered `alexa` recordings, Mycroft's other wake words, and
   background noise; synthetic sentences (the engines, Kokoro among them, reading those
   transcripts) beside them. Never a recording of the phrase, never the odd-numbered wake-word
   recordings nor the bench's or the validation stream's speakers, never the Speech Commands
   test folder.

How they are rendered into examples: training/enroll_examples.py; the fit: training/enroll_fit.py.
"""
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from app.wake_rule import VALIDATION_FA_PER_HOUR
from corpus.clips import ClipError, read_audio, speaker_of
from corpus.folders import IMAGE_TRAIN_ZIP, KEYWORD_FOLDER, NOISE_FOLDER, SAMPLE_FOLDER, WAKEWORD_FOLDER
from evaluation import speech as real_speech
from model.logmel import CLIP_FRAMES, N_MELS
from training.features import decode_zip

from . import progress, tts
from .tts import PhraseError

NEGATIVE_WAKEWORDS = ("alexa",)                   # the even-numbered ones; never "snowboy"
OTHER_WAKEWORDS = "mycroft_precise/{}/en"         # under the speech folder: Mycroft's wake words …
OTHER_WAKEWORD_NAMES = ("amelia", "heychatterbox")   # … recorded by its contributors (athena: the bench's)
NEGATIVE_WORDS = (                                # synthetic negatives beside the phrase's pieces
    "hello hey okay yes no stop go up down left right on off one two three four five six seven "
    "eight nine zero music play pause next weather light lamp window door house phone call time "
    "morning evening today tomorrow please thank you sorry maybe never always water coffee "
    "kitchen garden table computer keyboard mouse monitor snow boy toy show bowl blue below "
    "elbow rainbow cowboy snowball snowman alexa siri google jarvis marvin sheila bird cat dog "
    "happy house tree wow follow learn forward backward visual bed river open close begin end "
    "banana tomato potato robot rocket pocket bottle little middle over under number nothing"
).split()
PART_SHARE = 0.4             # of the synthetic negatives: pieces of the phrase
KOKORO_PART_WEIGHT = 3       # Kokoro's negatives draw each piece of the phrase this many times as often as a word
UTTERANCES_PER_WINDOW = 3     # utterances read per speech example asked for (all of them by default)
RECORDING_COPIES = 20         # each real recording of the phrase (--recordings) stands this many times among
                              # the positives, each copy varied as every clip is: a user's few takes are their
                              # voice, room and microphone, against some 1,400 synthetic clips


@dataclass
class EnrollConfig:
    positives: int = 1000        # synthetic clips of the phrase by espeak-ng, flite and festival
    tts_negatives: int = 1000    # synthetic clips of other words and pieces of the phrase
    images: int = 6000           # Speech Commands log-mel images (other words, noise slices)
    speech_negatives: int = 3000 # windows of real continuous speech
    tts_sentences: int = 300     # synthetic sentences (the engines reading training transcripts)
    kokoro_positives: int = 400  # the phrase in Kokoro's voices (training/kokoro.py), beside `positives`
    kokoro_negatives: int = 200  # other words and pieces of the phrase in Kokoro's voices
    kokoro_sentences: int = 40   # training transcripts read by Kokoro (its voices in running speech)
    wav_negatives: int = 800     # real recordings of other words (WAV / FLAC)
    noise_negatives: int = 300   # examples of noise alone
    epochs: int = 6
    batch_size: int = 64
    blocks: int = 1              # top blocks trained (the others stay frozen)
    negative_weight: float = 3.0 # the others' frames in the loss, against the phrase's 1
    peak_weight: float = 1.0     # the loss's term on each example's highest-scoring other frame (loss_fn)
    lr: float = 2e-3             # top blocks, norm and head
    recurrent_lr: float = 1e-3   # the top block's RotRNN weights (B, C, D, γ, θ)
    max_steps: int = 0           # > 0: stop after this many steps (tests; the verifier's heads too)
    validation_hours: float = 0.0  # the threshold's stream; 0: every validation utterance once
    fa_per_hour: float = VALIDATION_FA_PER_HOUR   # … and the false accepts per hour it may have there
    recordings: tuple = ()       # real recordings of the phrase, if any: positives beside the synthetic ones
    speech_dirs: tuple = ()      # the user's own folders of speech (evaluation/speech.py: speech_folder): every
                                 # utterance whose transcript does not say the phrase joins the negatives
    seed: int = 0
    threads: int = 1


# -- data -----------------------------------------------------------------------------------------
@dataclass
class Items:
    """Audio items (16 kHz float32) and pixel items (T, N_MELS) to build examples from."""
    positives: list[np.ndarray]
    synthetic: list[np.ndarray]                      # synthetic negatives
    real: list[np.ndarray]                           # real negative recordings
    speech: list[np.ndarray]                         # utterances of continuous speech (real, synthetic)
    images: np.ndarray                               # (N, 98, N_MELS) uint8
    noise: np.ndarray                                # (samples,) long background noise
    sources: dict = field(default_factory=dict)      # what came from where, for the metadata


def same_word(name: str, phrase: str) -> bool:
    key = lambda s: re.sub(r"[^a-z0-9]", "", s.lower())
    return key(name) == key(phrase)


wakeword_training = real_speech.wakeword_training


def real_negatives(data: Path, phrase: str, n: int, rng) -> list[np.ndarray]:
    test_speakers = {speaker_of(p.name) for p in (data / KEYWORD_FOLDER).glob("*/*.wav")}
    sample = [p for p in sorted((data / SAMPLE_FOLDER).glob("*/*.wav"))
              if not same_word(p.parent.name, phrase) and speaker_of(p.name) not in test_speakers]
    wake = [p for w in NEGATIVE_WAKEWORDS if not same_word(w, phrase)
            for p in sorted((data / WAKEWORD_FOLDER / w).glob("*")) if wakeword_training(p)]
    mycroft = [p for w in OTHER_WAKEWORD_NAMES if not same_word(w, phrase)
               for p in sorted((data / real_speech.SPEECH_FOLDER / OTHER_WAKEWORDS.format(w)).glob("*.ogg"))]
    paths = sample + wake + mycroft
    out = []
    for i in rng.permutation(len(paths))[:n]:
        try:
            audio, rate = read_audio(paths[i])
        except ClipError:
            continue                                  # a few wake-word files do not decode
        out.append(tts.to_16k(audio, rate))
    return out


def image_negatives(data: Path, phrase: str, n: int, rng) -> np.ndarray:
    if n <= 0:
        return np.zeros((0, CLIP_FRAMES, N_MELS), np.uint8)
    pixels, names, _ = decode_zip(data / IMAGE_TRAIN_ZIP)
    keep = np.flatnonzero([not same_word(name.split("/")[-2], phrase) for name in names])
    return pixels[np.sort(rng.choice(keep, min(n, len(keep)), replace=False))]


def noise_audio(data: Path) -> np.ndarray:
    return real_speech.noise_bed(data)


def speech_negatives(data: Path, phrase: str, n: int, rng, folders=()) -> tuple[list[np.ndarray], list[str]]:
    """Up to `n` training utterances of continuous speech whose transcript does not hold the
    phrase (evaluation/speech.py), drawn at random, then every such utterance of the user's
    `folders` (`--speech`), as 16 kHz audio, and their transcripts."""
    found = real_speech.utterances(data, "training", phrase)
    found = [found[i] for i in np.sort(rng.permutation(len(found))[:n])]
    found += [u for f in folders for u in real_speech.speech_folder(f) if not real_speech.holds_phrase(u.text, phrase)]
    return [real_speech.read(u.path) for u in found], [u.text for u in found]


def read_recordings(paths) -> tuple[list[np.ndarray], list[str]]:
    """The recordings of the phrase (`--recordings`) at 16 kHz, and a line for each that is not
    readable audio (a corrupt file among many is left out and named); none readable: ClipError."""
    audio, skipped = [], []
    for f in paths:
        try:
            audio.append(real_speech.read(Path(f)))
        except ClipError as e:
            skipped.append(str(e))
    if paths and not audio:
        raise ClipError(f"none of the {len(paths)} recordings is readable audio: " + "; ".join(skipped[:3]))
    return audio, skipped


def kokoro_engine(cfg: EnrollConfig, engine=None):
    """The Kokoro engine when cfg asks for Kokoro clips (`engine`, or training/kokoro.py's), else None."""
    if not (cfg.kokoro_positives or cfg.kokoro_negatives or cfg.kokoro_sentences):
        return None
    from training.kokoro import Kokoro
    return engine or Kokoro()


def kokoro_clips(phrase: str, others: list[str], parts: list[str], cfg: EnrollConfig, bar,
                 engine) -> tuple[tts.Synthesis, tts.Synthesis]:
    """(the phrase, other words and pieces of it) in Kokoro's voices, as cfg asks."""
    if engine is None:
        return tts.Synthesis([], {}), tts.Synthesis([], {})
    pos = tts.say_kokoro(phrase, cfg.kokoro_positives, bar.update, engine)
    rng = np.random.default_rng(cfg.seed)
    neg = tts.kokoro_random(others + parts * KOKORO_PART_WEIGHT, cfg.kokoro_negatives, rng, bar.update, engine)
    return pos, neg


def merged(*said: tts.Synthesis) -> tts.Synthesis:
    engines = {}
    for s in said:
        for e, k in s.engines.items():
            engines[e] = engines.get(e, 0) + k
    return tts.Synthesis([a for s in said for a in s.clips], engines)


def gather(phrase: str, data: Path, cfg: EnrollConfig, rng, say=tts.synthesize, kokoro=None) -> Items:
    """Synthesise the phrase and the synthetic negatives; read the real negatives. `kokoro`: the
    Kokoro engine (default: training/kokoro.py's, made when cfg asks for Kokoro clips)."""
    recorded, unreadable = read_recordings(cfg.recordings)          # first: a bad list fails at once
    users = {str(f): sum(not real_speech.holds_phrase(u.text, phrase) for u in real_speech.speech_folder(f))
             for f in cfg.speech_dirs}                               # … and a bad folder of speech
    for line in unreadable:
        print(f"enroll: left out {line}", file=sys.stderr)
    others = [w for w in NEGATIVE_WORDS if not same_word(w, phrase)]
    parts = tts.phrase_parts(phrase)
    n_parts = round(PART_SHARE * cfg.tts_negatives) if parts else 0
    total = cfg.positives + cfg.tts_negatives + cfg.kokoro_positives + cfg.kokoro_negatives
    kokoro = kokoro_engine(cfg, kokoro)
    with progress.bar(total=total, desc="synthesising", unit="clip") as bar:
        k_pos, k_neg = kokoro_clips(phrase, others, parts, cfg, bar, kokoro)
        pos = merged(say(phrase, cfg.positives, rng, bar.update), k_pos)
        neg = say(others, cfg.tts_negatives - n_parts, rng, bar.update)
        part = say(parts, n_parts, rng, bar.update) if n_parts else tts.Synthesis([], {})
    asked = cfg.positives + cfg.kokoro_positives
    if len(pos.clips) < max(1, asked // 2):
        raise PhraseError(f"the text-to-speech engines said {phrase!r} audibly only "
                          f"{len(pos.clips)} times out of {asked}")
    real = real_negatives(data, phrase, cfg.wav_negatives, rng)
    images = image_negatives(data, phrase, cfg.images, rng)
    speech, texts = (speech_negatives(data, phrase, UTTERANCES_PER_WINDOW * cfg.speech_negatives, rng, cfg.speech_dirs)
                     if cfg.speech_negatives else ([], []))
    sentences = tts.Synthesis([], {})
    if (cfg.tts_sentences or cfg.kokoro_sentences) and texts:
        lower = [t.lower() for t in texts if t]          # what has a transcript
        with progress.bar(total=cfg.tts_sentences + cfg.kokoro_sentences, desc="sentences", unit="clip") as bar:
            sentences = say(lower, cfg.tts_sentences, rng, bar.update)
            if cfg.kokoro_sentences:
                sentences = merged(sentences, tts.kokoro_random(lower, cfg.kokoro_sentences, rng, bar.update,
                                                                kokoro))
    sources = {"positives": pos.engines | ({"recordings": len(recorded)} if recorded else {})
                             | ({"recordings_unreadable": len(unreadable)} if unreadable else {}),
               "synthetic_negatives": len(neg.clips) + len(part.clips) + len(k_neg.clips),
               "phrase_pieces": parts, "real_recordings": len(real), "images": len(images),
               "speech_utterances": len(speech), **({"speech_folders": users} if users else {}), "synthetic_sentences": len(sentences.clips),
               "speech_examples": cfg.speech_negatives if speech else 0,
               "noise_examples": cfg.noise_negatives,
               "folders": [IMAGE_TRAIN_ZIP, SAMPLE_FOLDER, *(f"{WAKEWORD_FOLDER}/{w} (even-numbered)"
                                                       for w in NEGATIVE_WAKEWORDS), NOISE_FOLDER,
                           *(f"{real_speech.SPEECH_FOLDER}/{OTHER_WAKEWORDS.format(w)}" for w in OTHER_WAKEWORD_NAMES),
                           f"{real_speech.SPEECH_FOLDER} ({real_speech.SPLIT_SOURCES['training']})"]}
    return Items(pos.clips + recorded * RECORDING_COPIES, neg.clips + part.clips + k_neg.clips, real, speech + sentences.clips, images,
                 noise_audio(data), sources)
