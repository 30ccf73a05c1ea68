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
    carry: Tensor   # (K, 2, C)   re/im of λ^(t+1): how the state entering a chunk reaches step t
    inter: Tensor   # (K, 2, n, 2, n) block Toeplitz kernel, W[j, c] = λ^(C(c-j)), j ≤ c

    @property
    def max_chunks(self) -> int:
        return self.inter.shape[-1]


def _toeplitz_block(log_gamma: Tensor, theta: Tensor, size: int, step: int) -> Tensor:
    """(K, 2, size, 2, size) block form of W[s, t] = λ^(step·(t-s)) for s ≤ t, else 0."""
    idx = torch.arange(size, device=log_gamma.device)
    d = idx[None, :] - idx[:, None]                               # (s, t) → t - s
    re, im = decay_powers(log_gamma, theta, step * d.clamp(min=0))
    causal = (d >= 0).to(re.dtype)
    re, im = re * causal, im * causal
    K = re.shape[0]
    return _block(re, im).view(K, 2, size, 2, size)


def scan_kernels(log_gamma: Tensor, theta: Tensor, chunk: int, max_chunks: int,
                 dtype: torch.dtype = torch.float32) -> ScanKernels:
    """Build the op's kernels in float64 from log γ and θ (both (K,)), then cast to `dtype`.

    Differentiable in log_gamma and theta.
    """
    lg, th = log_gamma.double(), theta.double()
    K, C = lg.shape[0], chunk
    intra = _toeplitz_block(lg, th, C, 1).reshape(K, 2 * C, 2 * C)
    re, im = decay_powers(lg, th, torch.arange(1, C + 1, device=lg.device))
    carry = torch.stack([re, im], 1)
    inter = _toeplitz_block(lg, th, max_chunks, C)
    return ScanKernels(C, intra.to(dtype), carry.to(dtype), inter.to(dtype))


def n_chunks(length: int, chunk: int) -> int:
    return -(-length // chunk)


def chunked_scan(v: Tensor, kernels: ScanKernels, c0: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """c_t = λ c_{t-1} + v_t over a whole sequence, no loop.

    v:  (B, L, 2, K) float, [:, :, 0] real and [:, :, 1] imaginary parts; any L ≥ 1 with
        ceil(L / C) ≤ kernels.max_chunks (padded here, not by the caller)
    c0: (B, 2, K) initial state, zeros if None
    Returns c: (B, L, 2, K) and the final state c_{L-1}: (B, 2, K).
    """
    Bsz, L, _, K = v.shape
    C = kernels.chunk
    n = n_chunks(L, C)
    if c0 is None:
        c0 = v.new_zeros(Bsz, 2, K)
    # 1. local scans inside each chunk: (K, B·n, 2C) @ (K, 2C, 2C)
    x = F.pad(v, (0, 0, 0, 0, 0, n * C - L))                       # (B, nC, 2, K)
    x = x.reshape(Bsz, n, C, 2, K).permute(4, 0, 1, 3, 2)         # (K, B, n, 2, C)
    local = torch.bmm(x.reshape(K, Bsz * n, 2 * C), kernels.intra)
    local = local.reshape(K, Bsz, n, 2, C)
    # 2. the state entering each chunk: [c0, e_0 … e_{n-2}] @ Toeplitz(λ^C)
    ends = local[..., C - 1]                                       # (K, B, n, 2)
    E = torch.cat([c0.permute(2, 0, 1).unsqueeze(2), ends[:, :, : n - 1]], 2)
    W = kernels.inter[:, :, :n, :, :n].reshape(K, 2 * n, 2 * n)
    S = torch.bmm(E.transpose(2, 3).reshape(K, Bsz, 2 * n), W)    # (K, B, 2n)
    S = S.reshape(K, Bsz, 2, n, 1)
    # 3. carry it to every step of its chunk: λ^(t+1) ⊙ S
    pr, pi = kernels.carry[:, 0].reshape(K, 1, 1, C), kernels.carry[:, 1].reshape(K, 1, 1, C)
    sr, si = S[:, :, 0], S[:, :, 1]                                # (K, B, n, 1)
    out_re = local[:, :, :, 0] + sr * pr - si * pi                # (K, B, n, C)
    out_im = local[:, :, :, 1] + sr * pi + si * pr
    out = torch.stack([out_re, out_im], 3)                        # (K, B, n, 2, C)
    out = out.permute(1, 2, 4, 3, 0).reshape(Bsz, n * C, 2, K)[:, :L]
    return out, out[:, L - 1]
