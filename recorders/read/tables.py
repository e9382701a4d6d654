"""A recording's long tables read from its checked part files (`recorders.read.files`):
rows as a pandas frame, dense [examples, steps, units] arrays, and a gate a row group at a
time as `Block`s.

The part files become one pyarrow dataset (`dataset`), each file with its cell and gate
(or state) as partition values, no folder discovered; a selection's step, example and unit
ranges are pushed down as a filter (`read_rows`), after its row groups' statistics said how
many rows it reads (`overlapping_rows`). `cell` and the label come back dictionary-encoded,
so that pandas gets categoricals without a string per row. `recorders.Recording` is what
users call; this module is how it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recorders.errors import RecordingError, SelectionError
from recorders.read.files import DAMAGED, KEYS, TABLES, CheckedFiles, key_ranges, statistics
from recorders.write.columns import GATE_COLUMNS, PARTS
from recorders.write.layout import UNREADABLE, VERIFY_CHECKSUMS, unreadable

if TYPE_CHECKING:  # pandas is imported where a frame is made: metadata reads need none
    import pandas as pd
    import pyarrow.dataset as ds  # which imports pandas too

__all__ = [
    "Block",
    "Range",
    "dataset",
    "read_rows",
    "overlapping_rows",
    "dense",
    "dense_block",
    "file_blocks",
    "part_shares",
]

Range = tuple[int | None, int | None]


class Block(NamedTuple):
    """Some examples of one gate as arrays (`Recording.gate_blocks`): `values[e, s, u]` is
    unit u at step `steps[s]` of example `examples[e]`; `present[e, s]` says whether that
    (example, step) has rows (None: all have; NaN values where not)."""

    examples: np.ndarray
    steps: np.ndarray
    values: np.ndarray
    present: np.ndarray | None


def dataset(
    checked: CheckedFiles,
    table: str,
    keys: Sequence[tuple[str, str]] | None = None,
    examples: Range | None = None,
) -> ds.Dataset:
    """The part files of `keys` ((cell, label) pairs; all of the table's by default) as one
    dataset, each with its cell and label as partition values (no folder is discovered), each
    page's checksum verified as it is read."""
    # with `examples`, only the files that may hold them, by their names
    # (`CheckedFiles.overlapping`)
    import pyarrow.dataset as ds

    listed = checked.files(table)
    kind = TABLES[table]
    chosen = [
        (c, label, rel)
        for (c, label), files in listed.items()
        if keys is None or (c, label) in keys
        for rel in files
        if checked.overlapping(rel, examples)
    ]
    labels = [pa.field("cell", pa.string()), pa.field(kind, pa.string())]
    if not chosen:  # no file: no rows, in the columns a file would have
        values = [
            pa.field(n, pa.float32()) for n in (GATE_COLUMNS if table == "gates" else ("value",))
        ]
        empty = pa.schema([*(pa.field(k, t) for k, t in KEYS.items()), *values, *labels])
        return ds.dataset(empty.empty_table())
    first = checked.footer(table, chosen[0][0], chosen[0][2]).schema.to_arrow_schema()
    schema = pa.schema([*first, *labels])
    return ds.FileSystemDataset.from_paths(
        [rel for _, _, rel in chosen],
        schema=schema,
        format=ds.ParquetFileFormat(
            default_fragment_scan_options=ds.ParquetFragmentScanOptions(**VERIFY_CHECKSUMS)
        ),
        filesystem=checked.fs,
        partitions=[(ds.field("cell") == c) & (ds.field(kind) == label) for c, label, _ in chosen],
    )


def read_rows(
    checked: CheckedFiles,
    table: str,
    keys: Sequence[tuple[str, str]],
    columns: Sequence[str],
    steps: Range | None,
    examples: Range | None,
    units: Sequence[int] | None,
) -> pd.DataFrame:
    """The rows of `keys` in the step and example ranges ([start, stop), None: open) and of
    `units` (None: all): example, step, unit, `columns`, cell and the label, the last two
    categorical."""
    import pyarrow.dataset as ds

    kind = TABLES[table]
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
        read = dataset(checked, table, keys, examples).to_table(columns=wanted, filter=expression)
        if any(read[n].null_count for n in ("example", "step", "unit")):
            _name_nulls(checked, table, keys)
        # dictionary-encoded in Arrow: pandas gets categoricals without a string per row
        for name in ("cell", kind):
            read = read.set_column(
                read.schema.get_field_index(name), name, pc.dictionary_encode(read[name])
            )
        return read.to_pandas()
    except UNREADABLE as err:
        # pyarrow does not say which file: read each alone, the damaged one is named
        for c, label in keys:
            for rel in checked.files(table).get((c, label), []):
                checked.pages(table, c, rel)
        raise RecordingError(
            f"cannot read the {table} of {checked.path}: a part file is damaged ({unreadable(err)})"
        ) from None


def _name_nulls(checked: CheckedFiles, table: str, keys: Sequence[tuple[str, str]]) -> None:
    """RecordingError naming the part file of `keys` whose key columns hold nulls."""
    for c, label in keys:
        for rel in checked.files(table).get((c, label), []):
            file = checked.parquet(table, c, rel)
            read = checked.read(
                rel, lambda file=file: file.read(columns=list(KEYS), use_threads=False)
            )
            empty = next((n for n in KEYS if read[n].null_count), None)
            if empty is not None:
                raise RecordingError(
                    f"{checked.path}/{rel} is not a part file gatetrace wrote (its {empty} column "
                    f"holds nulls; gatetrace writes a key in every row): {DAMAGED}"
                )
    raise RecordingError(f"the {table} of {checked.path} hold rows without keys: {DAMAGED}")


def overlapping_rows(metadata: Any, steps: Range | None, examples: Range | None) -> int:
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


def dense(
    df: pd.DataFrame,
    column: str,
    examples: Range | None,
    complete: Sequence[Sequence[int]],
    allot: Callable[[Sequence[int], int, str], None],
) -> np.ndarray:
    """`column` of a frame's rows as a float32 [examples, steps, units] array, NaN where no
    row was read: the values of `dense_block`."""
    return dense_block(df, column, examples, complete, allot).values


def dense_block(
    df: pd.DataFrame,
    column: str,
    examples: Range | None,
    complete: Sequence[Sequence[int]],
    allot: Callable[[Sequence[int], int, str], None],
) -> Block:
    """`column` of a frame's rows as a `Block`: its values a float32 [examples, steps, units]
    array, NaN where no row was read, `present` saying which (example, step) has rows (a
    NaN value there is one recorded). The example axis holds the `complete` examples
    (intervals) within `examples`, even those without rows, or, where rows lie outside them
    or they are far more than the rows could fill, those present; the step axis runs from
    the first step read to the last. No array is made from what `complete` claims: `allot`
    refuses one over the memory budget first."""
    if df.empty:
        none = np.zeros(0, np.int64)
        return Block(none, none, np.zeros((0, 0, 0), np.float32), np.zeros((0, 0), bool))
    ex = df["example"].to_numpy()
    lo, hi = examples or (None, None)
    ranges = [
        (a if lo is None else max(a, lo), b if hi is None else min(b, hi)) for a, b in complete
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
    allot(shape, 4, f"an array of {' x '.join(map(str, shape))} (examples, steps, units)")
    out = np.full(shape, np.nan, np.float32)
    out[ex_idx, step - first, df["unit"].to_numpy()] = df[column].to_numpy()
    present = np.zeros(shape[:2], bool)
    present[ex_idx, step - first] = True
    return Block(np.asarray(ids, np.int64), np.arange(first, first + shape[1]), out, present)


def file_blocks(
    checked: CheckedFiles,
    table: str,
    cell: str,
    rel: str,
    column: str,
    units: int,
    examples: Range | None = None,
) -> Iterator[Block]:
    """`column` of the part file `rel` of `cell`, a row group at a time, with its keys: reshaped
    where a row group holds every (example, step, unit) of its ranges (`key_ranges`) in C
    order (`_in_c_order`), else the keys checked and the values spread by them into a `Block`
    with the (example, step) pairs present.
    With `examples` ([start, stop), None: open), the row groups whose statistics say they
    hold none of them are skipped (a block may still hold examples outside them)."""
    file = checked.parquet(table, cell, rel)
    if column not in file.schema_arrow.names:
        raise SelectionError(
            f"column {column!r}: {checked.path}/{rel} holds {', '.join(file.schema_arrow.names)}"
        )
    lo, hi = examples or (None, None)
    for k in range(file.num_row_groups):
        held = statistics(file.metadata.row_group(k)) if examples is not None else None
        if held is not None and (
            (lo is not None and held[0][1] < lo) or (hi is not None and held[0][0] >= hi)
        ):
            continue
        t = checked.read(
            rel,
            lambda k=k: file.read_row_group(
                k, columns=["example", "step", "unit", column], use_threads=False
            ),
        )
        empty = next((n for n in ("example", "step", "unit") if t.column(n).null_count), None)
        if empty is not None:
            raise RecordingError(
                f"{checked.path}/{rel} is not a part file gatetrace wrote (row group {k}'s "
                f"{empty} column holds nulls; gatetrace writes a key in every row): {DAMAGED}"
            )
        keys = {n: t.column(n).to_numpy() for n in ("example", "step", "unit")}
        ranges = key_ranges(file.metadata.row_group(k), units)
        if ranges is not None and _in_c_order(keys, ranges):
            (e0, e1), (s0, s1), (u0, u1) = ranges
            yield Block(
                np.arange(e0, e1 + 1),
                np.arange(s0, s1 + 1),
                t.column(column).to_numpy().reshape(e1 - e0 + 1, s1 - s0 + 1, u1 - u0 + 1),
                None,
            )
        else:
            checked.check_keys(rel, cell, keys)
            yield _scattered(checked, rel, keys, t.column(column).to_numpy(), units)


def _in_c_order(keys: dict[str, np.ndarray], ranges: tuple[tuple[int, int], ...]) -> bool:
    """Whether the key columns of a row group are every (example, step, unit) of `ranges` in C
    order, as the writer writes them (a file rewritten in another order keeps the count and
    the statistics: its rows are then placed by their keys)."""
    (e0, e1), (s0, s1), (u0, u1) = ranges
    shape = (e1 - e0 + 1, s1 - s0 + 1, u1 - u0 + 1)
    if any(len(v) != shape[0] * shape[1] * shape[2] for v in keys.values()):
        return False
    return bool(
        (keys["example"].reshape(shape[0], -1) == np.arange(e0, e1 + 1)[:, None]).all()
        and (keys["step"].reshape(shape) == np.arange(s0, s1 + 1)[None, :, None]).all()
        and (keys["unit"].reshape(-1, shape[2]) == np.arange(u0, u1 + 1)).all()
    )


def _scattered(
    checked: CheckedFiles, rel: str, keys: dict[str, np.ndarray], value: np.ndarray, units: int
) -> Block:
    """A `Block` from long rows that leave some (example, step) out (lengths, masks)."""
    examples, e = _sorted_unique(keys["example"])
    steps, s = _sorted_unique(keys["step"])
    checked.allot(
        (len(examples), len(steps), units),
        5,
        f"a row group of {checked.path}/{rel} spread over {len(examples)} examples "
        f"and {len(steps)} steps",
    )
    values = np.full((len(examples), len(steps), units), np.nan, np.float32)
    present = np.zeros(values.shape[:2], bool)
    values[e, s, keys["unit"]] = value
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
    import pandas as pd

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
