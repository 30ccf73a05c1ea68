"""Clip folders in the Speech Commands layout, read the same way by training and the runtime.

    root/
      yes/0c540988_nohash_0.wav           one subfolder per word; speaker before `_nohash_`
      _unknown_/backward_0c540988_nohash_0.wav   other words, the word as a file-name prefix
      _silence_/1024.wav                  1 s of noise, no speaker
      _background_noise_/…                long noise recordings: never clips

Audio files are read here only (audio_blocks), checked by one rule. numpy + soundfile only
(no torch): the runtime imports this module.
"""
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from corpus.labels import SILENCE, UNKNOWN   # noqa: F401  (the clips' labels; importers read them here too)

BACKGROUND_NOISE = "_background_noise_"   # the folder of long noise files, never clips
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg")
UNKNOWN_WAV_SIZES = (0, 0xFFFF_FFFF)   # what streaming writers put in a WAV header they cannot rewind
PEAK_LIMIT = 4.0    # |sample| above this (+12 dB over full scale) is a broken file, not audio;
                    # float files may go a little over ±1 (inter-sample peaks) and are kept


class ClipError(ValueError):
    """A folder or file that cannot be read as clips: the message names it."""


@dataclass(frozen=True)
class Clip:
    path: Path
    label: str       # one of the labels asked for
    speaker: str     # speaker id (the file name for silence clips): what speaker splits hash

    @property
    def name(self) -> str:
        """`word/file.wav`: how Speech Commands' split lists name a clip."""
        return f"{self.path.parent.name}/{self.path.name}"


def speaker_of(filename: str) -> str:
    """`backward_0c540988_nohash_0.wav` → `0c540988`; `0c540988_nohash_0.wav` → `0c540988`;
    a name without `_nohash_` (a silence clip, `1024.wav`) → itself."""
    stem = filename.rsplit("/", 1)[-1]
    head = re.sub(r"_nohash_.*$", "", stem)
    return head.rsplit("_", 1)[-1]


def read_audio(path, max_seconds: float | None = None) -> tuple[np.ndarray, int]:
    """(samples,) float32 mono in [−1, 1] and its sample rate in Hz; channels are averaged.

    Any format soundfile reads (WAV 8/16/24/32-bit, FLAC, OGG). Refused with ClipError as
    audio_blocks refuses (missing, a folder, not audio, empty, truncated, non-finite, far beyond
    full scale, longer than max_seconds).
    """
    (data, rate), = audio_blocks(path, max_seconds=max_seconds)
    return data.mean(axis=1, dtype=np.float32), rate


def audio_blocks(path, block_seconds: float | None = None,
                 max_seconds: float | None = None) -> Iterator[tuple[np.ndarray, int]]:
    """A file's audio as (frames, channels) float32 blocks at full scale ±1, each with the rate
    in Hz: blocks of block_seconds (the whole file as one block without it). The one way audio
    files are read: every block is checked before it is yielded.

    A file that is missing, a folder, not audio, empty, truncated, longer than max_seconds, or
    whose samples are not finite or far beyond full scale (PEAK_LIMIT) raises ClipError naming
    it and saying which.
    """
    path = Path(path)
    check_audio_file(path)
    frames = 0
    try:
        with sf.SoundFile(str(path)) as f:
            rate = int(f.samplerate)
            if max_seconds is not None and f.frames > max_seconds * rate:
                raise ClipError(f"{path}: is {f.frames / rate:.0f} s long; files up to "
                                f"{max_seconds:g} s are read")
            blocks = ([f.read(dtype="float32", always_2d=True)] if block_seconds is None else
                      f.blocks(blocksize=max(1, int(block_seconds * rate)), dtype="float32", always_2d=True))
            for data in blocks:
                if len(data):
                    check_samples(data, path)
                    frames += len(data)
                    yield data, rate
    except ClipError:
        raise
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        raise ClipError(f"{path}: not a readable audio file (expected WAV/FLAC/OGG): {e}") from None
    if not frames:
        raise ClipError(f"{path}: holds no audio samples (an empty or header-only file)")


def check_audio_file(path: Path) -> None:
    """ClipError unless `path` is a file, and, for a WAV, one as long as its header says."""
    if path.is_dir():
        raise ClipError(f"{path}: is a folder; expected an audio file (WAV/FLAC/OGG)")
    if not path.is_file():
        raise ClipError(f"{path}: no such audio file")
    missing = wav_missing_bytes(path)
    if missing:
        raise ClipError(f"{path}: truncated: its WAV header promises {missing} more bytes of audio")


def wav_missing_bytes(path: Path) -> int:
    """How many bytes of its `data` chunk a RIFF/WAVE file lacks (0 for complete files and for
    anything that is not a WAV: soundfile judges those)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            return 0
        while True:
            chunk = f.read(8)
            if len(chunk) < 8:
                return 0                                   # no data chunk: soundfile will say
            declared = int.from_bytes(chunk[4:], "little")
            if chunk[:4] == b"data":
                if declared in UNKNOWN_WAV_SIZES:              # written to a pipe: length unknown
                    return 0
                return max(0, f.tell() + declared - size)
            f.seek(declared + declared % 2, 1)             # chunks are padded to even sizes


def check_samples(data: np.ndarray, path) -> None:
    """ClipError if the samples (float, full scale ±1) are not finite or beyond PEAK_LIMIT."""
    if not np.isfinite(data).all():
        raise ClipError(f"{path}: holds non-finite samples (NaN or infinity)")
    peak = float(np.abs(data).max(initial=0.0))
    if peak > PEAK_LIMIT:
        raise ClipError(f"{path}: samples far outside [−1, 1] (peak {peak:.3g}, the limit is "
                        f"{PEAK_LIMIT:g}); expected audio scaled to full scale ±1")


def folder_label(folder: str, filename: str, labels) -> str | None:
    """The label of `folder/filename` for a model with `labels`, or None to skip the clip."""
    if folder == SILENCE:
        return SILENCE if SILENCE in labels else None
    word = filename.split("_", 1)[0] if folder == UNKNOWN else folder
    if word in labels:
        return word
    return UNKNOWN if UNKNOWN in labels else None


def list_clips(root, labels) -> list[Clip]:
    """Every clip under `root` (Speech Commands layout) whose label is one of `labels`.

    Words that are not labels count as `_unknown_` when that is a label, else are skipped.
    Raises ClipError when root does not exist or holds no clip for these labels.
    """
    root = Path(root)
    if root.is_file():
        raise ClipError(f"{root} is a file; expected a folder with one subfolder per word "
                        f"(the Speech Commands layout)")
    if not root.is_dir():
        raise ClipError(f"data folder {root} does not exist (expected a folder with one "
                        f"subfolder per word, the Speech Commands layout)")
    clips = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if folder.name == BACKGROUND_NOISE or folder.name.startswith("."):
            continue
        for path in sorted(folder.iterdir()):
            label = folder_label(folder.name, path.name, labels)
            if label is not None and path.suffix.lower() in AUDIO_SUFFIXES:
                clips.append(Clip(path, label, speaker_of(path.name)))
    if not clips:
        raise ClipError(f"no clips in {root} for labels {list(labels)}: expected subfolders "
                        f"named after words (yes/, no/, {UNKNOWN}/, {SILENCE}/ …) holding audio files")
    return clips


def fit_length(x: np.ndarray, n: int) -> np.ndarray:
    """Pad a short clip with zeros on both sides; crop a long one to its loudest n samples."""
    if len(x) < n:
        left = (n - len(x)) // 2
        return np.pad(x, (left, n - len(x) - left))
    if len(x) > n:
        energy = np.concatenate([[0.0], np.cumsum(x.astype(np.float64) ** 2)])
        start = int(np.argmax(energy[n:] - energy[:-n]))
        return x[start:start + n]
    return x
