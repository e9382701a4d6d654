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
from functools import partial
from types import FrameType
from typing import Any, TypeVar

import numpy as np

from recorders import Intervals, RecordingWriter, Shard, __version__
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
from tracer.run.budget import (
    DEFAULT_BATCH_SIZE,
    bytes_per_sequence,
    check_rows,
    choose_batch,
    describe_size,
    fixed_size_problem,
)
from tracer.run.select import Selection
from tracer.values.emit import emitting
from tracer.values.fetch import FetchPlan, Trace, assemble
from tracer.values.keras import KerasPlan, resolve_inputs
from tracer.values.summaries import SummaryPlan
from tracer.values.weights import read_weights, weights_columns

__all__ = ["trace", "record", "describe", "find_all", "weight_values", "DEFAULT_BATCH_SIZE"]


def _as_model(model: Any) -> Model | KerasModel:
    """A Model or KerasModel; a live Keras model object is wrapped."""
    return wrap(model) if is_keras(model) else model


def find_all(model: Model | KerasModel) -> list[AnyCell]:
    """Every RNN cell of a graph (`tracer.find.graph.find_cells`) or Keras model (`tracer.find.keras.find_layers`)."""
    if isinstance(model, KerasModel):
        return list(find_layers(model))
    return list(find_cells(model.graph, model.source))


_Kind = TypeVar("_Kind", Cell, KerasCell)


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
    summary: Bins | None = None,
):
    """The cells, the plan, the checked feeds, and the function that runs one batch.
    With a list as `skip_unfed`, cells the feeds do not reach are left out and listed there.
    With `summary`, the plan is a `SummaryPlan` of the selection's columns, and the function
    takes the batch's row count, its sequences (`keep`) and their lengths too."""
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
        if summary is not None:
            keras_summary = _summary_plan(keras_plan, None, layers, selection, summary, None)
            return layers, keras_summary, inputs, lambda batch, **_: (keras_plan.fetch(batch), [])
        return layers, keras_plan, inputs, keras_plan.fetch
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
    if summary is not None:
        numpy_cells = [c for k, c in enumerate(cells) if not plan.in_graph(k)]
        numpy_plan = (
            FetchPlan(model.graph, numpy_cells, context=found, steps=steps, verify=verify)
            if numpy_cells
            else None
        )
        summary_plan = _summary_plan(plan, numpy_plan, cells, selection, summary, model.graph)
        return (
            cells,
            summary_plan,
            feed_dict,
            partial(summary_plan.fetch, model.session, timeout=timeout),
        )
    return cells, plan, feed_dict, partial(plan.fetch, model.session, timeout=timeout)


def _summary_plan(plan, numpy_plan, cells, selection: Selection | None, bins: Bins, graph):
    """The `SummaryPlan` of the columns `selection` keeps, binned by `bins`."""
    selection = selection or Selection()
    if selection.parts:
        raise SelectionError(
            "--summary with --values contributions: a summary holds statistics of preactivations, activations and "
            "states; leave contributions out, or record in full"
        )
    values = [v for v in selection.values if v in ("preactivation", "activation")]
    columns = summary_columns(
        [c.describe() for c in cells], values, bins, lambda _, gate: selection.keeps_gate(gate)
    )
    return SummaryPlan(plan, numpy_plan, columns, bins.low, bins.high, graph)


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
        _, plan, feed_dict, run = _prepare(model, feeds, cells, carry_state=carry_state)
        return assemble(plan, run(feed_dict))


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
    overwrite: bool = False,
    resume: bool = False,
    shard: Shard = Shard(),
    cells: Sequence[AnyCell] | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    selection: Selection | None = None,
    progress: bool = False,
    lengths: np.ndarray | None = None,
    compression: str | None = None,
    timeout: float | None = None,
    carry_state: bool = False,
    memory: int | None = None,
    verify: bool = False,
    values: Sequence[str] | None = None,
    reads: Sequence[str | os.PathLike | None] = (),
    summary: Bins | None = None,
) -> dict:
    """Record `cells` (default: all found) on `feeds` into the folder `out`; returns a summary.

    `model` is a graph (`load_model`) or a Keras model (a file loaded with `load_model`, or
    the model object itself; feeds as for `trace`). Sequences are fed `batch_size` at a
    time (or in the batch size a placeholder fixes); all gates of all cells at all steps
    of a batch come from one `Session.run` (one call of a Keras model). Each
    batch is encoded on worker threads, a row group of examples at a time, and marked
    complete in the folder's progress file once its files are in place. `resume` continues a
    recording that was killed or interrupted; `shard` records one of N disjoint parts
    of the sequences. `selection` narrows what is fetched and written; `progress` shows
    a bar on stderr. With `lengths` (one per sequence) no rows are written at or past a
    sequence's length. `compression` is one of `recorders.write.layout.COMPRESSIONS`. The
    first Ctrl-C stops after the batch in flight is written and raises `Interrupted`; a
    second one cancels the `Session.run` in flight. `memory` (bytes) is the peak RSS the
    process may reach: `batch_size` is lowered to stay within it (default: what the
    process holds when recording starts plus 768 MB, see `tracer.run.budget`); the summary's
    `batch` says what was chosen. `timeout` (seconds) limits each
    batch's run (RunTimeout). A Keras model's stateful layers are reset before each batch
    (every row an independent sequence from zero state); with `carry_state` they carry
    their state from batch to batch, rows fed in order as one stream: row k of a batch
    continues row k of the batch before. Such a recording cannot be sharded, and a resume
    feeds the batches recorded before again (without writing them) to rebuild the state.
    Cells in control-flow-v2 loops are taken from the loop itself, rewritten to emit them
    (`from_loops`); with `verify` they are also replayed in numpy and must agree within 1e-4.
    `values` picks the gates table's value columns (`selection.values` otherwise): some of
    preactivation, activation and contributions (the preactivations' parts, `tracer.values.parts`).
    `reads` names the files the feeds come from: with `overwrite`, the recording at `out` is
    not replaced when they (or the model's own files) lie inside it.
    With `summary` (a `recorders.Bins`), the folder is a summary recording instead: statistics
    of every column per unit and per step over all the sequences, computed beside the gates
    (`tracer.values.summaries`; see `recorders.write.summary`).
    The summary is that of `RecordingWriter.close`.
    """
    selection = selection or Selection()
    if values is not None:
        selection = replace(selection, values=tuple(values))
    model = _as_model(model)
    if isinstance(model.source, (str, os.PathLike)) and any(
        os.path.exists(f"{model.source}{end}") for end in ("", ".meta")
    ):
        reads = [*reads, model.source]  # replacing a recording never deletes the model it reads
    chosen = cells is not None or bool(selection.cells)  # cells the user named are never skipped
    if carry_state and shard.count > 1:
        raise SelectionError(
            f"--carry-state with --shard {shard}: each shard would start its stream from zero state, not from the state "
            "the rows before it leave; record the stream in one process"
        )
    with from_loops(
        model,
        selection.apply(cells if cells is not None else find_all(model)),
        progress,
        reads=selection.parts,
    ) as (model, cells):
        return _record(
            model,
            feeds,
            out,
            cells,
            chosen,
            overwrite=overwrite,
            resume=resume,
            shard=shard,
            batch_size=batch_size,
            selection=selection,
            progress=progress,
            lengths=lengths,
            compression=compression,
            timeout=timeout,
            carry_state=carry_state,
            memory=memory,
            verify=verify,
            reads=reads,
            summary=summary,
        )


def _record(
    model,
    feeds,
    out,
    cells,
    chosen: bool,
    *,
    overwrite,
    resume,
    shard,
    batch_size,
    selection,
    progress,
    lengths,
    compression,
    timeout,
    carry_state,
    memory,
    verify,
    reads,
    summary,
) -> dict:
    """`record` of the `cells` chosen, on a model whose loops emit them (see `from_loops`)."""
    skipped: list[tuple[str, str]] = []
    cells, plan, feed_dict, run = _prepare(
        model,
        feeds,
        cells,
        selection,
        timeout,
        None if chosen else skipped,
        carry_state=carry_state,
        verify=verify,
        summary=summary,
    )
    n = count_sequences(feed_dict)
    lengths = _check_lengths(lengths, n)
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
    choice = choose_batch(batch_size, bytes_per_sequence(cells, feed_dict, selection.parts), memory)
    check_rows(feed_dict, choice)
    if carry_state:  # a resume must cut the stream into the same batches: the size asked is kept
        choice = replace(choice, size=batch_size)
    batch_size = choice.size
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
    if carry_state:  # a resume must cut the stream into the same batches
        description["carry_state"] = {"batch_size": batch_size}
    if summary is not None:
        description["summary"] = summary.describe((*col.key, col.edges) for col in plan.columns)
    with (RecordingWriter if summary is None else SummaryWriter)(
        out,
        description,
        overwrite=overwrite,
        resume=resume,
        shard=shard,
        examples=examples,
        compression=compression,
        reads=reads,
    ) as writer:
        writer.write_weights(weights_columns(cells, weight_values(model, cells, timeout)))
        # the example ranges to record; a stream of unknown length is read to its end
        todo = [] if examples is None else writer.missing()
        done_before = Intervals(writer.complete.pairs())
        if carry_state and examples is not None and writer.resumed:
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
                try:
                    if summary is None:
                        values = run(batch)
                    else:
                        values = run(batch, rows=_rows(batch), keep=keep, lengths=lens)
                except (MemoryError, tf.errors.ResourceExhaustedError, RunTimeout) as err:
                    settle()  # the batch before is kept
                    raise _failed_batch(batch, err, writer) from None
                settle()
                if stop is None:
                    stop = start + (
                        plan.batch_of(values) if summary is None else plan.batch_of(*values)
                    )
                # fed again by a --carry-state resume
                recorded_before = stop > start and start in done_before and stop - 1 in done_before
                if not recorded_before:
                    # rows past keep are padding
                    ids, keep = np.arange(start, stop, dtype=np.int64), stop - start
                    lens = None if lengths is None else lengths[start:stop]
                    writer.begin(start, stop)
                    hand_over(writer, plan, values, selection, ids, keep, lens)
                    in_flight = (start, stop)
                values = None  # the writer holds what it needs until the commit
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


def hand_over(
    writer: RecordingWriter | SummaryWriter,
    plan: Any,
    values: Any,
    selection: Selection,
    ids,
    keep: int,
    lengths,
) -> None:
    """Hand one fetched batch to either writer: its statistics to a `SummaryWriter` (`plan` a
    `SummaryPlan`, `values` what its `results` gives), its values to a `RecordingWriter`."""
    if isinstance(writer, SummaryWriter):
        for key, positions, per_unit, per_step in plan.stats(*values, keep, lengths):
            writer.add(key, positions, per_unit, per_step)
    else:
        write_batch(writer, plan, values, selection, ids, keep, lengths)


def write_batch(
    writer: RecordingWriter,
    plan: FetchPlan | KerasPlan,
    values: list,
    selection: Selection,
    ids,
    keep: int,
    lengths,
) -> None:
    """Hand one fetched batch to the writer: every selected gate and every state of every cell.

    The value arrays are cut out of the fetched tensors on the writer's threads, a row
    group's examples at a time (each `partial` is called there with a slice of the first
    `keep` rows), so that only a row group's long columns exist at once per thread.
    """
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
