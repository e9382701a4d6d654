"""A TensorFlow Lite file's recurrent ops: captured by the interpreter, replayed in numpy.

A `LitePlan` runs the file's own interpreter (`tracer.load.tflite.LiteModel.interpreter`:
builtin kernels, every tensor kept) on a batch, as many rows an invocation as the file's
inputs hold (row by row for the usual batch-1 file), each op's state reset before every invocation: a fused sequence
op keeps its state between invocations, and every row is an independent sequence from
the state the file starts it from. For each recurrent op it reads what the op received
(its input sequence and starting states) and returned (its outputs and final states),
replays the op's cell in numpy from its weights (`tracer.values.replay`, as
`tracer.find.lite` holds them) and checks the replay against the op's own outputs and
final states: the gates are recorded only where they reproduce what the interpreter
computed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tracer.cells.found import LiteCell
from tracer.load.keras import KerasInput
from tracer.load.tflite import LiteModel
from tracer.values.replay import check, replay
from tracer.values.replayed import ReplayedPlan, Result

__all__ = ["LitePlan"]


class LitePlan(ReplayedPlan[LiteCell]):
    """How a batch becomes gate values for `cells` of a TensorFlow Lite file (see the module
    docstring); `steps` keeps a [start, stop) window of input positions."""

    def __init__(
        self,
        model: LiteModel,
        cells: Sequence[LiteCell],
        steps: tuple[int | None, int | None] = (None, None),
    ):
        super().__init__(steps)
        self.model = model
        self.cells = list(cells)
        self._interpreter: Any = None

    def _ready(self) -> Any:
        """The interpreter, its tensors allocated."""
        if self._interpreter is None:
            self._interpreter = self.model.interpreter()
            self._interpreter.allocate_tensors()
        return self._interpreter

    def fetch(self, batch: Mapping[KerasInput, np.ndarray]) -> list[Result]:
        """Run the interpreter over `batch` and replay every op's cell; one `Result` per cell."""
        arrays = [np.asarray(batch[i]) for i in self.model.inputs]
        n = arrays[0].shape[0]
        per, it = self.model.batch, self._ready()
        seen: dict[str, dict[str, list[np.ndarray]]] = {c.name: {} for c in self.cells}
        for start in range(0, n, per):
            rows = [a[start : start + per] for a in arrays]
            real = rows[0].shape[0]
            it.reset_all_variables()
            # what each op starts from, as the interpreter holds it before the run
            starts = {
                c.name: {s: it.get_tensor(t) for s, t in c.initial.items()} for c in self.cells
            }
            for index, a in zip(self.model.input_tensors, rows, strict=True):
                if real < per:  # the last rows, filled to the file's batch with zeros
                    a = np.concatenate([a, np.zeros((per - real, *a.shape[1:]), a.dtype)])
                it.set_tensor(index, np.ascontiguousarray(a, it.get_tensor(index).dtype))
            it.invoke()
            for c in self.cells:
                got = seen[c.name]
                for what, value in (
                    ("inputs", self._batch_major(c, it.get_tensor(c.inputs))),
                    ("outputs", self._batch_major(c, it.get_tensor(c.outputs))),
                    *((f"initial {s}", v) for s, v in starts[c.name].items()),
                    # a state the op keeps between invocations holds its final state now
                    *(
                        (f"final {s}", it.get_tensor(t))
                        for s, t in c.initial.items()
                        if self._kept(t)
                    ),
                ):
                    got.setdefault(what, []).append(
                        np.broadcast_to(value, (per, *value.shape[1:]))[:real]
                    )
        return [
            self._replay(c, {k: np.concatenate(v) for k, v in seen[c.name].items()})
            for c in self.cells
        ]

    def _kept(self, tensor: int) -> bool:
        return bool(self.model.main.tensors[tensor].isVariable)

    @staticmethod
    def _batch_major(cell: LiteCell, a: np.ndarray) -> np.ndarray:
        return np.swapaxes(a, 0, 1) if cell.time_major else a

    @staticmethod
    def _replay(cell: LiteCell, seen: dict[str, np.ndarray]) -> Result:
        """One op's cell replayed over what the op received, checked against what it returned."""
        states = cell.spec.states
        got = replay(
            cell.kind,
            cell.arrays,
            seen["inputs"],
            {s: seen[f"initial {s}"] for s in states},
            activation=cell.activation,
            recurrent_activation=cell.recurrent_activation,
            cell_clip=cell.cell_clip,
            proj_clip=cell.proj_clip,
        )
        final = {s: seen[f"final {s}"] for s in states if f"final {s}" in seen}
        check(cell.name, got, seen["outputs"], final)
        return Result(got, None)
