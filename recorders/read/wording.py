"""How gatetrace words what a recording holds, one function a thing, for every command and
view that says it:

- `origin`: where a cell's values came from, read from its description in the manifest (its
  `path`, and for a replay its `numbers`): the runtime's own tensors (`fetched`, `from its
  loop`, `fused`, `interpreter`), or gatetrace's replay of the cell from its weights
  (`replayed`, `hybrid kernel replayed`, `integer kernel replayed`). The labels are those
  `gatetrace inspect MODEL` says of a cell before it is recorded;
- `held`: what a recording held inside the model while it ran (`gatetrace record --hold`), in
  one line, or None for a recording of the model's own computation;
- `rounding`: how a recording's values were rounded (`gatetrace record --round-bits`) and the
  error that allows, in one line, or None for values stored exactly;
- `ranges`: example ranges, `0:64, 128:192` (`none` where there are none);
- `NONE`: the one word for "nothing here" in a table of text (no step beyond, no value).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from recorders.write.rounding import rounding_of

__all__ = ["NONE", "Origin", "origin", "held", "means_from", "rounding", "ranges"]

NONE = "none"


@dataclass(frozen=True)
class Origin:
    """Where a cell's values came from: `label`, a few words for a table; `words`, what they
    mean; `own`, whether they are the runtime's own tensors (False for a replay, and where the
    description does not say); `path`, the description's own word for it (None: not said)."""

    path: str | None
    label: str
    words: str
    own: bool

    @property
    def replayed(self) -> bool:
        """Whether gatetrace computed the values from the cell's weights (a replay)."""
        return self.path == "replay"


# path: (label, words), for the values a runtime computed itself
_OWN = {
    "fetch": ("fetched", "the runtime's own gate tensors: the graph's gate ops, fetched"),
    "loop": (
        "from its loop",
        "the runtime's own gate tensors: its while loop rewritten to emit them at every step",
    ),
    "fused": (
        "fused",
        "the fused op's own outputs (its preactivations recomputed from its inputs and weights)",
    ),
    "interpreter": (
        "interpreter",
        "the interpreter's own tensors: its WHILE loop run an iteration at a time",
    ),
}
_NOT_OWN = "not the runtime's own gate tensors"


def origin(cell: Mapping[str, Any]) -> Origin:
    """Where the values of the cell described by `cell` (a manifest's cell) came from."""
    path = cell.get("path")
    if path in _OWN:
        label, words = _OWN[path]
        return Origin(path, label, words, True)
    if path == "replay":
        numbers = str(cell.get("numbers") or "")
        if "integer kernel" in numbers:
            return Origin(
                path,
                "integer kernel replayed",
                "gatetrace's replay of the op's integer kernel on the file's codes (equal to the "
                f"op's outputs code for code), {_NOT_OWN}",
                False,
            )
        if "hybrid kernel" in numbers:
            return Origin(
                path,
                "hybrid kernel replayed",
                "gatetrace's replay of the op's hybrid kernel on the file's int8 weights (checked "
                f"against the op's outputs), {_NOT_OWN}",
                False,
            )
        if cell.get("held") is True:  # `--hold` of a Keras layer: the layer returned the replay
            return Origin(
                path,
                "replayed with holds",
                "gatetrace's replay of the cell from its weights with the holds in it, which the layer "
                f"returned in place of what it computed (the layers after it read it), {_NOT_OWN}",
                False,
            )
        return Origin(
            path,
            "replayed",
            f"gatetrace's replay of the cell from its weights (checked against the model's outputs), {_NOT_OWN}",
            False,
        )
    if path is None:
        return Origin(None, "not said", "its description does not say", False)
    return Origin(str(path), str(path), f"{path}, a way gatetrace does not know", False)


def held(description: Mapping[str, Any]) -> str | None:
    """What a recording's `description` (its manifest, checked by
    `recorders.write.schema.description_problem`) says was held inside the model while it
    ran, in one line; None where nothing was (the model's own computation)."""
    holds = description.get("held")
    if not holds:
        return None
    return (
        f"values held inside the model ({'; '.join(holds)}): not the model's own computation, "
        "later steps and layers computed from the held values"
    )


def means_from(description: Mapping[str, Any]) -> str | None:
    """Where a checked `description` says its held means came from (`--means-from RUN`), and,
    where RUN's values were rounded, the error that leaves in the means, in one line; None where
    it holds no means."""
    found = description.get("means_from")
    if not found:
        return None
    rounded = rounding_of(found)
    if rounded is None:
        return f"each unit's mean over {found['path']} (stored exactly)"
    return (
        f"each unit's mean over {found['path']}, whose values were rounded to {rounded.kept()} "
        f"(--round-bits {rounded.bits}): each value within 2^-{rounded.bits + 1} = {rounded.relative_error:.3g} "
        "of its own magnitude, so each mean within that times the mean of its unit's magnitudes"
    )


def rounding(description: Mapping[str, Any]) -> str | None:
    """How a recording's `description` (checked by `recorders.write.schema.description_problem`)
    says its values were rounded, and the error that allows, in one line; None where they are
    stored exactly."""
    found = rounding_of(description)
    return None if found is None else found.words()


def ranges(pairs: Sequence[Sequence[int]]) -> str:
    """Example ranges [start, stop) as `gatetrace inspect` prints them: `0:64, 128:192`."""
    return ", ".join(f"{a}:{b}" for a, b in pairs) or NONE
