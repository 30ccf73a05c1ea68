"""The enroll tab's jobs (app/enroll_jobs.py) and takes (app/takes.py): one job at a time in
order, cancel, a restart that finds a job lost, every bad input's message; a stand-in for
`rotkws enroll` (a small script writing its JSON lines) keeps most of them quick and torch-free,
and one real tiny enroll runs end to end with real recordings as the takes.
"""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app.enroll_jobs import EnrollJobs, JobError, JobsInUse, check_text, undetected_takes
from app.spotter import WAKE_MODEL, KeywordModel, KeywordSpotter
from app.takes import (CLIPPED_SHARE, FRAME_S, MAX_TAKE_S, SAMPLE_RATE, SILENT_DBFS, VOICED_DB, TakeError,
                       check_take, frame_dbfs, voiced_limit)
from conftest import CLIPS, REPO, data_root, require
from corpus.clips import read_audio
from corpus.phrases import MAX_PHRASE_CHARS
from training.progress import STAGES

WAKE_TAKES = sorted((CLIPS.parent / "wakeword" / "alexa").glob("*.flac"))   # real `alexa` recordings
OTHER_TAKE = CLIPS / "yes" / "03401e93_nohash_0.wav"                        # a real clip of another word
JOB_TIMEOUT_S = 60
TINY_TIMEOUT_S = 240          # a real tiny enroll: ~40 s alone on 2 cores, more beside other work
TINY_BUDGET = ["--positives", "8", "--tts-negatives", "8", "--images", "16", "--speech-negatives", "8",
               "--tts-sentences", "0", "--wav-negatives", "8", "--noise-negatives", "4", "--max-steps", "2",
               "--validation-hours", "0.05", "--kokoro-positives", "0", "--kokoro-negatives", "0",
               "--kokoro-sentences", "0"]

# A stand-in for `python -m rotkws.enroll_cli … --progress json`: what it does depends on the phrase.
FAKE_ENROLL = r'''
import json, shutil, sys, time
phrase, output, model = sys.argv[1], sys.argv[2], sys.argv[3]
say = lambda **e: print(json.dumps(e), flush=True)
say(event="stage", stage="training", total=4, unit="step", elapsed_s=0.0)
if phrase == "wait":
    time.sleep(600)
if phrase == "broken":
    say(event="error", message="the text-to-speech engines say nothing for 'broken' (silence)")
    sys.exit(1)
if phrase == "no room":
    print("OSError: [Errno 28] No space left on device", file=sys.stderr)
    sys.exit(1)
for done in range(1, 5):
    time.sleep(0.05)
    say(event="progress", stage="training", done=done, total=4, percent=25 * done, eta_s=0.1, elapsed_s=0.1)
say(event="stage", stage="threshold", total=None, unit=None, elapsed_s=0.3)
shutil.copy(model, output)
say(event="done", output=output, phrase=phrase, threshold=0.82, fa_per_hour=0.5,
    validation_stream_hours=4.1, validation_stream_false_accepts=2, elapsed_s=0.4)
'''


def fake_command(script: Path):
    """A job's argv for the stand-in, which copies the bundled wake word as its model."""
    return lambda phrase, output, takes, extra: [sys.executable, str(script), phrase, str(output), str(WAKE_MODEL)]


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "fake_enroll.py"
    path.write_text(FAKE_ENROLL)
    return path


@pytest.fixture
def jobs(tmp_path, script) -> EnrollJobs:
    jobs = EnrollJobs(tmp_path / "jobs", command=fake_command(script))
    yield jobs
    jobs.close()


def take(path: Path) -> np.ndarray:
    return check_take(*read_audio(path), "alexa")


def wait_for(jobs, job_id, state, timeout_s=JOB_TIMEOUT_S, stage=None) -> dict:
    """The job's view once it is in `state` (and, given, `stage`)."""
    deadline = time.monotonic() + timeout_s
    while jobs.view(job_id)["state"] != state or (stage and jobs.view(job_id)["stage"] != stage):
        assert time.monotonic() < deadline, f"job still {jobs.view(job_id)} after {timeout_s} s; expected {state}"
        time.sleep(0.05)
    return jobs.view(job_id)


# ─── the takes ───

def test_real_recordings_of_the_phrase_are_taken_as_16_khz_mono():
    for path in WAKE_TAKES:
        audio, rate = read_audio(path)
        taken = check_take((audio * 32767).astype(np.int16), rate, "alexa")
        assert taken.dtype == np.float32 and abs(len(taken) - len(audio) * SAMPLE_RATE / rate) <= 1


def test_a_silent_take_is_refused_with_the_reason():
    with pytest.raises(TakeError, match="silent"):
        check_take(np.zeros(2 * SAMPLE_RATE, np.int16), SAMPLE_RATE, "alexa")
    quiet = read_audio(WAKE_TAKES[0])[0] * 10 ** ((SILENT_DBFS - 10) / 20)   # far under the quietest real one
    with pytest.raises(TakeError, match="silent"):
        check_take(quiet.astype(np.float32), SAMPLE_RATE, "alexa")


def test_a_clipped_take_is_refused_with_the_reason():
    audio, rate = read_audio(WAKE_TAKES[0])
    loud = np.clip(audio / np.abs(audio).max() * 8, -1, 1).astype(np.float32)   # +18 dB over full scale
    with pytest.raises(TakeError, match=r"clipped \(\d+\.\d% of it"):
        check_take(loud, rate, "alexa")
    assert CLIPPED_SHARE < 0.01


def test_a_take_far_longer_than_the_phrase_is_refused_with_the_reason():
    """The five real `alexa` recordings in a row (each cut to its sound, at the same peak): the
    phrase said five times is not one take."""
    five = np.concatenate([said(read_audio(p)[0]) for p in WAKE_TAKES])
    with pytest.raises(TakeError, match="far longer than 'alexa'"):
        check_take(five, SAMPLE_RATE, "alexa")
    assert voiced_limit("hey computer") > voiced_limit("alexa")


def said(audio: np.ndarray) -> np.ndarray:
    """A recording from its first to its last voiced frame, peaking at 0.5."""
    levels = frame_dbfs(audio)
    voiced = np.flatnonzero(levels > levels.max() - VOICED_DB)
    n = int(FRAME_S * SAMPLE_RATE)
    cut = audio[voiced[0] * n:(voiced[-1] + 1) * n]
    return cut / np.abs(cut).max() * 0.5


def test_a_take_too_short_or_too_long_to_be_one_is_refused():
    with pytest.raises(TakeError, match="0.1 s"):
        check_take(np.full(1600, 0.1, np.float32), SAMPLE_RATE, "alexa")
    with pytest.raises(TakeError, match="lasts"):
        check_take(np.zeros(int((MAX_TAKE_S + 1) * SAMPLE_RATE), np.float32), SAMPLE_RATE, "alexa")


# ─── the phrase ───

REFUSED = [("", "empty"), ("   ", "empty"), ("?!… —", "no letter or digit"), ("a" * 41, "41 characters"),
           ("hey " * 12, "characters")]


@pytest.mark.parametrize("text, says", REFUSED)
def test_a_phrase_that_cannot_be_a_wake_phrase_is_refused_before_it_waits(jobs, text, says):
    with pytest.raises(JobError, match=says):
        jobs.submit(text)
    assert not [p for p in jobs.root.iterdir() if p.is_dir()], "a refused job left files"


@pytest.mark.parametrize("text", [text for text, _ in REFUSED])
def test_the_queue_refuses_what_enroll_refuses_with_enrolls_words(text, tmp_path, capsys):
    """The page says at once what `rotkws enroll` itself would say, before the job waits."""
    enroll_cli = pytest.importorskip("rotkws.enroll_cli", reason="rotkws enroll needs the train extra")
    with pytest.raises(JobError) as refused:
        check_text(text)
    assert enroll_cli.main([text, "-o", str(tmp_path / "m.onnx")]) == 1
    assert capsys.readouterr().err == f"rotkws enroll: {refused.value}\n"


def test_the_queue_keeps_the_phrase_as_the_model_will_be_labelled():
    assert check_text("  hey   computer ") == "hey computer"
    assert check_text("a" * MAX_PHRASE_CHARS) == "a" * MAX_PHRASE_CHARS


def test_a_full_disk_refuses_the_job_with_its_reason(tmp_path, script):
    jobs = EnrollJobs(tmp_path / "jobs", command=fake_command(script), min_free_bytes=2**62)
    with pytest.raises(JobError, match="disk is full"):
        jobs.submit("alexa")


def test_a_disk_that_fills_up_while_the_job_runs_is_named(jobs):
    job = jobs.submit("no room")
    view = jobs.wait(job.id, JOB_TIMEOUT_S)
    assert view["state"] == "failed" and "No space left on device" in view["message"], view
    assert not (jobs.folder(job.id) / "work").exists()


def test_a_phrase_the_engines_cannot_say_fails_with_enrolls_message(jobs):
    view = jobs.wait(jobs.submit("broken").id, JOB_TIMEOUT_S)
    assert view["state"] == "failed" and "say nothing for 'broken'" in view["message"], view


# ─── the queue ───

def test_jobs_run_one_at_a_time_in_order_and_report_their_progress(jobs):
    first, second = jobs.submit("wait"), jobs.submit("alexa", [take(p) for p in WAKE_TAKES[:3]])
    running = wait_for(jobs, first.id, "running", stage="training")
    assert running["percent"] == 0 and running["place"] == 0
    assert jobs.view(second.id)["state"] == "queued" and jobs.view(second.id)["place"] == 1   # one ahead
    assert jobs.cancel(first.id)
    assert wait_for(jobs, first.id, "cancelled")["message"] == "cancelled"
    done = jobs.wait(second.id, JOB_TIMEOUT_S)
    assert done["state"] == "done" and done["stage"] == "threshold" and done["percent"] is None, done
    assert done["stages"] == ["training", "threshold"] and jobs.view(first.id)["stages"] == ["training"]
    assert done["result"]["threshold"] == 0.82 and done["result"]["validation_stream_false_accepts"] == 2
    assert jobs.model_path(second.id).read_bytes() == WAKE_MODEL.read_bytes()
    assert not (jobs.folder(second.id) / "work").exists() and not (jobs.folder(first.id) / "work").exists()


def test_a_queued_job_can_be_cancelled_and_frees_its_place(jobs):
    first, second, third = jobs.submit("wait"), jobs.submit("wait"), jobs.submit("alexa")
    wait_for(jobs, first.id, "running")
    assert jobs.view(third.id)["place"] == 2
    assert jobs.cancel(second.id) and jobs.view(second.id)["state"] == "cancelled"
    assert jobs.view(third.id)["place"] == 1
    jobs.cancel(first.id)
    assert jobs.wait(third.id, JOB_TIMEOUT_S)["state"] == "done"
    assert not jobs.cancel(third.id), "a finished job cannot be cancelled"


def test_cancel_ends_every_process_the_job_started(jobs):
    job = jobs.submit("wait")
    pid = wait_for(jobs, job.id, "running")["pid"]
    jobs.cancel(job.id)
    wait_for(jobs, job.id, "cancelled")
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)


# The server that dies: queues a job that waits and one after it, then is killed with SIGKILL.
DYING_SERVER = r'''
import sys, time
from pathlib import Path
from app.enroll_jobs import EnrollJobs
root, script, model = map(Path, sys.argv[1:4])      # then the seconds to wait for a stage
jobs = EnrollJobs(root, command=lambda phrase, output, takes, extra: [sys.executable, str(script), phrase,
                                                                     str(output), str(model)])
lost, waiting = jobs.submit("wait", [0.1 * __import__("numpy").ones(16000, "float32")] * 3), jobs.submit("alexa")
deadline = time.monotonic() + float(sys.argv[4])
while jobs.view(lost.id)["stage"] is None:
    if time.monotonic() > deadline:
        sys.exit(f"no stage from the job after {sys.argv[4]} s: {jobs.view(lost.id)}")
    time.sleep(0.05)
(root / lost.id / "work" / "scratch.bin").write_bytes(b"x" * 1000)    # what enroll had written
print(lost.id, waiting.id, jobs.view(lost.id)["pid"], flush=True)
time.sleep(600)
'''


def test_a_restart_finds_the_running_job_lost_and_removes_its_files(tmp_path, script):
    """A server killed mid-job leaves its record saying `running` and its enroll process going
    (its own process group): the next server ends that process, says the job was lost and
    removes its work and takes; the job still waiting is queued again and runs."""
    root = tmp_path / "jobs"
    server = subprocess.Popen([sys.executable, "-c", DYING_SERVER, str(root), str(script), str(WAKE_MODEL),
                               str(JOB_TIMEOUT_S)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    started = server.stdout.readline().split()      # the server's deadline ends it: never a hang
    assert len(started) == 3, f"the dying server ended without its job's ids (exit {server.wait()})"
    lost, waiting, pid = started
    server.kill()
    server.wait()
    os.killpg(int(pid), 0)                                   # the job's process outlived its server
    after = EnrollJobs(root, command=fake_command(script))
    view = after.view(lost)
    assert view["state"] == "lost" and "server restarted" in view["message"], view
    assert not (root / lost / "work").exists() and not (root / lost / "takes").exists()
    with pytest.raises(ProcessLookupError):
        os.killpg(int(pid), 0)
    assert json.loads((root / lost / "job.json").read_text())["state"] == "lost"
    assert after.wait(waiting, JOB_TIMEOUT_S)["state"] == "done"
    after.close()


@pytest.fixture(scope="module")
def heard() -> list[Path]:
    """The real `alexa` recordings the bundled alexa.onnx detects at its stored threshold."""
    model = KeywordModel(WAKE_MODEL)
    found = [p for p in WAKE_TAKES if detected(model, read_audio(p)[0])]
    assert len(found) >= 2, "the bundled wake word detects fewer than two of the test recordings"
    return found


def detected(model: KeywordModel, audio: np.ndarray) -> bool:
    spotter = KeywordSpotter(model)
    pad = np.zeros(SAMPLE_RATE, np.float32)
    return bool(spotter.process(np.concatenate([pad, audio, pad]), SAMPLE_RATE).detections
                or spotter.flush().detections)


def test_a_second_server_on_the_same_jobs_folder_is_refused_while_the_first_lives(tmp_path, script):
    """Its start would mark the first server's running job lost and end it."""
    root = tmp_path / "jobs"
    first = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path;"
                              "from app.enroll_jobs import EnrollJobs; EnrollJobs(Path(sys.argv[1]));"
                              "print('up', flush=True); time.sleep(600)", str(root)],
                             cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert first.stdout.readline().strip() == "up"
    with pytest.raises(JobsInUse, match="another running rotkws demo"):
        EnrollJobs(root, command=fake_command(script))
    first.kill()
    first.wait()
    EnrollJobs(root, command=fake_command(script)).close()          # once it is gone, the folder is free


def test_a_take_the_finished_model_does_not_detect_is_named(jobs, heard):
    """Real `alexa` takes the model detects and a real `yes` after them: the model (the bundled
    alexa.onnx, by the stand-in) names the take of another word, and only it."""
    takes = [take(p) for p in heard[:2]] + [check_take(*read_audio(OTHER_TAKE), "alexa")]
    view = jobs.wait(jobs.submit("alexa", takes).id, JOB_TIMEOUT_S)
    assert view["state"] == "done" and view["undetected"] == [3], view


def test_undetected_takes_reads_the_takes_in_their_order(tmp_path, heard):
    for i, path in enumerate([OTHER_TAKE, heard[0], OTHER_TAKE], 1):
        sf.write(tmp_path / f"take{i}.wav", read_audio(path)[0], SAMPLE_RATE)
    assert undetected_takes(WAKE_MODEL, tmp_path) == [1, 3]


# ─── a real enroll ───

def require_enroll() -> Path:
    """What a real `rotkws enroll` needs: PyTorch, espeak-ng, the backbone and the shared data."""
    import shutil
    if shutil.which("espeak-ng") is None or not torch_importable():
        reason = "a real enroll needs the train extra and espeak-ng (.ci/run installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    require(REPO / "training" / "checkpoints" / "kws12.ckpt")
    return require(data_root())


def torch_importable() -> bool:
    import importlib.util
    return importlib.util.find_spec("torch") is not None


@pytest.mark.slow
def test_a_real_tiny_enroll_job_makes_a_model_that_names_the_take_of_another_word(tmp_path):
    """`rotkws enroll alexa --recordings …` with a tiny budget, as the page runs it: the job
    passes through enroll's stages to `done` with what it measured, keeps a model the runtime
    loads, and runs its own model over the takes (three of `alexa`, one of `yes`). With two
    training steps the model detects little: the test checks that every take was scored and
    only takes of a model that fired are left out of `undetected`."""
    data = require_enroll()
    takes = [take(p) for p in WAKE_TAKES[:3]] + [check_take(*read_audio(OTHER_TAKE), "alexa")]
    jobs = EnrollJobs(tmp_path / "jobs", extra=["--data", str(data), *TINY_BUDGET])
    try:
        job = jobs.submit("alexa", takes)
        view = jobs.wait(job.id, TINY_TIMEOUT_S)
        assert view["state"] == "done", (view, (jobs.folder(job.id) / "enroll.log").read_text()[-3000:])
        assert {"synthesising", "training", "threshold"} <= set(view["stages"]), view["stages"]
        known = [s for s in view["stages"] if s in STAGES]
        assert known == sorted(known, key=STAGES.index), view["stages"]         # in enroll's order
        assert 0.5 <= view["result"]["threshold"] <= 1 and view["result"]["validation_stream_hours"] > 0
        assert view["result"]["config"]["recordings"] and len(view["result"]["config"]["recordings"]) == 4
        assert set(view["undetected"]) <= {1, 2, 3, 4}
        assert undetected_takes(jobs.model_path(job.id), jobs.folder(job.id) / "takes") == view["undetected"]
        assert view["result"]["verifier"]["head"] == "model.head.onnx"                # enroll's default: a cascade,
        assert jobs.model_path(job.id).with_name("model.head.onnx").is_file()      # its head kept beside
    finally:
        jobs.close()                                 # a job still running ends with the test


def test_a_real_job_for_a_phrase_the_engines_cannot_say_fails_with_the_reason(tmp_path):
    """19 digits pass the text checks, but espeak-ng says them as a number that takes 11 s: the
    real enroll refuses it at once, and the job says why."""
    require_enroll()
    jobs = EnrollJobs(tmp_path / "jobs")
    view = jobs.wait(jobs.submit("1234567890123456789").id, TINY_TIMEOUT_S)
    assert view["state"] == "failed", view
    assert re.fullmatch(r"'1234567890123456789' takes \d+\.\d s to say; a wake phrase takes at most 2\.5 s",
                        view["message"]), view["message"]
    assert not (jobs.folder(view["id"]) / "work").exists()
    jobs.close()
