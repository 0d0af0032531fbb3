"""Moving weights between asrkit models and PyTorch state dicts.

The torch side is the module a PyTorch user would write for the same network::

    class Net(torch.nn.Module):
        layers = torch.nn.ModuleList([...])    # one entry per [[network.layers]] table:
                                               # LSTM(bidirectional=...), Linear, Conv1d, Dropout
        output = torch.nn.Linear(dim, num_classes)

Each layer says how its parameters map onto its torch module (``Layer.torch_names``): LSTM
weights keep torch's names and shapes; a Linear's ``weight`` is asrkit's ``W.T``; a Conv1d's
``weight [out, in, K]`` is asrkit's ``W [K, in, out]`` transposed. Values are numpy arrays
(torch tensors are accepted on import), so torch is never imported here.
"""

from __future__ import annotations

import numpy as np

from asrkit.layers import torch_layout

# torch buffers that carry no parameter (BatchNorm's step counter)
_IGNORED_SUFFIXES = (".num_batches_tracked",)


def _to_numpy(v) -> np.ndarray:
    if hasattr(v, "detach"):
        v = v.detach().cpu().numpy()
    return np.asarray(v, np.float32)


def _mapping(model) -> list[tuple[str, str, object]]:
    """``(asrkit name, torch name, layout)`` for every parameter, layer by layer."""
    return [(f"{layer.name}.{key}", f"{layer.name}.{tkey}", layout)
            for layer in model.net.layers for key, tkey, layout in layer.torch_names()]


def to_torch_state_dict(model) -> dict[str, np.ndarray]:
    """The model's parameters under the torch module's names and layouts (numpy float32).

    ``torch_module.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()},
    strict=False)`` (strict too, unless the module has BatchNorm step counters).
    """
    return {t: torch_layout(model.params[a].value, layout, True)
            for a, t, layout in _mapping(model)}


def from_torch_state_dict(model, state_dict: dict, strict: bool = True) -> None:
    """Set the model's parameters from a torch state dict (tensors or arrays), in place.

    ``strict``: every parameter must be present and no unknown weight may be given
    (buffers such as BatchNorm's ``num_batches_tracked`` are never expected).
    """
    mapping = _mapping(model)
    known = {t for _, t, _ in mapping}
    if strict:
        missing = [t for t in known if t not in state_dict]
        unknown = [k for k in state_dict if k not in known and not k.endswith(_IGNORED_SUFFIXES)]
        if missing or unknown:
            raise KeyError(f"torch state dict mismatch: missing {sorted(missing)}, unknown "
                           f"{sorted(unknown)}")
    for a, t, layout in mapping:
        if t in state_dict:
            value = torch_layout(_to_numpy(state_dict[t]), layout, False)
            if value.shape != model.params[a].shape:
                raise ValueError(f"torch weight '{t}' has shape {list(value.shape)} (as asrkit "
                                 f"'{a}'); the model needs {list(model.params[a].shape)}")
            model.params[a].set_value(value)
