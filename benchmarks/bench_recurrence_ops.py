"""Two ways to write one layer's recurrence in the streaming graph (export/stream_graph.py), timed
in onnxruntime on one thread: the batched MatMul the graph uses, (K, B, 2(L+1)) × (K, 2(L+1), 2L),
against the same product as Mul + ReduceSum over the (step, re/im) axes; both beside an empty
graph (the cost of one session run). K = 64 rotation planes, L = 10 frames (a 100 ms call).
Writes the `bench_recurrence_ops` section of BENCHMARKS.md.

    python -m benchmarks.bench_recurrence_ops [--no-write]
"""
import argparse
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from app.spotter import session_options
from benchmarks.report import write_section

K, L = 64, 10          # rotation planes of a 128-state layer; frames in a 100 ms call
CALLS, ROUNDS = 2000, 5


def session(nodes, inits, shape) -> ort.InferenceSession:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("V", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ort.InferenceSession(model.SerializeToString(), session_options(1), providers=["CPUExecutionProvider"])


def best_us(s: ort.InferenceSession, feed: dict) -> float:
    for _ in range(200):
        s.run(None, feed)
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(CALLS):
            s.run(None, feed)
        times.append((time.perf_counter() - start) / CALLS * 1e6)
    return min(times)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    W = rng.standard_normal((K, 2 * (L + 1), 2 * L)).astype(np.float32)
    V = rng.standard_normal((K, 1, 2 * (L + 1))).astype(np.float32)
    matmul = session([helper.make_node("MatMul", ["V", "W"], ["z"])], [numpy_helper.from_array(W, "W")], list(V.shape))
    W2 = W.reshape(K, L + 1, 2, L, 2).transpose(1, 3, 0, 2, 4).copy()          # (step, t, k, s, r)
    V2 = V.reshape(K, L + 1, 2).transpose(1, 0, 2)[:, None, :, :, None].copy()   # (step, 1, k, s, 1)
    reduce = session([helper.make_node("Mul", ["V", "W2"], ["m"]),
                      helper.make_node("ReduceSum", ["m", "axes"], ["z"], keepdims=0)],
                     [numpy_helper.from_array(W2, "W2"), numpy_helper.from_array(np.array([0, 3], np.int64), "axes")],
                     list(V2.shape))
    empty = session([helper.make_node("Identity", ["V"], ["z"])], [], list(V.shape))
    a = matmul.run(None, {"V": V})[0].reshape(K, L, 2).transpose(1, 0, 2)
    b = reduce.run(None, {"V": V2})[0]
    assert np.abs(a - b).max() < 1e-4, "the two forms disagree"
    us = {"empty graph": best_us(empty, {"V": V}), "batched MatMul (the graph's)": best_us(matmul, {"V": V}),
          "Mul + ReduceSum": best_us(reduce, {"V": V2})}
    body = ("| one recurrence, K = 64, L = 10 | µs per session run (best of 5 × 2000) | above the empty graph |\n"
            "| --- | ---: | ---: |\n" + "\n".join(f"| {k} | {v:.1f} | {v - us['empty graph']:.1f} |" for k, v in us.items())
            + "\n\nThe batched MatMul stays: the Mul + ReduceSum form is the slower one by the ratio above.")
    print(body)
    if not args.no_write:
        write_section("bench_recurrence_ops", "The recurrence as a batched MatMul or as Mul + ReduceSum", body)


if __name__ == "__main__":
    main()
