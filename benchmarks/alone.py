"""Heard alone: the detection rule on every held-out clip by itself, from the network's zero
state, and the false accepts per hour a stream of such clips would give at each miss rate.

The pixel streams (benchmarks/pixel_stream.py) put every clip of a held-out split, keywords and
other speech, in random order at stream.GAP_S gaps over noise, with the state carried through.
This bench takes the same clips (`pixel_stream.held_out_pixels`) and leaves out what the stream
adds: each clip is scored alone (as context.py's "first": the zero state, the clip, AFTER_S of
silence; nothing before it), clean or over the streams' noise (`pixel_stream.over_noise`: the
SNRs of stream.SNRS_DB in turn, gated as in the streams), and swept through the runtime's rule
(`stream.sweep_detections`; hits and false accepts as `stream.matched` counts them). A stream
of the clips, each once per pass, holds `items_per_hour` of them; the false accepts a clip gives
alone, times that rate, are the false accepts per hour the stream would have if the words
around each clip and the carried state cost nothing:

    FA/h(threshold) = false accepts over all clips / clips × items_per_hour

Clean, that is the easiest a stream can be (context.py: the stream-trained models find a word
heard first more often than after anything else). A model that, heard alone and clean, already
gives more than the done-when's false accepts per hour when it misses only its share of
keywords cannot reach it on the stream by any threshold or detection rule: it must confuse
fewer words.

    python -m benchmarks.alone --checkpoint default=training/checkpoints/kws12_stream.ckpt
"""
import sys

import numpy as np

from app.detection import SMOOTHING_HOPS, moving_average
from app.spotter import NOT_KEYWORDS
from benchmarks import pixel_stream
from evaluation import streams as stream
from benchmarks.context import AFTER_S, silence
from benchmarks.pixel_stream import checkpoint_parser, open_bench, score_pixels, write_bench
from model.logmel import FRAME_RATE

FA_POINTS = (10.0, 1.0, 0.1)        # false accepts per hour the table reads (as pixel_stream's)
MISS_POINT = 0.10                   # the done-when: ≤ 10 % missed at 1 FA/h


def items_per_hour(clips) -> float:
    """Clips per hour of a pixel stream of `clips` (each once per pass, a mean stream.GAP_S gap
    before each)."""
    seconds = np.mean([len(pixels) for pixels, _ in clips]) / FRAME_RATE + np.mean(stream.GAP_S)
    return 3600 / seconds


def alone_pixels(pixels: np.ndarray, noise: np.ndarray | None, snr_db: float | None) -> tuple[np.ndarray, int]:
    """(pixels (T, N_MELS) float32, the clip's first frame): the clip, clean or over `noise` (its
    last len(pixels) frames under the clip at `snr_db`, the ones before it the stream's gate),
    then AFTER_S of silence."""
    if noise is None:
        heard = pixels.astype(np.float32)
    else:
        heard = pixel_stream.pixels_from_mel_power(pixel_stream.over_noise(pixels, noise, snr_db))
    x = np.concatenate([heard, silence(AFTER_S, pixels.shape[1])])
    return x, len(heard) - len(pixels)


def heard_alone(net, clips, noise=None, rng=None) -> list[tuple[np.ndarray, np.ndarray, stream.Event]]:
    """Each clip scored alone (`alone_pixels`, `pixel_stream.score_pixels`): [(times, scores,
    the clip's Event)]. With `noise` (frames), the k-th clip is heard over a slice of it drawn
    by `rng`, at stream.SNRS_DB in turn, gated stream.GAP_S[0] before the clip as the streams are."""
    tracks = []
    for k, (pixels, label) in enumerate(clips):
        bed, snr = (None, None) if noise is None else pixel_stream.gated_noise(noise, len(pixels), k, rng)
        x, start = alone_pixels(pixels, bed, snr)
        tracks.append((*score_pixels(net, x), stream.Event(label, start / FRAME_RATE, (start + len(pixels)) / FRAME_RATE, snr)))
    return tracks


def sweep_alone(tracks, labels, keywords, thresholds=stream.THRESHOLDS) -> dict:
    """The tracks of `heard_alone` through the rule listening for `keywords` (all the model's,
    or some), at every threshold: {"thresholds", "keyword_clips" (clips of those keywords),
    "other_clips", "misses" (T,), "on_keyword" (T,): false accepts on clips of any of the
    model's keywords (another keyword, or its own a second time), "on_other" (T,): on the
    other clips (`_unknown_` words and phrases)}."""
    thresholds = [float(th) for th in thresholds]
    misses, on_keyword, on_other = (np.zeros(len(thresholds), np.int64) for _ in range(3))
    columns = [list(labels).index(k) for k in keywords]
    for times, scores, event in tracks:
        smooth = moving_average(np.asarray(scores, np.float64), SMOOTHING_HOPS, np.zeros((0, len(labels))))
        if smooth[:, columns].max(initial=0.0) < min(thresholds):      # fires at no threshold: a miss or nothing
            misses += event.label in keywords
            continue
        for j, dets in enumerate(stream.sweep_detections(times, scores, labels, keywords, thresholds).values()):
            targets, hit, false = stream.matched(dets, [event], keywords)
            misses[j] += len(targets) - len(hit)
            (on_other if event.label in NOT_KEYWORDS else on_keyword)[j] += len(false)
    n_keyword = sum(event.label in keywords for *_, event in tracks)
    return {"thresholds": thresholds, "keyword_clips": n_keyword, "other_clips": len(tracks) - n_keyword,
            "misses": misses, "on_keyword": on_keyword, "on_other": on_other}


def det_rows(sweep: dict, per_hour: float) -> list[dict]:
    """The sweep as DET rows (stream.operating_point reads them): miss rate over the keyword
    clips, false accepts per hour of a stream holding `per_hour` clips, and the false accepts
    per hour from keyword clips and from the others."""
    clips = sweep["keyword_clips"] + sweep["other_clips"]
    rate = per_hour / clips
    return [{"threshold": th, "miss_rate": m / max(1, sweep["keyword_clips"]),
             "fa_per_hour": (a + b) * rate, "from_keywords": a * rate, "from_others": b * rate}
            for th, m, a, b in zip(sweep["thresholds"], sweep["misses"], sweep["on_keyword"], sweep["on_other"])]


def at_miss_rate(rows: list[dict], miss_rate: float) -> dict | None:
    """The row with the fewest false accepts per hour among those missing at most `miss_rate`."""
    ok = [r for r in rows if r["miss_rate"] <= miss_rate]
    return min(ok, key=lambda r: (r["fa_per_hour"], -r["threshold"])) if ok else None


def row_cells(rows: list[dict]) -> list[str]:
    """The table's cells of one sweep's DET rows."""
    cells = []
    for fa in FA_POINTS:
        op = stream.operating_point(rows, fa)
        cells.append(f"{op['miss_rate'] * 100:.1f} % ({op['threshold']:.3f})" if op else "—")
    op = at_miss_rate(rows, MISS_POINT)
    cells.append(f"{op['fa_per_hour']:.1f} ({op['from_keywords']:.1f} + {op['from_others']:.1f}) "
                 f"({op['threshold']:.3f})" if op else "—")
    half = min(rows, key=lambda r: abs(r["threshold"] - 0.5))
    cells.append(f"{half['miss_rate'] * 100:.1f} %, {half['fa_per_hour']:.1f}")
    return cells


def main(argv=None) -> int:
    p = checkpoint_parser(__doc__, seed=0)
    p.add_argument("--per-keyword", action="store_true", help="also each keyword listened for alone (the first checkpoint)")
    p.add_argument("--clips", type=int, default=0, help="clips drawn from the split, keywords and others (0: all)")
    args, models, labels, keywords, clips, noise, started = open_bench(p, argv)
    per_hour = items_per_hour(clips)                  # of the whole split's streams
    if args.clips:
        clips = [clips[i] for i in np.random.default_rng(args.seed).permutation(len(clips))[:args.clips]]
    lines = ["| model | heard | " + " | ".join(f"missed at {fa:g} FA/h" for fa in FA_POINTS)
             + f" | FA/h at {MISS_POINT:.0%} missed: all (on keywords + on other speech) | missed, FA/h at 0.5 |",
             "|---|---|" + "---|" * (len(FA_POINTS) + 2)]
    alone_lines = ["", f"Listening for one keyword ({models[0][0]}; the rule given that keyword alone, its false "
                   "accepts on other keywords' clips and on other speech; one false accept is "
                   f"{per_hour / len(clips):.2f} FA/h):", "",
                   "| model | heard | keyword | " + lines[0].split("| heard | ")[1], "|---|---|---|" + lines[1][len("|---|---|"):]]
    for name, path, net in models:
        for heard, bed in (("clean", None), ("over noise", noise)):
            tracks = heard_alone(net, clips, bed, np.random.default_rng(args.seed))
            lines.append(f"| {name} ({path}) | {heard} | "
                         + " | ".join(row_cells(det_rows(sweep_alone(tracks, labels, keywords), per_hour))) + " |")
            print(lines[-1], flush=True)
            if args.per_keyword and name == models[0][0]:
                for keyword in keywords:
                    rows = det_rows(sweep_alone(tracks, labels, [keyword]), per_hour)
                    alone_lines.append(f"| {name} | {heard} | {keyword} | " + " | ".join(row_cells(rows)) + " |")
                    print(alone_lines[-1], flush=True)
    n_keyword = sum(label in keywords for _, label in clips)
    if args.per_keyword:
        lines += alone_lines
    write_bench(args, "alone", "Heard alone: the floor under the stream's false accepts", lines,
                f"Every clip of {args.split}-split speakers scored alone: {n_keyword} keyword clips and "
                f"{len(clips) - n_keyword} other clips (images, test_dev WAVs, wake-word recordings as pixels), "
                f"from the zero state, followed by {AFTER_S:g} s of silence, clean or over background noise "
                f"(a random slice, seed {args.seed}, at {' / '.join(f'{x:g}' for x in stream.SNRS_DB)} dB in turn, "
                f"gated {stream.GAP_S[0]:g} s before the clip as in the streams); false accepts per hour "
                f"are those per clip times the {per_hour:.0f} clips an hour of pixel_stream's streams holds "
                f"(each once per pass, {np.mean(stream.GAP_S):g} s mean gap): what the streams would give if "
                f"the words around each clip and the carried state cost nothing (clean: and the noise too); "
                f"thresholds in brackets; — where no threshold of the sweep (from {stream.THRESHOLDS[0]:g}) "
                f"misses so few.", started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
