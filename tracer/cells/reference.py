"""A float64 numpy recomputation of every cell kind, from weights and inputs.

This is the yardstick every recorded value is checked against: each kind's step follows the
formulas of `tf.compat.v1.nn.rnn_cell` line by line, in float64 (`CellMath.reference_step`,
in the kind's module of `tracer.cells.kinds`), and `run_cell` runs it over a sequence,
returning the same arrays a `tracer.values.trace.CellTrace` holds. It imports no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tracer.cells.activations import ACTIVATIONS, sigmoid
from tracer.cells.kinds import Options, spec_for

__all__ = ["ACTIVATIONS", "run_cell"]


def run_cell(
    kind: str,
    weights: Mapping[str, np.ndarray],
    inputs: np.ndarray,
    *,
    forget_bias: float = 1.0,
    activation: str = "tanh",
    cell_clip: float | None = None,
    proj_clip: float | None = None,
    initial_state: Mapping[str, np.ndarray] | None = None,
    backward: bool = False,
) -> dict[str, np.ndarray | dict[str, np.ndarray]]:
    """Run one cell over `inputs` [examples, steps, features].

    weights maps roles to arrays as `tracer.values.weights.read_weights` returns them (`kernel`,
    `bias`, and `candidate_kernel`, `candidate_bias`, `w_i_diag`, `w_f_diag`,
    `w_o_diag`, `projection` where the cell has them). With `backward`, the cell reads
    the sequence from its last position to its first; results stay indexed by position.

    Returns `preactivation` and `activation` [examples, steps, gates, units] and
    `states` {name: [examples, steps, width]}, all float64.
    """
    w = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}
    x = np.asarray(inputs, dtype=np.float64)
    n_ex, n_steps, _ = x.shape
    spec = spec_for(kind)
    units = w["kernel"].shape[1] // spec.weights[0].blocks  # the main kernel's column blocks
    width = w["projection"].shape[1] if "projection" in w else units
    init = dict(initial_state or {})
    h = np.asarray(init.get("h", np.zeros((n_ex, width))), dtype=np.float64)
    c = np.asarray(init.get("c", np.zeros((n_ex, units))), dtype=np.float64)
    options = Options(ACTIVATIONS[activation], sigmoid, forget_bias, cell_clip, proj_clip)

    pre = np.zeros((n_ex, n_steps, len(spec.gates), units))
    post = np.zeros_like(pre)
    states = {"h": np.zeros((n_ex, n_steps, width))}
    if spec.is_lstm:
        states["c"] = np.zeros((n_ex, n_steps, units))
    order = range(n_steps - 1, -1, -1) if backward else range(n_steps)
    for t in order:
        pre[:, t], post[:, t], h, c = spec.math.reference_step(spec, x[:, t], h, c, w, options)
        if spec.is_lstm:
            states["c"][:, t] = c
        states["h"][:, t] = h
    return {"preactivation": pre, "activation": post, "states": states}
