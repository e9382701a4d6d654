"""A table as a file of its own: the weights table (`gatetrace weights`) and a comparison's
(`gatetrace compare --out`). One Parquet file, written under a temporary name and renamed
into place, so that a failed write leaves the file that was there, or nothing.

Where such a file may go (`check_file_out`, which each command also calls before any work):
a new file, or with `overwrite` a regular file gatetrace wrote (a Parquet file whose footer
holds gatetrace's description, `METADATA_KEY`) of the kind the command writes (a weights
table, a comparison: never a file of a recording's tables); never a folder, a FIFO, a device or a socket,
never through a link out of its folder, never what the command reads nor inside it, and
never inside a recording or series gatetrace wrote (it holds only what its writer wrote).
The weights' columns: `tracer.values.weights.weights_columns`; their layout:
`recorders.write.layout`.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from recorders.errors import OutputExistsError, RecordingError, option
from recorders.write import rowgroups
from recorders.write.files import (
    is_uri,
    local_path,
    publish,
    remove,
    remove_left_partials,
    temp_sibling,
    written_folder,
)
from recorders.write.folder import Folder, kind_of
from recorders.write.layout import METADATA_KEY, UNREADABLE, WEIGHT_LABELS
from recorders.write.rowgroups import failure_reason

__all__ = [
    "write_weights",
    "write_table",
    "check_file_out",
    "gatetrace_table",
    "table_kind",
    "TABLE_KINDS",
]

Inputs = Iterable[str | os.PathLike | None]


def write_weights(
    path: str | os.PathLike,
    columns: Mapping[str, Any],
    description: Mapping[str, Any],
    overwrite: bool = False,
    inputs: Inputs = (),
) -> int:
    """Write the weights table (`tracer.values.weights.weights_columns`) to one Parquet file,
    atomically; `inputs`: the model's files, which it may not be written into."""
    return write_table(
        path, columns, description, overwrite, WEIGHT_LABELS, "weights.parquet", inputs, "weights"
    )


def write_table(
    path: str | os.PathLike,
    columns: Mapping[str, Any],
    description: Mapping[str, Any],
    overwrite: bool = False,
    dictionary_columns: tuple[str, ...] = (),
    example: str = "table.parquet",
    inputs: Inputs = (),
    kind: str | None = None,
) -> int:
    """Write `columns` to one Parquet file, atomically, `description` in its metadata (what
    marks it as gatetrace's), where `check_file_out` allows; `example` is the file name an
    error suggests, `kind` the kind of table (`TABLE_KINDS`) --overwrite may replace.
    Returns the rows."""
    target = check_file_out(path, overwrite, inputs, example, kind)
    remove_left_partials(target)  # what a killed run writing it left
    tmp = temp_sibling(target)
    try:
        rows = rowgroups.write_parquet(
            tmp, [columns], json.dumps(description).encode(), dictionary_columns=dictionary_columns
        )
        publish(tmp, target)
    except (OSError, pa.ArrowException) as err:
        remove(tmp)
        kept = "the file there is left as it was" if target.exists() else "nothing was written"
        raise RecordingError(
            f"cannot write {path}: {failure_reason(err)}; {kept}: fix the cause and rerun"
        ) from err
    except BaseException:
        remove(tmp)
        raise
    return rows


def check_file_out(
    path: str | os.PathLike,
    overwrite: bool,
    inputs: Inputs = (),
    example: str = "table.parquet",
    kind: str | None = None,
) -> Path:
    """The file a single-file output `path` is written to (see the module docstring), or
    OutputExistsError before anything is read or written. `inputs`: what the command reads
    (recordings, a model's files; URIs and None are passed over); `kind`: the kind of table
    written (`TABLE_KINDS`), the only one --overwrite replaces. A link to a file in its own
    folder is written through: the file it names is returned."""
    text = os.fspath(path)
    if not text:
        raise OutputExistsError(f"the output path is empty; give a file path, e.g. {example}")
    if text.endswith(("/", os.sep)):
        raise OutputExistsError(
            f"{option('out', text)} names a folder; give a file path, e.g. {text.rstrip('/' + os.sep)}/{example}"
        )
    named = local_path(path)
    shown = option("out", named)
    target = named
    if named.is_symlink():
        try:
            target = named.resolve()
        except (OSError, RuntimeError):  # a loop of links
            raise OutputExistsError(
                f"{shown} is a symbolic link to {os.readlink(named)}, which leads to no file; give another path"
            ) from None
        if target.parent != named.parent.resolve():
            raise OutputExistsError(
                f"{shown} is a symbolic link to {os.readlink(named)}, out of its folder {named.parent}; gatetrace writes "
                "a file only in the folder --out names, and never through a link out of it: give another path"
            )
    _refuse_inside(named, target.resolve(), inputs, example)
    try:
        mode: int | None = os.lstat(target).st_mode
    except OSError as err:
        if err.errno != errno.ENOENT:
            raise RecordingError(f"cannot write {named}: {err.strerror or err}") from None
        mode = None
    if mode is None:
        if not target.parent.is_dir():
            raise RecordingError(
                f"cannot write {named}: the folder {target.parent} does not exist; create it first"
            )
    elif stat.S_ISDIR(mode):
        raise OutputExistsError(f"{shown} is a folder; give a file path, e.g. {named / example}")
    elif not stat.S_ISREG(mode):
        raise OutputExistsError(
            f"{shown} is {kind_of(mode)}; gatetrace writes only regular files (a new one, or one it "
            f"wrote with {option('overwrite')}): choose another path"
        )
    elif (found := table_kind(target)) is None:  # --overwrite would be refused: not suggested
        raise OutputExistsError(
            f"{shown} holds what gatetrace did not write ({target.name}, not a gatetrace Parquet file); "
            f"{option('overwrite')} replaces only gatetrace's own output: choose another path, or move it away first"
        )
    elif kind is not None and found != kind:  # nor here
        raise OutputExistsError(
            f"{shown} is {TABLE_KINDS[found]}, not {TABLE_KINDS[kind]}; {option('overwrite')} replaces only "
            "a file of the kind this command writes: choose another path"
        )
    elif not overwrite:
        raise OutputExistsError(
            f"{shown} exists; choose another path, or pass {option('overwrite')} to replace it"
        )
    return target


def _refuse_inside(named: Path, resolved: Path, inputs: Inputs, example: str) -> None:
    """OutputExistsError if the file `resolved` (the output `named`, its links followed) is
    one of `inputs` or lies inside one, or inside a recording or series gatetrace wrote."""
    for given in inputs:
        if given is None or is_uri(os.fspath(given)):
            continue
        read = Path(given).resolve()
        if resolved == read or resolved.is_relative_to(read):
            where = "is" if resolved == read else "lies inside"
            raise OutputExistsError(
                f"{option('out', named)} {where} {os.fspath(given)}, which this command reads; write it to another folder"
            )
    for folder in resolved.parents:
        what = written_folder(folder)
        if what:
            raise OutputExistsError(
                f"{option('out', named)} lies inside the {what} {folder}, which holds only what its writer wrote; "
                f"write it beside the {what}, e.g. {folder.parent / example}"
            )


# The kinds of Parquet file gatetrace writes, in words: a table of its own, or part of a recording.
TABLE_KINDS = {
    "weights": "a weights table (gatetrace weights)",
    "comparison": "a comparison (gatetrace compare --out)",
    "other": "a file of a recording's tables (gatetrace record)",
}
WEIGHTS_TABLE = {*WEIGHT_LABELS, "row", "unit", "value"}  # its columns


def gatetrace_table(path: Path) -> bool:
    """Whether `path` is a Parquet file gatetrace wrote (its footer holds gatetrace's
    description), read as a regular file only: never a FIFO, a device, nor through a link."""
    return table_kind(path) is not None


def table_kind(path: Path) -> str | None:
    """The kind (`TABLE_KINDS`) of the Parquet file gatetrace wrote at `path`, told from its
    footer (a comparison's description) and columns (the weights table's), read as
    `gatetrace_table` reads it; None if gatetrace did not write it."""
    try:
        with Folder(path.parent.resolve()) as folder, folder.open_read(path.name) as f:
            schema = pq.read_schema(f)
    except UNREADABLE:
        return None
    metadata = schema.metadata or {}
    if METADATA_KEY not in metadata:
        return None
    try:
        described = json.loads(metadata[METADATA_KEY])
    except ValueError:
        described = None
    if isinstance(described, dict) and "comparison" in described:
        return "comparison"
    return "weights" if set(schema.names) == WEIGHTS_TABLE else "other"
