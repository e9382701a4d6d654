"""GRU cells: TensorFlow's `GRUCell` and Keras' `GRU`.

    GRUCell    r, u = split(sigmoid([x, h_prev] @ kernel + bias), 2)
               c = act([x, r * h_prev] @ candidate_kernel + candidate_bias)
    GRU        u, r = gate_act(split([x, h_prev] @ kernel[:, :2u] + bias, 2))   (Keras' z, r)
               c = act(x @ W_c + b_c + r * (h_prev @ U_c + recurrent_bias_c))   reset_after
               c = act(x @ W_c + b_c + (r * h_prev) @ U_c)                     otherwise
    both       h = u * h_prev + (1 - u) * c

Keras' kernel and recurrent kernel are stacked into one `kernel` when read (input rows
first), its recurrent bias (reset_after, the default) kept as `recurrent_bias`.
"""

from __future__ import annotations

from collections.abc import Mapping

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

__all__ = ["GRU", "KERAS_GRU"]


class _GruCell(CellMath):
    def reference_step(
        self, spec: CellSpec, x: Array, h: Array, c: Array, w: Mapping[str, Array], o: Options
    ) -> tuple[Array, Array, Array, Array]:
        units = w["candidate_bias"].shape[-1]
        z = np.concatenate([x, h], axis=1) @ w["kernel"] + w["bias"]
        # r = reset gate, u = update gate (sigmoid applied before the split), c = candidate
        r, u = np.split(o.gate_activation(z), 2, axis=1)
        zc = np.concatenate([x, r * h], axis=1) @ w["candidate_kernel"] + w["candidate_bias"]
        cand = o.activation(zc)
        pre = np.stack([z[:, :units], z[:, units:], zc], axis=1)
        return pre, np.stack([r, u, cand], axis=1), u * h + (1 - u) * cand, c

    def project(self, x: Array, r: Replaying, out: Array) -> None:
        w, d, units = r.weights, r.d, r.units
        np.matmul(x, w["kernel"][:d], out=out[..., : 2 * units])
        out[..., : 2 * units] += w["bias"]
        np.matmul(x, w["candidate_kernel"][:d], out=out[..., 2 * units :])
        out[..., 2 * units :] += w["candidate_bias"]

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
        units, o = r.units, r.options
        # r = reset gate, u = update gate (sigmoid before the split), c = candidate
        hold_gates(held, r, ("r", "u"), True, pre)
        a[:, : 2 * units] = o.gate_activation(z)
        hold_gates(held, r, ("r", "u"), False, a)
        reset, u = a[:, :units], a[:, units : 2 * units]
        zc = pre[:, 2 * units :]
        zc += (reset * h) @ r.weights["candidate_kernel"][r.d :]
        hold_gates(held, r, "c", True, pre)
        a[:, 2 * units :] = o.activation(zc)
        hold_gates(held, r, "c", False, a)
        return u * h + (1 - u) * a[:, 2 * units :], None


class _KerasGru(CellMath):
    def replay_columns(self, units: int, blocks: int) -> int:
        return 2 * units  # the candidate's recurrent part is added after the reset gate

    def project(self, x: Array, r: Replaying, out: Array) -> None:
        super().project(x, r, out)
        recurrent_bias = r.weights.get("recurrent_bias")
        if recurrent_bias is not None:
            # reset_after: a recurrent bias of its own; r multiplies the recurrent part of c
            # after the product (before it without reset_after)
            out[..., : 2 * r.units] += recurrent_bias[: 2 * r.units]

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
        units, o, w = r.units, r.options, r.weights
        # u = update gate (Keras z), r = reset gate, c = candidate (Keras h)
        hold_gates(held, r, ("u", "r"), True, pre)
        a[:, : 2 * units] = o.gate_activation(z)
        hold_gates(held, r, ("u", "r"), False, a)
        u, reset = a[:, :units], a[:, units : 2 * units]
        zc = pre[:, 2 * units :]
        recurrent = w["kernel"][r.d :, 2 * units :]
        recurrent_bias = w.get("recurrent_bias")
        if recurrent_bias is not None:
            zc += reset * (h @ recurrent + recurrent_bias[2 * units :])
        else:
            zc += (reset * h) @ recurrent
        hold_gates(held, r, "c", True, pre)
        a[:, 2 * units :] = o.activation(zc)
        hold_gates(held, r, "c", False, a)
        return u * h + (1 - u) * a[:, 2 * units :], None


# r = reset gate, u = update gate: `value = sigmoid(gate_inputs); r, u = split(value, 2)`;
# c = candidate: `activation(concat([x, r * h_prev]) @ candidate_kernel + candidate_bias)`.
# Parts: r, u as for the LSTM; c: input = x W_c, recurrent = (r * h_prev) U_c, bias = b_c.
GRU = CellSpec(
    kind="GRUCell",
    gates=("r", "u", "c"),
    gate_names=("reset gate", "update gate", "candidate"),
    sigmoid_before_split=True,
    states=("h",),
    weights=(
        GateWeights("kernel", "bias", 0, 2),
        GateWeights("kernel", "bias", 1, 2),
        GateWeights("candidate_kernel", "candidate_bias", 0, 1),
    ),
    kernel_suffix="/gates/kernel",
    math=_GruCell(),
)

# Keras GRU blocks are z, r, h: z is our u (update gate), h our c (candidate). With
# reset_after (the default) the recurrent bias is separate: `recurrent_bias`.
# Parts with reset_after: u, r: input, recurrent, bias, recurrent_bias = b_r (its slice);
# c: recurrent = r * (h_prev U_c), recurrent_bias = r * b_r. Without: as GRUCell.
KERAS_GRU = CellSpec(
    kind="GRU",
    gates=("u", "r", "c"),
    gate_names=("update gate", "reset gate", "candidate"),
    sigmoid_before_split=False,
    states=("h",),
    weights=tuple(GateWeights("kernel", "bias", k, 3) for k in range(3)),
    kernel_suffix="/kernel",
    math=_KerasGru(),
)
