"""What a plan whose every cell is replayed in numpy hands out: `ReplayedPlan`, the
`ValuePlan` accessors over one `Result` per cell (a `tracer.values.replay.Replayed` and
the mask of the rows to write).

Two plans are made of it: `tracer.values.keras.KerasPlan` (a Keras model's layers,
captured in one call of the model) and `tracer.values.lite.LitePlan` (a TensorFlow Lite
file's recurrent ops, captured by its interpreter). Each fills `cells` and the step
window and makes the `Result`s of a batch; a backward cell's loop step t read input
position steps - 1 - t, and its values are handed out by input position. A batch's
`Results` also hold what the model returned for each output `--outputs` named
(`tracer.values.returned`), handed out as a `FetchPlan` hands out a graph's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

import numpy as np

from tracer.cells.found import KerasCell, LiteCell
from tracer.values.parts import plan_parts
from tracer.values.plan import Read
from tracer.values.replay import Replayed
from tracer.values.weights import gate_weights

if TYPE_CHECKING:  # imports TensorFlow: a .tflite file is inspected and replayed without it
    from tracer.values.returned import Returned

__all__ = ["ReplayedPlan", "Result", "Results"]

_Cell = TypeVar("_Cell", KerasCell, LiteCell)


@dataclass
class Result:
    """One cell replayed over one batch; `mask` [examples, steps] in input position order, or None."""

    replayed: Replayed
    mask: np.ndarray | None


class Results(list[Result]):
    """A batch's values: one `Result` per cell, and what the model returned for each output
    asked for (`returned`, as the model returned it)."""

    def __init__(self, results: Sequence[Result], returned: Sequence[np.ndarray] = ()):
        super().__init__(results)
        self.returned = list(returned)


class ReplayedPlan(Generic[_Cell]):
    """The `ValuePlan` accessors of a plan whose values are one `Result` per cell, and the
    model's outputs `returned` names (`--outputs`: `tracer.values.returned`)."""

    cells: list[_Cell]

    def __init__(
        self,
        steps: tuple[int | None, int | None] = (None, None),
        returned: Sequence[Returned] = (),
    ):
        self._steps = slice(*steps)
        self.returned = tuple(returned)
        self.outputs = tuple(r.name for r in self.returned)

    def _returned(self, values: Sequence[Result], k: int) -> np.ndarray:
        """What the model returned for output number `k`, as it returned it."""
        if not isinstance(values, Results) or len(values.returned) != len(self.returned):
            raise IndexError(f"output {k}: these values hold no outputs")
        return values.returned[k]

    def output_steps(self, values: Sequence[Result], k: int) -> tuple[np.ndarray, bool]:
        """The steps of output number `k` that `output` gives (0 where it is not a sequence),
        and whether they run along the cells' steps: as many as every cell ran. Those are cut
        as the cells' are: the window of steps keeps the same positions, and the sequences'
        lengths apply to them."""
        told = self.returned[k].told
        length = told.step_count(self._returned(values, k))
        along = told.steps is not None and length > 1
        along = along and all(r.replayed.preactivation.shape[1] == length for r in values)
        positions = np.arange(length, dtype=np.int32)
        return (positions[self._steps] if along else positions), along

    def output(self, values: Sequence[Result], k: int, rows: slice = slice(None)) -> np.ndarray:
        """Output number `k` for the examples `rows`: [examples, steps, units] float32 (one
        step where it is not a sequence), the steps `output_steps` gives. SelectionError
        where it does not hold a batch's examples where they were told, or holds what float32
        cannot."""
        returned = self.returned[k]
        value = returned.told.rows(
            returned.take(self._returned(values, k)), self.batch_of(values), rows
        )
        positions, along = self.output_steps(values, k)
        if along and len(positions) < value.shape[1]:
            value = np.ascontiguousarray(value[:, positions])
        return value

    def batch_of(self, values: Sequence[Result]) -> int:
        """How many examples the replayed `values` hold."""
        return values[0].replayed.preactivation.shape[0]

    def _by_position(self, cell: _Cell, a: np.ndarray) -> np.ndarray:
        """[examples, loop steps, ...] as input positions, in the step window."""
        if cell.backward:
            a = a[:, ::-1]
        return np.ascontiguousarray(a[:, self._steps])

    def steps(self, values: Sequence[Result], cell: int) -> np.ndarray:
        n = values[cell].replayed.preactivation.shape[1]
        return np.arange(n, dtype=np.int32)[self._steps]

    def lengths(
        self, values: Sequence[Result], cell: int, keep: int | None, given: np.ndarray | None
    ) -> np.ndarray | None:
        """Which rows to write: the cell's mask ([examples, steps] booleans) where it had
        one, and the `given` lengths (rows at or past them are left out)."""
        mask = values[cell].mask
        if mask is None:
            return given
        mask = mask[:keep, self._steps]
        if given is not None:
            mask = mask & (self.steps(values, cell)[None, :] < np.asarray(given)[:, None])
        return mask

    def gate(
        self,
        values: Sequence[Result],
        cell: int,
        gate: int,
        column: str,
        rows: slice = slice(None),
    ) -> np.ndarray:
        """One gate's `preactivation` or `activation` of the examples `rows`: a new [examples, steps, units] array."""
        return self._by_position(
            self.cells[cell], getattr(values[cell].replayed, column)[rows, :, gate]
        )

    def read(self, values: Sequence[Result], cell: int, rows: slice = slice(None)) -> Read:
        """What cell number `cell` read at each step (the replay's input and carried states), for the examples `rows`."""
        c, got = self.cells[cell], values[cell].replayed
        previous = {s: self._by_position(c, got.previous(s)[rows]) for s in c.spec.states}
        return Read(self._by_position(c, got.kept_inputs()[rows]), previous["h"], previous.get("c"))

    def parts(
        self, values: Sequence[Result], cell: int, gate: int, rows: slice = slice(None)
    ) -> dict[str, np.ndarray | None]:
        """The parts of gate number `gate`'s preactivation for the examples `rows` (`tracer.values.parts`)."""
        c = self.cells[cell]
        return plan_parts(self, values, cell, gate, gate_weights(c, dict(c.arrays)), rows)

    def state(
        self, values: Sequence[Result], cell: int, state: str, rows: slice = slice(None)
    ) -> np.ndarray:
        """One state (`c` or `h`) of the examples `rows`: a new [examples, steps, width] array."""
        return self._by_position(self.cells[cell], values[cell].replayed.states[state][rows])
