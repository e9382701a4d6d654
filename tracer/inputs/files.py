"""Input files read batch by batch: `.npy`, `.npz` members, Parquet columns, TFRecords.

Recording a dataset must not load it whole. Every reader here returns an array-like
with `shape`, `dtype`, `ndim`, `len()` and slicing along the first axis (the
sequences); a slice is read from disk when it is asked for:

- `.npy`: rows read from their offset in the file. (Not memory-mapped: pages of a
  mapping stay in the process's resident memory as they are read, so its peak would
  grow with the dataset.)
- `.npz` (`FILE.npz` with one array, or `FILE.npz:NAME`): an uncompressed member is read
  in place the same way; a compressed one (`np.savez_compressed`) is decompressed as a
  stream, forward, one batch at a time.
- Parquet (`FILE.parquet` with one column, or `FILE.parquet:COLUMN`, or a folder of
  Parquet files, a dataset, `FOLDER:COLUMN`): one row per sequence, the column holding its values as nested lists (steps x features) or fixed
  size lists; read a record batch at a time.
- TFRecord (`FILE.tfrecord:FEATURE`, or a pattern of shards): see `tracer.inputs.tfrecords`.

Paths may also be URIs of object storage (`s3://bucket/x.npy`, `gs://...`), read through
pyarrow's file systems with ranged reads.

This module does not import TensorFlow (the TFRecord reader does, when a feed names one).
"""

from __future__ import annotations

import os
import re
import shlex
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import IO, Any

import numpy as np

from recorders.errors import FeedError
from recorders.read.npy import npy_header
from recorders.write import is_uri
from recorders.write.folder import kind_of
from tracer.inputs.rows import Rows, file_kind, open_file

__all__ = [
    "INPUT_SUFFIXES",
    "split_feed",
    "split_feeds",
    "feed_arg",
    "feed_index",
    "crossed_name",
    "input_name",
    "is_input_spec",
    "not_a_file",
    "open_input",
    "open_npy",
    "RawRows",
    "NpzMember",
    "ParquetColumn",
]

INPUT_SUFFIXES = (".npy", ".npz", ".parquet", ".tfrecord", ".tfrecords")


def split_feed(item: str) -> tuple[str, str]:
    """A `--feed NAME=FILE` or `NAME=VALUE` argument as (name, file or value); FeedError for
    anything else. NAME ends at the first `=` (a file's path may hold more); an `=` in an
    input's name is written `\\=` (`feed_arg` writes it so). Opens nothing:
    `tracer.inputs.feeds.parse_feed_args` opens the files."""
    sep = re.search(r"(?<!\\)=", item)
    name, value = (item[: sep.start()], item[sep.end() :]) if sep else (item, "")
    name = name.replace("\\=", "=")
    if not sep or not name or not value:
        raise FeedError(
            f"feed {item!r}: expected NAME=FILE.npy or NAME=VALUE, e.g. --feed inputs=x.npy --feed keep_prob=1.0"
        )
    return name, value


def feed_arg(name: str, value: str = "FILE.npy") -> str:
    """The `--feed` argument that feeds `value` to the input `name`, as `split_feed` reads it
    and quoted for a shell where it must be: `x=FILE.npy`, `'se\\=q=FILE.npy'`."""
    escaped = name.replace("=", "\\=")
    return shlex.quote(f"{escaped}={value}")


def feed_index(name: str) -> tuple[str, int | None]:
    """A feed name as (name, output index): `x` -> ("x", None), `x:0` -> ("x", 0), `q:1` ->
    ("q", 1). FeedError for an index that is not a plain count (`x:-1`, `x:01`, `x:+0`, `x:`):
    TensorFlow reads `x:-1` as `x:0` (or an op's last output), `x:01` as `x:1`."""
    base, colon, index = name.rpartition(":")
    if not colon:
        return name, None
    if not base:
        raise FeedError(f"feed {name!r}: expected NAME or NAME:INDEX, e.g. --feed x=inputs.npy")
    if re.fullmatch(r"0|[1-9][0-9]*", index) is None:
        raise FeedError(
            f"feed {name!r}: {index!r} is not an output's index, written 0, 1, 2...; a placeholder or a model's input has "
            f"one output: feed it as {base} (or {base}:0)"
        )
    return base, int(index)


def _as_tensor(name: str) -> str:
    """A tensor's name with its output index: `x` -> `x:0`."""
    return name if re.fullmatch(r".+:(0|[1-9][0-9]*)", name) else f"{name}:0"


def crossed_name(
    name: str, inputs: Mapping[str, str], is_tensor: Callable[[str], bool] | None = None
) -> str | None:
    """The refusal, in one line, of a feed name that means two things; None for any other.

    The rule (SavedModels and `.tflite` files, whose inputs have a signature's name and a
    tensor's): a signature's input name comes first, as TensorFlow's signature runner takes it;
    a tensor's name names its input only where that is not ambiguous. `NAME` alone is always
    the signature input NAME where there is one; `NAME:K` is ambiguous where NAME is a signature input (`inputs`: each signature
    input's name to its tensor's, `t` or `t:0`) whose tensor is not `NAME:K`, and `NAME:K` is
    another tensor the model has (`is_tensor`, given `t:K`; None: the inputs' tensors alone): a
    signature input `a` whose tensor is `b:0`, and `a:0` another input's tensor (crossed names)."""
    if name in inputs:
        return None
    base, index = feed_index(name)
    if index is None or base not in inputs:
        return None
    tensor = f"{base}:{index}"
    if is_tensor is None:
        is_tensor = {_as_tensor(t) for t in inputs.values()}.__contains__
    if _as_tensor(inputs[base]) == tensor or not is_tensor(tensor):
        return None
    other = [key for key, t in inputs.items() if _as_tensor(t) == tensor]
    second = (
        f"--feed {feed_arg(other[0])} for the second"
        if other
        else "the second is no input of the signature and has no other name"
    )
    return (
        f"feed {name!r} is ambiguous: signature input {base} (tensor {_as_tensor(inputs[base])}) or tensor "
        f"{tensor}{f' (signature input {other[0]})' if other else ''}; a signature's input names come first: "
        f"--feed {feed_arg(base)} for the first, {second}"
    )


def input_name(name: str, names: AbstractSet[str], aliases: Mapping[str, str]) -> str:
    """The input of a Keras model or a TensorFlow Lite file a feed name names: its name, an
    alias of it (`aliases`: the tensor's name beside the signature's), either with `:0`.
    A signature's input name comes first (`crossed_name`: FeedError for
    `NAME:0` that names one input's signature name and another's tensor). An input is one
    tensor: FeedError for `NAME:K` of an input, K not 0. A name that names none comes back as
    it is, for the caller to refuse, listing the inputs."""
    if name in names:
        return name
    tensors = {signature: tensor for tensor, signature in aliases.items()}
    inputs = {n: tensors.get(n, n) for n in names}
    crossed = crossed_name(name, inputs)
    if crossed is not None:
        raise FeedError(crossed)
    if name in aliases:
        return aliases[name]
    base, index = feed_index(name)
    found = base if base in names else aliases.get(base, base)
    if found in names and index:
        raise FeedError(
            f"feed {name!r}: input {found} is one tensor, index 0 only: feed it as {base} (or {base}:0)"
        )
    return found if found in names else name


def split_feeds(items: Iterable[str]) -> list[tuple[str, str]]:
    """`--feed` arguments as (name, file or value) pairs (`split_feed`); FeedError for an input
    given twice, also as `NAME` and `NAME:0` (one input): the later would silently replace the
    earlier."""
    pairs: list[tuple[str, str]] = []
    seen: dict[tuple[str, int], tuple[str, str]] = {}
    for item in items:
        name, value = split_feed(item)
        base, index = feed_index(name)
        first = seen.get((base, index or 0))
        if first is not None:
            raise FeedError(
                f"feed {name}={value} feeds the same input as {first[0]}={first[1]}: feed each input once"
            )
        seen[base, index or 0] = name, value
        pairs.append((name, value))
    return pairs


def is_input_spec(value: str) -> bool:
    """`x.npy`, `d.npz`, `d.npz:name`, `d.parquet:column`, `d.tfrecord:feature`, `folder:column`
    (a Parquet dataset), `s3://bucket/x.npy`: an input file rather than a value."""
    if (
        value.endswith(INPUT_SUFFIXES)
        or re.search(r"\.(npz|parquet|tfrecords?):[^:/\\]+$", value) is not None
    ):
        return True
    if re.match(r"^[a-z][a-z0-9+.-]*://", value):  # a URI: object storage, or file://
        return True
    return Path(value).is_dir() or (":" in value and Path(value.rpartition(":")[0]).is_dir())


def open_input(spec: str, what: str) -> Any:
    """`x.npy`, `data.npz`, `data.npz:inputs`, `data.parquet`, `data.parquet:tokens`, `folder:tokens`,
    `data.tfrecord:tokens` -> an array-like."""
    path, member = spec, ""
    head, _, tail = spec.rpartition(":")
    # `FILE:MEMBER` (a URI's scheme is followed by a slash)
    if head and "/" not in tail and not Path(spec).is_file():
        path, member = head, tail
    suffix = Path(path).suffix
    store, where = _location(path, what)
    kind, _ = file_kind(store, where, what)
    if suffix in (".tfrecord", ".tfrecords"):
        return _tfrecord(store, where, path, member, what)
    if kind == "dir":  # a Parquet dataset: its files in name order
        suffix = ".parquet"
    elif suffix not in INPUT_SUFFIXES:
        raise FeedError(
            f"{what}: {spec!r} is not a .npy, .npz, .parquet or .tfrecord file, nor a folder of Parquet files"
        )
    elif kind != "file":
        why = f"no such file {path}" if store is not None else not_a_file(path, where)
        raise FeedError(f"{what}: {why}")
    try:
        if suffix == ".npy":
            if member:
                raise FeedError(f"{what}: a .npy file holds one array; drop ':{member}'")
            rows = open_npy(where, store)
            if isinstance(rows, RawRows):
                rows.what = what
            return rows
        member_rows: Rows = (
            NpzMember(where, member or None, store)
            if suffix == ".npz"
            else ParquetColumn(where, member or None, store)
        )
        member_rows.what = what  # named in errors found while reading
        return member_rows
    except FeedError:
        raise
    except Exception as err:
        raise FeedError(
            f"{what}: cannot read {path} as a {suffix} file: {err or type(err).__name__}"
        ) from err


def not_a_file(path: str, where: str | None = None) -> str:
    """Why the local feed `path` (at `where`: the path a `file://` URI names) is no file
    gatetrace reads: "no such file PATH", or what it is instead (a FIFO, a socket, a device),
    a link the user named followed."""
    try:
        mode = os.stat(where or path).st_mode
    except OSError:
        return f"no such file {path}"
    return (
        f"{path} is {kind_of(mode)}, not a regular file: gatetrace reads its inputs from regular files, "
        "going back to their rows as it records; write the data to a file and give that"
    )


def _location(path: str, what: str = "input"):
    """(pyarrow FileSystem, path within it) for a URI such as `s3://bucket/key` or
    `gs://bucket/key` (credentials and endpoint as pyarrow reads them: AWS_ENDPOINT_URL and
    the usual variables); (None, the path) for a local path or a `file://` URI."""
    if path.startswith("file://"):
        return None, path[len("file://") :]
    if not is_uri(path):
        return None, path
    from pyarrow import fs

    try:
        return fs.FileSystem.from_uri(path)
    except Exception as err:  # an unknown scheme, a malformed URI, missing credentials
        raise FeedError(f"{what}: cannot open {path}: {err}") from None


def _tfrecord(store, where: str, path: str, feature: str, what: str) -> Any:
    """TFRecord files (`tracer.inputs.tfrecords`, which imports TensorFlow for its protos)."""
    if not feature:
        raise FeedError(f"{what}: name the feature to read from {path}: {path}:FEATURE")
    from tracer.inputs.tfrecords import TFRecordFeature

    try:
        rows = TFRecordFeature(where, feature, store, name=path)
    except FeedError as err:
        raise FeedError(f"{what}: {err}") from None
    except OSError as err:
        raise FeedError(f"{what}: cannot read {path}: {err.strerror or err}") from None
    rows.what = what
    return rows


def _files_under(store, path: str) -> list[str]:
    """Every file below the folder `path`, local or in object storage."""
    if store is None:
        return [str(p) for p in Path(path).rglob("*") if p.is_file()]
    from pyarrow import fs

    return [
        i.path
        for i in store.get_file_info(fs.FileSelector(path, recursive=True))
        if i.type == fs.FileType.File
    ]


def _pick(path: str, asked: str | None, names: list[str], kind: str) -> str:
    """The `kind` (array of an .npz, column of a Parquet file) named `asked`, or the only one."""
    if asked is None and len(names) == 1:
        return names[0]
    if asked is None:
        raise FeedError(
            f"{path} holds {len(names)} {kind}s ({', '.join(names)}); name one: {path}:{names[0] if names else 'NAME'}"
        )
    if asked not in names:
        raise FeedError(f"{path} has no {kind} {asked!r}; it holds {', '.join(names) or 'none'}")
    return asked


def _nbytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """The bytes an array of `shape` and `dtype` takes (a Python int: it cannot overflow)."""
    n = dtype.itemsize
    for d in shape:
        n *= d
    return n


def _check_size(where: str, shape: tuple[int, ...], dtype: np.dtype, holds: int) -> None:
    """Refuse, before anything is recorded, a file holding fewer bytes than its header declares."""
    if holds < _nbytes(shape, dtype):
        raise FeedError(
            f"{where} is shorter than its header says: {list(shape)} of {dtype} needs {_nbytes(shape, dtype):,} bytes, "
            f"it holds {holds:,}; the file is truncated"
        )


def _read_header(f, where: str) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype from an .npy header at `f`'s position; refuses what cannot be read by rows."""
    try:
        shape, fortran, dtype = npy_header(f)
    except ValueError as err:
        raise FeedError(f"{where}: {err}; the file is damaged") from None
    if _nbytes(shape, dtype) > 1 << 60:
        raise FeedError(
            f"{where}: its header declares {list(shape)} of {dtype}, {_nbytes(shape, dtype):,} bytes; no file holds that"
        )
    if fortran and len(shape) > 1:
        raise FeedError(
            f"{where} is stored in Fortran order; save it with np.ascontiguousarray to read it by rows"
        )
    if dtype.hasobject:
        raise FeedError(f"{where} holds Python objects; give a numeric array")
    return tuple(shape), dtype


class RawRows(Rows):
    """Rows of a C-ordered array stored raw at `offset` in a file, read with pread (or
    ranged reads from object storage: `store` is a pyarrow FileSystem)."""

    def __init__(self, path: str, offset: int, shape: tuple[int, ...], dtype: np.dtype, store=None):
        self.path, self._offset, self.shape, self.dtype = path, offset, shape, dtype
        self._row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        self._remote = None if store is None else store.open_input_file(path)
        self._fd = os.open(path, os.O_RDONLY) if store is None else None

    def _read(self, start: int, stop: int) -> np.ndarray:
        out = np.empty((stop - start, *self.shape[1:]), self.dtype)
        if out.size == 0:
            return out
        if self._remote is not None:
            data = self._remote.read_at(out.nbytes, self._offset + start * self._row_bytes)
            if len(data) < out.nbytes:
                raise FeedError(
                    f"{self.path} is shorter than its header says ({self.shape}); the file is truncated"
                )
            out.reshape(-1).view(np.uint8)[:] = np.frombuffer(data, np.uint8)
            return out
        fd = self._fd
        assert fd is not None  # a local file's, opened with the reader
        view, at = out.reshape(-1).view(np.uint8).data, 0
        while at < len(view):
            n = os.preadv(fd, [view[at:]], self._offset + start * self._row_bytes + at)
            if n == 0:
                raise FeedError(
                    f"{self.path} is shorter than its header says ({self.shape}); the file is truncated"
                )
            at += n
        return out

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)


def open_npy(path: str, store=None) -> RawRows | np.ndarray:
    """An `.npy` file, read by rows (a 0-d one, a scalar, is read whole)."""
    with open_file(store, path) as f:
        shape, dtype = _read_header(f, path)
        _check_size(path, shape, dtype, file_kind(store, path)[1] - f.tell())
        if shape == ():
            return np.frombuffer(f.read(dtype.itemsize), dtype)[0]
        return RawRows(path, f.tell(), shape, dtype, store)


class NpzMember(Rows):
    """One array of an `.npz` file, read by rows."""

    def __init__(self, path: str, name: str | None, store=None):
        self.path, self._store = path, store
        self._zip = zipfile.ZipFile(path if store is None else open_file(store, path))
        name = _pick(
            path,
            name,
            [n[: -len(".npy")] for n in self._zip.namelist() if n.endswith(".npy")],
            "array",
        )
        self._info = self._zip.getinfo(name + ".npy")
        with self._zip.open(self._info) as f:
            self.shape, self.dtype = _read_header(f, f"{path}:{name}")
            self._header = f.tell()
        _check_size(f"{path}:{name}", self.shape, self.dtype, self._info.file_size - self._header)
        self._row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize
        self._stored: RawRows | None = None
        if self._info.compress_type == zipfile.ZIP_STORED:
            self._stored = RawRows(path, self._data_offset(), self.shape, self.dtype, store)
        self._stream: IO[bytes] | None = None
        self._at = 0

    def _data_offset(self) -> int:
        """Where the member's array data starts in the .npz file."""
        with open_file(self._store, self.path) as f:
            f.seek(self._info.header_offset)
            # the zip local file header: name and extra field lengths at 26 and 28
            local = f.read(30)
            name_len, extra_len = (
                int.from_bytes(local[26:28], "little"),
                int.from_bytes(local[28:30], "little"),
            )
        return self._info.header_offset + 30 + name_len + extra_len + self._header

    def _read(self, start: int, stop: int) -> np.ndarray:
        if self._stored is not None:
            return self._stored._read(start, stop)
        stream = self._stream
        if stream is None or start < self._at:  # batches go forward; going back re-opens
            stream = self._stream = self._zip.open(self._info)
            stream.read(self._header)
            self._at = 0
        if start > self._at:
            _skip(stream, (start - self._at) * self._row_bytes)
        data = stream.read((stop - start) * self._row_bytes)
        self._at = stop
        return np.frombuffer(data, dtype=self.dtype).reshape((stop - start, *self.shape[1:]))


def _skip(stream: IO[bytes], n: int) -> None:
    """Read past the next `n` bytes of a compressed stream."""
    while n > 0:
        n -= len(stream.read(min(n, 1 << 24)))


class ParquetColumn(Rows):
    """One column of a Parquet file, or of a folder of them (a dataset: its `.parquet` files
    in path order, leaving out those whose names start with `_` or `.`), one row per
    sequence, read by record batches."""

    def __init__(self, path: str, column: str | None, store=None):
        import pyarrow.parquet as pq

        self.path = path
        names = (
            [path]
            if file_kind(store, path)[0] != "dir"
            else sorted(
                n
                for n in _files_under(store, path)
                if n.endswith(".parquet")
                and not any(
                    part.startswith(("_", ".")) for part in n[len(path) :].strip("/").split("/")
                )
            )
        )
        if not names:
            raise FeedError(f"{path} holds no .parquet files")
        self._files = [pq.ParquetFile(n if store is None else open_file(store, n)) for n in names]
        self.column = column = _pick(path, column, self._files[0].schema_arrow.names, "column")
        for name, f in zip(names, self._files, strict=True):
            if column not in f.schema_arrow.names:
                raise FeedError(
                    f"{name} has no column {column!r}; every file of {path} must have it"
                )
        # Row groups of all files in order, and the first row of each.
        self._groups = [(f, g) for f in self._files for g in range(f.num_row_groups)]
        self._starts = np.cumsum([0] + [f.metadata.row_group(g).num_rows for f, g in self._groups])
        rows = int(self._starts[-1])
        if rows == 0:
            raise FeedError(
                f"{path}:{column} holds no rows; an empty Parquet file cannot tell the shape of a sequence"
            )
        first_file = next(f for f in self._files if f.metadata.num_rows)
        first = self._to_numpy(
            next(first_file.iter_batches(batch_size=1, columns=[column])).column(0)
        )
        self.shape, self.dtype = (rows, *first.shape[1:]), first.dtype
        self._batches: Iterator[Any] = iter(())
        self._buffer: np.ndarray | None = None  # rows [_at, _at + len)
        self._at = 0
        self._check_row_groups(int(np.prod(first.shape[1:], dtype=np.int64)))

    def _check_row_groups(self, per_row: int) -> None:
        """Refuse, before a row is read, a row group whose values do not come to `per_row` a
        row (the first row's shape): from each row group's metadata, the count of values of the
        column's one leaf. A sequence of another shape in a later row group is found here,
        before anything is recorded; one inside the first rows' group, or inside a group whose
        count still adds up, as it is read."""
        for k, (f, g) in enumerate(self._groups):
            group, start = f.metadata.row_group(g), int(self._starts[k])
            leaves = [
                c
                for c in range(group.num_columns)
                if group.column(c).path_in_schema.split(".")[0] == self.column
            ]
            # the first rows' own group: its rows are compared as they are read
            if len(leaves) != 1 or start == 0:
                continue
            values = group.column(leaves[0]).num_values
            if values != group.num_rows * per_row:
                raise FeedError(
                    f"{self.path}:{self.column}: the {group.num_rows:,} rows from row {start} on hold {values:,} values, not "
                    f"{group.num_rows * per_row:,} ({per_row} a row, as the first rows {list(self.shape[1:])}); every sequence "
                    "must have one shape: pad them to one; nothing was recorded"
                )

    def _batches_from(self, group: int):
        for f, g in self._groups[group:]:
            yield from f.iter_batches(batch_size=4096, columns=[self.column], row_groups=[g])

    def _to_numpy(self, array) -> np.ndarray:
        """Nested (fixed size) lists -> an [rows, ...] array; every row must have the same shape."""
        import pyarrow as pa

        rows, shape = len(array), []
        while (
            pa.types.is_list(array.type)
            or pa.types.is_large_list(array.type)
            or pa.types.is_fixed_size_list(array.type)
        ):
            if pa.types.is_fixed_size_list(array.type):
                width = array.type.list_size
            else:
                lengths = np.diff(np.asarray(array.offsets)[: len(array) + 1])
                width = int(lengths[0]) if len(lengths) else 0
                if (lengths != width).any():
                    raise FeedError(
                        f"{self.path}:{self.column}: rows differ in length ({lengths.min()} to {lengths.max()}); pad them to one shape"
                    )
            shape.append(width)
            array = array.flatten()
        values = array.to_numpy(zero_copy_only=False)
        if values.dtype == object:
            raise FeedError(f"{self.path}:{self.column} holds {array.type} values; give numbers")
        return values.reshape((rows, *shape))

    def _read(self, start: int, stop: int) -> np.ndarray:
        if self._buffer is None or not (self._at <= start <= self._at + len(self._buffer)):
            group = min(
                int(np.searchsorted(self._starts, start, side="right") - 1), len(self._groups) - 1
            )
            self._batches = self._batches_from(group)
            self._buffer, self._at = self._to_numpy_empty(), int(self._starts[group])
        parts = []
        while start < stop:
            end = self._at + len(self._buffer)
            if start >= end:
                self._at, self._buffer = end, self._to_numpy(next(self._batches).column(0))
                if self._buffer.shape[1:] != self.shape[1:]:
                    raise FeedError(
                        f"{self.path}:{self.column}: the rows from row {self._at:,} on are {list(self._buffer.shape[1:])}, the first "
                        f"ones {list(self.shape[1:])}; every sequence must have one shape: pad them to one"
                    )
                continue
            take = self._buffer[start - self._at : min(stop, end) - self._at]
            parts.append(take)
            start += len(take)
        if not parts:
            return self._to_numpy_empty()
        return np.concatenate(parts) if len(parts) != 1 else parts[0]

    def _to_numpy_empty(self) -> np.ndarray:
        return np.empty((0, *self.shape[1:]), self.dtype)
