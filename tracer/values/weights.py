"""Per-gate weights: the kernel and bias slices that users otherwise cut by hand.

A cell's kernel is `[input_size + recurrent_size, blocks * units]`: its first
`input_size` rows act on the input (`W`), the rest on the recurrent state (`U`), and
column block k belongs to gate k in the spec's gate order (`tracer.cells.kinds`). For GRUCell
the candidate has its own kernel, whose recurrent rows act on `r * h_prev`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from recorders.write.columns import weight_columns
from tracer.cells.found import Cell
from tracer.cells.kinds import HasSpec

if TYPE_CHECKING:  # only `read_weights` runs a session: a .tflite file's weights need no TensorFlow
    from tracer._tf import v1

__all__ = ["GateWeights", "read_weights", "stacked", "gate_weights", "weights_columns"]

_PEEPHOLES = {"i": "w_i_diag", "f": "w_f_diag", "o": "w_o_diag"}


@dataclass(frozen=True)
class GateWeights:
    """One gate's weights. W: [input_size, units]; U: [recurrent_size, units]; b: [units];
    peephole: [units] or None (LSTMCell with use_peepholes, gates i, f and o);
    recurrent_b: [units] or None (Keras GRU with reset_after: the bias of the recurrent part)."""

    W: np.ndarray
    U: np.ndarray
    b: np.ndarray
    peephole: np.ndarray | None = None
    recurrent_b: np.ndarray | None = None


def read_weights(
    session: v1.Session, cells: Sequence[Cell], timeout: float | None = None
) -> dict[str, dict[str, np.ndarray]]:
    """The weight values of every cell, by cell name and role, read in one run (stoppable: `tracer.values.running`)."""
    from tracer.values import running

    names = sorted({t for cell in cells for t in cell.weights.values()})
    values = (
        dict(zip(names, running.run(session, names, timeout=timeout), strict=True)) if names else {}
    )
    return {
        cell.name: stacked({role: values[t] for role, t in cell.weights.items()}) for cell in cells
    }


def stacked(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A Keras cell's weights as gatetrace slices them: `kernel` on `[x, h_prev]` (its
    kernel stacked on its recurrent kernel, input rows first), a `bias` (zeros when the
    cell has none) and, for a GRU with reset_after, its `recurrent_bias`. Other cells'
    weights are returned as they are."""
    if "recurrent_kernel" not in weights:
        return weights
    out = {k: v for k, v in weights.items() if k != "recurrent_kernel"}
    out["kernel"] = np.concatenate([weights["kernel"], weights["recurrent_kernel"]])
    out.setdefault("bias", np.zeros(weights["kernel"].shape[1], weights["kernel"].dtype))
    if out["bias"].ndim == 2:  # a GRU with reset_after: [input bias, recurrent bias]
        out["bias"], out["recurrent_bias"] = out["bias"][0], out["bias"][1]
    return out


def gate_weights(cell: HasSpec, values: Mapping[str, np.ndarray]) -> dict[str, GateWeights]:
    """Slice a cell's kernels and biases into per-gate W, U, b (and peepholes); none for a
    cell whose spec says no weights (a cell found by name: `tracer.find.named`)."""
    out: dict[str, GateWeights] = {}
    if not cell.spec.weights:
        return out  # (a Keras cell of your own: its weights are its own business)
    for gate, layout in zip(cell.gates, cell.spec.weights, strict=True):
        if not layout.kernel:
            continue  # (a gate of a cell of your own whose weights the graph does not say)
        kernel = values[layout.kernel]
        width = kernel.shape[1] // layout.blocks
        cols = slice(layout.block * width, (layout.block + 1) * width)
        peephole = values.get(_PEEPHOLES.get(gate, ""))
        recurrent_b = values.get("recurrent_bias")
        if layout.recurrent is not None:  # W and U matrices of their own
            W, U = kernel[:, cols], values[layout.recurrent][:, cols]
        else:
            W, U = kernel[: cell.input_size, cols], kernel[cell.input_size :, cols]
        out[gate] = GateWeights(
            W=W,
            U=U,
            b=values[layout.bias][cols] if layout.bias else np.zeros(width, kernel.dtype),
            peephole=peephole,
            recurrent_b=None if recurrent_b is None else recurrent_b[cols],
        )
    return out


def weights_columns(
    cells: Sequence[HasSpec], values: Mapping[str, Mapping[str, np.ndarray]]
) -> dict[str, pd.Categorical | np.ndarray]:
    """The weights table: cell, gate, source (categoricals), row, unit, value.

    source is `input` (row = input feature), `recurrent` (row = recurrent unit), `bias`,
    `peephole` (row 0), `recurrent_bias` (row 0; Keras GRU with reset_after) or
    `projection` (gate is null, row = cell unit, unit = output unit).
    """
    parts: list[tuple[str, str | None, str, np.ndarray]] = []
    for cell in cells:
        v = values[cell.name]
        for gate, w in gate_weights(cell, v).items():
            pieces = [("input", w.W), ("recurrent", w.U), ("bias", w.b)]
            if w.peephole is not None:
                pieces.append(("peephole", w.peephole))
            if w.recurrent_b is not None:
                pieces.append(("recurrent_bias", w.recurrent_b))
            parts += [(cell.name, gate, source, m) for source, m in pieces]
        if "projection" in v:
            parts.append((cell.name, None, "projection", v["projection"]))
    columns: dict[str, Any] = {"row": [], "unit": [], "value": []}
    labels: dict[str, list] = {"cell": [], "gate": [], "source": []}
    for cell_name, gate_name, source, matrix in parts:
        cols = weight_columns(matrix)
        for key, label in (("cell", cell_name), ("gate", gate_name), ("source", source)):
            labels[key].append((label, len(cols["value"])))
        for key in ("row", "unit", "value"):
            columns[key].append(cols[key])
    for key, dtype in (("row", np.int32), ("unit", np.int32), ("value", np.float32)):
        columns[key] = np.concatenate(columns[key]) if columns[key] else np.zeros(0, dtype)
    # The text columns as categoricals (a code per row), not a Python string per row:
    # a large model's weights table has millions of rows.
    return {key: _repeated(labels[key]) for key in labels} | columns


def _repeated(runs: list[tuple[str | None, int]]) -> pd.Categorical:
    """A categorical column of `count` rows of `label` for each run (None: a null)."""
    categories = list(dict.fromkeys(label for label, _ in runs if label is not None))
    codes = [-1 if label is None else categories.index(label) for label, _ in runs]
    counts = [count for _, count in runs]
    return pd.Categorical.from_codes(
        np.repeat(np.asarray(codes, dtype=np.int32), counts), categories=categories
    )
