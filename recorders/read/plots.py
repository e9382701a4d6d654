"""Four plots of a recording (matplotlib, the optional `plots` extra); each returns its figure.

- `gate_heatmap`: one gate of one cell for one example, steps x units;
- `saturation_scatter`: left- vs right-saturation of every unit, one panel per gate
  (as in Karpathy, Johnson and Fei-Fei 2015, figure 3);
- `step_band`: the per-step mean of a gate with a quantile band;
- `gate_parts`: what drives one unit of a gate along the steps of one example: its
  preactivation's parts stacked (recordings made with `--values ...,contributions`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

from recorders.errors import SelectionError, install_hint
from recorders.read.analysis import quantile_column, saturation, step_stats
from recorders.read.reader import Recording
from recorders.write.columns import PARTS

__all__ = ["gate_heatmap", "saturation_scatter", "step_band", "gate_parts"]


def _pyplot():
    """pyplot; outside a Jupyter kernel on the Agg backend (no display needed). In a kernel the
    backend is left as it is (inline by default), so that a cell's figures show."""
    try:
        import matplotlib

        if "ipykernel" not in sys.modules:
            matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        raise SelectionError(f"plots need matplotlib: {install_hint('plots')}") from None
    return plt


def gate_heatmap(rec: Recording, cell: str, gate: str, example: int, column: str = "activation"):
    """Steps (rows) x units (columns) of one gate for one example."""
    plt = _pyplot()
    values = rec.gate_array(cell, gate, column, examples=(example, example + 1))
    if values.size == 0:
        raise SelectionError(f"example {example} has no rows of {cell} gate {gate} in {rec.path}")
    from matplotlib.ticker import MaxNLocator

    steps = rec.steps(cell)  # the input positions recorded (a --steps window starts later than 0)
    first, last = int(steps[0]), int(steps[0]) + values.shape[1] - 1
    fig, ax = plt.subplots(figsize=(6, 4))
    # each cell centred on its unit and step
    extent = (-0.5, values.shape[2] - 0.5, last + 0.5, first - 0.5)
    image = ax.imshow(
        values[0], aspect="auto", cmap="viridis", interpolation="nearest", extent=extent
    )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(
        xlabel="unit",
        ylabel="step (input position)",
        title=f"{cell} {gate} {column}, example {example}",
    )
    fig.colorbar(image, ax=ax)
    return fig


def saturation_scatter(rec: Recording, cell: str, gates: Sequence[str] | None = None):
    """Fraction of left- vs right-saturated activations of each unit (near the ends of each
    gate's nonlinearity: `analysis.saturation`), a panel per gate."""
    plt = _pyplot()
    sat = saturation(rec, [cell], gates)
    labels = list(gates) if gates else rec.gates(cell)
    fig, axes = plt.subplots(
        1, len(labels), figsize=(3 * len(labels), 3), squeeze=False, sharex=True, sharey=True
    )
    for ax, gate in zip(axes[0], labels, strict=True):
        part = sat[sat["gate"] == gate]
        ax.scatter(part["left"], part["right"], s=12, alpha=0.7)
        ax.plot([0, 1], [1, 0], color="grey", lw=0.5)
        low, high = (part["low"].iloc[0], part["high"].iloc[0]) if len(part) else (np.nan, np.nan)
        shown = f"< {low:g} | > {high:g}" if np.isfinite(low) else "does not saturate"
        ax.set(xlim=(0, 1), ylim=(0, 1), xlabel=f"left-saturated ({shown})", title=gate)
    axes[0][0].set_ylabel("right-saturated")
    fig.suptitle(cell)
    return fig


def step_band(
    rec: Recording,
    cell: str,
    gate: str,
    column: str = "activation",
    band: tuple[float, float] = (0.1, 0.9),
):
    """The mean of a gate per step, with the band between two quantiles."""
    plt = _pyplot()
    stats = step_stats(rec, [cell], [gate], column, quantiles=band)
    lo, hi = (quantile_column(q) for q in band)
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.fill_between(stats["step"], stats[lo], stats[hi], alpha=0.3, label=f"{lo}-{hi}")
    ax.plot(stats["step"], stats["mean"], label="mean")
    ax.set(xlabel="step", ylabel=column, title=f"{cell} {gate}")
    ax.legend()
    return fig


def gate_parts(
    rec: Recording,
    cell: str,
    gate: str,
    unit: int,
    example: int,
    steps: tuple[int | None, int | None] | None = None,
):
    """One unit of a gate along the steps of one example: the parts of its preactivation
    (input, recurrent, bias, and peephole or recurrent bias where the cell has them) as
    stacked bars, the preactivation as a line. The peephole, outside the recorded
    preactivation, is drawn beside the stack."""
    plt = _pyplot()
    df = rec.gate_frame(
        [cell], [gate], steps, (example, example + 1), [unit], columns=["preactivation", *PARTS]
    )
    if df.empty:
        raise SelectionError(
            f"example {example} has no rows of {cell} gate {gate} unit {unit} in {rec.path}"
        )
    df = df.set_index("step").sort_index()
    held = [p for p in PARTS if df[p].notna().any()]
    summed = [p for p in held if p != "peephole"]
    fig, ax = plt.subplots(figsize=(7, 3))
    x = range(len(df))
    for sign in (1, -1):  # positive parts stack up from 0, negative ones down
        base = [0.0] * len(df)
        for k, part in enumerate(summed):
            values = [v if v * sign > 0 else 0.0 for v in df[part].to_numpy()]
            ax.bar(
                x, values, bottom=base, color=f"C{k}", label=part if sign == 1 else None, width=0.6
            )
            base = [b + v for b, v in zip(base, values, strict=True)]
    if "peephole" in held:
        ax.bar(
            [i + 0.35 for i in x],
            df["peephole"],
            width=0.2,
            color="grey",
            label="peephole (not in it)",
        )
    ax.plot(x, df["preactivation"], "k.-", label="preactivation")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xticks(list(x), [str(s) for s in df.index])
    ax.set(
        xlabel="step (input position)",
        ylabel="part of the preactivation",
        title=f"{cell} {gate}, unit {unit}, example {example}",
    )
    ax.legend(fontsize="small", loc="best")
    return fig
