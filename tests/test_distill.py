"""Distillation (training/distill.py): a RotRNN backbone trained to predict the frozen speech
embedding every 80 ms. On real clips (tests/data): the targets line up with the audio, the loss
falls on a tiny run, a run stopped and resumed equals one run through, and the checkpoint is one
`rotkws enroll --checkpoint` reads."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from app.embedding import EMBED_DIM, HOP, SpeechEmbedding
from corpus.clips import read_audio
from model.classifiers import load_checkpoint
from model.network import RotRNNClassifier, RotRNNConfig
from training import distill
from training.enroll_fit import enrolled_network

DATA = Path(__file__).parent / "data"
SHIPPED = Path(__file__).parents[1] / "training" / "checkpoints" / "distilled.ckpt"


@pytest.fixture(scope="module")
def ears():
    return SpeechEmbedding()


@pytest.fixture(scope="module")
def clips():
    paths = sorted((DATA / "wakeword").glob("*/*.flac")) + sorted((DATA / "clips").glob("*/*.wav"))[:12]
    return [read_audio(p)[0].astype(np.float32) for p in paths]


@pytest.fixture(scope="module")
def noise(clips):
    return np.random.default_rng(0).normal(0, 0.01, 20 * 16000).astype(np.float32)


@pytest.fixture(scope="module")
def data(clips, noise, ears, tmp_path_factory):
    return distill.pieces(clips, noise, ears, tmp_path_factory.mktemp("cache"))


def small_student(dropout: float = 0.1) -> RotRNNClassifier:
    cfg = RotRNNConfig(labels=("a", "b"), frontend="logmel", d_model=32, state=32, heads=8, layers=2, dropout=dropout)
    return distill.student(RotRNNClassifier(cfg))


def test_targets_are_the_embedding_of_the_audio_at_each_hop(data, ears):
    for audio, target in zip(data.audio[:3], data.targets[:3]):
        assert len(audio) == len(target) * HOP
        raw = ears.embed(audio)
        np.testing.assert_allclose(target.astype(np.float32), (raw - data.mean) / data.std, atol=0.02)
    assert np.concatenate(data.targets).astype(np.float32).std(0).mean() == pytest.approx(1.0, abs=0.05)


def test_crops_score_only_what_the_embedding_heard_within_them(data):
    rng = np.random.default_rng(1)
    audio, target, mask = data.batch(np.arange(len(data.audio)), rng)
    assert audio.shape == (len(data.audio), distill.PIECE_HOPS * HOP)
    assert target.shape == (len(data.audio), distill.PIECE_HOPS, EMBED_DIM)
    hops = np.array([len(t) for t in data.targets])
    assert (mask.sum(1).numpy() <= np.minimum(hops, distill.PIECE_HOPS)).all()
    _, _, first = data.crop(0, 3)
    assert first == distill.WARM_HOPS and data.crop(0, 0)[2] == 0


def test_hop_frames_end_with_the_hop():
    # log-mel frame t ends at sample (t + 1)·160; hop j at (j + 1)·1280
    frames = distill.hop_frames(4)
    assert ((frames + 1) * 160).tolist() == [(j + 1) * HOP for j in range(4)]


def test_the_loss_falls_on_a_tiny_run(data, tmp_path):
    torch.manual_seed(0)
    few = distill.Pieces(data.audio[:4], data.targets[:4], data.mean, data.std)   # a tiny run: 4 pieces
    net = small_student(dropout=0.0)
    cfg = distill.DistillConfig(steps=60, batch_size=4, lr=1e-2, save_every=20, seed=0, validation_crops=8)
    record = distill.train(net, few, cfg, tmp_path / "d.ckpt")
    losses = [row["loss"] for row in record["log"]]
    assert losses[0] > losses[1] > losses[2] and losses[2] < 0.8 * losses[0], losses
    assert record["log"][-1]["r2"] > record["log"][0]["r2"] - 1e-6 or np.isnan(record["log"][0]["r2"])


def test_a_stopped_run_resumed_equals_one_run_through(data, tmp_path):
    cfg = distill.DistillConfig(steps=12, batch_size=2, save_every=4, seed=3, validation_crops=4)
    torch.manual_seed(0)
    through = small_student()
    start = {k: v.clone() for k, v in through.state_dict().items()}
    distill.train(through, data, cfg, tmp_path / "a.ckpt")
    stopped = small_student()
    stopped.load_state_dict(start)
    assert distill.train(stopped, data, cfg, tmp_path / "b.ckpt", until=6) is None
    assert not (tmp_path / "b.ckpt").exists() and distill.resume_path(tmp_path / "b.ckpt").is_file()
    resumed = small_student()                        # a fresh process: weights from the resume file
    distill.train(resumed, data, cfg, tmp_path / "b.ckpt", resume=True)
    a, _ = load_checkpoint(tmp_path / "a.ckpt")
    b, _ = load_checkpoint(tmp_path / "b.ckpt")
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-4, msg=name)
    with pytest.raises(ValueError, match="resume with the same settings"):
        distill.train(small_student(), data, distill.DistillConfig(steps=13, batch_size=2, save_every=4, seed=3, validation_crops=4),
                      tmp_path / "b.ckpt", resume=True)


def test_enroll_reads_the_distilled_checkpoint(data, tmp_path):
    distill.train(small_student(), data, distill.DistillConfig(steps=2, batch_size=2, save_every=2, validation_crops=4), tmp_path / "d.ckpt")
    net, entry = load_checkpoint(tmp_path / "d.ckpt")
    assert net.cfg.labels == distill.EMBED_LABELS and entry["data"] == "distilled"
    record = json.loads(entry["distill"])
    np.testing.assert_allclose(record["target_mean"], data.mean, atol=1e-4)
    np.testing.assert_allclose(record["target_std"], data.std, rtol=1e-3)
    enrolled = enrolled_network(net, "hey rotkws")
    assert enrolled.cfg.labels == ("hey rotkws", "_other_")
    torch.testing.assert_close(enrolled.blocks[0].rnn.gamma, net.blocks[0].rnn.gamma)


def test_a_clip_classifier_is_refused():
    bidirectional = RotRNNClassifier(RotRNNConfig(frontend="logmel", bidirectional=True, d_model=16, state=16, heads=4, layers=1))
    with pytest.raises(ValueError, match="causal RotRNN"):
        distill.student(bidirectional)


def test_the_committed_distilled_checkpoint_hears_what_the_embedding_hears(ears):
    """training/checkpoints/distilled.ckpt on real recordings it never trained on (the bundled
    `alexa` takes after half a second of silence each): its output follows the embedding, dimension
    by dimension, and a shuffled order of its hops does not."""
    net, _ = load_checkpoint(SHIPPED)
    paths = sorted((DATA / "wakeword").glob("*/*.flac"))
    audio = np.concatenate([np.concatenate([np.zeros(8000, np.float32), read_audio(p)[0]]) for p in paths])
    audio = audio[:len(audio) // HOP * HOP]
    target = ears.embed(audio)
    with torch.no_grad():
        pred = distill.predictions(net, torch.from_numpy(audio)[None])[0].numpy()
    corr = lambda p: np.nanmean([np.corrcoef(p[:, d], target[:, d])[0, 1] for d in range(EMBED_DIM)])
    assert corr(pred) > 0.35                                                # 0.47 when committed
    assert abs(corr(pred[np.random.default_rng(0).permutation(len(pred))])) < 0.1
