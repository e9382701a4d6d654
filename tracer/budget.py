"""The memory budget: how many sequences one batch may hold.

A batch's values exist several times at its peak: as fetched tensors, as the arrays
cut out of them, as long columns with their keys, and in the encoder, while the next
batch is already being fetched. `COPIES` counts them (measured: peak RSS grows by about
six copies of one batch's recorded values). `bytes_per_sequence` estimates one
sequence's share, from every recorded gate and state of every cell at every step plus
its input rows; `fit_batch` lowers the batch size so that a batch stays within the
budget. The default budget is a tenth of the memory available when recording starts
(about 2 GB on a 24 GB machine). The budget covers a batch's data, on top of what
TensorFlow and the model themselves hold.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

import numpy as np

from recorders.errors import SelectionError

__all__ = ["COPIES", "DEFAULT_BATCH_SIZE", "available_memory", "default_budget", "parse_size", "bytes_per_sequence", "fit_batch", "describe_size"]

COPIES = 6
DEFAULT_BATCH_SIZE = 256  # sequences per Session.run, before the budget lowers it
_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "M": 2**20, "MB": 2**20, "G": 2**30, "GB": 2**30, "T": 2**40, "TB": 2**40}


def available_memory() -> int:
    """MemAvailable from /proc/meminfo, in bytes (8 GiB where it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 8 * 2**30


def default_budget() -> int:
    return available_memory() // 10


def parse_size(text: str) -> int:
    """`"2G"`, `"500M"`, `"1.5GB"`, `"800k"` -> bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else None
    if match is None or unit not in _UNITS or float(match.group(1)) <= 0:
        raise SelectionError(f"--memory {text!r}: expected a size such as 2G, 500M or 1.5GB")
    return int(float(match.group(1)) * _UNITS[unit])


def describe_size(n: float) -> str:
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} bytes"


def _steps(cell: Any, hint: int | None) -> int:
    steps = cell.describe().get("steps")
    return int(steps) if steps else int(hint or 1)


def bytes_per_sequence(cells: Iterable[Any], feeds: Mapping[Any, Any]) -> int:
    """One sequence's share of a batch at its peak: COPIES times its recorded values (two
    float32 columns per gate, one per state, every unit and step) plus its input rows."""
    shapes = [tuple(np.shape(v)) if not hasattr(v, "shape") else tuple(v.shape) for v in feeds.values()]
    hint = max((s[1] for s in shapes if len(s) >= 3), default=None)  # [sequences, steps, ...] inputs
    values = 0
    for cell in cells:
        per_step = len(cell.gates) * cell.units * 2 + len(cell.spec.states) * max(cell.units, cell.output_size)
        values += _steps(cell, hint) * per_step * 4
    inputs = sum(int(np.prod(s[1:], dtype=np.int64)) * np.dtype(getattr(v, "dtype", np.float32)).itemsize
                 for s, v in zip(shapes, feeds.values()) if len(s) >= 1)
    return COPIES * values + inputs


def fit_batch(requested: int, budget: int, per_sequence: int) -> int:
    """The largest batch size, at most `requested` and at least 1, whose batch fits `budget`."""
    return max(1, min(requested, budget // max(1, per_sequence)))
