"""A batch's values as numpy arrays, per cell: what `tracer.trace` returns.

    preactivation, activation   [examples, steps, gates, units]   float32
    states[name]                [examples, steps, width]          float32

with `steps` ordered by input position; `assemble` builds one from any value plan
(`tracer.values.plan.ValuePlan`), `frame` gives a cell's long table.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from recorders.read.frames import gate_frame
from tracer.cells.found import AnyCell
from tracer.values.plan import ValuePlan

__all__ = ["Trace", "CellTrace", "assemble"]


@dataclass
class CellTrace:
    """One cell's recorded values for one batch."""

    cell: AnyCell
    preactivation: np.ndarray
    activation: np.ndarray
    states: dict[str, np.ndarray]
    positions: np.ndarray  # the input position of each step

    @property
    def steps(self) -> np.ndarray:
        return self.positions

    def __repr__(self) -> str:
        examples, steps, gates, units = self.activation.shape
        return (
            f"CellTrace({self.cell.name!r}, {examples} examples x {steps} steps x gates "
            f"{', '.join(self.cell.gates) or 'none'} x {units} units, states {', '.join(self.states) or 'none'})"
        )

    def frame(self, examples: np.ndarray | None = None) -> pd.DataFrame:
        """The gates as a long frame: example, step, gate, unit, preactivation, activation."""
        if examples is None:
            examples = np.arange(self.preactivation.shape[0])
        return gate_frame(
            examples, self.steps, self.cell.gates, self.preactivation, self.activation
        )


@dataclass
class Trace:
    """The values of every traced cell for one batch, by cell name."""

    cells: dict[str, CellTrace]
    examples: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __getitem__(self, name: str) -> CellTrace:
        try:
            return self.cells[name]
        except KeyError:
            raise KeyError(
                f"no cell {name!r} in this trace; cells: {', '.join(self.cells)}"
            ) from None

    def __iter__(self) -> Iterator[CellTrace]:
        return iter(self.cells.values())

    def __repr__(self) -> str:
        """What it holds, not its numbers (a batch's arrays printed ran to 33 KB)."""
        shown = "; ".join(repr(c) for c in self.cells.values())
        return f"Trace({len(self.examples)} examples: {shown})"

    def frame(self, cell: str | None = None) -> pd.DataFrame:
        """The long gate table of one cell, or of all cells with a `cell` column first."""
        if cell is not None:
            return self[cell].frame(self.examples)
        frames = []
        for name, ct in self.cells.items():
            df = ct.frame(self.examples)
            df.insert(0, "cell", name)
            frames.append(df)
        df = pd.concat(frames, ignore_index=True)
        df["cell"] = df["cell"].astype("category")
        return df


def assemble(plan: ValuePlan, values: Sequence, examples: np.ndarray | None = None) -> Trace:
    """A Trace from what `plan.fetch` returned (a FetchPlan's or a Keras plan's).

    `preactivation` and `activation` are [examples, steps, gates, units] views of
    gate-major storage, in which each gate's [examples, steps, units] block is contiguous.
    """
    cells = {}
    batch = 0
    for k, cell in enumerate(plan.cells):
        gates = range(len(cell.gates))
        # gate-major: [gates, examples, steps, units] (no gates: a cell of your own that
        # applies no nonlinearity, whose states are all it has)
        empty = np.zeros(
            (0, plan.batch_of(values), len(plan.steps(values, k)), cell.units), np.float32
        )
        pre = (
            np.stack([plan.gate(values, k, g, "preactivation") for g in gates]) if gates else empty
        )
        act = np.stack([plan.gate(values, k, g, "activation") for g in gates]) if gates else empty
        states = {s: plan.state(values, k, s) for s in cell.spec.states}
        cells[cell.name] = CellTrace(
            cell, np.moveaxis(pre, 0, 2), np.moveaxis(act, 0, 2), states, plan.steps(values, k)
        )
        batch = pre.shape[1]
    if examples is None:
        examples = np.arange(batch, dtype=np.int64)
    return Trace(cells, np.asarray(examples, dtype=np.int64))
