"""What a graph would run: an allowlist of ops that only compute.

A model file is a program: its graph can hold ops that read or write files (`ReadFile`,
`WriteFile`, `Save*`), run Python (`PyFunc`, `EagerPyFunc`), print, or reach the network.
Before gatetrace runs any part of a graph (restoring variables, reading weights, fetching
gates), `check` collects every op that run would execute (following data and control
edges, and into exactly the functions those ops call, through any attribute that names
a function, and the functions those call) and refuses any op that does more than compute
(`computes_only`: `SAFE_OPS`, and what TensorFlow's own definitions show to compute only, by
the rule the import check judges ops by too).
Functions nothing calls (a SavedModel's `__inference__traced_save_*`) are not checked,
since they do not run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

from recorders.errors import UnsafeGraphError, listing
from tracer._tf import tf

__all__ = [
    "SAFE_OPS",
    "PURE_TEXT_OPS",
    "computes_only",
    "op_def",
    "RESTORE_OPS",
    "function_values",
    "function_calls",
    "bind_defaults",
    "ops_to_run",
    "unsafe_ops",
    "restore_problems",
    "restore_ops",
    "check",
    "check_model",
    "refuse",
]

# Pure math, array, variable and control-flow ops: they compute on tensors and touch
# nothing outside the session. Random ops (dropout's) too: they read and write nothing. Fused RNN kernels and the in-memory audio ops that speech
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
    RandomUniform RandomUniformInt RandomStandardNormal TruncatedNormal Multinomial RandomShuffle RandomGamma
    RandomPoisson RandomPoissonV2 StatelessRandomUniform StatelessRandomUniformV2 StatelessRandomUniformInt
    StatelessRandomUniformIntV2 StatelessRandomUniformFullInt StatelessRandomUniformFullIntV2 StatelessRandomNormal
    StatelessRandomNormalV2 StatelessTruncatedNormal StatelessTruncatedNormalV2 StatelessMultinomial
    StatelessRandomGetKeyCounter StatelessRandomGetKeyCounterAlg StatelessRandomGetAlg
    LSTMBlockCell BlockLSTM BlockLSTMV2 GRUBlockCell
    DecodeWav AudioSpectrogram Mfcc
    """.split()
)

# Reading the checkpoint named by the model is what restoring variables is for.
RESTORE_OPS = frozenset({"RestoreV2", "Restore", "RestoreSlice"})

_FUNCTIONAL = {
    "If",
    "StatelessIf",
    "While",
    "StatelessWhile",
    "PartitionedCall",
    "StatefulPartitionedCall",
}

# (function, attributes) pairs one walk may visit before it gives up and refuses
_MAX_VISITS = 100_000


# Ops that take or give strings, or carry free text in an attribute, and still touch
# nothing outside the session. A summary op serializes its inputs into a Summary protocol
# buffer (a `tf.summary.scalar` of a constant learning rate is constant-evaluable).
PURE_TEXT_OPS = frozenset(
    """
    StringJoin ShardedFilename ShardedFilespec StaticRegexFullMatch StaticRegexReplace RegexFullMatch RegexReplace
    StringFormat AsString StringLength StringLower StringUpper StringStrip StringSplit StringSplitV2 Substr
    StringToNumber StringToHashBucket StringToHashBucketFast StringToHashBucketStrong ReduceJoin
    UnicodeDecode UnicodeDecodeWithOffsets UnicodeEncode UnicodeTranscode DecodeRaw DecodeBase64 EncodeBase64 DecodeCSV
    ParseExample ParseExampleV2 ParseSingleExample ParseSequenceExample ParseSequenceExampleV2 ParseSingleSequenceExample
    ParseTensor SerializeTensor Einsum PreventGradient DataFormatDimMap DataFormatVecPermute ScatterNd GatherNd
    TensorScatterUpdate TensorScatterAdd TensorScatterSub TensorScatterMax TensorScatterMin
    ScalarSummary HistogramSummary TensorSummary TensorSummaryV2 ImageSummary AudioSummary AudioSummaryV2 MergeSummary
    """.split()
)

_NOT_PLAIN_TYPES = {tf.string.as_datatype_enum, tf.resource.as_datatype_enum}


def op_def(op_type: str):
    """TensorFlow's registered definition of an op type (None for one it does not know)."""
    from tensorflow.python.framework import op_def_registry

    return op_def_registry.get(op_type)


def computes_only(op_type: str) -> bool:
    """Whether an op only computes, the one rule for what importing a graph may evaluate and
    for what a fetch may run: in `SAFE_OPS` or `PURE_TEXT_OPS`, or, by TensorFlow's own
    definition of it, not marked stateful, taking no function, with no free-text attribute (a
    path or a URL needs one), and only numbers or tensor containers (variants: a TensorList, an
    Optional) in and out, never a string or a resource: `Conv2D`, `TanhGrad`, cond_v2's
    `OptionalFromValue`."""
    if op_type in SAFE_OPS or op_type in PURE_TEXT_OPS:
        return True
    found = op_def(op_type)
    if found is None or found.is_stateful:
        return False
    args = list(found.input_arg) + list(found.output_arg)
    if any(a.type in _NOT_PLAIN_TYPES for a in args):
        return False
    for attr in found.attr:
        if attr.type in ("func", "list(func)"):
            return False
        if attr.type in ("string", "list(string)") and not attr.allowed_values.list.s:
            return False
    return True


def _resolved(value, bound: dict):
    """An attribute value with its placeholder (`attr { placeholder: "f" }` inside a function)
    replaced by what the function's caller bound it to; None if nothing binds it."""
    return bound.get(value.placeholder) if value.placeholder else value


def _bound_call(name: str, attrs, bound: dict) -> Iterator[tuple[str, dict] | None]:
    """A call of function `name` with `attrs` resolved in `bound`; None first if one cannot be."""
    resolved = {k: _resolved(a, bound) for k, a in attrs.items()}
    if any(a is None for a in resolved.values()):
        yield None
    yield name, {k: a for k, a in resolved.items() if a is not None}


def function_values(value, bound: dict) -> Iterator[tuple[str, dict] | None]:
    """(name, attributes) of every function an attribute value names, the functions named
    inside those attributes included, placeholders resolved in `bound`; None for a
    placeholder that nothing binds (the function it names cannot be known)."""
    value = _resolved(value, bound)
    if value is None:
        yield None
        return
    named = (
        [value.func]
        if value.HasField("func")
        else list(value.list.func)
        if value.HasField("list")
        else []
    )
    for func in named:
        yield from _bound_call(func.name, func.attr, bound)
        for a in func.attr.values():
            yield from function_values(a, bound)


def function_calls(node, library: dict, bound: dict) -> Iterator[tuple[str, dict] | None]:
    """The functions a node calls, with the attributes bound inside each: by its type (a
    call by name) and through any attribute (`f`, `body`, `then_branch`, nested ones)."""
    if node.op in library:
        yield from _bound_call(node.op, node.attr, bound)
    for value in node.attr.values():
        yield from function_values(value, bound)


def bind_defaults(function, attrs: dict) -> dict:
    """A function's attributes as bound by its caller, its signature's defaults filling the rest."""
    bound = dict(attrs)
    for attr in function.signature.attr:
        if attr.name not in bound and attr.HasField("default_value"):
            bound[attr.name] = attr.default_value
    return bound


def _key(name: str, bound: dict) -> tuple:
    return name, tuple(
        sorted((k, v.SerializeToString(deterministic=True)) for k, v in bound.items())
    )


def ops_to_run(
    graph: tf.Graph, fetches: Iterable, fed: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """(name, type) of the ops running `fetches` (tensors, ops or their names) would
    execute: those of the graph, following data and control edges, and those of every
    function they call (by an attribute such as `f` or `body`, by using a function's name
    as their type, or through an attribute placeholder bound by the caller or by the
    function's default), and of the functions those call, and so on. A call itself is not
    listed; the function's ops are, as `op in function NAME`. A function attribute nothing
    binds is listed as `(function attribute nothing sets)`, which no allowlist holds. What
    only feeds the tensors named in `fed` does not run (Session.run prunes it)."""
    fed = set(fed)
    queue: deque[tf.Operation] = deque()
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
        queue.extend(t.op for t in op.inputs if t.name not in fed)
        queue.extend(op.control_inputs)
    library = {}
    if any(op.node_def.attr for op in seen.values()):
        library = {fn.signature.name: fn for fn in graph.as_graph_def().library.function}
    found = [(op.name, op.type) for op in seen.values() if op.type not in library]
    calls = [
        (op.name, call) for op in seen.values() for call in function_calls(op.node_def, library, {})
    ]
    visited: set[tuple] = set()
    while calls:
        caller, call = calls.pop()
        if call is None:
            found.append((caller, "function attribute nothing sets"))
            continue
        name, attrs = call
        if name not in library:
            continue
        bound = bind_defaults(library[name], attrs)
        key = _key(name, bound)
        if key in visited:
            continue
        visited.add(key)
        if len(visited) > _MAX_VISITS:
            found.append(
                (f"function {name}", f"more than {_MAX_VISITS:,} function calls to follow")
            )
            break
        for node in library[name].node_def:
            where = f"{node.name} in function {name}"
            calls += [(where, c) for c in function_calls(node, library, bound)]
            if node.op not in library:
                found.append((where, node.op))
    return found


def _outside(ran: Iterable[tuple[str, str]], allowed: frozenset) -> list[str]:
    return sorted(
        f"{name} ({kind})" for name, kind in ran if kind not in allowed and not computes_only(kind)
    )


def unsafe_ops(
    graph: tf.Graph, fetches: Iterable, allowed: frozenset = frozenset(), fed: Iterable[str] = ()
) -> list[str]:
    """`name (Type)` of each op outside SAFE_OPS (and `allowed`) that running `fetches` (the
    tensors named in `fed` fed) would execute."""
    return _outside(ops_to_run(graph, fetches, fed), allowed)


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
            problems.append(
                f"{op.name} ({op.type} reading the path {path.name}, not the model's own checkpoint)"
            )
    return sorted(set(problems))


def _through_identity(t: tf.Tensor, stop: str) -> tf.Tensor:
    while t.name != stop and t.op.type in ("Identity", "Snapshot") and t.op.inputs:
        t = t.op.inputs[0]
    return t


def _function_restore_problems(
    graph: tf.Graph, restore_op: str, ran: list[tuple[str, str]], fed: str
) -> list[str]:
    """Restore ops inside a function (a TF2 SavedModel restores in `__inference__traced_restore`):
    allowed where the function is the one the restore op itself calls and each restore op
    takes its path from the function's argument that the call is given the fed file name in.
    Any other restore op inside a function cannot be followed and is a problem."""
    inside = [(name, kind) for name, kind in ran if kind in RESTORE_OPS and " in function " in name]
    if not inside:
        return []
    call = graph.as_graph_element(restore_op)
    call = call if isinstance(call, tf.Operation) else call.op
    library = {fn.signature.name: fn for fn in graph.as_graph_def().library.function}
    called = list(function_calls(call.node_def, library, {}))
    function = library.get(called[0][0]) if len(called) == 1 and called[0] is not None else None
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
            if (
                source in args
                and _through_identity(call.inputs[args.index(source)], fed).name == fed
            ):
                good.add(f"{node.name} in function {function.signature.name}")
    return [
        f"{name} ({kind} inside a function, reading a path other than the model's own checkpoint)"
        for name, kind in inside
        if name not in good
    ]


def restore_ops(
    graph: tf.Graph, restore_op: str, ran: Iterable[tuple[str, str]] | None = None
) -> list[tf.Operation]:
    """The restore ops (`RESTORE_OPS`) of the graph itself that running `restore_op` runs
    (`ran`: what `ops_to_run` already found for it)."""
    ran = ops_to_run(graph, [restore_op]) if ran is None else ran
    return [
        graph.get_operation_by_name(name)
        for name, kind in ran
        if kind in RESTORE_OPS and " in function " not in name
    ]


def refuse(found: list[str], what: str, source: str) -> None:
    """Raise UnsafeGraphError naming `found` (`name (why)` items), if there are any."""
    if found:
        shown = listing(found, 8)
        raise UnsafeGraphError(
            f"{source}: {what} would run {len(found)} op{'s' if len(found) != 1 else ''} outside the allowlist of pure math, "
            f"array, variable and control-flow ops: {shown}; nothing was run. If you trust this model, pass --allow-unsafe-ops"
        )


def check(
    graph: tf.Graph, fetches: Iterable, what: str, source: str, allowed: frozenset = frozenset()
) -> None:
    """Raise UnsafeGraphError if running `fetches` (`what`: "restoring its variables", ...) would run an op outside the allowlist."""
    refuse(unsafe_ops(graph, fetches, allowed), what, source)


def check_model(
    model, fetches: Iterable, what: str, fed: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """`check` on a `tracer.load.loaded.Model`'s graph, unless it was loaded with allow_unsafe_ops;
    returns what running `fetches` (with the tensors named in `fed` fed) runs (`ops_to_run`),
    walked once for the caller's use too."""
    ran = ops_to_run(model.graph, fetches, fed)
    if not model.allow_unsafe_ops:
        refuse(_outside(ran, frozenset()), what, model.source)
    return ran
