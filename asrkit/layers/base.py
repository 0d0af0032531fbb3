"""The Layer protocol: a callable that builds graph nodes and owns its parameters.

Parameters are created on the first call, when the input's feature size is known (as CNTK's
layers infer their input dimension), and reused on later calls: applying one layer to two inputs
shares its weights.
"""

from __future__ import annotations

from asrkit.graph import Parameter, Variable, parameter


class Layer:
    """Base class: subclasses implement ``build(x)`` (create parameters) and ``forward(x)``."""

    def __init__(self, name: str = ""):
        self.name = name or type(self).__name__.lower()
        self.built = False
        self._params: dict[str, Parameter] = {}

    def add_parameter(self, key: str, shape, init, trainable: bool = True) -> Parameter:
        """Create parameter ``{name}.{key}`` of ``shape`` with initialiser ``init``."""
        p = parameter(shape, init=init, name=f"{self.name}.{key}", trainable=trainable)
        self._params[key] = p
        return p

    def build(self, x: Variable) -> None:
        """Create the parameters for input ``x`` (default: none)."""

    def forward(self, x: Variable) -> Variable:
        """Return the output node for input node ``x``."""
        raise NotImplementedError

    def __call__(self, x: Variable) -> Variable:
        if not self.built:
            self.build(x)
            self.built = True
        return self.forward(x)

    @property
    def parameters(self) -> list[Parameter]:
        """This layer's parameters (sub-layers included), in creation order."""
        out = list(self._params.values())
        for sub in self.sublayers():
            out += [p for p in sub.parameters if p not in out]
        return out

    def sublayers(self) -> list[Layer]:
        """Layers held by this one."""
        return []

    def __getattr__(self, key):
        params = self.__dict__.get("_params", {})
        if key in params:
            return params[key]
        raise AttributeError(f"{type(self).__name__} has no attribute {key!r}")

    def __repr__(self):
        return f"{type(self).__name__}({self.name!r})"


def feature_size(layer: Layer, x: Variable) -> int:
    """The static size of ``x``'s last axis, or a clear error naming the layer."""
    static = x.shape[len(x.dynamic_axes):]
    if not static or static[-1] is None:
        raise ValueError(f"layer '{layer.name}': input {x!r} has no static feature axis")
    return int(static[-1])
