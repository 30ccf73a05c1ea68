"""A wake word in two stages: the RotRNN file proposes, the embedding head confirms.

1. The wake file's spotter runs on everything, at its own rule but a permissive threshold
   (`propose`): each of its detections is a proposal at time t.
2. Only then is the speech embedding computed (app/embedding.py), for the head hops ending in
   (t − LOOKBACK_S, t + ARM_S], from the last few seconds of audio kept: the first of those hops,
   in time order, whose head score reaches `confirm` fires, at max(t, that hop's end); none: the
   proposal is dropped at t + ARM_S.
3. Refractory: no detection within REFRACTORY_S after one.

Each head hop is computed once, as the offline head computes it over the whole stream
(`HeadModel.scores(ears.embed(stream))`), so `cascade_detections` over the two full score tracks
gives exactly the detections of the streaming `CascadeSpotter`, which spends the embedding's
cost only around proposals. numpy + onnxruntime; never torch.
"""
from dataclasses import dataclass, field

import numpy as np

from app.audio import StreamResampler, check_rate, to_mono_float32
from app.detection import REFRACTORY_S, Detection
from app.embedding import HOP, MEL_CONTEXT, MEL_PER_HOP, MEL_WINDOW, SAMPLE_RATE, SpeechEmbedding
from app.spotter import KeywordModel, KeywordSpotter, ModelError
from app.wakehead import HeadError, HeadModel

LOOKBACK_S = 0.3          # head hops this long before a proposal may confirm it …
ARM_S = 0.4               # … and this long after (the most a confirmation delays a detection)
MEL_HOPS = -(-MEL_WINDOW // MEL_PER_HOP)    # hops of mel one embedding reads (10)


def cascade_detections(proposals: np.ndarray, head_times: np.ndarray, head_scores: np.ndarray,
                       confirm: float, refractory_s: float = REFRACTORY_S) -> np.ndarray:
    """Offline: detection times from proposal times (ascending) and the head's full score track."""
    out, last = [], -np.inf
    for t in proposals:
        window = np.flatnonzero((head_times > t - LOOKBACK_S) & (head_times <= t + ARM_S + 1e-9))
        hit = window[head_scores[window] >= confirm]
        if len(hit):
            when = max(float(t), float(head_times[hit[0]]))
            if when - last >= refractory_s:
                out.append(when)
                last = when
    return np.array(out)


@dataclass(frozen=True)
class Verifier:
    """A wake file's verifier, loaded: its head (sessions shared by every stream) and thresholds."""
    head: HeadModel
    propose: float            # the wake file's threshold for a proposal
    confirm: float            # the head's score that confirms one


VERIFIER_KEYS = ("head", "propose", "confirm")   # what a wake file's `verifier` metadata holds


def verifier_of(wake: KeywordModel, ears: SpeechEmbedding | None = None) -> Verifier | None:
    """The verifier `wake`'s metadata names, its head file beside the wake file, on `ears` (None:
    its own); None when it names none. A head missing or not a head: HeadError naming both files."""
    v = wake.meta.get("verifier")
    if v is None:
        return None
    if not isinstance(v, dict) or any(k not in v for k in VERIFIER_KEYS):
        raise ModelError(f"{wake.path}: its verifier metadata {v!r} lacks {', '.join(VERIFIER_KEYS)} "
                         "(expected what `rotkws enroll` writes)")
    try:
        head = HeadModel(wake.path.parent / v["head"], ears)
    except HeadError as e:
        raise HeadError(f"{wake.path} names {v['head']!r} as its verifier: {e} (expected the head file "
                        "`rotkws enroll` writes beside the wake file)") from None
    return Verifier(head, float(v["propose"]), float(v["confirm"]))


@dataclass
class CascadeResult:
    detections: list = field(default_factory=list)   # confirmed: [Detection]
    proposals: int = 0                               # the wake file's proposals in this call


class CascadeSpotter:
    """Live: `process(chunk, rate)` → CascadeResult, the confirmed detections; `flush()` at a
    stream's end. Audio at any rate, mono or not, as KeywordSpotter takes it."""

    @classmethod
    def from_file(cls, path) -> "CascadeSpotter":
        """The wake file at `path` and the verifier its metadata names, beside it, at its thresholds."""
        wake = KeywordModel(path)
        verifier = verifier_of(wake)
        if verifier is None:
            raise ValueError(f"{path}: no verifier in its metadata (expected a file `rotkws enroll` wrote without --no-verifier)")
        return cls(wake, verifier.head, verifier.propose, verifier.confirm)

    def __init__(self, wake: KeywordModel, head: HeadModel, propose: float, confirm: float,
                 record: bool = False):
        """record: also score every head hop of every proposal's window, kept in `recorded`
        ({hop: score}) with the proposals in `proposals`: what a sweep over `confirm` needs."""
        self.record = record
        if wake.sample_rate != SAMPLE_RATE:
            raise ValueError(f"expected a wake file at {SAMPLE_RATE} Hz, got {wake.sample_rate}")
        self.spotter = KeywordSpotter(wake, threshold=propose)
        self.head, self.confirm = head, float(confirm)
        self.keep = (head.hops + MEL_HOPS + int(np.ceil((LOOKBACK_S + ARM_S) * SAMPLE_RATE / HOP)) + 2) * HOP
        self.model = wake
        self.resampler = StreamResampler(SAMPLE_RATE)
        self.reset()

    def reset(self) -> None:
        self.spotter.reset()
        self.resampler.reset()
        self.audio = np.zeros(0, np.float32)      # the last samples heard, ending at self.heard
        self.heard = 0                            # samples heard since the stream started
        self.mels, self.vectors, self.scores = {}, {}, {}   # by hop index, computed on demand
        self.pending = []                         # proposal times awaiting their head hops
        self.last_fired = -np.inf
        self.hops_embedded = 0                    # what the head stage cost: embeddings computed
        self.proposals, self.recorded, self.watched = [], {}, []

    def process(self, chunk: np.ndarray, sample_rate: int = SAMPLE_RATE) -> CascadeResult:
        return self._consume(self.resampler(to_mono_float32(chunk), check_rate(sample_rate)))

    def _consume(self, chunk: np.ndarray) -> CascadeResult:
        return self.hear(chunk, self.spotter.process(chunk, SAMPLE_RATE).detections)

    def hear(self, chunk: np.ndarray, proposals: list[Detection]) -> CascadeResult:
        """The rest of `process`, for a caller that runs the wake file itself (app/twostage_cascade.py):
        `chunk` (samples,) float32 @ 16 kHz, the stream's next samples, and the proposals the wake
        file made in them → the detections confirmed by now."""
        self.audio = np.concatenate([self.audio, chunk])       # trimmed to `keep` once confirmed
        self.heard += len(chunk)
        self.pending += [d.time_s for d in proposals]
        if self.record:
            self.proposals += [d.time_s for d in proposals]
            self.watched += [self._window(d.time_s) for d in proposals]
            self._watch()
        confirmed = self._confirm()
        self.audio = self.audio[-self.keep:]
        return CascadeResult(confirmed, len(proposals))

    def flush(self) -> CascadeResult:
        """The end of a stream: what the resampler holds, then enough silence (whole spotter
        hops) for the last windows to close. Call reset() before another stream."""
        hop = self.spotter.model.hop_samples
        tail = np.zeros(int(np.ceil((ARM_S + 0.2) * SAMPLE_RATE / hop)) * hop, np.float32)
        return self._consume(np.concatenate([self.resampler.flush(), tail]))

    @staticmethod
    def _window(t: float) -> tuple[int, int]:
        """The first and last head hop of a proposal at `t` (hop k ends at (k + 1) HOP samples)."""
        first = int(np.floor((t - LOOKBACK_S) * SAMPLE_RATE / HOP + 1e-9))
        return max(first, 0), int(np.floor((t + ARM_S) * SAMPLE_RATE / HOP + 1e-9)) - 1

    def _watch(self) -> None:
        now_hop = self.heard // HOP
        for first, last in list(self.watched):
            for k in range(first, min(last, now_hop - 1) + 1):
                self.recorded[k] = self._score(k)
            if last <= now_hop - 1:
                self.watched.remove((first, last))

    def _confirm(self) -> list[Detection]:
        out, now_hop = [], self.heard // HOP                 # hops 0 … now_hop − 1 are complete
        for t in list(self.pending):
            first, last = self._window(t)
            for k in range(first, min(last, now_hop - 1) + 1):
                end = (k + 1) * HOP / SAMPLE_RATE
                if self._score(k) >= self.confirm:
                    when = max(t, end)
                    self.pending.remove(t)
                    if when - self.last_fired >= self.spotter.detector.refractory_s:
                        self.last_fired = when
                        out.append(Detection(self.head.phrase, when, float(self._score(k))))
                    break
            else:
                if last <= now_hop - 1:
                    self.pending.remove(t)                   # its window has passed: dropped
        self._forget(now_hop)
        return out

    def _samples(self, lo: int, hi: int) -> np.ndarray:
        """Stream samples [lo, hi) (zeros before the stream's start)."""
        start = self.heard - len(self.audio)
        if lo < start and lo >= 0:
            raise RuntimeError(f"samples from {lo} are no longer kept (from {start})")
        got = self.audio[max(lo, 0) - start:hi - start] if hi > 0 else np.zeros(0, np.float32)
        return np.concatenate([np.zeros(max(0, min(hi, 0) - lo), np.float32), got])

    def _mel(self, k: int) -> np.ndarray:
        if k not in self.mels:
            self.mels[k] = (self.head.ears.silence()[:MEL_PER_HOP] if k < 0
                            else self.head.ears.mel(self._samples(k * HOP - MEL_CONTEXT, (k + 1) * HOP)))
        return self.mels[k]

    def _vectors(self, missing: list[int]) -> None:
        """The embeddings of hops `missing` (none of them before the stream) in one call."""
        if missing:
            mels = [np.concatenate([self._mel(i) for i in range(j - MEL_HOPS + 1, j + 1)])[-MEL_WINDOW:] for j in missing]
            self.vectors.update(zip(missing, self.head.ears.vectors(np.stack(mels))))
            self.hops_embedded += len(missing)

    def _vector(self, j: int) -> np.ndarray:
        if j not in self.vectors:
            if j < 0:
                self.vectors[j] = self.head.silence
            else:
                self._vectors([j])
        return self.vectors[j]

    def _score(self, k: int) -> float:
        if k not in self.scores:
            self._vectors([j for j in range(k - self.head.hops + 1, k + 1) if j >= 0 and j not in self.vectors])
            window = np.stack([self._vector(j) for j in range(k - self.head.hops + 1, k + 1)])
            self.scores[k] = float(self.head.session.run(None, {"embeddings": window[None].astype(np.float32)})[0][0])
        return self.scores[k]

    def _forget(self, now_hop: int) -> None:
        oldest = now_hop - self.keep // HOP
        for cache in (self.mels, self.vectors, self.scores):
            for k in [k for k in cache if k < oldest]:
                del cache[k]
