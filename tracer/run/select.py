"""What to record: a selection of cells, gates, steps, value columns and examples.

A `Selection` narrows a recording before anything runs: cells outside it are not
fetched, steps outside it are dropped from the fetch plan, examples outside it are
never fed. Ranges are `START:STOP` with Python's meaning (STOP excluded, either end
may be left out).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import TypeVar

from recorders.errors import SelectionError
from tracer.cells.found import AnyCell, Cell

# a graph's cells, or a Keras model's layers: a selection keeps the kind it is given
_Cell = TypeVar("_Cell", bound=AnyCell)

__all__ = ["Selection", "parse_range", "VALUE_COLUMNS", "DEFAULT_VALUES"]

# What `--values` can keep in the gates table: `contributions` adds the preactivation's parts
# (input, recurrent, bias, peephole, recurrent_bias: `tracer.values.parts`).
VALUE_COLUMNS = ("preactivation", "activation", "contributions")
DEFAULT_VALUES = ("preactivation", "activation")


def parse_range(text: str, what: str) -> tuple[int | None, int | None]:
    """`"0:10"` -> (0, 10); `"5:"` -> (5, None); `"7"` -> (7, 8)."""
    try:
        if ":" not in text:
            k = int(text)
            return k, k + 1
        start, stop = text.split(":")
        return (int(start) if start else None, int(stop) if stop else None)
    except ValueError:
        raise SelectionError(
            f"--{what} {text!r}: expected START:STOP, e.g. --{what} 0:10"
        ) from None


@dataclass(frozen=True)
class Selection:
    """cells: glob patterns on cell names; gates: labels; steps, examples: [start, stop)."""

    cells: tuple[str, ...] = ()
    gates: tuple[str, ...] = ()
    steps: tuple[int | None, int | None] = (None, None)
    values: tuple[str, ...] = DEFAULT_VALUES
    examples: tuple[int | None, int | None] = (None, None)

    def __post_init__(self) -> None:
        unknown = [v for v in self.values if v not in VALUE_COLUMNS]
        if unknown or not self.values:
            raise SelectionError(
                f"--values {','.join(self.values)}: expected some of {', '.join(VALUE_COLUMNS)}, e.g. --values {','.join(VALUE_COLUMNS)}"
            )

    @property
    def parts(self) -> bool:
        """Whether the preactivations' parts are recorded (`--values ...,contributions`)."""
        return "contributions" in self.values

    def describe(self) -> dict:
        return {
            "cells": list(self.cells),
            "gates": list(self.gates),
            "steps": list(self.steps),
            "values": list(self.values),
            "examples": list(self.examples),
        }

    def apply(self, cells: Sequence[_Cell]) -> list[_Cell]:
        """The selected cells, each keeping only its selected steps."""
        chosen = [
            c for c in cells if not self.cells or any(fnmatchcase(c.name, p) for p in self.cells)
        ]
        if not chosen:
            names = ", ".join(c.name for c in cells)
            raise SelectionError(
                f"--cells {','.join(self.cells)} matches no cell; the cells are {names}"
            )
        if self.gates:
            known = {g for c in chosen for g in c.gates}
            missing = [g for g in self.gates if g not in known]
            if missing:
                raise SelectionError(
                    f"--gates: no selected cell has gate {', '.join(missing)}; their gates are {', '.join(sorted(known))}"
                )
            chosen = [c for c in chosen if set(c.gates) & set(self.gates)]
        lo, hi = self.steps
        out: list[_Cell] = []
        for c in chosen:
            # a replayed or fused cell's steps are known per batch, and those of one that reads
            # its input reversed by lengths are in input order only per batch: see
            # FetchPlan(steps=...)
            if not isinstance(c, Cell) or c.path != "fetch" or c.reverse_lengths is not None:
                out.append(c)
                continue
            steps = tuple(
                s
                for s in c.steps
                if (lo is None or s.position >= lo) and (hi is None or s.position < hi)
            )
            if not steps:
                raise SelectionError(
                    f"--steps {lo}:{hi} selects no step of {c.name}, whose steps are 0:{len(c.steps)}"
                )
            out.append(replace(c, steps=steps))
        return out

    def keeps_gate(self, gate: str) -> bool:
        return not self.gates or gate in self.gates
