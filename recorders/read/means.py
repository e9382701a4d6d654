"""Each unit's mean over a whole recording: what `--hold CELL:WHAT:UNITS=mean` sets units to.

`unit_means` reads one gate's column (or one state's values) a row group at a time
(`Recording.blocks`) and sums each unit in float64 over every (example, step) the recording
holds: the mean of all its rows, as `pandas` computes it from the long table. No TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from recorders.errors import SelectionError

__all__ = ["unit_means"]


def unit_means(
    rec, table: str, cell: str, label: str, column: str, units: Sequence[int] | None
) -> dict[int, float]:
    """{unit: mean} of `column` of `label` ("gates": a gate's preactivation or activation;
    "states": a state's value) of `cell` in the recording `rec`, over every example and step it
    holds; every unit where `units` is None. NaN for a unit with no finite rows is its mean, as
    numpy's own mean gives it."""
    if rec.kind != "full":
        raise SelectionError(
            f"{rec.path} is a summary recording (--summary), whose means are kept per step, not per "
            "example; give a full recording of the model (gatetrace record without --summary)"
        )
    width = rec.width(table, cell, label)
    chosen = np.arange(width) if units is None else np.asarray(units, np.int64)
    if chosen.size and chosen.max() >= width:
        raise SelectionError(
            f"{rec.path}: {cell}'s {label} has {width} units (0 to {width - 1}); found unit {chosen.max()}"
        )
    total = np.zeros(chosen.size, np.float64)
    count = 0
    for block in rec.blocks(table, cell, label, column):
        values = block.values[..., chosen].astype(np.float64)
        if block.present is not None:
            values = values[block.present]
        else:
            values = values.reshape(-1, chosen.size)
        total += values.sum(axis=0)
        count += values.shape[0]
    if count == 0:
        raise SelectionError(
            f"{rec.path} holds no rows of {cell}'s {label}; give a recording that does"
        )
    return {int(u): float(t / count) for u, t in zip(chosen, total, strict=True)}
