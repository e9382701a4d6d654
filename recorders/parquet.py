"""Writing a recording folder as Parquet, batch by batch, so that a crash loses nothing finished.

Layout of a recording `OUT/`:

    gates/cell=<cell>/gate=<gate>/part-<first example>.parquet   example, step, unit, preactivation, activation
    states/cell=<cell>/state=<c|h>/part-<first example>.parquet  example, step, unit, value
    weights.parquet                                              cell, gate, source, row, unit, value
    _progress/shard-K-of-N.json                                  which examples are complete (see recorders.progress)
    manifest.json                                                what was recorded, from what, row counts

`gates/` and `states/` are Hive-partitioned datasets: `pandas.read_parquet("OUT/gates")`
returns the long table with `cell` and `gate` as categoricals, and a filter on them
reads only the matching folders. In partition values, characters that are unsafe in
folder names are percent-encoded (`/` in a cell name becomes `%2F`, see
`partition_dir`); pyarrow decodes them on reading. Each batch of examples is one
part file per (cell, gate) and (cell, state), named by the batch's first example, so
the files sort in example order and shards never collide. Within a file, rows are in
(example, step, unit) order, in row groups of whole examples of about a million rows
(`ROW_GROUP_ROWS`): the writer builds one row group's columns at a time.

By default (`fast`) the key columns are plain and lz4-compressed (their repeats compress
to almost nothing) and the float columns are plain and uncompressed: the random low bits
of float32 values leave lz4 5% to 12% to save on most of them (a quarter on an often
saturated gate's activations), for two to three times their encoding time (measured).
`lz4`, `zstd` and `snappy` compress every column, the floats byte-stream-split; `none`
compresses nothing. Every file carries the recording's description in its schema
metadata under the key `gatetrace`.

Crash safety: a batch's files are encoded (on worker threads) into a hidden staging
folder and renamed into place once all of them are written; only then does the
progress file list the batch's examples as complete. In object storage (`--out
s3://...`, see `recorders.place`) there is no rename: each file is written at its final
key, where it appears only once complete, and the progress object is rewritten after
all of a batch's files; a file that no progress object counts is deleted by a resume.
`manifest.json` appears when every shard has finished, so a folder without it is not a
finished recording.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from recorders.errors import OutputExistsError, RecordingError, listing
from recorders.files import check_out, foreign_entries, local_path, publish, refuse_inputs_inside, refuse_links, remove, temp_sibling
from recorders.long import ABSENT, PARTS, KeyCache, long_columns
from recorders.folder import Folder
from recorders.place import LocalPlace, place_of
from recorders.progress import PROGRESS_DIR, Intervals, Shard, read_progress
from recorders.schema import description_problem

__all__ = [
    "METADATA_KEY", "COMPRESSIONS", "DEFAULT_COMPRESSION", "RecordingWriter", "create_folder", "write_weights", "partition_dir", "partition_value",
]

METADATA_KEY = b"gatetrace"
# `fast`: lz4 on the keys only (see the module docstring). Measured on the benchmark's values
# (bench/encodings.py): 4.0 bytes per float value uncompressed, 3.65 with lz4, 3.50 with zstd.
COMPRESSIONS = ("fast", "lz4", "zstd", "snappy", "none")
DEFAULT_COMPRESSION = "fast"
_WEIGHT_LABELS = ("cell", "gate", "source")  # the weights table's text columns, dictionary-encoded
_FLOATS = ("preactivation", "activation", *PARTS, "value")
# Columns that never hold a null, written as required: no definition levels to encode (a
# quarter of the encoding time, measured). The parts stay optional (null where a cell kind
# has no such part).
_REQUIRED = ("example", "step", "unit", "row", "preactivation", "activation", "value")
# Columns whose min and max per row group are not written: the floats (their statistics
# skip nothing) and `unit`, which spans every unit in every row group. Statistics cost 6%
# of the encoding for the floats, 0.6 ns a row for `unit` (measured).
_NO_STATISTICS = (*_FLOATS, "unit")
# Rows per row group of a part file: a batch is encoded this many rows at a time, so that
# the long columns of a whole batch never exist at once; readers that filter on
# `example` skip row groups by their statistics.
ROW_GROUP_ROWS = 1 << 20


# ASCII characters that must not appear in a folder name on any common file system, or
# that Hive partitioning gives a meaning: percent-encoded. Other characters stay as they
# are, so that non-ASCII names stay short.
_UNSAFE = set('/\\:*?"<>|%=') | {chr(i) for i in range(32)} | {chr(127)}
_MAX_FOLDER_BYTES = 255


def _encode(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _UNSAFE else c for c in value)


def partition_value(key: str, name: str) -> str:
    """The value that stands for `name` in the `key` partition column, as readers see it.

    It is `name` itself unless its folder would exceed the 255 bytes file systems allow;
    then it is the longest start of `name` that fits, `~`, and 16 hex digits of the name's
    SHA-256, unique and stable. `recorders.Recording` maps it back to the full name.
    """
    if len(f"{key}={_encode(name)}".encode("utf-8")) <= _MAX_FOLDER_BYTES:
        return name
    digest = "~" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
    budget = _MAX_FOLDER_BYTES - len(f"{key}=".encode()) - len(digest)
    kept, used = [], 0
    for c in name:
        size = len(_encode(c).encode("utf-8"))
        if used + size > budget:
            break
        kept.append(c)
        used += size
    return "".join(kept) + digest


def partition_dir(**parts: str) -> str:
    """`cell=rnn%2Fbasic_lstm_cell/gate=f`: Hive partition folders, one per part.

    Characters in `_UNSAFE` are percent-encoded (pyarrow, DuckDB and Spark decode them),
    so a name from a graph, `../../x` or `C:\\x`, is always one folder inside the table;
    a name too long for a folder is shortened (`partition_value`).
    """
    return "/".join(f"{key}={_encode(partition_value(key, str(value)))}" for key, value in parts.items())


def _write_parquet(
    path: Path | str, chunks: Iterable[Mapping[str, Any]], metadata: bytes, dictionary_columns=(), compression: str | None = None,
    filesystem: Any = None,
) -> int:
    """Write column chunks as one Parquet file, one row group per chunk with rows (a file
    with no rows still has the schema of the first). Columns that never hold a null are
    required (`_REQUIRED`); `dictionary_columns` are dictionary-encoded, the others as
    `_layout` says for `compression` (one of COMPRESSIONS, None: DEFAULT_COMPRESSION).
    Statistics (min and max per row group, which readers use to skip row groups) are
    kept for every column but `_NO_STATISTICS`. `filesystem`: a pyarrow FileSystem that
    `path` is in (default: the local one). Returns the rows written."""
    writer, rows = None, 0
    if filesystem is None and isinstance(path, (str, Path)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        for columns in chunks:
            size = next(len(v) for v in columns.values() if v is not ABSENT)
            arrays = [
                pa.nulls(size, pa.float32()) if v is ABSENT else _labels(v) if name in dictionary_columns else pa.array(v)
                for name, v in columns.items()
            ]
            fields = [pa.field(name, a.type, nullable=name not in _REQUIRED) for name, a in zip(columns, arrays)]
            table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
            if writer is None:
                writer = pq.ParquetWriter(
                    str(path) if isinstance(path, Path) else path, table.schema.with_metadata({METADATA_KEY: metadata}), filesystem=filesystem,
                    use_dictionary=list(dictionary_columns), write_statistics=[n for n in columns if n not in _NO_STATISTICS],
                    **_layout(list(columns), compression or DEFAULT_COMPRESSION),
                )
            if table.num_rows:
                writer.write_table(table, row_group_size=table.num_rows)
                rows += table.num_rows
    finally:
        if writer is not None:
            writer.close()
    return rows


def _layout(names: list[str], compression: str) -> dict[str, Any]:
    """The codec and encoding of each column for `compression`: with `fast`, lz4 for the
    keys and labels and no codec for the floats, all plain; otherwise that codec for every
    column, the floats byte-stream-split (which groups their bytes so that the codec
    finds the runs in the signs and exponents)."""
    if compression == "fast":
        return {"compression": {n: "none" if n in _FLOATS else "lz4" for n in names}}
    return {"compression": compression, "column_encoding": {n: "BYTE_STREAM_SPLIT" for n in names if n in _FLOATS}}


def _write_in(folder: Folder, rel: str, chunks: Iterable[Mapping[str, Any]], metadata: bytes, dictionary_columns=(),
              compression: str | None = None) -> int:
    """`_write_parquet` into the new file `rel` of a local folder, reached through its handle."""
    with folder.create(rel) as f:
        sink = folder.native_target(f)
        try:
            return _write_parquet(sink, chunks, metadata, dictionary_columns, compression)
        finally:
            if sink is not f:
                sink.close()


def _reason(err: BaseException) -> str:
    """Why a write failed, as the system says it (`No space left on device`), from an OSError
    or from pyarrow's wording of one (`Error writing bytes to file. Detail: [errno 28] ...`)."""
    text = getattr(err, "strerror", None) or str(err)
    found = re.search(r"\[errno (\d+)\] ([^\n]+)", text)
    return found.group(2).strip() if found else text


def _labels(values) -> pa.DictionaryArray:
    """A text column, dictionary-encoded: from a pandas Categorical (its codes, no string
    per row) or from a sequence of strings (None: a null)."""
    if isinstance(values, pd.Categorical):
        codes = np.asarray(values.codes, dtype=np.int32)
        dictionary = pa.array(list(values.categories), type=pa.string())
        return pa.DictionaryArray.from_arrays(pa.array(codes, mask=codes < 0), dictionary)
    return pa.array(values, type=pa.string()).dictionary_encode()


def _chunks(examples, steps, values: Mapping[str, Any], lengths, keys, parts=None) -> Iterator[dict[str, Any]]:
    """The long columns of one part file (`recorders.long`), a chunk of examples at a time,
    each chunk about ROW_GROUP_ROWS rows. `values` are [examples, steps, units] arrays, None
    (the column is left out), or callables taking a slice of examples and returning their
    rows; `parts`, a callable taking a slice of examples and returning several columns at
    once ({name: rows, or None for a column of nulls}). Only one chunk's columns exist at a time."""
    examples = np.asarray(examples, dtype=np.int64)
    steps = np.asarray(steps)
    present = {name: v for name, v in values.items() if v is not None}
    first = _rows(next(iter(present.values())), slice(0, 1)) if present else next(a for a in parts(slice(0, 1)).values() if a is not None)
    n, per_chunk = len(examples), max(1, ROW_GROUP_ROWS // max(1, len(steps) * first.shape[2]))
    for start in range(0, max(n, 1), per_chunk):
        rows = slice(start, min(n, start + per_chunk))
        chunk = {name: _rows(v, rows) for name, v in present.items()}
        if parts is not None:
            chunk |= {name: ABSENT if a is None else a for name, a in parts(rows).items()}
        yield long_columns(examples[rows], steps, chunk, None if lengths is None else np.asarray(lengths)[rows], keys)


def _rows(values, rows: slice) -> np.ndarray:
    """The examples `rows` of an [examples, steps, units] array, or of what a callable returns for them."""
    return values(rows) if callable(values) else np.asarray(values)[rows]


def write_weights(
    path: str | os.PathLike, columns: Mapping[str, Any], description: Mapping[str, Any], overwrite: bool = False
) -> int:
    """Write the weights table (`tracer.values.weights.weights_columns`) to one Parquet file, atomically."""
    if os.fspath(path).endswith(("/", os.sep)):
        shown = os.fspath(path)
        raise OutputExistsError(f"--out {shown} names a folder; give a file path, e.g. {shown.rstrip('/' + os.sep)}/weights.parquet")
    path = local_path(path)
    check_out(path, overwrite, folder=False, ours=_not_a_weights_table)
    tmp = temp_sibling(path)
    try:
        rows = _write_parquet(tmp, [columns], json.dumps(description).encode(), dictionary_columns=_WEIGHT_LABELS)
        publish(tmp, path)
    except (OSError, pa.ArrowException) as err:
        remove(tmp)
        kept = "the file there is left as it was" if path.exists() else "nothing was written"
        raise RecordingError(f"cannot write {path}: {_reason(err)}; {kept}: fix the cause and rerun") from err
    except BaseException:
        remove(tmp)
        raise
    return rows


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
        threads: int = 2,
        compression: str | None = None,
        reads: Iterable[str | os.PathLike | None] = (),
    ):
        self._reads = list(reads)  # the model and input files: --overwrite may not delete them
        if overwrite and resume:
            raise RecordingError("--overwrite starts again and --resume continues: pass one of them")
        if overwrite and shard.count > 1:
            raise RecordingError(
                f"--overwrite with --shard {shard}: it would replace the folder the other shards write into; "
                "remove the old recording once, then start every shard without --overwrite"
            )
        names = [c.get("name") for c in description.get("cells", []) if isinstance(c, Mapping)]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise RecordingError(
                f"two cells are both named {twice[0]!r}: each cell is written to a folder of its own, and one folder "
                "cannot hold two cells; name them apart"
            )
        why = description_problem(json.loads(json.dumps(dict(description))))
        if why and not twice:
            raise RecordingError(f"the recording's description: {why} (see recorders.schema)")
        self._compression = compression or DEFAULT_COMPRESSION
        if self._compression not in COMPRESSIONS:
            raise RecordingError(f"compression {self._compression!r}: expected one of {', '.join(COMPRESSIONS)}")
        self.place = place_of(out)
        self._lock: int | None = None
        if self.place.local:
            self.target = self.place.path.resolve()  # where the recording is, or will be once published
            settle_swap(self.target)
            refuse_links(self.target)
            # --overwrite records into a hidden sibling and swaps it in at the end (`close`), so
            # that the recording it replaces is kept until the new one is complete.
            self.replacing = overwrite and self.target.is_dir() and any(self.target.iterdir())
            # ...and holds the locks of the recording it replaces until then: no process may
            # still be writing it, nor start to.
            self._replaced_locks, self._created_locks = _hold_every_lock(self.target) if self.replacing else ([], [])
            self.out = temp_sibling(self.target, "overwrite") if self.replacing else self.target
            self.place = LocalPlace(self.out)
        else:  # object storage: objects are written at their final keys (see recorders.place)
            if overwrite:
                raise RecordingError(
                    f"--overwrite with --out {out}: object storage cannot swap a new recording in at once; remove the old "
                    "one first (aws s3 rm --recursive, gsutil rm -r), then record"
                )
            self.target = self.out = self.place
            self.replacing, self._replaced_locks, self._created_locks = False, [], []
        self._created = not self.place.exists()
        self.shard = shard
        self.description = json.loads(json.dumps(dict(description)))
        self.examples = None if examples is None else tuple(int(e) for e in examples)
        self.range = None if examples is None else shard.part(*self.examples)
        self._metadata = json.dumps(self.description).encode()
        self._staging = f".staging-{shard.tag}" if self.place.local else None  # a folder in the root
        self._keys = KeyCache()
        self._batch: tuple[int, int] | None = None
        self._pending: list[tuple[Future, str | None, str, str]] = []  # (future, staged file or None, final path, table)
        self.manifest: dict[str, Any] | None = None
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
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="gatetrace-write")

    # -- opening ---------------------------------------------------------------------------

    def _open(self, overwrite: bool, resume: bool) -> dict[str, Any] | None:
        """Check what `out` holds; return this shard's previous progress when resuming."""
        out = self.target
        if self.place.local and out.exists() and not out.is_dir():
            raise OutputExistsError(f"--out {out} exists and is a file; give a folder path")
        if overwrite:
            check_out(out, overwrite, ours=_not_a_recording)
            refuse_inputs_inside(out, self._reads)
            out = self.out  # a new, empty sibling
        found = read_progress(self.place)
        if not found and any(not _ours(name) for name in self.place.entries()):
            foreign = _not_a_recording(out) if self.place.local else self.place.entries()
            if foreign:
                shown = listing(foreign, 5)
                raise OutputExistsError(f"--out {out} holds what gatetrace did not write ({shown}); choose another path")
            raise OutputExistsError(f"--out {out} holds parts of a recording but no progress file; choose another path, or {self._replace_it}")
        for progress in found.values():
            why = self._difference(progress)
            if why:
                raise OutputExistsError(f"--out {out} holds another recording ({why}); choose another folder, or {self._replace_it}")
        mine = found.get(self.shard.tag)
        if mine is not None and not resume:
            which = "" if self.shard.count == 1 else f" of shard {self.shard}"
            state = "finished" if mine.get("finished") else "partial"
            raise OutputExistsError(f"--out {out} already holds a {state} recording{which}; pass --resume to continue it, or {self._replace_it}")
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
            out.mkdir(parents=True, exist_ok=True)  # the root, and the folders above it, by path; below it, by handle
            folder = self.place.folder
            folder.mkdir(PROGRESS_DIR)
            which = "" if self.shard.count == 1 else f" shard {self.shard} of"
            self._lock = _hold_lock(folder, f"{PROGRESS_DIR}/{self.shard.tag}.lock", out, which)
            folder.remove(self._staging)
            folder.mkdir(self._staging)
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
                except (OSError, pa.ArrowException) as err:
                    raise RecordingError(
                        f"cannot resume into {self.out}: {self.place}/{rel} is not readable Parquet ({err}); {self._replace_it}"
                    ) from None
        for table, rows in found.items():
            if rows != progress["rows"][table]:
                raise RecordingError(
                    f"cannot resume into {self.out}: its progress file counts {progress['rows'][table]:,} {table[:-1]} rows as complete "
                    f"but their part files hold {rows:,}: files were removed or changed since; {self._replace_it}"
                )

    def _shown(self, rel: str) -> str:
        """A file of the recording as the user knows it: below --out (not the sibling --overwrite writes)."""
        return f"{self.target}/{rel}"

    def kept(self) -> tuple[str, str]:
        """What a failure now leaves, in words, and the flag a rerun continues with ("" for none)."""
        if self.replacing:
            return f"{self.target} is left as it was (--overwrite replaces it only once the new recording is complete)", "--overwrite"
        done = self.complete.total()
        if not done and not self.resumed and self.shard.count == 1:
            return "nothing was recorded", ""
        return f"the {done:,} sequences recorded before are kept", "--resume"

    def remaining(self) -> list[tuple[int, int | None]]:
        """The example ranges of this shard that are not complete yet."""
        if self.range is None:
            return [] if self.complete.total() else [(0, None)]
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

    def _submit(self, table: str, folder: str, examples, steps, values: Mapping[str, Any], lengths, parts=None) -> None:
        self._guard()
        if self._batch is None:
            raise RecordingError("call begin(start, stop) before writing a batch")
        final = f"{table}/{folder}/part-{self._batch[0]:010d}.parquet"
        chunks = _chunks(examples, steps, values, lengths, self._keys, parts)
        if self.place.local:  # encoded into the staging folder, renamed into place by `commit`
            staged = f"{self._staging}/{uuid.uuid4().hex}.parquet"
            future = self._pool.submit(_write_in, self.place.folder, staged, chunks, self._metadata, compression=self._compression)
        else:  # an object appears only once complete: written at its final key
            staged = None
            where, store = self.place.parquet_target(final)
            future = self._pool.submit(_write_parquet, where, chunks, self._metadata, compression=self._compression, filesystem=store)
        self._pending.append((future, staged, final, table))

    def write_gate(self, cell: str, gate: str, examples, steps, preactivation, activation, lengths=None, parts=None) -> None:
        """One gate of one cell: value arrays [examples, steps, units], None (the column is
        left out), or callables taking a slice of examples and returning their rows (called
        on a worker thread, a row group's examples at a time).

        `parts`: the preactivation's parts (`recorders.long.PARTS`), a callable taking a
        slice of examples and returning {part: [examples, steps, units] rows, or None where
        the cell has no such part (a column of nulls)}; None leaves the part columns out.

        With `lengths`, no rows are written for steps at or past an example's length (or,
        given a boolean [examples, steps] mask, where it is False). The arrays must not
        change until `commit()` returns.
        """
        folder = partition_dir(cell=cell, gate=gate)
        self._submit("gates", folder, examples, steps, {"preactivation": preactivation, "activation": activation}, lengths, parts)

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
        where = self._shown(self._staging or "")  # the file being written or moved, for the error message
        try:
            for future, _, final, table in self._pending:
                where = self._shown(final)
                rows[table] += future.result()
            for _, staged, final, _ in self._pending:
                if staged is not None:
                    where = self._shown(final)
                    self.place.folder.replace(staged, final)
        except (OSError, pa.ArrowException, RecordingError) as err:
            kept, flag = self.kept()
            self.abort()
            reason = _reason(err)
            raise RecordingError(f"cannot write {where}: {reason}; {kept}: fix the cause and rerun{' with ' + flag if flag else ''}") from err
        self._pending, self._batch = [], None
        self.complete.add(start, stop)
        for table, n in rows.items():
            self.rows[table] += n
        self._save_progress(finished=False)

    def write_weights(self, columns: Mapping[str, Any]) -> None:
        """The weights table (`tracer.values.weights.weights_columns`), written at once."""
        self._guard()
        try:
            if self.place.local:
                staged = f"{self._staging}/weights.parquet"
                self.place.folder.remove(staged)
                n = _write_in(self.place.folder, staged, [columns], self._metadata, _WEIGHT_LABELS, self._compression)
                self.place.folder.replace(staged, "weights.parquet")
            else:
                where, store = self.place.parquet_target("weights.parquet")
                n = _write_parquet(where, [columns], self._metadata, _WEIGHT_LABELS, self._compression, filesystem=store)
        except (OSError, pa.ArrowException) as err:
            kept, flag = self.kept()
            raise RecordingError(
                f"cannot write {self._shown('weights.parquet')}: {_reason(err)}; {kept}: fix the cause "
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

    def close(self) -> dict[str, Any]:
        """Finish this shard; when every shard is finished, write manifest.json.

        Returns this shard's summary: the description, `examples` and `rows` of the
        shard, `examples_this_run` (fewer after a resume), `shard` as [K, N], and
        `complete` (whether the whole recording is).
        """
        if self._state == "closed":
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
        if self.place.local:  # a finished shard's lock file goes (the lock itself is held until _release)
            self.place.remove(f"{PROGRESS_DIR}/{self.shard.tag}.lock")
        try:
            if self.replacing:  # the new recording is complete: now it may replace the old one
                publish(self.out, self.target)
                self.out = self.target
        finally:
            self._release()
        self.manifest = {
            **self.description,
            "examples": self.complete.total(),
            "examples_this_run": self.complete.total() - self._complete_before,
            "rows": dict(self.rows),
            "shard": [self.shard.index, self.shard.count],
            "complete": complete,
        }
        return self.manifest

    def _write_manifest(self) -> bool:
        """Write manifest.json if all shards are finished; say whether they are.

        Every shard checks after marking itself finished, so the last one to finish
        always sees all the others (and two that finish together write the same file).
        """
        found = read_progress(self.place)
        if len(found) != self.shard.count or not all(p.get("finished") for p in found.values()):
            return False
        shards = [found[Shard(k, self.shard.count, self.shard.unit).tag] for k in range(self.shard.count)]
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
        if self.replacing:  # the recording it was to replace keeps no lock file of ours (gone if replaced)
            _drop_locks(self.target, self._replaced_locks, self._created_locks)
        self._lock, self._replaced_locks, self._created_locks = None, [], []
        self.place.close()

    def __enter__(self) -> "RecordingWriter":
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


def _hold_lock(folder: Folder, rel: str, out: Path, which: str = "", then: str = "stop it and rerun with --resume") -> int | None:
    """Take the lock file `rel` of the recording in `folder` for as long as this process
    writes it; RecordingError if another process holds it. Returns the lock's file descriptor."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system: no lock
        return None
    path = out / rel
    fd = folder.open_fd(rel, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RecordingError(
            f"another gatetrace process is recording{which} {out} (it holds {path}); wait for it to finish, or {then}"
        ) from None
    return fd


def _hold_every_lock(out: Path) -> tuple[list[int], list[str]]:
    """The lock of every shard of the recording in `out` (one for each lock or progress file
    there), for --overwrite: RecordingError, holding none, if any other process holds one.
    Returns the locks' file descriptors and the lock files it had to create (a finished
    shard's lock file is removed), which `_drop_locks` removes again."""
    held: list[int] = []
    created: list[str] = []
    with Folder(out) as folder:
        names = [Path(n) for n in folder.entries(PROGRESS_DIR)]
        tags = sorted({n.stem for n in names if n.suffix in (".lock", ".json") and not n.name.startswith(".")})
        try:
            for tag in tags:
                rel = f"{PROGRESS_DIR}/{tag}.lock"
                if f"{tag}.lock" not in {n.name for n in names}:
                    created.append(rel)
                fd = _hold_lock(folder, rel, out, then="stop it, then rerun with --overwrite")
                if fd is not None:
                    held.append(fd)
        except BaseException:
            _drop_locks(out, held, created)
            raise
    return held, created


def _drop_locks(out: Path, held: list[int], created: list[str]) -> None:
    """Remove the lock files `_hold_every_lock` created in `out` (if it is still there), then let the locks go."""
    if created and out.is_dir():
        with Folder(out) as folder:
            for rel in created:
                folder.remove(rel)
    for fd in held:
        os.close(fd)


_RECORDING = ("gates", "states", "weights.parquet", "manifest.json", PROGRESS_DIR)


def _not_a_weights_table(path: Path) -> list[str]:
    """[path's name] unless it is a Parquet file gatetrace wrote (for `write_weights` with overwrite)."""
    try:
        metadata = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowException):
        metadata = {}
    return [] if METADATA_KEY in metadata else [f"{path.name}, not a gatetrace Parquet file"]


def create_folder(out: str | os.PathLike) -> bool:
    """Create the folder of a recording whose shards are about to start side by side (and
    its progress folder), so that no shard is the one that created it and none removes it
    on failure. Refuses a file, a link, or a folder holding anything but a recording.
    In object storage there is no folder to create: only what the prefix holds is checked.
    Returns whether the folder was created."""
    place = place_of(out)
    if not place.local:
        if any(not (name in _RECORDING or _ours(name)) for name in place.entries()):
            raise OutputExistsError(f"--out {out} exists and is not empty; choose another path or pass --overwrite")
        return False
    out = place.path.resolve()
    refuse_links(out)
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"--out {out} exists and is a file; give a folder path")
    foreign = _not_a_recording(out) if out.is_dir() else []
    if foreign:
        raise OutputExistsError(f"--out {out} exists and is not empty; choose another path or pass --overwrite")
    created = not out.exists()
    try:
        (out / PROGRESS_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RecordingError(f"cannot create {out}: {err.strerror or err}") from None
    return created


def _in_use(folder: Path) -> bool:
    """Whether a process holds a lock of the recording in `folder` (it is being written)."""
    try:
        held, created = _hold_every_lock(folder)
    except RecordingError:
        return True
    except OSError:
        return False
    _drop_locks(folder, held, created)
    return False


def settle_swap(target: Path) -> None:
    """Finish or undo what a killed --overwrite left, before anything else looks at `target`.

    --overwrite records into `.NAME.overwrite-*` beside the recording and, once that is
    complete, renames the old one to `.NAME.old-*`, the new one into place, and removes
    the old one. Killed between the renames, `target` is missing: the swap is finished
    if the new recording is complete (it has its manifest), else undone. Siblings left by
    killed runs (an unfinished new recording no process writes, an old one already
    replaced) are removed. Only folders that hold a `_progress` folder, gatetrace's own,
    are touched."""
    parent, name = target.parent, target.name
    if not parent.is_dir():
        return

    def siblings(tag: str) -> list[Path]:
        found = parent.glob(f".{glob.escape(name)}.{tag}-*")
        return sorted(p for p in found if not p.is_symlink() and p.is_dir() and (p / PROGRESS_DIR).is_dir())

    old, new = siblings("old"), [p for p in siblings("overwrite") if not _in_use(p)]
    if not os.path.lexists(target):
        finished = [p for p in new if (p / "manifest.json").is_file()]
        if finished or old:
            os.replace(finished[0] if finished else old[0], target)
    if os.path.lexists(target):
        for p in old + new:
            if p.exists():
                shutil.rmtree(p, ignore_errors=True)


def _not_a_recording(out: Path) -> list[str]:
    """What in `out` is not part of a gatetrace recording (for --overwrite)."""
    return foreign_entries(out, _RECORDING, (".staging-",))


def _ours(name: str) -> bool:
    """Entries of `OUT` that a run killed before its first progress file may leave."""
    return name == PROGRESS_DIR or name.startswith(".staging-")


def _comparable(description: Mapping[str, Any]) -> dict[str, Any]:
    """A description without what may differ between shards of one recording (the model's path)."""
    d = dict(description)
    if isinstance(d.get("source"), dict):
        d["source"] = {k: v for k, v in d["source"].items() if k != "path"}
    return d
