"""Each unit's highest activations and where they lie: what a gate's part file carries in its
footer beside its statistics (`recorders.write.partstats`), so that a unit's top positions over a
whole recording are read from kilobytes, not from its values.

Under its footer's key `gatetrace.top` (`TOP_KEY`), a gate part file keeps, per unit, its `K`
highest activations, highest first, ties the earliest (example, step) first, each with its example
and step. A NaN is left out (as pandas' `nlargest` leaves it), an infinity kept. They are counted
as the rows are written, a row group at a time, by a loop compiled by numba (a pass over each
activation that rarely does more than compare it with the unit's K-th highest so far: 0.47 ms for
32 x 50 x 256 sigmoid activations on a 2-core AMD EPYC, 0.55 ms where 30% of them are exactly 1,
beside 0.38 ms for the statistics); not written where numba is not installed:
readers then read the values, as for the files of an older gatetrace.

The K highest of a union of files are the K highest of the files' K highest, and the order is
total (value, then example, then step): so they merge exactly, to the last bit, in any grouping
and order (`Tops.merge`): a shard's files into its merged statistics file (`recorders.write.merged`,
under `top`), those and the footers it does not cover into the recording's. Files that keep
different K merge to the smallest.

Its JSON: {"format": 1, "column": "activation", "units": U, "k": K, "arrays": base64 of, little
endian, `count` [U] int64 (the values kept of each unit, at most K), then [U, K] the values
(float32), their examples (int64) and their steps (int32), a unit's entries past its count NaN, -1
and -1}. `read` checks it before a number is used (the files may come from anyone): its size, its
units, a count of at most K and at most the rows of a unit, each unit's entries in order and none
repeated, no NaN among them, their values within the range of the gate's nonlinearity (where the
recording's description lists it), their examples within those the file (or the merged files) may
hold and their steps within the cell's; anything else is a ValueError saying what, which the reader
turns into one line naming the file.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from recorders.write.compiled import Loop, available

__all__ = ["TOP_KEY", "K", "MAX_K", "Tops", "TopTally", "read"]

TOP_KEY = b"gatetrace.top"
FORMAT = 1
# the values kept of each unit: the view's and `analysis.top_positions`' k (more are read from
# the values): 16 bytes each, 41 KB a file of 256 units
K = 10
# the most a reader accepts (a hostile file cannot make it allocate more)
MAX_K = 1000
_TYPES = ("<i8", "<f4", "<i8", "<i4")  # count, then values, examples, steps


@dataclass(frozen=True)
class Tops:
    """Per unit, the `k` highest activations of one or more part files of a gate (see the module
    docstring): `count` [units] of them kept, and [units, k] their `values` (float32), `examples`
    and `steps` (int64), highest first, ties the earliest (example, step) first; past a unit's
    count, NaN, -1 and -1."""

    k: int
    count: np.ndarray
    values: np.ndarray
    examples: np.ndarray
    steps: np.ndarray

    @property
    def units(self) -> int:
        return len(self.count)

    def of(self, unit: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The `k` highest values of `unit`, their examples and steps (fewer where it has fewer
        values); None where more are asked than are kept (the values must be read)."""
        n = int(self.count[unit])
        if k > self.k and n == self.k:
            return None
        m = min(k, n)
        return self.values[unit, :m], self.examples[unit, :m], self.steps[unit, :m]

    @classmethod
    def merge(cls, parts: Sequence[Tops]) -> Tops:
        """The highest values over all `parts` (of the same units), the smallest k of them."""
        if not parts:
            raise ValueError("nothing to merge")
        units = parts[0].units
        if any(p.units != units for p in parts):
            raise ValueError("tops of other units cannot be merged")
        k = min(p.k for p in parts)
        if len(parts) == 1 and parts[0].k == k:
            return parts[0]
        values = np.concatenate([p.values.astype(np.float64) for p in parts], axis=1)
        examples = np.concatenate([p.examples for p in parts], axis=1)
        steps = np.concatenate([p.steps for p in parts], axis=1)
        missing = np.isnan(values)
        # highest first (an entry past its count last), then the earliest example and step
        order = np.lexsort((steps, examples, -np.where(missing, 0.0, values), missing), axis=1)[
            :, :k
        ]
        count = np.minimum(sum(p.count for p in parts), k).astype(np.int64)
        return _canonical(
            k,
            count,
            np.take_along_axis(values, order, axis=1).astype(np.float32),
            np.take_along_axis(examples, order, axis=1),
            np.take_along_axis(steps, order, axis=1),
        )

    def equals(self, other: Tops) -> bool:
        """Whether both hold the same values at the same places, to the last bit."""
        return (
            self.k == other.k
            and np.array_equal(self.count, other.count)
            and self.values.tobytes() == other.values.tobytes()
            and np.array_equal(self.examples, other.examples)
            and np.array_equal(self.steps, other.steps)
        )

    def fields(self) -> dict[str, Any]:
        """The footer value as a JSON object (`encode`; a merged statistics file holds it as is)."""
        packed = b"".join(
            np.ascontiguousarray(a, dtype=t).tobytes()
            for a, t in zip(
                (self.count, self.values, self.examples, self.steps), _TYPES, strict=True
            )
        )
        return {
            "format": FORMAT,
            "column": "activation",
            "units": self.units,
            "k": self.k,
            "arrays": base64.b64encode(packed).decode(),
        }

    def encode(self) -> bytes:
        return json.dumps(self.fields()).encode()


def _canonical(k: int, count, values, examples, steps) -> Tops:
    """`Tops` whose entries past each unit's count are NaN, -1 and -1."""
    past = np.arange(k)[None, :] >= np.asarray(count)[:, None]
    return Tops(
        k,
        np.asarray(count, np.int64),
        np.where(past, np.float32(np.nan), values).astype(np.float32),
        np.where(past, -1, examples).astype(np.int64),
        np.where(past, -1, steps).astype(np.int64),
    )


class TopTally:
    """The tops of one part file, counted a row group at a time as it is written: `add` each
    row group's activations (of the next examples of `examples`, in order), then `tops()` (None
    where none are kept: numba is not installed, or a row group is not of the file's shape)."""

    def __init__(self, steps: Sequence[int] | np.ndarray, examples: Sequence[int] | np.ndarray):
        self.steps = np.asarray(steps, dtype=np.int64)
        self.examples = np.asarray(examples, dtype=np.int64)
        self._kept = available()
        self._at = 0  # the examples counted so far
        self._state: tuple[np.ndarray, ...] | None = None

    def add(
        self, values: np.ndarray, valid: np.ndarray, examples: np.ndarray | None = None
    ) -> None:
        """One row group's activations [examples, steps, units], where `valid` [examples,
        steps] says which rows are written; `examples`: theirs, where not the next of those
        the tally was made with (a reader recounting a file learns them a row group at a time)."""
        if not self._kept:
            return
        x = np.ascontiguousarray(values, dtype=np.float32)
        rows, steps, units = x.shape
        if examples is None:
            examples = self.examples[self._at : self._at + rows]
            self._at += rows
        examples = np.asarray(examples, dtype=np.int64)
        if self._state is None:
            self._state = (
                np.zeros(units, np.int64),
                np.full((units, K), np.nan, np.float32),
                np.full((units, K), -1, np.int64),
                np.full((units, K), -1, np.int64),
            )
        if steps != len(self.steps) or units != len(self._state[0]) or len(examples) != rows:
            self._kept = False  # not the file's shape: nothing said rather than something wrong
            return
        valid = np.ascontiguousarray(valid, dtype=np.bool_)
        _loop()(x, valid, examples, self.steps, *self._state)

    def tops(self) -> Tops | None:
        if not self._kept or self._state is None:
            return None
        return _canonical(K, *self._state)


def _top(x, valid, examples, steps, count, values, at_example, at_step):
    """The loop `TopTally.add` runs, compiled by numba: per written row, the units whose
    activation reaches their k-th highest so far are listed without a branch (a NaN never does:
    its comparison is false), then each is compared with that entry (a tie the later example
    and step loses) and, where it goes before it, moved up into its place (highest first, ties
    the earliest example and step first)."""
    rows, nsteps, units = x.shape
    k = values.shape[1]
    cut = np.empty(units, np.float32)
    for u in range(units):
        cut[u] = values[u, k - 1] if count[u] == k else np.float32(-np.inf)
    near = np.empty(units, np.int64)
    for i in range(rows):
        e = examples[i]
        for t in range(nsteps):
            if not valid[i, t]:
                continue
            s = steps[t]
            n = 0
            for u in range(units):
                near[n] = u
                n += x[i, t, u] >= cut[u]
            for m in range(n):
                u = near[m]
                v = x[i, t, u]
                j = count[u]
                if j == k:  # full: it must go before the last, which it pushes out
                    w, f, g = values[u, k - 1], at_example[u, k - 1], at_step[u, k - 1]
                    if not (v > w or (v == w and (e < f or (e == f and s < g)))):
                        continue
                    j = k - 1
                else:
                    count[u] = j + 1
                while j > 0:
                    w, f, g = values[u, j - 1], at_example[u, j - 1], at_step[u, j - 1]
                    if not (v > w or (v == w and (e < f or (e == f and s < g)))):
                        break
                    values[u, j], at_example[u, j], at_step[u, j] = w, f, g
                    j -= 1
                values[u, j], at_example[u, j], at_step[u, j] = v, e, s
                if count[u] == k:
                    cut[u] = values[u, k - 1]


_loop = Loop(_top)


def read(
    value: bytes | dict[str, Any],
    rows: int,
    units: int,
    examples: tuple[int, int],
    steps: tuple[int, int],
    span: tuple[float, float] | None = None,
    most_bytes: int = 64 << 20,
) -> Tops:
    """The tops of a footer's `value` (or a merged statistics file's, as a JSON object), checked
    (see the module docstring) against the `rows` of the files they cover, the cell's `units`,
    the [low, high) of the `examples` those files may hold and of the cell's `steps`, and, where
    given, `span`, the least and largest value the gate's nonlinearity gives (ValueError saying
    what does not fit)."""
    said: Any = value
    if isinstance(value, bytes):
        try:
            said = json.loads(value)
        except (ValueError, UnicodeDecodeError):
            raise ValueError("its top values are not JSON") from None
    if not isinstance(said, dict) or (said.get("format"), said.get("column")) != (
        FORMAT,
        "activation",
    ):
        raise ValueError(f"its top values are not of format {FORMAT} for the activation")
    n_units, k = said.get("units"), said.get("k")
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (n_units, k)):
        raise ValueError("its top values' units or k are malformed")
    assert isinstance(n_units, int) and isinstance(k, int)
    if n_units != units or not 1 <= k <= MAX_K:
        raise ValueError(
            f"its top values are of {n_units} units, {k} each; expected the cell's {units} "
            f"units, 1 to {MAX_K} each"
        )
    sizes = [units * 8, units * k * 4, units * k * 8, units * k * 4]
    if sum(sizes) > most_bytes:
        raise ValueError(
            f"its top values would take {sum(sizes):,} bytes, more than {most_bytes:,}"
        )
    text = said.get("arrays")
    try:
        packed = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
    except ValueError:
        packed = b""
    if len(packed) != sum(sizes):
        raise ValueError(f"its top values' arrays are not the base64 of {sum(sizes):,} bytes")
    arrays, at = [], 0
    for t, nbytes in zip(_TYPES, sizes, strict=True):
        arrays.append(np.frombuffer(packed, t, nbytes // np.dtype(t).itemsize, at))
        at += nbytes
    count = arrays[0].astype(np.int64)
    values = arrays[1].reshape(units, k).astype(np.float32)
    ex = arrays[2].reshape(units, k).astype(np.int64)
    st = arrays[3].reshape(units, k).astype(np.int64)
    per_unit = rows // units if units else 0
    if units * per_unit != rows or count.min(initial=0) < 0 or np.any(count > min(k, per_unit)):
        n = int(count.max(initial=0)) if count.min(initial=0) >= 0 else int(count.min())
        raise ValueError(
            f"its top values keep {n} values of a unit, more than {k} or the {per_unit:,} rows "
            f"of each of the {units} units of {rows:,} rows (or fewer than none)"
        )
    tops = _canonical(k, count, values, ex, st)
    if not tops.equals(Tops(k, count, values, ex, st)):
        raise ValueError("its top values hold entries past their count")
    kept = np.arange(k)[None, :] < count[:, None]
    v, e, s = values[kept], ex[kept], st[kept]
    if np.isnan(v).any():
        raise ValueError("its top values hold a NaN")
    if span is not None and (np.any(v < span[0]) or np.any(v > span[1])):
        bad = float(v[(v < span[0]) | (v > span[1])][0])
        raise ValueError(
            f"its top values hold {bad:g}, outside the gate's range, {span[0]:g} to {span[1]:g}"
        )
    if len(e) and not (examples[0] <= e.min() and e.max() < examples[1]):
        bad = int(e.min()) if e.min() < examples[0] else int(e.max())
        raise ValueError(
            f"its top values lie at example {bad}, outside the {examples[0]} to {examples[1] - 1} its files hold"
        )
    if len(s) and not (steps[0] <= s.min() and s.max() < steps[1]):
        bad = int(s.min()) if s.min() < steps[0] else int(s.max())
        raise ValueError(
            f"its top values lie at step {bad}, outside the cell's {steps[0]} to {steps[1] - 1}"
        )
    # each unit's entries in order, none repeated: each one after the one before it
    a, b = (slice(None), slice(0, k - 1)), (slice(None), slice(1, k))
    both = kept[b]
    after = (values[a] > values[b]) | (
        (values[a] == values[b]) & ((ex[a] < ex[b]) | ((ex[a] == ex[b]) & (st[a] < st[b])))
    )
    if np.any(both & ~after):
        raise ValueError("its top values are not in order, highest first (or hold one twice)")
    return tops
