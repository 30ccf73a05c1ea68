"""`rotkws calibrate MODEL.onnx [--fa-per-hour 1] [--hours 20] [--data DIR] [-o OUT.onnx]`.

Chooses the detection rule's operating point of a rotkws model, one threshold per keyword, on
validation streams (speakers of the validation split only: evaluation/streams.py builds them from
`speech_commands_v0.02_test_dev` and the validation-split `alexa` recordings, over noise), and
stores it in the model's metadata (`detection`), which `rotkws detect`, the demo and the
JavaScript runtime then use by default. The file is rewritten once (or written to -o).

How: the spotter runs over the streams once; for each keyword alone, a threshold sweep gives
its misses and false accepts; the thresholds minimise misses + λ · false accepts per keyword,
with the smallest λ whose total stays within --fa-per-hour (ties go to the higher threshold).
The chosen set is then scored with the full detection rule (all keywords at once), and that
measurement is stored beside it (`calibration`).

A file `rotkws enroll` wrote (a wake word) is calibrated as enroll calibrates it: the lowest
threshold whose false accepts on enroll's validation stream of real speech stay within
--fa-per-hour (default: enroll's VALIDATION_FA_PER_HOUR), its own seed and length; --hours and
--seed are the command models' (export/wake_threshold.py: `retune`).
"""
import argparse
import datetime
import json
import sys
from pathlib import Path

import numpy as np

from app.detection import MIN_HOPS, REFRACTORY_S, SMOOTHING_HOPS, detect
from app.spotter import KeywordModel, ModelError, detection_settings
from app.sweep import THRESHOLDS, score_track, sweep_detections   # THRESHOLDS: the sweep of each keyword
from app.wake_rule import VALIDATION_FA_PER_HOUR
from evaluation import streams as stream

from .onnx import write_metadata
from .wake_threshold import retune

SPLIT = "validation"          # calibration never sees testing-split speakers
HOURS = 20.0                  # validation stream length (≈ 3 min here): 20 false accepts to
                              # share among ten keywords at 1 per hour
FA_PER_HOUR = 1.0             # the false-accept budget the operating point is chosen for
SEED = 1000                   # validation streams' seeds (the bench's test streams start at 0)
LAMBDAS = np.concatenate([[0.0], np.geomspace(1e-3, 1e4, 400)])   # misses traded per false accept


def score_tracks(model: KeywordModel, data: Path, split: str, hours: float, seed: int):
    """[(times, scores, events, seconds)] of the spotter over `hours` of `split` streams, one per
    segment (evaluation/streams.py)."""
    return [(*score_track(model, audio), events, len(audio) / model.sample_rate)
            for audio, events in stream.segments(data, model.labels, split, hours, seed)]


def keyword_counts(model: KeywordModel, tracks, thresholds=THRESHOLDS) -> dict[str, np.ndarray]:
    """{keyword: (len(thresholds), 3) counts of (its events, its misses, its false accepts)} with
    that keyword alone able to fire."""
    out = {k: np.zeros((len(thresholds), 3), np.int64) for k in model.keywords}
    for times, scores, events, _ in tracks:
        for k in model.keywords:
            sweep = sweep_detections(times, scores, model.labels, [k], thresholds)
            for i, th in enumerate(thresholds):
                out[k][i] += stream.score(sweep[float(th)], events, [k])
    return out


def choose(counts: dict[str, np.ndarray], hours: float, fa_per_hour: float,
           thresholds=THRESHOLDS) -> dict[str, float]:
    """Per keyword, the threshold minimising misses + λ·false accepts, at the smallest λ whose
    summed false accepts fit the budget (the highest thresholds when none does)."""
    budget = fa_per_hour * hours
    for lam in LAMBDAS:
        picks = {}
        for k, c in counts.items():
            cost = c[:, 1] + lam * c[:, 2]
            best = np.flatnonzero(cost == cost.min())
            picks[k] = int(best.max())                           # ties: the higher threshold
        if sum(counts[k][i, 2] for k, i in picks.items()) <= budget:
            return {k: float(thresholds[i]) for k, i in picks.items()}
    return {k: float(thresholds[-1]) for k in counts}


def measure(model: KeywordModel, tracks, rule: dict) -> dict:
    """Misses and false accepts per hour of the whole rule (every keyword at its threshold)."""
    totals, seconds = np.zeros(3, np.int64), 0.0
    for times, scores, events, length in tracks:
        totals += stream.score(detect(times, scores, model.labels, model.keywords, **rule), events, model.keywords)
        seconds += length
    return stream.rates(totals, seconds / 3600) | {"hours": seconds / 3600}


def calibrate(model: KeywordModel, data: Path, *, hours: float = HOURS, fa_per_hour: float = FA_PER_HOUR,
              seed: int = SEED, split: str = SPLIT) -> dict:
    """{"detection": the settings to store, "calibration": how they were chosen and measured}."""
    tracks = score_tracks(model, data, split, hours, seed)
    run_hours = sum(t[3] for t in tracks) / 3600
    thresholds = choose(keyword_counts(model, tracks), run_hours, fa_per_hour)
    rule = {"threshold": thresholds, "smoothing": SMOOTHING_HOPS, "min_hops": MIN_HOPS,
            "refractory_s": REFRACTORY_S}                  # the rule keyword_counts swept
    return {"detection": rule | {"flush_s": detection_settings(model, {})["flush_s"]},
            "calibration": {"split": split, "hours": round(run_hours, 3), "seeds": [seed, seed + len(tracks) - 1],
                            "fa_per_hour_target": fa_per_hour, "measured": measure(model, tracks, rule),
                            "date": datetime.date.today().isoformat()}}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rotkws calibrate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a rotkws ONNX file (streaming)")
    p.add_argument("-o", "--output", help="write the calibrated model here (default: rewrite MODEL)")
    p.add_argument("--data", help="the data root holding the stream sources (default: $ROTKWS_DATA, "
                                  "else ../shared/data)")
    p.add_argument("--hours", type=float, default=HOURS, help=f"validation stream length (default {HOURS:g})")
    p.add_argument("--fa-per-hour", type=float, default=None,
                   help=f"false accepts per hour to allow (default {FA_PER_HOUR:g}; an enrolled "
                        f"wake word: enroll's own budget)")
    p.add_argument("--seed", type=int, default=SEED, help=f"first stream seed (default {SEED})")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    if not args.hours > 0 or not (args.fa_per_hour is None or args.fa_per_hour > 0):
        print("rotkws calibrate: --hours and --fa-per-hour must be > 0", file=sys.stderr)
        return 2
    from corpus.folders import default_data_root
    data = Path(args.data) if args.data else default_data_root()
    out = Path(args.output or args.model)
    try:
        model = KeywordModel(args.model)
        if "enroll" in model.session.get_modelmeta().custom_metadata_map:
            return calibrate_enrolled(Path(args.model), out, data, args.fa_per_hour)
        if not model.streaming:
            raise ModelError(f"{args.model}: a clip model; calibration needs a streaming one")
        result = calibrate(model, data, hours=args.hours, fa_per_hour=args.fa_per_hour or FA_PER_HOUR,
                           seed=args.seed)
    except (ValueError, OSError) as e:                 # ModelError, ClipError, unreadable data
        print(f"rotkws calibrate: {e}", file=sys.stderr)
        return 2
    write_metadata(Path(args.model), out, result)
    m = result["calibration"]["measured"]
    print(json.dumps({"model": str(out), "threshold": result["detection"]["threshold"],
                      "validation": {"miss_rate": round(m["miss_rate"], 4), "fa_per_hour": round(m["fa_per_hour"], 3),
                                     "hours": round(m["hours"], 2), "keyword_events": m["keyword_events"]}}))
    return 0


def calibrate_enrolled(model: Path, out: Path, data: Path, fa_per_hour: float | None) -> int:
    """An enrolled wake word's threshold chosen again as enroll chooses it (export/wake_threshold.py)."""
    record = retune(model, out, data, fa_per_hour or VALIDATION_FA_PER_HOUR)
    print(json.dumps({"model": str(out), "threshold": record["threshold"], "was": record["retuned_from"],
                      "validation": {"false_accepts": record["validation_stream_false_accepts"],
                                     "hours": record["validation_stream_hours"],
                                     "fa_per_hour_allowed": record["fa_per_hour"]}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
