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

CRITERION_TYPES = ("ctc", "cross_entropy")


@dataclasses.dataclass
class Criterion:
    """labels: the int32 input node fed with the reader's targets ``[U, B]`` (CTC) or ``[T, B]``
    (frame targets); costs: per-sample cost node; errors: per-sample error-count node."""

    labels: object
    costs: object
    errors: object


class CriterionError(ValueError):
    """A criterion the model or the reader cannot support."""


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
    raise CriterionError(f"{path}: [criterion] type = {crit.type!r}: one of {CRITERION_TYPES}")
