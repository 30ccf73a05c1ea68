"""Streaming detection on held-out images (benchmarks/pixel_stream.py): the torch network on
pixels scores as the runtime does on the audio they came from, the streams put each clip over
its own gated noise, and the bench runs end to end on the real corpus."""
import numpy as np
import pytest
import torch

from app.spotter import DEFAULT_MODEL, KeywordModel, KeywordSpotter
from benchmarks import pixel_stream
from evaluation import streams as stream
from benchmarks.pixel_stream import build_pixel_stream, score_pixels
from corpus.clips import read_audio
from model.classifiers import load_checkpoint
from model.logmel import FRAME, FRAME_RATE, HOP, PIXEL_MAX, pixels_from_power, power_from_pixels
from training.features import recording_pixels

from conftest import CLIPS, REPO

DEFAULT_CHECKPOINT = REPO / "training" / "checkpoints" / "kws12_stream.ckpt"   # the default file's


@pytest.mark.parametrize("clip", ["yes/03401e93_nohash_0.wav", "down/1b4c9b89_nohash_0.wav",
                                  "_unknown_/bed_4c7c95de_nohash_0.wav"])
def test_scores_on_pixels_are_the_runtimes_on_the_audio(clip):
    net, _ = load_checkpoint(DEFAULT_CHECKPOINT)
    audio = read_audio(CLIPS / clip)[0]
    silence = np.zeros(16_000, np.float32)
    audio = np.concatenate([silence, audio, silence])
    ran = KeywordSpotter(KeywordModel(DEFAULT_MODEL)).process(audio, 16_000)
    # the runtime's front-end starts from FRAME − HOP samples of silence: so do these pixels
    pixels = recording_pixels(np.concatenate([np.zeros(FRAME - HOP, np.float32), audio]))
    times, scores = score_pixels(net, pixels.astype(np.float32))
    assert len(times) == len(ran.times) and np.allclose(times, ran.times)
    assert np.abs(scores - ran.scores).max() < 0.02           # whole pixels against the graph's own
    assert (scores.argmax(1) == ran.scores.argmax(1)).mean() > 0.9


def test_each_clip_is_heard_once_per_pass_over_its_own_gated_noise():
    F = 40
    clips = [(np.full((98, F), 150, np.uint8), "yes"), (np.full((60, F), 120, np.uint8), "_unknown_")]
    noise = np.full((5000, F), 90, np.uint8)
    pixels, events = build_pixel_stream(clips, 0.5, noise, np.random.default_rng(3))
    again, same = build_pixel_stream(clips, 0.5, noise, np.random.default_rng(3))
    assert np.array_equal(pixels, again) and events == same                 # seeded
    assert [e.label for e in events[:2]].count("yes") == 1                   # one pass: each clip once
    assert [e.snr_db for e in events[:4]] == [*stream.SNRS_DB, stream.SNRS_DB[0]]
    lead = round(stream.GAP_S[0] * FRAME_RATE)
    heard = np.zeros(len(pixels), bool)
    for e in events:
        start, end = round(e.start_s * FRAME_RATE), round(e.end_s * FRAME_RATE)
        heard[start - lead:end] = True
        level = clips[0][0] if e.label == "yes" else clips[1][0]
        assert end - start == len(level)
        clip = power_from_pixels(torch.tensor(float(level[0, 0])))
        want = pixels_from_power(clip * (1 + 10 ** (-e.snr_db / 10))).clamp(max=PIXEL_MAX)
        assert np.allclose(pixels[start:end], float(want), atol=1e-3)        # clip + noise at its SNR
        before = pixels[start - lead:start]
        assert (before > 0).all() and (before < float(want)).all()           # its noise comes first
    assert (pixels[~heard] == 0).all()                                       # the gaps: silence
    assert events[-1].end_s * FRAME_RATE <= len(pixels) and len(pixels) >= 0.5 * 60 * FRAME_RATE


def test_pixel_bench_runs_on_the_held_out_images(shared_data, tmp_path, capsys):
    out = tmp_path / "BENCHMARKS.md"
    args = ["--checkpoint", f"default={DEFAULT_CHECKPOINT}", "--hours", "0.1", "--data", str(shared_data),
            "--out", str(out)]
    assert pixel_stream.main(args) == 0
    text = out.read_text()
    assert "<!-- bench:pixel_stream_validation -->" in text and "validation-split speakers" in text
    row = next(line for line in text.splitlines() if line.startswith("| default |"))
    missed, fa = row.rstrip(" |").rsplit("|", 1)[1].split(",")
    assert float(missed.strip(" %")) < 35 and float(fa) < 300     # the default at 0.5 hears most keywords
    distinct = int(text.split(" distinct keyword clips")[0].rsplit(" ", 1)[1])
    assert distinct > 3000                                        # the images: ten times the WAVs' ~400
    capsys.readouterr()
    with pytest.raises(SystemExit):
        pixel_stream.main(["--checkpoint", str(DEFAULT_CHECKPOINT)])
    assert "NAME=PATH" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pixel_stream.main(["--checkpoint", f"x={tmp_path / 'missing.ckpt'}"])
    assert "does not exist" in capsys.readouterr().err
