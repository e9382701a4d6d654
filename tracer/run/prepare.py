"""From a loaded model and its feeds to a model ready to record (`tracer.run.batch.Prepared`).

`find_all` lists a model's cells (a graph's, `tracer.find.graph`; a Keras model's layers,
`tracer.find.keras`; a TensorFlow Lite file's recurrent ops, `tracer.find.lite`); `from_loops` gives the model whose loops emit the chosen cells'
values (`tracer.values.emit`); `prepare` checks the feeds against the model and the ops a
batch would run (`tracer.load.safety`), and makes the plan that fetches every value
(`tracer.values.fetch.FetchPlan`, `tracer.values.keras.KerasPlan`,
`tracer.values.lite.LitePlan`); `summarising` turns it
into one that fetches a summary's statistics instead (`tracer.values.summaries`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np

from recorders import RecordingWriter
from recorders.errors import RecordingError, SelectionError
from recorders.write.summary import SummaryWriter
from recorders.write.totals import Bins, summary_columns
from tracer.cells.found import AnyCell, Cell, KerasCell, LiteCell
from tracer.cells.holds import Hold
from tracer.find.graph import find_cells
from tracer.find.keras import find_layers
from tracer.find.lite import find_ops
from tracer.find.named import find_named
from tracer.inputs.feeds import fed_names, pipeline_entries, resolve_feeds, unfed_placeholders
from tracer.load.keras import KerasModel, is_keras, wrap
from tracer.load.loaded import Model
from tracer.load.safety import check_model, unsafe_ops
from tracer.load.tflite import LiteModel
from tracer.run.batch import Batch, Prepared, Statistics, Values
from tracer.run.budget import fixed_size_problem
from tracer.run.select import Selection
from tracer.values import interrupts, running
from tracer.values.emit import emitting
from tracer.values.fetch import FetchPlan
from tracer.values.hold import Held, holding
from tracer.values.keras import KerasPlan, resolve_inputs
from tracer.values.lite import LitePlan
from tracer.values.returned import keras_outputs, lite_outputs
from tracer.values.summaries import Summary, in_graph
from tracer.values.weights import read_weights

__all__ = [
    "AnyModel",
    "as_model",
    "find_all",
    "cells_of",
    "weight_values",
    "prepare",
    "summarising",
    "from_loops",
    "graph_from_loops",
]


AnyModel = Model | KerasModel | LiteModel


def as_model(model: Any) -> AnyModel:
    """A Model, KerasModel or LiteModel; a live Keras model object is wrapped."""
    return wrap(model) if is_keras(model) else model


def find_all(
    model: AnyModel,
    gate_ops: str | None = None,
    state_ops: str | None = None,
    gate_names: Mapping[str, Sequence[str]] | None = None,
) -> list[AnyCell]:
    """Every RNN cell of a graph (`tracer.find.graph.find_cells`), Keras model
    (`tracer.find.keras.find_layers`, a layer over a cell of your own with the gates
    `gate_names` names) or TensorFlow Lite file (`tracer.find.lite.find_ops`); with
    `gate_ops`, the cells of your own its pattern names instead (`tracer.find.named.find_named`,
    with the states `state_ops` names)."""
    if gate_ops is not None:
        if not isinstance(model, Model):
            what = "a Keras model" if isinstance(model, KerasModel) else "a TensorFlow Lite file"
            raise SelectionError(
                f"--gate-ops names ops of a graph; {model.source} is {what}, whose cells are found without it: "
                "leave --gate-ops out"
            )
        return list(find_named(model.graph, gate_ops, state_ops, model.source))
    if isinstance(model, KerasModel):
        return list(find_layers(model, gate_names))
    if gate_names and isinstance(model, LiteModel):
        raise SelectionError(
            f"gate_names names the gates of Keras layers over cells of your own; {model.source} is a TensorFlow "
            "Lite file, whose ops' gates are named by their kind: leave gate_names out"
        )
    if isinstance(model, LiteModel):  # (it runs the file once: stoppable by Ctrl-C)
        return list(
            interrupts.stoppable(lambda: find_ops(model), None, f"{model.source}'s interpreter")
        )
    if gate_names:
        raise SelectionError(
            f"gate_names names the gates of Keras layers over cells of your own; {model.source} is a graph: "
            "name its gates with gate_ops"
        )
    return list(find_cells(model.graph, model.source))


_Kind = TypeVar("_Kind", Cell, KerasCell, LiteCell)


def cells_of(model: AnyModel, cells: Sequence[AnyCell], kind: type[_Kind]) -> list[_Kind]:
    """`cells`, which must be of the model's kind: a graph's cells, a Keras model's layers, a
    TensorFlow Lite file's ops."""
    mine = [c for c in cells if isinstance(c, kind)]
    if len(mine) != len(cells):
        other = next(c.name for c in cells if not isinstance(c, kind))
        raise SelectionError(
            f"cell {other} was not found in {model.source}: give cells that tracer.find_all found in the model"
        )
    return mine


def weight_values(
    model: AnyModel, cells: Sequence[AnyCell], timeout: float | None = None
) -> dict[str, dict[str, np.ndarray]]:
    """Every cell's weight arrays by role: read in one run from a graph, or as a Keras layer
    or a TensorFlow Lite op holds them."""
    if isinstance(model, KerasModel):
        return {c.name: dict(c.arrays) for c in cells_of(model, cells, KerasCell)}
    if isinstance(model, LiteModel):
        return {c.name: dict(c.arrays) for c in cells_of(model, cells, LiteCell)}
    return read_weights(model.session, cells_of(model, cells, Cell), timeout)


def weight_tensors(cells: Sequence[Cell]) -> list[str]:
    """What reading the cells' weights runs (`gatetrace weights`, and every recording)."""
    return [t for c in cells for t in c.weights.values()]


def record_tensors(plan: FetchPlan, cells: Sequence[Cell]) -> list[Any]:
    """What recording `cells` runs: every tensor of their plan, and their weights."""
    return [*plan.tensors, *weight_tensors(cells)]


def unsafe_by_command(
    model: Model, plan: FetchPlan, cells: Sequence[Cell], fed: Iterable[str] = ()
) -> dict[str, list[str]]:
    """`name (Type)` of each op outside the allowlist (`tracer.load.safety`) that each command
    would run on `model`, loading included: `weights` (the cells' weights) and `record` (the
    gates and weights of `cells`, by `plan`, the tensors named in `fed` fed). `prepare` and
    `gatetrace weights` refuse the same ops, unless the model was loaded with
    allow_unsafe_ops; `gatetrace inspect` lists them."""
    loading = model.load_plan.problems(model.graph) if model.load_plan else []
    return {
        "weights": sorted(set(loading + unsafe_ops(model.graph, weight_tensors(cells)))),
        "record": sorted(
            set(loading + unsafe_ops(model.graph, record_tensors(plan, cells), fed=fed))
        ),
    }


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


def prepare(
    model: AnyModel,
    feeds: Any,
    cells: Sequence[AnyCell] | None,
    selection: Selection | None = None,
    timeout: float | None = None,
    skip_unfed: list | None = None,
    carry_state: bool = False,
    verify: bool = False,
    outputs: Sequence[str] = (),
    fetch_as: Mapping[str, str] | None = None,
    holds: Sequence[Hold] = (),
    unrolled_steps: Mapping[str, int] | None = None,
) -> tuple[
    Prepared[RecordingWriter], FetchPlan | KerasPlan | LitePlan, Callable[[], FetchPlan | None]
]:
    """The model made ready to record every value of its cells (`tracer.run.batch.Prepared`),
    its plan, and what makes the plan of those of its cells computed in numpy, which a
    summary takes as arrays (`summarising`; for a Keras model or a TensorFlow Lite file,
    whose cells are all computed in numpy, None). With a list as `skip_unfed`, cells the
    feeds do not reach are left out and listed there. `outputs` are told apart before
    anything is recorded (`FetchPlan.tell_outputs`: the outputs run on other batch sizes);
    `unrolled_steps` counts, by name, the steps of the unrolled cells a selection of steps
    cut (`FetchPlan`'s `ran`)."""
    chosen = list(cells) if cells is not None else find_all(model)
    steps = selection.steps if selection is not None else (None, None)
    if isinstance(model, LiteModel):
        if carry_state:
            raise SelectionError(
                f"--carry-state is for Keras models with stateful layers; {model.source} is a TensorFlow Lite "
                "file, whose ops gatetrace starts from their initial state on every sequence"
            )
        lite_cells = cells_of(model, chosen, LiteCell)
        quantised = [c.name for c in lite_cells if c.hybrid is not None or c.integer is not None]
        if selection is not None and selection.parts and quantised:
            raise SelectionError(
                f"--values contributions: {', '.join(quantised)} compute their products on quantised values, which "
                "parts in float of the dequantised weights do not add up to; leave contributions out, or record "
                "the float file"
            )
        returned = lite_outputs(model, outputs)
        lite_plan = LitePlan(model, lite_cells, steps=steps, outputs=returned)
        lite_inputs = resolve_inputs(model, feeds)

        def invoke(batch: Batch) -> Values:  # the interpreter stoppable by Ctrl-C and --timeout
            fetched = interrupts.stoppable(
                lambda: lite_plan.fetch(batch.feeds), timeout, f"{model.source}'s interpreter"
            )
            return Values(lite_plan, fetched)

        described = [r.told.describe() for r in returned]
        return (
            Prepared(lite_plan.cells, lite_inputs, RecordingWriter, invoke, outputs=described),
            lite_plan,
            lambda: None,
        )
    if isinstance(model, KerasModel):
        layers = cells_of(model, chosen, KerasCell)
        own = [c.name for c in layers if c.step is not None]
        if selection is not None and selection.parts and own:
            raise SelectionError(
                f"--values contributions: {', '.join(own)} run cells of your own, whose preactivations' parts are "
                "not known; leave contributions out, or choose the other layers with --cells"
            )
        convolved = [c.name for c in layers if c.conv is not None]
        if selection is not None and selection.parts and convolved:
            raise SelectionError(
                f"--values contributions: {', '.join(convolved)} are ConvLSTM layers, whose gates are sums of "
                "convolutions, not of the matrix products contributions split; leave contributions out, "
                "or choose the other layers with --cells"
            )
        returned = keras_outputs(model, outputs)
        keras_plan = KerasPlan(
            model, layers, steps=steps, carry_state=carry_state, holds=holds, outputs=returned
        )
        if carry_state and not keras_plan.stateful:
            raise SelectionError(
                f"--carry-state: {model.source} has no stateful layer (stateful=True) whose state could be carried"
            )
        inputs = resolve_inputs(model, feeds)
        # which dimension of each output holds the examples, told before anything is recorded
        keras_plan.tell_outputs(inputs)

        def call(batch: Batch) -> Values:
            return Values(keras_plan, keras_plan.fetch(batch.feeds))

        described = [r.told.describe() for r in keras_plan.returned]
        prepared = Prepared(layers, inputs, RecordingWriter, call, outputs=described)
        return prepared, keras_plan, lambda: None
    cells = cells_of(model, chosen, Cell)
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
    plan = FetchPlan(
        model.graph,
        cells,
        context=found,
        steps=steps,
        verify=verify,
        parts=parts,
        outputs=outputs,
        fetch_as=fetch_as,
        ran=unrolled_steps,
    )
    plan.check_verifiable()
    fed = fed_names(model.graph, feeds, model.inputs)
    # named, with the tensor to feed, before the op check would call it unsafe
    if pipeline_entries(plan.tensors, fed):
        resolve_feeds(model.graph, feeds, plan.tensors, aliases=model.inputs)
    ran = check_model(model, record_tensors(plan, cells), "fetching the gates and weights", fed)
    too_large = fixed_size_problem(
        model.graph.get_operation_by_name(name) for name, _ in ran if " in function " not in name
    )
    if too_large:
        raise RecordingError(
            f"{model.source}: its op {too_large}; the model cannot run on this machine, and nothing was run"
        )
    feed_dict = resolve_feeds(model.graph, feeds, plan.tensors, aliases=model.inputs)
    session = model.session
    # which dimension of each output holds the examples, told before anything is recorded
    told = plan.tell_outputs(session, feed_dict, timeout)

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

    described = [o.describe() for o in told]
    return Prepared(cells, feed_dict, RecordingWriter, run, outputs=described), plan, numpy_plan


def output_tensors(model: AnyModel, names: Sequence[str]) -> list[str]:
    """The tensors `--outputs` names (an op's name: its one output; or `op:K`), checked: a
    graph's tensor of numbers, [batch], [batch, units], [batch, steps, units] or [steps,
    batch, units], its units known. `SelectionError`, one line, for anything else. A Keras
    model's outputs and a TensorFlow Lite file's are named as they name them
    (`tracer.values.returned`)."""
    if not names:
        return []
    if len(names) > MAX_OUTPUTS:
        raise SelectionError(
            f"--outputs names {len(names)} tensors; a recording holds at most {MAX_OUTPUTS}"
        )
    if isinstance(model, KerasModel):
        return [r.name for r in keras_outputs(model, names)]
    if isinstance(model, LiteModel):
        return [r.name for r in lite_outputs(model, names)]
    graph, found = model.graph, []
    for name in names:
        try:
            tensor = graph.get_tensor_by_name(name) if ":" in name else None
            op = graph.get_operation_by_name(name) if tensor is None else tensor.op
        except (KeyError, ValueError):
            raise SelectionError(
                f"--outputs {name}: {model.source} has no op or tensor of this name; name an op of its graph "
                "(its one output) or a tensor OP:K, as TensorBoard shows them (a SavedModel's signature output "
                "names are not read here: name the tensor a signature output is)"
            ) from None
        if tensor is None:
            if len(op.outputs) != 1:
                raise SelectionError(
                    f"--outputs {name}: the op has {len(op.outputs)} outputs; name one: "
                    + ", ".join(t.name for t in op.outputs[:4])
                )
            tensor = op.outputs[0]
        shape, dtype = tensor.shape, tensor.dtype
        if not (dtype.is_floating or dtype.is_integer or dtype.is_bool) or shape.rank not in (
            1,
            2,
            3,
        ):
            raise SelectionError(
                f"--outputs {name}: expected numbers [batch], [batch, units] or [batch, steps, units]; "
                f"{tensor.name} is {dtype.name} of shape {shape}"
            )
        if shape.rank > 1 and shape[-1] is None:
            raise SelectionError(
                f"--outputs {name}: the units of {tensor.name} (its last dimension) are not known before it runs"
            )
        if shape.rank > 1 and shape[-1] > MAX_UNITS:
            raise SelectionError(
                f"--outputs {name}: {tensor.name} has {shape[-1]:,} units; a recording holds at most {MAX_UNITS:,} an output"
            )
        batches = {
            op.outputs[0].shape[0]
            for op in graph.get_operations()
            if op.type in ("Placeholder", "PlaceholderWithDefault") and op.outputs[0].shape.rank
        }
        # the examples' dimension: the first, or a sequence's second (time-major); which one
        # is told by running it (`FetchPlan.tell_outputs`)
        fixed = [shape[a] for a in ((0, 1) if shape.rank == 3 else (0,))]
        if all(size is not None and size not in batches for size in fixed):
            raise SelectionError(
                f"--outputs {name}: its first dimension is {shape[0]}, which is no input's batch: name an "
                "output whose rows are the examples"
                if len(fixed) == 1
                else f"--outputs {name}: neither its first nor its second dimension ({fixed[0]}, {fixed[1]}) "
                "is an input's batch: name an output of [batch, steps, units] or [steps, batch, units]"
            )
        if tensor.name in found:
            raise SelectionError(f"--outputs: {tensor.name} is named twice")
        found.append(tensor.name)
    return found


MAX_OUTPUTS = 64  # outputs a recording holds (`recorders.write.schema`)
MAX_UNITS = 2**24  # units an output may have: the manifest's bound


def summarising(
    model: AnyModel,
    prepared: Prepared[RecordingWriter],
    plan: FetchPlan | KerasPlan | LitePlan,
    numpy_plan: Callable[[], FetchPlan | None],
    selection: Selection,
    bins: Bins,
    timeout: float | None,
) -> Prepared[SummaryWriter]:
    """`prepared`, made to record the statistics of the selection's columns, binned by
    `bins` (`tracer.values.summaries.Summary`), instead of every value."""
    values = [v for v in selection.values if v in ("preactivation", "activation")]
    columns = summary_columns(
        [c.describe() for c in prepared.cells],
        values,
        bins,
        lambda _, gate: selection.keeps_gate(gate),
    )
    graph = model.graph if isinstance(model, Model) and in_graph() else None
    summary = Summary(plan, columns, bins.low, bins.high, graph)
    if graph is None:  # every column from the arrays a full recording fetches

        def from_arrays(batch: Batch) -> Statistics:
            values = prepared.run(batch)
            assert isinstance(values, Values)  # (a full recording's run)
            return Statistics(summary, values, {})

        return Prepared(prepared.cells, prepared.feeds, SummaryWriter, from_arrays, summary.columns)
    assert isinstance(model, Model)  # (a Keras model's plan is a KerasPlan, a file's a LitePlan)
    session, arrays = model.session, numpy_plan()
    tensors = [] if arrays is None else arrays.tensors

    def run(batch: Batch) -> Statistics:
        ops, feed = summary.graph_run(batch.rows, batch.keep, batch.lengths)
        got, graph_values = running.run(session, [tensors, ops], {**batch.feeds, **feed}, timeout)
        values = None if arrays is None else Values(arrays, arrays.finish(list(got)))
        return Statistics(summary, values, graph_values)

    return Prepared(prepared.cells, prepared.feeds, SummaryWriter, run, summary.columns)


@contextmanager
def held(model: AnyModel, cells: Sequence[AnyCell], holds: Sequence[Hold]) -> Iterator[Held]:
    """The model with `holds` in its graph (`tracer.values.hold.holding`; `cells`: every cell
    found in it), closed on leaving; with no holds, the model as it is."""
    done = holding(model, cells, holds)  # refuses a model that is not a graph
    try:
        yield done
    finally:
        if done.model is not model:
            done.model.close()


@contextmanager
def from_loops(
    model: AnyModel,
    cells: Sequence[AnyCell],
    progress: bool,
    restore: bool = True,
    reads: bool = False,
) -> Iterator[tuple[AnyModel, list[AnyCell]]]:
    """The model and cells to record: for a graph, see `graph_from_loops`; a Keras model or a
    TensorFlow Lite file and its cells as they are."""
    if not isinstance(model, Model):
        yield model, list(cells)
        return
    with graph_from_loops(model, cells_of(model, cells, Cell), progress, restore, reads) as (
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
