"""TensorFlow Lite's integer LSTM kernel replayed bit for bit (full-integer files).

A fused `UNIDIRECTIONAL_SEQUENCE_LSTM` whose input, matrices and output state are int8 and
whose cell state is int16 (what `converter.optimizations = [tf.lite.Optimize.DEFAULT]` with a
representative dataset and int8 builtins writes: `LiteInteger`) runs TensorFlow Lite's
"8x8_16" kernel. At every step, for each gate (i, f, c, o: the op's order, the cell's
i, f, j, o):

    1  the int8 input codes times the gate's input matrix, summed in int32 with the gate's
       int32 bias less input zero point x the matrix's row sums; rescaled to Q3.12 (a
       quantized multiplier of input scale x matrix scale x 2^12) and saturated to int16
    2  the same for the output state and the recurrent matrix (no bias), added to 1 in
       int32, saturated: the gate's preactivation, Q3.12 (2^-12 a step)
    3  sigmoid of i, f, o and tanh of c in gemmlowp's fixed point: the activation, Q0.15
    4  the cell state, int16 of scale 2^e (e from the file): f x c rounded down 15 bits,
       plus i x c-gate rounded down 30 + e bits, saturated, clipped to the op's cell clip
    5  the output state: o x tanh(cell state, read with 15 + e integer bits), rescaled by
       2^-30 over the hidden scale (the op's fifth intermediate tensor's), plus its zero
       point in int32, saturated to int8. The kernel computes that tanh for 0 to 6 integer
       bits only: for fewer (a cell scale below 2^-15, which its Prepare accepts and a
       converter calibrates for a small cell state) it writes nothing, and the buffer it
       would write still holds the input gate, so the output state is o x i there

Every sum is kept at the kernel's width: the biases with their zero points folded in, each
product sum and each rescaled sum plus what it is added to are int32 and wrap around as the
kernel's do (a bias near 2^31 turns a gate's sum negative there), the products of int16
values are int32, and each value is saturated or cast to int16 or int8 where the kernel
does. A rescale the kernel does not define (a factor of 2^31 or more: a left shift of 32
bits on int32) is refused in one line.

The arithmetic is `tracer.values.fixed_point`'s. `replay_integer` gives every step's codes;
`LitePlan` checks its outputs and final states against the op's, code for code, and records
the real values: scale x (code - zero point), exact in float32 for the gates and the cell
state (scales are powers of two). The scales and zero points are `LiteInteger.quantisation`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from recorders.errors import GraphPatternError, ReplayMismatchError
from tracer.cells.found import LiteInteger
from tracer.values.fixed_point import (
    logistic16,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    tanh16,
    wrap16,
    wrap32,
)
from tracer.values.replay import Replayed

__all__ = ["IntegerSteps", "replay_integer", "integer_replayed"]

_GATE_BITS = 12  # preactivations are Q3.12: the kernel's fixed scale without layer norm
_SIGMOID = (True, True, False, True)  # i, f, c, o: sigmoid, sigmoid, tanh, sigmoid
_GATES = "ifco"  # the op's gate order, as messages name them


@dataclass(frozen=True)
class IntegerSteps:
    """Codes of one replay: `preactivation`, `activation` [examples, steps, gates, units]
    int16 (the op's gate order i, f, c, o), `c` [examples, steps, units] int16, `h`
    [examples, steps, output] int8 codes held as int64."""

    preactivation: np.ndarray
    activation: np.ndarray
    c: np.ndarray
    h: np.ndarray


@functools.cache
def _table(function: str, bits: int) -> np.ndarray:
    """`function` ("sigmoid" or "tanh") of every int16 input with `bits` integer bits, by
    input + 32768: the fixed-point function computed once, then looked up at every step."""
    every = np.arange(-32768, 32768)
    return (logistic16 if function == "sigmoid" else tanh16)(every, bits)


def _apply(function: str, x: np.ndarray, bits: int) -> np.ndarray:
    return _table(function, bits)[x + 32768]


def _cell_tanh(c: np.ndarray, i: np.ndarray, bits: int) -> np.ndarray:
    """What the kernel multiplies the output gate by: tanh of the cell state codes `c` read
    with `bits` integer bits; where `bits` is negative its tanh writes nothing and its buffer
    still holds the input gate `i` (step 5 of the module docstring)."""
    return _apply("tanh", c, bits) if bits >= 0 else i


def _float32(v: float) -> float:
    """`v` rounded to float32 as the C++ casts it: past float32's largest number, infinite."""
    with np.errstate(over="ignore"):
        return float(np.float32(v))


@dataclass(frozen=True)
class _Prepared:
    """What the kernel computes once, before its first step (its Prepare), at its widths:
    each gate's int32 biases with the zero points folded in (`inputs`, `recurrent`
    [gates, units]), each product's quantized multiplier (mantissa, shift), the output's,
    and the cell clip in cell-state codes (0: none)."""

    inputs: np.ndarray
    recurrent: np.ndarray
    input_factors: tuple[tuple[int, int], ...]
    recurrent_factors: tuple[tuple[int, int], ...]
    hidden: tuple[int, int]
    clip: int


def _factor(real: float, what: str, name: str) -> tuple[int, int]:
    """`real` as the kernel's quantized multiplier; GraphPatternError where the kernel's
    rescale is undefined there (a left shift of 32 bits or more on int32, or a product of
    scales past float32's largest number)."""
    mantissa, shift = quantize_multiplier(real) if math.isfinite(real) else (0, 32)
    if shift > 31:
        raise GraphPatternError(
            f"cell {name}: TensorFlow Lite's integer LSTM kernel would rescale {what} by {real:g}, 2^31 or "
            "more, which its int32 arithmetic does not define (a shift of 32 bits or more); the file's scales "
            "are not ones a converter writes: convert the model again"
        )
    return mantissa, shift


def _prepare(cell: LiteInteger, name: str) -> _Prepared:
    """The kernel's constants for `cell` (`_Prepared`): the scales are float32 and multiplied
    in float32, the row sums and biases int32, as the C++ computes them."""
    gate_scale = _float32(2.0**-_GATE_BITS)
    row_in = wrap32(cell.input_codes.astype(np.int64).sum(axis=2))
    row_rec = wrap32(cell.recurrent_codes.astype(np.int64).sum(axis=2))
    in_factors = tuple(
        _factor(
            _float32(_float32(s * cell.input_scale) / gate_scale),
            f"gate {g}'s input products",
            name,
        )
        for g, s in zip(_GATES, cell.input_weight_scales, strict=True)
    )
    rec_factors = tuple(
        _factor(
            _float32(_float32(s * cell.h_scale) / gate_scale),
            f"gate {g}'s recurrent products",
            name,
        )
        for g, s in zip(_GATES, cell.recurrent_weight_scales, strict=True)
    )
    hidden = _factor(
        _float32(_float32(2.0**-15 / cell.hidden_scale) * 2.0**-15), "the output state", name
    )
    clip = 0
    if cell.cell_clip > 0:  # the clip over the file's own scale, in float32, truncated
        clip = int(
            min(max(np.float32(cell.cell_clip) / np.float32(cell.cell_scale), -32768), 32767)
        )
    return _Prepared(
        inputs=wrap32(cell.biases.astype(np.int64) + wrap32(-cell.input_zero * row_in)),
        recurrent=wrap32(-cell.h_zero * row_rec),
        input_factors=in_factors,
        recurrent_factors=rec_factors,
        hidden=hidden,
        clip=clip,
    )


def _saturated(x: np.ndarray, bits: int) -> np.ndarray:
    """An int32 value saturated to a signed integer of `bits` bits."""
    return np.clip(x, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def replay_integer(
    cell: LiteInteger, x: np.ndarray, h0: np.ndarray, c0: np.ndarray, name: str = "?"
) -> IntegerSteps:
    """The kernel (module docstring) over int8 input codes `x` [examples, steps, features]
    from output state codes `h0` [examples, output] and cell state codes `c0` [examples,
    units]; GraphPatternError naming cell `name` where the kernel's arithmetic is undefined."""
    k = _prepare(cell, name)
    x, h, c = (np.asarray(a, np.int64) for a in (x, h0, c0))
    n, steps, _ = x.shape
    # [features, gates x units]: float64 products and sums of int8 codes are exact (BLAS)
    w_in = cell.input_codes.reshape(-1, cell.input_codes.shape[2]).T.astype(np.float64)
    w_rec = cell.recurrent_codes.reshape(-1, cell.recurrent_codes.shape[2]).T.astype(np.float64)
    units = cell.input_codes.shape[1]
    pre = np.empty((n, steps, 4, units), np.int64)
    act = np.empty_like(pre)
    cs = np.empty((n, steps, units), np.int64)
    hs = np.empty((n, steps, h.shape[1]), np.int64)
    in_sums = (x.astype(np.float64) @ w_in).astype(np.int64).reshape(n, steps, 4, units)
    for t in range(steps):
        rec_sums = (h.astype(np.float64) @ w_rec).astype(np.int64).reshape(n, 4, units)
        for g in range(4):
            # each sum, and each rescaled sum plus what it is added to, wraps in int32
            first = _saturated(
                multiply_by_quantized_multiplier(
                    wrap32(in_sums[:, t, g] + k.inputs[g]), *k.input_factors[g]
                ),
                16,
            )
            rescaled = multiply_by_quantized_multiplier(
                wrap32(rec_sums[:, g] + k.recurrent[g]), *k.recurrent_factors[g]
            )
            gate = _saturated(wrap32(rescaled + first), 16)
            pre[:, t, g] = gate
            act[:, t, g] = _apply("sigmoid" if _SIGMOID[g] else "tanh", gate, 3)
        i, f, j, o = (act[:, t, g] for g in range(4))
        # int16 x int16 products are int32 (2^30 at most), cast back to int16 after the shift
        kept = wrap16(rounding_divide_by_pot(f * c, 15))
        added = wrap16(rounding_divide_by_pot(i * j, 30 + cell.cell_exponent))
        c = _saturated(kept + added, 16)
        if k.clip > 0:
            c = np.clip(c, -k.clip, k.clip)
        out = o * _cell_tanh(c, i, 15 + cell.cell_exponent)
        h = _saturated(
            wrap32(multiply_by_quantized_multiplier(out, *k.hidden) + cell.hidden_zero), 8
        )
        cs[:, t], hs[:, t] = c, h
    return IntegerSteps(pre, act, cs, hs)


def _real(codes: np.ndarray, scale: float, zero: int = 0) -> np.ndarray:
    """scale x (code - zero point) in float32, as TensorFlow Lite's DEQUANTIZE computes it."""
    return np.float32(scale) * (codes - zero).astype(np.float32)


def integer_replayed(name: str, cell: LiteInteger, seen: Mapping[str, np.ndarray]) -> Replayed:
    """The replay of `cell` over what its op received (`seen`, as `LitePlan` reads it: int8
    `inputs`, `initial h` and `initial c` codes, `outputs`, and `final h` and `final c` where the
    op keeps them), checked code for code against what it returned; its real values."""
    got = replay_integer(cell, seen["inputs"], seen["initial h"], seen["initial c"], name)
    pairs = [("outputs", got.h, seen["outputs"])]
    pairs += [
        (f"final {s}", v[:, -1], seen[f"final {s}"])
        for s, v in (("h", got.h), ("c", got.c))
        if f"final {s}" in seen
    ]
    for what, mine, theirs in pairs:
        theirs = np.asarray(theirs, np.int64)
        if mine.shape != theirs.shape or not np.array_equal(mine, theirs):
            differ = int((mine != theirs).sum()) if mine.shape == theirs.shape else mine.size
            raise ReplayMismatchError(
                f"cell {name}: the replayed integer kernel's {what} differ from the op's in {differ:,} of "
                f"{theirs.size:,} codes; the op computes something gatetrace does not reproduce, so its gates "
                "are not recorded"
            )
    q = cell.quantisation()
    h = _real(got.h, q["h"]["scale"], q["h"]["zero_point"])
    states = {"h": h, "c": _real(got.c, q["c"]["scale"])}
    initial = {
        "h": _real(np.asarray(seen["initial h"], np.int64), q["h"]["scale"], q["h"]["zero_point"]),
        "c": _real(np.asarray(seen["initial c"], np.int64), q["c"]["scale"]),
    }
    return Replayed(
        _real(got.preactivation, q["preactivation"]["scale"]),
        _real(got.activation, q["activation"]["scale"]),
        states,
        h,
        {s: v[:, -1] for s, v in states.items()},
        inputs=_real(
            np.asarray(seen["inputs"], np.int64), q["inputs"]["scale"], q["inputs"]["zero_point"]
        ),
        initial=initial,
    )
