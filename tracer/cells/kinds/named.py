"""Cells of your own, found by name (`tracer.find.named`): a spec made for each from the gates
and states a pattern names. gatetrace knows nothing of such a cell's math: its values are
the graph's own tensors, fetched step by step, never replayed or recomputed.
"""

from __future__ import annotations

from tracer.cells.kinds.spec import Array, CellMath, CellSpec, GateHold, GateWeights, Replaying

__all__ = ["NAMED", "named_spec"]

NAMED = "named"  # the kind of every cell found by name


class _Named(CellMath):
    replays = False

    def replay_step(
        self,
        r: Replaying,
        pre: Array,
        z: Array,
        a: Array,
        h: Array,
        c: Array,
        held: GateHold | None = None,
    ) -> tuple[Array, Array | None]:
        raise ValueError("a cell found by name is fetched from the graph, never replayed")


def named_spec(
    gates: tuple[str, ...],
    meanings: tuple[str, ...],
    states: tuple[str, ...],
    weights: tuple[GateWeights, ...] = (),
) -> CellSpec:
    """The spec of a cell found by name: its `gates` in the order it computes them, what each
    is (`meanings`: the op computing it), the `states` the pattern names, and where each
    gate's weights are, where the graph says it (`tracer.find.named`; none: not known)."""
    return CellSpec(
        kind=NAMED,
        gates=gates,
        gate_names=meanings,
        sigmoid_before_split=False,
        states=states,
        weights=weights,
        kernel_suffix="",
        math=_Named(),
    )
