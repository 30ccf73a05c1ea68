"""How `rotkws enroll` reports where it is: tqdm bars on stderr for a person (`bar`), one JSON line
per stage change and per percent on stdout for a script or the demo page (`json`), or nothing.

The JSON lines (`--progress json`), one object each, in order:

    {"event": "stage", "stage": "synthesising", "total": 2000, "unit": "clip", "elapsed_s": 0.4}
    {"event": "progress", "stage": "synthesising", "done": 20, "total": 2000, "percent": 1,
     "elapsed_s": 9.1, "eta_s": 891.0}
    …
    {"event": "done", "elapsed_s": 1100.2, ...what enroll measured}     or
    {"event": "error", "message": "...", "elapsed_s": 3.0}

`elapsed_s` counts from `configure`; `eta_s` is the stage's own rate so far times what is left of
it. A stage with no total (choosing the threshold) sends its "stage" line alone.
"""
import json
import sys
import threading
import time
from contextlib import contextmanager

from tqdm import tqdm

MODES = ("bar", "json", "none")
STAGES = ("synthesising", "sentences", "rendering", "speech", "backbone", "training", "threshold", "verifier")


class Reporter:
    """Where progress goes: `mode` one of MODES; JSON lines to `out` (default stdout)."""

    def __init__(self, mode: str = "bar", out=None):
        if mode not in MODES:
            raise ValueError(f"expected a progress mode among {', '.join(MODES)}, got {mode!r}")
        self.mode, self.out, self.started = mode, out, time.monotonic()

    def emit(self, event: str, **fields) -> None:
        if self.mode != "json":
            return
        line = {"event": event} | fields | {"elapsed_s": round(time.monotonic() - self.started, 1)}
        out = self.out or sys.stdout
        out.write(json.dumps(line, default=str) + "\n")
        out.flush()


_reporter = Reporter()
_local = threading.local()       # .quiet: this thread reports nothing (work beside the reported one)


def configure(mode: str = "bar", out=None) -> Reporter:
    """Set how progress is reported from now on (and restart its clock); returns the reporter."""
    global _reporter
    _reporter = Reporter(mode, out)
    return _reporter


def emit(event: str, **fields) -> None:
    if not getattr(_local, "quiet", False):
        _reporter.emit(event, **fields)


@contextmanager
def quiet():
    """Nothing reported from this thread while inside (the stages a person follows are another thread's)."""
    _local.quiet = True
    try:
        yield
    finally:
        _local.quiet = False


class JsonBar:
    """A tqdm stand-in that sends a "stage" line when made and a "progress" line per percent."""

    def __init__(self, iterable=None, total: int | None = None, desc: str = "", unit: str = "it"):
        self.iterable, self.desc, self.done = iterable, desc, 0
        self.total = len(iterable) if total is None and iterable is not None else total
        self.percent, self.started = -1, time.monotonic()
        emit("stage", stage=desc, total=self.total, unit=unit)

    def update(self, n: int = 1) -> None:
        self.done += n
        if not self.total:
            return
        percent = min(100, int(100 * self.done / self.total))
        if percent > self.percent:
            self.percent = percent
            spent = time.monotonic() - self.started
            eta = spent / self.done * (self.total - self.done) if self.done else None
            emit("progress", stage=self.desc, done=self.done, total=self.total, percent=percent,
                 eta_s=None if eta is None else round(eta, 1))

    def set_postfix(self, **_) -> None:
        pass

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.update(1)

    def __enter__(self):
        return self

    def __exit__(self, *_) -> None:
        pass


def bar(iterable=None, *, total: int | None = None, desc: str, unit: str = "it"):
    """A progress bar for one stage of the work: tqdm on stderr, JSON lines, or silent."""
    silent = _reporter.mode == "none" or getattr(_local, "quiet", False)
    if _reporter.mode == "json" and not silent:
        return JsonBar(iterable, total, desc, unit)
    return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, disable=silent)


@contextmanager
def stage(name: str):
    """A stage without a count (a "stage" line, or a line on stderr for a person)."""
    if _reporter.mode == "bar" and not getattr(_local, "quiet", False):
        print(f"{name}…", file=sys.stderr)
    emit("stage", stage=name, total=None, unit=None)
    yield
