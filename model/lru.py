"""The Linear Recurrent Unit (Orvieto et al., "Resurrecting Recurrent Neural Networks for Long
Sequences", 2023): the reviewers' comparison for RotRNN, in the same block, on the same op.

Per complex channel k (K = state / 2):

    λ_k = exp(−exp(ν_k) + i·exp(φ_k))            exponential parameterisation, |λ_k| < 1
    x_t = λ ⊙ x_{t−1} + γ ⊙ (B u_t)              γ_k = exp(γlog_k), initialised to √(1 − |λ_k|²)
    y_t = Re(C x_t) + D ⊙ u_t                    B: K × d, C: d × K complex

|λ| starts uniform on the ring [r_min, r_max] and arg λ in [0, max_phase): the paper's
initialisation. The state is the channels themselves (re, im adjacent): there is no basis P.
"""
import math

import torch
from torch import Tensor, nn

from .rotrnn import DiagonalRecurrence, bidirectional_reference


class LRU(DiagonalRecurrence):
    """`layer(u, state) -> (y, state_out)`, DiagonalRecurrence's contract. `normalize_input`
    switches the γ normalisation (fixed at 1 when off), as ξ's flag does for RotRNN."""

    def __init__(self, d_model: int, state: int, *, bidirectional: bool = False,
                 normalize_input: bool = True, chunk: int = 64, r_min: float = 0.9,
                 r_max: float = 0.999, max_phase: float = 2 * math.pi, skip: bool = True):
        super().__init__(d_model, state, 1, bidirectional=bidirectional, chunk=chunk)
        K = state // 2
        self.normalize_input = normalize_input
        u1, u2 = torch.rand(K), torch.rand(K)
        radius_sq = u1 * (r_max ** 2 - r_min ** 2) + r_min ** 2                    # |λ|² on the ring
        self.nu_log = nn.Parameter(torch.log(-0.5 * torch.log(radius_sq)))          # |λ| = exp(−exp(ν))
        self.theta_log = nn.Parameter(torch.log(max_phase * u2.clamp(min=1e-4)))    # arg λ = exp(φ)
        self.gamma_log = nn.Parameter(0.5 * torch.log(1 - radius_sq))               # √(1 − |λ|²)
        self.B = nn.Parameter(torch.randn(K, 2, d_model) / math.sqrt(2 * d_model))  # re, im
        self.C = nn.Parameter(torch.randn(d_model, K, 2) / math.sqrt(state))        # re, im
        self.D = nn.Parameter(torch.randn(d_model)) if skip else None
        self.reverse = (LRU(d_model, state, normalize_input=normalize_input, chunk=chunk, r_min=r_min,
                            r_max=r_max, max_phase=max_phase, skip=False) if bidirectional else None)

    def recurrent_parameters(self) -> list[nn.Parameter]:
        """ν, φ, γlog, B, C, D: trained like RotRNN's recurrent group (no weight decay)."""
        own = [p for p in (self.nu_log, self.theta_log, self.gamma_log, self.B, self.C, self.D)
               if p is not None]
        return own + (self.reverse.recurrent_parameters() if self.reverse is not None else [])

    def lam(self) -> Tensor:
        """λ as a complex (K,) tensor."""
        return torch.exp(torch.complex(-torch.exp(self.nu_log), torch.exp(self.theta_log)))

    def gamma(self) -> Tensor:
        return torch.exp(self.gamma_log) if self.normalize_input else torch.ones_like(self.gamma_log)

    def _lambda(self) -> tuple[Tensor, Tensor]:
        return -torch.exp(self.nu_log), torch.exp(self.theta_log)

    def _maps(self) -> tuple[None, Tensor, Tensor]:
        """No basis; γ ⊙ B (K, 2, d) into the channels; [Re C, −Im C] (d, K, 2) out of them, so
        that Re(C x) = Re C · Re x − Im C · Im x."""
        if self.frozen_maps is not None:
            return self.frozen_maps
        Bt = self.gamma()[:, None, None] * self.B
        Ct = self.C * torch.tensor([1.0, -1.0], dtype=self.C.dtype, device=self.C.device)
        return None, Bt, Ct


def lru_reference(layer: LRU, u: Tensor, state: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """The same layer as a complex loop over time, for tests only."""
    return bidirectional_reference(_loop, layer, u, state)


def _loop(layer: LRU, u: Tensor, state: Tensor | None) -> tuple[Tensor, Tensor]:
    Bsz, L, _ = u.shape
    lam = layer.lam()
    B = torch.complex(layer.B[:, 0], layer.B[:, 1]) * layer.gamma()[:, None]          # (K, d)
    C = torch.complex(layer.C[..., 0], layer.C[..., 1])                                 # (d, K)
    K = lam.shape[0]
    x = (torch.zeros(Bsz, K, dtype=lam.dtype) if state is None
         else torch.complex(*state.view(Bsz, K, 2).unbind(-1)))
    ys = []
    for t in range(L):
        x = lam * x + u[:, t].to(B.dtype) @ B.T
        y = (x @ C.T).real
        ys.append(y if layer.D is None else y + layer.D * u[:, t])
    return torch.stack(ys, 1), torch.view_as_real(x).reshape(Bsz, 2 * K)
