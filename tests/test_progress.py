"""How `rotkws enroll` reports where it is (training/progress.py): the JSON lines of JsonBar and
Reporter on counted work, and those of a real tiny `rotkws enroll --progress json` as the demo
page reads them: one line per stage change and per percent, in enroll's stage order, then `done`
with what enroll measured; a phrase that cannot be a wake phrase, one `error` line.
"""
import io
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, data_root, require

progress = pytest.importorskip("training.progress", reason="training/progress.py needs the train extra (tqdm)")

TINY_BUDGET = ["--positives", "8", "--tts-negatives", "8", "--images", "16", "--speech-negatives", "8",
               "--tts-sentences", "0", "--wav-negatives", "8", "--noise-negatives", "4", "--max-steps", "2",
               "--validation-hours", "0.05", "--kokoro-positives", "0", "--kokoro-negatives", "0",
               "--kokoro-sentences", "0"]
ENROLL_TIMEOUT_S = 600


@pytest.fixture
def lines():
    """The reporter in JSON mode writing to a buffer; yields a function returning the lines so far."""
    out = io.StringIO()
    progress.configure("json", out)
    yield lambda: [json.loads(line) for line in out.getvalue().splitlines()]
    progress.configure("bar")


def test_a_bar_sends_its_stage_then_one_line_per_percent(lines):
    with progress.bar(total=250, desc="training", unit="step") as bar:
        for _ in range(250):
            bar.update(1)
    got = lines()
    assert got[0] | {"elapsed_s": 0} == {"event": "stage", "stage": "training", "total": 250, "unit": "step",
                                         "elapsed_s": 0}
    percents = [line["percent"] for line in got[1:]]
    assert percents == list(range(0, 101)), "one line per percent, none twice"
    last = got[-1]
    assert last["event"] == "progress" and last["done"] == 250 and last["total"] == 250 and last["eta_s"] == 0.0
    assert all(line["stage"] == "training" and line["eta_s"] >= 0 for line in got[1:])


def test_a_bar_over_an_iterable_counts_its_items(lines):
    assert list(progress.bar(range(3), desc="rendering", unit="clip")) == [0, 1, 2]
    got = lines()
    assert got[0]["total"] == 3 and [line["done"] for line in got[1:]] == [1, 2, 3]
    assert [line["percent"] for line in got[1:]] == [33, 66, 100]


def test_a_stage_without_a_count_sends_its_line_alone(lines):
    with progress.stage("threshold"):
        pass
    got = lines()
    assert len(got) == 1 and got[0]["stage"] == "threshold" and got[0]["total"] is None


def test_a_quiet_thread_reports_nothing_beside_one_that_does(lines):
    import threading

    def beside():
        with progress.quiet():
            list(progress.bar(range(50), desc="embedding", unit="example"))
            with progress.stage("hidden"):
                progress.emit("stage", stage="hidden too")
        list(progress.bar(range(2), desc="loud again", unit="clip"))    # quiet ends with its block

    thread = threading.Thread(target=beside)
    thread.start()
    thread.join()
    list(progress.bar(range(2), desc="rendering", unit="clip"))
    assert [line["stage"] for line in lines() if line["event"] == "stage"] == ["loud again", "rendering"]


def test_elapsed_counts_from_configure_and_only_json_mode_writes(lines):
    progress.emit("done", threshold=0.8)
    assert lines()[0]["event"] == "done" and lines()[0]["threshold"] == 0.8 and lines()[0]["elapsed_s"] >= 0
    quiet = io.StringIO()
    for mode in ("bar", "none"):
        progress.configure(mode, quiet)
        progress.emit("done")
    assert quiet.getvalue() == ""
    with pytest.raises(ValueError, match="json"):
        progress.Reporter("xml")


def enroll(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rotkws.enroll_cli", *args, "--progress", "json"], cwd=REPO,
                          capture_output=True, text=True, timeout=ENROLL_TIMEOUT_S)


def test_a_phrase_that_cannot_be_said_sends_one_error_line():
    done = enroll("?!", "-o", os.devnull)
    assert done.returncode == 1
    assert [json.loads(line) | {"elapsed_s": 0} for line in done.stdout.splitlines()] == [
        {"event": "error", "message": "the phrase '?!' has no letter or digit: nothing to say", "elapsed_s": 0}]


@pytest.mark.slow
def test_a_real_tiny_enroll_reports_each_stage_and_percent_then_what_it_measured(tmp_path):
    if shutil.which("espeak-ng") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("espeak-ng is missing under CI (.ci/run installs it)")
        pytest.skip("espeak-ng not installed: apt-get install espeak-ng flite festival festvox-kallpc16k")
    data = require(data_root())
    out = tmp_path / "alexa.onnx"
    done = enroll("alexa", "-o", str(out), "--data", str(data), *TINY_BUDGET)
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines()]       # stdout: JSON lines only
    stages = [e["stage"] for e in events if e["event"] == "stage"]
    assert stages == [s for s in progress.STAGES if s in stages], f"out of enroll's order: {stages}"
    assert {"synthesising", "training", "threshold", "verifier"} <= set(stages), stages
    for stage in stages:
        percents = [e["percent"] for e in events if e["event"] == "progress" and e["stage"] == stage]
        assert percents == sorted(set(percents)), f"{stage}: a percent sent twice or out of order: {percents}"
        if stage not in ("threshold", "verifier"):
            assert percents and percents[-1] == 100, f"{stage} never reached 100 %: {percents}"
    assert [e["elapsed_s"] for e in events] == sorted(e["elapsed_s"] for e in events)
    last = events[-1]
    assert last["event"] == "done" and last["phrase"] == "alexa" and last["output"] == str(out)
    assert 0.5 <= last["threshold"] <= 1 and last["steps"] == 2
    assert last["validation_stream_hours"] > 0 and last["validation_stream_false_accepts"] >= 0
    assert out.is_file() and last["verifier"]["head"] == "alexa.head.onnx"         # enroll's default: a cascade
    assert (tmp_path / "alexa.head.onnx").is_file()
