"""The graph walker: find every RNN cell in an unrolled TF1 graph, by following edges.

Every cell class in `tf.compat.v1.nn.rnn_cell` starts a step the same way:
`MatMul(ConcatV2([inputs, h_prev]), kernel)` then `BiasAdd(..., bias)`. What follows
tells the kind apart:

    BasicLSTMCell, LSTMCell   BiasAdd -> Split(4) -> i, j, f, o preactivations
    GRUCell                   BiasAdd -> Sigmoid -> Split(2) -> r, u activations
    BasicRNNCell              BiasAdd -> activation -> h

The walker finds those patterns, groups the steps by the kernel variable they read
(variable scopes and op scopes differ, so names are never guessed), splits each group
into chains linked by their state edges (one kernel may serve several chains: both
directions, a training and a sampling unroll), orders each chain along the recurrence,
and maps each step to the input position it read, so that the backward half of a
bidirectional RNN lines up with the forward half. Cells sharing a kernel get distinct
names (`scope@where`) and list each other in `shares_weights_with`.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Iterable, Mapping

import numpy as np

from recorders.errors import GraphPatternError, NoCellFoundError
from tracer._tf import tf
from tracer.cells import BASIC_LSTM, BASIC_RNN, GRU, LSTM, CellSpec, HasSpec
from tracer.fused import FUSED_OPS, Fused, fused_cells
from tracer.loops import Loop, in_v1_loop, v1_loop_cells, v2_loop_cells

__all__ = ["Step", "Cell", "find_cells"]

# Ops that hold weights, and ops that only pass a value through on its way from them.
_WEIGHT_SOURCES = {"VarHandleOp", "VariableV2", "Variable", "Const"}
_PASS_THROUGH = {"Identity", "ReadVariableOp", "Snapshot", "Enter"}  # Enter: into a TF1 while loop
_ADDS = {"Add", "AddV2"}
# TensorFlow op type of a cell's `activation` -> the name gatetrace records.
ACTIVATIONS = {
    "Tanh": "tanh",
    "Sigmoid": "sigmoid",
    "Relu": "relu",
    "Relu6": "relu6",
    "Elu": "elu",
    "Selu": "selu",
    "Softsign": "softsign",
    "Softplus": "softplus",
    "Identity": "linear",
}


@dataclass(frozen=True)
class Step:
    """One application of a cell: the tensors of one timestep.

    position:      the input position this step read (for a backward RNN, the reverse
                   of the order in which the graph computed it).
    gate_op:       the op holding the gates: `.../split_k` for LSTM and GRU cells, the
                   `BiasAdd` for BasicRNNCell.
    preactivation: tensors whose concatenation along axis 1 is `[gate_0 | gate_1 | ...]`,
                   each gate `units` wide, in the spec's gate order.
    activation:    the same for the gate values the cell used.
    states:        one tensor per `spec.states` (`c`, `h`) after this step.
    input:         the input `x` the cell read.
    previous:      the states the cell read, one per `spec.states`.
    """

    position: int
    gate_op: str
    preactivation: tuple[str, ...]
    activation: tuple[str, ...]
    states: tuple[str, ...]
    input: str
    previous: tuple[str, ...]


@dataclass(frozen=True)
class Cell(HasSpec):
    """One RNN cell found in a graph, with all its steps ordered by input position.

    name is the scope holding the cell's weights: the kernel's variable name without
    `/kernel` (`/gates/kernel` for GRUCell). `weights` maps a role (`kernel`, `bias`,
    `candidate_kernel`, `candidate_bias`, `w_i_diag`, `w_f_diag`, `w_o_diag`,
    `projection`) to the tensor the cell reads it from; `variables` maps the same roles
    to the variable (or, in a frozen graph, Const) names.
    """

    name: str
    spec: CellSpec
    units: int
    input_size: int
    output_size: int
    activation: str
    forget_bias: float | None
    cell_clip: float | None
    proj_clip: float | None
    weights: Mapping[str, str]
    variables: Mapping[str, str]
    steps: tuple[Step, ...]
    backward: bool = False
    loop: Loop | None = None
    shares_weights_with: tuple[str, ...] = ()  # the other cells reading the same kernel
    fused: Fused | None = None  # a fused op's cell (LSTMBlockCell, BlockLSTM, GRUBlockCell): see tracer.fused

    def __repr__(self) -> str:
        where = f"in {self.loop.loop}" if self.loop else f"ops {self.fused.ops[0]}..." if self.fused else f"steps={len(self.steps)}"
        return f"Cell({self.name!r}, {self.kind}, units={self.units}, input_size={self.input_size}, {where})"

    @property
    def path(self) -> str:
        """How its gates are recorded: `fetch` (the graph's own gate ops, one per step),
        `replay` (recomputed in numpy from what enters and leaves its while loop) or `fused`
        (a fused op's own outputs, preactivations recomputed from its inputs)."""
        return "replay" if self.loop is not None else "fused" if self.fused is not None else "fetch"

    @property
    def positions(self) -> np.ndarray:
        """The input position of each step, in step order (int32)."""
        return np.array([s.position for s in self.steps], dtype=np.int32)

    @property
    def num_proj(self) -> int | None:
        return self.output_size if "projection" in self.weights else None

    def describe(self) -> dict:
        """A JSON-ready description, as `inspect --json` and the manifest show it."""
        return {
            "name": self.name,
            "kind": self.kind,
            "units": self.units,
            "input_size": self.input_size,
            "output_size": self.output_size,
            "num_proj": self.num_proj,
            "steps": self.loop.length if self.loop else self.fused.length if self.fused else len(self.steps),
            "gates": list(self.gates),
            "states": list(self.spec.states),
            "forget_bias": self.forget_bias,
            "activation": self.activation,
            "cell_clip": self.cell_clip,
            "proj_clip": self.proj_clip,
            "peepholes": all(k in self.weights for k in ("w_i_diag", "w_f_diag", "w_o_diag")),
            "direction": "backward" if self.backward else "forward",
            "variables": dict(self.variables),
            "shares_weights_with": list(self.shares_weights_with),
            "path": self.path,
            **(
                {"loop": asdict(self.loop), "why": _why_replay(self.loop)}
                if self.loop is not None
                else {"fused": asdict(self.fused), "why": _why_fused(self.fused)}
                if self.fused is not None
                else {"first_step": _describe_step(self, self.steps[0]), "last_step": _describe_step(self, self.steps[-1])}
            ),
        }


def _why_replay(loop: Loop) -> str:
    kind = "a While op's body function" if loop.control_flow == "v2" else "a TF1 while loop (Enter/Exit)"
    return (
        f"its gate ops run inside {kind} ({loop.loop}) and cannot be fetched: its gates are recomputed in numpy "
        "from the loop's input, initial state and weights, and checked against the loop's outputs and final state"
    )


def _why_fused(fused: Fused) -> str:
    return (
        f"a fused {fused.op_type} op computes its gates ({fused.ops[0]}"
        f"{f' ... {fused.ops[-1]}' if len(fused.ops) > 1 else ''}): the activations are its own outputs, the "
        "preactivations are recomputed from its inputs and weights and checked against them"
    )


def _describe_step(cell: Cell, step: Step) -> dict:
    if cell.spec.is_lstm:
        # The four outputs of the step's Split op are the four gates' preactivations.
        gate_tensors = [f"{step.gate_op}:{k}" for k in range(4)]
    else:
        gate_tensors = list(step.preactivation)
    return {
        "position": step.position,
        "gate_op": step.gate_op,
        "gate_tensors": gate_tensors,
        "activation_tensors": list(step.activation),
        "state_tensors": list(step.states),
    }


# ----------------------------------------------------------------------------------
# Small edge-following helpers.


def _source(t: tf.Tensor) -> tf.Operation | None:
    """The variable or Const a tensor is read from, through Identity/ReadVariableOp/Enter.

    In the body of a control-flow-v2 while loop, weights arrive as body arguments that
    every iteration passes on unchanged: there the Placeholder standing for such an
    argument is the source (`tracer.loops` marks them and maps them to the loop's inputs).
    """
    op = t.op
    while op.type in _PASS_THROUGH and op.inputs:
        op = op.inputs[0].op
    if op.type == "Placeholder" and op.outputs[0].name in getattr(op.graph, "loop_invariants", ()):
        return op
    return op if op.type in _WEIGHT_SOURCES else None


def _const_scalar(t: tf.Tensor) -> float | None:
    op = t.op
    while op.type in _PASS_THROUGH and op.inputs:
        op = op.inputs[0].op
    if op.type != "Const":
        return None
    value = tf.make_ndarray(op.get_attr("value"))
    if value.size != 1:
        return None
    # The shortest decimal that round-trips the stored float32 (0.3, not 0.30000001192...).
    return float(np.format_float_positional(value.reshape(())[()], unique=True, trim="-"))


def _other(op: tf.Operation, t: tf.Tensor) -> tf.Tensor:
    """The other operand of a binary op that reads `t`."""
    a, b = op.inputs[0], op.inputs[1]
    return b if a.name == t.name else a


def _consumers(t: tf.Tensor, types: Iterable[str], where: Callable[[tf.Operation], bool] | None = None) -> list[tf.Operation]:
    """The ops of the given types that read `t` (and satisfy `where`).

    Training graphs also hold gradient ops that read the forward tensors (a Mul's
    gradient multiplies by its operands), so callers narrow the choice by structure.
    """
    types = set(types)
    return [c for c in t.consumers() if c.type in types and (where is None or where(c))]


def _only(ops: list[tf.Operation], what: str, near: tf.Operation) -> tf.Operation:
    if len(ops) != 1:
        found = ", ".join(o.name for o in ops) or "nothing"
        raise GraphPatternError(
            f"unexpected structure after {near.name}: expected one {what}, found {found}; "
            "the cell may be a modified copy of a TensorFlow RNN cell, which gatetrace does not read"
        )
    return ops[0]


def _reads(op: tf.Operation, t: tf.Tensor) -> bool:
    return any(i.name == t.name for i in op.inputs)


def _feeds(op: tf.Operation, types: Iterable[str]) -> bool:
    """Whether an output of `op` is read by an op of one of `types`."""
    return any(_consumers(out, types) for out in op.outputs)


def _recurrent_width(concat: tf.Operation, kernel: tf.Tensor) -> int | None:
    """How wide the recurrent state a step reads is: h_prev's width, or kernel rows - input width."""
    width = concat.inputs[1].shape[-1] if concat.inputs[1].shape.rank else None
    if width is None:
        rows, x_width = kernel.shape[0], concat.inputs[0].shape[-1] if concat.inputs[0].shape.rank else None
        width = rows - x_width if rows is not None and x_width is not None else None
    return width


def _is_projection(op: tf.Operation, m: tf.Tensor, units: int, width: int) -> bool:
    kernel = op.inputs[1]
    return op.inputs[0].name == m.name and _source(kernel) is not None and kernel.shape.as_list() == [units, width]


def _chain_to_sigmoid(t: tf.Tensor) -> tuple[tf.Operation, list[tf.Tensor]]:
    """Follow `t` through additions to the Sigmoid it ends in; return it and the addends."""
    addends = []
    while True:
        sig = _consumers(t, {"Sigmoid"})
        if sig:
            return sig[0], addends
        add = _only(_consumers(t, _ADDS), "Add or Sigmoid", t.op)
        addends.append(_other(add, t))
        t = add.outputs[0]


def _clip(t: tf.Tensor) -> tuple[tf.Tensor, float | None]:
    """If `t` goes through `clip_by_value(t, -v, v)` (Minimum, then Maximum), its output and v."""
    for lo in _consumers(t, {"Minimum"}):
        hi = _const_scalar(_other(lo, t))
        for mx in _consumers(lo.outputs[0], {"Maximum"}):
            if hi is not None and _const_scalar(_other(mx, lo.outputs[0])) is not None:
                return mx.outputs[0], hi
    return t, None


def _activation_name(op: tf.Operation) -> str:
    try:
        return ACTIVATIONS[op.type]
    except KeyError:
        raise GraphPatternError(
            f"{op.name}: the cell's activation is a {op.type} op; gatetrace knows "
            f"{', '.join(sorted(ACTIVATIONS))}"
        ) from None


# ----------------------------------------------------------------------------------
# One application (one step) of a cell, as found in the graph.


@dataclass
class _App:
    spec: CellSpec
    kernel: tf.Operation  # the main kernel's variable or Const
    gate_op: tf.Operation
    preactivation: tuple[tf.Tensor, ...]
    activation: tuple[tf.Tensor, ...]
    states: tuple[tf.Tensor, ...]
    input: tf.Tensor
    previous: tuple[tf.Tensor, ...]
    weights: dict[str, tf.Tensor]
    activation_name: str
    forget_bias: float | None = None
    cell_clip: float | None = None
    proj_clip: float | None = None
    claimed: tuple[str, ...] = field(default=())  # the kernel MatMuls this step owns


def _kernel_step(bias_add: tf.Operation) -> tuple[tf.Operation, tf.Operation, tf.Operation] | None:
    """(MatMul, ConcatV2, kernel source) if `bias_add` is `BiasAdd(MatMul(concat, W), b)`."""
    if bias_add.type != "BiasAdd" or _source(bias_add.inputs[1]) is None:
        return None
    matmul = bias_add.inputs[0].op
    if matmul.type != "MatMul" or matmul.get_attr("transpose_a") or matmul.get_attr("transpose_b"):
        return None
    kernel = _source(matmul.inputs[1])
    concat = matmul.inputs[0].op
    if kernel is None or concat.type != "ConcatV2" or len(concat.inputs) != 3:
        return None
    return matmul, concat, kernel


def _lstm_app(split: tf.Operation) -> _App | None:
    bias_add = split.inputs[1].op
    found = _kernel_step(bias_add)
    if found is None:
        return None
    _, concat, kernel = found
    i, j, f, o = split.outputs  # i = input_gate, j = new_input, f = forget_gate, o = output_gate

    weights = {"kernel": found[0].inputs[1], "bias": bias_add.inputs[1]}
    sig_i, i_terms = _chain_to_sigmoid(i)
    sig_f, f_terms = _chain_to_sigmoid(f)
    sig_o, o_terms = _chain_to_sigmoid(o)
    act_j = _only(_consumers(j, ACTIVATIONS), "activation of j", split)

    forget_bias = None
    for term in f_terms:
        value = _const_scalar(term)
        if value is not None:
            forget_bias = value
    # Peephole terms are `w_diag * c`: a Mul with one operand read from a variable.
    for role, terms in (("w_i_diag", i_terms), ("w_f_diag", f_terms), ("w_o_diag", o_terms)):
        for term in terms:
            if term.op.type == "Mul":
                for operand in term.op.inputs:
                    if _source(operand) is not None:
                        weights[role] = operand

    # c = f * c_prev + i * j: the Mul of sigmoid(i) and act(j), the Add it feeds, and
    # that Add's other operand, the Mul of sigmoid(f) and c_prev.
    input_mul = _only(
        _consumers(sig_i.outputs[0], {"Mul"}, lambda op: _reads(op, act_j.outputs[0])), "Mul of the input gate", sig_i
    )
    c_raw = _only(_consumers(input_mul.outputs[0], _ADDS), "Add forming the cell state", input_mul)
    forget_mul = _other(c_raw, input_mul.outputs[0]).op
    if forget_mul.type != "Mul" or not _reads(forget_mul, sig_f.outputs[0]):
        raise GraphPatternError(f"{c_raw.name}: expected the cell state to add sigmoid(f) * c_prev, found a {forget_mul.type} op")
    c_prev = _other(forget_mul, sig_f.outputs[0])
    c, cell_clip = _clip(c_raw.outputs[0])

    # h = sigmoid(o) * act(c): the Mul of sigmoid(o) whose other operand reads c.
    m = _only(
        _consumers(sig_o.outputs[0], {"Mul"}, lambda op: _reads(_other(op, sig_o.outputs[0]).op, c)),
        "Mul of the output gate",
        sig_o,
    ).outputs[0]
    h, proj_clip = m, None
    units = split.outputs[0].shape[-1]
    recurrent = _recurrent_width(concat, found[0].inputs[1])
    if units is not None and recurrent is not None and recurrent != units:
        # LSTMCell(num_proj=P): h = m @ projection (then clipped), and h_prev is P wide.
        # Other MatMuls may read m too (a readout layer on the last step): match the shape.
        proj = _only(
            _consumers(m, {"MatMul"}, lambda op: _is_projection(op, m, units, recurrent)),
            f"projection MatMul of a [{units}, {recurrent}] kernel",
            m.op,
        )
        weights["projection"] = proj.inputs[1]
        h, proj_clip = _clip(proj.outputs[0])

    # BasicLSTMCell writes `multiply(c, sigmoid(f + forget_bias))`; LSTMCell writes
    # `sigmoid(f + forget_bias) * c_prev`. Peepholes, clipping and projection are LSTMCell's.
    basic = forget_mul.inputs[1].name == sig_f.outputs[0].name
    lstm_only = len(weights) > 2 or cell_clip is not None
    return _App(
        spec=LSTM if (lstm_only or not basic) else BASIC_LSTM,
        kernel=kernel,
        gate_op=split,
        preactivation=(bias_add.outputs[0],),
        activation=(sig_i.outputs[0], act_j.outputs[0], sig_f.outputs[0], sig_o.outputs[0]),
        states=(c, h),
        input=concat.inputs[0],
        previous=(c_prev, concat.inputs[1]),
        weights=weights,
        activation_name=_activation_name(act_j),
        forget_bias=forget_bias,
        cell_clip=cell_clip,
        proj_clip=proj_clip,
        claimed=(found[0].name,),
    )


def _gru_app(split: tf.Operation) -> _App | None:
    sigmoid = split.inputs[1].op
    if sigmoid.type != "Sigmoid":
        return None
    bias_add = sigmoid.inputs[0].op
    found = _kernel_step(bias_add)
    if found is None:
        return None
    _, concat, kernel = found
    r, u = split.outputs  # r = reset gate, u = update gate
    r_state = _only(_consumers(r, {"Mul"}, lambda op: _feeds(op, {"ConcatV2"})), "Mul of the reset gate", split)
    cand_concat = _only(_consumers(r_state.outputs[0], {"ConcatV2"}), "ConcatV2 of the candidate", r_state)
    cand_matmul = _only(
        _consumers(cand_concat.outputs[0], {"MatMul"}, lambda op: _source(op.inputs[1]) is not None),
        "MatMul of the candidate",
        cand_concat,
    )
    cand_bias_add = _only(_consumers(cand_matmul.outputs[0], {"BiasAdd"}), "BiasAdd of the candidate", cand_matmul)
    if _kernel_step(cand_bias_add) is None:
        return None
    act = _only(_consumers(cand_bias_add.outputs[0], ACTIVATIONS), "activation of the candidate", cand_bias_add)
    mix = _only(_consumers(act.outputs[0], {"Mul"}, lambda op: _feeds(op, _ADDS)), "Mul of (1 - u) and the candidate", act)
    new_h = _only(_consumers(mix.outputs[0], _ADDS), "Add forming the new state", mix)
    return _App(
        spec=GRU,
        kernel=kernel,
        gate_op=split,
        preactivation=(bias_add.outputs[0], cand_bias_add.outputs[0]),
        activation=(sigmoid.outputs[0], act.outputs[0]),
        states=(new_h.outputs[0],),
        input=concat.inputs[0],
        previous=(concat.inputs[1],),
        weights={
            "kernel": found[0].inputs[1],
            "bias": bias_add.inputs[1],
            "candidate_kernel": cand_matmul.inputs[1],
            "candidate_bias": cand_bias_add.inputs[1],
        },
        activation_name=_activation_name(act),
        claimed=(found[0].name, cand_matmul.name),
    )


def _rnn_app(bias_add: tf.Operation) -> _App | None:
    found = _kernel_step(bias_add)
    consumers = _consumers(bias_add.outputs[0], ACTIVATIONS)
    if found is None or len(consumers) != 1:
        return None
    matmul, concat, kernel = found
    units = matmul.inputs[1].shape[-1]
    state_width = concat.inputs[1].shape[-1]
    if units is None or state_width != units:
        return None
    act = consumers[0]
    return _App(
        spec=BASIC_RNN,
        kernel=kernel,
        gate_op=bias_add,
        preactivation=(bias_add.outputs[0],),
        activation=(act.outputs[0],),
        states=(act.outputs[0],),
        input=concat.inputs[0],
        previous=(concat.inputs[1],),
        weights={"kernel": matmul.inputs[1], "bias": bias_add.inputs[1]},
        activation_name=_activation_name(act),
    )


# ----------------------------------------------------------------------------------
# The walk.


def _topological_index(graph: tf.Graph) -> dict[str, int]:
    """Each op's index in a topological order of the graph (Kahn's algorithm)."""
    ops = graph.get_operations()
    pending = {op.name: len(op.inputs) + len(op.control_inputs) for op in ops}
    users: dict[str, list[str]] = {op.name: [] for op in ops}
    for op in ops:
        for t in op.inputs:
            users[t.op.name].append(op.name)
        for c in op.control_inputs:
            users[c.name].append(op.name)
    ready = deque(name for name, n in pending.items() if n == 0)
    index: dict[str, int] = {}
    while ready:
        name = ready.popleft()
        index[name] = len(index)
        for user in users[name]:
            pending[user] -= 1
            if pending[user] == 0:
                ready.append(user)
    return index


def _find_apps(graph: tf.Graph) -> list[_App]:
    apps: list[_App] = []
    claimed: set[str] = set()
    for op in graph.get_operations():
        if op.type != "Split":
            continue
        n = op.get_attr("num_split")
        app = _lstm_app(op) if n == 4 else _gru_app(op) if n == 2 else None
        if app is not None:
            apps.append(app)
            claimed.update(app.claimed)
    for op in graph.get_operations():
        if op.type == "BiasAdd" and op.inputs[0].op.name not in claimed:
            app = _rnn_app(op)
            if app is not None:
                apps.append(app)
    return apps


# What the main kernel's variable was called in each era of TensorFlow, after the cell's scope.
_KERNEL_NAMES = ("kernel", "weights", "Linear/Matrix")  # TF >= 1.2, TF 1.0 and 1.1, TF 0.x


def _cell_name(kernel: tf.Operation, spec: CellSpec) -> str:
    """The scope holding a cell's weights: the kernel's name without `/kernel` (or
    `/gates/kernel` for GRUCell), whatever the era called the kernel."""
    name = kernel.name
    inner = spec.kernel_suffix.rpartition("/")[0]  # "/gates" for GRUCell, "" otherwise
    for era in _KERNEL_NAMES:
        for suffix in (f"{inner}/{era}", f"/{era}"):
            if name.endswith(suffix):
                return name[: -len(suffix)]
    return name


def _input_position(
    t: tf.Tensor,
    owners: Mapping[str, tuple[str, int]],
    position_of: Callable[[str, int], int | None],
    gate_ops: set[str],
    limit: int = 256,
) -> int | None:
    """The sequence position an input tensor comes from, searching back along edges.

    It stops at the nearest tensor that is either the output of another cell's step
    (a stacked layer: same position as that step) or one output of an Unpack/Split
    (`tf.unstack(x, axis=1)`: the output's index).
    """
    queue, seen = deque([t]), set()
    while queue and len(seen) < limit:
        t = queue.popleft()
        if t.name in seen:
            continue
        seen.add(t.name)
        if t.name in owners:
            return position_of(*owners[t.name])
        if t.op.type in ("Unpack", "Split", "SplitV") and t.op.name not in gate_ops:
            return t.value_index
        queue.extend(t.op.inputs)
    return None


def _sizes(spec: CellSpec, kernel: tf.Tensor, projection: tf.Tensor | None) -> tuple[int, int, int]:
    """(units, input size, output size) from the main kernel's and the projection's shapes."""
    rows, columns = kernel.shape.as_list()
    units = columns // spec.weights[0].blocks
    output_size = units if projection is None else projection.shape.as_list()[1]
    return units, rows - output_size, output_size


def _build_cell(name: str, apps: list[_App], positions: list[int]) -> Cell:
    first = apps[0]
    for app in apps[1:]:
        if app.spec is not first.spec or app.activation_name != first.activation_name:
            raise GraphPatternError(
                f"cell {name}: its steps differ ({first.gate_op.name} is a {first.spec.kind} "
                f"with {first.activation_name}, {app.gate_op.name} a {app.spec.kind} with "
                f"{app.activation_name}); expected one cell class applied at every step"
            )
    steps = [
        Step(
            position=pos,
            gate_op=app.gate_op.name,
            preactivation=tuple(t.name for t in app.preactivation),
            activation=tuple(t.name for t in app.activation),
            states=tuple(t.name for t in app.states),
            input=app.input.name,
            previous=tuple(t.name for t in app.previous),
        )
        for pos, app in zip(positions, apps)
    ]
    steps.sort(key=lambda s: s.position)
    return _cell_of(
        first,
        name,
        first.weights["kernel"],
        first.weights.get("projection"),
        weights={role: t.name for role, t in first.weights.items()},
        variables={role: _source(t).name for role, t in first.weights.items()},
        steps=tuple(steps),
        backward=len(steps) > 1 and positions == list(range(len(steps)))[::-1],
    )


def _cell_of(app: _App, name: str, kernel: tf.Tensor, projection: tf.Tensor | None, **rest) -> Cell:
    """A Cell of `app`'s class and settings, its sizes read from the kernel and projection;
    `rest` holds weights, variables, steps, and backward or loop."""
    units, input_size, output_size = _sizes(app.spec, kernel, projection)
    return Cell(
        name=name,
        spec=app.spec,
        units=units,
        input_size=input_size,
        output_size=output_size,
        activation=app.activation_name,
        forget_bias=app.forget_bias,
        cell_clip=app.cell_clip,
        proj_clip=app.proj_clip,
        **rest,
    )


def _nearby_ops(graph: tf.Graph, n: int = 5) -> str:
    interesting = {"MatMul", "Split", "BiasAdd", "While", "StatelessWhile", "Sigmoid", "Tanh"}
    ops = graph.get_operations()
    names = [op.name for op in ops if op.type in interesting][:n] or [op.name for op in ops][:n]
    return ", ".join(names) if names else "(the graph is empty)"


def find_cells(graph: tf.Graph, source: str = "the graph") -> list[Cell]:
    """Every RNN cell applied in `graph`, ordered by name.

    Raises NoCellFoundError (naming `source` and a few nearby ops) when there is none.
    """
    apps = _find_apps(graph)
    # Cells inside while loops (dynamic_rnn) are replayed: see tracer.loops. Fused ops'
    # outputs are their gates: see tracer.fused.
    loop_cells = v1_loop_cells(graph, [a for a in apps if in_v1_loop(a)]) + v2_loop_cells(graph, _find_apps)
    loop_cells += fused_cells(graph)
    apps = [a for a in apps if not in_v1_loop(a)]
    if not apps and not loop_cells:
        ops = graph.get_operations()
        loops = [op.name for op in ops if op.type in ("While", "StatelessWhile", "Enter")]
        conds = [op.name for op in ops if op.type in ("If", "StatelessIf", "Switch")]
        cudnn = [f"{op.name} ({op.type})" for op in ops if op.type.startswith("CudnnRNN")]
        layer_norm = [op.name for op in ops if op.type == "Split" and "layer_norm" in op.name.lower() + "".join(
            c.name.lower() for t in op.outputs for c in t.consumers())]
        hint = ""
        if cudnn:
            hint = (
                f"; the graph runs a cuDNN RNN, {cudnn[0]}, whose weights are one opaque parameter buffer and whose "
                "gates no op exposes: gatetrace does not support CudnnLSTM/CudnnGRU (convert the model to "
                "CudnnCompatibleLSTMCell or an LSTMBlockFusedCell)"
            )
        elif layer_norm:
            hint = (
                f"; the graph normalizes its gates ({layer_norm[0]}), as LayerNormBasicLSTMCell does: "
                "gatetrace does not support layer-normalized cells"
            )
        elif loops:
            hint = f"; the graph runs a while loop ({loops[0]}), in which no cell of these kinds was found either"
        elif conds:
            hint = (
                f"; the graph runs its steps inside conditionals ({conds[0]}), as static_rnn does "
                "when given sequence_length: their gates cannot be fetched; build the graph without "
                "sequence_length and pass the lengths to gatetrace with --lengths"
            )
        raise NoCellFoundError(
            f"no RNN cell found in {source}: looked for Split ops fed by a kernel MatMul "
            f"(LSTM and GRU cells), MatMul-BiasAdd-activation steps on concat([inputs, state]) "
            f"(BasicRNNCell) and the fused ops {', '.join(sorted(FUSED_OPS))}; nearest ops: {_nearby_ops(graph)}{hint}"
        )

    order = _topological_index(graph)
    by_kernel: dict[str, list[_App]] = {}
    for app in apps:
        by_kernel.setdefault(app.kernel.name, []).append(app)
    # A cell is one chain of steps linked by their state edges; several chains may share a
    # kernel (both directions of a bidirectional RNN given one cell, a sampling unroll
    # beside the training one): each is a cell of its own.
    by_chain: dict[str, list[_App]] = {}
    for kernel, group in by_kernel.items():
        group.sort(key=lambda a: order.get(a.gate_op.name, 0))
        for k, chain in enumerate(_chains(group)):
            by_chain[f"{kernel}#{k}"] = chain
    names = {k: _cell_name(g[0].kernel, g[0].spec) for k, g in by_chain.items()}

    # The output of every step, so that a stacked layer finds the step it reads.
    owners = {}
    for k, group in by_chain.items():
        for idx, app in enumerate(group):
            owners[app.states[-1].name] = (k, idx)
    gate_ops = {app.gate_op.name for app in apps}
    positions: dict[str, list[int]] = {}
    in_progress: set[str] = set()

    def position_of(kernel: str, idx: int) -> int | None:
        if kernel not in positions:
            if kernel in in_progress:
                return None
            in_progress.add(kernel)
            group = by_chain[kernel]
            found = [_input_position(a.input, owners, position_of, gate_ops) for a in group]
            in_order = list(range(len(group)))
            # Trust the traced positions only when they are a permutation of the steps.
            traced = None not in found and sorted(found) == in_order
            positions[kernel] = found if traced else in_order
            in_progress.discard(kernel)
        return positions[kernel][idx]

    cells = list(loop_cells)
    for k, group in by_chain.items():
        position_of(k, 0)
        cells.append(_build_cell(names[k], group, positions[k]))
    cells = _distinct_names(cells)
    cells.sort(key=lambda c: c.name)
    return cells


def _state_source(t: tf.Tensor, state_of: Mapping[str, int], limit: int = 64) -> int | None:
    """The step (index into `state_of`, by state tensor name) whose state `t` is, searching
    back along edges from `t` to the nearest one; None for an initial state."""
    queue, seen = deque([t]), set()
    while queue and len(seen) < limit:
        t = queue.popleft()
        if t.name in seen:
            continue
        seen.add(t.name)
        if t.name in state_of:
            return state_of[t.name]
        queue.extend(t.op.inputs)
    return None


def _chains(group: list[_App]) -> list[list[_App]]:
    """The steps of one kernel (in topological order) split into chains: a step belongs to
    the chain of the step whose state it reads."""
    state_of = {app.states[-1].name: i for i, app in enumerate(group)}
    chain_of: list[int] = []
    chains: list[list[_App]] = []
    successors: dict[int, int] = {}
    for i, app in enumerate(group):
        j = _state_source(app.previous[-1], state_of)
        if j is None or j >= i:
            chain_of.append(len(chains))
            chains.append([app])
            continue
        if j in successors:
            raise GraphPatternError(
                f"the steps of the cell at {app.kernel.name} branch: {group[successors[j]].gate_op.name} and "
                f"{app.gate_op.name} both continue from {group[j].gate_op.name} (a beam search?); "
                "gatetrace records cells whose steps form chains"
            )
        successors[j] = i
        chain_of.append(chain_of[j])
        chains[chain_of[j]].append(app)
    return chains


def _where(c: Cell) -> list[str]:
    """Ways to say where a cell's chain runs, most readable first: its loop; or, for an
    unrolled chain, the op scope of its first step, then the scope its initial state comes
    from (`bidirectional_rnn/bw/bw`), then its first step's gate op."""
    if c.loop is not None:
        return [c.loop.loop.removesuffix("/while_context")] * 3
    if c.fused is not None:
        return [c.fused.ops[0].rpartition("/")[0], c.fused.h_prev[0].rpartition(":")[0], c.fused.ops[0]]
    first = c.steps[-1] if c.backward else c.steps[0]  # the step computed first
    scope = first.previous[-1].rpartition(":")[0].rpartition("/")[0]
    parts = [p for p in scope.split("/") if not re.fullmatch(r"\w*ZeroState(_\d+)?", p)]
    return [first.gate_op.rpartition("/")[0], "/".join(parts) or scope or first.previous[-1], first.gate_op]


def _distinct_names(cells: list[Cell]) -> list[Cell]:
    """Give cells that share a name (one kernel serving several chains or loops) distinct
    names: the kernel's scope, `@`, and where the chain runs (`_where`); and tell each
    which cells share its weights. A stacked loop layer's `below` follows the renaming
    (the layer below runs in the same loop)."""
    by_name: dict[str, list[Cell]] = {}
    for c in cells:
        by_name.setdefault(c.name, []).append(c)
    new: dict[int, str] = {}
    for name, group in by_name.items():
        if len(group) == 1:
            continue
        wheres = [_where(c) for c in group]
        for k in range(3):
            if len({w[k] for w in wheres}) == len(group):
                new.update((id(c), f"{name}@{w[k]}") for c, w in zip(group, wheres))
                break
        else:
            raise GraphPatternError(
                f"cells {name}: {len(group)} chains share this kernel and gatetrace cannot tell them apart "
                f"(they start at {', '.join(sorted(c.steps[0].gate_op if c.steps else c.loop.loop for c in group))}); "
                "two cells must never share a name"
            )
    renamed = {(c.loop.loop if c.loop else None, c.name): new.get(id(c), c.name) for c in cells}
    shared: dict[str, list[str]] = {}
    for c in cells:
        shared.setdefault(c.variables["kernel"], []).append(new.get(id(c), c.name))
    out = []
    for c in cells:
        name = new.get(id(c), c.name)
        loop = c.loop
        if loop is not None and loop.below is not None:
            loop = replace(loop, below=renamed[(loop.loop, loop.below)])
        others = tuple(sorted(n for n in shared[c.variables["kernel"]] if n != name))
        out.append(replace(c, name=name, loop=loop, shares_weights_with=others))
    return out
