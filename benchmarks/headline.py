"""The README's headline table (`<!-- bench:headline -->`): the last full `rotkws bench`
(bench/report.json, benchmarks/bench.py), the ablation trained to the end (bench/converge/
report.json, benchmarks/converge.py) and the published anchors; either bench rewrites it.
"""
import json
import re
from pathlib import Path

import numpy as np

from corpus.clips import ClipError

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO / "bench"
README = REPO / "README.md"
ANCHORS = [   # published figures, never measured here: each with its own data
    ("BC-ResNet-8 (Kim et al., Interspeech 2021)", "98.7 % KWS-12", "full Speech Commands v0.02 (~85k training clips), official test list"),
    ("MatchboxNet (Majumdar & Ginsburg, Interspeech 2020)", "98.0 % KWS-12", "full Speech Commands, official test list"),
    ("Porcupine (Picovoice)", "2.7 % missed at 1 FA/10 h", "Picovoice's own wake-word benchmark (its words, its noise)"),
    ("RotRNN paper (Biegun et al., arXiv:2407.07239)", "its SC-35 table",
     "full Speech Commands, 35 words, raw 16 kHz, bidirectional: not reproduced (`sc35_paper.yaml` needs a GPU)"),
]


def pct(x) -> str:
    return "—" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{100 * x:.1f} %"


def size_text(cost: dict) -> str:
    if cost["weights"] is not None:
        return f"{cost['weights']:,} weights"
    return f"{cost['constants']:,} constants with the scan's kernels"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def interval_text(s: dict) -> str:
    if np.isnan(s["low"]):
        return pct(s["mean"])
    return f"{pct(s['mean'])} [{100 * s['low']:.1f}, {100 * s['high']:.1f}]"


def converged_report(path: Path | None = None) -> dict | None:
    """benchmarks/converge.py's last report (the ablation trained to the end), where it has
    finished arms and is not --quick; else None."""
    path = path or BENCH_DIR / "converge" / "report.json"
    if not path.is_file():
        return None
    rep = json.loads(path.read_text())
    return rep if rep.get("arms") and not rep.get("state", {}).get("budget", {}).get("quick") else None


STOPPED = {"epochs": "the budget", "patience": "no better for the patience"}   # converge's `stopped`


def converged_rows(rep: dict | None) -> list[str]:
    """The headline's ablation rows: each arm trained to the end (benchmarks/converge.py), seeds
    with their interval; none before that has finished (one-epoch runs say who starts faster)."""
    if rep is None:
        return []
    rows = []
    for arm, a in rep["arms"].items():
        runs = [x for x in rep["runs"] if x["arm"] == arm]
        ms = a.get("onnx_cost", {}).get("ms", {}).get("1", {}).get("stream")
        lo, hi = min(x["epochs"] for x in runs), max(x["epochs"] for x in runs)
        epochs = f"{lo}" if lo == hi else f"{lo}–{hi}"
        why = " and ".join(sorted({STOPPED.get(x["stopped"], str(x["stopped"])) for x in runs}))
        rows.append(f"| {a['title']}, {epochs} epochs ({why}), {plural(len(runs), 'seed')} | "
                    f"{interval_text(a['accuracy'])} | — | {'—' if ms is None else f'{ms:.1f}'} | same clips; "
                    f"[bench/converge/report.md](bench/converge/report.md) |")
    return rows


def headline_rows(r: dict, converged: dict | None = None) -> list[str]:
    """The README's table: this run's figures, the ablation trained to the end (`converged`:
    converged_report()), then the anchors (not the same test)."""
    clip, st, cost = r["clip"], r["stream"], r["cost"]["float32"]
    data = (f"{clip['n']} clips of {clip['speakers']} held-out speakers, "
            f"`speech_commands_v0.02_test_dev` ({r['date']})")
    p10 = st["points"]["1 FA/10 h"]
    rows = ["| model | accuracy, unseen speakers | missed at 1 FA/10 h | CPU ms per s of audio (1 thread, streaming) | data |",
            "| --- | ---: | ---: | ---: | --- |",
            f"| **rotkws default** (`{Path(r['model']['path']).name}`, {size_text(cost)}) | "
            f"{pct(clip['accuracy'])} | {pct(p10['miss_rate']) if p10 else 'not reached'} | "
            f"{cost['ms']['1']['stream']:.1f} | {data}; stream {st['hours']:.2g} h |"]
    rows += converged_rows(converged)
    rows += [f"| {name} *(published)* | {figure} | | | {what} |" for name, figure, what in ANCHORS]
    return rows


def write_readme(r: dict, path: Path = README, converged: dict | None = None) -> None:
    """Rewrite the README's `<!-- bench:headline -->` block from this run and the ablation trained
    to the end (`converged`: benchmarks/converge.py's report)."""
    done = ""
    if converged is not None:
        on = ", ".join(converged["state"].get("trained_on", [])) or "cpu"
        done = (f"; the ablation trained to the end from `python -m benchmarks.converge`, "
                f"{converged['state']['updated'][:10]}, on {on}: "
                f"[bench/converge/report.md](bench/converge/report.md)")
    body = (f"<!-- bench:headline -->\n_From `rotkws bench`, {r['date']}, {r['machine']}: "
            f"[bench/report.md](bench/report.md){done}._\n\n" + "\n".join(headline_rows(r, converged))
            + "\n<!-- /bench:headline -->")
    text = path.read_text()
    pattern = re.compile(r"<!-- bench:headline -->.*?<!-- /bench:headline -->", re.S)
    if not pattern.search(text):
        raise ValueError(f"{path} has no <!-- bench:headline --> block to rewrite")
    path.write_text(pattern.sub(lambda _: body, text))


def read_report(path: Path) -> dict:
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ClipError(f"--render {path}: not a readable report.json ({e})") from None
    if not isinstance(report, dict) or not {"mode", "clip", "stream", "cost", "ablation"} <= set(report):
        raise ClipError(f"--render {path}: not a report.json written by rotkws bench")
    return report
