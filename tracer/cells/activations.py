"""The activations a cell applies, in numpy: by the name TensorFlow and Keras give them.

`ACTIVATIONS` computes each as its op does, in the type of its input: the float64 reference
(`tracer.cells.reference`) and the float32 replays (`tracer.values.replay`) both use them,
but for the replays' sigmoid, which overflows in float32 in its plain form: `sigmoid32` (and
`sigmoid_into`, in place) does not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["ACTIVATIONS", "REPLAYED", "sigmoid", "sigmoid32", "sigmoid_into", "activation_of"]


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,
    "sigmoid": sigmoid,
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


def sigmoid32(x: np.ndarray) -> np.ndarray:
    # = 1 / (1 + exp(-x)), without overflow
    return (0.5 * np.tanh(0.5 * x) + 0.5).astype(x.dtype, copy=False)


def sigmoid_into(z: np.ndarray, out: np.ndarray, shift: np.float32 | None = None) -> None:
    """out = sigmoid(z + shift) in four float32 passes: 1 / (1 + exp(-(z + shift))).

    Faster than the tanh form; where exp overflows (z < -88) the result is exactly 0.
    """
    np.negative(z, out=out)
    if shift is not None:
        out -= shift
    with np.errstate(over="ignore"):
        np.exp(out, out=out)
    out += np.float32(1)
    np.reciprocal(out, out=out)


# The replays' activations keep float32 (numpy treats Python scalars as weak), except the
# sigmoid, whose plain form overflows in float32.
REPLAYED = {**ACTIVATIONS, "sigmoid": sigmoid32}


def activation_of(name: Any) -> Callable[[np.ndarray], np.ndarray]:
    """A replay's numpy activation by name (see `ACTIVATIONS`), or a callable as it is;
    ValueError for a name it does not know."""
    if callable(name):
        return name
    try:
        return REPLAYED[name]
    except KeyError:
        raise ValueError(
            f"activation {name!r} is not replayed: expected one of {sorted(REPLAYED)}"
        ) from None
