"""The LRU (the reviewers' comparison) on the same chunked op: exact against a complex loop,
its γ normalisation, streaming and export in the same block as RotRNN."""
import math

import numpy as np
import pytest
import torch

from model import RotRNNClassifier, RotRNNConfig
from model.lru import LRU, lru_reference


def make_lru(seed=0, d_model=8, state=16, **kw) -> LRU:
    torch.manual_seed(seed)
    return LRU(d_model, state, **kw)


@pytest.mark.parametrize("length,chunk", [(64, 16), (257, 32), (1, 8), (500, 7)])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_chunked_lru_matches_complex_loop_outputs_and_gradients(length, chunk, bidirectional):
    layer = make_lru(chunk=chunk, bidirectional=bidirectional, r_min=0.5, r_max=0.9999).double()
    torch.manual_seed(1)
    u = torch.randn(3, length, 8, dtype=torch.float64)
    x0 = None if bidirectional else torch.randn(3, 16, dtype=torch.float64)
    y, s = layer(u, x0)
    y_ref, s_ref = lru_reference(layer, u, x0)
    torch.testing.assert_close(y, y_ref, rtol=1e-9, atol=1e-9)
    if not bidirectional:
        torch.testing.assert_close(s, s_ref, rtol=1e-9, atol=1e-9)
    out, out_ref = y.square().sum(), y_ref.square().sum()
    g = torch.autograd.grad(out, layer.recurrent_parameters())
    g_ref = torch.autograd.grad(out_ref, layer.recurrent_parameters())
    for a, b in zip(g, g_ref):
        assert (a - b).abs().max() <= 1e-9 * b.abs().max()


def test_ring_initialisation_and_gamma_normalisation():
    layer = make_lru(state=512, r_min=0.9, r_max=0.999, max_phase=math.pi / 10)
    lam = layer.lam().detach()
    assert lam.abs().min() >= 0.9 - 1e-6 and lam.abs().max() <= 0.999 + 1e-6
    assert lam.angle().min() >= 0 and lam.angle().max() <= math.pi / 10 + 1e-6
    torch.testing.assert_close(layer.gamma().detach(), torch.sqrt(1 - lam.abs() ** 2))


@pytest.mark.parametrize("normalize,expect_unit", [(True, True), (False, False)])
def test_gamma_keeps_the_state_at_the_input_scale_for_white_noise(normalize, expect_unit):
    """E|x_k|² = γ_k² E|(Bu)_k|² / (1 − |λ_k|²) = E|(Bu)_k|² with γ on; ≫ it at |λ| → 1 without."""
    layer = make_lru(d_model=16, state=64, r_min=0.99, r_max=0.999, normalize_input=normalize)
    torch.manual_seed(3)
    u = torch.randn(8, 4000, 16)
    with torch.no_grad():
        _, x = layer(u)
    x = torch.view_as_complex(x.view(8, 32, 2))
    per_channel_input = (torch.complex(layer.B[:, 0], layer.B[:, 1]).abs() ** 2).sum(1).detach()
    ratio = float((x.abs() ** 2).mean(0).sum() / per_channel_input.sum())
    assert (0.7 < ratio < 1.3) if expect_unit else ratio > 20


def test_lru_network_streams_one_call_equals_uneven_pieces_and_trains_its_own_group():
    torch.manual_seed(6)
    cfg = RotRNNConfig(labels=tuple("abcde"), d_model=16, state=16, heads=4, layers=2, dropout=0.0,
                       layer="lru", frontend="filterbank", frontend_stride=160, frontend_kernel=400,
                       frontend_filters=16, frontend_norm="batch", chunk=16)
    net = RotRNNClassifier(cfg).eval()
    assert all(isinstance(b.rnn, LRU) for b in net.blocks)
    names = {n.rsplit(".", 1)[-1] for n, p in net.named_parameters()
             if id(p) in {id(q) for q in net.recurrent_parameters()}}
    assert names == {"nu_log", "theta_log", "gamma_log", "B", "C", "D"}
    audio = torch.randn(2, 16_000) * 0.1
    cuts = [0, 160, 1600, 1760, 9600, 16_000]
    with torch.no_grad():
        whole, s_whole = net(audio)
        state = net.initial_state(2)
        for a, b in zip(cuts, cuts[1:]):
            logits, state = net(audio[:, a:b], state)
    assert (logits - whole).abs().max() <= 1e-5
    assert (state - s_whole).abs().max() <= 1e-5


def test_config_rejects_an_unknown_layer():
    with pytest.raises(ValueError, match="layer must be rotrnn or lru"):
        RotRNNConfig(labels=("a",), layer="gru")


@pytest.mark.slow
def test_lru_network_exports_and_streams_in_onnxruntime(tmp_path):
    from app.spotter import KeywordModel
    from export.onnx import export_onnx
    torch.manual_seed(7)
    cfg = RotRNNConfig(labels=("yes", "no", "_unknown_"), d_model=16, state=16, heads=4, layers=1,
                       dropout=0.0, layer="lru", frontend="filterbank", frontend_stride=160,
                       frontend_kernel=400, frontend_filters=16, frontend_norm="batch", chunk=16)
    net = RotRNNClassifier(cfg).eval()
    path = export_onnx(net, tmp_path / "lru.onnx", max_samples=16_000)   # verified against torch
    model = KeywordModel(path)
    audio = (0.1 * np.random.default_rng(0).standard_normal((1, 16_000))).astype(np.float32)
    state = model.initial_state()
    for start in range(0, 16_000, 1600):
        scores, state = model.run(audio[:, start:start + 1600], state)
    with torch.no_grad():
        expected = torch.softmax(net(torch.from_numpy(audio))[0], -1).numpy()
    assert np.abs(scores - expected).max() <= 1e-4
