"""A cascade wake file (app/cascade.py) as the demo's one model: what `rotkws demo --model W.onnx`
runs when W.onnx's metadata names a verifier (app/twostage_cascade.py does the same for `--wake`).

    model = served_model("hey_computer.onnx", shared_embedding())   # a CascadeModel: its head beside it
    spotter = CascadeKeywordSpotter(model)                          # one per visitor
    res = spotter.process(chunk, 48_000)    # res.scores: the wake file's; res.detections: the head's

KeywordSpotter's rule with one change: the detections its detector makes on a call's hops, at
the threshold setting (default: the verifier's `propose`), are proposals, handed with the call's
audio to a CascadeSpotter, whose confirmations are the detections returned (at its time and the
head's score). `flush` ends a stream as CascadeSpotter.flush does, so a file gives exactly
CascadeSpotter's detections. The model, its head and the embedding are shared by every stream;
each spotter holds its own cascade state.
"""
import numpy as np

from app.cascade import ARM_S, CascadeSpotter, Verifier, verifier_of
from app.embedding import SpeechEmbedding
from app.spotter import KeywordModel, KeywordSpotter, ModelError, SpotResult


class CascadeModel(KeywordModel):
    """A wake file served as its cascade: the KeywordModel and its verifier, loaded (`verifier`:
    its head on `ears`). Its metadata's detection threshold is the verifier's `propose`, the wake
    file's operating point in the cascade: where the page's slider starts and a spotter's default."""

    def __init__(self, path, ears: SpeechEmbedding | None = None):
        super().__init__(path)
        verifier = verifier_of(self, ears)
        if verifier is None:
            raise ModelError(f"{self.path}: no verifier in its metadata (expected a file `rotkws enroll` "
                             "wrote without --no-verifier)")
        self.verifier: Verifier = verifier
        self.meta = self.meta | {"detection": self.meta["detection"] | {"threshold": verifier.propose}}


def served_model(path, ears: SpeechEmbedding | None = None) -> KeywordModel:
    """The model at `path` (None: the bundled default) as the demo runs it: a CascadeModel on
    `ears` when its metadata names a verifier, else the KeywordModel. A head missing or not a
    head: HeadError (a ValueError) naming both files."""
    model = KeywordModel(path)
    return CascadeModel(path, ears) if "verifier" in model.meta else model


def slider_what(verifier: Verifier, wake: bool) -> str:
    """What the threshold slider sets for a cascade (its label): the wake file's proposals."""
    return (f"wake-word probability to propose; its head on the speech embedding confirms at {verifier.confirm:g}"
            + (" and only then opens a command window" if wake else " (only what it confirms is a detection)"))


class CascadeKeywordSpotter(KeywordSpotter):
    """One stream's spotter on a CascadeModel; `self.cascade` holds the head's side of the
    stream (its audio, proposals waiting, embeddings computed). The scores are the wake file's."""

    def __init__(self, model: CascadeModel, **settings):
        super().__init__(model, **settings)
        v = model.verifier
        self.cascade = CascadeSpotter(model, v.head, v.propose, v.confirm)

    def reset(self) -> None:
        super().reset()
        if hasattr(self, "cascade"):
            self.cascade.reset()

    def _detect(self, audio: np.ndarray, result: SpotResult) -> SpotResult:
        confirmed = self.cascade.hear(audio, result.detections).detections
        return SpotResult(result.times, result.scores, confirmed)

    def flush(self) -> SpotResult:
        """End of the stream, as CascadeSpotter.flush: what the resampler holds, then silence
        (whole hops) enough for the last proposals' windows to close; detections there at their
        own time. The rows returned end with the hop holding the input's last sample. Call
        reset() before another stream."""
        rest = self._resampler.flush()
        end = self._samples_done + len(self._pending) + len(rest)      # samples of input
        hop = self.model.hop_samples
        tail = np.zeros(int(np.ceil((ARM_S + 0.2) * self.model.sample_rate / hop)) * hop, np.float32)
        res = self._consume(np.concatenate([rest, tail]))
        keep = res.times * self.model.sample_rate < end + hop - 0.5
        return SpotResult(res.times[keep], res.scores[keep], res.detections)
