"""Streaming detection on long seeded streams of held-out speakers: miss rate against false
accepts per hour over a threshold sweep (a DET curve), the runtime's spotter run as the demo
runs it.

A stream is cut into segments of `SEGMENT_MINUTES` (each its own seed, a fresh spotter): every
clip of the held-out split (keywords and `_unknown_` words) plus wake-word recordings of the
same split (non-keyword speech, `wake_recordings`), in random order, at random gaps, over background noise at several SNRs.
A detection is a hit when its keyword is the clip's and it comes between the clip's start and
HIT_WINDOW_S after its end; every other detection is a false accept.
"""
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evaluation.sweep import FEED_SECONDS, THRESHOLDS, score_track, sweep_detections  # noqa: F401 (benches read them here)
from app.spotter import KeywordModel
from corpus.clips import SILENCE, UNKNOWN, ClipError, list_clips, read_audio
from corpus.folders import KEYWORD_FOLDER, NOISE_FOLDER, WAKEWORD_FOLDER
from corpus.splits import speaker_split

GAP_S = (1.0, 4.0)            # silence between clips, uniform
SNRS_DB = (20.0, 10.0, 5.0)   # speech-to-noise ratios, in turn
HIT_WINDOW_S = 1.0            # a detection up to this long after the clip's end still counts
TRAINED_PHRASE = "alexa"      # its training-split recordings train streams (training/streams.py)
HELD_OUT_PHRASE = "snowboy"   # never trained on (it evaluates `rotkws enroll`): testing streams only
WAKEWORD_CLIPS = 120          # wake-word recordings drawn into each segment's clip pool
SEGMENT_MINUTES = 30.0        # one seeded stream; longer runs are several segments
BOOTSTRAP_DRAWS = 2000        # resamplings of the segments behind an interval
INTERVAL = 0.95               # the share of them it spans



@dataclass
class Event:
    label: str       # the clip's label; only keywords can be hit
    start_s: float
    end_s: float
    snr_db: float | None = None   # speech-to-noise ratio it was mixed at (build_stream)


def wake_recordings(data: Path, split: str) -> list[Path]:
    """Other phrases for a split's streams: the `alexa` recordings whose file name splits as
    `split` (stream training uses the training ones), and in testing every `snowboy` recording
    too (no training uses them; they are never used for calibration either)."""
    found = [p for p in sorted((data / WAKEWORD_FOLDER / TRAINED_PHRASE).glob("*"))
             if speaker_split(p.stem) == split]
    return found + (sorted((data / WAKEWORD_FOLDER / HELD_OUT_PHRASE).glob("*")) if split == "testing" else [])


def split_clips(data: Path, labels, split: str) -> list:
    """The split's keyword and `_unknown_` clips of KEYWORD_FOLDER (no `_silence_`), as Clips;
    ClipError when there are none."""
    clips = [c for c in list_clips(data / KEYWORD_FOLDER, labels)
             if c.label != SILENCE and speaker_split(c.speaker) == split]
    if not clips:
        raise ClipError(f"no {split} clips in {data / KEYWORD_FOLDER}")
    return clips


def wake_audio(paths, read=read_audio):
    """The audio of those wake-word recordings that decode at 16 kHz, in order."""
    for path in paths:
        try:
            audio, rate = read(path)
        except ClipError:
            continue                                    # two of these files do not decode
        if rate == 16_000:
            yield audio


def held_out_clips(data: Path, labels, split: str, rng, read=read_audio) -> list[tuple[np.ndarray, str]]:
    """The split's keyword and `_unknown_` clips (`split_clips`), plus WAKEWORD_CLIPS wake-word
    recordings as `_unknown_`: (audio, label) at 16 kHz. `read(path) -> (audio, rate)`."""
    out = [(read(c.path)[0], c.label) for c in split_clips(data, labels, split)]
    wake = rng.permutation(np.array(wake_recordings(data, split), dtype=object))[:WAKEWORD_CLIPS]
    return out + [(audio, UNKNOWN) for audio in wake_audio(wake, read)]


def noise_bed(data: Path, samples: int, rng, read=read_audio) -> np.ndarray:
    files = sorted((data / NOISE_FOLDER).glob("*.wav"))
    noise = np.concatenate([read(f)[0] for f in files])
    start = rng.integers(0, len(noise) - 16_000, size=samples // 16_000 + 1)
    bed = np.concatenate([noise[s:s + 16_000] for s in start])[:samples]
    return bed / (np.sqrt(np.mean(bed ** 2)) + 1e-9)        # unit RMS


def build_stream(clips, minutes: float, data: Path, rng, rate: int = 16_000, read=read_audio):
    """(stream float32, [Event]): clips at random gaps, each over noise at its SNR."""
    order, gaps, t = [], [], 0
    while t < minutes * 60 * rate:
        for i in rng.permutation(len(clips)):
            order.append(i)
            gaps.append(int(rng.uniform(*GAP_S) * rate))
            t += gaps[-1] + len(clips[i][0])
            if t >= minutes * 60 * rate:
                break
    bed = noise_bed(data, t + rate, rng, read)
    stream, pos, events = np.zeros(t + rate, np.float32), 0, []
    lead = int(GAP_S[0] * rate)
    for k, (i, gap) in enumerate(zip(order, gaps)):
        audio, label = clips[i]
        pos += gap
        speech_rms = np.sqrt(np.mean(audio ** 2)) + 1e-9
        stream[pos:pos + len(audio)] += audio
        snr = SNRS_DB[k % len(SNRS_DB)]
        noise_rms = speech_rms / 10 ** (snr / 20)
        stream[pos - lead:pos + len(audio)] += noise_rms * bed[pos - lead:pos + len(audio)]
        events.append(Event(label, pos / rate, (pos + len(audio)) / rate, snr))
        pos += len(audio)
    return np.clip(stream[:pos + rate], -1, 1), events


def heard_at(events, starts: np.ndarray, time_s: float) -> list[int]:
    """Indices of the events (in start order; `starts` their start times) heard at `time_s`: begun
    by then and ended at most HIT_WINDOW_S earlier."""
    first = int(np.searchsorted(starts, time_s - 60.0))        # no clip is a minute long
    last = int(np.searchsorted(starts, time_s, side="right"))  # clips begun by then
    return [i for i in range(first, last) if time_s <= events[i].end_s + HIT_WINDOW_S]


def matched(detections, events, keywords) -> tuple[list, set, list]:
    """(keyword events, indices of the ones hit, the false accepts): each detection hits the
    first unhit event of its keyword heard where it fired (`heard_at`); a detection that hits
    none is a false accept."""
    targets = [e for e in events if e.label in keywords]
    starts = np.array([e.start_s for e in targets])
    hit, false = set(), []
    for d in detections:
        match = [i for i in heard_at(targets, starts, d.time_s)
                 if targets[i].label == d.keyword and i not in hit]
        if match:
            hit.add(match[0])
        else:
            false.append(d)
    return targets, hit, false


def score(detections, events, keywords) -> tuple[int, int, int]:
    """(keyword events, misses, false accepts)."""
    targets, hit, false = matched(detections, events, keywords)
    return len(targets), len(targets) - len(hit), len(false)


FA_SOURCES = ("another keyword", "its keyword again", "other speech", "no speech")


def false_accept_sources(false, events, keywords) -> np.ndarray:
    """False accepts (`matched`'s third item) counted by what was heard where each fired
    (`heard_at`, as for hits): another keyword's clip (one keyword heard as another), a clip of
    its own keyword already hit (a second detection), other speech (an `_unknown_` clip) or
    none (gaps, noise): counts in the order of FA_SOURCES."""
    out = np.zeros(len(FA_SOURCES), np.int64)
    starts = np.array([e.start_s for e in events])
    for d in false:
        heard = [events[i].label for i in heard_at(events, starts, d.time_s)]
        spoken = [h for h in heard if h in keywords]
        out[0 if any(h != d.keyword for h in spoken) else 1 if spoken else 2 if heard else 3] += 1
    return out


def operating_point(rows: list[dict], fa_per_hour: float) -> dict | None:
    """The sweep row with the fewest misses among those at or under `fa_per_hour`."""
    ok = [r for r in rows if r["fa_per_hour"] <= fa_per_hour]
    return min(ok, key=lambda r: (r["miss_rate"], r["threshold"])) if ok else None


def segment_rngs(hours: float, seed: int):
    """Yield (minutes, rng) for `hours` of stream cut into segments of SEGMENT_MINUTES, the k-th
    seeded seed + k."""
    remaining, k = hours * 60, 0
    while remaining > 1e-9:
        minutes = min(SEGMENT_MINUTES, remaining)
        yield minutes, np.random.default_rng(seed + k)
        remaining -= minutes
        k += 1


def segments(data: Path, labels, split: str, hours: float, seed: int, keep=None):
    """Yield (audio, events) for `hours` of `split` stream: segments of SEGMENT_MINUTES, seeded
    seed, seed + 1, …; `keep(label)`, when given, picks the clips a segment may use."""
    read = functools.cache(read_audio)            # every segment draws from the same files
    for minutes, rng in segment_rngs(hours, seed):
        clips = held_out_clips(data, labels, split, rng, read)
        if keep is not None:
            clips = [c for c in clips if keep(c[1])]
        yield build_stream(clips, minutes, data, rng, read=read)


def rates(counts, hours: float) -> dict:
    """(keyword events, misses, false accepts) over `hours` → those and the miss and FA rates."""
    n, m, f = (int(c) for c in counts)
    return {"keyword_events": n, "misses": m, "false_accepts": f, "miss_rate": m / max(1, n),
            "fa_per_hour": f / hours}


def det_rows(totals: dict, hours: float) -> list[dict]:
    """{threshold: (keyword events, misses, false accepts)} over `hours` → the DET rows."""
    return [{"threshold": th, **rates(counts, hours)} for th, counts in totals.items()]


def segment_picks(segments: int, draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> np.ndarray:
    """(draws, segments) segment indices drawn with replacement: the streams resampled by
    segment (each segment its own seeded stream), the same draws for every model compared."""
    return np.random.default_rng(seed).integers(0, segments, (draws, segments))


def resampled_misses(counts: np.ndarray, seconds: np.ndarray, fa_per_hour: float, picks: np.ndarray) -> np.ndarray:
    """The miss rate at the `fa_per_hour` operating point (`operating_point`'s choice: the
    fewest misses among the thresholds at or under the budget) of each resampling in `picks`
    (segment_picks): counts (segments, thresholds, 3) per segment and threshold (keyword events,
    misses, false accepts), seconds (segments,) → (draws,), NaN where no threshold keeps to the
    budget."""
    sums = counts[picks].sum(1)                                     # (draws, thresholds, 3)
    hours = seconds[picks].sum(1)[:, None] / 3600
    miss = sums[..., 1] / np.maximum(sums[..., 0], 1)
    best = np.where(sums[..., 2] / hours <= fa_per_hour, miss, np.inf).min(1)
    return np.where(np.isfinite(best), best, np.nan)


def interval(values: np.ndarray) -> tuple[float, float]:
    """The central INTERVAL share of `values` (NaNs left out): (low, high)."""
    tail = (1 - INTERVAL) / 2 * 100
    low, high = np.nanpercentile(values, [tail, 100 - tail])
    return float(low), float(high)


def add_sweep(totals: dict, times: np.ndarray, scores: np.ndarray, events, labels, keywords) -> None:
    """Add one track's (keyword events, misses, false accepts) at each threshold of `totals`
    ({threshold: counts}) to its counts."""
    for th, dets in sweep_detections(times, scores, labels, keywords, list(totals)).items():
        totals[th] += score(dets, events, keywords)


def det(model: KeywordModel, data: Path, split: str, hours: float, seed: int,
        thresholds=THRESHOLDS) -> dict:
    """Run the spotter over `hours` of stream (`segments`) and sweep the thresholds: {"rows":
    [{threshold, miss_rate, fa_per_hour, …}], "hours", "keyword_events", "other_events",
    "segments", "seeds"}."""
    totals = {float(th): np.zeros(3, np.int64) for th in thresholds}   # targets, misses, false
    seconds, n_other, count = 0.0, 0, 0
    for stream, events in segments(data, model.labels, split, hours, seed):
        add_sweep(totals, *score_track(model, stream), events, model.labels, model.keywords)
        n_other += sum(e.label not in model.keywords for e in events)
        seconds += len(stream) / model.sample_rate
        count += 1
    rows = det_rows(totals, seconds / 3600)
    return {"rows": rows, "hours": seconds / 3600, "keyword_events": int(rows[0]["keyword_events"]),
            "other_events": n_other, "segments": count, "seeds": list(range(seed, seed + count)),
            "split": split}
