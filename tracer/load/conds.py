"""static_rnn's steps inside conditionals, drawn straight: both branches computed, one selected.

`static_rnn(cell, inputs, sequence_length=lengths)` (and `static_bidirectional_rnn`, which
calls it) runs each step inside two conditionals (`_rnn_step` of TensorFlow's `rnn.py`):

    t >= max(lengths) ?  (zeros, state)                          every sequence has ended
                      :  new = cell(x_t, state)
                         t < min(lengths) ? new
                                          : select(t >= lengths, (zeros, state), new)

Nothing inside a conditional can be fetched: with control flow v2 its branches are functions
of an `If`/`StatelessIf` op, and with v1 (`Switch`/`Merge`) the branch not taken has no value
(a fetch of it fails). `straighten` rewrites a GraphDef so that both branches of each such
conditional are ops of the graph itself, run every time, and each of its outputs is
`SelectV2(predicate, then, else)`: the value the conditional gave, bit for bit (a select copies
the value of the branch the predicate names, and the branches compute only stateless ops, so
computing the other one changes nothing). The cell's steps are then ops of the graph, found and
fetched as those of static_rnn without sequence_length (`tracer.find.unrolled`), each followed by
the selects that copy the state through past a sequence's length.

    control flow v2   the `If` op's two functions are inlined under `<if>/then/` and `<if>/else/`
                      (their arguments read the op's inputs), a `SelectV2` per output
                      (`<if>/select_k`), and an `IdentityN` of those selects takes the op's name,
                      so that every reader is unchanged; an output a select cannot hold (a
                      gradient's intermediate, a variant) keeps the op, which only those read
    control flow v1   the ops between the conditional's `Switch`es and its `Merge`s read what
                      the switches were given, and each `Merge` becomes a `SelectV2` of the
                      same name (a `tf.cond` merges its false branch first, its true one second)

Only the conditionals of `_rnn_step` are drawn straight: those whose predicate compares a
constant (the step) with the minimum or the maximum of a vector (the lengths), whose branches
run no stateful op (but variable reads) and, in v1, whose branches are closed (every value they
read comes through a switch of the conditional). Others are left as they are.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from typing import Any

from tracer._tf import tf, v1
from tracer.load.safety import op_def

__all__ = ["conditional_steps", "straighten"]

_COMPARES = {"Less", "LessEqual", "Greater", "GreaterEqual"}
_IFS = {"If", "StatelessIf"}
# ops that call functions: their functions are looked into, not the op's own definition
_CALLS = _IFS | {"While", "StatelessWhile", "PartitionedCall", "StatefulPartitionedCall"}
# stateful by TensorFlow's definition, and only reading: run once more, they change nothing
_READS = {"ReadVariableOp"}
# what a select can hold: anything but a variant (an Optional, a TensorList) or a resource
_NOT_SELECTABLE = {tf.variant.as_datatype_enum, tf.resource.as_datatype_enum}
# v1 frames inside a branch (a while loop in a conditional) are not drawn straight
_FRAMES = {"Enter", "RefEnter", "Exit", "RefExit", "NextIteration", "RefNextIteration"}
_MAX_REGION = 200_000  # ops of one v1 branch pair, past which it is left as it is
_PASS = ("Identity", "Switch")  # what a predicate and its operands are read through


def _name(ref: str) -> str:
    """The node a tensor or control input (`a`, `a:1`, `^a`) names."""
    return ref.lstrip("^").partition(":")[0]


def _port(ref: str) -> int:
    name, _, port = ref.lstrip("^").partition(":")
    return int(port) if port else 0


def _behind(nodes: dict, ref: str):
    """The node a tensor comes from, through Identity and Switch (their data input)."""
    node = nodes.get(_name(ref))
    for _ in range(64):
        if node is None or node.op not in _PASS or not node.input:
            break
        node = nodes.get(_name(node.input[0]))
    return node


def _is_step_predicate(nodes: dict, ref: str) -> bool:
    """Whether `ref` is `_rnn_step`'s predicate: a constant (the step) compared with the Min or
    the Max of a vector (the lengths)."""
    node = _behind(nodes, ref)
    if node is None or node.op not in _COMPARES:
        return False
    data = [i for i in node.input if not i.startswith("^")]
    kinds = sorted(getattr(_behind(nodes, i), "op", "") for i in data)
    return kinds in (["Const", "Max"], ["Const", "Min"])


def _functions(attrs) -> list[str]:
    """The functions an op's attributes name."""
    names = []
    for value in attrs.values():
        if value.HasField("func"):
            names.append(value.func.name)
        elif value.HasField("list"):
            names += [f.name for f in value.list.func]
    return names


def _computes_only(names: Iterable[str], library: dict) -> bool:
    """Whether the functions `names` (and those they call) run no stateful op but variable reads."""
    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name not in library:
            return False
        for node in library[name].node_def:
            if node.op in library:
                todo.append(node.op)
                continue
            todo += _functions(node.attr)
            if node.op in _CALLS or node.op in _READS:
                continue
            found = op_def(node.op)
            if found is None or found.is_stateful or node.op in _FRAMES:
                return False
    return True


# -- control flow v2: If ops ---------------------------------------------------------------


def _inline(node, branch: str, library: dict, scratch: tf.Graph) -> tuple[list, list[str]] | None:
    """The nodes of `node`'s `branch` function inlined under `<node>/<then|else>/` (its arguments
    reading the op's inputs), and the tensors of its outputs; None where it cannot be.
    `scratch` is a graph holding the library, where the functions a branch calls are known."""
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

    fdef = library[node.attr[branch].func.name]
    prefix = f"{node.name}/{branch.partition('_')[0]}/"
    args = [i for i in node.input[1:] if not i.startswith("^")]
    controls = [i for i in node.input if i.startswith("^")]
    if len(args) != len(fdef.signature.input_arg):
        return None
    with scratch.as_default():
        graph_def, flat = function_def_to_graph_def(fdef)
    outer = {a.name: t for a, t in zip(fdef.signature.input_arg, args, strict=True)}

    def renamed(ref: str) -> str:
        control, name = ref.startswith("^"), _name(ref)
        if name in outer:
            return "^" + _name(outer[name]) if control else outer[name]
        return ("^" if control else "") + prefix + ref.lstrip("^")

    nodes = []
    for inner in graph_def.node:
        if inner.name in outer:
            continue
        if any(v.placeholder for v in inner.attr.values()):
            return None  # (a polymorphic function: not what a conditional's branch is)
        copy = v1.NodeDef()
        copy.CopyFrom(inner)
        copy.name = prefix + inner.name
        del copy.input[:]
        copy.input.extend([renamed(i) for i in inner.input] + controls)
        copy.device = ""
        copy.attr.pop("_class", None)  # (colocation with the function's own names)
        nodes.append(copy)
    outputs = [renamed(flat[fdef.ret[a.name]]) for a in fdef.signature.output_arg]
    return nodes, outputs


def _straighten_if(
    graph_def, node, library: dict, taken: set[str], readers: dict, scratch: tf.Graph
) -> bool:
    """Replace the If op `node` by its two branches and a select per output (see the module
    docstring); False where it is left as it is. `taken` holds the graph's node names,
    `readers` the nodes reading each If op (both kept up to date)."""
    names = [node.attr[b].func.name for b in ("then_branch", "else_branch")]
    if tf.variant.as_datatype_enum in node.attr["Tin"].list.type:
        return False  # (a gradient's conditional, reading the intermediates its forward one kept)
    if not _computes_only(names, library):
        return False
    then = _inline(node, "then_branch", library, scratch)
    other = _inline(node, "else_branch", library, scratch)
    if then is None or other is None:
        return False
    (then_nodes, then_out), (else_nodes, else_out) = then, other
    types = list(node.attr["Tout"].list.type)
    selects = {}
    added = then_nodes + else_nodes
    for k, dtype in enumerate(types):
        if dtype in _NOT_SELECTABLE:
            continue
        select = v1.NodeDef(name=f"{node.name}/select" + (f"_{k}" if k else ""), op="SelectV2")
        select.input.extend([node.input[0], then_out[k], else_out[k]])
        select.attr["T"].type = dtype
        selects[k] = select.name
        added.append(select)
    if any(n.name in taken for n in added):
        return False  # (a name the graph has: left as it is)
    graph_def.node.extend(added)
    taken.update(n.name for n in added)
    for new in graph_def.node[len(graph_def.node) - len(added) :]:
        for ref in new.input:
            if _name(ref) in readers:
                readers[_name(ref)].append(new)
    if len(selects) == len(types):  # the op's readers read the selects, by the op's name
        node.ClearField("attr")
        node.op = "IdentityN"
        del node.input[:]
        node.input.extend(selects[k] for k in range(len(types)))
        node.attr["T"].list.type.extend(types)
        return True
    # the op stays for what a select cannot hold; the rest read the selects
    for other in readers[node.name]:
        for j, ref in enumerate(other.input):
            if not ref.startswith("^") and _name(ref) == node.name and _port(ref) in selects:
                other.input[j] = selects[_port(ref)]
    return True


def _straighten_v2(graph_def) -> int:
    """Every If op of `_rnn_step` drawn straight, those inlined from others' branches too."""
    library = {f.signature.name: f for f in graph_def.library.function}
    if not any(n.op in _IFS for n in graph_def.node):
        return 0
    scratch = tf.Graph()
    with scratch.as_default():
        tf.import_graph_def(v1.GraphDef(library=graph_def.library), name="")
    done = 0
    for _ in range(64):  # each round reaches the conditionals one level further in
        nodes = {n.name: n for n in graph_def.node}
        taken = set(nodes)
        ifs = [n.name for n in graph_def.node if n.op in _IFS]
        readers: dict[str, list] = {name: [] for name in ifs}
        for n in graph_def.node:
            for ref in n.input:
                if _name(ref) in readers:
                    readers[_name(ref)].append(n)
        found = [name for name in ifs if _is_step_predicate(nodes, nodes[name].input[0])]
        changed = 0
        for name in found:  # (in the order made: a step's reader is a later step)
            changed += _straighten_if(graph_def, nodes[name], library, taken, readers, scratch)
        done += changed
        if not changed:
            break
    return done


# -- control flow v1: Switch and Merge -----------------------------------------------------


def _straighten_cond(nodes: dict, pred_id, merges: list, read: set[str]) -> bool:
    """Draw the v1 conditional of `pred_id` (`<cond>/pred_id`, the Identity of its predicate)
    straight (see the module docstring), whose `Merge`s are `merges` (`<cond>/Merge`,
    `<cond>/Merge_1`, ...); False where it is left as it is."""
    scope = pred_id.name.removesuffix("/pred_id")
    predicate = pred_id.input[0]

    def entry(node) -> str | None:
        """What a switch of this conditional passes on (its data input), or None: not one."""
        if node.op not in ("Switch", "RefSwitch") or len(node.input) < 2:
            return None
        if _name(node.input[1]) == pred_id.name:
            return node.input[0]
        if node.name == f"{scope}/Switch" and _name(node.input[1]) == _name(predicate):
            return node.input[0]
        return None

    if not merges or any(f"{m.name}:1" in read for m in merges):
        return False
    region: dict[str, Any] = {}

    def branches(ref: str) -> set[int] | None:
        """The branches (0 false, 1 true) whose switches `ref` reads, walking back through the
        ops inside the conditional (added to `region`); None where the walk leaves it."""
        ports: set[int] = set()
        todo, seen = deque([ref]), set()
        while todo:
            r = todo.popleft()
            node = nodes.get(_name(r))
            if node is None:
                return None
            if entry(node) is not None:
                if r.startswith("^"):
                    return None  # (waiting on a switch: cond v1 waits on its pivots instead)
                ports.add(_port(r))
                continue
            if node.name in seen:
                continue
            seen.add(node.name)
            if node.op in _FRAMES or (
                node.op not in _READS and (op_def(node.op) is None or op_def(node.op).is_stateful)
            ):
                return None
            if not node.input and node.op != "Const":
                return None  # a value from outside, not through a switch
            region[node.name] = node
            if len(region) > _MAX_REGION:
                return None
            todo.extend(node.input)
        return ports

    for merge in merges:
        data = [i for i in merge.input if not i.startswith("^")]
        if len(data) != 2 or merge.attr["T"].type in _NOT_SELECTABLE:
            return False
        if branches(data[0]) != {0} or branches(data[1]) != {1}:
            return False
    for name in [m.name for m in merges]:
        region.pop(name, None)

    def through(ref: str) -> str:
        node = nodes.get(_name(ref))
        passed = entry(node) if node is not None else None
        if passed is None:
            return ref
        return "^" + _name(passed) if ref.startswith("^") else passed

    for node in region.values():
        rewired = [through(i) for i in node.input]
        del node.input[:]
        node.input.extend(rewired)
    for merge in merges:
        data = [through(i) for i in merge.input if not i.startswith("^")]
        controls = [through(i) for i in merge.input if i.startswith("^")]
        dtype = merge.attr["T"].type
        merge.ClearField("attr")
        merge.op = "SelectV2"
        del merge.input[:]
        merge.input.extend([predicate, data[1], data[0], *controls])
        merge.attr["T"].type = dtype
    return True


def _straighten_v1(graph_def) -> int:
    """Every v1 conditional of `_rnn_step` drawn straight."""
    nodes = {n.name: n for n in graph_def.node}
    switched = {_name(n.input[1]) for n in graph_def.node if n.op == "Switch" and len(n.input) > 1}
    read = {i for n in graph_def.node for i in n.input}
    merges: dict[str, list] = {}  # by the scope of their conditional
    for n in graph_def.node:
        merge = re.fullmatch(r"(.+)/Merge(_\d+)?", n.name)
        if n.op == "Merge" and merge:
            merges.setdefault(merge.group(1), []).append(n)
    done = 0
    for name in sorted(switched):
        pred_id = nodes.get(name)
        if (
            pred_id is not None
            and pred_id.op == "Identity"
            and name.endswith("/pred_id")
            and _is_step_predicate(nodes, pred_id.input[0])
        ):
            scope = name.removesuffix("/pred_id")
            done += _straighten_cond(nodes, pred_id, merges.get(scope, []), read)
    return done


# -- both ----------------------------------------------------------------------------------


def conditional_steps(graph: tf.Graph) -> bool:
    """Whether `graph` runs steps in `_rnn_step`'s conditionals: an If op, or the `pred_id` of a
    v1 conditional, whose predicate compares a constant with the min or the max of a vector."""

    def behind(op: tf.Operation) -> tf.Operation:
        for _ in range(64):
            if op.type not in _PASS or not op.inputs:
                break
            op = op.inputs[0].op
        return op

    for op in graph.get_operations():
        if op.type in _IFS or (op.type == "Identity" and op.name.endswith("/pred_id")):
            compare = behind(op.inputs[0].op)
            kinds = sorted(behind(t.op).type for t in compare.inputs)
            if compare.type in _COMPARES and kinds in (["Const", "Max"], ["Const", "Min"]):
                return True
    return False


def straighten(graph_def) -> tuple[object, int]:
    """A copy of `graph_def` with `_rnn_step`'s conditionals drawn straight, and how many were."""
    out = v1.GraphDef()
    out.CopyFrom(graph_def)
    done = _straighten_v2(out) + _straighten_v1(out)
    return out, done
