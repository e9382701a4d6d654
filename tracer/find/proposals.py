"""What looks like a cell of your own, where no cell TensorFlow or Keras ships is found.

In each scope of the graph, the nonlinearities (Sigmoid, Tanh, ...) whose input comes through
a matrix product and which read a sequence's steps one more each, step by step
(`tracer.find.cuts`), are proposed as one cell, with the `--gate-ops` pattern of their names;
a proposal is kept only where `tracer.find.named.find_named` reads that pattern as one cell of
two steps or more. No role is guessed: the gates are named as `find_named` names them.
`gatetrace inspect` lists the proposals, and `find_cells`' refusal names the first.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from recorders.errors import GraphPatternError
from tracer._tf import tf
from tracer.find.cuts import Cuts
from tracer.find.edges import in_v1_frame
from tracer.find.named import NONLINEAR, find_named

__all__ = ["Proposal", "propose"]


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
    cut = Cuts(graph)
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
            cells = find_named(graph, pattern, None, source, cut)
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
