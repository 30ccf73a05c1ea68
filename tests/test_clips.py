"""corpus/clips.py: reading audio and Speech Commands folders the same way everywhere."""
import shutil

import numpy as np
import pytest
import soundfile as sf

from corpus.clips import SILENCE, UNKNOWN, ClipError, list_clips, read_audio, speaker_of
from conftest import CLIPS

KWS12 = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go", UNKNOWN, SILENCE)
A_CLIP = CLIPS / "yes" / sorted(p.name for p in (CLIPS / "yes").iterdir())[0]


def test_read_audio_gives_float32_mono_at_the_file_rate():
    x, rate = read_audio(A_CLIP)
    assert rate == 16_000 and x.dtype == np.float32 and x.shape == (16_000,)
    assert 0 < np.abs(x).max() <= 1


@pytest.mark.parametrize("subtype,tol", [("PCM_24", 1e-6), ("PCM_U8", 1 / 64), ("FLOAT", 0)])
def test_bit_depths_and_channels_are_averaged(tmp_path, subtype, tol):
    x, rate = read_audio(A_CLIP)
    stereo = np.stack([x, 0.5 * x], 1)
    path = tmp_path / "clip.wav"
    sf.write(path, stereo, rate, subtype=subtype)
    y, rate2 = read_audio(path)
    assert rate2 == rate and y.shape == x.shape
    np.testing.assert_allclose(y, 0.75 * x, atol=tol + 1e-7)


def test_a_file_that_is_not_audio_is_named(tmp_path):
    bad = tmp_path / "broken.wav"
    bad.write_bytes(b"RIFF\x00\x00not really a wave file" * 10)
    with pytest.raises(ClipError, match="broken.wav"):
        read_audio(bad)
    with pytest.raises(ClipError, match="missing.wav"):
        read_audio(tmp_path / "missing.wav")


def test_speaker_is_the_name_before_nohash():
    assert speaker_of("backward_0c540988_nohash_0.wav") == "0c540988"
    assert speaker_of("0c540988_nohash_3.wav") == "0c540988"
    assert speaker_of("1024.wav") == "1024.wav"


def test_list_clips_reads_the_layout():
    clips = list_clips(CLIPS, KWS12)
    assert len(clips) == 24
    by_label = {lab: [c for c in clips if c.label == lab] for lab in KWS12}
    assert all(len(v) == 2 for v in by_label.values())
    bed = by_label[UNKNOWN][0]
    assert bed.path.name.startswith("bed_") and bed.speaker == speaker_of(bed.path.name)
    assert bed.name == f"{UNKNOWN}/{bed.path.name}"


def test_words_outside_the_labels_are_unknown_or_skipped(tmp_path):
    root = tmp_path / "sc"
    shutil.copytree(CLIPS, root)
    (root / "_background_noise_").mkdir()
    shutil.copy(A_CLIP, root / "_background_noise_" / "noise.wav")
    with_unknown = list_clips(root, ("yes", UNKNOWN))
    assert {c.label for c in with_unknown} == {"yes", UNKNOWN}
    assert sum(c.label == UNKNOWN for c in with_unknown) == 24 - 2 - 2   # silence has no label
    assert all("_background_noise_" not in str(c.path) for c in with_unknown)
    only = list_clips(root, ("yes", "no", "bed"))                        # bed from _unknown_/
    assert sorted({c.label for c in only}) == ["bed", "no", "yes"] and len(only) == 6


def test_missing_or_empty_folders_are_named(tmp_path):
    with pytest.raises(ClipError, match="nowhere.*does not exist"):
        list_clips(tmp_path / "nowhere", KWS12)
    (tmp_path / "empty" / "yes").mkdir(parents=True)
    with pytest.raises(ClipError, match="no clips in .*empty"):
        list_clips(tmp_path / "empty", KWS12)


def test_a_wav_written_to_a_pipe_is_not_called_truncated(tmp_path):
    """Streaming writers (ffmpeg to a pipe) leave the data size 0xFFFFFFFF: not a truncation."""
    from corpus.clips import read_audio, wav_missing_bytes
    path = tmp_path / "piped.wav"
    sf.write(path, np.zeros(1_600, np.float32), 16_000, subtype="PCM_16")
    data = bytearray(path.read_bytes())
    at = data.index(b"data") + 4
    data[at:at + 4] = (0xFFFF_FFFF).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    assert wav_missing_bytes(path) == 0
    half = tmp_path / "half.wav"
    sf.write(half, np.zeros(1_600, np.float32), 16_000, subtype="PCM_16")
    half.write_bytes(half.read_bytes()[:-1_000])
    assert wav_missing_bytes(half) == 1_000
    with pytest.raises(ValueError, match="truncated"):
        read_audio(half)
