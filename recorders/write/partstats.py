"""The statistics a gate's part file carries in its footer, so that an overview reads kilobytes.

A gate part file (one batch of one gate of one cell, `recorders.write.writer`) keeps, under
its footer's key `gatetrace.statistics` (`FOOTER_KEY`), the statistics of its `activation`
column, computed from the values as they are written. They exist exactly when the file does:
crash safety, resume, shards and object storage hold for them as for the rows. They are:

- per unit: `rows` (the file's rows of each unit), `below` and `above` (values < low and
  > high, the gate's saturation thresholds, `recorders.write.totals.saturation_bounds`; not
  kept for a gate that does not saturate);
- per step: `count`, the float64 `sum`, `lo` and `hi` (min and max), and a histogram of
  bins 2^e wide on the lattice of multiples of 2^e (bin k holds k 2^e <= v < (k + 1) 2^e), e the
  least for which the step's values span at most `BINS` bins in each row group (and
  `FILE_BINS` in the file).

A value's bin is exact (v / 2^e is exact in float64), and the bins of a lattice 2^e wide are
whole unions of the bins of any finer one: so histograms merge exactly, a row group's into
its file's and a file's into the recording's (`PartStats.merge`), the finer counted into the
coarser (and coarser still where the pieces lie so far apart that more than `MERGED` bins
would lie between them). The q-quantile of a step (`quantile`) lies in the bin where the
merged counts reach q x count, the exact (inverted-CDF) quantile's bin: it is within one bin
of it, that is within 2 / BINS of the widest range of the step's values in one row group,
2 / FILE_BINS of their range in one file or 2 / MERGED of their whole range, whichever is
widest.

Not written (readers then read the values, as for files of older recordings): where numba is
not installed (the loop below, compiled, counts a gate's 256 x 50 x 256 activations in about
2.3 ms on a 2-core AMD EPYC; it is not run in numpy beside every batch), and for a file whose
activations hold a NaN or an infinite value (or a bin more than 2^32 - 1 of them).

`read` checks what a footer says before a number is used (the files may come from anyone): its
size; that its counts add up to the file's rows and its bins to each step's count; that each
step's least and largest value are finite, in order, and within `span` (the range of the gate's
nonlinearity, where the recording's description lists it: [0, 1] for a sigmoid), its mean (sum over count) between
them, and its bins exactly those of the lattice from the least to the largest value, at most
`FILE_BINS`; and that values are counted beyond a threshold only where a step reaches past it.
Statistics that contradict any of this were edited or damaged: a ValueError saying what, which
the reader turns into one line naming the file, as for any other part file that is not as
gatetrace writes it (the values of a file known to be edited are not read in their place).
`PartStats.merge` holds at most `most` bins (a reader's memory budget): coarser where more would
be needed, each step's quantiles then within its wider bin.

A merge gives the same statistics, to the last bit, in whatever grouping and order its parts are
merged (a shard's running merge, `recorders.write.merged`, then the footers it does not cover, or
every footer at once): counts and bins are whole numbers; least and largest values, minima and
maxima; each step's lattice the coarsest of its parts' and of the one its whole range needs (never
finer after a merge); and each step's sum the float64 nearest the exact sum of the files' sums,
kept exact (`sums`, whole multiples of 2^-1074, which every float64 is) while merged. Merged
statistics (`fields(merged=True)`, `read_merged`) store those exact sums and each bin's count in
8 bytes, and hold at most `MERGED` + 1 bins a step.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from recorders.write.compiled import Loop, available
from recorders.write.stats import cut_point
from recorders.write.tops import TOP_KEY, Tops, TopTally

__all__ = [
    "FOOTER_KEY",
    "BINS",
    "FILE_BINS",
    "MERGED",
    "PartStats",
    "Tally",
    "read",
    "read_merged",
    "ready",
]

FOOTER_KEY = b"gatetrace.statistics"
FORMAT = 1
# At most this many bins (and one more, where the values straddle the lattice) hold a step's
# values in one row group: bins at most 2 / 256 of their range wide.
BINS = 256
# At most this many bins hold a step's values in one file, and about this many merged over
# files (more where one file's already need more): values far apart are counted on a coarser
# lattice.
FILE_BINS = 1024
MERGED = 4096
# the finest bins: a bin's number stays below 2^51 in magnitude, exact as a float64, and 2^-e
# is a float32's (values below 2^-50 in magnitude share bins 2^-100 wide)
_SPAN = 50
_FINEST = -100
# The most bytes the arrays of one footer may take, decoded (a hostile footer cannot make a
# reader allocate more): 4 bytes a bin, at most FILE_BINS bins a step.
MAX_BYTES = 64 << 20
# a float64 is a whole number of 2^-1074: a sum kept exact is one, as a Python int
_ULP = 1074
_ONE = 1 << _ULP
# the hex digits of an exact sum: below 2^2096 in magnitude, its float64 below 2^1022
_SUM = re.compile(r"-?[0-9a-f]{1,524}")


@dataclass(frozen=True)
class PartStats:
    """The statistics of one gate's activations over one or more part files (see the module
    docstring): `units`, `rows` (the rows of each unit), `below` and `above` [units] (None
    where `low` and `high` are: a gate that does not saturate); per step of `steps` [S],
    `count`, `total` (the sum), `lo`, `hi`, and the histogram: bins 2^`exponent` wide, numbered
    from `first`, `size` of them, their counts one step after the other in `counts`. `sums`: per
    step, the exact sum of the merged files' sums in units of 2^-1074 (Python ints), of which
    `total` is the nearest float64; None where `total` is exact as it stands (one file's)."""

    units: int
    rows: int
    low: float | None
    high: float | None
    below: np.ndarray | None
    above: np.ndarray | None
    steps: np.ndarray
    count: np.ndarray
    total: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    exponent: np.ndarray
    first: np.ndarray
    size: np.ndarray
    counts: np.ndarray
    sums: np.ndarray | None = None

    def exact(self) -> np.ndarray:
        """Per step, the exact sum (`sums`) as Python ints in units of 2^-1074."""
        return self.sums if self.sums is not None else _exact(self.total)

    def equals(self, other: PartStats) -> bool:
        """Whether both hold the same statistics, to the last bit."""
        if (self.units, self.rows, self.low, self.high) != (
            other.units,
            other.rows,
            other.low,
            other.high,
        ):
            return False
        if (self.below is None) != (other.below is None):
            return False
        pairs = list(zip(self._arrays(), other._arrays(), strict=True))
        return (
            np.array_equal(self.steps, other.steps)
            and all(
                a.shape == b.shape
                and a.dtype.kind == b.dtype.kind
                and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
                for a, b in pairs
            )
            and self.exact().tolist() == other.exact().tolist()
        )

    @property
    def mean(self) -> np.ndarray:
        """Per step, the mean of the values (NaN where there are none)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.count > 0, self.total / self.count, np.nan)

    def quantile(self, q: float) -> np.ndarray:
        """Per step, the q-quantile within one bin of the exact inverted-CDF one (see the module
        docstring): where the counts reach q x count, the bin's values taken as spread evenly
        over it, kept within the step's min and max; NaN where there are no values."""
        if not 0 <= q <= 1:
            raise ValueError(f"quantile {q}: expected a number from 0 to 1")
        if not len(self.counts):  # no values at any step
            return np.full(len(self.steps), np.nan)
        ends = np.cumsum(self.size)
        starts = ends - self.size
        reached = np.cumsum(self.counts)
        before = np.concatenate([[0], reached])[starts]  # counts of the steps before
        target = q * self.count
        # the first bin of each step whose running count reaches the target (at least one value)
        at = np.searchsorted(reached, before + np.maximum(target, 1e-9), side="left")
        at = np.minimum(at, np.maximum(ends - 1, 0))
        with np.errstate(invalid="ignore", divide="ignore"):
            inside = self.counts[at]
            start = reached[at] - inside - before
            share = np.clip((target - start) / np.where(inside > 0, inside, 1), 0, 1)
            bin_ = self.first + (at - starts) + share
            x = np.ldexp(bin_.astype(np.float64), self.exponent.astype(np.int64))
        return np.where(self.count > 0, np.clip(x, self.lo, self.hi), np.nan)

    @classmethod
    def merge(cls, parts: Sequence[PartStats], most: int | None = None) -> PartStats:
        """The statistics of several row groups or files of one gate, over the steps of all
        of them, each step's histogram on the coarsest of their lattices (ValueError if they
        disagree on the units or thresholds); with `most`, in at most that many bins in all
        (at least one a step, or three where a step's values span more than one), the
        lattices made coarser where more would be needed."""
        if not parts:
            raise ValueError("no statistics to merge")
        first = parts[0]
        if any((p.units, p.low, p.high) != (first.units, first.low, first.high) for p in parts):
            raise ValueError("statistics of other units or thresholds cannot be merged")
        steps = np.unique(np.concatenate([p.steps for p in parts]))
        n = len(steps)
        where = [np.searchsorted(steps, p.steps) for p in parts]
        count = np.zeros(n, np.int64)
        sums = np.zeros(n, dtype=object)  # Python ints: exact, in any order (module docstring)
        lo, hi = np.full(n, np.inf), np.full(n, -np.inf)
        exponent = np.full(n, np.iinfo(np.int64).min)
        for p, at in zip(parts, where, strict=True):
            has = p.count > 0
            count[at] += p.count
            sums[at] += p.exact()
            lo[at[has]] = np.minimum(lo[at[has]], p.lo[has])
            hi[at[has]] = np.maximum(hi[at[has]], p.hi[has])
            exponent[at[has]] = np.maximum(exponent[at[has]], p.exponent[has])
        exponent = np.where(count > 0, exponent, 0)
        # coarser where pieces far apart would need more than MERGED bins between them (fewer,
        # where `most` bins in all would not hold MERGED + 2 a step): a step whose values span
        # s lies in at most s / 2^e + 2 bins 2^e wide, s / 2^e < limit
        limit = MERGED if most is None else min(MERGED, max(most // max(n, 1) - 2, 1))
        with np.errstate(invalid="ignore"):
            span = np.where(count > 0, hi - lo, 0.0)
        exponent = np.where(span > 0, np.maximum(exponent, np.frexp(span / limit)[1]), exponent)
        # a step's lowest and highest bins on its coarsest lattice: those of its parts' first
        # and last (a bin's number shifted right by d is its bin 2^d times wider: monotonic)
        lowest = np.full(n, np.iinfo(np.int64).max)
        highest = np.full(n, np.iinfo(np.int64).min)
        shifts = []
        for p, at in zip(parts, where, strict=True):
            shifts.append(np.minimum(exponent[at] - p.exponent, 63))
            has = p.size > 0
            d = shifts[-1][has]
            lowest[at[has]] = np.minimum(lowest[at[has]], p.first[has] >> d)
            highest[at[has]] = np.maximum(highest[at[has]], (p.first[has] + p.size[has] - 1) >> d)
        size = np.where(count > 0, highest - lowest + 1, 0)
        first_bin = np.where(count > 0, lowest, 0)
        offsets = np.cumsum(size) - size
        merged = np.zeros(int(size.sum()), np.int64)
        for p, at, d in zip(parts, where, shifts, strict=True):
            # each bin's number on its own lattice, then where it lands in `merged`
            number = np.repeat(p.first - (np.cumsum(p.size) - p.size), p.size) + np.arange(
                len(p.counts)
            )
            into = np.repeat(offsets[at] - first_bin[at], p.size) + (number >> np.repeat(d, p.size))
            if len(into) > 1 and np.all(into[1:] >= into[:-1]):
                # (in order, as a part's steps are: the bins landing in one merged bin are
                # neighbours, added up first so that each merged bin is added to once)
                runs = np.flatnonzero(np.concatenate([[True], into[1:] != into[:-1]]))
                merged[into[runs]] += np.add.reduceat(p.counts, runs)
            else:
                np.add.at(merged, into, p.counts)
        below = above = None
        if first.below is not None:
            below = np.sum([p.below for p in parts if p.below is not None], axis=0)
            above = np.sum([p.above for p in parts if p.above is not None], axis=0)
        return cls(
            first.units,
            sum(p.rows for p in parts),
            first.low,
            first.high,
            below,
            above,
            steps,
            count,
            _rounded(sums),
            np.where(count > 0, lo, np.nan),
            np.where(count > 0, hi, np.nan),
            exponent,
            first_bin,
            size,
            merged,
            sums,
        )

    def encode(self) -> bytes:
        """The footer value: JSON, its arrays base64-encoded (text, as every Parquet reader
        expects a footer's values)."""
        return json.dumps(self.fields()).encode()

    def fields(self, merged: bool = False) -> dict[str, Any]:
        """The footer value as a JSON object (`encode`); `merged`: as a merged statistics file
        holds them (`read_merged`), each bin's count in 8 bytes (merged, one may count more than
        2^32 - 1 values) and each step's exact sum, in hex (`sums`)."""
        packed = b"".join(
            np.ascontiguousarray(a, dtype=t).tobytes()
            for a, t in zip(self._arrays(), _types(self.low, merged), strict=True)
        )
        said: dict[str, Any] = {
            "format": FORMAT,
            "column": "activation",
            "units": self.units,
            "rows": self.rows,
            "low": self.low,
            "high": self.high,
            "steps": self.steps.tolist(),
            "bins": len(self.counts),
            "arrays": base64.b64encode(packed).decode(),
        }
        if merged:
            said["sums"] = [format(n, "x") for n in self.exact().tolist()]
        return said

    def _arrays(self) -> list[np.ndarray]:
        """The arrays in the order `_types` says."""
        kept = [] if self.below is None or self.above is None else [self.below, self.above]
        return [
            *kept,
            self.count,
            self.total,
            self.lo,
            self.hi,
            self.exponent,
            self.first,
            self.size,
            self.counts,
        ]


def _types(low: float | None, merged: bool = False) -> list[str]:
    """The stored types of `PartStats._arrays`, little-endian: below and above where there
    are thresholds, then count, total, lo, hi, exponent, first, size, counts (8 bytes each in
    merged statistics, 4 in a footer)."""
    return [
        *([] if low is None else ["<i8", "<i8"]),
        "<i8",
        "<f8",
        "<f8",
        "<f8",
        "<i8",
        "<i8",
        "<i8",
        "<i8" if merged else "<u4",
    ]


def _exact(total: np.ndarray) -> np.ndarray:
    """Finite float64 sums as Python ints in units of 2^-1074, exactly."""
    out = np.empty(len(total), dtype=object)
    for k, t in enumerate(total.tolist()):
        p, q = t.as_integer_ratio()  # q a power of two, at most 2^1074
        out[k] = p << (_ULP + 1 - q.bit_length())
    return out


def _rounded(sums: np.ndarray) -> np.ndarray:
    """Exact sums (`_exact`) as the nearest float64s (Python's int division rounds correctly)."""
    return np.array([n / _ONE for n in sums.tolist()], dtype=np.float64)


class Tally:
    """The statistics of one part file, counted a row group at a time as it is written: `add`
    each row group's activations, then `footer()` gives {FOOTER_KEY: value}, or {} where none
    are kept (see the module docstring). `low` and `high`: the gate's saturation thresholds,
    None where it has none. A step's histogram is kept on one lattice for the whole file, made
    coarser (exactly: the bins nest) when a row group needs it or the file's values would
    spread over more than `FILE_BINS` bins. With the file's `examples` (in the order their rows
    are added), each unit's highest values too (`recorders.write.tops`: {TOP_KEY: value} in the
    footer, kept where the statistics are not, a NaN left out)."""

    def __init__(
        self,
        steps: Iterable[int],
        low: float | None,
        high: float | None,
        examples: Sequence[int] | np.ndarray | None = None,
    ):
        self.steps = np.asarray(list(steps), dtype=np.int64)
        self.top = None if examples is None else TopTally(self.steps, examples)
        self.carried_top: Tops | None = None  # what `footer` gave the file, of its tops
        self.low, self.high = low, high
        # float32 cut points: a float32 v is below `low` exactly when v < the first, above
        # `high` exactly when v >= the second (`cut_point`)
        self._cuts = (
            np.float32(-np.inf) if low is None else cut_point(low, np.float32),
            np.float32(np.inf) if high is None else cut_point(high, np.float32, closed=True),
        )
        self._kept = available()
        self._state: tuple[np.ndarray, ...] | None = None  # made at the first row group
        self._rows = 0
        self.carried: PartStats | None = None  # what `footer` gave the file

    def add(self, values: np.ndarray, valid: np.ndarray) -> None:
        """One row group's activations, [examples, steps, units] (as float32), where `valid`
        [examples, steps] says which rows are written."""
        if self.top is not None:
            self.top.add(values, valid)
        if not self._kept:
            return
        x = np.ascontiguousarray(values, dtype=np.float32)
        _, steps, units = x.shape
        if self._state is None:
            self._state = (
                np.zeros(units, np.int64),  # below
                np.zeros(units, np.int64),  # above
                *(np.zeros(steps, np.int64) for _ in range(4)),  # count, exponent, first, size
                *(np.zeros(steps) for _ in range(3)),  # total, lo, hi
                np.zeros((steps, FILE_BINS), np.int64),  # counts
            )
        if steps != len(self.steps) or units != len(self._state[0]):
            self._kept = False  # not the file's shape: nothing said rather than something wrong
            return
        valid = np.ascontiguousarray(valid, dtype=np.bool_)
        # the loop counts a unit's values of one call in an int32
        at_once = max(1, (2**31 - 1) // max(1, steps))
        for start in range(0, len(x), at_once):
            rows = slice(start, start + at_once)
            if not _loop()(x[rows], valid[rows], *self._cuts, *self._state):
                self._kept = False
                return
        self._rows += int(valid.sum())

    def footer(self) -> dict[bytes, bytes]:
        """{FOOTER_KEY: the statistics, encoded}, or {} where none are kept; what it gives is
        kept as `carried` (None where nothing), which the writer merges once the file is
        committed (and `carried_top`, of its tops)."""
        self.carried = self.stats()
        self.carried_top = None if self.top is None else self.top.tops()
        said = {} if self.carried is None else {FOOTER_KEY: self.carried.encode()}
        if self.carried_top is not None:
            said[TOP_KEY] = self.carried_top.encode()
        return said

    def stats(self) -> PartStats | None:
        """The file's statistics, or None where none are kept."""
        if not self._kept or self._state is None:
            return None
        below, above, count, exponent, first, size, total, lo, hi, counts = self._state
        if counts.max(initial=0) > np.iinfo(np.uint32).max:
            return None  # a bin's count would not fit the 32 bits it is stored in
        saturates = self.low is not None
        return PartStats(
            len(below),
            self._rows,
            self.low,
            self.high,
            below if saturates else None,
            above if saturates else None,
            self.steps,
            count,
            total,
            np.where(count > 0, lo, np.nan),
            np.where(count > 0, hi, np.nan),
            exponent,
            first,
            size,
            counts[np.arange(FILE_BINS)[None, :] < size[:, None]],
            _exact(total),  # (made once here, on a writer thread, for the merges to come)
        )


# A float32's bits b as an int32 ordered as the floats are: b ^ ((b >> 31) & 0x7FFFFFFF) (the
# negative floats' magnitudes reversed), so that min and max run in vector instructions; a
# finite value's key lies strictly between these two, a NaN's or an infinity's does not.
_KEY_INF = 0x7F800000
_KEY_MINUS_INF = -0x7F800001


def _tally(x, valid, low, high, below, above, count, exponent, first, size, total, lo, hi, counts):
    """The loop `Tally.add` runs, compiled by numba: per step, two passes over its written
    rows while they are in the cache. The first, four rows at a time, per unit: the sum, the
    least and largest key (see `_KEY_INF`), and the values below `low` and at or above `high`
    (float32 cut points of the thresholds, `Tally`); the second counts each value into its
    bin, the bins' numbers computed for a row at a time, then counted. False where a value is
    NaN or infinite."""
    rows, steps, units = x.shape
    keys = x.view(np.int32)
    room = counts.shape[1]
    sums = np.empty(units)
    least = np.empty(units, np.int32)
    most = np.empty(units, np.int32)
    under = np.zeros(units, np.int32)  # at most rows x steps < 2^31 each (`Tally.add`)
    over = np.zeros(units, np.int32)
    number = np.empty(units, np.int64)
    written = np.empty(rows, np.int64)
    ends = np.empty(2, np.int32)
    floats = ends.view(np.float32)
    for t in range(steps):
        n = 0
        for i in range(rows):
            if valid[i, t]:
                written[n] = i
                n += 1
        if n == 0:
            continue
        sums[:] = 0.0
        least[:] = _KEY_INF
        most[:] = _KEY_MINUS_INF
        j = 0
        while j + 4 <= n:  # four rows at a time: their values v and keys k
            v0, v1 = x[written[j], t], x[written[j + 1], t]
            v2, v3 = x[written[j + 2], t], x[written[j + 3], t]
            k0, k1 = keys[written[j], t], keys[written[j + 1], t]
            k2, k3 = keys[written[j + 2], t], keys[written[j + 3], t]
            for u in range(units):
                a, b, c, d = v0[u], v1[u], v2[u], v3[u]
                sums[u] += (np.float64(a) + np.float64(b)) + (np.float64(c) + np.float64(d))
                ka = k0[u] ^ ((k0[u] >> 31) & 0x7FFFFFFF)
                kb = k1[u] ^ ((k1[u] >> 31) & 0x7FFFFFFF)
                kc = k2[u] ^ ((k2[u] >> 31) & 0x7FFFFFFF)
                kd = k3[u] ^ ((k3[u] >> 31) & 0x7FFFFFFF)
                least[u] = min(least[u], min(min(ka, kb), min(kc, kd)))
                most[u] = max(most[u], max(max(ka, kb), max(kc, kd)))
                under[u] += np.int32(a < low) + np.int32(b < low) + np.int32(c < low)
                under[u] += np.int32(d < low)
                over[u] += np.int32(a >= high) + np.int32(b >= high) + np.int32(c >= high)
                over[u] += np.int32(d >= high)
            j += 4
        while j < n:  # the rows left
            v0, k0 = x[written[j], t], keys[written[j], t]
            for u in range(units):
                a = v0[u]
                sums[u] += np.float64(a)
                ka = k0[u] ^ ((k0[u] >> 31) & 0x7FFFFFFF)
                least[u] = min(least[u], ka)
                most[u] = max(most[u], ka)
                under[u] += np.int32(a < low)
                over[u] += np.int32(a >= high)
            j += 1
        ends[0], ends[1] = least.min(), most.max()
        if ends[0] <= _KEY_MINUS_INF or ends[1] >= _KEY_INF:
            return False
        ends ^= (ends >> 31) & 0x7FFFFFFF  # the keys' floats' bits again
        small, large = np.float64(floats[0]), np.float64(floats[1])
        # the lattice: the least e whose bins 2^e wide hold this row group's values in at
        # most BINS + 1 (their numbers below 2^51 in magnitude, 2^-e a float32), no finer
        # than the step's so far, holding all the step's values in `room` bins
        e = max(math.frexp(max(abs(small), abs(large)))[1] - _SPAN, _FINEST)
        if large > small:
            e = max(e, math.frexp((large - small) / BINS)[1] - 1)
        while math.floor(math.ldexp(large, -e)) - math.floor(math.ldexp(small, -e)) >= BINS + 1:
            e += 1
        if count[t] > 0:
            small, large = min(small, lo[t]), max(large, hi[t])
            e = max(e, exponent[t], math.frexp(max(abs(small), abs(large)))[1] - _SPAN)
        while math.floor(math.ldexp(large, -e)) - math.floor(math.ldexp(small, -e)) >= room:
            e += 1
        start = math.floor(math.ldexp(small, -e))
        if count[t] > 0 and (e != exponent[t] or start != first[t]):
            # the bins so far counted again on the new lattice (each lies within one of it)
            before = counts[t, : size[t]].copy()
            counts[t, :] = 0
            shift = min(e - exponent[t], 63)
            for i in range(len(before)):
                counts[t, ((first[t] + i) >> shift) - start] += before[i]
        count[t] += n * units
        total[t] += sums.sum()
        lo[t], hi[t], exponent[t], first[t] = small, large, e, start
        size[t] = math.floor(math.ldexp(large, -e)) - start + 1
        scale = math.ldexp(1.0, -e)  # v x 2^-e is exact in float64, whatever v and e
        bins = counts[t]
        for i in range(n):
            row = x[written[i], t]
            for u in range(units):
                number[u] = np.int64(np.floor(np.float64(row[u]) * scale)) - start
            for u in range(units):
                bins[number[u]] += 1
    below += under
    above += over
    return True


_loop = Loop(_tally)


def ready() -> None:
    """Make the compiled loops of the statistics and the top values now, and run them once on a
    value, where numba is installed: a recording calls this before it measures what the process
    holds, so that its memory budget counts what they hold (numba's import some 50 MB, loading
    or compiling their machine code about 45 MB more, which, left to the first row group on a
    writer thread, the budget did not count)."""
    if available():
        tally = Tally(np.zeros(1, np.int64), 0.1, 0.9, examples=np.zeros(1, np.int64))
        tally.add(np.zeros((1, 1, 1), np.float32), np.ones((1, 1), np.bool_))


def read(value: bytes, rows: int, span: tuple[float, float] | None = None) -> PartStats:
    """The statistics of a part file from its footer's `value`, checked (see the module
    docstring) against the file's `rows` and, where given, `span`, the least and largest value
    the gate's nonlinearity gives (ValueError saying what does not fit)."""
    try:
        said = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("its statistics are not JSON") from None
    return _decoded(said, rows, span, False, MAX_BYTES)


def read_merged(
    said: Any, rows: int, span: tuple[float, float] | None, most_bytes: int
) -> PartStats:
    """Merged statistics (`PartStats.fields(merged=True)`) of files holding `rows` values,
    checked as a footer's are (`read`), their bins at most `MERGED` + 1 a step, their arrays
    at most `most_bytes`, and each step's sum the float64 nearest its exact sum."""
    return _decoded(said, rows, span, True, most_bytes)


def _decoded(
    said: Any, rows: int, span: tuple[float, float] | None, merged: bool, most_bytes: int
) -> PartStats:
    """`read` and `read_merged`, from the JSON object."""
    if not isinstance(said, dict) or (said.get("format"), said.get("column")) != (
        FORMAT,
        "activation",
    ):
        raise ValueError(f"its statistics are not of format {FORMAT} for the activation")
    steps, low, high = said.get("steps"), said.get("low"), said.get("high")
    numbers = [said.get(k) for k in ("units", "rows", "bins")]
    if (
        not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers)
        or not isinstance(steps, list)
        or not all(
            isinstance(s, int) and not isinstance(s, bool) and -(2**62) < s < 2**62 for s in steps
        )
        or (low is None) != (high is None)
        or not all(t is None or _number(t) for t in (low, high))
    ):
        raise ValueError("its statistics' units, rows, steps, bins or thresholds are malformed")
    units, per_unit, bins = (int(n) for n in numbers)  # type: ignore[arg-type]
    if units * per_unit != rows or np.any(np.diff(steps) <= 0):
        raise ValueError(
            f"its statistics say {units:,} units of {per_unit:,} rows, {_HOLD[merged]} {rows:,} rows"
        )
    types = _types(low, merged)
    shapes = [*[units] * (len(types) - 8), *[len(steps)] * 7, bins]
    sizes = [n * np.dtype(t).itemsize for n, t in zip(shapes, types, strict=True)]
    if sum(sizes) > most_bytes:
        raise ValueError(
            f"its statistics would take {sum(sizes):,} bytes, more than {most_bytes:,}"
        )
    widest = (MERGED + 1 if merged else FILE_BINS) * len(steps)
    if bins > widest:
        raise ValueError(
            f"its statistics say {bins:,} bins, more than the {widest:,} of {len(steps):,} steps"
        )
    sums = None
    if merged:
        said_sums = said.get("sums")
        if (
            not isinstance(said_sums, list)
            or len(said_sums) != len(steps)
            or not all(isinstance(n, str) and _SUM.fullmatch(n) for n in said_sums)
        ):
            raise ValueError("its statistics' exact sums are malformed")
        sums = np.empty(len(steps), dtype=object)
        sums[:] = [int(n, 16) for n in said_sums]
    text = said.get("arrays")
    if not isinstance(text, str) or len(text) != 4 * -(-sum(sizes) // 3):
        raise ValueError(f"its statistics' arrays are not the base64 of {sum(sizes):,} bytes")
    try:
        packed = base64.b64decode(text, validate=True)
    except ValueError:
        raise ValueError(
            f"its statistics' arrays are not the base64 of {sum(sizes):,} bytes"
        ) from None
    if len(packed) != sum(sizes):
        raise ValueError(f"its statistics' arrays hold {len(packed):,} bytes, not {sum(sizes):,}")
    arrays, at = [], 0
    for n, t, nbytes in zip(shapes, types, sizes, strict=True):
        arrays.append(
            np.frombuffer(packed, t, n, at).astype(np.float64 if t == "<f8" else np.int64)
        )
        at += nbytes
    *kept, count, total, lo, hi, exponent, first, size, counts = arrays
    below, above = kept if kept else (None, None)
    stats = PartStats(
        units,
        per_unit,
        low,
        high,
        below,
        above,
        np.asarray(steps, np.int64),
        count,
        total,
        lo,
        hi,
        exponent,
        first,
        size,
        counts,
        sums,
    )
    problem = _problem(stats, rows, span, MERGED + 1 if merged else FILE_BINS)
    if problem:
        raise ValueError(f"its statistics {problem}")
    return stats


# what holds the rows read statistics are checked against (a footer's, merged ones')
_HOLD = {False: "the file holds", True: "the files they cover hold"}


def _number(n: object) -> bool:
    return isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n)


def _problem(
    s: PartStats, rows: int, span: tuple[float, float] | None = None, bins: int = FILE_BINS
) -> str | None:
    """What in read statistics does not add up (None if everything does); `bins`: the most a
    step may have."""
    if s.size.min(initial=0) < 0 or int(s.size.sum()) != len(s.counts):
        return "have bins that do not add up to their number"
    if (
        np.any((s.count > 0) != (s.size > 0))
        or np.any(s.size > bins)
        or np.any(np.abs(s.exponent) > 2000)
        or np.any(np.abs(s.first) >= 1 << 62)
    ):
        return "have steps whose bins do not fit their counts"
    running = np.concatenate([[0], np.cumsum(s.counts)])
    ends = np.cumsum(s.size)
    if s.counts.min(initial=0) < 0 or not np.array_equal(
        running[ends] - running[ends - s.size], s.count
    ):
        return "have bins that do not add up to their counts"
    if int(s.count.sum()) != rows:
        return f"count {int(s.count.sum()):,} values, {_HOLD[bins > FILE_BINS]} {rows:,}"
    if np.any(s.total[s.count == 0] != 0):
        return "have a sum at a step without values"
    if s.sums is not None and not np.array_equal(_rounded(s.sums), s.total):
        return "have sums that are not their exact sums rounded"
    at = np.flatnonzero(s.count > 0)
    lo, hi, count = s.lo[at], s.hi[at], s.count[at]
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo <= hi)):
        return "have a step whose least value is above its largest"
    if span is not None and (np.any(lo < span[0]) or np.any(hi > span[1])):
        k = int(np.argmax((lo < span[0]) | (hi > span[1])))
        return (
            f"put step {int(s.steps[at[k]])}'s values at {lo[k]:g} to {hi[k]:g}, outside the "
            f"gate's range, {span[0]:g} to {span[1]:g}"
        )
    # the mean (sum over count) between them, but for the rounding of a float64 sum of count
    # float32 values: at most count x 2^-53 of their largest magnitude
    with np.errstate(invalid="ignore", over="ignore"):
        mean = s.total[at] / count
        slack = count * 2.0**-52 * np.maximum(np.abs(lo), np.abs(hi))
        off = ~((lo - slack <= mean) & (mean <= hi + slack))
    if np.any(off):
        k = int(np.argmax(off))
        return (
            f"give step {int(s.steps[at[k]])} a mean of {mean[k]:g} (its sum over its count), "
            f"outside its least and largest value, {lo[k]:g} and {hi[k]:g}"
        )
    # its bins: those of the lattice 2^exponent wide from the least value to the largest
    e = s.exponent[at]
    with np.errstate(over="ignore", invalid="ignore"):
        first = np.floor(np.ldexp(lo, -e))
        last = np.floor(np.ldexp(hi, -e))
    if not (
        np.array_equal(first, s.first[at].astype(np.float64))
        and np.array_equal(last - first + 1, s.size[at].astype(np.float64))
    ):
        k = int(np.argmax((first != s.first[at]) | (last - first + 1 != s.size[at])))
        return (
            f"put step {int(s.steps[at[k]])}'s bins at {int(s.first[at[k]]):,} to "
            f"{int(s.first[at[k]] + s.size[at[k]] - 1):,} of 2^{int(e[k])}, not where its least "
            f"and largest value, {lo[k]:g} and {hi[k]:g}, lie"
        )
    if s.below is not None and s.above is not None:
        if min(s.below.min(initial=0), s.above.min(initial=0)) < 0 or np.any(
            s.below + s.above > s.rows
        ):
            return "count more values beyond the thresholds than a unit has rows"
        if s.low is not None and s.high is not None and len(at):
            if (s.below.sum() > 0 and lo.min() >= s.low) or (
                s.above.sum() > 0 and hi.max() <= s.high
            ):
                return "count values beyond a threshold that no step's values reach"
    return None
