"""Streaming detection on a long seeded stream of held-out speakers: miss rate against false
accepts per hour over a threshold sweep, run through the runtime's spotter as the demo runs it.

The stream: every clip of the held-out split (keywords and `_unknown_` words) plus wake-word
recordings (non-keyword speech), in random order, at random gaps, over background noise at
several SNRs. A detection is a hit when its keyword is the clip's and it comes between the
clip's start and HIT_WINDOW_S after its end; every other detection is a false accept.

    .venv/bin/python -m benchmarks.bench_detection [--model app/models/kws12.onnx] [--minutes 30]
"""
import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.clips import SILENCE, UNKNOWN, list_clips, read_audio
from app.detection import MIN_HOPS, REFRACTORY_S, SMOOTHING_HOPS, detect
from app.spotter import DEFAULT_MODEL, KeywordModel, KeywordSpotter
from benchmarks.report import write_section
from training.paths import default_data_root
from app.splits import speaker_split

GAP_S = (1.0, 4.0)            # silence between clips, uniform
SNRS_DB = (20.0, 10.0, 5.0)   # speech-to-noise ratios, in turn
HIT_WINDOW_S = 1.0            # a detection up to this long after the clip's end still counts
WAKEWORD_CLIPS = 120          # non-keyword speech from the wake-word recordings
THRESHOLDS = np.round(np.arange(0.30, 0.996, 0.01), 2)


@dataclass
class Event:
    label: str       # the clip's label; only keywords can be hit
    start_s: float
    end_s: float


def held_out_clips(data: Path, labels, split: str, rng) -> list[tuple[np.ndarray, str]]:
    clips = [c for c in list_clips(data / "speech_commands_v0.02_test_dev", labels)
             if c.label != SILENCE and speaker_split(c.speaker) == split]
    out = [(read_audio(c.path)[0], c.label) for c in clips]
    wake = sorted((data / "wakeword_benchmark_dev").glob("*/*"))
    for path in rng.permutation(np.array(wake, dtype=object))[:WAKEWORD_CLIPS]:
        try:
            audio, rate = read_audio(path)
        except ValueError:
            continue                                    # two of these files do not decode
        if rate == 16_000:
            out.append((audio, UNKNOWN))
    return out


def noise_bed(data: Path, samples: int, rng) -> np.ndarray:
    files = sorted((data / "speech_commands_background_noise").glob("*.wav"))
    noise = np.concatenate([read_audio(f)[0] for f in files])
    start = rng.integers(0, len(noise) - 16_000, size=samples // 16_000 + 1)
    bed = np.concatenate([noise[s:s + 16_000] for s in start])[:samples]
    return bed / (np.sqrt(np.mean(bed ** 2)) + 1e-9)        # unit RMS


def build_stream(clips, minutes: float, data: Path, rng, rate: int = 16_000):
    order, gaps, events, t = [], [], [], 0
    while t < minutes * 60 * rate:
        for i in rng.permutation(len(clips)):
            order.append(i)
            gaps.append(int(rng.uniform(*GAP_S) * rate))
            t += gaps[-1] + len(clips[i][0])
            if t >= minutes * 60 * rate:
                break
    bed = noise_bed(data, t + rate, rng)
    stream, pos = np.zeros(t + rate, np.float32), 0
    for k, (i, gap) in enumerate(zip(order, gaps)):
        audio, label = clips[i]
        pos += gap
        speech_rms = np.sqrt(np.mean(audio ** 2)) + 1e-9
        stream[pos:pos + len(audio)] += audio
        noise_rms = speech_rms / 10 ** (SNRS_DB[k % len(SNRS_DB)] / 20)
        stream[pos - int(GAP_S[0] * rate):pos + len(audio)] += (
            noise_rms * bed[pos - int(GAP_S[0] * rate):pos + len(audio)])
        events.append(Event(label, pos / rate, (pos + len(audio)) / rate))
        pos += len(audio)
    return np.clip(stream[:pos + rate], -1, 1), events


def score(detections, events, keywords) -> tuple[int, int, int]:
    """(keyword events, misses, false accepts)."""
    targets = [e for e in events if e.label in keywords]
    hit = set()
    false = 0
    for d in detections:
        match = [i for i, e in enumerate(targets) if e.label == d.keyword
                 and e.start_s <= d.time_s <= e.end_s + HIT_WINDOW_S and i not in hit]
        if match:
            hit.add(match[0])
        else:
            false += 1
    return len(targets), len(targets) - len(hit), false


def sweep(times, scores, model, events, hours):
    rows = []
    for th in THRESHOLDS:
        dets = detect(times, scores, model.labels, model.keywords, threshold=float(th),
                      smoothing=SMOOTHING_HOPS, min_hops=MIN_HOPS, refractory_s=REFRACTORY_S)
        n, miss, fa = score(dets, events, model.keywords)
        rows.append({"threshold": float(th), "miss_rate": miss / n, "fa_per_hour": fa / hours, "false_accepts": fa})
    return rows


def operating_point(rows, fa_per_hour: float):
    ok = [r for r in rows if r["fa_per_hour"] <= fa_per_hour]
    return min(ok, key=lambda r: (r["miss_rate"], r["threshold"])) if ok else None


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default=str(DEFAULT_MODEL))
    p.add_argument("--data", default=str(default_data_root()))
    p.add_argument("--split", default="testing")
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write the sweep here")
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    model = KeywordModel(args.model)
    clips = held_out_clips(Path(args.data), model.labels, args.split, rng)
    stream, events = build_stream(clips, args.minutes, Path(args.data), rng)
    spotter = KeywordSpotter(model)
    step = model.sample_rate                                   # feed it 1 s at a time, as live audio
    parts = [spotter.process(stream[i:i + step], model.sample_rate) for i in range(0, len(stream), step)]
    times = np.concatenate([r.times for r in parts])
    scores = np.concatenate([r.scores for r in parts])
    hours = len(stream) / model.sample_rate / 3600
    rows = sweep(times, scores, model, events, hours)
    n_kw = sum(e.label in model.keywords for e in events)
    points = {f"{fa:g} FA/h": operating_point(rows, fa) for fa in (1.0, 0.1)}
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "points": points}, indent=1))
    table = ["| operating point | threshold | miss rate | false accepts / hour |", "| --- | ---: | ---: | ---: |"]
    for name, r in points.items():
        table.append(f"| ≤ {name} | {r['threshold']:.2f} | {r['miss_rate']:.1%} | {r['fa_per_hour']:.2f} |"
                     if r else f"| ≤ {name} | — | not reached | — |")
    for th in (0.5, 0.7, 0.9):
        r = next(r for r in rows if abs(r["threshold"] - th) < 1e-9)
        table.append(f"| threshold {th:.2f} | {th:.2f} | {r['miss_rate']:.1%} | {r['fa_per_hour']:.2f} |")
    body = (f"Model `{Path(args.model).name}`; stream of {len(stream) / 16_000 / 60:.1f} min (seed {args.seed}): "
            f"{n_kw} keyword clips and {len(events) - n_kw} non-keyword clips (`_unknown_` words of the "
            f"`{args.split}` speakers of speech_commands_v0.02_test_dev, and wake-word recordings), gaps "
            f"{GAP_S[0]:g}–{GAP_S[1]:g} s, background noise at {', '.join(f'{s:g}' for s in SNRS_DB)} dB SNR. "
            f"Spotter as in the demo: 100 ms hops, smoothing {SMOOTHING_HOPS} hops, {MIN_HOPS} consecutive "
            f"hops, refractory {REFRACTORY_S:g} s; a hit is the right keyword from the clip's start to "
            f"{HIT_WINDOW_S:g} s after its end.\n\n" + "\n".join(table))
    write_section("bench_detection", "Streaming detection: miss rate vs false accepts per hour", body)
    print(body)


if __name__ == "__main__":
    main()
