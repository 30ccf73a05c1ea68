"""Forward + backward of a causal RotRNN network on (16, 16000) batches: the chunked op
against the sequential loop (`rotrnn_reference`), same weights, same run.

    .venv/bin/python -m benchmarks.bench_scan [--layers 2] [--loop-reps 1]
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
    args = p.parse_args(argv)
    torch.manual_seed(0)
    audio = torch.randn(BATCH, SAMPLES) * 0.1
    rows, chunked = [], {}
    for chunk in args.chunks:
        cfg = RotRNNConfig(labels=tuple("abcdefghijkl"), d_model=64, state=64, heads=16,
                           layers=args.layers, dropout=0.0, chunk=chunk)
        torch.manual_seed(0)
        net = RotRNNClassifier(cfg)
        step_ms(net, audio, 1)                                        # warm-up
        chunked[chunk] = step_ms(net, audio, args.reps)
    use_loop(net)
    loop = step_ms(net, audio, args.loop_reps)
    for chunk, ms in chunked.items():
        rows.append(f"| chunked, C = {chunk} | {ms:,.0f} | {loop / ms:,.0f}× |")
    rows.append(f"| sequential loop | {loop:,.0f} | 1× |")
    body = (f"Causal network, linear front-end (one step per sample), d_model 64, state 64 in 16 heads, "
            f"{args.layers} layers, {count_parameters(net):,} parameters; batch ({BATCH}, {SAMPLES}) float32; "
            f"torch {torch.__version__}, {torch.get_num_threads()} threads; median of {args.reps} "
            f"(loop: {args.loop_reps}).\n\n| scan | ms per batch (fwd + bwd) | speed-up |\n| --- | ---: | ---: |\n"
            + "\n".join(rows))
    write_section("bench_scan", "Chunked scan vs sequential loop (training step, CPU)", body)
    print(body)


if __name__ == "__main__":
    main()
