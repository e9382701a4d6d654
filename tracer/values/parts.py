"""What drives a gate: its preactivation split into the parts that add up to it.

A gate's preactivation is a sum over what the cell read at the step (`x`, the input;
`h_prev`, `c_prev`, the states it read) and its weights (`W`, `U`, `b`, one gate's slices:
`tracer.values.weights.gate_weights`). The parts, by cell kind (their definitions sit
beside the gate orders in `tracer.cells.kinds`, one module a family):

    every kind   input = x W,  recurrent = h_prev U,  bias = b
    GRUCell, GRUBlockCell, Keras GRU(reset_after=False), candidate c:
                 recurrent = (r * h_prev) U          (r: the reset gate's activation)
    Keras GRU(reset_after=True):
                 u, r:  recurrent_bias = b_r         (the recurrent bias' slice)
                 c:     recurrent = r * (h_prev U),  recurrent_bias = r * b_r
    LSTMCell(use_peepholes=True), fused ops with peepholes:
                 peephole = w_i * c_prev (i), w_f * c_prev (f), w_o * c (o: the new state);
                 NOT in the preactivation as recorded (the split's output): the gate's
                 activation is sigmoid(preactivation + peephole) (+ forget_bias for f)

so that input + recurrent + bias (+ recurrent_bias) == preactivation. `forget_bias` is
never in a part: it is the cell's own constant (the manifest's `forget_bias`). A part a
kind does not have is None (a column of nulls). Parts are computed in float64 from the
float32 tensors the cell read in that batch (fetched, emitted by its loop, or the replay's
own), then rounded to float32.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from recorders.write.columns import PARTS
from tracer.values.plan import Read, ValuePlan
from tracer.values.weights import GateWeights

__all__ = ["Read", "gate_parts", "plan_parts", "PARTS"]


def gate_parts(
    gate: str, w: GateWeights, read: Read, r: np.ndarray | None = None, c: np.ndarray | None = None
) -> dict[str, np.ndarray | None]:
    """The parts of gate `gate`, each [examples, steps, units] float32 or None. `r` is the
    reset gate's activation, given for a GRU's candidate only; `c` the cell state after
    each step (the output gate's peephole)."""
    f64 = np.float64
    out: dict[str, np.ndarray | None] = dict.fromkeys(PARTS)
    out["input"] = x = read.x.astype(f64) @ w.W.astype(f64)
    U = w.U.astype(f64)
    if r is not None and w.recurrent_b is not None:  # Keras GRU, reset_after: r scales the product
        out["recurrent"] = r.astype(f64) * (read.h_prev.astype(f64) @ U)
        out["recurrent_bias"] = r.astype(f64) * w.recurrent_b.astype(f64)
    elif r is not None:  # r scales what the product reads: the graph multiplies in float32
        out["recurrent"] = (np.asarray(r, np.float32) * np.asarray(read.h_prev, np.float32)).astype(
            f64
        ) @ U
    else:
        out["recurrent"] = h = read.h_prev.astype(f64) @ U
        if w.recurrent_b is not None:
            out["recurrent_bias"] = np.broadcast_to(w.recurrent_b, h.shape)
    out["bias"] = np.broadcast_to(w.b, x.shape)
    if w.peephole is not None:
        state = c if gate == "o" else read.c_prev
        if state is None:
            raise ValueError(f"gate {gate}: a peephole's part needs the cell state, not given")
        out["peephole"] = state.astype(f64) * w.peephole.astype(f64)
    return {name: None if a is None else np.asarray(a, dtype=np.float32) for name, a in out.items()}


def plan_parts(
    plan: ValuePlan,
    values: Sequence,
    cell: int,
    gate: int,
    weights: Mapping[str, GateWeights],
    rows: slice,
) -> dict[str, np.ndarray | None]:
    """`gate_parts` of gate number `gate` of cell number `cell`, from a plan's values for one
    batch (a `FetchPlan`'s or a `KerasPlan`'s: their `read`, `gate` and `state`), for the
    examples `rows`; `weights` are the cell's, by gate (`gate_weights`)."""
    c = plan.cells[cell]
    label = c.gates[gate]
    w = weights[label]
    r = (
        plan.gate(values, cell, c.gates.index("r"), "activation", rows)
        if label == "c" and "r" in c.gates
        else None
    )
    new_c = plan.state(values, cell, "c", rows) if label == "o" and w.peephole is not None else None
    return gate_parts(label, w, plan.read(values, cell, rows), r, new_c)
