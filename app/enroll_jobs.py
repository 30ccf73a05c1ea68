"""Enroll jobs for the demo page: one at a time per server, the others waiting in order.

    jobs = EnrollJobs(Path("~/.cache/rotkws/enroll-jobs").expanduser())
    job = jobs.submit("hey computer", takes=[audio, …])     # (samples,) float32 @ 16 kHz each
    jobs.view(job.id)       # state, queue place, stage, percent, eta, what enroll measured
    jobs.cancel(job.id)

How it works:

1. A job is a folder under `root`: `job.json` (its state, rewritten at every change), `takes/`
   (the takes as 16-bit WAV), `work/` (enroll's output and TMPDIR while it runs) and, when it is
   done, `model.onnx` (with its verifier `model.head.onnx` beside it, unless `--no-verifier`) and
   `enroll.log` (enroll's stderr).
2. One worker thread runs the oldest queued job as its own process (`python -m rotkws.enroll_cli PHRASE
   -o work/model.onnx --progress json --recordings takes/… EXTRA`), in its own process group so
   the page and its other visitors keep the server's CPU time and a cancel ends every process it
   started. The JSON lines it writes (training/progress.py) are the job's stage, percent and
   estimate; its `done` line is what it measured, its `error` line why it failed.
3. When it ends, `work/` is removed: a done job keeps its model, a failed or cancelled one only its
   record. A done job names the takes its own model does not detect (`undetected_takes`).
4. A new EnrollJobs on the same root (a server restart) marks jobs that were running as lost, ends
   their processes and removes their work and takes; jobs still queued wait again in order. A root
   is one server's: while a live server holds its lock, another gets JobsInUse.

No torch here: the job runs in the enroll process. `torch_missing()` says how to install the
train extra when it is absent.
"""
import atexit
import fcntl
import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf

from app.cascade import CascadeSpotter
from app.spotter import KeywordModel, KeywordSpotter
from corpus import phrases
from corpus.rate import SAMPLE_RATE

STATES = ("queued", "running", "done", "failed", "cancelled", "lost")
FINISHED = ("done", "failed", "cancelled", "lost")
MIN_FREE_BYTES = 500 * 2**20   # a job writes ~100 MB of temporary files and a 1 MB model
KILL_GRACE_S = 5.0           # a cancelled job's processes get this long after SIGTERM
TAKE_PAD_S = 1.0             # silence around a take when the finished model is run over it
JOB_NICENESS = 10            # the job's process yields the CPU to the page's listeners
LOG_TAIL_LINES = 3           # a failure without an `error` line is told by enroll's last lines
NO_TORCH = ("enrolling needs PyTorch (the train extra): pip install -e '.[train]', and the speech "
            "engines: apt-get install espeak-ng flite festival festvox-kallpc16k")


class JobError(ValueError):
    """A job the server refuses to queue: the message says why."""


class JobsInUse(RuntimeError):
    """The jobs folder belongs to another live server."""


@dataclass
class Job:
    id: str
    phrase: str
    takes: int                        # takes recorded (0: from text alone)
    state: str = "queued"             # one of STATES
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    stage: str | None = None          # enroll's stage (training/progress.py STAGES)
    percent: int | None = None        # of the stage
    eta_s: float | None = None        # what is left of the stage, as enroll estimates it
    stages: list[str] = field(default_factory=list)     # the stages it has been through, in order
    result: dict | None = None        # enroll's `done` line: what it measured
    message: str | None = None        # why it failed, or was lost
    undetected: list[int] = field(default_factory=list)   # takes (1-based) its model does not detect
    pid: int | None = None


def torch_missing() -> str | None:
    """How to install what enrolling needs, or None when PyTorch is importable (found, not imported)."""
    try:
        return NO_TORCH if importlib.util.find_spec("torch") is None else None
    except (ImportError, ValueError):
        return NO_TORCH


def check_text(phrase: str) -> str:
    """The phrase with whitespace collapsed, or JobError: empty, no letter or digit, too long
    (what `rotkws enroll` refuses at once, said before the job waits in the queue)."""
    try:
        return phrases.check_text(phrase)
    except phrases.PhraseError as e:
        raise JobError(str(e)) from None


def enroll_command(phrase: str, output: Path, takes: list[Path], extra: list[str]) -> list[str]:
    """`rotkws enroll` as a process that reports in JSON lines."""
    command = [sys.executable, "-m", "rotkws.enroll_cli", "-o", str(output), "--progress", "json"]
    recordings = ["--recordings", *map(str, takes)] if takes else []
    return command + recordings + list(extra) + ["--", phrase]     # a phrase may start with "-"


class EnrollJobs:
    """The server's jobs under `root`; `extra`: options every job's enroll gets (e.g. a budget);
    `command(phrase, output, takes, extra) -> argv` makes a job's process (tests use a stand-in)."""

    def __init__(self, root: Path, extra: list[str] = (), command=enroll_command,
                 min_free_bytes: int = MIN_FREE_BYTES):
        self.root, self.extra, self.command = Path(root), list(extra), command
        self.min_free_bytes = min_free_bytes
        self.root.mkdir(parents=True, exist_ok=True)
        self.claim()
        self.lock = threading.Condition()
        self.jobs: dict[str, Job] = {}
        self.queue: deque[str] = deque()
        self.process: subprocess.Popen | None = None
        self.cancelled: set[str] = set()
        with self.lock:
            self.recover()
        self.worker = threading.Thread(target=self.work, name="enroll-jobs", daemon=True)
        self.worker.start()
        atexit.register(self.close)

    def claim(self) -> None:
        """Hold the root's lock for this process's life: a second server would find our running
        job "lost" and end it."""
        self.lock_file = open(self.root / ".server.lock", "w")
        try:
            fcntl.flock(self.lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.lock_file.close()
            raise JobsInUse(f"{self.root} holds the jobs of another running rotkws demo") from None

    # ─── the record on disk ───

    def folder(self, job_id: str) -> Path:
        return self.root / job_id

    def model_path(self, job_id: str) -> Path | None:
        path = self.folder(job_id) / "model.onnx"
        job = self.jobs.get(job_id)
        return path if job is not None and job.state == "done" and path.is_file() else None

    def save(self, job: Job) -> None:
        path = self.folder(job.id) / "job.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(job)))
        tmp.replace(path)                      # never half a record, even on a full disk

    def recover(self) -> None:
        """Jobs of an earlier server: running ones lost (processes ended, work removed), queued
        ones queued again in the order they came (called with the lock held)."""
        for path in sorted(self.root.glob("*/job.json")):
            try:
                job = Job(**json.loads(path.read_text()))
            except (ValueError, TypeError):
                continue                       # a record this version cannot read
            self.jobs[job.id] = job
            if job.state == "running":
                end_group(job.pid, job.id)
                self.finish(job, "lost", message="the server restarted while this job ran; start it again")
        for job in sorted((j for j in self.jobs.values() if j.state == "queued"), key=lambda j: j.created):
            self.queue.append(job.id)

    # ─── what the page asks ───

    def submit(self, phrase: str, takes: list[np.ndarray] = ()) -> Job:
        """Queue a job for `phrase` with its takes ((samples,) float32 @ 16 kHz); JobError when the
        phrase cannot be a wake phrase or the disk has no room for a job."""
        phrase = check_text(phrase)
        free = shutil.disk_usage(self.root).free
        if free < self.min_free_bytes:
            raise JobError(f"the server's disk is full ({free / 2**20:.0f} MB free under {self.root}; a job "
                           f"needs {self.min_free_bytes / 2**20:.0f} MB): try again later")
        job = Job(secrets.token_hex(8), phrase, len(takes))
        try:
            (self.folder(job.id) / "takes").mkdir(parents=True)
            for i, audio in enumerate(takes, 1):
                sf.write(self.folder(job.id) / "takes" / f"take{i}.wav", audio, SAMPLE_RATE, subtype="PCM_16")
            self.save(job)
        except OSError as e:
            shutil.rmtree(self.folder(job.id), ignore_errors=True)
            raise JobError(f"the job could not be saved ({e.strerror or e}): the server's disk may be full") from None
        with self.lock:
            self.jobs[job.id] = job
            self.queue.append(job.id)
            self.lock.notify_all()
        return job

    def view(self, job_id: str | None) -> dict | None:
        """The job as the page shows it (its record and `place`: jobs ahead of it), or None."""
        with self.lock:
            job = self.jobs.get(job_id or "")
            if job is None:
                return None
            place = (list(self.queue).index(job.id) + (self.process is not None)) if job.id in self.queue else 0
            return asdict(job) | {"place": place}

    def cancel(self, job_id: str) -> bool:
        """Cancel a queued or running job; False when it had already finished."""
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None or job.state in FINISHED:
                return False
            if job.id in self.queue:
                self.queue.remove(job.id)
                self.finish(job, "cancelled", message="cancelled before it started")
                return True
            self.cancelled.add(job.id)
            process = self.process
        if process is not None:
            end_group(process.pid)
        return True

    def wait(self, job_id: str, timeout_s: float) -> dict:
        """Block until the job has finished (for scripts and tests); its view."""
        deadline = time.monotonic() + timeout_s
        with self.lock:
            while self.jobs[job_id].state not in FINISHED:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"job {job_id} still {self.jobs[job_id].state} after {timeout_s:g} s")
                self.lock.wait(min(left, 1.0))
        return self.view(job_id)

    def close(self) -> None:
        """End the running job's processes (the server is stopping: a restart finds it lost)."""
        if self.process is not None:
            end_group(self.process.pid)

    # ─── the worker ───

    def work(self) -> None:
        while True:
            with self.lock:
                while not self.queue:
                    self.lock.wait()
                job = self.jobs[self.queue[0]]
                self.start(job)
                self.queue.popleft()
            self.follow(job)

    def start(self, job: Job) -> None:
        """Start the job's enroll process (called with the lock held)."""
        work = self.folder(job.id) / "work"
        work.mkdir(exist_ok=True)
        takes = sorted((self.folder(job.id) / "takes").glob("take*.wav"), key=lambda p: int(p.stem[4:]))
        argv = self.command(job.phrase, work / "model.onnx", takes, self.extra)
        argv = (["nice", "-n", str(JOB_NICENESS)] if shutil.which("nice") else []) + argv
        env = os.environ | {"TMPDIR": str(work), "PYTHONUNBUFFERED": "1"}
        try:
            log = open(self.folder(job.id) / "enroll.log", "wb")
            self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, env=env,
                                            start_new_session=True, text=True)
        except OSError as e:
            self.process = None
            self.finish(job, "failed", message=f"enroll could not start: {e}")
            return
        finally:
            if "log" in locals():
                log.close()
        job.state, job.started, job.pid = "running", time.time(), self.process.pid
        self.save(job)
        self.lock.notify_all()

    def follow(self, job: Job) -> None:
        """Read the running job's JSON lines until its process ends, then record how it ended."""
        process = self.process
        if process is None:
            return
        ended = None
        for line in process.stdout:
            event = parse(line)
            with self.lock:
                ended = self.note(job, event) or ended
        process.wait()
        with self.lock:
            self.process = None
            self.ended(job, process.returncode, ended)

    def note(self, job: Job, event: dict | None) -> dict | None:
        """One JSON line into the job's record; returns a `done` or `error` event."""
        if event is None:
            return None
        kind = event.get("event")
        if kind in ("stage", "progress") and event.get("stage") and event.get("stage") not in job.stages:
            job.stages.append(event["stage"])
        if kind == "stage":
            job.stage, job.percent, job.eta_s = event.get("stage"), None if event.get("total") is None else 0, None
        elif kind == "progress":
            job.stage, job.percent, job.eta_s = event.get("stage"), event.get("percent"), event.get("eta_s")
        self.save_quietly(job)
        self.lock.notify_all()
        return event if kind in ("done", "error") else None

    def ended(self, job: Job, returncode: int, last: dict | None) -> None:
        """How the process ended → the job's state; its work folder removed."""
        model = self.folder(job.id) / "work" / "model.onnx"
        if job.id in self.cancelled:
            self.finish(job, "cancelled", message="cancelled")
        elif returncode == 0 and last and last["event"] == "done" and model.is_file():
            for path in beside(model):             # model.onnx, and the head its verifier names
                path.replace(self.folder(job.id) / path.name)
            job.result = {k: v for k, v in last.items() if k not in ("event", "output")}
            job.undetected = undetected_takes(self.folder(job.id) / "model.onnx", self.folder(job.id) / "takes")
            self.finish(job, "done")
        else:
            self.finish(job, "failed", message=failure(last, self.folder(job.id) / "enroll.log", returncode))

    def finish(self, job: Job, state: str, message: str | None = None) -> None:
        """Record the job's end; remove what it no longer needs (its work; lost: its takes too)."""
        job.state, job.finished, job.message, job.pid = state, time.time(), message, None
        shutil.rmtree(self.folder(job.id) / "work", ignore_errors=True)
        if state == "lost":
            shutil.rmtree(self.folder(job.id) / "takes", ignore_errors=True)
        self.save_quietly(job)
        self.lock.notify_all()

    def save_quietly(self, job: Job) -> None:
        """save, but a full disk must not stop the worker: the record in memory stays right."""
        try:
            self.save(job)
        except OSError:
            pass


def parse(line: str) -> dict | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def failure(last: dict | None, log: Path, returncode: int) -> str:
    """Why a job failed: enroll's `error` line, else a full disk or its last lines on stderr."""
    if last and last.get("event") == "error":
        return last.get("message") or "enroll failed"
    tail = log.read_text(errors="replace").strip().splitlines()[-LOG_TAIL_LINES:] if log.is_file() else []
    if any("No space left on device" in line for line in tail):
        return "the server's disk filled up while the job ran (No space left on device): try again later"
    said = " / ".join(line.strip() for line in tail) or "no output"
    return f"enroll stopped (exit status {returncode}): {said}"


def end_group(pid: int | None, job_id: str | None = None) -> None:
    """SIGTERM the process group of `pid`, SIGKILL after KILL_GRACE_S. With `job_id` (a process
    of an earlier server), only when that process is still that job's enroll."""
    if pid is None:
        return
    if job_id is not None and job_id not in cmdline(pid):
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:                   # not our child: ask the kernel
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False


def beside(model: Path) -> list[Path]:
    """A finished model and the files it names beside it that are there: the head of its
    verifier (OUT.head.onnx, which `rotkws enroll` writes unless --no-verifier)."""
    verifier = KeywordModel(model).meta.get("verifier")
    head = model.parent / verifier["head"] if isinstance(verifier, dict) and "head" in verifier else None
    return [model] + ([head] if head is not None and head.is_file() else [])


def undetected_takes(model_path: Path, takes: Path) -> list[int]:
    """The takes (1-based) in which the model at its stored threshold detects nothing; a model
    with a verifier, as the cascade it is (app/cascade.py). A cascade whose head is missing: none
    (the page says what is wrong with it)."""
    model = KeywordModel(model_path)
    try:
        spotter = CascadeSpotter.from_file(model_path) if "verifier" in model.meta else KeywordSpotter(model)
    except ValueError:
        return []
    missed = []
    for path in sorted(takes.glob("take*.wav"), key=lambda p: int(p.stem[4:])):
        audio, rate = sf.read(path, dtype="float32")
        pad = np.zeros(int(TAKE_PAD_S * rate), np.float32)
        spotter.reset()
        found = spotter.process(np.concatenate([pad, audio, pad]), rate).detections + spotter.flush().detections
        if not found:
            missed.append(int(path.stem[4:]))
    return missed
