"""`rotkws bench`: its statistics, its fast threshold sweep against the runtime's detector, the
stream's ground truth, and the whole quick run end to end as a real process."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.detection import MIN_HOPS, REFRACTORY_S, SMOOTHING_HOPS, detect
from app.sweep import THRESHOLDS, sweep_detections
from benchmarks import stats
from evaluation import streams as stream
from evaluation.streams import Event

REPO = Path(__file__).resolve().parents[1]
LABELS = ("yes", "no", "up", "_unknown_", "_silence_")
KEYWORDS = ("yes", "no", "up")


def test_mean_interval_is_students_t():
    s = stats.mean_interval([0.80, 0.82, 0.84])
    half = 4.302652729911275 * 0.02 / math.sqrt(3)         # t(0.975, 2) · sd / √n
    assert s["mean"] == pytest.approx(0.82)
    assert (s["low"], s["high"]) == pytest.approx((0.82 - half, 0.82 + half))
    assert math.isnan(stats.mean_interval([0.5])["low"])      # one seed: no interval


def test_welch_and_holm():
    assert stats.welch_p([0.80, 0.81, 0.79], [0.90, 0.91, 0.89]) < 0.001
    assert stats.welch_p([0.80, 0.85, 0.75], [0.81, 0.86, 0.74]) > 0.5
    assert stats.welch_p([0.8, 0.8], [0.8, 0.8]) == 1.0
    # Holm at 0.05 over 3: 0.01 ≤ 0.05/3 passes; 0.03 > 0.05/2 stops the rest
    assert stats.holm({"a": 0.01, "b": 0.04, "c": 0.03}) == {"a": True, "b": False, "c": False}
    assert stats.holm({"a": 0.01, "b": 0.02, "c": math.nan}) == {"a": True, "b": True, "c": False}


def synthetic_track(seed: int, hops: int = 6000):
    """Score rows with bursts of keywords over a background, like a spotter's output."""
    rng = np.random.default_rng(seed)
    scores = rng.dirichlet(np.ones(len(LABELS)) * 0.5, size=hops)
    for start in rng.integers(0, hops - 10, size=hops // 40):
        k = rng.integers(0, len(KEYWORDS))
        scores[start:start + rng.integers(1, 8)] = np.eye(len(LABELS))[k] * rng.uniform(0.3, 1.0) + 0.01
    return np.arange(1, hops + 1) * 0.1, scores


@pytest.mark.parametrize("seed, rule", [
    (0, {"smoothing": SMOOTHING_HOPS, "min_hops": MIN_HOPS, "refractory_s": REFRACTORY_S}),   # the defaults
    (1, {"smoothing": SMOOTHING_HOPS, "min_hops": MIN_HOPS, "refractory_s": REFRACTORY_S}),
    (2, {"smoothing": 8, "min_hops": 2, "refractory_s": REFRACTORY_S}),                        # enroll's
    (3, {"smoothing": 5, "min_hops": 4, "refractory_s": 0.5}),
])
def test_fast_sweep_gives_exactly_the_detectors_detections(seed, rule):
    times, scores = synthetic_track(seed)
    thresholds = [0.3, 0.45, 0.6, 0.75, 0.9, 0.99]
    defaults = rule["smoothing"] == SMOOTHING_HOPS and rule["min_hops"] == MIN_HOPS and rule["refractory_s"] == REFRACTORY_S
    fast = (sweep_detections(times, scores, LABELS, KEYWORDS, thresholds) if defaults else
            sweep_detections(times, scores, LABELS, KEYWORDS, thresholds, **rule))
    for th in thresholds:
        slow = detect(times, scores, LABELS, KEYWORDS, threshold=th, **rule)
        assert [(d.keyword, d.time_s) for d in fast[th]] == [(d.keyword, d.time_s) for d in slow], th
        assert [d.score for d in fast[th]] == pytest.approx([d.score for d in slow])
    assert len(fast[0.3]) > len(fast[0.75]) > 0


def test_score_counts_hits_misses_and_false_accepts():
    from app.detection import Detection
    events = [Event("yes", 1.0, 2.0), Event("_unknown_", 4.0, 5.0), Event("no", 7.0, 8.0),
              Event("yes", 10.0, 11.0)]
    dets = [Detection("yes", 1.5, 0.9),      # hit
            Detection("yes", 2.8, 0.9),      # within 1 s after, but that clip is already hit: false
            Detection("no", 4.5, 0.9),       # on a non-keyword: false
            Detection("yes", 7.5, 0.9),      # wrong keyword: false
            Detection("yes", 11.9, 0.9)]     # within the window after the last clip: hit
    assert stream.score(dets, events, KEYWORDS) == (3, 1, 3)
    dets.append(Detection("up", 14.0, 0.9))  # 2 s after the last clip's end: nothing heard there
    targets, hit, false = stream.matched(dets, events, KEYWORDS)
    assert [d.time_s for d in false] == [2.8, 4.5, 7.5, 14.0]
    sources = dict(zip(stream.FA_SOURCES, stream.false_accept_sources(false, events, KEYWORDS).tolist()))
    assert sources == {"another keyword": 1, "its keyword again": 1, "other speech": 1, "no speech": 1}


def segment_counts(seed: int, segments: int = 6) -> np.ndarray:
    """(segments, thresholds, 3) counts as a sweep gives them: misses rise and false accepts
    fall with the threshold, each segment its own."""
    rng = np.random.default_rng(seed)
    T = len(THRESHOLDS)
    out = np.zeros((segments, T, 3), np.int64)
    out[..., 0] = 300
    out[..., 1] = np.sort(rng.integers(0, 300, (segments, T)), axis=1)
    out[..., 2] = np.sort(rng.integers(0, 40, (segments, T)), axis=1)[:, ::-1]
    return out


def test_resampled_misses_choose_as_the_operating_point_does():
    counts, seconds = segment_counts(0), np.full(6, 1800.0)
    for fa in (10.0, 3.0, 1.0):
        op = stream.operating_point(stream.det_rows(dict(zip(THRESHOLDS, counts.sum(0))), 3.0), fa)
        every = stream.resampled_misses(counts, seconds, fa, np.arange(6)[None])    # each segment once
        assert every[0] == pytest.approx(op["miss_rate"])
    picks = stream.segment_picks(6, draws=500, seed=1)
    assert picks.shape == (500, 6) and np.array_equal(picks, stream.segment_picks(6, draws=500, seed=1))
    draws = stream.resampled_misses(counts, seconds, 3.0, picks)
    low, high = stream.interval(draws)
    assert low <= stream.resampled_misses(counts, seconds, 3.0, np.arange(6)[None])[0] <= high
    assert low < high                                                 # segments differ: a spread
    same = stream.resampled_misses(counts, seconds, 3.0, picks)
    assert stream.interval(same - draws) == (0.0, 0.0)                # paired: a model against itself
    none = counts.copy()
    none[..., 2] = 1000                                               # no threshold keeps the budget
    assert np.isnan(stream.resampled_misses(none, seconds, 1.0, picks)).all()
    shifted = counts.copy()
    shifted[..., 1] = np.minimum(shifted[..., 1] + 30, 300)           # 10 points more missed everywhere
    low, high = stream.interval(stream.resampled_misses(shifted, seconds, 3.0, picks) - draws)
    assert 0 < low <= high <= 0.1 + 1e-9


def test_stream_is_seeded_and_its_ground_truth_is_where_the_speech_is(shared_data):
    labels = LABELS[:3] + ("_unknown_", "_silence_")
    clips = stream.held_out_clips(shared_data, labels, "testing", np.random.default_rng(0))
    assert any(label == "_unknown_" for _, label in clips) and any(label == "yes" for _, label in clips)
    a, events = stream.build_stream(clips, 1.0, shared_data, np.random.default_rng(5))
    b, _ = stream.build_stream(clips, 1.0, shared_data, np.random.default_rng(5))
    assert np.array_equal(a, b) and len(a) >= 60 * 16_000
    inside = np.zeros(len(a), bool)
    for e in events:
        assert 0 <= e.start_s < e.end_s <= len(a) / 16_000
        inside[int(e.start_s * 16_000):int(e.end_s * 16_000)] = True
    gaps = ~inside
    gaps[: 16_000 * 4] = False                                # before the first clip: silence
    # between clips there is only the noise that leads into the next one (1 s): quieter than speech
    assert np.sqrt(np.mean(a[inside] ** 2)) > 2 * np.sqrt(np.mean(a[gaps] ** 2))


def test_bench_refuses_a_folder_without_the_data_and_unknown_arms(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "rotkws", "bench", *a], cwd=REPO,
                                    capture_output=True, text=True, timeout=300)
    r = run("--quick", "--data", str(tmp_path), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "lacks speech_commands_v0.02_test_dev" in r.stderr
    r = run("--quick", "--arms", "rotrnn,gru")
    assert r.returncode == 2 and "unknown ['gru']" in r.stderr


@pytest.mark.slow
def test_quick_bench_writes_the_whole_report(shared_data, tmp_path):
    out = tmp_path / "bench"
    readme = (REPO / "README.md").read_text()
    env = dict(os.environ, ROTKWS_DATA=str(shared_data))
    r = subprocess.run([sys.executable, "-m", "rotkws", "bench", "--quick", "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=1500, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (REPO / "README.md").read_text() == readme                   # quick never touches it
    for png in ("confusion.png", "det.png", "ablation.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rep = json.loads((out / "report.json").read_text())
    # 1. clip accuracy: the confusion matrix is the per-class counts
    clip = rep["clip"]
    confusion = np.array(clip["confusion"])
    assert confusion.sum() == clip["n"] > 400 and clip["speakers"] > 30
    assert clip["accuracy"] == pytest.approx(np.trace(confusion) / clip["n"])
    # 2. the sweep: from its lowest threshold to its highest, misses rise and false accepts fall
    # (not strictly row by row: a wrong keyword firing first can block the right one for the
    # refractory second); the operating points obey their rates
    rows = rep["stream"]["rows"]
    assert rows[0]["miss_rate"] <= rows[-1]["miss_rate"] and rows[0]["false_accepts"] >= rows[-1]["false_accepts"]
    assert rows[0]["false_accepts"] > 0
    assert rep["stream"]["other_events"] > 0 and rep["stream"]["keyword_events"] > 0
    for name, rate in (("1 FA/h", 1.0), ("1 FA/10 h", 0.1)):
        p = rep["stream"]["points"][name]
        assert p is None or p["fa_per_hour"] <= rate
    # 3. cost: both files timed on 1 and 2 threads
    for kind in ("float32", "int8"):
        c = rep["cost"][kind]
        assert set(c["ms"]) == {"1", "2"} and all(v > 0 for m in c["ms"].values() for v in m.values())
        assert c["flops"]["stream"] > 0 and c["bytes"] > 0
    assert rep["cost"]["int8"]["bytes"] < rep["cost"]["float32"]["bytes"]
    # 4. every arm, every seed, an interval around the mean, the tests against RotRNN
    arms = rep["ablation"]["arms"]
    assert set(arms) == {"rotrnn", "rotrnn_no_xi", "lru", "dscnn"}
    for name, a in arms.items():
        acc = a["accuracy"]
        assert [r["seed"] for r in a["runs"]] == [0, 1] and acc["n"] == 2
        assert acc["mean"] == pytest.approx(np.mean([r["accuracy"] for r in a["runs"]]))
        assert math.isnan(acc["low"]) or acc["low"] <= acc["mean"] <= acc["high"]
        assert ("p_vs_reference" in a) is (name != "rotrnn")
    assert arms["dscnn"]["flops_per_second"]["stream"] == pytest.approx(
        10 * arms["dscnn"]["flops_per_second"]["clip"])           # a 1 s window every 100 ms
    md = (out / "report.md").read_text()
    assert "Quick mode" in md and "(published)" in md
    for name in arms:
        assert f"| {name}: " in md


def converged_report_of(runs: dict[str, list[tuple[int, str]]], quick: bool = False) -> dict:
    """A report.json of benchmarks/converge.py: per arm, (epochs, why it stopped) of each seed."""
    arms = {arm: {"title": f"arm {arm}", "accuracy": {"mean": 0.9, "low": 0.885, "high": 0.915},
                  "onnx_cost": {"ms": {"1": {"stream": 2.5}}}} for arm in runs}
    return {"arms": arms, "runs": [{"arm": arm, "seed": s, "epochs": e, "stopped": why}
                                   for arm, seeds in runs.items() for s, (e, why) in enumerate(seeds)],
            "state": {"budget": {"quick": quick}, "trained_on": ["gpu"], "updated": "2026-12-04T17:23:41"}}


def test_the_headline_takes_the_ablation_trained_to_the_end_and_no_one_epoch_row(tmp_path):
    """The README's rows from a bench report (the committed one: any full run's shape) and a
    converge report made here, so that a new measurement changes nothing this test expects."""
    from benchmarks import headline
    r = headline.read_report(REPO / "bench" / "report.json")           # the last full `rotkws bench`
    converged = converged_report_of({"a": [(8, "epochs")] * 3, "b": [(5, "patience"), (8, "epochs")]})
    (tmp_path / "report.json").write_text(json.dumps(converged))
    assert headline.converged_report(tmp_path / "report.json") == converged
    rows = headline.headline_rows(r, converged)
    ablation = [row for row in rows if "bench/converge/report.md" in row]
    assert ablation == [
        "| arm a, 8 epochs (the budget), 3 seeds | 90.0 % [88.5, 91.5] | — | 2.5 | same clips; "
        "[bench/converge/report.md](bench/converge/report.md) |",
        "| arm b, 5–8 epochs (no better for the patience and the budget), 2 seeds | 90.0 % [88.5, 91.5] | — | 2.5 | "
        "same clips; [bench/converge/report.md](bench/converge/report.md) |"]
    assert rows.index(ablation[0]) == 3 and not any("epoch here" in row for row in rows)   # after the default's
    assert not any("bench/converge/report.md" in row for row in headline.headline_rows(r, None))
    (tmp_path / "quick.json").write_text(json.dumps(converged_report_of({"a": [(1, "epochs")]}, quick=True)))
    assert headline.converged_report(tmp_path / "quick.json") is None       # --quick figures never headline
    assert headline.converged_report(tmp_path / "none.json") is None
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- bench:headline -->\nold\n<!-- /bench:headline -->\nafter\n")
    headline.write_readme(r, readme, converged)
    text = readme.read_text()
    assert "old" not in text and ablation[0] in text and "on gpu: [bench/converge/report.md]" in text
    assert text.endswith("<!-- /bench:headline -->\nafter\n")
