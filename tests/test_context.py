"""What came before a keyword (benchmarks/context.py): each setting puts the clip where it says,
a clip counts as found only where the runtime's rule fires its keyword, and the bench runs end
to end on the real corpus."""
import numpy as np
import pytest
import torch

from benchmarks import context
from benchmarks.context import GAP_S, LEAD_S, LEVELS, SETTINGS, SILENCE_S, found, setting_pixels
from model.logmel import FRAME_RATE

from conftest import REPO

DEFAULT_CHECKPOINT = REPO / "training" / "checkpoints" / "kws12_stream.ckpt"
LABELS = ["yes", "no", "_unknown_", "_silence_"]
F = 40


def test_each_setting_puts_the_clip_after_what_it_names():
    clip = np.full((98, F), 150, np.uint8)
    other = np.full((60, F), 120, np.uint8)
    noise = np.full((round(SILENCE_S * FRAME_RATE), F), 30, np.uint8)
    for setting in SETTINGS:
        x, start = setting_pixels(clip, other, noise, setting)
        assert x.dtype == np.float32 and (x[start:start + 98] == 150).all()
        assert (x[start + 98:] == 0).all() and len(x) - start - 98 == round(context.AFTER_S * FRAME_RATE)
        before = x[:start]
        if setting == "first":
            assert start == 0
        elif setting == "after silence":
            assert start == round(SILENCE_S * FRAME_RATE) and (before == 0).all()
        elif setting == "after noise":
            assert start == len(noise) and (before == 30).all()
        else:
            lead, gap = round(LEAD_S * FRAME_RATE), round(GAP_S * FRAME_RATE)
            assert start == lead + 60 + gap
            assert (before[:lead] == 0).all() and (before[lead:lead + 60] == 120).all() and (before[lead + 60:] == 0).all()


class LoudIsYes(torch.nn.Module):
    """Hears `yes` (probability ~1) in every loud frame, `_silence_` elsewhere; after any loud
    frame before the current word (the state), `yes` only at ~0.93."""

    def frame_logits(self, x, state=None):
        loud = x.mean(-1) > 100                                          # (B, T)
        onset = loud & ~torch.nn.functional.pad(loud, (1, 0))[:, :-1]
        words = onset.long().cumsum(1) + (0 if state is None else state[:, :1].long())
        logits = torch.full((*x.shape[:2], len(LABELS)), -20.0)
        logits[..., 0] = torch.where(loud, torch.where(words > 1, 2.6, 20.0), -20.0)   # 2.6: p ≈ 0.93
        logits[..., 3] = torch.where(loud, 0.0, 20.0)
        return logits, words[:, -1:].float()


def test_found_counts_the_detectors_hits_of_the_clips_own_keyword():
    clips = [(np.full((98, F), 150, np.uint8), "yes"), (np.full((98, F), 150, np.uint8), "no")]
    others = [(np.full((60, F), 140, np.uint8), "_unknown_")]
    noise = np.full((500, F), 30, np.uint8)
    shares = found(LoudIsYes(), LABELS, ["yes", "no"], clips, others, noise, np.random.default_rng(0))
    assert set(shares) == set(SETTINGS)
    at = {level: k for k, level in enumerate(LEVELS)}
    for setting in ("first", "after silence", "after noise"):
        assert shares[setting][at[0.99]] == 0.5                 # `yes` found, `no` (heard as yes) not
    assert shares["after a word"][at[0.9]] == 0.5               # the second word: yes at ~0.93 …
    assert shares["after a word"][at[0.96]] == 0.0              # … not at 0.96


def test_context_bench_runs_on_the_held_out_images(shared_data, tmp_path, capsys):
    out = tmp_path / "BENCHMARKS.md"
    args = ["--checkpoint", f"default={DEFAULT_CHECKPOINT}", "--clips", "20", "--data", str(shared_data),
            "--out", str(out)]
    assert context.main(args) == 0
    text = out.read_text()
    assert "<!-- bench:context_validation -->" in text and "20 keyword clips (images and WAVs as pixels) of validation-split" in text
    row = next(line for line in text.splitlines() if line.startswith("| default"))
    first_at_half = float(row.split("|")[2].split("/")[0].strip(" %"))
    assert first_at_half >= 80                                  # the default hears most words at 0.5
    capsys.readouterr()
    with pytest.raises(SystemExit):
        context.main(["--checkpoint", f"default={DEFAULT_CHECKPOINT}", "--clips", "-1"])
    assert "--clips expects a count" in capsys.readouterr().err
