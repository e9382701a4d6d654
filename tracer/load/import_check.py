"""What importing a serialized graph could run, checked on the bytes before TensorFlow sees them.

Importing a GraphDef is not inert. When a shape function wants an input's value (`Fill`'s
dims, `Reshape`'s shape, `Tile`'s multiples...), TensorFlow's `EvaluateConstantTensor`
runs the subgraph that computes it with real kernels. `ReadFile`, `MatchingFiles` and
`DebugIdentity` are not marked stateful, so a model can make an import read any file and
dump it into a folder it names. TensorFlow's own rule (`IsSupportedForEvaluation` and
`ExtractConstantSubgraph` in `eval_const_tensor.cc`) says what such a subgraph may hold:
walking back along data edges (control edges are ignored), every path must end at a
`Const` (or, inside a function, at an argument whose value the caller knows, or at a
`Shape`, `Rank` or `Size` known from shapes), and no node on the way may be

    marked stateful                     variables, queues, iterators, gradient stacks, `SaveV2`
    a `Placeholder`, a `PlaceholderWithDefault`, or any op without inputs but `Const`
    a `Merge`, `Enter` or `Exit`        TF1 control flow
    a call or an op with a function     `PartitionedCall`, `If`, `While`, a function by name

So `evaluable` computes, for the graph and for each function, the nodes that pass that rule
(a fixpoint forwards from the constants; arguments are taken as known, which can only
widen it), and `import_problems` accepts each of them only if it computes:

    an op that only computes            `tracer.load.safety.computes_only`, the rule the ops a
                                        fetch runs are judged by too: `SAFE_OPS`, `PURE_TEXT_OPS`
                                        (a Saver's file-name arithmetic, example parsing,
                                        summaries), or any op whose inputs and outputs are numbers
                                        or tensor containers and whose text attributes are chosen
                                        from a fixed list (a path or a URL needs free text)

A node outside that set never runs at import: a summary of the loss (fed by a placeholder
and variables), a `while` loop's gradient stacks (stateful), a dataset rooted at its source
(stateful). Function bodies are shape-inferred (and so evaluated by the same rule) only
where a call node calls them (`PartitionedCall`, `StatefulPartitionedCall`,
`SymbolicGradient`, a function used as an op); `If` and `While` never enter their branches
while importing, so their bodies are judged when they run (`tracer.load.safety`).

One more thing is refused at import: a call not marked stateful into a function that holds
a stateful op. TensorFlow never writes such a call (it marks a call stateful when its
function is), and its constant folder would run one whose inputs are constants, body and
all. An op this TensorFlow does not register (a custom op compiled with the model's code)
cannot be imported at all: it is named in one line before anything is. `call_problem` finds what TensorFlow itself would crash on: a
function that calls itself, and calls nested deeper than `MAX_CALL_DEPTH`. All of this
reads protobuf messages only; nothing here imports a graph.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from recorders.errors import ModelFormatError, UnsafeGraphError, listing
from tracer._tf import tf  # (TensorFlow's op registry is filled when it is imported)
from tracer.load.safety import (
    PURE_TEXT_OPS,
    bind_defaults,
    computes_only,
    function_calls,
    function_values,
    op_def,
)

__all__ = [
    "PURE_TEXT_OPS",
    "MAX_CALL_DEPTH",
    "evaluable",
    "import_problems",
    "call_problem",
    "check_before_import",
]

MAX_CALL_DEPTH = 100  # functions calling functions; a Keras model saved by TF2 nests fewer than 20

# TensorFlow's rule, by its own names (eval_const_tensor.cc): the ops constant evaluation
# never walks through (IsMerge, IsEnter, IsExit, IsPlaceholderWithDefault); the constants it starts from
# (IsConstant); the ops whose value it may take from their input's shape without running
# the input (TryInferFromShapes); the node classes it calls function calls (IsFunctionCall:
# these, and a function used as an op), whose bodies shape inference enters.
_NEVER_WALKED = frozenset(
    {"Merge", "RefMerge", "Enter", "RefEnter", "Exit", "RefExit", "PlaceholderWithDefault"}
)
_CONSTANT_OPS = frozenset({"Const", "HostConst"})
_SHAPE_OPS = frozenset({"Shape", "ShapeN", "Rank", "Size"})
_CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall", "SymbolicGradient"})
# The calls TensorFlow writes only for functions without stateful ops, choosing the stateful
# twin otherwise (`StatefulPartitionedCall`, `If`, `While`, `Case`); a function used as an op
# is one too, its statefulness in its signature. Dataset ops taking functions are not calls.
_STATELESS_CALLS = frozenset(
    {"PartitionedCall", "SymbolicGradient", "StatelessIf", "StatelessWhile", "StatelessCase"}
)


def _tf_version() -> str:
    return f"TensorFlow {tf.__version__}"


def _stateful(op_type: str) -> bool:
    """Marked stateful in TensorFlow's registry, or not known to this TensorFlow (an unknown op cannot be imported)."""
    found = op_def(op_type)
    return found is None or found.is_stateful


def _walkable(node, library: dict) -> bool:
    """TensorFlow's IsSupportedForEvaluation for a node with inputs: not stateful, no frame
    op, no call, no function in an attribute."""
    if node.op in library or node.op in _NEVER_WALKED or _stateful(node.op):
        return False
    if any(a.type in ("func", "list(func)") for a in op_def(node.op).attr):
        return False
    return not any(v.HasField("func") or len(v.list.func) for v in node.attr.values())


def _sources(node, in_function: bool) -> set[str]:
    """What feeds a node's data inputs: node names, and `arg NAME` for a function's argument
    (inside a function a node's output is `node:output:index`, an argument a bare name)."""
    found = set()
    for name in node.input:
        if name.startswith("^"):
            continue
        if in_function and ":" not in name:
            found.add(f"arg {name}")
        else:
            found.add(name.partition(":")[0])
    return found


def evaluable(
    nodes, library: dict, args: Iterable[str] = (), in_function: bool = False
) -> set[str]:
    """Names of the `nodes` (of a graph, or of a function with arguments `args`) that constant
    evaluation could run while importing, by the rule of the module docstring: a fixpoint
    forwards from the constants, the shape ops and the arguments (all taken as known)."""
    known = {f"arg {a}" for a in args}
    waiting: dict[str, int] = {}
    consumers: dict[str, list[str]] = {}
    ready = []
    for node in nodes:
        if node.op in _CONSTANT_OPS or node.op in _SHAPE_OPS:
            ready.append(node.name)
            continue
        if not any(not i.startswith("^") for i in node.input) or not _walkable(node, library):
            # no data input (a placeholder, a variable), or an op TensorFlow does not evaluate
            continue
        sources = _sources(node, in_function) - known
        waiting[node.name] = len(sources)
        for s in sources:
            consumers.setdefault(s, []).append(node.name)
        if not sources:
            ready.append(node.name)
    found = set()
    while ready:
        name = ready.pop()
        if name in found:
            continue
        found.add(name)
        for c in consumers.get(name, ()):
            waiting[c] -= 1
            if waiting[c] == 0:
                ready.append(c)
    return found


def _nodes(graph_def) -> Iterator[tuple[str, str | None, Any]]:
    """(where, function or None, node: a NodeDef) for every node of the graph and of every function."""
    for node in graph_def.node:
        yield node.name, None, node
    for function in graph_def.library.function:
        for node in function.node_def:
            yield (
                f"{node.name} in function {function.signature.name}",
                function.signature.name,
                node,
            )


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


def _shape_inferred(graph_def, library: dict) -> set[str]:
    """The functions whose bodies shape inference may enter: those a call node (anywhere)
    calls, with what they call in turn; every function if a call's function is not written down."""
    calls = [node for _, _, node in _nodes(graph_def) if node.op in library or node.op in _CALL_OPS]
    names, unknown = _names(calls, library)
    if unknown:
        return set(library)
    callees, _ = _callees(library)
    todo, found = list(names), set()
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo.extend(callees[name])
    return found


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
    only compute, and of every call not marked stateful into a function that holds a stateful
    op (see the module docstring); empty if importing runs nothing else."""
    library = {f.signature.name: f for f in graph_def.library.function}
    runs = evaluable(graph_def.node, library)
    problems = [
        f"{node.name} ({node.op})"
        for node in graph_def.node
        if node.name in runs and not computes_only(node.op)
    ]
    for name in sorted(_shape_inferred(graph_def, library)):
        function = library[name]
        inside = evaluable(
            function.node_def,
            library,
            [a.name for a in function.signature.input_arg],
            in_function=True,
        )
        problems += [
            f"{node.name} in function {name} ({node.op})"
            for node in function.node_def
            if node.name in inside and not computes_only(node.op)
        ]
    problems += _mislabelled_calls(graph_def, library)
    return sorted(set(problems))


def _mislabelled_calls(graph_def, library: dict) -> list[str]:
    """Calls not marked stateful (`_STATELESS_CALLS`, or a function used as an op whose signature
    says so) that reach a function holding a stateful op."""
    callees, unknown = _callees(library)
    stateful: dict[str, str] = {}  # function -> a stateful op in it, `name (Type) in function F`
    for where, function, node in _nodes(graph_def):
        if (
            function is not None
            and node.op not in library
            and _stateful(node.op)
            and function not in stateful
        ):
            stateful[function] = f"{where} ({node.op})"
    # A function is tainted when it, or a function it calls, holds a stateful op: found
    # backwards from those along the call edges, once for all the calls.
    callers: dict[str, set[str]] = {}
    for name, called in callees.items():
        for c in called:
            callers.setdefault(c, set()).add(name)
    tainted, todo = dict(stateful), list(stateful)
    while todo:
        name = todo.pop()
        for caller in callers.get(name, ()):
            if caller not in tainted:
                tainted[caller] = tainted[name]
                todo.append(caller)
    problems = []
    for where, _, node in _nodes(graph_def):
        if not (
            node.op in _STATELESS_CALLS
            or (node.op in library and not library[node.op].signature.is_stateful)
        ):
            continue
        direct, blind = _names([node], library)
        reach = set(library) if blind or (direct and unknown) else direct
        hit = sorted(f"{name}, which reaches {tainted[name]}" for name in reach if name in tainted)
        if hit:
            problems.append(f"{where} ({node.op}, not marked stateful, calls function {hit[0]})")
    return problems


def check_before_import(graph_def, source: str, allow_unsafe_ops: bool) -> None:
    """Refuse a serialized graph before it is imported: ModelFormatError for calls TensorFlow
    would crash on (always), UnsafeGraphError for ops importing could run (unless `allow_unsafe_ops`)."""
    crash = call_problem(graph_def)
    if crash:
        raise ModelFormatError(
            f"{source}: its graph holds a {crash}; TensorFlow cannot run it: nothing was imported"
        )
    library = {f.signature.name for f in graph_def.library.function}
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    unknown = sorted({n.op for n in nodes if n.op not in library and op_def(n.op) is None})
    if unknown:
        raise ModelFormatError(
            f"{source}: its graph uses {listing(unknown, 4)}, not an op of this TensorFlow ({_tf_version()}): "
            "a custom op compiled with the model's own code (tf.load_op_library), or one TensorFlow has since "
            "removed; gatetrace loads no op library a model names, so this graph cannot be imported"
        )
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
