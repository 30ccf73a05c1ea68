"""Examples in the feature domain: the log-mel image corpus, read in place from its zip, and WAV
clips passed through the same fixed front-end (model/logmel.py), as one kind of example.

A network with the "logmel" front-end trains on these: `(pixels (CLIP_FRAMES, N_MELS) uint8,
label index)`. The images are `<word>/<speaker>_nohash_<n>.jpg` and `_background_noise_/<n>.jpg`
inside `speech_commands_v0.02_logmel_*.zip` (../shared/data/README.md says how their pixels were
made); words that are not labels are `_unknown_`, the noise slices `_silence_`.
"""
import hashlib
import io
import os
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from corpus.clips import BACKGROUND_NOISE, SILENCE, UNKNOWN, Clip, ClipError, folder_label, speaker_of
from corpus.splits import SPLITS, speaker_split
from model.logmel import CLIP_FRAMES, N_MELS, LogMelPixels

IMAGE_SUFFIX = ".jpg"
CACHE_ENV = "ROTKWS_CACHE"   # where decoded image corpora are kept (default ~/.cache/rotkws)
PIXEL_BATCH = 256            # clips per front-end call when WAVs become pixels


@dataclass
class FeatureClips:
    """Examples of one split: pixels (N, CLIP_FRAMES, N_MELS) uint8, a label and speaker each."""

    pixels: np.ndarray
    labels: list[str]
    speakers: list[str]

    def __len__(self) -> int:
        return len(self.labels)

    @staticmethod
    def empty() -> "FeatureClips":
        return FeatureClips(np.zeros((0, CLIP_FRAMES, N_MELS), np.uint8), [], [])

    @staticmethod
    def concat(parts: list["FeatureClips"]) -> "FeatureClips":
        parts = [p for p in parts if len(p)] or [FeatureClips.empty()]
        return FeatureClips(np.concatenate([p.pixels for p in parts]),
                            [x for p in parts for x in p.labels], [x for p in parts for x in p.speakers])

    def select(self, keep: np.ndarray) -> "FeatureClips":
        idx = np.flatnonzero(keep)
        return FeatureClips(self.pixels[idx], [self.labels[i] for i in idx], [self.speakers[i] for i in idx])


# -- the image corpus ---------------------------------------------------------------------------
def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "rotkws"))


def _decode(data: bytes) -> np.ndarray | None:
    from PIL import Image, UnidentifiedImageError   # the train extra's; only image sources need it
    try:
        img = np.asarray(Image.open(io.BytesIO(data)).convert("L"))
    except (UnidentifiedImageError, OSError):
        return None
    return img if img.shape == (CLIP_FRAMES, N_MELS) else None


def decode_zip(path: Path) -> tuple[np.ndarray, list[str], int]:
    """Every image of the zip: (pixels (N, CLIP_FRAMES, N_MELS) uint8, member names, corrupt count).

    Decoding ~47k JPEGs takes about a minute here, so the result is cached (keyed by the zip's
    size and modification time) under $ROTKWS_CACHE."""
    stat = path.stat()
    key = hashlib.sha1(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    cached = cache_dir() / f"{path.stem}-{key}.npz"
    if cached.is_file():
        with np.load(cached) as f:
            return f["pixels"], f["names"].tolist(), int(f["corrupt"])
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise ClipError(f"{path}: not a readable zip of log-mel images: {e}") from None
    images, names, corrupt = [], [], 0
    with archive:
        for name in sorted(n for n in archive.namelist() if n.lower().endswith(IMAGE_SUFFIX)):
            img = _decode(archive.read(name))
            if img is None:
                corrupt += 1
                continue
            images.append(img)
            names.append(name)
    if not images:
        raise ClipError(f"{path}: no {CLIP_FRAMES} × {N_MELS} log-mel images inside "
                        f"(expected <word>/<speaker>_nohash_<n>{IMAGE_SUFFIX})")
    pixels = np.stack(images)
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_name(f"{cached.stem}.{os.getpid()}.partial.npz")   # DDP ranks may race
    np.savez(partial, pixels=pixels, names=np.array(names), corrupt=corrupt)
    partial.replace(cached)
    return pixels, names, corrupt


def image_label(name: str, labels) -> str | None:
    """`yes/0a7c2a8d_nohash_0.jpg` → its label (or None: skip), like a WAV folder's clip."""
    folder, _, filename = name.rpartition("/")
    folder = folder.rsplit("/", 1)[-1]
    if folder == BACKGROUND_NOISE:
        return SILENCE if SILENCE in labels else None
    return folder_label(folder, filename, labels)


def image_splits(path: Path, labels) -> tuple[dict[str, FeatureClips], int]:
    """The zip's images split by speaker (corpus/splits.py's salted hash, as WAV folders without
    lists are), and how many images were corrupt (skipped, warned)."""
    if not path.is_file():
        raise ClipError(f"log-mel image zip {path} does not exist")
    pixels, names, corrupt = decode_zip(path)
    if corrupt:
        warnings.warn(f"{path}: skipped {corrupt} image(s) that are not {CLIP_FRAMES} × {N_MELS} "
                      f"greyscale JPEGs", stacklevel=2)
    found = [(i, label, speaker_of(name.rsplit("/", 1)[-1].removesuffix(IMAGE_SUFFIX)))
             for i, name in enumerate(names) if (label := image_label(name, labels)) is not None]
    every = FeatureClips(pixels[[i for i, _, _ in found]], [l for _, l, _ in found], [s for _, _, s in found])
    split = np.array([speaker_split(s) for s in every.speakers])
    return {s: every.select(split == s) for s in SPLITS}, corrupt


def speech_splits(folder: Path, labels) -> dict[str, FeatureClips]:
    """Continuous read speech as `_unknown_` clips: speechocean762's `train` speakers' utterances
    (never the bench's) whose transcripts hold none of the labels' words, cut into consecutive 1-s
    clips (a last piece under half a clip dropped), split by speaker (corpus/splits.py's salted
    hash): those of evaluation/speech.py's training split train, the others, which enroll's
    threshold hears (its validation split), only validate and test."""
    from evaluation import speech                       # reads the corpora's own transcripts
    if UNKNOWN not in labels:
        raise ClipError(f"a speech source needs an {UNKNOWN!r} label, the task has {list(labels)}")
    if Path(folder).name != speech.SPEECH_FOLDER:
        raise ClipError(f"a speech source is the {speech.SPEECH_FOLDER} folder, got {folder}")
    words = " ".join(l for l in labels if not l.startswith("_"))
    found = [u for u in speech.speechocean(Path(folder), "train") if not speech.holds_phrase(u.text, words)]
    pixels, speakers = [], []
    for u in found:
        frames = recording_pixels(speech.read(u.path))
        n = (len(frames) + CLIP_FRAMES // 2) // CLIP_FRAMES
        frames = np.pad(frames, ((0, max(0, n * CLIP_FRAMES - len(frames))), (0, 0)))[:n * CLIP_FRAMES]
        pixels.append(frames.reshape(n, CLIP_FRAMES, N_MELS))
        speakers += [speech.clip_speaker(u)] * n
    every = FeatureClips(np.concatenate(pixels or [FeatureClips.empty().pixels]), [UNKNOWN] * len(speakers), speakers)
    split = np.array([speaker_split(s) for s in every.speakers])
    return {s: every.select(split == s) for s in SPLITS}


# -- WAV clips through the front-end ------------------------------------------------------------
def audio_pixels(audio: list[np.ndarray], extractor: LogMelPixels | None = None) -> np.ndarray:
    """1 s clips (each (16,000,) float32) → (N, CLIP_FRAMES, N_MELS) uint8 pixels, rounded as the
    corpus's images are."""
    extractor = extractor or LogMelPixels()
    out = [np.zeros((0, CLIP_FRAMES, N_MELS), np.uint8)]
    with torch.no_grad():
        for start in range(0, len(audio), PIXEL_BATCH):
            batch = torch.from_numpy(np.stack(audio[start:start + PIXEL_BATCH]))
            out.append(extractor(batch).round().to(torch.uint8).numpy())
    return np.concatenate(out)


def clip_features(clips: list[Clip], audio: list[np.ndarray]) -> FeatureClips:
    return FeatureClips(audio_pixels(audio), [c.label for c in clips], [c.speaker for c in clips])


def recording_pixels(audio: np.ndarray) -> np.ndarray:
    """A recording of any length (samples,) → its pixel frames (M, N_MELS) uint8: long noise
    for mixing, or a whole phrase (stream training's other phrases)."""
    with torch.no_grad():
        pixels = LogMelPixels()(torch.from_numpy(audio)[None])[0]
    return pixels.round().to(torch.uint8).numpy()


# -- the dataset ----------------------------------------------------------------------------------
class FeatureDataset(torch.utils.data.Dataset):
    """`(pixels (CLIP_FRAMES, N_MELS) uint8, label index)` per example."""

    def __init__(self, clips: FeatureClips, labels):
        index = {label: i for i, label in enumerate(labels)}
        self.pixels = torch.from_numpy(np.ascontiguousarray(clips.pixels))
        self.targets = torch.tensor([index[l] for l in clips.labels], dtype=torch.long)
        self.clips = clips
        self.skipped: list[str] = []

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.pixels[i], int(self.targets[i])

    def class_weights(self, labels, shares: dict[str, float]) -> torch.Tensor:
        """Per-example sampling weights that give each label in `shares` that share of the
        draws, and the other labels the rest in proportion to their counts."""
        counts = torch.bincount(self.targets, minlength=len(labels)).double()
        rest = 1 - sum(s for label, s in shares.items() if counts[labels.index(label)] > 0)
        share = counts / counts[[i for i, l in enumerate(labels) if l not in shares]].sum() * rest
        for label, s in shares.items():
            share[labels.index(label)] = s
        return (share / counts.clamp(min=1))[self.targets]
