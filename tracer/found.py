"""What the finders return: a found cell (`Cell`) and its unrolled steps (`Step`).

Every finder (`tracer.unrolled`, `tracer.loops`, `tracer.fused`) builds `Cell`s; a cell
inside a while loop carries a `tracer.loops.Loop`, a fused op's cell a
`tracer.fused.Fused`. This module imports neither, so that the finders stand side by side.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Mapping

import numpy as np

from tracer.cells import CellSpec, HasSpec

if TYPE_CHECKING:
    from tracer.fused import Fused
    from tracer.loops import Loop

__all__ = ["Step", "Cell"]

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
    shares_weights_with: tuple[str, ...] = ()  # the other cells reading the same kernel
    fused: Fused | None = None  # a fused op's cell (LSTMBlockCell, BlockLSTM, GRUBlockCell): see tracer.fused
    recurrent_activation: str | None = None  # a Keras cell's gate nonlinearity (its `activation` is the candidate's)

    def __repr__(self) -> str:
        where = f"in {self.loop.loop}" if self.loop else f"ops {self.fused.ops[0]}..." if self.fused else f"steps={len(self.steps)}"
        return f"Cell({self.name!r}, {self.kind}, units={self.units}, input_size={self.input_size}, {where})"

    @property
    def path(self) -> str:
        """How its gates are recorded: `fetch` (the graph's own gate ops, one per step),
        `replay` (recomputed in numpy from what enters and leaves its while loop) or `fused`
        (a fused op's own outputs, preactivations recomputed from its inputs)."""
        return "replay" if self.loop is not None else "fused" if self.fused is not None else "fetch"

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
            "steps": self.loop.length if self.loop else self.fused.length if self.fused else len(self.steps),
            "gates": list(self.gates),
            "states": list(self.spec.states),
            "forget_bias": self.forget_bias,
            "activation": self.activation,
            "recurrent_activation": self.recurrent_activation,
            "cell_clip": self.cell_clip,
            "proj_clip": self.proj_clip,
            "peepholes": all(k in self.weights for k in ("w_i_diag", "w_f_diag", "w_o_diag")),
            "direction": "backward" if self.backward else "forward",
            "variables": dict(self.variables),
            "shares_weights_with": list(self.shares_weights_with),
            "path": self.path,
            **(
                {"loop": asdict(self.loop), "why": _why_replay(self.loop)}
                if self.loop is not None
                else {"fused": asdict(self.fused), "why": _why_fused(self.fused)}
                if self.fused is not None
                else {"first_step": _describe_step(self, self.steps[0]), "last_step": _describe_step(self, self.steps[-1])}
            ),
        }


def _why_replay(loop: Loop) -> str:
    kind = "a While op's body function" if loop.control_flow == "v2" else "a TF1 while loop (Enter/Exit)"
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
    if cell.spec.is_lstm:
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

