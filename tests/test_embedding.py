"""The frozen speech embedding (app/embedding.py): the vendored files are the shipped ones, the
mel and the embedding agree with openWakeWord's TFLite models (pyopen-wakeword, the peers extra)
on real audio, and the live stream gives the offline vectors whatever the chunks."""
import hashlib
import shutil
from ctypes import c_size_t, c_void_p
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app import embedding
from app.embedding import (EMBED_DIM, FILES, HOP, MEL_BANDS, MEL_CONTEXT, MEL_PER_HOP, MEL_WINDOW,
                           EmbeddingError, EmbeddingStream, SpeechEmbedding)

CLIP = Path(__file__).parent / "data" / "wakeword" / "alexa" / "1.flac"


@pytest.fixture(scope="module")
def ears():
    return SpeechEmbedding()


@pytest.fixture(scope="module")
def clip():
    audio, rate = sf.read(CLIP, dtype="float32")
    assert rate == embedding.SAMPLE_RATE
    return audio


def test_vendored_files_are_the_shipped_ones():
    for name, digest in FILES.items():
        assert hashlib.sha256((embedding.FOLDER / name).read_bytes()).hexdigest() == digest
    assert "Apache License" in (embedding.FOLDER / "LICENSE").read_text()


def test_a_changed_or_missing_file_is_refused(tmp_path):
    with pytest.raises(EmbeddingError, match="no speech embedding file"):
        SpeechEmbedding(tmp_path)
    for name in FILES:
        shutil.copy(embedding.FOLDER / name, tmp_path / name)
    with open(tmp_path / "embedding_model.onnx", "ab") as f:
        f.write(b"\0")
    with pytest.raises(EmbeddingError, match="sha256 .* expected 70d16429"):
        SpeechEmbedding(tmp_path)


def test_shapes(ears, clip):
    assert ears.mel(clip[:MEL_CONTEXT + HOP]).shape == (MEL_PER_HOP, MEL_BANDS)
    assert ears.vectors(np.zeros((3, MEL_WINDOW, MEL_BANDS), np.float32)).shape == (3, EMBED_DIM)
    assert ears.embed(clip).shape == (len(clip) // HOP, EMBED_DIM)
    assert ears.embed(clip[:HOP - 1]).shape == (0, EMBED_DIM)


def tflite_features():
    pytest.importorskip("pyopen_wakeword", reason="the peers extra: pip install -e '.[peers]'")
    from pyopen_wakeword import OpenWakeWordFeatures
    return OpenWakeWordFeatures.from_builtin()


def test_mel_matches_openwakewords_tflite_on_real_audio(ears, clip):
    for start in (8_000, 16_000, 24_000):
        theirs = tflite_features()
        chunk = clip[start:start + MEL_CONTEXT + HOP]
        list(theirs.process_streaming((chunk * embedding.INT16_SCALE).astype("<i2").tobytes()))
        ours = ears.mel((chunk * embedding.INT16_SCALE).astype("<i2").astype(np.float32) / embedding.INT16_SCALE)
        np.testing.assert_allclose(ours, theirs.mels[-MEL_PER_HOP:], atol=1e-4)


def test_embedding_matches_openwakewords_tflite_on_real_audio(ears, clip):
    theirs = tflite_features()
    lib = theirs.lib
    mel = np.concatenate([ears.mel(clip[k * HOP:k * HOP + MEL_CONTEXT + HOP]) for k in range(20)])
    for end in (MEL_WINDOW, MEL_WINDOW + 40, len(mel)):
        window = np.ascontiguousarray(mel[end - MEL_WINDOW:end, :, None][None], np.float32)
        lib.TfLiteTensorCopyFromBuffer(theirs.emb_input_tensor, window.ctypes.data_as(c_void_p), c_size_t(window.nbytes))
        lib.TfLiteInterpreterInvoke(theirs.emb_interpreter)
        out = np.empty(EMBED_DIM, np.float32)
        lib.TfLiteTensorCopyToBuffer(theirs.emb_output_tensor, out.ctypes.data_as(c_void_p), c_size_t(out.nbytes))
        np.testing.assert_allclose(ears.vectors(window[..., 0])[0], out, atol=1e-3)


def test_stream_gives_the_offline_vectors_whatever_the_chunks(ears, clip):
    offline = ears.embed(clip)
    rng = np.random.default_rng(0)
    for sizes in ([HOP] * 100, list(rng.integers(1, 5000, 100)), [len(clip)]):
        stream, got, i = EmbeddingStream(ears), [], 0
        for n in sizes:
            got.append(stream.push(clip[i:i + n]))
            i += n
            if i >= len(clip):
                break
        np.testing.assert_array_equal(np.concatenate(got), offline)


def test_reset_starts_a_new_stream(ears, clip):
    stream = EmbeddingStream(ears)
    stream.push(clip)
    stream.reset()
    np.testing.assert_array_equal(stream.push(clip[:10 * HOP]), ears.embed(clip[:10 * HOP]))
