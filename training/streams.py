"""Stream training: seconds-long sequences in the feature domain, with a target for every frame.

A clip classifier run on an endless stream hears what it never saw in training: words before
and after, long non-keyword speech, a state carried for minutes. Here each example is a
sequence of `frames` log-mel pixel frames (100 per second) built from the training split:

    gap · clip · gap · clip · …     over one noise bed mixed in as power, at a random SNR
                                    (or, CLEAN_SHARE of them, over digital silence)

where a clip is a keyword, another word (`_unknown_`), a wake-word recording of another phrase
(`_unknown_`: the `alexa` recordings; never `snowboy`, which evaluates `rotkws enroll`) or a
noise slice (`_silence_`). The targets ask for the keyword only once it has been said:

    keyword clip:   its speech → no target · KEYWORD_FRAMES after its end → the keyword ·
                    SETTLE_FRAMES → no target (the pooled state lets go)
    other speech:   from its start to UNKNOWN_TAIL_FRAMES after its end → `_unknown_`
    everything else (gaps, noise slices, silence inside clips) → `_silence_`

The first SETTLE_FRAMES of a sequence have no target either: training carries each row's
state from one batch to the next (training/module.py), so they may follow a keyword.

Peak loss (`peak_loss`, weight optim.peak_loss): a detector fires on the peak of a keyword's
smoothed probability, so the frame targets' mean cross-entropy is not what decides a miss or a
false accept: one confident frame in a minute of other speech is. This term asks for what the
detector reads: for each keyword said, the log of its best smoothed probability inside its
target window (a max-pooling loss, Sun et al. 2016), and for each row and keyword, the log of
one minus that keyword's best smoothed probability over every frame that targets something
else (its worst false accept). Smoothing is the detector's: the mean of the probabilities
PEAK_HOPS hops apart (app/detection.py).

Hard examples: `hard_weights` scores every `_unknown_` clip and every keyword clip with the
model being fine-tuned and draws the ones it mistakes for a keyword (for another keyword) more
often: weight 1 + HARD_NEGATIVE_GAIN × the best probability it gives a keyword the clip is not.
On a stream most false accepts are one keyword heard as another (on → off, down → go), so the
keyword clips near another keyword are the hard negatives of that other keyword.
"""
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from app.detection import SMOOTHING_HOPS
from app.spotter import HOP_SECONDS

from model.logmel import FRAME_RATE, pixels_from_power, power_from_pixels

from .augment import gain_pixels

IGNORE = -100                  # frames without a target (cross_entropy's ignore_index)
KEYWORD_FRAMES = 100           # the keyword's target: 1 s from the end of its speech (the
                               # refractory period: one detection; and a 1 s clip read from
                               # silence ends inside it, as `rotkws eval` scores clips)
SETTLE_FRAMES = 50             # then 0.5 s without a target; also a sequence's first frames
UNKNOWN_TAIL_FRAMES = 100      # other speech stays `_unknown_` this long after its end
GAP_SECONDS = (0.05, 1.2)      # silence between clips, uniform
SEGMENT_SHARES = {"keyword": 0.4, "other": 0.3, "wake": 0.1, "noise": 0.2}   # what each clip is
SNR_DB = (0.0, 25.0)           # speech-to-noise ratio of a sequence's noise bed, uniform
CLEAN_SHARE = 0.2              # sequences with no noise bed: the clips between digital silence, as
                               # a file or a quiet microphone gives them (the demo's path)
CLIP_GAIN_DB = 10.0            # each clip's level, uniform in ±this
HARD_NEGATIVE_GAIN = 4.0       # draw weight of a clip: 1 + this × its best wrong keyword's probability
SPEECH_FLOOR = 0.4             # speech frames: band mean above lo + this × (peak − lo) …
SPEECH_RANGE = 40.0            # … and within this many pixels of the peak frame (≈ 18 dB)
PEAK_HOPS = SMOOTHING_HOPS    # peak_loss smooths as the detector does: this many hops …
HOP_FRAMES = round(HOP_SECONDS * FRAME_RATE)   # … this many frames apart
VIRTUAL_EXAMPLES = 10_000_000  # indices a sampler draws from: every draw a fresh sequence


def speech_span(pixels: np.ndarray) -> tuple[int, int]:
    """(first, last + 1) frame of the speech in a clip's (T, F) pixels, from the band means: the
    frames well above the clip's floor and near its loudest frame."""
    energy = pixels.astype(np.float32).mean(1)
    lo, hi = np.percentile(energy, 10), energy.max()
    loud = np.flatnonzero(energy >= max(lo + SPEECH_FLOOR * (hi - lo), hi - SPEECH_RANGE))
    return int(loud[0]), int(loud[-1]) + 1


@dataclass
class StreamPool:
    """What sequences are made of: pixels (N, T, F) of 1 s clips with label indices, variable
    length wake-word recordings ((T_i, F) each) and a long run of noise frames (M, F)."""

    keywords: np.ndarray            # (K, T, F) uint8, keyword clips
    keyword_labels: np.ndarray      # (K,) label index
    others: np.ndarray              # (U, T, F) uint8, `_unknown_` words
    noise_clips: np.ndarray         # (S, T, F) uint8, `_silence_` slices
    wake: list                      # [(T_i, F) uint8], other phrases (`_unknown_`)
    noise: np.ndarray               # (M, F) uint8, noise frames for the bed
    unknown: int                    # label index of `_unknown_`
    silence: int                    # label index of `_silence_`
    other_weights: np.ndarray | None = None     # (U,) draw weights of `others` (hard negatives)
    keyword_weights: np.ndarray | None = None   # (K,) draw weights of `keywords` (hard_weights)


@dataclass(frozen=True)
class Placed:
    """Where a clip went in a sequence (frames): its kind, label index, start, and its speech."""
    kind: str
    label: int
    start: int
    speech_start: int
    speech_end: int


def build_sequence(pool: StreamPool, frames: int, rng: np.random.Generator,
                   placed: list | None = None, snr_db: tuple[float, float] = SNR_DB,
                   clean_share: float = CLEAN_SHARE) -> tuple[np.ndarray, np.ndarray]:
    """One training sequence: (pixels (frames, F) float32, targets (frames,) int64); `placed`,
    when given, receives a Placed per clip. The noise bed: at an SNR uniform in `snr_db`, on all
    but `clean_share` of the sequences."""
    F = pool.noise.shape[1]
    pixels = np.zeros((frames, F), np.float32)
    targets = np.full(frames, pool.silence, np.int64)
    speech = np.zeros(frames, bool)
    kinds, shares = zip(*SEGMENT_SHARES.items())
    t = int(rng.uniform(*GAP_SECONDS) * FRAME_RATE)
    while t < frames:
        kind = kinds[rng.choice(len(kinds), p=np.array(shares) / sum(shares))]
        clip, label = _draw(pool, kind, rng)
        n = min(len(clip), frames - t)
        db = torch.tensor([rng.uniform(-CLIP_GAIN_DB, CLIP_GAIN_DB)], dtype=torch.float32)
        pixels[t:t + n] = gain_pixels(torch.from_numpy(clip[None, :n].astype(np.float32)), db)[0].numpy()
        start, end = speech_span(clip) if kind != "noise" else (0, 0)
        if kind == "keyword":
            targets[t:t + end] = IGNORE
            targets[t + end:t + end + KEYWORD_FRAMES] = label
            targets[t + end + KEYWORD_FRAMES:t + end + KEYWORD_FRAMES + SETTLE_FRAMES] = IGNORE
            after = end + KEYWORD_FRAMES + SETTLE_FRAMES          # the next clip starts after this
        elif kind in ("other", "wake"):
            targets[t + start:t + end + UNKNOWN_TAIL_FRAMES] = pool.unknown
            after = end + UNKNOWN_TAIL_FRAMES
        else:
            after = len(clip)
        if kind != "noise":
            speech[t + start:t + end] = True
        if placed is not None:
            placed.append(Placed(kind, label, t, t + start, t + end))
        t += max(len(clip), after) + int(rng.uniform(*GAP_SECONDS) * FRAME_RATE)
    targets[:SETTLE_FRAMES] = IGNORE
    if rng.uniform() < clean_share:
        return pixels, targets
    # one noise bed under the whole sequence, at an SNR against the speech frames' mean power
    start = int(rng.integers(0, len(pool.noise) - frames))
    bed = power_from_pixels(torch.from_numpy(pool.noise[start:start + frames].astype(np.float32)))
    power = power_from_pixels(torch.from_numpy(pixels))
    speech_power = power[torch.from_numpy(speech)].mean() if speech.any() else power.mean()
    power = power + bed * (speech_power / bed.mean() / 10 ** (rng.uniform(*snr_db) / 10))
    return pixels_from_power(power).clamp(min=0).numpy(), targets


def _draw(pool: StreamPool, kind: str, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    if kind == "keyword":
        i = _pick(len(pool.keywords), pool.keyword_weights, rng)
        return pool.keywords[i], int(pool.keyword_labels[i])
    if kind == "other":
        return pool.others[_pick(len(pool.others), pool.other_weights, rng)], pool.unknown
    if kind == "wake" and pool.wake:
        return pool.wake[int(rng.integers(len(pool.wake)))], pool.unknown
    return pool.noise_clips[int(rng.integers(len(pool.noise_clips)))], pool.silence


def _pick(n: int, weights: np.ndarray | None, rng: np.random.Generator) -> int:
    if weights is None:
        return int(rng.integers(n))
    return int(rng.choice(n, p=weights / weights.sum()))


class StreamDataset(torch.utils.data.Dataset):
    """Index i → a fresh sequence seeded by (seed, i): `(pixels (frames, F), targets (frames,))`.
    Drawn with a RandomSampler over VIRTUAL_EXAMPLES indices, every epoch sees new sequences."""

    def __init__(self, pool: StreamPool, frames: int, seed: int = 0,
                 snr_db: tuple[float, float] = SNR_DB, clean_share: float = CLEAN_SHARE):
        if len(snr_db) != 2 or not snr_db[0] <= snr_db[1] or not 0.0 <= clean_share <= 1.0:
            raise ValueError(f"expected an SNR range [low, high] in dB with low ≤ high and a clean share "
                             f"in [0, 1], got {list(snr_db)} and {clean_share}")
        self.pool, self.frames, self.seed = pool, frames, seed
        self.snr_db, self.clean_share = (float(snr_db[0]), float(snr_db[1])), clean_share

    def __len__(self) -> int:
        return VIRTUAL_EXAMPLES

    def __getitem__(self, i: int):
        pixels, targets = build_sequence(self.pool, self.frames, np.random.default_rng([self.seed, i]),
                                         snr_db=self.snr_db, clean_share=self.clean_share)
        return torch.from_numpy(pixels), torch.from_numpy(targets)


@torch.no_grad()
def hard_weights(net, pixels: np.ndarray, keyword_columns: list[int], own: np.ndarray | None = None,
                 batch: int = 512) -> np.ndarray:
    """Draw weights of clips (N, T, F): 1 + HARD_NEGATIVE_GAIN × the best probability `net` gives
    a keyword column other than the clip's own label index (`own`, (N,); None: every keyword
    column counts, as for `_unknown_` clips), each clip read from silence and scored at its end."""
    was = net.training
    net.eval()
    columns = torch.tensor(keyword_columns)
    best = []
    for s in range(0, len(pixels), batch):
        logits, _ = net.forward_features(torch.from_numpy(pixels[s:s + batch].astype(np.float32)))
        probs = logits.softmax(-1)
        if own is not None:                                   # a clip's own keyword is no mistake
            probs[torch.arange(len(probs)), torch.from_numpy(own[s:s + batch]).long()] = 0.0
        best.append(probs[:, columns].max(-1).values.numpy())
    net.train(was)
    return 1 + HARD_NEGATIVE_GAIN * np.concatenate(best)


def smoothed_probabilities(logits: Tensor, hops: int = PEAK_HOPS, hop_frames: int = HOP_FRAMES) -> Tensor:
    """(B, T, C) logits → (B, T, C): frame t's probabilities averaged with those `hop_frames`,
    2·`hop_frames`, … earlier (`hops` rows in all, fewer at a sequence's start), as the
    detector averages the rows of consecutive hops."""
    p = logits.softmax(-1)
    total, count = p.clone(), torch.ones(p.shape[1], device=p.device, dtype=p.dtype)
    for k in range(1, hops):
        lag = k * hop_frames
        if lag >= p.shape[1]:
            break
        total[:, lag:] = total[:, lag:] + p[:, :-lag]
        count[lag:] += 1
    return total / count[None, :, None]


def peak_loss(logits: Tensor, targets: Tensor, keyword_columns: list[int]) -> tuple[Tensor, Tensor]:
    """(hit, false) losses per row, summed and divided by the rows B, of (B, T, C) logits against
    (B, T) frame targets (IGNORE: none). hit: −log of each keyword window's best smoothed
    probability of its keyword (a window: a run of frames targeting one keyword); false:
    −log(1 − p) with p each row's best smoothed probability of each keyword over the frames that
    target anything else (IGNORE frames excluded), over the keywords of `keyword_columns`."""
    B, T, _ = logits.shape
    s = smoothed_probabilities(logits).clamp(1e-6, 1 - 1e-6)
    columns = torch.tensor(keyword_columns, device=logits.device)
    is_keyword = (targets[..., None] == columns).any(-1)                      # (B, T)
    # hit: runs of one keyword target, each scored by its best frame
    change = torch.ones_like(targets, dtype=torch.bool)
    change[:, 1:] = targets[:, 1:] != targets[:, :-1]
    run = (change.reshape(-1).long().cumsum(0) - 1).reshape(B, T)             # run id, global
    own = s.gather(-1, targets.clamp(min=0)[..., None])[..., 0].log()        # log p of the target
    best = torch.full((B * T,), -torch.inf, device=logits.device, dtype=own.dtype)
    best = best.scatter_reduce(0, run[is_keyword], own[is_keyword], "amax")
    hit = -best[torch.isfinite(best)].sum() / B
    # false: each keyword's worst frame among those targeting another class
    elsewhere = (targets[..., None] != columns) & (targets != IGNORE)[..., None]   # (B, T, K)
    worst = s[..., columns].masked_fill(~elsewhere, 0.0).amax(1)                # (B, K)
    false = -torch.log1p(-worst).sum() / B
    return hit, false
