"""A cell of your own's weights, where its graph says them: each gate's W, U and b.

A gate's preactivation (the input of its nonlinearity, on a cell's first step) is read as a
sum, down through adds and `Split`s: `x @ W` (its operand one step of the input: `input`),
`[x, h] @ kernel` (the input and a state joined: `kernel`, its first rows on the input),
`anything @ U` (the state, or what the cell made of it: `recurrent`), and a variable (`bias`);
each a variable (or a Const), or one column block of such a sum cut by a Split. Where a
preactivation is anything else, or adds two terms of one kind, its gate's weights are not
known, and `weights_of` says why. The matrices an operand is made of (the mLSTM's
`m = (x wmx) * (h wmh)`) are the cell's own, listed with its variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from tracer._tf import tf
from tracer.cells.kinds import GateWeights
from tracer.find.edges import weight_name, weight_source

__all__ = ["weights_of", "input_width", "Inputs"]


class Inputs(Protocol):
    """What tells the step's input among a product's operands: the cuts of an unrolled graph
    (`tracer.find.cuts.Cuts`), or what a loop's body reads an iteration (`LoopInputs`)."""

    def is_input(self, t: tf.Tensor) -> bool: ...


_NOT_A_SUM = "its preactivation is not a sum of matrix products and biases of variables"


def weights_of(
    graph: tf.Graph, pre: Mapping[str, str], cut: Inputs
) -> tuple[tuple[GateWeights, ...], dict[str, str], dict[str, str], dict[str, str]]:
    """Where each gate's W, U and b are, read from the first step's ops: its preactivation a
    sum of `x @ W`, `h @ U` (or `[x, h] @ kernel`) and `b`, each a variable (or Const), or
    a column block of such a sum cut by a Split. Returns each gate's `GateWeights` (kernel
    "" where not known), the roles' tensors and variables, and why not, by gate."""
    layouts, weights, variables, unknown = [], {}, {}, {}
    for gate, name in pre.items():
        terms = _terms(graph.get_tensor_by_name(name), (0, 1))
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
    terms: list[tuple[str, tf.Tensor, tf.Tensor | None, tuple[int, int]]], cut: Inputs
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


def input_width(graph: tf.Graph, pre: Mapping[str, str], cut: Inputs) -> int:
    """The features of the step's input as the gates' products read it (an `input` operand's
    last dimension, or the input part of `[x, h]`); 0 where no product says it."""
    for name in pre.values():
        for kind, a, _, _ in _terms(graph.get_tensor_by_name(name), (0, 1)) or ():
            if kind != "product":
                continue
            x = a if cut.is_input(a) else a.op.inputs[0] if _joins_input(a, cut) else None
            width = None if x is None or not x.shape.rank else x.shape[-1]
            if width:
                return int(width)
    return 0


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


def _joins_input(a: tf.Tensor, cut: Inputs) -> bool:
    """Whether `a` is [input, state] joined along its features (`tf.concat([x, h], 1)`)."""
    op = a.op
    if op.type != "ConcatV2" or tf.get_static_value(op.inputs[-1]) not in (1, -1):
        return False
    return len(op.inputs) == 3 and cut.is_input(op.inputs[0])
