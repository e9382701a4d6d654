"""What the finders return: a found cell and where its values are.

`Cell` is a cell of a graph: its unrolled `Step`s (one per application of the cell
outside a loop), or the `Loop` it runs in (a while loop: `dynamic_rnn`, Keras' `K.rnn`,
TF2 SavedModels), or the `Fused` op that computes it (`LSTMBlockCell`, `BlockLSTM`,
`GRUBlockCell`). `KerasCell` is an RNN layer of a Keras model object, `LiteCell` a
recurrent op of a TensorFlow Lite file. Every finder of
`tracer.find` returns these, and everything above reads them: they live below all of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tracer.cells.kinds import CellSpec, HasSpec

__all__ = [
    "Step",
    "Loop",
    "Fused",
    "Cell",
    "Conv",
    "KerasCell",
    "LiteCell",
    "LiteBody",
    "LiteHybrid",
    "LiteInteger",
    "AnyCell",
]

# Where a fused op returns each value: LSTMBlockCell and BlockLSTM give i, cs (c), f, o,
# ci (j), co (tanh c), h; GRUBlockCell gives r, u, c, h.
LSTM_BLOCK_OUTPUTS = {"i": 0, "c": 1, "f": 2, "o": 3, "j": 4, "h": 6}
GRU_BLOCK_OUTPUTS = {"r": 0, "u": 1, "c": 2, "h": 3}


@dataclass(frozen=True)
class Loop:
    """Where one cell inside a while loop meets the outside (tensor names of the outer graph).

    control_flow: "v1" or "v2".
    loop:         the loop (the `While` op, or the frame of a v1 loop).
    inputs:       the input sequence, time-major [steps, batch, features]; None when the
                  cell reads the outputs of the cell `below` (a stacked layer).
    initial:      the initial state, one tensor per state of the cell (`c`, `h` or `h`).
    final:        the state after the loop, likewise; None for a state whose Exit a graph
                  pruned for deployment dropped.
    lengths:      the sequence lengths the loop compares time with, or None.
    outputs:      the stacked outputs, time-major [steps, batch, width], or None (not the top layer).
    body:         the cell's step inside the loop (tensors of the body function, or of
                  the graph inside the frame), which `tracer.values.emit` makes the loop emit.
    emitted:      once it does: the outer tensors holding those values at every iteration
                  (`Step` fields, each stacked [iterations, batch, ...]); None while replayed.
    reversed:     the loop reads its input reversed (the backward half of
                  `bidirectional_dynamic_rnn`): loop step t of an example of length n is
                  input position n - 1 - t.
    reverse_lengths: the lengths its input was reversed by (`ReverseSequence`), or None
                  when the whole sequence was reversed (`ReverseV2`).
    direct:       False when a stacked cell reads the layer below through other ops (a residual
                  add, a dropout): its own input is then emitted with its gates, and is what
                  `--verify` replays it from.
    """

    control_flow: str
    loop: str
    inputs: str | None
    below: str | None
    initial: tuple[str, ...]
    final: tuple[str | None, ...]
    lengths: str | None
    outputs: str | None
    reversed: bool = False
    reverse_lengths: str | None = None
    length: int | None = None  # the number of steps, where the input's time axis is static
    masked: bool = False  # the loop keeps the state where a mask (not a length) says so
    carried: bool = True  # the loop carries the cell's new state as it is (no wrapper changes it)
    # a stacked cell reads the output of the cell `below` itself, not through other ops (a residual add)
    direct: bool = True
    # the cell's step: tensor names in the body function (v2) or the frame (v1)
    body: Step | None = None
    # the same tensors emitted by the rewritten loop, stacked [steps, batch, ...]
    emitted: Step | None = None

    @property
    def step(self) -> Step:
        """`body`, which every loop a finder returns has (only a `Loop` built by hand may lack it)."""
        if self.body is None:
            raise ValueError(f"loop {self.loop}: its cell's step inside the loop is not known")
        return self.body

    @property
    def emitted_step(self) -> Step:
        """`emitted`, for a loop rewritten to emit its step (a cell whose `path` is "loop")."""
        if self.emitted is None:
            raise ValueError(f"loop {self.loop} does not emit its step: its cell is replayed")
        return self.emitted


@dataclass(frozen=True)
class Fused:
    """Where a fused cell's values are: its op for each step in input-position order (one
    op for the whole sequence for BlockLSTM; the one op of a loop body, `stacked`), the
    tensors each op reads as x and as its previous states, and whether it uses peepholes."""

    op_type: str
    ops: tuple[str, ...]
    x: tuple[str, ...]
    h_prev: tuple[str, ...]
    c_prev: tuple[str, ...] = ()
    use_peephole: bool = False
    length: int | None = None  # the number of steps, where it is static
    # one op inside a while loop: each tensor named is stacked over the steps by the loop
    stacked: bool = False

    @property
    def per_step(self) -> bool:
        """One op per step, each fetched apart (not a sequence op, nor an op inside a loop)."""
        return self.op_type in ("LSTMBlockCell", "GRUBlockCell") and not self.stacked

    def outputs(self) -> dict[str, int]:
        return GRU_BLOCK_OUTPUTS if self.op_type == "GRUBlockCell" else LSTM_BLOCK_OUTPUTS

    def tensors(self) -> list[str]:
        """Every tensor to fetch: what each op reads, then its outputs."""
        return [
            *self.x,
            *self.h_prev,
            *self.c_prev,
            *(f"{op}:{k}" for op in self.ops for k in self.outputs().values()),
        ]


@dataclass(frozen=True)
class Step:
    """One application of a cell: the tensors of one timestep.

    position:      the input position this step read (for a backward RNN, the reverse
                   of the order in which the graph computed it).
    gate_op:       the op holding the gates: `.../split_k` for LSTM and GRU cells, the
                   `BiasAdd` for BasicRNNCell.
    preactivation: tensors whose concatenation along axis 1 is `[gate_0 | gate_1 | ...]`,
                   each gate `units` wide, in the spec's gate order.
    activation:    the same for the gate values the cell used.
    states:        one tensor per `spec.states` (`c`, `h`) after this step.
    input:         the input `x` the cell read.
    previous:      the states the cell read, one per `spec.states`.
    """

    position: int
    gate_op: str
    preactivation: tuple[str, ...]
    activation: tuple[str, ...]
    states: tuple[str, ...]
    input: str
    previous: tuple[str, ...]


@dataclass(frozen=True)
class Cell(HasSpec):
    """One RNN cell found in a graph, with all its steps ordered by input position.

    name is the scope holding the cell's weights: the kernel's variable name without
    `/kernel` (`/gates/kernel` for GRUCell). `weights` maps a role (`kernel`, `bias`,
    `candidate_kernel`, `candidate_bias`, `w_i_diag`, `w_f_diag`, `w_o_diag`,
    `projection`) to the tensor the cell reads it from; `variables` maps the same roles
    to the variable (or, in a frozen graph, Const) names.
    """

    name: str
    spec: CellSpec
    units: int
    input_size: int
    output_size: int
    activation: str
    forget_bias: float | None
    cell_clip: float | None
    proj_clip: float | None
    weights: Mapping[str, str]
    variables: Mapping[str, str]
    steps: tuple[Step, ...]
    backward: bool = False
    loop: Loop | None = None
    # unrolled: the sequence lengths each step's state is copied through past (static_rnn's
    # sequence_length, `Select(t >= lengths, state, new)`): nothing is recorded past a length
    lengths: str | None = None
    # unrolled: the lengths its input was reversed by (the backward half of
    # static_bidirectional_rnn given sequence_length): step k of an example of length n read
    # input position n - 1 - k, and its steps' positions are the reversed sequence's
    reverse_lengths: str | None = None
    shares_weights_with: tuple[str, ...] = ()  # the other cells reading the same kernel
    # a fused op's cell (LSTMBlockCell, BlockLSTM, GRUBlockCell): see tracer.find.fused
    fused: Fused | None = None
    # a Keras cell's gate nonlinearity (its `activation` is the candidate's)
    recurrent_activation: str | None = None
    # a cell of your own (tracer.find.named): why a gate's weights are not known, by gate
    unknown_weights: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        where = (
            f"in {self.loop.loop}"
            if self.loop
            else f"ops {self.fused.ops[0]}..."
            if self.fused
            else f"steps={len(self.steps)}"
        )
        return f"Cell({self.name!r}, {self.kind}, units={self.units}, input_size={self.input_size}, {where})"

    @property
    def path(self) -> str:
        """How its gates are recorded: `fetch` (the graph's own gate ops, one per step),
        `loop` (the gate ops inside a while loop, which the rewritten loop emits: see
        `tracer.values.emit`), `replay` (recomputed in numpy from what enters and leaves its
        while loop) or `fused` (a fused op's own outputs, preactivations recomputed from its inputs)."""
        if self.loop is not None:
            return "loop" if self.loop.emitted is not None else "replay"
        return "fused" if self.fused is not None else "fetch"

    @property
    def in_loop(self) -> Loop:
        """`loop`, for a cell inside a while loop (a `path` of "loop" or "replay")."""
        if self.loop is None:
            raise ValueError(
                f"cell {self.name} is not inside a while loop (its path is {self.path})"
            )
        return self.loop

    @property
    def in_fused(self) -> Fused:
        """`fused`, for a fused op's cell."""
        if self.fused is None:
            raise ValueError(f"cell {self.name} is not a fused op's (its path is {self.path})")
        return self.fused

    @property
    def positions(self) -> np.ndarray:
        """The input position of each step, in step order (int32)."""
        return np.array([s.position for s in self.steps], dtype=np.int32)

    @property
    def num_proj(self) -> int | None:
        return self.output_size if "projection" in self.weights else None

    def describe(self) -> dict:
        """A JSON-ready description, as `inspect --json` and the manifest show it."""
        return {
            "name": self.name,
            "kind": self.kind,
            "units": self.units,
            "input_size": self.input_size,
            "output_size": self.output_size,
            "num_proj": self.num_proj,
            "steps": self.loop.length
            if self.loop
            else self.fused.length
            if self.fused
            else len(self.steps),
            "gates": list(self.gates),
            "states": list(self.spec.states),
            "forget_bias": self.forget_bias,
            "activation": self.activation,
            "recurrent_activation": self.recurrent_activation,
            "nonlinearities": self.spec.nonlinearities(self.activation, self.recurrent_activation),
            "cell_clip": self.cell_clip,
            "proj_clip": self.proj_clip,
            "peepholes": all(k in self.weights for k in ("w_i_diag", "w_f_diag", "w_o_diag")),
            "direction": "backward" if self.backward else "forward",
            "variables": dict(self.variables),
            "shares_weights_with": list(self.shares_weights_with),
            **({"weights_not_known": dict(self.unknown_weights)} if self.unknown_weights else {}),
            "path": self.path,
            **(
                {"loop": asdict(self.loop), "why": _why_replay(self.loop)}
                if self.loop is not None
                else {"fused": asdict(self.fused), "why": _why_fused(self.fused)}
                if self.fused is not None
                else {
                    "first_step": _describe_step(self, self.steps[0]),
                    "last_step": _describe_step(self, self.steps[-1]),
                    **({"lengths": self.lengths} if self.lengths else {}),
                    **({"reverse_lengths": self.reverse_lengths} if self.reverse_lengths else {}),
                }
            ),
        }


def _why_replay(loop: Loop) -> str:
    kind = (
        "a While op's body function"
        if loop.control_flow == "v2"
        else "a TF1 while loop (Enter/Exit)"
    )
    if loop.emitted is not None:
        return (
            f"its gate ops run inside {kind} ({loop.loop}), rewritten to emit them at every step (one TensorList "
            "per tensor, as while_v2 keeps intermediates): they are fetched as TensorFlow computed them"
        )
    if loop.masked:
        kind += ", which keeps its state where a mask says so"
    return (
        f"its gate ops run inside {kind} ({loop.loop}) and cannot be fetched: its gates are recomputed in numpy "
        "from the loop's input, initial state and weights, and checked against the loop's outputs and final state"
    )


def _why_fused(fused: Fused) -> str:
    return (
        f"a fused {fused.op_type} op computes its gates ({fused.ops[0]}"
        f"{f' ... {fused.ops[-1]}' if len(fused.ops) > 1 else ''}): the activations are its own outputs, the "
        "preactivations are recomputed from its inputs and weights and checked against them"
    )


def _describe_step(cell: Cell, step: Step) -> dict:
    if cell.spec.is_lstm and cell.spec.weights:  # (a cell found by name has its own tensors)
        # The four outputs of the step's Split op are the four gates' preactivations.
        gate_tensors = [f"{step.gate_op}:{k}" for k in range(4)]
    else:
        gate_tensors = list(step.preactivation)
    return {
        "position": step.position,
        "gate_op": step.gate_op,
        "gate_tensors": gate_tensors,
        "activation_tensors": list(step.activation),
        "state_tensors": list(step.states),
    }


@dataclass(frozen=True)
class Conv:
    """How a Keras ConvLSTM cell convolves, and where its units sit.

    `kernel_size`, `strides`, `padding` and `dilation` are the input convolution's (the
    recurrent one is always stride 1, "same"); `positions` is the spatial shape of its output
    (and of the states), `filters` the channels at each position. A unit is one filter at
    one position: unit = position * filters + filter, the position counted in row-major
    order of `positions` (channels last, whatever the layer's `data_format`).
    """

    rank: int
    kernel_size: tuple[int, ...]
    strides: tuple[int, ...]
    padding: str
    dilation: tuple[int, ...]
    channels_first: bool
    positions: tuple[int, ...]
    filters: int

    def describe(self) -> dict:
        return {
            "kernel_size": list(self.kernel_size),
            "strides": list(self.strides),
            "padding": self.padding,
            "dilation_rate": list(self.dilation),
            "positions": list(self.positions),
            "filters": self.filters,
            "unit": "position * filters + filter (positions in row-major order)",
        }


@dataclass(frozen=True, eq=False)
class KerasCell(HasSpec):
    """One Keras RNN layer's cell, as gatetrace records it.

    name is the layer's path in the model (`bidirectional/backward_gru`). `arrays` holds
    its weights as numpy arrays by role (a graph cell's `weights` name tensors): `kernel` (the layer's kernel stacked on its recurrent kernel:
    input rows first), `bias`, and for a GRU with reset_after `recurrent_bias`.
    `backward` is the layer's `go_backwards`. A ConvLSTM layer's cell has a `conv`: its
    kernels are flattened to [taps * channels, 4 * filters] before they are stacked, and its
    `units` are every filter at every position (`Conv`).
    """

    name: str
    spec: CellSpec
    units: int
    input_size: int
    activation: str
    recurrent_activation: str
    arrays: Mapping[str, np.ndarray]
    variables: Mapping[str, str]
    backward: bool
    reset_after: bool | None
    layer: Any = field(repr=False)
    framework: str = "keras3"
    # the numpy activation: a name in ACTIVATIONS or a callable
    act: Any = field(default=None, repr=False)
    gate_act: Any = field(default=None, repr=False)
    forget_bias: None = None
    cell_clip: None = None
    proj_clip: None = None
    num_proj: None = None
    loop: None = None
    length: int | None = None  # the number of steps, where the layer's input shape fixes it
    # (k, n): the k-th of the n cells the layer's StackedRNNCells runs at each step, each
    # reading the one before's output ((0, 1): the layer's only cell)
    stack: tuple[int, int] = (0, 1)
    conv: Conv | None = None
    # a cell of your own: its step traced from its `call` (`tracer.find.keras_own.OwnStep`)
    step: Any = field(default=None, repr=False)

    path = "replay"

    def __repr__(self) -> str:
        return f"KerasCell({self.name!r}, {self.kind}, units={self.units}, input_size={self.input_size}, {self.framework})"

    @property
    def output_size(self) -> int:
        return self.units

    def describe(self) -> dict:
        """A JSON-ready description, as `inspect --json` and the manifest show it."""
        layer = self.layer
        return {
            **_replayed(self, self.framework),
            "reset_after": self.reset_after,
            "direction": "backward" if self.backward else "forward",
            "return_sequences": bool(layer.return_sequences),
            "return_state": bool(layer.return_state),
            "stateful": bool(layer.stateful),
            "variables": dict(self.variables),
            **({"stack": list(self.stack)} if self.stack[1] > 1 else {}),
            **({"conv": self.conv.describe()} if self.conv is not None else {}),
            "path": self.path,
            "why": (
                f"a {type(layer).__name__} layer over a cell of your own ({type(layer.cell).__name__}): its step is traced "
                "from the cell's call and run step by step in TensorFlow, its gates the nonlinearities it applies, "
                "checked against what the layer returns"
                if self.step is not None
                else f"a Keras {type(layer).__name__} layer runs its cell inside its own loop: its gates are recomputed "
                "in numpy from the layer's input, mask, initial state and weights, and checked against what the layer "
                "returns"
            ),
        }


@dataclass(frozen=True)
class LiteBody:
    """A TensorFlow Lite WHILE loop's cell, run an iteration at a time (`tracer.find.lite_loops`):
    its cond and body subgraphs, and tensors of the body: what an iteration read
    (`step_input`), each gate's nonlinearity's input and output (`gates`, in the spec's
    order), each state after the iteration (`states`), the number of the body's input that
    is `h`; and the main subgraph's tensor of each state after the loop (`finals`)."""

    cond: int
    body: int
    step_input: int
    gates: tuple[tuple[int, int], ...]
    states: Mapping[str, int]
    h_input: int
    finals: Mapping[str, int]


@dataclass(frozen=True)
class LiteHybrid:
    """The int8 weights a TensorFlow Lite hybrid kernel multiplies (a fused op quantised for
    dynamic range: `tracer.values.hybrid`), laid out as `LiteCell.arrays["kernel"]` is:
    `codes` [input_size + output_size, gates * units] int8, the input rows first;
    `input_scales` and `recurrent_scales` [gates * units] float32, each column's matrix's
    scale; `asymmetric`: the op quantises its input rows with a zero point (the op's
    `asymmetric_quantize_inputs`), else symmetrically."""

    codes: np.ndarray = field(repr=False)
    input_scales: np.ndarray = field(repr=False)
    recurrent_scales: np.ndarray = field(repr=False)
    asymmetric: bool

    def scales(self, gates: tuple[str, ...]) -> dict[str, float]:
        """Each matrix's scale, by its weights' role (`W_i`, `U_i`, ...; `W`, `U` for one gate)."""
        units = len(self.input_scales) // len(gates)
        return {
            (f"{m}_{g}" if len(gates) > 1 else m): float(scales[k * units])
            for m, scales in (("W", self.input_scales), ("U", self.recurrent_scales))
            for k, g in enumerate(gates)
        }


@dataclass(frozen=True)
class LiteInteger:
    """What TensorFlow Lite's integer LSTM kernel computes with (a fused op quantised for
    integer arithmetic: int8 activations, an int16 cell state; `tracer.values.integer`), as
    the file holds it: the gates' int8 matrices `input_codes` [gates, units, features] and
    `recurrent_codes` [gates, units, output] and int32 `biases` [gates, units], in the op's
    order (i, f, c, o); each matrix's scale; the input's and the output state's scale and
    zero point; the cell state's scale and its power of two (`cell_exponent`); the hidden
    value's scale and zero point (the op's fifth intermediate tensor); the op's cell clip."""

    input_codes: np.ndarray = field(repr=False)
    recurrent_codes: np.ndarray = field(repr=False)
    biases: np.ndarray = field(repr=False)
    input_weight_scales: tuple[float, ...]
    recurrent_weight_scales: tuple[float, ...]
    input_scale: float
    input_zero: int
    h_scale: float
    h_zero: int
    cell_scale: float
    cell_exponent: int
    hidden_scale: float
    hidden_zero: int
    cell_clip: float

    def scales(self, gates: tuple[str, ...]) -> dict[str, float]:
        """Each matrix's scale, by its weights' role (`W_i`, `U_i`, ...)."""
        return {
            f"{m}_{g}": float(scales[k])
            for m, scales in (("W", self.input_weight_scales), ("U", self.recurrent_weight_scales))
            for k, g in enumerate(gates)
        }

    def quantisation(self) -> dict[str, dict[str, Any]]:
        """How each recorded column and state holds its codes: value = scale x (code - zero_point)."""
        return {
            "preactivation": {"type": "int16", "scale": 2.0**-12, "zero_point": 0},
            "activation": {"type": "int16", "scale": 2.0**-15, "zero_point": 0},
            "c": {"type": "int16", "scale": self.cell_scale, "zero_point": 0},
            "h": {"type": "int8", "scale": self.h_scale, "zero_point": self.h_zero},
            "inputs": {"type": "int8", "scale": self.input_scale, "zero_point": self.input_zero},
        }


@dataclass(frozen=True)
class LiteCell(HasSpec):
    """One recurrent op of a TensorFlow Lite file (`tracer.find.lite`), as gatetrace records it.

    name is the op's output tensor's name in the file. `arrays` holds its weights as a Keras
    layer's are held (`kernel`: the input-to-gate matrices stacked on the recurrent ones,
    input rows first, one column block a gate in the spec's order; `bias`; `w_*_diag`
    peepholes, `projection`), transposed from the file's [units, inputs] matrices;
    `variables` names the file's tensor each role was read from. `op` is the op's number in
    the main subgraph, `inputs` and `outputs` the tensors it reads its sequence from and
    writes its outputs to, `initial` the state tensors it starts from (by state name). A
    WHILE loop's cell has a `body`: its gates are the loop's own tensors, an iteration at a
    time, and its `arrays` are empty where its weights could not be read. A half of a
    bidirectional op writes `output_columns` of its op's `outputs` (where the op merges its
    halves' outputs); the backward half runs from the sequence's end in the op itself, reading
    and writing by input position (`by_position`).
    """

    name: str
    spec: CellSpec
    units: int
    input_size: int
    output_size: int
    activation: str
    recurrent_activation: str
    arrays: Mapping[str, np.ndarray] = field(repr=False)
    variables: Mapping[str, str]
    op: int
    inputs: int
    outputs: int
    initial: Mapping[str, int]
    length: int | None
    time_major: bool = False
    output_columns: tuple[int, int] | None = None
    by_position: bool = False
    # how its weights are stored: "float32", "float16" (widened by DEQUANTIZE), or "int8 dynamic
    # range" (int8 codes with a scale per matrix or channel, the gates computed in float on
    # inputs the kernel quantises a row at a time: `hybrid` for a fused op); W, U, b are given
    # dequantised
    numbers: str = "float32"
    cell_clip: float | None = None
    proj_clip: float | None = None
    backward: bool = False
    body: LiteBody | None = None
    hybrid: LiteHybrid | None = None  # a fused op's int8 weights, where it runs the hybrid kernel
    integer: LiteInteger | None = None  # a fused op's codes, where it runs the integer kernel
    forget_bias: None = None
    num_proj: None = None
    loop: None = None
    reset_after: None = None

    @property
    def path(self) -> str:
        return "replay" if self.body is None else "interpreter"

    def describe(self) -> dict:
        """A JSON-ready description, as `inspect --json` and the manifest show it."""
        return {
            **_replayed(self, "tflite"),
            "cell_clip": self.cell_clip,
            "proj_clip": self.proj_clip,
            "direction": "backward" if self.backward else "forward",
            "op": self.op,
            "variables": dict(self.variables),
            "numbers": self.numbers,
            **({"scales": self.hybrid.scales(self.spec.gates)} if self.hybrid is not None else {}),
            **(
                {
                    "scales": self.integer.scales(self.spec.gates),
                    "quantisation": self.integer.quantisation(),
                }
                if self.integer is not None
                else {}
            ),
            "path": self.path,
            "why": (
                f"a TensorFlow Lite {self.kind} op runs its cell inside the op: its gates are recomputed in numpy "
                "from the input the interpreter gave the op and the weights the file holds, and checked against "
                "what the op returned"
                if self.body is None
                else "a TensorFlow Lite WHILE loop runs a Keras cell of builtin ops: its body runs an iteration at a "
                "time in the file's interpreter, each gate what its nonlinearity read and returned, checked against "
                "what the loop returned"
            ),
        }


def _replayed(cell: KerasCell | LiteCell, framework: str) -> dict:
    """What a Keras layer's and a TensorFlow Lite op's descriptions say alike."""
    return {
        "name": cell.name,
        "kind": cell.kind,
        "framework": framework,
        "units": cell.units,
        "input_size": cell.input_size,
        "output_size": cell.output_size,
        "steps": cell.length,
        "gates": list(cell.gates),
        "states": list(cell.spec.states),
        "activation": cell.activation,
        "recurrent_activation": cell.recurrent_activation,
        "nonlinearities": cell.spec.nonlinearities(cell.activation, cell.recurrent_activation),
    }


# a cell of any kind: a graph's, a Keras model object's layer, a TensorFlow Lite file's op
AnyCell = Cell | KerasCell | LiteCell
