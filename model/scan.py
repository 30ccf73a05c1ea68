"""The one chunked op: a complex-diagonal linear recurrence with no loop over time.

For K independent complex channels with λ_k = γ_k · e^{iθ_k}:

    c_t = λ ⊙ c_{t-1} + v_t,        c_{-1} = c0

computed in real arithmetic (re/im pairs: ONNX has no complex tensors) in two levels:

1. inside each chunk of C steps, from a zero state, one GEMM per channel:
   the chunks as rows [v_re | v_im] (n_chunks × 2C) times the real block kernel
   [[Kr, Ki], [-Ki, Kr]] with K[s, t] = λ^(t-s) for s ≤ t;
2. across chunks, the state entering chunk c, Σ_{j≤c} λ^{C(c-j)} E_j over E = [c0, e_0 … e_{n-2}]
   (e_j: chunk j's local end state), as a second GEMM with an n × n Toeplitz kernel;
3. each step then adds λ^(t+1) ⊙ (state entering its chunk).

Every power is λ^e = exp(e·log γ)·(cos eθ, sin eθ) from a relative exponent e ≥ 0, never a
ratio of cumulative products (those under/overflow to NaN in float32 over 16,000 steps), and
is computed in float64. The same kernels serve training (rebuilt from the parameters each
step, with gradients) and export (built once, stored as constants).
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


def decay_powers(log_gamma: Tensor, theta: Tensor, exponents: Tensor) -> tuple[Tensor, Tensor]:
    """λ^e per channel. log_gamma, theta: (K,); exponents: any shape E of integers ≥ 0.

    Returns (re, im), each of shape (K, *E), in the dtype of log_gamma.
    """
    e = exponents.to(log_gamma.dtype)
    shape = (-1,) + (1,) * e.dim()
    mag = torch.exp(e * log_gamma.reshape(shape))   # |λ|^e ≤ 1: underflows to 0, never to NaN
    angle = e * theta.reshape(shape)
    return mag * torch.cos(angle), mag * torch.sin(angle)


def _block(re: Tensor, im: Tensor) -> Tensor:
    """(K, a, b) re/im of a complex matrix W → (K, 2a, 2b) real [[Wr, Wi], [-Wi, Wr]],
    so that [x_re | x_im] @ block = [Re(xW) | Im(xW)]."""
    return torch.cat([torch.cat([re, im], 2), torch.cat([-im, re], 2)], 1)


@dataclass
class ScanKernels:
    """Everything the chunked op needs from λ, for one chunk size and at most `max_chunks`."""

    chunk: int
    intra: Tensor   # (K, 2C, 2C) block kernel, K[s, t] = λ^(t-s), s ≤ t
    carry: Tensor   # (K, 2, 2C)  block [[Re, Im], [−Im, Re]] of λ^(t+1): the entering state → step t
    inter: Tensor   # (K, 2, n, 2, n) block Toeplitz kernel, W[j, c] = λ^(C(c-j)), j ≤ c

    @property
    def max_chunks(self) -> int:
        return self.inter.shape[-1]


def _toeplitz_block(log_gamma: Tensor, theta: Tensor, size: int, step: int, dtype: torch.dtype) -> Tensor:
    """(K, 2, size, 2, size) block form of W[s, t] = λ^(step·(t-s)) for s ≤ t, else 0.

    Only `size` distinct powers exist (a Toeplitz matrix): they are computed in float64, cast,
    then laid out by indexing, so the size² entries cost one gather, not size² exp/cos/sin.
    """
    re, im = decay_powers(log_gamma, theta, step * torch.arange(size, device=log_gamma.device))
    re, im = re.to(dtype), im.to(dtype)                                   # (K, size)
    idx = torch.arange(size, device=log_gamma.device)
    d = idx[None, :] - idx[:, None]                                       # (s, t) → t - s
    causal = (d >= 0).to(dtype)
    re, im = re[:, d.clamp(min=0)] * causal, im[:, d.clamp(min=0)] * causal
    return _block(re, im).view(re.shape[0], 2, size, 2, size)


def scan_kernels(log_gamma: Tensor, theta: Tensor, chunk: int, max_chunks: int,
                 dtype: torch.dtype = torch.float32) -> ScanKernels:
    """Build the op's kernels in float64 from log γ and θ (both (K,)), then cast to `dtype`.

    Differentiable in log_gamma and theta.
    """
    lg, th = log_gamma.double(), theta.double()
    K, C = lg.shape[0], chunk
    intra = _toeplitz_block(lg, th, C, 1, dtype).reshape(K, 2 * C, 2 * C)
    re, im = decay_powers(lg, th, torch.arange(1, C + 1, device=lg.device))
    carry = torch.stack([torch.cat([re, im], 1), torch.cat([-im, re], 1)], 1).to(dtype)
    inter = _toeplitz_block(lg, th, max_chunks, C, dtype)
    return ScanKernels(C, intra, carry, inter)


def n_chunks(length: int, chunk: int) -> int:
    # ceil as a floor of non-negatives: an exported graph's integer Div truncates, and
    # -(-L // C) would truncate to the wrong count
    return (length + chunk - 1) // chunk


def chunked_scan(v: Tensor, kernels: ScanKernels, c0: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """c_t = λ c_{t-1} + v_t over a whole sequence, no loop.

    v:  (K, 2, B, L) float: channel k's real [:, 0] and imaginary [:, 1] inputs; any L ≥ 1 with
        ceil(L / C) ≤ kernels.max_chunks (padded here, not by the caller)
    c0: (K, 2, B) initial state, zeros if None
    Returns c: (K, B, n, 2, C), the sequence cut into n = ceil(L / C) chunks (steps from L on are
    padding), and the final state c_{L-1}: (K, 2, B).
    """
    K, _, Bsz, L = v.shape
    C = kernels.chunk
    n = n_chunks(L, C)
    R = Bsz * n                                                           # rows: one per chunk
    x = F.pad(v, (0, n * C - L)).reshape(K, 2, R, C)
    # 1. local scans inside each chunk, from zero: [x_re | x_im] @ [[Kr, Ki], [-Ki, Kr]]
    local = torch.baddbmm(torch.bmm(x[:, 0], kernels.intra[:, :C]), x[:, 1], kernels.intra[:, C:])
    # 2. the state entering each chunk: [c0, e_0 … e_{n-2}] @ Toeplitz(λ^C)
    ends = local.view(K, Bsz, n, 2 * C)[..., C - 1 :: C]                # (K, B, n, 2) chunk-end states
    if c0 is None:
        c0 = v.new_zeros(K, 2, Bsz)
    E = torch.cat([c0.transpose(1, 2).unsqueeze(2), ends[:, :, : n - 1]], 2)          # (K, B, n, 2)
    W = kernels.inter[:, :, :n, :, :n].reshape(K, 2 * n, 2 * n)
    S = torch.bmm(E.transpose(2, 3).reshape(K, Bsz, 2 * n), W)                       # (K, B, [re n | im n])
    S = S.view(K, Bsz, 2, n).transpose(2, 3).reshape(K, R, 2)
    # 3. carry it to every step of its chunk: + [S_re, S_im] @ [[Re λ^(t+1), Im λ^(t+1)], [−Im, Re]]
    c = torch.baddbmm(local, S, kernels.carry).view(K, Bsz, n, 2, C)
    last = L - 1 - (n - 1) * C
    return c, c[:, :, n - 1, :, last].transpose(1, 2)
