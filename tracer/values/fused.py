"""The values of a fused RNN op's cell (`LSTMBlockCell`, `BlockLSTM`, `BlockLSTMV2`, `GRUBlockCell`).

The activations recorded are the op's own outputs (labels i, j, f, o with `ci` as j and
`cs` as the state c; GRU r, u, c; see `tracer.find.fused` for the ops). The
preactivations are computed here in numpy from the op's own fetched inputs and weights,
then checked against the op's own outputs, its oracle: every gate's nonlinearity of the
recomputed preactivation must give the op's activation within 1e-4 (i, f with the op's
`forget_bias`, o, each with its peephole where the op has them, and tanh of j; r, u and tanh
of the candidate for a GRU), so that a weight layout read wrongly, or two gate blocks taken
for each other, cannot go unnoticed.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from recorders.errors import ReplayMismatchError
from tracer.cells.found import Fused
from tracer.values.replay import TOLERANCE, Replayed

__all__ = ["fused_values"]


def fused_values(
    cell, fetched: Mapping[str, np.ndarray], weights: Mapping[str, np.ndarray]
) -> Replayed:
    """The preactivations (computed), activations and states (the op's own) of a fused cell
    for one batch, [examples, steps, ...], from the fetched tensors by name."""
    fused: Fused = cell.fused
    outs, units = fused.outputs(), cell.units

    def series(names: tuple[str, ...]) -> np.ndarray:
        """[batch, steps, width]: one tensor per step, or a sequence op's (or a loop's stack's) [steps, batch, width]."""
        if fused.per_step:
            return np.stack([np.asarray(fetched[n]) for n in names], axis=1)
        return np.swapaxes(np.asarray(fetched[names[0]]), 0, 1)

    def out(label: str) -> np.ndarray:
        return series(tuple(f"{op}:{outs[label]}" for op in fused.ops))

    x = series(fused.x)
    if fused.per_step or fused.stacked:
        h_prev = series(fused.h_prev)
    else:  # the state before step t is the op's h of step t - 1
        h_prev = np.concatenate(
            [np.asarray(fetched[fused.h_prev[0]])[:, None], out("h")[:, :-1]], axis=1
        )
    xh = np.concatenate([x, h_prev], axis=2).astype(np.float32)
    if fused.op_type == "GRUBlockCell":
        r, u, c = (out(g) for g in "ruc")
        ru = xh @ weights["kernel"] + weights["bias"]
        candidate = (
            np.concatenate([x, r * h_prev], axis=2) @ weights["candidate_kernel"]
            + weights["candidate_bias"]
        )
        pre = np.stack([ru[..., :units], ru[..., units:], candidate], axis=2)
        act = np.stack([r, u, c], axis=2)
        states = {"h": out("h")}
        for k, label in enumerate("ruc"):
            nonlinear = np.tanh if label == "c" else _sigmoid
            _check(cell, label, nonlinear(pre[:, :, k].astype(np.float64)), act[:, :, k])
        return Replayed(pre, act, states, states["h"], {}, inputs=x, read={"h": h_prev})
    z = xh @ weights["kernel"] + weights["bias"]
    # [batch, steps, 4, units], in the spec's gate order
    blocks = np.stack(np.split(z, 4, axis=2), axis=2)
    act = np.stack([out(g) for g in cell.gates], axis=2)
    states = {"c": out("c"), "h": out("h")}
    read = {"h": h_prev}
    c_prev: np.ndarray | float = 0.0
    peep: dict[str, np.ndarray | float] = {g: 0.0 for g in "ifo"}
    if fused.use_peephole:  # (the op's c_prev is only kept for its peepholes)
        read["c"] = c_prev = (
            series(fused.c_prev)
            if fused.per_step or fused.stacked
            else np.concatenate(
                [np.asarray(fetched[fused.c_prev[0]])[:, None], states["c"][:, :-1]], axis=1
            )
        )
        peep = {g: weights[f"w_{g}_diag"] for g in "ifo"}
    # the op's own equations (LSTMBlockCell's documentation): o's peephole reads the new c
    z64 = {g: blocks[:, :, cell.gates.index(g)].astype(np.float64) for g in "ijfo"}
    wanted = {
        "i": _sigmoid(z64["i"] + c_prev * peep["i"]),
        "j": np.tanh(z64["j"]),
        "f": _sigmoid(z64["f"] + (cell.forget_bias or 0.0) + c_prev * peep["f"]),
        "o": _sigmoid(z64["o"] + states["c"] * peep["o"]),
    }
    for label, value in wanted.items():
        _check(cell, label, value, act[:, :, cell.gates.index(label)])
    return Replayed(blocks, act, states, states["h"], {}, inputs=x, read=read)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v.astype(np.float64)))


def _check(cell, gate: str, wanted: np.ndarray, act: np.ndarray) -> None:
    """The op's own activations of `gate` must be what the recomputed preactivations give."""
    worst = float(np.nanmax(np.abs(wanted - act), initial=0.0))
    if worst > TOLERANCE:
        raise ReplayMismatchError(
            f"cell {cell.name}: the {cell.fused.op_type} op's own gate {gate} differs from the one recomputed from its "
            f"inputs and weights by up to {worst:.3g} (tolerance {TOLERANCE:g}): its weight layout is not the one "
            "gatetrace knows"
        )
