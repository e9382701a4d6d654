"""What importing a serialized graph could run, checked on the bytes before TensorFlow sees them.

Importing a GraphDef is not inert. TensorFlow's shape inference evaluates small constant
subgraphs with real kernels when a shape function wants an input's value (`Fill` dims,
`Reshape` shape, `Tile` multiples...), and grappler folds constants while it inlines a
SavedModel's functions. `ReadFile`, `MatchingFiles` and `DebugIdentity` are not marked
stateful, so a model can make an import read any file and dump it into a folder it names.
What is evaluated is decided by TensorFlow's constant folder: every op that is not
registered as stateful, whatever is fetched later (its rule, `IsConstantFoldable`).

So `import_problems` reads the GraphDef and its whole function library, every node of
the graph and of every function, called or not, and accepts only:

    an op registered as stateful       never evaluated while importing (`SaveV2`, `Assign`,
                                        `ReadVariableOp`...); `tracer.load.safety` checks what
                                        actually runs before it runs
    an op that only computes            `tracer.load.safety.SAFE_OPS`, `PURE_TEXT_OPS` (a Saver's
                                        file-name arithmetic, example parsing, einsum), or
                                        any op whose inputs and outputs are numbers and whose
                                        text attributes are chosen from a fixed list (a path
                                        or a URL needs free text): `Conv2D`, `TanhGrad`, ...
    a call of a function                marked stateful (`StatefulPartitionedCall`, `While`),
                                        or, if not, one whose functions, and the functions
                                        they call, hold only ops that compute

An op of a TensorFlow that is not this one cannot be imported at all and is left to the
importer to name. `call_problem` finds what TensorFlow itself would crash on: a
function that calls itself, and calls nested deeper than `MAX_CALL_DEPTH`. Both read
protobuf messages only; nothing here imports a graph.
"""

from __future__ import annotations

from collections.abc import Iterator

from recorders.errors import ModelFormatError, UnsafeGraphError, listing
from tracer._tf import tf  # noqa: F401  (TensorFlow's op registry is filled when it is imported)
from tracer.load.safety import SAFE_OPS, bind_defaults, function_calls, function_values

__all__ = ["PURE_TEXT_OPS", "MAX_CALL_DEPTH", "import_problems", "call_problem", "check_before_import"]

# Ops that take or give strings, or carry free text in an attribute, and still touch
# nothing outside the session.
PURE_TEXT_OPS = frozenset(
    """
    StringJoin ShardedFilename ShardedFilespec StaticRegexFullMatch StaticRegexReplace RegexFullMatch RegexReplace
    StringFormat AsString StringLength StringLower StringUpper StringStrip StringSplit StringSplitV2 Substr
    StringToNumber StringToHashBucket StringToHashBucketFast StringToHashBucketStrong ReduceJoin
    UnicodeDecode UnicodeDecodeWithOffsets UnicodeEncode UnicodeTranscode DecodeRaw DecodeBase64 EncodeBase64 DecodeCSV
    ParseExample ParseExampleV2 ParseSingleExample ParseSequenceExample ParseSequenceExampleV2 ParseSingleSequenceExample
    ParseTensor SerializeTensor Einsum PreventGradient DataFormatDimMap DataFormatVecPermute ScatterNd GatherNd
    TensorScatterUpdate TensorScatterAdd TensorScatterSub TensorScatterMax TensorScatterMin
    """.split()
)

MAX_CALL_DEPTH = 100  # functions calling functions; a Keras model saved by TF2 nests fewer than 20

_NOT_PLAIN_TYPES = {tf.string.as_datatype_enum, tf.resource.as_datatype_enum, tf.variant.as_datatype_enum}


def _op_def(op_type: str):
    from tensorflow.python.framework import op_def_registry

    return op_def_registry.get(op_type)


def _computes_only(op_def) -> bool:
    """Numbers in, numbers out, and no attribute that could hold a path, a URL or a function."""
    args = list(op_def.input_arg) + list(op_def.output_arg)
    if any(a.type in _NOT_PLAIN_TYPES for a in args):
        return False
    for attr in op_def.attr:
        if attr.type in ("func", "list(func)"):
            return False
        if attr.type in ("string", "list(string)") and not attr.allowed_values.list.s:
            return False
    return True


def _pure(op_type: str) -> bool | None:
    """True for an op that only computes, False for one that does not, None if stateful or unknown
    (not evaluated while importing)."""
    if op_type in SAFE_OPS or op_type in PURE_TEXT_OPS:
        return True
    op_def = _op_def(op_type)
    if op_def is None or op_def.is_stateful:
        return None
    return _computes_only(op_def)


def _stateful_call(node, library: dict) -> bool:
    if node.op in library:
        return library[node.op].signature.is_stateful
    op_def = _op_def(node.op)
    return op_def is not None and op_def.is_stateful


def _nodes(graph_def) -> Iterator[tuple[str, str | None, object]]:
    """(where, function or None, node) for every node of the graph and of every function."""
    for node in graph_def.node:
        yield node.name, None, node
    for function in graph_def.library.function:
        for node in function.node_def:
            yield f"{node.name} in function {function.signature.name}", function.signature.name, node


def _names(nodes, library: dict) -> tuple[set[str], bool]:
    """The functions `nodes` may call, bound or not, and whether an attribute placeholder
    leaves one unknown."""
    names, unknown = set(), False
    for node in nodes:
        for call in function_calls(node, library, {}):  # no bindings: a placeholder is unknown
            if call is None:
                unknown = True
            else:
                names.add(call[0])
    return {n for n in names if n in library}, unknown


def _callees(library: dict) -> tuple[dict[str, set[str]], bool]:
    """Each function's callees (through nodes and attribute defaults), and whether any
    placeholder or default could name a function that is not written down."""
    callees, unknown = {}, False
    for name, function in library.items():
        found, blind = _names(function.node_def, library)
        for value in bind_defaults(function, {}).values():
            found |= {call[0] for call in function_values(value, {}) if call is not None}
        callees[name] = {n for n in found if n in library}
        unknown = unknown or blind
    return callees, unknown


def call_problem(graph_def) -> str | None:
    """The first function call TensorFlow would crash on (recursion, or nesting deeper than
    MAX_CALL_DEPTH), in words; None if there is none. Walked without recursion."""
    library = {f.signature.name: f for f in graph_def.library.function}
    callees, _ = _callees(library)
    depth: dict[str, int] = {}
    for root in sorted(library):
        if root in depth:
            continue
        stack, path = [(root, iter(sorted(callees[root])))], {root}
        while stack:
            name, todo = stack[-1]
            child = next(todo, None)
            if child is None:
                stack.pop()
                path.discard(name)
                depth[name] = 1 + max((depth[c] for c in callees[name]), default=0)
                if depth[name] > MAX_CALL_DEPTH:
                    return f"function {name} (calls nested {depth[name]:,} deep, more than the {MAX_CALL_DEPTH} gatetrace follows)"
                continue
            if child in path:
                return f"function {child} (calls itself, through {' -> '.join([s[0] for s in stack] + [child])})"
            if child not in depth:
                stack.append((child, iter(sorted(callees[child]))))
                path.add(child)
    return None


def import_problems(graph_def) -> list[str]:
    """`name (type)` of every op that importing `graph_def` could evaluate and that does not
    only compute (see the module docstring); empty if importing runs nothing else."""
    library = {f.signature.name: f for f in graph_def.library.function}
    callees, unknown = _callees(library)
    problems = []
    impure: dict[str, str] = {}  # function -> an op in it that is not pure, `name (Type) in function F`
    for where, function, node in _nodes(graph_def):
        if node.op in library:
            continue
        pure = _pure(node.op)
        if pure is False:
            problems.append(f"{where} ({node.op})")
        if function is not None and pure is not True and function not in impure:
            impure[function] = f"{where} ({node.op})"
    # A function is tainted when it, or a function it calls, holds an op that is not pure:
    # found backwards from the impure ones along the call edges, once for all the calls.
    callers: dict[str, set[str]] = {}
    for name, called in callees.items():
        for c in called:
            callers.setdefault(c, set()).add(name)
    tainted, todo = dict(impure), list(impure)
    while todo:
        name = todo.pop()
        for caller in callers.get(name, ()):
            if caller not in tainted:
                tainted[caller] = tainted[name]
                todo.append(caller)
    for where, function, node in _nodes(graph_def):
        if _stateful_call(node, library):
            continue
        direct, blind = _names([node], library)
        reach = set(library) if blind or (direct and unknown) else direct
        hit = sorted(f"{name}, which reaches {tainted[name]}" for name in reach if name in tainted)
        if hit:
            problems.append(f"{where} ({node.op}, not marked stateful, calls function {hit[0]})")
    return sorted(set(problems))


def check_before_import(graph_def, source: str, allow_unsafe_ops: bool) -> None:
    """Refuse a serialized graph before it is imported: ModelFormatError for calls TensorFlow
    would crash on (always), UnsafeGraphError for ops importing could run (unless `allow_unsafe_ops`)."""
    crash = call_problem(graph_def)
    if crash:
        raise ModelFormatError(f"{source}: its graph holds a {crash}; TensorFlow cannot run it: nothing was imported")
    if allow_unsafe_ops:
        return
    found = import_problems(graph_def)
    if found:
        shown = listing(found, 8)
        raise UnsafeGraphError(
            f"{source}: importing its graph could run {len(found)} op{'s' if len(found) != 1 else ''} that TensorFlow evaluates "
            f"while it infers shapes and that do more than compute: {shown}; nothing was imported. "
            "If you trust this model, pass --allow-unsafe-ops"
        )
