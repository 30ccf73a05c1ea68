"""Write one benchmark's figures into BENCHMARKS.md, in its own section, with date and machine; say
which commit measured them (`git_commit`); log a bench's progress (`log`).

Each script owns the section between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` and
rewrites only that, so scripts run in any order and a figure nobody measured never appears.
"""
import datetime
import os
import platform
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS_MD = REPO / "BENCHMARKS.md"
HEADER = ("# Benchmarks\n\nEvery figure here was written by a script under `benchmarks/` (named in its section). "
          "Accuracy,\nstreaming detection (DET), cost per model and the peer/ablation comparison are in\n"
          "[bench/report.md](bench/report.md), written by `rotkws bench`.\n")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def write_section(name: str, title: str, body: str, path: Path = BENCHMARKS_MD,
                  script: str | None = None) -> None:
    """Replace (or append) section `name`; `script` is the file that measured it, as a path in the
    repository (default benchmarks/<name>.py)."""
    stamp = f"_Measured {datetime.date.today().isoformat()} on {machine()} by `{script or f'benchmarks/{name}.py'}`._"
    section = f"<!-- bench:{name} -->\n## {title}\n\n{stamp}\n\n{body.strip()}\n<!-- /bench:{name} -->"
    text = path.read_text() if path.exists() else HEADER
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section + "\n"
    path.write_text(text)


LOG_LOCK = threading.Lock()     # a bench may log from several threads (converge's sweep)


def log(msg: str) -> None:
    """One whole line to stdout, timestamped (never interleaved with another thread's)."""
    with LOG_LOCK:
        sys.stdout.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")
        sys.stdout.flush()


RESULTS = ("bench", "BENCHMARKS.md", "README.md")   # what benches write: not "uncommitted changes" to the code


def git_commit() -> str:
    """The short commit of HEAD, marked "(uncommitted changes)" where tracked files other than the
    benches' own RESULTS differ from it; $ROTKWS_COMMIT where set; "unknown" outside git."""
    if os.environ.get("ROTKWS_COMMIT"):                 # a copy without .git (a remote GPU's)
        return os.environ["ROTKWS_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                             text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                *(f":(exclude){p}" for p in RESULTS)], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + (" (uncommitted changes)" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
