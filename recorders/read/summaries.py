"""Reading a summary recording's statistics (`gatetrace record --summary`, `recorders.write.summary`).

    rec = Recording("summary-run")
    rec.kind                                       # 'summary'
    units = rec.statistics.frame("unit")           # cell, table, name, column, unit, count, mean, ...
    steps, stats = rec.statistics.stats("rnn/basic_lstm_cell", "gates", "f", "activation", "step")
    stats.quantile(0.5)                            # per step: the top of the median's bin

A finished summary is read from `summary/units.parquet` and `summary/steps.parquet`; one whose
shards are not all finished, from the shards' running totals in `_summary/` (merged here).
The files may come from anyone. Before a file is decoded, the rows its footer declares are
checked against the columns, units and steps the manifest lists and against the memory budget;
then its columns and histogram lengths against the manifest's bins
(`recorders.write.totals.read_totals`), and every number against what was recorded: units and
steps inside their cell's, counts never negative, each histogram (NaN is counted, never
binned) and the saturation counts within its count, and no count above the positions recorded (examples times steps
per unit, examples times units per step).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from recorders.errors import RecordingError, SelectionError
from recorders.read.files import DAMAGED
from recorders.write.folder import Folder
from recorders.write.layout import (
    SUMMARY_DIR,
    TOTALS_DIR,
    UNREADABLE,
    VERIFY_CHECKSUMS,
    unreadable,
)
from recorders.write.stats import Stats
from recorders.write.totals import KEY_COLUMNS, STATS, Totals, edges_of, read_totals, thresholds_of

if TYPE_CHECKING:  # pandas is imported where a frame is made: metadata reads need none
    import pandas as pd

__all__ = ["SummaryTables"]

_MAX_BYTES = 2**31  # a summary file of two gigabytes is far beyond any model's (a few megabytes)


class SummaryTables:
    """The statistics of a summary recording, read once, by column and axis."""

    def __init__(
        self,
        folder: Folder,
        description: Mapping[str, Any],
        shown: str,
        complete: bool,
        bounds: Mapping[str, Mapping[str, tuple[int, int]]],
        memory: int,
    ):
        """`bounds`: each cell's [low, high) of example, step and unit (`CheckedFiles.bounds`)."""
        summary = description.get("summary")
        if not isinstance(summary, Mapping):
            raise RecordingError(f"{shown} is a summary recording whose description has no bins")
        self.low, self.high = thresholds_of(summary)
        self.edges = edges_of(summary)
        self._shown = shown
        self._bounds, self._memory = bounds, memory
        self._cells = {
            c.get("name"): c for c in description.get("cells") or [] if isinstance(c, Mapping)
        }
        self.totals = self._read(folder, summary, complete)
        self._check(self.totals)

    def _read(self, folder: Folder, summary: Mapping[str, Any], complete: bool) -> Totals:
        if complete:
            tables = {}
            for axis, name in (("unit", "units"), ("step", "steps")):
                rel = f"{SUMMARY_DIR}/{name}.parquet"
                try:
                    data = folder.read_bytes(rel, _MAX_BYTES)
                    self._declared(data, rel, (axis,))
                    tables[axis] = pq.read_table(pa.BufferReader(data), **VERIFY_CHECKSUMS)
                except (*UNREADABLE, OSError) as err:
                    raise RecordingError(
                        f"{self._shown}/{rel} cannot be read ({unreadable(err)}): {DAMAGED}"
                    ) from None
                expected = {*KEY_COLUMNS, axis, *STATS}
                missing = expected - set(tables[axis].column_names)
                if missing:
                    raise RecordingError(
                        f"{self._shown}/{rel} is not a summary gatetrace wrote: it has no {', '.join(sorted(missing))}"
                    )
            try:
                return Totals.from_frames(
                    tables["unit"], tables["step"], self.edges, self.low, self.high
                )
            except RecordingError as err:
                raise RecordingError(
                    f"{self._shown}/{SUMMARY_DIR} is not a summary gatetrace wrote: {err}"
                ) from None
        totals = Totals()
        for name in sorted(folder.entries(TOTALS_DIR)) if folder.is_dir(TOTALS_DIR) else []:
            if name.startswith("shard-") and name.endswith(".parquet"):
                rel = f"{TOTALS_DIR}/{name}"
                data = folder.read_bytes(rel, _MAX_BYTES)
                try:
                    self._declared(data, rel, ("unit", "step"))
                except UNREADABLE as err:
                    raise RecordingError(
                        f"{self._shown}/{rel} cannot be read ({unreadable(err)}): {DAMAGED}"
                    ) from None
                got, _ = read_totals(data, summary, f"{self._shown}/{rel}")
                totals = totals.merge(got)
        return totals

    def _most(self, key: tuple, axis: str) -> int:
        """The positions a column may hold along `axis`: its cell's units, or its steps."""
        low, high = self._bounds[key[0]][axis]
        return high - low

    def _declared(self, data: bytes, rel: str, axes: tuple[str, ...]) -> None:
        """RecordingError unless the rows a table's footer declares fit the columns the manifest
        lists (a row per column and unit, or step) and the memory budget, before it is decoded."""
        rows = pq.read_metadata(pa.BufferReader(data)).num_rows
        bins = max((len(e) + 1 for e in self.edges.values()), default=1)
        allowed = sum(
            self._most(key, axis) for key in self.edges if key[0] in self._bounds for axis in axes
        )
        if rows > allowed or rows * 8 * (bins + 2 * len(STATS)) > self._memory:
            raise RecordingError(
                f"{self._shown}/{rel} declares {rows:,} rows, more than the {allowed:,} its manifest's columns hold "
                f"or the memory budget of {self._memory:,} bytes: {DAMAGED}"
            )

    def _width(self, key: tuple) -> int | None:
        """The units a column of (cell, table, name, column) holds, as its manifest describes
        the cell (a state h: its output size); None where it does not say."""
        cell = self._cells.get(key[0]) or {}
        units = cell.get("units")
        if key[1] == "states" and key[2] == "h" and cell.get("output_size"):
            units = cell["output_size"]
        return int(units) if isinstance(units, int) else None

    def _check(self, totals: Totals) -> None:
        """RecordingError unless every number fits what was recorded (see the module docstring)."""
        for key, stats in totals.units.items():
            width = self._width(key)
            if width is not None and len(stats.count) != width:
                raise RecordingError(
                    f"{self._shown}: the summary of {'/'.join(key)} holds {len(stats.count):,} units where its cell has "
                    f"{width:,}: {DAMAGED}"
                )
            self._check_stats(key, "unit", np.arange(len(stats.count)), stats)
        for key, (at, stats) in totals.steps.items():
            self._check_stats(key, "step", at, stats)

    def _check_stats(self, key: tuple, axis: str, at: np.ndarray, stats: Stats) -> None:
        shown = f"{self._shown}: the summary of {'/'.join(key)}"
        bounds = self._bounds.get(key[0])
        if bounds is None:
            raise RecordingError(f"{shown} is of a cell its manifest does not list: {DAMAGED}")
        low, high = bounds[axis]
        if len(at) and not low <= int(at.min()) <= int(at.max()) < high:
            raise RecordingError(
                f"{shown} holds {axis} {int(at.max()) if int(at.max()) >= high else int(at.min())}, outside its "
                f"cell's {low} to {high - 1}: {DAMAGED}"
            )
        examples = bounds["example"][1] - bounds["example"][0]
        other = "unit" if axis == "step" else "step"
        most = examples * self._most(key, other)  # Python integers: no overflow
        count = stats.count
        if (
            len(count)
            and int(count.max()) > most
            # NaN is counted, never binned: a histogram holds its count or less
            or (stats.histogram.astype(object).sum(axis=-1) > count.astype(object)).any()
            or (stats.below > count).any()
            or (stats.above > count).any()
        ):
            raise RecordingError(
                f"{shown} counts more values than the {examples:,} examples and their {other}s hold, or its "
                f"histogram or saturation counts disagree with its count: {DAMAGED}"
            )

    def keys(self) -> list[tuple[str, str, str, str]]:
        """(cell, table, name, column) of every column the summary holds."""
        return list(self.edges)

    def frame(self, axis: str = "unit") -> pd.DataFrame:
        """The `unit` or `step` table as pandas: one row per column and unit (or step)."""
        if axis not in ("unit", "step"):
            raise SelectionError(f"axis {axis!r}: expected 'unit' or 'step'")
        return self.totals.frame(axis).to_pandas()

    def stats(
        self, cell: str, table: str, name: str, column: str, axis: str
    ) -> tuple[np.ndarray, Stats]:
        """(positions, Stats) of one column along `axis`: units 0, 1, ... or the step positions
        it holds. SelectionError naming what it holds when it does not hold that column."""
        key = (cell, table, name, column)
        if key not in self.edges:
            held = sorted({k[3] for k in self.edges if k[:3] == key[:3]})
            what = f"the columns {', '.join(held)}" if held else "nothing"
            raise SelectionError(
                f"the summary {self._shown} holds {what} of {cell} {name}, not {column}"
            )
        if axis == "unit":
            stats = self.totals.units.get(key)
            if stats is None:
                return np.zeros(0, np.int64), _empty(self.edges[key], self.low, self.high)
            return np.arange(len(stats.count)), stats
        got = self.totals.steps.get(key)
        if got is None:
            return np.zeros(0, np.int64), _empty(self.edges[key], self.low, self.high)
        return got


def _empty(edges: np.ndarray, low: float, high: float) -> Stats:
    """Statistics of no positions (a summary of no sequences)."""
    z = np.zeros(0)
    i = np.zeros(0, np.int64)
    return Stats(i, z, z, z, z, i, i, np.zeros((0, len(edges) + 1), np.int64), edges, low, high)
