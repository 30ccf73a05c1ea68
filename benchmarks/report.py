"""Write one benchmark's figures into BENCHMARKS.md, in its own section, with date and machine.

Each script owns the section between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` and
rewrites only that, so scripts run in any order and a figure nobody measured never appears.
"""
import datetime
import os
import platform
import re
from pathlib import Path

BENCHMARKS_MD = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"
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
    """Replace (or append) section `name`; `script` is the file that measured it (default
    benchmarks/<name>.py)."""
    stamp = f"_Measured {datetime.date.today().isoformat()} on {machine()} by `benchmarks/{script or name}.py`._"
    section = f"<!-- bench:{name} -->\n## {title}\n\n{stamp}\n\n{body.strip()}\n<!-- /bench:{name} -->"
    text = path.read_text() if path.exists() else HEADER
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section + "\n"
    path.write_text(text)
