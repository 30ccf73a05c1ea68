"""Streams on a timeline, and detections matched to what was said in them: the keyword streams of
`rotkws bench` and `rotkws calibrate`, and the wake-word streams of the wake-word bench, the
commands bench and `rotkws enroll`'s threshold. Both are scheduled by `schedule` (every item once,
in random order, before any repeats, a random pause before each), their items become one kind of
`Event`, and a detection is matched to the events `heard` where it fired: begun by then and ended
at most HIT_WINDOW_S earlier.

Keyword streams (`segments`, `build_stream`), for a DET of a keyword spotter: a stream is cut into
segments of SEGMENT_MINUTES (each its own seed, a fresh spotter): every clip of the held-out split
(keywords and `_unknown_` words) plus wake-word recordings of the same split (non-keyword speech,
`split_wake_recordings`), at GAP_S gaps, over background noise at SNRS_DB in turn. A detection is a
hit when its keyword is the clip's and the clip is heard where it fired; every other detection is a
false accept (`matched`, `score`).

Wake-word streams (`build`, `match`), the way Picovoice's wake-word-benchmark mixes its own:
recordings of wake phrases and utterances of read speech, PAUSE_S pauses between them, background
noise everywhere at SNR_DB measured by peak frame energy. The energy of a frame is the sum of its
squared samples over ENERGY_WINDOW samples, and the SNR of an item over its noise is
10 log10(max frame energy of the item / max frame energy of the noise under it). Each item and the
pause before it are one piece, covered by one crop of the noise bed at that item's gain, so that
every piece, pauses included, has noise.
"""
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus.clips import SILENCE, UNKNOWN, ClipError, list_clips, read_audio
from corpus.folders import KEYWORD_FOLDER, NOISE_FOLDER, WAKEWORD_FOLDER
from corpus.rate import SAMPLE_RATE
from corpus.splits import speaker_split

HIT_WINDOW_S = 1.0            # a detection up to this long after an event's end still hits it
LONGEST_EVENT_S = 60.0        # no clip, recording or utterance is a minute long (`heard`)
CLIP, PHRASE, SPEECH = "clip", "phrase", "speech"   # the kinds of event: a keyword stream's clip;
                              # a wake-word stream's phrase recording or utterance of speech
# keyword streams
GAP_S = (1.0, 4.0)            # silence between clips, uniform
SNRS_DB = (20.0, 10.0, 5.0)   # speech-to-noise ratios, in turn
TRAINED_PHRASE = "alexa"      # its training-split recordings train streams (training/streams.py)
HELD_OUT_PHRASE = "snowboy"   # never trained on (it evaluates `rotkws enroll`): testing streams only
WAKEWORD_CLIPS = 120          # wake-word recordings drawn into each segment's clip pool
SEGMENT_MINUTES = 30.0        # one seeded stream; longer runs are several segments
NOISE_SLICE = SAMPLE_RATE     # samples per random slice of a keyword stream's noise bed (1 s)
BOOTSTRAP_DRAWS = 2000        # resamplings of the segments behind an interval
INTERVAL = 0.95               # the share of them it spans
FA_SOURCES = ("another keyword", "its keyword again", "other speech", "no speech")
# wake-word streams
PAUSE_S = (1.0, 3.0)          # silence (under the noise) before each item, uniform
SNR_DB = 10.0                 # each item over its noise, by peak frame energy
ENERGY_WINDOW = 512           # samples per frame of the peak frame energy
FULL_SCALE = 0.999            # a piece whose peak would pass this is scaled down whole
FA_PLACES = ("speech", "other phrase", "its phrase again", "noise")   # where a false accept fell


@dataclass(frozen=True)
class Event:
    """An item on a stream's timeline."""
    label: str                # a clip's label (only keywords can be hit); a wake-word stream's
                              # phrase said, or the speaker of an utterance
    start_s: float
    end_s: float
    kind: str = CLIP          # CLIP, or PHRASE or SPEECH on a wake-word stream
    snr_db: float | None = None   # speech-to-noise ratio a clip was mixed at (build_stream)


@dataclass(frozen=True)
class Item:
    """What a wake-word stream is built from."""
    audio: np.ndarray         # (samples,) float32 at SAMPLE_RATE
    kind: str                 # PHRASE or SPEECH
    label: str                # the phrase said, or the speaker of the utterance


# -- one timeline ---------------------------------------------------------------------------------
def schedule(sizes: list[int], seconds: float, rng, rate: int = SAMPLE_RATE,
             pause_s: tuple[float, float] = PAUSE_S) -> tuple[list[int], list[int]]:
    """(order, pauses): item indices in random order, every item once before any repeats (each
    pass a new permutation), with a pause in samples (uniform in `pause_s`) before each, until
    `seconds` are filled."""
    order, pauses, total = [], [], 0
    while total < seconds * rate:
        for i in rng.permutation(len(sizes)):
            order.append(int(i))
            pauses.append(int(rng.uniform(*pause_s) * rate))
            total += pauses[-1] + sizes[i]
            if total >= seconds * rate:
                break
    return order, pauses


def heard(events: list[Event], starts: np.ndarray, time_s: float) -> list[int]:
    """Indices of the events (in time order, `starts` their start times) heard at `time_s`: begun
    by then, ended at most HIT_WINDOW_S earlier."""
    first = int(np.searchsorted(starts, time_s - LONGEST_EVENT_S))
    last = int(np.searchsorted(starts, time_s, side="right"))     # events begun by then
    return [i for i in range(first, last) if time_s <= events[i].end_s + HIT_WINDOW_S]


# -- keyword streams ------------------------------------------------------------------------------
def split_wake_recordings(data: Path, split: str) -> list[Path]:
    """Other phrases for a split's keyword streams: the `alexa` recordings whose file name splits
    as `split` (stream training uses the training ones), and in testing every `snowboy` recording
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
    """The audio of those wake-word recordings that decode at SAMPLE_RATE, in order."""
    for path in paths:
        try:
            audio, rate = read(path)
        except ClipError:
            continue                                    # two of these files do not decode
        if rate == SAMPLE_RATE:
            yield audio


def held_out_clips(data: Path, labels, split: str, rng, read=read_audio) -> list[tuple[np.ndarray, str]]:
    """The split's keyword and `_unknown_` clips (`split_clips`), plus WAKEWORD_CLIPS wake-word
    recordings as `_unknown_`: (audio, label) at SAMPLE_RATE. `read(path) -> (audio, rate)`."""
    out = [(read(c.path)[0], c.label) for c in split_clips(data, labels, split)]
    wake = rng.permutation(np.array(split_wake_recordings(data, split), dtype=object))[:WAKEWORD_CLIPS]
    return out + [(audio, UNKNOWN) for audio in wake_audio(wake, read)]


def noise_slices(data: Path, samples: int, rng, read=read_audio) -> np.ndarray:
    """`samples` of background noise: random NOISE_SLICE-long slices of the noise recordings
    one after another, at unit RMS."""
    files = sorted((data / NOISE_FOLDER).glob("*.wav"))
    noise = np.concatenate([read(f)[0] for f in files])
    start = rng.integers(0, len(noise) - NOISE_SLICE, size=samples // NOISE_SLICE + 1)
    bed = np.concatenate([noise[s:s + NOISE_SLICE] for s in start])[:samples]
    return bed / (np.sqrt(np.mean(bed ** 2)) + 1e-9)


def build_stream(clips, minutes: float, data: Path, rng, rate: int = SAMPLE_RATE, read=read_audio):
    """(stream float32, [Event]): clips at random gaps (`schedule`, GAP_S), each over noise at its
    SNR (SNRS_DB in turn) by RMS, the noise starting GAP_S[0] before the clip."""
    order, gaps = schedule([len(audio) for audio, _ in clips], minutes * 60, rng, rate, GAP_S)
    t = sum(gaps) + sum(len(clips[i][0]) for i in order)
    bed = noise_slices(data, t + rate, rng, read)
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
        events.append(Event(label, pos / rate, (pos + len(audio)) / rate, snr_db=snr))
        pos += len(audio)
    return np.clip(stream[:pos + rate], -1, 1), events


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


def matched(detections, events, keywords) -> tuple[list, set, list]:
    """(keyword events, indices of the ones hit, the false accepts): each detection hits the
    first unhit event of its keyword heard where it fired (`heard`); a detection that hits
    none is a false accept."""
    targets = [e for e in events if e.label in keywords]
    starts = np.array([e.start_s for e in targets])
    hit, false = set(), []
    for d in detections:
        match = [i for i in heard(targets, starts, d.time_s)
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


def false_accept_sources(false, events, keywords) -> np.ndarray:
    """False accepts (`matched`'s third item) counted by what was heard where each fired
    (`heard`, as for hits): another keyword's clip (one keyword heard as another), a clip of
    its own keyword already hit (a second detection), other speech (an `_unknown_` clip) or
    none (gaps, noise): counts in the order of FA_SOURCES."""
    out = np.zeros(len(FA_SOURCES), np.int64)
    starts = np.array([e.start_s for e in events])
    for d in false:
        near = [events[i].label for i in heard(events, starts, d.time_s)]
        spoken = [h for h in near if h in keywords]
        out[0 if any(h != d.keyword for h in spoken) else 1 if spoken else 2 if near else 3] += 1
    return out


# -- the DET of keyword streams -------------------------------------------------------------------
def rates(counts, hours: float) -> dict:
    """(keyword events, misses, false accepts) over `hours` → those and the miss and FA rates."""
    n, m, f = (int(c) for c in counts)
    return {"keyword_events": n, "misses": m, "false_accepts": f, "miss_rate": m / max(1, n),
            "fa_per_hour": f / hours}


def det_rows(totals: dict, hours: float) -> list[dict]:
    """{threshold: (keyword events, misses, false accepts)} over `hours` → the DET rows."""
    return [{"threshold": th, **rates(counts, hours)} for th, counts in totals.items()]


def operating_point(rows: list[dict], fa_per_hour: float) -> dict | None:
    """The sweep row with the fewest misses among those at or under `fa_per_hour`."""
    ok = [r for r in rows if r["fa_per_hour"] <= fa_per_hour]
    return min(ok, key=lambda r: (r["miss_rate"], r["threshold"])) if ok else None


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


# -- wake-word streams ----------------------------------------------------------------------------
def peak_energy(audio: np.ndarray, window: int = ENERGY_WINDOW) -> float:
    """The largest sum of squared samples over consecutive `window`-sample frames (an item
    shorter than one frame: all of it)."""
    x = np.asarray(audio, np.float64)
    n = max(1, len(x) // window)
    frames = np.pad(x, (0, max(0, window - len(x))))[:n * window].reshape(n, -1)
    return float((frames ** 2).sum(1).max())


def noise_gain(item: np.ndarray, noise: np.ndarray, snr_db: float = SNR_DB) -> float:
    """The factor on `noise` (as long as `item`) that puts `item` `snr_db` over it by peak frame
    energy."""
    return float(np.sqrt(peak_energy(item) / (max(peak_energy(noise), 1e-20) * 10 ** (snr_db / 10))))


def build(items: list[Item], noise: np.ndarray, seconds: float, rng, snr_db: float = SNR_DB,
          rate: int = SAMPLE_RATE) -> tuple[np.ndarray, list[Event]]:
    """(stream float32, events): `items` scheduled until `seconds` are filled (`schedule`), each
    piece (pause + item) over a random crop of the noise bed `noise` at `snr_db` by peak frame
    energy; a piece whose peak would pass full scale is scaled down whole (its SNR unchanged)."""
    if not items:
        raise ValueError("expected items to build a stream from, got none")
    order, pauses = schedule([len(it.audio) for it in items], seconds, rng, rate)
    longest = max(p + len(items[i].audio) for i, p in zip(order, pauses))
    if len(noise) <= longest:
        raise ValueError(f"expected a noise bed longer than the longest piece ({longest} samples), "
                         f"got {len(noise)}")
    stream = np.zeros(sum(pauses) + sum(len(items[i].audio) for i in order), np.float32)
    events, pos = [], 0
    for i, pause in zip(order, pauses):
        item = items[i]
        n = pause + len(item.audio)
        start = int(rng.integers(0, len(noise) - n))
        crop = noise[start:start + n]
        piece = crop * noise_gain(item.audio, crop[pause:], snr_db)
        piece[pause:] += item.audio
        peak = np.abs(piece).max()
        stream[pos:pos + n] = piece / max(1.0, peak / FULL_SCALE)
        events.append(Event(item.label, (pos + pause) / rate, (pos + n) / rate, item.kind))
        pos += n
    return stream, events


def match(times, events: list[Event], phrase: str) -> tuple[int, int, dict[str, int]]:
    """Detections at `times` (s) of an engine listening for `phrase` → (recordings of the phrase,
    of them missed, false accepts by FA_PLACES). A detection hits the first recording of the
    phrase heard there (`heard`) not hit yet; any other is a false accept, counted where it fell:
    in an utterance of speech, in another phrase's recording, in a recording of its phrase
    already hit, or in the pauses (noise only)."""
    starts = np.array([e.start_s for e in events])
    targets = {i for i, e in enumerate(events) if e.kind == PHRASE and e.label == phrase}
    hit, places = set(), dict.fromkeys(FA_PLACES, 0)
    for t in np.sort(np.asarray(times, np.float64)):
        near = heard(events, starts, float(t))
        fresh = [i for i in near if i in targets and i not in hit]
        if fresh:
            hit.add(fresh[0])
            continue
        kinds = [events[i] for i in near]
        place = ("its phrase again" if any(i in targets for i in near) else
                 "other phrase" if any(e.kind == PHRASE for e in kinds) else
                 "speech" if kinds else "noise")
        places[place] += 1
    return len(targets), len(targets) - len(hit), places
