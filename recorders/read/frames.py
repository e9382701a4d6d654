"""A cell's gates, computed in this process (`tracer.trace`), as one long pandas frame."""

from __future__ import annotations

import numpy as np
import pandas as pd

from recorders.write.keys import key_columns

__all__ = ["gate_frame"]


def gate_frame(
    examples: np.ndarray,
    steps: np.ndarray,
    gates: tuple[str, ...] | list[str],
    preactivation: np.ndarray,
    activation: np.ndarray,
) -> pd.DataFrame:
    """One cell's gates ([examples, steps, gates, units] arrays) as a long pandas frame.

    Columns: example, step, gate (categorical, in the cell's gate order), unit,
    preactivation, activation.
    """
    n_ex, n_steps, n_gates, units = preactivation.shape
    keys = key_columns(examples, steps, n_gates * units)
    codes = np.tile(np.repeat(np.arange(n_gates, dtype=np.int8), units), n_ex * n_steps)
    return pd.DataFrame(
        {
            "example": keys["example"],
            "step": keys["step"],
            "gate": pd.Categorical.from_codes(codes, categories=list(gates)),
            "unit": keys["unit"] % units,
            "preactivation": np.asarray(preactivation, dtype=np.float32).reshape(-1),
            "activation": np.asarray(activation, dtype=np.float32).reshape(-1),
        }
    )
