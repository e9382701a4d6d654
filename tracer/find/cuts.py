"""Where a graph cuts a sequence into steps, and which of those steps each op has read.

An unrolled cell reads its input one step at a time: the input is cut into steps by an
`Unpack` (`tf.unstack`), a `Split` (`tf.split`) or `StridedSlice` ops of one tensor at
constant positions (`x[:, t]`). An op of step t of a forward cell has read the steps 0 to t
through some path back along the graph's edges (a backward cell's: the last t + 1), so how
many it has read says its step (`Cuts.positions`). `tracer.find.named` finds the steps of a
cell of your own this way, where names do not say them.

A cell in a while loop's body reads one step an iteration (`LoopInputs`): an element of a
TensorArray or TensorList (`TensorArrayReadV3`, `TensorListGetItem`), a row gathered or sliced
from a tensor that enters the loop unchanged, or a loop variable whose next value the gates do
not make (SeqGAN's `x_t`, the next element read from a TensorArray). A loop variable whose
next value is made from the gates' activations, through element-wise ops and stacking only,
is the cell's state, not its input.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from recorders.errors import GraphPatternError
from tracer._tf import tf

__all__ = ["Cuts", "LoopInputs"]

_CUTS = ("Unpack", "Split", "SplitV")  # ops whose outputs are a sequence's steps
# ops a value passes through unchanged on its way from a step's input to a matrix product
_SAME = {"Identity", "Squeeze", "Reshape", "ExpandDims"}


class Cuts:
    """Where the graph cuts a sequence into steps (the outputs of an Unpack or a Split, or
    StridedSlice ops of one tensor at constant positions), and which of those steps each op
    has read, through any path back along the graph's edges."""

    def __init__(self, graph: tf.Graph):
        self.sources: dict[str, list[str]] = {}  # a cut: its steps' tensors, in input order
        slices: dict[str, list[tuple[tuple[int, ...], str]]] = defaultdict(list)
        for op in graph.get_operations():
            if op.type in _CUTS and len(op.outputs) > 1:
                self.sources[op.name] = [t.name for t in op.outputs]
            elif op.type == "StridedSlice" and op.get_attr("shrink_axis_mask"):
                begin = tf.get_static_value(op.inputs[1])
                if begin is not None:
                    slices[op.inputs[0].name].append(
                        (tuple(int(b) for b in begin), op.outputs[0].name)
                    )
        for sliced, found in slices.items():
            if len(found) > 1:
                self.sources[f"slices of {sliced}"] = [t for _, t in sorted(found)]
        self._bit = {t: k for k, t in enumerate(t for ts in self.sources.values() for t in ts)}
        self._read: dict[str, int] = {}  # op name: the cut tensors it has read, as bits

    def read(self, op: tf.Operation) -> int:
        """The cut tensors `op` has read, as bits of `_bit` (a while loop's cycle is walked
        once)."""
        memo, bit, busy = self._read, self._bit, set()
        stack = [(op, False)]
        while stack:
            o, done = stack.pop()
            if o.name in memo:
                continue
            if done:
                mask = 0
                for t in o.inputs:
                    mask |= memo.get(t.op.name, 0) | (1 << bit[t.name] if t.name in bit else 0)
                memo[o.name] = mask
                continue
            if o.name in busy:
                continue
            busy.add(o.name)
            stack.append((o, True))
            stack.extend((t.op, False) for t in o.inputs if t.op.name not in memo)
        return memo[op.name]

    def is_input(self, t: tf.Tensor) -> bool:
        """Whether `t` is one step of a cut input (through ops that pass it on unchanged)."""
        while t.name not in self._bit and t.op.type in _SAME and t.op.inputs:
            t = t.op.inputs[0]
        return t.name in self._bit

    def positions(
        self, cell: str, ops: Sequence[tf.Operation], what: str
    ) -> tuple[dict[str, int], bool, dict[int, str]]:
        """Each op's input position (see the module docstring), whether the cell reads its
        input backward, and the tensor of each position."""
        read = {op.name: self.read(op) for op in ops}
        best: tuple[int, str, dict[str, list[int]]] | None = None
        for source, tensors in self.sources.items():
            bits = [self._bit[t] for t in tensors]
            seen = {n: [k for k, b in enumerate(bits) if mask >> b & 1] for n, mask in read.items()}
            counts = {len(ks) for ks in seen.values()}
            if len(counts) > 1 and (best is None or len(counts) > best[0]):
                best = (len(counts), source, seen)
        if best is None:
            raise GraphPatternError(
                f"cell {cell}: its {what} do not read an input cut into steps (by Unpack, Split or StridedSlice) "
                "one step more each, so their steps cannot be told; give the pattern a (?P<step>\\d+) group"
            )
        _, source, seen = best
        n = len(self.sources[source])
        forward = {name: ks == list(range(len(ks))) for name, ks in seen.items()}
        backward = {name: ks == list(range(n - len(ks), n)) for name, ks in seen.items()}
        for name, ks in seen.items():
            if not ks or not (forward[name] or backward[name]):
                shown = (
                    "none"
                    if not ks
                    else ", ".join(map(str, ks[:6])) + (", ..." if len(ks) > 6 else "")
                )
                raise GraphPatternError(
                    f"cell {cell}: {name} has read steps {shown} of the input {source}, not its first or last "
                    "steps in order, so its step cannot be told; give the pattern a (?P<step>\\d+) group"
                )
        reverse = not all(forward.values())
        if reverse and not all(backward.values()):
            raise GraphPatternError(
                f"cell {cell}: some of its {what} read the input {source} from its start, others from its end; "
                "name the ops of one direction (one cell) at a time"
            )
        at = {name: (n - len(ks)) if reverse else len(ks) - 1 for name, ks in seen.items()}
        return at, reverse, {p: self.sources[source][p] for p in set(at.values())}


# what an iteration reads its step with
_READS = {"TensorArrayReadV3", "TensorListGetItem"}
_GATHERS = {"GatherV2", "ResourceGather", "StridedSlice", "Slice"}
# ops a loop variable passes through on its way into an iteration (v1: Merge -> Switch)
_INTO = _SAME | {"Unpack", "Switch"}
# ops a state is made with from the gates' activations
_ELEMENTWISE = {
    "Mul", "Add", "AddV2", "Sub", "Neg", "Tanh", "Sigmoid", "Relu", "Maximum", "Minimum",
    "Select", "SelectV2", "BiasAdd", "Pack", "Unpack", "ConcatV2", "Identity", "Reshape",
    "ExpandDims", "Squeeze",
}  # fmt: skip


class LoopInputs:
    """Which tensors of a while loop's body are the step's input (see the module docstring):
    `activations` are the gates' outputs in the body, `invariant` the body's arguments it
    returns unchanged (a v2 body; a v1 loop's are `Enter`s)."""

    def __init__(self, activations: Sequence[tf.Tensor], invariant: frozenset[str] = frozenset()):
        self.activations = {t.name for t in activations}
        self.invariant = invariant

    def is_input(self, t: tf.Tensor) -> bool:
        """Whether `t` is the step's input, through ops that pass it on unchanged."""
        while t.op.type in _SAME and t.op.inputs:
            t = t.op.inputs[0]
        if t.op.type in _READS:
            return True
        if t.op.type in _GATHERS:
            return self._outside(t.op.inputs[0])
        variable = self._variable(t)
        return variable is not None and not self._made_by_gates(variable)

    def _outside(self, t: tf.Tensor) -> bool:
        """Whether `t` enters the loop unchanged (an invariant argument, an Enter)."""
        while t.op.type in ("Identity", "ReadVariableOp") and t.op.inputs:
            t = t.op.inputs[0]
        return t.name in self.invariant or t.op.type in ("Enter", "RefEnter")

    def _variable(self, t: tf.Tensor) -> tf.Tensor | None:
        """The next value of the loop variable `t` is read from, or None."""
        while t.op.type in _INTO and t.op.inputs:
            t = t.op.inputs[0]
        if t.op.type == "Merge":  # v1: Merge(Enter, NextIteration)
            after = [i for i in t.op.inputs if i.op.type == "NextIteration"]
            return after[0].op.inputs[0] if after else None
        if t.op.type == "Placeholder" and t.name not in self.invariant:  # v2: an argument
            names = [i.name for i in t.graph.inputs]
            if t.name in names and len(t.graph.outputs) == len(names):
                return t.graph.outputs[names.index(t.name)]
        return None

    def _made_by_gates(self, t: tf.Tensor, limit: int = 512) -> bool:
        """Whether `t` is made from the gates' activations by element-wise ops and stacking."""
        todo, seen = [t], set[str]()
        while todo and len(seen) < limit:
            u = todo.pop()
            if u.name in self.activations:
                return True
            if u.name in seen or u.op.type not in _ELEMENTWISE:
                continue
            seen.add(u.name)
            todo += list(u.op.inputs)
        return False
