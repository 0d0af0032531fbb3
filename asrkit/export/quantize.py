"""int8 ONNX models: onnxruntime's dynamic quantization of an asrkit export.

Weights of ``MatMul`` and ``LSTM`` nodes are stored as int8 with a scale per tensor (or per
output channel); activations are quantized on the fly at run time (``DynamicQuantizeLinear``,
``MatMulInteger``, ``DynamicQuantizeLSTM``), so no calibration data is needed. The file gets
about four times smaller and runs with onnxruntime's CPU provider (the ``com.microsoft``
operator domain); other runtimes may not know ``DynamicQuantizeLSTM``. The asrkit metadata is
kept, with ``quantization`` added.
"""

from __future__ import annotations

import logging
import os

from asrkit.layers.onnx import ExportError

QUANTIZATION = "int8-dynamic"  # the metadata value of a quantized export


def int8_path(path: str) -> str:
    """The int8 file name beside an fp32 export: ``am.onnx`` -> ``am.int8.onnx``."""
    root, ext = os.path.splitext(path)
    return f"{root}.int8{ext or '.onnx'}"


def quantize_int8(src: str, dst: str, per_channel: bool = False) -> dict:
    """Write ``dst``: the export ``src`` with int8 weights (onnxruntime ``quantize_dynamic``,
    signed int8 weights). Returns ``{"fp32_bytes", "int8_bytes", "quantized_ops": {op: n}}``.
    Raises ExportError when onnxruntime is missing or cannot quantize the file."""
    try:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        raise ExportError("--int8 needs onnxruntime: pip install onnxruntime") from None
    tmp = f"{dst}.tmp{os.getpid()}"
    quiet = logging.getLogger()
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # onnxruntime suggests pre-processing on every call
    try:
        quantize_dynamic(src, tmp, weight_type=QuantType.QInt8, per_channel=per_channel)
        proto = onnx.load(tmp)
        props = {p.key: p for p in proto.metadata_props}
        if "quantization" not in props:
            proto.metadata_props.add(key="quantization", value=QUANTIZATION)
        props.pop("onnx.infer", None)
        onnx.save(proto, tmp)
        os.replace(tmp, dst)
    except (OSError, ExportError):
        raise
    except Exception as e:  # onnxruntime's quantizer raises plain exceptions of many types
        raise ExportError(f"{src}: onnxruntime could not quantize the model: {e}") from None
    finally:
        quiet.setLevel(level)
        if os.path.exists(tmp):
            os.unlink(tmp)
    ops: dict[str, int] = {}
    for node in proto.graph.node:
        if node.op_type in ("MatMulInteger", "DynamicQuantizeLSTM", "QLinearMatMul"):
            ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return {"fp32_bytes": os.path.getsize(src), "int8_bytes": os.path.getsize(dst),
            "quantized_ops": ops}
