"""The training criterion on top of a Model's logits: one function per ``[criterion] type``.

``build_criterion`` returns the labels input the reader's targets feed, the per-sample cost node
(summed into the loss) and the per-sample error-count node CV reports. A new criterion type (the
transducer) is one more branch here and one more name in ``CRITERION_TYPES``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from asrkit import ops
from asrkit.graph import input_variable

CRITERION_TYPES = ("ctc", "cross_entropy", "transducer")


@dataclasses.dataclass
class Criterion:
    """labels: the int32 input node fed with the reader's targets ``[U, B]`` (CTC) or ``[T, B]``
    (frame targets); costs: per-sample cost node; errors: per-sample error-count node."""

    labels: object
    costs: object
    errors: object


class CriterionError(ValueError):
    """A criterion the model or the reader cannot support."""


def transducer_spec(crit, where: str = "[criterion]") -> dict:
    """The transducer description (``asrkit.layers.transducer``) of a CriterionConfig's
    prediction network and joiner keys; ConfigError naming ``where`` and the key."""
    from asrkit.layers.transducer import TRANSDUCER_KEYS, parse_transducer

    return parse_transducer({k: getattr(crit, k) for k in TRANSDUCER_KEYS}, where)


def build_model(crit, network: dict, input_dim: int, tokens: list[str], blank: int,
                reader: dict | None = None, params: dict | None = None):
    """The Model a criterion trains: a ``TransducerModel`` (encoder, prediction network,
    joiner) for ``type = "transducer"``, else a ``Model`` whose output layer gives the logits."""
    from asrkit.models import Model, TransducerModel

    if crit.type == "transducer":
        return TransducerModel(network, input_dim, tokens, blank, params=params, reader=reader,
                               transducer=transducer_spec(crit))
    return Model(network, input_dim, tokens, blank, params=params, reader=reader)


def build_criterion(crit, model, reader, path: str = "config") -> Criterion:
    """The Criterion of ``crit`` (a CriterionConfig) on ``model.logits``.

    reader: the training Reader (``frame_level`` says whether it yields per-frame class ids);
    path: the config file, named in errors.
    """
    if crit.type == "ctc":
        labels = input_variable((), dtype=np.int32, dynamic_axes=("labels", "batch"),
                                name="labels")
        costs = ops.ctc_loss(model.logits, labels, blank=model.blank,
                             zero_infinity=crit.zero_infinity)
        errors = ops.ctc_greedy_errors(model.logits, labels, blank=model.blank)
        return Criterion(labels, costs, errors)
    if crit.type == "cross_entropy":
        if not getattr(reader, "frame_level", False):
            raise CriterionError(f"{path}: [criterion] type = \"cross_entropy\" needs "
                                 "[reader] frame_targets (per-frame class ids)")
        labels = input_variable((), dtype=np.int32, dynamic_axes=model.logits.dynamic_axes,
                                name="labels")
        costs = ops.cross_entropy_with_softmax(model.logits, labels, crit.label_smoothing)
        errors = ops.classification_error(model.logits, labels)
        return Criterion(labels, costs, errors)
    if crit.type == "transducer":
        if not hasattr(model, "pred"):
            raise CriterionError(f"{path}: [criterion] type = \"transducer\" needs a transducer "
                                 "model (build it with build_model)")
        from asrkit.kernels.rnnt import PRUNE

        w, b = model.joiner.weight, model.joiner.bias
        costs = ops.transducer_loss(model.enc, model.pred, model.labels, w, b, blank=model.blank,
                                    prune=PRUNE)
        errors = ops.transducer_greedy_errors(model.enc, model.labels, w, b,
                                              model.predictor.step_params(),
                                              kind=model.transducer["predictor"],
                                              blank=model.blank)
        return Criterion(model.labels, costs, errors)
    raise CriterionError(f"{path}: [criterion] type = {crit.type!r}: one of {CRITERION_TYPES}")
