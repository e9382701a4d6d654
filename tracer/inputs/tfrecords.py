"""TFRecord inputs: one sequence per record, read by rows like the other input files.

`--feed x=data.tfrecord:FEATURE` (or a pattern naming shards, `x='data-*.tfrecord:FEATURE'`,
read in name order as one run of rows) takes the feature FEATURE of each record:

- a `tf.train.Example` with a float or int64 list FEATURE: a flat row, reshaped to the
  placeholder's shape when it is static (`[None, 50, 64]` takes rows of 3,200 values);
- a `tf.train.SequenceExample` with a feature list FEATURE: one feature per step, a row
  of [steps, values].

Files may be local or in object storage (`s3://bucket/train-*.tfrecord:x`, through
pyarrow's file systems, see `tracer.inputs.files`). A file is read once per process, in blocks
of 8 MB, to index where each record starts (from the length fields of the record
headers); a slice of rows then reads the bytes of just those records, in one read per
file (one ranged request in object storage). A parallel job's driver hands the record
count of every file to its tasks (`record_counts`, `know_counts`): a task then indexes
only the files its rows are in. GZIP-compressed files are refused (they cannot be
read from the middle). Every record must give the same shape.

Each record is checked as TensorFlow's reader checks it: the masked CRC32C of its length
field when the file is indexed, and of its data when it is read (`google_crc32c`); a
record that fails either is refused in one line naming the file and the record.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import struct
from functools import cached_property

import numpy as np

from recorders.errors import FeedError
from tracer._tf import example_pb2
from tracer.inputs.rows import Rows, file_kind, open_file

__all__ = ["TFRECORD_SUFFIXES", "TFRecordFeature", "record_counts", "know_counts"]

TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords")
_HEADER = 12  # uint64 length, uint32 masked CRC of the length; then the data and its uint32 CRC
_FOOTER = 4


def _masked_crc(data: bytes) -> int:
    """TFRecord's checksum: CRC32C, rotated right by 15 bits, plus a constant."""
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _check_crc(data: bytes, stored: bytes, path: str, record: int, what: str) -> None:
    if len(stored) != 4 or _masked_crc(data) != struct.unpack("<I", stored)[0]:
        raise FeedError(
            f"{path}: record {record} fails the CRC32C check of its {what}; the file is damaged (TensorFlow refuses it "
            "too): write it again"
        )


class TFRecordFeature(Rows):
    """Feature `feature` of every record of the TFRecord files matching `pattern`, local
    or (with `store`, a pyarrow FileSystem) in object storage; `name` is how errors call it."""

    def __init__(self, pattern: str, feature: str, store=None, name: str | None = None):
        self.path, self.feature, self._store = name or pattern, feature, store
        self._files = _matching(store, pattern)
        if not self._files:
            raise FeedError(f"no file matches {self.path}")
        # asked once: not per batch
        self._versions = [_version(store, path) for path in self._files]
        counts = [
            _count(store, path, self._shown(k), self._versions[k])
            for k, path in enumerate(self._files)
        ]
        # the first row of each file
        self._first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        if not self._first[-1]:
            raise FeedError(
                f"{self.path} holds no records; an empty input cannot tell the shape of a sequence"
            )
        file = int(np.flatnonzero(counts)[0])  # the first record tells the shape: read it alone
        first = self._parse(0, _first_record(_Blocks(store, self._files[file]), self._shown(file)))
        self._row_shape = first.shape
        self.shape, self.dtype = (int(self._first[-1]), *first.shape), first.dtype

    def _shown(self, file: int) -> str:
        """File number `file` as the user named it (with its URI scheme)."""
        path = self._files[file]
        return path if self._store is None else f"{self.path.split('://', 1)[0]}://{path}"

    def fit(self, shape: tuple[int | None, ...]) -> None:
        """Reshape flat rows to a placeholder's static per-sequence `shape` (steps, features...)."""
        known = [d for d in shape if d is not None]
        if len(self._row_shape) != 1 or len(known) != len(shape) or len(shape) < 2:
            return
        if int(np.prod(known)) == self._row_shape[0]:
            self.shape = (self.shape[0], *known)

    def _span(self, start: int, stop: int) -> list[bytes]:
        """The data of records [start, stop), reading each file's share in one read (and
        indexing only the files they are in)."""
        out: list[bytes] = []
        k = start
        while k < stop:
            file = int(np.searchsorted(self._first, k, side="right")) - 1
            last = min(stop, int(self._first[file + 1]))  # rows [k, last) are in this file
            rows = slice(k - self._first[file], last - self._first[file])
            index = _index(self._store, self._files[file], self._shown(file), self._versions[file])[
                rows
            ]
            first_byte, end = int(index[0, 0]), int(index[-1, 0] + index[-1, 1]) + _FOOTER
            data = _Blocks(self._store, self._files[file]).read(first_byte, end - first_byte)
            if len(data) != end - first_byte:
                raise FeedError(
                    f"{self._shown(file)}: record {last - 1} is cut short; the file is truncated"
                )
            for n, (a, size) in enumerate(index):
                record = data[a - first_byte : a - first_byte + size]
                _check_crc(
                    record,
                    data[a - first_byte + size : a - first_byte + size + _FOOTER],
                    self._shown(file),
                    rows.start + n,
                    "data",
                )
                out.append(record)
            k = last
        return out

    def _parse(self, k: int, data: bytes) -> np.ndarray:
        example = example_pb2.Example()
        example.ParseFromString(data)
        if self.feature in example.features.feature:
            return _values(example.features.feature[self.feature], self.feature, k)
        sequence = example_pb2.SequenceExample()
        sequence.ParseFromString(data)
        if self.feature in sequence.feature_lists.feature_list:
            steps = [
                _values(f, self.feature, k)
                for f in sequence.feature_lists.feature_list[self.feature].feature
            ]
            if len({s.shape for s in steps}) > 1:
                raise FeedError(
                    f"{self.path}: record {k}'s feature list {self.feature} has steps of different lengths"
                )
            return np.stack(steps) if steps else np.empty((0, 0), np.float32)
        names = sorted(example.features.feature) or sorted(sequence.feature_lists.feature_list)
        raise FeedError(
            f"{self.path}: record {k} has no feature {self.feature!r}; it has {', '.join(names) or 'none'}"
        )

    def _read(self, start: int, stop: int) -> np.ndarray:
        rows = [
            self._parse(k, data)
            for k, data in zip(range(start, stop), self._span(start, stop), strict=True)
        ]
        for k, row in zip(range(start, stop), rows, strict=True):
            if row.shape != self._row_shape:
                raise FeedError(
                    f"{self.path}: record {k} gives {self.feature} of shape {list(row.shape)}, the first {list(self._row_shape)}"
                )
        out = (
            np.stack(rows).astype(self.dtype, copy=False)
            if rows
            else np.empty((0, *self._row_shape), self.dtype)
        )
        return out.reshape((stop - start, *self.shape[1:]))


def _values(feature, name: str, k: int) -> np.ndarray:
    kind = feature.WhichOneof("kind")
    if kind == "float_list":
        return np.asarray(feature.float_list.value, np.float32)
    if kind == "int64_list":
        return np.asarray(feature.int64_list.value, np.int64)
    raise FeedError(
        f"record {k}: feature {name} holds {kind or 'nothing'}; give float or int64 values"
    )


def _matching(store, pattern: str) -> list[str]:
    """The files a pattern (`*`, `?`, `[...]` in its last part) names, in name order; a plain path as it is."""
    if not glob.has_magic(pattern):
        return [pattern]
    if store is None:
        return sorted(glob.glob(pattern))
    from pyarrow import fs

    folder, _, name = pattern.rpartition("/")
    try:
        listed = store.get_file_info(fs.FileSelector(folder, allow_not_found=True))
    except OSError:
        return []
    return sorted(
        i.path
        for i in listed
        if i.type == fs.FileType.File and fnmatch.fnmatchcase(i.base_name, name)
    )


class _Blocks:
    """Reads of a file, local or in object storage, through a cache of one 8 MB block (a
    request per block, not per record header)."""

    BLOCK = 8 << 20

    def __init__(self, store, path: str):
        self._store, self._path = store, path
        self._block: tuple[int, bytes] = (0, b"")

    @cached_property
    def size(self) -> int:
        return file_kind(self._store, self._path)[1]

    def read(self, offset: int, n: int) -> bytes:
        """`n` bytes at `offset`, read at once (one ranged request), not cached."""
        with open_file(self._store, self._path) as f:
            f.seek(offset)
            return f.read(n)

    def read_at(self, offset: int, n: int) -> bytes:
        """`n` bytes at `offset`, from the cached block, reading the next one when it does not hold them."""
        at, block = self._block
        if not (at <= offset and offset + n <= at + len(block)):
            if n > self.BLOCK:
                return self.read(offset, n)
            self._block = at, block = offset, self.read(offset, self.BLOCK)
        return block[offset - at : offset - at + n]


# Kept for the rest of the process, by file version (path, size, modification time): the
# index of each file read, and the record counts a parallel job's driver hands its tasks.
_INDEXES: dict[tuple, np.ndarray] = {}
_COUNTS: dict[tuple, int] = {}


def _version(store, path: str) -> tuple | None:
    """What tells this version of a file from another: path, size and modification time
    (None where the store gives no time: nothing is kept for it)."""
    if store is None:
        stat = os.stat(path)
        return ("local", os.path.abspath(path), stat.st_size, stat.st_mtime_ns)
    info = store.get_file_info(path)
    return (store.type_name, path, info.size, info.mtime_ns) if info.mtime_ns is not None else None


def _index(store, path: str, shown: str, version: tuple | None) -> np.ndarray:
    """[records, 2] (offset of the data, its length) of a TFRecord file, read from its
    record headers once per process and file `version` (`_version`): the tasks of a
    parallel job that run in one worker would each read every file's headers again."""
    if version is not None and version in _INDEXES:
        return _INDEXES[version]
    found = np.asarray(list(_records(_Blocks(store, path), shown)), dtype=np.int64).reshape(-1, 2)
    if version is not None:
        _INDEXES[version] = found
        _COUNTS[version] = len(found)
    return found


def _count(store, path: str, shown: str, version: tuple | None) -> int:
    """The records of a file: told by the driver (`know_counts`), or from its index."""
    if version is not None and version in _COUNTS:
        return _COUNTS[version]
    return len(_index(store, path, shown, version))


def record_counts() -> dict[tuple, int]:
    """The record count of every TFRecord file version this process has indexed."""
    return dict(_COUNTS)


def know_counts(counts: dict[tuple, int]) -> None:
    """Take the record counts a driver found (`record_counts`): a task then indexes only the
    files its rows are in. A count is used only for the very version of the file it was
    found for."""
    _COUNTS.update(counts)


def _first_record(f: _Blocks, path: str) -> bytes:
    """The data of a file's first record, from its header, without indexing the file."""
    header = f.read(0, _HEADER)
    if len(header) == _HEADER:
        _check_crc(header[:8], header[8:], path, 0, "length")
    (length,) = struct.unpack("<Q", header[:8].ljust(8, b"\0"))
    data = f.read(_HEADER, length + _FOOTER)
    if len(data) != length + _FOOTER:
        raise FeedError(f"{path}: record 0 is cut short; the file is truncated")
    _check_crc(data[:length], data[length:], path, 0, "data")
    return data[:length]


def _records(f: _Blocks, path: str):
    """(offset of the data, its length) of each record of a TFRecord file, from its headers."""
    if f.read_at(0, 2) == b"\x1f\x8b":
        raise FeedError(f"{path} is GZIP-compressed; decompress it (gzip -dc) to read it by rows")
    at, record = 0, 0
    while at < f.size:
        header = f.read_at(at, _HEADER)
        if len(header) < _HEADER:
            raise FeedError(
                f"{path}: a record header is cut short at byte {at}; the file is truncated"
            )
        _check_crc(header[:8], header[8:], path, record, "length")
        record += 1
        (length,) = struct.unpack("<Q", header[:8])
        end = at + _HEADER + length + 4
        if end > f.size:
            raise FeedError(
                f"{path}: the record at byte {at} claims {length:,} bytes, past the end of the file; it is truncated"
            )
        yield at + _HEADER, length
        at = end
