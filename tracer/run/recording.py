"""The main job: from a loaded model and its feeds to a finished recording folder.

`trace` fetches every gate of every cell for one batch and returns numpy arrays;
`record` does the same batch after batch and writes the gates, states and weights
tables with a manifest (see `recorders.write.layout` for the layout), resumable after a
crash and splittable into shards. What a batch is made of and how it reaches the writer:
`tracer.run.batch`; the model made ready: `tracer.run.prepare`; how a recording stops:
`tracer.run.stopping`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np

from recorders import Intervals, RecordingWriter, __version__
from recorders.errors import (
    FeedError,
    Interrupted,
    OutputExistsError,
    RunTimeout,
    SelectionError,
)
from recorders.read.wording import means_from as means_words
from recorders.write import partstats
from recorders.write.opening import series_difference
from recorders.write.rounding import Rounding, compression_of
from recorders.write.schema import RecordingSummary
from recorders.write.summary import SummaryWriter
from tracer._tf import tf
from tracer.cells.found import AnyCell, Cell
from tracer.cells.holds import describe_holds
from tracer.find.keras import hidden_layers
from tracer.inputs.digest import input_digests, other_digests
from tracer.inputs.feeds import (
    batches,
    cast_notes,
    count_sequences,
)
from tracer.load.keras import KerasModel
from tracer.load.loaded import Model
from tracer.load.tflite import LiteModel
from tracer.run.bar import progress_bar
from tracer.run.batch import Batch, Fetched, Prepared, Values
from tracer.run.budget import (
    COPIES,
    DEFAULT_BATCH_SIZE,
    bytes_per_sequence,
    check_rows,
    choose_batch,
    parts_reserve,
    writer_reserve,
)
from tracer.run.means_base import check_means_base, means_origin
from tracer.run.options import RecordOptions
from tracer.run.prepare import (
    AnyModel,
    as_model,
    find_all,
    from_loops,
    held,
    output_tensors,
    prepare,
    summarising,
    weight_values,
)
from tracer.run.stopping import StopOnCtrlC, failed_batch, no_collector_passes, reading
from tracer.values.summaries import Column
from tracer.values.trace import Trace
from tracer.values.weights import weights_columns

W = TypeVar("W", RecordingWriter, SummaryWriter)

__all__ = [
    "trace",
    "record",
    "RecordOptions",
    "describe",
    "find_all",
    "weight_values",
    "DEFAULT_BATCH_SIZE",
]


def trace(
    model: AnyModel | Any,
    feeds: Any,
    cells: Sequence[AnyCell] | None = None,
    *,
    carry_state: bool = False,
    gate_names: Mapping[str, Sequence[str]] | None = None,
) -> Trace:
    """Every gate, activation and state of `cells` (default: all found) for one batch.

    A Keras model's stateful layers are reset first (every row starts from zero state),
    unless `carry_state`: then they start from the state they hold. A layer over a Keras
    cell of your own has the nonlinearities its `call` applies as gates, named
    `sigmoid_0`, ... unless `gate_names` names them by layer path (`{"rnn": ["i", "f"]}`).

    For a graph, feeds maps placeholder names (with or without `:0`) to arrays or
    scalars. For a Keras model (a file loaded with `load_model`, or the model object
    itself) or a TensorFlow Lite file, feeds is the input array, a list of them, or a
    mapping by input name.
    """
    model = as_model(model)
    found = cells if cells is not None else find_all(model, gate_names=gate_names)
    with from_loops(model, found, progress=False) as (
        model,
        cells,
    ):
        prepared, _, _ = prepare(model, feeds, cells, carry_state=carry_state)
        fetched = prepared.run(Batch(prepared.feeds))
        assert isinstance(fetched, Values)  # (a full recording's run)
        return fetched.trace()


def describe(
    model: AnyModel,
    cells: Sequence[AnyCell],
    feed_shapes: Mapping[str, Sequence[int]] | None = None,
) -> dict:
    """The recording's description: source model (a `.tflite` file's with the runtime that
    ran it), cells, feeds, gatetrace version."""
    source = {"path": os.fspath(model.source), "format": model.format}
    if isinstance(model, LiteModel):
        source["runtime"] = model.runtime.describe()
    return {
        "gatetrace_version": __version__,
        "source": source,
        "cells": [c.describe() for c in cells],
        "feeds": {k: list(v) for k, v in (feed_shapes or {}).items()},
    }


def record(
    model: AnyModel | Any,
    feeds: Any,
    out: str | os.PathLike,
    *,
    cells: Sequence[AnyCell] | None = None,
    options: RecordOptions | None = None,
    **changes: Any,
) -> RecordingSummary:
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
    model = as_model(model)
    if isinstance(model.source, (str, os.PathLike)) and any(
        os.path.exists(f"{model.source}{end}") for end in ("", ".meta")
    ):
        # replacing a recording never deletes the model it reads
        options = replace(options, reads=(*options.reads, model.source))
    chosen = cells is not None or bool(selection.cells)  # cells the user named are never skipped
    found = (
        find_all(model, options.gate_ops, options.state_ops, options.gate_names)
        if cells is None or options.holds
        else list(cells)
    )
    # the steps of each unrolled cell, before a selection of steps cuts it: an output as long
    # runs along them (cut as they are)
    unrolled_steps = {
        c.name: len(c.steps)
        for c in (found if cells is None else cells)
        if isinstance(c, Cell) and c.path == "fetch"
    }
    with (
        held(model, found, options.holds) as holds,
        from_loops(
            holds.model,
            [holds.renamed(c) for c in selection.apply(found if cells is None else cells)],
            options.progress,
            reads=selection.parts,
        ) as (model, cells),
    ):
        # each hold with its cell's full name, each output as its tensor's name
        options = replace(
            options, holds=holds.holds, outputs=tuple(output_tensors(model, options.outputs))
        )
        skipped: list[tuple[str, str]] = []
        prepared, plan, numpy_plan = prepare(
            model,
            feeds,
            cells,
            selection,
            options.timeout,
            None if chosen else skipped,
            carry_state=options.carry_state,
            verify=options.verify,
            outputs=options.outputs,
            fetch_as=holds.names.get(None),  # an output the graph holds: the held tensor
            holds=holds.holds,  # a Keras model's: its layers return their outputs held
            unrolled_steps=unrolled_steps,
        )
        if options.summary is None:
            return _record(model, out, prepared, skipped, options)
        summary = summarising(
            model, prepared, plan, numpy_plan, selection, options.summary, options.timeout
        )
        return _record(model, out, summary, skipped, options)


def _check_holds_ran(options: RecordOptions, fetched: Any) -> None:
    """Refuse, before the first batch is written, a hold whose steps the loop it names never
    ran (a loop whose length only the fed sequences set: `tracer.values.hold.resolve` checks
    the others before anything runs)."""
    if (
        not options.holds
        or options.selection.steps != (None, None)
        or not isinstance(fetched, Values)
    ):
        return
    plan, names = fetched.plan, [c.name for c in fetched.plan.cells]
    for hold in options.holds:
        if hold.cell not in names:
            continue
        steps = plan.steps(fetched.values, names.index(hold.cell))
        if len(steps) and not any(hold.held_at(int(p)) for p in steps):
            raise SelectionError(
                f"--hold '{hold.describe()}': holds no step of {hold.cell}, whose loop ran steps "
                f"{int(min(steps))} to {int(max(steps))} on these sequences"
            )


def _record(
    model: AnyModel,
    out: str | os.PathLike,
    prepared: Prepared[W],
    skipped: list[tuple[str, str]],
    options: RecordOptions,
) -> RecordingSummary:
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
    if options.summary is None:
        partstats.ready()  # what the statistics' loop holds, counted in what the process holds
    per_sequence = bytes_per_sequence(cells, feed_dict, selection.parts)
    if options.outputs:  # the outputs, fetched and written as the gates are
        longest = max((np.shape(v)[1] for v in feed_dict.values() if np.ndim(v) >= 3), default=1)
        per_sequence += sum(
            COPIES * 4 * o["units"] * (o.get("steps") or (longest if o["sequence"] else 1))
            for o in prepared.outputs
        )
    # what the writer holds beside the batch: more where it encodes through pyarrow or rounds
    # (the columns a thread copies to round them: a gate's values, which may be views of what
    # was fetched; its parts, made for the writer, are rounded in place)
    rounded = options.round_bits is not None and options.summary is None
    columns = len([v for v in selection.values if v != "contributions"])
    reserve = writer_reserve(
        compression_of(options.compression, rounded), max(1, columns) if rounded else 0
    )
    # the parts a writer thread makes as it writes: of a row group, or of the batch if smaller
    parts = parts_reserve(cells, feed_dict) if selection.parts else None
    choice = choose_batch(
        options.batch_size, per_sequence, options.memory, reserve=reserve, parts=parts
    )
    check_rows(feed_dict, choice)
    if (
        options.carry_state
    ):  # a resume must cut the stream into the same batches: the size asked is kept
        choice = replace(choice, size=options.batch_size)
    batch_size = choice.size
    progress = options.progress
    if progress:
        for note in cast_notes(feed_dict) if isinstance(model, Model) else []:
            print(f"gatetrace: {note}", file=sys.stderr)
    if choice.why and progress:
        print(f"gatetrace: {choice.why}", file=sys.stderr)
    description = describe(model, cells, {t.name: v.shape for t, v in feed_dict.items()})
    if selection.steps == (None, None):  # every step: the cells' steps bound the lengths
        _check_lengths_fit(lengths, [c.get("steps") for c in description["cells"]])
    description["selection"] = selection.describe()
    if examples is not None:  # what was fed, so that `compare` knows the same inputs
        description["inputs"] = input_digests(feed_dict, examples)
    weights = weight_values(model, cells, options.timeout)
    if options.means_from is not None:  # the means are this model's, or one line
        check_means_base(options.means_from, options.memory, cells, weights, options.holds)
        description["means_from"] = means_origin(options.means_from, options.memory)
        said = means_words(description)
        if said and "rounded" in said:  # accepted, and said once (--quiet or not)
            print(f"gatetrace: --means-from: {said}", file=sys.stderr)
    # what else the values depend on: a resume, or another shard, must share it
    description["digests"] = other_digests(feed_dict, examples, lengths, weights)
    description["skipped"] = [{"cell": name, "needs": placeholder} for name, placeholder in skipped]
    if options.holds:  # a held recording says so wherever it is read
        description["held"] = describe_holds(options.holds)
        # a held Keras layer returned gatetrace's replay with the holds in it, not its own values
        held_cells = {h.cell for h in options.holds}
        for entry in description["cells"]:
            if entry.get("path") == "replay" and entry["name"] in held_cells:
                entry["held"] = True
    if options.outputs:
        description["outputs"] = [dict(o) for o in prepared.outputs]
    if options.round_bits is not None:  # the writer rounds what it writes as this says
        description["rounding"] = Rounding(options.round_bits).describe()
    if isinstance(model, KerasModel):
        description["not_recorded"] = hidden_layers(model)
    if options.carry_state:  # a resume must cut the stream into the same batches
        description["carry_state"] = {"batch_size": batch_size}
    if options.summary is not None:
        description["summary"] = options.summary.describe(_edges(prepared.columns))
    if options.joins is not None:  # a series' other recordings share all but the weights
        joined, recorded = options.joins
        why = series_difference(recorded, description)
        if why:
            raise OutputExistsError(
                f"{joined} was recorded otherwise: {why}, or choose another folder"
            )
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
        writer.write_weights(weights_columns(cells, weights))
        del weights  # (what the recording holds while it runs: not the model's weights twice)
        # the example ranges to record; a stream of unknown length is read to its end
        todo = [] if examples is None else writer.missing()
        done_before = Intervals(writer.complete.pairs())
        if options.carry_state and examples is not None and writer.resumed:
            # batches recorded before are fed again, unwritten, to rebuild the state
            todo = [examples]
        if examples is not None and examples[0] == examples[1]:
            # no sequences: one empty batch, so that every table exists, with no rows
            todo = [examples]
        if writer.untouched:  # a finished recording resumed: nothing is run, nothing rewritten
            todo = []
        total = None if examples is None else sum(stop - start for start, stop in todo)
        if progress and isinstance(model, LiteModel):  # the batches its interpreter takes
            print(f"gatetrace: {model.batch_note()}", file=sys.stderr)
        with (
            _progress_bar(total, progress, batch_size, options.summary is not None) as bar,
            StopOnCtrlC(progress) as ctrl_c,
            no_collector_passes(),
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
                    done = writer.rows["gates"] + writer.rows["states"]
                    # a summary counts the values it took in; a recording the rows it wrote
                    what = "values summarised" if options.summary is not None else "rows written"
                    bar.set_postfix_str(f"{done:,} {what}", refresh=False)
                    bar.update(in_flight[1] - in_flight[0])
                    in_flight = None

            for start, stop, batch in reading(
                batches(feed_dict, batch_size, None if examples is None else todo), writer, settle
            ):
                keep = None if stop is None else stop - start
                lens = None if lengths is None or stop is None else lengths[start:stop]
                fetched: Fetched[W] | None
                try:
                    fetched = prepared.run(Batch(batch, _rows(batch), keep, lens))
                except (MemoryError, tf.errors.ResourceExhaustedError, RunTimeout) as err:
                    settle()  # the batch before is kept
                    raise failed_batch(batch, err, writer) from None
                settle()
                if in_flight is None and not writer.complete.total():  # the first batch
                    _check_holds_ran(options, fetched)
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


def _check_lengths_fit(lengths: np.ndarray | None, steps: Sequence[Any]) -> None:
    """Refuse a length past the steps the cells run (`steps`: each cell's, None where the
    model leaves them open): a file of other sequences' lengths, or in other units."""
    known = [s for s in steps if isinstance(s, int)]
    if lengths is None or not len(lengths) or not known or len(known) < len(steps):
        return
    most, row = max(known), int(np.argmax(lengths))
    if lengths[row] > most:
        raise FeedError(
            f"--lengths: sequence {row} has length {int(lengths[row]):,}, but the sequences have {most} steps: "
            f"give one length per sequence, each at most {most}"
        )


def _progress_bar(total: int | None, show: bool, batch_size: int, summary: bool):
    """Progress on stderr counting sequences and saying the batch size (`tracer.run.bar`)."""
    what = "summarising" if summary else "recording"
    return progress_bar(total, show, f"{what}, batches of {batch_size}")
