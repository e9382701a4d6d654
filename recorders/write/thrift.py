"""Thrift's compact protocol, as Parquet stores its metadata: just enough of it to write a file.

A Parquet file's footer (`FileMetaData`) and the header before each page (`PageHeader`) are
Thrift structs in the compact protocol. `struct` encodes one from its fields, given as
(field id, type, value) in increasing id order, each at most 15 after the one before (the
short form of a field header, all that Parquet's structs need); a nested struct is passed as the bytes
`struct` returned for it, a list as (element type, values). Fields whose value is None are
left out (Thrift's optional fields). Integers are zigzag varints, binary values a varint
length and the bytes, a struct ends with a stop byte.

Only writing is here: `recorders.write.plain` uses it, and the tests read what it wrote back
with pyarrow, DuckDB and Polars.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["BOOL", "I32", "I64", "BINARY", "LIST", "STRUCT", "struct", "varint"]

# The compact protocol's type codes (a true and a false bool have codes of their own, 1 and 2).
BOOL, I32, I64, BINARY, LIST, STRUCT = 1, 5, 6, 8, 9, 12
_FALSE = 2


def varint(n: int) -> bytes:
    """An unsigned integer in 7-bit groups, low first (Thrift's and Parquet's RLE run headers)."""
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _zigzag(n: int) -> int:
    """A signed integer (up to 64 bits) as the unsigned one the protocol stores."""
    return (n << 1) ^ (n >> 63)


def _value(kind: int, value: Any) -> bytes:
    if kind in (I32, I64):
        return varint(_zigzag(int(value)))
    if kind == BINARY:
        data = value.encode() if isinstance(value, str) else bytes(value)
        return varint(len(data)) + data
    if kind == STRUCT:
        return bytes(value)
    if kind == LIST:
        element, items = value
        items = list(items)
        size = len(items)
        head = bytes([size << 4 | element]) if size < 15 else bytes([0xF0 | element]) + varint(size)
        return head + b"".join(_value(element, item) for item in items)
    raise ValueError(f"Thrift type {kind} is not one this module writes")


def struct(fields: Iterable[tuple[int, int, Any]]) -> bytes:
    """A struct of the fields (field id, type, value), in increasing id order; None values are left out."""
    out, last = bytearray(), 0
    for field, kind, value in fields:
        if value is None:
            continue
        code = (BOOL if value else _FALSE) if kind == BOOL else kind
        if not 0 < field - last <= 15:  # the long form, never needed by Parquet's structs here
            raise ValueError(
                f"field {field} after field {last}: give fields in increasing order, at most 15 apart"
            )
        out.append((field - last) << 4 | code)
        if kind != BOOL:
            out += _value(kind, value)
        last = field
    out.append(0)
    return bytes(out)
