"""Labels a user scores units against, and the recorded values at the labelled positions.

Labels come as
- a numpy array or `.npy` file shaped [examples]: one label per sequence, scored at the last
  step each cell computed for it (its last recorded input position; for a cell reading the
  sequence backwards, its first), or at the input position `step=K` names;
- a numpy array or `.npy` file shaped [examples, steps]: one label per input position (NaN
  where a position has none), e.g. "inside a quote" per character;
- a Parquet or CSV table with columns `example`, `label` and optionally `step` (without
  `step`: one label per sequence, as above), e.g. from pandas or DuckDB.

Rows of the arrays are the rows of the recorded inputs (the recording's `example`), columns
its input positions (`step`). Labels with two distinct values are binary (the larger, or
True, is the positive class); more distinct numbers are numeric. `.npy` files are read
without pickles, regular files only; a table's columns are read by name.

`gather` streams one gate column (or state) of one cell through `Recording.blocks` and
keeps, for the labelled positions that have a recorded row, the values of a range of units:
the matrix `recorders.read.units` ranks and `recorders.read.probe` fits.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from recorders.errors import SelectionError
from recorders.read.files import sequences_fed
from recorders.read.npy import npy_header
from recorders.read.reader import Recording

if TYPE_CHECKING:  # pandas is imported where a frame is made: metadata reads need none
    import pandas as pd

__all__ = ["Labels", "read_labels", "Gathered", "gather", "covers"]


@dataclass(frozen=True)
class Labels:
    """Labels aligned with a recording's inputs: `values` is float64 [examples] (one per
    sequence) or [examples, steps] (one per input position), NaN where there is none.
    `binary` labels hold two values, `positive` the larger; `table` says whether they came
    from a table (which labels only the positions it lists) rather than an array (which
    must cover every recorded example and step). `step`: the one input position they label
    (`at_step`: an array then covers the steps up to it), None: any."""

    values: np.ndarray
    binary: bool
    positive: float | None
    table: bool = False
    source: str = "labels"
    step: int | None = None

    @property
    def per_sequence(self) -> bool:
        return self.values.ndim == 1

    def at_step(self, step: int, positions: int) -> Labels:
        """Only the labels of input position `step` (of the `positions` a recording holds):
        one per sequence placed there, or the per-position labels of that column."""
        if not isinstance(step, int) or not 0 <= step < positions:
            raise SelectionError(
                f"step {step}: expected an input position the recording holds, 0 to {positions - 1}"
                if positions
                else f"step {step}: the recording holds no input position"
            )
        grid = np.full((self.values.shape[0], step + 1), np.nan)
        if self.per_sequence:
            grid[:, step] = self.values
        elif step < self.values.shape[1]:
            grid[:, step] = self.values[:, step]
        return Labels(
            grid, self.binary, self.positive, self.table, f"{self.source} at step {step}", step
        )


def positions(rec: Recording, cells: Sequence[str]) -> int:
    """How many input positions `rec` holds for `cells`: one past the last one recorded."""
    return max(
        (int(s.max()) + 1 for c in dict.fromkeys(cells) if len(s := rec.steps(c))), default=0
    )


def read_labels(source: Any, memory: int = 2**30) -> Labels:
    """`Labels` from an array, a DataFrame, or a `.npy`, `.parquet` or `.csv` file (see the
    module docstring); `memory` bounds what a file decodes to (checked from its header, footer
    or size before it is decoded) and the dense array a table becomes."""
    import pandas as pd

    if isinstance(source, pd.DataFrame):
        return _from_table(source, "the labels table", memory)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        shown = str(path)
        suffix = path.suffix.lower()
        if path.exists() and not path.is_file():  # a FIFO would block, a device read forever
            raise SelectionError(
                f"labels {shown}: not a regular file; give a .npy, .parquet or .csv file"
            )
        try:
            if suffix == ".npy":
                array = _npy(path, shown, memory)
            elif suffix in (".parquet", ".pq"):
                import pyarrow.parquet as pq

                footer = pq.read_metadata(path)
                names = footer.schema.to_arrow_schema().names
                wanted = [c for c in ("example", "step", "label") if c in names]
                # decoded: 8 bytes a value of each column read, then again as pandas columns
                _fits(
                    footer.num_rows * 16 * max(len(wanted), 1),
                    f"its {footer.num_rows:,} rows",
                    shown,
                    memory,
                )
                array = None
                table = pq.read_table(path, columns=wanted).to_pandas()
            elif suffix == ".csv":
                # a row of example and label takes 4 bytes of text at least ("0,1\n"), 3 columns of 8 bytes read
                _fits(
                    path.stat().st_size * 6,
                    f"its {path.stat().st_size:,} bytes of text",
                    shown,
                    memory,
                )
                table = pd.read_csv(path, usecols=lambda c: c in ("example", "step", "label"))
                array = None
            else:
                raise SelectionError(
                    f"labels {shown}: expected a .npy, .parquet or .csv file, given {path.suffix or 'no suffix'}"
                )
        except (OSError, ValueError) as err:
            raise SelectionError(f"labels {shown}: cannot read it ({err})") from None
        if array is None:
            return _from_table(table, shown, memory)
        return _from_array(array, shown)
    return _from_array(np.asarray(source), "the labels array")


def _fits(size: int, what: str, shown: str, memory: int) -> None:
    """SelectionError unless `size` bytes, what a label file decodes to, fit the memory budget."""
    if size > memory:
        raise SelectionError(
            f"labels {shown}: {what} would take {size:,} bytes decoded, more than the memory budget of "
            f"{memory:,}; give labels for the recording's examples only, or a larger budget (--memory)"
        )


def _npy(path: Path, shown: str, memory: int) -> np.ndarray:
    """A `.npy` file's array, its header's shape and type checked against the memory budget (as
    float64 labels) and its size against the header before anything is allocated; no pickles."""
    with open(path, "rb") as f:
        shape, _, dtype = npy_header(f)
        start = f.tell()
    if dtype.hasobject:
        raise ValueError("it holds Python objects (pickles); save the labels as numbers")
    count = int(np.prod(shape, dtype=object))
    _fits(count * max(8, dtype.itemsize) * 2, f"its shape {list(shape)}", shown, memory)
    if path.stat().st_size - start < count * dtype.itemsize:
        raise ValueError(f"it is shorter than its header's shape {list(shape)} says")
    return np.load(path, allow_pickle=False)


def _from_array(array: np.ndarray, shown: str) -> Labels:
    if array.ndim not in (1, 2):
        raise SelectionError(
            f"labels {shown}: expected an array shaped [examples] or [examples, steps], given shape {list(array.shape)}"
        )
    values, binary, positive = _values(array, shown)
    return Labels(values, binary, positive, table=False, source=shown)


def _from_table(table: pd.DataFrame, shown: str, memory: int) -> Labels:
    import pandas as pd

    missing = [c for c in ("example", "label") if c not in table.columns]
    if missing:
        raise SelectionError(
            f"labels {shown}: expected columns example, label and optionally step; it has no {', '.join(missing)}"
        )
    keys = ["example", "step"] if "step" in table.columns else ["example"]
    for key in keys:
        column = table[key]
        if not pd.api.types.is_integer_dtype(column) or (len(column) and column.min() < 0):
            raise SelectionError(
                f"labels {shown}: column {key} must hold whole numbers 0 or more (the recording's {key})"
            )
    if table.duplicated(keys).any():
        first = table[table.duplicated(keys)].iloc[0]
        where = ", ".join(f"{k} {int(first[k])}" for k in keys)
        raise SelectionError(f"labels {shown}: {where} is labelled twice")
    values, binary, positive = _values(table["label"].to_numpy(), shown)
    shape = tuple(int(table[k].max()) + 1 if len(table) else 0 for k in keys)
    if int(np.prod(shape, dtype=object)) * 8 > memory:
        raise SelectionError(
            f"labels {shown}: examples up to {shape[0] - 1:,}"
            + (f" and steps up to {shape[1] - 1:,}" if len(shape) > 1 else "")
            + " would take more than the memory budget; number examples and steps as the recording does"
        )
    grid = np.full(shape, np.nan)
    grid[tuple(table[k].to_numpy() for k in keys)] = values
    return Labels(grid, binary, positive, table=True, source=shown)


def _values(array: np.ndarray, shown: str) -> tuple[np.ndarray, bool, float | None]:
    """The labels as float64 (NaN: no label), whether binary, and the positive value."""
    if array.dtype == bool:
        values = array.astype(np.float64)
    elif np.issubdtype(array.dtype, np.number) and not np.issubdtype(
        array.dtype, np.complexfloating
    ):
        values = array.astype(np.float64)
    else:
        raise SelectionError(
            f"labels {shown}: expected binary or numeric labels, given {array.dtype} values; map them to 0 and 1 "
            "(or to numbers) first"
        )
    if np.isinf(values).any():
        raise SelectionError(
            f"labels {shown}: holds infinite values; use NaN where there is no label"
        )
    distinct = np.unique(values[~np.isnan(values)])
    if len(distinct) < 2:
        said = "no labels" if not len(distinct) else f"only the label {distinct[0]:g}"
        raise SelectionError(
            f"labels {shown}: {said}; a unit can only be scored against labels that vary"
        )
    binary = len(distinct) == 2
    return values, binary, float(distinct[1]) if binary else None


@dataclass(frozen=True)
class Gathered:
    """Units `first`, `first` + 1, ... of one cell's gate column (or state) at the labelled
    positions, the positions in (example, step) order: `parts`, float32 [positions, units]
    arrays one after another (a row group's rows each, as read: not copied into one), with
    `labels`, `examples` and `steps` per position."""

    parts: tuple[np.ndarray, ...]
    labels: np.ndarray
    examples: np.ndarray
    steps: np.ndarray
    first: int = 0

    @property
    def units(self) -> int:
        return self.parts[0].shape[1]

    @property
    def values(self) -> np.ndarray:
        """The parts as one [positions, units] array (a copy, where there are several)."""
        return self.parts[0] if len(self.parts) == 1 else np.concatenate(self.parts)

    def columns(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """Units [start, stop) of every position (stop at most the units there), [positions,
        units], into `out` if given."""
        stop = min(stop, self.units)
        if out is None:
            out = np.empty((len(self.labels), stop - start), self.parts[0].dtype)
        at = 0
        for part in self.parts:
            np.copyto(out[at : at + len(part)], part[:, start:stop])  # a cache line a row
            at += len(part)
        return out


def covers(rec: Recording, cell: str, labels: Labels) -> None:
    """SelectionError unless an array of labels covers every recorded example (and step)."""
    if labels.table:
        return
    stop = max((b for _, b in rec.examples), default=0)
    steps = rec.steps(cell)
    last_step = int(steps.max()) + 1 if len(steps) else 0
    # labels of one step (`Labels.at_step`) need reach no further
    reach = last_step if labels.step is None else labels.step + 1
    short = labels.values.shape[0] < stop or (
        not labels.per_sequence and labels.values.shape[1] < reach
    )
    if short:
        wanted = f"[{stop}]" if labels.per_sequence else f"[{stop}, {reach}]"
        raise SelectionError(
            f"labels {labels.source}: shape {list(labels.values.shape)} does not cover the recording (cell {cell} "
            f"holds examples 0 to {stop - 1} and steps to {last_step - 1}): expected at least {wanted}"
        )
    fed = _sequences_fed(rec)
    if fed is not None and labels.values.shape[0] != fed:
        raise SelectionError(
            f"labels {labels.source}: {labels.values.shape[0]:,} rows, but the recording was fed {fed:,} sequences "
            "(its manifest's feeds): labels are one row per sequence fed, in order; give the labels of those inputs"
        )


def _sequences_fed(rec: Recording) -> int | None:
    """How many sequences the recording's inputs held (`files.sequences_fed`)."""
    return sequences_fed(rec.description or {})


def gather(
    rec: Recording,
    table: str,
    cell: str,
    name: str,
    column: str,
    labels: Labels,
    units: tuple[int, int] | None = None,
    check: bool = True,
) -> Gathered:
    """The values of units [start, stop) (default: all) of `cell`'s gate (or state) `name`,
    `column`, at the positions with a label and a recorded row; one read of its files.
    Per-sequence labels take each example's last recorded step. `check=False`: the caller has
    checked that the labels cover the cell (`covers`)."""
    if rec.kind == "summary":
        raise SelectionError(
            f"{rec.path} is a summary recording (--summary): units are scored against every value, which it "
            "does not hold; record without --summary"
        )
    if check:
        covers(rec, cell, labels)
    if labels.per_sequence:
        return _last_steps(rec, table, cell, name, column, labels, units)
    grid = labels.values
    parts, where = [], []
    for b in rec.blocks(table, cell, name, column):
        ex, st = b.examples, b.steps
        inside_e, inside_s = ex < grid.shape[0], st < grid.shape[1]
        lab = np.full((len(ex), len(st)), np.nan)
        lab[np.ix_(inside_e, inside_s)] = grid[np.ix_(ex[inside_e], st[inside_s])]
        ok = ~np.isnan(lab)
        if b.present is not None:
            ok &= b.present
        values = b.values if units is None else b.values[:, :, units[0] : units[1]]
        if ok.all():  # every position of the block: its rows as they are, without a copy
            parts.append(values.reshape(-1, values.shape[2]))
        elif ok.any():
            parts.append(values[ok])
        else:
            continue
        e, s = np.nonzero(ok)
        where.append((ex[e], st[s], lab[e, s]))
    if not parts:
        raise _nothing(labels, cell)
    examples = np.concatenate([w[0] for w in where])
    steps = np.concatenate([w[1] for w in where])
    labelled = np.concatenate([w[2] for w in where])
    key = examples.astype(np.int64) << 32 | steps
    if len(key) > 1 and (np.diff(key) <= 0).any():  # blocks out of order: put them in order
        order = np.argsort(key, kind="stable")
        parts = [np.concatenate(parts)[order]]
        labelled, examples, steps = labelled[order], examples[order], steps[order]
    return Gathered(tuple(parts), labelled, examples, steps, units[0] if units else 0)


def _last_steps(rec, table, cell, name, column, labels: Labels, units) -> Gathered:
    """Per-sequence labels: each labelled example's row at the last step the cell computed:
    its last recorded input position, or, for a cell that reads the sequence backwards, its
    first."""
    n = labels.values.shape[0]
    backward = rec.cell(cell).get("direction") == "backward"
    done = np.full(n, np.iinfo(np.int64).min)  # how far along its direction each row kept is
    final = np.zeros(n, np.int64)  # its input position
    rows: np.ndarray | None = None
    for b in rec.blocks(table, cell, name, column):
        values = b.values if units is None else b.values[:, :, units[0] : units[1]]
        if rows is None:
            rec.allot((n, values.shape[2]), 4, f"the last steps of {n:,} examples")
            rows = np.full((n, values.shape[2]), np.nan, np.float32)
        keep = b.examples < n
        present = np.ones(values.shape[:2], bool) if b.present is None else b.present
        has = present.any(axis=1) & keep
        if backward:  # the first recorded position of each example: the cell's last step
            at = np.argmax(present, axis=1)
        else:
            at = values.shape[1] - 1 - np.argmax(present[:, ::-1], axis=1)
        step = b.steps[at].astype(np.int64)
        along = -step if backward else step
        ex = np.where(keep, b.examples, 0)
        later = has & (along > done[ex])
        rows[ex[later]] = values[np.flatnonzero(later), at[later]]
        done[ex[later]] = along[later]
        final[ex[later]] = step[later]
    chosen = np.flatnonzero((done > np.iinfo(np.int64).min) & ~np.isnan(labels.values))
    if rows is None or not len(chosen):
        raise _nothing(labels, cell)
    return Gathered(
        (rows[chosen],),
        labels.values[chosen],
        chosen,
        final[chosen],
        units[0] if units else 0,
    )


def _nothing(labels: Labels, cell: str) -> SelectionError:
    return SelectionError(
        f"labels {labels.source}: no labelled position has a recorded row in cell {cell}; label the examples "
        "and steps the recording holds"
    )
