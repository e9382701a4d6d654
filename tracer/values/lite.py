"""A TensorFlow Lite file's recurrent ops and loops: captured by its interpreter.

A `LitePlan` runs the file's own interpreter (`tracer.load.tflite.LiteModel.interpreter`:
builtin kernels, every tensor kept) on a batch, as many rows an invocation as the file's
inputs hold (row by row for the usual batch-1 file), the ops' state reset before each: a
fused sequence op keeps its state between invocations, and every row is a sequence of its
own from the state the file starts it from. Then, for each cell:

    a fused op      what it received (its input sequence and starting states) and returned
                    (its outputs, and final states where it keeps them) are read back; its
                    cell is replayed in numpy from its weights (`tracer.values.replay`, as
                    `tracer.find.lite` holds them; a hybrid op's products as its kernel
                    computes them, `tracer.values.hybrid`; a full-integer op's every code,
                    `tracer.values.integer`) and checked against what it returned (a
                    full-integer op's, code for code)
    a WHILE loop    its cond and body run an iteration at a time, in interpreters of the file
                    with those subgraphs as the main one, from what the loop started from:
                    each gate is what its nonlinearity read and returned, each state what the
                    iteration returned; the last iteration's states are checked against the
                    loop's own (`tracer.find.lite_loops`)

Either way the gates are recorded only where they reproduce what the interpreter computed.
The main subgraph's outputs `--outputs` names (`tracer.values.returned`) are read from the
same run, each invocation's examples in turn (along the dimension that holds them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from recorders.errors import FeedError, GraphPatternError, ReplayMismatchError
from tracer.cells.found import LiteCell
from tracer.load.formats import KerasInput
from tracer.load.tflite import LiteModel
from tracer.values.hybrid import HybridProducts
from tracer.values.integer import integer_replayed
from tracer.values.replay import Replayed, check, replay
from tracer.values.replayed import ReplayedPlan, Result, Results

if TYPE_CHECKING:  # imports TensorFlow: a .tflite file is inspected and replayed without it
    from tracer.values.returned import Returned

__all__ = ["LitePlan"]


class LitePlan(ReplayedPlan[LiteCell]):
    """How a batch becomes gate values for `cells` of a TensorFlow Lite file (see the module
    docstring); `steps` keeps a [start, stop) window of input positions; `outputs` are read
    from the same run."""

    def __init__(
        self,
        model: LiteModel,
        cells: Sequence[LiteCell],
        steps: tuple[int | None, int | None] = (None, None),
        outputs: Sequence[Returned] = (),
    ):
        super().__init__(steps, outputs)
        self.model = model
        self.cells = list(cells)
        self._interpreter: Any = None
        self._loops: dict[int, Any] = {}  # the interpreters of loops' conds and bodies
        self._shapes: dict[int, dict[int, tuple]] = {}  # their inputs' shapes, by interpreter

    def _ready(self) -> Any:
        """The interpreter of the file."""
        if self._interpreter is None:
            self._interpreter = self.model.interpreter()
        return self._interpreter

    def fetch(self, batch: Mapping[KerasInput, np.ndarray]) -> Results:
        """Run the interpreter over `batch` and replay every op's cell; one `Result` per cell,
        and what the run left in each output asked for.
        Whatever the interpreter raises (a tensor it could not allocate, one it never wrote)
        is one line naming the file (`LiteModel.refused`)."""
        return self._results([np.asarray(batch[i]) for i in self.model.inputs])

    def _results(self, arrays: list[np.ndarray]) -> Results:
        """`fetch` of the arrays of the file's inputs, in their order."""
        returned: list[list[np.ndarray]] = [[] for _ in self.returned]
        try:
            seen = self._run(arrays, returned)
        except (ValueError, RuntimeError) as err:
            raise self.model.refused(err) from None
        return Results(
            [
                (self._replay if c.body is None else self._looped)(
                    c, {k: np.concatenate(v) for k, v in seen[c.name].items()}
                )
                for c in self.cells
            ],
            [
                np.concatenate(v, axis=r.told.batch)
                for v, r in zip(returned, self.returned, strict=True)
            ],
        )

    def _run(
        self, arrays: list[np.ndarray], returned: list[list[np.ndarray]]
    ) -> dict[str, dict[str, list[np.ndarray]]]:
        """What each cell's op received and returned (or each loop's iterations), by cell name;
        each invocation's rows of the outputs asked for appended to `returned`."""
        n = arrays[0].shape[0]
        per, it = self.model.batch, self._ready()
        seen: dict[str, dict[str, list[np.ndarray]]] = {c.name: {} for c in self.cells}
        for start in range(0, n, per):
            rows = [a[start : start + per] for a in arrays]
            real = rows[0].shape[0]
            it.reset_all_variables()
            # what each op starts from: a state it keeps (a variable) as the interpreter holds it
            # before the run; any other (a constant, a DEQUANTIZE's output) as the run left it
            starts = {
                c.name: {s: it.get_tensor(t) for s, t in c.initial.items() if self._kept(t)}
                for c in self.cells
            }
            for index, a in zip(self.model.input_tensors, rows, strict=True):
                if real < per:  # the last rows, filled to the file's batch with zeros
                    a = np.concatenate([a, np.zeros((per - real, *a.shape[1:]), a.dtype)])
                it.set_tensor(index, np.ascontiguousarray(a, it.get_tensor(index).dtype))
            self.model.invoke(it)
            for kept, output in zip(returned, self.returned, strict=True):  # the real rows
                kept.append(
                    np.asarray(it.get_tensor(output.index)).take(range(real), output.told.batch)
                )
            for c in self.cells:
                got = seen[c.name]
                if c.body is not None:  # a WHILE loop's cell: its body, an iteration at a time
                    for what, value in self._iterate(c, it).items():
                        got.setdefault(what, []).append(value[:real])
                    continue
                for what, value in (
                    ("inputs", self._in_order(c, self._batch_major(c, it.get_tensor(c.inputs)))),
                    ("outputs", self._outputs(c, it.get_tensor(c.outputs))),
                    *(
                        (
                            f"initial {s}",
                            starts[c.name][s] if s in starts[c.name] else it.get_tensor(t),
                        )
                        for s, t in c.initial.items()
                    ),
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
        return seen

    def tried(self) -> None:
        """Record one sequence of zeros, as `fetch` records a batch, and drop it: what
        `gatetrace inspect` runs before it calls a file's cells recordable, so that it says so
        only where a recording's own code runs (the interpreter on the file and on each loop's
        cond and body, every check against what the ops returned). One checked line where it
        does not."""
        if not self.cells:
            return
        # (from the file's own declarations: TensorFlow is not needed to try it)
        self._results(
            [np.zeros((1, *[d or 1 for d in i.shape[1:]]), i.dtype) for i in self.model.input_specs]
        )

    def _of(self, subgraph: int, values: Sequence[np.ndarray]) -> Any:
        """The interpreter of the file with `subgraph` as its main one, allocated, its inputs
        first the shapes of `values` (what the loop carries: the subgraph may declare others)."""
        if subgraph not in self._loops:
            shapes = [np.shape(v) for v in values]
            self._loops[subgraph] = self.model.interpreter(main=subgraph, shapes=shapes)
        return self._loops[subgraph]

    def _iterate(self, cell: LiteCell, it: Any) -> dict[str, np.ndarray]:
        """A WHILE loop's cell over the rows the interpreter `it` just ran: its cond and body
        run an iteration at a time from the values the loop started from, each gate's
        nonlinearity's input and output, each state and what the iteration read kept."""
        body = cell.body
        assert body is not None  # (the caller's test)
        graphs = self.model.parsed.subgraphs
        values = [it.get_tensor(int(t)) for t in self.model.main.operators[cell.op].inputs]
        run, cond = self._of(body.body, values), self._of(body.cond, values)
        kept: dict[str, list[np.ndarray]] = {"inputs": [], "preactivation": [], "activation": []}
        kept |= {f"state {s}": [] for s in body.states}
        while True:
            self._feed(cond, graphs[body.cond].inputs, values)
            self.model.invoke(cond)
            if not np.asarray(cond.get_tensor(int(graphs[body.cond].outputs[0]))).all():
                break
            if len(kept["inputs"]) == cell.length:
                raise GraphPatternError(
                    f"{self.model.source}: the WHILE loop of op {cell.op} runs more iterations than its "
                    f"{cell.length} steps; gatetrace does not know what its further iterations read"
                )
            self._feed(run, graphs[body.body].inputs, values)
            self.model.invoke(run)
            kept["inputs"].append(run.get_tensor(body.step_input))
            kept["preactivation"].append(np.stack([run.get_tensor(x) for x, _ in body.gates], 1))
            kept["activation"].append(np.stack([run.get_tensor(y) for _, y in body.gates], 1))
            for s, t in body.states.items():
                kept[f"state {s}"].append(run.get_tensor(t))
            values = [run.get_tensor(int(t)) for t in graphs[body.body].outputs]
        out = {k: np.stack(v, axis=1) for k, v in kept.items()}  # [rows, steps, ...]
        out |= {f"initial {s}": it.get_tensor(t) for s, t in cell.initial.items()}
        out |= {f"final {s}": it.get_tensor(t) for s, t in body.finals.items()}
        return out

    def _feed(self, it: Any, tensors: Sequence[int], values: Sequence[np.ndarray]) -> None:
        """Set a cond's or body's inputs to what the loop carries. A converter may declare a
        body input of other dimensions than the loop carries (a stacked sequence or tensor list
        declared as its first element's shape), as the WHILE kernel itself allows: such inputs
        are resized to what is carried first, and the subgraph allocated again. The shapes each
        interpreter holds are kept here (reading a tensor to learn its shape copies it)."""
        held = self._shapes.setdefault(id(it), {})
        resized = False
        for t, v in zip(tensors, values, strict=True):
            if int(t) not in held:
                held[int(t)] = tuple(it.get_tensor(int(t)).shape)
            if held[int(t)] != np.shape(v):  # (an interpreter error: one line, from `fetch`)
                it.resize_tensor_input(int(t), list(np.shape(v)), strict=False)
                held[int(t)], resized = tuple(np.shape(v)), True
        if resized:
            it.allocate_tensors()
        for t, v in zip(tensors, values, strict=True):
            it.set_tensor(int(t), v)

    @staticmethod
    def _looped(cell: LiteCell, seen: dict[str, np.ndarray]) -> Result:
        """A WHILE loop's cell as its iterations gave it, checked against what the loop returned."""
        states = {s: seen[f"state {s}"] for s in cell.spec.states}
        got = Replayed(
            seen["preactivation"],
            seen["activation"],
            states,
            states["h"],
            {s: v[:, -1] for s, v in states.items()},
            inputs=seen["inputs"],
            initial={s: seen[f"initial {s}"] for s in cell.spec.states},
        )
        check(cell.name, got, None, {s: seen[f"final {s}"] for s in cell.spec.states})
        return Result(got, None)

    def _kept(self, tensor: int) -> bool:
        return bool(self.model.main.tensors[tensor].isVariable)

    @classmethod
    def _outputs(cls, cell: LiteCell, a: np.ndarray) -> np.ndarray:
        """What the op wrote for `cell`, batch-major, in the order the cell ran its steps (a
        bidirectional op's half: its columns)."""
        a = cls._batch_major(cell, a)
        if cell.output_columns is not None:
            a = a[..., cell.output_columns[0] : cell.output_columns[1]]
        return cls._in_order(cell, a)

    @staticmethod
    def _in_order(cell: LiteCell, a: np.ndarray) -> np.ndarray:
        """A sequence [batch, steps, ...] in the order `cell` runs its steps: a bidirectional
        op's backward half's, read and written by input position, from its end."""
        return a[:, ::-1] if cell.by_position else a

    @staticmethod
    def _batch_major(cell: LiteCell, a: np.ndarray) -> np.ndarray:
        return np.swapaxes(a, 0, 1) if cell.time_major else a

    @staticmethod
    def _replay(cell: LiteCell, seen: dict[str, np.ndarray]) -> Result:
        """One op's cell replayed over what the op received, checked against what it returned."""
        if cell.integer is not None:
            return Result(integer_replayed(cell.name, cell.integer, seen), None)
        states = cell.spec.states
        initial = {s: seen[f"initial {s}"] for s in states}
        got = replay(
            cell.kind,
            cell.arrays,
            seen["inputs"],
            initial,
            activation=cell.activation,
            recurrent_activation=cell.recurrent_activation,
            cell_clip=cell.cell_clip,
            proj_clip=cell.proj_clip,
            products=None
            if cell.hybrid is None
            else HybridProducts(
                cell.hybrid, cell.arrays["bias"], cell.input_size, seen["outputs"], initial["h"]
            ),
        )
        final = {s: seen[f"final {s}"] for s in states if f"final {s}" in seen}
        try:
            check(cell.name, got, seen["outputs"], final)
        except ReplayMismatchError as err:
            raise _not_finite(cell, seen["inputs"]) or err from None
        return Result(got, None)


def _not_finite(cell: LiteCell, inputs: np.ndarray) -> FeedError | None:
    """Where a fused op's replay missed what it returned and its input (`inputs`, [batch,
    steps, features] in the order the cell ran its steps) holds a NaN or an infinity: the
    error saying where the first one is, by example and input step (None: it holds none)."""
    found = np.argwhere(~np.isfinite(inputs))
    if not len(found):
        return None
    e, t = int(found[0][0]), int(found[0][1])
    step = inputs.shape[1] - 1 - t if cell.by_position else t
    value = float(inputs[tuple(found[0])])
    return FeedError(
        f"cell {cell.name}: its input holds {value:g} at example {e}, step {step} ({len(found)} "
        f"value{'s' if len(found) != 1 else ''} NaN or infinite), which TensorFlow Lite's kernel does "
        "not carry through as the cell's equations do, so its gates are not recorded: feed sequences "
        "of finite numbers"
    )
