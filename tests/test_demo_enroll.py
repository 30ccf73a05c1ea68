"""The enroll tab's handlers (app/demo_enroll.py) without a browser: what the page says for each
bad input (no PyTorch, too few takes, a take refused, a phrase refused) and for each state of a job
(queued with its place, running with its stage and estimate, failed, lost, done with what enroll
measured and the takes its model missed). The jobs run a stand-in for enroll (tests/test_enroll_jobs.py).
"""
import subprocess
import sys

import numpy as np
import pytest

from app import demo_enroll
from app.demo_enroll import EnrollPage, on_poll, on_start, on_take, result_text, status_text
from app.enroll_jobs import NO_TORCH, EnrollJobs
from app.spotter import COMMAND_MODEL, KeywordModel
from app.takes import MAX_TAKES, MIN_TAKES, SAMPLE_RATE
from conftest import CLIPS, REPO
from corpus.clips import read_audio
from test_enroll_jobs import FAKE_ENROLL, JOB_TIMEOUT_S, fake_command
from test_runtime import BLOCKER

RECORDING = sorted((CLIPS.parent / "wakeword" / "alexa").glob("*.flac"))[0]   # a real `alexa`


@pytest.fixture
def page(tmp_path):
    script = tmp_path / "fake_enroll.py"
    script.write_text(FAKE_ENROLL)
    jobs = EnrollJobs(tmp_path / "jobs", command=fake_command(script))
    yield EnrollPage(jobs, KeywordModel(COMMAND_MODEL), KeywordModel())
    jobs.close()


def recorded() -> tuple[int, np.ndarray]:
    """A take as the browser's recorder gives it: (rate, int16)."""
    audio, rate = read_audio(RECORDING)
    return rate, np.round(audio * 32767).astype(np.int16)


def test_without_pytorch_the_page_says_how_to_install_it(page, monkeypatch):
    monkeypatch.setattr(demo_enroll, "torch_missing", lambda: NO_TORCH)
    job, said, _ = on_start(page, "alexa", [], None)
    assert job is None and "pip install -e '.[train]'" in said and "espeak-ng" in said


def test_fewer_takes_than_the_page_asks_for_are_refused(page):
    take = on_take(recorded(), "alexa", [], None)[0][0]
    job, said, _ = on_start(page, "alexa", [take] * (MIN_TAKES - 1), None)
    assert job is None and f"at least {MIN_TAKES} takes (you have {MIN_TAKES - 1})" in said


@pytest.mark.parametrize("phrase, says", [("", "empty"), ("!!", "no letter or digit"), ("x" * 41, "41 characters")])
def test_a_phrase_refused_keeps_the_job_and_says_why(page, phrase, says):
    job, said, _ = on_start(page, phrase, [], "earlier")
    assert job == "earlier" and said.startswith("**Not started:**") and says in said


def test_a_take_is_checked_added_and_recorded_again_in_place(page):
    takes, redo, said, mic, *slots = on_take(recorded(), "alexa", [], None)
    assert len(takes) == 1 and said.startswith("Take 1 recorded") and mic is None
    assert slots[0]["visible"] and not slots[1]["visible"] and slots[MAX_TAKES]["visible"]   # its re-record button
    takes, redo, said, *_ = on_take(recorded(), "alexa", takes * 3, 1)
    assert len(takes) == 3 and redo is None and said == "Take 2 recorded again."


def test_a_refused_take_says_why_and_keeps_the_others(page):
    silent = (SAMPLE_RATE, np.zeros(2 * SAMPLE_RATE, np.int16))
    good = on_take(recorded(), "alexa", [], None)[0]
    takes, _, said, *_ = on_take(silent, "alexa", good, None)
    assert takes == good and said.startswith("Take refused: the take is silent")
    full = good * MAX_TAKES
    assert "is the most" in on_take(recorded(), "alexa", full, None)[2]


def test_the_status_line_of_each_state():
    job = {"phrase": "alexa", "place": 2, "state": "queued"}
    assert status_text(job) == "**alexa**: waiting, place 3 in the queue (2 jobs ahead of yours)."
    job |= {"state": "running", "stage": "training", "percent": 40, "eta_s": 130.0}
    assert status_text(job) == "**alexa**: training 40 %, about 2 min 10 s left in this stage."
    job |= {"state": "lost", "message": "the server restarted while this job ran; start it again"}
    assert status_text(job) == "**alexa**: lost: the server restarted while this job ran; start it again"


def test_a_finished_job_switches_the_page_to_its_listener_with_what_enroll_measured(page):
    takes = [on_take(recorded(), "alexa", [], None)[0][0]] * 3
    job_id, said, timer = on_start(page, "alexa", takes, None)
    assert "with 3 takes" in said and timer.active
    page.jobs.wait(job_id, JOB_TIMEOUT_S)
    status, bar, cancel, result, armed, timer, tabs, own, threshold, plot, listening = on_poll(page, job_id, None)
    assert "done in" in status and 'value="100"' in bar and not cancel["visible"] and not timer.active
    assert tabs.selected == demo_enroll.LISTEN_TAB and own["value"] and own["visible"] and "alexa" in own["label"]
    assert threshold["value"] == KeywordModel(page.jobs.model_path(job_id)).meta["detection"]["threshold"]
    assert "alexa (wake)" in plot["color_map"]
    assert "2 false accepts (0.5 per hour)" in result and f'href="/enrolled/{job_id}.onnx"' in result
    assert listening == job_id and page.served(listening) is page.assistant(job_id) and page.served(None) is None
    assert on_poll(page, job_id, armed)[6:] == (demo_enroll.gr.skip(),) * 5, "the switch happens once"
    assert demo_enroll.on_toggle(page, job_id, False)[2] is None, "unticked: the page's own model"
    assert demo_enroll.on_toggle(page, job_id, True)[2] == job_id
    view = page.jobs.view(job_id) | {"undetected": [2]}
    assert "Not detected by the new model: take 2." in result_text(view)


def test_the_tab_imports_no_torch_and_says_what_is_missing_without_it(tmp_path):
    """In a process where importing torch, training/ or export/ raises, the page with its enroll
    tab builds, and the tab says how to install what enrolling needs."""
    script = BLOCKER + f"""
from pathlib import Path
from app.demo import build_app, build_demo
from app.enroll_jobs import EnrollJobs, torch_missing
jobs = EnrollJobs(Path({str(tmp_path / "jobs")!r}))
build_app(build_demo(None, jobs), jobs=jobs)
print(torch_missing())
assert not [m for m in sys.modules if m.split(".")[0] in ("torch", "model", "training", "export")]
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == NO_TORCH


def test_opening_the_tab_before_the_job_id_is_read_back_leaves_the_arrival_timer_to_find_it(page):
    job_id, _, _ = on_start(page, "alexa", [], None)
    early = demo_enroll.on_load(page, None, arrived=False)             # the tab, just after a reload
    assert early[0] == "No job yet." and early[4] == demo_enroll.gr.skip(), "the arrival timer keeps going"
    status, bar, cancel, timer, arrival = demo_enroll.on_load(page, job_id)   # its tick, the id read back
    assert status.startswith("**alexa**: ") and timer.active and not arrival.active
    none = demo_enroll.on_load(page, None)                             # the tick with no job: it stops
    assert none[0] == "No job yet." and not none[4].active
    page.jobs.wait(job_id, JOB_TIMEOUT_S)
