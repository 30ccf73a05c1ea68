"""`python -m benchmarks.wakeword --model alexa.onnx --model snowboy.onnx [--hours 5]`: wake
words in a room where people talk, Picovoice's wake-word-benchmark protocol on the shared data,
rotkws beside the peers in one run → a section of BENCHMARKS.md and the README's table.

The stream (evaluation/streams.py): the `alexa` and `snowboy` recordings no training uses (the
odd-numbered ones) and the bench speakers' read speech (evaluation/speech.py: speechocean762's
`test` speakers and LJ Speech, none of them heard by any training or threshold; an utterance
whose transcript holds a phrase's word left out), in random order, 1–3 s pauses, background
noise under everything at 10 dB SNR by peak frame energy, for `--hours` (the 3.5 h of speech
heard again, in a new order over new noise, where more is asked for).

Engines (benchmarks/engines.py), each on the whole stream with its state carried, fed as a
microphone feeds it: rotkws models (one phrase each), openWakeWord and microWakeWord (`alexa`,
their weights inside their wheels) and PocketSphinx (keyphrase search from text, every phrase).
A peer that cannot be imported is reported as such. Per engine and phrase: the DET over its
threshold sweep, missed at 1 false accept per hour and per 10 hours (the best threshold of the
sweep: chosen on this stream, as the peers' published DETs are), missed and false accepts per
hour at the engine's own default (for rotkws: the threshold stored in the file), where the false
accepts fall, and CPU ms per second of audio (process time, one thread, contended machines:
compare as ratios within one run).
"""
import argparse
import json
import re
import multiprocessing
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

from benchmarks import engines
from benchmarks.report import machine, write_section
from corpus.clips import ClipError
from corpus.folders import default_data_root
from evaluation import speech, streams
from training.paths import REPO

HOURS = 5.0                   # the bench stream, at least
SEED = 0
FA_BUDGETS = (1.0, 0.1)       # false accepts per hour at which the DET is read
README = REPO / "README.md"
README_MARKS = ("<!-- wakeword:table -->", "<!-- /wakeword:table -->")
SECTION = "wakeword"
SPELLINGS = {"snowboy": "snow boy"}   # for PocketSphinx: the phrase in words its dictionary knows
_WORK = None                           # (engines, stream) for the worker processes, inherited by fork


def _run(i: int):
    tasks, audio = _WORK
    return tasks[i].run(audio)


def run_engines(engine_list, audio: np.ndarray, jobs: int) -> list:
    """Each engine's Run over `audio`, `jobs` at a time (one process each, one thread each);
    PocketSphinx's thresholds run as passes of their own, merged after."""
    global _WORK
    tasks, groups = [], []
    for e in engine_list:
        parts = e.split() if hasattr(e, "split") else [e]
        groups.append(range(len(tasks), len(tasks) + len(parts)))
        tasks += parts
    _WORK = tasks, audio
    if jobs > 1:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            runs = pool.map(_run, range(len(tasks)), chunksize=1)
    else:
        runs = [_run(i) for i in range(len(tasks))]
    _WORK = None
    out = []
    for g in groups:                                      # a Heads task gives a Run per head
        got = [runs[i] for i in g]
        out += got[0] if isinstance(got[0], list) else [engines.merge(got)]
    return out


def bench_items(data: Path) -> tuple[list[streams.Item], dict]:
    """The stream's items: every held-out recording of each bench phrase that decodes, and every
    bench utterance with none of the phrases' words; and what was read."""
    items, counts = [], {}
    for phrase in speech.BENCH_PHRASES:
        n = 0
        for path in speech.wake_recordings(data, phrase):
            try:
                items.append(streams.Item(speech.read(path), streams.PHRASE, phrase))
                n += 1
            except ClipError:
                continue                                 # a few wake-word files do not decode
        counts[phrase] = n
    said = speech.utterances(data, "bench")
    said = [u for u in said if not any(speech.holds_phrase(u.text, p) for p in speech.BENCH_PHRASES)]
    items += [streams.Item(speech.read(u.path), streams.SPEECH, u.speaker) for u in said]
    counts["utterances"] = len(said)
    counts["speakers"] = len({u.speaker for u in said})
    counts["speech_hours"] = sum(len(u.audio) for u in items if u.kind == streams.SPEECH) / 16_000 / 3600
    return items, counts


def bench_stream(data: Path, hours: float = HOURS, seed: int = SEED):
    """(audio, events, counts): the bench stream (module docstring); counts of what it holds
    (`hours` may leave some of the items read out)."""
    items, _ = bench_items(data)
    audio, events = streams.build(items, speech.noise_bed(data), hours * 3600, np.random.default_rng(seed))
    said = [e for e in events if e.kind == streams.SPEECH]
    counts = {p: sum(e.kind == streams.PHRASE and e.label == p for e in events) for p in speech.BENCH_PHRASES}
    counts |= {"utterances": len(said), "speakers": len({e.label for e in said}),
               "speech_hours": sum(e.end_s - e.start_s for e in said) / 3600}
    return audio, events, counts


def evaluate(run, events, hours: float) -> dict:
    """One engine's run over the stream → its DET rows, its default's figures and the budgets'."""
    rows = []
    for th in run.thresholds:
        n, missed, places = streams.match(run.detections[float(th)], events, run.phrase)
        fa = sum(places.values())
        rows.append({"threshold": float(th), "phrases": n, "missed": missed, "miss_rate": missed / max(1, n),
                     "false_accepts": fa, "fa_per_hour": fa / hours, "places": places})
    at = lambda budget: min((r for r in rows if r["fa_per_hour"] <= budget),
                            key=lambda r: (r["miss_rate"], r["threshold"]), default=None)
    default = min(rows, key=lambda r: abs(r["threshold"] - run.default))
    return {"engine": run.engine, "phrase": run.phrase, "rows": rows, "default": default,
            "budgets": {b: at(b) for b in FA_BUDGETS},
            "cpu_ms_per_s": 1000 * run.cpu_s / max(run.audio_s, 1e-9)}


def pct(row) -> str:
    return "—" if row is None else f"{100 * row['miss_rate']:.1f} %"


def table(results: list[dict], missing: list[tuple[str, str]]) -> str:
    head = ("| engine | phrase | missed at its default | FA/h at its default | where those false accepts fell "
            "| missed at 1 FA/h | missed at 1 FA/10 h | CPU ms per s of audio |\n"
            "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |\n")
    lines = []
    for r in results:
        d = r["default"]
        places = ", ".join(f"{k} {v}" for k, v in d["places"].items() if v) or "none"
        lines.append(f"| {r['engine']} | `{r['phrase']}` | {pct(d)} (at {d['threshold']:g}) | {d['fa_per_hour']:.1f} "
                     f"| {places} | {pct(r['budgets'][1.0])} | {pct(r['budgets'][0.1])} | {r['cpu_ms_per_s']:.1f} |")
    lines += [f"| {name} | — | not run: {why} | | | | | |" for name, why in missing]
    return head + "\n".join(lines)


EARLIER = "(earlier run)"   # a row of another run of the same stream (--rows-from)
SEED_MARK = re.compile(r"_s(\d+)(?=[._])")     # a file's seed in its name: alexa_s1.onnx


def seeds_table(results: list[dict]) -> str:
    """The README's short form: the files that differ only by their seed (`NAME_sN.onnx`) in one
    row, each figure "seed a / seed b" (an earlier run's seed beside this run's: the row marked);
    a head file alone (engines.HEAD_ENGINE, a step towards the cascade) is left to BENCHMARKS.md."""
    groups: dict[tuple, list[dict]] = {}
    for r in (r for r in results if not r["engine"].startswith(engines.HEAD_ENGINE)):
        name = SEED_MARK.sub("_s*", r["engine"].removesuffix(f" {EARLIER}"))
        groups.setdefault((name, r["phrase"]), []).append(r)
    join = lambda rs, f: " / ".join(f(r) for r in rs)
    lines = ["| engine | phrase | missed at 1 FA/h | missed at 1 FA/10 h | at its default: missed, FA/h | CPU ms per s |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for (engine, phrase), rs in groups.items():
        rs = sorted(rs, key=lambda r: [int(m) for m in SEED_MARK.findall(r["engine"])])
        engine += f" {EARLIER}" if any(r["engine"].endswith(EARLIER) for r in rs) else ""
        lines.append(f"| {engine} | `{phrase}` | {join(rs, lambda r: pct(r['budgets'][1.0]))} "
                     f"| {join(rs, lambda r: pct(r['budgets'][0.1]))} "
                     f"| {join(rs, lambda r: pct(r['default']) + ', ' + format(r['default']['fa_per_hour'], '.1f'))} "
                     f"| {join(rs, lambda r: format(r['cpu_ms_per_s'], '.1f'))} |")
    return "\n".join(lines)


def describe(counts: dict, hours: float, seed: int) -> str:
    phrases = ", ".join(f"{counts[p]} `{p}`" for p in speech.BENCH_PHRASES)
    held = ", ".join(f"`{p}`" for p in speech.HELD_OUT_WAKEWORDS)
    return (f"Stream: {hours:.2f} h (seed {seed}): {phrases} recordings (no training hears them: the "
            f"odd-numbered ones of `wakeword_benchmark_dev`; of {held}, Mycroft's every one) among "
            f"{counts['utterances']} utterances "
            f"({counts['speech_hours']:.2f} h) of read speech by {counts['speakers']} speakers "
            f"({speech.SPLIT_SOURCES['bench']}; never trained on, never used for a threshold), "
            f"1–3 s pauses, background noise everywhere at {streams.SNR_DB:g} dB SNR by peak frame "
            f"energy. Missed at 1 FA/h and 1 FA/10 h: the best threshold of each engine's sweep on this "
            f"stream; its default: for rotkws the threshold `enroll` stored (chosen on the "
            f"validation speakers' speech: {speech.SPLIT_SOURCES['validation']}), "
            f"for the peers their libraries' own. CPU: process time over the whole stream, one thread "
            f"each, one run on a shared machine: compare as ratios.")


def write_readme(text: str, path: Path = README) -> None:
    body = path.read_text()
    a, b = README_MARKS
    if a not in body:
        return
    head, rest = body.split(a, 1)
    path.write_text(head + a + "\n" + text.strip() + "\n" + b + rest.split(b, 1)[1])


def earlier_rows(path: Path, counts: dict, hours: float) -> list[dict]:
    """The results of an earlier run's --json, which must be of this stream; marked EARLIER."""
    run = json.loads(path.read_text())
    if run["counts"] != counts or abs(run["hours"] - hours) > 1e-6:
        raise ValueError(f"{path}: another stream ({run['hours']:.3f} h, {run['counts']}), expected "
                         f"{hours:.3f} h, {counts}")
    mark = lambda name: name if name.endswith(EARLIER) else f"{name} {EARLIER}"
    return [r | {"engine": mark(r["engine"]), "budgets": {float(k): v for k, v in r["budgets"].items()}}
            for r in run["results"]]


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks.wakeword", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", default=[], help="a rotkws wake-word ONNX file (repeat)")
    p.add_argument("--peers", default=",".join(engines.PEERS),
                   help="peer engines to run, comma-separated (default: %(default)s; '' for none)")
    p.add_argument("--hours", type=float, default=HOURS)
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--data", default=None, help="data root (default: $ROTKWS_DATA or ../shared/data)")
    p.add_argument("--jobs", type=int, default=2, help="engines run at once, one process each (default: %(default)s)")
    p.add_argument("--json", default=None, help="also write every DET row here")
    p.add_argument("--rows-from", default=None, metavar="JSON",
                   help="add the rows of an earlier run's --json on the same stream (its hours, seed and items "
                        "checked), marked as such: an engine measured while other work went on")
    p.add_argument("--no-write", action="store_true", help="print the table; leave BENCHMARKS.md and README alone")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    data = Path(args.data).resolve() if args.data else default_data_root()
    peers = [p for p in args.peers.split(",") if p]
    started = time.perf_counter()
    audio, events, counts = bench_stream(data, args.hours, args.seed)
    hours = len(audio) / 16_000 / 3600
    print(f"stream: {hours:.2f} h, {len(events)} items", file=sys.stderr)
    runnable, missing = engines.engines_for(speech.BENCH_PHRASES, [Path(m) for m in args.model], peers, SPELLINGS)
    results = []
    for run in run_engines(runnable, audio, args.jobs):
        results.append(evaluate(run, events, hours))
        r = results[-1]
        print(f"{r['engine']} {r['phrase']}: default {pct(r['default'])} at {r['default']['fa_per_hour']:.1f} FA/h; "
              f"1 FA/h {pct(r['budgets'][1.0])}; 1 FA/10 h {pct(r['budgets'][0.1])}; "
              f"{r['cpu_ms_per_s']:.1f} ms/s", file=sys.stderr)
    later = ""
    if args.rows_from:
        results += earlier_rows(Path(args.rows_from), counts, hours)
        later = f" Rows marked {EARLIER}: an earlier run of this same stream ({Path(args.rows_from).name})."
    text = table(results, missing)
    note = textwrap.fill(describe(counts, hours, args.seed) + later, 100)   # no line wider than a screen
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": counts, "hours": hours, "results": results,
                                               "missing": missing}, indent=1, default=str))
    if not args.no_write:
        minutes = (time.perf_counter() - started) / 60
        write_section(SECTION, "Wake words in real speech (Picovoice's protocol)",
                      f"{text}\n\n{note} This run: {minutes:.0f} min.")
        write_readme(f"_From `python -m benchmarks.wakeword`, {time.strftime('%Y-%m-%d')}, {machine()}: "
                     f"{hours:.1f} h of read speech and wake words at 10 dB SNR; the stream, each file and "
                     f"where its false accepts fell: BENCHMARKS.md, section {SECTION}._\n\n{seeds_table(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
