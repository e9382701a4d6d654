"""A recording's options, in one frozen value, and the rules between them.

`RecordOptions` is what `tracer.record` takes (as keywords, or built whole: the command
line, the parallel tasks and a checkpoint series build one), checked once when it is made:
an option that contradicts another is refused there, in one line that says what to do.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from recorders import Shard
from recorders.errors import SelectionError
from recorders.write.rounding import MAX_BITS, MIN_BITS
from recorders.write.totals import Bins
from tracer.cells.holds import Hold
from tracer.run.budget import DEFAULT_BATCH_SIZE
from tracer.run.select import Selection

__all__ = ["RecordOptions", "check_round_bits"]


@dataclass(frozen=True, eq=False)
class RecordOptions:
    """Every option of `tracer.record`.

    overwrite    replace a finished recording at the output (only once the new one is complete)
    resume       continue a recording that was killed or interrupted
    shard        record one of N disjoint parts of the sequences
    batch_size   sequences per `Session.run` (lowered to fit `memory`; a placeholder may fix it)
    selection    the cells, gates, steps, examples and value columns to record
    progress     a progress bar on stderr
    lengths      one length per sequence: no rows at or past it
    compression  one of `recorders.write.layout.COMPRESSIONS` (None: the default, "fast")
    timeout      seconds each batch's run may take (`RunTimeout`)
    carry_state  a Keras model's stateful layers carry their state from batch to batch (rows
                 fed in order as one stream) instead of being reset before each batch
    memory       the peak RSS in bytes the process may reach (None: see `tracer.run.budget`)
    verify       cells taken from their loops are also replayed in numpy and must agree
    reads        the files the feeds come from: `overwrite` never replaces a recording they
                 (or the model's own files) lie inside
    summary      record statistics per unit and step (`recorders.Bins`) instead of every value
    gate_ops     a cell of your own: the pattern naming its gates' ops, step by step, which
                 `tracer.find.named.find_named` reads (the cells found are then those it names)
    state_ops    ...and the pattern naming its states' tensors
    gate_names   a Keras layer over a cell of your own: its gates' names, by layer path
                 (`{"rnn": ["i", "f", "o", "c"]}`; default: sigmoid_0, ...: `tracer.find.keras_own`)
    joins        a series' recording of another checkpoint (what it is, in words, and its
                 manifest): refused before anything is written unless recorded from the same
                 inputs and options (`recorders.write.opening.series_difference`)
    holds        values held inside the model while it runs (`tracer.cells.holds.Hold`, `--hold`):
                 later steps and layers compute from them, and the recording says so
    outputs      tensors of the model's own (its predictions) recorded beside the gates, in
                 `outputs/` (a graph's: op names, or OP:K)
    round_bits   every value stored rounded to this many of float32's 23 mantissa bits (1 to
                 22; None: exact), for fewer bytes a value (`recorders.write.rounding`; the
                 default compression is then zstd)
    means_from   the recording (`--means-from RUN`) the `holds` took their means from: its weights
                 of the held cells must be the model's (`tracer.run.means_base`), and the
                 manifest says where the means came from (`means_from`)
    """

    overwrite: bool = False
    resume: bool = False
    shard: Shard = Shard()
    batch_size: int = DEFAULT_BATCH_SIZE
    selection: Selection = field(default_factory=Selection)
    progress: bool = False
    lengths: np.ndarray | None = None
    compression: str | None = None
    timeout: float | None = None
    carry_state: bool = False
    memory: int | None = None
    verify: bool = False
    reads: tuple[str | os.PathLike[str] | None, ...] = ()
    summary: Bins | None = None
    gate_ops: str | None = None
    state_ops: str | None = None
    gate_names: Mapping[str, Sequence[str]] | None = None
    joins: tuple[str, Mapping[str, Any]] | None = None
    holds: tuple[Hold, ...] = ()
    outputs: tuple[str, ...] = ()
    round_bits: int | None = None
    means_from: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "reads", tuple(self.reads))
        object.__setattr__(self, "holds", tuple(self.holds))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        if any(not name for name in self.outputs):
            raise SelectionError(
                "--outputs names an empty tensor name; name each op or OP:K, comma-separated"
            )
        if self.round_bits is not None:
            check_round_bits(self.round_bits, self.summary is not None)
        if self.outputs and self.summary is not None:
            raise SelectionError(
                "--outputs with --summary: a summary holds statistics of gates and states, not the model's "
                "outputs; leave --outputs out, or record in full"
            )
        if self.carry_state and self.shard.count > 1:
            raise SelectionError(
                f"--carry-state with --shard {self.shard}: each shard would start its stream from zero state, not "
                "from the state the rows before it leave; record the stream in one process"
            )
        if self.state_ops is not None and self.gate_ops is None:
            raise SelectionError(
                "--state-ops names the states of a cell --gate-ops names: give its gates' pattern too"
            )
        if self.gate_ops is not None and self.selection.parts:
            raise SelectionError(
                "--gate-ops with --values contributions: the parts of a preactivation are known for TensorFlow's and "
                "Keras' cells only; leave contributions out"
            )
        if self.holds and self.verify:
            raise SelectionError(
                "--verify with --hold: the replay recomputes a loop's cells from their weights, without the "
                "values held, and would differ where they are held; leave --verify out"
            )
        if self.summary is not None and self.selection.parts:
            raise SelectionError(
                "--summary with --values contributions: a summary holds statistics of preactivations, activations "
                "and states; leave contributions out, or record in full"
            )

    @classmethod
    def of(cls, options: RecordOptions | None = None, **changes: Any) -> RecordOptions:
        """`options` (default: every default) with `changes`, by field name; `values` (some of
        preactivation, activation and contributions) sets the selection's value columns."""
        options = options or cls()
        if changes.get("values") is not None:
            selection = changes.get("selection") or options.selection
            changes["selection"] = replace(selection, values=tuple(changes["values"]))
        changes.pop("values", None)
        if changes.get("selection", options.selection) is None:
            changes["selection"] = Selection()
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(
                f"unknown recording option {', '.join(unknown)}: expected values or one of {', '.join(sorted(known))}"
            )
        return replace(options, **changes)


def check_round_bits(bits: Any, summary: bool = False) -> None:
    """SelectionError unless `bits` is a count of mantissa bits `--round-bits` takes, and the
    recording stores values (not a `--summary`)."""
    if not (isinstance(bits, int) and not isinstance(bits, bool) and MIN_BITS <= bits <= MAX_BITS):
        raise SelectionError(
            f"--round-bits {bits}: expected a whole number of float32 mantissa bits from {MIN_BITS} to "
            f"{MAX_BITS} (float32 keeps 23; leave --round-bits out to store values exactly)"
        )
    if summary:
        raise SelectionError(
            "--round-bits with --summary: a summary stores statistics, not the values rounding makes "
            "smaller; leave --round-bits out, or record in full"
        )
