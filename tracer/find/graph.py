"""Finding every RNN cell in a TF1 graph, by following edges: the finders side by side.

    tracer.find.steps      one step of a cell class of tf.compat.v1.nn.rnn_cell, by its ops
    tracer.find.unrolled   chains of such steps outside loops (static_rnn and the like): fetched
    tracer.find.loops      such steps inside while loops (dynamic_rnn): replayed
    tracer.find.fused      LSTMBlockCell, BlockLSTM(V2), GRUBlockCell ops: their outputs fetched

`find_cells` runs them all, gives cells sharing a kernel distinct names (`scope@where`,
each listing the others in `shares_weights_with`), and when nothing is found says what
was looked for and what the graph holds instead (cuDNN RNNs, layer-normalized cells,
while loops without a known cell, steps inside conditionals).
"""

from __future__ import annotations

import re
from dataclasses import replace

from recorders.errors import GatetraceError, GraphPatternError, NoCellFoundError
from tracer._tf import function_def_to_graph, tf
from tracer.cells.found import Cell, Step
from tracer.find.fused import FUSED_OPS, fused_cells, fused_steps
from tracer.find.loops import in_v1_loop, v1_loop_cells, v2_loop_cells
from tracer.find.proposals import propose
from tracer.find.steps import find_steps
from tracer.find.unrolled import unrolled_cells
from tracer.load.rebuild import gpu_only_problem

__all__ = ["Step", "Cell", "find_cells"]


def _nearby_ops(graph: tf.Graph, n: int = 5, prefix: str = "") -> str:
    interesting = {"MatMul", "Split", "BiasAdd", "While", "StatelessWhile", "Sigmoid", "Tanh"}
    ops = graph.get_operations()
    names = [op.name for op in ops if op.type in interesting][:n] or [op.name for op in ops][:n]
    return ", ".join(prefix + name for name in names) if names else "(the graph is empty)"


def _body_ops(graph: tf.Graph, loop: str) -> str:
    """What the body of the control-flow-v2 loop `loop` computes (its first matrix products,
    splits and activations, named as inside the loop), so that a refusal names the cell; ""
    for a v1 loop, whose body's ops are in the graph itself."""
    op = graph.get_operation_by_name(loop)
    if op.type not in ("While", "StatelessWhile"):
        return ""
    library = {f.signature.name: f for f in graph.as_graph_def().library.function}
    body = function_def_to_graph(library[op.get_attr("body").name])
    return f"; its body computes {_nearby_ops(body, prefix=loop + '/')}"


def find_cells(graph: tf.Graph, source: str = "the graph") -> list[Cell]:
    """Every RNN cell applied in `graph`, ordered by name.

    Raises NoCellFoundError (naming `source` and a few nearby ops) when there is none.
    """
    apps = find_steps(graph)
    # Cells inside while loops (dynamic_rnn) are replayed: see tracer.find.loops. Fused ops'
    # outputs are their gates: see tracer.find.fused.
    in_frames = [a for a in apps if in_v1_loop(a)] + fused_steps(graph, inside_v1_frames=True)
    loop_cells = v1_loop_cells(graph, in_frames) + v2_loop_cells(graph)
    loop_cells += fused_cells(graph)
    apps = [a for a in apps if not in_v1_loop(a)]
    if not apps and not loop_cells:
        ops = graph.get_operations()
        loops = [op.name for op in ops if op.type in ("While", "StatelessWhile", "Enter")]
        conds = [op.name for op in ops if op.type in ("If", "StatelessIf", "Switch")]
        cudnn = gpu_only_problem(graph)
        layer_norm = [
            op.name
            for op in ops
            if op.type == "Split"
            and "layer_norm"
            in op.name.lower() + "".join(c.name.lower() for t in op.outputs for c in t.consumers())
        ]
        hint = ""
        if cudnn:
            hint = f"; {cudnn}"
        elif layer_norm:
            hint = (
                f"; the graph normalizes its gates ({layer_norm[0]}), as LayerNormBasicLSTMCell does: "
                "gatetrace does not support layer-normalized cells"
            )
        elif loops:
            hint = (
                f"; the graph runs a while loop ({loops[0]}), in which no cell of these kinds "
                f"was found either{_body_ops(graph, loops[0])}"
            )
        elif conds:
            hint = (
                f"; the graph runs its steps inside conditionals ({conds[0]}), as static_rnn does "
                "when given sequence_length: gatetrace draws them straight only in a model loaded from its "
                "file, where their branches run no stateful op (a dropout's random ops do); record the "
                "model from its file, or, where it runs such ops, build the graph without sequence_length "
                "and pass the lengths to gatetrace with --lengths"
            )
        else:
            try:
                own = propose(graph, source)
            except (GatetraceError, ValueError, TypeError, KeyError):
                own = []  # (a proposal is a hint: never in the way of the refusal itself)
            if own:
                hint = (
                    f"; {own[0].cell} looks like a cell of your own ({len(own[0].gates)} nonlinearities a step over "
                    f"{own[0].steps} steps): --gate-ops '{own[0].pattern}' records it (gatetrace inspect lists them all)"
                )
        raise NoCellFoundError(
            f"no RNN cell found in {source}: looked for Split ops fed by a kernel MatMul "
            f"(LSTM and GRU cells), MatMul-BiasAdd-activation steps on concat([inputs, state]) "
            f"(BasicRNNCell) and the fused ops {', '.join(sorted(FUSED_OPS))}; nearest ops: {_nearby_ops(graph)}{hint}"
        )

    cells = _without_shape_probes(graph, loop_cells + unrolled_cells(graph, apps))
    cells = _distinct_names(cells)
    cells.sort(key=lambda c: c.name)
    return cells


# ops that read only a tensor's shape
_SHAPE_ONLY = {"ZerosLike", "OnesLike", "Shape", "ShapeN", "Size", "Rank"}


def _without_shape_probes(graph: tf.Graph, cells: list[Cell]) -> list[Cell]:
    """Leave out the step Keras' `K.rnn` runs once outside its loop only to learn the
    output's shape: one step of a loop cell's kernel whose output nothing reads but for its
    shape (`ZerosLike` where the loop is masked)."""
    in_loops = {c.variables["kernel"] for c in cells if c.loop is not None}

    def probe(c: Cell) -> bool:
        keras = "recurrent_kernel" in c.weights
        return (
            keras
            and c.path == "fetch"
            and len(c.steps) == 1
            and c.variables["kernel"] in in_loops
            and all(
                op.type in _SHAPE_ONLY
                for op in graph.get_tensor_by_name(c.steps[0].states[-1]).consumers()
            )
        )

    return [c for c in cells if not probe(c)]


def _where(c: Cell) -> list[str]:
    """Ways to say where a cell's chain runs, most readable first: its loop; or, for an
    unrolled chain, the op scope of its first step, then the scope its initial state comes
    from (`bidirectional_rnn/bw/bw`), then its first step's gate op."""
    if c.loop is not None:
        return [c.loop.loop.removesuffix("/while_context")] * 3
    if c.fused is not None:
        return [
            c.fused.ops[0].rpartition("/")[0],
            c.fused.h_prev[0].rpartition(":")[0],
            c.fused.ops[0],
        ]
    # the step computed first (a reversal by lengths keeps the steps in the order computed)
    first = c.steps[-1] if c.backward and c.reverse_lengths is None else c.steps[0]
    scope = first.previous[-1].rpartition(":")[0].rpartition("/")[0]
    parts = [p for p in scope.split("/") if not re.fullmatch(r"\w*ZeroState(_\d+)?", p)]
    return [
        first.gate_op.rpartition("/")[0],
        "/".join(parts) or scope or first.previous[-1],
        first.gate_op,
    ]


def _shortest(wheres: list[str]) -> list[str]:
    """For each of several distinct scopes, the shortest part that tells it from the others:
    its innermost path component that no other scope has (`bw` of `rnn/bidirectional_rnn/bw/bw/while`
    beside `bidirectional_rnn/fw/fw/while`, `rnnlm_1` of `rnnlm_1/rnn_decoder/...` beside
    `rnnlm/rnn_decoder/...`), where every scope has one and they come out distinct; else the
    whole scope, without its trailing `/`. The same graph gives the same names, run after run."""
    parts = [[p for p in w.split("/") if p] for w in wheres]
    short = []
    for k, mine in enumerate(parts):
        others = {p for j, theirs in enumerate(parts) if j != k for p in theirs}
        own = next((p for p in reversed(mine) if p not in others), None)
        if own is None:
            return [w.rstrip("/") for w in wheres]
        short.append(own)
    if len(set(short)) != len(short):
        return [w.rstrip("/") for w in wheres]
    return short


def _distinct_names(cells: list[Cell]) -> list[Cell]:
    """Give cells that share a name (one kernel serving several chains or loops) distinct
    names: the kernel's scope, `@`, and the shortest part of where the chain runs (`_where`,
    `_shortest`) that tells the chains apart; and tell each which cells share its weights. A stacked loop layer's `below` follows the renaming
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
                new.update(
                    (id(c), f"{name}@{short}")
                    for c, short in zip(group, _shortest([w[k] for w in wheres]), strict=True)
                )
                break
        else:
            raise GraphPatternError(
                f"cells {name}: {len(group)} chains share this kernel and gatetrace cannot tell them apart "
                f"(they start at {', '.join(sorted(c.steps[0].gate_op if c.steps else c.in_loop.loop for c in group))}); "
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
