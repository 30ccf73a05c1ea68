"""`rotkws enroll TEXT -o MODEL.onnx`: a keyword spotter for your own phrase, from text alone.

1. The phrase is checked (training/tts.py: not empty, something to say, short) and spoken by
   espeak-ng, flite and festival in many voices, rates, pitches and volumes (the positives),
   with the same engines saying other words and pieces of the phrase ("snow", "boy").
2. Real negatives: Speech Commands words (the log-mel image corpus, and the v0.01 sample WAVs
   of speakers not in the test folder), the even-numbered `alexa` recordings of the wake-word
   folder, and background noise. Never a recording of the phrase, never the `snowboy` folder
   (the evaluation set of benchmarks/enroll.py), never the Speech Commands test folder.
3. Every example is 3 s of log-mel pixels: an optional other word before, the item, room
   reverberation (synthetic speech), background noise at 0–25 dB SNR. Frame labels: the phrase
   from its last 50 ms to 0.5 s after it ends; `_other_` before it and on every negative; the
   rest is not scored.
4. The default checkpoint's front-end and lower blocks stay frozen (their output is computed
   once); its top block, final norm and a new two-class head train for a few minutes.
5. The network (labels: the phrase, `_other_`) exports through export/ as the same streaming
   ONNX file `rotkws export` writes, with a detection threshold in its metadata: the lowest
   that none of the held-out real negatives, each heard alone over noise at 5–20 dB SNR, reaches.
"""
import argparse
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from app.detection import SMOOTHING_HOPS
from app.spotter import OTHER
from corpus.clips import ClipError, read_audio, speaker_of
from model.classifiers import load_checkpoint
from model.logmel import CLIP_FRAMES, FRAME, FRAME_RATE, N_MELS, LogMelPixels, power_from_pixels
from model.network import RotRNNClassifier, RotRNNConfig
from training.augment import mix_pixels
from training.features import decode_zip
from training.paths import REPO, default_data_root
from training.streams import HOP_FRAMES, IGNORE   # frames per hop; frame targets that are not scored

from . import tts
from .tts import SAMPLE_RATE, PhraseError

DEFAULT_CHECKPOINT = REPO / "training" / "checkpoints" / "kws12.ckpt"
IMAGE_ZIP = "speech_commands_v0.02_logmel/speech_commands_v0.02_logmel_train.zip"
SAMPLE_FOLDER = "speech_commands_v0.01_sample"
TEST_FOLDER = "speech_commands_v0.02_test_dev"    # its speakers are never trained on here
WAKEWORD_FOLDER = "wakeword_benchmark_dev"
NEGATIVE_WAKEWORDS = ("alexa",)                   # never "snowboy": benchmarks/enroll.py's test set
NOISE_FOLDER = "speech_commands_background_noise"
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
EXAMPLE_S = 3.0              # seconds of pixels per example
POSITIVE_BEFORE_END_S = 0.05 # the phrase label starts this long before the phrase ends …
POSITIVE_AFTER_END_S = 0.5   # … and lasts this long after (the model's pooling time constant)
SNR_DB = (0.0, 25.0)         # background noise under each example
CALIBRATION_SNR_DB = (5.0, 20.0)   # … under the negatives that set the threshold: the range of the
                             # streams false accepts per hour are measured on (benchmarks/stream.py)
NOISE_ONLY_DB = (-30.0, 6.0)  # noise-only examples: the recordings' level changed by this
CLEAN_SHARE = 0.1            # examples with no added noise
CONTEXT_SHARE = 0.5          # examples with another word before the item
REVERB_SHARE = 0.6           # synthetic clips played in a simulated room
RT60_S = (0.1, 0.6)          # the room's reverberation time
SPEED = (0.9, 1.1)           # synthetic clips resampled by this factor (tempo and pitch)
GAIN_DB = (-12.0, 6.0)       # level of the item relative to its normalised peak
PHRASE_CLASS, OTHER_CLASS = 0, 1   # the label order: (phrase, OTHER)
PHRASE, SYNTHETIC, REAL = 0, 1, 2   # kinds of example, for the threshold
VALIDATION_SHARE = 0.1       # examples held out to choose the threshold
FALSE_ACCEPT_SHARE = 0.002   # threshold: at most this share of the held-out real negatives,
                             # each heard alone, fire (of the ~700 held out by default: none)
MIN_THRESHOLD, MAX_THRESHOLD = 0.5, 0.99


@dataclass
class EnrollConfig:
    positives: int = 2000        # synthetic clips of the phrase
    tts_negatives: int = 1500    # synthetic clips of other words and pieces of the phrase
    images: int = 6000           # Speech Commands log-mel images (other words, noise slices)
    wav_negatives: int = 800     # real recordings of other words (WAV / FLAC)
    noise_negatives: int = 300   # examples of noise alone
    epochs: int = 6
    batch_size: int = 64
    lr: float = 2e-3             # top block, norm and head
    recurrent_lr: float = 1e-3   # the top block's RotRNN weights (B, C, D, γ, θ)
    max_steps: int = 0           # > 0: stop after this many steps (tests)
    seed: int = 0
    threads: int = 1


# -- data -----------------------------------------------------------------------------------------
@dataclass
class Items:
    """Audio items (16 kHz float32) and pixel items (T, N_MELS) to build examples from."""
    positives: list[np.ndarray]
    synthetic: list[np.ndarray]                      # synthetic negatives
    real: list[np.ndarray]                           # real negative recordings
    images: np.ndarray                               # (N, 98, N_MELS) uint8
    noise: np.ndarray                                # (samples,) long background noise
    sources: dict = field(default_factory=dict)      # what came from where, for the metadata


def same_word(name: str, phrase: str) -> bool:
    key = lambda s: re.sub(r"[^a-z0-9]", "", s.lower())
    return key(name) == key(phrase)


def wakeword_training(path: Path) -> bool:
    """Even-numbered wake-word recordings train; odd ones are benchmarks/enroll.py's stream."""
    return int(re.sub(r"\D", "", path.stem) or 0) % 2 == 0


def real_negatives(data: Path, phrase: str, n: int, rng) -> list[np.ndarray]:
    test_speakers = {speaker_of(p.name) for p in (data / TEST_FOLDER).glob("*/*.wav")}
    sample = [p for p in sorted((data / SAMPLE_FOLDER).glob("*/*.wav"))
              if not same_word(p.parent.name, phrase) and speaker_of(p.name) not in test_speakers]
    wake = [p for w in NEGATIVE_WAKEWORDS if not same_word(w, phrase)
            for p in sorted((data / WAKEWORD_FOLDER / w).glob("*")) if wakeword_training(p)]
    paths = sample + wake
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
    pixels, names, _ = decode_zip(data / IMAGE_ZIP)
    keep = np.flatnonzero([not same_word(name.split("/")[-2], phrase) for name in names])
    return pixels[np.sort(rng.choice(keep, min(n, len(keep)), replace=False))]


def noise_audio(data: Path) -> np.ndarray:
    files = sorted((data / NOISE_FOLDER).glob("*.wav"))
    if not files:
        raise ClipError(f"no background noise WAVs in {data / NOISE_FOLDER}")
    return np.concatenate([tts.to_16k(*read_audio(f)) for f in files])


def gather(phrase: str, data: Path, cfg: EnrollConfig, rng, say=tts.synthesize) -> Items:
    """Synthesise the phrase and the synthetic negatives; read the real negatives."""
    others = [w for w in NEGATIVE_WORDS if not same_word(w, phrase)]
    parts = tts.phrase_parts(phrase)
    n_parts = round(PART_SHARE * cfg.tts_negatives) if parts else 0
    with tqdm(total=cfg.positives + cfg.tts_negatives, desc="synthesising", unit="clip",
              file=sys.stderr) as bar:
        pos = say(phrase, cfg.positives, rng, bar.update)
        neg = say(others, cfg.tts_negatives - n_parts, rng, bar.update)
        part = say(parts, n_parts, rng, bar.update) if n_parts else tts.Synthesis([], {})
    if len(pos.clips) < max(1, cfg.positives // 2):
        raise PhraseError(f"the text-to-speech engines said {phrase!r} audibly only "
                          f"{len(pos.clips)} times out of {cfg.positives}")
    real = real_negatives(data, phrase, cfg.wav_negatives, rng)
    images = image_negatives(data, phrase, cfg.images, rng)
    sources = {"positives": pos.engines, "synthetic_negatives": len(neg.clips) + len(part.clips),
               "phrase_pieces": parts, "real_recordings": len(real), "images": len(images),
               "noise_examples": cfg.noise_negatives,
               "folders": [IMAGE_ZIP, SAMPLE_FOLDER, *(f"{WAKEWORD_FOLDER}/{w} (even-numbered)"
                                                       for w in NEGATIVE_WAKEWORDS), NOISE_FOLDER]}
    return Items(pos.clips, neg.clips + part.clips, real, images, noise_audio(data), sources)


# -- examples -------------------------------------------------------------------------------------
def room(audio: np.ndarray, rng) -> np.ndarray:
    """Simple reverberation: convolution with exponentially decaying noise of a random RT60,
    the direct path kept at unit gain."""
    rt60 = rng.uniform(*RT60_S)
    t = np.arange(int(rt60 * SAMPLE_RATE)) / SAMPLE_RATE
    ir = rng.standard_normal(len(t)) * np.exp(-6.9 * t / rt60) * rng.uniform(0.1, 0.4)
    ir[0] = 1.0
    wet = np.convolve(audio, ir)[: len(audio) + len(ir) // 2]
    return (wet / (np.abs(wet).max() + 1e-9) * np.abs(audio).max()).astype(np.float32)


def vary(audio: np.ndarray, rng, reverb: bool) -> np.ndarray:
    """Speed (resampling), room, gain."""
    audio = tts.to_16k(audio, int(SAMPLE_RATE * rng.uniform(*SPEED)))
    if reverb and rng.random() < REVERB_SHARE:
        audio = room(audio, rng)
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


def paste(canvas: np.ndarray, pixels: np.ndarray, at: int) -> None:
    """canvas[at:at + len(pixels)] = pixels, cut to the canvas (at may be negative)."""
    lo, hi = max(0, at), min(len(canvas), at + len(pixels))
    if hi > lo:
        canvas[lo:hi] = pixels[lo - at:hi - at]


def targets(frames: int, at: int, end: int | None) -> np.ndarray:
    """(frames,) class per frame: OTHER_CLASS, or for a positive placed at `at` and ending at
    frame at + end: IGNORE while it is said, PHRASE_CLASS from just before its end, IGNORE later."""
    y = np.full(frames, OTHER_CLASS, np.int64)
    if end is not None:
        e = at + end
        on, off = e - round(POSITIVE_BEFORE_END_S * FRAME_RATE), e + round(POSITIVE_AFTER_END_S * FRAME_RATE)
        y[max(0, at):] = IGNORE
        y[max(0, on):max(0, off)] = PHRASE_CLASS
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
            noise: np.ndarray, rng, snr_db: tuple[float, float] = SNR_DB) -> tuple[np.ndarray, np.ndarray]:
    """(pixels (frames, N_MELS) float32, targets (frames,) int64): `item` pixels placed in the
    example (a positive so that it ends between 1 and 2.3 s), after `context` if given, over
    noise. end: the frame of the item where the phrase ends, None for a negative."""
    canvas = np.zeros((frames, N_MELS), np.float32)
    if end is None:
        at = int(rng.integers(0, max(1, frames - len(item) // 2)))
    else:
        at = int(rng.integers(int(1.0 * FRAME_RATE), int(2.3 * FRAME_RATE))) - end
    if context is not None:
        paste(canvas, context, at - int(rng.integers(10, 60)) - len(context))
    paste(canvas, item, at)
    if rng.random() >= CLEAN_SHARE:
        canvas = add_noise(canvas, item, noise, rng, snr_db)
    return canvas, targets(frames, at, end)


def last_loud_frame(pixels: np.ndarray) -> int:
    """The last frame within 25 dB (in pixels) of the loudest: where the phrase ends."""
    energy = pixels.mean(1)
    return int(np.flatnonzero(energy > energy.max() - 25)[-1]) + 1


def example_kinds(items: Items) -> np.ndarray:
    """(N,) PHRASE, SYNTHETIC or REAL for each example, in the order examples() builds them."""
    n = [len(items.positives), len(items.synthetic),
         len(items.real) + len(items.images) + items.sources["noise_examples"]]
    return np.repeat([PHRASE, SYNTHETIC, REAL], n)


def examples(items: Items, rng, alone: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All examples: (N, frames, N_MELS) float16 pixels and (N, frames) int64 targets; and the
    negatives where `alone` (N,) is True once more, each alone with no word before it, over noise
    at CALIBRATION_SNR_DB, as the streams of benchmarks/ present words: (M, frames, N_MELS) float16."""
    frames = int(EXAMPLE_S * FRAME_RATE)
    render = Renderer(items.noise)
    to_pix = lambda a, reverb: render.pixels(np.pad(vary(a, rng, reverb), (800, 800)))
    pos = [to_pix(a, True) for a in tqdm(items.positives, desc="rendering", unit="clip", file=sys.stderr)]
    neg = ([to_pix(a, True) for a in items.synthetic] + [to_pix(a, False) for a in items.real]
           + [im.astype(np.float32) for im in items.images])
    n_noise = items.sources["noise_examples"]
    neg += [np.zeros((frames, N_MELS), np.float32)] * n_noise
    contexts = neg[: len(neg) - n_noise]
    pick = lambda: contexts[int(rng.integers(len(contexts)))] if rng.random() < CONTEXT_SHARE else None
    out = [example(p, last_loud_frame(p), pick(), frames, render.noise, rng) for p in pos]
    out += [example(n, None, pick(), frames, render.noise, rng) for n in neg]
    x = np.stack([o[0] for o in out]).astype(np.float16)
    y = np.stack([o[1] for o in out])
    single = [example(neg[i - len(pos)], None, None, frames, render.noise, rng, CALIBRATION_SNR_DB)[0]
              for i in np.flatnonzero(alone)]
    return x, y, np.array(single, np.float16).reshape(-1, frames, N_MELS)


# -- the network ----------------------------------------------------------------------------------
def enrolled_network(backbone: RotRNNClassifier, phrase: str) -> RotRNNClassifier:
    """The backbone's weights under a two-class head (phrase, OTHER), freshly initialised."""
    cfg = RotRNNConfig(**(backbone.cfg.to_dict() | {"labels": (phrase, OTHER)}))
    net = RotRNNClassifier(cfg)
    weights = {k: v for k, v in backbone.state_dict().items() if not k.startswith("head.")}
    net.load_state_dict(weights, strict=False)
    return net


def lower(net: RotRNNClassifier, pixels: Tensor) -> Tensor:
    """The frozen part: embed and every block but the last. (B, T, N_MELS) → (B, T, d_model)."""
    h = net.frontend.embed(pixels)
    for block in net.blocks[:-1]:
        h, _ = block(h, None)
    return h


def frame_logits(net: RotRNNClassifier, h: Tensor) -> Tensor:
    """The trained part at every frame: top block, causal EMA pooling, norm, head.
    (B, T, d_model) → (B, T, classes)."""
    y, _ = net.blocks[-1](h, None)
    return net.head(net.norm(net._ema_frames(y, None)))                        # the pooling at every frame


def features(net: RotRNNClassifier, x: np.ndarray, batch: int) -> Tensor:
    out = [torch.zeros(0, x.shape[1], net.cfg.d_model, dtype=torch.half)]
    with torch.no_grad():
        for i in tqdm(range(0, len(x), batch), desc="backbone", unit="batch", file=sys.stderr):
            out.append(lower(net, torch.from_numpy(x[i:i + batch]).float()).half())
    return torch.cat(out)


def loss_fn(logits: Tensor, y: Tensor) -> Tensor:
    """Cross-entropy with the phrase's frames and the others' frames weighted equally."""
    ce = F.cross_entropy(logits.reshape(-1, 2), y.reshape(-1), ignore_index=IGNORE, reduction="none")
    y = y.reshape(-1)
    parts = [ce[y == c].mean() for c in (PHRASE_CLASS, OTHER_CLASS) if (y == c).any()]
    return sum(parts) / len(parts)


def train(net: RotRNNClassifier, h: Tensor, y: Tensor, cfg: EnrollConfig) -> list[float]:
    """Train the top block, norm and head on precomputed lower features h (N, T, d)."""
    top = net.blocks[-1]
    recurrent = top.rnn.recurrent_parameters()
    ids = {id(p) for p in recurrent}
    rest = [p for m in (top, net.norm, net.head) for p in m.parameters() if id(p) not in ids]
    opt = torch.optim.AdamW([{"params": rest, "lr": cfg.lr, "weight_decay": 0.01},
                             {"params": recurrent, "lr": cfg.recurrent_lr, "weight_decay": 0.0}])
    steps = math.ceil(len(h) / cfg.batch_size) * cfg.epochs
    steps = min(steps, cfg.max_steps) if cfg.max_steps > 0 else steps
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, [cfg.lr, cfg.recurrent_lr], total_steps=steps,
                                                pct_start=0.1)
    g = torch.Generator().manual_seed(cfg.seed)
    net.train()
    losses = []
    with tqdm(total=steps, desc="training", unit="step", file=sys.stderr) as bar:
        while len(losses) < steps:
            for idx in torch.randperm(len(h), generator=g).split(cfg.batch_size):
                loss = loss_fn(frame_logits(net, h[idx].float()), y[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                losses.append(loss.item())
                bar.update(1)
                bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
                if len(losses) >= steps:
                    break
    return losses


def hop_scores(net: RotRNNClassifier, h: Tensor, batch: int = 256) -> np.ndarray:
    """The phrase's probability at every 100 ms hop, smoothed as the runtime smooths it: (N, hops)."""
    net.eval()
    step = HOP_FRAMES
    out = [np.zeros((0, h.shape[1] // step))]
    with torch.no_grad():
        for i in range(0, len(h), batch):
            p = frame_logits(net, h[i:i + batch].float()).softmax(-1)[..., PHRASE_CLASS]
            out.append(p[:, step - 1::step].numpy())                           # the end of each hop
    return smooth(np.concatenate(out))


def smooth(hops: np.ndarray) -> np.ndarray:
    """(N, hops) → the mean of each hop and the SMOOTHING_HOPS − 1 before it (zeros before the
    first): the runtime's smoothing once a stream has run that long."""
    padded = np.pad(hops, ((0, 0), (SMOOTHING_HOPS - 1, 0)))
    return sum(padded[:, k:k + hops.shape[1]] for k in range(SMOOTHING_HOPS)) / SMOOTHING_HOPS


def best_runs(scores: np.ndarray) -> np.ndarray:
    """(N, hops) smoothed phrase probabilities → (N,) the highest level held two hops in a row
    (the detector's run): what a threshold must exceed to fire."""
    if scores.shape[1] < 2:
        return np.zeros(len(scores))
    return np.minimum(scores[:, 1:], scores[:, :-1]).max(1)


def choose_threshold(scores: np.ndarray, kind: np.ndarray, alone: np.ndarray) -> dict:
    """The lowest threshold that at most FALSE_ACCEPT_SHARE of the held-out real negatives, each
    heard alone (`alone`: (M, hops), no word before it, as the streams of benchmarks/ and the
    microphone mostly present words), reach, clipped to [MIN_THRESHOLD, MAX_THRESHOLD]. Reported
    with it: the share of the held-out examples (`scores` (N, hops), `kind` (N,) PHRASE,
    SYNTHETIC or REAL) that reach it. Synthetic negatives (pieces of the phrase among them) and
    word pairs run together are harder than that: they train the model but do not set its
    threshold."""
    runs, real = best_runs(scores), np.sort(best_runs(alone))
    q = real[min(len(real) - 1, int(math.ceil((1 - FALSE_ACCEPT_SHARE) * len(real))))] if len(real) else MAX_THRESHOLD
    th = float(np.clip(round(float(q) + 0.005, 3), MIN_THRESHOLD, MAX_THRESHOLD))
    rate = lambda k: float(np.mean(runs[kind == k] >= th)) if (kind == k).any() else 0.0
    return {"threshold": th, "validation_positives_detected": rate(PHRASE),
            "validation_real_negatives_alone_firing": float(np.mean(real >= th)) if len(real) else 0.0,
            "validation_real_negatives_firing": rate(REAL),
            "validation_synthetic_negatives_firing": rate(SYNTHETIC), "validation_examples": int(len(runs))}


# -- the command ----------------------------------------------------------------------------------
def parse_args(argv: list[str]) -> argparse.Namespace:
    d = EnrollConfig()
    p = argparse.ArgumentParser(prog="rotkws enroll", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("phrase", help="the words to spot, e.g. \"computer\"")
    p.add_argument("-o", "--output", required=True, help="the .onnx file to write")
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT), help="the backbone (default: %(default)s)")
    p.add_argument("--data", default=None, help="data root (default: $ROTKWS_DATA or ../shared/data)")
    for name in ("positives", "tts_negatives", "images", "wav_negatives", "noise_negatives",
                 "epochs", "max_steps", "seed", "threads"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name))
    return p.parse_args(argv)


def enroll(phrase: str, output: Path, checkpoint: Path, data: Path, cfg: EnrollConfig,
           say=tts.synthesize) -> dict:
    """The whole recipe; returns what it measured (also in the file's metadata)."""
    started = time.perf_counter()
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    backbone, entry = load_checkpoint(checkpoint)
    if not isinstance(backbone, RotRNNClassifier) or backbone.cfg.bidirectional or not backbone.cfg.reads_pixels:
        raise ValueError(f"{checkpoint}: enroll needs a causal RotRNN with the logmel front-end")
    items = gather(phrase, data, cfg, rng, say)
    kind = example_kinds(items)
    held = rng.random(len(kind)) < VALIDATION_SHARE
    x, y, alone = examples(items, rng, held & (kind == REAL))
    net = enrolled_network(backbone, phrase)
    h, h_alone = features(net, x, 256), features(net, alone, 256)
    train_idx = torch.from_numpy(np.flatnonzero(~held))
    losses = train(net, h[train_idx], torch.from_numpy(y)[train_idx], cfg)
    val = torch.from_numpy(np.flatnonzero(held))
    detection = choose_threshold(hop_scores(net, h[val]), kind[held], hop_scores(net, h_alone))
    seconds = time.perf_counter() - started
    meta = {"training_data": {"enrolled_phrase": phrase, "backbone": str(Path(checkpoint).name),
                              "backbone_data": entry.get("data", "unknown"), **items.sources},
            "task": "enroll", "detection": {"threshold": detection["threshold"]},
            "enroll": {"examples": int(len(x)), "steps": len(losses), "final_loss": float(np.mean(losses[-20:])),
                       "train_seconds": round(seconds, 1), **detection, "config": vars(cfg)}}
    from export.onnx import export_onnx
    export_onnx(net.eval(), output, meta=meta, clips=[a for a in items.positives[:4]])
    return meta["enroll"] | {"seconds_with_export": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    cfg = EnrollConfig(**{k: getattr(args, k) for k in ("positives", "tts_negatives", "images",
                          "wav_negatives", "noise_negatives", "epochs", "max_steps", "seed", "threads")})
    torch.set_num_threads(cfg.threads)
    try:
        phrase = tts.check_phrase(args.phrase)
        data = Path(args.data).resolve() if args.data else default_data_root()
        report = enroll(phrase, Path(args.output), Path(args.checkpoint), data, cfg)
    except (PhraseError, ClipError, ValueError) as e:
        print(f"rotkws enroll: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}: labels [{phrase!r}, {OTHER!r}], threshold {report['threshold']} "
          f"(held out: synthetic phrases detected {report['validation_positives_detected']:.0%}, "
          f"real negatives firing {report['validation_real_negatives_alone_firing']:.2%} alone, "
          f"{report['validation_real_negatives_firing']:.2%} after another word, synthetic ones "
          f"{report['validation_synthetic_negatives_firing']:.2%}), "
          f"{report['steps']} steps in {report['seconds_with_export']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
