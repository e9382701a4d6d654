"""Keras cells of your own: a `keras.layers.RNN` over a cell class that is not Keras' own.

The cell's `call(inputs, states)` is traced once into a graph (`tf.compat.v1.wrap_function`,
with the cell's own variables); its gates are the nonlinearities it applies there (Sigmoid,
Tanh, Relu, ...), in the order it applies them, named by nonlinearity and order
(`sigmoid_0`, `sigmoid_1`, `tanh_0`) unless the user names them (`gate_names`); its states
are those it returns, `state_0`, `state_1`, ... in its order. `OwnStep` is that step pruned
to give each nonlinearity's input (the preactivation) and output (the activation), the
output and the new states: a batch runs it once per step in TensorFlow
(`tracer.values.keras`), the model's own computation, checked against what the layer returns.
Every gate is [batch, units] of one width; anything else is refused in one line.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from recorders.errors import GraphPatternError
from tracer._tf import tf
from tracer.cells.found import KerasCell
from tracer.cells.kinds.named import named_spec
from tracer.find.named import NONLINEAR, nonlinearity_names
from tracer.load.keras import variable_name

__all__ = ["OwnStep", "own_cell"]


@dataclass(frozen=True, eq=False)
class OwnStep:
    """A cell's step traced from its `call`: `function(x_t, *states)` returns each gate's
    activation, each gate's preactivation, the output and the new states, in that order."""

    function: Any
    gates: int
    sizes: tuple[int, ...]  # each state's width

    def __call__(self, x: np.ndarray, states: Sequence[np.ndarray]) -> list[np.ndarray]:
        got = self.function(tf.constant(x), *(tf.constant(s) for s in states))
        return [np.asarray(a) for a in got]


def own_cell(
    path: str,
    layer: Any,
    cell: Any,
    framework: str,
    shape: tuple | None,
    gate_names: Sequence[str] | None,
) -> KerasCell:
    """The KerasCell of the layer's cell of your own (see the module docstring)."""
    what = f"layer {path} ({type(cell).__name__})"
    if shape is None or len(shape) != 3 or shape[-1] is None:
        raise GraphPatternError(
            f"{what}: its input's shape is {shape}, not [batch, steps, features] with known features; "
            "a cell of your own is traced on one step of that input"
        )
    sizes = cell.state_size if isinstance(cell.state_size, (list, tuple)) else [cell.state_size]
    if not all(isinstance(s, (int, np.integer)) for s in sizes):
        raise GraphPatternError(
            f"{what}: its state_size is {cell.state_size}; a cell of your own is recorded where its states are "
            "vectors (an int, or a list of ints)"
        )
    width = int(shape[-1])
    specs = [tf.TensorSpec([None, width], tf.float32)]
    specs += [tf.TensorSpec([None, int(s)], tf.float32) for s in sizes]
    training = "training" in inspect.signature(cell.call).parameters

    def step(x: Any, *states: Any) -> list[Any]:
        out, new = cell(x, list(states), **({"training": False} if training else {}))
        new = list(new) if isinstance(new, (list, tuple)) else [new]
        return [out, *new]

    wrapped = tf.compat.v1.wrap_function(step, specs)
    applied = [op for op in wrapped.graph.get_operations() if op.type in NONLINEAR]
    # (no nonlinearity: a cell whose states are all it has, as wide as its first)
    units = _units(what, applied) or int(sizes[0])
    names = _names(what, applied, gate_names)
    outputs = list(wrapped.outputs)
    function = wrapped.prune(
        feeds=list(wrapped.inputs[: len(specs)]),
        fetches=[op.outputs[0] for op in applied] + [op.inputs[0] for op in applied] + outputs,
    )
    kinds = sorted({NONLINEAR[op.type] for op in applied})
    return KerasCell(
        name=path,
        spec=named_spec(
            tuple(names),
            tuple(f"{op.type} {op.name}" for op in applied),
            tuple(f"state_{k}" for k in range(len(sizes))),
        ),
        units=units,
        input_size=width,
        activation="/".join(kinds),
        recurrent_activation="",
        arrays={},
        variables={variable_name(v).rpartition("/")[2]: variable_name(v) for v in cell.weights},
        backward=bool(layer.go_backwards),
        reset_after=None,
        layer=layer,
        framework=framework,
        length=None if shape[1] is None else int(shape[1]),
        step=OwnStep(function, len(applied), tuple(int(s) for s in sizes)),
    )


def _units(what: str, applied: Sequence[Any]) -> int:
    """The one width of the gates; refused where they differ or are not [batch, units]."""
    widths: dict[int, str] = {}
    for op in applied:
        shape = op.outputs[0].shape
        if shape.rank != 2 or shape[1] is None:
            raise GraphPatternError(
                f"{what}: its {op.type} {op.name} gives shape {shape}, not [batch, units]; "
                "a cell of your own is recorded where each nonlinearity is one gate of its units"
            )
        widths.setdefault(int(shape[1]), op.name)
    if len(widths) > 1:
        shown = ", ".join(f"{name} {w}" for w, name in widths.items())
        raise GraphPatternError(
            f"{what}: its nonlinearities have different widths ({shown}); one cell's gates share one width"
        )
    return next(iter(widths), 0)


def _names(what: str, applied: Sequence[Any], given: Sequence[str] | None) -> list[str]:
    """The gates' names: `given`, or each nonlinearity and its order (sigmoid_0, ...)."""
    names = nonlinearity_names(applied)
    if given is None:
        return names
    if len(given) != len(names) or len(set(given)) != len(given):
        raise GraphPatternError(
            f"{what}: gate_names gives {len(given)} names ({', '.join(given)}) for its {len(names)} nonlinearities "
            f"({', '.join(names)}); give one different name each, in this order"
        )
    return list(given)
