"""Whose takes are whose: can three takes of one speaker be told apart in the wake-word recordings,
to measure what a visitor's own takes (the demo page's "Your own wake word") buy that speaker against
text alone? Writes BENCHMARKS.md's section `takes`.

`wakeword_benchmark_dev` names its recordings by number only. A recording's fingerprint is the shape
of its spectrum (the mean log-mel pixels of its frames within FINGERPRINT_DB of the loudest, less
their mean over the bands, then the folder's mean fingerprint removed). A *session* is a run of
consecutive numbers whose neighbours' fingerprints meet at a cosine above SAME_SESSION (a bound
that about one in twenty pairs of files far apart pass): one person at one microphone, at best. A
speaker would qualify with TAKES even-numbered files (takes the bench never plays) and TAKES
odd-numbered ones (what the bench would score for them).

    python -m benchmarks.takes [--phrase alexa] [--no-write]
"""
import argparse
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks.report import write_section
from corpus.clips import AUDIO_SUFFIXES, ClipError
from corpus.folders import WAKEWORD_FOLDER, default_data_root
from evaluation import speech

TAKES = 3                  # takes per speaker, the fewest the page asks for
SAME_SESSION = 0.6         # neighbours' fingerprint cosine above which they are one session
FAR_APART = 10             # file numbers further apart than this: taken to be other sessions
FINGERPRINT_DB = 20.0      # the frames a fingerprint averages: within this of the loudest (in pixels)
SECTION = "takes"


def number(path: Path) -> int:
    return int(re.sub(r"\D", "", path.stem) or -1)


def fingerprints(folder: Path) -> tuple[list[Path], np.ndarray]:
    """The folder's readable recordings in number order and their fingerprints (the module
    docstring), unit length, the folder's mean removed."""
    import torch
    from model.logmel import LogMelPixels
    logmel, paths, rows = LogMelPixels(), [], []
    for path in sorted((p for p in folder.glob("*") if p.suffix in AUDIO_SUFFIXES), key=number):
        try:
            audio = speech.read(path)
        except ClipError:
            continue                                   # a few wake-word files do not decode
        with torch.no_grad():
            pixels = logmel(torch.from_numpy(audio)[None])[0].numpy()
        energy = pixels.mean(1)
        shape = pixels[energy > energy.max() - FINGERPRINT_DB].mean(0)
        paths.append(path)
        rows.append(shape - shape.mean())              # the spectrum's shape: the level left out
    if not paths:
        raise ClipError(f"no readable recordings in {folder}")
    v = np.array(rows) - np.mean(rows, axis=0)
    return paths, v / (np.linalg.norm(v, axis=1, keepdims=True) + 1e-9)


def sessions(paths: list[Path], v: np.ndarray) -> list[list[Path]]:
    """`paths` (in number order) in runs of consecutive numbers whose neighbours' fingerprints `v`
    meet at a cosine above SAME_SESSION."""
    runs = [[paths[0]]] if paths else []
    for k in range(1, len(paths)):
        if number(paths[k]) == number(paths[k - 1]) + 1 and v[k] @ v[k - 1] > SAME_SESSION:
            runs[-1].append(paths[k])
        else:
            runs.append([paths[k]])
    return runs


def speakers(runs: list[list[Path]]) -> list[tuple[list[Path], list[Path]]]:
    """(takes, held out) of every session with TAKES or more of each: its first TAKES training
    (even-numbered) files, and its bench (odd-numbered) ones."""
    out = []
    for run in runs:
        even = [p for p in run if speech.wakeword_training(p)]
        odd = [p for p in run if not speech.wakeword_training(p)]
        if len(even) >= TAKES and len(odd) >= TAKES:
            out.append((even[:TAKES], odd))
    return out


def measure(folder: Path, seed: int = 0) -> dict:
    paths, v = fingerprints(folder)
    idx = np.array([number(p) for p in paths])
    near = [float(v[k] @ v[k + 1]) for k in range(len(v) - 1) if idx[k + 1] == idx[k] + 1]
    pairs = np.random.default_rng(seed).integers(0, len(v), (20_000, 2))
    far = [float(v[i] @ v[j]) for i, j in pairs if abs(idx[i] - idx[j]) > FAR_APART]
    runs = sessions(paths, v)
    return {"files": len(paths), "near_median": float(np.median(near)), "far_median": float(np.median(far)),
            "far_above": float(np.mean(np.array(far) > SAME_SESSION)),
            "lengths": dict(sorted(Counter(map(len, runs)).items())),
            "qualifying": [sorted((p.name for p in t + h), key=lambda f: number(Path(f))) for t, h in speakers(runs)]}


def section(phrase: str, m: dict) -> str:
    lengths = ", ".join(f"{n} × {k}" for k, n in m["lengths"].items())
    usual = max((k for k in m["lengths"] if k > 1), key=lambda k: m["lengths"][k], default=1)
    found = "; ".join(f"{r[0]}–{r[-1]}" for r in m["qualifying"]) or "none"
    verdict = (f"the figure \"{TAKES} takes of one speaker against text alone\" cannot be made from this data "
               f"without taking the bench's own recordings as takes. Speakers with ids (a recording campaign, or a "
               f"corpus that names them) would make it." if usual // 2 < TAKES else
               f"sessions of {usual} would give {usual // 2} takes each.")
    return (f"`{phrase}`: {m['files']} readable recordings. Neighbouring numbers sound alike: their fingerprints "
            f"meet at a median cosine of {m['near_median']:.2f}, files more than {FAR_APART} apart at "
            f"{m['far_median']:.2f} ({100 * m['far_above']:.1f} % of those pass {SAME_SESSION:g}). Sessions at "
            f"{SAME_SESSION:g} (run length × how many): {lengths}. Runs of {usual} are the most common: most likely "
            f"one person's {usual} takes, {usual // 2} of them even-numbered (training) and {usual - usual // 2} odd "
            f"(the bench's). Sessions with {TAKES} even-numbered takes and {TAKES} held-out recordings: "
            f"{len(m['qualifying'])} ({found}), each longer than the usual {usual}, so as likely two people at one "
            f"microphone as one. So {verdict}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.takes", description=__doc__.splitlines()[0])
    p.add_argument("--phrase", default="alexa")
    p.add_argument("--data", default=None)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    data = Path(args.data).resolve() if args.data else default_data_root()
    m = measure(data / WAKEWORD_FOLDER / args.phrase)
    text = section(args.phrase, m)
    print(m, "\n\n" + text)
    if not args.no_write:
        write_section(SECTION, "Whose takes are whose: the recordings' sessions", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
