"""`python -m benchmarks.commands --wake alexa.onnx [--commands kws12.onnx]`: a wake word, then a
command, on a stream, the way assistants are used → a section of BENCHMARKS.md.

The stream (evaluation/streams.py's mix: random order, 1–3 s pauses, background noise at
10 dB SNR by peak frame energy): every testing-split clip of the ten commands (the Speech
Commands test folder's speakers that corpus/splits.py keeps for testing; never trained on), each
said COMMAND_GAP_S after a held-out recording of the wake phrase (the odd-numbered ones, cycled,
cut where the phrase ends: `spoken`), at the phrase's peak frame energy (one speaker says both),
the two one piece under one noise crop; as many pieces in which nothing follows the wake phrase
(the same gap, then WINDOW_S of silence: a wake word said and nothing after it); between the
pieces, as many utterances of the bench's read speech as there are commands (speakers no training
or threshold used). WakeCommandSpotter runs over it as a microphone feeds it, for each command rule
in SETTINGS.

A wake word hits a piece when it fires between the phrase's start and the command's (a piece with
nothing after it: the end of its gap); each hit's command is then `correct` (that clip's word, said
no earlier than the clip), `another` (any other command, or one heard before the clip began) or
`none` (the window closed on nothing); after a phrase with nothing after it, any command is a
phantom. Every wake word elsewhere is a false wake-up (per hour; with the command it reported, if
any). The done-when of issue 27 reads the hits: ≥ 95 % correct, ≤ 2 % another.
"""
import argparse
import json
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

from app.spotter import COMMAND_MODEL, KeywordModel
from app.twostage import COMMAND_STATE, COMMAND_STATES, COMMAND_THRESHOLD, WINDOW_S, WakeCommandSpotter
from benchmarks.report import machine, write_section
from corpus.clips import ClipError, read_audio
from corpus.folders import default_data_root
from corpus.labels import KWS12_LABELS, KWS_WORDS
from evaluation import speech, streams
from evaluation.streams import split_clips

PHRASE = "alexa"              # the wake phrase of the stream (its held-out recordings)
COMMAND_GAP_S = (0.5, 1.5)    # silence between the wake phrase and the command, uniform
SPOKEN_DB, SPOKEN_TAIL_S = 30.0, 0.1   # where a recording's phrase ends: its last frame this close
                                       # to its loudest, and this much after it
SPLIT = "testing"             # the command clips' split (`--split validation`: to choose a command model on)
SPEECH_SPLIT = {"testing": "bench", "validation": "validation"}   # … and the read speech around them
SEED = 0
FEED_S = 0.5                  # audio fed per process() call, as a microphone delivers it
ALONE_SHARE = 1.0             # pieces with nothing after the wake phrase, per piece with a command
SETTINGS = [(state, th) for state in ("reset", "carried") for th in (0.2, 0.3, 0.4, 0.5)]
SNRS_DB = (streams.SNR_DB, 20.0, 40.0)   # the wake-word bench's noise, then quieter rooms
OUTCOMES = ("correct", "another", "none")
SECTION = "commands"


def spoken(audio: np.ndarray) -> np.ndarray:
    """The recording up to SPOKEN_TAIL_S after its last frame within SPOKEN_DB of its loudest (the
    wake-word recordings hold up to seconds of silence after the phrase)."""
    w = streams.ENERGY_WINDOW
    n = max(1, len(audio) // w)
    energy = (np.pad(audio, (0, max(0, w - len(audio))))[:n * w].reshape(n, -1).astype(np.float64) ** 2).sum(1)
    last = int(np.flatnonzero(energy >= energy.max() * 10 ** (-SPOKEN_DB / 10))[-1])
    return audio[:(last + 1) * w + int(SPOKEN_TAIL_S * streams.SAMPLE_RATE)]


def command_items(data: Path, rng, split: str = SPLIT) -> tuple[list[streams.Item], list[dict]]:
    """The pieces (wake phrase, gap, command clip or WINDOW_S of silence) and the bench utterances,
    as stream items; and per piece (its label is its index) where the command starts within it
    (or would: the end of its gap) and which word it is (None: nothing is said)."""
    wakes = []
    for path in speech.wake_recordings(data, PHRASE):
        try:
            wakes.append(speech.read(path))
        except ClipError:
            continue                                     # a few wake-word files do not decode
    clips = [c for c in split_clips(data, KWS12_LABELS, split) if c.label in KWS_WORDS]
    after = [clips[i] for i in rng.permutation(len(clips))]          # what each piece says after the phrase
    after += [None] * round(ALONE_SHARE * len(clips))                 # … nothing, in as many more
    items, pieces = [], []
    for k, clip in enumerate(after):
        wake = spoken(wakes[k % len(wakes)])
        gap = int(rng.uniform(*COMMAND_GAP_S) * streams.SAMPLE_RATE)
        if clip is None:
            tail = np.zeros(int(WINDOW_S * streams.SAMPLE_RATE), np.float32)
        else:
            tail, _ = read_audio(clip.path)
            tail = tail * np.sqrt(streams.peak_energy(wake) / max(streams.peak_energy(tail), 1e-20))
        items.append(streams.Item(np.concatenate([wake, np.zeros(gap, np.float32), tail]),
                                     streams.PHRASE, str(len(pieces))))
        pieces.append({"word": None if clip is None else clip.label, "command_at_s": (len(wake) + gap) / streams.SAMPLE_RATE})
    said = [u for u in speech.utterances(data, SPEECH_SPLIT[split]) if not speech.holds_phrase(u.text, PHRASE)]
    for j in rng.permutation(len(said))[:len(clips)]:
        items.append(streams.Item(speech.read(said[j].path), streams.SPEECH, said[j].speaker))
    return items, pieces


def build(data: Path, seed: int = SEED, snr_db: float = streams.SNR_DB,
          split: str = SPLIT) -> tuple[np.ndarray, list[streams.Event], list[dict]]:
    """(audio, events, pieces): every item once, in random order (streams.build), the noise
    `snr_db` under each piece."""
    rng = np.random.default_rng(seed)
    items, pieces = command_items(data, rng, split)
    once = sum(len(it.audio) for it in items) / streams.SAMPLE_RATE + len(items) * streams.PAUSE_S[0]
    audio, events = streams.build(items, speech.noise_bed(data), once, rng, snr_db)
    return audio, events, pieces


def run(spotter: WakeCommandSpotter, audio: np.ndarray) -> list:
    """The spotter's WakeEvents over the whole stream, fed FEED_S at a time."""
    spotter.reset()
    step, out = int(FEED_S * streams.SAMPLE_RATE), []
    for start in range(0, len(audio), step):
        out += spotter.process(audio[start:start + step], streams.SAMPLE_RATE).events
    return out + spotter.flush().events


def score(wake_events, events: list[streams.Event], pieces: list[dict], hours: float) -> dict:
    """Hits and their commands' outcomes, misses of the wake word, false wake-ups (module docstring)."""
    spans = [(e.start_s, e.start_s + pieces[int(e.label)]["command_at_s"], int(e.label))
             for e in events if e.kind == streams.PHRASE]
    outcomes = {o: 0 for o in OUTCOMES}
    per_word = {w: {o: 0 for o in OUTCOMES} for w in KWS_WORDS}
    hit, false, false_commands, confusions, alone_hits, phantoms = set(), 0, 0, {}, 0, 0
    for w in wake_events:
        piece = next(((cmd_s, p) for start, cmd_s, p in spans if start <= w.time_s < cmd_s and p not in hit), None)
        if piece is None:
            false += 1
            false_commands += w.command is not None
            continue
        cmd_s, p = piece
        hit.add(p)
        word = pieces[p]["word"]
        if word is None:                                   # nothing was said after this wake word
            alone_hits += 1
            phantoms += w.command is not None
            continue
        outcome = ("none" if w.command is None else
                   "correct" if w.command == word and w.command_time_s >= cmd_s else "another")
        outcomes[outcome] += 1
        per_word[word][outcome] += 1
        if outcome == "another":
            heard = f"{word} → {w.command}" + ("" if w.command != word else " (early)")
            confusions[heard] = confusions.get(heard, 0) + 1
    n = sum(pieces[p]["word"] is not None for _, _, p in spans)
    return {"pieces": n, "wake_hits": len(hit) - alone_hits, "wake_missed": n - (len(hit) - alone_hits),
            "alone_pieces": len(spans) - n, "alone_hits": alone_hits, "phantom_commands": phantoms,
            "outcomes": outcomes,
            "per_word": per_word, "confusions": dict(sorted(confusions.items(), key=lambda kv: -kv[1])),
            "false_wakes_per_hour": false / hours,
            "false_commands_per_hour": false_commands / hours}


def rate(r: dict, outcome: str) -> float:
    return r["outcomes"][outcome] / max(1, r["wake_hits"])


def phantom_rate(r: dict) -> str:
    """'2.1 % (5 of 240)': the wake words with nothing said after them that reported a command."""
    return f"{100 * r['phantom_commands'] / max(1, r['alone_hits']):.1f} % ({r['phantom_commands']} of {r['alone_hits']})"


def table(results: list[dict]) -> str:
    head = ("| SNR | command model's state | command threshold | commands after a detected wake word | correct "
            "| another command | none heard | a command after a wake word with nothing after it "
            "| false wake-ups per hour (with a command) | CPU ms per s of audio |\n"
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
    rows = [f"| {r['snr_db']:g} dB | {r['state']} | {r['threshold']:g} | {r['wake_hits']} of {r['pieces']} | "
            f"{100 * rate(r, 'correct'):.1f} % | {100 * rate(r, 'another'):.1f} % | {100 * rate(r, 'none'):.1f} % | "
            f"{phantom_rate(r)} | {r['false_wakes_per_hour']:.1f} ({r['false_commands_per_hour']:.1f}) | {r['cpu_ms_per_s']:.1f} |"
            for r in results]
    return head + "\n".join(rows)


def per_word_table(r: dict) -> str:
    """Outcomes per command, then which commands were reported in place of which."""
    head = "| command | " + " | ".join(KWS_WORDS) + " |\n| --- |" + " ---: |" * len(KWS_WORDS) + "\n"
    cells = lambda o: " | ".join(f"{r['per_word'][w][o]}" for w in KWS_WORDS)
    heard = ", ".join(f"{k} {n}" for k, n in r["confusions"].items()) or "none"
    return head + "\n".join(f"| {o} | {cells(o)} |" for o in OUTCOMES) + f"\n\nReported as another command: {heard}."


def describe(wake: Path, commands: Path, counts: dict, hours: float, seed: int, split: str = SPLIT) -> str:
    return (f"Stream: {hours:.2f} h (seed {seed}): {counts['pieces']} pieces, each a held-out `{PHRASE}` "
            f"recording (the odd-numbered ones, cycled), {COMMAND_GAP_S[0]:g}–{COMMAND_GAP_S[1]:g} s of "
            f"silence and a {split}-split clip of one of the ten commands (speakers never trained on), "
            f"and {counts['alone']} pieces of the phrase with nothing said after it, "
            f"among {counts['utterances']} utterances of read speech "
            f"({speech.SPLIT_SOURCES[SPEECH_SPLIT[split]]}), 1–3 s pauses, background noise at the SNR of each row by "
            f"peak frame energy (the same stream but for the noise's level). Wake word `{wake.name}` at its stored threshold; commands "
            f"`{commands.name}`, a {WINDOW_S:g}-s window. A hit: the wake word fired between the phrase's "
            f"start and the command's; its command is correct when it is the clip's word, heard no "
            f"earlier than the clip. False wake-ups per hour on this stream (the wake-word bench "
            f"measures them on 5 h); in brackets, those that also reported a command.")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks.commands", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wake", required=True, help=f"a wake-word ONNX file for {PHRASE!r} (`rotkws enroll {PHRASE}`)")
    p.add_argument("--commands", default=str(COMMAND_MODEL), help="the command model (default: %(default)s)")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--snr", type=float, action="append", default=None,
                   help=f"dB by peak frame energy, repeat for several (default: {', '.join(f'{x:g}' for x in SNRS_DB)})")
    p.add_argument("--split", choices=sorted(SPEECH_SPLIT), default=SPLIT,
                   help="the command clips' split: testing (the bench) or validation (to choose a model on; "
                        "its read speech the validation speakers', never written into BENCHMARKS.md)")
    p.add_argument("--rule", action="append", default=None, metavar="STATE:THRESHOLD",
                   help="a command rule to run, e.g. reset:0.3, repeat for several (default: "
                        + ", ".join(f"{st}:{th:g}" for st, th in SETTINGS) + ")")
    p.add_argument("--data", default=None, help="data root (default: $ROTKWS_DATA or ../shared/data)")
    p.add_argument("--json", default=None, help="also write every figure here")
    p.add_argument("--no-write", action="store_true", help="print the table; leave BENCHMARKS.md alone")
    args = p.parse_args(argv)
    try:
        args.rules = [(st, float(th)) for st, th in (r.split(":") for r in args.rule)] if args.rule else SETTINGS
    except ValueError:
        p.error(f"--rule: expected STATE:THRESHOLD such as reset:0.3, got {args.rule}")
    if bad := [st for st, _ in args.rules if st not in COMMAND_STATES]:
        p.error(f"--rule: the state must be one of {', '.join(COMMAND_STATES)}, got {bad[0]!r}")
    if bad := [th for _, th in args.rules if not 0.0 <= th <= 1.0]:
        p.error(f"--rule: the threshold is a probability from 0 to 1, got {bad[0]:g}")
    if args.split != SPLIT and not args.no_write:
        p.error("--split validation chooses a model: give --no-write (BENCHMARKS.md reports the testing split)")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    data = Path(args.data).resolve() if args.data else default_data_root()
    started = time.perf_counter()
    wake, commands = KeywordModel(args.wake), KeywordModel(args.commands)
    results = []
    for snr in args.snr or SNRS_DB:
        audio, events, pieces = build(data, args.seed, snr, args.split)
        hours = len(audio) / streams.SAMPLE_RATE / 3600
        alone = sum(e.kind == streams.PHRASE and pieces[int(e.label)]["word"] is None for e in events)
        counts = {"pieces": sum(e.kind == streams.PHRASE for e in events) - alone, "alone": alone,
                  "utterances": sum(e.kind == streams.SPEECH for e in events)}
        print(f"stream at {snr:g} dB: {hours:.2f} h, {counts['pieces']} commands after the wake word", file=sys.stderr)
        for state, threshold in args.rules:
            spotter = WakeCommandSpotter(wake, commands, command_state=state, command_threshold=threshold)
            cpu = time.process_time()
            found = run(spotter, audio)
            r = score(found, events, pieces, hours) | {
                "snr_db": snr, "state": state, "threshold": threshold,
                "cpu_ms_per_s": 1000 * (time.process_time() - cpu) / (hours * 3600)}
            results.append(r)
            print(f"{snr:g} dB {state} {threshold:g}: {r['wake_hits']} hits, correct {100 * rate(r, 'correct'):.1f} %, "
                  f"another {100 * rate(r, 'another'):.1f} %, none {100 * rate(r, 'none'):.1f} %, "
                  f"a command after nothing {phantom_rate(r)}", file=sys.stderr)
    text = table(results)
    shipped = [r for r in results if r["state"] == COMMAND_STATE and r["threshold"] == COMMAND_THRESHOLD] or results
    words = per_word_table(shipped[0])
    note = textwrap.fill(describe(Path(args.wake), Path(args.commands), counts, hours, args.seed, args.split), 100)
    print(text + "\n\n" + words)
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": counts, "hours": hours, "results": results}, indent=1))
    if not args.no_write:
        minutes = (time.perf_counter() - started) / 60
        write_section(SECTION, "Wake word, then a command",
                      f"{text}\n\nPer command at {'the shipped rule' if shipped is not results else 'the rule'} "
                      f"({shipped[0]['state']}, {shipped[0]['threshold']:g}), "
                      f"{shipped[0]['snr_db']:g} dB:\n\n"
                      f"{words}\n\n{note} This run: {minutes:.0f} min.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
