"""Which examples of a recording are complete: shards, example intervals, progress files.

A recording may be written by N processes at once (`--shard K/N`), each taking one
contiguous, disjoint part of the examples. Each shard keeps a progress file,
`OUT/_progress/shard-K-of-N.json`, rewritten atomically after every finished batch:

    {"description": {...}, "shard": [K, N], "examples": [START, STOP],
     "complete": [[START, STOP], ...], "rows": {"gates": ..., "states": ...}, "finished": false}

`complete` lists the example intervals whose files are all in place. Anything else in
the shard's range (a batch cut short by a crash) is not complete and is recorded again
on `--resume`. Folders starting with `_` are skipped by pyarrow, Spark, Dask and Polars
readers of the Parquet datasets.
"""

from __future__ import annotations

import bisect
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from recorders.errors import RecordingError, SelectionError

__all__ = ["Shard", "Intervals", "PROGRESS_DIR", "read_progress", "write_json_atomically"]

PROGRESS_DIR = "_progress"


@dataclass(frozen=True)
class Shard:
    """Part `index` of `count` disjoint parts of a recording's examples (0-based)."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not (self.count >= 1 and 0 <= self.index < self.count):
            raise SelectionError(f"--shard {self.index}/{self.count}: expected K/N with 0 <= K < N, e.g. --shard 0/4")

    @classmethod
    def parse(cls, text: str) -> "Shard":
        """`"2/8"` -> Shard(2, 8)."""
        try:
            k, n = text.split("/")
            return cls(int(k), int(n))
        except ValueError:
            raise SelectionError(f"--shard {text!r}: expected K/N with 0 <= K < N, e.g. --shard 0/4") from None

    @property
    def tag(self) -> str:
        return f"shard-{self.index}-of-{self.count}"

    def part(self, start: int, stop: int) -> tuple[int, int]:
        """This shard's contiguous part of the examples [start, stop)."""
        size = stop - start
        return start + size * self.index // self.count, start + size * (self.index + 1) // self.count

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


def write_json_atomically(path: Path, content: Mapping[str, Any]) -> None:
    """Write `content` to a temporary sibling, flush it to disk, and rename it to `path`."""
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}"
    try:
        with open(tmp, "w") as f:
            f.write(json.dumps(content, indent=1) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise RecordingError(f"cannot write {path}: {err.strerror or err}") from err


def read_progress(out: Path) -> dict[str, dict[str, Any]]:
    """The progress files in `out`, by shard tag (empty if there are none)."""
    folder = out / PROGRESS_DIR
    found = {}
    for path in sorted(folder.glob("shard-*.json")) if folder.is_dir() else ():
        try:
            found[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise RecordingError(f"cannot read the progress file {path}: {err}; remove it to record that shard again") from err
    return found
