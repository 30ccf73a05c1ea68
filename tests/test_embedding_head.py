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
