"""Streaming detection of one or more models on the same streams: the DET curve over a threshold
sweep, misses at 1 false accept per hour and per 10 hours, the model's own operating point (its
metadata's thresholds, as `rotkws detect` uses them), false accepts per hour on a stream of
non-keyword speech only, keywords at the very end of the input, and the clip accuracy on the
same speakers (`rotkws eval`). Writes the `bench_stream` section of BENCHMARKS.md and
bench/stream_det.png.

    python -m benchmarks.bench_stream --model before=old.onnx --model after=app/models/kws12.onnx
    python -m benchmarks.bench_stream --before-commit 176ebcd        # that commit's default model

Streams (evaluation/streams.py): testing-split speakers of `speech_commands_v0.02_test_dev` (the
ten keywords and other words) with testing-split `alexa` and all `snowboy` recordings as other
speech, at 1–4 s gaps over background noise at 20/10/5 dB SNR; segments of 30 min, seeds 0, 1, …
The non-keyword stream is the same without the keyword clips (seeds 500, 501, …). End of input:
each testing-split keyword clip alone through `rotkws detect`'s path (process, flush) against
the same clip followed by 1 s of silence, and alone without the flush's silence (flush_s = 0).
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from app.detection import detect
from app.clip_accuracy import evaluate
from app.spotter import DEFAULT_MODEL, KeywordModel, KeywordSpotter, detection_settings
from app.sweep import THRESHOLDS, score_track, sweep_detections
from benchmarks.plots import det_png
from benchmarks.report import write_section
from corpus.clips import UNKNOWN, list_clips, read_audio
from corpus.folders import KEYWORD_FOLDER, default_data_root
from corpus.splits import speaker_split
from evaluation import streams as stream

HOURS = 10.0                  # the keyword stream (as `rotkws bench`)
OTHER_HOURS = 2.0             # the stream of non-keyword speech only
OTHER_SEED = 500              # its segments' seeds
FA_POINTS = {"1 FA/h": 1.0, "1 FA/10 h": 0.1}
END_SILENCE_S = 1.0           # end of input: the clip followed by this much silence
PNG = Path(__file__).resolve().parents[1] / "bench" / "stream_det.png"


def on_streams(model: KeywordModel, streams, sweep: bool) -> dict:
    """The operating point's (events, misses, false accepts) and, with `sweep`, the DET rows."""
    totals = {float(th): np.zeros(3, np.int64) for th in THRESHOLDS} if sweep else {}
    sources = {th: np.zeros(len(stream.FA_SOURCES), np.int64) for th in totals}   # false accepts by kind
    rule = detection_settings(model, {})
    rule.pop("flush_s")                                    # the tracks are scored, not flushed
    point, seconds = np.zeros(3, np.int64), 0.0
    by_snr = np.zeros((len(stream.SNRS_DB), 2), np.int64)          # keyword events, misses
    for audio, events in streams:
        times, scores = score_track(model, audio)
        found = detect(times, scores, model.labels, model.keywords, **rule)
        point += stream.score(found, events, model.keywords)
        for i, snr in enumerate(stream.SNRS_DB):
            by_snr[i] += stream.score(found, [e for e in events if e.snr_db == snr], model.keywords)[:2]
        if sweep:
            for th, dets in sweep_detections(times, scores, model.labels, model.keywords,
                                             THRESHOLDS, smoothing=rule["smoothing"],
                                             min_hops=rule["min_hops"],
                                             refractory_s=rule["refractory_s"]).items():
                targets, hit, false = stream.matched(dets, events, model.keywords)
                totals[th] += (len(targets), len(targets) - len(hit), len(false))
                sources[th] += stream.false_accept_sources(false, events, model.keywords)
        seconds += len(audio) / model.sample_rate
    hours = seconds / 3600
    rows = [r | {"sources": dict(zip(stream.FA_SOURCES, sources[r["threshold"]].tolist()))}
            for r in stream.det_rows(totals, hours)]
    return {"hours": hours, "rows": rows,
            "point": stream.rates(point, hours),
            "missed_by_snr": {snr: int(m) / max(1, int(n)) for snr, (n, m) in zip(stream.SNRS_DB, by_snr)}}


def add_sweep(totals: dict, times: np.ndarray, scores: np.ndarray, events, labels, keywords) -> None:
    """Add one track's (keyword events, misses, false accepts) at each threshold of `totals`
    ({threshold: counts}) to its counts."""
    for th, dets in sweep_detections(times, scores, labels, keywords, list(totals)).items():
        totals[th] += stream.score(dets, events, keywords)


def det(model: KeywordModel, data: Path, split: str, hours: float, seed: int,
        thresholds=THRESHOLDS) -> dict:
    """Run the spotter over `hours` of stream (evaluation/streams.py: `segments`) and sweep the
    thresholds (the runtime's defaults for the rest of the rule), as `rotkws bench` does: {"rows":
    [{threshold, miss_rate, fa_per_hour, …}], "hours", "keyword_events", "other_events",
    "segments", "seeds"}."""
    totals = {float(th): np.zeros(3, np.int64) for th in thresholds}   # targets, misses, false
    seconds, n_other, count = 0.0, 0, 0
    for audio, events in stream.segments(data, model.labels, split, hours, seed):
        add_sweep(totals, *score_track(model, audio), events, model.labels, model.keywords)
        n_other += sum(e.label not in model.keywords for e in events)
        seconds += len(audio) / model.sample_rate
        count += 1
    rows = stream.det_rows(totals, seconds / 3600)
    return {"rows": rows, "hours": seconds / 3600, "keyword_events": int(rows[0]["keyword_events"]),
            "other_events": n_other, "segments": count, "seeds": list(range(seed, seed + count)),
            "split": split}


def end_of_input(model: KeywordModel, data: Path) -> dict:
    """Testing-split keyword clips: found alone (flushed), alone without the flush's silence,
    and followed by END_SILENCE_S of silence."""
    clips = [c for c in list_clips(data / KEYWORD_FOLDER, model.labels)
             if c.label in model.keywords and speaker_split(c.speaker) == "testing"]
    found = {"alone": 0, "alone, flush_s = 0": 0, f"+ {END_SILENCE_S:g} s silence": 0}
    spotters = {"alone": KeywordSpotter(model), "alone, flush_s = 0": KeywordSpotter(model, flush_s=0.0),
                f"+ {END_SILENCE_S:g} s silence": KeywordSpotter(model)}
    for c in clips:
        audio = read_audio(c.path)[0]
        for name, spotter in spotters.items():
            spotter.reset()
            x = np.concatenate([audio, np.zeros(int(END_SILENCE_S * model.sample_rate), np.float32)]) \
                if name.startswith("+") else audio
            dets = spotter.process(x, model.sample_rate).detections + spotter.flush().detections
            found[name] += any(d.keyword == c.label for d in dets)
    return {"clips": len(clips), **{k: v / max(1, len(clips)) for k, v in found.items()}}


def model_at(commit: str, folder: Path) -> Path:
    path = folder / f"kws12-{commit}.onnx"
    blob = subprocess.run(["git", "show", f"{commit}:app/models/kws12.onnx"], capture_output=True, check=True).stdout
    path.write_bytes(blob)
    return path


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def report(results: dict, hours: float, other_hours: float) -> str:
    lines = ["| model | clip accuracy, testing split | missed at 1 FA/h | missed at 1 FA/10 h | its operating point: missed, FA/h | "
             f"missed at its operating point, {' / '.join(f'{snr:g}' for snr in stream.SNRS_DB)} dB SNR | "
             f"FA/h on non-keyword speech ({other_hours:g} h), operating point | keyword at the end of a 1 s clip: "
             f"found alone / without flush / + {END_SILENCE_S:g} s silence | "
             f"false accepts at the 1 FA/h point: {' / '.join(stream.FA_SOURCES)} |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in results.items():
        points = {k: stream.operating_point(r["stream"]["rows"], fa) for k, fa in FA_POINTS.items()}
        cells = [f"{pct(p['miss_rate'])} (threshold {p['threshold']:.3f})" if p else "not reached"
                 for p in points.values()]
        op, other, end = r["stream"]["point"], r["other"]["point"], r["end"]
        thresholds = r["threshold"]
        shown = (f"{thresholds:g}" if not isinstance(thresholds, dict)
                 else f"per keyword {min(thresholds.values()):.2f}–{max(thresholds.values()):.2f}")
        acc = r["clips"]
        lines.append(f"| {name} | {pct(acc['accuracy'])} of {acc['n']} | {cells[0]} | {cells[1]} | {pct(op['miss_rate'])}, {op['fa_per_hour']:.2f} "
                     f"(threshold {shown}) | {' / '.join(pct(m) for m in r['stream']['missed_by_snr'].values())} "
                     f"| {other['fa_per_hour']:.2f} ({other['false_accepts']} in "
                     f"{r['other']['hours']:.2g} h) | {pct(end['alone'])} / {pct(end['alone, flush_s = 0'])} / "
                     f"{pct(end[f'+ {END_SILENCE_S:g} s silence'])} of {end['clips']} | "
                     + (" / ".join(str(n) for n in points["1 FA/h"]["sources"].values())
                        if points["1 FA/h"] else "–") + " |")
    first = next(iter(results.values()))
    events, clips = first['stream']['point']['keyword_events'], first['end']['clips']
    lines += ["", f"Keyword stream: {first['stream']['hours']:.2f} h, {events} "
              f"keywords of testing-split speakers, from {clips} distinct clips (each heard about "
              f"{events / max(1, clips):.1f} times, at other gaps, noise and SNRs: one clip confidently heard as "
              f"another keyword costs about that many false accepts); the DET columns sweep one threshold for every keyword "
              f"({THRESHOLDS[0]:.2f}–{THRESHOLDS[-1]:.4f}), the operating point is the model's "
              f"own (its metadata: per keyword where `rotkws calibrate` chose them on validation streams). "
              f"DET curve: [bench/stream_det.png](bench/stream_det.png)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_stream", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", default=[], help="NAME=PATH (repeatable)")
    p.add_argument("--before-commit", help="also measure that commit's app/models/kws12.onnx as 'before'")
    p.add_argument("--hours", type=float, default=HOURS)
    p.add_argument("--other-hours", type=float, default=OTHER_HOURS)
    p.add_argument("--data", type=Path, default=None)
    p.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = p.parse_args(argv)
    data = args.data or default_data_root()
    tmp = Path(tempfile.mkdtemp())
    models = {}
    if args.before_commit:
        models[f"before ({args.before_commit})"] = model_at(args.before_commit, tmp)
    for item in args.model:
        name, _, path = item.partition("=")
        models[name] = Path(path)
    if not models:
        models["default"] = DEFAULT_MODEL
    loaded = {name: KeywordModel(path) for name, path in models.items()}
    labels = next(iter(loaded.values())).labels
    keyword_streams = list(stream.segments(data, labels, "testing", args.hours, 0))
    other_streams = list(stream.segments(data, labels, "testing", args.other_hours, OTHER_SEED,
                                         keep=lambda label: label == UNKNOWN))
    results = {}
    for name, model in loaded.items():
        print(f"{name}: {model.path}", file=sys.stderr, flush=True)
        results[name] = {"stream": on_streams(model, keyword_streams, sweep=True),
                         "other": on_streams(model, other_streams, sweep=False),
                         "end": end_of_input(model, data), "threshold": KeywordSpotter(model).threshold,
                         "clips": evaluate(model, data / KEYWORD_FOLDER, "testing")}
    body = report(results, args.hours, args.other_hours)
    print(body)
    if not args.no_write:
        last = list(results.values())[-1]["stream"]
        points = {k: stream.operating_point(last["rows"], fa) for k, fa in FA_POINTS.items()}
        det_png(last["rows"], last["hours"], points, PNG)
        write_section("bench_stream", "Streaming detection: before and after stream training", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
