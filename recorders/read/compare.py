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

The gates compared are those both recordings hold: a gate one of them left out (`--gates`)
is listed in `Comparison.not_compared`, with the recording that holds it; where the two share
no gate at all, compare refuses in one line.

For each gate of each pair, over every value both recorded, of `column` (the activation by
default), the difference `b - a` in float64, IEEE's but for values that are the same (an
infinity of the same sign in both, NaN in both), whose difference is 0: an infinity against
anything else differs by infinity; a NaN against a number is not a difference but counted
apart (nan_a_only, nan_b_only), and beyond the tolerance:

    gates     values (both recorded); max_abs, mean_abs and rmse (over those not NaN in one
              only); units_beyond: the share of units whose largest difference exceeds
              `tolerance`; first_step_beyond: the first step where any difference does;
              saturated_a_only / saturated_b_only: values saturated (near either end of the
              gate's nonlinearity, as `analysis.saturation` counts them: below 0.1 or above
              0.9 for sigmoid, beyond -0.9 or 0.9 for tanh) in one recording and not in the
              other; nan_a_only / nan_b_only: values NaN in one recording and not in the other
    steps     the same three per step: how the difference grows along the sequence
    units     the `top` units of any gate with the largest mean absolute difference
    examples  the `top` examples of any gate with the largest mean absolute difference

The model's own outputs both recordings hold (`gatetrace record --outputs`: `Comparison.outputs`),
each compared the same way over every value both hold: values, max_abs, mean_abs, rmse,
beyond (how many differ by more than the tolerance), first_step_beyond (an output that is a
sequence), nan_a_only, nan_b_only: where a held unit (`--hold`) moved what the model predicts.

A side recorded with its values rounded (`gatetrace record --round-bits`) is named in
`Comparison.notes` with the error its rounding allows: a difference within it may be the
rounding's, not the models'.

Where each side's values came from, per pair of cells (`Comparison.origins`, the gates' `from_a`
and `from_b`; `recorders.read.wording.origin`): the runtime's own tensors, or gatetrace's replay of
the cell from its weights. Where both sides are replays of equal weights (their weights tables
agree), a difference of 0 proves only that the weights are equal: `Comparison.notes` says so.

What is known of the inputs (`Comparison.inputs`): the same values where both manifests keep
digests of them, else why one keeps none: a training run's log (`GateLoggingHook`: the batch of
that step, which a training run changes at every step), a stream of unknown length or inputs
that are not numbers, an older gatetrace, or a description written through `RecordingWriter`.

`Comparison.first_beyond` names the gate whose difference exceeds the tolerance at the
earliest step; `Comparison.table` is all four as one long table (its `level` column says
which; `from_a`, `from_b` and `replays_of_equal_weights` on every row), what `gatetrace compare
--out` writes; `Comparison.records` a level's rows for JSON
(NaN, where a row has nothing to compare, as None). Each gate of each recording is read once,
as an array, within each reader's memory budget (a `MemoryBudgetError` says how to give
more); no array is sized by what a manifest claims. No TensorFlow.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from recorders.errors import MemoryBudgetError, SelectionError
from recorders.read.analysis import bounds_of
from recorders.read.reader import Recording
from recorders.read.tables import dense_block
from recorders.read.wording import Origin, held, origin, ranges, rounding

__all__ = ["compare", "Comparison", "NotCompared", "Sides", "pair_cells"]

_LEVELS = ("gates", "steps", "units", "examples")
# the columns that count (integers, null in the levels that lack them)
# where each side's values came from, on every row of `Comparison.table`
_SIDES = ("from_a", "from_b", "replays_of_equal_weights")
_COUNTS = ("step", "unit", "example", "first_step_beyond", "values", "nan_a_only", "nan_b_only")


class NotCompared(NamedTuple):
    """A gate of a pair of cells that one recording holds and the other does not (recorded
    with `--gates`): `only_in` the path of the one that holds it, None where neither does."""

    cell: str
    cell_b: str
    gate: str
    only_in: str | None


class Sides(NamedTuple):
    """Where the values of a pair of cells came from, in A and in B (`wording.origin`), and
    whether both are gatetrace's replays of equal weights (their weights tables agree)."""

    cell: str
    cell_b: str
    a: Origin
    b: Origin
    replays_of_equal_weights: bool

    def note(self) -> str | None:
        """What a difference of 0 proves here, where both are replays of equal weights."""
        if not self.replays_of_equal_weights:
            return None
        named = self.cell if self.cell == self.cell_b else f"{self.cell} (B: {self.cell_b})"
        return (
            f"cell {named}: both sides are gatetrace's replays of equal weights (the two weights "
            "tables agree), not the runtimes' own tensors: their differences are those of the two "
            "replays' arithmetic, and a difference of 0 proves only that the weights are equal, "
            "not that the two runtimes compute alike"
        )

    def described(self) -> dict[str, Any]:
        """As JSON shows it."""
        return {
            "cell": self.cell,
            "cell_b": self.cell_b,
            **{
                side: {"from": o.label, "path": o.path, "own": o.own, "words": o.words}
                for side, o in (("a", self.a), ("b", self.b))
            },
            "replays_of_equal_weights": self.replays_of_equal_weights,
        }


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
    not_compared: tuple[NotCompared, ...] = ()
    origins: tuple[Sides, ...] = ()
    held: tuple[str | None, str | None] = (None, None)  # A's and B's holds, in words
    outputs: pd.DataFrame = field(default_factory=lambda: _no_outputs(), repr=False)
    rounding: tuple[str | None, str | None] = (None, None)  # A's and B's rounding, in words

    def notes(self) -> list[str]:
        """What was held inside either model (`gatetrace record --hold`), how either side's
        values were rounded (`--round-bits`), and what a difference of 0 proves where both
        sides are replays of equal weights."""
        holds = [
            f"{side} was recorded with {h}" for side, h in zip("AB", self.held, strict=True) if h
        ]
        rounded = [
            f"{side} was recorded with {r}: a difference within that much of a value may be the "
            "rounding's, not the models'"
            for side, r in zip("AB", self.rounding, strict=True)
            if r
        ]
        return holds + rounded + [n for n in (s.note() for s in self.origins) if n is not None]

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
        """The four frames as one long table, `level` first, then the cells, where each side's
        values came from and whether both are replays of equal weights (a column a level lacks
        is null)."""
        frames = [
            getattr(self, level)
            .drop(columns=["from_a", "from_b"], errors="ignore")
            .assign(level=level)
            for level in _LEVELS
        ]
        sides = pd.DataFrame(
            [
                (s.cell, s.cell_b, s.a.label, s.b.label, s.replays_of_equal_weights)
                for s in self.origins
            ],
            columns=["cell", "cell_b", *_SIDES],
        )
        out = pd.concat(frames, ignore_index=True).merge(sides, on=["cell", "cell_b"], how="left")
        if len(self.outputs):  # the model's outputs, one row each (no cell: its text null)
            out = pd.concat([out, self.outputs.assign(level="outputs")], ignore_index=True)
            for column in out.columns:
                if pd.api.types.is_string_dtype(out[column]) or out[column].dtype == object:
                    out[column] = out[column].astype(object).where(out[column].notna(), None)
        for column in _COUNTS:
            out[column] = out[column].astype("Int64")
        first = ["level", "cell", "cell_b", *_SIDES]
        return out[[*first, *[c for c in out.columns if c not in first]]]

    def records(self, level: str) -> list[dict[str, Any]]:
        """The rows of one level (gates, steps, units, examples or outputs) as dicts of Python values,
        every float exact (pandas' own JSON rounds them): None where a row has nothing to
        compare (NaN); a difference that is infinite stays `inf` (JSON has no word for it:
        `recorders.view.data.json_ready` writes it as "inf")."""
        if level not in (*_LEVELS, "outputs"):
            raise SelectionError(f"level {level!r}: expected one of {', '.join(_LEVELS)}, outputs")
        frame = getattr(self, level)
        return frame.astype(object).where(frame.notna(), None).to_dict(orient="records")


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
    has none (`_no_digest` says why)."""
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
            f"{a.path} holds examples {ranges(a.examples)} and {b.path} {ranges(b.examples)}: compare recordings of "
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
    missing = [rec for rec, d in zip((a, b), digests, strict=True) if d is None]
    why: dict[str, list[str]] = {}  # a reason: the recordings it is the reason of
    for rec in missing:
        named, reason = _no_digest(rec)
        why.setdefault(reason, []).append(named)
    said = "; ".join(f"{' and '.join(names)}: {reason}" for reason, names in why.items())
    advice = (
        "a training run usually trains each step on another batch (gatetrace demo's does), and "
        "where it did, the differences are the inputs' as well as the weights'"
        if any(_logged_while_training(rec) for rec in missing)
        else "make sure both were fed the same values"
    )
    return f"not checked: {said}; {advice}"


def _logged_while_training(rec: Recording) -> bool:
    """Whether `rec` is a step GateLoggingHook logged while training (`tracer.run.hook`)."""
    return rec.description.get("source", {}).get("format") == "training run"


def _no_digest(rec: Recording) -> tuple[str, str]:
    """`rec` as named, and why its manifest keeps no digest of its inputs, as far as it says."""
    held = rec.description
    if _logged_while_training(rec):
        return (
            f"{rec.path} (global step {held.get('global_step')})",
            "gates GateLoggingHook logged while training, each on the batch its global step "
            "trained on, with no digest of it",
        )
    if "digests" in held:  # gatetrace record of this version: no feed of sequences it could hash
        return (
            str(rec.path),
            "fed a stream of unknown length, or inputs that are not numbers, of which gatetrace "
            "record keeps no digest",
        )
    if held.get("gatetrace_version"):
        return str(rec.path), "recorded by a gatetrace that kept no digest of the inputs"
    return (
        str(rec.path),
        "written through RecordingWriter, with a description that keeps no digest of the inputs",
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
    shared, not_compared = _shared_gates(a, b, pairs)
    sides = {(ca, cb): _sides(a, b, ca, cb) for ca, cb in pairs}
    gates, steps, units, examples = [], [], [], []
    for ca, cb in pairs:
        for gate in shared[ca, cb]:
            bx, by = _read(a, ca, gate, column), _read(b, cb, gate, column)
            _same_places(a, b, ca, cb, gate, bx, by)
            # both in float64, their difference, its square, the masks
            _allot(a, bx.values.shape, 48, f"comparing gate {gate} of cell {ca}")
            present, numbers, step_numbers = bx.present, bx.examples, bx.steps
            x, y = bx.values.astype(np.float64), by.values.astype(np.float64)
            del bx, by
            d, compared, nan_a, nan_b = _differences(x, y, present)
            apart = nan_a | nan_b  # NaN in one only: beyond any tolerance
            keys = {"cell": ca, "cell_b": cb, "gate": gate}
            came = {"from_a": sides[ca, cb].a.label, "from_b": sides[ca, cb].b.label}
            g = _reduced(d, compared, (0, 1, 2))
            per_unit = _reduced(d, compared, (0, 1))
            per_step = _reduced(d, compared, (0, 2))
            per_example = _reduced(d, compared, (1, 2))
            beyond = np.flatnonzero((per_step["max_abs"] > tolerance) | apart.any(axis=(0, 2)))
            units_beyond = (per_unit["max_abs"] > tolerance) | apart.any(axis=(0, 1))
            gates.append(
                {
                    **keys,
                    **came,
                    "values": int(present.sum()) * d.shape[2],
                    **{k: float(v) for k, v in g.items()},
                    "units_beyond": float(np.mean(units_beyond)) if d.shape[2] else 0.0,
                    "first_step_beyond": int(step_numbers[beyond[0]]) if len(beyond) else None,
                    **_saturated(a, ca, gate, x, y),
                    "nan_a_only": int(nan_a.sum()),
                    "nan_b_only": int(nan_b.sum()),
                }
            )
            steps.append(pd.DataFrame({**keys, "step": step_numbers, **per_step}))
            units.append(pd.DataFrame({**keys, "unit": np.arange(d.shape[2]), **per_unit}))
            examples.append(pd.DataFrame({**keys, "example": numbers, **per_example}))
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
        not_compared,
        tuple(sides.values()),
        (held(a.description), held(b.description)),
        _outputs(a, b, tolerance),
        (rounding(a.description), rounding(b.description)),
    )


def _sides(a: Recording, b: Recording, ca: str, cb: str) -> Sides:
    """Where the values of cells `ca` of A and `cb` of B came from; where both are replays,
    whether their weights tables agree (read only then)."""
    oa, ob = origin(a.cell(ca)), origin(b.cell(cb))
    same = oa.replayed and ob.replayed and _equal_weights(a, b, ca, cb)
    return Sides(ca, cb, oa, ob, same)


def _equal_weights(a: Recording, b: Recording, ca: str, cb: str) -> bool:
    """Whether cell `ca` of A and `cb` of B were recorded with the same weights: the same rows
    of their weights tables (gate, source, row, unit) holding the same values (False where
    either holds none)."""
    keys = ["gate", "source", "row", "unit"]
    wa, wb = (
        w.astype({"gate": str, "source": str}).sort_values(keys, kind="stable")
        for w in (_weights(a, ca), _weights(b, cb))
    )
    if wa.empty or len(wa) != len(wb):
        return False
    return all(np.array_equal(wa[k].to_numpy(), wb[k].to_numpy()) for k in keys) and bool(
        np.array_equal(wa["value"].to_numpy(), wb["value"].to_numpy(), equal_nan=True)
    )


def _weights(rec: Recording, cell: str) -> pd.DataFrame:
    try:
        return rec.weights_frame(cell)
    except MemoryBudgetError as err:
        raise _advised(err, rec) from None


def _shared_gates(
    a: Recording, b: Recording, pairs: list[tuple[str, str]]
) -> tuple[dict[tuple[str, str], list[str]], tuple[NotCompared, ...]]:
    """The gates of each pair that both recordings hold, and those one of them (or neither)
    does not; SelectionError where no pair shares a gate."""
    shared: dict[tuple[str, str], list[str]] = {}
    apart = []
    for ca, cb in pairs:
        in_a, in_b = set(a.recorded_gates(ca)), set(b.recorded_gates(cb))
        shared[ca, cb] = [g for g in a.gates(ca) if g in in_a and g in in_b]
        for g in a.gates(ca):
            if g not in shared[ca, cb]:
                only = str(a.path) if g in in_a else str(b.path) if g in in_b else None
                apart.append(NotCompared(ca, cb, g, only))
    if pairs and not any(shared.values()):
        held = "; ".join(
            f"{rec.path} gates {','.join(rec.recorded_gates(c)) or 'none'} of cell {c}"
            for ca, cb in pairs
            for rec, c in ((a, ca), (b, cb))
        )
        raise SelectionError(
            f"the two recordings share no gate to compare ({held}): record both with the same "
            "--gates (or without --gates)"
        )
    return shared, tuple(apart)


class _Gate(NamedTuple):
    """One gate as `_read` gives it (a `Block` whose `present` is always there)."""

    examples: np.ndarray
    steps: np.ndarray
    values: np.ndarray
    present: np.ndarray


def _read(rec: Recording, cell: str, gate: str, column: str) -> _Gate:
    """One gate's `column` as dense arrays over the recording's complete examples (or, where
    they are far more than its rows could fill, the examples present: `tables.dense_block`)."""
    try:
        frame = rec.gate_frame([cell], [gate], columns=[column])
        block = dense_block(frame, column, None, rec.examples, rec.allot)
    except MemoryBudgetError as err:
        raise _advised(err, rec) from None
    present = block.present
    if present is None:  # (every (example, step) has rows)
        present = np.ones(block.values.shape[:2], bool)
    return _Gate(block.examples, block.steps, block.values, present)


def _allot(rec: Recording, shape: tuple[int, ...], itemsize: int, what: str) -> None:
    """`rec.allot`, its error saying what works for compare."""
    try:
        rec.allot(shape, itemsize, what)
    except MemoryBudgetError as err:
        raise _advised(err, rec) from None


def _advised(err: MemoryBudgetError, rec: Recording) -> MemoryBudgetError:
    """A budget error as compare says it: compare reads each gate whole (it selects no
    examples or steps), so a larger budget is what works."""
    return err.advised(
        f"compare reads each gate whole; open {rec.path} with a larger budget, "
        "Recording(path, memory=...), and compare in Python"
    )


def _same_places(
    a: Recording, b: Recording, ca: str, cb: str, gate: str, bx: _Gate, by: _Gate
) -> None:
    """SelectionError naming the first (example, step) one recording holds and the other does
    not (a masked or shorter sequence in one), or the units where they differ."""
    where = f"gate {gate} of cell {ca} ({a.path}) and {cb} ({b.path})"
    if not (
        np.array_equal(bx.examples, by.examples)
        and np.array_equal(bx.steps, by.steps)
        and np.array_equal(bx.present, by.present)
    ):
        held = []
        for blk in (bx, by):
            e, s = np.nonzero(blk.present)
            held.append(blk.examples[e].astype(np.int64) * 2**32 + blk.steps[s])
        first = int(np.setxor1d(held[0], held[1])[0])
        which = a.path if np.isin(first, held[0]) else b.path
        raise SelectionError(
            f"{where}: example {first >> 32}, step {first & (2**32 - 1)} is recorded in {which} "
            "only (a masked or shorter sequence in one): compare recordings of the same inputs"
        )
    if bx.values.shape != by.values.shape:
        raise SelectionError(
            f"{where} hold units 0 to {bx.values.shape[2] - 1} and 0 to {by.values.shape[2] - 1}: "
            "compare recordings of the same cells"
        )


def _differences(
    x: np.ndarray, y: np.ndarray, present: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """|y - x| where both hold a value (`present`: [examples, steps]) and it is NaN in neither
    or both, 0 elsewhere and where the two are the same (equal infinities, NaN in both); which
    values are compared; which are NaN in x only, and in y only."""
    held = np.broadcast_to(present[:, :, None], x.shape)
    nan_x, nan_y = np.isnan(x), np.isnan(y)
    nan_a, nan_b = held & nan_x & ~nan_y, held & nan_y & ~nan_x
    with np.errstate(invalid="ignore"):
        d = np.subtract(y, x)
        np.abs(d, out=d)
        d[(x == y) | (nan_x & nan_y) | nan_a | nan_b | ~held] = 0.0
    return d, held & ~(nan_a | nan_b), nan_a, nan_b


def _saturated(a: Recording, cell: str, gate: str, x: np.ndarray, y: np.ndarray) -> dict:
    """How many values are saturated in A and not in B, and the other way (0 for a gate that
    does not saturate), at the gate's nonlinearity's thresholds (`analysis.bounds_of`)."""
    low, high = bounds_of(a, cell, gate)
    if np.isnan(low):
        return {"saturated_a_only": 0, "saturated_b_only": 0}
    sa, sb = (x < low) | (x > high), (y < low) | (y > high)
    return {"saturated_a_only": int((sa & ~sb).sum()), "saturated_b_only": int((sb & ~sa).sum())}


_OUTPUT_COLUMNS = (
    "output",
    "values",
    "max_abs",
    "mean_abs",
    "rmse",
    "beyond",
    "first_step_beyond",
    "nan_a_only",
    "nan_b_only",
)


def _no_outputs() -> pd.DataFrame:
    return pd.DataFrame({c: [] for c in _OUTPUT_COLUMNS})


def _outputs(a: Recording, b: Recording, tolerance: float) -> pd.DataFrame:
    """Each output both recordings hold, compared over the values both hold (see the module
    docstring); each read within its reader's memory budget."""
    rows = []
    shapes = [{o["name"]: o for o in r.description.get("outputs", [])} for r in (a, b)]
    for name in [n for n in a.outputs if n in b.outputs]:
        shown = [
            f"{o['units']} units" + (f" by {o.get('steps', 'open')} steps" if o["sequence"] else "")
            for o in (shapes[0][name], shapes[1][name])
        ]
        if shown[0] != shown[1]:
            raise SelectionError(
                f"output {name} is {shown[0]} in {a.path} and {shown[1]} in {b.path}: not one output to compare"
            )
        try:
            fa, fb = a.output_frame(name), b.output_frame(name)
            a.allot((len(fa) + len(fb),), 48, f"comparing output {name}")
        except MemoryBudgetError as err:
            raise _advised(err, a) from None
        keys = [k for k in ("example", "step", "unit") if k in fa.columns]
        both = fa.merge(fb, on=keys, suffixes=("_a", "_b"), how="outer", indicator=True)
        apart = both[both["_merge"] != "both"]
        if len(apart):
            row = apart.iloc[0]
            where = ", ".join(f"{k} {int(row[k])}" for k in keys)
            only = a.path if row["_merge"] == "left_only" else b.path
            raise SelectionError(
                f"output {name}: {where} is recorded in {only} only; record both on the same sequences"
            )
        x = both["value_a"].to_numpy(np.float64)[:, None, None]
        y = both["value_b"].to_numpy(np.float64)[:, None, None]
        d, compared, nan_a, nan_b = _differences(x, y, np.ones((len(both), 1), bool))
        over = (d[:, 0, 0] > tolerance) | nan_a[:, 0, 0] | nan_b[:, 0, 0]
        steps = both["step"].to_numpy()[over] if "step" in both.columns else None
        rows.append(
            {
                "output": name,
                "values": len(both),
                **{k: float(v) for k, v in _reduced(d, compared, (0, 1, 2)).items()},
                "beyond": int(over.sum()),
                "first_step_beyond": int(steps.min()) if steps is not None and len(steps) else None,
                "nan_a_only": int(nan_a.sum()),
                "nan_b_only": int(nan_b.sum()),
            }
        )
    out = pd.DataFrame(rows, columns=list(_OUTPUT_COLUMNS)) if rows else _no_outputs()
    for column in ("values", "beyond", "first_step_beyond", "nan_a_only", "nan_b_only"):
        out[column] = out[column].astype("Int64")
    return out


def _reduced(d: np.ndarray, held: np.ndarray, axes: tuple[int, ...]) -> dict[str, np.ndarray]:
    """max_abs, mean_abs and rmse of the absolute differences `d` over `axes`, where `held`
    (NaN where nothing is)."""
    n = held.sum(axis=axes)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return {
            "max_abs": np.where(n > 0, d.max(axis=axes, initial=0.0), np.nan),
            "mean_abs": np.where(n > 0, d.sum(axis=axes) / n, np.nan),
            "rmse": np.where(n > 0, np.sqrt((d * d).sum(axis=axes) / n), np.nan),
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
