"""The one-run fetch plan: every gate of every cell at every step in one `Session.run`.

A plan lists each tensor once (a tensor shared by several uses is fetched once) and
remembers, per cell and step, which fetched values make up its preactivations,
activations and states. `run` returns a `Trace`: per cell, numpy arrays

    preactivation, activation   [examples, steps, gates, units]   float32
    states[name]                [examples, steps, width]          float32

with `steps` ordered by input position (see `tracer.graph.Step.position`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from recorders.errors import GraphPatternError
from recorders.long import gate_frame
from tracer._tf import tf, v1
from tracer.graph import Cell

__all__ = ["FetchPlan", "CellTrace", "Trace"]


@dataclass
class CellTrace:
    """One cell's recorded values for one batch."""

    cell: Cell
    preactivation: np.ndarray
    activation: np.ndarray
    states: dict[str, np.ndarray]

    @property
    def steps(self) -> np.ndarray:
        return self.cell.positions

    def frame(self, examples: np.ndarray | None = None) -> pd.DataFrame:
        """The gates as a long frame: example, step, gate, unit, preactivation, activation."""
        if examples is None:
            examples = np.arange(self.preactivation.shape[0])
        return gate_frame(examples, self.steps, self.cell.gates, self.preactivation, self.activation)


@dataclass
class Trace:
    """The values of every traced cell for one batch, by cell name."""

    cells: dict[str, CellTrace]
    examples: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __getitem__(self, name: str) -> CellTrace:
        try:
            return self.cells[name]
        except KeyError:
            raise KeyError(f"no cell {name!r} in this trace; cells: {', '.join(self.cells)}") from None

    def __iter__(self) -> Iterator[CellTrace]:
        return iter(self.cells.values())

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


class FetchPlan:
    """The tensors to fetch for `cells`, and how to put the fetched values back together."""

    def __init__(self, graph: tf.Graph, cells: Sequence[Cell]):
        self.cells = list(cells)
        self._names: list[str] = []
        slots: dict[str, int] = {}

        def slot(name: str) -> int:
            if name not in slots:
                slots[name] = len(self._names)
                self._names.append(name)
            return slots[name]

        # Per cell and step: slots of the preactivation tensors, activation tensors, states.
        self._layout = [
            [
                (
                    [slot(n) for n in step.preactivation],
                    [slot(n) for n in step.activation],
                    [slot(n) for n in step.states],
                )
                for step in cell.steps
            ]
            for cell in self.cells
        ]
        self.tensors = [graph.get_tensor_by_name(n) for n in self._names]

    def __len__(self) -> int:
        return len(self.tensors)

    def run(self, session: v1.Session, feed_dict: Mapping[Any, Any] | None = None, examples: np.ndarray | None = None) -> Trace:
        """Fetch everything in one `session.run` and assemble a Trace."""
        return self.assemble(self.fetch(session, feed_dict), examples)

    def fetch(self, session: v1.Session, feed_dict: Mapping[Any, Any] | None = None) -> list[np.ndarray]:
        """The raw fetched values, in the order of `self.tensors` (see `gate` and `state`)."""
        return session.run(self.tensors, feed_dict=feed_dict)

    def gate(self, values: Sequence[np.ndarray], cell: int, gate: int, column: str, keep: int | None = None) -> np.ndarray:
        """One gate's `preactivation` or `activation` of cell number `cell`: a new
        contiguous [examples, steps, units] array of the first `keep` examples."""
        c = self.cells[cell]
        units, which = c.units, 0 if column == "preactivation" else 1
        layout = self._layout[cell]
        first = self._piece(c, [values[i] for i in layout[0][which]], gate)
        out = np.empty((first[:keep].shape[0], len(layout), units), np.float32)
        for t, slots in enumerate(layout):
            out[:, t] = self._piece(c, [values[i] for i in slots[which]], gate)[:keep]
        return out

    def state(self, values: Sequence[np.ndarray], cell: int, state: str, keep: int | None = None) -> np.ndarray:
        """One state (`c` or `h`) of cell number `cell`: a new [examples, steps, width] array."""
        k = self.cells[cell].spec.states.index(state)
        return np.stack([values[slots[2][k]][:keep] for slots in self._layout[cell]], axis=1)

    @staticmethod
    def _piece(cell: Cell, parts: list[np.ndarray], gate: int) -> np.ndarray:
        """Gate number `gate`'s [batch, units] columns among one step's fetched tensors.

        `parts` hold the step's gates side by side, in gate order: one [batch, gates *
        units] tensor (a split's input), one [batch, units] tensor per gate (a split's
        outputs), or a mix (GRUCell: r and u together, then c).
        """
        units, at = cell.units, 0
        want = gate * units
        for part in parts:
            width = part.shape[1] if part.ndim == 2 else -1
            if at <= want and want + units <= at + width:
                return part[:, want - at : want - at + units]
            at += max(width, 0)
        widths = [list(p.shape) for p in parts]
        raise GraphPatternError(
            f"cell {cell.name}: expected gate values of width {len(cell.gates)} x {units} side by side, fetched shapes {widths}"
        )

    def assemble(self, values: Sequence[np.ndarray], examples: np.ndarray | None = None) -> Trace:
        """Build a Trace from the fetched values, in the order of `self.tensors`.

        `preactivation` and `activation` are [examples, steps, gates, units] views of
        gate-major storage, in which each gate's [examples, steps, units] block is
        contiguous.
        """
        cells = {}
        batch = 0
        for k, cell in enumerate(self.cells):
            gates = range(len(cell.gates))
            pre = np.stack([self.gate(values, k, g, "preactivation") for g in gates])
            act = np.stack([self.gate(values, k, g, "activation") for g in gates])
            states = {s: self.state(values, k, s) for s in cell.spec.states}
            cells[cell.name] = CellTrace(cell, np.moveaxis(pre, 0, 2), np.moveaxis(act, 0, 2), states)
            batch = pre.shape[1]
        if examples is None:
            examples = np.arange(batch, dtype=np.int64)
        return Trace(cells, np.asarray(examples, dtype=np.int64))
