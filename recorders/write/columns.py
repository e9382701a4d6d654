"""Long-format columns: numpy arrays keyed by example, step and unit, as the tables hold them.

A recording holds values shaped `[examples, steps, units]` (one gate of one cell, or one
state). The long table has one row per value, in C order: example-major, then step,
then unit. These helpers build those columns directly in numpy (the keys:
`recorders.write.keys`), which is several times faster and leaner than a pandas `melt`.
`PARTS` and `GATE_COLUMNS` name the value columns a gates table can hold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from recorders.write.keys import key_columns

__all__ = [
    "long_columns",
    "written",
    "gate_columns",
    "state_columns",
    "weight_columns",
    "PARTS",
    "GATE_COLUMNS",
    "ABSENT",
]

# The parts a gate's preactivation is the sum of (what drives a gate), in the order the
# gates table holds them: `tracer.values.parts` defines each per cell kind.
PARTS = ("input", "recurrent", "bias", "peephole", "recurrent_bias")
# Every value column the gates table can hold.
GATE_COLUMNS = ("preactivation", "activation", *PARTS)


class _Absent:
    """A value column with no values for this gate: written as a column of nulls (a part the
    cell kind does not have, e.g. `peephole` of a BasicLSTMCell)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


def long_columns(
    examples: np.ndarray,
    steps: np.ndarray,
    values: Mapping[str, np.ndarray | _Absent | None],
    lengths: np.ndarray | None,
    keys: Callable[..., dict[str, np.ndarray]] = key_columns,
) -> dict[str, np.ndarray | _Absent]:
    """Keys plus float32 value columns for [examples, steps, units] arrays (None: left out;
    `ABSENT`: kept as `ABSENT`, a column of nulls to the writer).

    With `lengths` (one per example), rows at or past an example's length are dropped;
    `lengths` may instead be a boolean [examples, steps] mask of the rows to keep (the
    steps a Keras mask let run). `keys` builds the key columns (`key_columns`, or a `KeyCache`).
    """
    units = next(v.shape[2] for v in values.values() if isinstance(v, np.ndarray))
    columns: dict[str, np.ndarray | _Absent] = dict(keys(examples, steps, units))
    for name, v in values.items():
        if v is ABSENT:
            columns[name] = ABSENT
        elif v is not None:
            columns[name] = np.ascontiguousarray(v, dtype=np.float32).reshape(-1)
    if lengths is not None:
        valid = written(steps, lengths)
        if not valid.all():
            keep = np.repeat(valid.reshape(-1), units)
            columns = {k: c[keep] if isinstance(c, np.ndarray) else c for k, c in columns.items()}
    return columns


def written(steps: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """[examples, steps]: which rows `long_columns` keeps, given `lengths` (one per example: the
    steps before it) or a boolean [examples, steps] mask."""
    lengths = np.asarray(lengths)
    return lengths if lengths.dtype == bool else np.asarray(steps)[None, :] < lengths[:, None]


def gate_columns(
    examples: np.ndarray,
    steps: np.ndarray,
    preactivation: np.ndarray | None,
    activation: np.ndarray | None,
    lengths: np.ndarray | None = None,
    keys: Callable[..., dict[str, np.ndarray]] = key_columns,
) -> dict[str, np.ndarray | _Absent]:
    """Columns for one gate: keys plus the value columns given ([examples, steps, units])."""
    return long_columns(
        examples, steps, {"preactivation": preactivation, "activation": activation}, lengths, keys
    )


def state_columns(
    examples: np.ndarray,
    steps: np.ndarray,
    values: np.ndarray,
    lengths: np.ndarray | None = None,
    keys: Callable[..., dict[str, np.ndarray]] = key_columns,
) -> dict[str, np.ndarray | _Absent]:
    """Columns for one state: keys plus `value` ([examples, steps, units])."""
    return long_columns(examples, steps, {"value": values}, lengths, keys)


def weight_columns(matrix: np.ndarray) -> dict[str, np.ndarray]:
    """`row`, `unit` and `value` (float32) for a [rows, units] weight matrix (a vector is one row)."""
    matrix = np.atleast_2d(np.asarray(matrix, dtype=np.float32))
    rows, units = matrix.shape
    return {
        "row": np.repeat(np.arange(rows, dtype=np.int32), units),
        "unit": np.tile(np.arange(units, dtype=np.int32), rows),
        "value": matrix.reshape(-1),
    }
