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
        return np.array([s.position for s in self.cell.steps], dtype=np.int32)

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
        values = session.run(self.tensors, feed_dict=feed_dict)
        return self.assemble(values, examples)

    def assemble(self, values: Sequence[np.ndarray], examples: np.ndarray | None = None) -> Trace:
        """Build a Trace from the fetched values, in the order of `self.tensors`."""
        cells = {}
        batch = None
        for cell, layout in zip(self.cells, self._layout):
            n_steps, n_gates, units = len(cell.steps), len(cell.gates), cell.units
            batch = values[layout[0][0][0]].shape[0]
            pre = np.empty((batch, n_steps, n_gates, units), np.float32)
            act = np.empty_like(pre)
            states = {
                s: np.empty((batch, n_steps, values[i].shape[1]), np.float32) for s, i in zip(cell.spec.states, layout[0][2])
            }
            for t, (pre_slots, act_slots, state_slots) in enumerate(layout):
                pre[:, t] = _blocks(cell, [values[i] for i in pre_slots], batch)
                act[:, t] = _blocks(cell, [values[i] for i in act_slots], batch)
                for s, i in zip(cell.spec.states, state_slots):
                    states[s][:, t] = values[i]
            cells[cell.name] = CellTrace(cell, pre, act, states)
        if examples is None:
            examples = np.arange(batch or 0, dtype=np.int64)
        return Trace(cells, np.asarray(examples, dtype=np.int64))


def _blocks(cell: Cell, parts: list[np.ndarray], batch: int) -> np.ndarray:
    """Concatenate per-step tensors along axis 1 and cut them into [batch, gates, units]."""
    joined = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
    want = len(cell.gates) * cell.units
    if joined.shape != (batch, want):
        raise GraphPatternError(
            f"cell {cell.name}: expected gate values of shape [{batch}, {want}], fetched {list(joined.shape)}"
        )
    return joined.reshape(batch, len(cell.gates), cell.units)
