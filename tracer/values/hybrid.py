"""TensorFlow Lite's hybrid kernels replayed: int8 weights, float activations (dynamic range).

A fused `UNIDIRECTIONAL_SEQUENCE_LSTM` or `_RNN` whose matrices are int8 codes with one scale
each (what `converter.optimizations = [tf.lite.Optimize.DEFAULT]` writes; `LiteHybrid`)
runs TensorFlow Lite's hybrid kernel. At every step, for each example:

    1  its input row, and its recurrent input (the output of the step before), are each
       quantised to int8 on their own: symmetric (scale = max |v| / 127, codes in
       [-127, 127]), or asymmetric where the op's `asymmetric_quantize_inputs` says so
       (scale = (max(v, 0) - min(v, 0)) / 255, the difference taken in float32 and divided
       in double, a zero point nudged into [-128, 127]); v x (1 / scale) in float32, rounded
       half away from zero (then plus the zero point, clamped)
    2  each gate's int8 matrix times those codes, summed in int32, less zero point x the
       sum of the matrix's row
    3  that sum x (the row's scale x the matrix's scale), in float32, added to the gate's
       bias: the input part first, then the recurrent part
    4  the nonlinearities and the state update in float, as the float op's

`HybridProducts` computes 1-3 for `tracer.values.replay.replay` (its `products`). The
recurrent input it quantises is the op's own output of the step before, as the interpreter
wrote it (read back with the op's outputs): quantisation rounds, and a float one ulp away
could round to another code. The replay's outputs and final states are then checked against
the op's, as a float op's are.
"""

from __future__ import annotations

import numpy as np

from tracer.cells.found import LiteHybrid

__all__ = ["HybridProducts", "quantise_rows"]

_f32, _f64 = np.float32, np.float64


def _round(v: np.ndarray) -> np.ndarray:
    """Half away from zero (C's `round`), of float32 values, as int64."""
    w = v.astype(_f64)  # exact: the + 0.5 cannot round in double
    return (np.sign(w) * np.floor(np.abs(w) + 0.5)).astype(np.int64)


def quantise_rows(v: np.ndarray, asymmetric: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of `v` [rows, n] float32 quantised as the hybrid kernel quantises each (step 1 of
    the module docstring): (codes [rows, n] int64, scales [rows] float32, zero points [rows]
    int64). A row of zeros (or, asymmetric, of one value) is codes 0, scale 1, zero point 0."""
    v = np.asarray(v, _f32)
    if asymmetric:
        low32 = np.minimum(v.min(axis=1), _f32(0))
        high32 = np.maximum(v.max(axis=1), _f32(0))
        # the span in float32 (the kernel subtracts floats), divided in double
        low, high = low32.astype(_f64), high32.astype(_f64)
        flat = low == high
        scale = np.where(flat, 1.0, (high32 - low32).astype(_f64)) / 255.0
        from_min, from_max = -128.0 - low / scale, 127.0 - high / scale
        error_min = 128.0 + np.abs(low / scale)
        error_max = 127.0 + np.abs(high / scale)
        zero = np.where(error_min < error_max, from_min, from_max)
        nudged = np.where(
            zero <= -128,
            -128,
            np.where(zero >= 127, 127, np.sign(zero) * np.floor(np.abs(zero) + 0.5)),
        ).astype(np.int64)
        nudged[flat] = 0
        scales = np.where(flat, 1.0, scale).astype(_f32)
        inverse = (1.0 / scales.astype(_f64)).astype(_f32)[:, None]  # 1.0 / scale, in double
        # rounded, then the zero point added (a tie of v / scale goes away from zero before
        # the zero point moves it: seen in the kernel's own codes)
        codes = np.clip(_round(v * inverse) + nudged[:, None], -128, 127)
        codes[flat] = 0
        return codes, scales, nudged
    reach = np.maximum(np.abs(v.min(axis=1)), np.abs(v.max(axis=1)))
    flat = reach == 0
    safe = np.where(flat, _f32(1.0), reach)
    scales = np.where(flat, _f32(1.0), safe / _f32(127.0)).astype(_f32)
    codes = np.clip(_round(v * (_f32(127.0) / safe)[:, None]), -127, 127)
    codes[flat] = 0
    return codes, scales, np.zeros(len(v), np.int64)


def _product(
    rows: np.ndarray, matrix: np.ndarray, row_sums: np.ndarray, scales: np.ndarray, asymmetric: bool
) -> np.ndarray:
    """Steps 1-3 for `rows` [rows, n] and the int8 codes `matrix` [n, cols] (as int64, with
    each column's sum `row_sums`) of column `scales`: [rows, cols] float32, the bias not added."""
    q, row_scale, zero = quantise_rows(rows, asymmetric)
    sums = q @ matrix - zero[:, None] * row_sums[None, :]  # exact in int64
    return sums.astype(_f32) * (row_scale[:, None] * scales[None, :]).astype(_f32)


class HybridProducts:
    """The two products of a hybrid op's step (see the module docstring): `inputs` of every
    step with the bias, `recurrent` of one step, from the op's own previous output."""

    def __init__(
        self,
        weights: LiteHybrid,
        bias: np.ndarray,
        d: int,
        outputs: np.ndarray,
        initial_h: np.ndarray,
    ):
        self.weights, self.bias, self.d = weights, np.asarray(bias, _f32), d
        codes = weights.codes.astype(np.int64)  # once, not at every step
        self._input, self._recurrent = codes[:d], codes[d:]
        self._input_sums, self._recurrent_sums = (
            self._input.sum(axis=0),
            self._recurrent.sum(axis=0),
        )
        self.outputs = np.asarray(outputs, _f32)  # [examples, steps, width], the op's
        self.initial = np.asarray(initial_h, _f32)

    def inputs(self, x: np.ndarray, out: np.ndarray) -> None:
        """bias + the input part of every step: `x` [steps, rows, d] into `out` [steps, rows, cols]."""
        w = self.weights
        steps, n, d = x.shape
        part = _product(
            x.reshape(steps * n, d), self._input, self._input_sums, w.input_scales, w.asymmetric
        )
        np.add(self.bias, part.reshape(steps, n, -1), out=out)

    def recurrent(self, t: int, rows: slice, out: np.ndarray) -> None:
        """The recurrent part of step `t` for examples `rows` into `out` [rows, cols]: the op's
        output of step t - 1 (its initial h at step 0) quantised and multiplied."""
        w = self.weights
        h = self.initial[rows] if t == 0 else self.outputs[rows, t - 1]
        out[...] = _product(
            h, self._recurrent, self._recurrent_sums, w.recurrent_scales, w.asymmetric
        )
