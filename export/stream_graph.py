"""The streaming graph of a causal log-mel RotRNN (or LRU) classifier, written node by node.

The traced export (export/onnx.py: `trace`) of such a network holds ~280 nodes, and at 100 ms
hops onnxruntime spends its time dispatching them, not computing. This builds the same function
from the network's frozen weights in 137 nodes (4 blocks), every constant folded ahead of time:

    audio (B, S), S = L·HOP, 1 ≤ L ≤ max_frames;  state (B, tail | z_1 … z_layers | pooled)
    front-end  x = [tail | audio] → Conv(windowed DFT basis, stride HOP) → square → MatMul(mel·c)
               → Clip(1, e^(255/a)) → Log → MatMul(the projection, with a/σ and μ folded in)
               (pixel = a·ln(power) + b = a·ln(c·power), c = e^(b/a): the clip at [0, 255] becomes
               one Clip before the log)
    each block LayerNorm → v = u Bᵀ → the recurrence → y = z Cᵀ + D ⊙ u → GELU → half-GLU → + h
    pooling    p_L = α^L p_0 + Σ_t (1 − α) α^(L−1−t) h_t, then LayerNorm → head → softmax

The recurrence is the chunked op of model/scan.py with one chunk per call, so the chunk is the
whole call: with the carried state as step −1, c_t = Σ_{p ≤ t+1} λ^(t+1−p) V_p, one batched MatMul
per layer of [c_0 | v_0 … v_{L−1}] (the state and the inputs, re/im interleaved per step) by the
real block form of λ's Toeplitz kernel, stored for max_frames (the inputs are padded to it, the
outputs cut to L: cheaper than slicing the kernel). Each layer carries its state in the basis
where it is diagonal, z = Pᵀx, as model/rotrnn.py does; one call equals many calls on its pieces,
as the export verifies.
Every power of λ, the maps ξPᵀB and CP, and the EMA weights are computed in float64.
"""
import copy
import math

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from model.logmel import PIXEL_MAX, PIXEL_MEAN, PIXEL_OFFSET, PIXEL_SLOPE, PIXEL_STD

OPSET = 18
INT_MAX = np.iinfo(np.int64).max
FLOAT_ONLY = "keep_float_"   # node-name prefix: nodes whose inputs span decades (powers), which
                             # int8 quantisation (export/quantize.py) must leave alone


def supports(net: nn.Module) -> bool:
    """Whether this builder handles `net`: a causal RotRNNClassifier on the logmel front-end."""
    cfg = getattr(net, "cfg", None)
    return (getattr(cfg, "reads_pixels", False) and not cfg.bidirectional
            and hasattr(net, "blocks"))


class Graph:
    """Nodes and constants with unique names; `op` returns its output name(s)."""

    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0

    def const(self, value, name: str, dtype=np.float32) -> str:
        name = f"{name}_{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def ints(self, values, name: str = "shape") -> str:
        return self.const(np.asarray(values, np.int64), name, np.int64)

    def op(self, op_type: str, inputs: list[str], outputs: int = 1, prefix: str = "", **attrs):
        self.count += 1
        names = [f"{op_type.lower()}_{self.count}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=f"{prefix}{op_type}_{self.count}", **attrs))
        return names[0] if outputs == 1 else names


def f64(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().cpu().numpy()


# -- the constants ------------------------------------------------------------------------------
def frontend_constants(net) -> dict[str, np.ndarray]:
    """The DFT basis, the mel matrix with c = e^(b/a) folded in, and the projection with the
    pixel scale a and the normalisation (pixel − μ)/σ folded in."""
    fe = net.frontend
    logmel = fe.logmel
    mel = f64(logmel.mel) * math.exp(PIXEL_OFFSET / PIXEL_SLOPE)            # (bins, N_MELS)
    W, b = f64(fe.proj.weight), f64(fe.proj.bias)                            # (d, N_MELS), (d,)
    return {"basis": f64(logmel.basis),                                     # (2·bins, 1, FRAME)
            "mel": np.concatenate([mel, mel]),                               # re² and im² rows
            "clip_max": np.array(math.exp(PIXEL_MAX / PIXEL_SLOPE)),
            "proj": (W * PIXEL_SLOPE / PIXEL_STD).T,                         # (N_MELS, d)
            "proj_bias": b - PIXEL_MEAN / PIXEL_STD * W.sum(1)}


def recurrence_kernel(log_mag: np.ndarray, angle: np.ndarray, frames: int) -> np.ndarray:
    """(K, 2(frames + 1), 2·frames): row (p, q'), column (t, q) holds the real block of
    λ^(t + 1 − p) for p ≤ t + 1 (p = 0: the carried state; p = s + 1: input step s)."""
    K = log_mag.shape[0]
    p = np.arange(frames + 1)[:, None]
    t = np.arange(frames)[None, :]
    e = t + 1 - p                                                            # (frames + 1, frames)
    causal = e >= 0
    e = np.where(causal, e, 0)
    mag = np.exp(e[None] * log_mag[:, None, None]) * causal                  # (K, P, T)
    re, im = mag * np.cos(e[None] * angle[:, None, None]), mag * np.sin(e[None] * angle[:, None, None])
    W = np.zeros((K, frames + 1, 2, frames, 2))
    W[:, :, 0, :, 0], W[:, :, 0, :, 1] = re, im          # (a + ib)(r + is) = (ar − bs) + i(as + br)
    W[:, :, 1, :, 0], W[:, :, 1, :, 1] = -im, re
    return W.reshape(K, 2 * (frames + 1), 2 * frames)


def layer_constants(rnn, frames: int) -> dict[str, np.ndarray]:
    """v = u Bᵀ with B = ξPᵀB (2K, d) re/im interleaved; y = z Cᵀ with C = CP (d, 2K); D; the
    kernel (recurrence_kernel). All from a float64 copy of the layer, nothing frozen."""
    twin = copy.deepcopy(rnn).double()
    twin.frozen = twin.frozen_maps = twin.reverse = None
    with torch.no_grad():
        _, Bt, Ct = twin._maps()
        log_mag, angle = twin._lambda()
    d = Bt.shape[-1]
    out = {"B": f64(Bt).reshape(-1, d).T,                                   # (d, 2K)
           "C": f64(Ct).reshape(d, -1).T,                                    # (2K, d)
           "W": recurrence_kernel(f64(log_mag), f64(angle), frames)}
    if rnn.D is not None:
        out["D"] = f64(rnn.D)
    return out


# -- the graph ----------------------------------------------------------------------------------
def frontend(g: Graph, net, audio: str, tail: str) -> tuple[str, str]:
    """audio (B, 1, S), tail (B, 1, FRAME − HOP) → h (B, L, d) and the new tail."""
    c = frontend_constants(net)
    x = g.op("Concat", [tail, audio], axis=2)                                # (B, 1, tail + S)
    spec = g.op("Conv", [x, g.const(c["basis"], "dft_basis")],
                strides=[net.cfg.frontend_stride])                           # (B, 2·bins, L)
    square = g.op("Transpose", [g.op("Mul", [spec, spec])], perm=[0, 2, 1])  # (B, L, 2·bins)
    power = g.op("MatMul", [square, g.const(c["mel"], "mel")], prefix=FLOAT_ONLY)   # (B, L, N_MELS)·c
    clipped = g.op("Clip", [power, g.const(1.0, "one"), g.const(c["clip_max"], "clip_max")])
    h = g.op("MatMul", [g.op("Log", [clipped]), g.const(c["proj"], "proj")])
    h = g.op("Add", [h, g.const(c["proj_bias"], "proj_bias")])              # (B, L, d)
    new_tail = g.op("Slice", [x, g.ints([-net.frontend.tail]), g.ints([INT_MAX]), g.ints([2])])
    return h, new_tail


def layer_norm(g: Graph, x: str, norm: nn.LayerNorm) -> str:
    return g.op("LayerNormalization", [x, g.const(f64(norm.weight), "ln_w"), g.const(f64(norm.bias), "ln_b")],
                axis=-1, epsilon=norm.eps)


def gelu(g: Graph, x: str) -> str:
    """x·(1 + erf(x/√2))·0.5, the exact GELU, in the node order onnxruntime fuses into one."""
    erf = g.op("Erf", [g.op("Div", [x, g.const(math.sqrt(2), "sqrt2")])])
    return g.op("Mul", [g.op("Mul", [x, g.op("Add", [erf, g.const(1.0, "one")])]), g.const(0.5, "half")])


def block(g: Graph, blk, h: str, z0: str, frames: int, pad: str, two_L: str) -> tuple[str, str]:
    """One block: h (B, L, d), z0 (B, 1, 2K) → (h out, z out (B, 1, 2K))."""
    c = layer_constants(blk.rnn, frames)
    K2 = c["B"].shape[1]
    u = layer_norm(g, h, blk.norm)
    v = g.op("MatMul", [u, g.const(c["B"], "B")])                            # (B, L, 2K)
    V = g.op("Concat", [z0, v], axis=1)                                      # (B, L + 1, 2K)
    V = g.op("Reshape", [V, g.ints([0, 0, K2 // 2, 2])])                     # (B, L + 1, K, 2)
    V = g.op("Reshape", [g.op("Transpose", [V], perm=[2, 0, 1, 3]), g.ints([0, 0, -1])])  # (K, B, 2L+2)
    V = g.op("Pad", [V, pad])                                                # (K, B, 2·max + 2)
    z = g.op("MatMul", [V, g.const(c["W"], "W")])                            # (K, B, 2·max)
    z = g.op("Slice", [z, g.ints([0]), two_L, g.ints([2])])                  # (K, B, 2L)
    z = g.op("Reshape", [z, g.ints([0, 0, -1, 2])])                          # (K, B, L, 2)
    z = g.op("Reshape", [g.op("Transpose", [z], perm=[1, 2, 0, 3]), g.ints([0, 0, -1])])   # (B, L, 2K)
    z_out = g.op("Slice", [z, g.ints([-1]), g.ints([INT_MAX]), g.ints([1])])  # (B, 1, 2K)
    y = g.op("MatMul", [z, g.const(c["C"], "C")])                            # (B, L, d)
    if "D" in c:                                                             # + D ⊙ u
        y = g.op("Add", [y, g.op("Mul", [u, g.const(c["D"], "D")])])
    y = gelu(g, y)
    gate = g.op("Add", [g.op("MatMul", [y, g.const(f64(blk.gate.weight).T, "gate_w")]),
                        g.const(f64(blk.gate.bias), "gate_b")])
    y = g.op("Mul", [y, g.op("Sigmoid", [gate])])
    return g.op("Add", [h, y]), z_out


def pooling(g: Graph, net, h: str, p0: str, frames: int, L: str) -> str:
    """p_L = α^L p_0 + Σ_t (1 − α) α^(L−1−t) h_t with the weights of the last L of max frames;
    p_0 and p_L (B, 1, d)."""
    alpha = net.pool_decay
    e = np.arange(frames - 1, -1, -1, dtype=np.float64)
    weights = g.const(((1 - alpha) * alpha ** e)[None], "ema_weights")      # (1, max frames)
    w = g.op("Slice", [weights, g.op("Neg", [L]), g.ints([INT_MAX]), g.ints([1])])   # (1, L)
    pooled = g.op("MatMul", [w, h])                                          # (B, 1, d)
    decay = g.const(alpha ** np.arange(0, frames + 1, dtype=np.float64), "ema_decay")  # α^0 … α^max
    decay_L = g.op("Gather", [decay, g.op("Squeeze", [L, g.ints([0])])])
    return g.op("Add", [pooled, g.op("Mul", [p0, decay_L])])


def build(net, max_samples: int) -> onnx.ModelProto:
    """The streaming graph of `net` (see `supports`) for calls of up to max_samples."""
    cfg, g = net.cfg, Graph()
    frames = max_samples // cfg.frontend_stride
    sizes = [size for _, size in net.state_layout()]
    state = g.op("Unsqueeze", ["state", g.ints([1])])                        # (B, 1, state_size)
    parts = g.op("Split", [state, g.ints(sizes, "split")], outputs=len(sizes), axis=2)
    # L, 2L and the pads that bring [state | L steps] to the kernels' max frames, computed once
    L = g.op("Div", [g.op("Slice", [g.op("Shape", ["audio"]), g.ints([1]), g.ints([2])]),
                     g.ints([cfg.frontend_stride])])                       # (1,) int64
    two_L = g.op("Mul", [L, g.ints([2])])
    pad = g.op("Concat", [g.ints([0, 0, 0, 0, 0]), g.op("Sub", [g.ints([2 * frames]), two_L])], axis=0)
    h, tail = frontend(g, net, g.op("Unsqueeze", ["audio", g.ints([1])]), parts[0])
    states = [tail]
    for blk, z0 in zip(net.blocks, parts[1:-1]):
        h, z = block(g, blk, h, z0, frames, pad, two_L)
        states.append(z)
    pooled = pooling(g, net, h, parts[-1], frames, L)
    states.append(pooled)
    logits = g.op("Add", [g.op("MatMul", [layer_norm(g, pooled, net.norm), g.const(f64(net.head.weight).T, "head_w")]),
                          g.const(f64(net.head.bias), "head_b")])                 # (B, 1, classes)
    squeeze = g.ints([1], "axis")
    g.nodes.append(helper.make_node("Squeeze", [g.op("Softmax", [logits], axis=-1), squeeze], ["scores"],
                                    name="Squeeze_scores"))
    g.nodes.append(helper.make_node("Squeeze", [g.op("Concat", states, axis=2), squeeze], ["state_out"],
                                    name="Squeeze_state_out"))
    n_classes, size = cfg.n_classes, net.state_size
    graph = helper.make_graph(
        g.nodes, "rotkws_stream",
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", "samples"]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, ["batch", size])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", n_classes]),
         helper.make_tensor_value_info("state_out", TensorProto.FLOAT, ["batch", size])],
        g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model
