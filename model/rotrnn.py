"""The RotRNN layer (Biegun et al., "RotRNN: Modelling Long Sequences with Rotations").

Per head h (H heads, N = state / H, even):

    γ_h = exp(−exp(g_h))                         decay, one per head
    P_h = expm(M_h − M_hᵀ)                       orthogonal basis (N × N)
    Θ_h = blockdiag(R(θ_h,1) … R(θ_h,N/2))       2 × 2 rotations
    ξ_h = sqrt((1 − γ_h²) / tr(B_hᵀ B_h))        input normalisation: E‖x_t‖² = 1 for white u
    x_t = γ_h P_h Θ_h P_hᵀ x_{t−1} + ξ_h B_h u_t
    y_t = C · concat_h(x_t) + D ⊙ u_t

In the basis P_hᵀ each coordinate pair is one complex number multiplied by λ = γ_h e^{iθ}
every step, so the layer runs on the chunked complex-diagonal op of model/scan.py.
"""
import copy
import math

import torch
from torch import Tensor, nn

from .scan import ScanKernels, chunked_scan, n_chunks, scan_kernels


def init_log_neg_log_gamma(heads: int, gamma_min: float, gamma_max: float) -> Tensor:
    """g = log(−log γ), uniform between the values for γ_max and γ_min."""
    lo, hi = math.log(-math.log(gamma_max)), math.log(-math.log(gamma_min))
    return torch.empty(heads).uniform_(lo, hi)


class DiagonalRecurrence(nn.Module):
    """What RotRNN and LRU share: a linear recurrence that is complex-diagonal in some basis,
    run by the one chunked op. `layer(u, state) -> (y, state_out)`.

    u:     (B, L, d_model) float32
    state: (B, state) float32 in the λ basis (z = Pᵀx: the complex channels, (re, im) adjacent;
           ‖z‖ = ‖x‖), zeros if None
    y:     (B, L, d_model); state_out: (B, state), the state after the last step
           (None when bidirectional: a clip layer has no carried state).

    A subclass gives `_lambda()` (log|λ|, arg λ per complex channel) and `_maps()`: the basis P
    (H, N, N) of the state (None: the state is the channels themselves), the input map into the
    channels (H, N, d) and the output map out of them (d, H, N), pairs (re, im) adjacent.
    """

    def __init__(self, d_model: int, state: int, heads: int, *, bidirectional: bool, chunk: int):
        super().__init__()
        if state % heads or (state // heads) % 2:
            raise ValueError(f"state ({state}) must split into {heads} heads of even size")
        self.d_model, self.state_size, self.heads = d_model, state, heads
        self.N = state // heads
        self.bidirectional, self.chunk = bidirectional, chunk
        self.reverse: DiagonalRecurrence | None = None
        self.track_norm = False
        self.last_state_norm: Tensor | None = None
        self.frozen: ScanKernels | None = None
        self.frozen_maps: tuple[Tensor | None, Tensor, Tensor] | None = None

    def _lambda(self) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def _maps(self) -> tuple[Tensor | None, Tensor, Tensor]:
        raise NotImplementedError

    def recurrent_parameters(self) -> list[nn.Parameter]:
        raise NotImplementedError

    def kernels(self, length: int, dtype: torch.dtype) -> ScanKernels:
        if self.frozen is not None:
            if n_chunks(length, self.chunk) > self.frozen.max_chunks:
                raise ValueError(f"at most {self.frozen.max_chunks * self.chunk} steps per call "
                                 f"in a frozen layer, got {length}")
            return self.frozen
        return scan_kernels(*self._lambda(), self.chunk, n_chunks(length, self.chunk), dtype)

    def freeze(self, max_steps: int) -> None:
        """Compute the kernels and the maps once (float64 → float32) and keep them as
        constants, for export (an exported graph needs no matrix exponential)."""
        with torch.no_grad():
            self.frozen = scan_kernels(*self._lambda(), self.chunk, n_chunks(max_steps, self.chunk))
            twin = copy.deepcopy(self).double()
            twin.reverse = twin.frozen = twin.frozen_maps = None
            dtype = next(self.parameters()).dtype
            self.frozen_maps = tuple(None if m is None else m.to(dtype) for m in twin._maps())
        if self.reverse is not None:
            self.reverse.freeze(max_steps)

    def forward(self, u: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        y, state_out = self._scan(u, state)
        if self.reverse is None:
            return y, state_out
        if state is not None:
            raise ValueError("a bidirectional layer classifies whole clips: it takes no state")
        y_rev, _ = self.reverse._scan(u.flip(1), None)
        return y + y_rev.flip(1), None

    def _scan(self, u: Tensor, state: Tensor | None) -> tuple[Tensor, Tensor]:
        Bsz, L, d = u.shape
        H, N = self.heads, self.N
        K = H * N // 2                                              # complex channels
        _, Bt, Ct = self._maps()                                    # (H, N, d), (d, H, N)
        # into the λ basis, channel-major: v[k, q, b, t] = (Bt u_t)[pair k, re/im q]
        v = (Bt.reshape(2 * K, d) @ u.reshape(Bsz * L, d).T).view(K, 2, Bsz, L)
        c0 = None if state is None else state.view(Bsz, K, 2).permute(1, 2, 0)   # (K, 2, B)
        z, zT = chunked_scan(v, self.kernels(L, u.dtype), c0)       # (K, B, n, 2, C), (K, 2, B)
        if self.track_norm:                                         # ‖x_t‖ = ‖Pᵀ x_t‖ per head
            sq = z.detach().pow(2).view(H, N // 2, Bsz, -1, 2, self.chunk).sum((1, 4))
            self.last_state_norm = sq.reshape(H, Bsz, -1)[..., :L].sqrt().mean()
        y = torch.einsum("kbnqc,dkq->bncd", z, Ct.reshape(d, K, 2)).reshape(Bsz, -1, d)[:, :L]
        if self.D is not None:
            y = y + self.D * u
        return y, zT.permute(2, 0, 1).reshape(Bsz, H * N)


class RotRNN(DiagonalRecurrence):
    """A RotRNN layer: `layer(u, state) -> (y, state_out)` (DiagonalRecurrence's contract); its
    carried state is z = Pᵀx, x above in the basis where the recurrence is diagonal."""

    def __init__(self, d_model: int, state: int, heads: int, *, bidirectional: bool = False,
                 normalize_input: bool = True, chunk: int = 64, gamma_min: float = 0.9,
                 gamma_max: float = 0.999, max_phase: float = 2 * math.pi, skip: bool = True):
        super().__init__(d_model, state, heads, bidirectional=bidirectional, chunk=chunk)
        N = self.N
        self.normalize_input = normalize_input
        scale = 1 / math.sqrt(d_model + state)
        self.g = nn.Parameter(init_log_neg_log_gamma(heads, gamma_min, gamma_max))   # γ = exp(−exp(g))
        self.theta = nn.Parameter(torch.rand(heads, N // 2) * max_phase)            # θ ~ U[0, max_phase)
        self.M = nn.Parameter(torch.randn(heads, N, N))                             # P = expm(M − Mᵀ)
        self.B = nn.Parameter(torch.randn(heads, N, d_model) * scale)
        self.C = nn.Parameter(torch.randn(d_model, state) * scale)
        self.D = nn.Parameter(torch.randn(d_model)) if skip else None
        self.reverse = (RotRNN(d_model, state, heads, normalize_input=normalize_input, chunk=chunk,
                               gamma_min=gamma_min, gamma_max=gamma_max, max_phase=max_phase,
                               skip=False) if bidirectional else None)

    # -- the paper's quantities -------------------------------------------------------------
    @property
    def gamma(self) -> Tensor:
        return torch.exp(-torch.exp(self.g))                                         # (H,)

    def P(self) -> Tensor:
        return torch.linalg.matrix_exp(self.M - self.M.transpose(1, 2))             # (H, N, N)

    def xi(self) -> Tensor:
        if not self.normalize_input:
            return torch.ones_like(self.g)
        return torch.sqrt((1 - self.gamma ** 2) / self.B.pow(2).sum((1, 2)))       # (H,)

    def rotation(self) -> Tensor:
        """Θ: (H, N, N) block-diagonal 2 × 2 rotations."""
        c, s = torch.cos(self.theta), torch.sin(self.theta)                          # (H, N/2)
        R = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)      # (H, N/2, 2, 2)
        return torch.stack([torch.block_diag(*r) for r in R])

    def recurrent_parameters(self) -> list[nn.Parameter]:
        """B, C, D, γ (through g) and θ: the group the authors train with Adam, no weight decay."""
        own = [p for p in (self.B, self.C, self.D, self.g, self.theta) if p is not None]
        return own + (self.reverse.recurrent_parameters() if self.reverse is not None else [])

    # -- into the chunked op ----------------------------------------------------------------
    def _lambda(self) -> tuple[Tensor, Tensor]:
        """log|λ| and arg λ per complex channel, (K,) each with K = state / 2."""
        log_gamma = -torch.exp(self.g)
        return log_gamma.repeat_interleave(self.N // 2), self.theta.reshape(-1)

    def _maps(self) -> tuple[Tensor, Tensor, Tensor]:
        """P (H, N, N), ξ Pᵀ B (H, N, d) and C P (d, H, N): the maps into and out of the λ basis."""
        if self.frozen_maps is not None:
            return self.frozen_maps
        H, N = self.heads, self.N
        P = self.P()
        Bt = self.xi()[:, None, None] * P.transpose(1, 2) @ self.B                   # ξ Pᵀ B
        Ct = (self.C.view(-1, H, N).transpose(0, 1) @ P).transpose(0, 1)             # C P
        return P, Bt, Ct


def rotrnn_reference(layer: RotRNN, u: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """The same layer as a plain loop over time, for tests only (differentiable).

    1. A_h = γ_h P_h Θ_h P_hᵀ
    2. x_t = A_h x_{t−1} + ξ_h B_h u_t
    3. y_t = C x_t + D ⊙ u_t
    """
    return bidirectional_reference(_reference_loop, layer, u, state)


def bidirectional_reference(loop, layer: DiagonalRecurrence, u: Tensor, state: Tensor | None):
    """`loop(layer, u, state)` forward, plus `loop` over the reversed sequence in `layer.reverse`
    when the layer is bidirectional (then no state out): what `layer(u, state)` computes."""
    y, state_out = loop(layer, u, state)
    if layer.reverse is None:
        return y, state_out
    y_rev, _ = loop(layer.reverse, u.flip(1), None)
    return y + y_rev.flip(1), None


def _reference_loop(layer: RotRNN, u: Tensor, state: Tensor | None) -> tuple[Tensor, Tensor]:
    Bsz, L, _ = u.shape
    P = layer.P()
    A = layer.gamma[:, None, None] * P @ layer.rotation() @ P.transpose(1, 2)      # 1. (H, N, N)
    Bn = layer.xi()[:, None, None] * layer.B                                        # (H, N, d)
    x = (u.new_zeros(Bsz, layer.heads, layer.N) if state is None                     # x = P z
         else torch.einsum("hnm,bhm->bhn", P, state.view(Bsz, layer.heads, layer.N)))
    ys = []
    for t in range(L):
        x = torch.einsum("hnm,bhm->bhn", A, x) + torch.einsum("hnd,bd->bhn", Bn, u[:, t])  # 2.
        y = x.reshape(Bsz, -1) @ layer.C.T                                                   # 3.
        ys.append(y if layer.D is None else y + layer.D * u[:, t])
    return torch.stack(ys, 1), torch.einsum("hnm,bhn->bhm", P, x).reshape(Bsz, -1)  # z = Pᵀ x
