"""Keras RNN layers: capturing what enters and leaves each in one call, and replaying their cells.

A `KerasPlan` calls the model once per batch with a hook on each layer's `call` that keeps
what enters the layer (its input sequence, mask and initial state) and what it returns;
then it replays each cell in numpy (`tracer.values.replay`) and checks the replay against
the layer's own outputs (and final states, where the layer returns them). A backward
layer (`go_backwards`, the backward half of `Bidirectional`) reads the whole sequence
reversed; its rows are indexed by input position. No rows are written where the mask is
False. `resolve_inputs` checks a batch's feeds against the model's inputs.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from recorders.errors import FeedError, GraphPatternError, SelectionError
from tracer._tf import tf
from tracer.cells.found import Conv, KerasCell
from tracer.cells.holds import Hold
from tracer.cells.kinds import GateHold
from tracer.find.keras import find_layers, walk_layers
from tracer.inputs.feeds import convert_feed, input_name
from tracer.inputs.files import feed_arg
from tracer.load.keras import KerasInput, KerasModel, to_numpy
from tracer.load.tflite import LiteModel
from tracer.values.conv import channels_last, replay_conv
from tracer.values.outputs import watch
from tracer.values.replay import Replayed, activation_of, check, replay
from tracer.values.replayed import ReplayedPlan, Result, Results
from tracer.values.returned import Returned, keras_told, keras_values

__all__ = ["KerasPlan", "resolve_inputs"]


def resolve_inputs(model: KerasModel | LiteModel, feeds: Any) -> dict[KerasInput, Any]:
    """Feeds for the model's inputs, checked: a mapping by input name (as `--feed NAME=FILE`
    gives them: a name the model does not have is refused, naming those it has), a list in
    input order, or (for a model with one input) one array."""
    inputs = model.inputs
    listing = ", ".join(f"{i.name} ({i.dtype.name}, shape {i.shape})" for i in inputs)
    if isinstance(feeds, Mapping):
        alias = {a: i.name for i in inputs for a in i.aliases}
        given = {}
        for k, v in feeds.items():
            name = input_name(str(k), {i.name for i in inputs}, alias)
            if name in given:
                raise FeedError(f"input {name} is fed twice, also as {k}: feed it once")
            given[name] = v
    elif isinstance(feeds, (list, tuple)):
        if len(feeds) != len(inputs):
            raise FeedError(
                f"{len(feeds)} input arrays given; the model takes {len(inputs)}: {listing}"
            )
        given = {i.name: v for i, v in zip(inputs, feeds, strict=True)}
    else:
        given = {inputs[0].name: feeds} if len(inputs) == 1 else {}
    names = {i.name for i in inputs}
    unknown = [k for k in given if k not in names]
    missing = [i.name for i in inputs if i.name not in given]
    if unknown or missing:
        what = (
            f"unknown input {', '.join(unknown)}"
            if unknown
            else f"input {', '.join(missing)} not fed"
        )
        raise FeedError(
            f"{what}: the model's inputs are {listing}; feed each, e.g. --feed {feed_arg(inputs[0].name)}"
        )
    out = {}
    for i in inputs:
        value = given[i.name]
        if np.ndim(value) == 0:
            raise FeedError(f"feed {i.name}: expected an array of shape {i.shape}, given a scalar")
        out[i] = convert_feed(i.name, i, value, "input")
    return out


@dataclass
class _Seen:
    """What one layer received and returned in one call, as numpy arrays."""

    inputs: np.ndarray
    mask: np.ndarray | None
    initial: list[np.ndarray] | None
    outputs: np.ndarray
    states: list[np.ndarray]
    # each held cell's values (by name) with holds in them, which its layer returned
    held: dict[str, Replayed] = field(default_factory=dict)


def _flat(states: Any) -> list[Any]:
    """States as a flat list, in order: a stack's are nested by cell ([[h, c], [h]])."""
    if isinstance(states, (list, tuple)):
        return [s for inner in states for s in _flat(inner)]
    return [states]


def _layer_name(cell: KerasCell) -> str:
    """The path of a cell's layer: its own name, less `/CELL` for a cell of a stack."""
    return cell.name if cell.stack[1] == 1 else cell.name.rpartition("/")[0]


def _order(cell: KerasCell) -> tuple[str, ...]:
    """Keras' order of a cell's states: an LSTM's [h, c], the others' [h]."""
    return ("h", "c") if cell.spec.is_lstm else ("h",)


def _columns(cell: KerasCell, hold: Hold) -> Any:
    """The columns of a replayed gate or state that `hold`'s units are: a ConvLSTM's unit is
    a channel, its columns at every position (position * filters + channel)."""
    if hold.units is None:
        return slice(None)
    conv = cell.conv
    if conv is None:
        return list(hold.units)
    at = np.arange(int(np.prod(conv.positions)))[:, None] * conv.filters
    return (at + np.asarray(hold.units)[None, :]).ravel()


@dataclass(frozen=True)
class _Holding:
    """What `--hold` does inside one Keras cell's replay (a `tracer.values.replay.Holding`):
    each hold at the input positions it names (a backward layer reads position steps - 1 - t
    at loop step t), on its units' columns (`_columns`), in the order given. A gate is held
    inside the step, its preactivation before its activation is taken and its activation
    before the state it makes reads it; a held c reaches the same step's h through the
    output gate, h = activation(c) * o, as Keras' LSTMCell computes it; h is held last."""

    holds: tuple[tuple[Hold, Any], ...]  # each hold with its columns
    steps: int
    backward: bool
    state_names: tuple[str, ...]
    o: slice | None  # the output gate's columns of a step's activations (an LSTM's)
    activation: Any

    @classmethod
    def of(cls, cell: KerasCell, holds: Sequence[Hold], steps: int) -> _Holding | None:
        if not holds:
            return None
        gates, width = cell.spec.gates, cell.units
        o = gates.index("o") if "o" in gates else None
        return cls(
            tuple((h, _columns(cell, h)) for h in holds),
            steps,
            cell.backward,
            cell.spec.states,
            None if o is None else slice(o * width, (o + 1) * width),
            activation_of(cell.act),
        )

    def _now(self, t: int) -> list[tuple[Hold, Any]]:
        position = self.steps - 1 - t if self.backward else t
        return [(x, columns) for x, columns in self.holds if x.held_at(position)]

    def gates(self, t: int) -> GateHold | None:
        now = [
            (x, columns)
            for x, columns in self._now(t)
            if x.preactivation or x.name not in self.state_names
        ]
        if not now:
            return None

        def held(gate: str, preactivation: bool, of: np.ndarray) -> None:
            for x, columns in now:
                if x.name == gate and x.preactivation == preactivation:
                    of[:, columns] = _held(of[:, columns], x)

        return held

    def states(
        self, t: int, h: np.ndarray, c: np.ndarray | None, activations: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray | None]:
        now = [
            (x, columns)
            for x, columns in self._now(t)
            if not x.preactivation and x.name in self.state_names
        ]
        for x, columns in now:
            if x.name == "c" and c is not None and self.o is not None:
                c = np.array(c, np.float32)
                c[:, columns] = _held(c[:, columns], x)
                h = np.asarray(self.activation(c), np.float32) * activations[:, self.o]
        for x, columns in now:
            if x.name == "h":
                h = np.array(h, np.float32)  # (a SimpleRNN's h is its activations' buffer)
                h[:, columns] = _held(h[:, columns], x)
        return h, c


def _held(values: np.ndarray, hold: Hold) -> np.ndarray:
    """`values` as `hold` sets them: multiplied by its value, or its value (float32)."""
    f32 = np.float32
    return values * f32(hold.value) if hold.scale else np.full_like(values, f32(hold.value))


def _conv_flat(conv: Conv, a: np.ndarray, lead: int) -> np.ndarray:
    """A ConvLSTM's layer's values [*lead, *spatial, filters] (channels first: [*lead,
    filters, *spatial]) as the replay's, [*lead, positions * filters]."""
    if conv.channels_first:
        a = np.moveaxis(a, lead, -1)
    return a.reshape(*a.shape[:lead], -1)


def _conv_shaped(conv: Conv, a: np.ndarray, lead: int) -> np.ndarray:
    """`_conv_flat` undone: the replay's values as the layer returns them."""
    a = a.reshape(*a.shape[:lead], *conv.positions, conv.filters)
    return np.moveaxis(a, -1, lead) if conv.channels_first else a


def _replay_cell(
    cell: KerasCell,
    x: np.ndarray,
    mask: np.ndarray | None,
    initial: Sequence[np.ndarray] | None,
    hold: _Holding | None = None,
) -> Replayed:
    """One built-in cell replayed over `x` and `mask` (in loop order) from `initial` (its
    states in Keras' order, as the layer received them; None: zero): a ConvLSTM by its
    convolutions (`tracer.values.conv`, its units flattened), the others by their step."""
    layer, conv = cell.layer, cell.conv
    if conv is not None:
        return replay_conv(
            conv,
            cell.arrays,
            channels_last(x, conv),
            None
            if initial is None
            else {k: _conv_flat(conv, v, 1) for k, v in zip("hc", initial, strict=True)},
            mask=mask,
            activation=cell.act,
            recurrent_activation=cell.gate_act,
            hold=hold,
        )
    return replay(
        cell.kind,
        cell.arrays,
        x,
        None if initial is None else dict(zip(_order(cell), initial, strict=True)),
        mask=mask,
        carry_outputs=not layer.zero_output_for_mask,
        activation=cell.act,
        recurrent_activation=cell.gate_act,
        hold=hold,
    )


def _loop_order(cell: KerasCell, seen: _Seen) -> tuple[np.ndarray, np.ndarray | None]:
    """What the layer received, in the order its loop reads it: Keras reverses the whole
    sequence (and mask) along time for a backward layer."""
    x, mask = seen.inputs, seen.mask
    if cell.backward:
        x, mask = x[:, ::-1], None if mask is None else mask[:, ::-1]
    return x, mask


@dataclass(frozen=True)
class _HeldLayer:
    """A layer with values held: its cells (its one cell, or its stack's in order) and each
    cell's holds, by cell name."""

    cells: tuple[KerasCell, ...]
    holds: Mapping[str, Sequence[Hold]]


def _held_call(held: _HeldLayer, seen: _Seen, out: Any) -> Any:
    """The layer's outputs with its holds in its cells (replayed on what it received, each
    cell of a stack on the outputs of the one before, in place of what it computed: `out`,
    whose structure and shapes they take), and `seen.held`."""
    first, layer = held.cells[0], held.cells[0].layer
    x, mask = _loop_order(first, seen)
    at, finals = 0, []
    got: Replayed | None = None
    for cell in held.cells:
        order = _order(cell)
        initial = None if seen.initial is None else seen.initial[at : at + len(order)]
        at += len(order)
        hold = _Holding.of(cell, held.holds.get(cell.name, ()), x.shape[1])
        got = _replay_cell(cell, x if got is None else got.outputs, mask, initial, hold)
        seen.held[cell.name] = got
        finals += [(cell, got.final[k]) for k in order]
    assert got is not None
    last = held.cells[-1]
    output = got.outputs if layer.return_sequences else got.outputs[:, -1]
    if last.conv is not None:  # as the layer returns them: [.., *spatial, filters]
        conv = last.conv
        output = _conv_shaped(conv, output, output.ndim - 1)
        finals = [(c, _conv_shaped(conv, v, 1)) for c, v in finals]
    states = [v for _, v in finals]
    flat = tf.nest.flatten(out)
    new = [output, *states] if layer.return_state else [output]
    if len(new) != len(flat) or any(
        tuple(v.shape) != tuple(t.shape) for v, t in zip(new, flat, strict=True)
    ):
        raise GraphPatternError(
            f"--hold: layer {_layer_name(first)} returns {[tuple(t.shape) for t in flat]}, not the "
            "output and states of the cells gatetrace replays; its values cannot be held"
        )
    seen.outputs, seen.states = np.asarray(output), states
    return tf.nest.pack_sequence_as(
        out, [tf.convert_to_tensor(v, dtype=t.dtype) for v, t in zip(new, flat, strict=True)]
    )


@contextmanager
def _capture(
    cells: Sequence[KerasCell], held: Mapping[str, _HeldLayer] | None = None
) -> Iterator[dict[str, _Seen]]:
    """While active, each cell's layer (and each layer of `held`) records what enters and
    leaves its `call` (by the layer's path); a layer of `held` (by its path) returns its
    outputs with the holds in its cells, which the layers after it read."""
    seen: dict[str, _Seen] = {}
    held = held or {}

    def hook(cell: KerasCell, original):
        signature = inspect.signature(original)
        first = next(iter(signature.parameters))
        layer_name = _layer_name(cell)

        def call(*args, **kwargs):
            bound = signature.bind(*args, **kwargs).arguments
            initial = bound.get("initial_state")
            layer = cell.layer
            if (
                initial is None
                and layer.stateful
                and layer.states is not None
                and layer.states[0] is not None
            ):
                initial = list(layer.states)
            if initial is not None:  # a stack's cells' states, nested: flattened in order
                initial = [to_numpy(s) for s in _flat(initial)]
            out = original(*args, **kwargs)
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            mask = bound.get("mask")
            if layer_name in seen:
                raise GraphPatternError(
                    f"layer {layer_name} ran twice in one call of the model: shared RNN layers are not supported"
                )
            seen[layer_name] = _Seen(
                to_numpy(bound[first]),
                None if mask is None else to_numpy(mask).astype(bool),
                initial,
                to_numpy(outs[0]),
                [to_numpy(s) for s in _flat(outs[1:])],
            )
            if layer_name in held:
                return _held_call(held[layer_name], seen[layer_name], out)
            return out

        return call

    hooked: list[tuple[Any, Any]] = []  # (layer, its own instance attribute `call` if it had one)
    try:
        for cell in [*cells, *(c for h in held.values() for c in h.cells)]:
            layer = cell.layer
            if any(layer is done for done, _ in hooked):
                continue  # one hook a layer: the cells of a stack share it
            hooked.append((layer, layer.__dict__.get("call")))
            layer.call = hook(cell, layer.call)
        yield seen
    finally:
        for layer, own in hooked:
            if own is None:
                del layer.call  # the class's own method again
            else:
                layer.call = own


def _run_own(cell: KerasCell, x: np.ndarray, mask: np.ndarray | None, seen: _Seen) -> Result:
    """A cell of your own over what its layer received (`x` and `mask` in loop order): its
    traced step (`tracer.find.keras_own.OwnStep`) run once per step, a step skipped where
    the mask is False as Keras skips it (the states carried, the output the previous one or
    zero), checked against the layer's outputs and final states."""
    own, layer, f32 = cell.step, cell.layer, np.float32
    n, steps = x.shape[:2]
    names = cell.spec.states
    states = (
        [np.asarray(s, f32) for s in seen.initial]
        if seen.initial is not None
        else [np.zeros((n, w), f32) for w in own.sizes]
    )
    initial = dict(zip(names, states, strict=True))
    g = own.gates
    pre = np.empty((n, steps, g, cell.units), f32)
    act = np.empty_like(pre)
    kept = {name: np.empty((n, steps, w), f32) for name, w in zip(names, own.sizes, strict=True)}
    outputs: np.ndarray | None = None
    carry = not layer.zero_output_for_mask
    for t in range(steps):
        got = own(np.ascontiguousarray(x[:, t], f32), states)
        out, new = got[2 * g], got[2 * g + 1 :]
        if g:
            act[:, t], pre[:, t] = np.stack(got[:g], axis=1), np.stack(got[g : 2 * g], axis=1)
        if outputs is None:
            outputs = np.zeros((n, steps, out.shape[1]), f32)
        if mask is not None:
            keep = mask[:, t : t + 1]
            new = [np.where(keep, a, b) for a, b in zip(new, states, strict=True)]
            out = np.where(keep, out, outputs[:, t - 1] if carry and t else 0)
        outputs[:, t] = out
        states = new
        for name, s in zip(names, states, strict=True):
            kept[name][:, t] = s
    if outputs is None:
        outputs = np.zeros((n, 0, cell.units), f32)
    got_ = Replayed(
        pre, act, kept, outputs, dict(zip(names, states, strict=True)), inputs=x, initial=initial
    )
    final = dict(zip(names, seen.states, strict=True)) if layer.return_state else {}
    check(cell.name, got_, seen.outputs, final)
    return Result(got_, seen.mask)


class KerasPlan(ReplayedPlan[KerasCell]):
    """How a batch becomes gate values for `cells`: one call of the model with every layer
    hooked, then one replay per cell (the counterpart of `tracer.values.fetch.FetchPlan`).
    `steps` keeps a [start, stop) window of input positions.

    `holds` (`--hold`) replace a layer's outputs by its cells' replay with the holds in
    it, which the layers after it read in the same call (`_held_call`); a held layer is
    hooked whether or not its cells are recorded.

    Stateful layers (`stateful=True`) are reset before each batch, so that every row is an
    independent sequence from zero state and a row's gates never depend on which rows were
    fed before it. With `carry_state`, they keep the state the previous batch left: row k
    of a batch continues row k of the batch before (Keras' stateful semantics).

    `outputs` (`--outputs`, `tracer.values.returned`) are taken from what the same call
    returned: with holds, the held model's; `tell_outputs` tells, before anything is
    recorded, which dimension of each holds the examples.
    """

    def __init__(
        self,
        model: KerasModel,
        cells: Sequence[KerasCell],
        steps: tuple[int | None, int | None] = (None, None),
        carry_state: bool = False,
        holds: Sequence[Hold] = (),
        outputs: Sequence[Returned] = (),
    ):
        self.model = model
        self.cells = list(cells)
        # a cell of a stack reads the outputs of the cells below it: each stack a chosen cell
        # belongs to is replayed whole, up to the highest cell chosen; a held layer's cells
        # (`--hold`, resolved to their cells' names: `tracer.values.hold`) are its stack's
        stacks: dict[int, list[KerasCell]] = {}
        if holds or any(c.stack[1] > 1 for c in self.cells):
            chosen = {c.name: c for c in self.cells}
            for c in find_layers(model):
                stacks.setdefault(id(c.layer), []).append(chosen.get(c.name, c))
        self._stacks = stacks
        self._held: dict[str, _HeldLayer] = {}
        for layer_cells in stacks.values():
            mine = {
                c.name: tuple(h for h in holds if h.cell == c.name)
                for c in layer_cells
                if any(h.cell == c.name for h in holds)
            }
            if mine:
                self._held[_layer_name(layer_cells[0])] = _HeldLayer(tuple(layer_cells), mine)
        unknown = {h.cell for h in holds} - {c for h in self._held.values() for c in h.holds}
        if unknown:
            raise SelectionError(
                f"--hold: {model.source} has no Keras layer whose cell is {sorted(unknown)[0]}; "
                "gatetrace inspect lists its cells"
            )
        top = {id(c.layer): c.stack[0] for c in self.cells}
        names = {c.name for c in self.cells}
        self._run = [
            c
            for stack in (stacks or {0: self.cells}).values()
            for c in stack
            if c.name in names or c.stack[0] < top.get(id(c.layer), -1)
        ]
        super().__init__(steps, outputs)
        self.carry_state = carry_state
        self.stateful = [
            layer
            for _, layer in walk_layers(model.model.layers, "")
            if getattr(layer, "stateful", False)
        ]

    def fetch(self, batch: Mapping[KerasInput, np.ndarray]) -> Results:
        """Call the model once on `batch` and replay every cell; one `Result` per cell, and
        what the call returned for each output asked for."""
        if not self.carry_state:
            for layer in self.stateful:
                layer.reset_states()
        with _capture(self._run, self._held) as seen:
            returned = self._call(batch)
        missing = sorted(({_layer_name(c) for c in self._run} | self._held.keys()) - seen.keys())
        if missing:
            raise GraphPatternError(
                f"layers {', '.join(missing)} did not run when the model was called on its inputs"
            )
        results: dict[str, Result] = {}
        below: np.ndarray | None = None
        for c in self._run:  # a stack's cells in order: each reads the one before's outputs
            results[c.name] = self._replay(c, seen[_layer_name(c)], below if c.stack[0] else None)
            below = results[c.name].replayed.outputs
        outputs = keras_values(self.model, returned, self.returned)  # (held, where a layer is)
        return Results([results[c.name] for c in self.cells], outputs)

    def _call(self, batch: Mapping[KerasInput, Any]) -> Any:
        """What the model's call on `batch` returns."""
        arrays = [np.asarray(batch[i]) for i in self.model.inputs]
        return self.model.model(arrays[0] if len(arrays) == 1 else arrays, training=False)

    def tell_outputs(self, feeds: Mapping[KerasInput, Any]) -> None:
        """Tell which dimension of each output holds the examples and which the steps
        (`tracer.values.returned.keras_told`), before anything is recorded: the model called
        on the first of `feeds`' sequences twice and three times over (once, on the batch its
        inputs fix: `tracer.values.outputs.watch`), its stateful layers' states put back as
        they were, so that `carry_state` carries what it would have."""
        if not self.returned:
            return
        kept = [
            (v, to_numpy(v)) for layer in self.stateful for v in layer.states or [] if v is not None
        ]
        try:
            seen = watch(
                self.outputs,
                feeds,
                lambda batch: keras_values(self.model, self._call(batch), self.returned),
            )
        finally:
            for v, value in kept:
                v.assign(value)
        self.returned = tuple(keras_told(self.model, self.returned, seen, bool(self.stateful)))

    def _replay(self, cell: KerasCell, seen: _Seen, below: np.ndarray | None) -> Result:
        """One cell replayed over what its layer received; a cell of a stack past the first
        reads `below`, the outputs of the cell before it, in loop order."""
        if cell.name in seen.held:  # what its layer returned: the replay with the holds in it
            return Result(seen.held[cell.name], seen.mask)
        x, mask = _loop_order(cell, seen)
        if below is not None:
            x = below
        layer = cell.layer
        if cell.step is not None:  # a cell of your own: its traced step, run step by step
            return _run_own(cell, x, mask, seen)
        # Keras' state order, LSTM [h, c], others [h]; a stack's: each cell's in turn
        order = _order(cell)
        k, n = cell.stack
        widths = [len(c.spec.states) for c in self._stacks.get(id(layer), [cell])]
        first = sum(widths[:k])
        initial = None if seen.initial is None else seen.initial[first : first + len(order)]
        final = (
            dict(zip(order, seen.states[first : first + len(order)], strict=True))
            if layer.return_state
            else {}
        )
        got = _replay_cell(cell, x, mask, initial)
        outputs: np.ndarray | None = seen.outputs if k == n - 1 else None
        conv = cell.conv
        if conv is not None:  # a ConvLSTM: checked with its units flattened, as replayed
            sequences = seen.outputs.ndim == conv.rank + 3  # [examples, steps, *spatial, channels]
            outputs = _conv_flat(conv, seen.outputs, 2 if sequences else 1)
            final = {k: _conv_flat(conv, v, 1) for k, v in final.items()}
        # the layer returns its last cell's outputs: the cells below are checked through it
        check(cell.name, got, outputs, final)
        return Result(got, seen.mask)
