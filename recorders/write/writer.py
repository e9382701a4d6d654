"""Writing a recording folder as Parquet, batch by batch, so that a crash loses nothing finished.

The layout of what it writes: `recorders.write.layout`; a part file's row groups:
`recorders.write.rowgroups`; what `--out` holds, checked before anything is written:
`recorders.write.opening`; locks and the `--overwrite` swap: `recorders.write.swap`; a local
folder or object storage: `recorders.write.place`. The weights table as a file of its own
(`gatetrace weights`): `recorders.write.weights_file`.

Crash safety: a batch's files are encoded (on worker threads) into a hidden staging
folder and renamed into place once all of them are written; only then does the
progress file list the batch's examples as complete. In object storage (`--out
s3://...`, see `recorders.write.place`) there is no rename: each file is written at its final
key, where it appears only once complete, and the progress object is rewritten after
all of a batch's files; a file that no progress object counts is deleted by a resume.
`manifest.json` appears when every shard has finished, so a folder without it is not a
finished recording. Each shard's part files' rows and statistics, merged as its batches commit,
are written beside them, so that an overview reads them in one request a shard:
`recorders.write.merged`.

A description with `rounding` (`gatetrace record --round-bits`) has every float value but the
weights' (and an output's of integers) rounded on the worker threads as it is taken, before
the statistics are counted and the files written (`recorders.write.rounding`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple, cast

import numpy as np
import pyarrow as pa

from recorders.errors import RecordingError
from recorders.write import merged, rowgroups
from recorders.write.direct import WRITE_THREADS
from recorders.write.files import publish, remove
from recorders.write.keys import KeyCache
from recorders.write.layout import COMPRESSIONS, WEIGHT_LABELS
from recorders.write.manifest import write_manifest
from recorders.write.opening import (
    check_parts,
    for_writing,
    previous_progress,
    remove_unfinished_parts,
)
from recorders.write.partstats import Tally
from recorders.write.progress import PROGRESS_DIR, Intervals, Shard
from recorders.write.rounding import compression_of, rounding_of, rounds_output
from recorders.write.rowgroups import failure_reason
from recorders.write.schema import RecordingSummary, description_problem
from recorders.write.swap import drop_locks, mark_swapped, unmark_swapped
from recorders.write.totals import saturation_bounds

__all__ = ["RecordingWriter", "WRITE_THREADS"]


class _File(NamedTuple):
    """A part file of the batch in flight: its encoding, where it is staged, its final path,
    its table, (cell, gate or state), and the statistics it counts (a gate's)."""

    future: Future
    staged: str
    final: str
    table: str
    cell: str
    name: str
    tally: Tally | None


class RecordingWriter:
    """Writes one recording folder (see the module docstring), batch by batch; a context manager.

    For each batch: `begin(start, stop)`, then `write_gate` / `write_state` for every
    (cell, gate) and (cell, state) (they return at once; encoding runs on `threads`
    worker threads), then `commit()`, which waits for the files, moves them into place
    and marks examples [start, stop) complete. `remaining()` says which examples are
    still to record (after `resume`, those a killed run did not finish).

    `examples` is the [start, stop) range of the whole recording (None if unknown);
    `shard` picks this writer's part of it. `compression` is one of COMPRESSIONS (see the
    module docstring; None: the default, which for a description with `rounding` is
    `recorders.write.rounding.COMPRESSION`). Leaving the `with` block normally finishes
    the shard (`close()`); leaving it on an exception discards the batch in flight and
    keeps everything committed (`abort()`). Both are idempotent.
    """

    def __init__(
        self,
        out: str | os.PathLike,
        description: Mapping[str, Any],
        *,
        overwrite: bool = False,
        resume: bool = False,
        shard: Shard = Shard(),
        examples: tuple[int, int] | None = None,
        threads: int = WRITE_THREADS,
        compression: str | None = None,
        reads: Iterable[str | os.PathLike | None] = (),
    ):
        self._reads = list(reads)  # the model and input files: --overwrite may not delete them
        if overwrite and resume:
            raise RecordingError(
                "--overwrite starts again and --resume continues: pass one of them"
            )
        if overwrite and shard.count > 1:
            raise RecordingError(
                f"--overwrite with --shard {shard}: it would replace the folder the other shards write into; "
                "remove the old recording once, then start every shard without --overwrite"
            )
        names = [
            c["name"]
            for c in description.get("cells", [])
            if isinstance(c, Mapping) and isinstance(c.get("name"), str)
        ]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise RecordingError(
                f"two cells are both named {twice[0]!r}: each cell is written to a folder of its own, and one folder "
                "cannot hold two cells; name them apart"
            )
        # plain JSON types, as the files will hold it
        self.description = json.loads(json.dumps(dict(description)))
        why = description_problem(self.description)
        if why and not twice:
            raise RecordingError(f"the recording's description: {why} (see recorders.write.schema)")
        # the values' rounding the description says (`--round-bits`), done as they are written
        self.rounding = rounding_of(self.description)
        self._compression = compression_of(compression, self.rounding is not None)
        if self._compression not in COMPRESSIONS:
            raise RecordingError(
                f"compression {self._compression!r}: expected one of {', '.join(COMPRESSIONS)}"
            )
        self._where = for_writing(out, overwrite)
        self._where.job = shard.unit > 1  # a task of a job (`tracer.run.parallel`)
        self.place = self._where.place
        # the recording's folder as the user named it, and the folder written into (a hidden
        # sibling when replacing one: see `close`); in object storage, the place itself
        self.target, self.out = self._where.shown, self._where.out
        self.replacing = self._where.replacing
        self._lock: int | None = None
        self._created = not self.place.exists()
        self.shard = shard
        self.examples = None if examples is None else (int(examples[0]), int(examples[1]))
        self.range = None if self.examples is None else shard.part(*self.examples)
        self._metadata = json.dumps(self.description).encode()
        # each gate's saturation thresholds, for the statistics its part files carry
        self._bounds = {
            (c["name"], g): saturation_bounds(c, g)
            for c in self.description.get("cells", [])
            for g in c.get("gates", [])
        }
        # a folder in the root
        self._staging = self._where.staging(shard)
        self._keys = KeyCache()
        self._batch: tuple[int, int] | None = None
        self._pending: list[_File] = []
        self.manifest: RecordingSummary | None = None
        self._state = "open"
        try:
            previous = self._open(overwrite, resume)
        except BaseException:
            self._release()
            raise
        self.resumed = previous is not None
        self.complete = Intervals(previous["complete"] if previous else ())
        self._complete_before = self.complete.total()
        # a finished shard resumed with nothing left to record: its files are left as they are
        self.untouched = bool(
            previous is not None
            and previous.get("finished")
            and self.range is not None
            and not self.complete.missing(*self.range)
        )
        self.rows = (
            dict(previous["rows"])
            if previous
            else {"gates": 0, "states": 0, "weights": 0}
            | ({"outputs": 0} if "outputs" in self.description else {})
        )
        if not self.untouched:
            self._save_progress(finished=False)
        # the part files' rows and statistics, merged as batches commit (`recorders.write.merged`);
        # a resumed shard's from its file and the footers that file does not cover
        try:
            self._merging = (
                merged.resumed(self.place, shard, self.description, self.range, self.complete)
                if self.resumed
                else merged.Merging()
            )
        except BaseException:
            self._release()
            raise
        self._merged_at = time.monotonic()
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, threads), thread_name_prefix="gatetrace-write"
        )
        self._merging.submit = self._pool.submit  # a gate's statistics merged there

    # -- opening ---------------------------------------------------------------------------

    def _open(self, overwrite: bool, resume: bool) -> dict[str, Any] | None:
        """Check what `out` holds and make the folder ready (`recorders.write.opening`);
        return this shard's previous progress when resuming."""
        where, examples = self._where, self.range
        mine = previous_progress(
            where, self.shard, self.description, self.examples, overwrite, resume, self._reads
        )
        self._lock = where.make_ready(self.shard, mine)
        remove_unfinished_parts(self.place, examples, Intervals(mine["complete"] if mine else ()))
        if mine is not None:
            self._check_parts(mine)
        return mine

    def _check_parts(self, progress: Mapping[str, Any]) -> None:
        """Refuse to resume unless the part files hold what `progress` counts
        (`recorders.write.opening.check_parts`)."""
        check_parts(self._where, self.range, progress)

    def _write_parquet(
        self,
        staged: str,
        chunks: Iterable[Mapping[str, Any]],
        labels: Sequence[str] = (),
        tally: Tally | None = None,
    ) -> int:
        """Write the new Parquet file `staged` where the place writes it, with the statistics
        of `tally` in its footer; returns its rows."""
        footer = None if tally is None else tally.footer
        return self.place.write_parquet(
            staged, chunks, self._metadata, labels, self._compression, footer
        )

    def _shown(self, rel: str) -> str:
        """A file of the recording as the user knows it: below --out (not the sibling --overwrite writes)."""
        return f"{self.target}/{rel}"

    @property
    def start_again(self) -> str:
        """How to record the recording afresh, in words that work for it (`Target.start_again`)."""
        return self._where.start_again

    def kept(self) -> tuple[str, str]:
        """What a failure now leaves, in words, and the flag a rerun continues with ("" for none)."""
        if self.replacing:
            return (
                f"{self.target} is left as it was (--overwrite replaces it only once the new recording is complete)",
                "--overwrite",
            )
        done = self.complete.total()
        if not done and not self.resumed and self.shard.count == 1:
            return "nothing was recorded", ""
        if self.shard.unit > 1:  # a task of a job (`tracer.run.parallel`): the job is resumed
            return "the sequences the job's tasks recorded are kept", "--resume"
        return f"the {done:,} sequences recorded before are kept", "--resume"

    def remaining(self) -> list[tuple[int, int | None]]:
        """The example ranges of this shard that are not complete yet (for a stream of unknown
        length: none once it is, else `(0, None)`)."""
        if self.range is None:
            return [] if self.complete.total() else [(0, None)]
        return [(start, stop) for start, stop in self.missing()]

    def missing(self) -> list[tuple[int, int]]:
        """The example ranges not complete yet of a shard whose examples are known."""
        if self.range is None:
            raise RecordingError("a recording of a stream of unknown length has no ranges to go")
        return self.complete.missing(*self.range)

    # -- writing ---------------------------------------------------------------------------

    def _guard(self) -> None:
        if self._state != "open":
            raise RecordingError(f"recording {self.out} is already {self._state}")

    def begin(self, start: int, stop: int) -> None:
        """Start the batch of examples [start, stop)."""
        self._guard()
        if self._batch is not None:
            raise RecordingError(f"batch {self._batch[0]}:{self._batch[1]} is not committed yet")
        self._batch = (int(start), int(stop))

    def _submit(
        self,
        table: str,
        key: tuple[str, str],
        examples,
        steps,
        values: Mapping[str, Any],
        lengths,
        parts=None,
        tally: Tally | None = None,
        rounded: bool = True,
    ) -> None:
        self._guard()
        if self._batch is None:
            raise RecordingError("call begin(start, stop) before writing a batch")
        if self.rounding is not None and rounded:  # rounded as the worker thread takes them
            values = {name: self.rounding.rounds(v) for name, v in values.items()}
            parts = self.rounding.rounds_parts(parts)
        final = merged.part_file(table, *key, self._batch[0])
        ids, (start, stop) = np.asarray(examples), self._batch
        if ids.size and not (start <= int(ids.min()) and int(ids.max()) < stop):
            # a part file holds examples from its name's first example to the next file's:
            # readers find an example's rows by the files' names
            raise RecordingError(
                f"examples {int(ids.min())} to {int(ids.max())} written into the batch "
                f"{start}:{stop}: write each batch's own examples, those begin(start, stop) gave"
            )
        groups = rowgroups.chunks(examples, steps, values, lengths, self._keys, parts, tally)
        # encoded where the place stages it; given its final name by `commit`
        staged = self.place.stage(final, self._staging)
        future = self._pool.submit(self._write_parquet, staged, groups, (), tally)
        self._pending.append(_File(future, staged, final, table, *key, tally))

    def write_gate(
        self,
        cell: str,
        gate: str,
        examples,
        steps,
        preactivation,
        activation,
        lengths=None,
        parts=None,
    ) -> None:
        """One gate of one cell: value arrays [examples, steps, units], None (the column is
        left out), or callables taking a slice of examples and returning their rows (called
        on a worker thread, a row group's examples at a time).

        `parts`: the preactivation's parts (`recorders.write.columns.PARTS`), a callable taking a
        slice of examples and returning {part: [examples, steps, units] rows, or None where
        the cell has no such part (a column of nulls)}; None leaves the part columns out.

        With `lengths`, no rows are written for steps at or past an example's length (or,
        given a boolean [examples, steps] mask, where it is False). The arrays must not
        change until `commit()` returns. The file's footer carries the statistics of the
        activations (`recorders.write.partstats`).
        """
        tally = None
        if activation is not None:
            low, high = self._bounds.get((cell, gate)) or (None, None)
            tally = Tally(np.asarray(steps), low, high, examples=np.asarray(examples))
        self._submit(
            "gates",
            (cell, gate),
            examples,
            steps,
            {"preactivation": preactivation, "activation": activation},
            lengths,
            parts,
            tally,
        )

    def write_state(self, cell: str, state: str, examples, steps, values, lengths=None) -> None:
        """One state (`c` or `h`) of one cell: [examples, steps, units], or a callable as for `write_gate`."""
        self._submit("states", (cell, state), examples, steps, {"value": values}, lengths)

    def write_output(self, name: str, examples, steps, values, lengths=None) -> None:
        """One of the model's outputs (`outputs/output=NAME/`): [examples, steps, units] values
        (an output that is not a sequence as one step, 0), or a callable as for `write_gate`.
        An output the description says is of integers or booleans is never rounded."""
        exact = any(
            isinstance(o, Mapping) and o.get("name") == name and not rounds_output(o)
            for o in self.description.get("outputs", [])
        )
        self._submit(
            "outputs", ("", name), examples, steps, {"value": values}, lengths, rounded=not exact
        )

    def commit(self) -> None:
        """Wait for the batch's files, move them into place and mark its examples complete."""
        self._guard()
        if self._batch is None:
            raise RecordingError("no batch to commit: call begin(start, stop) first")
        start, stop = self._batch
        rows = {"gates": 0, "states": 0, "outputs": 0}
        each: list[int] = []  # the rows of each file
        # the file being written or moved, for the error message
        where = self._shown(self._staging or "")
        try:
            for file in self._pending:
                where = self._shown(file.final)
                each.append(file.future.result())
                rows[file.table] += each[-1]
            for file in self._pending:
                where = self._shown(file.final)
                self.place.land(file.staged, file.final)
        except (OSError, pa.ArrowException, RecordingError) as err:
            kept, flag = self.kept()
            self.abort()
            reason = failure_reason(err)
            raise RecordingError(
                f"cannot write {where}: {reason}; {kept}: fix the cause and rerun{' with ' + flag if flag else ''}"
            ) from err
        done, self._pending, self._batch = self._pending, [], None
        self.complete.add(start, stop)
        for table, n in rows.items():
            if n or table in self.rows:  # (a recording without outputs counts none)
                self.rows[table] = self.rows.get(table, 0) + n
        self._save_progress(finished=False)
        # complete now: merged, and written at most every WRITE_EVERY seconds
        for file, n in zip(done, each, strict=True):
            if file.table == "outputs":  # no statistics: the view shows gates and states
                continue
            tally = file.tally
            self._merging.add(
                (file.table, file.cell, file.name),
                start,
                n,
                None if tally is None else tally.carried,
                None if tally is None else tally.carried_top,
            )
        if time.monotonic() - self._merged_at >= merged.WRITE_EVERY:
            self._write_merged()

    def write_weights(self, columns: Mapping[str, Any]) -> None:
        """The weights table (`tracer.values.weights.weights_columns`), written at once (a
        finished shard resumed, `untouched`, keeps the one it wrote: a resume checks that the
        weights are the same, `digests`)."""
        self._guard()
        if self.untouched:
            return
        try:
            staged = self.place.stage("weights.parquet", self._staging, "weights.parquet")
            n = self._write_parquet(staged, [columns], WEIGHT_LABELS)
            self.place.land(staged, "weights.parquet")
        except (OSError, pa.ArrowException) as err:
            kept, flag = self.kept()
            raise RecordingError(
                f"cannot write {self._shown('weights.parquet')}: {failure_reason(err)}; {kept}: fix the cause "
                f"and rerun{' with ' + flag if flag else ''}"
            ) from err
        self.rows["weights"] = n

    # -- finishing -------------------------------------------------------------------------

    def _write_merged(self) -> None:
        """Write the merged statistics file if it holds batches the last one did not
        (`recorders.write.merged`)."""
        if self._merging.changed:
            self.place.write_bytes(
                merged.statistics_file(self.shard), self._merging.encode(self.shard)
            )
            self._merging.changed = False
        self._merged_at = time.monotonic()

    def _save_progress(self, finished: bool) -> None:
        self.place.write_json(
            f"{PROGRESS_DIR}/{self.shard.tag}.json",
            {
                "description": self.description,
                "shard": self.shard.recorded,
                "total": None if self.examples is None else list(self.examples),
                "examples": None if self.range is None else list(self.range),
                "complete": self.complete.pairs(),
                "rows": self.rows,
                "finished": finished,
            },
        )

    def close(self) -> RecordingSummary:
        """Finish this shard; when every shard is finished, write manifest.json.

        Returns this shard's summary: the description, `examples` and `rows` of the
        shard, `examples_this_run` (fewer after a resume), `shard` as [K, N], and
        `complete` (whether the whole recording is).
        """
        if self.manifest is not None:  # closed already
            return self.manifest
        self._guard()
        if self._batch is not None:
            self.commit()
        self._pool.shutdown()
        if self._staging is not None:
            self.place.remove(self._staging)
        self._write_merged()
        if not self.untouched:  # (a finished shard resumed keeps its progress file as it was)
            self._save_progress(finished=True)
        self._state = "closed"
        # (written where every shard has finished and it is not there: killed before it was)
        if self.untouched and "manifest.json" in self.place.entries():
            complete = True
        else:
            complete = self._write_manifest()
        # a finished shard's lock file goes (the lock itself is held until _release)
        if self._lock is not None:
            self.place.remove(f"{PROGRESS_DIR}/{self.shard.tag}.lock")
        try:
            if self.replacing:  # the new recording is complete: now it may replace the old one
                mark_swapped(self.target, self.target)  # the old one, about to be moved aside
                publish(self.out, self.target)
                self.out = self.target
                unmark_swapped(self.target)
        finally:
            self._release()
        # the description is the caller's (its keys: RecordingSummary's)
        self.manifest = cast(
            RecordingSummary,
            {
                **self.description,
                "examples": self.complete.total(),
                "examples_this_run": self.complete.total() - self._complete_before,
                "rows": dict(self.rows),
                "shard": [self.shard.index, self.shard.count],
                "complete": complete,
            },
        )
        return self.manifest

    def _write_manifest(self) -> bool:
        """Write manifest.json if every shard is finished (`recorders.write.manifest`); say
        whether they are."""
        return write_manifest(self.place, self.description, self.shard)

    def abort(self) -> None:
        """Discard the batch in flight; committed batches and the progress file stay."""
        if self._state != "open":
            return
        self._state = "aborted"
        for future, *_ in self._pending:
            future.cancel()
        self._pool.shutdown(wait=True)
        self._pending, self._batch = [], None
        if self._staging is not None:
            self.place.remove(self._staging)
        if not self.replacing:  # the batches committed, merged (if it can be written)
            try:
                self._write_merged()
            except (OSError, RecordingError):
                pass  # readers read the footers it would have covered
        self._release()
        if self.replacing:  # the recording it was to replace stays as it was
            remove(self.out)
        elif not self.resumed and not self.complete.total() and self.shard.count == 1:
            # Nothing recorded: leave nothing a rerun would refuse. A shard of a shared folder
            # keeps its (empty) progress file instead: were every shard to remove its own, the
            # weights and folders they wrote would be left without one, a folder no rerun or
            # retry recognizes as a recording.
            for name in (PROGRESS_DIR, "gates", "states", "outputs", "weights.parquet"):
                self.place.remove(name)
            if self._created:
                self._where.remove_if_empty()

    def _release(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
        # the recording it was to replace keeps no lock file of ours (gone if replaced)
        where = self._where
        if where.replacing:
            drop_locks(where.shown, where.replaced_locks, where.created_locks)
        self._lock, where.replaced_locks, where.created_locks = None, [], []
        self.place.close()

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
