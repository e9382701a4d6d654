"""What `Recording.check()` reads every page for: each file as gatetrace wrote it, not just readable.

- `recount`: a gate's part file's footer statistics (`recorders.write.partstats`) and top values
  (`recorders.write.tops`), which the view's overview and unit pages read in place of the
  values, counted again from the values it holds, a row group at a time, by the writer's own
  `Tally` and `TopTally` (so they agree to the last bit) and compared: a footer rewritten to
  another (plausible) value is named, not shown.
- `has_checksums`: whether a part file's pages carry their CRC32 (Parquet's page checksum, read
  from the header of its first page), so that a file rewritten by another tool, without them,
  among files gatetrace wrote with them is named.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from recorders.write.partstats import FOOTER_KEY, PartStats, Tally
from recorders.write.partstats import read as read_stats
from recorders.write.tops import TOP_KEY, TopTally
from recorders.write.tops import read as read_tops

__all__ = ["recount", "has_checksums"]

_ANY = (-(2**62), 2**62)  # the examples and steps a footer's top values are decoded within


def recount(
    file: pq.ParquetFile,
    metadata: Any,
    bounds: tuple[float, float] | None,
    span: tuple[float, float] | None,
    read: Callable[[Callable[[], Any]], Any],
    allot: Callable[[Sequence[int], int, str], None],
) -> str | None:
    """Why the statistics and top values in the footer (`metadata`) of the gate part file `file`
    are not those its activations give (None where they are, or where it carries none, or numba
    is not installed: nothing to recount with). Every row group is read whole (every page,
    its checksum verified) through `read`; `bounds`: the gate's saturation thresholds
    (`recorders.write.totals.saturation_bounds`), `span`: its nonlinearity's range; `allot`
    refuses a dense row group larger than the memory budget."""
    said = metadata.metadata or {}
    stats_said, tops_said = said.get(FOOTER_KEY), said.get(TOP_KEY)
    rows = metadata.num_rows
    try:
        claimed = None if stats_said is None else read_stats(stats_said, rows, span)
        tops_claimed = (
            None
            if tops_said is None
            else read_tops(tops_said, rows, _units(tops_said), _ANY, _ANY, span)
        )
    except ValueError as err:
        return str(err)
    # the tallies count only where numba is installed (`recorders.write.compiled.available`)
    if (claimed is None and tops_claimed is None) or importlib.util.find_spec("numba") is None:
        for k in range(file.num_row_groups):  # every page read, its checksum verified
            read(partial(file.read_row_group, k, use_threads=False))
        return None
    width = claimed.units if claimed is not None else tops_claimed.units  # type: ignore[union-attr]
    steps = _file_steps(file, claimed, read)
    low, high = bounds or (None, None)
    tally = Tally(steps, low, high)
    top = TopTally(steps, np.zeros(0, np.int64))
    order = np.argsort(steps, kind="stable")
    for k in range(file.num_row_groups):
        group = read(partial(file.read_row_group, k, use_threads=False))
        if "activation" not in group.column_names:
            return "its footer carries statistics of activations it does not hold"
        example, step, unit, values = (
            group.column(n).to_numpy(zero_copy_only=False)
            for n in ("example", "step", "unit", "activation")
        )
        dense = _dense(example, step, unit, values, steps, order, width, allot)
        if isinstance(dense, str):
            return f"row group {k} {dense}"
        x, valid, examples = dense
        tally.add(x, valid)
        top.add(x, valid, examples)
    for what, kept, counted in (
        ("statistics", claimed, tally.stats()),
        ("top values", tops_claimed, top.tops()),
    ):
        if kept is None:
            continue
        if counted is None or not kept.equals(counted):  # type: ignore[arg-type]
            return f"its footer's {what} are not those of the values it holds"
    return None


def _units(value: bytes) -> int:
    """The units a footer's top values say they are of (checked by `read_tops` after)."""
    try:
        said = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return -1
    units = said.get("units") if isinstance(said, dict) else None
    return units if isinstance(units, int) and not isinstance(units, bool) else -1


def _file_steps(
    file: pq.ParquetFile, claimed: PartStats | None, read: Callable[[Callable[[], Any]], Any]
) -> np.ndarray:
    """The steps the writer was given for the file: those its statistics list (a step no
    example reached among them, counted 0; a row of a step they leave out is named by
    `_dense`); without statistics, the steps its rows hold."""
    if claimed is not None:
        return claimed.steps.astype(np.int64)
    held = [
        read(partial(file.read_row_group, k, columns=["step"], use_threads=False))
        .column(0)
        .to_numpy()
        .astype(np.int64)
        for k in range(file.num_row_groups)
    ]
    return np.unique(np.concatenate([np.zeros(0, np.int64), *held]))


def _dense(
    example: np.ndarray,
    step: np.ndarray,
    unit: np.ndarray,
    values: np.ndarray,
    steps: np.ndarray,
    order: np.ndarray,
    width: int,
    allot: Callable[[Sequence[int], int, str], None],
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
    """A row group's activations as the writer gave them to its tally: [examples, steps, units]
    (its examples in the order its rows hold them, the steps `steps`), which (example, step)
    are written, and its examples; or why its rows are not such (a step the statistics do not
    list, a unit outside `width`, a key twice, a written step without every unit)."""
    if len(example) == 0:
        return (
            np.zeros((0, len(steps), width), np.float32),
            np.zeros((0, len(steps)), bool),
            example,
        )
    held, first = np.unique(example, return_index=True)
    rank = np.empty(len(held), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(held))
    ei = rank[np.searchsorted(held, example)]
    ranked = steps[order]
    at = np.searchsorted(ranked, step)
    at = np.minimum(at, len(ranked) - 1)
    if len(ranked) == 0 or np.any(ranked[at] != step):
        return "holds a step its statistics do not list"
    si = order[at]
    if unit.min() < 0 or unit.max() >= width:
        return f"holds a unit outside the {width} its footer counts"
    allot((len(held), len(steps), width), 4, "a row group recounted")
    cells = (ei * len(steps) + si) * width + unit.astype(np.int64)
    if np.bincount(cells).max() > 1:
        return "holds a row twice"
    valid = np.zeros((len(held), len(steps)), bool)
    valid[ei, si] = True
    if int(valid.sum()) * width != len(cells):
        return "holds a step without every unit"
    x = np.zeros(len(held) * len(steps) * width, np.float32)
    x[cells] = values
    return x.reshape(len(held), len(steps), width), valid, held[np.argsort(first, kind="stable")]


def has_checksums(read_bytes: Callable[[int, int], bytes], metadata: Any) -> bool:
    """Whether the first page of the first column chunk of a Parquet file carries its CRC32
    (field 4 of its `PageHeader`, Thrift's compact protocol): `read_bytes(offset, size)` reads
    the file. The fields before it (type, uncompressed and compressed size) are i32s."""
    if metadata.num_row_groups == 0 or metadata.num_columns == 0:
        return True  # no page to carry one
    chunk = metadata.row_group(0).column(0)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = read_bytes(int(start), 64)
    at, field = 0, 0
    while at < len(data):
        head = data[at]
        at += 1
        if head == 0:
            return False  # the struct ended without one
        delta, kind = head >> 4, head & 0x0F
        if delta == 0:
            return False  # a long field header: not a header gatetrace or pyarrow writes
        field += delta
        if field == 4:
            return kind == 5
        if kind != 5:
            return False  # past the leading i32s: no checksum before its place
        while at < len(data) and data[at] & 0x80:  # the i32's varint
            at += 1
        at += 1
    return False
