"""What every value plan offers: the interface the recording loop, the summary and `trace`
read a batch's values through.

A plan turns one batch of feeds into what it fetched or computed (`values`, a list whose
layout only the plan knows), then hands out each cell's arrays from it. Two plans
implement it: `tracer.values.fetch.FetchPlan` (a graph's cells: one `Session.run`, with the
loops' cells emitted or replayed) and `tracer.values.keras.KerasPlan` (a Keras model's
layers: one call of the model, every layer replayed). Cells are addressed by their number
in `cells`, gates by their number in the cell's spec (`tracer.cells.kinds`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tracer.cells.found import AnyCell

__all__ = ["ValuePlan", "Read"]


@dataclass(frozen=True)
class Read:
    """What a cell read at each recorded step, [examples, steps, ...] by input position:
    its input, its previous output state, and (LSTM cells) its previous cell state."""

    x: np.ndarray
    h_prev: np.ndarray
    c_prev: np.ndarray | None = None


class ValuePlan(Protocol):
    """The arrays of one batch's `values`, per cell (see the module docstring)."""

    @property
    def cells(self) -> Sequence[AnyCell]:
        """The cells whose values the plan gives, in order."""
        ...

    @property
    def outputs(self) -> Sequence[str]:
        """The model's own outputs the plan fetches too (tensor names; none but a graph's)."""
        ...

    def output(self, values: Sequence[Any], k: int, rows: slice = ...) -> np.ndarray:
        """Output number `k`, [examples, steps, units] (one step where it is not a sequence),
        the steps `output_steps` gives."""
        ...

    def output_steps(self, values: Sequence[Any], k: int) -> tuple[np.ndarray, bool]:
        """The positions of output number `k`'s steps, and whether they run along the cells'
        (which the sequences' lengths then cut)."""
        ...

    def batch_of(self, values: Sequence[Any]) -> int:
        """How many examples `values` hold."""
        ...

    def steps(self, values: Sequence[Any], cell: int) -> np.ndarray:
        """The input positions cell number `cell` has values for, in order."""
        ...

    def lengths(
        self, values: Sequence[Any], cell: int, keep: int | None, given: np.ndarray | None
    ) -> np.ndarray | None:
        """Which rows to write: per-example lengths, an [examples, steps] mask, or None (all)."""
        ...

    def gate(
        self, values: Sequence[Any], cell: int, gate: int, column: str, rows: slice = ...
    ) -> np.ndarray:
        """One gate's `preactivation` or `activation`, [examples, steps, units]."""
        ...

    def state(self, values: Sequence[Any], cell: int, state: str, rows: slice = ...) -> np.ndarray:
        """One state (`c` or `h`), [examples, steps, width]."""
        ...

    def read(self, values: Sequence[Any], cell: int, rows: slice = ...) -> Read:
        """What the cell read at each step: its input and previous states."""
        ...

    def parts(
        self, values: Sequence[Any], cell: int, gate: int, rows: slice = ...
    ) -> dict[str, np.ndarray | None]:
        """The parts of one gate's preactivation (`tracer.values.parts`)."""
        ...
