"""Which examples of a recording are complete: shards, example intervals, progress files.

A recording may be written by N processes at once (`--shard K/N`), each taking one
contiguous, disjoint part of the examples. Each shard keeps a progress file,
`OUT/_progress/shard-K-of-N.json`, rewritten atomically after every finished batch:

    {"description": {...}, "shard": [K, N] or [K, N, UNIT], "examples": [START, STOP],
     "complete": [[START, STOP], ...], "rows": {"gates": ..., "states": ...}, "finished": false}

`complete` lists the example intervals whose files are all in place. Anything else in
the shard's range (a batch cut short by a crash) is not complete and is recorded again
on `--resume`. Folders starting with `_` are skipped by pyarrow, Spark, Dask and Polars
readers of the Parquet datasets.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recorders.errors import RecordingError, SelectionError
from recorders.write.layout import PROGRESS_DIR
from recorders.write.schema import description_problem

if TYPE_CHECKING:
    from recorders.write.place import Place

__all__ = [
    "Shard",
    "Intervals",
    "PROGRESS_DIR",
    "read_progress",
    "recorded_layout",
    "progress_problem",
]


@dataclass(frozen=True)
class Shard:
    """Part `index` of `count` disjoint parts of a recording's examples (0-based).

    With `unit` > 1 the parts are cut at multiples of `unit` examples from the start (the
    tasks of `tracer.run.parallel` are cut at batch boundaries, so that each batch holds the
    same rows as in one process, and the values are the same to the last bit)."""

    index: int = 0
    count: int = 1
    unit: int = 1

    def __post_init__(self) -> None:
        if not (self.count >= 1 and 0 <= self.index < self.count):
            raise SelectionError(
                f"--shard {self.index}/{self.count}: expected K/N with 0 <= K < N, e.g. --shard 0/4"
            )
        if self.unit < 1:
            raise SelectionError(
                f"shard {self.index}/{self.count}: its parts are cut at multiples of {self.unit}, expected 1 or more"
            )

    @classmethod
    def parse(cls, text: str) -> Shard:
        """`"2/8"` -> Shard(2, 8)."""
        try:
            k, n = text.split("/")
            return cls(int(k), int(n))
        except ValueError:
            raise SelectionError(
                f"--shard {text!r}: expected K/N with 0 <= K < N, e.g. --shard 0/4"
            ) from None

    @property
    def tag(self) -> str:
        return f"shard-{self.index}-of-{self.count}"

    @property
    def recorded(self) -> list[int]:
        """How a progress file names the shard: [K, N], or [K, N, unit]."""
        return [self.index, self.count] + ([self.unit] if self.unit > 1 else [])

    def part(self, start: int, stop: int) -> tuple[int, int]:
        """This shard's contiguous part of the examples [start, stop)."""
        units = -(-(stop - start) // self.unit)
        cut = [
            min(stop, start + self.unit * (units * k // self.count))
            for k in (self.index, self.index + 1)
        ]
        return cut[0], cut[1]

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


class Intervals:
    """A set of integers kept as sorted, disjoint, non-adjacent [start, stop) intervals."""

    def __init__(self, pairs: Iterable[Iterable[int]] = ()):
        self._pairs: list[list[int]] = []
        for start, stop in pairs:
            self.add(start, stop)

    def add(self, start: int, stop: int) -> None:
        if stop <= start:
            return
        merged = [start, stop]
        keep = []
        for a, b in self._pairs:
            if b < merged[0] or a > merged[1]:
                keep.append([a, b])
            else:
                merged = [min(a, merged[0]), max(b, merged[1])]
        keep.append(merged)
        self._pairs = sorted(keep)

    def __contains__(self, x: int) -> bool:
        i = bisect.bisect_right(self._pairs, [x, float("inf")]) - 1
        return i >= 0 and self._pairs[i][0] <= x < self._pairs[i][1]

    def missing(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The parts of [start, stop) not in the set."""
        gaps, at = [], start
        for a, b in self._pairs:
            if b <= at or a >= stop:
                continue
            if a > at:
                gaps.append((at, a))
            at = max(at, b)
        if at < stop:
            gaps.append((at, stop))
        return gaps

    def total(self) -> int:
        return sum(b - a for a, b in self._pairs)

    def pairs(self) -> list[list[int]]:
        return [list(p) for p in self._pairs]


_MAX_EXAMPLE = 2**53  # example ids are int64 in the tables and exact in JSON readers


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= _MAX_EXAMPLE


def _pair(x: Any) -> bool:
    return isinstance(x, list) and len(x) == 2 and all(_is_int(v) for v in x) and x[0] <= x[1]


def progress_problem(tag: str, p: Any) -> str | None:
    """Why `p`, read from `_progress/<tag>.json`, is not a progress file gatetrace wrote (None if it is)."""
    if not isinstance(p, dict):
        return f"expected a JSON object, found {type(p).__name__}"
    expected = {"description", "shard", "total", "examples", "complete", "rows", "finished"}
    if set(p) != expected:
        return f"expected the keys {', '.join(sorted(expected))}, found {', '.join(sorted(map(str, p))) or 'none'}"
    shard, total, examples, complete, rows = (
        p[k] for k in ("shard", "total", "examples", "complete", "rows")
    )
    if not (
        isinstance(shard, list)
        and len(shard) in (2, 3)
        and all(_is_int(v) for v in shard)
        and 0 <= shard[0] < shard[1]
        and (len(shard) == 2 or shard[2] > 1)
    ):
        return f"shard {shard!r} is not [K, N] with 0 <= K < N (or [K, N, UNIT], UNIT > 1)"
    if Shard(*shard).tag != tag:
        return f"it is named {tag}.json but holds shard {shard[0]}/{shard[1]}"
    if not isinstance(p["finished"], bool):
        return "finished must be true or false"
    why = description_problem(p["description"])
    if why:
        return f"its description: {why}"
    if total is None:
        if examples is not None:
            return "examples is given but total is null"
    elif not _pair(total):
        return f"total {total!r} is not [START, STOP] with 0 <= START <= STOP <= 2**53"
    elif examples != list(Shard(*shard).part(*total)):
        return f"examples {examples!r} is not shard {shard[0]}/{shard[1]}'s part of {total}"
    if not isinstance(complete, list) or not all(_pair(c) and c[0] < c[1] for c in complete):
        return "complete must be a list of [START, STOP] intervals with START < STOP"
    if any(a[1] >= b[0] for a, b in pairwise(complete)):
        return "its complete intervals are not sorted and disjoint"
    lo, hi = examples if examples is not None else (0, _MAX_EXAMPLE)
    if complete and (complete[0][0] < lo or complete[-1][1] > hi):
        return f"its complete intervals reach outside the shard's examples {examples}"
    if p["finished"] and examples is not None and Intervals(complete).missing(lo, hi):
        return "it is marked finished but not all of its examples are complete"
    if not (
        isinstance(rows, dict)
        and set(rows) - {"outputs"} == {"gates", "states", "weights"}
        and all(_is_int(v) for v in rows.values())
    ):
        return (
            "rows must hold non-negative integer counts of gates, states and weights (and outputs)"
        )
    return None


def read_progress(out: Path | Place) -> dict[str, dict[str, Any]]:
    """The progress files of the recording in `out` (a folder, or a `recorders.write.place.Place`),
    by shard tag (empty if there are none), each checked against the form gatetrace
    writes: RecordingError naming the file if one is not."""
    from recorders.write.place import LocalPlace, Place

    place = out if isinstance(out, Place) else LocalPlace(Path(out))
    folder = f"{place}/{PROGRESS_DIR}"
    odd = (
        place.folder.special(PROGRESS_DIR)
        if isinstance(place, LocalPlace) and place.path.is_dir()
        else []
    )
    if odd:
        raise RecordingError(
            f"{folder}/{odd[0][0]} is {odd[0][1]}, not a progress file gatetrace wrote (nothing was read from it): "
            "remove it, or record into a new folder"
        )
    found = {}
    for rel in place.files(PROGRESS_DIR):
        name = rel.rsplit("/", 1)[-1]
        if rel.count("/") != 1 or not name.endswith(".json") or name.startswith("."):
            continue
        path, tag = f"{place}/{rel}", name[: -len(".json")]
        try:
            data = place.read_json(rel)
        except (OSError, ValueError, RecordingError) as err:
            raise RecordingError(
                f"cannot read the progress file {path}: {err}; remove it to record that shard again"
            ) from err
        why = progress_problem(tag, data)
        if why:
            raise RecordingError(
                f"the progress file {path} is not one gatetrace wrote ({why}); it was edited or damaged: "
                "record into a new folder, or remove the folder and record again"
            )
        found[tag] = data
    counts = {p["shard"][1] for p in found.values()}
    if len(counts) > 1:
        raise RecordingError(
            f"the progress files in {folder} disagree on the number of shards ({', '.join(sorted(found))}): "
            "record into a new folder, or remove the folder and record again"
        )
    return found


def recorded_layout(out: str | os.PathLike | Place) -> Shard | None:
    """How the recording in `out` (a folder, a URI or a Place) is split, as a Shard of
    index 0 (count and unit), or None if `out` holds no progress file yet."""
    from recorders.write.place import Place, place_of

    found = read_progress(out if isinstance(out, Place) else place_of(out))
    if not found:
        return None
    shard = next(iter(found.values()))["shard"]
    return Shard(0, shard[1], (shard[2:] or [1])[0])
