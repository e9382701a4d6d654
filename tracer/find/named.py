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

Without a step group, a tensor's step is its place in the chain from the step's input to
the next step's state: how many of the input's steps it has read, the input cut into steps
by an `Unpack` (`tf.unstack`), a `Split` (`tf.split`) or `StridedSlice` ops of one tensor
(`x[:, t]`). Step t of a forward cell has read positions 0 to t; of a backward cell, the
last t + 1 (its input position is then the first of them).

Ops in a TF2 while loop's body (`tf.while_loop`, `dynamic_rnn`) are named as the body function
names them, once an iteration, without a step group: the loop is rewritten to emit them
(`tracer.values.emit`), each iteration a step.

Refused in one line, nothing guessed: a pattern that matches nothing, an op that applies no
nonlinearity, ops of a TF1 while loop, tensors of different shapes in one cell, a step
without one of the gates (or states), steps that skip, and tensors whose step cannot be told.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from recorders.errors import GraphPatternError, listing
from tracer._tf import function_def_to_graph, tf
from tracer.cells.found import Cell, Loop, Step
from tracer.cells.kinds import GateWeights
from tracer.cells.kinds.named import named_spec
from tracer.find.application import ACTIVATIONS
from tracer.find.edges import in_v1_frame, weight_name, weight_source

__all__ = ["find_named", "propose", "Proposal"]

# the ops that apply a gate's nonlinearity, and the name each is recorded under
NONLINEAR = {op: name for op, name in ACTIVATIONS.items() if op != "Identity"}
_CUTS = ("Unpack", "Split", "SplitV")  # ops whose outputs are a sequence's steps


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
    loop: str | None = None  # the While op whose body runs it (once an iteration)


def find_named(
    graph: tf.Graph, gates: str, states: str | None = None, source: str = "the graph"
) -> list[Cell]:
    """The cells whose per-step gates the pattern `gates` names (and states `states` names),
    each a `Cell` of kind "named" whose steps are fetched as they are (see the module
    docstring)."""
    gate_matches = _matches(graph, gates, "--gate-ops", "gate", source, nonlinear=True)
    state_matches = (
        [] if states is None else _matches(graph, states, "--state-ops", "state", source, False)
    )
    cut = _Cuts(graph)
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
        body = function_def_to_graph(library[loop.get_attr("body").name])
        yield from ((op, loop.name) for op in body.get_operations())


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
    labelled = _labelled(name, 0, ms, "gate", _nonlinearity_names(ms))
    kept = _labelled(name, 0, states, "state", ["h"] * len(states))
    gate_names, state_names = tuple(labelled), tuple(kept)
    units = _width(body, name, [m.value for m in labelled.values()], "gates")
    widths = {s: _width(body, name, [kept[s].value], f"state {s}") for s in state_names}
    return Cell(
        name=name,
        spec=named_spec(
            gate_names,
            tuple(f"{m.op.type} {m.op.name}" for m in labelled.values()),
            state_names,
            tuple(GateWeights("", "", 0, 1) for _ in gate_names),
        ),
        units=units,
        input_size=0,
        output_size=widths.get("h", units),
        activation="/".join(sorted({NONLINEAR[_applied(m.op).type] for m in ms})),
        forget_bias=None,
        cell_clip=None,
        proj_clip=None,
        weights={},
        variables={},
        steps=(),
        loop=Loop(
            control_flow="v2",
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
        unknown_weights={g: "its ops run in a while loop's body" for g in gate_names},
    )


@dataclass(frozen=True)
class Proposal:
    """What looks like a cell of your own (`propose`): the pattern that records it, and what
    `find_named` makes of it."""

    cell: str
    pattern: str
    gates: tuple[str, ...]
    steps: int
    first: str  # its first step's first gate op
    last: str  # its last step's

    def describe(self) -> dict[str, object]:
        return {
            "cell": self.cell,
            "gate_ops": self.pattern,
            "gates": list(self.gates),
            "steps": self.steps,
            "first_step": self.first,
            "last_step": self.last,
        }


def propose(graph: tf.Graph, source: str = "the graph") -> list[Proposal]:
    """What looks like hand-written cells in `graph`: in each scope, the nonlinearities
    (Sigmoid, Tanh, ...) whose input comes through a matrix product and which read a
    sequence's steps one more each, step by step; each with the `--gate-ops` pattern of their
    names, kept only where `find_named` reads that pattern as one cell of two steps or more.
    No role is guessed: the gates are named as `find_named` names them."""
    cut = _Cuts(graph)
    if not cut.sources:
        return []
    by_scope: dict[str, list[tf.Operation]] = defaultdict(list)
    for op in graph.get_operations():
        if op.type in NONLINEAR and not in_v1_frame(op.outputs[0]) and _after_a_product(op):
            if cut.read(op):
                by_scope[op.name.rpartition("/")[0]].append(op)
    found = []
    for scope, ops in sorted(by_scope.items()):
        bases = sorted({re.sub(r"_\d+$", "", op.name.rpartition("/")[2]) for op in ops})
        prefix = re.escape(scope + "/") if scope else ""
        pattern = f"{prefix}(?:{'|'.join(re.escape(b) for b in bases)})(?:_\\d+)?"
        try:
            cells = find_named(graph, pattern, None, source)
        except GraphPatternError:
            continue
        if len(cells) == 1 and len(cells[0].steps) > 1:
            c = cells[0]
            found.append(
                Proposal(
                    c.name, pattern, c.gates, len(c.steps), c.steps[0].gate_op, c.steps[-1].gate_op
                )
            )
    return found


def _after_a_product(op: tf.Operation, depth: int = 6) -> bool:
    """Whether a matrix product (MatMul, BatchMatMul) is among the ops at most `depth` edges
    before `op`."""
    level, seen = [op], {op.name}
    for _ in range(depth):
        level = [t.op for o in level for t in o.inputs if t.op.name not in seen]
        if any(
            o.type in ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3") for o in level
        ):
            return True
        seen.update(o.name for o in level)
    return False


def _matches(
    graph: tf.Graph, pattern: str, flag: str, label: str, source: str, nonlinear: bool
) -> list[_Named]:
    """Every op whose whole name `pattern` matches, checked (see the module docstring)."""
    try:
        regex = re.compile(pattern)
    except re.error as err:
        raise GraphPatternError(f"{flag} {pattern}: not a regular expression ({err})") from None
    unknown = sorted(set(regex.groupindex) - {"cell", label, "step"})
    if unknown:
        raise GraphPatternError(
            f"{flag} {pattern}: its named groups are cell, {label} and step; it has {', '.join(unknown)}"
        )
    found = []
    for op, loop in _every_op(graph):
        m = regex.fullmatch(op.name)
        if m is None or not op.outputs:
            continue
        if loop is not None and m.groupdict().get("step") is not None:
            raise GraphPatternError(
                f"{flag} {pattern}: {op.name} runs in the body of the while loop {loop}, once an iteration: "
                "leave the step group out (its steps are the loop's iterations)"
            )
        if in_v1_frame(op.outputs[0]):
            raise GraphPatternError(
                f"{flag} {pattern}: {op.name} runs inside a TF1 while loop (control flow v1), whose ops are named "
                "only in a TF2 loop's body: name the ops of a cell unrolled step by step, or of a TF2 loop"
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
            _Named(m.cell or shared, m.label, m.step, m.op, m.pre, m.value, m.loop) for m in found
        ]
    return found


def _cell(
    name: str,
    gates: list[_Named],
    states: list[_Named],
    cut: _Cuts,
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
        labelled[p] = _labelled(name, p, ms, "gate", _nonlinearity_names(ms))
    steps = sorted(labelled)
    _consecutive(name, steps, "gates")
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
    layouts, weights, variables, unknown = _weights(graph, first, cut)
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


# ops a value passes through unchanged on its way from a step's input to a matrix product
_SAME = {"Identity", "Squeeze", "Reshape", "ExpandDims"}
_NOT_A_SUM = "its preactivation is not a sum of matrix products and biases of variables"


def _weights(
    graph: tf.Graph, gates: dict[str, _Named], cut: _Cuts
) -> tuple[tuple[GateWeights, ...], dict[str, str], dict[str, str], dict[str, str]]:
    """Where each gate's W, U and b are, read from the first step's ops: its preactivation a
    sum of `x @ W`, `h @ U` (or `[x, h] @ kernel`) and `b`, each a variable (or Const), or
    a column block of such a sum cut by a Split. Returns each gate's `GateWeights` (kernel
    "" where not known), the roles' tensors and variables, and why not, by gate."""
    layouts, weights, variables, unknown = [], {}, {}, {}
    for gate, m in gates.items():
        terms = _terms(graph.get_tensor_by_name(str(m.pre)), (0, 1))
        found = None if terms is None else _roles(terms, cut)
        if isinstance(found, str) or found is None:
            unknown[gate] = found or _NOT_A_SUM
            layouts.append(GateWeights("", "", 0, 1))
            continue
        blocks = {block for _, block in found.values()}
        if len(blocks) != 1:
            unknown[gate] = "its terms are different column blocks of their matrices"
            layouts.append(GateWeights("", "", 0, 1))
            continue
        (k, n) = blocks.pop()
        for role, (t, _) in found.items():
            weights[f"{gate}/{role}"] = t.name
            variables[f"{gate}/{role}"] = weight_name(t)
        products = [a for kind, a, _, _ in terms or () if kind == "product"]
        for t in _inner_weights(products):
            variables[f"own/{weight_name(t).rpartition('/')[2]}"] = weight_name(t)
        stacked = "kernel" in found
        layouts.append(
            GateWeights(
                f"{gate}/kernel" if stacked else f"{gate}/input",
                f"{gate}/bias" if "bias" in found else "",
                k,
                n,
                None if stacked or "recurrent" not in found else f"{gate}/recurrent",
            )
        )
    return tuple(layouts), weights, variables, unknown


def _terms(
    t: tf.Tensor, block: tuple[int, int]
) -> list[tuple[str, tf.Tensor, tf.Tensor | None, tuple[int, int]]] | None:
    """The terms of the sum `t` is, down through adds and Splits: (`product`, operand,
    matrix, block) for `operand @ matrix`, (`bias`, variable, None, block) for a variable;
    `block` (k, n): the k-th of n column blocks. None where `t` is anything else."""
    op = t.op
    if op.type == "Identity":
        return _terms(op.inputs[0], block)
    if op.type in ("Add", "AddV2", "BiasAdd"):
        parts = [_terms(u, block) for u in op.inputs]
        return None if any(p is None for p in parts) else [x for p in parts if p for x in p]
    if op.type == "Split" and tf.get_static_value(op.inputs[0]) in (1, -1):
        n = op.get_attr("num_split")
        return _terms(op.inputs[1], (t.value_index * block[1] + block[0], n * block[1]))
    if op.type == "MatMul" and not op.get_attr("transpose_a") and not op.get_attr("transpose_b"):
        a, w = op.inputs
        return [("product", a, w, block)] if weight_source(w) is not None else None
    if weight_source(t) is not None:
        return [("bias", t, None, block)]
    return None


def _roles(
    terms: list[tuple[str, tf.Tensor, tf.Tensor | None, tuple[int, int]]], cut: _Cuts
) -> dict[str, tuple[tf.Tensor, tuple[int, int]]] | str:
    """Each term's role: `input` (a product of the step's input), `kernel` (of [input,
    state] concatenated), `recurrent` (of anything else: the state, or what the cell made
    of it), `bias`; or why the terms do not say one weight a role."""
    roles: dict[str, tuple[tf.Tensor, tuple[int, int]]] = {}
    for kind, a, w, block in terms:
        if kind == "bias":
            role, t = "bias", a
        else:
            role = "input" if cut.is_input(a) else "kernel" if _joins_input(a, cut) else "recurrent"
            assert w is not None  # (a product's)
            t = w
        if role in roles:
            return f"it adds two terms of one kind ({role}: {roles[role][0].op.name}, {t.op.name})"
        roles[role] = (t, block)
    if "kernel" in roles and ("input" in roles or "recurrent" in roles):
        return "it adds a product of [input, state] to other products"
    if not roles.keys() & {"input", "kernel"}:
        return "none of its terms reads the step's input"
    return roles


def _inner_weights(operands: list[tf.Tensor], depth: int = 4) -> list[tf.Tensor]:
    """The matrices of the products a gate's operands are made of, at most `depth` ops back
    (the mLSTM's m = (x wmx) * (h wmh), which its recurrent matrix acts on): the cell's own
    weights, not any gate's, listed with its variables."""
    found, level, seen = [], [t.op for t in operands], set()
    for _ in range(depth):
        nxt = []
        for op in level:
            if op.name in seen:
                continue
            seen.add(op.name)
            if op.type == "MatMul" and weight_source(op.inputs[1]) is not None:
                found.append(op.inputs[1])
            elif op.type in ("Mul", "Add", "AddV2", "Identity", "BiasAdd"):
                nxt += [t.op for t in op.inputs]
        level = nxt
    return found


def _joins_input(a: tf.Tensor, cut: _Cuts) -> bool:
    """Whether `a` is [input, state] joined along its features (`tf.concat([x, h], 1)`)."""
    op = a.op
    if op.type != "ConcatV2" or tf.get_static_value(op.inputs[-1]) not in (1, -1):
        return False
    return len(op.inputs) == 3 and cut.is_input(op.inputs[0])


def _applied(op: tf.Operation) -> tf.Operation:
    """The nonlinearity an op applies (itself, or the op its Identity chain reads)."""
    while op.type == "Identity" and op.inputs:
        op = op.inputs[0].op
    return op


def _nonlinearity_names(ms: Sequence[_Named]) -> list[str]:
    """Gates the pattern leaves unnamed: each by its nonlinearity and its order among the
    step's nonlinearities of that kind (sigmoid_0, sigmoid_1, tanh_0)."""
    seen: dict[str, int] = defaultdict(int)
    names = []
    for m in ms:
        kind = NONLINEAR[_applied(m.op).type]
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
    gaps = sorted(set(range(steps[0], steps[-1] + 1)) - set(steps))
    if gaps:
        raise GraphPatternError(
            f"cell {cell}: its {what} are named at steps {steps[0]} to {steps[-1]} but not at step {gaps[0]}; "
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
    cell: str, ms: Sequence[_Named], cut: _Cuts, what: str
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


class _Cuts:
    """Where the graph cuts a sequence into steps (the outputs of an Unpack or a Split, or
    StridedSlice ops of one tensor at constant positions), and which of those steps each op
    has read, through any path back along the graph's edges."""

    def __init__(self, graph: tf.Graph):
        self.sources: dict[str, list[str]] = {}  # a cut: its steps' tensors, in input order
        slices: dict[str, list[tuple[tuple[int, ...], str]]] = defaultdict(list)
        for op in graph.get_operations():
            if op.type in _CUTS and len(op.outputs) > 1:
                self.sources[op.name] = [t.name for t in op.outputs]
            elif op.type == "StridedSlice" and op.get_attr("shrink_axis_mask"):
                begin = tf.get_static_value(op.inputs[1])
                if begin is not None:
                    slices[op.inputs[0].name].append(
                        (tuple(int(b) for b in begin), op.outputs[0].name)
                    )
        for sliced, found in slices.items():
            if len(found) > 1:
                self.sources[f"slices of {sliced}"] = [t for _, t in sorted(found)]
        self._bit = {t: k for k, t in enumerate(t for ts in self.sources.values() for t in ts)}
        self._read: dict[str, int] = {}  # op name: the cut tensors it has read, as bits

    def read(self, op: tf.Operation) -> int:
        """The cut tensors `op` has read, as bits of `_bit` (a while loop's cycle is walked
        once)."""
        memo, bit, busy = self._read, self._bit, set()
        stack = [(op, False)]
        while stack:
            o, done = stack.pop()
            if o.name in memo:
                continue
            if done:
                mask = 0
                for t in o.inputs:
                    mask |= memo.get(t.op.name, 0) | (1 << bit[t.name] if t.name in bit else 0)
                memo[o.name] = mask
                continue
            if o.name in busy:
                continue
            busy.add(o.name)
            stack.append((o, True))
            stack.extend((t.op, False) for t in o.inputs if t.op.name not in memo)
        return memo[op.name]

    def is_input(self, t: tf.Tensor) -> bool:
        """Whether `t` is one step of a cut input (through ops that pass it on unchanged)."""
        while t.name not in self._bit and t.op.type in _SAME and t.op.inputs:
            t = t.op.inputs[0]
        return t.name in self._bit

    def positions(
        self, cell: str, ops: Sequence[tf.Operation], what: str
    ) -> tuple[dict[str, int], bool, dict[int, str]]:
        """Each op's input position (see the module docstring), whether the cell reads its
        input backward, and the tensor of each position."""
        read = {op.name: self.read(op) for op in ops}
        best: tuple[int, str, dict[str, list[int]]] | None = None
        for source, tensors in self.sources.items():
            bits = [self._bit[t] for t in tensors]
            seen = {n: [k for k, b in enumerate(bits) if mask >> b & 1] for n, mask in read.items()}
            counts = {len(ks) for ks in seen.values()}
            if len(counts) > 1 and (best is None or len(counts) > best[0]):
                best = (len(counts), source, seen)
        if best is None:
            raise GraphPatternError(
                f"cell {cell}: its {what} do not read an input cut into steps (by Unpack, Split or StridedSlice) "
                "one step more each, so their steps cannot be told; give the pattern a (?P<step>\\d+) group"
            )
        _, source, seen = best
        n = len(self.sources[source])
        forward = {name: ks == list(range(len(ks))) for name, ks in seen.items()}
        backward = {name: ks == list(range(n - len(ks), n)) for name, ks in seen.items()}
        for name, ks in seen.items():
            if not ks or not (forward[name] or backward[name]):
                shown = (
                    "none"
                    if not ks
                    else ", ".join(map(str, ks[:6])) + (", ..." if len(ks) > 6 else "")
                )
                raise GraphPatternError(
                    f"cell {cell}: {name} has read steps {shown} of the input {source}, not its first or last "
                    "steps in order, so its step cannot be told; give the pattern a (?P<step>\\d+) group"
                )
        reverse = not all(forward.values())
        if reverse and not all(backward.values()):
            raise GraphPatternError(
                f"cell {cell}: some of its {what} read the input {source} from its start, others from its end; "
                "name the ops of one direction (one cell) at a time"
            )
        at = {name: (n - len(ks)) if reverse else len(ks) - 1 for name, ks in seen.items()}
        return at, reverse, {p: self.sources[source][p] for p in set(at.values())}
