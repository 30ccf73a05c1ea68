"""`rotkws enroll --speech DIR`: the wake file, its verifier head beside it and named in its
metadata with both thresholds, the user's speech among the negatives; a bad folder refused first."""
import json
import os

import numpy as np
import soundfile as sf

from app.cascade import CascadeSpotter
from app.spotter import KeywordModel
from app.wakehead import HeadModel
from conftest import data_root, require
from rotkws import enroll_cli as command
from evaluation.speech import noise_bed
from export import cascade as cascade_export
from export.embedding_head import choose_threshold
from export.onnx import read_metadata
from export.wake_threshold import Validation
from test_enroll import require_espeak
from training import enroll_fit as fit
from training.kokoro import CACHE_ENV

PHRASE = "hey computer"
TINY = ["--positives", "16", "--tts-negatives", "12", "--images", "0", "--wav-negatives", "6",
        "--noise-negatives", "4", "--speech-negatives", "8", "--tts-sentences", "2", "--kokoro-positives", "0",
        "--kokoro-negatives", "0", "--kokoro-sentences", "0", "--max-steps", "3", "--validation-hours", "0.05"]


def user_speech(folder):
    """A folder of speech in LibriSpeech's layout: one utterance that says the phrase, two that do not."""
    chapter = folder / "LibriSpeech" / "dev-clean" / "7" / "11"
    chapter.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for n in range(3):
        sf.write(chapter / f"7-11-000{n}.flac", rng.normal(0, 0.05, 16_000 * 2).astype(np.float32), 16_000)
    (chapter / "7-11.trans.txt").write_text("7-11-0000 HEY COMPUTER\n7-11-0001 A LONG DAY\n7-11-0002 GOOD NIGHT\n")
    return folder / "LibriSpeech"


def test_a_tiny_enroll_with_a_verifier_and_the_users_speech(tmp_path):
    require_espeak()
    data = require(data_root())
    require(fit.PROPOSER_CHECKPOINT)
    out = tmp_path / "computer.onnx"
    os.environ[CACHE_ENV] = str(tmp_path / "cache")
    try:
        assert command.main([PHRASE, "-o", str(out), "--data", str(data), *TINY,
                             "--speech", str(user_speech(tmp_path)), "--progress", "none"]) == 0
    finally:
        os.environ.pop(CACHE_ENV, None)
    wake = KeywordModel(out)
    verifier = wake.meta["verifier"]
    assert verifier["head"] == "computer.head.onnx"
    assert 0 < verifier["propose"] <= 1 and 0 < verifier["confirm"] <= 1 and verifier["validation_stream_hours"] > 0
    head = HeadModel(out.with_name(verifier["head"]))
    assert head.phrase == PHRASE and 0 < head.detection["threshold"] <= 1
    meta = read_metadata(out)
    assert json.loads(meta["enroll"])["verifier"].items() <= verifier.items()
    assert json.loads(meta["training_data"])["speech_folders"] == {str(tmp_path / "LibriSpeech"): 2}   # not "HEY COMPUTER"
    assert json.loads(meta["training_data"])["backbone"] == fit.PROPOSER_CHECKPOINT.name   # the cascade's proposer
    cascade = CascadeSpotter(wake, head, verifier["propose"], verifier["confirm"])
    assert cascade.process(np.zeros(16_000, np.float32)).detections == []
    assert len(list((tmp_path / "cache" / "embeddings").glob("*.npy"))) > 2   # speech embedded once, kept

    # One validation stream and score track served the three thresholds: chosen from scratch, each
    # on a stream of its own, they come out the same.
    os.environ[CACHE_ENV] = str(tmp_path / "cache")
    try:
        again = cascade_export.attach(out, out.with_name(verifier["head"]), tmp_path / "again.onnx", data,
                                      json.loads(meta["enroll"])["fa_per_hour"], hours=0.05)
        stream = Validation.of(data, noise_bed(data), 0.05, np.random.default_rng(0), PHRASE)
        own = choose_threshold(out.with_name(verifier["head"]), stream, json.loads(meta["enroll"])["fa_per_hour"])
    finally:
        os.environ.pop(CACHE_ENV, None)
    assert again == verifier | {"head": "again.head.onnx"} and own["threshold"] == head.detection["threshold"]


def test_a_bad_speech_folder_is_refused_before_any_synthesis(tmp_path, capsys, monkeypatch):
    require(data_root())
    said = []
    monkeypatch.setattr("training.tts.synthesize", lambda *a, **k: said.append(a))
    assert command.main([PHRASE, "-o", str(tmp_path / "x.onnx"), "--data", str(data_root()),
                         "--speech", str(tmp_path / "nowhere"), "--progress", "none"]) == 1
    err = capsys.readouterr().err
    assert "not a folder" in err and "nowhere" in err and not said
