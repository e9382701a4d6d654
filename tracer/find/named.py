"""Cells of your own, found by name: the per-step tensors a pattern names (`--gates PATTERN`).

A pattern is a regular expression matched against the whole name of each op of the graph,
with named groups:

    cell    the cell's name (default: the scope the matched ops share)
    gate    the gate's name (default: its nonlinearity and its order among the step's
            nonlinearities of that kind: sigmoid_0, sigmoid_1, tanh_0, as the graph computes them)
    step    the step, an integer (default: found by walking the graph, below)

e.g. `(?P<cell>my_lstm)/(?P<gate>\\w+)_gate_(?P<step>\\d+)` for gates computed as
`tf.sigmoid(..., name="forget_gate_3")`. The op a pattern names applies the gate's
nonlinearity (Sigmoid, Tanh, Relu, Relu6, Elu, Selu, Softsign, Softplus, or an Identity of
one): its input is recorded as the gate's preactivation, its output as its activation, the
graph's own tensors. `states` names the states likewise, any op's output, with a `state`
group (default: `h`).

Steps are found in `tracer.find.cuts`, weights in `tracer.find.named_weights`; what looks like
a cell of your own where none is named, in `tracer.find.proposals`.

Without a step group, a tensor's step is its place in the chain from the step's input to
the next step's state: how many of the input's steps it has read, the input cut into steps
by an `Unpack` (`tf.unstack`), a `Split` (`tf.split`) or `StridedSlice` ops of one tensor
(`x[:, t]`). Step t of a forward cell has read positions 0 to t; of a backward cell, the
last t + 1 (its input position is then the first of them).

Ops in a while loop's body (`tf.while_loop`, `dynamic_rnn`) are named once an iteration,
without a step group (a TF2 loop's as its body function names them, a TF1 loop's as the graph
does): the loop is rewritten to emit them (`tracer.values.emit`), each iteration a step.

Refused in one line, nothing guessed: a pattern that matches nothing, an op that applies no
nonlinearity, tensors of different shapes in one cell, a step
without one of the gates (or states), steps that skip, and tensors whose step cannot be told.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import regex

from recorders.errors import GraphPatternError, listing
from tracer._tf import tf
from tracer.cells.found import Cell, Loop, Step
from tracer.cells.kinds.named import named_spec
from tracer.find.application import ACTIVATIONS
from tracer.find.cuts import Cuts, LoopInputs
from tracer.find.edges import in_v1_frame
from tracer.find.loops import loop_body, outer_value
from tracer.find.named_weights import input_width, weights_of

__all__ = ["find_named", "nonlinearity_names", "NONLINEAR"]

# how long a pattern may take to match every op name of a graph (Python's own engine
# backtracks without bound: `regex`, with the same syntax, stops at a time limit)
MATCHING_SECONDS = 10.0
# the ops that apply a gate's nonlinearity, and the name each is recorded under
NONLINEAR = {op: name for op, name in ACTIVATIONS.items() if op != "Identity"}


@dataclass(frozen=True)
class _Named:
    """One op a pattern names: its cell, its gate (or state) and step where the pattern says
    them, and the tensors recorded for it."""

    cell: str
    label: str | None
    step: int | None
    op: tf.Operation
    pre: str | None  # the nonlinearity's input (gates only)
    value: str  # what the op gives
    loop: str | None = None  # the While op whose body runs it, or the TF1 loop's frame
    flow: str = "v2"  # the loop's control flow: "v2" (a While op) or "v1" (a frame)


def find_named(
    graph: tf.Graph,
    gates: str,
    states: str | None = None,
    source: str = "the graph",
    cuts: Cuts | None = None,
) -> list[Cell]:
    """The cells whose per-step gates the pattern `gates` names (and states `states` names),
    each a `Cell` of kind "named" whose steps are fetched as they are (see the module
    docstring). `cuts`: the graph's, where the caller has them (`propose` tries many
    patterns on one graph, walking it once)."""
    gate_matches = _matches(graph, gates, "--gate-ops", "gate", source, nonlinear=True)
    state_matches = (
        [] if states is None else _matches(graph, states, "--state-ops", "state", source, False)
    )
    cut = cuts if cuts is not None else Cuts(graph)
    by_cell: dict[str, list[_Named]] = defaultdict(list)
    for m in gate_matches:
        by_cell[m.cell].append(m)
    state_cells: dict[str, list[_Named]] = defaultdict(list)
    for m in state_matches:
        state_cells[m.cell].append(m)
    stray = sorted(set(state_cells) - set(by_cell))
    if stray:
        raise GraphPatternError(
            f"--state-ops {states}: names states of {listing(stray, 3)}, a cell --gate-ops {gates} names no gate of"
        )
    order = {op.name: k for k, op in enumerate(graph.get_operations())}
    return [
        _loop_cell(name, ms, state_cells.get(name, []))
        if any(m.loop for m in ms)
        else _cell(name, ms, state_cells.get(name, []), cut, order, gates)
        for name, ms in sorted(by_cell.items())
    ]


def _frame_of(op: tf.Operation, limit: int = 256) -> str | None:
    """The frame of the TF1 while loop `op` runs in: that of the nearest Enter behind it."""
    queue, seen = [op], set[str]()
    while queue and len(seen) < limit:
        o = queue.pop(0)
        if o.name in seen:
            continue
        seen.add(o.name)
        if o.type in ("Enter", "RefEnter"):
            return str(o.get_attr("frame_name").decode())
        if o.type not in ("Exit", "RefExit"):
            queue.extend(t.op for t in o.inputs)
    return None


def _every_op(graph: tf.Graph) -> Iterator[tuple[tf.Operation, str | None]]:
    """Every op of the graph, then of each while loop's body function (with the loop's name):
    a control-flow-v2 loop's body is a function of the graph's library, its ops named as
    `function_def_to_graph` names them (a v1 loop's are in the graph itself)."""
    ops = graph.get_operations()
    yield from ((op, None) for op in ops)
    loops = [op for op in ops if op.type in ("While", "StatelessWhile")]
    if not loops:
        return
    library = {f.signature.name: f for f in graph.as_graph_def().library.function}
    for loop in loops:
        yield from ((op, loop.name) for op in loop_body(loop, library).get_operations())


def _loop_cell(name: str, gates: list[_Named], states: list[_Named]) -> Cell:
    """A cell whose ops run in a while loop's body, once an iteration: its step is the loop's
    step, which the loop is rewritten to emit (`tracer.values.emit`); its steps are the
    loop's iterations."""
    every = [*gates, *states]
    loops = sorted({m.loop or "the graph itself" for m in every})
    if len(loops) != 1 or any(m.loop is None for m in every):
        raise GraphPatternError(
            f"cell {name}: its ops run in {listing(loops, 3)}; name the ops of one loop's body as one cell"
        )
    body = gates[0].op.graph
    order = {op.name: k for k, op in enumerate(body.get_operations())}
    ms = sorted(gates, key=lambda m: order[m.op.name])
    labelled = _labelled(name, 0, ms, "gate", nonlinearity_names([m.op for m in ms]))
    kept = _labelled(name, 0, states, "state", ["h"] * len(states))
    gate_names, state_names = tuple(labelled), tuple(kept)
    units = _width(body, name, [m.value for m in labelled.values()], "gates")
    widths = {s: _width(body, name, [kept[s].value], f"state {s}") for s in state_names}
    # W, U, b where each preactivation is a sum of products of variables, as unrolled: the
    # step's input told from the state by what the iteration reads (tracer.find.cuts)
    pre = {g: str(m.pre) for g, m in labelled.items()}
    inputs = LoopInputs(
        [body.get_tensor_by_name(m.value) for m in labelled.values()],
        frozenset(getattr(body, "loop_invariants", ())),
    )
    layouts, inner, variables, unknown = weights_of(body, pre, inputs)
    weights = {role: outer_value(body.get_tensor_by_name(t)).name for role, t in inner.items()}
    return Cell(
        name=name,
        spec=named_spec(
            gate_names,
            tuple(f"{m.op.type} {m.op.name}" for m in labelled.values()),
            state_names,
            layouts,
        ),
        units=units,
        input_size=input_width(body, pre, inputs),
        output_size=widths.get("h", units),
        activation="/".join(sorted({NONLINEAR[_applied(m.op).type] for m in ms})),
        forget_bias=None,
        cell_clip=None,
        proj_clip=None,
        weights=weights,
        variables=variables,
        steps=(),
        loop=Loop(
            control_flow=gates[0].flow,
            loop=loops[0],
            inputs=None,
            below=None,
            initial=(),
            final=(),
            lengths=None,
            outputs=None,
            body=Step(
                position=0,
                gate_op=ms[0].op.name,
                preactivation=tuple(str(m.pre) for m in labelled.values()),
                activation=tuple(m.value for m in labelled.values()),
                states=tuple(kept[s].value for s in state_names),
                input="",
                previous=(),
            ),
        ),
        unknown_weights=unknown,
    )


def _matches(
    graph: tf.Graph, pattern: str, flag: str, label: str, source: str, nonlinear: bool
) -> list[_Named]:
    """Every op whose whole name `pattern` matches, checked (see the module docstring)."""
    try:
        compiled = regex.compile(pattern)
    except regex.error as err:
        raise GraphPatternError(f"{flag} {pattern}: not a regular expression ({err})") from None
    unknown = sorted(set(compiled.groupindex) - {"cell", label, "step"})
    if unknown:
        raise GraphPatternError(
            f"{flag} {pattern}: its named groups are cell, {label} and step; it has {', '.join(unknown)}"
        )
    found = []
    deadline = time.monotonic() + MATCHING_SECONDS
    for op, loop in _every_op(graph):
        try:  # bounded: a pattern that backtracks without end is stopped
            m = compiled.fullmatch(op.name, timeout=max(deadline - time.monotonic(), 1e-3))
        except TimeoutError:
            raise GraphPatternError(
                f"{flag} {pattern}: matching it against the graph's op names took more than {MATCHING_SECONDS:g} s "
                "and was stopped (a quantifier inside a quantified group, as (\\w+)+, backtracks without end); "
                "write it without nesting quantifiers"
            ) from None
        if m is None or not op.outputs:
            continue
        flow = "v2"
        if loop is None and in_v1_frame(op.outputs[0]):  # in a TF1 loop: its frame
            loop, flow = _frame_of(op), "v1"
            if loop is None:
                raise GraphPatternError(
                    f"{flag} {pattern}: {op.name} runs inside a TF1 while loop whose frame it does not read "
                    "through an Enter op; name the ops of a cell unrolled step by step"
                )
        if loop is not None and m.groupdict().get("step") is not None:
            raise GraphPatternError(
                f"{flag} {pattern}: {op.name} runs in the body of the while loop {loop}, once an iteration: "
                "leave the step group out (its steps are the loop's iterations)"
            )
        groups = m.groupdict()
        pre = None
        if nonlinear:
            applied = op
            while applied.type == "Identity" and applied.inputs:
                applied = applied.inputs[0].op
            if applied.type not in NONLINEAR:
                raise GraphPatternError(
                    f"{flag} {pattern}: {op.name} is a {op.type} op, not a gate's nonlinearity "
                    f"({', '.join(sorted(NONLINEAR))}): name the op that applies it"
                )
            pre = applied.inputs[0].name
        step = groups.get("step")
        if step is not None and not step.isdigit():
            raise GraphPatternError(
                f"{flag} {pattern}: its step group matched {step!r} in {op.name}, not a number"
            )
        found.append(
            _Named(
                groups.get("cell") or "",
                groups.get(label),
                None if step is None else int(step),
                op,
                pre,
                op.outputs[0].name,
                loop,
                flow,
            )
        )
    if not found:
        raise GraphPatternError(
            f"{flag} {pattern}: matches no op of {source} nor of its while loops' bodies (the whole op name "
            f"must match); its ops include {listing(_examples(graph), 6)}"
        )
    if any(not m.cell for m in found):  # no cell group: one cell, named by the scope its ops share
        shared = _shared_scope(m.op.name for m in found) or "cell"
        found = [
            _Named(m.cell or shared, m.label, m.step, m.op, m.pre, m.value, m.loop, m.flow)
            for m in found
        ]
    return found


def _cell(
    name: str,
    gates: list[_Named],
    states: list[_Named],
    cut: Cuts,
    order: dict[str, int],
    pattern: str,
) -> Cell:
    """One cell from the ops named for it."""
    positions, backward, inputs = _steps(name, gates, cut, "gates")
    state_positions = _steps(name, states, cut, "states")[0] if states else {}
    # per step: its gates, named, in the order the graph computes them
    per_step: dict[int, list[_Named]] = defaultdict(list)
    for m in gates:
        per_step[positions[m.op.name]].append(m)
    labelled: dict[int, dict[str, _Named]] = {}
    for p, ms in per_step.items():
        ms.sort(key=lambda m: order[m.op.name])
        labelled[p] = _labelled(name, p, ms, "gate", nonlinearity_names([m.op for m in ms]))
    steps = sorted(labelled)
    _consecutive(name, steps, "gates")
    if steps[-1] >= len(order):  # each step needs ops of its own: the graph has fewer
        raise GraphPatternError(
            f"cell {name}: --gate-ops {pattern} names step {steps[-1]}, more steps than the graph's {len(order):,} ops "
            "can compute; a step group must match the step's number"
        )
    first = labelled[steps[0]]
    gate_names = tuple(first)
    for p in steps:
        if tuple(labelled[p]) != gate_names:
            raise GraphPatternError(
                f"cell {name}: step {p} has gates {', '.join(labelled[p])}, step {steps[0]} {', '.join(gate_names)}; "
                f"--gate-ops {pattern} must name the same gates at every step"
            )
    state_steps: dict[int, dict[str, _Named]] = {}
    by_position: dict[int, list[_Named]] = defaultdict(list)
    for m in states:
        by_position[state_positions[m.op.name]].append(m)
    for p, ms in by_position.items():
        state_steps[p] = _labelled(name, p, ms, "state", ["h"] * len(ms))
    state_names = tuple(state_steps[steps[0]]) if state_steps else ()
    missing = [p for p in steps if state_names and tuple(state_steps.get(p, {})) != state_names]
    if missing or (state_steps and set(state_steps) - set(steps)):
        where = missing[0] if missing else min(set(state_steps) - set(steps))
        raise GraphPatternError(
            f"cell {name}: the states named at step {where} are {', '.join(state_steps.get(where, {})) or 'none'}, "
            f"at step {steps[0]} {', '.join(state_names)}; name every state at every step of the gates"
        )
    graph = gates[0].op.graph
    units = _width(graph, name, [m.value for p in steps for m in labelled[p].values()], "gates")
    widths = {
        s: _width(graph, name, [state_steps[p][s].value for p in steps], f"state {s}")
        for s in state_names
    }
    meanings = tuple(f"{first[g].op.type} {first[g].op.name}" for g in gate_names)
    layouts, weights, variables, unknown = weights_of(
        graph, {g: str(m.pre) for g, m in first.items()}, cut
    )
    applied = sorted({NONLINEAR[_applied(first[g].op).type] for g in gate_names})
    found_steps = tuple(
        Step(
            position=p,
            gate_op=labelled[p][gate_names[0]].op.name,
            preactivation=tuple(str(labelled[p][g].pre) for g in gate_names),
            activation=tuple(labelled[p][g].value for g in gate_names),
            states=tuple(state_steps[p][s].value for s in state_names),
            input=inputs.get(p, ""),
            previous=(),
        )
        for p in steps
    )
    x = inputs.get(steps[0])
    return Cell(
        name=name,
        spec=named_spec(gate_names, meanings, state_names, layouts),
        units=units,
        input_size=_features(graph, x),
        output_size=widths.get("h", units),
        activation="/".join(applied),
        forget_bias=None,
        cell_clip=None,
        proj_clip=None,
        weights=weights,
        variables=variables,
        steps=found_steps,
        backward=backward,
        unknown_weights=unknown,
    )


def _applied(op: tf.Operation) -> tf.Operation:
    """The nonlinearity an op applies (itself, or the op its Identity chain reads)."""
    while op.type == "Identity" and op.inputs:
        op = op.inputs[0].op
    return op


def nonlinearity_names(ops: Sequence[tf.Operation]) -> list[str]:
    """Gates nobody named: each op by the nonlinearity it applies and its order among the
    step's nonlinearities of that kind (sigmoid_0, sigmoid_1, tanh_0)."""
    seen: dict[str, int] = defaultdict(int)
    names = []
    for op in ops:
        kind = NONLINEAR[_applied(op).type]
        names.append(f"{kind}_{seen[kind]}")
        seen[kind] += 1
    return names


def _labelled(
    cell: str, step: int, ms: Sequence[_Named], what: str, defaults: Sequence[str]
) -> dict[str, _Named]:
    """A step's ops by label (the pattern's group, else `defaults`), each named once."""
    out: dict[str, _Named] = {}
    for m, default in zip(ms, defaults, strict=True):
        label = m.label if m.label is not None else default
        if label in out:
            raise GraphPatternError(
                f"cell {cell}: {out[label].op.name} and {m.op.name} are both {what} {label} of step {step}; "
                f"give the pattern a {what} group (or a step group) that tells them apart"
            )
        out[label] = m
    return out


def _consecutive(cell: str, steps: Sequence[int], what: str) -> None:
    """Refuse sorted `steps` that skip one, found without sizing anything by their numbers (a
    name may carry a step of 20 digits)."""
    gap = next((a + 1 for a, b in zip(steps, steps[1:], strict=False) if b != a + 1), None)
    if gap is not None:
        raise GraphPatternError(
            f"cell {cell}: its {what} are named at steps {steps[0]} to {steps[-1]} but not at step {gap}; "
            "the steps of a cell follow each other: name every step"
        )


def _width(graph: tf.Graph, cell: str, names: Sequence[str], what: str) -> int:
    """The one width of the [batch, width] tensors `names`; refused where they differ or
    their width is not known."""
    shapes = {n: graph.get_tensor_by_name(n).shape for n in names}
    for n, shape in shapes.items():
        if shape.rank != 2 or shape[1] is None:
            raise GraphPatternError(
                f"cell {cell}: {n} has shape {shape}; expected its {what} to be [batch, width] with a known width"
            )
    widths: dict[int, str] = {}
    for n, shape in shapes.items():
        widths.setdefault(int(shape[1]), n)
    if len(widths) > 1:
        (a, na), (b, nb) = list(widths.items())[:2]
        raise GraphPatternError(
            f"cell {cell}: its {what} have different shapes ({na} is [batch, {a}], {nb} [batch, {b}]); "
            "one cell's gates share one width: name the tensors of one cell"
        )
    return next(iter(widths))


def _features(graph: tf.Graph, x: str | None) -> int:
    """The features of one step's input (an Unpack's [batch, features], a Split's [batch, 1,
    features]); 0 where the input is not known."""
    if x is None:
        return 0
    dims = graph.get_tensor_by_name(x).shape.as_list()[1:]
    return int(np.prod(dims)) if dims and all(d is not None for d in dims) else 0


def _steps(
    cell: str, ms: Sequence[_Named], cut: Cuts, what: str
) -> tuple[dict[str, int], bool, dict[int, str]]:
    """Each op's input position (by op name), whether the cell runs backward, and the
    input tensor of each position where the input is cut into steps."""
    if all(m.step is not None for m in ms):
        return {m.op.name: int(m.step) for m in ms if m.step is not None}, False, {}
    if any(m.step is not None for m in ms):
        raise GraphPatternError(
            f"cell {cell}: the pattern's step group matched some of its {what} and not others"
        )
    return cut.positions(cell, [m.op for m in ms], what)


def _shared_scope(names: Iterable[str]) -> str:
    """The longest scope (`a/b`) every name is inside."""
    parts = [n.split("/")[:-1] for n in names]
    shared: list[str] = []
    for level in zip(*parts, strict=False):
        if len(set(level)) != 1:
            break
        shared.append(level[0])
    return "/".join(shared)


def _examples(graph: tf.Graph) -> list[str]:
    """A few op names of the graph, nonlinearities first (what a pattern usually names)."""
    ops = graph.get_operations()
    return [op.name for op in ops if op.type in NONLINEAR] + [
        op.name for op in ops if op.type not in NONLINEAR
    ]
