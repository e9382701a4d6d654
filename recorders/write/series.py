"""The layout of a series folder: one recording per checkpoint, epoch, step or batch.

    OUT/series.json         {"kind": "series", "key": KEY, "values": [...] or None, "source": ...}
    OUT/KEY=VALUE/          a recording (full or summary) of that value of the key

KEY is one of `KEYS`; VALUE a whole number from 0 to 2**53 - 1 (a JSON number every reader
takes exactly). Writers name a key's folder through `key_folder`, so that nothing is written
that the reader (`recorders.read.series.Series`) would refuse.
"""

from __future__ import annotations

from recorders.errors import SelectionError

__all__ = ["SERIES_FILE", "KEYS", "MAX_KEY", "is_key", "key_folder"]

SERIES_FILE = "series.json"
# a checkpoint's global step; an epoch; a step logged by the hook; a batch logged by the callback
KEYS = ("checkpoint", "epoch", "global_step", "batch")
MAX_KEY = 2**53  # values below it


def is_key(value: object) -> bool:
    """Whether `value` is a whole number a series' key may take."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_KEY


def key_folder(key: str, value: int) -> str:
    """The folder name `KEY=VALUE` of one value of a series' key; SelectionError, before anything
    is written, for a value no reader would take."""
    if key not in KEYS or not is_key(value):
        raise SelectionError(
            f"{key} {value}: a series keys its recordings by whole numbers from 0 to {MAX_KEY - 1:,}; "
            f"this one is outside them, so it cannot be written as one"
        )
    return f"{key}={value}"
