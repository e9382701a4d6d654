"""What a cell kind is: its spec (gate labels and order, where the nonlinearity sits, weight
layout) and its math (`CellMath`: one step in float64 for the reference, one in float32 for
the replays), so that the graph walker (`tracer.find.graph`), the weight slicer
(`tracer.values.weights`), the replay and the numpy reference read a kind from one place.
Each kind's spec and math are in a module of their own beside this one; `tracer.cells.kinds`
lists them. It holds no TensorFlow objects.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "CellSpec",
    "HasSpec",
    "GateWeights",
    "CellMath",
    "Options",
    "Replaying",
    "GateHold",
    "hold_gates",
    "OP_ACTIVATIONS",
]

Array = np.ndarray
Activation = Callable[[np.ndarray], np.ndarray]
# A gate held inside a replayed step (`--hold` on a Keras layer): (its label, True for its
# preactivation, False for its activation, its columns [rows, units]), changed in place
# before the step reads them further
GateHold = Callable[[str, bool, np.ndarray], None]


@dataclass(frozen=True)
class Options:
    """A cell's options as its step reads them: its activation, its gates' (recurrent)
    activation, and (LSTM cells) the forget bias and the cell and projection clipping."""

    activation: Activation
    gate_activation: Activation
    forget_bias: float = 0.0
    cell_clip: float | None = None
    proj_clip: float | None = None


@dataclass(frozen=True)
class Replaying:
    """What a float32 replay's step reads besides the step's rows: the weights (`kernel`
    stacked as [input rows; recurrent rows]), the input size `d`, the units, the options,
    each gate's column slice of the preactivations, and whether the activations are the
    defaults (tanh, sigmoid), which an LSTM computes in place."""

    weights: Mapping[str, Array]
    d: int
    units: int
    options: Options
    columns: Mapping[str, slice]
    plain: bool


class CellMath(ABC):
    """How a cell kind computes one step, in numpy.

    `reference_step` is the float64 yardstick (`tracer.cells.reference.run_cell`), written
    as the TensorFlow class's formulas read. The replay (`tracer.values.replay.replay`) runs
    the same math in float32 over a batch, the input part of every step first
    (`project`), then each step from its recurrent part (`h_prev @ kernel[d:, :columns]`)
    added to `z` (`replay_step`): a second implementation, fast, checked against the first
    by the tests and against the model's own outputs on every batch.
    """

    reference: bool = True  # whether `reference_step` is the kind's (Keras layers: not)

    replays: bool = True  # whether `replay_step` is the kind's (a cell found by name: not)

    def reference_step(
        self, spec: CellSpec, x: Array, h: Array, c: Array, w: Mapping[str, Array], o: Options
    ) -> tuple[Array, Array, Array, Array]:
        """One step in float64 from input `x` and states `h`, `c`: (preactivations and
        activations, each [examples, gates, units] in the spec's gate order, new h, new c)."""
        raise ValueError(
            f"{spec.kind}: no float64 reference (it covers the tf.compat.v1.nn.rnn_cell kinds)"
        )

    def replay_columns(self, units: int, blocks: int) -> int:
        """The columns of the recurrent kernel a step multiplies h_prev by."""
        return blocks * units

    def project(self, x: Array, r: Replaying, out: Array) -> None:
        """The input part of every step, [steps, rows, d] @ the kernel's input rows, plus
        the bias, written into `out` ([steps, rows, gates * units])."""
        w = r.weights
        np.matmul(x, w["kernel"][: r.d], out=out)
        out += w["bias"]

    @abstractmethod
    def replay_step(
        self,
        r: Replaying,
        pre: Array,
        z: Array,
        a: Array,
        h: Array,
        c: Array,
        held: GateHold | None = None,
    ) -> tuple[Array, Array | None]:
        """One float32 step: `z` (the first `replay_columns` of the step's preactivations
        `pre`, its recurrent part added) and the rest of `pre` completed in place, the
        activations written into `a`; returns (new h, new c or None). `held` changes each
        gate's preactivation once it is complete and its activation once it is computed,
        before anything reads them (`hold_gates`)."""


def hold_gates(
    held: GateHold | None, r: Replaying, gates: Iterable[str], preactivation: bool, of: Array
) -> None:
    """`held` applied to each of `gates` (labels) in `of` (a step's preactivations or
    activations, [rows, gates * units], as `r.columns` places them); nothing without it."""
    if held is not None:
        for g in gates:
            held(g, preactivation, of[:, r.columns[g]])


@dataclass(frozen=True)
class GateWeights:
    """Where one gate's weights sit: column block `block` of `blocks` in kernel `kernel`.

    The kernel's first `input_size` rows act on the input, the remaining rows on the
    recurrent state (or, for the GRU candidate, on `r * h_prev`). A cell of your own
    (`tracer.find.named`) may have a `recurrent` matrix of its own (then `kernel` acts on
    the input only), no `bias` (""), or no weights known at all (`kernel` "").
    """

    kernel: str
    bias: str
    block: int
    blocks: int
    recurrent: str | None = None


@dataclass(frozen=True)
class CellSpec:
    """What one RNN cell class computes, as far as gatetrace needs to know.

    kind:                 the TensorFlow class name.
    gates:                gate labels, in the order of the kernel's column blocks.
    gate_names:           what each label means.
    sigmoid_before_split: True when the graph applies the gate sigmoid to the whole
                          `[batch, blocks * units]` matrix before splitting it (GRUCell);
                          False when it splits the preactivations first (LSTM cells).
    states:               the state tensors recorded per step (`c` cell state, `h` output).
    weights:              per gate, the kernel and bias it reads and its column block.
    kernel_suffix:        what follows the cell's name in its main kernel's variable name.
    math:                 how it computes a step (`CellMath`).
    """

    kind: str
    gates: tuple[str, ...]
    gate_names: tuple[str, ...]
    sigmoid_before_split: bool
    states: tuple[str, ...]
    weights: tuple[GateWeights, ...]
    kernel_suffix: str
    math: CellMath

    @property
    def is_lstm(self) -> bool:
        return self.states == ("c", "h")

    def nonlinearities(self, activation: Any, recurrent_activation: Any) -> dict[str, str]:
        """Each gate's nonlinearity, by name (what its saturation is measured against): the
        candidate (an LSTM's `j`, a GRU's `c`) and a simple RNN's `h` go through `activation`,
        the other gates through `recurrent_activation`; a cell of your own's gates through the
        op each gate's pattern named (`gate_names`: "Sigmoid rnn/while/...")."""
        if self.kind == "named":
            ops = [m.split(" ")[0] for m in self.gate_names]
            return {
                g: OP_ACTIVATIONS.get(op, op.lower()) for g, op in zip(self.gates, ops, strict=True)
            }
        candidate = str(activation or "tanh").lower()  # TensorFlow's own cells: tanh, sigmoid
        gate = str(recurrent_activation or "sigmoid").lower()
        return {g: candidate if g in ("j", "c", "h") else gate for g in self.gates}


# TensorFlow op type of a nonlinearity -> the name gatetrace records (a cell's `activation`,
# the op a gate of your own cell's pattern names)
OP_ACTIVATIONS = {
    "Tanh": "tanh",
    "Sigmoid": "sigmoid",
    "Relu": "relu",
    "Relu6": "relu6",
    "Elu": "elu",
    "Selu": "selu",
    "Softsign": "softsign",
    "Softplus": "softplus",
    "Identity": "linear",
}


class HasSpec:
    """`kind` and `gates` for a found cell, read from its `spec` (graph cells and Keras layers)."""

    name: str
    spec: CellSpec
    units: int
    input_size: int

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def gates(self) -> tuple[str, ...]:
        return self.spec.gates
