"""How long the demo page's "Your own wake word" takes from Start to listening, with enroll's own
default budget: one job through app/enroll_jobs.py (the page's queue and process) with three real
takes of the phrase, its stages timed as the page sees them (polled every POLL_S), then the
listener built on the new file (app/demo_enroll.py's Assistant with the bundled command stage).
Writes BENCHMARKS.md's section `enroll_page`.

The job starts with no clip of Kokoro's in its cache (ROTKWS_CACHE: a new folder holding the rest of
the default one, links to the assembled Kokoro model, the prepared image archive and the speech
embeddings), as the first job for a phrase on a server that has enrolled before.

    python -m benchmarks.enroll_page [--phrase alexa] [--takes 0.flac 2.flac 4.flac] [--jobs DIR]
"""
import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from app.demo_enroll import cached_assistant
from app.enroll_jobs import FINISHED, JOB_NICENESS, EnrollJobs
from app.spotter import COMMAND_MODEL, KeywordModel
from app.takes import check_take
from benchmarks.report import write_section
from corpus.clips import read_audio
from corpus.folders import default_data_root

POLL_S = 1.0
TAKES = ("0.flac", "2.flac", "4.flac")   # even-numbered: recordings the bench's stream never plays
TIMEOUT_S = 4 * 3600


def fresh_clips_cache(folder: Path) -> Path:
    """A cache folder for the job: the default one's files and folders linked, its Kokoro clips left out."""
    from training.kokoro import CACHE_ENV, CLIPS_FOLDER, cache_dir
    folder.mkdir(parents=True, exist_ok=True)
    for entry in cache_dir().iterdir():
        if entry.name != CLIPS_FOLDER and not (folder / entry.name).exists():
            (folder / entry.name).symlink_to(entry)
    os.environ[CACHE_ENV] = str(folder)             # the job's process inherits it
    return folder


def run(phrase: str, takes: list[Path], root: Path) -> dict:
    """One default job: {stage: seconds}, start → done, done → listening, what enroll measured."""
    jobs = EnrollJobs(root)
    job = jobs.submit(phrase, [check_take(*read_audio(p), phrase) for p in takes])
    started, stages, last = time.monotonic(), {}, None
    while (view := jobs.view(job.id))["state"] not in FINISHED:
        stage = view["stage"] or ("waiting" if view["state"] == "queued" else "starting")
        if stage != last:
            stages[stage], last = time.monotonic() - started, stage
        if time.monotonic() - started > TIMEOUT_S:
            raise TimeoutError(f"the job ran {TIMEOUT_S} s")
        time.sleep(POLL_S)
    done = time.monotonic()
    if view["state"] != "done":
        raise RuntimeError(f"the job {view['state']}: {view['message']}")
    cached_assistant(str(jobs.model_path(job.id)), KeywordModel(COMMAND_MODEL)).spotter()
    return {"stages": stages, "to_done_s": done - started, "to_listening_s": time.monotonic() - started,
            "view": view, "load": os.getloadavg()}


def section(phrase: str, takes: list[Path], m: dict) -> str:
    marks = list(m["stages"].items()) + [("done", m["to_done_s"])]
    rows = [f"| {name} | {start / 60:.1f} | {(marks[i + 1][1] - start) / 60:.1f} |"
            for i, (name, start) in enumerate(marks[:-1])]
    r = m["view"]["result"]
    return "\n".join([
        f"One job of the demo page's tab \"Your own wake word\" (app/enroll_jobs.py, enroll's default budget) "
        f"for `{phrase}` with {len(takes)} real takes ({', '.join(p.name for p in takes)} of "
        f"`wakeword_benchmark_dev/{phrase}`): **{m['to_listening_s'] / 60:.1f} min from Start to listening** "
        f"({m['to_done_s'] / 60:.1f} min until the job was done, then the listener built on the file). "
        f"Load average when it ended: {m['load'][0]:.1f} on 2 cores (other runs shared the CPU; the job "
        f"ran at nice {min(19, os.nice(0) + JOB_NICENESS)}: the page runs its jobs at {JOB_NICENESS} above the "
        f"server's). No Kokoro clip was cached when it started.", "",
        "| stage (as the page shows it) | from Start, min | lasted, min |", "| --- | ---: | ---: |", *rows, "",
        f"What enroll measured: threshold {r['threshold']}, {r['validation_stream_false_accepts']} false accepts "
        f"in {r['validation_stream_hours']} h of validation stream; {cascade(r)}takes its model did not detect: "
        f"{m['view']['undetected'] or 'none'}."])


def cascade(result: dict) -> str:
    v = result.get("verifier")
    return (f"a cascade, proposing at {v['propose']:g}, its heads confirming from {v['confirm']:g} "
            f"({v['validation_stream_false_accepts']} false accepts there); ") if v else "no verifier; "


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--phrase", default="alexa")
    p.add_argument("--takes", nargs="+", default=list(TAKES))
    p.add_argument("--jobs", type=Path, default=None)
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))   # so EnrollJobs.close ends the job's processes
    takes = [default_data_root() / "wakeword_benchmark_dev" / args.phrase / t for t in args.takes]
    root = args.jobs or Path(tempfile.mkdtemp(prefix="enroll-page-"))
    fresh_clips_cache(root / "cache")
    m = run(args.phrase, takes, root / "jobs")
    print(section(args.phrase, takes, m))
    write_section("enroll_page", "Your own wake word on the demo page: Start to listening",
                  section(args.phrase, takes, m))


if __name__ == "__main__":
    main()
