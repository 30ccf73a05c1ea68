"""benchmarks/takes.py: the sessions it finds in wake-word recordings."""
import numpy as np
import soundfile as sf

from benchmarks import takes
from conftest import data_root, require

RATE = 16_000


def voice(seed: int, n: int) -> np.ndarray:
    """`n` samples of noise through a random 8-tap filter: a timbre per seed."""
    ir = np.random.default_rng(seed).standard_normal(8)
    audio = np.convolve(np.random.default_rng(100 + n).standard_normal(n), ir)[:n]
    return (0.2 * audio / np.abs(audio).max()).astype(np.float32)


def test_consecutive_recordings_that_sound_alike_are_one_session_whatever_their_level(tmp_path):
    # 0–5 one timbre (at levels 12 dB apart), 6–7 another, 8 a third; 10–11 the first again after a gap
    for i, who in [*((i, 0) for i in range(6)), (6, 1), (7, 1), (8, 2), (10, 0), (11, 0)]:
        sf.write(tmp_path / f"{i}.flac", voice(who, 3 * RATE + 37 * i) * (0.25 if i % 2 else 1.0), RATE)
    (tmp_path / "9.flac").write_bytes(b"not audio")                   # left out, and it breaks the run
    runs = takes.sessions(*takes.fingerprints(tmp_path))
    assert [[int(p.stem) for p in run] for run in runs] == [[0, 1, 2, 3, 4, 5], [6, 7], [8], [10, 11]]
    (said, held), = takes.speakers(runs)                               # 0–5: three even, three odd
    assert [p.name for p in said] == ["0.flac", "2.flac", "4.flac"] and [p.name for p in held] == ["1.flac", "3.flac", "5.flac"]


def test_the_dev_recordings_fall_in_sessions_that_cover_every_readable_file_once():
    folder = require(data_root() / "wakeword_benchmark_dev" / "alexa")
    m = takes.measure(folder)
    assert sum(k * n for k, n in m["lengths"].items()) == m["files"] > 300
    assert m["near_median"] > takes.SAME_SESSION > m["far_median"]      # neighbours alike, far ones not
    assert m["far_above"] < 0.1
    assert f"{m['files']} readable recordings" in takes.section("alexa", m)


def test_the_verdict_follows_the_usual_session_length():
    m = {"files": 60, "near_median": 0.8, "far_median": 0.0, "far_above": 0.05, "qualifying": []}
    four = takes.section("alexa", m | {"lengths": {1: 20, 4: 10}})
    six = takes.section("alexa", m | {"lengths": {1: 6, 6: 9}})
    assert "Runs of 4 are the most common" in four and "cannot be made" in four
    assert "Runs of 6 are the most common" in six and "would give 3 takes each" in six
