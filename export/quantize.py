"""Dynamic int8 quantisation of an exported file (onnxruntime.quantization).

Only the dense layers' 2-D weights become int8 (MatMul, Gemm). The scan's constant kernels
(3-D: one λ^k matrix per channel) stay float32: their entries span decades (λ^k for slow
decays), which 8 bits per tensor cannot hold. The front-end Conv stays float32 too, and so do
the nodes a stream graph marks (export/stream_graph.py: the mel matrix, whose input powers span
decades).

The int8 graph is built in memory (`quantize_int8`), so that its metadata can be completed
before its file is written, once.
"""
import tempfile
from pathlib import Path

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic

from .stream_graph import FLOAT_ONLY

QUANTIZED_OPS = ("MatMul", "Gemm")


def scan_kernel_nodes(proto: onnx.ModelProto) -> list[str]:
    """MatMul nodes whose constant operand is not a 2-D weight (the scan's kernels), and the
    nodes marked to stay float."""
    shapes = {init.name: len(init.dims) for init in proto.graph.initializer}
    return [n.name for n in proto.graph.node
            if n.op_type == "MatMul" and (not any(shapes.get(i) == 2 for i in n.input)
                                          or n.name.startswith(FLOAT_ONLY))]


def quantize_int8(src: onnx.ModelProto | str | Path) -> onnx.ModelProto:
    """The int8 version of a rotkws graph (in memory, or a file), in memory; the metadata is kept."""
    proto = src if isinstance(src, onnx.ModelProto) else onnx.load(src)
    with tempfile.TemporaryDirectory() as scratch:       # onnxruntime's quantiser only writes files
        out = Path(scratch) / "int8.onnx"
        quantize_dynamic(proto, out, weight_type=QuantType.QInt8, op_types_to_quantize=list(QUANTIZED_OPS),
                         nodes_to_exclude=scan_kernel_nodes(proto))
        return onnx.load(out)
