"""The wake word on the frozen speech embedding: its labels, rows, cache, training, the head file
(export/embedding_head.py) and its runtime (app/wakehead.py)."""
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from app.embedding import EMBED_DIM, HOP, SAMPLE_RATE, SpeechEmbedding
from app.wakehead import HeadError, HeadModel, is_head
from export.embedding_head import HEAD_RULE, export_head
from training import embedding_head as recipe
from training.embedding_head import HEAD_HOPS, IGNORE, OTHER, PHRASE, Head, HeadConfig, Rows, hop_labels

CLIP = Path(__file__).parent / "data" / "wakeword" / "alexa" / "1.flac"
BUNDLED = Path(__file__).parents[1] / "app" / "models" / "alexa.onnx"


@pytest.fixture(scope="module")
def ears():
    return SpeechEmbedding()


def test_hop_labels_follow_enrolls_frames():
    y = hop_labels(40)
    assert (y[:HEAD_HOPS - 1] == IGNORE).all() and (y[HEAD_HOPS - 1:] == OTHER).all()
    start, end = 20 * HOP, 30 * HOP                      # said over hops 20–29, ending at hop 30's start
    y = hop_labels(40, start, end)
    ends = (np.arange(40) + 1) * HOP
    on = ends[y == PHRASE]
    assert on.min() >= end - recipe.POSITIVE_BEFORE_END_S * SAMPLE_RATE
    assert on.max() <= end + recipe.POSITIVE_AFTER_END_S * SAMPLE_RATE
    assert (y[(ends > start) & (ends < end - recipe.POSITIVE_BEFORE_END_S * SAMPLE_RATE)] == IGNORE).all()
    assert (y[(ends <= start) & (np.arange(40) >= HEAD_HOPS - 1)] == OTHER).all()


def test_rows_windows_are_the_hops_before_each_end():
    e = torch.arange(50 * EMBED_DIM, dtype=torch.float16).reshape(50, EMBED_DIM) / 100
    rows = Rows(e, np.zeros(50, np.int8))
    w = rows.windows(torch.tensor([15, 49]))
    assert w.shape == (2, HEAD_HOPS, EMBED_DIM)
    torch.testing.assert_close(w[1], e[34:50].float())


def test_speech_embeddings_are_cached_and_reused(ears, tmp_path):
    noise = np.random.default_rng(0).normal(0, 0.01, SAMPLE_RATE * 10).astype(np.float32)
    said = [sf.read(CLIP, dtype="float32")[0], np.zeros(SAMPLE_RATE, np.float32) + 0.01]
    first = recipe.embedding_cache(ears, said, noise, tmp_path)
    assert len(list(tmp_path.glob("*.npy"))) == 2

    class Deaf:
        def embed(self, audio):
            raise AssertionError("the cache was not read")

    again = recipe.embedding_cache(Deaf(), said, noise, tmp_path)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    changed = recipe.embedding_cache(ears, [said[0] * 0.5], noise, tmp_path)      # other audio: a miss
    assert len(list(tmp_path.glob("*.npy"))) == 3 and changed[0].shape == first[0].shape


def test_the_head_learns_a_separable_task():
    rng = np.random.default_rng(0)
    n = 400
    e = rng.normal(0, 1, (n, EMBED_DIM)).astype(np.float16)
    labels = np.where(np.arange(n) % 40 >= 30, PHRASE, OTHER).astype(np.int8)
    e[labels == PHRASE, :8] += 3                          # the phrase's hops stand out
    labels[:HEAD_HOPS - 1] = IGNORE
    head, losses = recipe.train(Rows(torch.from_numpy(e), labels), HeadConfig(steps=120, mine_every=30))
    assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:20])


def test_heads_are_trained_on_the_same_rows_and_averaged_in_one_file(tmp_path):
    """HeadConfig.heads: the first head is the one a single-head run trains (same seed, same rows),
    the others differ, and the file's score is the sigmoid of their mean logit."""
    rng = np.random.default_rng(1)
    e = rng.normal(0, 1, (300, EMBED_DIM)).astype(np.float16)
    labels = np.where(np.arange(300) % 30 >= 22, PHRASE, OTHER).astype(np.int8)
    labels[:HEAD_HOPS - 1] = IGNORE
    rows = Rows(torch.from_numpy(e), labels)
    one, _ = recipe.train_heads(rows, HeadConfig(steps=20, mine_every=5, heads=1))
    three, _ = recipe.train_heads(rows, HeadConfig(steps=20, mine_every=5, heads=3))
    x = torch.randn(4, HEAD_HOPS, EMBED_DIM)
    with torch.no_grad():
        logits = torch.stack([h(x) for h in three.heads])
        torch.testing.assert_close(logits[0], one(x))
        assert (logits[1] - logits[0]).abs().max() > 1e-3
        path = export_head(three, tmp_path / "three.onnx", {"labels": ["alexa", "_other_"],
                                                           "detection": HEAD_RULE | {"threshold": 0.7}})
        got = HeadModel(path).session.run(None, {"embeddings": x.numpy()})[0]
        np.testing.assert_allclose(got, torch.sigmoid(logits.mean(0)).numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="at least one head"):
        recipe.train_heads(rows, HeadConfig(steps=2, heads=0))


def test_a_head_trained_beside_other_work_is_the_one_trained_alone(monkeypatch):
    """`Beside` (enroll's verifier): the head trains in a thread while the caller draws from torch's
    global generator, and comes out as `fit_items` alone makes it; its error reaches the caller."""
    rng = np.random.default_rng(2)
    e = rng.normal(0, 1, (200, EMBED_DIM)).astype(np.float16)
    labels = np.where(np.arange(200) % 25 >= 18, PHRASE, OTHER).astype(np.int8)
    labels[:HEAD_HOPS - 1] = IGNORE
    made = Rows(torch.from_numpy(e), labels)
    monkeypatch.setattr(recipe, "rows", lambda ears, items, cfg, rng: made)
    cfg = HeadConfig(steps=40, mine_every=10, heads=2)
    items = recipe.Items([], [], [], [np.zeros(10, np.float32)], np.zeros((0, 98, 40), np.uint8), np.zeros(10))
    alone, _ = recipe.fit_items("alexa", items, cfg, ears=object())
    monkeypatch.setattr(recipe, "SpeechEmbedding", object)
    beside = recipe.Beside("alexa", items, cfg, then=lambda: "validation embedded")
    items.speech.pop()                                   # the wake file's examples consume the speech
    for _ in range(200):
        torch.rand(1000)                                 # the caller's training draws meanwhile
    head, meta, then = beside.result()
    assert then == "validation embedded"                 # what ran in the thread after the heads
    assert beside.threads() == 2 * torch.get_num_threads()   # done: the caller may take its core
    x = torch.randn(3, HEAD_HOPS, EMBED_DIM)
    with torch.no_grad():
        torch.testing.assert_close(head(x), alone(x))
    assert meta["training_data"]["enrolled_phrase"] == "alexa"

    def broken(*_):
        raise ValueError("no phrase rows")
    monkeypatch.setattr(recipe, "rows", broken)
    with pytest.raises(ValueError, match="no phrase rows"):
        recipe.Beside("alexa", items, cfg).result()


@pytest.fixture(scope="module")
def head_file(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("head") / "alexa_head.onnx"
    export_head(Head(), path, {"labels": ["alexa", "_other_"], "detection": HEAD_RULE | {"threshold": 0.7}})
    return path


def test_head_file_runs_as_pytorch_and_reads_its_metadata(head_file, ears):
    model = HeadModel(head_file, ears)
    assert is_head(head_file) and not is_head(BUNDLED)
    assert model.phrase == "alexa" and model.detection["threshold"] == 0.7
    audio = sf.read(CLIP, dtype="float32")[0]
    times, scores = model.track(audio)
    e = ears.embed(audio)
    assert times.shape == scores.shape == (len(e),) and times[0] == HOP / SAMPLE_RATE
    padded = np.concatenate([np.repeat(model.silence[None], HEAD_HOPS - 1, 0), e])
    windows = np.stack([padded[i:i + HEAD_HOPS] for i in range(len(e))])
    np.testing.assert_allclose(scores, model.session.run(None, {"embeddings": windows})[0], atol=1e-6)


def test_a_rotkws_model_is_not_a_head(ears):
    with pytest.raises(HeadError, match="expected a head file"):
        HeadModel(BUNDLED, ears)
    with pytest.raises(HeadError, match="no head file"):
        HeadModel(BUNDLED.with_name("missing.onnx"), ears)
