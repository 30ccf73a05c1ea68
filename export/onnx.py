"""A classifier (RotRNNClassifier or DSCNN: model/classifiers.py) → one self-describing ONNX file.

The graph (causal networks):

    audio     float32 [batch, samples] @ 16 kHz in [−1, 1]; samples a multiple of
              `input_multiple` (the front-end stride) between it and `max_samples`
    state     float32 [batch, state_size], zeros to start
    → scores    float32 [batch, classes]: softmax probabilities for the audio heard so far
    → state_out float32 [batch, state_size]: feed it back with the next piece

A bidirectional network, and the DS-CNN, export as a clip classifier, `audio → scores`, with no
state (the runtime runs it on a sliding window of max_samples).
The recurrence is the chunked parallel op of model/scan.py with every decay/rotation power
computed once in float64 and stored as a constant, so the graph holds no Loop, Scan or If.
Everything a runtime needs travels in the file's metadata (see `metadata`).
"""
import copy
import importlib.metadata
import json
import time
import warnings
from pathlib import Path

import onnx
import torch
from torch import Tensor, nn

from model.classifiers import Recurrent, classifier_arch, streams
from model.network import count_parameters

from . import stream_graph
from .verify import TOLERANCE, VerificationError, verify_export

MAX_SAMPLES = 16_000                       # longest single call: 1 s at 16 kHz
STREAM_GRAPH_MAX_SAMPLES = 1_600           # … of a node-by-node stream graph (export/stream_graph.py):
                                           # 0.1 s, the runtime's hop; its recurrence kernels grow as
                                           # its square (measured: 3,200 cost 17 % more per hop)
STREAM_INPUTS, STREAM_OUTPUTS = ("audio", "state"), ("scores", "state_out")
CLIP_INPUTS, CLIP_OUTPUTS = ("audio",), ("scores",)
LOOP_OPS = frozenset({"Loop", "Scan", "If"})   # what the chunked op exists to avoid
MAX_BATCH = 4096                           # upper bound of the dynamic batch axis


class ExportError(RuntimeError):
    """The graph could not be built, or is not the graph this project promises."""


class StreamingScorer(nn.Module):
    """(audio (B, S), state (B, state_size)) → (softmax scores (B, classes), state_out)."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, audio: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        logits, state_out = self.net(audio, state)
        return torch.softmax(logits, -1), state_out


class ClipScorer(nn.Module):
    """audio (B, S) → softmax scores (B, classes): a bidirectional network, no state."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, audio: Tensor) -> Tensor:
        return torch.softmax(self.net(audio)[0], -1)


def rotkws_version() -> str:
    try:
        return importlib.metadata.version("rotkws")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def metadata(net: nn.Module, max_samples: int, meta: dict | None = None) -> dict[str, str]:
    """The file's metadata_props: strings, JSON where structured.

    `meta` adds provenance: `training_data`, `accuracy`, `detection` (runtime defaults such as
    a threshold measured on this model) and any other key; non-string values become JSON.
    """
    cfg, streaming = net.cfg, streams(net)
    layout = [{"name": name, "size": size} for name, size in net.state_layout()] if streaming else []
    state_size = net.state_size if streaming else 0
    props = {
        "rotkws_version": rotkws_version(),
        "arch": classifier_arch(net),
        "labels": json.dumps(list(cfg.labels)),
        "sample_rate": str(cfg.sample_rate),
        "input_multiple": str(cfg.frontend_stride),
        "min_samples": str(cfg.frontend_stride),
        "max_samples": str(max_samples),
        "streaming": json.dumps(streaming),
        "state_size": str(state_size),
        "state_shape": json.dumps(["batch", state_size] if streaming else []),
        "state_dtype": "float32",
        "state_layout": json.dumps(layout),
        "inputs": json.dumps(STREAM_INPUTS if streaming else CLIP_INPUTS),
        "outputs": json.dumps(STREAM_OUTPUTS if streaming else CLIP_OUTPUTS),
        "scores": "softmax",
        "config": json.dumps(cfg.to_dict()),
        "parameters": str(count_parameters(net)),   # trained weights (not the kernels)
        "training_data": "unknown",
        "detection": "{}",
    }
    for key, value in (meta or {}).items():
        props[key] = value if isinstance(value, str) else json.dumps(value)
    return props


def check_no_loops(proto: onnx.ModelProto) -> None:
    """Raise ExportError if any node (in the graph or a local function) is Loop, Scan or If."""
    nodes = list(proto.graph.node) + [n for f in proto.functions for n in f.node]
    found = sorted({n.op_type for n in nodes} & LOOP_OPS)
    if found:
        raise ExportError(f"the exported graph holds {', '.join(found)} nodes; expected none "
                          f"(the chunked scan must trace to matmuls, not to a loop)")


def check_dynamic_axes(proto: onnx.ModelProto) -> None:
    """Raise ExportError if the exporter fixed an axis that must stay free (batch, samples)."""
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim
        fixed = [d.dim_value for d in dims[: 2 if value.name == "audio" else 1] if not d.dim_param]
        if fixed:
            raise ExportError(f"the exporter fixed {value.name}'s dynamic axes to {fixed}; expected "
                              f"a free batch axis (and a free samples axis for audio)")


def trace(net: nn.Module, max_samples: int) -> onnx.ModelProto:
    """torch.onnx.export (dynamo) of a frozen network, dynamic batch and samples."""
    stride = net.cfg.frontend_stride
    max_frames = max_samples // stride
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    frames = torch.export.Dim("frames", min=1, max=max_frames)
    samples = frames if stride == 1 else stride * frames
    audio = torch.zeros(2, (max_frames // 2 + 1) * stride)   # the example: batch 2, no special length
    if net.cfg.bidirectional:
        module, args = ClipScorer(net), (audio,)
        names, shapes = (CLIP_INPUTS, CLIP_OUTPUTS), {"audio": {0: batch, 1: samples}}
    else:
        module, args = StreamingScorer(net), (audio, net.initial_state(2))
        names = (STREAM_INPUTS, STREAM_OUTPUTS)
        shapes = {"audio": {0: batch, 1: samples}, "state": {0: batch}}
    with warnings.catch_warnings():   # audio's and state's batch axes are one axis: torch says so
        warnings.filterwarnings("ignore", message="# The axis name: batch will not be used")
        program = torch.onnx.export(module.eval(), args, dynamo=True, input_names=list(names[0]),
                                    output_names=list(names[1]), dynamic_shapes=shapes,
                                    optimize=True, verbose=False, external_data=False)
    return program.model_proto


def frozen_copy(net: nn.Module, max_samples: int) -> nn.Module:
    """An eval-mode copy whose kernels are float64-computed constants for calls ≤ max_samples."""
    frozen = copy.deepcopy(net).eval()
    if isinstance(frozen, Recurrent):                  # a CNN has nothing to precompute
        frozen.freeze_kernels(max_samples)
    return frozen


def check_max_samples(net: nn.Module, max_samples: int) -> None:
    stride = net.cfg.frontend_stride
    if max_samples % stride or max_samples < 2 * stride:
        raise ExportError(f"max_samples must be a multiple of the front-end stride ({stride}) "
                          f"and at least {2 * stride}, got {max_samples}")


def default_max_samples(net: nn.Module) -> int:
    return STREAM_GRAPH_MAX_SAMPLES if stream_graph.supports(net) else MAX_SAMPLES


def build_onnx(net: nn.Module, *, max_samples: int | None = None, meta: dict | None = None) -> onnx.ModelProto:
    """The graph with its metadata, in memory and unverified: node by node where
    export/stream_graph.py supports `net`, else traced from a frozen copy (`net` is left
    untouched). max_samples: the longest single call (None: default_max_samples)."""
    max_samples = max_samples or default_max_samples(net)
    check_max_samples(net, max_samples)
    with torch.no_grad():
        if stream_graph.supports(net):
            proto = stream_graph.build(copy.deepcopy(net).eval(), max_samples)
        else:
            proto = trace(frozen_copy(net, max_samples), max_samples)
    check_no_loops(proto)
    check_dynamic_axes(proto)
    proto.producer_name, proto.doc_string = "rotkws", __doc__
    set_metadata(proto, metadata(net, max_samples, meta))
    return proto


def read_metadata(model) -> dict[str, str]:
    """A model's metadata_props as {key: string value} (JSON where structured); `model` is an
    onnx.ModelProto or the path of a file."""
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    return {p.key: p.value for p in proto.metadata_props}


def set_metadata(proto: onnx.ModelProto, props: dict[str, str]) -> None:
    """Add or replace metadata_props entries, keeping the others."""
    onnx.helper.set_model_props(proto, read_metadata(proto) | props)


def write_metadata(model_path, out, values: dict) -> None:
    """The file at `model_path` written to `out` (the same path: rewritten) with `values` as JSON
    metadata entries, added or replaced, the others kept."""
    proto = onnx.load(str(model_path))
    set_metadata(proto, {k: json.dumps(v) for k, v in values.items()})
    onnx.save(proto, str(out))


def export_onnx(net: nn.Module, path, *, max_samples: int | None = None,
                meta: dict | None = None, clips=(), measure=None) -> Path:
    """Write `net` to `path` as one ONNX file, verified against PyTorch; returns the path.

    net:   a RotRNNClassifier or DSCNN (left untouched: a frozen copy is exported)
    meta:  provenance for the metadata (`training_data`, `accuracy`, `detection`, …)
    clips: real 16 kHz mono float32 arrays the verification also runs on
    measure: optional `f(serialised graph: bytes) -> {key: value}`, metadata measured on the
           verified graph before it is written (rotkws export: its accuracy on --data)

    The graph is built and verified in memory and the file written once, its `export` metadata
    recording the export time and the verification's max |Δ score| per check. Raises ExportError
    if the graph holds a loop, verify.VerificationError if onnxruntime and PyTorch disagree by more
    than verify.TOLERANCE: the graph is then written to `*.unverified.onnx` beside `path`, for
    inspection, and `path` is not written.
    """
    path = Path(path)
    started = time.perf_counter()
    proto = build_onnx(net, max_samples=max_samples, meta=meta)
    seconds = time.perf_counter() - started
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        report = verify_export(net, proto.SerializeToString(), clips, name=path.name)
    except VerificationError:
        onnx.save(proto, path.with_suffix(".unverified.onnx"))
        raise
    set_metadata(proto, {"export": json.dumps({"seconds": round(seconds, 2), "nodes": len(proto.graph.node),
                                               "verified_max_abs_diff": report, "tolerance": TOLERANCE})})
    if measure is not None:
        set_metadata(proto, {k: v if isinstance(v, str) else json.dumps(v)
                             for k, v in measure(proto.SerializeToString()).items()})
    onnx.save(proto, path)
    return path
