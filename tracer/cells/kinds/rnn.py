"""Plain recurrent cells: TensorFlow's `BasicRNNCell` and Keras' `SimpleRNN`.

    h = act([x, h_prev] @ kernel + bias)

Their one "gate" is the new state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from tracer.cells.kinds.spec import (
    Array,
    CellMath,
    CellSpec,
    GateHold,
    GateWeights,
    Options,
    Replaying,
    hold_gates,
)

__all__ = ["BASIC_RNN", "KERAS_SIMPLE_RNN", "LITE_RNN"]


class _Rnn(CellMath):
    def reference_step(
        self, spec: CellSpec, x: Array, h: Array, c: Array, w: Mapping[str, Array], o: Options
    ) -> tuple[Array, Array, Array, Array]:
        z = np.concatenate([x, h], axis=1) @ w["kernel"] + w["bias"]
        h = o.activation(z)
        return z[:, None], h[:, None], h, c

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
        # its one gate's activation is the new h: a hold of h is the state's, after the step
        hold_gates(held, r, "h", True, pre)
        a[:] = r.options.activation(z)
        return a, None


class _SimpleRnn(_Rnn):
    """Keras' SimpleRNN: the same step; the float64 reference is TensorFlow's cells' only."""

    reference_step = CellMath.reference_step


# h = activation(concat([x, h_prev]) @ kernel + bias): the single "gate" is the new state.
# Parts: input = x W, recurrent = h_prev U, bias = b.
BASIC_RNN = CellSpec(
    kind="BasicRNNCell",
    gates=("h",),
    gate_names=("new state",),
    sigmoid_before_split=False,
    states=("h",),
    weights=(GateWeights("kernel", "bias", 0, 1),),
    kernel_suffix="/kernel",
    math=_Rnn(),
)

KERAS_SIMPLE_RNN = replace(BASIC_RNN, kind="SimpleRNN", math=_SimpleRnn())

# TensorFlow Lite's UNIDIRECTIONAL_SEQUENCE_RNN: h = act(x W + h_prev U + b), SimpleRNN's step.
LITE_RNN = replace(KERAS_SIMPLE_RNN, kind="UnidirectionalSequenceRNN")
