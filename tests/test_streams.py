"""Stream training (training/streams.py, the network's frame_logits) and the calibration of the
detection rule (export/calibrate.py)."""
import json
import math

import numpy as np
import pytest
import torch

from app.detection import SMOOTHING_HOPS, moving_average
from app.spotter import DEFAULT_MODEL, KeywordModel, KeywordSpotter
from model.logmel import PIXEL_SLOPE
from model.network import RotRNNClassifier, RotRNNConfig
from training.streams import (CLEAN_SHARE, HARD_NEGATIVE_GAIN, HOP_FRAMES, IGNORE, KEYWORD_FRAMES, SETTLE_FRAMES,
                              UNKNOWN_TAIL_FRAMES, StreamPool, build_sequence, hard_weights, peak_loss,
                              StreamDataset, smoothed_probabilities, speech_span)

from test_training import TINY, as_argv, clip_root, tiny_overrides  # noqa: F401  (a fixture)

F = 40


def test_frame_logits_are_the_clip_logits_of_every_prefix():
    torch.manual_seed(0)
    cfg = RotRNNConfig(labels=("a", "b", "c"), frontend="logmel", d_model=32, state=32, heads=4, layers=2, chunk=16)
    net = RotRNNClassifier(cfg).eval()
    pixels = torch.rand(2, 300, F) * 255
    state = torch.randn(2, net.state_size) * 0.1
    frames, last = net.frame_logits(pixels, state)
    for t in (0, 5, 127, 128, 200, 299):                  # across the pooling's 128-frame blocks
        logits, after = net.forward_features(pixels[:, :t + 1], state)
        assert torch.allclose(frames[:, t], logits, atol=1e-5), t
    assert torch.allclose(last, after, atol=1e-5)


def clip(loud: tuple[int, int], level: float = 150.0, floor: float = 20.0, frames: int = 98) -> np.ndarray:
    x = np.full((frames, F), floor, np.float32)
    x[loud[0]:loud[1]] = level
    return x.astype(np.uint8)


def test_speech_span_finds_the_loud_frames():
    assert speech_span(clip((30, 61))) == (30, 61)
    assert speech_span(clip((0, 98))) == (0, 98)


def pool() -> StreamPool:
    keywords = np.stack([clip((30, 60)), clip((40, 80))])                 # labels 0 and 1
    others = np.stack([clip((20, 50))])
    noise = np.full((5000, F), 10, np.uint8)
    return StreamPool(keywords, np.array([0, 1]), others, np.stack([clip((0, 0), floor=10)]),
                      [clip((10, 150), frames=200)], noise, unknown=2, silence=3)


def test_a_keyword_is_asked_for_only_after_it_is_said():
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(60):
        placed = []
        pixels, targets = build_sequence(pool(), 600, rng, placed)
        assert pixels.shape == (600, F) and np.isfinite(pixels).all() and pixels.min() >= 0 and pixels.max() <= 255
        assert (targets[:SETTLE_FRAMES] == IGNORE).all()
        keyword_frames = np.isin(targets, [0, 1])
        expected = np.zeros(600, bool)
        for p in placed:
            seen.add(p.kind)
            if p.kind == "keyword":
                assert (targets[max(p.start, SETTLE_FRAMES):p.speech_end] == IGNORE).all()   # while it is said
                window = slice(max(p.speech_end, SETTLE_FRAMES), p.speech_end + KEYWORD_FRAMES)
                assert (targets[window] == p.label).all()
                expected[window] = True
            elif p.kind in ("other", "wake"):
                assert (targets[max(p.speech_start, SETTLE_FRAMES):min(600, p.speech_end + UNKNOWN_TAIL_FRAMES)] == 2).all()
            else:
                assert (targets[max(p.start, SETTLE_FRAMES):p.start + 98] == 3).all()
        assert np.array_equal(keyword_frames, expected)                    # nowhere else
    assert seen == {"keyword", "other", "wake", "noise"}


def test_some_sequences_keep_digital_silence_between_the_clips():
    rng = np.random.default_rng(1)
    silent = [not build_sequence(pool(), 300, rng)[0][0].any() for _ in range(300)]   # frame 0 is a gap
    assert abs(np.mean(silent) - CLEAN_SHARE) < 0.07, np.mean(silent)


def test_the_noise_bed_follows_the_configured_snr_range_and_clean_share():
    """data.stream_snr_db / stream_clean_share (kws12_noisy.yaml): a gap frame holds the bed alone,
    so the louder the bed (the lower the SNR), the higher its pixels; every sequence clean at 1."""
    gap_level = lambda snr: np.mean([build_sequence(pool(), 300, np.random.default_rng(i), snr_db=snr,
                                                    clean_share=0.0)[0][0].mean() for i in range(40)])
    loud, quiet = gap_level((-5.0, -5.0)), gap_level((20.0, 20.0))
    assert loud > quiet > 0, (loud, quiet)
    assert loud - quiet == pytest.approx(25 / 10 * np.log(10) * PIXEL_SLOPE, rel=0.15)   # 25 dB in pixels
    rng = np.random.default_rng(2)
    assert not any(build_sequence(pool(), 300, rng, clean_share=1.0)[0][0].any() for _ in range(50))
    for snr, clean in (((20.0, -5.0), 0.1), ((0.0,), 0.1), ((0.0, 20.0), 1.5)):
        with pytest.raises(ValueError, match="SNR range"):
            StreamDataset(pool(), 300, snr_db=snr, clean_share=clean)


class FixedScores(torch.nn.Module):
    """A stand-in network whose class probabilities are given per clip (its first pixel picks the row)."""

    def __init__(self, probs):
        super().__init__()
        self.log_probs = torch.log(torch.tensor(probs))

    def forward_features(self, pixels):
        return self.log_probs[pixels[:, 0, 0].long()], None


def test_hard_weights_count_only_the_keywords_a_clip_is_not():
    # classes: keyword 0, keyword 1, _unknown_ 2, _silence_ 3; clip i's probabilities are row i
    probs = [[0.9, 0.05, 0.03, 0.02],      # keyword 0, sure of itself: hardly a hard example
             [0.3, 0.6, 0.05, 0.05],       # keyword 1, 0.3 of keyword 0: a hard one
             [0.1, 0.7, 0.1, 0.1]]         # an _unknown_ clip heard as keyword 1
    pixels = np.zeros((3, 98, F), np.uint8)
    pixels[:, 0, 0] = [0, 1, 2]
    net = FixedScores(probs)
    keywords = hard_weights(net, pixels[:2], [0, 1], own=np.array([0, 1]))
    assert np.allclose(keywords, [1 + HARD_NEGATIVE_GAIN * 0.05, 1 + HARD_NEGATIVE_GAIN * 0.3])
    assert np.allclose(hard_weights(net, pixels[2:], [0, 1]), [1 + HARD_NEGATIVE_GAIN * 0.7])


def test_weighted_draws_follow_the_weights():
    p = pool()
    p.keyword_weights = np.array([1.0, 9.0])                # the second keyword 9× as often
    rng = np.random.default_rng(0)
    placed = []
    for _ in range(40):
        build_sequence(p, 600, rng, placed)
    labels = [c.label for c in placed if c.kind == "keyword"]
    assert 0.8 < labels.count(1) / len(labels) < 0.97, (labels.count(1), len(labels))


def test_smoothing_is_the_detectors_at_every_hop():
    torch.manual_seed(0)
    logits = torch.randn(1, 12 * HOP_FRAMES, 4)
    hop_ends = torch.arange(HOP_FRAMES - 1, logits.shape[1], HOP_FRAMES)     # where a runtime scores
    rows = logits.softmax(-1)[0, hop_ends].numpy()
    want = moving_average(rows, SMOOTHING_HOPS, np.zeros((0, 4)))
    assert np.allclose(smoothed_probabilities(logits)[0, hop_ends].numpy(), want, atol=1e-6)


def test_peak_loss_reads_each_keywords_best_and_worst_frames():
    # classes: keywords 0 and 1, _unknown_ 2, _silence_ 3
    torch.manual_seed(1)
    B, T, C = 3, 80, 4
    logits = torch.randn(B, T, C, requires_grad=True)
    targets = torch.full((B, T), 3)
    targets[0, 10:30], targets[0, 30:40], targets[0, 50:60] = 0, IGNORE, 0     # keyword 0 twice
    targets[1, 5:20], targets[1, 20:70] = 1, 2                                # keyword 1, then other speech
    targets[2, :] = IGNORE
    targets[2, 60:] = 2                                                       # no keyword at all
    hit, false = peak_loss(logits, targets, [0, 1])
    s = smoothed_probabilities(logits).detach()
    want_hit = -(s[0, 10:30, 0].max().log() + s[0, 50:60, 0].max().log() + s[1, 5:20, 1].max().log()) / B
    want_false = 0.0
    for b in range(B):
        for k in (0, 1):
            frames = (targets[b] != k) & (targets[b] != IGNORE)
            if frames.any():
                want_false -= torch.log1p(-s[b, frames, k].max())
    assert torch.allclose(hit, want_hit, atol=1e-5) and torch.allclose(false, want_false / B, atol=1e-5)
    (hit + false).backward()
    assert torch.isfinite(logits.grad).all() and logits.grad[0, 10:30, 0].abs().sum() > 0

    # a confident keyword from frame 10 to 60, silence around it
    T = 100
    confident = torch.full((1, T, C), -20.0)
    confident[..., 3] = 20.0
    confident[0, 10:60, 0], confident[0, 10:60, 3] = 20.0, -20.0
    quiet = torch.full((1, T), 3)
    quiet[0, 10:60], quiet[0, 60:90] = 0, IGNORE                              # as build_sequence: settle
    hit, false = peak_loss(confident, quiet, [0, 1])
    assert hit < 1e-3 and false < 1e-3
    quiet[0, 10:12] = 3                        # its first frames asked to be silence: a false accept
    assert abs(peak_loss(confident, quiet, [0, 1])[1] - math.log(2)) < 1e-3   # smoothed: ½ there


def test_stream_training_runs_from_a_checkpoint(tmp_path, clip_root, capsys, monkeypatch):  # noqa: F811
    from training.cli import main
    from training.module import KWSModule
    common = {"model.frontend": "logmel", "model.frontend_stride": "1", "model.frontend_kernel": "1",
              "trainer.max_steps": "2"}
    first = tiny_overrides(tmp_path / "clips", clip_root) | common
    assert main(as_argv(TINY, first)) == 0
    start = tmp_path / "clips" / "checkpoints" / "last.ckpt"
    streams = tiny_overrides(tmp_path / "streams", clip_root) | common | {
        "data.stream_seconds": "1.5", "data.stream_examples": "8", "data.batch_size": "4",
        "trainer.init_from": str(start), "optim.peak_loss": "1.0"}
    assert main(as_argv(TINY, streams)) == 0
    ckpt = torch.load(tmp_path / "streams" / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == 2 and np.isfinite(ckpt["rotkws"]["metrics"]["train/loss"])
    assert ckpt["rotkws"]["metrics"]["train/peak_false"] > 0     # the peaks' loss took part
    both = streams | {"data.stream_clip_batch": "4", "trainer.run_dir": str(tmp_path / "both")}
    assert main(as_argv(TINY, both)) == 0                   # clips beside the streams, both losses
    metrics = torch.load(tmp_path / "both" / "checkpoints" / "last.ckpt", weights_only=True)["rotkws"]["metrics"]
    assert np.isfinite(metrics["train/stream_loss"]) and np.isfinite(metrics["train/loss"])
    seen, plain_step = [], KWSModule.model_step                 # clips after the streams' states

    def model_step(self, batch, stage, state=None):
        if self.training:
            seen.append((state, self._carry.clone()))
        return plain_step(self, batch, stage, state)
    monkeypatch.setattr(KWSModule, "model_step", model_step)
    after = both | {"optim.clips_after_streams": "true", "trainer.run_dir": str(tmp_path / "after")}
    assert main(as_argv(TINY, after)) == 0
    assert len(seen) == 2 and all(torch.equal(state, carry) for state, carry in seen)   # 4 clips, 4 rows
    assert all(state.abs().sum() > 0 for state, _ in seen)
    monkeypatch.undo()
    capsys.readouterr()
    conv = streams | {"model.frontend": "conv", "model.frontend_stride": "160", "model.frontend_kernel": "400",
                      "trainer.init_from": "null", "trainer.run_dir": str(tmp_path / "conv")}
    assert main(as_argv(TINY, conv)) == 2
    assert "needs a network with the logmel front-end" in capsys.readouterr().err
    wider = streams | {"model.d_model": "24", "trainer.run_dir": str(tmp_path / "wider")}
    capsys.readouterr()
    assert main(as_argv(TINY, wider)) == 2
    err = capsys.readouterr().err
    assert "trainer.init_from" in err and "another network" in err


def test_clips_start_from_the_rows_states_they_are_given():
    from training.module import KWSModule
    torch.manual_seed(0)
    model = {"labels": ["a", "b", "c"], "frontend": "logmel", "d_model": 16, "state": 16, "heads": 2,
             "layers": 1, "chunk": 16}
    module = KWSModule(model, {"clips_after_streams": True}).eval()
    with pytest.raises(RuntimeError, match="stream step first"):
        module.clip_states(3)
    module._carry = torch.randn(2, module.net.state_size)
    states = module.clip_states(3)
    assert torch.equal(states, module._carry[[0, 1, 0]])
    x = torch.rand(3, 98, F) * 255
    assert torch.allclose(module(x, states), module.net.forward_features(x, states)[0])
    assert not torch.allclose(module(x, states), module(x), atol=1e-4)    # the state matters


def test_keyword_frames_weigh_as_configured_in_the_stream_loss():
    from training.module import KWSModule
    model = {"labels": ["a", "b", "_unknown_"], "frontend": "logmel", "d_model": 16, "state": 16,
             "heads": 2, "layers": 1, "chunk": 16}
    x = torch.rand(2, 40, F) * 255
    targets = torch.full((2, 40), 2)
    targets[0, 10:20], targets[1, 5:8], targets[1, 30:] = 0, 1, IGNORE
    losses = {}
    for w in (1.0, 3.0):
        torch.manual_seed(0)
        module = KWSModule(model, {"keyword_weight": w}).eval()
        module.log = lambda *a, **k: None
        losses[w] = module.stream_step((x, targets), "val/")
    torch.manual_seed(0)
    net = KWSModule(model, {}).eval().net
    logits, _ = net.frame_logits(x, net.initial_state(2))
    each = torch.nn.functional.cross_entropy(logits.reshape(-1, 3), targets.reshape(-1).clamp(min=0), reduction="none")
    kept = targets.reshape(-1) != IGNORE
    weight = torch.where(targets.reshape(-1) < 2, 3.0, 1.0)[kept]
    assert torch.allclose(losses[1.0], each[kept].mean())
    assert torch.allclose(losses[3.0], (each[kept] * weight).sum() / weight.sum())   # a weighted mean


# -- calibration ----------------------------------------------------------------------------------
def test_choose_spends_the_false_accept_budget_where_it_buys_the_most_hits():
    from export.calibrate import choose
    thresholds = np.array([0.5, 0.7, 0.9])
    counts = {  # rows: thresholds; columns: events, misses, false accepts
        "yes": np.array([[10, 1, 4], [10, 2, 1], [10, 6, 0]]),
        "no": np.array([[10, 0, 1], [10, 0, 1], [10, 5, 0]]),
    }
    assert choose(counts, hours=2.0, fa_per_hour=1.0, thresholds=thresholds) == {"yes": 0.7, "no": 0.7}
    # one false accept: "no" at 0.7 (no misses) beats "yes" at 0.7 (4 hits more than at 0.9, not 5)
    assert choose(counts, hours=1.0, fa_per_hour=1.0, thresholds=thresholds) == {"yes": 0.9, "no": 0.7}
    assert choose(counts, hours=0.1, fa_per_hour=1.0, thresholds=thresholds) == {"yes": 0.9, "no": 0.9}


def test_calibrate_stores_an_operating_point_the_runtime_uses(tmp_path, shared_data):
    from export.calibrate import main
    from export.onnx import read_metadata
    out = tmp_path / "calibrated.onnx"
    assert main([str(DEFAULT_MODEL), "-o", str(out), "--hours", "0.05", "--data", str(shared_data)]) == 0
    meta = read_metadata(out)
    detection, calibration = json.loads(meta["detection"]), json.loads(meta["calibration"])
    model = KeywordModel(out)
    assert set(detection["threshold"]) == set(model.keywords)
    assert calibration["split"] == "validation" and calibration["measured"]["keyword_events"] > 0
    spotter = KeywordSpotter(model)
    assert spotter.threshold in (detection["threshold"], set(detection["threshold"].values()).pop())
    assert spotter.flush_s == detection["flush_s"]


def test_calibrate_refuses_what_it_cannot_use(tmp_path, capsys):
    from export.calibrate import main
    assert main([str(tmp_path / "missing.onnx")]) == 2
    assert "no model at" in capsys.readouterr().err
    assert main([str(DEFAULT_MODEL), "--hours", "0"]) == 2
    assert "must be > 0" in capsys.readouterr().err
