"""Part files in the default layout (`fast`), written straight from numpy arrays.

In that layout (`recorders.write.layout`) every column is PLAIN-encoded, the floats stored
uncompressed and the other columns compressed with LZ4_RAW. Such a file needs no encoder: a
float column's page is its array's bytes behind a page header, and a key column's page is
the same in every part file of a batch (they hold the same examples, steps and units:
`recorders.write.keys.KeyCache`). So this module writes them itself, one data
page (v1) per column of a row group: the floats go from the array to the file without a copy,
and a read-only key array that owns its memory (the ones `KeyCache` hands out) is encoded,
compressed and its statistics taken once, for as long as the array lives. pyarrow copies
every value into its page buffers and encodes and compresses each key column of each file
again: that was most of a recording's CPU time (docs/speed.md).

What the files hold is what pyarrow writes for this layout: the same Parquet schema
(required or optional INT64, INT32 and FLOAT columns, no logical types), codecs, encodings
and min/max statistics (the legacy and the new fields, type-defined column order), and the
recording's description in the key-value metadata under `gatetrace` (and a gate file's
statistics under `gatetrace.statistics`, `recorders.write.partstats`). Left out: pyarrow's
`ARROW:schema` entry (readers derive the same Arrow types without it) and page indexes
(pyarrow writes none by default either). Each page header carries the page's CRC32 (`crc`, as
pyarrow writes it with `write_page_checksum`: of the page's bytes as stored, after its header,
compressed where the column is), which readers verify. Thrift encoding: `recorders.write.thrift`.

`plain_chunk` says whether a row group's columns are ones this module writes: numpy columns
of little-endian int32, int64 or float32, and `ABSENT` (a column of nulls). The weights
table (text columns) and the other layouts go through pyarrow
(`recorders.write.rowgroups`).
"""

from __future__ import annotations

import struct
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from recorders.write import thrift
from recorders.write.columns import ABSENT
from recorders.write.layout import METADATA_KEY, NO_STATISTICS, REQUIRED, encodings

try:  # ISA-L's CRC32: the same checksum as zlib's in about a fifth of its CPU time (8 GB/s against 1.5)
    from isal.isal_zlib import crc32
except ImportError:  # a requirement; where it cannot be installed, zlib's
    from zlib import crc32

__all__ = ["PLAIN_LAYOUTS", "plain_chunk", "write_plain"]

PLAIN_LAYOUTS = ("fast",)
_MAGIC = b"PAR1"
# Parquet's codes (parquet.thrift): physical types, repetitions, encodings, codecs, page type.
_TYPES = {np.dtype("<i4"): 1, np.dtype("<i8"): 2, np.dtype("<f4"): 4}  # INT32, INT64, FLOAT
_FLOAT = 4
_REQUIRED, _OPTIONAL = 0, 1
_PLAIN, _RLE = 0, 3
_CODECS = {"none": 0, "lz4": 7}  # UNCOMPRESSED, LZ4_RAW (what pyarrow writes for "lz4")
_DATA_PAGE = 0
# A page's sizes are 32-bit: a row group's column must stay below 2 GiB.
_PAGE_LIMIT = 2**31 - 1
try:
    _CREATED_BY = f"gatetrace version {version('gatetrace')}"
except PackageNotFoundError:  # a source tree that was not installed
    _CREATED_BY = "gatetrace"


class Sink(Protocol):
    """Where a file's bytes go: a binary file or a pyarrow output stream."""

    def write(self, data: Any, /) -> Any: ...


def plain_chunk(columns: Mapping[str, Any], layout: str) -> bool:
    """Whether `write_plain` writes a row group of these columns in `layout` (columns of one
    length: anything else goes to pyarrow, which says what is wrong)."""
    if layout not in PLAIN_LAYOUTS:
        return False
    lengths = {len(c) for c in columns.values() if c is not ABSENT}
    if len(lengths) > 1:
        return False
    for name, column in columns.items():
        if column is ABSENT:
            if name in REQUIRED:
                return False
        elif not (
            isinstance(column, np.ndarray)
            and column.ndim == 1
            and column.dtype in _TYPES
            and column.flags.c_contiguous
            and column.nbytes + 16 < _PAGE_LIMIT
        ):
            return False
    return bool(columns)


def write_plain(
    sink: Sink,
    chunks: Iterable[Mapping[str, Any]],
    metadata: bytes,
    layout: str,
    footer: Callable[[], Mapping[bytes, bytes]] | None = None,
) -> int:
    """Write one Parquet file of `layout` to `sink`, one row group per chunk with rows (a file
    with no rows still has the schema of the first chunk); returns the rows written. Each chunk
    maps column names to columns `plain_chunk` accepts, every chunk with the same names and types.
    `footer`, called once the rows are written, gives more key-value metadata for the footer."""
    position = 0

    def put(*buffers: Any) -> None:
        nonlocal position
        for b in buffers:
            sink.write(b)
            position += memoryview(b).nbytes

    put(_MAGIC)
    schema: list[tuple[str, int, int]] | None = None
    groups, total = [], 0
    for columns in chunks:
        if not plain_chunk(columns, layout):
            raise ValueError(
                f"columns {list(columns)} are not ones write_plain writes in layout {layout!r}"
            )
        shape = [
            (name, _type(c), _OPTIONAL if name not in REQUIRED else _REQUIRED)
            for name, c in columns.items()
        ]
        if schema is None:
            schema = shape
        elif shape != schema:
            raise ValueError(f"a row group of columns {shape} in a file of columns {schema}")
        rows = next((len(c) for c in columns.values() if c is not ABSENT), 0)
        if not rows:
            continue
        start, metas, uncompressed = position, [], 0
        for (name, kind, repetition), column in zip(schema, columns.values(), strict=True):
            chunk = _chunk(name, column, rows, repetition == _REQUIRED, layout)
            metas.append(chunk.metadata(name, kind, position))
            uncompressed += chunk.uncompressed
            put(chunk.header, *chunk.body)
        groups.append(_row_group(metas, rows, start, position - start, uncompressed))
        total += rows
    if schema is None:
        raise ValueError("no columns to write")
    described = {METADATA_KEY: metadata, **(footer() if footer is not None else {})}
    end = _footer(schema, total, groups, described)
    put(end, struct.pack("<i", len(end)), _MAGIC)
    return total


@dataclass(frozen=True)
class _Chunk:
    """One column of one row group, encoded: its page (header and body), and what the footer says of it."""

    header: bytes
    body: tuple[Any, ...]  # buffers: the array's own memory, or the compressed page
    values: int
    codec: int
    uncompressed: int  # the page's bytes before compression, its header included
    statistics: bytes | None

    @property
    def size(self) -> int:
        return len(self.header) + sum(memoryview(b).nbytes for b in self.body)

    def metadata(self, name: str, kind: int, offset: int) -> bytes:
        """The ColumnChunk of this column for the footer, its page at `offset` in the file."""
        meta = thrift.struct(
            [
                (1, thrift.I32, kind),
                (2, thrift.LIST, (thrift.I32, [_RLE, _PLAIN])),
                (3, thrift.LIST, (thrift.BINARY, [name])),
                (4, thrift.I32, self.codec),
                (5, thrift.I64, self.values),
                (6, thrift.I64, self.uncompressed),
                (7, thrift.I64, self.size),
                (9, thrift.I64, offset),
                (12, thrift.STRUCT, self.statistics),
                # encoding_stats: one data page, plain
                (13, thrift.LIST, (thrift.STRUCT, [_PAGE_ENCODING])),
            ]
        )
        return thrift.struct([(2, thrift.I64, 0), (3, thrift.STRUCT, meta)])


_PAGE_ENCODING = thrift.struct(
    [(1, thrift.I32, _DATA_PAGE), (2, thrift.I32, _PLAIN), (3, thrift.I32, 1)]
)


def _type(column: Any) -> int:
    return _FLOAT if column is ABSENT else _TYPES[column.dtype]


def _chunk(name: str, column: Any, rows: int, required: bool, layout: str) -> _Chunk:
    """The encoded chunk of a column: from the cache for a key array encoded before."""
    codec = encodings([name], layout)["compression"]
    codec = _CODECS[codec[name] if isinstance(codec, dict) else codec]
    how = (codec, required, name not in NO_STATISTICS)
    if column is ABSENT or column.flags.writeable or column.base is not None:
        return _encode(column, rows, *how)
    return _ENCODED.get(column, how)


def _encode(column: Any, rows: int, codec: int, required: bool, statistics: bool) -> _Chunk:
    if required:
        body: tuple[Any, ...] = (column,)
        stats = _statistics(column) if statistics else None
    else:  # definition levels first, one RLE run (4-byte length, run header, level): 1 present, 0 null
        present = column is not ABSENT
        run = thrift.varint(rows << 1) + bytes([present])
        body = (struct.pack("<i", len(run)) + run, *((column,) if present else ()))
        stats = (_statistics(column) if present else _nulls(rows)) if statistics else None
    uncompressed = sum(memoryview(b).nbytes for b in body)
    if codec != _CODECS["none"]:
        joined = (
            body[0] if len(body) == 1 else b"".join(bytes(memoryview(b).cast("B")) for b in body)
        )
        body = (_LZ4.compress(joined),)
    size = sum(memoryview(b).nbytes for b in body)
    crc = 0
    for b in body:  # numpy's buffer, or bytes
        crc = crc32(b, crc)
    page = thrift.struct(
        [
            (1, thrift.I32, rows),
            (2, thrift.I32, _PLAIN),
            (3, thrift.I32, _RLE),
            (4, thrift.I32, _RLE),
            (5, thrift.STRUCT, stats),
        ]
    )
    header = thrift.struct(
        [
            (1, thrift.I32, _DATA_PAGE),
            (2, thrift.I32, uncompressed),
            (3, thrift.I32, size),
            (4, thrift.I32, crc - (crc >> 31 << 32)),  # the CRC32 as Thrift's signed i32
            (5, thrift.STRUCT, page),
        ]
    )
    return _Chunk(header, body, rows, codec, len(header) + uncompressed, stats)


_LZ4 = pa.Codec("lz4_raw")


def _statistics(column: np.ndarray) -> bytes:
    """Min and max, in the legacy fields and the new ones (signed integers sort the same in both)."""
    low, high = column.min(keepdims=True).tobytes(), column.max(keepdims=True).tobytes()
    return thrift.struct(
        [
            (1, thrift.BINARY, high),
            (2, thrift.BINARY, low),
            (3, thrift.I64, 0),
            (5, thrift.BINARY, high),
            (6, thrift.BINARY, low),
            (7, thrift.BOOL, True),
            (8, thrift.BOOL, True),
        ]
    )


def _nulls(rows: int) -> bytes:
    return thrift.struct([(3, thrift.I64, rows)])


class _EncodedArrays:
    """Chunks encoded from read-only arrays that own their memory, kept while the arrays live.

    Such an array cannot change (nothing can write into it without first making it writable
    again), so its chunk is encoded once however many files and row groups hold it. An entry
    is found by the array's identity and goes when the array does (a weak reference: the cache
    keeps no array alive). Safe to use from several threads."""

    def __init__(self) -> None:
        self._chunks: dict[tuple, tuple[weakref.ref, _Chunk]] = {}
        self._lock = threading.Lock()

    def get(self, column: np.ndarray, how: tuple) -> _Chunk:
        key = (id(column), how)
        with self._lock:
            found = self._chunks.get(key)
        if found is not None and found[0]() is column:
            return found[1]
        chunk = _encode(column, len(column), *how)
        chunks = self._chunks

        def forget(_: weakref.ref) -> None:
            # Runs when the array goes, before its id can be another's; may run on any
            # thread, inside a `with self._lock`: a lone pop, atomic, takes no lock.
            chunks.pop(key, None)

        with self._lock:
            chunks[key] = (weakref.ref(column, forget), chunk)
        return chunk


_ENCODED = _EncodedArrays()


def _row_group(columns: list[bytes], rows: int, start: int, size: int, uncompressed: int) -> bytes:
    return thrift.struct(
        [
            (1, thrift.LIST, (thrift.STRUCT, columns)),
            (2, thrift.I64, uncompressed),
            (3, thrift.I64, rows),
            (5, thrift.I64, start),
            (6, thrift.I64, size),
        ]
    )


def _footer(
    schema: list[tuple[str, int, int]],
    rows: int,
    groups: list[bytes],
    metadata: Mapping[bytes, bytes],
) -> bytes:
    root = thrift.struct(
        [(3, thrift.I32, _REQUIRED), (4, thrift.BINARY, "schema"), (5, thrift.I32, len(schema))]
    )
    leaves = [
        thrift.struct(
            [(1, thrift.I32, kind), (3, thrift.I32, repetition), (4, thrift.BINARY, name)]
        )
        for name, kind, repetition in schema
    ]
    described = [
        thrift.struct([(1, thrift.BINARY, key), (2, thrift.BINARY, value)])
        for key, value in metadata.items()
    ]
    type_defined_order = thrift.struct([(1, thrift.STRUCT, thrift.struct([]))])
    return thrift.struct(
        [
            (1, thrift.I32, 2),
            (2, thrift.LIST, (thrift.STRUCT, [root, *leaves])),
            (3, thrift.I64, rows),
            (4, thrift.LIST, (thrift.STRUCT, groups)),
            (5, thrift.LIST, (thrift.STRUCT, described)),
            (6, thrift.BINARY, _CREATED_BY),
            (7, thrift.LIST, (thrift.STRUCT, [type_defined_order] * len(schema))),
        ]
    )
