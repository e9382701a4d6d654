"""TFRecord inputs: one sequence per record, read by rows like the other input files.

`--feed x=data.tfrecord:FEATURE` (or a pattern naming shards, `x='data-*.tfrecord:FEATURE'`,
read in name order as one run of rows) takes the feature FEATURE of each record:

- a `tf.train.Example` with a float or int64 list FEATURE: a flat row, reshaped to the
  placeholder's shape when it is static (`[None, 50, 64]` takes rows of 3,200 values);
- a `tf.train.SequenceExample` with a feature list FEATURE: one feature per step, a row
  of [steps, values].

Opening a file reads its record headers only (length fields) to index where each record
starts; a slice of rows reads and parses just those records. GZIP-compressed files are
refused (they cannot be read from the middle). Every record must give the same shape.
"""

from __future__ import annotations

import glob
import os
import struct

import numpy as np

from recorders.errors import FeedError
from tracer._tf import tf  # noqa: F401  (sets up TensorFlow before its protos are imported)
from tracer.inputs import _Rows

from tensorflow.core.example import example_pb2  # noqa: E402

__all__ = ["TFRECORD_SUFFIXES", "TFRecordFeature"]

TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords")
_HEADER = 12  # uint64 length, uint32 masked CRC of the length; then the data and its uint32 CRC


class TFRecordFeature(_Rows):
    """Feature `feature` of every record of the TFRecord files matching `pattern`."""

    def __init__(self, pattern: str, feature: str):
        self.path, self.feature = pattern, feature
        self._files = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not self._files:
            raise FeedError(f"no file matches {pattern}")
        where, starts, lengths = [], [], []
        for k, path in enumerate(self._files):
            for offset, length in _records(path):
                where.append(k)
                starts.append(offset)
                lengths.append(length)
        if not starts:
            raise FeedError(f"{pattern} holds no records; an empty input cannot tell the shape of a sequence")
        self._where, self._starts, self._lengths = np.asarray(where), np.asarray(starts), np.asarray(lengths)
        first = self._parse(0, self._record(0))
        self._row_shape = first.shape
        self.shape, self.dtype = (len(starts), *first.shape), first.dtype

    def fit(self, shape: tuple[int | None, ...]) -> None:
        """Reshape flat rows to a placeholder's static per-sequence `shape` (steps, features...)."""
        if len(self._row_shape) != 1 or not shape or None in shape or len(shape) == 1:
            return
        if int(np.prod(shape)) == self._row_shape[0]:
            self.shape = (self.shape[0], *shape)

    def _record(self, k: int) -> bytes:
        with open(self._files[self._where[k]], "rb") as f:
            f.seek(int(self._starts[k]))
            data = f.read(int(self._lengths[k]))
        if len(data) != self._lengths[k]:
            raise FeedError(f"{self._files[self._where[k]]}: record {k} is cut short; the file is truncated")
        return data

    def _parse(self, k: int, data: bytes) -> np.ndarray:
        example = example_pb2.Example()
        example.ParseFromString(data)
        if self.feature in example.features.feature:
            return _values(example.features.feature[self.feature], self.feature, k)
        sequence = example_pb2.SequenceExample()
        sequence.ParseFromString(data)
        if self.feature in sequence.feature_lists.feature_list:
            steps = [_values(f, self.feature, k) for f in sequence.feature_lists.feature_list[self.feature].feature]
            if len({s.shape for s in steps}) > 1:
                raise FeedError(f"{self.path}: record {k}'s feature list {self.feature} has steps of different lengths")
            return np.stack(steps) if steps else np.empty((0, 0), np.float32)
        names = sorted(example.features.feature) or sorted(sequence.feature_lists.feature_list)
        raise FeedError(f"{self.path}: record {k} has no feature {self.feature!r}; it has {', '.join(names) or 'none'}")

    def _read(self, start: int, stop: int) -> np.ndarray:
        rows = [self._parse(k, self._record(k)) for k in range(start, stop)]
        for k, row in zip(range(start, stop), rows):
            if row.shape != self._row_shape:
                raise FeedError(f"{self.path}: record {k} gives {self.feature} of shape {list(row.shape)}, the first {list(self._row_shape)}")
        out = np.stack(rows).astype(self.dtype, copy=False) if rows else np.empty((0, *self._row_shape), self.dtype)
        return out.reshape((stop - start, *self.shape[1:]))


def _values(feature, name: str, k: int) -> np.ndarray:
    kind = feature.WhichOneof("kind")
    if kind == "float_list":
        return np.asarray(feature.float_list.value, np.float32)
    if kind == "int64_list":
        return np.asarray(feature.int64_list.value, np.int64)
    raise FeedError(f"record {k}: feature {name} holds {kind or 'nothing'}; give float or int64 values")


def _records(path: str):
    """(offset of the data, its length) of each record of a TFRecord file, from its headers."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if f.read(2) == b"\x1f\x8b":
            raise FeedError(f"{path} is GZIP-compressed; decompress it (gzip -dc) to read it by rows")
        at = 0
        while at < size:
            f.seek(at)
            header = f.read(_HEADER)
            if len(header) < _HEADER:
                raise FeedError(f"{path}: a record header is cut short at byte {at}; the file is truncated")
            (length,) = struct.unpack("<Q", header[:8])
            end = at + _HEADER + length + 4
            if end > size:
                raise FeedError(f"{path}: the record at byte {at} claims {length:,} bytes, past the end of the file; it is truncated")
            yield at + _HEADER, length
            at = end
