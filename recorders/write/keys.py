"""The key columns of a long table (example, step, unit), and a cache of them for batch after batch.

`key_columns` builds them for a C-ordered [examples, steps, units] block; `KeyCache` hands
out the same arrays again for every batch of the same shape (only `example` moves).
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["key_columns", "KeyCache"]


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
    the benchmark). Arrays handed out are shared and read-only, each owning its memory:
    `recorders.write.plain` encodes such an array's page once for every file that holds it.
    Safe to call from several threads.
    """

    def __init__(self, size: int = 8, starts: int = 4):
        self._cache: dict[tuple, dict[str, np.ndarray]] = {}
        self._examples: dict[tuple, np.ndarray] = {}  # (shape, start): its example column
        self._size, self._starts = size, starts
        self._lock = threading.Lock()

    def __call__(
        self, examples: np.ndarray, steps: np.ndarray, units: int
    ) -> dict[str, np.ndarray]:
        examples = np.asarray(examples, dtype=np.int64)
        n = len(examples)
        if n == 0 or examples[-1] - examples[0] != n - 1 or not (np.diff(examples) == 1).all():
            return key_columns(examples, steps, units)
        key = (n, np.asarray(steps, dtype=np.int32).tobytes(), units)
        with self._lock:
            cached = self._cache.get(key)
            if cached is None:
                cached = self._cache[key] = {
                    name: _frozen(column)
                    for name, column in key_columns(
                        np.arange(n, dtype=np.int64), steps, units
                    ).items()
                }
                _bound(self._cache, self._size)
            start = (key, int(examples[0]))
            example = self._examples.get(start)
            if example is None:
                example = self._examples[start] = _frozen(cached["example"] + examples[0])
                _bound(self._examples, self._starts)
        return {"example": example, "step": cached["step"], "unit": cached["unit"]}


def _frozen(column: np.ndarray) -> np.ndarray:
    """`column` as a read-only array that owns its memory (a copy if it is a view)."""
    column = column.copy() if column.base is not None else column
    column.flags.writeable = False
    return column


def _bound(cache: dict, size: int) -> None:
    """Drop the oldest entries of `cache` beyond `size`."""
    while len(cache) > size:
        cache.pop(next(iter(cache)))
