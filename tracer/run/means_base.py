"""The recording `--means-from RUN` names, checked against the model being recorded: its means
hold only for the weights it was recorded with.

`check_means_base` compares, for each held cell, the weights `RUN` stored (`weights.parquet`:
every gate's W, U, b, ...) with those the model being recorded loads, value by value (the
weights are never rounded, `--round-bits` or not): another model's recording (other weights,
the same cells' names and sizes) is one line, a copy of the same model (another file, the same
values) is not. `means_origin` is what the held recording's manifest keeps of where its means
came from (`means_from`): the base's folder and, for a base recorded with `--round-bits`, its
rounding, which bounds the means' error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from recorders.errors import SelectionError
from tracer.cells.holds import Hold
from tracer.values.weights import weights_columns

__all__ = ["check_means_base", "means_origin"]

_KEYS = ["gate", "source", "row", "unit"]


def _sorted(frame: Any) -> Any:
    frame = frame.assign(**{k: frame[k].astype(str) for k in ("gate", "source")})
    return frame.sort_values(_KEYS).reset_index(drop=True)


def check_means_base(
    path: str | os.PathLike[str],
    memory: int | None,
    cells: Sequence[Any],
    weights: Mapping[str, Mapping[str, np.ndarray]],
    holds: Sequence[Hold],
) -> None:
    """`SelectionError`, one line, unless the recording at `path` stored, for every held cell
    it records, the very weights `weights` gives that cell (see the module docstring)."""
    import pandas as pd

    from recorders import Recording

    base = Recording(path, memory)
    where = f"--means-from {base.path}"
    held = {h.cell for h in holds}
    for cell in (c for c in cells if c.name in held and c.name in base.cells):
        stored = base.weights_frame(cell.name)
        if stored.empty:
            raise SelectionError(
                f"{where}: that recording holds no weights of {cell.name}, so that its means cannot be told "
                "to be this model's; record the model again without --hold and give that recording"
            )
        mine = pd.DataFrame(weights_columns([cell], weights)).drop(columns="cell")
        a, b = _sorted(stored), _sorted(mine)
        same = (
            len(a) == len(b)
            and all((a[k].to_numpy() == b[k].to_numpy()).all() for k in _KEYS)
            and np.array_equal(
                a["value"].to_numpy(np.float32), b["value"].to_numpy(np.float32), equal_nan=True
            )
        )
        if not same:
            raise SelectionError(
                f"{where}: that recording's weights of {cell.name} are not those of the model being "
                "recorded (another model, or another checkpoint), so its means are not this model's; "
                "give a recording of this model made without --hold"
            )


def means_origin(path: str | os.PathLike[str], memory: int | None) -> dict[str, Any]:
    """What a held recording's manifest keeps of the recording its means came from."""
    from recorders import Recording

    base = Recording(path, memory)
    origin: dict[str, Any] = {"path": os.path.abspath(base.path)}
    if base.description.get("rounding"):
        origin["rounding"] = dict(base.description["rounding"])
    return origin
