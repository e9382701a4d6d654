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
from recorders.errors import SelectionError
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
        # the model's own outputs, where asked for: checked before any of the batch is written
        outputs = [self._output(writer, k, lengths) for k in range(len(plan.outputs))]
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
        for k, (positions, lens) in enumerate(outputs):
            writer.write_output(
                plan.outputs[k], ids, positions, partial(plan.output, values, k), lens
            )

    def _output(
        self, writer: RecordingWriter, k: int, lengths: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Output number `k`'s steps and the lengths that cut it (those of the sequences, where
        it runs along the cells' steps), once its values are checked. A refusal after batches
        were recorded says what a rerun can do: --resume would stop at this batch again."""
        try:
            self.plan.output(self.values, k, slice(0, 0))  # (it checks the whole batch)
        except SelectionError as err:
            kept, flag = writer.kept()
            if not flag:  # the first batch: nothing is left
                raise
            rerun = f"record again without --outputs {self.plan.outputs[k]}"
            if flag == "--resume":  # (the batches recorded are kept: a resume runs this one again)
                rerun = f"{rerun}, into a new folder or with --overwrite (--resume would stop at this batch again)"
            raise SelectionError(f"{err}; {kept}: {rerun}") from None
        positions, along = self.plan.output_steps(self.values, k)
        return positions, lengths if along else None


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
    summary's columns (for its description; empty for a full recording), the function
    that runs one batch, and the model's own outputs it records too, as the manifest
    describes them (`tracer.values.outputs.Output.describe`)."""

    cells: Sequence[AnyCell]
    feeds: Mapping[Any, Any]
    writer: type[W]
    run: Callable[[Batch], Fetched[W]]
    columns: Sequence[Column] = ()
    outputs: Sequence[Mapping[str, Any]] = ()


def write_whole(writer: W, fetched: Fetched[W], weights: Mapping[str, Any]) -> None:
    """A recording of one batch (a logged training step): the weights table, then every
    example `fetched` holds, committed."""
    n = fetched.examples
    writer.write_weights(weights)
    writer.begin(0, n)
    fetched.write(writer, Selection(), np.arange(n, dtype=np.int64), n, None)
    writer.commit()
