"""The integer codes of a recording of a full-integer model, from its values and its manifest.

A cell recorded from a TensorFlow Lite op that computes in integers (a full-integer LSTM)
holds its real values, as every recording does, and says in its description how each was
held by the kernel: `quantisation` maps `preactivation`, `activation` and each state to
its integer `type` (`int8`, `int16`), `scale` and `zero_point`, value = scale x (code - zero
point). The gates' and the cell state's scales are powers of two, so their values are their
codes exactly; the output state's value is the float32 product, a hair from the exact one.
`codes` turns values back into the codes the kernel held, checking that each is one and that
its code gives it back (a scale far larger than the values' would call every one code 0).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from recorders.errors import SelectionError

__all__ = ["codes", "quantisation_of"]

_TYPES = {"int8": np.int8, "int16": np.int16}


def quantisation_of(description: dict[str, Any], cell: str, what: str) -> tuple[type, float, int]:
    """(numpy type, scale, zero point) of `what` (a gate column or a state) of `cell`, from its
    description; SelectionError where the cell was not recorded from integer arithmetic or the
    description does not say it in the form gatetrace writes."""
    table = description.get("quantisation")
    if not isinstance(table, dict):
        raise SelectionError(
            f"cell {cell} was not recorded from integer arithmetic (its description has no quantisation): "
            "its values are not codes; read them with gate_array or state_array"
        )
    entry = table.get(what)
    if not isinstance(entry, dict):
        raise SelectionError(
            f"cell {cell} says how {', '.join(sorted(map(str, table)))} are held, not {what}"
        )
    kind, scale, zero = entry.get("type"), entry.get("scale"), entry.get("zero_point")
    if (
        kind not in _TYPES
        or not isinstance(scale, int | float)
        or isinstance(scale, bool)
        or not math.isfinite(scale)
        or scale <= 0
        or not isinstance(zero, int)
        or isinstance(zero, bool)
        or not np.iinfo(_TYPES[kind]).min <= zero <= np.iinfo(_TYPES[kind]).max
    ):
        raise SelectionError(
            f"cell {cell}: the quantisation of {what} in its description is {entry!r}, not a type "
            "int8 or int16 with a positive scale and a zero point of that type"
        )
    return _TYPES[kind], float(scale), zero


def codes(values: np.ndarray, kind: type, scale: float, zero: int, what: str) -> np.ma.MaskedArray:
    """The codes of `values` (NaN where no row was recorded: masked): round(value / scale) +
    zero point, of numpy type `kind`. SelectionError where a value is not a code of that
    scale, zero point and type: more than 1/1000 of a step from one, out of the type's range,
    or not given back by it (scale x (code - zero point) differs from the value by more than
    float32 rounding: a scale far larger than the values' own makes every code 0)."""
    values = np.asarray(values, np.float64)
    missing = np.isnan(values)
    held = np.where(missing, 0.0, values)
    steps = held / scale
    nearest = np.rint(steps)
    found = nearest + zero
    info = np.iinfo(kind)
    with np.errstate(invalid="ignore"):  # an infinite value: out of range below
        between = np.abs(steps - nearest) > 1e-3
        other = np.abs(nearest * scale - held) > 1e-5 * np.abs(held)  # its code stands for another
    bad = between | other | (found < info.min) | (found > info.max)
    if bad.any():
        at = tuple(np.argwhere(bad)[0])
        raise SelectionError(
            f"{what}: the value at {list(map(int, at))} is {held[at]:.6g}, not an {info.dtype} code of scale "
            f"{scale:g} and zero point {zero} (the nearest, {found[at]:.0f}, stands for {nearest[at] * scale:.6g}); "
            "the recording's values are not what its description says"
        )
    return np.ma.MaskedArray(found.astype(kind), mask=missing)
