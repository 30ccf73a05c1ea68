"""An exported file against the PyTorch network it came from, and against itself streamed.

Three checks, each a max absolute difference of softmax scores that must stay ≤ TOLERANCE:

1. random audio, batch 2, from a non-zero state, at every length class the graph handles
   differently (one frame, around the chunk size, a 100 ms hop, the longest call);
2. real clips (fitted to the longest call), when given;
3. one call on the longest input vs the same audio in uneven pieces with the state carried
   (causal networks), against PyTorch's one call.
"""
import copy
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from torch import nn

from app.spotter import HOP_SECONDS, session_options   # the runtime's hop is one length checked
from corpus.clips import fit_length

TOLERANCE = 1e-4          # max |Δ score|: float32 rounding of two implementations is ~1e-6
UNEVEN_CUTS = (0.0, 0.0023, 0.0625, 0.06256, 0.3127, 0.5625, 0.99994, 1.0)   # of the longest call


class VerificationError(AssertionError):
    """onnxruntime and PyTorch disagree beyond TOLERANCE."""


def open_session(model) -> ort.InferenceSession:
    """A one-thread CPU session, with the runtime's settings, on a file (a path) or a serialised
    model (bytes)."""
    source = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(source, session_options(1), providers=["CPUExecutionProvider"])


def run_onnx(session: ort.InferenceSession, audio: np.ndarray, state: np.ndarray | None):
    feed = {"audio": audio.astype(np.float32)}
    if state is not None:
        feed["state"] = state.astype(np.float32)
    out = session.run(None, feed)
    return out[0], (out[1] if len(out) > 1 else None)


@torch.no_grad()
def run_torch(net: nn.Module, audio: np.ndarray, state: np.ndarray | None):
    logits, state_out = net(torch.from_numpy(audio), None if state is None else torch.from_numpy(state))
    return torch.softmax(logits, -1).numpy(), (None if state_out is None else state_out.numpy())


def check_lengths(net: nn.Module, max_samples: int) -> list[int]:
    """Sample counts where the graph's shapes change character: 1 frame, chunk ± 1, the hop."""
    stride, chunk = net.cfg.frontend_stride, getattr(net.cfg, "chunk", None)   # a DS-CNN: no chunks
    hop = int(HOP_SECONDS * net.cfg.sample_rate) // stride
    frames = {1, 2, hop, max_samples // stride - 1, max_samples // stride}
    if chunk:
        frames |= {chunk - 1, chunk, chunk + 1, 2 * chunk + 3}
    return sorted(f * stride for f in frames if 1 <= f <= max_samples // stride)


def uneven_pieces(total: int, stride: int) -> list[tuple[int, int]]:
    cuts = sorted({int(f * total) // stride * stride for f in UNEVEN_CUTS})
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def random_audio(rng: np.random.Generator, batch: int, samples: int) -> np.ndarray:
    return (0.1 * rng.standard_normal((batch, samples))).astype(np.float32)


def compare_random(net, session, max_samples: int, rng) -> float:
    state = None
    if not net.cfg.bidirectional:                          # a realistic non-zero starting state
        warm_up = max_samples // 2 // net.cfg.frontend_stride * net.cfg.frontend_stride
        _, state = run_torch(net, random_audio(rng, 2, warm_up), net.initial_state(2).numpy())
    worst = 0.0
    for n in check_lengths(net, max_samples):
        audio = random_audio(rng, 2, n)
        ours, ref = run_onnx(session, audio, state)[0], run_torch(net, audio, state)[0]
        worst = max(worst, float(np.abs(ours - ref).max()))
    return worst


def compare_clips(net, session, max_samples: int, clips) -> float | None:
    if not len(clips):
        return None
    audio = np.stack([fit_length(np.asarray(c, np.float32), max_samples) for c in clips])
    state = None if net.cfg.bidirectional else net.initial_state(len(audio)).numpy()
    return float(np.abs(run_onnx(session, audio, state)[0] - run_torch(net, audio, state)[0]).max())


def compare_stream(net, session, max_samples: int, rng) -> float | None:
    if net.cfg.bidirectional:
        return None
    audio = random_audio(rng, 2, max_samples)
    state = net.initial_state(2).numpy()
    ref = run_torch(net, audio, state)[0]
    whole = run_onnx(session, audio, state)[0]
    for a, b in uneven_pieces(max_samples, net.cfg.frontend_stride):
        scores, state = run_onnx(session, audio[:, a:b], state)
    return float(max(np.abs(scores - ref).max(), np.abs(whole - ref).max()))


def verify_export(net: nn.Module, model, clips=(), seed: int = 0, name: str | None = None) -> dict:
    """Run the checks on `model` (a file's path, or a serialised model's bytes, then called
    `name` in errors); return {"random", "clips", "stream", "lengths"} (max |Δ score| each, None
    where it does not apply); raise VerificationError on a failure."""
    net = copy.deepcopy(net).eval()
    session = open_session(model)
    name = name or ("the serialised graph" if isinstance(model, bytes) else Path(model).name)
    max_samples = int(session.get_modelmeta().custom_metadata_map["max_samples"])
    rng = np.random.default_rng(seed)
    report = {"random": compare_random(net, session, max_samples, rng),
              "clips": compare_clips(net, session, max_samples, list(clips)),
              "stream": compare_stream(net, session, max_samples, rng),
              "lengths": check_lengths(net, max_samples)}
    failed = {k: v for k, v in report.items() if k != "lengths" and v is not None and not v <= TOLERANCE}
    if failed:
        raise VerificationError(f"{name}: onnxruntime differs from PyTorch by "
                                f"{failed} (max |Δ score|), expected ≤ {TOLERANCE}")
    return report
