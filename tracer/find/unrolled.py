"""Unrolled cells (`static_rnn`, `static_bidirectional_rnn`, `rnn_decoder`, cells called by hand):
chains of steps whose gate ops can be fetched.

The steps (`tracer.find.steps.find_steps`) outside any while loop are grouped by the kernel
variable they read (variable scopes and op scopes differ, so names are never guessed),
and each group is split into chains linked by their state edges: one kernel may serve
several chains (both directions of a bidirectional RNN given one cell object, a
sampling unroll beside the training one), each a cell of its own. Each chain is ordered
along the recurrence, and each step is mapped to the input position it read, so that the
backward half of a bidirectional RNN lines up with the forward half.

static_rnn given sequence_length (its steps drawn out of their conditionals by
`tracer.load.conds`) copies each step's state through past a sequence's length: the chain's
`lengths`, nothing recorded past them. The backward half of static_bidirectional_rnn given
sequence_length reads its input reversed by those lengths (`reverse_sequence`): its
`reverse_lengths`, by which each example's steps are put back in input order.
"""

from __future__ import annotations

from recorders.errors import GraphPatternError
from tracer._tf import tf
from tracer.cells.found import Cell
from tracer.find.application import Application, cell_of, step_of
from tracer.find.edges import (
    cell_name,
    chains,
    const_scalar,
    input_position,
    reversed_by,
    topological_index,
    weight_op,
)

__all__ = ["unrolled_cells"]


def unrolled_cells(graph: tf.Graph, apps: list[Application]) -> list[Cell]:
    """A Cell for each chain of the steps `apps` (found outside while loops)."""
    order = topological_index(graph)
    by_kernel: dict[str, list[Application]] = {}
    for app in apps:
        by_kernel.setdefault(app.kernel.name, []).append(app)
    # A cell is one chain of steps linked by their state edges; several chains may share a
    # kernel (both directions of a bidirectional RNN given one cell, a sampling unroll
    # beside the training one): each is a cell of its own.
    by_chain: dict[str, list[Application]] = {}
    for kernel, group in by_kernel.items():
        group.sort(key=lambda a: order.get(a.gate_op.name, 0))
        for number, chain in enumerate(
            chains(
                group, lambda a: a.states[-1], lambda a: a.previous[-1], lambda a: a.gate_op.name
            )
        ):
            by_chain[f"{kernel}#{number}"] = chain
    names = {k: cell_name(g[0].kernel, g[0].spec) for k, g in by_chain.items()}

    # The output of every step, so that a stacked layer finds the step it reads.
    owners: dict[str, tuple[str, int]] = {}
    for k, group in by_chain.items():
        for idx, app in enumerate(group):
            owners[app.states[-1].name] = (k, idx)
    gate_ops = {app.gate_op.name for app in apps}
    positions: dict[str, list[int]] = {}
    in_progress: set[str] = set()

    def position_of(kernel: str, idx: int) -> int | None:
        if kernel not in positions:
            if kernel in in_progress:
                return None
            in_progress.add(kernel)
            group = by_chain[kernel]
            found = [input_position(a.input, owners, position_of, gate_ops) for a in group]
            in_order = list(range(len(group)))
            known = [p for p in found if p is not None]
            # Trust the traced positions only when they are a permutation of the steps.
            traced = len(known) == len(found) and sorted(known) == in_order
            positions[kernel] = known if traced else in_order
            in_progress.discard(kernel)
        return positions[kernel][idx]

    reversals: dict[str, str | None] = {}

    def reversal_of(kernel: str) -> str | None:
        if kernel not in reversals:
            reversals[kernel] = None  # (a chain that reads itself: not reversed)
            first = by_chain[kernel][0].input
            reversals[kernel] = reversed_by(first, owners, reversal_of, gate_ops)
        return reversals[kernel]

    cells = []
    for k, group in by_chain.items():
        position_of(k, 0)
        cells.append(
            _build_cell(names[k], group, positions[k], _lengths(names[k], group), reversal_of(k))
        )
    return cells


def _copied_through(app: Application) -> tuple[str, float] | None:
    """The lengths and the step compared by a `Select(t >= lengths, state, new)` reading the
    step's new state (static_rnn's copy of the state past a sequence's length), or None."""
    new = app.states[-1]
    for op in new.consumers():
        if op.type not in ("Select", "SelectV2") or op.inputs[2].name != new.name:
            continue
        compare = op.inputs[0].op
        while compare.type == "Identity" and compare.inputs:
            compare = compare.inputs[0].op
        if compare.type == "LessEqual":  # lengths <= t
            lengths, step = compare.inputs
        elif compare.type == "GreaterEqual":  # t >= lengths
            step, lengths = compare.inputs
        else:
            continue
        t = const_scalar(step)
        if t is not None:
            return lengths.name, t
    return None


def _lengths(name: str, chain: list[Application]) -> str | None:
    """The lengths static_rnn(sequence_length=...) copies the state of the chain's step t
    through past (None: no step does); GraphPatternError where only some steps do, or by other
    lengths, or compare with another step than their own."""
    found = [_copied_through(app) for app in chain]
    if all(f is None for f in found):
        return None
    tensors = {f[0] for f in found if f is not None}
    steps = [None if f is None else f[1] for f in found]
    if len(tensors) != 1 or steps != list(range(len(chain))):
        raise GraphPatternError(
            f"cell {name}: its state is copied through past a sequence's length at some of its {len(chain)} steps "
            f"(by {', '.join(sorted(tensors))}, at steps {', '.join('-' if t is None else f'{t:g}' for t in steps)}); "
            "expected static_rnn's sequence_length, which compares every step t with the lengths"
        )
    return tensors.pop()


def _build_cell(
    name: str,
    apps: list[Application],
    positions: list[int],
    lengths: str | None,
    reverse_lengths: str | None,
) -> Cell:
    first = apps[0]
    for app in apps[1:]:
        if app.spec is not first.spec or app.activation_name != first.activation_name:
            raise GraphPatternError(
                f"cell {name}: its steps differ ({first.gate_op.name} is a {first.spec.kind} "
                f"with {first.activation_name}, {app.gate_op.name} a {app.spec.kind} with "
                f"{app.activation_name}); expected one cell class applied at every step"
            )
    steps = [step_of(app, pos) for pos, app in zip(positions, apps, strict=True)]
    steps.sort(key=lambda s: s.position)
    return cell_of(
        first,
        name,
        first.weights["kernel"],
        first.weights.get("projection"),
        weights={role: t.name for role, t in first.weights.items()},
        variables={role: weight_op(t).name for role, t in first.weights.items()},
        steps=tuple(steps),
        backward=reverse_lengths is not None
        or (len(steps) > 1 and positions == list(range(len(steps)))[::-1]),
        lengths=lengths,
        reverse_lengths=reverse_lengths,
    )
