"""`enroll --speech DIR`: a user's own folder of speech, in LibriSpeech's layout or as plain files."""
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from corpus.clips import ClipError
from evaluation.speech import holds_phrase, speech_folder

CLIP = Path(__file__).parent / "data" / "wakeword" / "alexa" / "1.flac"


def test_librispeech_layout_with_its_transcripts(tmp_path):
    audio, rate = sf.read(CLIP, dtype="float32")
    chapter = tmp_path / "LibriSpeech" / "train-clean-100" / "19" / "198"
    chapter.mkdir(parents=True)
    for n in range(2):
        sf.write(chapter / f"19-198-000{n}.flac", audio, rate)
    (chapter / "19-198.trans.txt").write_text("19-198-0000 NORTHANGER ABBEY\n19-198-0001 ALEXA PLAY MUSIC\n")
    found = speech_folder(tmp_path / "LibriSpeech")
    assert [u.text for u in found] == ["NORTHANGER ABBEY", "ALEXA PLAY MUSIC"]
    assert {u.speaker for u in found} == {"user/19"}
    assert [u.path.name for u in found if not holds_phrase(u.text, "alexa")] == ["19-198-0000.flac"]


def test_plain_files_with_and_without_transcripts(tmp_path):
    audio, rate = sf.read(CLIP, dtype="float32")
    (tmp_path / "kitchen").mkdir()
    sf.write(tmp_path / "kitchen" / "a.wav", audio, rate)
    sf.write(tmp_path / "b.ogg", np.zeros(rate, np.float32), rate)
    (tmp_path / "kitchen" / "a.txt").write_text("hey computer what time is it\n")
    found = speech_folder(tmp_path)
    assert [(u.path.name, u.text, u.speaker) for u in found] == [
        ("b.ogg", None, f"user/{tmp_path.name}"), ("a.wav", "HEY COMPUTER WHAT TIME IS IT", "user/kitchen")]


def test_a_bad_folder_says_what_was_expected(tmp_path):
    with pytest.raises(ClipError, match="not a folder"):
        speech_folder(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("no audio here")
    with pytest.raises(ClipError, match="no audio file in it"):
        speech_folder(tmp_path)
