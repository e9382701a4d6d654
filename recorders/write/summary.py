"""Summary recordings: statistics of every gate and state over a whole dataset, in megabytes.

Where a full recording keeps every value, a summary keeps, for each value column of each
(cell, gate or state), the `recorders.write.stats.Stats` of its values per unit (over all
examples and steps) and per step (over all examples and units). Its size depends on the
model, never on how many sequences were summarised. Layout of a summary recording `OUT/`:

    summary/units.parquet                 one row per (cell, table, name, column, unit)
    summary/steps.parquet                 one row per (cell, table, name, column, step)
    weights.parquet                       as in a full recording
    _summary/shard-K-of-N.parquet         a shard's running totals (both axes), rewritten at each batch
    _progress/shard-K-of-N.json           which examples are complete (recorders.write.progress)
    manifest.json                         its description, `"kind": "summary"`, the bins

Columns of the two tables: `cell`, `table` (`gates` or `states`), `name` (the gate or state),
`column` (`preactivation`, `activation` or `value`), `unit` or `step`, then `count`, `mean`,
`variance` (population), `m2` (sum of squared deviations: what merges), `min`, `max`,
`below` and `above` (values < low and > high, the saturation thresholds) and `histogram`
(a list: underflow, one count per bin, overflow; the edges are in the manifest's `summary`).

Bins, the statistics' tables and their merging: `recorders.write.totals`.

Crash safety and shards as for full recordings (`recorders.write.writer`): each batch's
statistics are merged into the shard's running totals, which are written whole (a new file in
place of the old, atomically) with the examples they hold in the file's metadata, before the
progress file lists them: at most once a second (`WRITE_EVERY`), and when the writer closes or
stops; a process killed loses at most the last second's batches, which a resume records
again, starting from the totals file. When every shard has finished, the last one merges all
shards' totals into `summary/`, then writes the manifest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from recorders.errors import RecordingError
from recorders.write.layout import SUMMARY_DIR, TOTALS_DIR, WRITE_CHECKSUMS
from recorders.write.progress import Intervals, Shard, read_progress
from recorders.write.rowgroups import failure_reason
from recorders.write.schema import RecordingSummary
from recorders.write.stats import Stats
from recorders.write.totals import Totals, read_totals, totals_bytes
from recorders.write.writer import RecordingWriter

__all__ = ["SummaryWriter"]

Key = tuple[str, str, str, str]  # cell, table (gates or states), gate or state, column
# seconds: the running totals are written at most this often (each write is the whole file),
# and when the writer closes or stops
WRITE_EVERY = 1.0


class SummaryWriter(RecordingWriter):
    """Writes a summary recording (see the module docstring); a context manager.

    As `RecordingWriter`, but for each batch, between `begin` and `commit`, `add` takes the
    batch's statistics of each column instead of its values. `description["summary"]`
    (`Bins.describe`) says the bins.
    """

    def __init__(self, out, description: Mapping[str, Any], **options: Any):
        description = {**description, "kind": "summary"}
        self.summary = dict(description["summary"])
        self.totals = Totals()
        self._adding = Totals()
        self._computing: list[Future] = []  # add_later's, until the commit
        super().__init__(out, description, **options)
        # what the totals file holds, and when it was written
        self._on_disk, self._written_at = Intervals(self.complete.pairs()), time.monotonic()
        if self.resumed:
            rel = f"{TOTALS_DIR}/{self.shard.tag}.parquet"
            if self.complete.total():
                try:
                    data = self.place.read_bytes(rel)
                except OSError:
                    self.abort()
                    raise RecordingError(
                        f"{self._shown(rel)} is missing, yet {self.complete.total():,} examples are marked complete; "
                        f"{self._where.start_again}"
                    ) from None
                self.totals, self.complete = read_totals(data, self.summary, self._shown(rel))
                self._on_disk = Intervals(self.complete.pairs())
                # the totals may hold batches the progress file did not list yet (killed
                # between the two writes): the values counted are the totals'
                self._complete_before = self.complete.total()
                self.rows["gates"] = self.totals.values("gates")
                self.rows["states"] = self.totals.values("states")
                if not self.untouched:
                    self._save_progress(finished=False)

    def _check_parts(self, progress: Mapping[str, Any]) -> None:
        """(A summary has no part files: its totals file is checked when read, in __init__.)"""

    def write_gate(self, *args: Any, **kwargs: Any) -> None:
        raise RecordingError("a summary recording takes statistics (add), not values")

    write_state = write_gate

    def add(self, key: Key, positions, per_unit: Stats, per_step: Stats) -> None:
        """One column's statistics for the batch begun: per unit, and per step at input `positions`."""
        self._guard()
        if self._batch is None:
            raise RecordingError("call begin(start, stop) before adding a batch's statistics")
        self._adding.add(key, positions, per_unit, per_step)

    def add_later(self, compute: Callable[[], tuple[Key, Any, Stats, Stats]]) -> None:
        """As `add`, with what `compute` returns (key, positions, per unit, per step),
        computed on the writer's threads while the caller goes on (the next batch runs);
        `commit` waits for it, and raises what it raised."""
        self._guard()
        if self._batch is None:
            raise RecordingError("call begin(start, stop) before adding a batch's statistics")
        self._computing.append(self._pool.submit(compute))

    def commit(self) -> None:
        """Merge the batch into the totals and mark its examples complete; the totals, then
        the progress file, are written if the last write is `WRITE_EVERY` seconds old."""
        self._guard()
        if self._batch is None:
            raise RecordingError("no batch to commit: call begin(start, stop) first")
        start, stop = self._batch
        computing, self._computing = self._computing, []
        try:
            for future in computing:
                self._adding.add(*future.result())
        except BaseException:
            self.abort()
            raise
        self.totals, self._adding, self._batch = self.totals.merge(self._adding), Totals(), None
        self.complete.add(start, stop)
        self.rows["gates"] = self.totals.values("gates")
        self.rows["states"] = self.totals.values("states")
        if time.monotonic() - self._written_at >= WRITE_EVERY:
            self._write_totals()

    def _write_totals(self) -> None:
        """Write the running totals (a new file in place of the old), then the progress file
        listing the examples they hold; on failure, stop with what the files hold kept."""
        if self._on_disk.pairs() == self.complete.pairs():
            return
        rel = f"{TOTALS_DIR}/{self.shard.tag}.parquet"
        try:
            self.place.write_bytes(rel, totals_bytes(self.totals, self.complete))
        except (OSError, pa.ArrowException, RecordingError) as err:
            self.complete = self._on_disk  # what the files hold
            kept, flag = self.kept()
            self.abort()
            reason = err if isinstance(err, RecordingError) else failure_reason(err)
            raise RecordingError(
                f"cannot write {self._shown(rel)}: {reason}; {kept}: fix the cause and rerun"
                f"{' with ' + flag if flag else ''}"
            ) from err
        self._save_progress(finished=False)
        self._on_disk, self._written_at = Intervals(self.complete.pairs()), time.monotonic()

    def close(self) -> RecordingSummary:
        """As `RecordingWriter.close`, the totals written first."""
        if self.manifest is None:
            self._guard()
            if self._batch is not None:
                self.commit()
            self._write_totals()
        return super().close()

    def abort(self) -> None:
        """Discard the batch in flight; the batches committed are written (if they can be)."""
        if self._state == "open":
            for future in self._computing:
                future.cancel()
            self._computing, self._adding = [], Totals()
            try:
                self._write_totals()
            except RecordingError:
                pass  # (it aborted: the files hold what they held)
        super().abort()

    def __enter__(self) -> SummaryWriter:
        return self

    def _write_manifest(self) -> bool:
        """When every shard has finished: merge their totals into `summary/`, then the manifest."""
        found = read_progress(self.place)
        if len(found) != self.shard.count or not all(p.get("finished") for p in found.values()):
            return False
        merged = Totals()
        for k in range(self.shard.count):
            tag = Shard(k, self.shard.count, self.shard.unit).tag
            rel = f"{TOTALS_DIR}/{tag}.parquet"
            if Intervals(found[tag]["complete"]).total() == 0:
                continue  # a shard with nothing to summarise wrote no totals
            shard_totals, _ = read_totals(
                self.place.read_bytes(rel), self.summary, self._shown(rel)
            )
            merged = merged.merge(shard_totals)
        for axis, name in (("unit", "units"), ("step", "steps")):
            sink = pa.BufferOutputStream()
            pq.write_table(
                merged.frame(axis).replace_schema_metadata({b"gatetrace": self._metadata}),
                sink,
                compression="zstd",
                **WRITE_CHECKSUMS,
            )
            self.place.write_bytes(f"{SUMMARY_DIR}/{name}.parquet", sink.getvalue().to_pybytes())
        return super()._write_manifest()
