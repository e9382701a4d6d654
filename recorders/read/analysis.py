"""What the RNN-analysis literature computes from gates, each as a tidy DataFrame.

After Karpathy, Johnson and Fei-Fei (2015), "Visualizing and Understanding Recurrent
Networks", and the LSTMVis / RNNVis tools:

- `saturation`: per cell, gate and unit, the fraction of activations near each end of the
  gate's nonlinearity (`recorders.write.totals.saturation_bounds`: below 0.1 and above 0.9
  for sigmoid, as Karpathy et al. count it; below -0.9 and above 0.9 for tanh; none for relu
  or an identity, which do not saturate), or below and above the thresholds you give;
  `saturation_across` the same at each checkpoint or epoch of a series (`recorders.read.series`);
- `dead_units`: the gate units saturated on one side in nearly every row (always shut or
  always open), and `dead_units_across` a series: when in training they died;
- `step_stats`: per cell, gate and step, the mean and quantiles of the activations;
- `gate_summaries`: both of those as arrays per gate, from one read of each gate; with
  `exact=False` from the statistics the gate's part files carry (`recorders.write.partstats`:
  what `gatetrace view`'s overview shows), and from a summary recording (`--summary`) from its
  statistics: the same counts and means, the quantiles within one histogram bin;
- `time_courses`: per-unit values along the steps of chosen examples;
- `top_positions`: the (example, step) positions that drive a unit highest or lowest (its
  highest activations from what the gate's part files carry, `recorders.write.tops`);
- `unit_scores`: every unit ranked against labels (AUC or Pearson's r, beside chance), and
  `probe`, one L1-regularised model over all units (`recorders.read.units`, `probe`);
  `label_correlation` the Pearson column of one gate;
- `dominant_part`: which part of the preactivation (input, recurrent, bias, ...) drives
  each unit of a gate over a range of steps (recordings made with `--values ...,contributions`).

Each takes a `recorders.Recording` and reads only what it needs. No TensorFlow.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import pandas as pd

from recorders.errors import SelectionError
from recorders.read.probe import probe
from recorders.read.reader import Recording
from recorders.read.series import Series
from recorders.read.tables import Range, part_shares
from recorders.read.units import unit_scores
from recorders.write.columns import PARTS
from recorders.write.totals import saturation_bounds

__all__ = [
    "saturation",
    "saturation_across",
    "bounds_of",
    "dead_units",
    "dead_units_across",
    "step_stats",
    "gate_summaries",
    "Summary",
    "quantile_column",
    "time_courses",
    "top_positions",
    "label_correlation",
    "unit_scores",
    "probe",
    "dominant_part",
]


def quantile_column(q: float) -> str:
    """The `step_stats` column of quantile `q`: 0.1 -> `q10`."""
    return f"q{round(q * 100):g}"


def saturation(
    rec: Recording,
    cells: Sequence[str] | None = None,
    gates: Sequence[str] | None = None,
    low: float | None = None,
    high: float | None = None,
) -> pd.DataFrame:
    """cell, gate, unit, left (fraction of activations < low), right (fraction > high), n,
    low, high. The thresholds are each gate's nonlinearity's (see the module docstring: NaN
    fractions and thresholds for a gate that does not saturate), or `low` and `high` for every gate."""
    rows = []
    for (cell, gate), s in gate_summaries(rec, cells, gates, "activation", low, high, ()).items():
        units, left, right = s.saturated()
        rows.append(
            pd.DataFrame(
                {
                    "cell": cell,
                    "gate": gate,
                    "unit": units,
                    "left": left,
                    "right": right,
                    "n": s.n[units],
                    "low": s.low,
                    "high": s.high,
                }
            )
        )
    return _frame(rows, ["cell", "gate", "unit", "left", "right", "n", "low", "high"])


def saturation_across(
    series: Series,
    cells: Sequence[str] | None = None,
    gates: Sequence[str] | None = None,
    low: float | None = None,
    high: float | None = None,
) -> pd.DataFrame:
    """`saturation` at each complete value of a series' key (`recorders.read.series`): the key
    (`checkpoint` or `epoch`) first, then cell, gate, unit, left, right, n; how the gates'
    saturation moved along training."""
    return _across(series, lambda rec: saturation(rec, cells, gates, low, high))


def dead_units(
    rec: Recording,
    cells: Sequence[str] | None = None,
    gates: Sequence[str] | None = None,
    fraction: float = 0.99,
    low: float | None = None,
    high: float | None = None,
) -> pd.DataFrame:
    """cell, gate, unit, state, share, n: the gate units below `low` (state "shut") or above
    `high` ("open") in at least `fraction` of their rows, from `saturation` (each gate's
    nonlinearity's thresholds unless given); a gate unit that hardly ever moves passes (or
    blocks) the same share of everything, whatever the input."""
    if not 0 < fraction <= 1:
        raise SelectionError(f"fraction {fraction!r}: expected a share of rows in (0, 1]")
    sat = saturation(rec, cells, gates, low, high)
    shut = sat["left"].to_numpy() >= fraction
    dead = sat[shut | (sat["right"].to_numpy() >= fraction)].reset_index(drop=True)
    shut = dead["left"].to_numpy() >= fraction
    dead["state"] = np.where(shut, "shut", "open")
    dead["share"] = np.where(shut, dead["left"], dead["right"])
    return dead[["cell", "gate", "unit", "state", "share", "n"]]


def dead_units_across(
    series: Series,
    cells: Sequence[str] | None = None,
    gates: Sequence[str] | None = None,
    fraction: float = 0.99,
    low: float | None = None,
    high: float | None = None,
) -> pd.DataFrame:
    """`dead_units` at each complete value of a series' key, the key first: which gate units
    died (or came back) along training."""
    return _across(series, lambda rec: dead_units(rec, cells, gates, fraction, low, high))


def _across(series: Series, analyse: Callable[[Recording], pd.DataFrame]) -> pd.DataFrame:
    """One analysis of each complete recording of a series, with the key as the first column."""
    frames = [series.keyed(analyse(series.recording(v)), v) for v in series.complete]
    if not frames:
        raise SelectionError(f"{series.path} holds no complete recording yet")
    out = pd.concat(frames, ignore_index=True)
    return out.astype({"cell": "category", "gate": "category"})


def step_stats(
    rec: Recording,
    cells: Sequence[str] | None = None,
    gates: Sequence[str] | None = None,
    column: str = "activation",
    quantiles: Sequence[float] = (0.1, 0.5, 0.9),
) -> pd.DataFrame:
    """cell, gate, step, mean, and one column per quantile (`q10`, `q50`, `q90`), over examples and units."""
    rows = []
    for (cell, gate), s in gate_summaries(rec, cells, gates, column, None, None, quantiles).items():
        frame = pd.DataFrame({"cell": cell, "gate": gate, "step": s.steps, "mean": s.mean})
        for q, values in zip(quantiles, s.quantiles, strict=True):
            frame[quantile_column(q)] = values
        rows.append(frame)
    return _frame(rows, ["cell", "gate", "step", "mean", *map(quantile_column, quantiles)])


def gate_summaries(
    rec: Recording,
    cells: Sequence[str] | None = None,
    gates: Sequence[str] | None = None,
    column: str = "activation",
    low: float | None = None,
    high: float | None = None,
    quantiles: Sequence[float] = (0.1, 0.5, 0.9),
    exact: bool = True,
) -> dict[tuple[str, str], Summary]:
    """`saturation` and `step_stats` of each (cell, gate) as arrays, from one read of each
    gate's `column` (`Recording.gate_blocks`), the gates read in parallel threads; the
    thresholds each gate's nonlinearity's (`bounds_of`) unless `low` and `high` are given. The
    quantiles are exact (numpy's, as pandas computes them), so each thread holds one gate's
    column: 4 bytes per row of that gate.

    With `exact=False`, the activations' statistics come from the part files' footers where
    each file of the gate has them (`Recording.activation_statistics`: the shards' merged
    statistics files, and the footers of files they do not cover) and the thresholds are the
    gate's own: the counts and means as from the values, each quantile within one bin
    (`Summary.within`) of the exact inverted-CDF one, in the time of reading a few files; where
    a file has none (an older recording), every value, which `Summary.read_in_full` says."""
    pairs = [
        (c, g) for c in (cells or rec.cells) for g in rec.gates(c) if gates is None or g in gates
    ]
    bounds = {(c, g): bounds_of(rec, c, g, low, high) for c, g in pairs}
    if rec.kind == "summary":
        return {pair: _from_summary(rec, *pair, column, *bounds[pair], quantiles) for pair in pairs}

    def summarise(pair: tuple[str, str]) -> Summary:
        stored = None
        if not exact and column == "activation" and low is None:
            stored = _from_footers(rec, *pair, *bounds[pair], quantiles)
        return stored or _summary(rec, pair[0], pair[1], column, *bounds[pair], quantiles)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return dict(zip(pairs, pool.map(summarise, pairs), strict=True))


def bounds_of(
    rec: Recording, cell: str, gate: str, low: float | None = None, high: float | None = None
) -> tuple[float, float]:
    """The saturation thresholds of a gate: `low` and `high` where given (both), else its
    nonlinearity's (`recorders.write.totals.saturation_bounds`); NaN, NaN where it has none."""
    if (low is None) != (high is None):
        raise SelectionError("give both saturation thresholds, low and high, or neither")
    if low is not None and high is not None:
        return float(low), float(high)
    found = saturation_bounds(rec.cell(cell), gate)
    return found if found is not None else (np.nan, np.nan)


class Summary(NamedTuple):
    """One gate over a recording: per unit, `left` and `right` (rows below `low`, above
    `high`: NaN where the gate does not saturate) and `n` (rows); per step of `steps`, the
    `mean` and one array per quantile, each within `within` of the exact one. `read_in_full`:
    whether every value of the gate was read for it (exact, or from a recording whose files
    carry no statistics), rather than statistics of them."""

    left: np.ndarray
    right: np.ndarray
    n: np.ndarray
    steps: np.ndarray
    mean: np.ndarray
    quantiles: list[np.ndarray]
    low: float = np.nan
    high: float = np.nan
    # how far each quantile may lie from the exact one (0: exact; from a histogram, per step)
    within: np.ndarray | float = 0.0
    read_in_full: bool = False

    def saturated(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The units with rows, and their fractions of rows below `low` and above `high`
        (NaN for a gate that does not saturate)."""
        units = np.flatnonzero(self.n)
        if np.isnan(self.low):
            nothing = np.full(len(units), np.nan)
            return units, nothing, nothing
        return units, self.left[units] / self.n[units], self.right[units] / self.n[units]


def _summary(
    rec: Recording,
    cell: str,
    gate: str,
    column: str,
    low: float,
    high: float,
    quantiles: Sequence[float],
) -> Summary:
    left = right = n = np.zeros(0, np.int64)
    by_step: dict[int, list[np.ndarray]] = {}
    kept = 0  # values held for the quantiles: within the memory budget, as every read is
    for block in rec.gate_blocks(cell, gate, column):
        v = block.values
        rows = v.shape[0] * v.shape[1] if block.present is None else int(block.present.sum())
        # against the thresholds as float64: a Python float is compared in the values' float32,
        # which counts a value equal to float32(0.12) (below 0.12) as not below it
        left = _padded_sum(left, (v < np.float64(low)).sum(axis=(0, 1)))
        right = _padded_sum(right, (v > np.float64(high)).sum(axis=(0, 1)))
        n = _padded_sum(n, np.full(v.shape[2], rows, np.int64))
        for j, step in enumerate(block.steps):
            at = v[:, j, :] if block.present is None else v[block.present[:, j], j, :]
            if at.size:
                kept += at.size
                rec.allot(
                    (kept,),
                    4,
                    f"the values of gate {gate} of {cell} by step, read in full (its files carry no statistics)",
                )
                by_step.setdefault(int(step), []).append(at.reshape(-1))
    steps = np.array(sorted(by_step), dtype=np.int32)
    mean = np.empty(len(steps))
    qs = np.empty((len(quantiles), len(steps)))
    for k, step in enumerate(steps):
        values = np.concatenate(by_step.pop(int(step)))
        # as pandas does, NaN values count in n but not in the statistics
        values = values[~np.isnan(values)]
        if not values.size:
            mean[k], qs[:, k] = np.nan, np.nan
            continue
        # (infinite values: a mean or quantile of inf, or NaN between -inf and inf, said as such)
        with np.errstate(invalid="ignore", over="ignore"):
            mean[k] = values.mean(dtype=np.float64)
            if len(quantiles):
                qs[:, k] = np.quantile(values.astype(np.float64), quantiles)
    return Summary(left, right, n, steps, mean, list(qs), low, high, read_in_full=True)


def _from_footers(
    rec: Recording, cell: str, gate: str, low: float, high: float, quantiles: Sequence[float]
) -> Summary | None:
    """A gate's `Summary` from the statistics its part files carry (None where a file has
    none): counts and means as from the values, the quantiles within one bin."""
    stats = rec.activation_statistics(cell, gate)
    if stats is None:
        return None
    saturates = not np.isnan(low)
    if saturates and (stats.low, stats.high) != (low, high):
        return None  # counted against other thresholds (a description edited since)
    left = right = np.zeros(stats.units, np.int64)
    if saturates and stats.below is not None and stats.above is not None:
        left, right = stats.below, stats.above
    held = stats.count > 0  # the steps with values (a file's steps with none are listed too)
    return Summary(
        left,
        right,
        np.full(stats.units, stats.rows, np.int64),
        stats.steps[held].astype(np.int32),
        stats.mean[held],
        [stats.quantile(q)[held] for q in quantiles],
        low,
        high,
        np.ldexp(1.0, stats.exponent[held]),
    )


def _from_summary(
    rec: Recording,
    cell: str,
    gate: str,
    column: str,
    low: float,
    high: float,
    quantiles: Sequence[float],
) -> Summary:
    """A gate's `Summary` from a summary recording's statistics: the counts and means as a
    full recording of the same sequences gives them; each quantile the top of the bin holding
    the exact (inverted-CDF) one, at most a bin's width above it."""
    stats = rec.statistics
    _, per_unit = stats.stats(cell, "gates", gate, column, "unit")
    steps, per_step = stats.stats(cell, "gates", gate, column, "step")
    if np.isnan(low) or (low, high) == (stats.low, stats.high):
        left, right = per_unit.below, per_unit.above
    else:  # thresholds at edges of the histogram (a tanh gate's -0.9 and 0.9): counted from it
        at = [np.flatnonzero(np.isclose(per_unit.edges, t, rtol=0, atol=1e-9)) for t in (low, high)]
        if not (len(at[0]) and len(at[1])):
            raise SelectionError(
                f"{rec.path} is a summary that counted values below {stats.low:g} and above {stats.high:g}, "
                f"and gate {gate} of {cell} in bins of edges {per_unit.edges[0]:g} to {per_unit.edges[-1]:g}; "
                f"{low:g} and {high:g} are neither: ask for those thresholds, or summarise again with "
                f"--saturation {low:g},{high:g}"
            )
        # slot 0 holds values below the first edge, slot k + 1 those from edge k to edge k + 1
        left = per_unit.histogram[:, : at[0][0] + 1].sum(axis=1)
        right = per_unit.histogram[:, at[1][0] + 1 :].sum(axis=1)
    return Summary(
        left,
        right,
        per_unit.count,
        steps.astype(np.int32),
        per_step.mean,
        [per_step.quantile(q) for q in quantiles],
        low,
        high,
        float(np.diff(per_step.edges).max()),
    )


def _padded_sum(total: np.ndarray, part: np.ndarray) -> np.ndarray:
    """total + part, the shorter padded with zeros (blocks may end before the last unit)."""
    if len(part) > len(total):
        total, part = part, total
    total = total.astype(np.int64, copy=True)
    total[: len(part)] += part
    return total


def _frame(parts: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    """The per-gate frames as one, `cell` and `gate` categoricals as gate_frame gives them."""
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
    return out.astype({"cell": "category", "gate": "category"})[columns]


def time_courses(
    rec: Recording,
    cell: str,
    gate: str,
    examples: Sequence[int],
    units: Sequence[int] | None = None,
    column: str = "activation",
) -> pd.DataFrame:
    """example, step, unit, value: each chosen unit along the steps of each chosen example."""
    lo, hi = min(examples), max(examples) + 1
    df = rec.gate_frame([cell], [gate], examples=(lo, hi), units=units, columns=[column])
    df = df[df["example"].isin(list(examples))]
    return (
        df[["example", "step", "unit", column]]
        .rename(columns={column: "value"})
        .sort_values(["example", "unit", "step"], ignore_index=True)
    )


def top_positions(
    rec: Recording,
    cell: str,
    gate: str,
    unit: int,
    k: int = 10,
    lowest: bool = False,
    column: str = "activation",
    examples: Range | None = None,
) -> pd.DataFrame:
    """The k (example, step) positions where `unit` of `gate` is highest (or lowest): example,
    step, value, rank; ties the earliest example and step first, NaN left out. A unit's
    highest activations over the whole recording (k at most `tops.K`) come from what the gate's
    part files carry (`Recording.top_activations`: one merged statistics file a shard, not a
    value read); anything else, or a recording whose files carry none, reads the unit's values."""
    if column == "activation" and not lowest and examples is None and rec.kind == "full":
        tops = rec.top_activations(cell, gate)
        found = tops.of(unit, k) if tops is not None and 0 <= unit < tops.units else None
        if found is not None:
            value, example, step = found
            return pd.DataFrame(
                {
                    "example": example.astype(np.int64),
                    "step": step.astype(np.int32),
                    "value": value.astype(np.float32),
                    "rank": np.arange(1, len(value) + 1),
                }
            )
    df = rec.gate_frame([cell], [gate], examples=examples, units=[unit], columns=[column])
    df = df[df[column].notna()].sort_values(
        [column, "example", "step"], ascending=[lowest, True, True], kind="stable"
    )
    out = (
        df.head(k)[["example", "step", column]]
        .rename(columns={column: "value"})
        .reset_index(drop=True)
    )
    out["rank"] = np.arange(1, len(out) + 1)
    return out


def label_correlation(
    rec: Recording,
    cell: str,
    gate: str,
    labels: np.ndarray,
    column: str = "activation",
    examples: Range | None = None,
) -> pd.DataFrame:
    """unit, correlation (Pearson), n: each unit's values against a per-step label.

    `labels` is [examples, steps] (rows of the inputs, input positions), e.g. "inside a
    quote" per character; positions without a recorded row are left out.
    """
    labels = np.asarray(labels, dtype=np.float64)
    if labels.ndim != 2:
        raise SelectionError(
            f"labels: expected an [examples, steps] array, given shape {list(labels.shape)}"
        )
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
        r = (
            np.corrcoef(x[ok], y[ok])[0, 1]
            if ok.sum() > 1 and x[ok].std() > 0 and y[ok].std() > 0
            else np.nan
        )
        rows.append((unit, r, int(ok.sum())))
    return pd.DataFrame(rows, columns=["unit", "correlation", "n"])


def dominant_part(
    rec: Recording,
    cell: str,
    gate: str,
    units: Sequence[int] | None = None,
    steps: Range | None = None,
    examples: Range | None = None,
) -> pd.DataFrame:
    """unit, part, mean, mean_abs, share, rows, dominant: per unit of `gate`, how much each
    part of its preactivation contributes over the steps `steps` ([start, stop)) of
    `examples`, by mean absolute value; `dominant` marks each unit's largest part. Parts
    the cell does not have (all null) are left out. Needs a recording made with
    `--values ...,contributions`."""
    df = rec.gate_frame([cell], [gate], steps, examples, units, columns=list(PARTS))
    return part_shares(df, by=["unit"])
