"""Writing a recording folder as Parquet, batch by batch, so that a crash loses nothing finished.

The layout of what it writes: `recorders.write.layout`; a part file's row groups:
`recorders.write.rowgroups`; locks and the `--overwrite` swap: `recorders.write.swap`.

Crash safety: a batch's files are encoded (on worker threads) into a hidden staging
folder and renamed into place once all of them are written; only then does the
progress file list the batch's examples as complete. In object storage (`--out
s3://...`, see `recorders.write.place`) there is no rename: each file is written at its final
key, where it appears only once complete, and the progress object is rewritten after
all of a batch's files; a file that no progress object counts is deleted by a resume.
`manifest.json` appears when every shard has finished, so a folder without it is not a
finished recording.

Why one module of over 400 lines: it is one class, `RecordingWriter`, whose states (open,
resumed, a batch in flight, closed, aborted) are one lifecycle, read top to bottom; the
layout, the row groups and the swap are modules of their own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import pyarrow as pa

from recorders.errors import OutputExistsError, RecordingError, listing

# its functions by module, so that a test can stand in for them
from recorders.write import rowgroups
from recorders.write.files import (
    check_out,
    local_path,
    publish,
    refuse_inputs_inside,
    refuse_links,
    remove,
    temp_sibling,
)
from recorders.write.keys import KeyCache
from recorders.write.layout import (
    COMPRESSIONS,
    DEFAULT_COMPRESSION,
    UNREADABLE,
    WEIGHT_LABELS,
    partition_dir,
)
from recorders.write.place import LocalPlace, StorePlace, place_of
from recorders.write.progress import PROGRESS_DIR, Intervals, Shard, read_progress
from recorders.write.rowgroups import failure_reason
from recorders.write.schema import RecordingSummary, description_problem
from recorders.write.swap import (
    drop_locks,
    hold_every_lock,
    hold_lock,
    not_a_recording,
    not_a_weights_table,
    ours,
    settle_swap,
)

__all__ = ["RecordingWriter", "write_weights"]


def write_weights(
    path: str | os.PathLike,
    columns: Mapping[str, Any],
    description: Mapping[str, Any],
    overwrite: bool = False,
) -> int:
    """Write the weights table (`tracer.values.weights.weights_columns`) to one Parquet file, atomically."""
    if os.fspath(path).endswith(("/", os.sep)):
        shown = os.fspath(path)
        raise OutputExistsError(
            f"--out {shown} names a folder; give a file path, e.g. {shown.rstrip('/' + os.sep)}/weights.parquet"
        )
    path = local_path(path)
    check_out(path, overwrite, folder=False, ours=not_a_weights_table)
    tmp = temp_sibling(path)
    try:
        rows = rowgroups.write_parquet(
            tmp, [columns], json.dumps(description).encode(), dictionary_columns=WEIGHT_LABELS
        )
        publish(tmp, path)
    except (OSError, pa.ArrowException) as err:
        remove(tmp)
        kept = "the file there is left as it was" if path.exists() else "nothing was written"
        raise RecordingError(
            f"cannot write {path}: {failure_reason(err)}; {kept}: fix the cause and rerun"
        ) from err
    except BaseException:
        remove(tmp)
        raise
    return rows


# Worker threads encoding a batch's files. Three on two cores: while one waits (for the page
# cache, for the GIL) another encodes; whole processes of the benchmark were faster in each of
# 3 interleaved rounds with 3 than with 2 (0.95 s against 1.06 s a batch, medians, AMD EPYC).
# Each holds one row group's columns at a time, within `tracer.run.budget.RESERVE`.
WRITE_THREADS = 3


class RecordingWriter:
    """Writes one recording folder (see the module docstring), batch by batch; a context manager.

    For each batch: `begin(start, stop)`, then `write_gate` / `write_state` for every
    (cell, gate) and (cell, state) (they return at once; encoding runs on `threads`
    worker threads), then `commit()`, which waits for the files, moves them into place
    and marks examples [start, stop) complete. `remaining()` says which examples are
    still to record (after `resume`, those a killed run did not finish).

    `examples` is the [start, stop) range of the whole recording (None if unknown);
    `shard` picks this writer's part of it. `compression` is one of COMPRESSIONS (see the
    module docstring). Leaving the `with` block normally finishes
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
        self._compression = compression or DEFAULT_COMPRESSION
        if self._compression not in COMPRESSIONS:
            raise RecordingError(
                f"compression {self._compression!r}: expected one of {', '.join(COMPRESSIONS)}"
            )
        self.place = place_of(out)
        self._lock: int | None = None
        # the recording's folder (a Path), and the folder written into (a hidden sibling when
        # replacing one: see `close`); in object storage, where only messages name them, both
        # are the place itself: Any, as the code that touches them as folders runs for a
        # local place only (`place.local`, `replacing`)
        self.target: Any
        self.out: Any
        if isinstance(self.place, LocalPlace):
            # where the recording is, or will be once published
            self.target = self.place.path.resolve()
            settle_swap(self.target)
            refuse_links(self.target)
            # --overwrite records into a hidden sibling and swaps it in at the end (`close`), so
            # that the recording it replaces is kept until the new one is complete.
            self.replacing = overwrite and self.target.is_dir() and any(self.target.iterdir())
            # ...and holds the locks of the recording it replaces until then: no process may
            # still be writing it, nor start to.
            self._replaced_locks, self._created_locks = (
                hold_every_lock(self.target) if self.replacing else ([], [])
            )
            self.out = temp_sibling(self.target, "overwrite") if self.replacing else self.target
            self.place = LocalPlace(self.out)
        else:  # object storage: objects are written at their final keys (see recorders.write.place)
            if overwrite:
                raise RecordingError(
                    f"--overwrite with --out {out}: object storage cannot swap a new recording in at once; remove the old "
                    "one first (aws s3 rm --recursive, gsutil rm -r), then record"
                )
            self.target = self.out = self.place
            self.replacing, self._replaced_locks, self._created_locks = False, [], []
        self._created = not self.place.exists()
        self.shard = shard
        self.examples = None if examples is None else (int(examples[0]), int(examples[1]))
        self.range = None if self.examples is None else shard.part(*self.examples)
        self._metadata = json.dumps(self.description).encode()
        # a folder in the root
        self._staging = f".staging-{shard.tag}" if self.place.local else None
        self._keys = KeyCache()
        self._batch: tuple[int, int] | None = None
        # (future, where the file is staged, its final path, table)
        self._pending: list[tuple[Future, str, str, str]] = []
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
        self.rows = dict(previous["rows"]) if previous else {"gates": 0, "states": 0, "weights": 0}
        self._save_progress(finished=False)
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, threads), thread_name_prefix="gatetrace-write"
        )

    # -- opening ---------------------------------------------------------------------------

    def _open(self, overwrite: bool, resume: bool) -> dict[str, Any] | None:
        """Check what `out` holds; return this shard's previous progress when resuming."""
        out = self.target
        if self.place.local and out.exists() and not out.is_dir():
            raise OutputExistsError(f"--out {out} exists and is a file; give a folder path")
        if overwrite:
            check_out(out, overwrite, ours=not_a_recording)
            refuse_inputs_inside(out, self._reads)
            out = self.out  # a new, empty sibling
        found = read_progress(self.place)
        if not found and any(not ours(name) for name in self.place.entries()):
            foreign = not_a_recording(out) if self.place.local else self.place.entries()
            if foreign:
                shown = listing(foreign, 5)
                raise OutputExistsError(
                    f"--out {out} holds what gatetrace did not write ({shown}); choose another path"
                )
            raise OutputExistsError(
                f"--out {out} holds parts of a recording but no progress file; choose another path, or {self._replace_it}"
            )
        for progress in found.values():
            why = self._difference(progress)
            if why:
                raise OutputExistsError(
                    f"--out {out} holds another recording ({why}); choose another folder, or {self._replace_it}"
                )
        mine = found.get(self.shard.tag)
        if mine is not None and not resume:
            which = "" if self.shard.count == 1 else f" of shard {self.shard}"
            state = "finished" if mine.get("finished") else "partial"
            raise OutputExistsError(
                f"--out {out} already holds a {state} recording{which}; pass --resume to continue it, or {self._replace_it}"
            )
        if self.place.local:
            self._prepare_folder(out, mine)
        complete = Intervals(mine["complete"]) if mine else Intervals()
        self._remove_unfinished_parts(complete)
        if mine is not None:
            self._check_parts(mine)
        return mine

    def _prepare_folder(self, out: Path, mine: Mapping[str, Any] | None) -> None:
        """A local folder: its progress folder, this shard's lock, an empty staging folder."""
        try:
            # the root, and the folders above it, by path; below it, by handle
            out.mkdir(parents=True, exist_ok=True)
            folder = self._local.folder
            folder.mkdir(PROGRESS_DIR)
            which = "" if self.shard.count == 1 else f" shard {self.shard} of"
            self._lock = hold_lock(folder, f"{PROGRESS_DIR}/{self.shard.tag}.lock", out, which)
            staging = self._staging
            assert staging is not None  # a local folder's: see __init__
            folder.remove(staging)
            folder.mkdir(staging)
        except OSError as err:
            reason = err.strerror or str(err)
            if mine is None:
                raise RecordingError(f"cannot create {out}: {reason}") from err
            kept = Intervals(mine["complete"]).total()
            raise RecordingError(
                f"cannot write {out}: {reason}; nothing was changed and the {kept:,} examples recorded before are kept: "
                "fix the cause and rerun with --resume"
            ) from err

    @property
    def _replace_it(self) -> str:
        """How to record the folder afresh, in words that work for this kind of place."""
        if self.place.local:
            return "pass --overwrite to record it again"
        return "remove it first (aws s3 rm --recursive, gsutil rm -r) to record it again"

    def _difference(self, progress: Mapping[str, Any]) -> str | None:
        """Why a progress file found in `out` belongs to another recording (None if it does not)."""
        if progress.get("shard", [0, 1])[1] != self.shard.count:
            return f"it is split into {progress['shard'][1]} shards, not {self.shard.count}"
        unit = (progress["shard"][2:] or [1])[0]
        if unit != self.shard.unit:
            return f"its shards are cut at multiples of {unit} examples, not {self.shard.unit} (--workers cuts them at --batch-size)"
        theirs, ours = _comparable(progress.get("description", {})), _comparable(self.description)
        for key in sorted(set(theirs) | set(ours)):
            if theirs.get(key) != ours.get(key):
                return f"different {key}"
        if progress.get("total") != (None if self.examples is None else list(self.examples)):
            return f"its examples are {progress.get('total')}, not {self.examples}"
        return None

    def _own_parts(self) -> Iterator[tuple[str, str, int]]:
        """(table, path in the recording, first example) of every part file in this shard's range of examples."""
        lo, hi = self.range if self.range is not None else (0, float("inf"))
        for table in ("gates", "states"):
            for rel in self.place.files(table):
                start = _part_start(rel)
                if start is not None and lo <= start < hi:
                    yield table, rel, start

    def _remove_unfinished_parts(self, complete: Intervals) -> None:
        """Delete part files of this shard's examples that no committed batch wrote."""
        for _, rel, start in self._own_parts():
            if start not in complete:
                self.place.remove(rel)

    def _check_parts(self, progress: Mapping[str, Any]) -> None:
        """Refuse to resume when the part files of the complete examples do not hold the rows
        the progress file counts (files removed, replaced or damaged since)."""
        complete = Intervals(progress["complete"])
        found = {"gates": 0, "states": 0}
        for table, rel, start in self._own_parts():
            if start in complete:
                try:
                    found[table] += self.place.parquet_metadata(rel).num_rows
                except UNREADABLE as err:
                    raise RecordingError(
                        f"cannot resume into {self.out}: {self.place}/{rel} is not readable Parquet ({err}); {self._replace_it}"
                    ) from None
        for table, rows in found.items():
            if rows != progress["rows"][table]:
                raise RecordingError(
                    f"cannot resume into {self.out}: its progress file counts {progress['rows'][table]:,} {table[:-1]} rows as complete "
                    f"but their part files hold {rows:,}: files were removed or changed since; {self._replace_it}"
                )

    @property
    def _local(self) -> LocalPlace:
        """The place, a local folder (where a recording is staged: see `place.local`)."""
        if not isinstance(self.place, LocalPlace):
            raise TypeError(f"{self.place} is not a local folder")
        return self.place

    def _write_parquet(
        self, staged: str, chunks: Iterable[Mapping[str, Any]], labels: Sequence[str] = ()
    ) -> int:
        """Write the new Parquet file `staged` (`recorders.write.rowgroups`); returns its rows.
        A local one through the folder's handle, past the page cache where it can be."""
        if isinstance(self.place, LocalPlace):
            return rowgroups.write_in(
                self.place.folder, staged, chunks, self._metadata, labels, self._compression
            )
        where, store = self._store.parquet_target(staged)
        return rowgroups.write_parquet(
            where, chunks, self._metadata, labels, self._compression, filesystem=store
        )

    @property
    def _store(self) -> StorePlace:
        """The place, a prefix in object storage (where objects are written in place)."""
        if not isinstance(self.place, StorePlace):
            raise TypeError(f"{self.place} is not in object storage")
        return self.place

    def _shown(self, rel: str) -> str:
        """A file of the recording as the user knows it: below --out (not the sibling --overwrite writes)."""
        return f"{self.target}/{rel}"

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
        folder: str,
        examples,
        steps,
        values: Mapping[str, Any],
        lengths,
        parts=None,
    ) -> None:
        self._guard()
        if self._batch is None:
            raise RecordingError("call begin(start, stop) before writing a batch")
        final = f"{table}/{folder}/part-{self._batch[0]:010d}.parquet"
        groups = rowgroups.chunks(examples, steps, values, lengths, self._keys, parts)
        # encoded where the place stages it; given its final name by `commit`
        staged = self.place.stage(final, self._staging)
        future = self._pool.submit(self._write_parquet, staged, groups)
        self._pending.append((future, staged, final, table))

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
        change until `commit()` returns.
        """
        folder = partition_dir(cell=cell, gate=gate)
        self._submit(
            "gates",
            folder,
            examples,
            steps,
            {"preactivation": preactivation, "activation": activation},
            lengths,
            parts,
        )

    def write_state(self, cell: str, state: str, examples, steps, values, lengths=None) -> None:
        """One state (`c` or `h`) of one cell: [examples, steps, units], or a callable as for `write_gate`."""
        folder = partition_dir(cell=cell, state=state)
        self._submit("states", folder, examples, steps, {"value": values}, lengths)

    def commit(self) -> None:
        """Wait for the batch's files, move them into place and mark its examples complete."""
        self._guard()
        if self._batch is None:
            raise RecordingError("no batch to commit: call begin(start, stop) first")
        start, stop = self._batch
        rows = {"gates": 0, "states": 0}
        # the file being written or moved, for the error message
        where = self._shown(self._staging or "")
        try:
            for future, _, final, table in self._pending:
                where = self._shown(final)
                rows[table] += future.result()
            for _, staged, final, _ in self._pending:
                where = self._shown(final)
                self.place.land(staged, final)
        except (OSError, pa.ArrowException, RecordingError) as err:
            kept, flag = self.kept()
            self.abort()
            reason = failure_reason(err)
            raise RecordingError(
                f"cannot write {where}: {reason}; {kept}: fix the cause and rerun{' with ' + flag if flag else ''}"
            ) from err
        self._pending, self._batch = [], None
        self.complete.add(start, stop)
        for table, n in rows.items():
            self.rows[table] += n
        self._save_progress(finished=False)

    def write_weights(self, columns: Mapping[str, Any]) -> None:
        """The weights table (`tracer.values.weights.weights_columns`), written at once."""
        self._guard()
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
        self._save_progress(finished=True)
        self._state = "closed"
        complete = self._write_manifest()
        # a finished shard's lock file goes (the lock itself is held until _release)
        if self.place.local:
            self.place.remove(f"{PROGRESS_DIR}/{self.shard.tag}.lock")
        try:
            if self.replacing:  # the new recording is complete: now it may replace the old one
                publish(self.out, self.target)
                self.out = self.target
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
        """Write manifest.json if all shards are finished; say whether they are.

        Every shard checks after marking itself finished, so the last one to finish
        always sees all the others (and two that finish together write the same file).
        """
        found = read_progress(self.place)
        if len(found) != self.shard.count or not all(p.get("finished") for p in found.values()):
            return False
        shards = [
            found[Shard(k, self.shard.count, self.shard.unit).tag] for k in range(self.shard.count)
        ]
        manifest = {
            **self.description,
            "cells": [self._with_recorded_steps(c) for c in self.description.get("cells", [])],
            "examples": sum(Intervals(p["complete"]).total() for p in shards),
            "rows": {
                "gates": sum(p["rows"]["gates"] for p in shards),
                "states": sum(p["rows"]["states"] for p in shards),
                "weights": shards[0]["rows"]["weights"],
            },
            "shards": self.shard.count,
        }
        self.place.write_json("manifest.json", manifest)
        return True

    def _with_recorded_steps(self, cell: Any) -> Any:
        """A cell's description with `steps` as recorded where the model leaves it open (an
        input of [None, None, F]): one more than the largest step of its first gate's part
        files, read from their row-group statistics (no values are read)."""
        if not isinstance(cell, Mapping) or cell.get("steps") is not None or not cell.get("gates"):
            return cell
        folder = "gates/" + partition_dir(cell=cell["name"], gate=cell["gates"][0])
        last = -1
        for rel in self.place.files(folder):
            meta = self.place.parquet_metadata(rel)
            column = meta.schema.to_arrow_schema().get_field_index("step")
            for g in range(meta.num_row_groups):
                stats = meta.row_group(g).column(column).statistics
                if stats is not None and stats.has_min_max:
                    last = max(last, int(stats.max))
        return {**cell, "steps": last + 1} if last >= 0 else cell

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
        self._release()
        if self.replacing:  # the recording it was to replace stays as it was
            remove(self.out)
        elif not self.resumed and not self.complete.total() and self.shard.count == 1:
            # Nothing recorded: leave nothing a rerun would refuse. A shard of a shared folder
            # keeps its (empty) progress file instead: were every shard to remove its own, the
            # weights and folders they wrote would be left without one, a folder no rerun or
            # retry recognizes as a recording.
            for name in (PROGRESS_DIR, "gates", "states", "weights.parquet"):
                self.place.remove(name)
            if self.place.local and self._created and not self.place.entries():
                self.place.close()
                self.out.rmdir()

    def _release(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
        # the recording it was to replace keeps no lock file of ours (gone if replaced)
        if self.replacing:
            drop_locks(self.target, self._replaced_locks, self._created_locks)
        self._lock, self._replaced_locks, self._created_locks = None, [], []
        self.place.close()

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _part_start(path: str) -> int | None:
    """The first example of a part file, from its name `part-<first example>.parquet`."""
    name = path.rsplit("/", 1)[-1]
    if not (name.startswith("part-") and name.endswith(".parquet")):
        return None
    try:
        return int(name[len("part-") : -len(".parquet")])
    except ValueError:
        return None


def _comparable(description: Mapping[str, Any]) -> dict[str, Any]:
    """A description without what may differ between shards of one recording (the model's path)."""
    d = dict(description)
    if isinstance(d.get("source"), dict):
        d["source"] = {k: v for k, v in d["source"].items() if k != "path"}
    return d
