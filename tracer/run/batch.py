"""One batch on its way from the model to a writer: what was fed, what came back, and how it
is written.

The recording loop (`tracer.run.recording`), the TF1 hook and `trace` all go the same way:
`Prepared.run(Batch(...))` runs the model once on a batch and returns a `Fetched`, which
says how many examples it holds and writes itself to the writer the recording opened
(`Prepared.writer`): a full recording's `Values` (every selected gate and state, as the
plan gives them: `tracer.values.plan.ValuePlan`) to a `RecordingWriter`, a summary's
`Statistics` (`tracer.values.summaries.Summary`, from the `Values` of the cells computed in
numpy and the statistics the graph computed beside the others) to a `SummaryWriter`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

import numpy as np

from recorders import RecordingWriter
from recorders.write.summary import SummaryWriter
from tracer.cells.found import AnyCell
from tracer.run.select import Selection
from tracer.values.plan import ValuePlan
from tracer.values.summaries import Column, Summary
from tracer.values.trace import Trace, assemble

__all__ = ["Batch", "Fetched", "Values", "Statistics", "Prepared", "write_whole"]

W = TypeVar("W", RecordingWriter, SummaryWriter)


@dataclass(frozen=True)
class Batch:
    """One batch as the loop hands it over: the feeds (by placeholder or input), the rows of
    its array feeds (None: only scalars, e.g. an input pipeline), how many of them are
    sequences to record (`keep`; the rest pad a fixed batch size) and their lengths."""

    feeds: Mapping[Any, Any]
    rows: int | None = None
    keep: int | None = None
    lengths: np.ndarray | None = None


class Fetched(ABC, Generic[W]):
    """What one run of the model gave for a batch, ready for a writer of type `W`."""

    @property
    @abstractmethod
    def examples(self) -> int:
        """How many examples the batch held (what a stream of unknown length is counted by)."""

    @abstractmethod
    def write(
        self,
        writer: W,
        selection: Selection,
        ids: np.ndarray,
        keep: int,
        lengths: np.ndarray | None,
    ) -> None:
        """Hand the first `keep` examples, numbered `ids`, to `writer`."""


@dataclass
class Values(Fetched[RecordingWriter]):
    """A batch's values as `plan` fetched them: every gate and state of every cell."""

    plan: ValuePlan
    values: list[Any]

    @property
    def examples(self) -> int:
        return self.plan.batch_of(self.values)

    def trace(self, examples: np.ndarray | None = None) -> Trace:
        """The batch as numpy arrays per cell (`tracer.trace`)."""
        return assemble(self.plan, self.values, examples)

    def write(
        self,
        writer: RecordingWriter,
        selection: Selection,
        ids: np.ndarray,
        keep: int,
        lengths: np.ndarray | None,
    ) -> None:
        """Every selected gate and every state of every cell.

        The value arrays are cut out of the fetched tensors on the writer's threads, a row
        group's examples at a time (each `partial` is called there with a slice of the first
        `keep` rows), so that only a row group's long columns exist at once per thread.
        """
        plan, values = self.plan, self.values
        pre_on, act_on = (c in selection.values for c in ("preactivation", "activation"))
        for k, cell in enumerate(plan.cells):
            steps = plan.steps(values, k)
            lens = plan.lengths(values, k, keep, lengths)
            for g, gate in enumerate(cell.gates):
                if selection.keeps_gate(gate):
                    pre = partial(plan.gate, values, k, g, "preactivation") if pre_on else None
                    act = partial(plan.gate, values, k, g, "activation") if act_on else None
                    parts = partial(plan.parts, values, k, g) if selection.parts else None
                    writer.write_gate(cell.name, gate, ids, steps, pre, act, lens, parts)
            for state in cell.spec.states:
                writer.write_state(
                    cell.name, state, ids, steps, partial(plan.state, values, k, state), lens
                )
        for k, name in enumerate(plan.outputs):  # the model's own outputs, where asked for
            first = plan.output(values, k, slice(0, 1))
            positions = np.arange(first.shape[1], dtype=np.int32)
            # no rows past an example's length, where the output runs along the cells' steps
            steps_of_cells = {len(plan.steps(values, j)) for j in range(len(plan.cells))}
            lens = lengths if first.shape[1] > 1 and steps_of_cells == {first.shape[1]} else None
            writer.write_output(name, ids, positions, partial(plan.output, values, k), lens)


@dataclass
class Statistics(Fetched[SummaryWriter]):
    """A batch's summary statistics: those `summary` computes from `arrays` (the values of
    the cells computed in numpy; None: there are none) and those the graph computed
    (`graph_values`, by column)."""

    summary: Summary
    arrays: Values | None
    graph_values: Mapping[Any, Any]

    @property
    def examples(self) -> int:
        if self.arrays is not None:
            return self.arrays.examples
        return self.summary.counted(self.graph_values)

    def write(
        self,
        writer: SummaryWriter,
        selection: Selection,
        ids: np.ndarray,
        keep: int,
        lengths: np.ndarray | None,
    ) -> None:
        """Every column's statistics (the selection was applied when the summary was made),
        computed on the writer's threads while the next batch runs."""
        plan, values = (None, []) if self.arrays is None else (self.arrays.plan, self.arrays.values)
        for column in self.summary.stats(plan, values, self.graph_values, keep, lengths):
            writer.add_later(column)


@dataclass(frozen=True)
class Prepared(Generic[W]):
    """A model made ready to record: the cells, the checked feeds, the writer to open, the
    summary's columns (for its description; empty for a full recording) and the function
    that runs one batch."""

    cells: Sequence[AnyCell]
    feeds: Mapping[Any, Any]
    writer: type[W]
    run: Callable[[Batch], Fetched[W]]
    columns: Sequence[Column] = ()


def write_whole(writer: W, fetched: Fetched[W], weights: Mapping[str, Any]) -> None:
    """A recording of one batch (a logged training step): the weights table, then every
    example `fetched` holds, committed."""
    n = fetched.examples
    writer.write_weights(weights)
    writer.begin(0, n)
    fetched.write(writer, Selection(), np.arange(n, dtype=np.int64), n, None)
    writer.commit()
