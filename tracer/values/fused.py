"""The values of a fused RNN op's cell (`LSTMBlockCell`, `BlockLSTM`, `BlockLSTMV2`, `GRUBlockCell`).

The activations recorded are the op's own outputs (labels i, j, f, o with `ci` as j and
`cs` as the state c; GRU r, u, c; see `tracer.find.fused` for the ops). The
preactivations are computed here in numpy from the op's own fetched inputs and weights,
then checked: the sigmoid of the recomputed input-gate preactivation must give the op's i
(r for a GRU) within 1e-4, so that a weight layout read wrongly cannot go unnoticed.
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
        _check(cell, pre[:, :, 0], r)
        return Replayed(pre, act, states, states["h"], {}, inputs=x, read={"h": h_prev})
    z = xh @ weights["kernel"] + weights["bias"]
    # [batch, steps, 4, units], in the spec's gate order
    blocks = np.stack(np.split(z, 4, axis=2), axis=2)
    act = np.stack([out(g) for g in cell.gates], axis=2)
    states = {"c": out("c"), "h": out("h")}
    i_pre = blocks[:, :, cell.gates.index("i")]
    read = {"h": h_prev}
    if fused.use_peephole:  # (the op's c_prev is only kept for its peepholes)
        read["c"] = (
            series(fused.c_prev)
            if fused.per_step or fused.stacked
            else np.concatenate(
                [np.asarray(fetched[fused.c_prev[0]])[:, None], states["c"][:, :-1]], axis=1
            )
        )
        i_pre = i_pre + read["c"] * weights["w_i_diag"]
    _check(cell, i_pre, act[:, :, cell.gates.index("i")])
    return Replayed(blocks, act, states, states["h"], {}, inputs=x, read=read)


def _check(cell, pre: np.ndarray, act: np.ndarray) -> None:
    """The op's own gate values must be the sigmoid of the recomputed preactivations."""
    worst = float(
        np.nanmax(np.abs(1.0 / (1.0 + np.exp(-pre.astype(np.float64))) - act), initial=0.0)
    )
    if worst > TOLERANCE:
        raise ReplayMismatchError(
            f"cell {cell.name}: the {cell.fused.op_type} op's own gates differ from those recomputed from its inputs and "
            f"weights by up to {worst:.3g} (tolerance {TOLERANCE:g}): its weight layout is not the one gatetrace knows"
        )
