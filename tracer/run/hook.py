"""Logging gates while a TF1 model trains: `GateLoggingHook`, a `tf.compat.v1.train.SessionRunHook`.

    hook = tracer.GateLoggingHook("gates-by-step/", every_n_steps=100)
    with tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook], ...) as session:
        while not session.should_stop():
            session.run(train_op, feed_dict=...)

Every `every_n_steps`-th global step, the hook adds the gate fetches of every cell of the graph
to the training run itself (`before_run` returns them as `SessionRunArgs`): the gates of the
batch the model trains on, dropout as applied, at no extra forward pass, with the weights the
step read (the tensors the cells consume, before the step's update). Each logged step becomes
the recording `OUT/global_step=S/` of a series (`recorders.Series`). A hand-written loop calls
`hook.begin()` once, then `hook.before_run` / `hook.after_run` around its own `session.run`
(`tracer.run.hook.run_with`), and `hook.end(session)` at the end. With `tensorboard=DIR`, each
logged step's gate saturation and histograms are written there too (`tracer.run.tensorboard`);
with `summary=recorders.Bins()`, each logged step is a summary recording, its statistics
computed in the training run itself (`tracer.values.summaries`).

What differs from recording a checkpoint with `gatetrace record`: the model runs in training
mode (dropout on, as the batch saw it) on the training batch (not a probe set), and the weights
are those before the step's update. Cells in while loops are taken by replaying them in numpy
from what enters and leaves the loop in the same run (a live graph cannot be rebuilt to emit
them: `tracer.values.replay`); unrolled cells from their own ops.
"""

from __future__ import annotations

import os
from typing import Any

from recorders import RecordingWriter
from recorders.errors import GatetraceError, SelectionError
from recorders.write.summary import SummaryWriter
from recorders.write.totals import Bins, summary_columns
from tracer._tf import v1
from tracer.find.graph import find_cells
from tracer.run.batch import Statistics, Values, write_whole
from tracer.run.series import fresh_key, logged_folder, open_logged
from tracer.run.tensorboard import GateSummaries, check_logdir
from tracer.run.training import report_failure
from tracer.values.fetch import FetchPlan
from tracer.values.summaries import Summary
from tracer.values.weights import weights_columns

__all__ = ["GateLoggingHook", "run_with"]


class GateLoggingHook(v1.train.SessionRunHook):
    """Logs every cell's gates on the training batches of every `every_n_steps`-th global
    step into `out` (see the module docstring); with `tensorboard`, their summaries there too.
    `on_error`: "stop" raises a failed write, "warn" reports it once on stderr and goes on
    training."""

    def __init__(
        self,
        out: str | os.PathLike,
        every_n_steps: int = 100,
        *,
        tensorboard: str | os.PathLike | None = None,
        summary: Bins | None = None,
        on_error: str = "stop",
    ):
        if not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise SelectionError(
                f"GateLoggingHook every_n_steps={every_n_steps!r}: expected a whole number of steps, 1 or more"
            )
        if on_error not in ("stop", "warn"):
            raise SelectionError(
                f"GateLoggingHook on_error={on_error!r}: expected 'stop' or 'warn'"
            )
        self.out, self.every, self.on_error = logged_folder(out), every_n_steps, on_error
        self.logged: list[int] = []  # the global steps logged
        self.failed: str | None = None
        self._plan: FetchPlan | None = None
        self._cells: list = []  # the graph's cells (begin)
        self._weights: list[str] = []
        self._step: Any = None
        self._next: int | None = None  # the next global step to log (None: not known yet)
        self._logging = False
        self.tensorboard = tensorboard
        self._board: GateSummaries | None = None
        self.summary = summary
        self._summary: Summary | None = None
        self._arrays: FetchPlan | None = None  # the summary's cells computed in numpy

    def begin(self) -> None:
        graph = v1.get_default_graph()
        cells = list(find_cells(graph, "the training graph"))
        self._plan = FetchPlan(graph, cells, context=cells)
        self._weights = sorted({t for c in cells for t in c.weights.values()})
        self._step = v1.train.get_global_step(graph)
        if self._step is None:
            raise SelectionError(
                "GateLoggingHook: the graph has no global step; create one with "
                "tf.compat.v1.train.get_or_create_global_step() and pass it to the optimizer's minimize"
            )
        self._cells = cells
        # the summary's ops are made now, before a MonitoredSession finalizes the graph
        if self.summary is not None:
            numpy_cells = [c for k, c in enumerate(cells) if not self._plan.in_graph(k)]
            self._arrays = FetchPlan(graph, numpy_cells, context=cells) if numpy_cells else None
            columns = summary_columns(
                [c.describe() for c in cells], ("preactivation", "activation"), self.summary
            )
            self._summary = Summary(self._plan, columns, self.summary.low, self.summary.high, graph)
            self._summary.graph_ops()
        if self.tensorboard is not None:  # refused before the series begins
            check_logdir(self.tensorboard, self.out, (), f"GateLoggingHook: {self.tensorboard}")
        open_logged(self.out, "global_step", "GateLoggingHook")
        if self.tensorboard is not None and self._board is None:
            self._board = GateSummaries(self.tensorboard)

    def _summary_fetches(self) -> list:
        """What a logged step's run fetches for the summary: the tensors of its cells computed
        in numpy, and the graph's statistics of the others."""
        assert self._summary is not None  # (begin, with a summary)
        return [[] if self._arrays is None else self._arrays.tensors, self._summary.graph_ops()]

    def end(self, session: Any) -> None:
        if self._board is not None:
            self._board.close()
            self._board = None

    def after_create_session(self, session: Any, coord: Any = None) -> None:
        """The global step the first run will be (`MonitoredSession` calls this; `run_with` too)."""
        self._next = int(session.run(self._step))

    def before_run(self, run_context: Any) -> Any:
        self._logging = self._next is not None and self._next % self.every == 0
        if not self._logging:
            return None
        assert self._plan is not None  # (begin)
        if self._summary is not None:
            return v1.train.SessionRunArgs(
                {"summary": self._summary_fetches(), "weights": self._weights}
            )
        return v1.train.SessionRunArgs({"gates": self._plan.tensors, "weights": self._weights})

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if self._logging and self._next is not None:
            step = self._next  # the global step the batch ran at (the updates before it)
            try:
                self._write(step, run_values.results)
                if self._board is not None:
                    self._board.write(f"{self.out}/global_step={step}", step)
                self.logged.append(step)
            except (GatetraceError, OSError) as err:
                report_failure(self, f"GateLoggingHook could not log step {step}", err)
        # read after the run, not fetched in it: a fetch may see the step before or after its update
        self._next = int(run_context.session.run(self._step))

    def _write(self, step: int, results: dict) -> None:
        """One logged step's recording (or summary recording) in `OUT/global_step=STEP/`."""
        assert self._plan is not None  # (begin)
        weights = dict(zip(self._weights, results["weights"], strict=True))
        cells = self._cells
        where = fresh_key(
            self.out, "global_step", step, "GateLoggingHook", "the global step restored past it"
        )
        description: dict[str, Any] = {
            "source": {"path": "training", "format": "training run"},
            "cells": [c.describe() for c in cells],
            "feeds": {},
            "global_step": step,
        }
        table = weights_columns(
            cells, {c.name: {r: weights[t] for r, t in c.weights.items()} for c in cells}
        )
        if self._summary is not None and self.summary is not None:
            arrays, graph_values = results["summary"]
            values = (
                None
                if self._arrays is None
                else Values(self._arrays, self._arrays.finish(list(arrays)))
            )
            statistics = Statistics(self._summary, values, graph_values)
            description["summary"] = self.summary.describe(
                (*col.key, col.edges) for col in self._summary.columns
            )
            with SummaryWriter(where, description, examples=(0, statistics.examples)) as summary:
                write_whole(summary, statistics, table)
            return
        values = Values(self._plan, self._plan.finish(list(results["gates"])))
        with RecordingWriter(where, description, examples=(0, values.examples)) as writer:
            write_whole(writer, values, table)


def run_with(hook: GateLoggingHook, session: Any, fetches: Any, feed_dict: Any = None) -> Any:
    """`session.run(fetches, feed_dict)` of a hand-written training loop, with the hook's
    fetches added as `MonitoredSession` adds them; returns what `session.run` would."""
    if hook._next is None:
        hook.after_create_session(session)
    context = v1.train.SessionRunContext(original_args=None, session=session)
    args = hook.before_run(context)
    extra = {} if args is None else {"hook": args.fetches}
    got = session.run({"user": fetches, **extra}, feed_dict=feed_dict)
    hook.after_run(
        context, v1.train.SessionRunValues(results=got.get("hook"), options=None, run_metadata=None)
    )
    return got["user"]
