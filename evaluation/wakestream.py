"""Wake-word streams the way Picovoice's wake-word-benchmark mixes its own: recordings of wake
phrases and utterances of read speech in random order, 1–3 s pauses between them, background
noise everywhere at 10 dB SNR measured by peak frame energy; and detections matched to them.

SNR by peak frame energy (Picovoice's mixer): the energy of a frame is the sum of its squared
samples over ENERGY_WINDOW samples, and the SNR of an item over its noise is
10 log10(max frame energy of the item / max frame energy of the noise under it). Each item and
the pause before it are one piece, covered by one crop of the noise bed at that item's gain, so
that every piece, pauses included, has noise.
"""
from dataclasses import dataclass

import numpy as np

SAMPLE_RATE = 16_000          # Hz, every stream's
PAUSE_S = (1.0, 3.0)          # silence (under the noise) before each item, uniform
SNR_DB = 10.0                 # each item over its noise, by peak frame energy
ENERGY_WINDOW = 512           # samples per frame of the peak frame energy
HIT_WINDOW_S = 1.0            # a detection up to this long after a phrase recording ends still hits it
PHRASE, SPEECH = "phrase", "speech"   # the kinds of item
FA_PLACES = ("speech", "other phrase", "its phrase again", "noise")   # where a false accept fell


@dataclass(frozen=True)
class Item:
    audio: np.ndarray         # (samples,) float32 at SAMPLE_RATE
    kind: str                 # PHRASE or SPEECH
    label: str                # the phrase said, or the speaker of the utterance


@dataclass(frozen=True)
class Event:
    kind: str
    label: str
    start_s: float
    end_s: float


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


def schedule(sizes: list[int], seconds: float, rng, rate: int = SAMPLE_RATE) -> tuple[list[int], list[int]]:
    """(order, pauses): item indices in random order, every item once before any repeats (each
    pass a new permutation), with a pause in samples before each, until `seconds` are filled."""
    order, pauses, total = [], [], 0
    while total < seconds * rate:
        for i in rng.permutation(len(sizes)):
            order.append(int(i))
            pauses.append(int(rng.uniform(*PAUSE_S) * rate))
            total += pauses[-1] + sizes[i]
            if total >= seconds * rate:
                break
    return order, pauses


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
        stream[pos:pos + n] = piece / max(1.0, peak / 0.999)
        events.append(Event(item.kind, item.label, (pos + pause) / rate, (pos + n) / rate))
        pos += n
    return stream, events


def heard(events: list[Event], starts: np.ndarray, time_s: float) -> list[int]:
    """Indices of the events (in time order, `starts` their start times) heard at `time_s`: begun
    by then, ended at most HIT_WINDOW_S earlier."""
    last = int(np.searchsorted(starts, time_s, side="right"))
    first = int(np.searchsorted(starts, time_s - 60.0))       # no item is a minute long
    return [i for i in range(first, last) if time_s <= events[i].end_s + HIT_WINDOW_S]


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
