"""The statistics of a summary recording and their Parquet form, shared by its writer and readers.

`Bins` says how values are binned (see `recorders.write.summary` for the recording's layout):
an activation whose nonlinearity has a range (`RANGES`: sigmoid and hard sigmoid [0, 1], tanh
and softsign [-1, 1]) over that range in `RANGED_BINS` bins, every other column (preactivations,
states, an unbounded activation such as relu) over the bins the user gives (`lo`, `hi`,
`count`; by default -10 to 10 in 40), with under- and overflow counted; and the saturation
thresholds `low` and `high`. `summary_columns` lists the columns of a summary of given cells.

`Totals` holds `recorders.write.stats.Stats` per unit and per step of each column (cell, table,
name, column), merges batches and shards, and converts to and from the two tables (`frame`,
`from_frames`); `totals_bytes` and `read_totals` are a shard's running-totals file, the
examples it holds in its metadata. Whatever is read is checked before a number is used: the
files may come from anyone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from recorders.errors import RecordingError, SelectionError
from recorders.write.layout import VERIFY_CHECKSUMS, WRITE_CHECKSUMS, unreadable
from recorders.write.progress import Intervals
from recorders.write.schema import parse_json
from recorders.write.stats import Stats, check_edges

__all__ = [
    "Bins",
    "Totals",
    "RANGES",
    "saturation_bounds",
    "RANGED_BINS",
    "STATS",
    "KEY_COLUMNS",
    "nonlinearity",
    "summary_columns",
    "edges_of",
    "thresholds_of",
    "totals_bytes",
    "read_totals",
]

# The range of each bounded nonlinearity gatetrace knows: activations through it are binned there.
RANGES: dict[str, tuple[float, float]] = {
    "sigmoid": (0.0, 1.0),
    "hard_sigmoid": (0.0, 1.0),
    "tanh": (-1.0, 1.0),
    "softsign": (-1.0, 1.0),
}
RANGED_BINS = 20  # 0.05 wide on [0, 1]: the default thresholds 0.1 and 0.9 are edges
STATS = ("count", "mean", "variance", "m2", "min", "max", "below", "above", "histogram")
KEY_COLUMNS = ("cell", "table", "name", "column")  # what names a column of a summary
_KEY = KEY_COLUMNS
_INT_STATS = ("count", "below", "above")
_FLOAT_STATS = ("mean", "variance", "m2", "min", "max")
_ATTRIBUTE = {"min": "minimum", "max": "maximum"}  # a table's column: its Stats attribute


def _joined(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
    """The arrays one after the other (none: an empty array of `dtype`)."""
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype)


def nonlinearity(cell: Mapping[str, Any], gate: str) -> str:
    """The nonlinearity of `gate`'s activation in a cell described as the manifest describes
    it: its `nonlinearities` entry (every cell's, a cell of your own's the op its pattern
    named); in a manifest written before they were listed, the candidate (LSTM `j`, GRU `c`)
    and a simple RNN's `h` go through the cell's `activation`, the other gates (i, f, o; r, u)
    through its `recurrent_activation`, which TensorFlow's own cells fix to sigmoid."""
    listed = cell.get("nonlinearities")
    if isinstance(listed, Mapping) and isinstance(listed.get(gate), str):
        return str(listed[gate]).lower()
    if gate in ("j", "c", "h"):
        return str(cell.get("activation") or "tanh").lower()
    return str(cell.get("recurrent_activation") or "sigmoid").lower()


def saturation_bounds(cell: Mapping[str, Any], gate: str) -> tuple[float, float] | None:
    """Where `gate` of a described cell saturates: below and above the values within a tenth
    of each end of its nonlinearity's range (`RANGES`: 0.1 and 0.9 for sigmoid, as Karpathy,
    Johnson and Fei-Fei 2015 count it; -0.9 and 0.9 for tanh); None for a nonlinearity without
    a range (relu, a cell of your own's identity): it does not saturate."""
    bounded = RANGES.get(nonlinearity(cell, gate))
    if bounded is None:
        return None
    lo, hi = bounded
    return lo + 0.1, hi - 0.1


@dataclass(frozen=True)
class Bins:
    """A summary's histogram bins and saturation thresholds (see the module docstring)."""

    low: float = 0.1
    high: float = 0.9
    lo: float = -10.0
    hi: float = 10.0
    count: int = 40

    def __post_init__(self) -> None:
        if not (np.isfinite(self.low) and np.isfinite(self.high) and self.low < self.high):
            raise SelectionError(
                f"--saturation {self.low:g},{self.high:g}: expected two finite numbers, the low threshold first, "
                "e.g. --saturation 0.1,0.9"
            )
        if not (isinstance(self.count, int) and 1 <= self.count <= 10_000):
            raise SelectionError(
                f"--bins {self.lo:g},{self.hi:g},{self.count}: expected from 1 to 10,000 bins, e.g. --bins -10,10,40"
            )
        if not (np.isfinite(self.lo) and np.isfinite(self.hi) and self.lo < self.hi):
            raise SelectionError(
                f"--bins {self.lo:g},{self.hi:g},{self.count}: expected bins that increase, the lowest edge first, "
                "e.g. --bins -10,10,40"
            )

    def edges(self, column: str, activation: str | None) -> np.ndarray:
        """The edges of a column: an activation through a bounded nonlinearity over its range,
        anything else over the user's bins."""
        if column == "activation" and activation in RANGES:
            lo, hi = RANGES[activation]
            return np.linspace(lo, hi, RANGED_BINS + 1)
        return np.linspace(self.lo, self.hi, self.count + 1)

    def check_thresholds(self, activations: Iterable[str]) -> None:
        """Refuse thresholds outside the range of a bounded activation being summarised."""
        for name in sorted(set(activations)):
            if name in RANGES:
                lo, hi = RANGES[name]
                if not (lo <= self.low and self.high <= hi):
                    raise SelectionError(
                        f"--saturation {self.low:g},{self.high:g}: a {name} activation lies in [{lo:g}, {hi:g}]; give "
                        f"thresholds within it, e.g. --saturation {lo + 0.1 * (hi - lo):g},{lo + 0.9 * (hi - lo):g}"
                    )

    def describe(self, columns: Iterable[tuple[str, str, str, str, np.ndarray]]) -> dict[str, Any]:
        """The manifest's `summary`: the thresholds, the user's bins, every column's edges."""
        return {
            "low": self.low,
            "high": self.high,
            "bins": [self.lo, self.hi, self.count],
            "columns": [
                {"cell": c, "table": t, "name": n, "column": col, "edges": e.tolist()}
                for c, t, n, col, e in columns
            ],
        }


def summary_columns(
    cells: Iterable[Mapping[str, Any]], values: Iterable[str], bins: Bins, gates=None
) -> list[tuple[str, str, str, str, np.ndarray]]:
    """(cell, table, name, column, edges) of every column a summary of `cells` holds: each
    gate's `values` (of preactivation and activation) whose gate `gates(cell, gate)` keeps
    (default: all), and each state's `value`. Refuses thresholds outside a bounded
    activation's range, and a selection that leaves nothing."""
    out, activations = [], []
    for cell in cells:
        name = cell["name"]
        for gate in cell["gates"]:
            if gates is not None and not gates(name, gate):
                continue
            act = nonlinearity(cell, gate)
            for column in values:
                if column == "activation":
                    activations.append(act)
                out.append((name, "gates", gate, column, bins.edges(column, act)))
        for state in cell["states"]:
            out.append((name, "states", state, "value", bins.edges("value", None)))
    if not any(t == "gates" for _, t, *_ in out):
        raise SelectionError(
            "--summary: the selection leaves no gate value to summarise; keep at least one gate and one of "
            "--values preactivation,activation"
        )
    bins.check_thresholds(activations)
    return out


@dataclass
class Totals:
    """Statistics per unit and per step of each column (`_KEY`), merged as batches come."""

    units: dict[tuple[str, str, str, str], Stats] = field(default_factory=dict)
    steps: dict[tuple[str, str, str, str], tuple[np.ndarray, Stats]] = field(default_factory=dict)

    def add(
        self,
        key: tuple[str, str, str, str],
        positions: np.ndarray,
        per_unit: Stats,
        per_step: Stats,
    ) -> None:
        """Merge one batch's statistics of a column: `per_unit` [units], `per_step` at the
        input `positions` (one per entry of `per_step`)."""
        old = self.units.get(key)
        self.units[key] = per_unit if old is None else old.merge(per_unit)
        self.steps[key] = _merge_steps(
            self.steps.get(key), np.asarray(positions, np.int64), per_step
        )

    def merge(self, other: Totals) -> Totals:
        """Both totals together (a new object)."""
        out = Totals(dict(self.units), dict(self.steps))
        for key, stats in other.units.items():
            positions, per_step = other.steps[key]
            out.add(key, positions, stats, per_step)
        return out

    def values(self, table: str) -> int:
        """How many values of `table` the first column of each (cell, name) holds: the rows a
        full recording of the same examples would have."""
        seen: set[tuple[str, str]] = set()
        n = 0
        for (cell, t, name, _), stats in self.units.items():
            if t == table and (cell, name) not in seen:
                seen.add((cell, name))
                n += int(stats.count.sum())
        return n

    def frame(self, axis: str) -> pa.Table:
        """The `units` or `steps` table (see the module docstring), built from the arrays
        as they are (a summary's totals are written again and again while it runs)."""
        keys, at, stats = [], [], []
        for key, per_unit in self.units.items():
            positions, per_step = self.steps[key]
            s = per_unit if axis == "unit" else per_step
            keys.append(key)
            at.append(np.arange(len(s.count)) if axis == "unit" else positions)
            stats.append(s)
        sizes = [len(a) for a in at]
        columns: dict[str, pa.Array] = {
            k: pa.array(np.repeat(np.array([key[j] for key in keys], object), sizes), pa.string())
            for j, k in enumerate(_KEY)
        }
        columns[axis] = pa.array(_joined([a.astype(np.int32) for a in at], np.int32))
        for name in (*_INT_STATS, *_FLOAT_STATS):
            what = _ATTRIBUTE.get(name, name)
            kind = np.int64 if name in _INT_STATS else np.float64
            columns[name] = pa.array(_joined([getattr(s, what).astype(kind) for s in stats], kind))
        # one list a row: its bins (columns may have different numbers of bins)
        widths = np.concatenate(
            [[0], *[np.full(len(s.count), s.histogram.shape[-1]) for s in stats]]
        )
        columns["histogram"] = pa.ListArray.from_arrays(
            pa.array(np.cumsum(widths, dtype=np.int32)),
            pa.array(_joined([s.histogram.astype(np.int64).ravel() for s in stats], np.int64)),
            type=pa.list_(pa.int64()),
        )
        return pa.table({k: columns[k] for k in (*_KEY, axis, *STATS)})

    @classmethod
    def from_frames(
        cls,
        units: pa.Table,
        steps: pa.Table,
        edges: Mapping[tuple, np.ndarray],
        low: float,
        high: float,
    ) -> Totals:
        """Totals from the two tables (as `frame` writes them), with each column's `edges`."""
        try:
            return cls._from_frames(units, steps, edges, low, high)
        except (ValueError, TypeError, KeyError, pa.ArrowException) as err:
            raise RecordingError(
                f"its statistics are not as gatetrace writes them ({err})"
            ) from None

    @classmethod
    def _from_frames(cls, units, steps, edges, low, high) -> Totals:
        out = cls()
        for axis, table in (("unit", units), ("step", steps)):
            for key, rows in _groups(table, axis, edges):
                at = rows[axis]
                order = np.argsort(at, kind="stable")
                stats = Stats(
                    rows["count"][order],
                    rows["mean"][order],
                    rows["m2"][order],
                    rows["min"][order],
                    rows["max"][order],
                    rows["below"][order],
                    rows["above"][order],
                    rows["histogram"][order],
                    edges[key],
                    low,
                    high,
                )
                if axis == "unit":
                    if not np.array_equal(at[order], np.arange(len(at))):
                        raise RecordingError(
                            f"{'/'.join(key)} does not hold units 0 to {len(at) - 1}"
                        )
                    out.units[key] = stats
                else:
                    out.steps[key] = (at[order], stats)
        return out


def _merge_steps(
    old: tuple[np.ndarray, Stats] | None, positions: np.ndarray, new: Stats
) -> tuple[np.ndarray, Stats]:
    """Per-step statistics at the union of both sets of positions, merged where both have one."""
    if old is None:
        return positions, new
    before, stats = old
    union = np.union1d(before, positions)
    return union, _spread(stats, before, union).merge(_spread(new, positions, union))


def _spread(stats: Stats, at: np.ndarray, union: np.ndarray) -> Stats:
    """`stats` at positions `at` placed among `union` (empty elsewhere)."""
    if len(at) == len(union):
        return stats
    where = np.searchsorted(union, at)
    n = len(union)

    def put(a: np.ndarray, empty: float) -> np.ndarray:
        out = np.full((n, *a.shape[1:]), empty, dtype=a.dtype)
        out[where] = a
        return out

    return Stats(
        put(stats.count, 0),
        put(stats.mean, np.nan),
        put(stats.m2, 0.0),
        put(stats.minimum, np.inf),
        put(stats.maximum, -np.inf),
        put(stats.below, 0),
        put(stats.above, 0),
        put(stats.histogram, 0),
        stats.edges,
        stats.low,
        stats.high,
    )


def _groups(table: pa.Table, axis: str, edges: Mapping[tuple, np.ndarray]):
    """(key, {column: numpy array}) for each column's rows of a `units` or `steps` table,
    checked: every key among `edges`, each histogram as long as its edges say."""
    df = table.to_pandas()
    for key, rows in df.groupby(list(_KEY), sort=False):
        key = tuple(key)
        if key not in edges:
            raise RecordingError(
                f"its statistics hold {'/'.join(key)}, which its manifest does not list"
            )
        bins = len(edges[key]) + 1
        hist = rows["histogram"].tolist()
        if any(h is None or len(h) != bins for h in hist):
            raise RecordingError(f"a histogram of {'/'.join(key)} does not have {bins} counts")
        at = rows[axis].to_numpy(np.int64)
        if len(np.unique(at)) != len(at) or (at < 0).any():
            raise RecordingError(f"{'/'.join(key)} has a {axis} twice, or a negative one")
        out = {axis: at, "histogram": np.array(hist, dtype=np.int64).reshape(len(at), bins)}
        for k in _INT_STATS:
            out[k] = rows[k].to_numpy(np.int64)
        for k in _FLOAT_STATS:
            out[k] = rows[k].to_numpy(np.float64)
        if any((out[k] < 0).any() for k in (*_INT_STATS, "histogram")):
            raise RecordingError(f"{'/'.join(key)} has a negative count")
        yield key, out


def edges_of(summary: Mapping[str, Any]) -> dict[tuple, np.ndarray]:
    """Each column's edges from a manifest's `summary`, checked (`RecordingError` if damaged)."""
    try:
        return {
            (c["cell"], c["table"], c["name"], c["column"]): check_edges(c["edges"])
            for c in summary["columns"]
        }
    except (KeyError, TypeError, ValueError) as err:
        raise RecordingError(
            f"its summary's bins are not as gatetrace writes them ({err})"
        ) from None


def thresholds_of(summary: Mapping[str, Any]) -> tuple[float, float]:
    """The thresholds of a manifest's `summary`, checked (`RecordingError` if damaged)."""
    low, high = summary.get("low"), summary.get("high")
    if not (
        isinstance(low, (int, float))
        and isinstance(high, (int, float))
        and np.isfinite(low)
        and np.isfinite(high)
    ):
        raise RecordingError("its summary's thresholds are not two finite numbers")
    return float(low), float(high)


def totals_bytes(totals: Totals, complete: Intervals) -> bytes:
    """A shard's running totals as one Parquet file: both axes, `axis` and `at` columns,
    the examples they hold in the schema metadata."""
    units, steps = totals.frame("unit"), totals.frame("step")
    units = units.rename_columns([*_KEY, "at", *STATS]).append_column(
        "axis", pa.array(["unit"] * len(units))
    )
    steps = steps.rename_columns([*_KEY, "at", *STATS]).append_column(
        "axis", pa.array(["step"] * len(steps))
    )
    table = pa.concat_tables([units, steps])
    table = table.replace_schema_metadata({b"complete": json.dumps(complete.pairs()).encode()})
    sink = pa.BufferOutputStream()
    # written again and again while a summary runs: no column statistics, dictionaries for
    # the names only
    pq.write_table(
        table,
        sink,
        compression="zstd",
        write_statistics=False,
        use_dictionary=[*_KEY, "axis"],
        **WRITE_CHECKSUMS,
    )
    return sink.getvalue().to_pybytes()


def read_totals(data: bytes, summary: Mapping[str, Any], what: str) -> tuple[Totals, Intervals]:
    """A shard's running totals and the examples they hold, from `totals_bytes`' file."""
    try:
        table = pq.read_table(pa.BufferReader(data), **VERIFY_CHECKSUMS)
        pairs = parse_json((table.schema.metadata or {}).get(b"complete", b"null"), what)
        complete = Intervals(pairs)
        split = {
            axis: table.filter(pa.compute.equal(table["axis"], axis))
            .drop_columns(["axis"])
            .rename_columns([*_KEY, axis, *STATS])
            for axis in ("unit", "step")
        }
    except (pa.ArrowException, OSError, ValueError, TypeError, KeyError) as err:
        raise RecordingError(
            f"{what} is not a summary gatetrace wrote ({unreadable(err)})"
        ) from None
    low, high = thresholds_of(summary)
    try:
        totals = Totals.from_frames(split["unit"], split["step"], edges_of(summary), low, high)
    except RecordingError as err:
        raise RecordingError(f"{what} is not a summary gatetrace wrote: {err}") from None
    return totals, complete
