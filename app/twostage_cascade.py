"""A cascade wake word (app/cascade.py), then a command (app/twostage.py): what `rotkws demo
--wake W.onnx` runs when W.onnx's metadata names a verifier.

    verifier = verifier_of(KeywordModel("hey_computer.onnx"))      # its head, beside it
    spotter = CascadeWakeCommandSpotter(wake, commands, verifier)
    res = spotter.process(chunk, 48_000)    # res.detections: the wake words the head confirmed

The rule is WakeCommandSpotter's, hop by hop, with one change at step 1:

1. The wake file runs on every hop through its detection rule at the verifier's `propose`
   threshold (the threshold setting, when given, replaces it); each detection is a proposal,
   handed with the hop's audio to a CascadeSpotter, which confirms it within ARM_S on the head's
   score (app/cascade.py). Only a confirmed wake word opens a command window, at the hop where it
   was confirmed; the detection is at the cascade's time and score (the head's).
2. While a window is open, proposals are dropped, as the plain wake word's detections are.

The scores each hop returns stay the wake file's: what the page plots.
"""
import numpy as np

from app.cascade import CascadeSpotter, Verifier
from app.detection import Detection
from app.twostage import WakeCommandSpotter


class CascadeWakeCommandSpotter(WakeCommandSpotter):
    """One stream's two-stage spotter whose wake word is a cascade; `self.cascade` holds the
    head's side of the stream (its audio, proposals waiting, embeddings computed)."""

    def __init__(self, wake, commands, verifier: Verifier, *, threshold=None, **settings):
        self.verifier = verifier
        super().__init__(wake, commands, threshold=verifier.propose if threshold is None else threshold, **settings)
        self.cascade = CascadeSpotter(self.model, verifier.head, verifier.propose, verifier.confirm)

    def reset(self) -> None:
        super().reset()
        if hasattr(self, "cascade"):
            self.cascade.reset()

    def _wake(self, audio: np.ndarray, t: float, row: np.ndarray) -> list[Detection]:
        proposals = super()._wake(audio, t, row)
        if self.window_open:                     # the wake word is not listened for in a window
            self.cascade.pending.clear()
            proposals = []
        return self.cascade.hear(audio, proposals).detections
