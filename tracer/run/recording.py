"""The main job: from a loaded model and its feeds to a finished recording folder.

`trace` fetches every gate of every cell for one batch and returns numpy arrays;
`record` does the same batch after batch and writes the gates, states and weights
tables with a manifest (see `recorders.write.layout` for the layout), resumable after a
crash and splittable into shards.

Why one module of over 400 lines: `trace` and `record` share the batch loop, the feeds, the
selection and the budget; the writing they differ in is `recorders.write`.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from types import FrameType
from typing import Any, TypeVar

import numpy as np

from recorders import Intervals, RecordingWriter, __version__
from recorders.errors import (
    FeedError,
    GatetraceError,
    Interrupted,
    RecordingError,
    RunTimeout,
    SelectionError,
)
from recorders.write.summary import SummaryWriter
from recorders.write.totals import Bins, summary_columns
from tracer._tf import tf
from tracer.cells.found import AnyCell, Cell, KerasCell
from tracer.find.graph import find_cells
from tracer.find.keras import find_layers, hidden_layers
from tracer.inputs.feeds import (
    batches,
    cast_notes,
    count_sequences,
    fed_names,
    pipeline_entries,
    resolve_feeds,
    unfed_placeholders,
)
from tracer.load.keras import KerasModel, is_keras, wrap
from tracer.load.model import Model
from tracer.load.safety import check_model
from tracer.run.bar import progress_bar
from tracer.run.batch import Batch, Fetched, Prepared, Statistics, Values
from tracer.run.budget import (
    DEFAULT_BATCH_SIZE,
    bytes_per_sequence,
    check_rows,
    choose_batch,
    describe_size,
    fixed_size_problem,
)
from tracer.run.options import RecordOptions
from tracer.run.select import Selection
from tracer.values.emit import emitting
from tracer.values.fetch import FetchPlan, Trace
from tracer.values.keras import KerasPlan, resolve_inputs
from tracer.values.summaries import Column, SummaryPlan
from tracer.values.weights import read_weights, weights_columns

__all__ = [
    "trace",
    "record",
    "RecordOptions",
    "describe",
    "find_all",
    "weight_values",
    "DEFAULT_BATCH_SIZE",
]


def _as_model(model: Any) -> Model | KerasModel:
    """A Model or KerasModel; a live Keras model object is wrapped."""
    return wrap(model) if is_keras(model) else model


def find_all(model: Model | KerasModel) -> list[AnyCell]:
    """Every RNN cell of a graph (`tracer.find.graph.find_cells`) or Keras model (`tracer.find.keras.find_layers`)."""
    if isinstance(model, KerasModel):
        return list(find_layers(model))
    return list(find_cells(model.graph, model.source))


_Kind = TypeVar("_Kind", Cell, KerasCell)
W = TypeVar("W", RecordingWriter, SummaryWriter)


def _cells_of(
    model: Model | KerasModel, cells: Sequence[AnyCell], kind: type[_Kind]
) -> list[_Kind]:
    """`cells`, which must be of the model's kind: a graph's cells, or a Keras model's layers."""
    mine = [c for c in cells if isinstance(c, kind)]
    if len(mine) != len(cells):
        other = next(c.name for c in cells if not isinstance(c, kind))
        raise SelectionError(
            f"cell {other} was not found in {model.source}: give cells that tracer.find_all found in the model"
        )
    return mine


def weight_values(
    model: Model | KerasModel, cells: Sequence[AnyCell], timeout: float | None = None
) -> dict[str, dict[str, np.ndarray]]:
    """Every cell's weight arrays by role: read in one run from a graph, or as a Keras layer holds them."""
    if isinstance(model, KerasModel):
        return {c.name: dict(c.weights) for c in _cells_of(model, cells, KerasCell)}
    return read_weights(model.session, _cells_of(model, cells, Cell), timeout)


def _reachable(
    model: Model, cells: list[Cell], found: list[Cell], feeds: Any, skipped: list
) -> list[Cell]:
    """The cells whose values the feeds reach; the others (chains that read other
    placeholders, such as a sampling unroll beside the training one) are appended to
    `skipped` as (cell, placeholder). If no cell is reached, all are kept, so that the
    error names the missing placeholder."""
    fed = {t.name for t in resolve_feeds(model.graph, feeds, aliases=model.inputs)}
    keep: list[Cell] = []
    skip: list[tuple[Cell, str]] = []
    for c in cells:
        missing = unfed_placeholders(FetchPlan(model.graph, [c], context=found).tensors, fed)
        if missing:
            skip.append((c, missing[0].name))
        else:
            keep.append(c)
    if not keep:
        return cells
    skipped.extend((c.name, placeholder) for c, placeholder in skip)
    return keep


def _prepare(
    model: Model | KerasModel,
    feeds: Any,
    cells: Sequence[AnyCell] | None,
    selection: Selection | None = None,
    timeout: float | None = None,
    skip_unfed: list | None = None,
    carry_state: bool = False,
    verify: bool = False,
) -> tuple[Prepared[RecordingWriter], FetchPlan | KerasPlan, Callable[[], FetchPlan | None]]:
    """The model made ready to record every value of its cells (`tracer.run.batch.Prepared`),
    its plan, and what makes the plan of those of its cells computed in numpy, which a
    summary takes as arrays (`_summarising`; for a Keras model, whose cells are all computed
    in numpy, None). With a list as `skip_unfed`, cells the feeds do not reach are left out
    and listed there."""
    chosen = list(cells) if cells is not None else find_all(model)
    steps = selection.steps if selection is not None else (None, None)
    if isinstance(model, KerasModel):
        layers = _cells_of(model, chosen, KerasCell)
        convolved = [c.name for c in layers if c.conv is not None]
        if selection is not None and selection.parts and convolved:
            raise SelectionError(
                f"--values contributions: {', '.join(convolved)} are ConvLSTM layers, whose gates are sums of "
                "convolutions, not of the matrix products contributions split; leave contributions out, "
                "or choose the other layers with --cells"
            )
        keras_plan = KerasPlan(model, layers, steps=steps, carry_state=carry_state)
        if carry_state and not keras_plan.stateful:
            raise SelectionError(
                f"--carry-state: {model.source} has no stateful layer (stateful=True) whose state could be carried"
            )
        inputs = resolve_inputs(model, feeds)

        def call(batch: Batch) -> Values:
            return Values(keras_plan, keras_plan.fetch(batch.feeds))

        return Prepared(layers, inputs, RecordingWriter, call), keras_plan, lambda: None
    cells = _cells_of(model, chosen, Cell)
    names = {c.name for c in cells}
    below = any(
        c.loop is not None and c.loop.below is not None and c.loop.below not in names for c in cells
    )
    # the layers a selected stacked layer reads
    found = find_cells(model.graph, model.source) if below else cells
    if skip_unfed is not None:
        cells = _reachable(model, cells, found, feeds, skip_unfed)
    if carry_state:
        raise SelectionError(
            "--carry-state is for Keras models with stateful layers; a TF1 graph keeps no state between runs"
        )
    parts = selection is not None and selection.parts
    plan = FetchPlan(model.graph, cells, context=found, steps=steps, verify=verify, parts=parts)
    plan.check_verifiable()
    weights = [t for c in cells for t in c.weights.values()]
    fed = fed_names(model.graph, feeds, model.inputs)
    # named, with the tensor to feed, before the op check would call it unsafe
    if pipeline_entries(plan.tensors, fed):
        resolve_feeds(model.graph, feeds, plan.tensors, aliases=model.inputs)
    ran = check_model(model, [*plan.tensors, *weights], "fetching the gates and weights", fed)
    too_large = fixed_size_problem(
        model.graph.get_operation_by_name(name) for name, _ in ran if " in function " not in name
    )
    if too_large:
        raise RecordingError(
            f"{model.source}: its op {too_large}; the model cannot run on this machine, and nothing was run"
        )
    feed_dict = resolve_feeds(model.graph, feeds, plan.tensors, aliases=model.inputs)
    session = model.session

    def numpy_plan() -> FetchPlan | None:
        """The plan of the cells whose values are computed in numpy (replayed): what a
        summary takes as arrays (None: there are none)."""
        replayed = [c for k, c in enumerate(cells) if not plan.in_graph(k)]
        return (
            FetchPlan(model.graph, replayed, context=found, steps=steps, verify=verify)
            if replayed
            else None
        )

    def run(batch: Batch) -> Values:
        return Values(plan, plan.fetch(session, batch.feeds, timeout=timeout))

    return Prepared(cells, feed_dict, RecordingWriter, run), plan, numpy_plan


def _summarising(
    model: Model | KerasModel,
    prepared: Prepared[RecordingWriter],
    plan: FetchPlan | KerasPlan,
    numpy_plan: Callable[[], FetchPlan | None],
    selection: Selection,
    bins: Bins,
    timeout: float | None,
) -> Prepared[SummaryWriter]:
    """`prepared`, made to record the statistics of the selection's columns, binned by
    `bins` (`tracer.values.summaries.SummaryPlan`), instead of every value."""
    values = [v for v in selection.values if v in ("preactivation", "activation")]
    columns = summary_columns(
        [c.describe() for c in prepared.cells],
        values,
        bins,
        lambda _, gate: selection.keeps_gate(gate),
    )
    graph = None if isinstance(model, KerasModel) else model.graph
    summary = SummaryPlan(plan, numpy_plan(), columns, bins.low, bins.high, graph)
    if isinstance(plan, KerasPlan):  # every cell computed in numpy, from one call of the model
        keras_plan = plan

        def keras(batch: Batch) -> Statistics:
            return Statistics(summary, keras_plan.fetch(batch.feeds), {})

        return Prepared(prepared.cells, prepared.feeds, SummaryWriter, keras, summary.columns)
    assert not isinstance(model, KerasModel)  # (a Keras model's plan is a KerasPlan)
    session = model.session

    def run(batch: Batch) -> Statistics:
        got, graph_values = summary.fetch(
            session, batch.feeds, timeout, batch.rows, batch.keep, batch.lengths
        )
        return Statistics(summary, got, graph_values)

    return Prepared(prepared.cells, prepared.feeds, SummaryWriter, run, summary.columns)


def trace(
    model: Model | KerasModel | Any,
    feeds: Any,
    cells: Sequence[AnyCell] | None = None,
    *,
    carry_state: bool = False,
) -> Trace:
    """Every gate, activation and state of `cells` (default: all found) for one batch.

    A Keras model's stateful layers are reset first (every row starts from zero state),
    unless `carry_state`: then they start from the state they hold.

    For a graph, feeds maps placeholder names (with or without `:0`) to arrays or
    scalars. For a Keras model (a file loaded with `load_model`, or the model object
    itself), feeds is the input array, a list of them, or a mapping by input name.
    """
    model = _as_model(model)
    with from_loops(model, cells if cells is not None else find_all(model), progress=False) as (
        model,
        cells,
    ):
        prepared, _, _ = _prepare(model, feeds, cells, carry_state=carry_state)
        fetched = prepared.run(Batch(prepared.feeds))
        assert isinstance(fetched, Values)  # (a full recording's run)
        return fetched.trace()


@contextmanager
def from_loops(
    model: Model | KerasModel,
    cells: Sequence[AnyCell],
    progress: bool,
    restore: bool = True,
    reads: bool = False,
) -> Iterator[tuple[Model | KerasModel, list[AnyCell]]]:
    """The model and cells to record: for a graph, see `graph_from_loops`; a Keras model and
    its cells as they are."""
    if isinstance(model, KerasModel):
        yield model, list(cells)
        return
    with graph_from_loops(model, _cells_of(model, cells, Cell), progress, restore, reads) as (
        rebuilt,
        emitted,
    ):
        yield rebuilt, list(emitted)


@contextmanager
def graph_from_loops(
    model: Model,
    cells: Sequence[Cell],
    progress: bool,
    restore: bool = True,
    reads: bool = False,
) -> Iterator[tuple[Model, list[Cell]]]:
    """The graph and cells to record: the graph rebuilt (restored if `restore`) so that the
    loops holding `cells` emit their gates (and with `reads` what each step read: see
    `tracer.values.emit.emitting`; closed on leaving), or as it is (a graph without such
    loops). With `progress`, a line on stderr for each loop cell left to replay."""
    rebuilt, cells, notes = emitting(model, cells, restore, reads)
    if progress:
        for note in notes:
            print(f"gatetrace: {note}", file=sys.stderr)
    try:
        yield rebuilt, cells
    finally:
        if rebuilt is not model:
            rebuilt.close()


def describe(
    model: Model | KerasModel,
    cells: Sequence[AnyCell],
    feed_shapes: Mapping[str, Sequence[int]] | None = None,
) -> dict:
    """The recording's description: source model, cells, feeds, gatetrace version."""
    return {
        "gatetrace_version": __version__,
        "source": {"path": os.fspath(model.source), "format": model.format},
        "cells": [c.describe() for c in cells],
        "feeds": {k: list(v) for k, v in (feed_shapes or {}).items()},
    }


def record(
    model: Model | KerasModel | Any,
    feeds: Any,
    out: str | os.PathLike,
    *,
    cells: Sequence[AnyCell] | None = None,
    options: RecordOptions | None = None,
    **changes: Any,
) -> dict:
    """Record `cells` (default: all found) on `feeds` into the folder `out`; returns a summary
    (that of `RecordingWriter.close`, with the batch size chosen under `batch`).

    `model` is a graph (`load_model`) or a Keras model (a file loaded with `load_model`, or
    the model object itself; feeds as for `trace`). The options are `options` (a
    `RecordOptions`) with `changes` by field name, e.g. `record(model, x, "run1",
    batch_size=64, values=["activation"])`; see `RecordOptions` for each.

    Sequences are fed `batch_size` at a time (or in the batch size a placeholder fixes); all
    gates of all cells at all steps of a batch come from one `Session.run` (one call of a
    Keras model). Each batch is encoded on worker threads, a row group of examples at a
    time, while the next batch runs, and marked complete in the folder's progress file once
    its files are in place. The first Ctrl-C stops after the batch in flight is written and
    raises `Interrupted`; a second one cancels the `Session.run` in flight. Cells in
    control-flow-v2 loops are taken from the loop itself, rewritten to emit them
    (`from_loops`). With `carry_state`, a resume feeds the batches recorded before again
    (without writing them) to rebuild the state.
    """
    options = RecordOptions.of(options, **changes)
    selection = options.selection
    model = _as_model(model)
    if isinstance(model.source, (str, os.PathLike)) and any(
        os.path.exists(f"{model.source}{end}") for end in ("", ".meta")
    ):
        # replacing a recording never deletes the model it reads
        options = replace(options, reads=(*options.reads, model.source))
    chosen = cells is not None or bool(selection.cells)  # cells the user named are never skipped
    with from_loops(
        model,
        selection.apply(cells if cells is not None else find_all(model)),
        options.progress,
        reads=selection.parts,
    ) as (model, cells):
        skipped: list[tuple[str, str]] = []
        prepared, plan, numpy_plan = _prepare(
            model,
            feeds,
            cells,
            selection,
            options.timeout,
            None if chosen else skipped,
            carry_state=options.carry_state,
            verify=options.verify,
        )
        if options.summary is None:
            return _record(model, out, prepared, skipped, options)
        summary = _summarising(
            model, prepared, plan, numpy_plan, selection, options.summary, options.timeout
        )
        return _record(model, out, summary, skipped, options)


def _record(
    model: Model | KerasModel,
    out: str | os.PathLike,
    prepared: Prepared[W],
    skipped: list[tuple[str, str]],
    options: RecordOptions,
) -> dict:
    """`record` of the cells `prepared` holds, on a model whose loops emit them (see
    `from_loops`); `skipped` lists the cells the feeds do not reach."""
    selection, shard, cells = options.selection, options.shard, prepared.cells
    feed_dict = prepared.feeds
    n = count_sequences(feed_dict)
    lengths = _check_lengths(options.lengths, n)
    examples = None
    if n is not None:
        _check_examples(selection.examples, n)
        first, last, _ = slice(*selection.examples).indices(n)
        # ids of the selected sequences are their rows in the input
        examples = (first, max(first, last))
    elif shard.count > 1:
        raise SelectionError(
            f"--shard {shard}: sharding needs at least one array feed to split into sequences"
        )
    choice = choose_batch(
        options.batch_size, bytes_per_sequence(cells, feed_dict, selection.parts), options.memory
    )
    check_rows(feed_dict, choice)
    if (
        options.carry_state
    ):  # a resume must cut the stream into the same batches: the size asked is kept
        choice = replace(choice, size=options.batch_size)
    batch_size = choice.size
    progress = options.progress
    if progress:
        for note in cast_notes(feed_dict) if not isinstance(model, KerasModel) else []:
            print(f"gatetrace: {note}", file=sys.stderr)
    if choice.why and progress:
        print(f"gatetrace: {choice.why}", file=sys.stderr)
    description = describe(model, cells, {t.name: v.shape for t, v in feed_dict.items()})
    description["selection"] = selection.describe()
    description["skipped"] = [{"cell": name, "needs": placeholder} for name, placeholder in skipped]
    if isinstance(model, KerasModel):
        description["not_recorded"] = hidden_layers(model)
    if options.carry_state:  # a resume must cut the stream into the same batches
        description["carry_state"] = {"batch_size": batch_size}
    if options.summary is not None:
        description["summary"] = options.summary.describe(_edges(prepared.columns))
    with prepared.writer(
        out,
        description,
        overwrite=options.overwrite,
        resume=options.resume,
        shard=shard,
        examples=examples,
        compression=options.compression,
        reads=options.reads,
    ) as writer:
        writer.write_weights(weights_columns(cells, weight_values(model, cells, options.timeout)))
        # the example ranges to record; a stream of unknown length is read to its end
        todo = [] if examples is None else writer.missing()
        done_before = Intervals(writer.complete.pairs())
        if options.carry_state and examples is not None and writer.resumed:
            # batches recorded before are fed again, unwritten, to rebuild the state
            todo = [examples]
        if examples is not None and examples[0] == examples[1]:
            # no sequences: one empty batch, so that every table exists, with no rows
            todo = [examples]
        total = None if examples is None else sum(stop - start for start, stop in todo)
        with (
            _progress_bar(total, progress, batch_size) as bar,
            _StopOnCtrlC(progress) as ctrl_c,
            _collector_skipping_what_is_alive(),
        ):
            # A batch's files are written (on the writer's threads, mostly waiting for the
            # disk) while the next batch runs; it is committed once that run is done. Side by
            # side, whole processes on 2 cores: see docs/speed.md. Two batches are held then
            # (`tracer.run.budget.COPIES` counts them).
            in_flight: tuple[int, int] | None = None

            def settle() -> None:
                """Commit the batch in flight: wait for its files, mark its examples complete."""
                nonlocal in_flight
                if in_flight is not None:
                    writer.commit()
                    bar.set_postfix_str(
                        f"{writer.rows['gates'] + writer.rows['states']:,} rows", refresh=False
                    )
                    bar.update(in_flight[1] - in_flight[0])
                    in_flight = None

            for start, stop, batch in _reading(
                batches(feed_dict, batch_size, None if examples is None else todo), writer, settle
            ):
                keep = None if stop is None else stop - start
                lens = None if lengths is None or stop is None else lengths[start:stop]
                fetched: Fetched[W] | None
                try:
                    fetched = prepared.run(Batch(batch, _rows(batch), keep, lens))
                except (MemoryError, tf.errors.ResourceExhaustedError, RunTimeout) as err:
                    settle()  # the batch before is kept
                    raise _failed_batch(batch, err, writer) from None
                settle()
                if stop is None:
                    stop = start + fetched.examples
                # fed again by a --carry-state resume
                recorded_before = stop > start and start in done_before and stop - 1 in done_before
                if not recorded_before:
                    # rows past keep are padding
                    ids, keep = np.arange(start, stop, dtype=np.int64), stop - start
                    lens = None if lengths is None else lengths[start:stop]
                    writer.begin(start, stop)
                    fetched.write(writer, selection, ids, keep, lens)
                    in_flight = (start, stop)
                fetched = None  # the writer holds what it needs until the commit
                if ctrl_c.pressed:
                    break
            settle()
            if ctrl_c.pressed and writer.remaining():
                if writer.replacing:
                    raise Interrupted(
                        f"interrupted: {out} is left as it was (--overwrite replaces it only once the new recording is complete)"
                    )
                done = writer.complete.total()
                raise Interrupted(
                    f"interrupted: {done:,} sequences are recorded in {out}; run the same command with --resume to continue"
                )
        summary = writer.close()
    summary["batch"] = choice.to_dict()
    return summary


def _edges(columns: Sequence[Column]) -> list[tuple[str, str, str, str, np.ndarray]]:
    """A summary's columns as its description lists them: key and bin edges."""
    return [(*column.key, column.edges) for column in columns]


def _rows(batch: Mapping) -> int | None:
    """The rows of a batch's array feeds (None: only scalars are fed, e.g. an input pipeline)."""
    return max((len(v) for v in batch.values() if np.ndim(v)), default=None)


@contextmanager
def _collector_skipping_what_is_alive() -> Iterator[None]:
    """While recording, the objects alive before it (the model's graph: hundreds of thousands
    of Python objects) are out of the cyclic garbage collector's sight (`gc.freeze`); its
    passes over them were 6% of a batch's time in the benchmark. What the batches create is
    collected as ever, and everything is in sight again afterwards."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _reading(batches, writer: RecordingWriter, settle: Callable[[], None]) -> Any:
    """`batches`, where an input that turns out unreadable midway says what is kept (the
    error is the input's, found only when its rows are read), once `settle` has committed
    the batch in flight."""
    try:
        yield from batches
    except FeedError as err:
        settle()
        kept, flag = writer.kept()
        raise FeedError(
            f"{err}; {kept}: fix the input and rerun{' with ' + flag if flag else ''}"
        ) from None


def _failed_batch(batch: Mapping, err: Exception, writer: RecordingWriter) -> GatetraceError:
    """The error for a batch that does not fit in memory or ran out of time, with what to do."""
    size = max((len(v) for v in batch.values() if np.ndim(v)), default=0)
    kept, flag = writer.kept()
    then = f" and {flag}" if flag else ""
    if isinstance(err, RunTimeout):
        return RunTimeout(
            f"{err}; {kept}: rerun with a larger --timeout (or a smaller --batch-size){then}"
        )
    fixed = _fixed_allocation(err, size)
    if fixed:
        return RecordingError(
            f"the model's op {fixed} does not fit in memory, whatever the batch size; {kept}"
        )
    if size <= 1:
        return RecordingError(
            f"running the model on a single sequence does not fit in memory ({type(err).__name__}): the model itself needs "
            f"more than this machine has; {kept}"
        )
    return RecordingError(
        f"a batch of {size} sequences does not fit in memory ({type(err).__name__}); {kept}: rerun with a smaller --batch-size{then}"
    )


def _fixed_allocation(err: Exception, batch: int) -> str | None:
    """`NAME, a tensor of [shape] TYPE (SIZE)` when TensorFlow ran out of memory allocating a
    tensor none of whose dimensions is the batch size (a smaller batch would not help)."""
    text = getattr(err, "message", None) or str(err)
    found = re.search(r"OOM when allocating tensor with shape\[([\d,\s]*)\] and type (\w+)", text)
    node = re.search(r"\{\{node ([^}]+)\}\}", text)
    if not found:
        return None
    shape = [int(d) for d in found.group(1).replace(" ", "").split(",") if d]
    if batch in shape:
        return None
    width = {
        "float": 4,
        "double": 8,
        "half": 2,
        "bfloat16": 2,
        "int32": 4,
        "int64": 8,
        "int8": 1,
        "uint8": 1,
        "bool": 1,
    }.get(found.group(2))
    size = int(np.prod(shape, dtype=object)) * width if width else None
    where = node.group(1) if node else "(unnamed)"
    return f"{where}, a tensor of {shape} {found.group(2)}" + (
        f" ({describe_size(size)})" if size else ""
    )


class _StopOnCtrlC:
    """While active, the first Ctrl-C only sets `pressed` (the loop stops after the batch
    in flight is written); a second one interrupts at once. Only on the main thread."""

    def __init__(self, announce: bool):
        self.pressed = False
        self._announce = announce
        # the SIGINT handler before, as signal.signal returns it
        self._previous: Callable[[int, FrameType | None], Any] | int | None = None

    def _handler(self, signum, frame) -> None:
        if self.pressed:
            raise KeyboardInterrupt
        self.pressed = True
        if self._announce:
            print(
                "\ngatetrace: stopping after the batch in flight (Ctrl-C again to stop at once)",
                file=sys.stderr,
            )

    def __enter__(self) -> _StopOnCtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def _check_examples(examples: tuple[int | None, int | None], n: int) -> None:
    """Refuse an --examples range reaching past the inputs' rows, rather than cutting it short."""
    start, stop = examples
    if (start is not None and not 0 <= start <= n) or (stop is not None and not 0 <= stop <= n):
        raise SelectionError(
            f"--examples {'' if start is None else start}:{'' if stop is None else stop}: the inputs hold {n:,} sequences "
            f"(rows 0 to {n - 1}); give a range within them, e.g. --examples 0:{n}"
        )


def _check_lengths(lengths: np.ndarray | None, n: int | None) -> np.ndarray | None:
    if lengths is None:
        return None
    lengths = np.asarray(lengths)
    if (
        lengths.ndim != 1
        or lengths.shape[0] != n
        or not np.issubdtype(lengths.dtype, np.integer)
        or (lengths < 0).any()
    ):
        raise FeedError(
            f"lengths: expected {n} non-negative integers, one per sequence; "
            f"given shape {list(lengths.shape)} of {lengths.dtype}"
        )
    return lengths


def _progress_bar(total: int | None, show: bool, batch_size: int):
    """Progress on stderr counting sequences and saying the batch size (`tracer.run.bar`)."""
    return progress_bar(total, show, f"recording, batches of {batch_size}")
