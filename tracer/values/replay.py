"""Replay: recompute a cell's gates in numpy from what enters and leaves its while loop.

A cell inside `dynamic_rnn` runs in a loop body whose ops cannot be fetched from outside.
What enters the loop (the input sequence, the initial state, the sequence lengths) and
what leaves it (the outputs, the final state) can. `replay` runs the cell over the
sequence in float32 numpy, vectorized over the batch, with the input projection of all
steps in one matrix product, exactly as the `tf.compat.v1.nn.rnn_cell` classes compute:

    LSTM   z = [x, h_prev] @ kernel + bias;  i, j, f, o = split(z, 4)
    GRU    r, u = split(sigmoid([x, h_prev] @ kernel + bias), 2)
           c = act([x, r * h_prev] @ candidate_kernel + candidate_bias)
    RNN    h = act([x, h_prev] @ kernel + bias)

and as Keras' `LSTM`, `GRU` and `SimpleRNN` layers compute (`tracer.load.keras` stacks
their kernel on their recurrent kernel, so that `kernel` is [x, h_prev] @ kernel here too):

    LSTM       i, f, j, o = split([x, h_prev] @ kernel + bias, 4)   (Keras' i, f, c, o)
    GRU        u, r = gate_act(split([x, h_prev] @ kernel[:, :2u] + bias, 2))   (Keras' z, r)
               c = act(x @ W_c + b_c + r * (h_prev @ U_c + recurrent_bias_c))   reset_after
               c = act(x @ W_c + b_c + (r * h_prev) @ U_c)                     otherwise
    SimpleRNN  h = act([x, h_prev] @ kernel + bias)

Past an example's length (or where a Keras mask is False), the state is carried through
and the output is zero (`dynamic_rnn`) or the previous output (Keras). `check` compares
the replay's outputs and final state with the model's own and raises
`ReplayMismatchError` beyond 1e-4.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import pairwise
from pathlib import Path
from typing import Protocol

import numpy as np

from recorders.errors import GraphPatternError, ReplayMismatchError
from tracer.cells.kinds import spec_for
from tracer.cells.reference import ACTIVATIONS

__all__ = ["Replayed", "replay", "check", "compare", "activation_of", "TOLERANCE"]

TOLERANCE = 1e-4


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # = 1 / (1 + exp(-x)), without overflow
    return (0.5 * np.tanh(0.5 * x) + 0.5).astype(x.dtype, copy=False)


def _sigmoid_into(z: np.ndarray, out: np.ndarray, shift: np.float32 | None = None) -> None:
    """out = sigmoid(z + shift) in four float32 passes: 1 / (1 + exp(-(z + shift))).

    Faster than the tanh form; where exp overflows (z < -88) the result is exactly 0.
    """
    np.negative(z, out=out)
    if shift is not None:
        out -= shift
    with np.errstate(over="ignore"):
        np.exp(out, out=out)
    out += np.float32(1)
    np.reciprocal(out, out=out)


# The reference's activations keep float32 (numpy treats Python scalars as weak), except its
# sigmoid, which overflows in float32: the tanh form above does not.
_ACT = {**ACTIVATIONS, "sigmoid": _sigmoid}


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
) -> Replayed:
    """Run cell `kind` over `inputs` [examples, steps, features] (see the module docstring).

    A step is skipped where `mask` [examples, steps] is False (or at and past `lengths`):
    the state is carried through and the output is zero, or with `carry_outputs` the
    previous output (Keras' default). `activation` and `recurrent_activation` (the gates'
    nonlinearity) name entries of `ACTIVATIONS`, or are callables.
    """
    f32 = np.float32
    w = {k: np.asarray(v, dtype=f32) for k, v in weights.items()}
    x = np.asarray(inputs, dtype=f32)
    n, steps, d = x.shape
    act, gate_act = activation_of(activation), activation_of(recurrent_activation)
    kernel, bias = w["kernel"], w["bias"]
    spec = spec_for(kind)
    lstm, blocks, gates = spec.is_lstm, spec.weights[0].blocks, len(spec.gates)
    units = kernel.shape[1] // blocks
    width = w["projection"].shape[1] if "projection" in w else units
    if kernel.shape[0] != d + width:
        raise GraphPatternError(
            f"{kind}: kernel of shape {list(kernel.shape)} does not fit inputs of {d} features and a state of {width}"
        )
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
    recurrent = kernel[d:]
    cand_k = w.get("candidate_kernel")
    recurrent_bias = w.get("recurrent_bias")  # Keras GRU with reset_after

    def project(rows: slice) -> None:
        """The input part of every step of the examples `rows` in one product,
        [steps, rows, d] @ [d, blocks * units], written straight into the preactivations;
        each step then adds its recurrent part."""
        xin = x[rows].transpose(1, 0, 2)
        if kind == "GRUCell":
            assert cand_k is not None  # every GRUCell has one: spec_for("GRUCell").weights
            np.matmul(xin, kernel[:d], out=pre[:, rows, : 2 * units])
            pre[:, rows, : 2 * units] += bias
            np.matmul(xin, cand_k[:d], out=pre[:, rows, 2 * units :])
            pre[:, rows, 2 * units :] += w["candidate_bias"]
        else:
            np.matmul(xin, kernel[:d], out=pre[:, rows])
            pre[:, rows] += bias
        if recurrent_bias is not None:
            # Keras GRU, blocks u (Keras z), r, c (Keras h). reset_after: a recurrent bias of its own,
            # and r multiplies the recurrent part of c after the product (before it without reset_after).
            pre[:, rows, : 2 * units] += recurrent_bias[: 2 * units]

    fb = f32(forget_bias or 0.0)
    peep = "w_i_diag" in w
    # The LSTM gates' column blocks, in the spec's order (i, j, f, o for TensorFlow, i, f, j, o for Keras).
    i_, j_, f_, o_ = (
        (slice(k * units, (k + 1) * units) for k in (spec.gates.index(g) for g in "ijfo"))
        if lstm
        else [None] * 4
    )
    fast = lstm and not peep and activation == "tanh" and recurrent_activation == "sigmoid"
    # the columns h_prev @ recurrent kernel gives per step
    cols = 2 * units if kind == "GRU" else blocks * units
    scratch = np.empty((n, cols), f32)

    def step(t: int, rows: slice) -> None:
        """Step t for the examples `rows`, given h_prev @ recurrent kernel in `scratch[rows]`."""
        h = (h0 if t == 0 else states["h"][t - 1])[rows]
        # the cell state (an LSTM's; the other kinds have none and never read it)
        c = (c0 if t == 0 else states["c"][t - 1])[rows] if lstm else c0[rows]
        z = pre[t, rows, :cols]
        z += scratch[rows]
        a = post[t, rows]
        if fast:
            # i = input_gate, j = new_input, f = forget_gate, o = output_gate
            for g in (i_, f_, o_):
                _sigmoid_into(z[:, g], a[:, g], fb if g is f_ else None)
            np.tanh(z[:, j_], out=a[:, j_])
            c_new = a[:, f_] * c
            c_new += a[:, i_] * a[:, j_]
            if cell_clip is not None:
                np.clip(c_new, -cell_clip, cell_clip, out=c_new)
            h_new = np.tanh(c_new)
            h_new *= a[:, o_]
        elif lstm:
            i, j, f, o = z[:, i_], z[:, j_], z[:, f_], z[:, o_]
            a[:, i_] = gate_act(i + w["w_i_diag"] * c if peep else i)
            a[:, f_] = gate_act(f + fb + w["w_f_diag"] * c if peep else f + fb)
            a[:, j_] = act(j)
            c_new = a[:, f_] * c + a[:, i_] * a[:, j_]
            if cell_clip is not None:
                c_new = np.clip(c_new, -cell_clip, cell_clip)
            a[:, o_] = gate_act(o + w["w_o_diag"] * c_new if peep else o)
            h_new = a[:, o_] * act(c_new)
        elif kind == "GRUCell":
            # r = reset gate, u = update gate (sigmoid before the split), c = candidate
            a[:, : 2 * units] = gate_act(z)
            r, u = a[:, :units], a[:, units : 2 * units]
            zc = pre[t, rows, 2 * units :]
            assert cand_k is not None  # as in project
            zc += (r * h) @ cand_k[d:]
            a[:, 2 * units :] = act(zc)
            h_new = u * h + (1 - u) * a[:, 2 * units :]
        elif kind == "GRU":
            # u = update gate (Keras z), r = reset gate, c = candidate (Keras h)
            a[:, : 2 * units] = gate_act(z)
            u, r = a[:, :units], a[:, units : 2 * units]
            zc = pre[t, rows, 2 * units :]
            if recurrent_bias is not None:
                zc += r * (h @ recurrent[:, 2 * units :] + recurrent_bias[2 * units :])
            else:
                zc += (r * h) @ recurrent[:, 2 * units :]
            a[:, 2 * units :] = act(zc)
            h_new = u * h + (1 - u) * a[:, 2 * units :]
        else:  # BasicRNNCell, SimpleRNN
            a[:] = act(z)
            h_new = a
        if lstm and "projection" in w:
            h_new = h_new @ w["projection"]
            if proj_clip is not None:
                h_new = np.clip(h_new, -proj_clip, proj_clip)
        if alive is None:
            states["h"][t, rows] = h_new
            if lstm:
                states["c"][t, rows] = c_new
            return
        keep = alive[rows, t : t + 1]
        np.copyto(states["h"][t, rows], np.where(keep, h_new, h))
        if lstm:
            np.copyto(states["c"][t, rows], np.where(keep, c_new, c))
        if carry_outputs:  # Keras: a skipped step repeats the previous output
            np.copyto(
                outputs[t, rows], np.where(keep, h_new, 0 if t == 0 else outputs[t - 1, rows])
            )
        else:
            np.multiply(h_new, keep, out=outputs[t, rows])

    def run(rows: slice) -> None:
        """Every step for the examples `rows`, which depend on no others."""
        project(rows)
        for t in range(steps):
            np.matmul(
                (h0 if t == 0 else states["h"][t - 1])[rows], recurrent[:, :cols], out=scratch[rows]
            )
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


def activation_of(name):
    """A numpy activation by name (see `ACTIVATIONS`), or a callable as it is."""
    if callable(name):
        return name
    try:
        return _ACT[name]
    except KeyError:
        raise GraphPatternError(
            f"activation {name!r} is not replayed: expected one of {sorted(_ACT)}"
        ) from None


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
        err, same_finite = _difference(mine, theirs)
        if err > TOLERANCE or not same_finite:
            raise ReplayMismatchError(
                f"cell {name}: replayed {what} differ from the graph's by up to {err:.3g} (tolerance {TOLERANCE}); "
                "the loop computes something gatetrace does not replay (a modified cell?), so its gates are not recorded"
            )


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
        err, same_finite = _difference(mine, theirs)
        if err > TOLERANCE or not same_finite:
            raise ReplayMismatchError(
                f"cell {name}: --verify: the replayed {what} differ from those its loop computed by up to {err:.3g} "
                f"(tolerance {TOLERANCE}); the loop computes something gatetrace does not replay (a modified cell?)"
            )


def _difference(mine: np.ndarray, theirs: np.ndarray) -> tuple[float, bool]:
    """The largest |mine - theirs| where both are finite, and whether mine is finite wherever
    theirs is; step by step (axis 1), so that no temporary is as large as the arrays."""
    err, same_finite = 0.0, True
    pieces = (
        [(mine, theirs)]
        if mine.ndim < 3
        else ((mine[:, t], theirs[:, t]) for t in range(mine.shape[1]))
    )
    for a, b in pieces:
        finite = np.isfinite(a) & np.isfinite(b)
        err = max(err, float(np.max(np.abs(a - b), where=finite, initial=0.0)))
        same_finite = same_finite and np.array_equal(finite, np.isfinite(b))
    return err, same_finite
