"""The model's own outputs (`--outputs`): which dimension of each holds the examples and which
the steps, and their values as the recording stores them.

An output is [batch], [batch, units], or a sequence, [batch, steps, units] or [steps,
batch, units] (time-major). Its sizes alone cannot say which: steps as many as the
examples fed look the same either way. `watch` runs the outputs on two batch sizes (the
first fed sequence twice, then three times) and `tell` takes as the examples' dimension
the one that follows the number fed, refusing, in one line, an output with none or with
two. An input that fixes the batch size can be fed no other: its outputs are run on one
batch, and the one dimension of that size is the examples' (two such: refused, but for a
batch of one example, whose one step reads the same either way). `Output.rows` then gives
a batch's values as [examples, steps, units] float32, checked against what was told.

`watch` runs whatever it is given: a graph's session (`tracer.values.fetch`), a Keras
model's call (`tracer.values.keras`); a TensorFlow Lite file, which gatetrace runs only at
the batch it allocates, is told from that batch's shapes (`tracer.values.returned`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from recorders.errors import SelectionError
from tracer.inputs.feeds import batches, count_sequences, fixed_size

__all__ = ["Output", "Seen", "Fixing", "PLACEHOLDERS", "watch", "tell"]

WATCHED = (2, 3)  # the batch sizes an output is run on to tell its examples' dimension


@dataclass(frozen=True)
class Seen:
    """One run of the outputs: how many examples were fed, and each output's shape."""

    examples: int
    shapes: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Output:
    """A recorded output: its tensor's `name`, `units` (1 for [batch]), `dtype`, the
    dimension holding the examples (`batch`), the one holding the steps (`steps`; None
    where it is not a sequence) and how many steps the graph fixes (`length`; None where
    it leaves them open or it is not a sequence)."""

    name: str
    units: int
    dtype: str
    batch: int = 0
    steps: int | None = None
    length: int | None = None

    def describe(self) -> dict[str, Any]:
        """The manifest's entry: name, units, whether it is a sequence (and its steps where
        the graph fixes them), dtype (stored as float32: `rows` refuses what float32 cannot
        hold)."""
        entry: dict[str, Any] = {
            "name": self.name,
            "units": self.units,
            "sequence": self.steps is not None,
            "dtype": self.dtype,
        }
        if self.length is not None:
            entry["steps"] = self.length
        return entry

    def step_count(self, value: np.ndarray) -> int:
        """How many steps a fetched `value` holds (1 where it is not a sequence)."""
        return 1 if self.steps is None else int(np.shape(value)[self.steps])

    def rows(self, value: Any, examples: int, rows: slice = slice(None)) -> np.ndarray:
        """The fetched `value` of a batch of `examples` as [examples, steps, units] float32, the
        examples `rows` of it. SelectionError where it is not as told, or holds what float32
        cannot."""
        value = np.asarray(value)
        if value.ndim <= self.batch or value.shape[self.batch] != examples:
            where = "first" if self.batch == 0 else "second"
            raise SelectionError(
                f"--outputs {self.name}: its {where} dimension held the examples when it was first run, but "
                f"its shape is {list(value.shape)} on a batch of {examples}: name an output whose {where} "
                "dimension is the examples on every batch"
            )
        if value.dtype != np.float32 and value.size:
            _exact_in_float32(self.name, value)
        if self.batch:
            value = np.moveaxis(value, self.batch, 0)
        value = value[rows]
        if value.ndim == 1:
            value = value[:, None]
        if value.ndim == 2:
            value = value[:, None, :]
        return np.ascontiguousarray(value, dtype=np.float32)


def watch(
    names: Sequence[str],
    feed_dict: Mapping[Any, Any],
    run: Callable[[dict[Any, Any]], Sequence[Any]],
) -> list[Seen]:
    """Run the outputs (named `names` to the user; `run` gives their values on a batch of
    feeds) on the first fed sequence, twice and three times over (`WATCHED`); where an input
    fixes the batch size, once on a batch of that size; where no sequence is fed, once on the
    empty batch. SelectionError where nothing fed has rows to count examples by."""
    n = count_sequences(feed_dict)
    if n is None:
        raise SelectionError(
            f"--outputs {names[0]}: nothing fed holds rows of examples (only scalars), so which dimension "
            "of an output holds the examples cannot be told: feed the tensor the model reads its examples "
            "from (--feed NAME=FILE.npy), or leave --outputs out"
        )
    _, _, first = next(batches(feed_dict, 1, [(0, min(n, 1))]))
    fed = (
        [first]
        if fixed_size(feed_dict) or n == 0
        else [
            {t: v if np.ndim(v) == 0 else np.repeat(v, k, axis=0) for t, v in first.items()}
            for k in WATCHED
        ]
    )
    seen = []
    for feeds in fed:
        examples = max(len(v) for v in feeds.values() if np.ndim(v))
        got = run(feeds)
        seen.append(Seen(examples, tuple(tuple(np.shape(v)) for v in got)))
    return seen


@dataclass(frozen=True)
class Fixing:
    """How a refusal names what fixes the batch size (`what`, as in "the batch size the
    model's placeholders fix") and what else works (`instead`: None where only another
    output does)."""

    what: str
    instead: str | None = None


PLACEHOLDERS = Fixing(
    "the model's placeholders fix",
    "save the model with its placeholders' batch dimension open (None), which gatetrace feeds "
    "two batch sizes to tell them apart",
)


def tell(
    name: str,
    shape: Sequence[int | None],
    dtype: str,
    seen: Sequence[Seen],
    k: int,
    fixing: Fixing = PLACEHOLDERS,
) -> Output:
    """Output number `k` of `seen`, of the static `shape` and `dtype` (named `name` to the
    user): the dimension that followed the examples fed in every run is the examples' (of the
    first two, for a sequence), the other the steps'. SelectionError, one line, where none
    did or (a sequence) both did; where the batch size was fixed (`fixing` says by what),
    both may be only where it was one example, of one step either way."""
    rank = len(shape)
    shapes = [(s.examples, s.shapes[k]) for s in seen]
    candidates = (0, 1) if rank == 3 else (0,)
    follow = [a for a in candidates if all(shape[a] == n for n, shape in shapes)]
    varied = len({n for n, _ in shapes}) > 1
    ran = "its shape is " + " and ".join(
        f"{list(shape)} for {n} example{'' if n == 1 else 's'}" for n, shape in shapes
    )
    if not follow and rank != 3:
        raise SelectionError(
            f"--outputs {name}: its first dimension is not the number of examples ({ran}): "
            "name an output whose rows are the examples"
        )
    if not follow:
        raise SelectionError(
            f"--outputs {name}: neither its first nor its second dimension is the number of examples "
            f"({ran}): name an output of [batch, steps, units] or [steps, batch, units]"
        )
    if len(follow) > 1 and varied:
        raise SelectionError(
            f"--outputs {name}: both its first and its second dimension are the number of examples "
            f"({ran}): name an output with one dimension of examples"
        )
    if len(follow) > 1 and shapes[0][0] != 1:
        fixed = shapes[0][0]
        instead = f", or {fixing.instead}" if fixing.instead else ""
        raise SelectionError(
            f"--outputs {name}: its first two dimensions are both {fixed}, the batch size {fixing.what}, "
            f"so which of them holds the examples cannot be told: name an output whose steps are "
            f"not {fixed}{instead}"
        )
    batch = follow[0]
    steps = None if rank != 3 else 1 - batch
    length = None if steps is None else shape[steps]
    return Output(
        name,
        units=int(last) if rank > 1 and (last := shape[-1]) is not None else 1,
        dtype=dtype,
        batch=batch,
        steps=steps,
        length=None if length is None else int(length),
    )


def _exact_in_float32(name: str, value: np.ndarray) -> None:
    """Refuse an output whose values the float32 `value` column cannot hold: an integer past
    2^24 (rounded), a finite number past float32's range (made infinite)."""
    if value.dtype.kind in "iu":
        top = (
            int(np.abs(value.astype(np.int64)).max())
            if value.dtype.kind == "i"
            else int(value.max())
        )
        if top > 2**24:
            raise SelectionError(
                f"--outputs {name}: it holds the integer {top}, which the recording's float32 value "
                "column would round (integers up to 2^24 are exact): name an output of smaller numbers"
            )
    elif value.dtype.kind == "f" and value.dtype.itemsize > 4:
        finite = value[np.isfinite(value)]
        if finite.size and np.abs(finite).max() > np.finfo(np.float32).max:
            raise SelectionError(
                f"--outputs {name}: it holds {np.abs(finite).max():.6g}, past float32's range, which the "
                "recording's float32 value column would make infinite"
            )
