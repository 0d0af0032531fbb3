"""ONNX export of acoustic models (``asrkit.export``).

``to_onnx(model, "model.onnx")`` writes an ``asrkit.models.Model`` as an ONNX graph
(``feats [T, B, D]``, ``lengths [B]`` -> ``log_probs [T', B, C]``, ``out_lengths [B]``);
``build_onnx`` returns the ``ModelProto`` without writing; ``read_metadata`` decodes the tokens,
blank, frame shift and feature config stored in an export; ``compare_with_model`` checks an
export against asrkit with onnxruntime; ``OnnxModel`` runs one like an asrkit model;
``quantize_int8`` writes its int8 twin (onnxruntime dynamic quantization). See
:mod:`asrkit.export.onnx_export` for the mapping. A transducer exports as sherpa-onnx's three
files (``transducer_to_onnx(model, "onnx_dir")``: encoder, decoder, joiner and tokens.txt;
``OnnxTransducer`` runs them, ``compare_transducer`` checks them; :mod:`asrkit.export.transducer`).
"""

from asrkit.export.onnx_export import (
    DEFAULT_OPSET,
    build_onnx,
    metadata,
    read_metadata,
    subsampling_factor,
    to_onnx,
)
from asrkit.export.quantize import int8_path, quantize_int8
from asrkit.export.transducer import (
    OnnxTransducer,
    build_transducer_onnx,
    compare_transducer,
    transducer_to_onnx,
)
from asrkit.export.verify import OnnxModel, compare_with_model, run_onnx
from asrkit.layers.onnx import ExportError

__all__ = ["DEFAULT_OPSET", "ExportError", "OnnxModel", "OnnxTransducer", "build_onnx",
           "build_transducer_onnx", "compare_transducer", "compare_with_model", "int8_path",
           "metadata", "quantize_int8", "read_metadata", "run_onnx", "subsampling_factor",
           "to_onnx", "transducer_to_onnx"]
