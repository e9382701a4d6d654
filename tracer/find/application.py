"""One application of a cell (one step) as the step patterns find it, and the `Cell` built from it.

`tracer.find.tf_cells` and `tracer.find.keras_cells` recognise a step by the ops a cell
class builds and return an `Application`: the step's gate tensors (preactivation and
activation, in the spec's gate order), its states, its input, its previous states and its
weights. `cell_of` makes the `tracer.cells.found.Cell` of a chain or loop of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tracer._tf import tf
from tracer.cells.found import Cell, Step
from tracer.cells.kinds import CellSpec
from tracer.cells.kinds.spec import OP_ACTIVATIONS

__all__ = ["ADDS", "ACTIVATIONS", "Application", "cell_of", "step_of"]

ADDS = {"Add", "AddV2"}  # the op types of `a + b`


# TensorFlow op type of a cell's `activation` -> the name gatetrace records.
ACTIVATIONS = OP_ACTIVATIONS


@dataclass
class Application:
    """One step of one cell, as found by a step pattern (see the module docstring)."""

    spec: CellSpec
    kernel: tf.Operation  # the main kernel's variable or Const
    gate_op: tf.Operation
    preactivation: tuple[tf.Tensor, ...]
    activation: tuple[tf.Tensor, ...]
    states: tuple[tf.Tensor, ...]
    input: tf.Tensor
    previous: tuple[tf.Tensor, ...]
    weights: dict[str, tf.Tensor]
    activation_name: str
    forget_bias: float | None = None
    cell_clip: float | None = None
    proj_clip: float | None = None
    claimed: tuple[str, ...] = field(default=())  # the kernel MatMuls this step owns
    recurrent_activation: str | None = None  # a Keras cell's gate nonlinearity


def _sizes(
    spec: CellSpec, kernel: tf.Tensor, projection: tf.Tensor | None, separate: bool = False
) -> tuple[int, int, int]:
    """(units, input size, output size) from the main kernel's and the projection's shapes.
    A kernel `separate` from the recurrent one (Keras) has the input rows only."""
    rows, columns = kernel.shape.as_list()
    units = columns // spec.weights[0].blocks
    output_size = units if projection is None else projection.shape.as_list()[1]
    return units, rows if separate else rows - output_size, output_size


def step_of(app: Application, position: int) -> Step:
    """The tensor names of `app`, a step that read input position `position`."""
    return Step(
        position=position,
        gate_op=app.gate_op.name,
        preactivation=tuple(t.name for t in app.preactivation),
        activation=tuple(t.name for t in app.activation),
        states=tuple(t.name for t in app.states),
        input=app.input.name,
        previous=tuple(t.name for t in app.previous),
    )


def cell_of(
    app: Application, name: str, kernel: tf.Tensor, projection: tf.Tensor | None, **rest
) -> Cell:
    """A Cell of `app`'s class and settings, its sizes read from the kernel and projection;
    `rest` holds weights, variables, steps, and backward or loop."""
    units, input_size, output_size = _sizes(
        app.spec, kernel, projection, separate="recurrent_kernel" in app.weights
    )
    return Cell(
        name=name,
        spec=app.spec,
        units=units,
        input_size=input_size,
        output_size=output_size,
        activation=app.activation_name,
        forget_bias=app.forget_bias,
        cell_clip=app.cell_clip,
        proj_clip=app.proj_clip,
        recurrent_activation=app.recurrent_activation,
        **rest,
    )
