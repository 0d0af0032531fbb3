"""Moving weights between asrkit models and PyTorch state dicts.

The torch side is the module a PyTorch user would write for the same network::

    class Net(torch.nn.Module):
        layers = torch.nn.ModuleList([...])    # one entry per [[network.layers]] table:
                                               # LSTM(bidirectional=...), Linear, Conv1d, Dropout
        output = torch.nn.Linear(dim, num_classes)

LSTM weights keep torch's names and shapes; a Linear's ``weight`` is asrkit's ``W.T``; a
Conv1d's ``weight [out, in, K]`` is asrkit's ``W [K, in, out]`` transposed. Values are numpy
arrays (torch tensors are accepted on import), so torch is never imported here.
"""

from __future__ import annotations

import numpy as np


def _to_numpy(v) -> np.ndarray:
    if hasattr(v, "detach"):
        v = v.detach().cpu().numpy()
    return np.asarray(v, np.float32)


def _mapping(model) -> list[tuple[str, str, str]]:
    """``(asrkit name, torch name, layout)`` for every parameter; layout in same|T|conv."""
    out = []
    for i, spec in enumerate(model.network["layers"]):
        prefix = f"layers.{i}"
        if spec["type"] in ("dense", "tdnn"):
            out.append((f"{prefix}.W", f"{prefix}.weight",
                        "T" if spec["type"] == "dense" else "conv"))
            out.append((f"{prefix}.b", f"{prefix}.bias", "same"))
    out += [("output.W", "output.weight", "T"), ("output.b", "output.bias", "same")]
    mapped = {a for a, _, _ in out}
    out += [(name, name, "same") for name in model.params if name not in mapped]
    return out


def _convert(value: np.ndarray, layout: str, to_torch: bool) -> np.ndarray:
    if layout == "T":
        return np.ascontiguousarray(value.T)
    if layout == "conv":  # [K, in, out] <-> [out, in, K]: the same permutation both ways
        return np.ascontiguousarray(value.transpose(2, 1, 0))
    return np.array(value)


def to_torch_state_dict(model) -> dict[str, np.ndarray]:
    """The model's parameters under the torch module's names and layouts (numpy float32).

    ``torch_module.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})``.
    """
    return {t: _convert(model.params[a].value, layout, True) for a, t, layout in _mapping(model)}


def from_torch_state_dict(model, state_dict: dict, strict: bool = True) -> None:
    """Set the model's parameters from a torch state dict (tensors or arrays), in place.

    ``strict``: every parameter must be present and no unknown weight may be given
    (buffers such as BatchNorm's ``num_batches_tracked`` are never expected).
    """
    mapping = _mapping(model)
    known = {t for _, t, _ in mapping}
    if strict:
        missing = [t for t in known if t not in state_dict]
        unknown = [k for k in state_dict if k not in known]
        if missing or unknown:
            raise KeyError(f"torch state dict mismatch: missing {sorted(missing)}, unknown "
                           f"{sorted(unknown)}")
    for a, t, layout in mapping:
        if t in state_dict:
            value = _convert(_to_numpy(state_dict[t]), layout, False)
            if value.shape != model.params[a].shape:
                raise ValueError(f"torch weight '{t}' has shape {list(value.shape)} (as asrkit "
                                 f"'{a}'); the model needs {list(model.params[a].shape)}")
            model.params[a].set_value(value)
