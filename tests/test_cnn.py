"""model/cnn.py and the arch dispatch: the log-mel front-end equals torchaudio's, the DS-CNN's
shapes and size, checkpoints that rebuild it, and the project's paths (train, eval, export, the
runtime) taking it as they take a RotRNN."""
import json

import lightning as L
import numpy as np
import onnx
import pytest
import torch
import yaml
from torchaudio.transforms import MelSpectrogram

from app.spotter import KeywordModel, KeywordSpotter
from conftest import CLIPS, REPO
from corpus.clips import read_audio
from export.onnx import export_onnx, read_metadata
from export.verify import TOLERANCE, open_session, run_onnx, run_torch
from model.classifiers import Recurrent, streams
from model import (DSCNN, CNNConfig, LogMel, RotRNNClassifier, RotRNNConfig, build_classifier,
                   checkpoint_payload, classifier_from_checkpoint, count_parameters)
from training.config import ConfigError, load_config
from training.module import KWSModule
from corpus.labels import KWS12_LABELS

LABELS = ("yes", "no", "up", "_unknown_", "_silence_")   # real words: tests/data/clips map onto them
SMALL = dict(labels=LABELS, channels=16, blocks=2, dropout=0.0)   # a DS-CNN that exports in seconds
CONFIG = REPO / "training" / "configs" / "dscnn_kws12.yaml"
TINY = REPO / "training" / "configs" / "tiny.yaml"


@pytest.fixture(scope="module")
def clips() -> list[np.ndarray]:
    return [read_audio(p)[0] for p in sorted(CLIPS.glob("*/*.wav"))]


def batch_of(clips, samples: int = 16_000) -> torch.Tensor:
    return torch.from_numpy(np.stack([np.pad(c[:samples], (0, max(0, samples - len(c)))) for c in clips]))


def calibrated(clips, **cfg) -> DSCNN:
    """A random-weight DS-CNN whose BatchNorm statistics come from the real clips, so its scores
    vary with the audio (with the initial statistics every clip scores nearly the same)."""
    torch.manual_seed(0)
    net = DSCNN(CNNConfig(**(SMALL | cfg)))
    for m in net.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.momentum = None                                       # a plain average over the batches
    with torch.no_grad():
        net.train()(batch_of(clips))
    return net.eval()


# -- the log-mel front-end ----------------------------------------------------------------------
def test_logmel_equals_torchaudio_on_real_clips(clips):
    """Same windows (400-sample periodic Hann, n_fft 400, hop 160, no centring), power 2, the
    HTK mel scale from 20 Hz to 8 kHz: max |Δ log-mel| ≤ 2e-4 against torchaudio in float64
    (measured 6e-5: our float32 basis) and ≤ 1e-3 against torchaudio in float32 (measured 3e-4,
    most of it torchaudio's own float32 rounding in quiet bins)."""
    ours = LogMel()
    ref = MelSpectrogram(16_000, n_fft=400, win_length=400, hop_length=160, f_min=20.0, f_max=8000.0,
                         n_mels=40, center=False, power=2.0)
    audio = batch_of(clips)
    feats = ours(audio)                                            # (B, T, 40)
    assert feats.shape == (len(clips), (16_000 - 400) // 160 + 1, 40)
    exact = torch.log(ref.double()(audio.double()).transpose(1, 2) + 1e-6)
    single = torch.log(ref.float()(audio).transpose(1, 2) + 1e-6)
    assert (feats.double() - exact).abs().max() <= 2e-4
    assert (feats - single).abs().max() <= 1e-3
    assert count_parameters(ours) == 0 and not list(ours.state_dict())   # fixed, rebuilt, not stored


def test_logmel_stays_float32_under_bf16_autocast(clips):
    """bf16-mixed training (the GPU default) must not round the DFT: its powers span decades."""
    audio = batch_of(clips[:4])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = LogMel()(audio)
    assert mixed.dtype == torch.float32 and torch.equal(mixed, LogMel()(audio))


# -- the network --------------------------------------------------------------------------------
def test_dscnn_m_has_about_130k_weights():
    net = DSCNN(CNNConfig(labels=KWS12_LABELS))
    n = count_parameters(net)
    print(f"DS-CNN-M, 12 classes: {n} weights")
    # band norm 2·40; stem 10·4·172 + 2·172 (BN); 4 × (9·172 + 172² + 2·2·172 (BNs)); head 172·12 + 12
    assert n == 2 * 40 + 40 * 172 + 2 * 172 + 4 * (9 * 172 + 172 * 172 + 4 * 172) + 172 * 12 + 12 == 136_660


@pytest.mark.parametrize("samples", [160, 320, 8_000, 16_000, 48_000])
def test_any_multiple_of_the_hop_gives_one_frame_per_hop_and_logits(samples):
    net = DSCNN(CNNConfig(**SMALL)).eval()
    audio = 0.1 * torch.randn(3, samples)
    assert net.features(audio).shape == (3, samples // 160, 40)
    logits, state = net(audio)
    assert logits.shape == (3, len(LABELS)) and state is None and torch.isfinite(logits).all()


def test_bad_input_and_state_are_refused():
    net = DSCNN(CNNConfig(**SMALL)).eval()
    for shape in [(2, 1000), (2, 0), (16_000,)]:
        with pytest.raises(ValueError, match="multiple of 160"):
            net(torch.zeros(shape))
    with pytest.raises(ValueError, match="takes no state"):
        net(torch.zeros(1, 160), torch.zeros(1, 0))


def test_the_classifier_contract_is_a_clip_models():
    """What training/module.py and export/ read from a network and its config."""
    net = DSCNN(CNNConfig(**SMALL))
    cfg = net.cfg
    assert (cfg.bidirectional, cfg.streaming, cfg.frontend_stride, cfg.sample_rate) == (True, False, 160, 16_000)
    assert cfg.n_classes == len(LABELS) and cfg.to_dict()["labels"] == list(LABELS)
    assert not isinstance(net, Recurrent) and not streams(net)     # no stubs to pretend otherwise
    rotrnn = build_classifier({"labels": LABELS, "d_model": 8, "state": 8, "heads": 2, "layers": 1})
    assert isinstance(rotrnn, Recurrent) and streams(rotrnn)


def test_spec_masks_apply_in_training_only():
    net = DSCNN(CNNConfig(**SMALL, mask_bands=6, mask_frames=10))
    audio = 0.1 * torch.randn(4, 16_000)
    torch.manual_seed(1)
    masked = net.train().features(audio)
    net.eval()
    assert torch.equal(net.features(audio), net.features(audio))
    assert (masked == 0).any() and not (net.features(audio) == 0).any()


# -- dispatch and checkpoints -------------------------------------------------------------------
def test_checkpoint_round_trip_rebuilds_the_dscnn_exactly(clips, tmp_path):
    from export.cli import load_checkpoint
    net = calibrated(clips)
    torch.save(checkpoint_payload(net, task="test"), tmp_path / "c.ckpt")
    ckpt = torch.load(tmp_path / "c.ckpt", weights_only=True)
    assert ckpt["rotkws"]["config"]["arch"] == "dscnn"
    loaded = classifier_from_checkpoint(ckpt).eval()
    assert isinstance(loaded, DSCNN) and loaded.cfg == net.cfg
    audio = batch_of(clips[:6])
    assert torch.equal(loaded(audio)[0], net(audio)[0])
    exported_net, entry = load_checkpoint(tmp_path / "c.ckpt")
    assert isinstance(exported_net, DSCNN) and not exported_net.training and entry["task"] == "test"


def test_a_config_without_arch_is_a_rotrnn():
    cfg = dict(labels=["a", "b"], d_model=8, state=8, heads=2, layers=1)
    assert isinstance(build_classifier(cfg), RotRNNClassifier)
    net = RotRNNClassifier(RotRNNConfig(**cfg))
    payload = checkpoint_payload(net)
    assert payload["rotkws"]["config"]["arch"] == "rotrnn"
    del payload["rotkws"]["config"]["arch"]                         # a checkpoint from before arch
    assert isinstance(classifier_from_checkpoint(payload), RotRNNClassifier)
    with pytest.raises(ValueError, match="arch must be rotrnn or dscnn, got 'cnn'"):
        build_classifier(cfg | {"arch": "cnn"})


def test_config_keys_are_checked_against_the_chosen_arch():
    cfg = load_config(CONFIG)
    assert cfg.model["arch"] == "dscnn" and cfg.augment.preroll_prob == 0.0
    peer = load_config(REPO / "training" / "configs" / "kws12_cpu.yaml")     # the RotRNN it is compared with
    assert (cfg.data, cfg.optim) == (peer.data, peer.optim)
    on_pixels = load_config(REPO / "training" / "configs" / "dscnn_logmel.yaml")   # the peer of kws12.yaml
    default = load_config(REPO / "training" / "configs" / "kws12.yaml")
    assert (on_pixels.data, on_pixels.optim) == (default.data, default.optim)
    assert on_pixels.model["frontend"] == default.model["frontend"] == "logmel"
    with pytest.raises(ConfigError, match=r"'model.d_model': model \(arch dscnn\) has arch, "):
        load_config(CONFIG, {"model.d_model": "8"})
    with pytest.raises(ConfigError, match="model.arch: expected rotrnn or dscnn, got 'cnn'"):
        load_config(CONFIG, {"model.arch": "cnn"})
    with pytest.raises(ConfigError, match=r"'model.n_mels': model \(arch rotrnn\)"):
        load_config(CONFIG, {"model.arch": "rotrnn"})
    with pytest.raises(ConfigError, match="model.channels: expected a number"):
        load_config(CONFIG, {"model.channels": "wide"})


def test_the_module_trains_a_dscnn_with_an_empty_recurrent_group():
    cfg = load_config(CONFIG)
    module = KWSModule({**cfg.model, "labels": list(KWS12_LABELS)}, vars(cfg.optim), vars(cfg.augment))
    assert isinstance(module.net, DSCNN) and count_parameters(module.net) == 136_660
    assert module.net.cfg.mask_bands == 6 and module.net.cfg.mask_frames == 10


# -- the project's paths: train, eval, export, the runtime --------------------------------------
def tiny_dscnn_config(path) -> str:
    """tiny.yaml with a small DS-CNN for its model and no pre-roll."""
    tree = yaml.safe_load(TINY.read_text())
    tree["model"] = {"arch": "dscnn", "channels": 16, "blocks": 2, "dropout": 0.0}
    tree["augment"] = {"preroll_prob": 0.0}
    path.write_text(yaml.safe_dump(tree))
    return path


@pytest.mark.slow      # 6 Lightning steps and an evaluation: ~10 s on 2 shared cores
def test_train_writes_a_checkpoint_that_eval_reads(tmp_path, capsys):
    from test_training import copy_clips, tiny_overrides
    from rotkws import eval_cli
    from training import cli
    root = copy_clips(tmp_path / "data")
    config = tiny_dscnn_config(tmp_path / "tiny_dscnn.yaml")
    cfg = load_config(config, tiny_overrides(tmp_path / "run", root, trainer__max_steps=6, trainer__max_epochs=5))
    start = {}

    class Record(L.Callback):
        def on_train_start(self, trainer, module):
            start.update({k: v.clone() for k, v in module.net.state_dict().items()})

    module = cli.train(cfg, callbacks=[Record()])
    assert isinstance(module.net, DSCNN) and module.trainer.global_step == 6
    assert any(not torch.equal(v, start[k]) for k, v in module.net.state_dict().items())
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert torch.load(ckpt, weights_only=True)["rotkws"]["config"]["arch"] == "dscnn"
    assert eval_cli.main(["--checkpoint", str(ckpt), "--data", str(CLIPS), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["n"] == 24 and set(result["per_class"]) == set(KWS12_LABELS)


@pytest.fixture(scope="module")
def exported(clips, tmp_path_factory):
    net = calibrated(clips)
    path = export_onnx(net, tmp_path_factory.mktemp("dscnn") / "dscnn.onnx", clips=clips[:8],
                       meta={"training_data": "random weights (tests)"})
    return net, path


@pytest.mark.slow      # the export: ~10 s on 2 shared cores
def test_export_is_a_clip_model_with_its_metadata(exported):
    net, path = exported
    proto = onnx.load(path)
    meta = read_metadata(proto)
    assert (meta["arch"], json.loads(meta["streaming"]), meta["input_multiple"], meta["max_samples"]) == \
        ("dscnn", False, "160", "16000")
    assert json.loads(meta["inputs"]) == ["audio"] and meta["state_size"] == "0"
    assert json.loads(meta["config"]) == net.cfg.to_dict()
    ops = {n.op_type for n in proto.graph.node}
    assert not ops & {"Loop", "Scan", "If", "STFT", "DFT"} and {"Conv", "MatMul", "Log"} <= ops
    report = json.loads(meta["export"])["verified_max_abs_diff"]
    assert report["random"] <= TOLERANCE and report["clips"] <= TOLERANCE and report["stream"] is None


@pytest.mark.slow
def test_onnxruntime_agrees_with_torch_on_real_clips_and_lengths(exported, clips):
    net, path = exported
    session = open_session(path)
    audio = batch_of(clips).numpy()
    ours, ref = run_onnx(session, audio, None)[0], run_torch(net, audio, None)[0]
    assert np.abs(ours - ref).max() <= TOLERANCE and (ours.argmax(1) == ref.argmax(1)).all()
    assert ref.std(0).max() > 1e-3                           # the scores do depend on the audio
    rng = np.random.default_rng(0)
    for frames in (1, 2, 7, 50, 99, 100):
        x = (0.1 * rng.standard_normal((2, frames * 160))).astype(np.float32)
        assert np.abs(run_onnx(session, x, None)[0] - run_torch(net, x, None)[0]).max() <= TOLERANCE


@pytest.mark.slow
def test_the_spotter_runs_it_on_a_sliding_window(exported, clips):
    _, path = exported
    model = KeywordModel(path)
    assert (model.streaming, model.hop_samples, model.max_samples, model.labels) == (False, 1600, 16_000, LABELS)
    audio = np.concatenate([np.pad(c[:16_000], (0, max(0, 16_000 - len(c)))) for c in clips[4:7]])   # 3 s
    result = KeywordSpotter(model).process(audio, 16_000)
    assert result.scores.shape == (30, len(LABELS)) and np.allclose(result.scores.sum(1), 1, atol=1e-5)
    np.testing.assert_allclose(result.times, np.arange(1, 31) * 0.1)
    np.testing.assert_allclose(result.scores[-1], model.clip_scores(audio[-16_000:]), atol=1e-6)
    window = np.concatenate([np.zeros(16_000 - 4800, np.float32), audio[:4800]])
    np.testing.assert_allclose(result.scores[2], model.clip_scores(window), atol=1e-6)


def test_dscnn_on_the_corpus_pixels_reads_audio_and_pixels_alike():
    """frontend "logmel": forward(audio) = forward_features(the pixels of [320 zeros | audio])."""
    from model.logmel import FRAME, HOP, LogMelPixels
    torch.manual_seed(0)
    net = DSCNN(CNNConfig(labels=tuple("abc"), frontend="logmel", channels=8, blocks=1)).eval()
    assert net.cfg.reads_pixels and net.cfg.frontend_stride == HOP and net.cfg.window == FRAME
    audio = torch.randn(2, 16_000) * 0.1
    with torch.no_grad():
        pixels = LogMelPixels()(torch.nn.functional.pad(audio, (FRAME - HOP, 0)))
        assert torch.equal(net(audio)[0], net.forward_features(pixels)[0])
    with pytest.raises(ValueError, match="40 bands"):
        CNNConfig(frontend="logmel", n_mels=32)
    with pytest.raises(ValueError, match="needs the logmel front-end"):
        DSCNN(CNNConfig(labels=("a", "b"), channels=8, blocks=1)).forward_features(pixels)
