"""app/detection.py over hand-made score tracks: smoothing, threshold, minimum run, refractory
period, and the same detections however the rows are split between calls."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.detection import Detection, Detector, detect, moving_average

LABELS = ("yes", "no", "_unknown_", "_silence_")
KEYWORDS = ("yes", "no")
HOP = 0.1


def track(*segments) -> tuple[np.ndarray, np.ndarray]:
    """segments of (label, hops, probability): that label at the probability, the rest spread
    evenly; → (times (T,), scores (T, 4))."""
    rows = []
    for label, hops, p in segments:
        row = np.full(len(LABELS), (1 - p) / (len(LABELS) - 1))
        row[LABELS.index(label)] = p
        rows += [row] * hops
    scores = np.array(rows, np.float32)
    return (np.arange(len(scores)) + 1) * HOP, scores


def run(times, scores, **kw) -> list[Detection]:
    kw = {"threshold": 0.5, "smoothing": 1, "min_hops": 1, "refractory_s": 0.0} | kw
    return detect(times, scores, LABELS, KEYWORDS, **kw)


def test_moving_average_is_the_causal_mean_of_the_last_rows():
    x = np.random.default_rng(0).random((20, 3))
    got = moving_average(x, 4, np.zeros((0, 3)))
    want = np.stack([x[max(0, t - 3): t + 1].mean(0) for t in range(20)])
    np.testing.assert_allclose(got, want)
    np.testing.assert_allclose(moving_average(x[5:], 4, x[2:5]), want[5:])   # with history


def test_threshold_decides_and_the_score_is_the_smoothed_one():
    times, scores = track(("_silence_", 3, 0.9), ("yes", 2, 0.6), ("_silence_", 3, 0.9))
    assert run(times, scores, threshold=0.7) == []
    [d] = run(times, scores, threshold=0.55)
    assert d.keyword == "yes" and d.time_s == pytest.approx(0.4) and d.score == pytest.approx(0.6, abs=1e-6)


def test_smoothing_averages_over_the_window():
    times, scores = track(("_silence_", 2, 0.9), ("yes", 1, 0.9), ("_silence_", 3, 0.9))
    assert len(run(times, scores, threshold=0.5, smoothing=1)) == 1
    assert run(times, scores, threshold=0.5, smoothing=3) == []         # one hop of 0.9 in three
    times, scores = track(("_silence_", 2, 0.9), ("yes", 3, 0.9))
    [d] = run(times, scores, threshold=0.5, smoothing=3)
    assert d.time_s == pytest.approx(0.4)                                 # (0.9 + 0.9 + 0.033) / 3 ≥ 0.5


def test_min_hops_needs_that_many_consecutive_hops_and_fires_once_per_run():
    times, scores = track(("yes", 2, 0.9), ("_silence_", 1, 0.9), ("yes", 2, 0.9))
    assert run(times, scores, min_hops=3) == []
    times, scores = track(("yes", 10, 0.9))
    [d] = run(times, scores, min_hops=3)
    assert d.time_s == pytest.approx(0.3)                                 # the hop completing the run


def test_a_changing_candidate_restarts_the_run():
    times, scores = track(("yes", 2, 0.9), ("no", 2, 0.9), ("yes", 3, 0.9))
    assert [d.keyword for d in run(times, scores, min_hops=3)] == ["yes"]


def test_refractory_period_blocks_any_keyword_after_a_detection():
    times, scores = track(("yes", 2, 0.9), ("_silence_", 3, 0.9), ("no", 2, 0.9), ("_silence_", 10, 0.9),
                          ("yes", 2, 0.9))
    assert [d.keyword for d in run(times, scores, refractory_s=0)] == ["yes", "no", "yes"]
    assert [d.keyword for d in run(times, scores, refractory_s=1.0)] == ["yes", "yes"]


def test_silence_and_unknown_never_fire():
    times, scores = track(("_unknown_", 5, 1.0), ("_silence_", 5, 1.0))
    assert run(times, scores, threshold=0.2) == []


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2 ** 31), cuts=st.lists(st.integers(0, 80), max_size=8),
       smoothing=st.integers(1, 5), min_hops=st.integers(1, 4), refractory=st.sampled_from([0.0, 0.35, 1.0]))
def test_streaming_in_any_pieces_equals_offline(seed, cuts, smoothing, min_hops, refractory):
    rng = np.random.default_rng(seed)
    scores = rng.dirichlet(np.full(len(LABELS), 0.3), 80).astype(np.float32)   # peaky, like a model
    times = (np.arange(80) + 1) * HOP
    kw = dict(threshold=0.5, smoothing=smoothing, min_hops=min_hops, refractory_s=refractory)
    whole = run(times, scores, **kw)
    detector = Detector(LABELS, KEYWORDS, **kw)
    bounds = [0, *sorted(cuts), 80]
    pieces = [d for a, b in zip(bounds, bounds[1:]) for d in detector.update(times[a:b], scores[a:b])]
    assert pieces == whole


def test_reset_forgets_history_run_and_refractory():
    times, scores = track(("yes", 3, 0.9))
    d = Detector(LABELS, KEYWORDS, threshold=0.5, smoothing=2, min_hops=2, refractory_s=5)
    assert len(d.update(times, scores)) == 1
    d.reset()
    assert len(d.update(times, scores)) == 1


def test_bad_settings_and_shapes_are_refused():
    for kw, word in (({"threshold": 0}, "threshold"), ({"threshold": 1.2}, "threshold"),
                     ({"smoothing": 0}, "smoothing"), ({"min_hops": 1.5}, "min_hops"),
                     ({"refractory_s": -1}, "refractory_s")):
        with pytest.raises(ValueError, match=word):
            Detector(LABELS, KEYWORDS, **kw)
    with pytest.raises(ValueError, match="keywords among the labels"):
        Detector(LABELS, ("maybe",))
    d = Detector(LABELS, KEYWORDS)
    with pytest.raises(ValueError, match="shape"):
        d.update(np.zeros(3), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="threshold"):
        d.threshold = float("nan")
    d.threshold = 0.8
    assert d.threshold == 0.8


# -- one threshold per keyword (a calibrated model's operating point) ---------------------------
def test_each_keyword_fires_at_its_own_threshold():
    labels, keywords = ("yes", "no", "_silence_"), ("yes", "no")
    rows = np.array([[0.6, 0.1, 0.3]] * 3 + [[0.0, 0.0, 1.0]] * 3 + [[0.1, 0.6, 0.3]] * 3)
    times = np.arange(1, len(rows) + 1) * 0.1
    settings = dict(smoothing=1, min_hops=2, refractory_s=0.0)
    found = detect(times, rows, labels, keywords, threshold={"yes": 0.7, "no": 0.5}, **settings)
    assert [(d.keyword, round(d.time_s, 3)) for d in found] == [("no", 0.8)]      # yes stays under 0.7
    found = detect(times, rows, labels, keywords, threshold={"yes": 0.55, "no": 0.65}, **settings)
    assert [(d.keyword, round(d.time_s, 3)) for d in found] == [("yes", 0.2)]
    d = Detector(labels, keywords, threshold={"yes": 0.7, "no": 0.5})
    assert d.threshold == {"yes": 0.7, "no": 0.5}
    d.threshold = 0.6                                    # one number sets every keyword
    assert d.threshold == 0.6


@pytest.mark.parametrize("threshold, message", [
    ({"yes": 0.5}, r"a threshold for each keyword \['yes', 'no'\]"),
    ({"yes": 0.5, "no": 0.5, "up": 0.5}, "a threshold for each keyword"),
    ({"yes": 0.5, "no": 1.5}, r"threshold in \(0, 1\], got 1.5 for 'no'"),
    ({"yes": 0.5, "no": "high"}, r"threshold in \(0, 1\], got 'high' for 'no'"),
])
def test_per_keyword_thresholds_are_checked(threshold, message):
    with pytest.raises(ValueError, match=message):
        Detector(("yes", "no", "_silence_"), ("yes", "no"), threshold=threshold)
