"""What the RNN-analysis literature computes from gates, each as a tidy DataFrame.

After Karpathy, Johnson and Fei-Fei (2015), "Visualizing and Understanding Recurrent
Networks", and the LSTMVis / RNNVis tools:

- `saturation`: per cell, gate and unit, the fraction of activations below 0.1
  (left-saturated) and above 0.9 (right-saturated);
- `step_stats`: per cell, gate and step, the mean and quantiles of the activations;
- `time_courses`: per-unit values along the steps of chosen examples;
- `top_positions`: the (example, step) positions that drive a unit highest or lowest;
- `label_correlation`: the correlation of each unit with a per-step label;
- `dominant_part`: which part of the preactivation (input, recurrent, bias, ...) drives
  each unit of a gate over a range of steps (recordings made with `--values ...,contributions`).

Each takes a `recorders.Recording` and reads only what it needs. No TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from recorders.errors import SelectionError
from recorders.long import PARTS
from recorders.reader import Range, Recording, part_shares

__all__ = ["saturation", "step_stats", "quantile_column", "time_courses", "top_positions", "label_correlation", "dominant_part"]


def quantile_column(q: float) -> str:
    """The `step_stats` column of quantile `q`: 0.1 -> `q10`."""
    return f"q{round(q * 100):g}"


def saturation(rec: Recording, cells: Sequence[str] | None = None, gates: Sequence[str] | None = None, low: float = 0.1, high: float = 0.9) -> pd.DataFrame:
    """cell, gate, unit, left (fraction of activations < low), right (fraction > high), n."""
    df = rec.gate_frame(cells, gates, columns=["activation"])
    a = df["activation"]
    df = df.assign(left=(a < low).astype(np.float64), right=(a > high).astype(np.float64))
    out = df.groupby(["cell", "gate", "unit"], observed=True).agg(left=("left", "mean"), right=("right", "mean"), n=("left", "size"))
    return out.reset_index()


def step_stats(
    rec: Recording,
    cells: Sequence[str] | None = None,
    gates: Sequence[str] | None = None,
    column: str = "activation",
    quantiles: Sequence[float] = (0.1, 0.5, 0.9),
) -> pd.DataFrame:
    """cell, gate, step, mean, and one column per quantile (`q10`, `q50`, `q90`), over examples and units."""
    df = rec.gate_frame(cells, gates, columns=[column])
    grouped = df.groupby(["cell", "gate", "step"], observed=True)[column]
    out = grouped.mean().rename("mean").to_frame()
    for q in quantiles:
        out[quantile_column(q)] = grouped.quantile(q)
    return out.reset_index()


def time_courses(
    rec: Recording, cell: str, gate: str, examples: Sequence[int], units: Sequence[int] | None = None, column: str = "activation"
) -> pd.DataFrame:
    """example, step, unit, value: each chosen unit along the steps of each chosen example."""
    lo, hi = min(examples), max(examples) + 1
    df = rec.gate_frame([cell], [gate], examples=(lo, hi), units=units, columns=[column])
    df = df[df["example"].isin(list(examples))]
    return df[["example", "step", "unit", column]].rename(columns={column: "value"}).sort_values(["example", "unit", "step"], ignore_index=True)


def top_positions(
    rec: Recording, cell: str, gate: str, unit: int, k: int = 10, lowest: bool = False, column: str = "activation", examples: Range | None = None
) -> pd.DataFrame:
    """The k (example, step) positions where `unit` of `gate` is highest (or lowest): example, step, value, rank."""
    df = rec.gate_frame([cell], [gate], examples=examples, units=[unit], columns=[column])
    df = df.nsmallest(k, column) if lowest else df.nlargest(k, column)
    out = df[["example", "step", column]].rename(columns={column: "value"}).reset_index(drop=True)
    out["rank"] = np.arange(1, len(out) + 1)
    return out


def label_correlation(
    rec: Recording, cell: str, gate: str, labels: np.ndarray, column: str = "activation", examples: Range | None = None
) -> pd.DataFrame:
    """unit, correlation (Pearson), n: each unit's values against a per-step label.

    `labels` is [examples, steps] (rows of the inputs, input positions), e.g. "inside a
    quote" per character; positions without a recorded row are left out.
    """
    labels = np.asarray(labels, dtype=np.float64)
    if labels.ndim != 2:
        raise SelectionError(f"labels: expected an [examples, steps] array, given shape {list(labels.shape)}")
    df = rec.gate_frame([cell], [gate], examples=examples, columns=[column])
    ex, st = df["example"].to_numpy(), df["step"].to_numpy()
    if len(df) and (ex.max() >= labels.shape[0] or st.max() >= labels.shape[1]):
        raise SelectionError(
            f"labels: shape {list(labels.shape)} does not cover the recording's examples (up to {ex.max()}) and steps (up to {st.max()})"
        )
    df = df.assign(label=labels[ex, st])
    rows = []
    for unit, g in df.groupby("unit"):
        x, y = g[column].to_numpy(np.float64), g["label"].to_numpy()
        ok = np.isfinite(x) & np.isfinite(y)
        r = np.corrcoef(x[ok], y[ok])[0, 1] if ok.sum() > 1 and x[ok].std() > 0 and y[ok].std() > 0 else np.nan
        rows.append((unit, r, int(ok.sum())))
    return pd.DataFrame(rows, columns=["unit", "correlation", "n"])


def dominant_part(
    rec: Recording, cell: str, gate: str, units: Sequence[int] | None = None, steps: Range | None = None, examples: Range | None = None
) -> pd.DataFrame:
    """unit, part, mean, mean_abs, share, rows, dominant: per unit of `gate`, how much each
    part of its preactivation contributes over the steps `steps` ([start, stop)) of
    `examples`, by mean absolute value; `dominant` marks each unit's largest part. Parts
    the cell does not have (all null) are left out. Needs a recording made with
    `--values ...,contributions`."""
    df = rec.gate_frame([cell], [gate], steps, examples, units, columns=list(PARTS))
    return part_shares(df, by=["unit"])
