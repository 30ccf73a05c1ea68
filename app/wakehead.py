"""A wake word heard through the frozen speech embedding (app/embedding.py): a head file's score
over the last HEAD_HOPS embeddings, every 80 ms.

    head = HeadModel("alexa_head.onnx")          # reads its metadata: phrase, threshold, rule
    times, scores = head.track(audio)            # offline: (hops,), (hops,) over a whole stream

The head file is a small ONNX graph, `embeddings` (B, HEAD_HOPS, EMBED_DIM) → `score` (B,) the
phrase's probability, written by export/embedding_head.py; its metadata names the embedding's
files by their sha256, so a head is never run on other ears. numpy + onnxruntime; never torch.
"""
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

from app.embedding import EMBED_DIM, FILES, HOP, SAMPLE_RATE, SpeechEmbedding

HEAD_TASK = "embedding_head"  # the metadata `task` of a head file
HEAD_HOPS = 16                # embeddings a head reads (openWakeWord's): 1.28 s of hops, 1.96 s of audio
HEAD_THRESHOLDS = np.unique(np.round(np.concatenate([np.arange(0.05, 0.99, 0.005),
                                                     1 - 10.0 ** -np.arange(2.0, 6.05, 0.1)]), 7))
# a head's sweep: its probabilities saturate (trained on one logit), so false accepts an hour still
# fall between 1 − 1e-4 and 1 − 1e-6


class HeadError(ValueError):
    """A file that is not a usable head: the message names it and says why."""


def is_head(path) -> bool:
    """Whether the ONNX file at `path` is a head file (its metadata's task)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.get_modelmeta().custom_metadata_map.get("task") == json.dumps(HEAD_TASK)


class HeadModel:
    def __init__(self, path, ears: SpeechEmbedding | None = None):
        self.path = Path(path)
        if not self.path.is_file():
            raise HeadError(f"no head file at {self.path}")
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        meta = self.session.get_modelmeta().custom_metadata_map
        if meta.get("task") != json.dumps(HEAD_TASK):
            raise HeadError(f"{self.path}: expected a head file (metadata task {HEAD_TASK!r}), "
                            f"got task {meta.get('task')}")
        self.meta = {k: json.loads(v) for k, v in meta.items()}
        if self.meta.get("embedding") != FILES:
            raise HeadError(f"{self.path}: trained on other embedding files ({self.meta.get('embedding')}), "
                            f"expected {FILES}")
        self.phrase = self.meta["labels"][0]
        self.labels = tuple(self.meta["labels"])
        self.hops = int(self.meta["head_hops"])
        self.detection = self.meta.get("detection", {})
        self.ears = ears or SpeechEmbedding()
        self.silence = self.ears.vectors(self.ears.silence()[None])[0]   # what came before a stream

    def scores(self, embeddings: np.ndarray, batch: int = 4096) -> np.ndarray:
        """(n, EMBED_DIM) embeddings of a stream from its start → (n,) the phrase's probability on
        the HEAD_HOPS embeddings ending at each (silence's before the first)."""
        e = np.concatenate([np.repeat(self.silence[None], self.hops - 1, 0), embeddings]).astype(np.float32)
        view = np.lib.stride_tricks.sliding_window_view(e, self.hops, axis=0).transpose(0, 2, 1)
        out = [self.session.run(None, {"embeddings": np.ascontiguousarray(view[i:i + batch])})[0]
               for i in range(0, len(view), batch)]
        return np.concatenate(out).reshape(-1) if out else np.zeros(0, np.float32)

    def track(self, audio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(times s, scores): the phrase's probability at the end of every hop of `audio`, a stream
        from its start (16 kHz float32)."""
        embeddings = self.ears.embed(audio)
        return (np.arange(1, len(embeddings) + 1) * HOP / SAMPLE_RATE, self.scores(embeddings))


