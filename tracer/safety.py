"""What a graph would run: an allowlist of ops that only compute.

A model file is a program: its graph can hold ops that read or write files (`ReadFile`,
`WriteFile`, `Save*`), run Python (`PyFunc`, `EagerPyFunc`), print, or reach the network.
Before gatetrace runs any part of a graph (restoring variables, reading weights, fetching
gates), `check` collects every op that run would execute (following data and control
edges, and into exactly the functions those ops call, through any attribute that names
a function, and the functions those call) and refuses any op outside `SAFE_OPS`.
Functions nothing calls (a SavedModel's `__inference__traced_save_*`) are not checked,
since they do not run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from recorders.errors import UnsafeGraphError
from tracer._tf import tf

__all__ = ["SAFE_OPS", "RESTORE_OPS", "ops_to_run", "unsafe_ops", "restore_problems", "restore_ops", "check", "check_model", "refuse"]

# Pure math, array, variable and control-flow ops: they compute on tensors and touch
# nothing outside the session. Fused RNN kernels and the in-memory audio ops that speech
# models run before their RNN (DecodeWav decodes bytes it is given; it reads no file) too.
SAFE_OPS = frozenset(
    """
    Const Placeholder PlaceholderWithDefault Identity IdentityN NoOp StopGradient PreventGradient
    Snapshot CheckNumerics EnsureShape Assert
    MatMul BatchMatMul BatchMatMulV2 BatchMatMulV3 BiasAdd BiasAddV1 Add AddV2 AddN Sub Mul MulNoNan
    RealDiv Div DivNoNan FloorDiv FloorMod TruncateDiv Mod Maximum Minimum Neg Abs Sign Reciprocal
    Sigmoid Tanh Relu Relu6 LeakyRelu Elu Selu Softplus Softsign Softmax LogSoftmax Exp Expm1 Log
    Log1p Sqrt Rsqrt Square SquaredDifference Pow Floor Ceil Round Rint Erf Sin Cos
    ClipByValue Greater GreaterEqual Less LessEqual Equal NotEqual LogicalAnd LogicalOr LogicalNot
    Select SelectV2 IsNan IsInf IsFinite
    Min Max Sum Mean Prod All Any ArgMax ArgMin Cumsum
    ConcatV2 Concat ConcatOffset Split SplitV Unpack Pack Reshape Shape ShapeN Size Rank
    StridedSlice Slice Transpose ExpandDims Squeeze Fill ZerosLike OnesLike Cast Bitcast Range
    Tile GatherV2 Gather GatherNd ResourceGather ResourceGatherNd ReverseV2 ReverseSequence BroadcastTo BroadcastArgs
    BroadcastGradientArgs Pad PadV2 MirrorPad OneHot Where DynamicStitch
    VariableV2 Variable VarHandleOp ReadVariableOp VarIsInitializedOp IsVariableInitialized
    Assign AssignVariableOp AssignAdd AssignSub
    Switch Merge Enter Exit NextIteration LoopCond RefSwitch RefMerge RefEnter RefExit
    RefNextIteration RefIdentity ControlTrigger
    If StatelessIf While StatelessWhile PartitionedCall StatefulPartitionedCall
    TensorArrayV3 TensorArrayReadV3 TensorArrayWriteV3 TensorArrayGatherV3 TensorArrayScatterV3
    TensorArraySizeV3 TensorArraySplitV3 TensorArrayConcatV3
    TensorListFromTensor TensorListGetItem TensorListSetItem TensorListReserve TensorListStack
    TensorListElementShape TensorListLength TensorListPushBack TensorListPopBack EmptyTensorList TensorListResize
    TensorListConcatV2 TensorListSplit TensorListScatterIntoExistingList TensorListGather TensorListScatterV2
    LSTMBlockCell BlockLSTM BlockLSTMV2 GRUBlockCell
    DecodeWav AudioSpectrogram Mfcc
    """.split()
)

# Reading the checkpoint named by the model is what restoring variables is for.
RESTORE_OPS = frozenset({"RestoreV2", "Restore", "RestoreSlice"})

_FUNCTIONAL = {"If", "StatelessIf", "While", "StatelessWhile", "PartitionedCall", "StatefulPartitionedCall"}


def _called(attrs) -> list[str]:
    """The functions an op's attributes name (`f`, `body`, `cond`, `then_branch`, lists of them...)."""
    names = []
    for value in attrs.values():
        if value.HasField("func"):
            names.append(value.func.name)
        elif value.HasField("list"):
            names += [f.name for f in value.list.func]
    return names


def ops_to_run(graph: tf.Graph, fetches: Iterable) -> list[tuple[str, str]]:
    """(name, type) of the ops running `fetches` (tensors, ops or their names) would
    execute: those of the graph, following data and control edges, and those of every
    function they call (by an attribute such as `f` or `body`, or by using a function's
    name as their type), and of the functions those call, and so on. A call itself is not
    listed; the function's ops are, as `op in function NAME`."""
    queue = deque()
    for f in fetches:
        if isinstance(f, str):
            f = graph.as_graph_element(f)
        queue.append(f if isinstance(f, tf.Operation) else f.op)
    seen: dict[str, tf.Operation] = {}
    while queue:
        op = queue.popleft()
        if op.name in seen:
            continue
        seen[op.name] = op
        queue.extend(t.op for t in op.inputs)
        queue.extend(op.control_inputs)
    calls = [name for op in seen.values() for name in _called(op.node_def.attr)]
    library = {}
    if calls or any(op.type in _FUNCTIONAL for op in seen.values()):
        library = {fn.signature.name: fn for fn in graph.as_graph_def().library.function}
    found = [(op.name, op.type) for op in seen.values() if op.type not in library]
    calls += [op.type for op in seen.values() if op.type in library]
    visited: set[str] = set()
    while calls:
        name = calls.pop()
        if name in visited or name not in library:
            continue
        visited.add(name)
        for node in library[name].node_def:
            calls += _called(node.attr) + ([node.op] if node.op in library else [])
            if node.op not in library:
                found.append((f"{node.name} in function {name}", node.op))
    return found


def _outside(ran: Iterable[tuple[str, str]], allowed: frozenset) -> list[str]:
    ok = SAFE_OPS | allowed
    return sorted(f"{name} ({kind})" for name, kind in ran if kind not in ok)


def unsafe_ops(graph: tf.Graph, fetches: Iterable, allowed: frozenset = frozenset()) -> list[str]:
    """`name (Type)` of each op outside SAFE_OPS (and `allowed`) that running `fetches` would execute."""
    return _outside(ops_to_run(graph, fetches), allowed)


def restore_problems(graph: tf.Graph, restore_op: str, filename_tensor: str) -> list[str]:
    """What is wrong with a Saver's restore op, as `name (why)` items; empty if nothing is.

    Restoring may read one checkpoint only: the one gatetrace names by feeding the saver's
    `filename_tensor`. Every restore op (`RESTORE_OPS`) the restore op runs must take its
    path from that tensor (directly or through `Identity` ops); one that reads a path of
    its own (a constant naming another checkpoint) is refused, as is any op outside the
    allowlist. Inside a function only the restore function of a TF2 SavedModel, called by
    the restore op with that path as an argument, may restore.
    """
    ran = ops_to_run(graph, [restore_op])
    problems = _outside(ran, RESTORE_OPS)
    fed = graph.as_graph_element(filename_tensor).name
    problems += _function_restore_problems(graph, restore_op, ran, fed)
    for op in restore_ops(graph, restore_op, ran):
        path = _through_identity(op.inputs[0], fed)
        if path.name != fed:
            problems.append(f"{op.name} ({op.type} reading the path {path.name}, not the model's own checkpoint)")
    return sorted(set(problems))


def _through_identity(t: tf.Tensor, stop: str) -> tf.Tensor:
    while t.name != stop and t.op.type in ("Identity", "Snapshot") and t.op.inputs:
        t = t.op.inputs[0]
    return t


def _function_restore_problems(graph: tf.Graph, restore_op: str, ran: list[tuple[str, str]], fed: str) -> list[str]:
    """Restore ops inside a function (a TF2 SavedModel restores in `__inference__traced_restore`):
    allowed where the function is the one the restore op itself calls and each restore op
    takes its path from the function's argument that the call is given the fed file name in.
    Any other restore op inside a function cannot be followed and is a problem."""
    inside = [(name, kind) for name, kind in ran if kind in RESTORE_OPS and " in function " in name]
    if not inside:
        return []
    call = graph.as_graph_element(restore_op)
    call = call if isinstance(call, tf.Operation) else call.op
    called = _called(call.node_def.attr)
    library = {fn.signature.name: fn for fn in graph.as_graph_def().library.function}
    function = library.get(called[0]) if len(called) == 1 else None
    good: set[str] = set()
    if function is not None:
        args = [a.name for a in function.signature.input_arg]
        nodes = {n.name: n for n in function.node_def}
        for node in nodes.values():
            if node.op not in RESTORE_OPS:
                continue
            source = node.input[0].partition(":")[0]
            while source in nodes and nodes[source].op in ("Identity", "Snapshot"):
                source = nodes[source].input[0].partition(":")[0]
            if source in args and _through_identity(call.inputs[args.index(source)], fed).name == fed:
                good.add(f"{node.name} in function {function.signature.name}")
    return [f"{name} ({kind} inside a function, reading a path other than the model's own checkpoint)"
            for name, kind in inside if name not in good]


def restore_ops(graph: tf.Graph, restore_op: str, ran: Iterable[tuple[str, str]] | None = None) -> list[tf.Operation]:
    """The restore ops (`RESTORE_OPS`) of the graph itself that running `restore_op` runs
    (`ran`: what `ops_to_run` already found for it)."""
    ran = ops_to_run(graph, [restore_op]) if ran is None else ran
    return [graph.get_operation_by_name(name) for name, kind in ran if kind in RESTORE_OPS and " in function " not in name]


def refuse(found: list[str], what: str, source: str) -> None:
    """Raise UnsafeGraphError naming `found` (`name (why)` items), if there are any."""
    if found:
        shown = ", ".join(found[:8]) + (f" and {len(found) - 8} more" if len(found) > 8 else "")
        raise UnsafeGraphError(
            f"{source}: {what} would run {len(found)} op{'s' if len(found) != 1 else ''} outside the allowlist of pure math, "
            f"array, variable and control-flow ops: {shown}; nothing was run. If you trust this model, pass --allow-unsafe-ops"
        )


def check(graph: tf.Graph, fetches: Iterable, what: str, source: str, allowed: frozenset = frozenset()) -> None:
    """Raise UnsafeGraphError if running `fetches` (`what`: "restoring its variables", ...) would run an op outside the allowlist."""
    refuse(unsafe_ops(graph, fetches, allowed), what, source)


def check_model(model, fetches: Iterable, what: str) -> None:
    """`check` on a `tracer.model.Model`'s graph, unless it was loaded with allow_unsafe_ops."""
    if not model.allow_unsafe_ops:
        check(model.graph, fetches, what, model.source)
