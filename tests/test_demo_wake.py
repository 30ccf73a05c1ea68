"""The two-stage page (`rotkws demo --wake`: app/demo.py, app/demo_session.py) on a real wake word
followed by a real command: what it logs, plots and shows, its controls, its visitors' own state,
and the command line's options for it."""
import re

import numpy as np
import pytest
import soundfile as sf

from app import demo
from app.demo_session import PLOT_RATE_HZ, WINDOW_MARK, WINDOW_SERIES, Assistant, WakeSession, plot_series, wake_series
from app.spotter import COMMAND_MODEL, DEFAULT_MODEL, HOP_SECONDS, WAKE_MODEL as BUNDLED_WAKE_MODEL, KeywordModel
from app.twostage import COMMAND_THRESHOLD, WINDOW_S
from conftest import CLIPS
from test_demo import (BROWSER_RATE, LEAD_S, PIECE_S, TAIL_S, THRESHOLD, at_48k, clip_id, require_default_model, split,
                       stream)
from test_demo import model   # noqa: F401  (a fixture)

# The two-stage page's material: the bundled wake word, all of its keywords (alexa), and its real
# recordings that no model here was trained on (tests/data/ATTRIBUTION.md).
WAKE_MODEL = BUNDLED_WAKE_MODEL
WAKE_KEYWORDS = None         # the wake model's keywords that open a window (None: all of them)
WAKE_CLIPS = sorted((CLIPS.parent / "wakeword" / "alexa").glob("*.flac"))   # real recordings of the wake word
COMMAND = "left"             # the command said after it, a keyword of the bundled command model
COMMAND_CLIPS = sorted(CLIPS.glob(f"{COMMAND}/*.wav"))
COMMAND_GAP_S = 0.3          # silence between the wake word's clip and the command's
COMMAND_TAIL_S = WINDOW_S     # silence after it: a window whose command is not sure runs its length


def wake_then(wake, command=None, gap_s: float = COMMAND_GAP_S, tail_s: float | None = None) -> np.ndarray:
    """LEAD_S of silence, a real wake-word clip, `gap_s`, a real command clip (or none), `tail_s`
    (default TAIL_S, or COMMAND_TAIL_S after a command): (samples,) int16 at 48 kHz, as a browser
    would send it."""
    if command is None:
        return at_48k(wake, LEAD_S, gap_s + (TAIL_S if tail_s is None else tail_s))
    return np.concatenate([at_48k(wake, LEAD_S, 0.0),
                           at_48k(command, gap_s, COMMAND_TAIL_S if tail_s is None else tail_s)])


@pytest.fixture(scope="module")
def assistant(model) -> Assistant:
    """The two-stage page's models, as `rotkws demo --wake WAKE_MODEL` loads them: WAKE_MODEL's
    WAKE_KEYWORDS, then the bundled command stage's (COMMAND_MODEL) commands."""
    wake = model if WAKE_MODEL == DEFAULT_MODEL else KeywordModel(WAKE_MODEL)
    return Assistant(wake, KeywordModel(COMMAND_MODEL), WAKE_KEYWORDS)


@pytest.fixture(scope="module")
def wake_word(assistant) -> str:
    return assistant.wake_words[0]


@pytest.fixture(scope="module")
def window_s(assistant) -> float:
    return assistant.spotter().window_s


@pytest.fixture(scope="module")
def wake_clip(assistant, wake_word, window_s):
    """The real wake-word recording the page hears most surely on its own (the wake word once, and
    then no command in its window: the command stage hears something in a phrase's tail now and
    then, BENCHMARKS.md, commands)."""
    sure = {}
    for path in WAKE_CLIPS:
        session = stream(assistant, wake_then(path, tail_s=window_s + 1.0))
        if [d.keyword for d in session.detections] == [wake_word] and \
                [(e.wake, e.command) for e in session.events] == [(wake_word, None)]:
            sure[path] = session.detections[0].score
    if not sure:
        pytest.fail(f"the page hears the wake word {wake_word!r} in none of {[clip_id(p) for p in WAKE_CLIPS]}")
    return max(sure, key=sure.get)


@pytest.fixture(scope="module")
def command_clip(assistant, wake_clip):
    """The real command recording the page hears most surely after the wake word."""
    sure = {}
    for path in COMMAND_CLIPS:
        events = stream(assistant, wake_then(wake_clip, path)).events
        if [e.command for e in events] == [COMMAND]:
            sure[path] = events[0].command_score
    if not sure:
        pytest.fail(f"the page hears {COMMAND!r} after the wake word in none of {[clip_id(p) for p in COMMAND_CLIPS]}")
    return max(sure, key=sure.get)


def logged(log: str) -> list[tuple[str, str]]:
    """(keyword, what follows its score) of the log's detection lines, newest first."""
    return [(k, rest.strip()) for k, rest in re.findall(r"t=\s*[\d.]+ s\s+(\S+)\s+[\d.]+(.*)", log)]


def test_wake_word_then_command_is_logged_as_the_runtime_hears_it(assistant, wake_word, wake_clip, command_clip,
                                                                  window_s):
    """The page's pieces hear what the two-stage runtime hears in one call: one wake word, then
    the command in its window; the log shows the wake word, then (above it) the command."""
    audio = wake_then(wake_clip, command_clip)
    session = stream(assistant, audio)
    direct = assistant.spotter().process(audio, BROWSER_RATE).events
    assert [(e.wake, e.command) for e in session.events] == [(wake_word, COMMAND)] == \
        [(e.wake, e.command) for e in direct]
    page, alone = session.events[0], direct[0]
    np.testing.assert_allclose([page.time_s, page.command_time_s], [alone.time_s, alone.command_time_s],
                               atol=HOP_SECONDS + 1e-9)
    np.testing.assert_allclose([page.score, page.command_score], [alone.score, alone.command_score], atol=0.02)
    assert LEAD_S < page.time_s < page.command_time_s
    assert logged(session.log_text()) == [(COMMAND, f"command after {wake_word}"),
                                          (wake_word, f"wake word: listening {window_s:g} s for a command")]
    assert not session.spotter.window_open, "the window closed on the command (sure) or at its end"


def test_no_command_in_the_window_is_logged_as_no_command(assistant, wake_word, wake_clip, command_clip, window_s):
    """The wake word, then silence past the window: "no command" at the window's end; a command
    said after that is no command (the wake word listens again, and it was not said)."""
    late = wake_then(wake_clip, command_clip, gap_s=window_s + 1.0)
    session = stream(assistant, late)
    assert [(e.wake, e.command) for e in session.events] == [(wake_word, None)]
    assert [k for k, _ in logged(session.log_text())] == [wake_word], "the late command is not logged"
    closing = session.log[0]
    assert closing.endswith(f"no command after {wake_word}"), session.log_text()
    closed_s = float(re.search(r"t=\s*([\d.]+) s", closing).group(1))
    assert closed_s == pytest.approx(session.events[0].time_s + window_s, abs=HOP_SECONDS + 0.01)


def test_a_file_ending_inside_the_window_closes_it_at_its_end(assistant, wake_word, wake_clip, command_clip, tmp_path):
    """An upload goes through the same path; its end (the flush) closes a window still open."""
    both, cut = tmp_path / "wake_command.wav", tmp_path / "wake_only.wav"
    sf.write(both, wake_then(wake_clip, command_clip), BROWSER_RATE, subtype="PCM_16")
    sf.write(cut, wake_then(wake_clip, tail_s=0.5), BROWSER_RATE, subtype="PCM_16")
    *_, log, _latency, session = demo.on_file(assistant, str(both), None, THRESHOLD, 0.0)
    assert [(e.wake, e.command) for e in session.events] == [(wake_word, COMMAND)], log
    *_, log, _latency, session = demo.on_file(assistant, str(cut), session, THRESHOLD, 0.0)
    assert [(e.wake, e.command) for e in session.events] == [(wake_word, None)], log
    end_s = len(wake_then(wake_clip, tail_s=0.5)) / BROWSER_RATE
    assert log.startswith(session.log[0]) and f"t={end_s:7.2f} s  no command after {wake_word}" in session.log[0]


def test_the_plot_shows_commands_only_while_their_window_is_open(assistant, wake_word, wake_clip, command_clip,
                                                                 window_s):
    audio = wake_then(wake_clip, command_clip)
    scores, plot, *_, session = demo.on_chunk(assistant, (BROWSER_RATE, audio), None, THRESHOLD, 0.0)
    assert set(plot["keyword"]) == set(plot_series(assistant)) == set(demo.plot_colors(assistant)), \
        "every series always, each with its colour"
    event = session.events[0]
    wake_track = plot[plot["keyword"] == wake_series(wake_word)]   # bins of hops, detections of means of hops
    assert wake_track["score"].notna().all() and wake_track["score"].max() >= event.score - 1e-6
    window = plot[plot["keyword"] == WINDOW_SERIES].dropna()
    command = plot[plot["keyword"] == COMMAND].dropna()
    assert (window["score"] == WINDOW_MARK).all()
    assert list(window["time"]) == list(command["time"]), "the window is where the command model ran"
    bin_s = 1 / PLOT_RATE_HZ
    assert event.time_s < window["time"].min() <= event.time_s + HOP_SECONDS + bin_s + 1e-9   # bins end-stamped
    closed = window["time"].max()           # at the command if it was sure, else at the window's end
    assert event.command_time_s - 1e-9 <= closed
    assert closed <= event.command_time_s + bin_s + 1e-9 or \
        abs(closed - (event.time_s + window_s)) <= HOP_SECONDS + bin_s + 1e-9
    assert command["score"].max() >= event.command_score - 1e-6
    assert set(scores) == set(assistant.wake.labels)     # the window closed: the wake model's classes


def test_hearing_now_shows_the_command_model_while_its_window_is_open(assistant, wake_clip, window_s):
    audio = wake_then(wake_clip, tail_s=window_s)
    woke_s = stream(assistant, audio).detections[0].time_s
    halfway = audio[:int((woke_s + window_s / 2) * BROWSER_RATE)]       # the recording may run on past the phrase
    scores, *_, session = demo.on_chunk(assistant, (BROWSER_RATE, halfway), None, THRESHOLD, 0.0)
    assert session.spotter.window_open
    expected = dict(zip(assistant.commands.labels, session.command_scores[-1].tolist()))
    assert scores == pytest.approx(expected) and not np.isnan(session.command_scores[-1]).any()


def test_wake_page_controls_set_the_wake_threshold_and_the_commands(assistant, wake_word, wake_clip, command_clip,
                                                                     window_s):
    """The slider is the wake word's threshold; the listen boxes are the commands."""
    audio = wake_then(wake_clip, command_clip, tail_s=window_s)
    others = [k for k in assistant.commands.keywords if k != COMMAND and k not in assistant.wake_words]
    lower = round(demo.slider_start(assistant)[0] - 0.05, 2)   # moved a little below the operating point
    session = None
    for piece in split(audio, (PIECE_S,)):
        *_, session = demo.on_chunk(assistant, (BROWSER_RATE, piece), session, lower, 0.0, others)
    assert session.spotter.threshold == lower and session.spotter.command_threshold == COMMAND_THRESHOLD
    assert session.spotter.keywords == assistant.wake_words
    assert session.spotter.commands.keywords == tuple(others)
    assert [(e.wake, e.command) for e in session.events] == [(wake_word, None)], "an unticked command is not heard"


def test_wake_page_visitors_keep_their_own_state_and_a_bad_piece_stays_with_its_sender(
        assistant, wake_word, wake_clip, command_clip, monkeypatch):
    monkeypatch.setattr(demo.gr, "Warning", lambda message, *a, **k: None)
    audio = wake_then(wake_clip, command_clip)
    alone = [(e.wake, e.command) for e in stream(assistant, audio).events]
    pieces = split(audio, (PIECE_S,))
    bad = np.full(4800, np.nan, np.float32)
    a = b = None
    for k, piece in enumerate(pieces):                       # interleaved, as two tabs would
        *_, a = demo.on_chunk(assistant, (BROWSER_RATE, piece), a, THRESHOLD, 0.0)
        if k == 2:                                           # b's microphone sends garbage once
            *_, b = demo.on_chunk(assistant, (BROWSER_RATE, bad), b, THRESHOLD, 0.0)
        *_, b = demo.on_chunk(assistant, (BROWSER_RATE, piece), b, THRESHOLD, 0.0)
    assert isinstance(a, WakeSession) and a.spotter is not b.spotter
    assert a.spotter.model is b.spotter.model and a.spotter.command_model is b.spotter.command_model
    assert [(e.wake, e.command) for e in a.events] == alone == [(wake_word, COMMAND)]
    assert [(e.wake, e.command) for e in b.events] == alone
    assert "!! expected finite samples" in b.log_text() and "!!" not in a.log_text()


def test_wake_page_tells_the_visitor_what_to_say(assistant, wake_word):
    import gradio as gr
    page = demo.build_demo(assistant)
    by_id = {b.elem_id: b for b in page.blocks.values() if getattr(b, "elem_id", None)}
    text = " ".join(b.value for b in page.blocks.values() if isinstance(b, gr.Markdown) and b.value)
    commands = ", ".join(f"*{k}*" for k in assistant.commands.keywords)
    assert f"say *{wake_word}*, then a command: {commands}." in text
    assert by_id["listen"].value == list(assistant.commands.keywords)
    assert set(by_id["plot"].color_map) == set(plot_series(assistant))
    *_, log, latency, session = demo.on_clear(assistant, None, THRESHOLD, 0.0)
    assert isinstance(session, WakeSession) and log == "" and latency == "Waiting for audio."


def with_metadata(source, out, props: dict | None) -> str:
    """A copy of a real model with some metadata changed (props), or all of it gone (None)."""
    import onnx
    from export.onnx import read_metadata
    proto = onnx.load(str(source))
    kept = read_metadata(proto)
    del proto.metadata_props[:]
    if props is not None:
        onnx.helper.set_model_props(proto, kept | props)
    onnx.save(proto, str(out))
    return str(out)


def test_cli_two_stage_options_and_what_it_refuses(tmp_path, capsys):
    require_default_model()
    with pytest.raises(SystemExit):
        demo.parse_args(["--help"])
    shown = capsys.readouterr().out
    assert all(option in shown for option in ("--wake W.onnx", "--commands C.onnx", "--wake-keywords"))
    args = demo.parse_args(["--wake", "w.onnx", "--wake-keywords", "yes, no"])
    assert (str(args.wake), args.commands, args.wake_keywords) == ("w.onnx", None, ["yes", "no"])
    for argv, says in [(["--commands", str(DEFAULT_MODEL)], "need --wake"),
                       (["--model", str(DEFAULT_MODEL), "--wake", str(DEFAULT_MODEL)], "--model and --wake")]:
        with pytest.raises(SystemExit):
            demo.parse_args(argv)
        assert says in capsys.readouterr().err
    bare = with_metadata(DEFAULT_MODEL, tmp_path / "bare.onnx", None)
    slow = with_metadata(DEFAULT_MODEL, tmp_path / "8k.onnx", {"sample_rate": "8000"})
    for argv, says in [(["--wake", bare], f"--wake: {bare}: not a rotkws model"),
                       (["--wake", str(tmp_path / "none.onnx")], "--wake: no model at"),
                       (["--wake", str(DEFAULT_MODEL), "--commands", slow],
                        "do not fit: the command model's sample_rate (8000) is not the wake model's (16000)"),
                       (["--wake", str(DEFAULT_MODEL), "--wake-keywords", "alexa"],
                        "--wake-keywords: expected one or more of the model's keywords")]:
        assert demo.main(argv) == 2, argv
        assert says in capsys.readouterr().err, argv


def test_one_model_file_is_loaded_once_for_both_stages():
    require_default_model()
    same = demo.load_models(demo.parse_args(["--wake", str(DEFAULT_MODEL), "--commands", str(DEFAULT_MODEL)]))
    assert isinstance(same, Assistant) and same.commands is same.wake
    same = demo.load_models(demo.parse_args(["--wake", str(COMMAND_MODEL)]))      # the default --commands
    assert isinstance(same, Assistant) and same.commands is same.wake
    assert same.wake_words == same.wake.keywords, "without --wake-keywords, all of them"
