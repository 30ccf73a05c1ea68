"""Heard alone (benchmarks/alone.py): each clip is heard by itself, clean or over the streams'
gated noise, its hits and false accepts are the runtime rule's, the false accepts per hour are
a stream's rate of clips times the false accepts per clip, and the bench runs end to end on the
real corpus."""
import numpy as np
import pytest
import torch

from benchmarks import alone
from evaluation import streams as stream
from benchmarks.alone import alone_pixels, at_miss_rate, det_rows, heard_alone, items_per_hour, sweep_alone
from benchmarks.pixel_stream import over_noise
from model.logmel import FRAME_RATE, power_from_pixels

from conftest import REPO

DEFAULT_CHECKPOINT = REPO / "training" / "checkpoints" / "kws12_stream.ckpt"
LABELS = ["yes", "no", "_unknown_", "_silence_"]
F = 40


class HearsByLevel(torch.nn.Module):
    """Frames at pixel 150 are `yes`, at 120 `no` (probability ~1), anything else `_silence_`;
    no state."""

    def frame_logits(self, x, state=None):
        logits = torch.full((*x.shape[:2], len(LABELS)), -20.0)
        level = x.mean(-1)
        logits[..., 0] = torch.where((level - 150).abs() < 1, 20.0, -20.0)
        logits[..., 1] = torch.where((level - 120).abs() < 1, 20.0, -20.0)
        logits[..., 3] = torch.where(((level - 150).abs() < 1) | ((level - 120).abs() < 1), -20.0, 20.0)
        return logits, None


def clip(level, frames=98):
    return np.full((frames, F), level, np.uint8)


def test_a_clip_alone_is_the_clip_then_silence_or_over_its_gated_noise():
    x, start = alone_pixels(clip(150), None, None)
    after = round(alone.AFTER_S * FRAME_RATE)
    assert start == 0 and x.dtype == np.float32 and len(x) == 98 + after
    assert (x[:98] == 150).all() and (x[98:] == 0).all()
    lead = round(stream.GAP_S[0] * FRAME_RATE)
    noise = np.full((lead + 98, F), 90, np.uint8)
    x, start = alone_pixels(clip(150), noise, 10.0)
    assert start == lead and len(x) == lead + 98 + after
    assert (x[:lead] > 0).all() and (x[:lead].max() < x[lead:lead + 98].min()) and (x[lead + 98:] == 0).all()
    mixed = over_noise(clip(150), noise, 10.0)                       # mel power, the SNR exact
    bed = mixed[:lead].mean()
    assert torch.isclose((mixed[lead:] - bed).mean() / bed, torch.tensor(10.0, dtype=torch.float64))
    assert torch.isclose(mixed[lead:] - bed, power_from_pixels(torch.tensor(150.0, dtype=torch.float64))).all()


def test_hits_and_false_accepts_are_the_rules_on_each_clip():
    clips = [(clip(150), "yes"), (clip(150), "yes"), (clip(150), "no"), (clip(120), "no"),
             (clip(150), "_unknown_"), (clip(60), "_unknown_")]
    tracks = heard_alone(HearsByLevel(), clips)
    sweep = sweep_alone(tracks, LABELS, ["yes", "no"], thresholds=[0.5, 0.9999])
    assert sweep["keyword_clips"] == 4 and sweep["other_clips"] == 2
    assert list(sweep["misses"]) == [1, 1]              # `no` heard as `yes` …
    assert list(sweep["on_keyword"]) == [1, 1]          # … is also a false accept on a keyword clip
    assert list(sweep["on_other"]) == [1, 1]            # the loud other word; the quiet one nothing
    rows = det_rows(sweep, per_hour=600.0)
    assert rows[0]["miss_rate"] == 0.25
    assert rows[0]["fa_per_hour"] == pytest.approx(2 / 6 * 600)
    assert rows[0]["from_keywords"] == pytest.approx(100) and rows[0]["from_others"] == pytest.approx(100)
    assert at_miss_rate(rows, 0.25)["threshold"] == 0.9999 and at_miss_rate(rows, 0.2) is None
    only_no = sweep_alone(tracks, LABELS, ["no"], thresholds=[0.5])      # listening for `no` alone:
    assert only_no["keyword_clips"] == 2 and list(only_no["misses"]) == [1]   # the `no` heard as yes is missed,
    assert only_no["on_keyword"].sum() + only_no["on_other"].sum() == 0     # and no `yes` fires
    heard = Recorder()
    noisy = heard_alone(heard, clips, np.full((1000, F), 30, np.uint8), np.random.default_rng(0))
    assert [e.snr_db for *_, e in noisy] == [stream.SNRS_DB[k % len(stream.SNRS_DB)] for k in range(len(clips))]
    lead = round(stream.GAP_S[0] * FRAME_RATE)
    for k, x in enumerate(heard.seen):                   # each clip over its gated noise, the SNRs in turn
        assert len(x) == lead + 98 + round(alone.AFTER_S * FRAME_RATE) and (x[:lead] > 0).all()
        power = power_from_pixels(torch.from_numpy(x[:lead + 98]).double())
        bed = power[:lead].mean()
        snr = 10 * torch.log10((power[lead:] - bed).mean() / bed)
        assert abs(float(snr) - stream.SNRS_DB[k % len(stream.SNRS_DB)]) < 0.1


class Recorder(HearsByLevel):
    """Keeps every input it hears."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def frame_logits(self, x, state=None):
        self.seen.append(x[0].numpy().copy())
        return super().frame_logits(x, state)


def test_a_stream_holds_one_clip_per_gap_and_clip():
    clips = [(clip(0, 100), "yes"), (clip(0, 300), "_unknown_")]
    assert items_per_hour(clips) == pytest.approx(3600 / (2.0 + np.mean(stream.GAP_S)))


def test_alone_bench_runs_on_the_held_out_images(shared_data, tmp_path, capsys):
    out = tmp_path / "BENCHMARKS.md"
    args = ["--checkpoint", f"default={DEFAULT_CHECKPOINT}", "--clips", "60", "--per-keyword",
            "--data", str(shared_data), "--out", str(out)]
    assert alone.main(args) == 0
    text = out.read_text()
    assert "<!-- bench:alone_validation -->" in text and "scored alone:" in text
    rows = [line for line in text.splitlines() if line.startswith("| default (")]
    assert [r.split("|")[2].strip() for r in rows] == ["clean", "over noise"]
    one = [line.split("|")[3].strip() for line in text.splitlines() if line.startswith("| default |")]
    assert one == 2 * ["yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go"]
    at_half = [float(r.split("|")[-2].split("%")[0]) for r in rows]
    assert at_half[0] <= 20 and at_half[1] <= 50              # most words heard, clean and over noise
    capsys.readouterr()
    with pytest.raises(SystemExit):
        alone.main(["--checkpoint", f"default={DEFAULT_CHECKPOINT}", "--clips", "-1"])
    assert "--clips expects a count" in capsys.readouterr().err
