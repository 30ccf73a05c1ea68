"""Real continuous English speech (`english_speech_dev/`), by split: who trains, who sets a
threshold, who is only ever heard by the benchmark.

    training    speechocean762's own `train` speakers (transcribed) and LibriSpeech's
                `train-clean-100` readers that corpus/splits.py's salted speaker hash puts in its
                training split (100 and ~180), the Picovoice speech-to-intent requests (50+ people,
                no speaker ids) and Mycroft's not-wake-word utterances: negatives for `enroll`
    validation  VCC2016 (10 speakers, none of speechocean762's), the other 25 speechocean762
                `train` speakers and the other ~45 `train-clean-100` readers: the stream a
                threshold is chosen on (native read speech as well as L2 speech)
    bench       speechocean762's `test` speakers, LJ Speech and LibriSpeech's `test-other` readers
                (10): the wake-word bench's background

The hash is the one the backbone's speech source splits by (training/features.py: speech_splits),
so no speaker the backbone trained on is heard by a threshold. speechocean762 utterances without a
transcript are left out (they cannot be screened for the phrase). VCC2016, LJ Speech, LibriSpeech
and the coffee orders have no transcripts here: their read news, non-fiction, audiobooks and
drink orders are taken as phrase-free (a phrase in validation speech could only raise the
threshold). Mycroft's utterances are screened by its metadata.csv.
"""
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus.clips import AUDIO_SUFFIXES, ClipError, read_audio
from corpus.folders import NOISE_FOLDER, SPEECH_FOLDER, WAKEWORD_FOLDER
from corpus.rate import SAMPLE_RATE, resample
from corpus.splits import speaker_split

SPEECH_SPLITS = ("training", "validation", "bench")
SPEECHOCEAN = "speechocean762"      # SPEAKERnnnn/<utt>.ogg; train/ and test/ hold Kaldi `text`, `utt2spk`
VCC = "vcc2016"                     # <speaker>/<part>_<utt>.ogg
LJSPEECH = "ljspeech"               # LJnnn-nnnn.ogg, one speaker
LIBRISPEECH = "librispeech"         # <part>/<speaker>/<speaker>-<chapter>-<utt>.ogg
LIBRI_SPLITS = {"train-clean-100": ("training", "validation"), "test-other": ("bench",)}
S2I = "picovoice_s2i"               # <uuid>.ogg, crowd-sourced coffee orders, no speaker ids
MYCROFT_OTHER = "mycroft_precise/not-wake-words/en"   # <name>.ogg and metadata.csv (name.wav,text,…)


@dataclass(frozen=True)
class Utterance:
    path: Path
    speaker: str                    # "<corpus>/<speaker>"
    text: str | None                # the transcript, upper case; None where the corpus has none


def words(text: str) -> list[str]:
    """Lower-case words of a phrase or transcript: letters, digits and apostrophes."""
    return re.findall(r"[a-z0-9']+", text.lower())


def holds_phrase(text: str | None, phrase: str) -> bool:
    """Whether a transcript says the phrase or one of its words ("hey jarvis": "hey" or "jarvis"),
    as whole words. No transcript: False (see the module docstring)."""
    return text is not None and bool(set(words(phrase)) & set(words(text)))


def said(u: Utterance) -> str:
    """What the utterance says, as a key: its transcript, VCC2016's sentence (its ten voices read
    the same sentences, one file name each), else its file. A threshold counts one false accept
    per thing said (export/wake_threshold.py: Validation.count)."""
    if u.text:
        return u.text
    return f"{VCC}/{u.path.name}" if u.speaker.startswith(f"{VCC}/") else str(u.path)


def clip_speaker(u: Utterance) -> str:
    """The utterance's speaker as a clip's speaker name ("speechocean762_0001"): what
    corpus/splits.py hashes."""
    return u.speaker.replace("/", "_")


def trains(u: Utterance) -> bool:
    """Whether a speechocean762 `train` speaker is in the training split (else validation)."""
    return speaker_split(clip_speaker(u)) == "training"


def _kaldi(folder: Path, name: str) -> dict[str, str]:
    lines = (folder / name).read_text(encoding="utf-8").splitlines()
    return dict(line.split(maxsplit=1) for line in lines if line.strip())


def speechocean(root: Path, part: str) -> list[Utterance]:
    """speechocean762's `part` ("train", "test") under the speech folder `root`: every
    transcribed utterance found, sorted. ClipError when its Kaldi lists are missing."""
    folder = root / SPEECHOCEAN / part
    missing = [name for name in ("text", "utt2spk") if not (folder / name).is_file()]
    if missing:
        raise ClipError(f"no speechocean762 {part!r} transcripts at {folder}: expected the Kaldi "
                        f"files {', '.join(missing)}")
    text, spk = _kaldi(folder, "text"), _kaldi(folder, "utt2spk")
    out = []
    for utt in sorted(text):
        path = root / SPEECHOCEAN / f"SPEAKER{spk[utt].strip()}" / f"{utt}.ogg"
        if path.exists():
            out.append(Utterance(path, f"{SPEECHOCEAN}/{spk[utt].strip()}", text[utt].strip()))
    return out


def librispeech(root: Path, part: str) -> list[Utterance]:
    """LibriSpeech's `part` under the speech folder `root` (no transcripts here), sorted."""
    return [Utterance(p, f"{LIBRISPEECH}/{p.parent.name}", None)
            for p in sorted((root / LIBRISPEECH / part).glob("*/*.ogg"))]


def mycroft_other(root: Path) -> list[Utterance]:
    """Mycroft Precise's English not-wake-word utterances with their metadata.csv transcripts."""
    folder = root / MYCROFT_OTHER
    table = folder / "metadata.csv"
    if not table.is_file():
        return []
    text = {}
    for line in table.read_text(encoding="utf-8").splitlines():
        name, _, rest = line.partition(",")
        text[Path(name).stem] = rest.split(",")[0].strip().upper()
    return [Utterance(p, "mycroft/not-wake-words", text.get(p.stem)) for p in sorted(folder.glob("*.ogg"))]


def speech_folder(folder: Path) -> list[Utterance]:
    """A user's own folder of speech (`enroll --speech DIR`), sorted, in either layout:

    - LibriSpeech's, as torchaudio downloads it: `<speaker>/<chapter>/<utt id>.flac` beside
      `<speaker>-<chapter>.trans.txt` ("<utt id> TRANSCRIPT" lines);
    - plain audio files (WAV, FLAC, OGG) anywhere below it, each with the transcript in a
      `<stem>.txt` beside it where there is one.

    The speaker is the LibriSpeech speaker, else the file's folder. ClipError when it is no
    folder or holds no audio file."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ClipError(f"--speech {folder}: not a folder (expected a folder of speech: LibriSpeech's "
                        f"layout or audio files)")
    text = {}
    for table in folder.rglob("*.trans.txt"):
        for line in table.read_text(encoding="utf-8").splitlines():
            utt, _, said = line.partition(" ")
            text[utt] = said.strip().upper() or None
    out = []
    for p in sorted(q for q in folder.rglob("*") if q.suffix.lower() in AUDIO_SUFFIXES and q.is_file()):
        if p.stem in text:
            out.append(Utterance(p, f"user/{p.stem.split('-')[0]}", text[p.stem]))
        else:
            side = p.with_suffix(".txt")
            said = side.read_text(encoding="utf-8").strip().upper() if side.is_file() else None
            out.append(Utterance(p, f"user/{p.parent.name}", said or None))
    if not out:
        raise ClipError(f"--speech {folder}: no audio file in it (expected {', '.join(AUDIO_SUFFIXES)} files, "
                        f"in LibriSpeech's layout or any other)")
    return out


def split_of(u: Utterance) -> str:
    """training or validation for a speaker that either may have (the salted speaker hash)."""
    return "training" if trains(u) else "validation"


def utterances(data: Path, split: str, phrase: str | None = None) -> list[Utterance]:
    """The split's utterances (SPEECH_SPLITS), sorted; with `phrase`, those whose transcript
    holds it (`holds_phrase`) left out. ClipError when the folder or split has none."""
    if split not in SPEECH_SPLITS:
        raise ValueError(f"expected a speech split among {SPEECH_SPLITS}, got {split!r}")
    root = Path(data) / SPEECH_FOLDER
    if not root.is_dir():
        raise ClipError(f"no continuous speech at {root}")
    libri = [u for part, splits in LIBRI_SPLITS.items() for u in librispeech(root, part)
             if split in splits and (len(splits) == 1 or split_of(u) == split)]
    if split == "training":
        found = [u for u in speechocean(root, "train") if trains(u)] + libri
        found += [Utterance(p, f"{S2I}/unknown", None) for p in sorted((root / S2I).glob("*.ogg"))]
        found += mycroft_other(root)
    elif split == "validation":
        found = [Utterance(p, f"{VCC}/{p.parent.name}", None) for p in sorted((root / VCC).glob("*/*.ogg"))]
        found += [u for u in speechocean(root, "train") if not trains(u)] + libri
    else:
        found = speechocean(root, "test")
        found += [Utterance(p, f"{LJSPEECH}/LJ", None) for p in sorted((root / LJSPEECH).glob("*.ogg"))]
        found += libri
    if phrase is not None:
        found = [u for u in found if not holds_phrase(u.text, phrase)]
    if not found:
        raise ClipError(f"no {split} utterances under {root}")
    return found


SPLIT_SOURCES = {"training": "100 speechocean762 train speakers, LibriSpeech train-clean-100 readers, "
                             "Picovoice speech-to-intent, Mycroft not-wake-words",
                 "validation": "VCC2016, 25 other speechocean762 train speakers, other LibriSpeech "
                               "train-clean-100 readers",
                 "bench": "speechocean762 test speakers, LJ Speech, LibriSpeech test-other"}
BENCH_PHRASES = ("alexa", "snowboy", "athena")  # the phrases with real recordings in the bench
HELD_OUT_WAKEWORDS = {"athena": "mycroft_precise/athena/en"}   # under SPEECH_FOLDER: every recording
# of these is the bench's (no recipe was tuned on them, and no training hears them, as a negative either)


def wakeword_training(path: Path) -> bool:
    """Even-numbered wake-word recordings may train; odd ones are only ever heard by benchmarks."""
    return int(re.sub(r"\D", "", Path(path).stem) or 0) % 2 == 0


def wake_recordings(data: Path, phrase: str) -> list[Path]:
    """The recordings of `phrase` no training hears, sorted: the odd-numbered ones of the
    wake-word folder, or every one of a HELD_OUT_WAKEWORDS phrase."""
    if phrase in HELD_OUT_WAKEWORDS:
        folder = Path(data) / SPEECH_FOLDER / HELD_OUT_WAKEWORDS[phrase]
        found = sorted(p for p in folder.glob("*") if p.suffix in AUDIO_SUFFIXES)
    else:
        folder = Path(data) / WAKEWORD_FOLDER / phrase
        found = sorted((p for p in folder.glob("*") if p.suffix in AUDIO_SUFFIXES and not wakeword_training(p)),
                       key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
    if not found:
        raise ClipError(f"no recordings of {phrase!r} in {folder}")
    return found


def read(path: Path, rate: int = SAMPLE_RATE) -> np.ndarray:
    """A file as (samples,) float32 at `rate` (resampled if it was stored otherwise)."""
    audio, got = read_audio(path)
    return resample(audio, got, rate)


def noise_bed(data: Path) -> np.ndarray:
    """The background noise recordings one after another, at 16 kHz."""
    files = sorted((Path(data) / NOISE_FOLDER).glob("*.wav"))
    if not files:
        raise ClipError(f"no background noise WAVs in {Path(data) / NOISE_FOLDER}")
    return np.concatenate([read(f) for f in files])
