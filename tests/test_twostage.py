"""A wake word, then a command (app/twostage.py), on real clips through the bundled model; `rotkws
detect --wake`; and the command bench's stream and scoring (benchmarks/commands.py).

As a stand-in wake word the bundled kws12.onnx listens for `yes` alone (the wake spotter's
`keywords`): the rule does not care which model fires, and the clips are real.
"""
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app.spotter import DEFAULT_MODEL, KeywordModel, KeywordSpotter
from app.twostage import WakeCommandSpotter, WakeEvent
from conftest import CLIPS

RATE = 16_000
COMMANDS = ["left", "right", "stop", "go"]


@pytest.fixture(scope="module")
def model() -> KeywordModel:
    return KeywordModel(DEFAULT_MODEL)


def clip(word: str, k: int = 0) -> np.ndarray:
    return sf.read(sorted((CLIPS / word).glob("*.wav"))[k], dtype="float32")[0]


def silence(s: float) -> np.ndarray:
    return np.zeros(int(s * RATE), np.float32)


@pytest.fixture(scope="module")
def scene() -> tuple[np.ndarray, dict]:
    """yes, 0.7 s, left; 2 s; yes and nothing for 4 s; yes, 0.5 s, stop; 1 s. Where each starts."""
    parts = [("lead", silence(0.5)), ("yes1", clip("yes")), ("", silence(0.7)), ("left", clip("left")),
             ("", silence(3.0)), ("yes2", clip("yes")), ("", silence(4.0)), ("yes3", clip("yes")),
             ("", silence(0.5)), ("stop", clip("stop")), ("", silence(1.0))]
    at, pos = {}, 0
    for name, audio in parts:
        at[name] = pos / RATE
        pos += len(audio)
    return np.concatenate([a for _, a in parts]), at


def spotter(model, **kw) -> WakeCommandSpotter:
    return WakeCommandSpotter(model, model, **{"keywords": ["yes"], "command_keywords": COMMANDS} | kw)


def feed(sp, audio, sizes=(RATE,)):
    """Every result of feeding `audio` in pieces of the given sizes (cycled), then the flush."""
    results, pos, k = [], 0, 0
    while pos < len(audio):
        n = sizes[k % len(sizes)]
        results.append(sp.process(audio[pos:pos + n], RATE))
        pos, k = pos + n, k + 1
    return results + [sp.flush()]


@pytest.mark.parametrize("state", ["reset", "carried"])
def test_each_wake_word_reports_the_command_said_after_it_or_none(model, scene, state):
    audio, at = scene
    events = [e for r in feed(spotter(model, command_state=state), audio) for e in r.events]
    assert [(e.wake, e.command) for e in events] == [("yes", "left"), ("yes", None), ("yes", "stop")]
    assert at["yes1"] < events[0].time_s < at["left"] <= events[0].command_time_s < at["left"] + 1.5
    assert at["yes2"] < events[1].time_s < at["yes3"] and events[1].command_time_s is None
    assert at["stop"] <= events[2].command_time_s <= len(audio) / RATE
    assert all(e.score >= 0.5 and (e.command is None or e.command_score >= 0.5) for e in events)


def test_the_same_events_however_the_audio_is_split(model, scene):
    audio, _ = scene
    whole = [e for r in feed(spotter(model), audio, (len(audio),)) for e in r.events]
    split = [e for r in feed(spotter(model), audio, (317, 4_000, 1_601, 12_345)) for e in r.events]
    assert split == whole and len(whole) == 3


def test_the_window_times_out_after_window_s_and_the_wake_word_listens_again(model, scene):
    audio, at = scene
    sp = spotter(model, window_s=0.3)       # too short for the command that follows 0.7 s later
    events = [e for r in feed(sp, audio) for e in r.events]
    assert [e.command for e in events][:2] == [None, None]
    assert sp.window_hops == 3


def test_a_command_not_sure_enough_to_close_the_window_is_its_peak_at_the_window_end(model, scene):
    audio, at = scene
    sure = [e for r in feed(spotter(model), audio) for e in r.events]
    results = feed(spotter(model, command_confident=1.0), audio)          # never sure: the peaks decide
    late = [e for r in results for e in r.events]
    assert [e.command for e in late] == [e.command for e in sure] == ["left", None, "stop"]
    assert late[0].command_score >= sure[0].command_score                 # the peak, not the first hop over
    assert at["left"] <= late[0].command_time_s < at["left"] + 1.0
    closed = next(i for i, r in enumerate(results) if r.events)           # … but only once the window ended
    assert results[closed].times[-1] >= late[0].time_s + 3.0 - 1e-9 or closed == len(results) - 1
    none = [e for r in feed(spotter(model, command_confident=1.0, command_threshold=1.0), audio) for e in r.events]
    assert [e.command for e in none] == [None, None, None]


def test_wake_words_while_a_window_is_open_are_not_reported(model):
    audio = np.concatenate([silence(0.5), clip("yes"), silence(0.8), clip("yes"), silence(4.0)])
    alone = [d for r in feed(KeywordSpotter(model, keywords=["yes"], refractory_s=0.0), audio) for d in r.detections]
    results = feed(spotter(model, refractory_s=0.0), audio)
    reported = [d for r in results for d in r.detections]
    assert len(alone) == 2 and len(reported) == 1                # the second fell inside the window
    assert [e.command for r in results for e in r.events] == [None]


def test_reset_runs_the_command_model_only_inside_windows(model, scene):
    audio, _ = scene
    for state, runs_outside in (("reset", False), ("carried", True)):
        results = feed(spotter(model, command_state=state), audio)
        rows = np.concatenate([r.command_scores for r in results])
        times = np.concatenate([r.times for r in results])
        assert len(rows) == len(times) == sum(len(r.scores) for r in results)
        ran = ~np.isnan(rows).any(1)
        assert ran[0] == runs_outside and ran.any()
        if state == "reset":
            assert 0 < ran.mean() < 0.5                          # three windows of a 14-s scene


def test_an_open_window_at_the_end_of_the_input_closes(model):
    audio = np.concatenate([silence(0.5), clip("yes"), silence(0.3)])
    sp = spotter(model)
    first = sp.process(audio, RATE)
    assert first.window_open and not first.events and first.detections
    last = sp.flush()
    assert [e.command for e in last.events] == [None] and not last.window_open
    assert last.events[0].time_s <= len(audio) / RATE


@pytest.mark.parametrize("kw, message", [
    ({"command_state": "sometimes"}, "command_state"),
    ({"window_s": 0}, "window_s"),
    ({"window_s": True}, "window_s"),
    ({"window_s": float("inf")}, "window_s"),
    ({"command_keywords": ["alexa"]}, "keywords"),
    ({"command_threshold": 1.5}, "threshold"),
])
def test_bad_settings_are_refused_with_the_reason(model, kw, message):
    with pytest.raises(ValueError, match=message):
        spotter(model, **kw)


def test_events_as_json_lines():
    e = WakeEvent("alexa", 1.23456, 0.987654, "left", 2.5, 0.91234)
    assert e.to_json() == {"wake": "alexa", "time_s": 1.235, "score": 0.9877, "command": "left",
                           "command_time_s": 2.5, "command_score": 0.9123}
    assert WakeEvent("alexa", 1.0, 0.9, None).to_json()["command_time_s"] is None


def test_detect_with_a_wake_word_writes_one_line_per_wake_word(tmp_path, capsys):
    from app.detect_cli import main
    audio = np.concatenate([silence(0.5), clip("yes"), silence(0.7), clip("left"), silence(0.5)])
    path = tmp_path / "scene.wav"
    sf.write(path, audio, RATE)
    assert main(["--wake", str(DEFAULT_MODEL), "--keywords", ",".join(COMMANDS), str(path)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    # kws12.onnx as the wake model hears every keyword: once the window has closed on `left`, the
    # rest of that word may wake it again
    assert (lines[0]["wake"], lines[0]["command"]) == ("yes", "left")
    assert all(set(x) == {"file", "wake", "time_s", "score", "command", "command_time_s", "command_score"}
               and x["file"] == str(path) for x in lines)
    assert 0.5 < lines[0]["time_s"] < lines[0]["command_time_s"] <= len(audio) / RATE


@pytest.mark.parametrize("argv, message", [
    (["--commands", "x.onnx"], "--commands needs --wake"),
    (["--wake", "m.onnx", "--scores"], "--scores is for one model"),
])
def test_detect_refuses_two_stage_options_that_do_not_go_together(argv, message, tmp_path, capsys):
    from app.detect_cli import main
    with pytest.raises(SystemExit) as e:
        main(argv + [str(tmp_path / "a.wav")])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_detect_names_a_wake_model_it_cannot_load(tmp_path, capsys):
    from app.detect_cli import main
    bad = tmp_path / "wake.onnx"
    bad.write_bytes(b"not a model")
    assert main(["--wake", str(bad), str(tmp_path / "a.wav")]) == 2
    assert "wake.onnx" in capsys.readouterr().err


# -- the command bench ---------------------------------------------------------------------------
def test_scoring_counts_hits_their_commands_and_false_wake_ups():
    from benchmarks.commands import score
    from evaluation.streams import PHRASE, SPEECH, Event
    pieces = [{"word": "left", "command_at_s": 1.5}, {"word": "stop", "command_at_s": 1.2},
              {"word": "go", "command_at_s": 1.0}, {"word": "up", "command_at_s": 1.0},
              {"word": None, "command_at_s": 1.1}, {"word": None, "command_at_s": 1.1},
              {"word": None, "command_at_s": 1.1}]
    events = [Event("0", 10.0, 12.5, PHRASE), Event("spk", 15.0, 19.0, SPEECH), Event("1", 20.0, 22.0, PHRASE),
              Event("2", 30.0, 32.0, PHRASE), Event("3", 40.0, 42.0, PHRASE),
              Event("4", 50.0, 55.0, PHRASE), Event("5", 60.0, 65.0, PHRASE), Event("6", 70.0, 75.0, PHRASE)]
    found = [WakeEvent("alexa", 11.0, 0.9, "left", 11.8, 0.9),      # correct
             WakeEvent("alexa", 16.0, 0.9, "up", 17.0, 0.8),        # a false wake-up with a command
             WakeEvent("alexa", 20.9, 0.9, "go", 21.5, 0.7),        # another command
             WakeEvent("alexa", 30.5, 0.9, None),                   # none heard
             WakeEvent("alexa", 40.8, 0.9, "up", 40.9, 0.8),        # heard before the clip began: another
             WakeEvent("alexa", 41.5, 0.9, None),                   # fired during the command: false
             WakeEvent("alexa", 50.9, 0.9, "no", 52.0, 0.6),        # nothing said after it: a phantom
             WakeEvent("alexa", 60.8, 0.9, None)]                   # nothing said, nothing heard; 6 missed
    r = score(found, events, pieces, hours=0.5)
    assert (r["pieces"], r["wake_hits"], r["wake_missed"]) == (4, 4, 0)
    assert (r["alone_pieces"], r["alone_hits"], r["phantom_commands"]) == (3, 2, 1)
    assert r["outcomes"] == {"correct": 1, "another": 2, "none": 1}
    assert r["per_word"]["left"]["correct"] == 1 and r["per_word"]["up"]["another"] == 1
    assert r["confusions"] == {"stop → go": 1, "up → up (early)": 1}
    assert r["false_wakes_per_hour"] == 4.0 and r["false_commands_per_hour"] == 2.0


def test_the_bench_table_has_a_cell_under_every_heading():
    from benchmarks.commands import table
    r = {"snr_db": 10.0, "state": "reset", "threshold": 0.4, "pieces": 4, "wake_hits": 4,
         "outcomes": {"correct": 2, "another": 1, "none": 1}, "alone_hits": 8, "phantom_commands": 1,
         "false_wakes_per_hour": 2.0, "false_commands_per_hour": 1.0, "cpu_ms_per_s": 5.0}
    head, rule, row = table([r]).splitlines()
    cells = lambda line: line.strip("|").split("|")
    assert len(cells(head)) == len(cells(rule)) == len(cells(row)) == 10
    assert [c.strip() for c in cells(row)][4:8] == ["50.0 %", "25.0 %", "25.0 %", "12.5 % (1 of 8)"]


def test_the_bench_runs_the_rules_asked_for_and_refuses_what_it_cannot_run(capsys):
    from benchmarks.commands import SETTINGS, parse_args
    assert parse_args(["--wake", "w.onnx"]).rules == SETTINGS
    assert parse_args(["--wake", "w.onnx", "--rule", "reset:0.3", "--rule", "carried:0.2"]).rules == [
        ("reset", 0.3), ("carried", 0.2)]
    assert parse_args(["--wake", "w.onnx", "--split", "validation", "--no-write"]).split == "validation"
    for argv, says in ((["--rule", "reset"], "STATE:THRESHOLD"), (["--rule", "sometimes:0.3"], "must be one of"),
                       (["--rule", "reset:1.5"], "from 0 to 1"), (["--split", "validation"], "--no-write")):
        with pytest.raises(SystemExit):
            parse_args(["--wake", "w.onnx", *argv])
        assert says in capsys.readouterr().err


def test_the_bench_stream_puts_each_command_where_it_says(shared_data):
    from benchmarks import commands
    from corpus.clips import read_audio
    from evaluation import streams
    from evaluation.streams import split_clips
    from corpus.labels import KWS12_LABELS
    rng = np.random.default_rng(0)
    items, pieces = commands.command_items(shared_data, rng)
    phrase = [it for it in items if it.kind == streams.PHRASE]
    said = [it for it in items if it.kind == streams.SPEECH]
    assert len(phrase) == len(pieces)
    alone = [(it, p) for it, p in zip(phrase, pieces) if p["word"] is None]
    assert len(said) == len(pieces) - len(alone) == round(len(alone) / commands.ALONE_SHARE) > 300
    assert {p["word"] for p in pieces} == set(commands.KWS_WORDS) | {None}
    # a wake phrase with nothing after it: the window's length of silence after its gap
    for it, p in alone[:20]:
        rest = it.audio[round(p["command_at_s"] * streams.SAMPLE_RATE):]
        assert len(rest) == round(commands.WINDOW_S * streams.SAMPLE_RATE) and not rest.any()
    gaps = [p["command_at_s"] for p in pieces]
    assert min(gaps) > commands.COMMAND_GAP_S[0]
    # the command clip is the item's tail, starting where the piece says: a testing-split clip of
    # its word, at the wake phrase's level
    by_word = {}
    for c in split_clips(shared_data, KWS12_LABELS, "testing"):
        by_word.setdefault(c.label, []).append(c.path)
    for it, p in list(zip(phrase, pieces))[:20]:
        tail = it.audio[round(p["command_at_s"] * streams.SAMPLE_RATE):]
        scaled = lambda x: x / np.abs(x).max()
        assert any(len(tail) == len(a) and np.allclose(scaled(tail), scaled(a), atol=1e-6)
                   for a in (read_audio(path)[0] for path in by_word[p["word"]]))
        wake = it.audio[:round(p["command_at_s"] * streams.SAMPLE_RATE)]
        ratio = streams.peak_energy(tail) / streams.peak_energy(wake)
        assert ratio == pytest.approx(1.0, rel=1e-3)


def test_a_wake_recording_is_cut_where_its_phrase_ends():
    from benchmarks.commands import SPOKEN_TAIL_S, spoken
    t = np.arange(RATE) / RATE
    tone = 0.5 * np.sin(2 * np.pi * 440 * t[:RATE // 2]).astype(np.float32)
    audio = np.concatenate([silence(0.5), tone, 1e-4 * np.ones(2 * RATE, np.float32)])
    cut = spoken(audio)
    assert 1.0 + SPOKEN_TAIL_S <= len(cut) / RATE <= 1.0 + SPOKEN_TAIL_S + 512 / RATE
    assert np.array_equal(cut, audio[:len(cut)])
