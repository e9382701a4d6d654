"""What a recording's values were made from, as digests its manifest keeps, so that two
recordings of different inputs of the same shape are told apart.

`inputs` (`input_digests`): each feed of sequences (an array or a file read by rows, its first
dimension the examples) hashed over the examples recorded: BLAKE2b of its shape past the first
dimension and of its values in a canonical type (floats as float64, integers and booleans as
int64, so that the same values saved as float32 or float64 agree), a few megabytes of rows at a
time. `gatetrace compare` refuses recordings whose `inputs` differ. A stream of unknown length,
and values of other types (strings), get no digest there: compare then says their inputs were
not checked. Scalar feeds (`keep_prob=1.0`) are the model's settings, not its inputs: not there.

`digests` (`other_digests`): everything else the recorded values depend on, which `--resume` and
the other shards of a recording must share with the run that began it: every feed `inputs`
leaves out (scalars, strings: `--feed s=0.5`), the sequence lengths (`--lengths`) over the
examples recorded, and the cells' weights (a model retrained at the same path).

The files are read once more for it, before the first batch: 3.1 s for 1 GiB of float32
(4,096 sequences of 512 steps of 128 features, `.npy` on a local disk; AMD EPYC, one core), next
to a recording of such inputs that writes many times as much.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["input_digests", "other_digests"]

_CHUNK_BYTES = 32 << 20


def _canonical(kind: str) -> np.dtype | None:
    if kind == "f":
        return np.dtype("<f8")
    if kind in "iub":
        return np.dtype("<i8")
    return None


def _update(h: Any, block: np.ndarray) -> None:
    """Hash `block`'s values: numbers in their canonical type, text element by element (its
    UTF-8 bytes, each after its length), anything else by its type and its elements' repr."""
    canonical = _canonical(block.dtype.kind)
    if canonical is not None:
        h.update(np.ascontiguousarray(block, canonical).tobytes())
        return
    h.update(block.dtype.kind.encode())
    for v in block.reshape(-1).tolist():
        b = v.encode() if isinstance(v, str) else v if isinstance(v, bytes) else repr(v).encode()
        h.update(len(b).to_bytes(8, "little") + b)


def _rows_digest(value: Any, start: int, stop: int) -> str:
    """The digest of rows [start, stop) of an array or a file read by rows."""
    shape = value.shape
    h = hashlib.blake2b(digest_size=20)
    h.update(repr(tuple(int(d) for d in shape[1:])).encode())
    per_row = max(1, int(np.prod(shape[1:], dtype=np.int64)) * 8)
    step = max(1, _CHUNK_BYTES // per_row)
    for at in range(start, stop, step):
        _update(h, np.asarray(value[at : min(stop, at + step)]))
    return f"blake2b:{h.hexdigest()}"


def _is_rows(value: Any) -> bool:
    return len(getattr(value, "shape", ())) > 0 and hasattr(value, "__getitem__")


def _is_numeric(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    return dtype is not None and _canonical(np.dtype(dtype).kind) is not None


def input_digests(feeds: Mapping[Any, Any], rows: tuple[int, int]) -> dict[str, dict[str, Any]]:
    """{feed name: {"rows": [start, stop], "digest": "blake2b:HEX"}} of the numeric feeds of
    sequences over examples `rows` (see the module docstring)."""
    start, stop = rows
    return {
        str(getattr(tensor, "name", tensor)): {
            "rows": [start, stop],
            "digest": _rows_digest(value, start, stop),
        }
        for tensor, value in feeds.items()
        if _is_rows(value) and _is_numeric(value)
    }


def other_digests(
    feeds: Mapping[Any, Any],
    rows: tuple[int, int] | None,
    lengths: np.ndarray | None,
    weights: Mapping[str, Mapping[str, np.ndarray]],
) -> dict[str, Any]:
    """{"feeds": {feed name: digest}, "lengths": digest or None, "weights": digest}: of every
    feed `input_digests` leaves out (over examples `rows` for one of sequences), of the lengths
    over `rows`, and of the weights by cell and role (see the module docstring)."""
    start, stop = rows if rows is not None else (0, 0)
    others = {}
    for tensor, value in feeds.items():
        if _is_rows(value) and _is_numeric(value):
            continue  # in `inputs`
        if _is_rows(value):
            others[str(getattr(tensor, "name", tensor))] = _rows_digest(value, start, stop)
            continue
        array = np.asarray(value)
        h = hashlib.blake2b(digest_size=20)
        h.update(repr(array.shape).encode())
        _update(h, array)
        others[str(getattr(tensor, "name", tensor))] = f"blake2b:{h.hexdigest()}"
    h = hashlib.blake2b(digest_size=20)
    for cell in sorted(weights):
        for role in sorted(weights[cell]):
            w = np.asarray(weights[cell][role])
            h.update(f"{cell}\0{role}\0{w.dtype.str}\0{w.shape}\0".encode())
            h.update(np.ascontiguousarray(w).data if w.dtype.kind in "fiub" else repr(w).encode())
    return {
        "feeds": dict(sorted(others.items())),
        "lengths": None
        if lengths is None
        else _rows_digest(np.asarray(lengths, np.int64), start, stop),
        "weights": f"blake2b:{h.hexdigest()}",
    }
