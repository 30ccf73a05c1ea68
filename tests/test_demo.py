"""The demo page: its handlers on 48 kHz int16 pieces of real clips, its controls, uploads,
per-visitor state, the server's limits, and 16 visitors streaming at once over HTTP.

The two-stage page (`rotkws demo --wake`) is tested in tests/test_demo_wake.py, the browser itself
in tests/test_browser.py.
"""
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import soundfile as sf
import soxr

from app import demo
from app.demo_session import FILE_PIECE_S, PLOT_WINDOW_S, DemoSession, binned_max, log_line
from app.spotter import DEFAULT_MODEL, HOP_SECONDS, Detection, KeywordModel, KeywordSpotter
from conftest import CLIPS
from demo_client import LOG_LINE, DemoServer, StreamVisitor

BROWSER_RATE = 48_000        # what browsers send the page, Hz
PIECE_S = demo.STREAM_EVERY_S
LEAD_S, TAIL_S = 1.0, 1.0    # silence around a clip, s
VISITORS = 16
THRESHOLD = None             # the handlers' None: the model's operating point (the slider's default)

MIN_CLIPS_RIGHT = 0.85       # share of the 24 real clips the page must get right: a regression floor
                             # under the bundled model's measured 23/24 (96.6 % clip accuracy on the
                             # held-out speakers; it misses one loud `yes`: app/models/MODEL_CARD.md)

ALL_CLIPS = sorted(CLIPS.glob("*/*.wav"))
KEYWORD_CLIPS = [p for p in ALL_CLIPS if not p.parent.name.startswith("_")]
SILENCE_CLIPS = sorted(CLIPS.glob("_silence_/*.wav"))


def clip_id(path) -> str:
    return f"{path.parent.name}/{path.stem}"


def expected(path) -> set[str]:
    """What a clip should be detected as: its keyword; nothing for _silence_ and _unknown_."""
    return set() if path.parent.name.startswith("_") else {path.parent.name}


def require_default_model():
    """The bundled model these tests detect with; skip without it, fail under CI."""
    if not DEFAULT_MODEL.is_file():
        reason = f"{DEFAULT_MODEL} is not there yet: the demo's tests detect with the bundled default model"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return DEFAULT_MODEL


@pytest.fixture(scope="module")
def model() -> KeywordModel:
    return KeywordModel(require_default_model())


def padded(path, lead_s: float = LEAD_S, tail_s: float = TAIL_S) -> tuple[np.ndarray, int]:
    """A real clip (16 kHz) with silence before and after: (samples,) float32 and its rate."""
    audio, rate = sf.read(path, dtype="float32")
    lead, tail = np.zeros(int(lead_s * rate), np.float32), np.zeros(int(tail_s * rate), np.float32)
    return np.concatenate([lead, audio, tail]), rate


def at_48k(path, lead_s: float = LEAD_S, tail_s: float = TAIL_S) -> np.ndarray:
    """The padded clip as a browser would send it: (samples,) int16 at 48 kHz."""
    audio, rate = padded(path, lead_s, tail_s)
    audio = soxr.resample(audio, rate, BROWSER_RATE)
    return np.round(np.clip(audio, -1, 1) * 32767).astype(np.int16)


def padded_file(path, folder) -> str:
    """The padded clip at its own rate as a 16-bit WAV file in `folder`."""
    out = folder / f"{path.parent.name}_{path.stem}.wav"
    sf.write(out, *padded(path), subtype="PCM_16")
    return out


def split(audio: np.ndarray, sizes_s) -> list[np.ndarray]:
    """`audio` cut into pieces of the given lengths in seconds (cycled), as the browser does."""
    pieces, i, sizes = [], 0, list(sizes_s)
    while i < len(audio):
        n = int(sizes[len(pieces) % len(sizes)] * BROWSER_RATE)
        pieces.append(audio[i:i + n])
        i += n
    return pieces


def stream(model, audio, sizes_s=(PIECE_S,), session=None, threshold=THRESHOLD, gain_db=0.0):
    """Run `audio` through the microphone handler piece by piece; returns the visitor's session."""
    for piece in split(audio, sizes_s):
        *_views, session = demo.on_chunk(model, (BROWSER_RATE, piece), session, threshold, gain_db)
    return session


def peaks(session) -> dict[str, float]:
    """Each class's highest score in the session, for failure messages."""
    return {k: round(float(p), 3) for k, p in zip(session.model.labels, session.scores.max(axis=0))}


def found(session) -> list[tuple[str, float, float]]:
    return [(d.keyword, round(d.time_s, 4), round(d.score, 4)) for d in session.detections]


# ─── real clips through the microphone handler ───

@pytest.fixture(scope="module")
def heard(model) -> dict:
    """Each real clip at 48 kHz, streamed through the handler in the browser's pieces."""
    return {path: stream(model, at_48k(path)) for path in ALL_CLIPS}


@pytest.fixture(scope="module")
def spoken(heard) -> list:
    """Keyword clips the model gets right, one per keyword: the plumbing tests' material."""
    right = [p for p in KEYWORD_CLIPS if {d.keyword for d in heard[p].detections} == expected(p)]
    firsts: dict = {}
    for p in right:
        firsts.setdefault(p.parent.name, p)
    firsts = list(firsts.values())
    if len(firsts) < 2:
        pytest.fail(f"the model detects fewer than two keywords in the real clips ({firsts})")
    return firsts


@pytest.fixture(scope="module")
def clip_a(spoken):
    return spoken[0]


@pytest.fixture(scope="module")
def clip_b(spoken):
    return spoken[1]


@pytest.mark.parametrize("path", ALL_CLIPS, ids=clip_id)
def test_48k_pieces_detect_what_the_runtime_detects_on_the_16k_clip(model, heard, path):
    """The page's path (48 kHz int16 pieces, resampled per visitor) decides as the runtime does
    on the original 16 kHz clip in one call: the demo adds nothing and loses nothing."""
    direct = KeywordSpotter(model).process(*padded(path)).detections
    page = heard[path].detections
    assert [d.keyword for d in page] == [d.keyword for d in direct], clip_id(path)
    np.testing.assert_allclose([d.time_s for d in page], [d.time_s for d in direct], atol=HOP_SECONDS + 1e-9)
    np.testing.assert_allclose([d.score for d in page], [d.score for d in direct], atol=0.02)


def test_real_clips_at_48k_detect_their_keyword(heard):
    """Keyword clips detect their keyword and nothing else, _unknown_/_silence_ clips nothing."""
    got = {path: [d.keyword for d in session.detections] for path, session in heard.items()}
    wrong = {clip_id(p): k for p, k in got.items() if set(k) != expected(p)}
    assert len(wrong) <= (1 - MIN_CLIPS_RIGHT) * len(got), \
        f"{len(wrong)} of {len(got)} clips wrong (detected: {wrong}); peak scores: " \
        f"{ {clip_id(p): peaks(heard[p]) for p in got if clip_id(p) in wrong} }"
    early = [clip_id(p) for p, s in heard.items() if any(d.time_s <= LEAD_S for d in s.detections)]
    assert not early, f"detections before the word starts at {LEAD_S} s: {early}"


@pytest.mark.parametrize("path", SILENCE_CLIPS, ids=clip_id)
def test_silence_clips_detect_nothing(heard, path):
    assert heard[path].detections == [], f"{clip_id(path)}: false detections {heard[path].detections}"


def test_synthetic_48k_pieces_give_probabilities_and_no_detection(model):
    rng = np.random.default_rng(0)
    quiet = (rng.standard_normal(3 * BROWSER_RATE) * 30).astype(np.int16)   # −60 dBFS noise
    silent = np.zeros(BROWSER_RATE, np.int16)
    stereo = np.stack([quiet[:BROWSER_RATE]] * 2, axis=1)                   # (n, 2) as some browsers
    session = stream(model, np.concatenate([silent, quiet]), sizes_s=(0.25, 1.0, 0.5, 0.37))
    *views, session = demo.on_chunk(model, (BROWSER_RATE, stereo), session, THRESHOLD, 0.0)
    assert session.detections == []
    assert np.all(np.diff(session.times) > 0), "hop times must only grow"
    np.testing.assert_allclose(session.scores.sum(axis=1), 1.0, atol=1e-4)
    assert session.scores.min() >= 0 and session.scores.max() <= 1
    scores, plot, log, latency = views
    assert set(scores) == set(model.labels) and log == ""
    assert set(plot["keyword"]) == set(model.keywords), "the plot draws every keyword, always"
    assert plot["time"].max() <= session.times[-1] + 0.1
    assert plot["time"].min() >= session.times[-1] - PLOT_WINDOW_S - 0.1
    assert "48 kHz" in latency and "real time" in latency


def test_empty_and_missing_pieces_change_nothing(model):
    session = stream(model, np.zeros(BROWSER_RATE // 2, np.int16))
    hops = len(session.times)
    *_, same = demo.on_chunk(model, None, session, THRESHOLD, 0.0)
    *_, same = demo.on_chunk(model, (BROWSER_RATE, np.zeros(0, np.int16)), same, THRESHOLD, 0.0)
    assert same is session and len(session.times) == hops


def test_piece_sizes_do_not_change_detections(model, clip_a):
    audio = at_48k(clip_a)
    reference = found(stream(model, audio, sizes_s=(PIECE_S,)))
    for sizes in [(0.25,), (1.0,), (0.25, 0.9, 0.61, 1.0)]:
        got = found(stream(model, audio, sizes_s=sizes))
        assert [k for k, *_ in got] == [k for k, *_ in reference], sizes
        np.testing.assert_allclose([t for _, t, _ in got], [t for _, t, _ in reference], atol=1e-3)
        np.testing.assert_allclose([s for *_, s in got], [s for *_, s in reference], atol=1e-3)


def test_two_visitors_never_see_each_others_state(model, clip_a, clip_b):
    a_audio, b_audio = at_48k(clip_a), at_48k(clip_b, lead_s=2.0)
    alone = found(stream(model, a_audio)), found(stream(model, b_audio))
    a = b = None
    a_pieces, b_pieces = split(a_audio, (PIECE_S,)), split(b_audio, (PIECE_S,))
    for k in range(max(len(a_pieces), len(b_pieces))):      # interleaved, as two tabs would
        if k < len(a_pieces):
            *_, a = demo.on_chunk(model, (BROWSER_RATE, a_pieces[k]), a, THRESHOLD, 0.0)
        if k < len(b_pieces):
            *_, b = demo.on_chunk(model, (BROWSER_RATE, b_pieces[k]), b, THRESHOLD, 0.0)
    assert a is not b and a.spotter is not b.spotter
    assert (found(a), found(b)) == alone


# ─── controls ───

def test_threshold_control_reaches_the_spotter_mid_stream(model, clip_a):
    audio = at_48k(clip_a)
    low, high = stream(model, audio, threshold=0.3), stream(model, audio, threshold=0.99)
    assert low.spotter.threshold == pytest.approx(0.3) and high.spotter.threshold == pytest.approx(0.99)
    assert len(high.detections) <= len(low.detections)
    *_, low = demo.on_chunk(model, (BROWSER_RATE, audio[:4800]), low, 0.8, 0.0)
    assert low.spotter.threshold == pytest.approx(0.8), "a moved slider applies from the next piece"


def test_listen_control_reaches_the_spotter_mid_stream(model, clip_a):
    keyword, audio = clip_a.parent.name, at_48k(clip_a)
    others = [k for k in model.keywords if k != keyword]
    session = None
    for piece in split(audio, (PIECE_S,)):                  # its keyword unticked: never detected
        *_, session = demo.on_chunk(model, (BROWSER_RATE, piece), session, THRESHOLD, 0.0, others)
    assert session.spotter.keywords == tuple(others) and keyword not in {d.keyword for d in session.detections}
    *_, session = demo.on_chunk(model, (BROWSER_RATE, audio[:4800]), session, THRESHOLD, 0.0, list(model.keywords))
    assert session.spotter.keywords == model.keywords, "ticked again, it is listened for from the next piece"
    for _ in range(2):                                      # none ticked: said once, the last choice stays
        *_, log, _latency, session = demo.on_chunk(model, (BROWSER_RATE, audio[:4800]), session, THRESHOLD, 0.0, [])
    assert session.spotter.keywords == model.keywords
    assert log.count("expected one or more of the model's keywords") == 1, log


def test_listening_for_some_keeps_their_calibrated_thresholds():
    calibrated = KeywordModel(require_default_model())
    point = {k: round(0.5 + 0.01 * i, 2) for i, k in enumerate(calibrated.keywords)}
    calibrated.meta = {**calibrated.meta, "detection": {"threshold": point}}
    session = DemoSession(calibrated)
    session.configure(None, 0.0, ["no", "yes"])
    assert session.spotter.keywords == ("yes", "no") and session.spotter.threshold == {"yes": 0.5, "no": 0.51}
    session.configure(0.7, 0.0, list(calibrated.keywords))  # the slider moved: one for every keyword
    assert session.spotter.threshold == 0.7
    session.configure(None, 0.0, ["up"])                    # back at the start: the model's own again
    assert session.spotter.threshold == point["up"]


def test_sensitivity_is_an_input_gain(model):
    session = DemoSession(model)
    piece = np.array([1000, -1000, 32767], np.int16)
    assert session._gained(piece) is piece, "0 dB leaves the browser's samples untouched"
    session.configure(gain_db=20.0)
    expected = [1000 * 10 / 32768, -1000 * 10 / 32768, 1.0]          # ×10 in amplitude, clipped
    np.testing.assert_allclose(session._gained(piece), expected, rtol=1e-6)
    session.configure(gain_db=99.0)
    assert session.gain_db == demo.GAIN_RANGE_DB[1], "the gain is clamped to the slider's range"


def test_clear_forgets_audio_and_log(model, clip_a):
    session = stream(model, at_48k(clip_a))
    scores, plot, log, latency, same = demo.on_clear(model, session, THRESHOLD, 0.0)
    assert same is session and session.detections == [] and log == "" and scores is None
    assert len(plot) == 0 and latency == "Waiting for audio."
    assert found(stream(model, at_48k(clip_a), session=session)) == \
        found(stream(model, at_48k(clip_a)))


def test_log_line_shows_wall_clock_stream_time_keyword_and_score():
    line = log_line(Detection("yes", 3.2104, 0.934))
    assert line.endswith("t=   3.21 s  yes      0.93") and line[2] == ":" and line[5] == ":"


def test_binned_max_keeps_each_bins_peak():
    times = np.array([0.01, 0.05, 0.09, 0.11, 0.35])
    scores = np.array([[0.1, 0.9], [0.5, 0.2], [0.3, 0.3], [0.2, 0.1], [0.0, 1.0]])
    bin_ends, peaks = binned_max(times, scores, rate_hz=10)
    np.testing.assert_allclose(bin_ends, [0.1, 0.2, 0.4])
    np.testing.assert_allclose(peaks, [[0.5, 0.9], [0.2, 0.1], [0.0, 1.0]])


def test_binned_max_skips_hops_a_model_did_not_run():
    """NaN (the command model outside its window) counts only where the whole bin is NaN."""
    times = np.array([0.05, 0.09, 0.15, 0.19])
    scores = np.array([[np.nan], [0.4], [np.nan], [np.nan]])
    _, peaks = binned_max(times, scores, rate_hz=10)
    np.testing.assert_array_equal(peaks, [[0.4], [np.nan]])


# ─── uploads ───

def test_file_upload_runs_the_streaming_path(model, clip_a, tmp_path):
    audio = at_48k(clip_a)
    path = tmp_path / "clip.wav"
    sf.write(path, audio, BROWSER_RATE, subtype="PCM_16")
    *_, log, _latency, session = demo.on_file(model, str(path), None, THRESHOLD, 0.0)
    streamed = stream(model, audio, sizes_s=(FILE_PIECE_S,))
    streamed.finish()                                     # a file's end is flushed
    assert found(session) == found(streamed) and found(streamed)
    assert "clip.wav: 3.0 s at 48000 Hz" in log and clip_a.parent.name in log


def test_a_16k_file_is_detected_too(model, clip_a, tmp_path):
    *_, session = demo.on_file(model, str(padded_file(clip_a, tmp_path)), None, THRESHOLD, 0.0)
    assert {d.keyword for d in session.detections} == {clip_a.parent.name}


def test_non_audio_upload_is_a_message_on_the_page(model, clip_a, tmp_path, monkeypatch):
    warnings = []
    monkeypatch.setattr(demo.gr, "Warning", lambda message, *a, **k: warnings.append(message))
    path = tmp_path / "notes.wav"
    path.write_text("this is not audio")
    *_, log, _latency, session = demo.on_file(model, str(path), None, THRESHOLD, 0.0)
    assert warnings and "notes.wav: not a readable audio file" in warnings[0] and "expected WAV" in warnings[0]
    assert log.startswith("!! notes.wav: not a readable audio file")
    *_, session = demo.on_file(model, str(padded_file(clip_a, tmp_path)), session, THRESHOLD, 0.0)
    assert session.detections, "the session keeps working after a bad file"


def test_empty_and_overlong_files_are_refused_with_the_limit(model, tmp_path, monkeypatch):
    import app.demo_session as demo_session
    monkeypatch.setattr(demo.gr, "Warning", lambda message, *a, **k: None)
    sf.write(tmp_path / "empty.wav", np.zeros(0), BROWSER_RATE)
    monkeypatch.setattr(demo_session, "MAX_FILE_S", 0.5)
    *_, log, _latency, _session = demo.on_file(model, str(tmp_path / "empty.wav"), None, THRESHOLD, 0.0)
    assert "empty.wav: holds no audio samples" in log
    *_, log, _latency, _session = demo.on_file(model, str(ALL_CLIPS[0]), None, THRESHOLD, 0.0)
    assert ": is 1 s long; files up to 0.5 s are read" in log


# ─── the page and the server ───

def test_page_has_the_parts_tests_and_users_rely_on(model):
    import gradio as gr
    page = demo.build_demo(model)
    by_id = {b.elem_id: b for b in page.blocks.values() if getattr(b, "elem_id", None)}
    assert isinstance(by_id["detections"], gr.Textbox)
    assert by_id["mic"].streaming and by_id["mic"].sources == ["microphone"]
    assert isinstance(by_id["scores"], gr.Label) and isinstance(by_id["plot"], gr.LinePlot)
    assert {"threshold", "sensitivity", "listen", "upload", "clear"} <= set(by_id)
    assert by_id["listen"].value == list(model.keywords), "every keyword ticked to start"
    stream_fn = next(f for f in page.fns.values() if f.api_name == "stream")
    assert stream_fn.connection == "stream" and stream_fn.stream_every == demo.STREAM_EVERY_S


def test_cli_binds_to_loopback_unless_told():
    args = demo.parse_args([])
    assert (args.host, args.port, args.model) == ("127.0.0.1", 7860, None)
    assert demo.parse_args(["--host", "0.0.0.0"]).host == "0.0.0.0"


def test_cli_refuses_a_missing_model(tmp_path, capsys):
    assert demo.main(["--model", str(tmp_path / "none.onnx")]) == 2
    assert "no model at" in capsys.readouterr().err


def test_app_serves_web_dir_and_limits_uploads(model, tmp_path):
    from fastapi.testclient import TestClient
    (tmp_path / "index.html").write_text("<p>spotter</p>")
    with TestClient(demo.build_app(demo.build_demo(model), web_dir=tmp_path)) as client:
        assert client.get("/web/").text == "<p>spotter</p>"
        assert client.get("/").status_code == 200
        big = b"\0" * (demo.MAX_FILE_BYTES + 1)
        r = client.post("/gradio_api/upload", files=[("files", ("big.wav", big, "audio/wav"))])
        assert r.status_code == 413, f"an upload over the limit got {r.status_code}, expected 413"
    assert demo.build_app(demo.build_demo(model), web_dir=tmp_path / "absent") is not None


@pytest.fixture(scope="module")
def server(model):
    with DemoServer(DEFAULT_MODEL) as url:
        yield url


@pytest.mark.slow
def test_non_audio_upload_over_http_keeps_the_server_serving(server, clip_a, tmp_path):
    from gradio_client import Client, handle_file
    path = tmp_path / "notes.txt"
    path.write_text("this is not audio")
    client = Client(server, verbose=False)
    _scores, _plot, log, _latency = client.predict(handle_file(str(path)), api_name="/file")
    assert "notes.txt: not a readable audio file" in log
    _scores, _plot, log, _latency = client.predict(handle_file(str(padded_file(clip_a, tmp_path))),
                                                   api_name="/file")
    assert [k for _, k, _ in LOG_LINE.findall(log)] == [clip_a.parent.name], log


@pytest.mark.slow
def test_sixteen_visitors_at_once_get_what_they_get_alone(server):
    clips = KEYWORD_CLIPS[:VISITORS]
    audios = [at_48k(p) for p in clips]
    alone = [visit(server, a, paced=False) for a in audios]
    spread = PIECE_S / len(clips)                 # they start within one piece, not in lockstep
    with ThreadPoolExecutor(len(clips)) as pool:
        futures = [pool.submit(visit, server, a, i * spread) for i, a in enumerate(audios)]
        together = [f.result(timeout=120) for f in futures]
    for path, one, many in zip(clips, alone, together):
        assert many.detections == one.detections, f"{clip_id(path)}: alone {one.log!r}, together {many.log!r}"
    assert sum(bool(one.detections) for one in alone) >= len(clips) // 2, "too few detections to compare"
    # every piece of every visitor was answered (how fast is measured by benchmarks/bench_demo.py,
    # not asserted here: wall-clock limits fail on a shared machine for reasons of its own)
    assert all(len(a.round_trips_s) == len(b.round_trips_s) for a, b in zip(together, alone))


def visit(url, audio, delay_s=0.0, paced=True):
    """One new browser session streaming `audio` in real time (or as fast as answered)."""
    time.sleep(delay_s)
    visitor = StreamVisitor(url)
    try:
        return visitor.stream(audio, BROWSER_RATE, PIECE_S, paced=paced)
    finally:
        visitor.close()


def test_a_per_keyword_operating_point_survives_the_slider_until_it_moves(model, tmp_path):
    """A calibrated model has one threshold per keyword: the slider starts at their median and
    leaves them alone until the visitor moves it; then one threshold holds for every keyword."""
    import json
    import onnx
    from export.onnx import set_metadata
    point = {k: round(0.6 + 0.03 * i, 2) for i, k in enumerate(model.keywords)}
    proto = onnx.load(str(model.path))
    set_metadata(proto, {"detection": json.dumps({"threshold": point})})
    onnx.save(proto, str(tmp_path / "calibrated.onnx"))
    calibrated = KeywordModel(tmp_path / "calibrated.onnx")
    start, text = demo.slider_start(calibrated)
    assert start == pytest.approx(np.median(list(point.values())), abs=0.006)   # on the slider's 0.01 steps
    assert text.startswith(f"{model.keywords[0]} 0.60")
    session = DemoSession(calibrated, demo.slider_threshold(calibrated, start))
    session.configure(demo.slider_threshold(calibrated, start), 0.0)
    assert session.spotter.threshold == point                     # untouched
    session.configure(demo.slider_threshold(calibrated, 0.7), 0.0)
    assert session.spotter.threshold == 0.7                       # moved: one for all
    session.configure(demo.slider_threshold(calibrated, start), 0.0)
    assert session.spotter.threshold == point                     # back at the start: the model's again
