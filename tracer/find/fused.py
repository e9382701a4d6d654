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

`fused_cells` finds these ops and gives each chain a `tracer.cells.found.Cell` with its
`Fused`; their values are read by `tracer.values.fused`.
"""

from __future__ import annotations

from recorders.errors import GraphPatternError
from tracer._tf import tf
from tracer.cells.found import GRU_BLOCK_OUTPUTS, LSTM_BLOCK_OUTPUTS, Cell, Fused
from tracer.cells.kinds import BASIC_LSTM, GRU, KERAS_LSTM, CellSpec
from tracer.find.application import Application
from tracer.find.edges import (
    cell_name,
    chains,
    in_v1_frame,
    input_position,
    variables_of,
    weight_source,
)

__all__ = ["FUSED_OPS", "fused_cells", "fused_steps"]

# Column blocks of `w`, in gatetrace's labels: ci is j (new input).
LSTM_BLOCK = CellSpec(**{**BASIC_LSTM.__dict__, "kind": "LSTMBlockCell"})
BLOCK_LSTM = CellSpec(**{**BASIC_LSTM.__dict__, "kind": "BlockLSTM"})
BLOCK_LSTM_V2 = CellSpec(**{**KERAS_LSTM.__dict__, "kind": "BlockLSTMV2"})  # blocks i, f, ci, o
GRU_BLOCK = CellSpec(**{**GRU.__dict__, "kind": "GRUBlockCell", "sigmoid_before_split": False})
FUSED_OPS: dict[str, CellSpec] = {
    s.kind: s for s in (LSTM_BLOCK, BLOCK_LSTM, BLOCK_LSTM_V2, GRU_BLOCK)
}

# Input and output indices of each op: where x, the previous states and the weights enter.
_LSTM_IN = {
    "x": 0,
    "c_prev": 1,
    "h_prev": 2,
    "kernel": 3,
    "w_i_diag": 4,
    "w_f_diag": 5,
    "w_o_diag": 6,
    "bias": 7,
}
_BLOCK_IN = {role: k + 1 for role, k in _LSTM_IN.items()}  # after seq_len_max
_GRU_IN = {"x": 0, "h_prev": 1, "kernel": 2, "candidate_kernel": 3, "bias": 4, "candidate_bias": 5}


def fused_cells(graph: tf.Graph) -> list:
    """A `tracer.cells.found.Cell` for each chain of fused ops in `graph` (top level only)."""
    ops = [op for op in graph.get_operations() if op.type in FUSED_OPS]
    cells = []
    groups: dict[tuple[str, str], list[tf.Operation]] = {}
    for op in ops:
        # a step of a TF1 while loop: see fused_steps and tracer.find.loops
        if in_v1_frame(op.inputs[0]):
            continue
        roles = (
            _GRU_IN
            if op.type == "GRUBlockCell"
            else _LSTM_IN
            if op.type == "LSTMBlockCell"
            else _BLOCK_IN
        )
        kernel = weight_source(op.inputs[roles["kernel"]])
        if kernel is None:
            raise GraphPatternError(
                f"{op.name} ({op.type}): its weights w do not come from a variable or constant"
            )
        groups.setdefault((op.type, kernel.name), []).append(op)
    for (kind, kernel_name), group in groups.items():
        spec = FUSED_OPS[kind]
        roles = (
            _GRU_IN
            if kind == "GRUBlockCell"
            else _LSTM_IN
            if kind == "LSTMBlockCell"
            else _BLOCK_IN
        )
        peephole = kind != "GRUBlockCell" and bool(group[0].get_attr("use_peephole"))
        weight_roles = [
            r
            for r in roles
            if r not in ("x", "c_prev", "h_prev") and (peephole or not r.startswith("w_"))
        ]
        h_out = (GRU_BLOCK_OUTPUTS if kind == "GRUBlockCell" else LSTM_BLOCK_OUTPUTS)["h"]
        found = (
            [[op] for op in group]
            if kind in ("BlockLSTM", "BlockLSTMV2")
            else chains(
                group,
                lambda op, h_out=h_out: op.outputs[h_out],
                lambda op, h_prev=roles["h_prev"]: op.inputs[h_prev],
                lambda op: op.name,
            )
        )
        for chain in found:
            first = chain[0]
            if kind in ("LSTMBlockCell", "GRUBlockCell"):
                traced = [
                    input_position(op.inputs[roles["x"]], {}, lambda *a: None, set())
                    for op in chain
                ]
                positions = [p for p in traced if p is not None]
                if len(positions) != len(chain) or sorted(positions) != list(range(len(chain))):
                    positions = list(range(len(chain)))
                chain = [
                    op
                    for _, op in sorted(
                        zip(positions, chain, strict=True), key=lambda pair: pair[0]
                    )
                ]
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
                    forget_bias=float(first.get_attr("forget_bias"))
                    if kind in ("LSTMBlockCell", "BlockLSTM")
                    else None,
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
                        c_prev=tuple(op.inputs[roles["c_prev"]].name for op in chain)
                        if peephole
                        else (),
                        use_peephole=peephole,
                        length=len(chain)
                        if kind in ("LSTMBlockCell", "GRUBlockCell")
                        else first.inputs[roles["x"]].shape[0],
                    ),
                )
            )
    return cells


def fused_steps(graph: tf.Graph, inside_v1_frames: bool = False) -> list[Application]:
    """The per-step fused ops of `graph` (`LSTMBlockCell`, `GRUBlockCell`) as steps of a cell
    inside a while loop (`tracer.find.loops`): a loop body's, or with `inside_v1_frames` those
    of a graph's TF1 while loops. Their gates are the op's outputs, in the spec's order."""
    apps = []
    states: tuple[str, ...]
    previous: tuple[str, ...]
    for op in graph.get_operations():
        if op.type not in ("LSTMBlockCell", "GRUBlockCell") or (
            inside_v1_frames and not in_v1_frame(op.inputs[0])
        ):
            continue
        spec = FUSED_OPS[op.type]
        if op.type == "GRUBlockCell":
            roles = {
                r: op.inputs[_GRU_IN[r]]
                for r in ("kernel", "candidate_kernel", "bias", "candidate_bias")
            }
            outputs, states, previous = GRU_BLOCK_OUTPUTS, ("h",), ("h_prev",)
        else:
            peephole = bool(op.get_attr("use_peephole"))
            roles = {
                r: op.inputs[_LSTM_IN[r]]
                for r in (
                    "kernel",
                    "bias",
                    *(("w_i_diag", "w_f_diag", "w_o_diag") if peephole else ()),
                )
            }
            outputs, states, previous = LSTM_BLOCK_OUTPUTS, ("c", "h"), ("c_prev", "h_prev")
        inputs = _GRU_IN if op.type == "GRUBlockCell" else _LSTM_IN
        clip = None if op.type == "GRUBlockCell" else float(op.get_attr("cell_clip"))
        apps.append(
            Application(
                spec=spec,
                kernel=weight_source(roles["kernel"]),
                gate_op=op,
                # no op holds them: computed from the op's inputs (tracer.values.fused)
                preactivation=(),
                activation=tuple(op.outputs[outputs[g]] for g in spec.gates),
                states=tuple(op.outputs[outputs[s]] for s in states),
                input=op.inputs[inputs["x"]],
                previous=tuple(op.inputs[inputs[p]] for p in previous),
                weights=roles,
                activation_name="tanh",
                forget_bias=float(op.get_attr("forget_bias"))
                if op.type == "LSTMBlockCell"
                else None,
                cell_clip=clip if clip is not None and clip > 0 else None,
            )
        )
    return apps
