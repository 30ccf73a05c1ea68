"""A wake word on ears trained on real speech: `enroll`'s examples, heard through Google's frozen
speech embedding (app/embedding.py), and a small head of openWakeWord's shape on top.

The question it answers (issue 48, step 1): is rotkws's gap to the peers its ears (a backbone
that learned ten words from 12.8 h) or its negatives? Same phrase clips (Kokoro and the three
engines), same negatives (real words, Mycroft's wake words, noise, the training split's speech
and synthetic sentences) as `enroll` gathers them (training/enroll.py: gather); the Speech
Commands log-mel images are left out, as they are no audio.

1. Examples are audio, EXAMPLE_S long over background noise (0–25 dB SNR by peak frame energy,
   as the bench mixes), then 0–24 dB quieter as a whole: a phrase clip varied as enroll varies
   it (speed, room, codec, gain) ending PHRASE_END_S into the example, optionally after another
   word; each negative clip once, anywhere; noise alone. Each utterance of real speech is a
   piece of its own after LEAD_S of its noise, its embedding cached per machine by its audio
   (the same whatever the phrase: `embedding_cache`).
2. Every example is embedded as a stream from its start; each hop whose window of HEAD_HOPS
   embeddings lies inside the example is one training row, labelled as enroll labels frames:
   the phrase from POSITIVE_BEFORE_END_S before its end to POSITIVE_AFTER_END_S after, not scored
   while it is said or later, `_other_` everywhere else.
3. The head (openWakeWord's DNN: flatten, Linear–LayerNorm–ReLU, one more such block, one logit)
   trains with binary cross-entropy, PHRASE_SHARE of each batch the phrase; from half-way on, the
   negatives are drawn by how close the head comes to firing on them (hard negatives). `heads` of
   them train on the same rows from consecutive seeds; the file's score is the sigmoid of their
   mean logit (what it bought: BENCHMARKS.md, "The ears or the negatives").
4. Its threshold is chosen on enroll's validation stream (export/enroll.py: the lowest with
   ≤ fa_per_hour false accepts per hour under the file's rule), the file exported by
   export/embedding_head.py.
"""
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from app.embedding import EMBED_DIM, HOP, SAMPLE_RATE, SpeechEmbedding, cache_folder, cache_key
from app.wakehead import HEAD_HOPS
from evaluation import streams
from training import enroll_examples as ex
from training.enroll import EnrollConfig, Items, gather
from training import progress

EXAMPLE_S = 3.0               # seconds per example
PHRASE_END_S = (2.0, 2.45)    # a positive's phrase ends this far into its example
LEAD_S = 1.5                  # noise before each utterance of speech, so its first windows are full
POSITIVE_BEFORE_END_S = ex.POSITIVE_BEFORE_END_S
POSITIVE_AFTER_END_S = ex.POSITIVE_AFTER_END_S
PHRASE, OTHER, IGNORE = 1, 0, -1
PHRASE_SHARE = 0.3            # of each batch


@dataclass
class HeadConfig:
    copies: int = 2           # varied copies of each phrase clip
    width: int = 128          # the head's layers (openWakeWord's default)
    blocks: int = 1           # hidden blocks after the first layer
    steps: int = 4000
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.01
    hard_gain: float = 8.0    # a negative's draw weight: 1 + this × the head's score on it
    mine_every: int = 250     # steps between the mining passes
    heads: int = 3            # trained on the same rows (seeds seed, seed + 1, …), their logits averaged
    seed: int = 0


class Head(nn.Module):
    """(B, HEAD_HOPS, EMBED_DIM) embeddings → (B,) logits of the phrase."""

    def __init__(self, width: int = 128, blocks: int = 1):
        super().__init__()
        layers = [nn.Flatten(), nn.Linear(HEAD_HOPS * EMBED_DIM, width), nn.LayerNorm(width), nn.ReLU()]
        for _ in range(blocks):
            layers += [nn.Linear(width, width), nn.LayerNorm(width), nn.ReLU()]
        self.net = nn.Sequential(*layers, nn.Linear(width, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)          # (B,)


class Heads(nn.Module):
    """Heads of one phrase as one: the mean of their logits (one file, one threshold)."""

    def __init__(self, heads: list[Head]):
        super().__init__()
        self.heads = nn.ModuleList(heads)

    def forward(self, x):
        return torch.stack([h(x) for h in self.heads]).mean(0)


# -- examples -------------------------------------------------------------------------------------
def phrase_end(audio: np.ndarray) -> int:
    """The sample where the phrase ends: the end of the last 10-ms frame within 25 dB of the loudest."""
    n = len(audio) // 160
    energy = 10 * np.log10((audio[:n * 160].reshape(n, 160) ** 2).mean(1) + 1e-12)
    return int(np.flatnonzero(energy > energy.max() - 25)[-1] + 1) * 160


def over_noise(canvas: np.ndarray, item: np.ndarray, noise: np.ndarray, rng) -> np.ndarray:
    """`canvas` over a random crop of the noise bed at SNR_DB to `item` by peak frame energy
    (CLEAN_SHARE of the time no noise; an empty item: noise at its own level, NOISE_ONLY_DB)."""
    if rng.random() < ex.CLEAN_SHARE and item.any():
        return canvas
    start = int(rng.integers(0, len(noise) - len(canvas)))
    crop = noise[start:start + len(canvas)]
    gain = (streams.noise_gain(item, crop, rng.uniform(*ex.SNR_DB)) if item.any()
            else 10 ** (rng.uniform(*ex.NOISE_ONLY_DB) / 20))
    return canvas + gain * crop


def level(audio: np.ndarray, rng) -> np.ndarray:
    """The whole example quieter by LEVEL_DB (a quieter microphone), kept inside full scale."""
    out = audio * 10 ** (rng.uniform(*ex.LEVEL_DB) / 20)
    return (out / max(1.0, np.abs(out).max() / 0.999)).astype(np.float32)


def hop_labels(hops: int, start: int | None = None, end: int | None = None) -> np.ndarray:
    """(hops,) PHRASE / OTHER / IGNORE for the windows ending at each hop: IGNORE until a window
    of HEAD_HOPS lies inside the example; for a phrase said from sample `start` to `end`, the
    phrase around its end, IGNORE while it is said and after."""
    y = np.full(hops, OTHER, np.int8)
    if end is not None:
        t = (np.arange(hops) + 1) * HOP                  # the sample each window ends at
        y[t > start] = IGNORE
        on, off = end - POSITIVE_BEFORE_END_S * SAMPLE_RATE, end + POSITIVE_AFTER_END_S * SAMPLE_RATE
        y[(t >= on) & (t <= off)] = PHRASE
    y[:HEAD_HOPS - 1] = IGNORE
    return y


def positive(clip: np.ndarray, context: list[np.ndarray], noise: np.ndarray, rng):
    """(audio, labels) of one phrase example."""
    n = int(EXAMPLE_S * SAMPLE_RATE)
    item = ex.vary(clip, rng, True)
    end = int(rng.uniform(*PHRASE_END_S) * SAMPLE_RATE)
    at = end - phrase_end(item)
    canvas = np.zeros(n, np.float32)
    paste(canvas, item, at)
    if context and rng.random() < ex.CONTEXT_SHARE:
        word = context[int(rng.integers(len(context)))]
        paste(canvas, word, at - int(rng.uniform(0.1, 0.6) * SAMPLE_RATE) - len(word))
    audio = level(over_noise(canvas, item, noise, rng), rng)
    return audio, hop_labels(n // HOP, max(at, 0), end)


def negative(clip: np.ndarray | None, noise: np.ndarray, rng, synthetic: bool):
    """(audio, labels) of a negative example: the clip anywhere in it, or noise alone (None)."""
    n = int(EXAMPLE_S * SAMPLE_RATE)
    canvas = np.zeros(n, np.float32)
    item = np.zeros(0, np.float32)
    if clip is not None:
        item = ex.vary(clip, rng, synthetic)
        paste(canvas, item, int(rng.integers(-len(item) // 2, n - len(item) // 2)))
    return level(over_noise(canvas, item, noise, rng), rng), hop_labels(n // HOP)


def paste(canvas: np.ndarray, item: np.ndarray, at: int) -> None:
    """canvas[at:at + len(item)] += item, cut to the canvas."""
    lo, hi = max(0, at), min(len(canvas), at + len(item))
    if hi > lo:
        canvas[lo:hi] += item[lo - at:hi - at]


def speech_piece(utterance: np.ndarray, noise: np.ndarray, rng) -> np.ndarray:
    """An utterance of continuous speech after LEAD_S of noise, as a speech example hears it."""
    canvas = np.concatenate([np.zeros(int(LEAD_S * SAMPLE_RATE), np.float32), utterance])
    return level(over_noise(canvas, utterance, noise, rng), rng)


# -- the embedding, computed once -----------------------------------------------------------------
def heard_piece(utterance: np.ndarray, noise: np.ndarray, key: str | None = None) -> np.ndarray:
    """The utterance's `speech_piece`, its randomness seeded by its audio (app/embedding.py:
    `cache_key`): the same piece every time, what `embedding_cache` embeds."""
    key = key or cache_key(utterance)
    return speech_piece(utterance, noise, np.random.default_rng(int(key[:12], 16)))


def embedding_cache(ears: SpeechEmbedding, pieces, noise: np.ndarray, folder: Path | None = None) -> list[np.ndarray]:
    """Each utterance's speech piece (`speech_piece`, its randomness seeded by its audio) embedded,
    (hops, EMBED_DIM) float16, read from `folder` where an earlier run (any phrase, any seed)
    wrote it."""
    folder = folder or cache_folder()
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for audio in progress.bar(pieces, desc="speech embeddings", unit="utterance"):
        key = cache_key(audio)
        path = folder / f"{key}.npy"
        if path.is_file():
            out.append(np.load(path))
            continue
        e = ears.embed(heard_piece(audio, noise, key)).astype(np.float16)
        np.save(path, e)
        out.append(e)
    return out


@dataclass
class Rows:
    """Every example's embeddings end to end, a label per hop: the windows ending at a hop are rows."""
    embeddings: torch.Tensor      # (hops, EMBED_DIM) float16
    labels: np.ndarray            # (hops,) PHRASE / OTHER / IGNORE

    def windows(self, ends: torch.Tensor) -> torch.Tensor:
        """(B,) hop indices → (B, HEAD_HOPS, EMBED_DIM) float32 windows ending there."""
        return self.embeddings[ends[:, None] + torch.arange(1 - HEAD_HOPS, 1)].float()


def rows(ears: SpeechEmbedding, items: Items, cfg: HeadConfig, rng) -> Rows:
    """Steps 1–2 of the module docstring over enroll's gathered items."""
    n_real_speech = items.sources["speech_utterances"]
    context = items.synthetic + items.real
    n_noise = items.sources["noise_examples"]

    def made():                     # each example's audio made, embedded and let go in turn
        yield from (positive(c, context, items.noise, rng) for c in items.positives * cfg.copies)
        yield from (negative(c, items.noise, rng, True) for c in items.synthetic)
        yield from (negative(c, items.noise, rng, False) for c in items.real)
        yield from (negative(None, items.noise, rng, False) for _ in range(n_noise))

    embeddings, labels = [], []
    total = len(items.positives) * cfg.copies + len(items.synthetic) + len(items.real) + n_noise
    for audio, y in progress.bar(made(), total=total, desc="embedding", unit="example"):
        embeddings.append(ears.embed(audio).astype(np.float16))
        labels.append(y[:len(embeddings[-1])])
    speech = embedding_cache(ears, items.speech[:n_real_speech], items.noise)
    sentences = [ears.embed(speech_piece(a, items.noise, rng)).astype(np.float16)
                 for a in items.speech[n_real_speech:]]
    for e in speech + sentences:
        embeddings.append(e)
        labels.append(hop_labels(len(e)))
    return Rows(torch.from_numpy(np.concatenate(embeddings)), np.concatenate(labels))


# -- the fit --------------------------------------------------------------------------------------
def scores(head: Head, data: Rows, ends: np.ndarray, batch: int = 4096) -> np.ndarray:
    """The head's probability of the phrase on the windows ending at `ends`."""
    head.eval()
    with torch.no_grad():
        out = [torch.sigmoid(head(data.windows(torch.from_numpy(ends[i:i + batch])))).numpy()
               for i in range(0, len(ends), batch)]
    head.train()
    return np.concatenate(out) if out else np.zeros(0)


def new_heads(cfg: HeadConfig) -> list[Head]:
    """cfg.heads untrained heads, initialised from seeds cfg.seed, cfg.seed + 1, … by torch's global
    generator: made before another thread draws from it, training them draws from it no more."""
    if cfg.heads < 1:
        raise ValueError(f"expected at least one head, got heads={cfg.heads}")
    made = []
    for k in range(cfg.heads):
        torch.manual_seed(cfg.seed + k)
        made.append(Head(cfg.width, cfg.blocks))
    return made


def train_heads(data: Rows, cfg: HeadConfig, heads: list[Head] | None = None) -> tuple[nn.Module, list[float]]:
    """cfg.heads heads (`new_heads`, or those given) trained on the rows: one `Head`, or `Heads` of
    several; the first one's losses."""
    heads = heads or new_heads(cfg)
    trained = [train(data, replace(cfg, seed=cfg.seed + k), h) for k, h in enumerate(heads)]
    return (trained[0][0] if len(trained) == 1 else Heads([h for h, _ in trained]).eval()), trained[0][1]


def train(data: Rows, cfg: HeadConfig, head: Head | None = None) -> tuple[Head, list[float]]:
    """Step 3 of the module docstring (on `head`, or one `new_heads` makes from cfg.seed)."""
    head = head or new_heads(replace(cfg, heads=1))[0]
    g = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.AdamW(head.parameters(), cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, cfg.lr, total_steps=cfg.steps, pct_start=0.1)
    pos = torch.from_numpy(np.flatnonzero(data.labels == PHRASE))
    neg = np.flatnonzero(data.labels == OTHER)
    weights = torch.ones(len(neg), dtype=torch.float64)
    n_pos = round(PHRASE_SHARE * cfg.batch_size)
    losses = []
    for step in progress.bar(range(cfg.steps), desc="training", unit="step"):
        if step >= cfg.steps // 2 and step % cfg.mine_every == 0:
            weights = torch.from_numpy(1 + cfg.hard_gain * scores(head, data, neg)).double()
        ends = torch.cat([pos[torch.randint(len(pos), (n_pos,), generator=g)],
                          torch.from_numpy(neg)[torch.multinomial(weights, cfg.batch_size - n_pos, True,
                                                                  generator=g)]])
        target = torch.cat([torch.ones(n_pos), torch.zeros(cfg.batch_size - n_pos)])
        loss = F.binary_cross_entropy_with_logits(head(data.windows(ends)), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return head.eval(), losses


def fit(phrase: str, data: Path, enroll_cfg: EnrollConfig, cfg: HeadConfig,
        ears: SpeechEmbedding | None = None) -> tuple[Head, dict, Items]:
    """The head for `phrase` on enroll's items, trained; what it was trained on, for the metadata."""
    rng = np.random.default_rng(cfg.seed)
    items = gather(phrase, data, enroll_cfg, rng)
    head, meta = fit_items(phrase, items, cfg, ears, rng)
    return head, meta, items


def fit_items(phrase: str, items: Items, cfg: HeadConfig, ears: SpeechEmbedding | None = None,
              rng=None, heads: list[Head] | None = None) -> tuple[Head, dict]:
    """The head for `phrase` on items `gather` made (their speech still held), trained."""
    started = time.perf_counter()
    rng = rng or np.random.default_rng(cfg.seed + 1)
    ears = ears or SpeechEmbedding()
    rows_ = rows(ears, items, cfg, rng)
    head, losses = train_heads(rows_, cfg, heads)
    meta = {"training_data": {"enrolled_phrase": phrase, **items.sources},
            "enroll": {"recipe": "embedding_head", "rows": int((rows_.labels != IGNORE).sum()),
                       "phrase_rows": int((rows_.labels == PHRASE).sum()), "steps": len(losses),
                       "final_loss": float(np.mean(losses[-50:])),
                       "train_seconds": round(time.perf_counter() - started, 1), "config": vars(cfg)}}
    return head, meta


class Beside:
    """`fit_items` in a thread of its own, started at once and reporting nothing, while the caller
    trains the wake file on the same items (`rotkws enroll`: the embedding's ONNX calls
    and the wake file's training share the cores). The heads are made here, in the caller's thread,
    so the result is the one `fit_items` gives alone; the thread keeps its own list of the speech,
    which the wake file's examples consume. `then()`, if given, runs in the thread after the fit
    (enroll: the validation stream embedded, while the wake file still trains). `threads()`:
    torch's thread count the caller may take now (its own, doubled once this thread is done).
    `result()` waits and returns (the heads, their record, what `then` returned), or raises what it
    raised."""

    def __init__(self, phrase: str, items: Items, cfg: HeadConfig, then=None):
        heads, own = new_heads(cfg), replace(items, speech=list(items.speech))
        threads = torch.get_num_threads()              # OpenMP's count is each thread's own
        self.out, self.error, self.own = None, None, threads

        def run():
            torch.set_num_threads(threads)
            try:
                with progress.quiet():
                    head, meta = fit_items(phrase, own, cfg, heads=heads)
                    self.out = head, meta, then() if then is not None else None
            except BaseException as e:            # handed to the caller by result()
                self.error = e

        self.thread = threading.Thread(target=run, name="head", daemon=True)
        self.thread.start()

    def threads(self) -> int:
        return self.own if self.thread.is_alive() else 2 * self.own

    def result(self) -> tuple[nn.Module, dict, object]:
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.out
