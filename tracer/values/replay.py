"""Replay: recompute a cell's gates in numpy from what enters and leaves its while loop.

A cell inside `dynamic_rnn` runs in a loop body whose ops cannot be fetched from outside.
What enters the loop (the input sequence, the initial state, the sequence lengths) and
what leaves it (the outputs, the final state) can. `replay` runs the cell over the
sequence in float32 numpy, vectorized over the batch, with the input projection of all
steps in one matrix product, exactly as the `tf.compat.v1.nn.rnn_cell` classes and Keras'
`LSTM`, `GRU` and `SimpleRNN` layers compute: each kind's step is its `CellMath`'s
(`tracer.cells.kinds`: `project` the input part of every step, `replay_step` one step from
its recurrent part). `tracer.load.keras` stacks a Keras layer's kernel on its recurrent
kernel, so that `kernel` is [x, h_prev] @ kernel for every kind.

Past an example's length (or where a Keras mask is False), the state is carried through
and the output is zero (`dynamic_rnn`) or the previous output (Keras). `check` compares
the replay's outputs and final state with the model's own and raises
`ReplayMismatchError` beyond 1e-4.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import pairwise
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from recorders.errors import GraphPatternError, ReplayMismatchError
from tracer.cells import activations
from tracer.cells.kinds import GateHold, Options, Replaying, spec_for

__all__ = [
    "Replayed",
    "Products",
    "Holding",
    "replay",
    "check",
    "compare",
    "activation_of",
    "TOLERANCE",
]

TOLERANCE = 1e-4


@dataclass
class Replayed:
    """One cell replayed over one batch.

    preactivation, activation  [examples, steps, gates, units]
    states[name]               [examples, steps, width] after each step
    outputs                    [examples, steps, width], zero past each length
    final[name]                [examples, width], the state after each example's last step
    inputs                     [examples, steps, features], what the cell read (None: not kept)
    initial[name]              [examples, width], the state before the first step
    read[name]                 [examples, steps, width], the state the cell read at each
                               step, where it is not `initial` then each step's state
    """

    preactivation: np.ndarray
    activation: np.ndarray
    states: dict[str, np.ndarray]
    outputs: np.ndarray
    final: dict[str, np.ndarray]
    inputs: np.ndarray | None = None
    initial: dict[str, np.ndarray] = field(default_factory=dict)
    read: dict[str, np.ndarray] = field(default_factory=dict)

    def kept_inputs(self) -> np.ndarray:
        """`inputs`, of a replay that kept them (what a plan made with `parts` reads)."""
        if self.inputs is None:
            raise ValueError("this replay did not keep what the cell read")
        return self.inputs

    def gate(self, column: str, gate: int) -> np.ndarray:
        """Gate number `gate`'s `preactivation` or `activation`, [examples, steps, units] (a view)."""
        return getattr(self, column)[:, :, gate]

    def previous(self, state: str) -> np.ndarray:
        """[examples, steps, width]: the state `state` the cell read at each step (a state is
        carried through a step skipped past a length or where a mask is False)."""
        if state in self.read:
            return self.read[state]
        return np.concatenate([self.initial[state][:, None], self.states[state][:, :-1]], axis=1)


def replay(
    kind: str,
    weights: Mapping[str, np.ndarray],
    inputs: np.ndarray,
    initial: Mapping[str, np.ndarray] | None = None,
    lengths: np.ndarray | None = None,
    *,
    mask: np.ndarray | None = None,
    carry_outputs: bool = False,
    forget_bias: float | None = None,
    activation: str = "tanh",
    recurrent_activation: str = "sigmoid",
    cell_clip: float | None = None,
    proj_clip: float | None = None,
    products: Products | None = None,
    hold: Holding | None = None,
) -> Replayed:
    """Run cell `kind` over `inputs` [examples, steps, features] (see the module docstring).

    A step is skipped where `mask` [examples, steps] is False (or at and past `lengths`):
    the state is carried through and the output is zero, or with `carry_outputs` the
    previous output (Keras' default). `activation` and `recurrent_activation` (the gates'
    nonlinearity) name entries of `ACTIVATIONS`, or are callables. `products` computes the
    steps' matrix products instead of float32 `kernel` (a TensorFlow Lite hybrid kernel's:
    `tracer.values.hybrid`). `hold` changes each step's gates inside the step and its new
    states before the next step reads them (`tracer.values.keras`: a Keras layer's values
    held, `--hold`).
    """
    f32 = np.float32
    w = {k: np.asarray(v, dtype=f32) for k, v in weights.items()}
    x = np.asarray(inputs, dtype=f32)
    n, steps, d = x.shape
    spec = spec_for(kind)
    math, lstm, blocks, gates = spec.math, spec.is_lstm, spec.weights[0].blocks, len(spec.gates)
    kernel = w["kernel"]
    units = kernel.shape[1] // blocks
    width = w["projection"].shape[1] if "projection" in w else units
    if kernel.shape[0] != d + width:
        raise GraphPatternError(
            f"{kind}: kernel of shape {list(kernel.shape)} does not fit inputs of {d} features and a state of {width}"
        )
    options = Options(
        activation_of(activation),
        activation_of(recurrent_activation),
        forget_bias or 0.0,
        cell_clip,
        proj_clip,
    )
    plain = activation == "tanh" and recurrent_activation == "sigmoid"
    # each gate's columns of the preactivations, in the spec's order
    columns = {g: slice(k * units, (k + 1) * units) for k, g in enumerate(spec.gates)}
    how = Replaying(w, d, units, options, columns, plain)
    init = dict(initial or {})
    h0 = np.asarray(init.get("h", np.zeros((n, width))), dtype=f32)
    c0 = np.asarray(init.get("c", np.zeros((n, units))), dtype=f32)
    alive = _alive(mask, lengths, n, steps)  # [n, steps] or None

    # Time-major buffers, so that each step writes contiguous rows; returned as [examples, steps, ...]
    # views. Step t reads its previous state from step t - 1's rows of `states`.
    pre = np.empty((steps, n, gates * units), f32)
    post = np.empty_like(pre)
    states = {"h": np.empty((steps, n, width), f32)}
    if lstm:
        states["c"] = np.empty((steps, n, units), f32)
    # Without a mask the outputs are the h states; with one they differ where steps are skipped.
    outputs = states["h"] if alive is None else np.empty((steps, n, width), f32)
    # the columns h_prev @ recurrent kernel gives per step
    cols = math.replay_columns(units, blocks)
    recurrent = kernel[d:, :cols]
    scratch = np.empty((n, cols), f32)

    def step(t: int, rows: slice) -> None:
        """Step t for the examples `rows`, given h_prev @ recurrent kernel in `scratch[rows]`."""
        h = (h0 if t == 0 else states["h"][t - 1])[rows]
        # the cell state (an LSTM's; the other kinds have none and never read it)
        c = (c0 if t == 0 else states["c"][t - 1])[rows] if lstm else c0[rows]
        z = pre[t, rows, :cols]
        z += scratch[rows]
        held = None if hold is None else hold.gates(t)
        h_new, c_new = math.replay_step(how, pre[t, rows], z, post[t, rows], h, c, held)
        if hold is not None:
            h_new, c_new = hold.states(t, h_new, c_new, post[t, rows])
        if alive is None:
            states["h"][t, rows] = h_new
            if c_new is not None:
                states["c"][t, rows] = c_new
            return
        keep = alive[rows, t : t + 1]
        np.copyto(states["h"][t, rows], np.where(keep, h_new, h))
        if c_new is not None:
            np.copyto(states["c"][t, rows], np.where(keep, c_new, c))
        if carry_outputs:  # Keras: a skipped step repeats the previous output
            np.copyto(
                outputs[t, rows], np.where(keep, h_new, 0 if t == 0 else outputs[t - 1, rows])
            )
        else:
            np.multiply(h_new, keep, out=outputs[t, rows])

    def run(rows: slice) -> None:
        """Every step for the examples `rows`, which depend on no others."""
        # the input part of every step of these examples in one product, [steps, rows, d] @
        # [d, blocks * units], written straight into the preactivations
        if products is None:
            math.project(x[rows].transpose(1, 0, 2), how, pre[:, rows])
        else:
            products.inputs(x[rows].transpose(1, 0, 2), pre[:, rows])
        for t in range(steps):
            if products is None:
                np.matmul(
                    (h0 if t == 0 else states["h"][t - 1])[rows], recurrent, out=scratch[rows]
                )
            else:
                products.recurrent(t, rows, scratch[rows])
            step(t, rows)

    # The batch in blocks of rows, one per core, on worker threads: numpy releases the GIL
    # in its products and ufuncs. BLAS runs single-threaded meanwhile (its own threads
    # would only compete with the blocks for the same cores).
    blocks_of_rows = _row_blocks(n)
    if len(blocks_of_rows) == 1:
        run(blocks_of_rows[0])
    else:
        with _blas_threads(1), ThreadPoolExecutor(len(blocks_of_rows)) as pool:
            for done in [pool.submit(run, rows) for rows in blocks_of_rows]:
                done.result()
    h = (h0 if steps == 0 else states["h"][-1]).copy()
    c = (c0 if steps == 0 else states["c"][-1]).copy() if lstm else None
    final = {"h": h, **({"c": c} if lstm else {})}

    def batch_major(a):
        return np.swapaxes(a, 0, 1)

    return Replayed(
        batch_major(pre.reshape(steps, n, gates, units)),
        batch_major(post.reshape(steps, n, gates, units)),
        {k: batch_major(v) for k, v in states.items()},
        batch_major(outputs),
        final,
        inputs=x,
        initial={"h": h0, **({"c": c0} if lstm else {})},
    )


def activation_of(name: Any) -> Callable[[np.ndarray], np.ndarray]:
    """A numpy activation by name (see `tracer.cells.activations`), or a callable as it is."""
    try:
        return activations.activation_of(name)
    except ValueError as err:
        raise GraphPatternError(str(err)) from None


@contextmanager
def _blas_threads(count: int) -> Iterator[None]:
    """Let numpy's OpenBLAS use `count` threads while active (where numpy bundles OpenBLAS
    as its wheels do; elsewhere nothing changes)."""
    lib = _openblas()
    if lib is None:
        yield
        return
    before = lib.scipy_openblas_get_num_threads64_()
    lib.scipy_openblas_set_num_threads64_(count)
    try:
        yield
    finally:
        lib.scipy_openblas_set_num_threads64_(before)


@lru_cache(maxsize=1)
def _openblas():
    """numpy's bundled OpenBLAS, or None."""
    folder = Path(np.__file__).resolve().parent.parent / "numpy.libs"
    for path in sorted(folder.glob("libscipy_openblas64_*.so")):
        try:
            lib = ctypes.CDLL(str(path))
            if hasattr(lib, "scipy_openblas_set_num_threads64_") and hasattr(
                lib, "scipy_openblas_get_num_threads64_"
            ):
                return lib
        except OSError:
            pass
    return None


def _row_blocks(n: int, smallest: int = 32) -> list[slice]:
    """The batch cut into one block of rows per core (blocks of at least `smallest` rows)."""
    count = max(1, min(os.cpu_count() or 1, 8, n // smallest))
    edges = np.linspace(0, n, count + 1).astype(int)
    return [slice(a, b) for a, b in pairwise(edges)]


def _alive(mask, lengths, n: int, steps: int) -> np.ndarray | None:
    """[n, steps] booleans: the steps that run (None: all)."""
    if mask is not None:
        return np.asarray(mask, dtype=bool).reshape(n, steps)
    if lengths is not None:
        return np.arange(steps)[None, :] < np.asarray(lengths).reshape(-1, 1)
    return None


def check(
    name: str, got: Replayed, outputs: np.ndarray | None, final: Mapping[str, np.ndarray]
) -> None:
    """Raise ReplayMismatchError unless the replay's outputs and final states match the model's.

    `outputs` is [examples, steps, width], or [examples, width]: the last step's output
    only (a Keras layer without return_sequences).
    """
    pairs = [(f"final {k}", got.final[k], v) for k, v in final.items()]
    if outputs is not None and np.ndim(outputs) == 2:
        pairs.append(("last output", got.outputs[:, -1], outputs))
    elif outputs is not None:
        pairs.append(("outputs", got.outputs, outputs))
    for what, mine, theirs in pairs:
        theirs = np.asarray(theirs)
        if mine.shape != theirs.shape:
            raise ReplayMismatchError(
                f"cell {name}: replayed {what} has shape {list(mine.shape)}, the graph's {list(theirs.shape)}"
            )
        err, apart = _difference(mine, theirs)
        why = "the loop computes something gatetrace does not replay (a modified cell?), so its gates are not recorded"
        if apart is not None:
            axes = ("example", "step", "unit") if mine.ndim == 3 else ("example", "unit")
            raise ReplayMismatchError(
                f"cell {name}: replayed {what} are {apart.said(axes, 'the model')}; {why}"
            )
        if err > TOLERANCE:
            raise ReplayMismatchError(
                f"cell {name}: replayed {what} differ from the graph's by up to {err:.3g} (tolerance {TOLERANCE}); {why}"
            )


class Holding(Protocol):
    """What `--hold` changes inside a replayed cell at step t: its gates, inside the step
    (`gates`), and its new states, before the next step reads them (`states`)."""

    def gates(self, t: int) -> GateHold | None:
        """Step t's gates held inside the step (`tracer.cells.kinds.spec.GateHold`; None:
        no gate is held at step t)."""

    def states(
        self, t: int, h: np.ndarray, c: np.ndarray | None, activations: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Step t's new states (h, and c or None) as the next step reads them, given the
        step's activations [rows, gates * units] (an LSTM's h is its held c through the
        output gate)."""


class Products(Protocol):
    """A replay's matrix products computed otherwise than in float32 (`replay`'s `products`)."""

    def inputs(self, x: np.ndarray, out: np.ndarray) -> None:
        """The bias plus the input part of every step: `x` [steps, rows, d] into `out`
        [steps, rows, blocks * units]."""

    def recurrent(self, t: int, rows: slice, out: np.ndarray) -> None:
        """The recurrent part of step `t` for the examples `rows`, into `out` [rows, columns]."""


class _Gates(Protocol):
    """What `compare` reads of what a loop emitted (`tracer.values.slots.Emitted`)."""

    preactivation: np.ndarray
    activation: np.ndarray
    states: dict[str, np.ndarray]


def compare(
    name: str, replayed: Replayed, emitted: _Gates, lengths: np.ndarray | None = None
) -> None:
    """Raise ReplayMismatchError unless a replay's gates and states match what the cell's loop
    emitted (`--verify`), at every step before each example's length."""
    steps = emitted.preactivation.shape[1]
    alive = _alive(None, lengths, replayed.preactivation.shape[0], steps)
    pairs = [
        ("preactivations", replayed.preactivation, emitted.preactivation),
        ("activations", replayed.activation, emitted.activation),
    ]
    pairs += [(f"state {k}", replayed.states[k], v) for k, v in emitted.states.items()]
    for what, mine, theirs in pairs:
        mine = mine[:, :steps]
        if alive is not None:  # past a length the loop's cell ran on a state that was then dropped
            keep = alive.reshape(alive.shape + (1,) * (mine.ndim - 2))
            mine, theirs = np.where(keep, mine, 0), np.where(keep, theirs, 0)
        err, apart = _difference(mine, theirs)
        why = "the loop computes something gatetrace does not replay (a modified cell?)"
        if apart is not None:
            axes = ("example", "step", "gate", "unit")[: mine.ndim]
            raise ReplayMismatchError(
                f"cell {name}: --verify: the replayed {what} are {apart.said(axes, 'its loop')}; {why}"
            )
        if err > TOLERANCE:
            raise ReplayMismatchError(
                f"cell {name}: --verify: the replayed {what} differ from those its loop computed by up to {err:.3g} "
                f"(tolerance {TOLERANCE}); {why}"
            )


@dataclass(frozen=True)
class _Apart:
    """Where a replay and what the model computed disagree on a NaN or an infinity: the
    first such value's index, what each holds there, and how many such values there are."""

    at: tuple[int, ...]
    mine: float
    theirs: float
    count: int

    def said(self, axes: tuple[str, ...], whose: str) -> str:
        """`nan at example 1, step 2, unit 3 where the model's are 0.5 (2 values ...)`."""
        where = ", ".join(f"{axis} {k}" for axis, k in zip(axes, self.at, strict=True))
        many = f"{self.count} value{'s' if self.count != 1 else ''}"
        return (
            f"{self.mine:.6g} at {where} where {whose}'s are {self.theirs:.6g} ({many} where a NaN or an "
            "infinity of one is not the other's)"
        )


def _difference(mine: np.ndarray, theirs: np.ndarray) -> tuple[float, _Apart | None]:
    """The largest |mine - theirs| where both are finite, and where they disagree on a value
    that is not (a NaN against anything but NaN, an infinity against anything but itself);
    step by step (axis 1), so that no temporary is as large as the arrays."""
    err, count, first = 0.0, 0, None
    pieces = (
        [(None, mine, theirs)]
        if mine.ndim < 3
        else ((t, mine[:, t], theirs[:, t]) for t in range(mine.shape[1]))
    )
    for t, a, b in pieces:
        finite = np.isfinite(a) & np.isfinite(b)
        with np.errstate(invalid="ignore"):  # (inf - inf, left out by `where`)
            err = max(err, float(np.max(np.abs(a - b), where=finite, initial=0.0)))
        apart = ~(finite | (a == b) | (np.isnan(a) & np.isnan(b)))
        count += int(apart.sum())
        if first is None and count:
            k = tuple(int(i) for i in np.argwhere(apart)[0])
            at = k if t is None else (k[0], t, *k[1:])
            first = (at, float(a[k]), float(b[k]))
    return err, None if first is None else _Apart(*first, count)
