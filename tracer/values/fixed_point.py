"""The fixed-point arithmetic of TensorFlow Lite's integer kernels, in numpy, bit for bit.

Integer ops rescale their int32 sums by a "quantized multiplier" (a real factor held as an
int32 mantissa in [2^30, 2^31) and a power of two), and compute sigmoid and tanh on int16
values with gemmlowp's fixed-point functions. Each function here is one of those, on numpy
integer arrays of any shape, as the C++ computes it: C's truncating division, int16 results
that wrap where the C++ casts and saturate where it saturates.

    quantize_multiplier(real)          (mantissa, shift): frexp, mantissa rounded half away
    multiply_by_quantized_multiplier   x * mantissa, doubled high half rounded, then
                                       divided by 2^-shift rounding half away from zero
    rounding_divide_by_pot(x, e)       x / 2^e, rounded half away from zero
    wrap32(x), wrap16(x)               x cast to int32, int16: modulo 2^32, 2^16
    logistic16(x, bits)                sigmoid of Q(bits).(15 - bits) int16 into Q0.15
    tanh16(x, bits)                    tanh of Q(bits).(15 - bits) int16 into Q0.15

A value `Qm.n` is an integer holding value x 2^n: Q3.12 spans [-8, 8), Q0.15 [-1, 1).
Integers are held as int64 throughout (every product of two int32 fits); a result is
the int16 or int32 the C++ would hold. A sum the kernel keeps in int32 wraps around there
(two's complement, as its adds do): its caller wraps it with `wrap32` where the C++ would.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "quantize_multiplier",
    "multiply_by_quantized_multiplier",
    "rounding_divide_by_pot",
    "logistic16",
    "tanh16",
    "wrap16",
    "wrap32",
]

_I16_MIN, _I16_MAX = -(2**15), 2**15 - 1
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1


def _i64(x: np.ndarray | int) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def _c_divide(x: np.ndarray, d: int) -> np.ndarray:
    """x / d as C divides integers: truncated toward zero."""
    q = np.abs(x) // d
    return np.where(x < 0, -q, q)


def wrap16(x: np.ndarray | int) -> np.ndarray:
    """x cast to int16 as C++ casts: modulo 2^16."""
    return ((_i64(x) - _I16_MIN) & 0xFFFF) + _I16_MIN


def wrap32(x: np.ndarray | int) -> np.ndarray:
    """x cast to int32 as C++ casts (and as an int32 sum wraps): modulo 2^32."""
    return ((_i64(x) - _I32_MIN) & 0xFFFFFFFF) + _I32_MIN


def quantize_multiplier(real: float) -> tuple[int, int]:
    """A real factor as TensorFlow Lite holds it: (mantissa, shift) with real ~= mantissa x
    2^(shift - 31), mantissa in [2^30, 2^31) (0, 0 for 0 and factors below 2^-32)."""
    if real == 0.0:
        return 0, 0
    fraction, shift = math.frexp(real)
    scaled = fraction * 2**31
    mantissa = int(math.floor(abs(scaled) + 0.5)) * (1 if scaled >= 0 else -1)  # C's round
    if mantissa == 2**31:
        mantissa //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return mantissa, shift


def rounding_divide_by_pot(x: np.ndarray, exponent: int) -> np.ndarray:
    """x / 2^exponent rounded to nearest, ties away from zero (gemmlowp's)."""
    x = _i64(x)
    if exponent == 0:
        return x
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + ((x & mask) > threshold)


def _doubling_high_mul32(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp's SaturatingRoundingDoublingHighMul on int32: (a x b x 2) / 2^32, rounded."""
    a = _i64(a)
    product = a * b
    nudge = np.where(product >= 0, 1 << 30, 1 - (1 << 30))
    high = _c_divide(product + nudge, 1 << 31)
    return np.where((a == _I32_MIN) & (b == _I32_MIN), _I32_MAX, high)


def multiply_by_quantized_multiplier(x: np.ndarray, mantissa: int, shift: int) -> np.ndarray:
    """int32 `x` (wrapped to int32 where it is not one: the kernel's argument is) times the
    factor `quantize_multiplier` gave (mantissa, shift), as TensorFlow Lite's reference kernels
    round it: a left shift first where shift > 0 (int32, wrapping), the doubled high half,
    then a rounding right shift where shift < 0. A shift of 32 or more, which C++ does not
    define on int32, is refused (ValueError): the caller checks its factors first."""
    if shift > 31:
        raise ValueError(f"a left shift of {shift} bits on int32 is undefined")
    x = wrap32(x)
    if shift > 0:
        x = wrap32(x << shift)
    return rounding_divide_by_pot(_doubling_high_mul32(x, mantissa), max(-shift, 0))


# gemmlowp's fixed point on int16: a value is its raw int16 and a count of integer bits,
# kept by the caller. Sums and differences wrap (C++ casts back to int16); products are
# rounded doubled high halves, their integer bits the sum of the factors'.


def _mul16(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    a, b = _i64(a), _i64(b)
    product = a * b
    nudge = np.where(product >= 0, 1 << 14, 1 - (1 << 14))
    high = _c_divide(product + nudge, 1 << 15)
    return np.where((a == b) & (a == _I16_MIN), _I16_MAX, high)


def _shift16(x: np.ndarray, exponent: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT on int16: x x 2^exponent, saturated up, rounded down."""
    if exponent <= 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (15 - exponent)) - 1
    shifted = wrap16(_i64(x) << exponent)
    return np.where(x > threshold, _I16_MAX, np.where(x < -threshold, _I16_MIN, shifted))


def _constant16(raw32: int) -> int:
    """A gemmlowp constant written for int32, as int16 holds it (rounded: 16 bits fewer)."""
    return int(rounding_divide_by_pot(np.int64(raw32), 16))


def _half_sum16(a: np.ndarray, b: int) -> np.ndarray:
    total = _i64(a) + b
    return _c_divide(total + np.where(total >= 0, 1, -1), 2)


_ONE_F0 = _I16_MAX  # 1.0 with no integer bits: the largest value
_ONE_F2 = 1 << 13


def _exp_quarter(a: np.ndarray) -> np.ndarray:
    """exp(a) for a in [-1/4, 0), Q0.15 in and out: a Taylor series around -1/8."""
    constant = _constant16(1895147668)  # exp(-1/8)
    third = _constant16(715827883)  # 1/3
    x = wrap16(a + (1 << 12))  # a + 1/8
    x2 = _mul16(x, x)
    x3 = _mul16(x2, x)
    x4 = _mul16(x2, x2)
    x4_over_4 = _shift16(x4, -2)
    series = _shift16(wrap16(_mul16(wrap16(x4_over_4 + x3), third) + x2), -1)
    return np.clip(constant + _mul16(constant, wrap16(x + series)), _I16_MIN, _I16_MAX)


# exp(-2^e) for e = -2 .. 4, as int32 constants of no integer bits
_EXP_FACTORS = (
    (-2, 1672461947),
    (-1, 1302514674),
    (0, 790015084),
    (1, 290630308),
    (2, 39332535),
    (3, 720401),
    (4, 242),
)


def _exp_negative(a: np.ndarray, bits: int) -> np.ndarray:
    """exp(a) for a <= 0 of `bits` integer bits, into Q0.15."""
    fraction = 15 - bits
    quarter = 1 << (fraction - 2)
    modulo = wrap16((_i64(a) & (quarter - 1)) - quarter)
    result = _exp_quarter(_shift16(modulo, bits))
    remainder = wrap16(modulo - a)
    for exponent, factor in _EXP_FACTORS:
        if bits > exponent:
            bit = wrap16(1 << (fraction + exponent))
            result = np.where((remainder & bit) != 0, _mul16(result, _constant16(factor)), result)
    if bits > 5:
        clamp = _constant16(-(1 << (36 - bits)))  # -32
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, _ONE_F0, result)


def _newton_reciprocal(a: np.ndarray) -> np.ndarray:
    """2 / (1 + a) for a in [0, 1) Q0.15, in Q2.13: three Newton-Raphson steps from 48/17 - 32/17 d."""
    half = _half_sum16(a, _ONE_F0)
    x = wrap16(_constant16(1515870810) + _mul16(half, _constant16(-1010580540)))
    for _ in range(3):
        rest = wrap16(_ONE_F2 - _mul16(half, x))
        x = wrap16(x + _shift16(_mul16(x, rest), 2))
    return x


def logistic16(x: np.ndarray, bits: int) -> np.ndarray:
    """gemmlowp's logistic of int16 `x` with `bits` integer bits, into Q0.15 (0.5: 16384)."""
    x = _i64(x)
    positive = x > 0
    magnitude = np.where(positive, x, wrap16(-x))
    # 1 / (1 + exp(-|x|)): the reciprocal halved (its integer bits one fewer), then to Q0.15
    upper = _shift16(_newton_reciprocal(_exp_negative(wrap16(-magnitude), bits)), 1)
    lower = wrap16(_ONE_F0 - upper)
    return np.where(x == 0, 1 << 14, np.where(positive, upper, lower))


def tanh16(x: np.ndarray, bits: int) -> np.ndarray:
    """gemmlowp's tanh of int16 `x` with `bits` integer bits, into Q0.15."""
    x = _i64(x)
    negative = x < 0
    n = np.where(negative, x, wrap16(-x))  # -|x|
    # (1 - exp(2n)) / (1 + exp(2n)); 2n: the same integers read with one integer bit more
    t = _shift16(wrap16(_newton_reciprocal(_exp_negative(n, bits + 1)) - _ONE_F2), 2)
    return np.where(x == 0, 0, np.where(negative, wrap16(-t), t))
