"""Clips for training: Speech Commands folders (local or the full download), split by the
official lists or by speaker, balanced for the keyword-spotting protocol, as 1 s tensors.

Every example is `(audio: (clip_samples,) float32 in [−1, 1] @ sample_rate, label index)`.
"""
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import lightning as L
from lightning.pytorch.utilities import CombinedLoader
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, WeightedRandomSampler

from corpus.clips import (AUDIO_SUFFIXES, SILENCE, UNKNOWN, Clip, ClipError, fit_length, folder_label,
                       read_audio)
from corpus.folders import KEYWORD_FOLDER, NOISE_FOLDER, default_data_root
from corpus.splits import SPLITS, folder_splits, speaker_split
from corpus.rate import SAMPLE_RATE
from model.logmel import FRAME_RATE

from .features import FeatureClips, FeatureDataset, clip_features, image_splits, recording_pixels, speech_splits
from .streams import CLEAN_SHARE as STREAM_CLEAN_SHARE, SNR_DB as STREAM_SNR_DB, StreamDataset, StreamPool
from corpus.labels import task_labels

SC_FOLDER = "SpeechCommands"          # torchaudio's folder_in_archive
SC_VERSION = "speech_commands_v0.02"  # torchaudio's url for the full dataset
SOURCE_KINDS = ("folder", "speech_commands", "images", "speech")


@dataclass
class Source:
    path: str                 # a folder, relative to the data root unless absolute
    kind: str = "folder"      # "folder": Speech Commands layout on disk; "speech_commands": the
                              # full v0.02 through torchaudio (path holds SpeechCommands/);
                              # "images": a zip of log-mel images (training/features.py), for
                              # networks with the logmel front-end only; "speech": continuous
                              # speech (english_speech_dev) cut into 1 s `_unknown_` clips, the
                              # same (training/features.py: speech_splits)
    download: bool = False    # speech_commands only: fetch the 2.3 GB archive in prepare_data

    def __post_init__(self):
        if self.kind not in SOURCE_KINDS:
            raise ValueError(f"data source kind must be one of {', '.join(SOURCE_KINDS)}, got {self.kind!r}")


@dataclass
class DataConfig:
    task: str = "kws12"                  # kws12 or sc35 (corpus/labels.py): the label list
    root: str | None = None              # folder the sources are relative to; None: $ROTKWS_DATA
    sources: list = field(default_factory=lambda: [{"path": KEYWORD_FOLDER}])
    noise: str | None = NOISE_FOLDER   # long noise files, relative to root
    batch_size: int = 64
    num_workers: int = 0                 # DataLoader workers (0: load in the training process)
    unknown_share: float = 0.1           # kws12: share of _unknown_ examples (subsampled to it)
    silence_share: float = 0.1           # kws12: share of _silence_, filled with noise cuts
                                         # (features: the shares of the weighted draws)
    seed: int = 0                        # the unknown subsample and the silence cuts
    stream_seconds: float = 0.0          # > 0: train on sequences this long with a target per
                                         # frame (training/streams.py; logmel networks only)
    stream_examples: int = 8192          # sequences per training epoch
    stream_clip_batch: int = 0           # streams: also this many 1 s clips per step (their
                                         # loss added), so the clip accuracy holds
    wake_words: str | None = None        # streams: recordings of other phrases, as `_unknown_`
                                         # (those whose file name splits as a training speaker)
    stream_snr_db: list = field(default_factory=lambda: list(STREAM_SNR_DB))   # streams: the noise
                                         # bed's SNR range (dB against the speech frames' mean power)
    stream_clean_share: float = STREAM_CLEAN_SHARE   # streams: the share with no noise bed

    def root_path(self) -> Path:
        return Path(self.root).expanduser().resolve() if self.root else default_data_root()

    def source_list(self) -> list[Source]:
        out = []
        for s in self.sources:
            s = {"path": s} if isinstance(s, str) else dict(s)
            try:
                out.append(Source(**s))
            except TypeError as e:
                raise ValueError(f"data.sources: {e} (expected keys path, kind, download)") from None
        return out

    def resolve(self, path: str) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else self.root_path() / p


# -- one clip ---------------------------------------------------------------------------------
class SampleRateError(ClipError):
    """A clip at another rate than the model's: an error, never skipped (the whole folder is)."""


def load_clip(path, sample_rate: int, samples: int) -> np.ndarray:
    """(samples,) float32; a clip at another rate raises SampleRateError naming the file."""
    x, rate = read_audio(path)
    if rate != sample_rate:
        raise SampleRateError(f"{path}: sample rate {rate} Hz, expected {sample_rate} Hz "
                        f"(resample the folder first, e.g. with sox or soxr)")
    return fit_length(x, samples)


def read_clips(clips: list[Clip], sample_rate: int,
               samples: int) -> tuple[list[Clip], list[np.ndarray], list[str]]:
    """The clips that read, their audio, and the paths of the corrupt ones (skipped, warned)."""
    kept, audio, skipped = [], [], []
    for clip in clips:
        try:
            audio.append(load_clip(clip.path, sample_rate, samples))
        except SampleRateError:
            raise
        except ClipError as e:
            warnings.warn(f"skipping a corrupt clip: {e}", stacklevel=2)
            skipped.append(str(clip.path))
            continue
        kept.append(clip)
    return kept, audio, skipped


def read_clips_any_length(paths: list[Path], sample_rate: int) -> tuple[list[Path], list[np.ndarray], list[str]]:
    """Whole recordings at `sample_rate` (wake-word phrases): those that read, their audio, and
    the paths of the corrupt or other-rate ones (skipped, warned)."""
    kept, audio, skipped = [], [], []
    for path in paths:
        try:
            x, rate = read_audio(path)
            if rate != sample_rate:
                raise ClipError(f"{path}: sample rate {rate} Hz, expected {sample_rate} Hz")
        except ClipError as e:
            warnings.warn(f"skipping a recording: {e}", stacklevel=2)
            skipped.append(str(path))
            continue
        kept.append(path)
        audio.append(x)
    return kept, audio, skipped


def read_noise(folder: Path, sample_rate: int) -> np.ndarray:
    """All noise files of a folder at `sample_rate`, concatenated: (samples,) float32."""
    if not folder.is_dir():
        raise ClipError(f"noise folder {folder} does not exist (expected long noise recordings, "
                        f"e.g. Speech Commands' _background_noise_)")
    paths = [p for p in sorted(folder.iterdir()) if p.suffix.lower() in AUDIO_SUFFIXES]
    if not paths:
        raise ClipError(f"no audio files in the noise folder {folder}")
    parts = []
    for path in paths:
        x, rate = read_audio(path)
        if rate != sample_rate:
            raise ClipError(f"{path}: noise at {rate} Hz, expected {sample_rate} Hz")
        parts.append(x)
    return np.concatenate(parts).astype(np.float32)


def speech_commands_splits(root: Path, labels, download: bool = False) -> dict[str, list[Clip]]:
    """The full dataset through torchaudio with the official lists (no download here)."""
    from torchaudio.datasets import SPEECHCOMMANDS
    out = {}
    for split in SPLITS:
        try:
            ds = SPEECHCOMMANDS(str(root), url=SC_VERSION, folder_in_archive=SC_FOLDER,
                                download=download, subset=split)
        except RuntimeError as e:
            raise ClipError(f"Speech Commands not found under {root}: {e}") from None
        out[split] = []
        for n in range(len(ds)):
            relpath, _, word, speaker, _ = ds.get_metadata(n)
            path = root / SC_FOLDER / relpath
            label = folder_label(word, path.name, labels)
            if label is not None:
                out[split].append(Clip(path, label, speaker))
    return out


def balance(clips: list[Clip], labels, unknown_share: float, silence_share: float,
            seed: int) -> tuple[list[Clip], int]:
    """Subsample _unknown_ to its share; return the clips and how many noise cuts of silence
    bring _silence_ to its share (kws12). Tasks without those labels pass through."""
    rng = np.random.default_rng(seed)
    words = [c for c in clips if c.label not in (UNKNOWN, SILENCE)]
    unknown = [c for c in clips if c.label == UNKNOWN]
    silence = [c for c in clips if c.label == SILENCE]
    rest = max(1e-9, 1 - unknown_share - silence_share)
    n_unknown = int(round(len(words) * unknown_share / rest))
    if UNKNOWN in labels and len(unknown) > n_unknown:
        unknown = [unknown[i] for i in sorted(rng.choice(len(unknown), n_unknown, replace=False))]
    n_silence = int(round(len(words) * silence_share / rest)) if SILENCE in labels else 0
    return words + unknown + silence, max(0, n_silence - len(silence))


# -- datasets ---------------------------------------------------------------------------------
class ClipDataset(Dataset):
    """Clips (read ahead of time when `preload`, else on demand) plus `n_silence` 1 s noise cuts.

    Corrupt clips met while preloading are skipped with a warning and counted in `skipped`.
    """

    def __init__(self, clips: list[Clip], labels, sample_rate: int, samples: int,
                 preload: bool = True, noise: np.ndarray | None = None, n_silence: int = 0,
                 seed: int = 0):
        self.index = {label: i for i, label in enumerate(labels)}
        self.sample_rate, self.samples, self.noise, self.seed = sample_rate, samples, noise, seed
        self.skipped: list[str] = []
        self.audio: list[np.ndarray] | None = None
        self.clips = clips
        if preload:
            self.clips, self.audio = self._preload(clips)
        self.n_silence = n_silence if noise is not None and len(noise) > samples else 0

    def _preload(self, clips):
        kept, audio, self.skipped = read_clips(clips, self.sample_rate, self.samples)
        return kept, [(x * 32767).round().astype(np.int16) for x in audio]   # half of float32

    def __len__(self) -> int:
        return len(self.clips) + self.n_silence

    def label_of(self, i: int) -> int:
        return self.index[self.clips[i].label] if i < len(self.clips) else self.index[SILENCE]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if i >= len(self.clips):
            return torch.from_numpy(self._silence(i - len(self.clips))), self.index[SILENCE]
        if self.audio is not None:
            x = self.audio[i].astype(np.float32) / 32767
        else:
            x = load_clip(self.clips[i].path, self.sample_rate, self.samples)
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), self.label_of(i)

    def _silence(self, k: int) -> np.ndarray:
        """The k-th noise cut: a fixed random 1 s of the noise at a random volume in [0, 1)."""
        rng = np.random.default_rng([self.seed, k])
        start = int(rng.integers(0, len(self.noise) - self.samples))
        return (self.noise[start:start + self.samples] * rng.random()).astype(np.float32)


class KWSDataModule(L.LightningDataModule):
    """prepare_data downloads (full Speech Commands only, when asked); setup reads and splits.

    `features=False`: examples are 1 s of audio (ClipDataset), `noise` a flat recording.
    `features=True` (networks with the logmel front-end): every source becomes log-mel pixels
    (FeatureDataset): image zips as they are, audio clips through the same front-end; `noise`
    is then (M, N_MELS) pixel frames of the noise recordings and of the training noise images,
    and training draws the classes in the shares of DataConfig (unknown_share, silence_share).
    """

    def __init__(self, data: DataConfig, sample_rate: int = SAMPLE_RATE, features: bool = False):
        super().__init__()
        self.cfg, self.sample_rate, self.features = data, sample_rate, features
        self.labels = task_labels(data.task)
        self.samples = sample_rate                          # one second per clip
        self.sets: dict[str, ClipDataset | FeatureDataset] = {}
        self.noise: np.ndarray | None = None
        self.described: list[dict] = []
        self.corrupt_images = 0
        self._skipped_audio: list[str] = []
        self.streams: StreamDataset | None = None          # stream training (cfg.stream_seconds)

    def prepare_data(self):
        for src in self.cfg.source_list():
            if src.kind == "speech_commands" and src.download:
                speech_commands_splits(self.cfg.resolve(src.path), self.labels, download=True)

    def setup(self, stage: str | None = None):
        if self.sets:
            return                                          # once, however often Lightning asks
        self._check_root()
        self.noise = (read_noise(self.cfg.resolve(self.cfg.noise), self.sample_rate)
                      if self.cfg.noise else None)
        if self.features:
            return self._setup_features()
        if any(s.kind in ("images", "speech") for s in self.cfg.source_list()):
            raise ClipError("log-mel image and speech sources need a network with the logmel front-end "
                            "(model.frontend: logmel)")
        if self.cfg.stream_seconds > 0:
            raise ClipError("stream training (data.stream_seconds > 0) needs a network with the "
                            "logmel front-end (model.frontend: logmel)")
        splits = {s: [] for s in SPLITS}
        for src in self.cfg.source_list():
            found = self._source_splits(src)
            self.described.append(asdict(src) | {s: len(c) for s, c in found.items()})
            for s in SPLITS:
                splits[s] += found[s]
        if not splits["training"]:
            raise ClipError(f"no training clips in {[s['path'] for s in self.described]}")
        self.sets = {s: self._dataset(s, c) for s, c in splits.items()}
        skipped = sum(len(d.skipped) for d in self.sets.values())
        if skipped:
            warnings.warn(f"skipped {skipped} corrupt clip(s) of {sum(map(len, splits.values()))}",
                          stacklevel=2)

    def _setup_features(self):
        splits = {s: [] for s in SPLITS}
        for src in self.cfg.source_list():
            if src.kind == "images":
                found, corrupt = image_splits(self.cfg.resolve(src.path), self.labels)
                self.corrupt_images += corrupt
            elif src.kind == "speech":
                found = speech_splits(self.cfg.resolve(src.path), self.labels)
            else:
                found = {}
                for split, clips in self._source_splits(src).items():
                    kept, audio, skipped = read_clips(clips, self.sample_rate, self.samples)
                    self._skipped_audio += skipped
                    found[split] = clip_features(kept, audio)
            self.described.append(asdict(src) | {s: len(c) for s, c in found.items()})
            for s in SPLITS:
                splits[s].append(found[s])
        merged = {s: FeatureClips.concat(parts) for s, parts in splits.items()}
        if not len(merged["training"]):
            raise ClipError(f"no training clips in {[s['path'] for s in self.described]}")
        self.sets = {s: FeatureDataset(c, self.labels) for s, c in merged.items()}
        self.noise = self._noise_pixels(merged["training"])
        if self.cfg.stream_seconds > 0:
            self.streams = StreamDataset(self._stream_pool(merged["training"]),
                                         round(self.cfg.stream_seconds * FRAME_RATE), self.cfg.seed,
                                         self.cfg.stream_snr_db, self.cfg.stream_clean_share)

    def _stream_pool(self, training: FeatureClips) -> StreamPool:
        labels = np.array(training.labels)
        keyword = ~np.isin(labels, [UNKNOWN, SILENCE])
        wake = []
        if self.cfg.wake_words:
            folder = self.cfg.resolve(self.cfg.wake_words)
            paths = sorted(p for p in folder.glob("*") if p.suffix.lower() in AUDIO_SUFFIXES
                           and speaker_split(p.stem) == "training")   # held-out ones: stream tests
            if not paths:
                raise ClipError(f"no training-split audio files in the wake-word folder {folder}")
            _, audio, skipped = read_clips_any_length(paths, self.sample_rate)
            self._skipped_audio += skipped
            wake = [recording_pixels(x) for x in audio if len(x) >= self.sample_rate // 2]
        if self.noise is None or not (labels == SILENCE).any() or not (labels == UNKNOWN).any():
            raise ClipError("stream training needs noise, `_silence_` and `_unknown_` examples")
        return StreamPool(training.pixels[keyword],
                          np.array([self.labels.index(l) for l in labels[keyword]]),
                          training.pixels[labels == UNKNOWN], training.pixels[labels == SILENCE],
                          wake, self.noise, self.labels.index(UNKNOWN), self.labels.index(SILENCE))

    def _noise_pixels(self, training: FeatureClips) -> np.ndarray | None:
        """Pixel frames to mix in: the noise recordings' and the training noise images'."""
        parts = [] if self.noise is None else [recording_pixels(self.noise)]
        if SILENCE in self.labels:
            silent = training.select(np.array(training.labels) == SILENCE).pixels
            parts.append(silent.reshape(-1, silent.shape[-1]))
        parts = [p for p in parts if len(p)]
        return np.concatenate(parts) if parts else None

    def _check_root(self):
        relative = [s.path for s in self.cfg.source_list()] + [self.cfg.noise or "/"]
        if not self.cfg.root_path().is_dir() and any(not Path(p).is_absolute() for p in relative):
            raise ClipError(f"data root {self.cfg.root_path()} does not exist (set data.root or "
                            f"$ROTKWS_DATA to the folder holding the data sources)")

    def _source_splits(self, src: Source) -> dict[str, list[Clip]]:
        path = self.cfg.resolve(src.path)
        if src.kind == "speech_commands":
            return speech_commands_splits(path, self.labels)
        return folder_splits(path, self.labels)

    def _dataset(self, split: str, clips: list[Clip]) -> ClipDataset:
        seed = self.cfg.seed + SPLITS.index(split)
        clips, n_silence = balance(clips, self.labels, self.cfg.unknown_share,
                                   self.cfg.silence_share, seed)
        has_silence = any(c.label == SILENCE for c in clips)
        if split != "training" and has_silence:
            n_silence = 0                                   # held-out splits keep their own
        preload = all(s.kind == "folder" for s in self.cfg.source_list())
        return ClipDataset(clips, self.labels, self.sample_rate, self.samples, preload,
                           self.noise, n_silence, seed)

    @property
    def skipped(self) -> list[str]:
        return [p for d in self.sets.values() for p in d.skipped] + self._skipped_audio

    def _loader(self, split: str, shuffle: bool, batch_size: int | None = None) -> DataLoader:
        data, sampler = self.sets[split], None
        if shuffle and self.features:                      # the class mix of DataConfig's shares
            shares = {UNKNOWN: self.cfg.unknown_share, SILENCE: self.cfg.silence_share}
            weights = data.class_weights(self.labels, {k: v for k, v in shares.items() if k in self.labels})
            sampler = WeightedRandomSampler(weights, len(data), replacement=True,
                                            generator=torch.Generator().manual_seed(self.cfg.seed))
        return DataLoader(data, batch_size=batch_size or self.cfg.batch_size, shuffle=shuffle and sampler is None,
                          sampler=sampler, num_workers=self.cfg.num_workers, drop_last=shuffle,
                          persistent_workers=self.cfg.num_workers > 0)

    def train_dataloader(self):
        if self.cfg.stream_seconds > 0:
            sampler = RandomSampler(self.streams, replacement=True, num_samples=self.cfg.stream_examples,
                                    generator=torch.Generator().manual_seed(self.cfg.seed))
            streams = DataLoader(self.streams, batch_size=self.cfg.batch_size, sampler=sampler,
                                 num_workers=self.cfg.num_workers, drop_last=True,
                                 persistent_workers=self.cfg.num_workers > 0)
            if self.cfg.stream_clip_batch <= 0:
                return streams
            clips = self._loader("training", True, self.cfg.stream_clip_batch)
            return CombinedLoader({"streams": streams, "clips": clips}, mode="min_size")
        return self._loader("training", True)

    def val_dataloader(self):
        return self._loader("validation", False)

    def test_dataloader(self):
        return self._loader("testing", False)
