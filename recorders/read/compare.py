"""Two recordings of the same network compared gate by gate: where a converted, quantised or
retrained model computes its gates differently (a Keras model against its `.tflite` file, the
float file against the quantised one, two checkpoints of a run).

`compare(a, b)` pairs the cells of two `Recording`s (by name where both hold the same names,
else in order; `cells={"lstm": "functional_1/lstm_1"}` names pairs), each pair's gates by
name (gatetrace names gates alike in every cell kind: an LSTM's new input is `j` in a
checkpoint, a Keras file and a TensorFlow Lite file), and every value by example, step and
unit. Recordings that do not line up are refused in one line saying what differs
(SelectionError): a summary recording (it holds no values), other example ranges, other fed
shapes (the manifests' `feeds`), other fed values (the digests of the manifests' `inputs`,
`tracer.inputs.digest`, where both keep them: `Comparison.inputs` says whether they did),
other steps, units or gates, a value one recorded and the other did not (a masked step).

For each gate of each pair, over every value both recorded, of `column` (the activation by
default), the difference `b - a` in float64:

    gates     max_abs, mean_abs and rmse; units_beyond: the share of units whose largest
              difference exceeds `tolerance`; first_step_beyond: the first step where any
              difference does; saturated_a_only / saturated_b_only: values saturated (near
              either end of the gate's nonlinearity, as `analysis.saturation` counts them:
              below 0.1 or above 0.9 for sigmoid, beyond -0.9 or 0.9 for tanh) in one
              recording and not in the other
    steps     the same three per step: how the difference grows along the sequence
    units     the `top` units of any gate with the largest mean absolute difference
    examples  the `top` examples of any gate with the largest mean absolute difference

`Comparison.first_beyond` names the gate whose difference exceeds the tolerance at the
earliest step; `Comparison.table` is all four as one long table (its `level` column says
which), what `gatetrace compare --out` writes. Each gate of each recording is read once, as
an array (`Recording.gate_array`, within the reader's memory budget). No TensorFlow.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from recorders.errors import SelectionError
from recorders.read.analysis import bounds_of
from recorders.read.reader import Recording

__all__ = ["compare", "Comparison", "pair_cells"]

_LEVELS = ("gates", "steps", "units", "examples")


@dataclass(frozen=True)
class Comparison:
    """What `compare` found (see the module docstring): one frame per level, and how it was asked."""

    a: str
    b: str
    column: str
    tolerance: float
    inputs: str  # whether the two were fed the same values, as the manifests' digests say
    gates: pd.DataFrame = field(repr=False)
    steps: pd.DataFrame = field(repr=False)
    units: pd.DataFrame = field(repr=False)
    examples: pd.DataFrame = field(repr=False)

    def first_beyond(self) -> tuple[str, str, int] | None:
        """(cell, gate, step) of the gate whose difference exceeds the tolerance first along
        the sequence (of several at that step, the one that differs most there); None where
        none does."""
        over = self.gates.dropna(subset=["first_step_beyond"])
        if over.empty:
            return None
        at = self.steps.merge(
            over[["cell", "gate", "first_step_beyond"]].rename(
                columns={"first_step_beyond": "step"}
            ),
            on=["cell", "gate", "step"],
        ).sort_values(["step", "max_abs"], ascending=[True, False], kind="stable")
        first = at.iloc[0]
        return str(first["cell"]), str(first["gate"]), int(first["step"])

    def table(self) -> pd.DataFrame:
        """The four frames as one long table, `level` first (a column a level lacks is null)."""
        frames = [getattr(self, level).assign(level=level) for level in _LEVELS]
        out = pd.concat(frames, ignore_index=True)
        for column in ("step", "unit", "example", "first_step_beyond", "values"):
            out[column] = out[column].astype("Int64")
        return out[["level", *[c for c in out.columns if c != "level"]]]


def pair_cells(
    a: Recording, b: Recording, cells: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """The cells of `a` and `b` paired: those named in `cells` (a's name -> b's), else by name
    where both hold the same names, else in order where both hold as many."""
    if cells:
        for mine, theirs, rec in ((list(cells), a.cells, a), (list(cells.values()), b.cells, b)):
            unknown = [c for c in mine if c not in theirs]
            if unknown:
                raise SelectionError(
                    f"--cells names {', '.join(unknown)}, not a cell of {rec.path}; its cells are "
                    f"{', '.join(theirs)}"
                )
        return list(cells.items())
    if sorted(a.cells) == sorted(b.cells):
        return [(c, c) for c in a.cells]
    if len(a.cells) == len(b.cells):
        return list(zip(a.cells, b.cells, strict=True))
    raise SelectionError(
        f"{a.path} holds {len(a.cells)} cells ({', '.join(a.cells)}) and {b.path} {len(b.cells)} "
        f"({', '.join(b.cells)}): pair them with --cells A=B[,A=B...]"
    )


def _digests(rec: Recording) -> list[str] | None:
    """The digests of what `rec` was fed (`tracer.inputs.digest`), or None where its manifest
    has none (recorded by gatetrace before 0.1 kept them, fed a stream, or by a writer of yours)."""
    held = rec.description.get("inputs")
    if not isinstance(held, dict) or not held:
        return None
    found = [v.get("digest") for v in held.values() if isinstance(v, dict)]
    digests = [d for d in found if isinstance(d, str)]
    return sorted(digests) if digests and len(digests) == len(held) else None


def _lined_up(a: Recording, b: Recording, pairs: list[tuple[str, str]]) -> str:
    """SelectionError where the two recordings do not hold the same values to compare; else
    what is known of their inputs (the same values, or not checked, and why)."""
    for rec in (a, b):
        if rec.kind == "summary":
            raise SelectionError(
                f"{rec.path} is a summary recording (--summary): it holds statistics, not the values "
                "compare needs; record both without --summary"
            )
    if a.examples != b.examples:
        raise SelectionError(
            f"{a.path} holds examples {a.examples} and {b.path} {b.examples}: compare recordings of "
            "the same examples (record both with the same inputs and --examples)"
        )
    fed = [sorted(tuple(s) for s in r.description.get("feeds", {}).values()) for r in (a, b)]
    if all(fed) and fed[0] != fed[1]:
        raise SelectionError(
            f"{a.path} was fed arrays of shapes {fed[0]} and {b.path} {fed[1]}: compare recordings of "
            "the same inputs"
        )
    digests = [_digests(r) for r in (a, b)]
    if digests[0] is not None and digests[1] is not None and digests[0] != digests[1]:
        raise SelectionError(
            f"{a.path} and {b.path} were fed other values (the digests of their inputs in the manifests "
            "differ): compare recordings of the same inputs"
        )
    for ca, cb in pairs:
        what = f"cell {ca} of {a.path} and {cb} of {b.path}"
        if a.units(ca) != b.units(cb):
            raise SelectionError(f"{what} have {a.units(ca)} and {b.units(cb)} units")
        sa, sb = a.steps(ca), b.steps(cb)
        if not np.array_equal(sa, sb):
            raise SelectionError(
                f"{what} hold steps {_span(sa)} and {_span(sb)}: record both with the same --steps"
            )
        if sorted(a.gates(ca)) != sorted(b.gates(cb)):
            raise SelectionError(
                f"{what} have gates {','.join(a.gates(ca))} and {','.join(b.gates(cb))}: they are "
                "not the same kind of cell; pair others with --cells"
            )
    if digests[0] is not None and digests[1] is not None:
        return "the same values (the digests of the inputs in both manifests agree)"
    missing = a.path if digests[0] is None else b.path
    return (
        f"not checked: {missing} keeps no digest of its inputs (fed a stream, or recorded by an "
        "older gatetrace); make sure both were fed the same values"
    )


def _span(steps: np.ndarray) -> str:
    return f"{int(steps[0])}..{int(steps[-1])}" if len(steps) else "none"


def compare(
    a: Recording,
    b: Recording,
    cells: Mapping[str, str] | None = None,
    column: str = "activation",
    tolerance: float = 1e-3,
    top: int = 10,
) -> Comparison:
    """Recordings `a` and `b` compared gate by gate (see the module docstring)."""
    if not tolerance >= 0:
        raise SelectionError(f"the tolerance is {tolerance}; expected a number >= 0")
    pairs = pair_cells(a, b, cells)
    inputs = _lined_up(a, b, pairs)
    numbers = np.concatenate(
        [np.arange(s, e, dtype=np.int64) for s, e in a.examples] or [np.zeros(0, np.int64)]
    )
    gates, steps, units, examples = [], [], [], []
    for ca, cb in pairs:
        step_numbers = a.steps(ca)
        for gate in a.gates(ca):
            x = a.gate_array(ca, gate, column)
            # both in float64, their difference, what is held, a reduction's temporaries
            a.allot(x.shape, 40, f"comparing gate {gate} of cell {ca}")
            x = x.astype(np.float64)
            y = b.gate_array(cb, gate, column).astype(np.float64)
            held = ~np.isnan(x)
            if x.shape != y.shape or (held != ~np.isnan(y)).any():
                raise SelectionError(_unmatched(a, b, ca, cb, gate, x, y, numbers, step_numbers))
            d = np.abs(np.where(held, y - x, 0.0))
            keys = {"cell": ca, "cell_b": cb, "gate": gate}
            g = _reduced(d, held, (0, 1, 2))
            per_unit = _reduced(d, held, (0, 1))
            per_step = _reduced(d, held, (0, 2))
            per_example = _reduced(d, held, (1, 2))
            beyond = np.flatnonzero(per_step["max_abs"] > tolerance)
            gates.append(
                {
                    **keys,
                    "values": int(held.sum()),
                    **{k: float(v) for k, v in g.items()},
                    "units_beyond": float(np.mean(per_unit["max_abs"] > tolerance))
                    if d.shape[2]
                    else 0.0,
                    "first_step_beyond": int(step_numbers[beyond[0]]) if len(beyond) else None,
                    **_saturated(a, ca, gate, x, y),
                }
            )
            steps.append(pd.DataFrame({**keys, "step": step_numbers, **per_step}))
            units.append(pd.DataFrame({**keys, "unit": np.arange(d.shape[2]), **per_unit}))
            examples.append(pd.DataFrame({**keys, "example": numbers[: d.shape[0]], **per_example}))
    return Comparison(
        str(a.path),
        str(b.path),
        column,
        tolerance,
        inputs,
        pd.DataFrame(gates),
        pd.concat(steps, ignore_index=True) if steps else pd.DataFrame(),
        _most(units, top),
        _most(examples, top),
    )


def _saturated(a: Recording, cell: str, gate: str, x: np.ndarray, y: np.ndarray) -> dict:
    """How many values are saturated in A and not in B, and the other way (0 for a gate that
    does not saturate), at the gate's nonlinearity's thresholds (`analysis.bounds_of`)."""
    low, high = bounds_of(a, cell, gate)
    if np.isnan(low):
        return {"saturated_a_only": 0, "saturated_b_only": 0}
    sa, sb = (x < low) | (x > high), (y < low) | (y > high)
    return {"saturated_a_only": int((sa & ~sb).sum()), "saturated_b_only": int((sb & ~sa).sum())}


def _reduced(d: np.ndarray, held: np.ndarray, axes: tuple[int, ...]) -> dict[str, np.ndarray]:
    """max_abs, mean_abs and rmse of the absolute differences `d` over `axes`, where `held`
    (NaN where nothing was held)."""
    n = held.sum(axis=axes)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return {
            "max_abs": np.where(n > 0, d.max(axis=axes, initial=0.0), np.nan),
            "mean_abs": d.sum(axis=axes) / n,
            "rmse": np.sqrt((d * d).sum(axis=axes) / n),
        }


def _most(frames: list[pd.DataFrame], top: int) -> pd.DataFrame:
    """The `top` rows of `frames` with the largest mean absolute difference."""
    if not frames:
        return pd.DataFrame()
    rows = pd.concat(frames, ignore_index=True).dropna(subset=["mean_abs"])
    return (
        rows.sort_values("mean_abs", ascending=False, kind="stable")
        .head(top)
        .reset_index(drop=True)
    )


def _unmatched(a, b, ca, cb, gate, x, y, numbers, step_numbers) -> str:
    """The first value one recording holds and the other does not, as one line."""
    e, s, u = np.argwhere(np.isnan(x) != np.isnan(y))[0]
    which = a.path if np.isnan(y[e, s, u]) else b.path
    return (
        f"gate {gate} of cell {ca} ({a.path}) and {cb} ({b.path}): example {numbers[e]}, step "
        f"{step_numbers[s]} is recorded in {which} only (a masked or shorter sequence in one): "
        "compare recordings of the same inputs"
    )
