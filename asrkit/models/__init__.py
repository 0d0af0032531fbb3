"""Model files (``asrkit.models``): one file with the network description and its parameters.

``save(path, model)`` / ``load(path)``; ``Model(feats, lengths) -> (log_probs, out_lengths)``;
``to_torch_state_dict`` / ``from_torch_state_dict`` move LSTM and Dense weights to and from
PyTorch modules.
"""

from asrkit.models.model import (
    Model,
    check_model_header,
    load,
    model_from_archive,
    non_finite,
    save,
)
from asrkit.models.torch_state import from_torch_state_dict, to_torch_state_dict
from asrkit.models.transducer import TransducerModel
from asrkit.utils.archive import Archive, ArchiveError, load_archive, save_archive

__all__ = ["Archive", "ArchiveError", "Model", "TransducerModel", "check_model_header",
           "from_torch_state_dict",
           "load", "load_archive", "model_from_archive", "non_finite", "save", "save_archive",
           "to_torch_state_dict"]
