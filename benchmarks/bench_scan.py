"""Forward + backward of a causal RotRNN network on (16, 16000) batches: the chunked op
against the sequential loop (`rotrnn_reference`), same weights, same run.

    .venv/bin/python -m benchmarks.bench_scan [--layers 2] [--loop-samples 2000]

The loop is timed on the first --loop-samples steps of the batch, beside the chunked op on the
same length and on the full 16,000. At 16,000 steps the loop's one forward + backward ran for
over 15 minutes here (2026-11-30, the CPU otherwise idle) without finishing: it grows faster
than linearly in length, so the speed-up at 16,000 steps is larger than the one measured here.
"""
import argparse
import statistics
import time

import torch

from benchmarks.report import write_section
from model import RotRNNClassifier, RotRNNConfig, count_parameters
from model.rotrnn import _reference_loop

BATCH, SAMPLES = 16, 16_000   # one batch of 1 s clips at 16 kHz, one RotRNN step per sample


def step_ms(net: RotRNNClassifier, audio: torch.Tensor, reps: int) -> float:
    times = []
    for _ in range(reps):
        net.zero_grad()
        t0 = time.perf_counter()
        logits, _ = net(audio)
        logits.square().sum().backward()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def use_loop(net: RotRNNClassifier) -> None:
    """Swap every layer's chunked scan for the plain loop over time."""
    for block in net.blocks:
        rnn = block.rnn
        rnn._scan = lambda u, state, rnn=rnn: _reference_loop(rnn, u, state)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--chunks", type=int, nargs="+", default=[32, 64, 128])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--loop-reps", type=int, default=1)
    p.add_argument("--loop-samples", type=int, default=2000, help="sequence length for the loop comparison")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    audio = torch.randn(BATCH, SAMPLES) * 0.1
    short = audio[:, :args.loop_samples]
    rows, chunked = [], {}
    for chunk in args.chunks:
        cfg = RotRNNConfig(labels=tuple("abcdefghijkl"), d_model=64, state=64, heads=16,
                           layers=args.layers, dropout=0.0, chunk=chunk)
        torch.manual_seed(0)
        net = RotRNNClassifier(cfg)
        step_ms(net, audio, 1)                                        # warm-up
        chunked[chunk] = (step_ms(net, short, args.reps), step_ms(net, audio, args.reps))
        print(chunk, chunked[chunk], flush=True)
    use_loop(net)
    loop = step_ms(net, short, args.loop_reps)
    print("loop", loop, flush=True)
    for chunk, (ms_short, ms_full) in chunked.items():
        rows.append(f"| chunked, C = {chunk} | {ms_short:,.0f} | {loop / ms_short:,.0f}× | {ms_full:,.0f} |")
    rows.append(f"| sequential loop | {loop:,.0f} | 1× | did not finish in 15 min |")
    body = (f"Causal network, linear front-end (one step per sample), d_model 64, state 64 in 16 heads, "
            f"{args.layers} layers, {count_parameters(net):,} parameters; batch of {BATCH} float32; "
            f"torch {torch.__version__}, {torch.get_num_threads()} threads; median of {args.reps} "
            f"(loop: {args.loop_reps}). The speed-up is measured at {args.loop_samples:,} steps, "
            f"where both ran; at {SAMPLES:,} steps the loop did not finish in 15 min (over 900 s "
            f"against {min(full for _, full in chunked.values()) / 1e3:.1f} s chunked).\n\n| scan | ms per batch, fwd + bwd, ({BATCH}, {args.loop_samples:,}) | speed-up "
            f"| ms per batch, ({BATCH}, {SAMPLES:,}) |\n| --- | ---: | ---: | ---: |\n" + "\n".join(rows))
    write_section("bench_scan", "Chunked scan vs sequential loop (training step, CPU)", body)
    print(body)


if __name__ == "__main__":
    main()
