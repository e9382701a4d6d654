"""Long-format columns: numpy arrays keyed by example, step and unit.

A recording holds values shaped `[examples, steps, units]` (one gate of one cell, or one
state). The long table has one row per value, in C order: example-major, then step,
then unit. These helpers build those columns directly in numpy, which is several
times faster and leaner than a pandas `melt`.
"""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd

__all__ = [
    "key_columns", "KeyCache", "long_columns", "gate_columns", "state_columns", "weight_columns", "gate_frame",
    "PARTS", "GATE_COLUMNS", "ABSENT",
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


def key_columns(examples: np.ndarray, steps: np.ndarray, units: int) -> dict[str, np.ndarray]:
    """`example` (int64), `step` and `unit` (int32) for a C-ordered [examples, steps, units] block."""
    examples = np.asarray(examples, dtype=np.int64)
    steps = np.asarray(steps, dtype=np.int32)
    n_ex, n_steps = len(examples), len(steps)
    return {
        "example": np.repeat(examples, n_steps * units),
        "step": np.tile(np.repeat(steps, units), n_ex),
        "unit": np.tile(np.arange(units, dtype=np.int32), n_ex * n_steps),
    }


class KeyCache:
    """`key_columns` for batches of consecutive examples, built once per batch shape.

    Every batch of a recording has the same steps and units, and its examples are a run
    `start, start + 1, ...`: the `step` and `unit` columns are the same arrays each time
    and `example` is a cached offset column plus `start`, itself kept for the last
    `starts` starts: a batch's part files are cut into the same row groups, so each file
    asks for the same few (building it afresh each time was 7% of a batch's CPU time in
    the benchmark). Arrays handed out are shared: callers must not write into them.
    Safe to call from several threads.
    """

    def __init__(self, size: int = 8, starts: int = 4):
        self._cache: dict[tuple, dict[str, np.ndarray]] = {}
        self._examples: dict[tuple, np.ndarray] = {}  # (shape, start): its example column
        self._size, self._starts = size, starts
        self._lock = threading.Lock()

    def __call__(self, examples: np.ndarray, steps: np.ndarray, units: int) -> dict[str, np.ndarray]:
        examples = np.asarray(examples, dtype=np.int64)
        n = len(examples)
        if n == 0 or examples[-1] - examples[0] != n - 1 or not (np.diff(examples) == 1).all():
            return key_columns(examples, steps, units)
        key = (n, np.asarray(steps, dtype=np.int32).tobytes(), units)
        with self._lock:
            cached = self._cache.get(key)
            if cached is None:
                cached = self._cache[key] = key_columns(np.arange(n, dtype=np.int64), steps, units)
                _bound(self._cache, self._size)
            start = (key, int(examples[0]))
            example = self._examples.get(start)
            if example is None:
                example = self._examples[start] = cached["example"] + examples[0]
                _bound(self._examples, self._starts)
        return {"example": example, "step": cached["step"], "unit": cached["unit"]}


def _bound(cache: dict, size: int) -> None:
    """Drop the oldest entries of `cache` beyond `size`."""
    while len(cache) > size:
        cache.pop(next(iter(cache)))


def long_columns(
    examples: np.ndarray,
    steps: np.ndarray,
    values: dict[str, np.ndarray | None],
    lengths: np.ndarray | None,
    keys=key_columns,
) -> dict[str, np.ndarray]:
    """Keys plus float32 value columns for [examples, steps, units] arrays (None: left out;
    `ABSENT`: kept as `ABSENT`, a column of nulls to the writer).

    With `lengths` (one per example), rows at or past an example's length are dropped;
    `lengths` may instead be a boolean [examples, steps] mask of the rows to keep (the
    steps a Keras mask let run). `keys` builds the key columns (`key_columns`, or a `KeyCache`).
    """
    units = next(v.shape[2] for v in values.values() if v is not None and v is not ABSENT)
    columns = dict(keys(examples, steps, units))
    for name, v in values.items():
        if v is ABSENT:
            columns[name] = ABSENT
        elif v is not None:
            columns[name] = np.ascontiguousarray(v, dtype=np.float32).reshape(-1)
    if lengths is not None:
        lengths = np.asarray(lengths)
        valid = lengths if lengths.dtype == bool else np.asarray(steps)[None, :] < lengths[:, None]  # [examples, steps]
        if not valid.all():
            keep = np.repeat(valid.reshape(-1), units)
            columns = {k: c if c is ABSENT else c[keep] for k, c in columns.items()}
    return columns


def gate_columns(
    examples: np.ndarray,
    steps: np.ndarray,
    preactivation: np.ndarray | None,
    activation: np.ndarray | None,
    lengths: np.ndarray | None = None,
    keys=key_columns,
) -> dict[str, np.ndarray]:
    """Columns for one gate: keys plus the value columns given ([examples, steps, units])."""
    return long_columns(examples, steps, {"preactivation": preactivation, "activation": activation}, lengths, keys)


def state_columns(
    examples: np.ndarray, steps: np.ndarray, values: np.ndarray, lengths: np.ndarray | None = None, keys=key_columns
) -> dict[str, np.ndarray]:
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
