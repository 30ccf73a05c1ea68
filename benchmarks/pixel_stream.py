"""Streaming detection in the feature domain: the DET of a checkpoint on streams of held-out
log-mel images, eight to ten times as many distinct keyword clips as the audio streams have.

The audio streams (evaluation/streams.py) are made of the held-out split of
`speech_commands_v0.02_test_dev`: about 400 distinct keyword clips of 20–23 speakers, each
heard ~17 times in 10 h, so a figure at 1 false accept per hour rests on a handful of clips.
The image corpus assigns ~10 % of its 2,298 speakers to each held-out split (corpus/splits.py:
never trained on): 2,989 keyword clips in the testing split, 4,004 in validation, with about
1,000 other words each. Their pixels are what the fixed front-end (model/logmel.py) makes of
the audio, so a network with the logmel front-end can be run on them directly:

    stream:  the split's images, its test_dev WAVs and its wake-word recordings (`_unknown_`),
             as pixels, in random order at GAP_S gaps, each over noise at SNRS_DB in turn,
             gated as the audio streams are (from stream.GAP_S[0] before the clip to its end),
             mixed as mel power; gaps are digital silence (pixel 0)
    scores:  the network's frame probabilities at every hop's last frame (HOP_FRAMES), the
             state carried through the whole stream, as the runtime scores audio
    DET:     evaluation/streams.py's sweep and scoring (HIT_WINDOW_S, the runtime's rule)
    spread:  each figure's interval over resamplings of the streams' segments, and each model's
             difference from the first at COMPARED_AT on the same resamplings: at 1 false accept
             per hour a few false accepts move the threshold, so a gain inside the interval is
             not one

Differences from the audio streams, by construction: noise is mixed as mel power (not as
samples), images are rounded to whole pixels, and SNR is the clip's mean mel power over the
noise's. The torch network is run, not the ONNX file (the export is verified against it).

    python -m benchmarks.pixel_stream --checkpoint default=training/checkpoints/kws12_stream.ckpt \
        --checkpoint peak=runs/peak1/checkpoints/last.ckpt --split validation --hours 10
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from app.spotter import NOT_KEYWORDS
from evaluation import streams as stream
from benchmarks.report import BENCHMARKS_MD, write_section
from corpus.clips import SILENCE, UNKNOWN, read_audio
from corpus.splits import SPLITS
from model.classifiers import load_checkpoint
from model.logmel import FRAME_RATE, pixels_from_power, power_from_pixels
from training.enroll import IMAGE_ZIP
from training.features import image_splits, recording_pixels
from training.paths import default_data_root
from training.streams import HOP_FRAMES

SCORE_CHUNK = 6000                              # frames per network call (state carried)
FA_POINTS = (10.0, 1.0, 0.1)                    # false accepts per hour the table reads
COMPARED_AT = 1.0                               # where every model is compared with the first


def held_out_pixels(data: Path, labels, split: str) -> list[tuple[np.ndarray, str]]:
    """The split's clips as pixels (T, N_MELS) uint8 with their labels (keywords, `_unknown_`;
    no `_silence_`): the image corpus's, test_dev's WAVs and the wake-word recordings that
    evaluation/streams.py streams for the split."""
    images, _ = image_splits(data / IMAGE_ZIP, labels)
    part = images[split]
    out = [(p, l) for p, l in zip(part.pixels, part.labels) if l != SILENCE]
    out += [(recording_pixels(read_audio(c.path)[0]), c.label)
            for c in stream.split_clips(data, labels, split)]
    wake = stream.wake_audio(stream.wake_recordings(data, split))
    return out + [(recording_pixels(audio), UNKNOWN) for audio in wake]


def noise_frames(data: Path) -> np.ndarray:
    """The background-noise recordings as pixel frames (M, N_MELS) uint8."""
    files = sorted((data / stream.NOISE_FOLDER).glob("*.wav"))
    return np.concatenate([recording_pixels(read_audio(f)[0]) for f in files])


def build_pixel_stream(clips, minutes: float, noise: np.ndarray, rng) -> tuple[np.ndarray, list]:
    """(pixels (N, N_MELS) float32, [stream.Event]): `clips` in random order (each once per
    pass), at stream.GAP_S gaps, each over a noise slice gated from stream.GAP_S[0] before it
    to its end at the SNRs of stream.SNRS_DB in turn (mean mel power of clip over noise)."""
    total = round(minutes * 60 * FRAME_RATE)
    lead = round(stream.GAP_S[0] * FRAME_RATE)
    placed, t = [], 0
    while t < total:
        for i in rng.permutation(len(clips)):
            t += round(rng.uniform(*stream.GAP_S) * FRAME_RATE)
            placed.append((i, t))
            t += len(clips[i][0])
            if t >= total:
                break
    power = torch.zeros(t + round(FRAME_RATE), noise.shape[1], dtype=torch.float64)
    events = []
    for k, (i, start) in enumerate(placed):
        pixels, label = clips[i]
        n = len(pixels)
        bed, snr = gated_noise(noise, n, k, rng)
        power[start - lead:start + n] += over_noise(pixels, bed, snr)
        events.append(stream.Event(label, start / FRAME_RATE, (start + n) / FRAME_RATE, snr))
    return pixels_from_mel_power(power), events


def gated_noise(noise: np.ndarray, frames: int, k: int, rng) -> tuple[np.ndarray, float]:
    """(a random slice of the `noise` frames, its SNR) for the k-th clip of `frames` frames: the
    slice spans stream.GAP_S[0] before the clip (the gate) and the clip; the SNRs are
    stream.SNRS_DB in turn."""
    lead = round(stream.GAP_S[0] * FRAME_RATE)
    at = int(rng.integers(0, len(noise) - frames - lead))
    return noise[at:at + lead + frames], stream.SNRS_DB[k % len(stream.SNRS_DB)]


def over_noise(pixels: np.ndarray, noise: np.ndarray, snr_db: float) -> torch.Tensor:
    """Mel power (len(noise), N_MELS) float64: the clip's `pixels` at the end of the `noise`
    pixels (the rest of them come first: the stream's gate), the noise scaled to `snr_db` under
    the clip's mean mel power."""
    clip = power_from_pixels(torch.from_numpy(pixels.astype(np.float64)))
    bed = power_from_pixels(torch.from_numpy(noise.astype(np.float64)))
    bed = bed * (clip.mean() / bed.mean() / 10 ** (snr_db / 10))
    bed[len(bed) - len(clip):] += clip
    return bed


def pixels_from_mel_power(power: torch.Tensor) -> np.ndarray:
    """Mixed mel power → pixels (T, N_MELS) float32, zero power as digital silence (pixel 0)."""
    floor = float(power_from_pixels(torch.zeros(1)))            # what pixel 0 means: silence
    return pixels_from_power(torch.clamp(power, min=floor)).clamp(min=0).float().numpy()


@torch.no_grad()
def score_pixels(net, pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(times, scores) as the runtime reports them: the class probabilities after every hop's
    last frame (hop k ends at (k + 1)·HOP_SECONDS), the state carried through the stream."""
    state, rows = None, []
    x = torch.from_numpy(pixels)[None]
    for s in range(0, x.shape[1], SCORE_CHUNK):
        logits, state = net.frame_logits(x[:, s:s + SCORE_CHUNK], state)
        rows.append(logits[0].softmax(-1))
    probs = torch.cat(rows).numpy()
    ends = np.arange(HOP_FRAMES - 1, len(probs), HOP_FRAMES)
    return (ends + 1) / FRAME_RATE, probs[ends]


def pixel_det(net, labels, keywords, clips, noise, hours: float, seed: int) -> dict:
    """DET rows over `hours` of pixel streams (segments of stream.SEGMENT_MINUTES, seeds
    seed, seed + 1, …), as evaluation/streams.py's `det` gives them for audio, and each
    segment's counts (segments, thresholds, 3) and seconds, for resampling
    (stream.resampled_misses)."""
    counts, seconds = [], []
    for minutes, rng in stream.segment_rngs(hours, seed):
        pixels, events = build_pixel_stream(clips, minutes, noise, rng)
        totals = {float(th): np.zeros(3, np.int64) for th in stream.THRESHOLDS}
        stream.add_sweep(totals, *score_pixels(net, pixels), events, labels, keywords)
        counts.append(np.stack(list(totals.values())))
        seconds.append(len(pixels) / FRAME_RATE)
    counts, seconds = np.stack(counts), np.array(seconds)
    rows = stream.det_rows(dict(zip(totals, counts.sum(0))), seconds.sum() / 3600)
    return {"rows": rows, "hours": seconds.sum() / 3600, "keyword_events": rows[0]["keyword_events"],
            "counts": counts, "seconds": seconds}


def load_models(parser: argparse.ArgumentParser, specs: list[str]) -> tuple[list, list]:
    """--checkpoint NAME=PATH values → ([(name, path, network)], their labels); a parser error
    for a malformed spec, an unreadable checkpoint, a network that cannot read pixels as a
    stream, or checkpoints with different labels."""
    models, labels = [], None
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            parser.error(f"--checkpoint expects NAME=PATH, got {spec!r}")
        try:
            net, entry = load_checkpoint(path)
        except ValueError as e:
            parser.error(str(e))
        if not getattr(net.cfg, "reads_pixels", False) or not hasattr(net, "frame_logits"):
            parser.error(f"{path}: the pixel streams need a causal network with the logmel front-end")
        if labels is not None and entry["labels"] != labels:
            parser.error("the checkpoints have different labels")
        labels = entry["labels"]
        models.append((name, path, net.float()))
    return models, labels


def checkpoint_parser(doc: str, seed: int) -> argparse.ArgumentParser:
    """The arguments of a bench of checkpoints on a held-out split (this one, benchmarks/context.py):
    --checkpoint (for `load_models`), --split, --seed, --data, --note, --out."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--checkpoint", action="append", required=True, metavar="NAME=PATH",
                   help="a checkpoint with the logmel front-end (repeatable)")
    p.add_argument("--split", choices=SPLITS[1:], default="validation")
    p.add_argument("--seed", type=int, default=seed)
    p.add_argument("--data", type=Path, default=None, help="data root (default: $ROTKWS_DATA or ../shared/data)")
    p.add_argument("--note", default="", help="a sentence for BENCHMARKS.md: what was compared and why")
    p.add_argument("--out", type=Path, default=BENCHMARKS_MD, help="the markdown file its section goes in")
    return p


def open_bench(p: argparse.ArgumentParser, argv) -> tuple:
    """Parse `argv` with a `checkpoint_parser` (its --clips checked where it has one), load the
    checkpoints and read the split's clips and the noise: (args, models, labels, keywords,
    held-out clips (`held_out_pixels`), noise frames, the monotonic time the reading started)."""
    args = p.parse_args(argv)
    if getattr(args, "clips", 0) < 0:
        p.error(f"--clips expects a count ≥ 0, got {args.clips}")
    models, labels = load_models(p, args.checkpoint)
    keywords = [l for l in labels if l not in NOT_KEYWORDS]
    started = time.monotonic()
    data = args.data or default_data_root()
    return args, models, labels, keywords, held_out_pixels(data, labels, args.split), noise_frames(data), started


def write_bench(args, name: str, title: str, lines: list[str], text: str, started: float) -> None:
    """A checkpoint bench's section (`checkpoint_parser`'s --split, --note, --out): the table
    `lines`, then `text`, the note and the minutes since `started`, as section `<name>_<split>`
    of `benchmarks/<name>.py`."""
    body = "\n".join(lines) + f"\n\n{text} {args.note} ({(time.monotonic() - started) / 60:.0f} min.)"
    write_section(f"{name}_{args.split}", f"{title} ({args.split} split)", body, args.out, script=name)


def main(argv=None) -> int:
    p = checkpoint_parser(__doc__, seed=2000)
    p.add_argument("--hours", type=float, default=10.0)
    args, models, labels, keywords, clips, noise, started = open_bench(p, argv)
    n_keyword = sum(l in keywords for _, l in clips)
    lines = ["| model | checkpoint | " + " | ".join(f"missed at {fa:g} FA/h" for fa in FA_POINTS)
             + f" | against the first, at {COMPARED_AT:g} FA/h | missed, FA/h at 0.5 |",
             "|---|---|" + "---|" * (len(FA_POINTS) + 2)]
    first, picks = None, None
    for name, path, net in models:
        d = pixel_det(net, labels, keywords, clips, noise, args.hours, args.seed)
        if picks is None:
            picks = stream.segment_picks(len(d["seconds"]), seed=args.seed)
        cells = []
        for fa in FA_POINTS:
            op = stream.operating_point(d["rows"], fa)
            low, high = stream.interval(stream.resampled_misses(d["counts"], d["seconds"], fa, picks) * 100)
            cells.append(f"{op['miss_rate'] * 100:.1f} % [{low:.1f}, {high:.1f}] ({op['threshold']:.3f})" if op else "—")
        op = stream.operating_point(d["rows"], COMPARED_AT)
        compared = (op["miss_rate"] * 100 if op else np.nan,
                    stream.resampled_misses(d["counts"], d["seconds"], COMPARED_AT, picks) * 100)
        if first is None:
            first = compared
            cells.append("—")
        else:
            low, high = stream.interval(compared[1] - first[1])
            cells.append(f"{compared[0] - first[0]:+.1f} points [{low:+.1f}, {high:+.1f}]")
        half = min(d["rows"], key=lambda r: abs(r["threshold"] - 0.5))
        cells.append(f"{half['miss_rate'] * 100:.1f} %, {half['fa_per_hour']:.1f}")
        lines.append(f"| {name} | {path} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    write_bench(args, "pixel_stream", "Streaming detection on held-out images", lines,
                f"Streams of {args.split}-split speakers in the feature domain: {d['hours']:.1f} h, "
                f"{d['keyword_events']} keywords from {n_keyword} distinct keyword clips and "
                f"{len(clips) - n_keyword} distinct other clips (images, test_dev WAVs, wake-word recordings), "
                f"seeds {args.seed}…; thresholds in round brackets; in square ones the central "
                f"{stream.INTERVAL * 100:.0f} % of {stream.BOOTSTRAP_DRAWS} resamplings of the {len(d['seconds'])} "
                f"segments, the same draws for every model (the column against the first is paired).", started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
