"""CPU cost of the exported model under onnxruntime: ms per second of audio when streaming
(100 ms hops, state carried) and in 1 s clip mode; FLOPs per second of audio counted from the
graph's own tensors, against this CPU's measured matmul peak in the same run; export time and
node count; the session settings compared.

    .venv/bin/python -m benchmarks.bench_runtime [--model M.onnx] [--seconds 10]

Without --model: the bundled default model if it exists, else a network of --config's sizes
(default training/configs/kws12.yaml) with random weights, exported here (and timed). With
--config the random-weight export is measured even when the bundled model exists.
"""
import argparse
import json
import os
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from app.spotter import DEFAULT_MODEL, HOP_SECONDS, KeywordModel, KeywordSpotter, session_options
from benchmarks.report import write_section

CONFIG = Path(__file__).resolve().parents[1] / "training" / "configs" / "kws12.yaml"
PEAK_SIZES = (256, 512, 1024)           # square float32 matmuls timed for the CPU's peak
REPEATS = 7                             # a timing is the median of this many runs …
ROUNDS = 3                              # … and the table the median (and best) of this many rounds
THREADS = (1, 2)                        # onnxruntime threads `onnx_cost` times


# -- the model ------------------------------------------------------------------------------------
def export_random(out: Path, config: Path = CONFIG) -> dict:
    """The config's network with random weights → `out`; wall and CPU seconds."""
    from export.onnx import export_onnx
    from model import RotRNNClassifier, RotRNNConfig, count_parameters
    from training.config import load_config
    from corpus.labels import task_labels
    import torch
    cfg = load_config(config)
    torch.manual_seed(0)
    net = RotRNNClassifier(RotRNNConfig(labels=task_labels(cfg.data.task), **(cfg.model | {"dropout": 0.0})))
    wall, cpu = time.perf_counter(), time.process_time()
    export_onnx(net, out, meta={"training_data": "none: random weights (benchmark)"})
    return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
            "parameters": count_parameters(net), "config": Path(config).name}


# -- time ----------------------------------------------------------------------------------------
def median_s(fn, repeats: int = REPEATS) -> float:
    """Median CPU seconds of this process per call (CPU time: the 2 cores here are shared, and
    wall time would count other processes' turns)."""
    fn()                                                         # warm-up
    times = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


def test_audio(seconds: float, rate: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return (0.1 * rng.standard_normal(int(seconds * rate))).astype(np.float32)


def streaming_ms(model: KeywordModel, audio: np.ndarray) -> float:
    """ms of CPU per second of audio: one call per hop, state carried (the model alone)."""
    hop = model.hop_samples

    def stream():
        state = model.initial_state()
        for start in range(0, len(audio) - hop + 1, hop):
            _, state = model.run(audio[None, start:start + hop], state)
    return 1e3 * median_s(stream) / (len(audio) / model.sample_rate)


def clip_seconds(model: KeywordModel) -> float:
    """A clip model reads at most max_samples; a streaming one reads a 1 s clip in calls of
    max_samples (KeywordModel.clip_scores)."""
    return (1.0 if model.streaming else min(1.0, model.max_samples / model.sample_rate))


def clip_ms(model: KeywordModel) -> float:
    clip = test_audio(clip_seconds(model), model.sample_rate)[None]
    return 1e3 * median_s(lambda: model.clip_scores(clip)) / clip_seconds(model)


def spotter_ms(model: KeywordModel, seconds: float, rate: int) -> float:
    """The whole runtime: int16 stereo at `rate` in 20 ms chunks → resampler → hops → detector."""
    audio = (test_audio(seconds, rate)[:, None] * np.array([[20_000, 12_000]])).astype(np.int16)
    spotter, piece = KeywordSpotter(model), rate // 50

    def run():
        spotter.reset()
        for start in range(0, len(audio), piece):
            spotter.process(audio[start:start + piece], rate)
    return 1e3 * median_s(run, 3) / seconds


def with_session(path: Path, threads: int, level: ort.GraphOptimizationLevel) -> KeywordModel:
    """A KeywordModel on a session with other settings than the runtime's own."""
    model = KeywordModel(path, threads=threads)
    options = session_options(threads)
    options.graph_optimization_level = level
    model.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return model


def settings_table(path: Path, audio: np.ndarray, rounds: int = 3) -> list[str]:
    """Streaming and clip cost per (threads, optimisation level), the variants interleaved over
    `rounds` so that a busy spell on the shared cores does not land on one of them."""
    levels = {"disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    variants = {(t, name): with_session(path, t, level) for t in (1, 2) for name, level in levels.items()}
    times = {key: ([], []) for key in variants}
    for _ in range(rounds):
        for key, model in variants.items():
            times[key][0].append(streaming_ms(model, audio))
            times[key][1].append(clip_ms(model))
    return [f"| {t} | {name} | {min(s):.2f} | {min(c):.2f} |" for (t, name), (s, c) in times.items()]


# -- FLOPs ---------------------------------------------------------------------------------------
def node_shapes(path: Path, feed: dict) -> tuple[onnx.ModelProto, dict]:
    """Every tensor's shape in one real run: all node outputs exposed as graph outputs."""
    proto = onnx.shape_inference.infer_shapes(onnx.load(path))
    typed = {v.name: v for v in list(proto.graph.value_info) + list(proto.graph.output)}
    exposed = onnx.ModelProto()
    exposed.CopyFrom(proto)
    for node in proto.graph.node:
        for name in node.output:
            if name and name in typed and name not in {o.name for o in proto.graph.output}:
                exposed.graph.output.append(typed[name])
    session = ort.InferenceSession(exposed.SerializeToString(), session_options(1),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    shapes = dict(zip(names, (np.shape(v) for v in session.run(None, feed))))
    shapes |= {k: v.shape for k, v in feed.items()}
    shapes |= {i.name: tuple(i.dims) for i in proto.graph.initializer}
    return proto, shapes


def einsum_flops(equation: str, shapes: list[tuple]) -> int:
    inputs = equation.replace(" ", "").split("->")[0].split(",")
    size = {}
    for letters, shape in zip(inputs, shapes):
        size.update(zip(letters, shape))
    return 2 * int(np.prod(list(size.values())))


def node_flops(node, shapes: dict) -> tuple[str, int]:
    """(kind, FLOPs): multiply-adds count 2; elementwise ops one per output element."""
    ins = [shapes.get(i) for i in node.input]
    out = shapes.get(node.output[0])
    if out is None or any(s is None for s in ins[:2]):
        return "other", 0
    if node.op_type in ("MatMul", "MatMulInteger"):
        return "matmul", 2 * int(np.prod(out)) * ins[0][-1]
    if node.op_type == "Gemm":
        return "matmul", 2 * int(np.prod(out)) * ins[1][1 if any(a.name == "transB" and a.i for a in node.attribute) else 0]
    if node.op_type in ("Conv", "ConvInteger"):
        return "matmul", 2 * int(np.prod(out)) * int(np.prod(ins[1][1:]))
    if node.op_type == "Einsum":
        eq = next(a.s.decode() for a in node.attribute if a.name == "equation")
        return "matmul", einsum_flops(eq, ins)
    if node.op_type in ("Add", "Sub", "Mul", "Div", "Sigmoid", "Gelu", "Log", "Exp", "Pow", "Softmax",
                        "LayerNormalization", "Sqrt", "ReduceMean", "ReduceSum"):
        return "elementwise", int(np.prod(out)) * (8 if node.op_type in ("LayerNormalization", "Gelu") else 1)
    return "other", 0


def flops_per_call(path: Path, model: KeywordModel, samples: int) -> dict:
    feed = {"audio": test_audio(samples / model.sample_rate, model.sample_rate)[None, :samples]}
    if model.streaming:
        feed["state"] = model.initial_state()
    proto, shapes = node_shapes(path, feed)
    total = Counter()
    for node in proto.graph.node:
        kind, flops = node_flops(node, shapes)
        total[kind] += flops
    return dict(total)


def matmul_peak_gflops() -> tuple[float, int]:
    """Best single-thread float32 GEMM rate of onnxruntime on this CPU (one MatMul node)."""
    best = (0.0, 0)
    for n in PEAK_SIZES:
        a = onnx.helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [n, n])
        b = onnx.helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [n, n])
        c = onnx.helper.make_tensor_value_info("c", onnx.TensorProto.FLOAT, [n, n])
        graph = onnx.helper.make_graph([onnx.helper.make_node("MatMul", ["a", "b"], ["c"])], "mm", [a, b], [c])
        proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
        session = ort.InferenceSession(proto.SerializeToString(), session_options(1), providers=["CPUExecutionProvider"])
        x = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
        seconds = median_s(lambda: session.run(None, {"a": x, "b": x}))
        best = max(best, (2 * n ** 3 / seconds / 1e9, n))
    return best


# -- report --------------------------------------------------------------------------------------
def timings(model: KeywordModel, audio: np.ndarray, seconds: float) -> dict:
    """{mode: (median, best)} ms CPU per s of audio, the modes interleaved over ROUNDS so that a
    busy spell on the shared cores is spread over them."""
    rounds = {"stream": [], "clip": [], "spotter": []}
    for _ in range(ROUNDS):
        rounds["stream"].append(streaming_ms(model, audio))
        rounds["clip"].append(clip_ms(model))
        rounds["spotter"].append(spotter_ms(model, seconds, 48_000))
    return {k: (statistics.median(v), min(v)) for k, v in rounds.items()}


def flops_per_second(path: Path, model: KeywordModel) -> dict:
    """{mode: {"matmul": …, "elementwise": …}} FLOPs per second of audio."""
    call = min(model.max_samples, model.sample_rate)              # a clip's calls are this long
    per_hop = flops_per_call(path, model, model.hop_samples)
    per_call = flops_per_call(path, model, call)
    return {"stream": {k: v * model.sample_rate / model.hop_samples for k, v in per_hop.items()},
            "clip": {k: v * model.sample_rate / call for k, v in per_call.items()}}


def mode_row(label: str, ms: tuple, flops: dict | None, peak: float) -> str:
    if flops is None:
        return f"| {label} | {ms[0]:.2f} ({ms[1]:.2f}) | | | |"
    floor = 1e3 * sum(flops.values()) / (peak * 1e9)
    return (f"| {label} | {ms[0]:.2f} ({ms[1]:.2f}) | {sum(flops.values()) / 1e6:.1f} M "
            f"({flops.get('matmul', 0) / 1e6:.1f} + {flops.get('elementwise', 0) / 1e6:.1f}) | "
            f"{floor:.3f} ms | {ms[1] / floor:.1f}× |")


def describe_model(path: Path, model: KeywordModel, export: dict | None) -> str:
    from export.onnx import read_metadata
    proto = onnx.load(path)
    ops = Counter(n.op_type for n in proto.graph.node)
    info = json.loads(read_metadata(proto).get("export", "{}"))
    name = f"{export['config']} sizes, random weights" if export else path.name
    made = (f"exported here in {export['wall_s']:.1f} s wall, {export['cpu_s']:.1f} s CPU (trace + "
            f"verification; {export['parameters']:,} weights)" if export else
            f"export time recorded in the file: {info.get('seconds', '?')} s")
    return (f"Model: `{name}` — {len(model.labels)} classes, {'streaming' if model.streaming else 'clip'}, "
            f"input multiple {model.input_multiple}, max {model.max_samples} samples;\n{len(proto.graph.node)} "
            f"nodes ({', '.join(f'{k} {v}' for k, v in ops.most_common(8))}, …), no Loop/Scan/If;\n{made}.")


# -- an exported model's whole cost, for `rotkws bench` and converge ---------------------------------
def graph_flops(path: Path, model: KeywordModel) -> dict:
    """FLOPs per second of audio, counted from the graph's tensors (bench_runtime's rules): a
    streaming model one call per hop, a clip model a 1 s window every hop (as the spotter)."""
    if model.streaming:
        per = flops_per_second(path, model)
        return {mode: sum(v.values()) for mode, v in per.items()}
    clip = min(model.max_samples, model.sample_rate)
    per_call = sum(flops_per_call(path, model, clip).values())
    return {"clip": per_call * model.sample_rate / clip, "stream": per_call / HOP_SECONDS}


def onnx_cost(path: Path, seconds: float, rounds: int, threads=THREADS) -> dict:
    """Size, graph FLOPs and CPU ms per second of audio (median of `rounds` interleaved rounds)."""
    models = {t: KeywordModel(path, threads=t) for t in threads}
    first = models[threads[0]]
    audio = test_audio(seconds, first.sample_rate)
    times = {(t, m): [] for t in threads for m in ("stream", "clip")}
    for _ in range(rounds):
        for t, model in models.items():
            clip = clip_ms(model)
            times[(t, "clip")].append(clip)
            times[(t, "stream")].append(streaming_ms(model, audio) if model.streaming
                                        else clip / HOP_SECONDS)     # a 1 s window per hop
    from export.onnx import read_metadata
    proto = onnx.load(path)
    constants = sum(int(np.prod(i.dims)) for i in proto.graph.initializer)
    weights = read_metadata(proto).get("parameters")   # older files lack it
    return {"bytes": path.stat().st_size, "nodes": len(proto.graph.node), "constants": constants,
            "weights": None if weights is None else int(weights),
            "streaming": first.streaming, "flops": graph_flops(path, first),
            "ms": {str(t): {m: float(np.median(times[(t, m)])) for m in ("stream", "clip")} for t in threads}}


def report(path: Path, export: dict | None, seconds: float) -> str:
    model = KeywordModel(path)
    audio = test_audio(seconds, model.sample_rate)
    load = os.getloadavg()[0]
    ms, flops = timings(model, audio, seconds), flops_per_second(path, model)
    peak, peak_n = matmul_peak_gflops()
    hop_ms = 1000 * model.hop_samples / model.sample_rate
    rows = [mode_row(f"streaming, {hop_ms:.0f} ms hops, state carried", ms["stream"], flops["stream"], peak),
            mode_row(f"clip, 1 s in calls of ≤ {1000 * model.max_samples / model.sample_rate:.0f} ms",
                     ms["clip"], flops["clip"], peak),
            mode_row("the whole spotter: 48 kHz stereo int16 in 20 ms chunks → resampler → hops → detector",
                     ms["spotter"], None, peak)]
    return f"""{describe_model(path, model, export)}

onnxruntime {ort.__version__}, CPUExecutionProvider, 1 intra-op thread, graph optimisation ALL; CPU time
of this process over {seconds:.0f} s of audio, median (best) of {ROUNDS} interleaved rounds of {REPEATS} runs;
load average {load:.1f} on {os.cpu_count()} cores (shared with other work) when it started.

| mode | ms CPU per s of audio | FLOPs per s of audio (matmul + elementwise) | FLOP floor at the measured peak | × floor (best) |
| --- | ---: | ---: | ---: | ---: |
{chr(10).join(rows)}

Matmul peak: {peak:.1f} GFLOP/s (onnxruntime MatMul, float32, 1 thread, the best of
{', '.join(f'{n}²' for n in PEAK_SIZES)}: {peak_n}²). FLOPs are counted from the graph's own tensor
shapes in one run: MatMul/Gemm/Conv/Einsum 2 per multiply-add, elementwise ops one per output
element (LayerNorm and GELU eight).

Session settings (ms CPU per s of audio, best of 3 interleaved rounds; CPU time counts every thread):

| threads | graph optimisation | streaming | clip |
| ---: | --- | ---: | ---: |
{chr(10).join(settings_table(path, audio))}
"""


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="a rotkws ONNX file (default: the bundled model, else a random --config export)")
    p.add_argument("--config", type=Path, help=f"export this config's network with random weights and measure it "
                                               f"(default when there is no bundled model: {CONFIG.name})")
    p.add_argument("--seconds", type=float, default=10.0, help="audio streamed per timing")
    p.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path, export = Path(args.model) if args.model else DEFAULT_MODEL, None
        if args.config or (not args.model and not path.exists()):
            path = Path(tmp) / "random.onnx"
            export = export_random(path, args.config or CONFIG)
        body = report(path, export, args.seconds)
    print(body)
    if not args.no_write:
        write_section("bench_runtime", "Runtime: CPU cost of the exported model", body)


if __name__ == "__main__":
    main()
