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
(`recorders.read.files`); how its tables are read into frames, arrays and blocks:
`recorders.read.tables`.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from recorders.errors import RecordingError, SelectionError
from recorders.read.codes import codes, quantisation_of
from recorders.read.files import (
    DAMAGED,
    MERGED_DAMAGED,
    TABLES,
    default_memory,
    open_recording,
    statistics,
)
from recorders.read.recount import has_checksums, recount
from recorders.read.summaries import SummaryTables
from recorders.read.tables import (
    Block,
    Range,
    dataset,
    dense,
    file_blocks,
    overlapping_rows,
    part_shares,
    read_rows,
)
from recorders.write.columns import GATE_COLUMNS, PARTS
from recorders.write.merged import span_of
from recorders.write.partstats import FOOTER_KEY, PartStats, read
from recorders.write.rounding import Rounding, rounding_of, rounds_output
from recorders.write.tops import TOP_KEY, Tops
from recorders.write.tops import read as read_tops
from recorders.write.totals import saturation_bounds

if TYPE_CHECKING:  # pandas is imported where a frame is made: metadata reads need none
    import pandas as pd
    import pyarrow.dataset as ds  # which imports pandas too

__all__ = ["Recording", "Block", "part_shares", "default_memory"]

# what a table's folders are of, as the description lists them
_LISTED = {"gates": "cell and gate", "states": "cell and state", "outputs": "output"}


class Recording:
    """A recording folder written by `gatetrace record` (finished, or partial after a crash).

    `memory`: the most bytes one read may allocate (default: `default_memory()`). The files
    are listed when first read; the folder is held open until the Recording is dropped.
    """

    def __init__(self, path: str | os.PathLike, memory: int | None = None):
        self.path = Path(path)
        budget = int(memory) if memory is not None else default_memory()
        # the folder opened, its manifest or progress files checked (`recorders.read.files`)
        self._checked = checked = open_recording(self.path, budget)
        self._folder = checked.folder
        weakref.finalize(self, self._folder.close)
        self._progress = checked.progress  # the shards' progress files, as opened
        self.manifest: dict[str, Any] | None = checked.manifest
        self.complete = checked.complete
        self.description: dict[str, Any] = checked.description
        # "summary" (`gatetrace record --summary`: statistics, no values) or "full"
        self.kind: str = "summary" if self.description.get("kind") == "summary" else "full"
        self._statistics: SummaryTables | None = None
        self._cells = checked.cells
        self._examples = checked.examples

    @property
    def memory(self) -> int:
        """The most bytes one read may allocate."""
        return self._checked.memory

    def allot(self, shape: Sequence[int], itemsize: int, what: str) -> None:
        """SelectionError unless an array of `shape` (of `itemsize` bytes an item) fits `memory`."""
        self._checked.allot(shape, itemsize, what)

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

    def recorded_gates(self, cell: str) -> list[str]:
        """The gates of `cell` whose values the folder holds, in the cell's order: every gate
        but those `--gates` left out (a gate none of whose part files is there)."""
        files = self._checked.files("gates")
        return [g for g in self.gates(cell) if files.get((cell, g))]

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

    def check(self, pages: bool = True) -> None:
        """Check every file of the recording against its description: RecordingError naming
        the first that is not as gatetrace writes it. Reads every footer and, with `pages`
        (the default), every page, verifying its checksum: the whole recording, a row group
        at a time. `pages=False` reads the footers only (no values); each file's pages are
        then verified when they are read. Each file is otherwise checked when first read.

        With `pages`, also: each gate part file's footer statistics and top values are counted
        again from its values, by the writer's own code (`recorders.read.recount`), and must be
        those it carries (the merged statistics files must be those of the footers); where one
        part file carries page checksums, every one must (a recording is written by one
        gatetrace); and no folder or file below a table is one the description does not list
        (`pandas.read_parquet` of the table would read its rows with the recording's)."""
        self._check_listed()
        checksums: dict[bool, str] = {}  # with and without page checksums: a file of each
        for table in TABLES:
            for (cell, label), files in self._checked.files(table).items():
                for rel in files:
                    self._checked.footer(table, cell, rel)
                    if pages:
                        self._check_pages(table, cell, label, rel, checksums)
                self._check_merged(table, cell, label)
        for (_, name), files in self._checked.files("outputs").items():
            for rel in files:
                self._checked.footer("outputs", name, rel)
                if pages:
                    self._check_pages("outputs", name, name, rel, checksums)
        if self._checked.weights_rows() and pages:  # (a recording may hold none)
            self._checked.weights()
        if self.kind == "summary":
            self.statistics  # noqa: B018  (read and checked)
        if pages and self.rounding is not None:
            self._check_rounding(self.rounding)

    def _check_pages(
        self, table: str, cell: str, label: str, rel: str, checksums: dict[bool, str]
    ) -> None:
        """Read every page of the part file `rel` (a gate's: its footer's statistics and top
        values recounted, `recorders.read.recount`), and note in `checksums` whether its pages
        carry checksums: RecordingError naming it where it is not as gatetrace wrote it."""
        metadata = self._checked.footer(table, cell, rel)
        with self._checked.fs.open_input_file(rel) as f:
            carries = self._checked.read(
                rel, lambda: has_checksums(lambda at, size: f.read_at(size, at), metadata)
            )
        checksums.setdefault(carries, rel)
        if len(checksums) == 2:
            raise RecordingError(
                f"{self.path}/{checksums[False]} is not a part file gatetrace wrote: its pages carry "
                f"no checksums, those of {self.path}/{checksums[True]} do (a recording is written "
                f"by one gatetrace; another tool rewrote it): {DAMAGED}"
            )
        if table != "gates":
            self._checked.pages(table, cell, rel)
            return
        why = recount(
            self._checked.parquet(table, cell, rel),
            metadata,
            saturation_bounds(self.cell(cell), label),
            span_of(self.cell(cell), label),
            lambda read: self._checked.read(rel, read),
            lambda shape, size, what: self.allot(shape, size, f"{what} ({self.path}/{rel})"),
        )
        if why:
            raise RecordingError(
                f"{self.path}/{rel} is not a part file gatetrace wrote ({why}): {DAMAGED}"
            )

    def _check_listed(self) -> None:
        """RecordingError naming the first folder (or file) below a table that the description
        does not list: a cell, gate, state or output of no description, or a file of another
        name, whose rows `pandas.read_parquet` of the table would read with the recording's
        (names beginning with `.` or `_`, which it skips, are left alone)."""
        for table in (*TABLES, "outputs"):
            found, _ = self._folder.tree(table)
            listed = {rel for files in self._checked.files(table).values() for rel in files}
            shown = [
                rel
                for rel, _ in found
                if rel not in listed and not any(p[:1] in "._" for p in rel.split("/")[1:])
            ]
            folders = sorted({rel.rpartition("/")[0] for rel in shown})
            if folders:
                held = [rel for rel in shown if rel.rpartition("/")[0] == folders[0]]
                raise RecordingError(
                    f"{self.path}/{folders[0]}/ holds {len(held):,} files ({held[0].rpartition('/')[2]}, ...) "
                    f"of no {_LISTED[table]} the recording's description lists: "
                    f"pandas.read_parquet('{self.path}/{table}') would read their rows with the "
                    f"recording's; move them out of the recording"
                )

    @property
    def rounding(self) -> Rounding | None:
        """How the values were rounded (`gatetrace record --round-bits`: the mantissa bits kept
        and the errors they allow, `recorders.write.rounding`); None: stored exactly."""
        return rounding_of(self.description)

    def _check_rounding(self, rounding: Rounding) -> None:
        """RecordingError naming the first part file holding a value with a bit below the
        mantissa bits its description says every value was rounded to (an output of integers
        is stored exactly: not checked). Each row group is read whole (`CheckedFiles.footer`
        counted it against the memory budget)."""
        keyed = [
            (t, key, rel)
            for t in TABLES
            for key, files in self._checked.files(t).items()
            for rel in files
        ]
        keyed += [
            ("outputs", key, rel)
            for key, files in self._checked.files("outputs").items()
            if rounds_output(self._checked.outputs.get(key[1], {}))
            for rel in files
        ]
        for table, (cell, name), rel in keyed:
            owner = name if table == "outputs" else cell
            file = self._checked.parquet(table, owner, rel)
            floats = [n for n in file.schema_arrow.names if n not in ("example", "step", "unit")]
            for k in range(file.num_row_groups):
                group = self._checked.read(
                    rel,
                    lambda k=k, file=file, floats=floats: file.read_row_group(
                        k, columns=floats, use_threads=False
                    ),
                )
                stray = sum(rounding.stray(c.drop_null().to_numpy()) for c in group.columns)
                if stray:
                    raise RecordingError(
                        f"{self.path}/{rel} holds {stray:,} value{'' if stray == 1 else 's'} with bits below the "
                        f"{rounding.kept()} its description says every value was rounded to "
                        f"(--round-bits {rounding.bits}): {DAMAGED}"
                    )

    def _check_merged(self, table: str, cell: str, label: str) -> None:
        """RecordingError naming a shard's merged statistics file whose rows, statistics or top
        values of (cell, label) are not those of the footers of the files it covers."""
        for c in self._checked.covering(table, cell, label):
            rows = sum(self._checked.footer(table, cell, rel).num_rows for rel in c.files)
            if rows != c.entry.rows:
                raise RecordingError(
                    f"{self.path}/{c.rel} is not a statistics file gatetrace wrote (it counts "
                    f"{c.entry.rows:,} rows of {TABLES[table]} {label} of {cell}, their part files "
                    f"hold {rows:,}): {MERGED_DAMAGED}"
                )
        if table == "gates" and self.kind == "full":

            def same(a: Any, b: Any) -> bool:
                return (a is None) == (b is None) and (a is None or a.equals(b))

            slow = self._activation_statistics(cell, label, merged=False)
            footers = self._top_activations(cell, label, merged=False)
            for what, reading, b in (
                ("statistics", self._activation_statistics, slow),
                ("top values", self._top_activations, footers),
            ):
                if same(reading(cell, label, merged=True), b):
                    continue
                shards = sorted({c.rel for c in self._checked.covering(table, cell, label)})
                # the shards whose file, read alone beside the other files' footers, disagrees
                named = [rel for rel in shards if not same(reading(cell, label, True, rel), b)]
                files = " and ".join(f"{self.path}/{rel}" for rel in named or shards)
                raise RecordingError(
                    f"{files} {'is not a statistics file' if len(named or shards) == 1 else 'are not statistics files'} "
                    f"gatetrace wrote (its {what} of gate {label} of {cell} are not those of "
                    f"the footers of the files it covers): {MERGED_DAMAGED}"
                )

    def summary(self) -> dict[str, Any]:
        """What the folder holds, read from its manifest (or progress files), the shards' merged
        statistics files (`recorders.write.merged`) and its files' metadata only: the model,
        whether it is complete, what was held inside the model, the examples, each cell with the steps it holds, the rows of
        each table, the shards finished, and the bytes on disk."""
        progress = self._progress
        if self.kind == "summary":
            rows = {
                t: sum(p["rows"][t] for p in progress.values())
                if progress
                else self.description.get("rows", {}).get(t, 0)
                for t in TABLES
            }
        else:  # from the merged statistics files where they cover the files, else the footers
            rows = {t: self._checked.rows(t) for t in TABLES}
        rows["weights"] = self._checked.weights_rows()
        if self.outputs:  # the model's own outputs, from the files' footers
            rows["outputs"] = sum(
                self._checked.footer("outputs", name, rel).num_rows
                for (_, name), files in self._checked.files("outputs").items()
                for rel in files
            )
        shards = self.description.get("shards") if self.complete else None
        counts = [int(p["shard"][1]) for p in progress.values() if p.get("shard")]
        return {
            "path": str(self.path),
            "kind": self.kind,
            "complete": self.complete,
            "source": self.description.get("source", {}),
            "gatetrace_version": self.description.get("gatetrace_version"),
            # what `gatetrace record --hold` held inside the model (none: its own computation)
            "held": list(self.description.get("held", [])),
            # how `gatetrace record --round-bits` rounded the values (None: stored exactly)
            "rounding": self.description.get("rounding"),
            "outputs": self.outputs,  # the model's own outputs recorded (`--outputs`)
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
                "of": shards or max(counts, default=len(progress)),
                "unfinished": self.unfinished_shards(),
            },
            "bytes": sum(size for _, size in self._folder.tree("")[0]),
        }

    def unfinished_shards(self) -> list[str]:
        """`K/N` of each shard of a partial recording that is not finished: begun and cut short,
        or never begun (no progress file: `record --shard K/N` was not run). Empty once complete."""
        if self.complete:
            return []
        begun = {tuple(p["shard"][:2]): bool(p.get("finished")) for p in self._progress.values()}
        counts = {n for _, n in begun}
        return [
            f"{k}/{n}" for n in sorted(counts) for k in range(n) if not begun.get((k, n), False)
        ]

    def steps(self, cell: str) -> np.ndarray:
        """The input positions at which the recording holds rows of `cell`, ascending: those of
        every part file of its first recorded gate (a cell of your own that applies no
        nonlinearity: of its first state), as `--steps`, `--lengths` or a mask left them. No
        value is read: the per-step counts of the gate's statistics (`activation_statistics`:
        the shards' merged statistics files and the footers they do not cover), or where its
        files carry none, each row group's step range where it holds every (example, step,
        unit) of it, else its step column, file after file until every step the cell's
        description allows is found. A summary's: the steps its statistics count values at."""
        if self.kind == "summary":
            self.cell(cell)
            held = [k for k in self.statistics.keys() if k[0] == cell]
            if not held:
                return np.zeros(0, np.int32)
            positions, summed = self.statistics.stats(*held[0], "step")
            return positions[summed.count > 0].astype(np.int32)
        gates = self.recorded_gates(cell)
        if gates:
            counted = self.activation_statistics(cell, gates[0])
            if counted is not None:
                return counted.steps[counted.count > 0].astype(np.int32)
            table, label = "gates", gates[0]
        else:
            listed = self._checked.files("states")
            states = [s for s in self.states(cell) if listed.get((cell, s))]
            if not states:
                return np.zeros(0, np.int32)
            table, label = "states", states[0]
        return self._checked.held_steps(
            table,
            cell,
            self._checked.files(table)[cell, label],
            self.width(table, cell, label),
            self._checked.described_steps(cell),
        )

    # -- selections ------------------------------------------------------------------------

    def gate_frame(
        self,
        cells: Sequence[str] | None = None,
        gates: Sequence[str] | None = None,
        steps: Range | None = None,
        examples: Range | None = None,
        units: Sequence[int] | None = None,
        columns: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """The long gate table for a selection: example, step, unit, the value columns, cell, gate.

        `columns`: some of preactivation, activation and, in a recording made with
        `--values ...,contributions`, the parts input, recurrent, bias, peephole, recurrent_bias;
        by default every one the recording holds, as `pandas.read_parquet` of its `gates/` returns.
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

    @property
    def outputs(self) -> list[str]:
        """The model's outputs recorded beside the gates (`gatetrace record --outputs`)."""
        return list(self._checked.outputs)

    def output_frame(self, name: str, examples: Range | None = None) -> pd.DataFrame:
        """The model's output `name` as a long table: example, step (where the output is a
        sequence), unit, value; `examples` a [start, stop) range (None: all). Only the files
        whose examples the range reaches are read, within the memory budget counted first;
        every complete example's rows are checked (each once, as many as the output has)."""
        import pandas as pd

        described = self._checked.outputs.get(name)
        if described is None:
            listed = ", ".join(self.outputs) or "none (record with --outputs NAMES)"
            raise SelectionError(f"{self.path} holds no output {name!r}; its outputs: {listed}")
        lo, hi = examples or (None, None)
        lo, hi = 0 if lo is None else lo, 2**62 if hi is None else hi
        chosen, rows = [], 0
        for rel in sorted(self._checked.files("outputs").get(("", name), [])):
            footer = self._checked.footer("outputs", name, rel)
            reach = [statistics(footer.row_group(k)) for k in range(footer.num_row_groups)]
            if any(r is not None and r[0][0] < hi and r[0][1] >= lo for r in reach):
                chosen.append(rel)
                rows += footer.num_rows
        what = f"reading output {name} ({rows:,} rows)"
        self._checked.allot(
            (rows,),
            40,
            what,
            "select fewer examples (examples=(start, stop)), or open "
            "the recording with Recording(path, memory=...) for more",
        )
        frames = []
        for rel in chosen:
            table = self._checked.read(
                rel,
                lambda rel=rel: self._checked.parquet("outputs", name, rel).read(
                    columns=["example", "step", "unit", "value"], use_threads=False
                ),
            )
            keys = {k: table.column(k).to_numpy() for k in ("example", "step", "unit")}
            self._checked.check_keys(rel, name, keys, "outputs")
            self._checked.check_whole(name, rel, table.column("value").to_numpy())
            frame = table.to_pandas()
            frame = frame[(frame["example"] >= lo) & (frame["example"] < hi)]
            frames.append(frame[self._complete(frame["example"].to_numpy())])
        columns = ["example", "step", "unit", "value"]
        out = (
            pd.concat(frames, ignore_index=True)
            if frames
            else pd.DataFrame({c: [] for c in columns})
        )
        self._check_output_rows(name, described, out, lo, hi)
        return out if described["sequence"] else out.drop(columns=["step"])

    def _check_output_rows(self, name: str, described: dict, out: Any, lo: int, hi: int) -> None:
        """RecordingError where the files of output `name` hold a row twice, or an example's
        rows are not those the output has: its units at every step (an output that is not a
        sequence: each complete example once; a sequence: whole steps, at most its steps)."""
        if out.duplicated(["example", "step", "unit"]).any():
            raise RecordingError(
                f"{self.path}/outputs: output {name} holds some example, step and unit twice: {DAMAGED}"
            )
        units, steps = described["units"], described.get("steps")
        per = out.groupby("example").size()
        if described["sequence"]:  # whole steps, as many as its steps at most
            bad = per[(per % units != 0) | (per > units * (steps or 2**31))]
        else:
            bad = per[per != units]
        # every complete example of the range has rows, but where --lengths may leave a sequence none
        lengths = described["sequence"] and self.description.get("digests", {}).get("lengths")
        pairs = [
            (max(a, lo), min(b, hi)) for a, b in self._examples.pairs() if min(b, hi) > max(a, lo)
        ]
        missing = (
            []
            if lengths or len(per) == sum(b - a for a, b in pairs)
            else [e for a, b in pairs for e in np.setdiff1d(np.arange(a, b), per.index)[:1]]
        )
        if len(bad) or missing:
            example = int(bad.index[0]) if len(bad) else int(missing[0])
            raise RecordingError(
                f"{self.path}/outputs: output {name} holds {int(per.get(example, 0)):,} rows of example "
                f"{example}, not {units:,} a step: {DAMAGED}"
            )

    def _complete(self, ids: Any) -> np.ndarray:
        """A mask of the example numbers `ids` that are complete (a partial recording may hold
        the files of a batch that was not committed)."""
        ids = np.asarray(ids)
        mask = np.zeros(len(ids), bool)
        for a, b in self._examples.pairs():
            mask |= (ids >= a) & (ids < b)
        return mask

    def weights_frame(self, cell: str) -> pd.DataFrame:
        """The weights `cell` was recorded with (`weights.parquet`): gate, source, row, unit,
        value; empty where the recording holds none. Read within the memory budget."""
        self.cell(cell)
        rows = self._checked.weights_rows()
        columns = ["cell", "gate", "source", "row", "unit", "value"]
        if rows == 0:
            import pandas as pd

            return pd.DataFrame({c: [] for c in columns[1:]})
        frame = self._checked.weights(columns).to_pandas()
        mine = frame[frame["cell"].astype(str) == cell]
        return mine.drop(columns="cell").reset_index(drop=True)

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

    def gate_codes(
        self,
        cell: str,
        gate: str,
        column: str = "activation",
        examples: Range | None = None,
        steps: Range | None = None,
    ) -> np.ma.MaskedArray:
        """The integer codes a full-integer kernel held for one gate's `column`
        (`preactivation` or `activation`), [examples, steps, units], masked where no row was
        recorded; SelectionError for a cell that was not recorded from integer arithmetic
        (`recorders.read.codes`)."""
        kind, scale, zero = quantisation_of(self.cell(cell), cell, column)
        values = self.gate_array(cell, gate, column, examples, steps)
        return codes(values, kind, scale, zero, f"cell {cell}, gate {gate}, {column}")

    def state_codes(
        self, cell: str, state: str, examples: Range | None = None, steps: Range | None = None
    ) -> np.ma.MaskedArray:
        """The integer codes a full-integer kernel held for one state, as `gate_codes`."""
        kind, scale, zero = quantisation_of(self.cell(cell), cell, state)
        values = self.state_array(cell, state, examples, steps)
        return codes(values, kind, scale, zero, f"cell {cell}, state {state}")

    def gate_blocks(self, cell: str, gate: str, column: str = "activation") -> Iterator[Block]:
        """One gate's `column`, a row group at a time, as dense `Block`s: the whole gate is
        read once, in file order, without building the long key columns where a row group
        holds every (example, step, unit) of its ranges (the row count equals the product of
        its example and step ranges, from its statistics, and the cell's units: then only
        the value column is read)."""
        self._values("gate_blocks")
        return self.blocks("gates", cell, gate, column)

    def activation_statistics(self, cell: str, gate: str) -> PartStats | None:
        """The statistics of a gate's activations that its part files carry in their footers
        (`recorders.write.partstats`: per unit the rows beyond the saturation thresholds, per
        step the count, sum and a histogram), merged over the files in at most `memory` bytes
        (on coarser bins where finer would need more); None where a file carries none
        (recorded by an older gatetrace or without numba, or holding a NaN or an infinite
        activation): read the values then. Where the shards' merged statistics files cover
        files (`recorders.write.merged`), those are read in their footers' place: one file a
        shard, and the footers of the files none covers, the same statistics to the last bit.
        Only those are read; statistics that contradict themselves, the file's rows, the cell
        or the range of the gate's nonlinearity as the description lists it (a sigmoid's
        activations lie in [0, 1]) are a RecordingError naming the file, as any other edited
        part file is."""
        return self._activation_statistics(cell, gate, merged=True)

    def _activation_statistics(
        self, cell: str, gate: str, merged: bool, only: str | None = None
    ) -> PartStats | None:
        """`activation_statistics`, from the merged statistics files where they cover files
        (`merged`; `only`: that one alone) or from every footer."""
        self._values("activation_statistics")
        if gate not in self.gates(cell):
            raise SelectionError(
                f"gate {gate!r} of {cell}: expected one of {', '.join(self.gates(cell))}"
            )
        found: list[PartStats] = []
        steps, units = self._checked.bounds(cell)["step"][1], self.units(cell)
        span = span_of(self.cell(cell), gate)
        # a merged bin: its count (int64), as bincount gives it (float64), their running sum
        most = self.memory // 24
        held = 0  # the bins and steps of the statistics not merged yet

        def fits(stats: PartStats) -> None:
            """ValueError unless `stats` are of the cell's units and steps, and counted
            against the thresholds the others were."""
            if stats.units != units or not all(0 <= s < steps for s in stats.steps):
                raise ValueError(
                    f"its statistics are of {stats.units} units and steps {stats.steps.min(initial=0)} "
                    f"to {stats.steps.max(initial=0)}, the cell's {units} units and steps 0 to {steps - 1}"
                )
            if found and (stats.low, stats.high) != (found[0].low, found[0].high):
                raise ValueError(
                    f"its statistics count values beyond {stats.low} and {stats.high}, the "
                    f"other files' beyond {found[0].low} and {found[0].high}"
                )

        def take(stats: PartStats) -> None:
            nonlocal found, held
            found.append(stats)
            held += len(stats.counts) + len(stats.steps)
            # merged as they come where all at once would take more than the budget (about 48
            # bytes a bin: the same merge, as the bins nest)
            if held * 48 > self.memory and len(found) > 1:
                found = [PartStats.merge(found, most)]
                held = len(found[0].counts) + len(found[0].steps)

        covered: set[str] = set()
        for c in self._checked.covering("gates", cell, gate) if merged else ():
            if only is not None and c.rel != only:
                continue
            if c.entry.said is None:
                return None  # a file it covers carries none
            try:
                stats = c.entry.statistics(span, self.memory)
                assert stats is not None
                fits(stats)
            except ValueError as err:
                raise RecordingError(
                    f"{self.path}/{c.rel} is not a statistics file gatetrace wrote (gate {gate} "
                    f"of {cell}: {err}): {MERGED_DAMAGED}"
                ) from None
            take(stats)
            covered |= c.files
        for rel in self._checked.files("gates").get((cell, gate), []):
            if rel in covered:
                continue
            footer = self._checked.footer("gates", cell, rel)
            value = (footer.metadata or {}).get(FOOTER_KEY)
            if value is None:
                return None
            try:
                stats = read(value, footer.num_rows, span)
                fits(stats)
            except ValueError as err:
                raise RecordingError(
                    f"{self.path}/{rel} is not a part file gatetrace wrote ({err}): {DAMAGED}"
                ) from None
            take(stats)
        return PartStats.merge(found, most) if found else None

    def top_activations(self, cell: str, gate: str) -> Tops | None:
        """Each unit's highest activations of a gate and where they lie, as its part files
        carry them in their footers (`recorders.write.tops`: per unit the `tops.K` highest,
        highest first, ties the earliest example and step first, a NaN left out), merged over
        the files; None where a file carries none (recorded by an older gatetrace or without
        numba): read the values then. Read as `activation_statistics` is: from the shards'
        merged statistics files where they cover files, and the footers of the files none
        covers; top values that contradict the file, the cell or the range of the gate's
        nonlinearity are a RecordingError naming the file."""
        return self._top_activations(cell, gate, merged=True)

    def _top_activations(
        self, cell: str, gate: str, merged: bool, only: str | None = None
    ) -> Tops | None:
        """`top_activations`, from the merged statistics files where they cover files
        (`merged`; `only`: that one alone) or from every footer."""
        self._values("top_activations")
        if gate not in self.gates(cell):
            raise SelectionError(
                f"gate {gate!r} of {cell}: expected one of {', '.join(self.gates(cell))}"
            )
        bounds, units = self._checked.bounds(cell), self.units(cell)
        span = span_of(self.cell(cell), gate)
        found: list[Tops] = []
        covered: set[str] = set()
        for c in self._checked.covering("gates", cell, gate) if merged else ():
            if only is not None and c.rel != only:
                continue
            try:
                tops = c.entry.tops(units, bounds["step"], span, self.memory, bounds["example"])
            except ValueError as err:
                raise RecordingError(
                    f"{self.path}/{c.rel} is not a statistics file gatetrace wrote (gate {gate} "
                    f"of {cell}: {err}): {MERGED_DAMAGED}"
                ) from None
            if tops is None:
                return None  # a file it covers carries none
            found.append(tops)
            covered |= c.files
        for rel in self._checked.files("gates").get((cell, gate), []):
            if rel in covered:
                continue
            footer = self._checked.footer("gates", cell, rel)
            value = (footer.metadata or {}).get(TOP_KEY)
            if value is None:
                return None
            low, high = bounds["example"]
            named = self._checked.span(rel) or (low, high)  # the examples its name leaves it
            examples = (max(low, named[0]), min(high, named[1]))
            try:
                tops = read_tops(
                    value, footer.num_rows, units, examples, bounds["step"], span, self.memory
                )
            except ValueError as err:
                raise RecordingError(
                    f"{self.path}/{rel} is not a part file gatetrace wrote ({err}): {DAMAGED}"
                ) from None
            found.append(tops)
            if len(found) >= 64:  # (a few hundred KB each at most: merged as they come)
                found = [Tops.merge(found)]
        return Tops.merge(found) if found else None

    def blocks(
        self, table: str, cell: str, label: str, column: str, examples: Range | None = None
    ) -> Iterator[Block]:
        """`gate_blocks` of either table: a gate's `column` (preactivation, activation, ...) or
        a state's `value`; a state's width is the cell's units (`c`) or its output size (`h`).

        With `examples` ([start, stop), None: open), in example order, from the part files
        whose names leave them some of those examples (`CheckedFiles.overlapping`: one scan
        goes on from where another stopped without opening the files before), only their row
        groups that hold some (a block may still hold examples outside the range). Each
        block's examples come after every example of the blocks before it, as gatetrace
        writes them: else the file is named in one line; a file of another name, which may
        hold any example, is refused in one line."""
        self._values("blocks")
        self.cell(cell)
        labels = self._labels(table, cell)
        if label not in labels:
            raise SelectionError(
                f"{TABLES[table]} {label!r} of {cell}: expected one of {', '.join(labels)}"
            )
        units = self.width(table, cell, label)
        files = self._checked.files(table).get((cell, label), [])
        if examples is None:
            for rel in files:
                yield from file_blocks(self._checked, table, cell, rel, column, units)
            return
        named = []
        for rel in files:
            span = self._checked.span(rel)
            if span is None:
                raise SelectionError(
                    f"{self.path}/{rel}: a part file not named part-<first example>.parquet may "
                    "hold any example, so the examples cannot be read in order from the files' "
                    f"names; read the {TABLES[table]} whole (Recording.blocks without examples)"
                )
            if self._checked.overlapping(rel, examples):
                named.append((span[0], rel))
        last = None  # the last example of the blocks so far
        for _, rel in sorted(named):
            for block in file_blocks(self._checked, table, cell, rel, column, units, examples):
                if not len(block.examples):
                    continue
                if last is not None and block.examples[0] <= last:
                    raise RecordingError(
                        f"{self.path}/{rel} is not a part file gatetrace wrote (its rows of example "
                        f"{int(block.examples[0])} come after those of example {last}; gatetrace "
                        f"writes them in example order): {DAMAGED}"
                    )
                last = int(block.examples[-1])
                yield block

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

    def _frame(self, table, cells, labels, steps, examples, units, columns) -> pd.DataFrame:
        kind = TABLES[table]
        for name in cells or ():
            self.cell(name)
        self._values(f"the {table} table")
        known = GATE_COLUMNS if table == "gates" else ("value",)
        unknown = [c for c in columns or () if c not in known]
        if unknown or columns is not None and not columns:
            raise SelectionError(
                f"columns {list(columns or ())}: expected some of {', '.join(known)}"
            )
        keys = [
            (c, label)
            for c in (cells or self.cells)
            for label in self._labels(table, c)
            if not labels or label in labels
        ]
        listed = [(key[0], rel) for key in keys for rel in self._checked.files(table).get(key, [])]
        # those that may hold the examples asked, by their names: one sequence opens its own
        files = [(c, rel) for c, rel in listed if self._checked.overlapping(rel, examples)]
        first = (files or listed)[:1]  # whose columns the others' are
        held = [
            c for c in known if first and c in self._checked.footer(table, *first[0]).schema.names
        ] or list(known[:2])
        columns = held if columns is None else columns
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
            overlapping_rows(self._checked.footer(table, c, rel), steps, examples)
            for c, rel in files
        )
        self.allot((rows, 2 * (16 + 4 * len(columns))), 1, f"this selection of {rows:,} rows")
        df = read_rows(self._checked, table, keys, columns, steps, examples, units)
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

    def _dataset(self, table: str, keys: Sequence[tuple[str, str]] | None = None) -> ds.Dataset:
        """The part files of `keys` ((cell, label) pairs; all by default) as one pyarrow dataset."""
        self._values(f"the {table} table")
        return dataset(self._checked, table, keys)

    def _array(self, df: pd.DataFrame, column: str, examples: Range | None) -> np.ndarray:
        """`column` of `df` as [examples, steps, units] (see `gate_array`)."""
        return dense(df, column, examples, self._examples.pairs(), self.allot)
