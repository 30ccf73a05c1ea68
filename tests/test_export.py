"""export/: the ONNX graph has no loop, describes itself, and computes what PyTorch computes —
on random and real audio, at every length it accepts, and streamed in uneven pieces."""
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from corpus.clips import read_audio
from conftest import CLIPS
from export.onnx import ExportError, check_no_loops, export_onnx, metadata, read_metadata
from export.quantize import quantize_int8, scan_kernel_nodes
from export.stream_graph import FLOAT_ONLY
from export.verify import TOLERANCE, VerificationError, open_session, run_onnx, run_torch, verify_export
from model import RotRNNClassifier, RotRNNConfig
from onnx_models import KINDS, LABELS, MAX_SAMPLES, META, build, exported

STREAMING = ("filterbank", "linear", "logmel")
REQUIRED = ("rotkws_version", "labels", "sample_rate", "state_shape", "state_size", "state_dtype",
            "state_layout", "input_multiple", "min_samples", "max_samples", "streaming", "config",
            "training_data", "accuracy", "detection", "export", "arch", "parameters")


@pytest.fixture(scope="session")
def models(request) -> dict:
    """kind → (network, verified ONNX path), exported once (see tests/onnx_models.py)."""
    cache = request.config.cache.mkdir("rotkws-onnx")
    return {kind: exported(kind, cache, **META) for kind in KINDS}


@pytest.fixture(scope="session")
def real_clips() -> list[np.ndarray]:
    return [read_audio(p)[0] for p in sorted(CLIPS.glob("*/*.wav"))]


def props(path) -> dict:
    return read_metadata(path)


@pytest.mark.parametrize("kind", list(KINDS))
def test_graph_has_no_loop_scan_or_if(models, kind):
    ops = {n.op_type for n in onnx.load(models[kind][1]).graph.node}
    assert not ops & {"Loop", "Scan", "If"}, ops
    assert "MatMul" in ops                                  # the scan is matmuls


def test_node_count_does_not_grow_with_the_longest_call(models, request):
    """A graph unrolled over chunks grows with max_samples; the chunked op's does not."""
    _, short = models["linear"]
    _, long = exported("linear", request.config.cache.mkdir("rotkws-onnx"), max_samples=2 * MAX_SAMPLES["linear"], **META)
    assert len(onnx.load(short).graph.node) == len(onnx.load(long).graph.node)
    assert json.loads(props(long)["export"])["nodes"] == len(onnx.load(long).graph.node)


def test_stream_graph_is_small_and_streams_a_second_exactly(models, real_clips):
    """The log-mel kind is built node by node (export/stream_graph.py): a bounded number of nodes
    per block, and 1 s of real audio in 100 ms calls equals PyTorch's one call on the second."""
    net, path = models["logmel"]
    graph = onnx.load(path).graph
    assert graph.name == "rotkws_stream"
    assert len(graph.node) <= 30 + 30 * net.cfg.layers
    session, hop = open_session(path), 1_600
    audio = np.stack([np.pad(c[:16_000], (0, max(0, 16_000 - len(c)))) for c in real_clips[:6]])
    state = net.initial_state(len(audio)).numpy()
    for start in range(0, 16_000, hop):
        scores, state = run_onnx(session, audio[:, start:start + hop], state)
    ref, ref_state = run_torch(net, audio, net.initial_state(len(audio)).numpy())
    assert np.abs(scores - ref).max() <= TOLERANCE
    np.testing.assert_allclose(state, ref_state, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("variant", [{"layer": "lru"}, {"normalize_input": False}])
def test_stream_graph_builds_the_ablations_verified(tmp_path, variant):
    """The bench's ablation arms (the LRU in RotRNN's place, ξ off) export as stream graphs too."""
    torch.manual_seed(0)
    net = RotRNNClassifier(RotRNNConfig(labels=LABELS, frontend="logmel", d_model=16, state=16, heads=4,
                                        layers=2, chunk=16, dropout=0.0, **variant)).eval()
    path = export_onnx(net, tmp_path / "ablation.onnx")
    assert onnx.load(path).graph.name == "rotkws_stream"
    report = json.loads(props(path)["export"])["verified_max_abs_diff"]
    assert report["random"] <= TOLERANCE and report["stream"] <= TOLERANCE


def test_check_no_loops_rejects_a_loop():
    body = onnx.helper.make_graph([], "body", [], [])
    loop = onnx.helper.make_node("Loop", ["n", "c"], [], body=body)
    graph = onnx.helper.make_graph([loop], "g", [], [])
    with pytest.raises(ExportError, match="Loop"):
        check_no_loops(onnx.helper.make_model(graph))


@pytest.mark.parametrize("kind", list(KINDS))
def test_metadata_says_everything_a_runtime_needs(models, kind):
    net, path = models[kind]
    meta = props(path)
    assert set(REQUIRED) <= set(meta), set(REQUIRED) - set(meta)
    assert all(isinstance(v, str) for v in meta.values())
    cfg = net.cfg
    assert json.loads(meta["labels"]) == list(LABELS)
    assert int(meta["sample_rate"]) == 16_000 and meta["state_dtype"] == "float32"
    assert int(meta["input_multiple"]) == int(meta["min_samples"]) == cfg.frontend_stride
    assert int(meta["max_samples"]) == MAX_SAMPLES[kind]
    assert json.loads(meta["config"]) == cfg.to_dict()
    assert int(meta["parameters"]) == sum(p.numel() for p in net.parameters())
    assert json.loads(meta["detection"]) == {"threshold": 0.9}
    assert meta["training_data"] == META["training_data"]
    layout = json.loads(meta["state_layout"])
    assert sum(seg["size"] for seg in layout) == int(meta["state_size"]) == net.state_size
    streaming = json.loads(meta["streaming"])
    assert streaming is (kind != "bidirectional")
    inputs = {i.name: i.shape for i in open_session(path).get_inputs()}
    if streaming:
        assert json.loads(meta["state_shape"]) == ["batch", net.state_size]
        assert inputs["state"][1] == net.state_size and set(inputs) == {"audio", "state"}
    else:
        assert set(inputs) == {"audio"} and json.loads(meta["state_shape"]) == [] and layout == []
    report = json.loads(meta["export"])["verified_max_abs_diff"]
    assert all(v is None or v <= TOLERANCE for k, v in report.items() if k != "lengths")


@pytest.mark.parametrize("kind", list(KINDS))
def test_matches_torch_on_random_audio_at_every_length(models, kind):
    """The lengths around one and two chunks (where the padding and the chunk count change) and
    16 spread up to max_samples, from a non-zero state, batch 3."""
    net, path = models[kind]
    session, stride, chunk = open_session(path), net.cfg.frontend_stride, net.cfg.chunk
    frames = MAX_SAMPLES[kind] // stride
    around = {1, 2, 3, chunk - 1, chunk, chunk + 1, 2 * chunk - 1, 2 * chunk, 2 * chunk + 1}
    lengths = sorted(f for f in around | set(np.linspace(chunk, frames, 16).astype(int).tolist()) if f <= frames)
    rng = np.random.default_rng(1)
    state = None if kind == "bidirectional" else run_torch(net, 0.1 * rng.standard_normal((3, 4 * stride), np.float32),
                                                          net.initial_state(3).numpy())[1]
    worst = 0.0
    for f in lengths:
        audio = (0.1 * rng.standard_normal((3, f * stride))).astype(np.float32)
        ours, ref = run_onnx(session, audio, state), run_torch(net, audio, state)
        worst = max(worst, float(np.abs(ours[0] - ref[0]).max()))
        if state is not None:
            np.testing.assert_allclose(ours[1], ref[1], rtol=1e-4, atol=1e-4)
    assert worst <= TOLERANCE


@pytest.mark.parametrize("kind", list(KINDS))
def test_matches_torch_on_real_clips(models, real_clips, kind):
    net, path = models[kind]
    n = MAX_SAMPLES[kind]
    audio = np.stack([np.pad(c[:n], (0, max(0, n - len(c)))) for c in real_clips])
    state = None if kind == "bidirectional" else net.initial_state(len(audio)).numpy()
    ours, ref = run_onnx(open_session(path), audio, state)[0], run_torch(net, audio, state)[0]
    assert np.abs(ours - ref).max() <= TOLERANCE
    assert (ours.argmax(1) == ref.argmax(1)).all()


@pytest.mark.parametrize("kind", STREAMING)
def test_one_call_equals_uneven_pieces_with_the_state_carried(models, real_clips, kind):
    net, path = models[kind]
    session, stride, n = open_session(path), net.cfg.frontend_stride, MAX_SAMPLES[kind]
    audio = np.stack([np.pad(c[:n], (0, max(0, n - len(c)))) for c in real_clips[:4]])
    cuts = sorted({int(f * n) // stride * stride for f in (0, 0.01, 0.013, 0.3, 0.31, 0.77, 0.999, 1)})
    state0 = net.initial_state(len(audio)).numpy()
    whole, whole_state = run_onnx(session, audio, state0)
    state = state0
    for a, b in zip(cuts, cuts[1:]):
        if b > a:
            scores, state = run_onnx(session, audio[:, a:b], state)
    assert np.abs(scores - whole).max() <= TOLERANCE
    assert np.abs(scores - run_torch(net, audio, state0)[0]).max() <= TOLERANCE
    np.testing.assert_allclose(state, whole_state, rtol=1e-4, atol=1e-5)


def test_verification_fails_loudly_on_a_wrong_graph(models, tmp_path):
    net, path = models["filterbank"]
    proto = onnx.load(path)
    head = next(i for i in proto.graph.initializer if i.name.endswith("head.bias"))
    bias = onnx.numpy_helper.to_array(head).copy()
    bias[0] += 0.01                                          # a small, wrong change
    head.CopyFrom(onnx.numpy_helper.from_array(bias, head.name))
    onnx.save(proto, tmp_path / "wrong.onnx")
    with pytest.raises(VerificationError, match="differs from PyTorch"):
        verify_export(net, tmp_path / "wrong.onnx")


def test_export_leaves_the_network_untouched_and_rejects_bad_lengths(tmp_path):
    net = build("filterbank")
    with pytest.raises(ExportError, match="multiple of the front-end stride"):
        export_onnx(net, tmp_path / "x.onnx", max_samples=1000)
    assert all(b.rnn.frozen is None for b in net.blocks)
    assert metadata(net, 16_000)["training_data"] == "unknown"     # no provenance given


@pytest.mark.parametrize("kind", ["filterbank", "logmel"])
def test_int8_keeps_metadata_and_float_scan_kernels(models, real_clips, tmp_path, kind):
    net, path = models[kind]
    proto = quantize_int8(path)
    q = tmp_path / "q.onnx"
    onnx.save(proto, q)
    ops = [n.op_type for n in proto.graph.node]
    assert "MatMulInteger" in ops or "DynamicQuantizeMatMul" in ops
    assert len(scan_kernel_nodes(proto)) == len(scan_kernel_nodes(onnx.load(path))) > 0
    if kind == "logmel":                            # the mel matrix (powers over decades) stays float
        assert any(n.op_type == "MatMul" and n.name.startswith(FLOAT_ONLY) for n in proto.graph.node)
    assert props(q)["labels"] == props(path)["labels"]
    n = MAX_SAMPLES[kind]
    audio = np.stack([np.pad(c[:n], (0, max(0, n - len(c)))) for c in real_clips])
    state = net.initial_state(len(audio)).numpy()
    scores = run_onnx(open_session(q), audio, state)[0]
    assert np.isfinite(scores).all() and np.allclose(scores.sum(1), 1, atol=1e-5)
    assert np.abs(scores - run_onnx(open_session(path), audio, state)[0]).max() < 0.05


def test_cli_int8_is_built_in_memory_and_written_once(models, tmp_path, monkeypatch, capsys):
    """`rotkws export --int8 --data`: the int8 file is written once, its accuracy already in its
    metadata (the float export is export_onnx's, tested above: a cached file stands in for it)."""
    import export.cli as cli
    from export.onnx import set_metadata
    from model import checkpoint_payload
    net, path = models["filterbank"]
    torch.save(checkpoint_payload(net, task="test"), tmp_path / "c.ckpt")

    def cached_export(net, out, *, measure=None, **_):
        proto = onnx.load(path)
        set_metadata(proto, {k: json.dumps(v) for k, v in measure(proto.SerializeToString()).items()})
        onnx.save(proto, out)
        return out

    writes, save = [], onnx.save
    def counted_save(proto, f, *args, **kwargs):
        writes.append(Path(f).name)
        return save(proto, f, *args, **kwargs)
    monkeypatch.setattr(cli, "export_onnx", cached_export)
    monkeypatch.setattr(onnx, "save", counted_save)
    monkeypatch.setattr(onnx, "save_model", counted_save)
    out = tmp_path / "m.onnx"
    assert cli.main([str(tmp_path / "c.ckpt"), "-o", str(out), "--data", str(CLIPS), "--int8"]) == 0
    assert [w for w in writes if (tmp_path / w).exists()] == ["m.onnx", "m.int8.onnx"]
    assert "vs float" in capsys.readouterr().out
    accuracy = json.loads(props(tmp_path / "m.int8.onnx")["accuracy"])
    assert accuracy["onnx_int8"]["accuracy"] == cli.onnx_accuracy(tmp_path / "m.int8.onnx", CLIPS, "all")["accuracy"]
    assert accuracy["onnx"]["n"] == 24
    assert props(tmp_path / "m.int8.onnx")["labels"] == props(path)["labels"]


@pytest.mark.slow      # a fresh export (not cached): 10–30 s on 2 shared cores
def test_cli_exports_a_checkpoint_verified_with_accuracy(tmp_path, capsys):
    from export.cli import main
    from model import checkpoint_payload
    net = build("linear")
    torch.save(checkpoint_payload(net, task="test", data=["clips"], metrics={"val/acc": 0.25}),
               tmp_path / "c.ckpt")
    out = tmp_path / "m.onnx"
    assert main([str(tmp_path / "c.ckpt"), "-o", str(out), "--max-samples", "3200",
                 "--data", str(CLIPS), "--int8"]) == 0
    printed = capsys.readouterr().out
    assert "verified against PyTorch" in printed and "vs float" in printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.ckpt", "m.int8.onnx", "m.onnx"]
    accuracy = json.loads(props(out)["accuracy"])
    assert accuracy["checkpoint"] == {"val/acc": 0.25} and accuracy["onnx"]["n"] == 24
    assert json.loads(props(out)["training_data"]) == ["clips"]


def test_cli_reports_a_missing_checkpoint(tmp_path, capsys):
    from export.cli import main
    assert main([str(tmp_path / "none.ckpt"), "-o", str(tmp_path / "m.onnx")]) == 1
    assert "does not exist" in capsys.readouterr().err
