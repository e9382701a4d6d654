"""Following graph edges: where a tensor comes from, and what reads it.

The small helpers every finder uses (`tracer.find.steps`, `tracer.find.unrolled`, `tracer.find.loops`,
`tracer.find.fused`): the variable or constant a weight is read from (through `Identity`,
`ReadVariableOp`, `Enter`), a scalar constant, the consumers of a tensor, a topological
order, the input position a tensor comes from (`tf.unstack(x, axis=1)`'s output index),
the step whose state a tensor is, and the scope that names a cell. It recognises no cell.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from recorders.errors import GraphPatternError
from tracer._tf import tf
from tracer.cells.kinds import CellSpec

__all__ = [
    "weight_source",
    "weight_op",
    "weight_name",
    "const_scalar",
    "other_input",
    "consumers_of",
    "only_one",
    "reads",
    "feeds_into",
    "topological_index",
    "input_position",
    "reversed_by",
    "state_source",
    "chains",
    "cell_name",
    "variables_of",
    "in_v1_frame",
]

# Ops that hold weights, and ops that only pass a value through on its way from them.
_WEIGHT_SOURCES = {"VarHandleOp", "VariableV2", "Variable", "Const"}


_PASS_THROUGH = {"Identity", "ReadVariableOp", "Snapshot", "Enter"}  # Enter: into a TF1 while loop


def weight_source(t: tf.Tensor) -> tf.Operation | None:
    """The variable or Const a tensor is read from, through Identity/ReadVariableOp/Enter.

    In the body of a control-flow-v2 while loop, weights arrive as body arguments that
    every iteration passes on unchanged: there the Placeholder standing for such an
    argument is the source (`tracer.find.loops` marks them and maps them to the loop's inputs).
    """
    op = t.op
    while op.type in _PASS_THROUGH and op.inputs:
        op = op.inputs[0].op
    if op.type == "Placeholder" and op.outputs[0].name in getattr(op.graph, "loop_invariants", ()):
        return op
    return op if op.type in _WEIGHT_SOURCES else None


def weight_op(t: tf.Tensor) -> tf.Operation:
    """`weight_source(t)` for a tensor a finder took as a weight: its variable or Const."""
    source = weight_source(t)
    if source is None:
        raise GraphPatternError(
            f"{t.name} is read as a cell's weight, but not from a variable or constant (through "
            f"{t.op.type} {t.op.name}); gatetrace does not know this pattern"
        )
    return source


def weight_name(t: tf.Tensor) -> str:
    """The name of the variable or Const `t` is read from ("" if none). In a loop body,
    the name of the outer variable an argument carries, where `tracer.find.loops` knows it
    (a Keras 3 body names its arguments after ops, not variables)."""
    source = weight_source(t)
    if source is None:
        return ""
    return getattr(source.graph, "outer_names", {}).get(source.outputs[0].name, source.name)


def const_scalar(t: tf.Tensor) -> float | None:
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


def other_input(op: tf.Operation, t: tf.Tensor) -> tf.Tensor:
    """The other operand of a binary op that reads `t`."""
    a, b = op.inputs[0], op.inputs[1]
    return b if a.name == t.name else a


def consumers_of(
    t: tf.Tensor, types: Iterable[str], where: Callable[[tf.Operation], bool] | None = None
) -> list[tf.Operation]:
    """The ops of the given types that read `t` (and satisfy `where`).

    Training graphs also hold gradient ops that read the forward tensors (a Mul's
    gradient multiplies by its operands), so callers narrow the choice by structure.
    """
    types = set(types)
    return [c for c in t.consumers() if c.type in types and (where is None or where(c))]


def only_one(ops: list[tf.Operation], what: str, near: tf.Operation) -> tf.Operation:
    if len(ops) != 1:
        found = ", ".join(o.name for o in ops) or "nothing"
        raise GraphPatternError(
            f"unexpected structure after {near.name}: expected one {what}, found {found}; "
            "the cell may be a modified copy of a TensorFlow RNN cell, which gatetrace does not read"
        )
    return ops[0]


def reads(op: tf.Operation, t: tf.Tensor) -> bool:
    return any(i.name == t.name for i in op.inputs)


def feeds_into(op: tf.Operation, types: Iterable[str]) -> bool:
    """Whether an output of `op` is read by an op of one of `types`."""
    return any(consumers_of(out, types) for out in op.outputs)


def topological_index(graph: tf.Graph) -> dict[str, int]:
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


# What the main kernel's variable was called in each era of TensorFlow, after the cell's scope.
_KERNEL_NAMES = ("kernel", "weights", "Linear/Matrix")  # TF >= 1.2, TF 1.0 and 1.1, TF 0.x


def cell_name(kernel: tf.Operation, spec: CellSpec) -> str:
    """The scope holding a cell's weights: the kernel's name without `/kernel` (or
    `/gates/kernel` for GRUCell), whatever the era called the kernel."""
    name = re.sub(r"_\d+$", "", kernel.name)  # a TF2 SavedModel's variables may be `kernel_1`
    inner = spec.kernel_suffix.rpartition("/")[0]  # "/gates" for GRUCell, "" otherwise
    for era in _KERNEL_NAMES:
        for suffix in (f"{inner}/{era}", f"/{era}"):
            if name.endswith(suffix):
                return name[: -len(suffix)]
    return kernel.name


def input_position(
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

    def hit(t: tf.Tensor):
        if t.name in owners:
            return (position_of(*owners[t.name]),)
        if t.op.type in ("Unpack", "Split", "SplitV") and t.op.name not in gate_ops:
            return (t.value_index,)
        return None

    found = _search_back(t, hit, limit)
    return None if found is None else found[0]


def reversed_by(
    t: tf.Tensor,
    owners: Mapping[str, tuple[str, int]],
    reversal_of: Callable[[str], str | None],
    gate_ops: set[str],
    limit: int = 256,
) -> str | None:
    """The lengths the sequence `t` is a step of was reversed by, searching back as
    `input_position` does: at the output of another cell's step (a stacked layer), what that
    cell's input was reversed by (`reversal_of`, by its key in `owners`); at an output of an
    Unpack, what the sequence it unstacks was reversed by: the lengths of a `ReverseSequence`
    along time (static_bidirectional_rnn's backward input given sequence_length:
    `unstack(reverse_sequence(stack(inputs), lengths, seq_axis=0, batch_axis=1))`), or None."""

    def hit(u: tf.Tensor):
        if u.name in owners:
            return (reversal_of(owners[u.name][0]),)
        if u.op.type in ("Unpack", "Split", "SplitV") and u.op.name not in gate_ops:
            whole = u.op.inputs[1 if u.op.type == "Split" else 0].op
            while whole.type == "Identity" and whole.inputs:
                whole = whole.inputs[0].op
            if u.op.type != "Unpack" or whole.type != "ReverseSequence":
                return (None,)
            seq, batch = whole.get_attr("seq_dim"), whole.get_attr("batch_dim")
            if u.op.get_attr("axis") != seq or (seq, batch) != (0, 1):
                raise GraphPatternError(
                    f"{u.op.name} unstacks a sequence reversed by {whole.name} along axis {seq} (batch axis "
                    f"{batch}) and steps along axis {u.op.get_attr('axis')}; gatetrace knows "
                    "static_bidirectional_rnn's (time axis 0, batch axis 1, unstacked along time)"
                )
            return (whole.inputs[1].name,)
        return None

    found = _search_back(t, hit, limit)
    return None if found is None else found[0]


def state_source(t: tf.Tensor, state_of: Mapping[str, int], limit: int = 64) -> int | None:
    """The step (index into `state_of`, by state tensor name) whose state `t` is, searching
    back along edges from `t` to the nearest one; None for an initial state."""
    found = _search_back(t, lambda u: (state_of[u.name],) if u.name in state_of else None, limit)
    return None if found is None else found[0]


def chains(group: list, state: Callable, previous: Callable, name: Callable) -> list[list]:
    """Steps of one kernel split into chains, each in recurrence order: a step continues the
    step whose state (`state(step)`, a tensor) the tensor `previous(step)` reads. Chains come
    in the order of their first step in `group`; a step continued twice is refused."""
    state_of = {state(step).name: k for k, step in enumerate(group)}
    after: dict[int, int] = {}
    for k, step in enumerate(group):
        j = state_source(previous(step), state_of)
        if j is None or j == k:
            continue
        if j in after:
            raise GraphPatternError(
                f"the steps of a cell branch: {name(group[after[j]])} and {name(step)} both continue from "
                f"{name(group[j])} (a beam search?); gatetrace records cells whose steps form chains"
            )
        after[j] = k
    out = []
    for k in sorted(set(range(len(group))) - set(after.values())):
        chain = [group[k]]
        while k in after:
            k = after[k]
            chain.append(group[k])
        out.append(chain)
    return out


def _search_back(
    t: tf.Tensor, hit: Callable[[tf.Tensor], tuple | None], limit: int
) -> tuple | None:
    """What `hit` says of the nearest tensor behind `t` (breadth first, `limit` tensors at
    most) for which it says anything (a 1-tuple); None if none is found."""
    queue, seen = deque([t]), set[str]()
    while queue and len(seen) < limit:
        t = queue.popleft()
        if t.name in seen:
            continue
        seen.add(t.name)
        found = hit(t)
        if found is not None:
            return found
        queue.extend(t.op.inputs)
    return None


def variables_of(graph: tf.Graph, weights: Mapping[str, str], where: str) -> dict[str, str]:
    """The variable (or frozen Const) each weight tensor, by role, is read from; GraphPatternError
    naming `where` if one comes from anything else."""
    variables = {}
    for role, name in weights.items():
        source = weight_source(graph.get_tensor_by_name(name))
        if source is None:
            raise GraphPatternError(
                f"{where}: its {role} does not come from a variable or constant"
            )
        variables[role] = source.name
    return variables


def in_v1_frame(t: tf.Tensor, limit: int = 64) -> bool:
    """Whether `t` is computed inside a control-flow-v1 while loop: an Enter, Merge or Switch
    lies behind it before any Exit (what comes out of an earlier loop is outside)."""
    queue, seen = [t.op], set[str]()
    while queue and len(seen) < limit:
        op = queue.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.type in ("Enter", "RefEnter", "Merge", "Switch", "NextIteration"):
            return True
        if op.type not in ("Exit", "RefExit"):
            queue.extend(i.op for i in op.inputs)
    return False
