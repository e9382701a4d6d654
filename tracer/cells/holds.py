"""What a held recording changes inside the model: `Hold`, one value of one cell held, read
from the command line's `--hold CELL:WHAT:UNITS=VALUE[@STEPS]` by `parse_hold`.

    CELL   the cell's name as `gatetrace inspect` lists it (or the end of it after a `/`,
           when only one cell's name ends so)
    WHAT   a state (`c`, `h`), a gate's value after its activation (`i`, `f`, ... as the
           cell's kind names its gates), or a gate's preactivation (`f.pre`)
    UNITS  `17`, `988,776`, `0-3` (both ends included), or `all` (a ConvLSTM's: its
           channels, each at every position)
    VALUE  a number the units are set to (`0` ablates them), `xF`: multiplied by F, or `mean`:
           each unit set to its mean over another recording of the model (`--means-from RUN`:
           every example and step it recorded), resolved to numbers by `holds_at_means`
    STEPS  the input positions held: `10:` (from 10 on), `3:7` (3 to 6), `5`; default every step

Examples: `rnn/multi_rnn_cell/cell_1/basic_lstm_cell:h:988,776=0` (two units of the second
layer's output ablated), `basic_lstm_cell:f:17=1` (unit 17 never forgets),
`lstm_cell:c:5=x0.5@10:` (its memory halved from step 10 on).

Parsing needs no model: what a hold names is checked against the cells found
(`tracer.values.hold.holding`). A `mean` hold becomes one hold a unit, each at the float32
value of its unit's mean (what the held tensor, float32, is set to), so that a recording's
manifest lists the numbers it held. Imports nothing of TensorFlow.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from recorders.errors import SelectionError

__all__ = ["Hold", "parse_hold", "describe_holds", "holds_at_means"]

FORMAT = "CELL:WHAT:UNITS=VALUE[@STEPS], e.g. 'lstm_cell:h:3,7=0' or 'lstm_cell:f:17=1@10:'"
MAX_UNITS = 2**20  # units a hold may name, in all (no cell is wider)
MAX_STEP = 2**31 - 1  # steps are int32, as a loop counts them
_UNITS = re.compile(r"^(all|\d+(-\d+)?(,\d+(-\d+)?)*)$")
_STEPS = re.compile(r"^(\d*):(\d*)$|^(\d+)$")


@dataclass(frozen=True)
class Hold:
    """Units of one cell's state or gate held at `value` (`scale`: multiplied by it) at the
    input positions [start, stop) (None: open); `units` None: every unit."""

    cell: str
    what: str  # a state, a gate, or a gate + ".pre"
    units: tuple[int, ...] | None
    value: float
    scale: bool = False
    steps: tuple[int | None, int | None] = (None, None)
    mean: bool = False  # each unit at its mean over another recording (`holds_at_means`); value NaN

    @property
    def preactivation(self) -> bool:
        return self.what.endswith(".pre")

    @property
    def name(self) -> str:
        """The state or gate held, without `.pre`."""
        return self.what.removesuffix(".pre")

    def held_at(self, position: int) -> bool:
        start, stop = self.steps
        return (start is None or position >= start) and (stop is None or position < stop)

    def describe(self) -> str:
        """The hold as `--hold` takes it, in one spelling: units sorted, runs as ranges, the
        value exact (`repr` of the float it was parsed to)."""
        units = "all" if self.units is None else _runs(self.units)
        value = "mean" if self.mean else f"x{self.value!r}" if self.scale else repr(self.value)
        start, stop = self.steps
        steps = (
            ""
            if self.steps == (None, None)
            else f"@{'' if start is None else start}:{'' if stop is None else stop}"
        )
        return f"{self.cell}:{self.what}:{units}={value}{steps}"


def _runs(units: Sequence[int]) -> str:
    """`0,1,2,5` -> `0-2,5`."""
    runs: list[list[int]] = []
    for u in units:
        if runs and u == runs[-1][1] + 1:
            runs[-1][1] = u
        else:
            runs.append([u, u])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


def _units(text: str, spec: str) -> tuple[int, ...] | None:
    if not _UNITS.match(text):
        raise SelectionError(
            f"--hold {spec}: expected UNITS as 17, 3,7 or 0-3 (or all), found {text!r}"
        )
    if text == "all":
        return None
    ranges = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        lo, hi = int(first), int(last or first)
        if hi < lo:
            raise SelectionError(f"--hold {spec}: the unit range {part} ends before it starts")
        ranges.append((lo, hi))
    # counted before any is listed: no cell has more units
    if (
        max(hi for _, hi in ranges) >= MAX_UNITS
        or sum(hi - lo + 1 for lo, hi in ranges) > MAX_UNITS
    ):
        raise SelectionError(
            f"--hold {spec}: it names units past {MAX_UNITS - 1}, more than any cell has"
        )
    return tuple(sorted({u for lo, hi in ranges for u in range(lo, hi + 1)}))


def _value(text: str, spec: str) -> tuple[float, bool]:
    if text == "mean":
        return math.nan, False
    scale = text.startswith("x")
    number = text[1:] if scale else text
    try:
        value = float(number)
    except ValueError:
        raise SelectionError(
            f"--hold {spec}: expected VALUE as a number (0 ablates), xF (multiplied by F) or mean, found {text!r}"
        ) from None
    if not math.isfinite(value) or abs(value) > 3.4e38:
        raise SelectionError(
            f"--hold {spec}: the value {text} is not a finite float32; give a finite number"
        )
    return value, scale


def _steps(text: str, spec: str) -> tuple[int | None, int | None]:
    found = _STEPS.match(text)
    if not found:
        raise SelectionError(
            f"--hold {spec}: expected STEPS as 10: (from 10 on), 3:7 (3 to 6) or 5, found {text!r}"
        )
    numbers = [int(g) for g in found.groups() if g]
    if any(n > MAX_STEP for n in numbers):
        raise SelectionError(f"--hold {spec}: steps are numbered 0 to {MAX_STEP}; found {text!r}")
    if found.group(3) is not None:
        return int(found.group(3)), int(found.group(3)) + 1
    start = int(found.group(1)) if found.group(1) else None
    stop = int(found.group(2)) if found.group(2) else None
    if start is not None and stop is not None and stop <= start:
        raise SelectionError(f"--hold {spec}: the steps {text} hold nothing (stop <= start)")
    return (None if start == 0 else start), stop  # `0:` is every step from the first


def parse_hold(spec: str) -> Hold:
    """One `--hold` value (see the module docstring); `SelectionError` naming what is wrong."""
    if not spec.isprintable():
        raise SelectionError(f"--hold {spec!r}: expected {FORMAT}, found a control character")
    body, at, steps = spec.partition("@")
    target, equals, value = body.rpartition("=")
    fields = target.split(":")
    if not equals or len(fields) != 3 or not all(fields) or (at and not steps):
        raise SelectionError(f"--hold {spec!r}: expected {FORMAT}")
    cell, what, units = fields
    if what.count(".") > (1 if what.endswith(".pre") else 0):
        raise SelectionError(
            f"--hold {spec}: expected WHAT as a state (c, h), a gate (i, f, ...) or a gate's preactivation (f.pre), found {what!r}"
        )
    number, scale = _value(value, spec)
    return Hold(
        cell=cell,
        what=what,
        units=_units(units, spec),
        value=number,
        scale=scale,
        steps=_steps(steps, spec) if at else (None, None),
        mean=value == "mean",
    )


def describe_holds(holds: Sequence[Hold]) -> list[str]:
    """What a recording's manifest keeps of its holds (`held`): each as `--hold` takes it."""
    return [h.describe() for h in holds]


def holds_at_means(holds: Sequence[Hold], base: Any) -> tuple[Hold, ...]:
    """`holds` with each `mean` hold replaced by one hold a unit, at the float32 value of that
    unit's mean over every example and step of `base` (a `recorders.Recording` of the same
    model, not held; a ConvLSTM's unit is a channel: over every position too): a state's
    `value`, a gate's `activation`, a `.pre` gate's `preactivation`. The cell is named as the recording names it (or by the end of its name,
    after a `/`, when only one cell's name ends so). `SelectionError`, one line, where `base`
    does not hold what a hold asks."""
    if not any(h.mean for h in holds):
        return tuple(holds)
    where = f"--means-from {base.path}"
    if not base.complete:
        missing = base.unfinished_shards()
        which = f" (shards not finished: {', '.join(missing)})" if missing else ""
        raise SelectionError(
            f"{where}: that recording is not finished{which}, so its means are not over the sequences "
            f"it was given; finish it (record --resume, or record --shard {missing[0] if missing else 'K/N'} "
            "into the same folder) or give a finished one"
        )
    if base.description.get("held"):
        raise SelectionError(
            f"{where}: that recording was made with values held (--hold), so its means are not the "
            "model's own; give a recording made without --hold"
        )
    resolved: list[Hold] = []
    for hold in holds:
        if not hold.mean:
            resolved.append(hold)
            continue
        cell = _named(hold.cell, base.cells, where)
        if hold.preactivation or hold.name not in base.states(cell):
            table, label = "gates", hold.name
            column = "preactivation" if hold.preactivation else "activation"
            kept = base.recorded_gates(cell)
        else:
            table, label, column = "states", hold.name, "value"
            kept = base.states(cell)
        if label not in kept:
            raise SelectionError(
                f"--hold '{hold.describe()}': {where} holds {', '.join(kept) or 'nothing'} of {cell}, "
                f"not {hold.name}; give a recording that holds it"
            )
        values = base.description.get("selection", {}).get("values") or [column]
        if table == "gates" and column not in values:
            raise SelectionError(
                f"--hold '{hold.describe()}': expected {where} to hold {cell}'s {hold.name} {column}s, found "
                f"it recorded with --values {','.join(values)}; record the model again without --hold and "
                f"with --values {column} (or without --values), and give that recording"
            )
        means = _means(base, table, cell, label, column, hold.units)
        for unit, value in means.items():
            if not math.isfinite(value):
                raise SelectionError(
                    f"--hold '{hold.describe()}': unit {unit} of {cell}'s {hold.what} has no finite mean "
                    f"in {where} ({value}); hold it at a number"
                )
            resolved.append(
                Hold(
                    cell=cell,
                    what=hold.what,
                    units=(unit,),
                    value=float(np.float32(value)),
                    steps=hold.steps,
                )
            )
    return tuple(resolved)


def _means(
    base: Any, table: str, cell: str, label: str, column: str, units: Sequence[int] | None
) -> dict[int, float]:
    """Each unit's mean over `base` (`recorders.read.means.unit_means`); a ConvLSTM's unit
    is a channel, held at every position: its mean over every position too (the mean of its
    positions' means: every row holds them all)."""
    from recorders.read.means import unit_means

    conv = base.cell(cell).get("conv")
    if not conv:
        return unit_means(base, table, cell, label, column, units)
    filters, positions = int(conv["filters"]), int(np.prod(conv["positions"]))
    channels = range(filters) if units is None else units
    if channels and max(channels) >= filters:
        raise SelectionError(
            f"{base.path}: {cell}'s {label} has {filters} channels (0 to {filters - 1}); found unit {max(channels)}"
        )
    at = [p * filters + k for k in channels for p in range(positions)]
    means = unit_means(base, table, cell, label, column, at)
    return {k: float(np.mean([means[p * filters + k] for p in range(positions)])) for k in channels}


def _named(name: str, cells: Sequence[str], where: str) -> str:
    """The cell of `cells` named `name`, or the only one whose name ends in `/name`."""
    if name in cells:
        return name
    found = [c for c in cells if c.endswith("/" + name)]
    if len(found) != 1:
        raise SelectionError(
            f"{where}: expected a cell named {name!r} (or ending in /{name}) in that recording, found "
            f"{'several: ' + ', '.join(found) if found else 'its cells: ' + ', '.join(cells)}"
        )
    return found[0]
