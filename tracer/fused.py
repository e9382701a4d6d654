"""Fused RNN ops, whose outputs are the gates: LSTMBlockCell, BlockLSTM, BlockLSTMV2, GRUBlockCell.

TF1 models used these kernels for speed (the PTB language model's BLOCK mode, Magenta).
One op computes a whole step (or, for BlockLSTM, the whole sequence):

    op              one op per   inputs                                    outputs
    LSTMBlockCell   step         x, cs_prev, h_prev, w, wci, wcf, wco, b   i, cs, f, o, ci, co, h   [batch, units]
    BlockLSTM       sequence     seq_len_max, then as LSTMBlockCell        the same, [steps, batch, units]
    BlockLSTMV2     sequence     as BlockLSTM                              as BlockLSTM
    GRUBlockCell    step         x, h_prev, w_ru, w_c, b_ru, b_c           r, u, c, h

`w` is `[input_size + units, 4 * units]` on `[x, h_prev]`. Its column blocks are
i, ci, f, o for LSTMBlockCell and BlockLSTM, whose `forget_bias` attribute is added to f,
and i, f, ci, o for BlockLSTMV2, which has no forget bias. Peepholes (`use_peephole`)
add `cs_prev * wci` to i, `cs_prev * wcf` to f and `cs * wco` to o; `cell_clip` (when > 0)
clips cs. For GRUBlockCell, `r, u = sigmoid([x, h_prev] @ w_ru + b_ru)` and
`c = tanh([x, r * h_prev] @ w_c + b_c)`.

The activations recorded are the op's own outputs (labels i, j, f, o with `ci` as j and
`cs` as the state c; GRU r, u, c). The preactivations are computed here in numpy from
the op's own fetched inputs and weights, then checked: the sigmoid of the recomputed
input-gate preactivation must give the op's i (r for a GRU) within 1e-4, so that a weight
layout read wrongly cannot go unnoticed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from recorders.errors import GraphPatternError, ReplayMismatchError
from tracer._tf import tf
from tracer.cells import BASIC_LSTM, GRU, KERAS_LSTM, CellSpec
from tracer.edges import cell_name, chains, in_v1_frame, input_position, variables_of, weight_source
from tracer.found import Cell
from tracer.replay import TOLERANCE, Replayed

__all__ = ["Fused", "FUSED_OPS", "fused_cells", "fused_values"]

# Column blocks of `w`, in gatetrace's labels: ci is j (new input).
LSTM_BLOCK = CellSpec(**{**BASIC_LSTM.__dict__, "kind": "LSTMBlockCell"})
BLOCK_LSTM = CellSpec(**{**BASIC_LSTM.__dict__, "kind": "BlockLSTM"})
BLOCK_LSTM_V2 = CellSpec(**{**KERAS_LSTM.__dict__, "kind": "BlockLSTMV2"})  # blocks i, f, ci, o
GRU_BLOCK = CellSpec(**{**GRU.__dict__, "kind": "GRUBlockCell", "sigmoid_before_split": False})
FUSED_OPS: dict[str, CellSpec] = {s.kind: s for s in (LSTM_BLOCK, BLOCK_LSTM, BLOCK_LSTM_V2, GRU_BLOCK)}

# Input and output indices of each op: where x, the previous states and the weights enter.
_LSTM_IN = {"x": 0, "c_prev": 1, "h_prev": 2, "kernel": 3, "w_i_diag": 4, "w_f_diag": 5, "w_o_diag": 6, "bias": 7}
_BLOCK_IN = {role: k + 1 for role, k in _LSTM_IN.items()}  # after seq_len_max
_GRU_IN = {"x": 0, "h_prev": 1, "kernel": 2, "candidate_kernel": 3, "bias": 4, "candidate_bias": 5}
_LSTM_OUT = {"i": 0, "c": 1, "f": 2, "o": 3, "j": 4, "h": 6}
_GRU_OUT = {"r": 0, "u": 1, "c": 2, "h": 3}


@dataclass(frozen=True)
class Fused:
    """Where a fused cell's values are: its op for each step in input-position order (one
    op for the whole sequence for BlockLSTM), the tensors each op reads as x and as its
    previous states, and whether it uses peepholes."""

    op_type: str
    ops: tuple[str, ...]
    x: tuple[str, ...]
    h_prev: tuple[str, ...]
    c_prev: tuple[str, ...] = ()
    use_peephole: bool = False
    length: int | None = None  # the number of steps, where it is static

    @property
    def per_step(self) -> bool:
        return self.op_type in ("LSTMBlockCell", "GRUBlockCell")

    def outputs(self) -> dict[str, int]:
        return _GRU_OUT if self.op_type == "GRUBlockCell" else _LSTM_OUT

    def tensors(self) -> list[str]:
        """Every tensor to fetch: what each op reads, then its outputs."""
        return [*self.x, *self.h_prev, *self.c_prev, *(f"{op}:{k}" for op in self.ops for k in self.outputs().values())]


def fused_cells(graph: tf.Graph) -> list:
    """A `tracer.found.Cell` for each chain of fused ops in `graph` (top level only)."""
    ops = [op for op in graph.get_operations() if op.type in FUSED_OPS]
    cells = []
    groups: dict[tuple[str, str], list[tf.Operation]] = {}
    for op in ops:
        if in_v1_frame(op.inputs[0]):
            raise GraphPatternError(
                f"{op.name} ({op.type}) runs inside a while loop, where its outputs cannot be fetched: gatetrace records "
                "fused ops only outside loops (unrolled with static_rnn, or LSTMBlockFusedCell over the whole sequence)"
            )
        roles = (_GRU_IN if op.type == "GRUBlockCell" else _LSTM_IN if op.type == "LSTMBlockCell" else _BLOCK_IN)
        kernel = weight_source(op.inputs[roles["kernel"]])
        if kernel is None:
            raise GraphPatternError(f"{op.name} ({op.type}): its weights w do not come from a variable or constant")
        groups.setdefault((op.type, kernel.name), []).append(op)
    for (kind, kernel_name), group in groups.items():
        spec = FUSED_OPS[kind]
        roles = _GRU_IN if kind == "GRUBlockCell" else _LSTM_IN if kind == "LSTMBlockCell" else _BLOCK_IN
        peephole = kind != "GRUBlockCell" and bool(group[0].get_attr("use_peephole"))
        weight_roles = [r for r in roles if r not in ("x", "c_prev", "h_prev") and (peephole or not r.startswith("w_"))]
        h_out = (_GRU_OUT if kind == "GRUBlockCell" else _LSTM_OUT)["h"]
        found = [[op] for op in group] if kind in ("BlockLSTM", "BlockLSTMV2") else chains(
            group, lambda op: op.outputs[h_out], lambda op: op.inputs[roles["h_prev"]], lambda op: op.name)
        for chain in found:
            first = chain[0]
            if kind in ("LSTMBlockCell", "GRUBlockCell"):
                positions = [input_position(op.inputs[roles["x"]], {}, lambda *a: None, set()) for op in chain]
                if None in positions or sorted(positions) != list(range(len(chain))):
                    positions = list(range(len(chain)))
                chain = [op for _, op in sorted(zip(positions, chain), key=lambda pair: pair[0])]
            weights = {role: first.inputs[roles[role]].name for role in weight_roles}
            variables = variables_of(graph, weights, f"{first.name} ({kind})")
            rows, columns = graph.get_tensor_by_name(weights["kernel"]).shape.as_list()
            units = columns // (2 if kind == "GRUBlockCell" else 4)
            clip = None if kind == "GRUBlockCell" else float(first.get_attr("cell_clip"))
            cells.append(
                Cell(
                    name=cell_name(graph.get_operation_by_name(kernel_name), spec),
                    spec=spec,
                    units=units,
                    input_size=rows - units,
                    output_size=units,
                    activation="tanh",
                    forget_bias=float(first.get_attr("forget_bias")) if kind in ("LSTMBlockCell", "BlockLSTM") else None,
                    cell_clip=clip if clip is not None and clip > 0 else None,
                    proj_clip=None,
                    weights=weights,
                    variables=variables,
                    steps=(),
                    fused=Fused(
                        kind,
                        tuple(op.name for op in chain),
                        x=tuple(op.inputs[roles["x"]].name for op in chain),
                        h_prev=tuple(op.inputs[roles["h_prev"]].name for op in chain),
                        c_prev=tuple(op.inputs[roles["c_prev"]].name for op in chain) if peephole else (),
                        use_peephole=peephole,
                        length=len(chain) if kind in ("LSTMBlockCell", "GRUBlockCell") else first.inputs[roles["x"]].shape[0],
                    ),
                )
            )
    return cells


def fused_values(cell, fetched: Mapping[str, np.ndarray], weights: Mapping[str, np.ndarray]) -> Replayed:
    """The preactivations (computed), activations and states (the op's own) of a fused cell
    for one batch, [examples, steps, ...], from the fetched tensors by name."""
    fused: Fused = cell.fused
    outs, units = fused.outputs(), cell.units

    def series(names: tuple[str, ...]) -> np.ndarray:
        """[batch, steps, width]: one tensor per step, or a sequence op's [steps, batch, width]."""
        if fused.per_step:
            return np.stack([np.asarray(fetched[n]) for n in names], axis=1)
        return np.swapaxes(np.asarray(fetched[names[0]]), 0, 1)

    def out(label: str) -> np.ndarray:
        return series(tuple(f"{op}:{outs[label]}" for op in fused.ops))

    x = series(fused.x)
    if fused.per_step:
        h_prev = series(fused.h_prev)
    else:  # the state before step t is the op's h of step t - 1
        h_prev = np.concatenate([np.asarray(fetched[fused.h_prev[0]])[:, None], out("h")[:, :-1]], axis=1)
    xh = np.concatenate([x, h_prev], axis=2).astype(np.float32)
    if fused.op_type == "GRUBlockCell":
        r, u, c = (out(g) for g in "ruc")
        ru = xh @ weights["kernel"] + weights["bias"]
        candidate = np.concatenate([x, r * h_prev], axis=2) @ weights["candidate_kernel"] + weights["candidate_bias"]
        pre = np.stack([ru[..., :units], ru[..., units:], candidate], axis=2)
        act = np.stack([r, u, c], axis=2)
        states = {"h": out("h")}
        _check(cell, pre[:, :, 0], r)
        return Replayed(pre, act, states, states["h"], {})
    z = xh @ weights["kernel"] + weights["bias"]
    blocks = np.stack(np.split(z, 4, axis=2), axis=2)  # [batch, steps, 4, units], in the spec's gate order
    act = np.stack([out(g) for g in cell.gates], axis=2)
    states = {"c": out("c"), "h": out("h")}
    i_pre = blocks[:, :, cell.gates.index("i")]
    if fused.use_peephole:
        c_prev = series(fused.c_prev) if fused.per_step else np.concatenate(
            [np.asarray(fetched[fused.c_prev[0]])[:, None], states["c"][:, :-1]], axis=1)
        i_pre = i_pre + c_prev * weights["w_i_diag"]
    _check(cell, i_pre, act[:, :, cell.gates.index("i")])
    return Replayed(blocks, act, states, states["h"], {})


def _check(cell, pre: np.ndarray, act: np.ndarray) -> None:
    """The op's own gate values must be the sigmoid of the recomputed preactivations."""
    worst = float(np.nanmax(np.abs(1.0 / (1.0 + np.exp(-pre.astype(np.float64))) - act), initial=0.0))
    if worst > TOLERANCE:
        raise ReplayMismatchError(
            f"cell {cell.name}: the {cell.fused.op_type} op's own gates differ from those recomputed from its inputs and "
            f"weights by up to {worst:.3g} (tolerance {TOLERANCE:g}): its weight layout is not the one gatetrace knows"
        )
