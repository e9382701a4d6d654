"""Reading a recording back: what it holds, and selections of it, reading only what is asked.

    rec = Recording("run1")
    rec.cells                                   # ['rnn/basic_lstm_cell']
    rec.gates("rnn/basic_lstm_cell")            # ['i', 'j', 'f', 'o']
    df = rec.gate_frame(gates=["f"], steps=(0, 10), columns=["activation"])
    a = rec.gate_array("rnn/basic_lstm_cell", "f")          # [examples, steps, units]

Selections are pushed down: cell and gate (or state) pick partition folders, and
example and step ranges are checked against each row group's statistics, so only the
files, row groups and columns needed are read (every row group holds every unit: a unit
range filters rows). `cell`, `gate` and `state`
come back as categoricals. This module does not import TensorFlow.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from recorders.errors import RecordingError, SelectionError
from recorders.long import GATE_COLUMNS, PARTS
from recorders.parquet import partition_dir, partition_value
from recorders.progress import Intervals, read_progress

__all__ = ["Recording", "Block", "part_shares"]

Range = tuple[int | None, int | None]


class Recording:
    """A recording folder written by `gatetrace record` (finished, or partial after a crash)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not (self.path / "gates").is_dir():
            raise RecordingError(f"{self.path} is not a gatetrace recording: it has no gates/ folder")
        manifest = self.path / "manifest.json"
        progress = read_progress(self.path)
        self.manifest: dict[str, Any] | None = json.loads(manifest.read_text()) if manifest.is_file() else None
        self.complete = self.manifest is not None
        description = self.manifest or next((p["description"] for p in progress.values()), None)
        if description is None:
            raise RecordingError(f"{self.path} has neither manifest.json nor a progress file; it was not written by gatetrace")
        self.description: dict[str, Any] = description
        self._cells = {c["name"]: c for c in description["cells"]}
        # A name too long for a folder is stored shortened in the `cell` column (see
        # `recorders.parquet.partition_value`); frames map it back.
        self._stored = {name: partition_value("cell", name) for name in self._cells}
        self._names = {stored: name for name, stored in self._stored.items() if stored != name}
        done = Intervals()
        for p in progress.values():
            for start, stop in p["complete"]:
                done.add(start, stop)
        self._examples = done

    def __repr__(self) -> str:
        state = "complete" if self.complete else "partial"
        return f"Recording({str(self.path)!r}, {len(self._cells)} cells, {self._examples.total():,} examples, {state})"

    # -- what it holds ---------------------------------------------------------------------

    @property
    def cells(self) -> list[str]:
        return list(self._cells)

    def cell(self, name: str) -> dict[str, Any]:
        """The description of one cell (kind, units, gates, states, steps, ...)."""
        try:
            return self._cells[name]
        except KeyError:
            raise SelectionError(f"no cell {name!r} in {self.path}; its cells are {', '.join(self._cells)}") from None

    def gates(self, cell: str) -> list[str]:
        return list(self.cell(cell)["gates"])

    def states(self, cell: str) -> list[str]:
        return list(self.cell(cell)["states"])

    def units(self, cell: str) -> int:
        return int(self.cell(cell)["units"])

    @property
    def examples(self) -> list[list[int]]:
        """The complete example ranges, [start, stop) pairs."""
        return self._examples.pairs()

    def summary(self) -> dict[str, Any]:
        """What the folder holds, read from its manifest (or progress files) and its files'
        metadata only: the model, whether it is complete, the examples, each cell with the
        steps it holds, the rows of each table, the shards finished, and the bytes on disk."""
        progress = read_progress(self.path)
        rows = {t: ds.dataset(self.path / t, format="parquet").count_rows() if (self.path / t).is_dir() else 0
                for t in ("gates", "states")}
        weights = self.path / "weights.parquet"
        rows["weights"] = pq.ParquetFile(weights).metadata.num_rows if weights.is_file() else 0
        shards = self.description.get("shards") if self.complete else None
        return {
            "path": str(self.path),
            "complete": self.complete,
            "source": self.description["source"],
            "gatetrace_version": self.description.get("gatetrace_version"),
            "examples": {"complete": self.examples, "count": self._examples.total()},
            "cells": [
                {"name": name, "kind": c["kind"], "units": c["units"], "gates": c["gates"], "states": c["states"],
                 "steps": int(len(self.steps(name))), "path": c.get("path")}
                for name, c in self._cells.items()
            ],
            "rows": rows,
            "shards": {"finished": sum(bool(p.get("finished")) for p in progress.values()), "of": shards or len(progress)},
            "bytes": sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file()),
        }

    def steps(self, cell: str) -> np.ndarray:
        """The input positions recorded for `cell` (read from the step column of one file)."""
        files = sorted((self.path / "gates").glob(f"cell={_folder(cell)}/gate=*/part-*.parquet"))
        if not files:
            return np.zeros(0, np.int32)
        return np.unique(pd.read_parquet(files[0], columns=["step"])["step"].to_numpy())

    # -- selections ------------------------------------------------------------------------

    def gate_frame(
        self,
        cells: Sequence[str] | None = None,
        gates: Sequence[str] | None = None,
        steps: Range | None = None,
        examples: Range | None = None,
        units: Sequence[int] | None = None,
        columns: Sequence[str] = ("preactivation", "activation"),
    ) -> pd.DataFrame:
        """The long gate table for a selection: example, step, unit, the value columns, cell, gate.

        `columns`: some of preactivation, activation and, in a recording made with
        `--values ...,contributions`, the parts input, recurrent, bias, peephole, recurrent_bias.
        """
        return self._frame("gates", "gate", cells, gates, steps, examples, units, columns)

    def has_parts(self) -> bool:
        """Whether the gates table holds the preactivations' parts (`--values ...,contributions`)."""
        return "contributions" in self.description.get("selection", {}).get("values", ())

    def dominant_part(self, cell: str, gate: str, unit: int, steps: Range | None = None, examples: Range | None = None) -> str:
        """Which part of the preactivation drives `gate` of `unit` most over the steps
        `steps` ([start, stop)) of `examples`: the part with the largest mean absolute value
        (`input`, `recurrent`, `bias`, `peephole` or `recurrent_bias`). The whole table, with
        each part's mean and share: `recorders.analysis.dominant_part`."""
        shares = part_shares(self.gate_frame([cell], [gate], steps, examples, [unit], columns=list(PARTS)))
        if shares.empty:
            raise SelectionError(f"cell {cell}, gate {gate}, unit {unit}: no rows recorded in steps {steps}, examples {examples}")
        return str(shares.loc[shares["dominant"], "part"].iloc[0])

    def state_frame(
        self,
        cells: Sequence[str] | None = None,
        states: Sequence[str] | None = None,
        steps: Range | None = None,
        examples: Range | None = None,
        units: Sequence[int] | None = None,
    ) -> pd.DataFrame:
        """The long state table for a selection: example, step, unit, value, cell, state."""
        return self._frame("states", "state", cells, states, steps, examples, units, ("value",))

    def gate_array(self, cell: str, gate: str, column: str = "activation", examples: Range | None = None, steps: Range | None = None) -> np.ndarray:
        """One gate as a float32 array [examples, steps, units].

        The example axis holds every recorded example (of `examples`) in order, including
        those without a single row (length 0, fully masked); the step axis runs from the
        first recorded step to the last. NaN where no row was recorded.
        """
        return self._array(self.gate_frame([cell], [gate], steps, examples, columns=[column]), column, examples)

    def state_array(self, cell: str, state: str, examples: Range | None = None, steps: Range | None = None) -> np.ndarray:
        """One state as a float32 array [examples, steps, width] (axes as for `gate_array`)."""
        return self._array(self.state_frame([cell], [state], steps, examples), "value", examples)

    def gate_blocks(self, cell: str, gate: str, column: str = "activation") -> Iterator[Block]:
        """One gate's `column`, a row group at a time, as dense `Block`s: the whole gate is
        read once, in file order, without building the long key columns where a row group
        holds every (example, step, unit) of its ranges (the row count equals the product of
        its example and step ranges, from its statistics, and the cell's units: then only
        the value column is read)."""
        self.cell(cell)
        if gate not in self.gates(cell):
            raise SelectionError(f"gate {gate!r} of {cell}: expected one of {', '.join(self.gates(cell))}")
        folder, units = self.path / "gates" / partition_dir(cell=cell, gate=gate), self.units(cell)
        for path in sorted(folder.glob("part-*.parquet")):
            file = pq.ParquetFile(path)
            if column not in file.schema_arrow.names:
                raise SelectionError(f"column {column!r}: {path} holds {', '.join(file.schema_arrow.names)}")
            for k in range(file.num_row_groups):
                ranges = _key_ranges(file.metadata.row_group(k), units)
                if ranges is not None:
                    values = file.read_row_group(k, columns=[column], use_threads=False).column(0).to_numpy()
                    (e0, e1), (s0, s1), (u0, u1) = ranges
                    yield Block(np.arange(e0, e1 + 1), np.arange(s0, s1 + 1), values.reshape(e1 - e0 + 1, s1 - s0 + 1, u1 - u0 + 1), None)
                else:
                    t = file.read_row_group(k, columns=["example", "step", "unit", column], use_threads=False)
                    yield _scattered(*(t.column(n).to_numpy() for n in ("example", "step", "unit", column)))

    def gate_wide(self, cell: str, gate: str, column: str = "activation", examples: Range | None = None, steps: Range | None = None) -> pd.DataFrame:
        """One gate as an (example, step) x unit frame."""
        df = self.gate_frame([cell], [gate], steps, examples, columns=[column])
        return df.pivot(index=["example", "step"], columns="unit", values=column)

    def state_wide(self, cell: str, state: str, examples: Range | None = None, steps: Range | None = None) -> pd.DataFrame:
        """One state as an (example, step) x unit frame."""
        return self.state_frame([cell], [state], steps, examples).pivot(index=["example", "step"], columns="unit", values="value")

    # -- how ---------------------------------------------------------------------------------

    def _dataset(self, table: str) -> ds.Dataset:
        partitioning = ds.HivePartitioning.discover(infer_dictionary=True, segment_encoding="uri")
        return ds.dataset(self.path / table, format="parquet", partitioning=partitioning)

    def _frame(self, table, kind, cells, labels, steps, examples, units, columns) -> pd.DataFrame:
        for name in cells or ():
            self.cell(name)
        known = GATE_COLUMNS if table == "gates" else ("value",)
        unknown = [c for c in columns if c not in known]
        if unknown or not columns:
            raise SelectionError(f"columns {list(columns)}: expected some of {', '.join(known)}")
        dataset = self._dataset(table)
        missing = [c for c in columns if c not in dataset.schema.names]
        if missing:
            held = [c for c in known if c in dataset.schema.names]
            hint = " (record with --values preactivation,activation,contributions for the parts)" if set(missing) & set(PARTS) else ""
            raise SelectionError(f"columns {', '.join(missing)}: this recording holds {', '.join(held)}{hint}")
        where = []
        if cells:
            where.append(ds.field("cell").isin([self._stored[c] for c in cells]))
        if labels:
            where.append(ds.field(kind).isin(list(labels)))
        for field, bounds in (("step", steps), ("example", examples)):
            lo, hi = bounds or (None, None)
            if lo is not None:
                where.append(ds.field(field) >= lo)
            if hi is not None:
                where.append(ds.field(field) < hi)
        if units is not None:
            where.append(ds.field("unit").isin([int(u) for u in units]))
        expression = None
        for e in where:
            expression = e if expression is None else expression & e
        wanted = ["example", "step", "unit", *columns, "cell", kind]
        df = dataset.to_table(columns=wanted, filter=expression).to_pandas()
        if self._names:
            df["cell"] = df["cell"].cat.rename_categories(lambda stored: self._names.get(stored, stored))
        return df

    def _array(self, df: pd.DataFrame, column: str, examples: Range | None) -> np.ndarray:
        if df.empty:
            return np.zeros((0, 0, 0), np.float32)
        ex = df["example"].to_numpy()
        lo, hi = examples or (None, None)
        ranges = [(a if lo is None else max(a, lo), b if hi is None else min(b, hi)) for a, b in self._examples.pairs()]
        ids = np.concatenate([np.arange(a, b) for a, b in ranges] or [np.zeros(0, np.int64)])
        ex_idx = np.searchsorted(ids, ex)
        if len(ids) == 0 or ex_idx.max() >= len(ids) or not np.array_equal(ids[ex_idx], ex):
            ids, ex_idx = _sorted_unique(ex)  # rows outside the complete ranges: index the examples present
        step = df["step"].to_numpy()
        first = int(step.min())
        width = int(df["unit"].max()) + 1
        out = np.full((len(ids), int(step.max()) - first + 1, width), np.nan, np.float32)
        out[ex_idx, step - first, df["unit"].to_numpy()] = df[column].to_numpy()
        return out


class Block(NamedTuple):
    """Some examples of one gate as arrays (`Recording.gate_blocks`): `values[e, s, u]` is
    unit u at step `steps[s]` of example `examples[e]`; `present[e, s]` says whether that
    (example, step) has rows (None: all have; NaN values where not)."""

    examples: np.ndarray
    steps: np.ndarray
    values: np.ndarray
    present: np.ndarray | None


def _key_ranges(group: Any, units: int) -> tuple[tuple[int, int], ...] | None:
    """The (min, max) of example, step and unit of a row group whose rows are every
    combination of them (in C order, as the writer writes them), else None. Example and
    step ranges come from the row group's statistics; units are 0 to `units` - 1."""
    names = [group.column(i).path_in_schema for i in range(group.num_columns)]
    ranges = []
    for key in ("example", "step"):
        if key not in names:
            return None
        stats = group.column(names.index(key)).statistics
        if stats is None or not stats.has_min_max:
            return None
        ranges.append((int(stats.min), int(stats.max)))
    ranges.append((0, units - 1))
    size = np.prod([hi - lo + 1 for lo, hi in ranges], dtype=np.int64)
    return tuple(ranges) if size == group.num_rows > 0 else None


def _scattered(example: np.ndarray, step: np.ndarray, unit: np.ndarray, value: np.ndarray) -> Block:
    """A `Block` from long rows that leave some (example, step) out (lengths, masks)."""
    examples, e = _sorted_unique(example)
    steps, s = _sorted_unique(step)
    values = np.full((len(examples), len(steps), int(unit.max(initial=-1)) + 1), np.nan, np.float32)
    present = np.zeros(values.shape[:2], bool)
    values[e, s, unit] = value
    present[e, s] = True
    return Block(examples, steps, values, present)


def part_shares(frame: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """How much each part of the preactivation contributes, over the rows of a gate frame
    holding the part columns: per group of `by` and part, `mean` (signed), `mean_abs`,
    `share` (its mean_abs over the sum of the group's), `rows`, and `dominant` (True for
    the part with the largest mean_abs). Parts the cell does not have (all null) are left out."""
    rows = []
    groups = frame.groupby(list(by), observed=True, sort=True) if by else [((), frame)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        stats = [(p, g[p].mean(), g[p].abs().mean(), int(g[p].notna().sum())) for p in PARTS if p in g and g[p].notna().any()]
        total = sum(s[2] for s in stats)
        top = max(range(len(stats)), key=lambda k: stats[k][2], default=None)
        rows += [(*key, p, float(m), float(a), float(a / total) if total else np.nan, n, k == top) for k, (p, m, a, n) in enumerate(stats)]
    return pd.DataFrame(rows, columns=[*by, "part", "mean", "mean_abs", "share", "rows", "dominant"])


def _sorted_unique(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(values, return_inverse=True)` in linear time when the values span a compact range
    (example and step ids usually do): a presence mask instead of a sort."""
    if len(values) == 0:
        return values, values
    lo, hi = int(values.min()), int(values.max())
    if hi - lo > 4 * len(values):
        return np.unique(values, return_inverse=True)
    present = np.zeros(hi - lo + 1, bool)
    present[values - lo] = True
    position = np.cumsum(present) - 1
    return np.flatnonzero(present) + lo, position[values - lo]


def _folder(name: str) -> str:
    """`cell` folder name of a cell, as `recorders.parquet.partition_dir` writes it, escaped for glob."""
    return glob.escape(partition_dir(cell=name)[len("cell=") :])
