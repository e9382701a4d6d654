"""`gatetrace record --round-bits N`: every float32 value a recording stores rounded to N (1 to
22) of float32's 23 explicit mantissa bits, for fewer bytes a value, and how a recording says so.

A value is rounded once, on the writer's threads, as each row group's columns are cut out of
what was fetched (`recorders.write.writer`), before the statistics its file's footer carries,
the merged statistics and the view's overview are counted from it: they all describe the
values stored. Gate preactivations and activations, their parts, states and the model's
floating outputs are rounded; the weights, an output of integers or booleans, and one
dequantised from integers (a quantised TensorFlow Lite output, (code - zero point) x scale:
exact, at most 256 values for int8, each code recovered from it) are not.

The rounding: to nearest, ties to even, of the value's bits read as an unsigned integer, so
that its 23 - N low bits become zero (a carry out of the mantissa raises the exponent: a
value rounds up into the next binade, or from the largest subnormals to 2^-126). Against the
float32 value an exact recording stores, x:

- a normal x (|x| >= 2^-126): |stored - x| <= 2^-(N+1) |x| (`relative_error`);
- a subnormal x: |stored - x| <= 2^-(N+127), half the step of the bits kept (`subnormal_error`;
  relative to x this is up to the whole value: the smallest subnormals round to zero);
- zeros and infinities are stored as they are; a NaN as the quiet NaN of its sign, without
  its payload (a NaN whose payload lies in the low bits would otherwise become an infinity);
- a finite value never becomes an infinity: one that would round past float32's largest
  finite value is stored as the largest value of N bits, (2 - 2^-N) 2^127, within the bound.

The values stay float32, so every reader (pandas, DuckDB, Polars, Spark) reads them as before;
the zeroed bits take room only where the floats are compressed: a rounded recording's default
compression is `COMPRESSION` (byte-stream-split floats, whose zeroed low bytes compress to
almost nothing; bytes a value measured in docs/recordings.md).

The description (`manifest.json`) says it as `rounding`: `{"mantissa_bits": N,
"relative_error": 2^-(N+1), "subnormal_error": 2^-(N+127)}` (`Rounding.describe`), which
`recorders.write.schema` checks and `Rounding.stray` lets a reader verify value by value
(`recorders.Recording.check`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "MIN_BITS",
    "MAX_BITS",
    "COMPRESSION",
    "Rounding",
    "compression_of",
    "rounding_of",
    "rounds_output",
    "holds_integers",
]

# of float32's 23 explicit mantissa bits, at least one (a NaN needs one: with none it would be
# an infinity) and at most 22 (23 would round nothing)
MIN_BITS, MAX_BITS = 1, 22
COMPRESSION = "zstd"  # a rounded recording's default compression (`--compression`)
_SIGN = np.uint32(0x8000_0000)
_QUIET_NAN = np.uint32(0x7FC0_0000)
_MANTISSA = 0x007F_FFFF
_LARGEST = 0x7F7F_FFFF  # float32's largest finite value
# values rounded at a time: what the rounding holds beside its copy is a few times this, in
# bytes (a row group's column is up to a million values, on each of the writer's threads)
BLOCK = 1 << 16
INTEGERS = ("int", "uint", "bool")  # how the dtype of an output of integers or booleans begins


@dataclass(frozen=True)
class Rounding:
    """Values rounded to `bits` mantissa bits (`MIN_BITS` to `MAX_BITS`; see the module docstring)."""

    bits: int

    def __post_init__(self) -> None:
        if not (isinstance(self.bits, int) and not isinstance(self.bits, bool)) or not (
            MIN_BITS <= self.bits <= MAX_BITS
        ):
            raise ValueError(
                f"mantissa bits {self.bits!r}: expected a whole number from {MIN_BITS} to {MAX_BITS}"
            )

    @property
    def relative_error(self) -> float:
        """The most a normal value moves, relative to itself: 2^-(bits+1)."""
        return 2.0 ** -(self.bits + 1)

    @property
    def subnormal_error(self) -> float:
        """The most a subnormal value (below 2^-126) moves: 2^-(bits+127)."""
        return 2.0 ** -(self.bits + 127)

    @property
    def low_bits(self) -> int:
        """The mask of the bits a stored value holds as zero."""
        return (1 << (23 - self.bits)) - 1

    def kept(self) -> str:
        """The bits kept, in words: "1 mantissa bit", "7 mantissa bits"."""
        return f"{self.bits} mantissa bit{'' if self.bits == 1 else 's'}"

    def describe(self) -> dict[str, Any]:
        """As the description (`manifest.json`) holds it."""
        return {
            "mantissa_bits": self.bits,
            "relative_error": self.relative_error,
            "subnormal_error": self.subnormal_error,
        }

    def words(self) -> str:
        """In words, as every command says it."""
        return (
            f"values rounded to {self.kept()} (--round-bits {self.bits}): each within "
            f"2^-{self.bits + 1} = {self.relative_error:.3g} of its own magnitude (a subnormal within "
            f"2^-{self.bits + 127})"
        )

    def apply(self, values: Any, own: bool = False) -> np.ndarray:
        """`values` (float32, any shape) rounded, as a new C-contiguous float32 array of
        their shape: the values given are never changed (they may be the fetched tensors), but
        with `own`, where they are an array of their own (a writable C-contiguous float32
        array holding its memory, not a view of another's: one made for this call), they are
        rounded in place and returned. Rounded `BLOCK` values at a time, so that what it holds
        beside the values is small."""
        mine = (
            own
            and isinstance(values, np.ndarray)
            and values.dtype == np.float32
            and values.flags.owndata
            and values.flags.writeable
            and values.flags.c_contiguous
        )
        out = values if mine else np.array(values, dtype=np.float32, order="C", copy=True)
        flat = out.reshape(-1)
        for start in range(0, flat.size, BLOCK):
            self._round(flat[start : start + BLOCK])
        return out

    def _round(self, values: np.ndarray) -> None:
        """Round a contiguous float32 block in place."""
        bits = values.view(np.uint32)
        special = None if np.isfinite(values).all() else np.flatnonzero(~np.isfinite(values))
        kept = None if special is None else bits[special]  # (a copy: an index array's)
        # to nearest, ties to even: add half a step less one, and one more where the lowest
        # bit kept is set; then drop the low bits
        step = bits >> np.uint32(23 - self.bits)
        step &= np.uint32(1)
        step += np.uint32((1 << (22 - self.bits)) - 1)
        bits += step
        bits &= np.uint32(~self.low_bits & 0xFFFF_FFFF)
        if not np.isfinite(values).all():  # past the largest finite value: the largest of N bits
            over = np.flatnonzero(~np.isfinite(values))
            bits[over] = (bits[over] & _SIGN) | np.uint32(_LARGEST & ~self.low_bits)
        if special is not None and kept is not None:  # infinities as they were, NaN quiet
            nan = (kept & np.uint32(_MANTISSA)) != 0
            bits[special] = np.where(nan, (kept & _SIGN) | _QUIET_NAN, kept)

    def rounds(self, values: Any) -> Any:
        """`values` as the writer takes them (an array, None, or a callable taking a slice of
        examples), rounded where they are taken: what a callable returns in place where it is
        an array of its own (`apply`), an array given never."""
        if values is None:
            return None
        if callable(values):  # what it returns is made for the call, or a view (then copied)
            return lambda rows: self.apply(values(rows), own=True)
        return lambda rows: self.apply(np.asarray(values)[rows])

    def rounds_parts(self, parts: Callable[[slice], Mapping[str, Any]] | None) -> Any:
        """A gate's parts as the writer takes them (a callable taking a slice of examples and
        returning {part: rows or None}), each rounded where taken."""
        if parts is None:
            return None
        return lambda rows: {
            name: None if a is None else self.apply(a, own=True) for name, a in parts(rows).items()
        }

    def stray(self, values: np.ndarray) -> int:
        """How many of `values` (float32) hold a bit the rounding leaves zero: 0 in a file
        written rounded."""
        bits = np.ascontiguousarray(values, dtype=np.float32).reshape(-1).view(np.uint32)
        return int(np.count_nonzero(bits & np.uint32(self.low_bits)))


def rounding_of(description: Mapping[str, Any]) -> Rounding | None:
    """What a checked description says of its values' rounding (None: stored exactly)."""
    found = description.get("rounding")
    return None if found is None else Rounding(int(found["mantissa_bits"]))


def rounds_output(described: Mapping[str, Any]) -> bool:
    """Whether a recording's values of the output `described` (an entry of the description's
    `outputs`) are rounded: all but those of a model's integers or booleans, or dequantised
    from integers (its `dtype`: "float32 dequantised from int8 (...)"; rounded, its codes
    could no longer be recovered)."""
    dtype = str(described.get("dtype", "float32"))
    return not (holds_integers(described) or " dequantised from " in dtype)


def holds_integers(described: Mapping[str, Any]) -> bool:
    """Whether the output `described` (an entry of the description's `outputs`) is of a
    model's integers or booleans (its `dtype`): stored exactly, every value a whole number."""
    return str(described.get("dtype", "float32")).startswith(INTEGERS)


def compression_of(compression: str | None, rounded: bool) -> str:
    """The compression a recording's part files are written in: `compression`, or where it is
    None the default, `COMPRESSION` for a recording whose values are rounded."""
    from recorders.write.layout import DEFAULT_COMPRESSION

    return compression or (COMPRESSION if rounded else DEFAULT_COMPRESSION)
