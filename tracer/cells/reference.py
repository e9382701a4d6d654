"""A float64 numpy recomputation of every cell kind, from weights and inputs.

This is the yardstick every recorded value is checked against: it follows the
formulas of `tf.compat.v1.nn.rnn_cell` line by line, in float64, and returns the same
arrays a `tracer.values.fetch.CellTrace` holds. It imports no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from tracer.cells.kinds import spec_for

__all__ = ["ACTIVATIONS", "run_cell"]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, 0.0),
    "relu6": lambda x: np.clip(x, 0.0, 6.0),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
    "selu": lambda x: (
        1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(np.minimum(x, 0.0)))
    ),
    "softsign": lambda x: x / (1.0 + np.abs(x)),
    "softplus": lambda x: np.logaddexp(0.0, x),
    "linear": lambda x: x,
    # Keras 2 and tf-keras: `clip(0.2 * x + 0.5, 0, 1)` (Keras 3 changed it to relu6(x + 3) / 6).
    "hard_sigmoid": lambda x: np.clip(0.2 * x + 0.5, 0.0, 1.0),
}


def _clip(x: np.ndarray, v: float | None) -> np.ndarray:
    return x if v is None else np.clip(x, -v, v)


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
    act = ACTIVATIONS[activation]
    kernel, bias = w["kernel"], w["bias"]
    lstm = kind in ("BasicLSTMCell", "LSTMCell")
    spec = spec_for(kind)
    units = kernel.shape[1] // spec.weights[0].blocks  # the main kernel's column blocks
    width = w["projection"].shape[1] if "projection" in w else units
    init = dict(initial_state or {})
    h = np.asarray(init.get("h", np.zeros((n_ex, width))), dtype=np.float64)
    c = np.asarray(init.get("c", np.zeros((n_ex, units))), dtype=np.float64)

    n_gates = len(spec.gates)
    pre = np.zeros((n_ex, n_steps, n_gates, units))
    post = np.zeros_like(pre)
    states = {"h": np.zeros((n_ex, n_steps, width))}
    if lstm:
        states["c"] = np.zeros((n_ex, n_steps, units))
    order = range(n_steps - 1, -1, -1) if backward else range(n_steps)
    for t in order:
        z = np.concatenate([x[:, t], h], axis=1) @ kernel + bias
        if lstm:
            # i = input_gate, j = new_input, f = forget_gate, o = output_gate
            i, j, f, o = np.split(z, 4, axis=1)
            peep = "w_i_diag" in w
            ig = _sigmoid(i + w["w_i_diag"] * c) if peep else _sigmoid(i)
            fg = (
                _sigmoid(f + forget_bias + w["w_f_diag"] * c) if peep else _sigmoid(f + forget_bias)
            )
            jg = act(j)
            c = _clip(fg * c + ig * jg, cell_clip)
            og = _sigmoid(o + w["w_o_diag"] * c) if peep else _sigmoid(o)
            h = og * act(c)
            if "projection" in w:
                h = _clip(h @ w["projection"], proj_clip)
            pre[:, t] = np.stack([i, j, f, o], axis=1)
            post[:, t] = np.stack([ig, jg, fg, og], axis=1)
            states["c"][:, t] = c
        elif kind == "GRUCell":
            # r = reset gate, u = update gate (sigmoid applied before the split), c = candidate
            r, u = np.split(_sigmoid(z), 2, axis=1)
            zc = (
                np.concatenate([x[:, t], r * h], axis=1) @ w["candidate_kernel"]
                + w["candidate_bias"]
            )
            cand = act(zc)
            pre[:, t] = np.stack([z[:, :units], z[:, units:], zc], axis=1)
            post[:, t] = np.stack([r, u, cand], axis=1)
            h = u * h + (1 - u) * cand
        elif kind == "BasicRNNCell":
            h = act(z)
            pre[:, t, 0], post[:, t, 0] = z, h
        else:
            raise ValueError(f"unknown cell kind {kind!r}")
        states["h"][:, t] = h
    return {"preactivation": pre, "activation": post, "states": states}
