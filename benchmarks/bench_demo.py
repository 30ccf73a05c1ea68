"""The demo's latency: callback time per piece in-process, and round trips for 1 and 16 visitors
streaming real clips at once over loopback HTTP. Writes the `bench_demo` section of BENCHMARKS.md.

    python benchmarks/bench_demo.py [--model M] [--visitors 16] [--rounds 3]

Callback time: a piece's arrival in the handler to its scores (model, resampler, detector and
the page's views). Round trip: the client's send of a piece (upload + stream POST) to the
page's answer on the event stream; the visitors' clients run on the same CPU as the server.
"""
import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from app import demo                                          # noqa: E402
from tests.demo_client import DemoServer, StreamVisitor              # noqa: E402
from app.spotter import DEFAULT_MODEL, KeywordModel           # noqa: E402
from corpus.rate import resample                              # noqa: E402
from benchmarks.report import write_section                   # noqa: E402

CLIPS = REPO / "tests" / "data" / "clips"
RATE = 48_000                  # what browsers send
PIECE_SIZES_S = (0.25, 0.5, 1.0)
SILENCE_S = 1.0                # before and after each clip


def browser_audio(path: Path) -> np.ndarray:
    """A clip at 48 kHz int16 with SILENCE_S of silence on each side."""
    x, rate = sf.read(path, dtype="float32")
    pad = np.zeros(int(SILENCE_S * RATE), np.float32)
    x = np.concatenate([pad, resample(x, rate, RATE), pad])
    return np.round(np.clip(x, -1, 1) * 32767).astype(np.int16)


def keyword_clips() -> list[Path]:
    return sorted(p for p in CLIPS.glob("*/*.wav") if not p.parent.name.startswith("_"))


def callback_times(model, audio: np.ndarray, piece_s: float, rounds: int) -> np.ndarray:
    """Seconds per on_chunk call (the Gradio handler, views included) for `piece_s` pieces."""
    step, times = int(piece_s * RATE), []
    for _ in range(rounds):
        session = None
        for i in range(0, len(audio), step):
            start = time.perf_counter()
            *_, session = demo.on_chunk(model, (RATE, audio[i:i + step]), session, None, 0.0)
            times.append(time.perf_counter() - start)
    return np.array(times)


def visit(url: str, audio: np.ndarray, paced: bool, delay_s: float = 0.0):
    time.sleep(delay_s)
    visitor = StreamVisitor(url)
    try:
        return visitor.stream(audio, RATE, demo.STREAM_EVERY_S, paced=paced)
    finally:
        visitor.close()


def crowd(url: str, audios: list[np.ndarray]) -> list:
    """Every visitor at once, their starts spread over one piece, as people do not click in step."""
    delay = demo.STREAM_EVERY_S / len(audios)
    with ThreadPoolExecutor(len(audios)) as pool:
        futures = [pool.submit(visit, url, a, True, i * delay) for i, a in enumerate(audios)]
        return [f.result() for f in futures]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def row(name: str, seconds: np.ndarray, piece_s: float) -> str:
    ms = seconds * 1000
    return (f"| {name} | {piece_s * 1000:.0f} | {len(ms)} | {np.median(ms):.1f} "
            f"| {np.percentile(ms, 95):.1f} | {ms.max():.1f} | {piece_s / np.median(seconds):.0f}× |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    p.add_argument("--visitors", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3, help="passes over the clips for callback times")
    p.add_argument("--no-write", action="store_true", help="print, do not touch BENCHMARKS.md")
    args = p.parse_args(argv)

    model = KeywordModel(args.model)
    clips = keyword_clips()[:args.visitors]
    audios = [browser_audio(c) for c in clips]
    long_audio = np.concatenate(audios)
    rows = [row("handler, in-process", callback_times(model, long_audio, s, args.rounds), s)
            for s in PIECE_SIZES_S]

    server = DemoServer(args.model)
    with server as url:
        visit(url, audios[0], paced=False)                     # warm-up: first-call costs
        alone = [visit(url, a, paced=False) for a in audios]
        one = np.concatenate([a.round_trips_s for a in alone])
        rows.append(row("HTTP, 1 visitor at a time", one, demo.STREAM_EVERY_S))
        wall, cpu, load = time.perf_counter(), cpu_seconds(server.process.pid), os.getloadavg()[0]
        together = crowd(url, audios)
        wall, cpu = time.perf_counter() - wall, cpu_seconds(server.process.pid) - cpu
    many = np.concatenate([a.round_trips_s for a in together])
    rows.append(row(f"HTTP, {len(audios)} visitors at once", many, demo.STREAM_EVERY_S))
    same = sum(a.detections == b.detections for a, b in zip(alone, together))
    right = sum({k for _, k, _ in a.detections} == {c.parent.name} for a, c in zip(together, clips))
    body = report(rows, len(audios), same, right, many, wall, sum(len(a) for a in audios) / RATE)
    body += (f"\n\nModel: {args.model.name} ({model.path.stat().st_size / 1e6:.1f} MB). The server used "
             f"{cpu / len(many) * 1000:.1f} ms of CPU per piece with {len(audios)} visitors; the machine's load "
             f"average was {load:.1f} on {os.cpu_count()} cores when they started (shared with other work).")
    print(body)
    if not args.no_write:
        write_section("bench_demo", "Demo: latency and concurrent visitors", body)
    return 0


def report(rows, n, same, right, many, wall, audio_s) -> str:
    head = ("| path | piece (ms) | pieces | median (ms) | p95 (ms) | max (ms) "
            "| real time (piece / median) |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    return "\n".join([
        f"Pieces of 48 kHz int16, real Speech Commands clips from tests/data/clips with "
        f"{SILENCE_S:.0f} s of silence on each side; the page streams every {demo.STREAM_EVERY_S} s.",
        "", head, *rows, "",
        f"{n} visitors streaming different clips at real-time pace at once (their starts spread over "
        f"one piece): {same}/{n} got exactly "
        f"the detections they got alone, {right}/{n} detected their clip's keyword and nothing else; "
        f"the slowest of {len(many)} pieces was answered in {many.max() * 1000:.0f} ms "
        f"({'faster' if many.max() < demo.STREAM_EVERY_S else 'SLOWER'} than its "
        f"{demo.STREAM_EVERY_S * 1000:.0f} ms of audio); {audio_s:.0f} s of audio in {wall:.1f} s wall.",
    ])


if __name__ == "__main__":
    sys.exit(main())
