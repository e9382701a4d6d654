"""Reading a recording back: what it holds, and selections of it, reading only what is asked.

    rec = Recording("run1")
    rec.cells                                   # ['rnn/basic_lstm_cell']
    rec.gates("rnn/basic_lstm_cell")            # ['i', 'j', 'f', 'o']
    df = rec.gate_frame(gates=["f"], steps=(0, 10), columns=["activation"])
    a = rec.gate_array("rnn/basic_lstm_cell", "f")          # [examples, steps, units]

Selections are pushed down: cell and gate (or state) pick partition folders, and
example and step ranges are checked against each row group's statistics, so only the
files, row groups and columns needed are read (every row group holds every unit: a unit
range filters rows). `cell`, `gate` and `state` come back as categoricals, their
categories in the recording's order. This module does not import TensorFlow.

A recording may come from anyone: every file is checked before it is read
(`recorders.read.files`).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from recorders.errors import RecordingError, SelectionError
from recorders.read.files import (
    DAMAGED,
    KEYS,
    READ,
    TABLES,
    CheckedFiles,
    key_ranges,
    refuse,
    statistics,
)
from recorders.read.summaries import SummaryTables
from recorders.write.columns import GATE_COLUMNS, PARTS
from recorders.write.folder import Folder
from recorders.write.layout import SUMMARY_DIR, TOTALS_DIR, UNREADABLE
from recorders.write.progress import Intervals, read_progress
from recorders.write.schema import MAX_JSON_BYTES, description_problem, parse_json

__all__ = ["Recording", "Block", "part_shares", "default_memory"]

Range = tuple[int | None, int | None]


def default_memory() -> int:
    """The default memory budget of a reader: half of the memory available now (4 GiB where
    the system does not say)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except (OSError, ValueError, IndexError):
        pass
    return 4 * 2**30


class Recording:
    """A recording folder written by `gatetrace record` (finished, or partial after a crash).

    `memory`: the most bytes one read may allocate (default: `default_memory()`). The files
    are listed when first read; the folder is held open until the Recording is dropped.
    """

    def __init__(self, path: str | os.PathLike, memory: int | None = None):
        self.path = Path(path)
        budget = int(memory) if memory is not None else default_memory()
        not_one = RecordingError(
            f"{self.path} is not a gatetrace recording: it has no gates/ folder (nor a summary's summary/)"
        )
        try:
            # a link the user named is followed; none below it is
            self._folder = Folder(self.path.resolve())
        except OSError:
            raise not_one from None
        weakref.finalize(self, self._folder.close)
        odd = dict(self._folder.special())
        for name in READ:
            if name in odd:
                refuse(self.path, self._folder, name)
        if not any(self._folder.is_dir(name) for name in ("gates", SUMMARY_DIR, TOTALS_DIR)):
            raise not_one
        # the shards' progress files, as opened
        progress = self._progress = read_progress(self._folder.path)
        self.manifest: dict[str, Any] | None = (
            self._manifest() if "manifest.json" in self._folder.entries() else None
        )
        self.complete = self.manifest is not None
        description = self.manifest or next((p["description"] for p in progress.values()), None)
        if description is None:
            raise RecordingError(
                f"{self.path} has neither manifest.json nor a progress file; it was not written by gatetrace"
            )
        self.description: dict[str, Any] = description
        # "summary" (`gatetrace record --summary`: statistics, no values) or "full"
        self.kind: str = "summary" if description.get("kind") == "summary" else "full"
        self._statistics: SummaryTables | None = None
        self._cells = {c["name"]: c for c in description["cells"]}
        done = Intervals()
        for p in progress.values():
            for start, stop in p["complete"]:
                done.add(start, stop)
        self._examples = done
        if (
            self.manifest is not None
            and progress
            and self.manifest.get("examples", done.total()) != done.total()
        ):
            raise RecordingError(
                f"{self.path}/manifest.json counts {self.manifest['examples']:,} examples but the progress files "
                f"{done.total():,}: {DAMAGED}"
            )
        self._checked = CheckedFiles(
            self.path, self._folder, budget, description, done, self.complete
        )

    @property
    def memory(self) -> int:
        """The most bytes one read may allocate."""
        return self._checked.memory

    def allot(self, shape: Sequence[int], itemsize: int, what: str) -> None:
        """SelectionError unless an array of `shape` (of `itemsize` bytes an item) fits `memory`."""
        self._checked.allot(shape, itemsize, what)

    def _manifest(self) -> dict[str, Any]:
        """manifest.json, checked against `recorders.write.schema`."""
        shown = f"{self.path}/manifest.json"
        try:
            manifest = parse_json(self._folder.read_bytes("manifest.json", MAX_JSON_BYTES), shown)
            why = description_problem(manifest)
        except OSError as err:
            why = f"cannot read it: {err.strerror or err}"
        except RecordingError as err:
            why = str(err).removeprefix(f"{shown} ")
        if why:
            raise RecordingError(f"{shown} is not a manifest gatetrace wrote ({why}): {DAMAGED}")
        return manifest

    def __repr__(self) -> str:
        state = "complete" if self.complete else "partial"
        return f"Recording({str(self.path)!r}, {len(self._cells)} cells, {self._examples.total():,} examples, {state})"

    # -- what it holds ---------------------------------------------------------------------

    @property
    def statistics(self) -> SummaryTables:
        """A summary recording's statistics (`recorders.read.summaries`), read when first asked."""
        if self.kind != "summary":
            raise SelectionError(
                f"{self.path} is a full recording: it holds every value, not summary statistics "
                "(gatetrace record --summary writes those); read its values with gate_frame or gate_array"
            )
        if self._statistics is None:
            self._statistics = SummaryTables(
                self._folder,
                self.description,
                str(self.path),
                self.complete,
                {c: self._checked.bounds(c) for c in self._cells},
                self.memory,
            )
        return self._statistics

    def _values(self, what: str) -> None:
        """Refuse to read values from a summary recording, in one line."""
        if self.kind == "summary":
            raise SelectionError(
                f"{self.path} is a summary recording (--summary): it holds statistics per unit and per step, not the "
                f"values {what} reads; use recorders.analysis.saturation or step_stats, or record without --summary"
            )

    @property
    def cells(self) -> list[str]:
        return list(self._cells)

    def cell(self, name: str) -> dict[str, Any]:
        """The description of one cell (kind, units, gates, states, steps, ...)."""
        try:
            return self._cells[name]
        except KeyError:
            raise SelectionError(
                f"no cell {name!r} in {self.path}; its cells are {', '.join(self._cells)}"
            ) from None

    def gates(self, cell: str) -> list[str]:
        return self._labels("gates", cell)

    def states(self, cell: str) -> list[str]:
        return self._labels("states", cell)

    def units(self, cell: str) -> int:
        """The cell's units, from its description (or, where a description written through
        `RecordingWriter` leaves them out, one more than the largest unit of its files)."""
        units = self.cell(cell).get("units")
        if units is None:
            units = max(
                (
                    int(self._checked.column("gates", cell, rel, "unit").max(initial=-1)) + 1
                    for key, files in self._checked.files("gates").items()
                    if key[0] == cell
                    for rel in files
                ),
                default=0,
            )
        return int(units)

    def width(self, table: str, cell: str, label: str) -> int:
        """The units of a gate, or the width of a state: the cell's units, but for a state `h`
        its output size (a projection's)."""
        units = self.units(cell)
        if table == "states" and label == "h":
            return int(self.cell(cell).get("output_size") or units)
        return units

    @property
    def examples(self) -> list[list[int]]:
        """The complete example ranges, [start, stop) pairs."""
        return self._examples.pairs()

    def check(self) -> None:
        """Check every file of the recording against its description, reading their footers
        only (no values): RecordingError naming the first that is not as gatetrace writes it.
        Each file is otherwise checked when first read."""
        for table in TABLES:
            for (cell, _), files in self._checked.files(table).items():
                for rel in files:
                    self._checked.footer(table, cell, rel)
        self._checked.weights_rows()
        if self.kind == "summary":
            self.statistics  # noqa: B018  (read and checked)

    def summary(self) -> dict[str, Any]:
        """What the folder holds, read from its manifest (or progress files) and its files'
        metadata only: the model, whether it is complete, the examples, each cell with the
        steps it holds, the rows of each table, the shards finished, and the bytes on disk."""
        progress = self._progress
        if self.kind == "summary":
            rows = {
                t: sum(p["rows"][t] for p in progress.values())
                if progress
                else self.description.get("rows", {}).get(t, 0)
                for t in TABLES
            }
        else:
            rows = {
                t: sum(
                    self._checked.footer(t, c, rel).num_rows
                    for (c, _), files in self._checked.files(t).items()
                    for rel in files
                )
                for t in TABLES
            }
        rows["weights"] = self._checked.weights_rows()
        shards = self.description.get("shards") if self.complete else None
        return {
            "path": str(self.path),
            "kind": self.kind,
            "complete": self.complete,
            "source": self.description.get("source", {}),
            "gatetrace_version": self.description.get("gatetrace_version"),
            "examples": {"complete": self.examples, "count": self._examples.total()},
            "cells": [
                {
                    "name": name,
                    "kind": c.get("kind"),
                    "units": self.units(name),
                    "gates": self.gates(name),
                    "states": self.states(name),
                    "steps": int(len(self.steps(name))),
                    "path": c.get("path"),
                }
                for name, c in self._cells.items()
            ],
            "rows": rows,
            "shards": {
                "finished": sum(bool(p.get("finished")) for p in progress.values()),
                "of": shards or len(progress),
            },
            "bytes": sum(size for _, size in self._folder.tree("")[0]),
        }

    def steps(self, cell: str) -> np.ndarray:
        """The input positions recorded for `cell` (read from the step column of one file, or
        from a summary's per-step statistics)."""
        if self.kind == "summary":
            held = [k for k in self.statistics.keys() if k[0] == cell]
            return (
                self.statistics.stats(*held[0], "step")[0].astype(np.int32)
                if held
                else np.zeros(0, np.int32)
            )
        files = self._checked.files("gates").get((cell, (self.gates(cell) or [""])[0]), [])
        return (
            np.unique(self._checked.column("gates", cell, files[0], "step"))
            if files
            else np.zeros(0, np.int32)
        )

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
        return self._frame("gates", cells, gates, steps, examples, units, columns)

    def has_parts(self) -> bool:
        """Whether the gates table holds the preactivations' parts (`--values ...,contributions`)."""
        return "contributions" in self.description.get("selection", {}).get("values", ())

    def dominant_part(
        self,
        cell: str,
        gate: str,
        unit: int,
        steps: Range | None = None,
        examples: Range | None = None,
    ) -> str:
        """Which part of the preactivation drives `gate` of `unit` most over the steps
        `steps` ([start, stop)) of `examples`: the part with the largest mean absolute value
        (`input`, `recurrent`, `bias`, `peephole` or `recurrent_bias`). The whole table, with
        each part's mean and share: `recorders.read.analysis.dominant_part`."""
        shares = part_shares(
            self.gate_frame([cell], [gate], steps, examples, [unit], columns=list(PARTS))
        )
        if shares.empty:
            raise SelectionError(
                f"cell {cell}, gate {gate}, unit {unit}: no rows recorded in steps {steps}, examples {examples}"
            )
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
        return self._frame("states", cells, states, steps, examples, units, ("value",))

    def gate_array(
        self,
        cell: str,
        gate: str,
        column: str = "activation",
        examples: Range | None = None,
        steps: Range | None = None,
    ) -> np.ndarray:
        """One gate as a float32 array [examples, steps, units].

        The example axis holds every recorded example (of `examples`) in order, including
        those without a single row (length 0, fully masked); the step axis runs from the
        first recorded step to the last. NaN where no row was recorded.
        """
        return self._array(
            self.gate_frame([cell], [gate], steps, examples, columns=[column]), column, examples
        )

    def state_array(
        self, cell: str, state: str, examples: Range | None = None, steps: Range | None = None
    ) -> np.ndarray:
        """One state as a float32 array [examples, steps, width] (axes as for `gate_array`)."""
        return self._array(self.state_frame([cell], [state], steps, examples), "value", examples)

    def gate_blocks(self, cell: str, gate: str, column: str = "activation") -> Iterator[Block]:
        """One gate's `column`, a row group at a time, as dense `Block`s: the whole gate is
        read once, in file order, without building the long key columns where a row group
        holds every (example, step, unit) of its ranges (the row count equals the product of
        its example and step ranges, from its statistics, and the cell's units: then only
        the value column is read)."""
        self._values("gate_blocks")
        return self.blocks("gates", cell, gate, column)

    def blocks(self, table: str, cell: str, label: str, column: str) -> Iterator[Block]:
        """`gate_blocks` of either table: a gate's `column` (preactivation, activation, ...) or
        a state's `value`; a state's width is the cell's units (`c`) or its output size (`h`)."""
        self._values("blocks")
        self.cell(cell)
        labels = self._labels(table, cell)
        if label not in labels:
            raise SelectionError(
                f"{TABLES[table]} {label!r} of {cell}: expected one of {', '.join(labels)}"
            )
        units = self.width(table, cell, label)
        for rel in self._checked.files(table).get((cell, label), []):
            file = self._checked.parquet(table, cell, rel)
            if column not in file.schema_arrow.names:
                raise SelectionError(
                    f"column {column!r}: {self.path}/{rel} holds {', '.join(file.schema_arrow.names)}"
                )
            for k in range(file.num_row_groups):
                ranges = key_ranges(file.metadata.row_group(k), units)
                if ranges is not None:
                    values = self._checked.read(
                        rel,
                        lambda file=file, k=k: (
                            file.read_row_group(k, columns=[column], use_threads=False)
                            .column(0)
                            .to_numpy()
                        ),
                    )
                    (e0, e1), (s0, s1), (u0, u1) = ranges
                    yield Block(
                        np.arange(e0, e1 + 1),
                        np.arange(s0, s1 + 1),
                        values.reshape(e1 - e0 + 1, s1 - s0 + 1, u1 - u0 + 1),
                        None,
                    )
                else:
                    t = self._checked.read(
                        rel,
                        lambda file=file, k=k: file.read_row_group(
                            k, columns=["example", "step", "unit", column], use_threads=False
                        ),
                    )
                    keys = {n: t.column(n).to_numpy() for n in ("example", "step", "unit")}
                    self._checked.check_keys(rel, cell, keys)
                    yield self._scattered(
                        rel,
                        keys["example"],
                        keys["step"],
                        keys["unit"],
                        t.column(column).to_numpy(),
                        units,
                    )

    def gate_wide(
        self,
        cell: str,
        gate: str,
        column: str = "activation",
        examples: Range | None = None,
        steps: Range | None = None,
    ) -> pd.DataFrame:
        """One gate as an (example, step) x unit frame."""
        df = self.gate_frame([cell], [gate], steps, examples, columns=[column])
        return df.pivot(index=["example", "step"], columns="unit", values=column)

    def state_wide(
        self, cell: str, state: str, examples: Range | None = None, steps: Range | None = None
    ) -> pd.DataFrame:
        """One state as an (example, step) x unit frame."""
        return self.state_frame([cell], [state], steps, examples).pivot(
            index=["example", "step"], columns="unit", values="value"
        )

    # -- the files, checked ------------------------------------------------------------------

    def _labels(self, table: str, cell: str) -> list[str]:
        """The gates (or states) of `cell`: as its description lists them, or, where a description
        written through `RecordingWriter` leaves them out, as its folders are named."""
        listed = self.cell(cell).get(table)
        if listed is not None:
            return list(listed)
        return [label for c, label in self._checked.files(table) if c == cell]

    # -- how ---------------------------------------------------------------------------------

    def _dataset(self, table: str, keys: Sequence[tuple[str, str]] | None = None) -> ds.Dataset:
        """The part files of `keys` ((cell, label) pairs; all of the table's by default) as one
        dataset, each with its cell and label as partition values (no folder is discovered)."""
        self._values(f"the {table} table")
        listed = self._checked.files(table)
        kind = TABLES[table]
        chosen = [
            (c, label, rel)
            for (c, label), files in listed.items()
            if keys is None or (c, label) in keys
            for rel in files
        ]
        labels = [pa.field("cell", pa.string()), pa.field(kind, pa.string())]
        if not chosen:  # no file: no rows, in the columns a file would have
            values = [
                pa.field(n, pa.float32())
                for n in (GATE_COLUMNS if table == "gates" else ("value",))
            ]
            empty = pa.schema([*(pa.field(k, t) for k, t in KEYS.items()), *values, *labels])
            return ds.dataset(empty.empty_table())
        first = self._checked.footer(table, chosen[0][0], chosen[0][2]).schema.to_arrow_schema()
        schema = pa.schema([*first, *labels])
        return ds.FileSystemDataset.from_paths(
            [rel for _, _, rel in chosen],
            schema=schema,
            format=ds.ParquetFileFormat(),
            filesystem=self._checked.fs,
            partitions=[
                (ds.field("cell") == c) & (ds.field(kind) == label) for c, label, _ in chosen
            ],
        )

    def _frame(self, table, cells, labels, steps, examples, units, columns) -> pd.DataFrame:
        kind = TABLES[table]
        for name in cells or ():
            self.cell(name)
        self._values(f"the {table} table")
        known = GATE_COLUMNS if table == "gates" else ("value",)
        unknown = [c for c in columns if c not in known]
        if unknown or not columns:
            raise SelectionError(f"columns {list(columns)}: expected some of {', '.join(known)}")
        keys = [
            (c, label)
            for c in (cells or self.cells)
            for label in self._labels(table, c)
            if not labels or label in labels
        ]
        files = [(key[0], rel) for key in keys for rel in self._checked.files(table).get(key, [])]
        held = [
            c
            for c in known
            if files and c in self._checked.footer(table, files[0][0], files[0][1]).schema.names
        ] or list(known[:2])
        missing = [c for c in columns if c not in held]
        if missing:
            hint = (
                " (record with --values preactivation,activation,contributions for the parts)"
                if set(missing) & set(PARTS)
                else ""
            )
            raise SelectionError(
                f"columns {', '.join(missing)}: this recording holds {', '.join(held)}{hint}"
            )
        rows = sum(
            self._overlapping_rows(self._checked.footer(table, c, rel), steps, examples)
            for c, rel in files
        )
        self.allot((rows, 2 * (16 + 4 * len(columns))), 1, f"this selection of {rows:,} rows")
        where = []
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
        try:
            read = self._dataset(table, keys).to_table(columns=wanted, filter=expression)
            # dictionary-encoded in Arrow: pandas gets categoricals without a string per row
            for name in ("cell", kind):
                read = read.set_column(
                    read.schema.get_field_index(name), name, pc.dictionary_encode(read[name])
                )
            df = read.to_pandas()
        except UNREADABLE as err:
            raise RecordingError(
                f"cannot read the {table} of {self.path}: a part file is damaged ({err})"
            ) from None
        df["cell"] = df["cell"].cat.set_categories(self.cells)
        df[kind] = df[kind].cat.set_categories(
            list(dict.fromkeys(label for c in self.cells for label in self._labels(table, c)))
        )
        codes = df["cell"].cat.codes.to_numpy()
        for key in ("example", "step", "unit") if len(df) else ():
            low, high = (
                np.array([self._checked.bounds(c)[key][k] for c in self.cells]) for k in (0, 1)
            )
            values = df[key].to_numpy()
            if ((values < low[codes]) | (values >= high[codes])).any():
                for c, rel in files:  # name the file
                    self._checked.check_keys(
                        rel, c, {key: self._checked.column(table, c, rel, key)}
                    )
        return df

    @staticmethod
    def _overlapping_rows(metadata: Any, steps: Range | None, examples: Range | None) -> int:
        """The rows of the row groups a selection of steps and examples reads (from their statistics)."""
        total = 0
        for k in range(metadata.num_row_groups):
            group = metadata.row_group(k)
            ranges = statistics(group)
            if ranges is None:  # not known: counted as read
                total += group.num_rows
                continue
            (e0, e1), (s0, s1) = ranges
            if all(
                (lo is None or hi_ >= lo) and (hi is None or lo_ < hi)
                for (lo_, hi_), (lo, hi) in (
                    ((e0, e1), examples or (None, None)),
                    ((s0, s1), steps or (None, None)),
                )
            ):
                total += group.num_rows
        return total

    def _array(self, df: pd.DataFrame, column: str, examples: Range | None) -> np.ndarray:
        if df.empty:
            return np.zeros((0, 0, 0), np.float32)
        ex = df["example"].to_numpy()
        lo, hi = examples or (None, None)
        ranges = [
            (a if lo is None else max(a, lo), b if hi is None else min(b, hi))
            for a, b in self._examples.pairs()
        ]
        wanted = sum(max(b - a, 0) for a, b in ranges)
        # the complete examples, even those without rows; else those present
        if wanted <= 4 * len(ex) + 1024:
            ids = np.concatenate(
                [np.arange(a, b) for a, b in ranges if b > a] or [np.zeros(0, np.int64)]
            )
            ex_idx = np.searchsorted(ids, ex)
        if (
            wanted > 4 * len(ex) + 1024
            or len(ids) == 0
            or ex_idx.max() >= len(ids)
            or not np.array_equal(ids[ex_idx], ex)
        ):
            # rows outside the complete ranges: index the examples present
            ids, ex_idx = _sorted_unique(ex)
        step = df["step"].to_numpy()
        first = int(step.min())
        width = int(df["unit"].max()) + 1
        shape = (len(ids), int(step.max()) - first + 1, width)
        self.allot(shape, 4, f"an array of {' x '.join(map(str, shape))} (examples, steps, units)")
        out = np.full(shape, np.nan, np.float32)
        out[ex_idx, step - first, df["unit"].to_numpy()] = df[column].to_numpy()
        return out

    def _scattered(
        self,
        rel: str,
        example: np.ndarray,
        step: np.ndarray,
        unit: np.ndarray,
        value: np.ndarray,
        units: int,
    ) -> Block:
        """A `Block` from long rows that leave some (example, step) out (lengths, masks)."""
        examples, e = _sorted_unique(example)
        steps, s = _sorted_unique(step)
        self.allot(
            (len(examples), len(steps), units),
            5,
            f"a row group of {self.path}/{rel} spread over {len(examples)} examples "
            f"and {len(steps)} steps",
        )
        values = np.full((len(examples), len(steps), units), np.nan, np.float32)
        present = np.zeros(values.shape[:2], bool)
        values[e, s, unit] = value
        present[e, s] = True
        return Block(examples, steps, values, present)


class Block(NamedTuple):
    """Some examples of one gate as arrays (`Recording.gate_blocks`): `values[e, s, u]` is
    unit u at step `steps[s]` of example `examples[e]`; `present[e, s]` says whether that
    (example, step) has rows (None: all have; NaN values where not)."""

    examples: np.ndarray
    steps: np.ndarray
    values: np.ndarray
    present: np.ndarray | None


def part_shares(frame: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """How much each part of the preactivation contributes, over the rows of a gate frame
    holding the part columns: per group of `by` and part, `mean` (signed), `mean_abs`,
    `share` (its mean_abs over the sum of the group's), `rows`, and `dominant` (True for
    the part with the largest mean_abs). Parts the cell does not have (all null) are left out."""
    rows = []
    groups = frame.groupby(list(by), observed=True, sort=True) if by else [((), frame)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        stats = [
            (p, g[p].mean(), g[p].abs().mean(), int(g[p].notna().sum()))
            for p in PARTS
            if p in g and g[p].notna().any()
        ]
        total = sum(s[2] for s in stats)
        top = max(range(len(stats)), key=lambda k: stats[k][2], default=None)
        rows += [
            (*key, p, float(m), float(a), float(a / total) if total else np.nan, n, k == top)
            for k, (p, m, a, n) in enumerate(stats)
        ]
    return pd.DataFrame(
        rows, columns=[*by, "part", "mean", "mean_abs", "share", "rows", "dominant"]
    )


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
