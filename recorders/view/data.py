"""What `gatetrace view` shows, as plain data: each function takes a `Recording` and typed
arguments, reads only what it needs through it (cell and gate folders, example and step
row groups, columns), and returns JSON-ready dicts. No web framework here, no TensorFlow.

- `overview`: the manifest's figures, and per cell and gate the saturation of every unit
  (near the ends of the gate's nonlinearity: `analysis.bounds_of`) and the per-step mean with
  a quantile band (`recorders.read.analysis`);
- `across`: for a series (a recording per epoch or checkpoint), each gate's saturation along it;
- `heatmap`: steps x units of one gate (or state) of one example;
- `unit`: one unit along the steps of one example, and the positions where it is highest;
- `select`: the units that stay above a threshold over a step range of one example (and,
  optionally, below it just before and after), as LSTMVis' select does;
- `match`: the sequences where the same units are on together, scanned in example order within
  a time budget and continued from where it stopped (`MATCH_SECONDS`);
- `parts`: a step's preactivation split into its parts (recordings with contributions);
- `compared`: the recording against another of the same network (`gatetrace view RUN --compare
  OTHER`, `recorders.read.compare`): where each side's values came from, per gate, per step, the
  units and examples that differ most;
- `Labels`: labels to score units against (`gatetrace view RUN --labels FILE`,
  `recorders.read.labels`); what the view shows with them: `recorders.view.labelled`.

Each answer carries `python`, the code that reproduces it in a notebook. Recordings may hold
infinite and NaN values (a dynamic-range model's preactivations reach -inf and +inf), which
JSON has no word for: `json_ready` writes each as text, "inf", "-inf" or "nan", wherever it
lies in an answer; null means there is nothing (no row, no value at that step).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from recorders.errors import SelectionError
from recorders.read.analysis import gate_summaries, saturation_across, top_positions
from recorders.read.compare import Comparison
from recorders.read.reader import Recording
from recorders.read.series import Series
from recorders.read.tables import Block, dense_block
from recorders.read.wording import held, origin, rounding
from recorders.write.columns import PARTS
from recorders.write.totals import RANGES, nonlinearity

__all__ = [
    "overview",
    "across",
    "heatmap",
    "unit",
    "select",
    "match",
    "parts",
    "compared",
    "Labels",
    "check_column",
    "column_block",
    "column_values",
    "rounded",
    "no_rows",
    "json_ready",
]


class Labels:
    """Labels for the step axis: one per (example, step), from an [examples, steps] array."""

    def __init__(self, table: np.ndarray):
        table = np.asarray(table)
        if table.ndim != 2:
            raise SelectionError(
                f"--tokens: expected one label per example and step ([examples, steps]), given shape {list(table.shape)}"
            )
        # labels become text one example at a time: a whole table as text can be many times larger
        self.table = table

    def of(self, example: int, steps: Sequence[int]) -> list[str] | None:
        if example >= len(self.table):
            return None
        row = self.table[example]
        return [_text(row[s]) if 0 <= s < len(row) else "" for s in steps]


def _text(label: Any) -> str:
    return label.decode("utf-8", "replace") if isinstance(label, bytes) else str(label)


def check_column(
    rec: Recording,
    cell: str,
    label: str | None = None,
    kind: str = "gate",
    column: str | None = None,
    unit: int | None = None,
) -> None:
    """Refuse a cell, gate or state, value column or unit the recording does not hold."""
    if cell not in rec.cells:
        raise SelectionError(f"cell {cell!r}: the recording's cells are {', '.join(rec.cells)}")
    if label is not None:
        known = rec.gates(cell) if kind == "gate" else rec.states(cell)
        if label not in known:
            raise SelectionError(f"{kind} {label!r} of {cell}: expected one of {', '.join(known)}")
    if (
        column is not None
        and kind == "gate"
        and column not in ("preactivation", "activation", *PARTS)
    ):
        raise SelectionError(f"column {column!r}: expected preactivation, activation or a part")
    if unit is not None and label is not None:
        width = rec.width("gates" if kind == "gate" else "states", cell, label)
        if not 0 <= unit < width:
            raise SelectionError(f"unit {unit}: {cell} {kind} {label} has units 0 to {width - 1}")


def overview(rec: Recording, quantiles: tuple[float, float] = (0.1, 0.9)) -> dict[str, Any]:
    """The recording's figures, and per cell and gate: each unit's saturation (left, right)
    and the activation's per-step mean and quantile band, from the statistics the part files
    carry where they do (the band then within `within` of the exact quantiles)."""
    summary = rec.summary()
    cells = []
    stats = gate_summaries(rec, quantiles=quantiles, exact=False)
    for name in rec.cells:
        gates = []
        for gate in rec.gates(name):
            s = stats[(name, gate)]
            units, left, right = s.saturated()
            gates.append(
                {
                    "gate": gate,
                    # where it saturates: its nonlinearity's ends (null: it does not)
                    "nonlinearity": nonlinearity(rec.cell(name), gate),
                    "below": None if np.isnan(s.low) else s.low,
                    "above": None if np.isnan(s.high) else s.high,
                    "units": units.tolist(),
                    "left": rounded(left, 4),
                    "right": rounded(right, 4),
                    "steps": s.steps.tolist(),
                    "mean": rounded(s.mean, 5),
                    "low": rounded(s.quantiles[0], 5),
                    "high": rounded(s.quantiles[1], 5),
                    # the band's quantiles are within this of the exact ones (0: exact)
                    "within": float(np.max(s.within, initial=0.0)),
                    # no statistics in its files (an older gatetrace, a NaN or an infinity):
                    # every value was read for this answer
                    "read_in_full": bool(s.read_in_full),
                }
            )
        came = origin(rec.cell(name))  # where its values came from, as compare says it
        cells.append(
            {
                **rec.cell(name),
                "gate_stats": gates,
                "states": rec.states(name),
                "values_from": {"label": came.label, "words": came.words, "own": came.own},
            }
        )
    return {
        "path": str(rec.path),
        "summary": summary,
        # what `gatetrace record --hold` held inside the model, in words (null: nothing)
        "held": held(rec.description),
        "cells": cells,
        "parts": rec.has_parts(),
        # how `gatetrace record --round-bits` rounded its values, in words (null: stored exactly)
        "rounding": rounding(rec.description),
        "python": f"from recorders import Recording, analysis\nrec = Recording({str(rec.path)!r})\n"
        "analysis.saturation(rec)\nanalysis.step_stats(rec)",
    }


def across(series: Series, at: int) -> dict[str, Any]:
    """A series' key, its complete values, the one shown (`at`), and per cell and gate the mean
    over units of the fractions left- and right-saturated at each value
    (`analysis.saturation_across`): how the gates moved along training."""
    sat = saturation_across(series)
    means = sat.groupby(["cell", "gate", series.key], observed=True)[["left", "right"]].mean()
    gates: dict[str, dict[str, dict[str, list]]] = {}
    for (cell, gate), row in means.groupby(level=[0, 1], observed=True):
        gates.setdefault(str(cell), {})[str(gate)] = {
            "at": [int(v) for v in row.index.get_level_values(2)],
            "left": rounded(row["left"].to_numpy(), 4),
            "right": rounded(row["right"].to_numpy(), 4),
        }
    return {
        "key": series.key,
        "values": series.complete,
        "at": at,
        "gates": gates,
        "python": f"from recorders import Series, analysis\nanalysis.saturation_across(Series({str(series.path)!r}))",
    }


SCALE_EXAMPLES = 1000  # the sequences a colour scale is read from (the first ones)
# and the most row groups it reads them from (a recording of small batches: as many part files)
SCALE_GROUPS = 16


def scale(
    rec: Recording, cell: str, label: str, kind: str = "gate", column: str = "activation"
) -> dict[str, Any]:
    """The colour scale of a gate's column (or a state), fixed for every sequence shown: a
    gate's activation spans its nonlinearity's range ([0, 1] for a sigmoid, [-1, 1] for a
    tanh: nothing read); any other column [0, 1] where every value of the first
    `SCALE_EXAMPLES` sequences (of at most `SCALE_GROUPS` row groups) lies there, [-1, 1]
    likewise, else symmetric about 0 to their largest magnitude (preactivations, cell states). `signed` says which colour map fits.
    The values are read a row group at a time as dense arrays (`Recording.blocks`), the first
    sequences only, from a few part files: a fraction of a second on a recording of any size."""
    check_column(rec, cell, label, kind, column)
    if kind == "gate" and column == "activation":
        ranged = RANGES.get(nonlinearity(rec.cell(cell), label))
        if ranged is not None:
            return {"lo": ranged[0], "hi": ranged[1], "signed": ranged[0] < 0}
    lo, hi, seen = np.inf, -np.inf, 0
    table, col = ("gates", column) if kind == "gate" else ("states", "value")
    for groups, block in enumerate(rec.blocks(table, cell, label, col), 1):
        finite = block.values[np.isfinite(block.values)]
        if finite.size:
            lo, hi = min(lo, float(finite.min())), max(hi, float(finite.max()))
        seen += len(block.examples)
        if seen >= SCALE_EXAMPLES or groups >= SCALE_GROUPS:
            break
    if seen == 0 or lo > hi:
        lo, hi = 0.0, 1.0
    if 0.0 <= lo and hi <= 1.0:
        return {"lo": 0.0, "hi": 1.0, "signed": False}
    if -1.0 <= lo and hi <= 1.0:
        return {"lo": -1.0, "hi": 1.0, "signed": True}
    m = float(np.float32(max(abs(lo), abs(hi))))
    return {"lo": -m, "hi": m, "signed": True}


def heatmap(
    rec: Recording,
    cell: str,
    label: str,
    example: int,
    kind: str = "gate",
    column: str = "activation",
    labels: Labels | None = None,
) -> dict[str, Any]:
    """Steps x units of one gate (or state) of one example: `values[step][unit]`, null where no row."""
    check_column(rec, cell, label, kind, column)
    block = column_block(rec, cell, label, kind, column, (example, example + 1), None)
    a = block.values
    if kind == "gate":
        code = f"rec.gate_frame([{cell!r}], [{label!r}], examples=({example}, {example + 1}), columns=[{column!r}])"
    else:
        code = f"rec.state_frame([{cell!r}], [{label!r}], examples=({example}, {example + 1}))"
    if a.size == 0:
        raise no_rows(rec, cell, label, kind, example, column=column)
    steps = block.steps.tolist()  # the steps of its rows, first to last
    values = [rounded(row, 6) for row in a[0]]
    return {
        "cell": cell,
        "label": label,
        "kind": kind,
        "column": column,
        "example": example,
        "steps": steps,
        "units": list(range(a.shape[2])),
        "values": values,
        "tokens": labels.of(example, steps) if labels is not None else None,
        "python": f"from recorders import Recording\nrec = Recording({str(rec.path)!r})\n{code}",
    }


def unit(
    rec: Recording,
    cell: str,
    gate: str,
    unit_: int,
    example: int,
    column: str = "activation",
    k: int = 10,
) -> dict[str, Any]:
    """One unit along the steps of `example`, and the `k` positions over all examples where it is highest."""
    check_column(rec, cell, gate, "gate", column, unit_)
    df = rec.gate_frame(
        [cell], [gate], examples=(example, example + 1), units=[unit_], columns=[column]
    )
    if df.empty:
        raise no_rows(rec, cell, gate, "gate", example, column=column)
    top = top_positions(rec, cell, gate, unit_, k=k, column=column)
    return {
        "cell": cell,
        "gate": gate,
        "unit": unit_,
        "example": example,
        "column": column,
        "steps": df["step"].tolist(),
        "values": rounded(df[column].to_numpy(), 6, recorded=True),
        "top": {
            "example": top["example"].tolist(),
            "step": top["step"].tolist(),
            "value": rounded(top["value"].to_numpy(), 6, recorded=True),
        },
        "python": f"from recorders import Recording, analysis\nrec = Recording({str(rec.path)!r})\n"
        f"analysis.time_courses(rec, {cell!r}, {gate!r}, examples=[{example}], units=[{unit_}], column={column!r})\n"
        f"analysis.top_positions(rec, {cell!r}, {gate!r}, {unit_}, k={k}, column={column!r})",
    }


def select(
    rec: Recording,
    cell: str,
    label: str,
    example: int,
    start: int,
    stop: int,
    threshold: float,
    kind: str = "gate",
    column: str = "activation",
    outside: bool = False,
) -> dict[str, Any]:
    """The units whose value is above `threshold` at every step of [start, stop) of
    `example`; with `outside`, also below it at the steps just before and after the range."""
    check_column(rec, cell, label, kind, column)
    if not 0 <= start < stop:
        raise SelectionError(f"steps {start}:{stop}: expected 0 <= start < stop")
    first = max(start - 1, 0)
    block = column_block(rec, cell, label, kind, column, (example, example + 1), (first, stop + 1))
    if not block.values.size or block.steps[0] > start or block.steps[-1] < stop - 1:
        raise no_rows(rec, cell, label, kind, example, (start, stop), column)
    # [steps, units] from step `first` (the block's steps run from the first step with rows)
    a = np.full((stop + 1 - first, block.values.shape[2]), np.nan)
    held = np.zeros(len(a), bool)
    a[block.steps - first] = block.values[0]
    held[block.steps - first] = True if block.present is None else block.present[0]
    if not held[start - first : stop - first].all():
        raise no_rows(rec, cell, label, kind, example, (start, stop), column)
    inside = a[start - first : stop - first]
    above = np.float64(threshold)  # compared as itself, not rounded to the values' float32
    on = (inside > above).all(axis=0)
    if outside:  # the steps just before and after the range, where they were recorded
        for edge in (start - 1 - first, stop - first):
            if 0 <= edge < len(a):
                on &= ~(a[edge] > above)
    units = np.flatnonzero(on).tolist()
    return {
        "cell": cell,
        "label": label,
        "kind": kind,
        "column": column,
        "example": example,
        "start": start,
        "stop": stop,
        "threshold": threshold,
        "outside": outside,
        "units": units,
        "python": f"from recorders import Recording\nrec = Recording({str(rec.path)!r})\n"
        f"a = rec.{'gate' if kind == 'gate' else 'state'}_array({cell!r}, {label!r}"
        f"{f', {column!r}' if kind == 'gate' else ''}, examples=({example}, {example + 1}), steps=({start}, {stop}))[0]\n"
        f"units = (a > {threshold}).all(axis=0).nonzero()[0]",
    }


MATCH_SECONDS = 0.6  # how long a match scans before it answers what it found so far


def match(
    rec: Recording,
    cell: str,
    label: str,
    units: Sequence[int],
    threshold: float,
    length: int = 1,
    kind: str = "gate",
    column: str = "activation",
    k: int = 20,
    start: int = 0,
    seconds: float | None = None,
) -> dict[str, Any]:
    """The sequences where all `units` are above `threshold` together for at least `length`
    consecutive steps, each with its longest such run (the first of the longest), scanned in
    example order (the part files' order) from example `start` until `k` are found or
    `seconds` (default `MATCH_SECONDS`) are spent, whatever the recording's size: the matches
    are exactly those of the examples [start, next) (`next`: null once every example is
    scanned), `scanned` the sequences read of those, `sequences` the recording's. Asked again
    from `next`, it goes on from there. The threshold is compared as itself, not rounded to
    the values' float32."""
    check_column(rec, cell, label, kind, column)
    if not units:
        raise SelectionError("match: select some units first")
    for u in units:
        check_column(rec, cell, label, kind, column, u)
    # (from the end is where a scan that stopped at the last example goes on: nothing left)
    if start > 0 and not any(start <= hi for _, hi in rec.examples):
        raise SelectionError(
            f"from={start}: no example from there (the recording holds examples {rec.examples})"
        )
    table, col = ("gates", column) if kind == "gate" else ("states", "value")
    above = np.float64(threshold)
    wanted = np.asarray(units, np.intp)
    deadline = time.perf_counter() + (MATCH_SECONDS if seconds is None else seconds)
    found: list[dict[str, int]] = []
    scanned, after = 0, None  # after: the last example scanned
    for block in rec.blocks(table, cell, label, col, (start, None)):
        keep = block.examples >= start
        examples = block.examples[keep]
        if not len(examples):
            continue
        values = block.values[:, :, wanted]  # [examples, steps, units asked]
        on = (values[keep] > above).all(axis=2)  # NaN (no row) is off
        first = int(block.steps[0])
        steps = np.zeros((len(examples), int(block.steps[-1]) - first + 1), bool)
        steps[:, block.steps - first] = on  # consecutive steps, those without rows off
        run, begin = _longest_runs(steps)
        hits = np.flatnonzero(run >= length)
        if len(found) + len(hits) >= k:  # the k-th match ends the scan
            hits = hits[: k - len(found)]
            examples = examples[: hits[-1] + 1]
        found += [
            {
                "example": int(examples[e]),
                "start": int(begin[e]) + first,
                "stop": int(begin[e] + run[e]) + first,
                "length": int(run[e]),
            }
            for e in hits
        ]
        scanned += len(examples)
        after = int(examples[-1])
        if len(found) >= k or time.perf_counter() >= deadline:
            break
    else:
        after = None  # every example from `start` on: nothing left
    stop = None if after is None else after + 1
    code = (
        f"a = rec.{'gate' if kind == 'gate' else 'state'}_array({cell!r}, {label!r}"
        f"{f', {column!r}' if kind == 'gate' else ''}, examples=({start}, {stop}))"
        f"[:, :, {list(map(int, units))}]\n"
        f"on = (a > {threshold}).all(axis=2)   # [examples, steps]: where the units are on together"
    )
    return {
        "cell": cell,
        "label": label,
        "kind": kind,
        "column": column,
        "units": [int(u) for u in units],
        "threshold": threshold,
        "length": length,
        "matches": found,
        "from": start,
        "next": stop,
        "scanned": scanned,
        "sequences": sum(b - a for a, b in rec.examples),
        "python": f"from recorders import Recording\nrec = Recording({str(rec.path)!r})\n{code}",
    }


def parts(rec: Recording, cell: str, gate: str, example: int, step: int) -> dict[str, Any]:
    """The preactivation of every unit of `gate` at one step, and its parts (null where the cell has none)."""
    check_column(rec, cell, gate, "gate")
    if not rec.has_parts():
        raise SelectionError(
            "this recording holds no parts: record with --values preactivation,activation,contributions"
        )
    df = rec.gate_frame(
        [cell],
        [gate],
        steps=(step, step + 1),
        examples=(example, example + 1),
        columns=["preactivation", *PARTS],
    )
    if df.empty:
        raise no_rows(rec, cell, gate, "gate", example, (step, step + 1), "preactivation")
    out = {p: rounded(df[p], 6) for p in ("preactivation", *PARTS)}
    return {
        "cell": cell,
        "gate": gate,
        "example": example,
        "step": step,
        "units": df["unit"].tolist(),
        **out,
        "python": f"from recorders import Recording\nrec = Recording({str(rec.path)!r})\n"
        f"rec.gate_frame([{cell!r}], [{gate!r}], steps=({step}, {step + 1}), examples=({example}, {example + 1}), "
        f"columns=['preactivation', {', '.join(map(repr, PARTS))}])",
    }


def column_values(
    rec: Recording,
    cell: str,
    label: str,
    kind: str,
    column: str,
    examples,
    steps,
    units: Sequence[int] | None = None,
) -> np.ndarray:
    """[examples, steps, units] of a gate column or a state, only the `units` asked (NaN where no row)."""
    return column_block(rec, cell, label, kind, column, examples, steps, units).values


def column_block(
    rec: Recording,
    cell: str,
    label: str,
    kind: str,
    column: str,
    examples,
    steps,
    units: Sequence[int] | None = None,
) -> Block:
    """`column_values` as a `Block`: with the examples and the steps of its axes (from the first
    step read to the last)."""
    if kind == "gate":
        df = rec.gate_frame([cell], [label], steps, examples, units, columns=[column])
    else:
        df = rec.state_frame([cell], [label], steps, examples, units)
        column = "value"
    if units is not None:  # the unit axis holds the units asked, in that order
        position = {int(u): k for k, u in enumerate(units)}
        df = df.assign(unit=df["unit"].map(position))
    block = dense_block(df, column, examples, rec.examples, rec.allot)
    a = block.values
    if units is not None and a.shape[2] < len(units):
        a = np.concatenate(
            [a, np.full(a.shape[:2] + (len(units) - a.shape[2],), np.nan, np.float32)], axis=2
        )
    return block._replace(values=a)


def rounded(
    values: Sequence[float] | np.ndarray, digits: int, recorded: bool = False
) -> list[float | None]:
    """Values for JSON: rounded as Python's float64 `round` does (exact for any float32, where
    numpy's and pandas' `round` of float32 overflow to an infinity past about 3.4e32), NaN as
    null (nothing there) or, with `recorded` (every value is a row's), NaN itself; an infinity
    and NaN stay themselves (`json_ready` writes them)."""
    return [
        (float("nan") if recorded else None) if np.isnan(v) else round(float(v), digits)
        for v in values
    ]


def no_rows(
    rec: Recording,
    cell: str,
    label: str,
    kind: str,
    example: int,
    steps: tuple[int, int] | None = None,
    column: str = "activation",
) -> SelectionError:
    """The refusal of an example, or of steps [start, stop) of it, where `label` of `cell` has
    no rows (or not at each step): naming the examples the recording holds, or the steps this
    example's rows hold."""
    what = f"{cell} {kind} {label}"
    held_examples = any(lo <= example < hi for lo, hi in rec.examples)
    if not held_examples:
        return SelectionError(
            f"example {example}: no rows of {what} (the recording holds examples {rec.examples})"
        )
    block = column_block(rec, cell, label, kind, column, (example, example + 1), None)
    if not block.values.size:
        present = np.zeros(0, np.int64)
    else:
        present = block.steps if block.present is None else block.steps[block.present[0]]
    if not len(present):
        return SelectionError(f"example {example}: no rows of {what} (it has no steps recorded)")
    lo, hi = int(present[0]), int(present[-1])
    holds = f"steps {lo} to {hi}" if len(present) == hi - lo + 1 else f"steps {present.tolist()}"
    asked = "" if steps is None else f"steps {steps[0]}:{steps[1]} of "
    return SelectionError(
        f"{asked}example {example}: not every step has rows of {what} (the example holds {holds})"
    )


def json_ready(value: Any) -> Any:
    """`value` (dicts, lists and tuples of numbers, text, booleans and None) as JSON can hold
    it: every float that is not finite as text, "inf", "-inf" or "nan" (None stays null),
    numpy's numbers as Python's. What `gatetrace view` answers and `gatetrace compare --json`
    prints."""
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if np.isfinite(v):
            return v
        return "nan" if np.isnan(v) else "inf" if v > 0 else "-inf"
    return value


def _longest_runs(on: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a boolean [rows, steps] array, the length and start of its longest run of True."""
    rows, steps = on.shape
    length = np.zeros(rows, np.int64)
    start = np.zeros(rows, np.int64)
    run = np.zeros(rows, np.int64)
    for t in range(steps):
        run = np.where(on[:, t], run + 1, 0)
        longer = run > length
        length = np.where(longer, run, length)
        start = np.where(longer, t - run + 1, start)
    return length, start


def compared(c: Comparison) -> dict[str, Any]:
    """A comparison (`recorders.read.compare`) as the view's panel shows it: where each side's
    values came from (and the notes on replays of equal weights), its tables as records, the
    differences per step by cell and gate, the gate first beyond the tolerance."""

    along: dict[str, dict[str, dict[str, list]]] = {}
    for (cell, gate), g in c.steps.groupby(["cell", "gate"], sort=False):
        along.setdefault(str(cell), {})[str(gate)] = {
            "step": g["step"].astype(int).tolist(),
            "mean_abs": rounded(g["mean_abs"].to_numpy(), 9),
            "max_abs": rounded(g["max_abs"].to_numpy(), 9),
        }
    first = c.first_beyond()
    return json_ready(
        {
            "a": c.a,
            "b": c.b,
            "column": c.column,
            "tolerance": c.tolerance,
            "inputs": c.inputs,
            "gates": c.records("gates"),
            "steps": along,
            "units": c.records("units"),
            "examples": c.records("examples"),
            # the model's own outputs both hold (record --outputs): where a hold moved them
            "outputs": c.records("outputs"),
            # the gates one recording holds and the other does not (recorded with --gates)
            "not_compared": [n._asdict() for n in c.not_compared],
            # where each side's values came from, and what a 0 proves where both are replays
            "origins": [o.described() for o in c.origins],
            "notes": c.notes(),
            "first_beyond": None
            if first is None
            else {"cell": first[0], "gate": first[1], "step": first[2]},
            "python": (
                "from recorders import Recording, compare\n"
                f"found = compare(Recording({c.a!r}), Recording({c.b!r}), column={c.column!r}, "
                f"tolerance={c.tolerance!r})\nfound.gates, found.steps, found.first_beyond()"
            ),
        }
    )
