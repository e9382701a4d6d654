"""What the JSON files of a recording must hold, checked before anything is taken from them.

A recording may come from anyone (a shared drive, an archive attached to a bug report), so
its `manifest.json`, its progress files (`_progress/shard-K-of-N.json`, whose own fields
`recorders.write.progress` checks) and a view's `--tokens` file are untrusted input:

- `parse_json` parses text of a bounded size and nesting (`MAX_DEPTH` levels: Python's
  parser would otherwise recurse once per level and die of a 100,000-deep list);
- `description_problem` says why a description (the manifest, or a progress file's
  `description`) is not of the form the writer writes: an object whose `cells` is a list
  of cells, each with a unique `name` and, where present, `units` (1 to `MAX_UNITS`), different `gates`, different `states`, a `kind`, `steps` (a
  count, or null where the model left the length open) and `path`; `source` (the model's
  `path` and `format`), `selection.values` and `.steps`, `shards`, `examples`, `rows`, `held`
  (what `--hold` held inside the model, as text), `outputs` (the model's outputs recorded:
  each one's name, units, and steps where it is a sequence) and `rounding` (`--round-bits`: the
  mantissa bits kept and the errors they allow, `recorders.write.rounding`) where present.

Anything else the writer puts in a description (a cell's tensors, the feeds, the digests of
the inputs) is shown or compared, never used to reach a file or size an array, so only its
JSON types are bounded (`recorders.read.compare` takes digests that are not text as none).
"""

from __future__ import annotations

import json
import re
from typing import Any, TypedDict

from recorders.errors import RecordingError
from recorders.write.rounding import MAX_BITS, MIN_BITS, Rounding

__all__ = [
    "MAX_DEPTH",
    "MAX_UNITS",
    "MAX_JSON_BYTES",
    "RecordingSummary",
    "parse_json",
    "description_problem",
]


class RecordingSummary(TypedDict, total=False):
    """What a finished shard says of itself (`RecordingWriter.close`, `tracer.record`): the
    description `manifest.json` holds, with this shard's counts and, from `tracer.record`,
    the batch size chosen."""

    gatetrace_version: str
    kind: str  # "summary" for a summary recording
    source: dict[str, Any]  # the model: path, format
    cells: list[dict[str, Any]]  # each cell's description
    feeds: dict[str, list[int]]  # each feed's shape
    selection: dict[str, Any]
    skipped: list[dict[str, str]]  # cells the feeds do not reach: cell, the placeholder it needs
    not_recorded: list[str]  # Keras layers inside wrappers gatetrace does not record through
    carry_state: dict[str, int]
    summary: dict[str, Any]  # a summary's bins and thresholds
    global_step: int  # a step logged by the TF1 hook
    examples: int  # complete in this shard
    examples_this_run: int  # fewer than `examples` after a resume
    rows: dict[str, int]  # by table: gates, states, weights
    shard: list[int]  # [K, N]
    complete: bool  # whether every shard is finished
    batch: dict[str, Any]  # the batch size `tracer.record` chose, and why


MAX_DEPTH = 32  # a description nests 6 levels deep (cells, a cell, first_step, its tensors)
MAX_UNITS = 2**24  # units of one cell (a layer of 16 million units: far beyond any RNN cell)
MAX_STEPS = 2**31  # int32, the type of the step column
MAX_JSON_BYTES = 256 * 2**20  # a manifest of thousands of cells is a few megabytes
_MAX_NAMES = 64  # gates or states of one cell (TensorFlow's cells have at most 4 and 2)
_MAX_COUNT = 2**53  # examples and rows: exact in every JSON reader
_MISSING = object()  # a key that is not there, as `_shown` shows it
# a JSON string, its loop unrolled (a run of plain characters at a time: 11 ms on a merged
# statistics file of 1.6 MB of base64, where one character at a time took 0.38 s)
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def parse_json(data: bytes | str, what: str) -> Any:
    """The JSON value of `data`, read from `what` (a file's name, for the message): RecordingError
    if it is larger than `MAX_JSON_BYTES`, nested deeper than `MAX_DEPTH`, or not JSON."""
    if len(data) > MAX_JSON_BYTES:
        raise RecordingError(
            f"{what} holds {len(data):,} bytes, more than the {MAX_JSON_BYTES:,} gatetrace reads from a JSON file"
        )
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as err:
        raise RecordingError(
            f"{what} is not JSON: it is not UTF-8 text ({err.reason} at byte {err.start})"
        ) from None
    depth = _depth(text)
    if depth > MAX_DEPTH:
        raise RecordingError(
            f"{what} nests {depth} levels deep; gatetrace writes and reads at most {MAX_DEPTH}"
        )
    try:
        return json.loads(text)
    except ValueError as err:
        raise RecordingError(f"{what} is not JSON: {err}") from None


def _depth(text: str) -> int:
    """How deep the lists and objects of JSON text nest (strings, and the brackets in them, left out)."""
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _count(x: Any, low: int, high: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and low <= x <= high


def _names(x: Any, least: int) -> bool:
    """A list of `least` to `_MAX_NAMES` different non-empty strings."""
    return (
        isinstance(x, list)
        and least <= len(x) <= _MAX_NAMES
        and all(isinstance(n, str) and n for n in x)
        and len(set(x)) == len(x)
    )


def _cell_problem(k: int, cell: Any) -> str | None:
    if not isinstance(cell, dict):
        return f"cells[{k}] is {type(cell).__name__}, not an object"
    name = cell.get("name", _MISSING)
    if not (isinstance(name, str) and name):
        return f"cells[{k}] has no name (a non-empty string)"
    checks = (
        ("units", lambda x: _count(x, 1, MAX_UNITS), f"a count of 1 to {MAX_UNITS:,}"),
        # (none: a cell of your own that applies no nonlinearity, recorded by its states)
        ("gates", lambda x: _names(x, 0), f"a list of up to {_MAX_NAMES} different names"),
        ("states", lambda x: _names(x, 0), f"a list of up to {_MAX_NAMES} different names"),
        ("kind", lambda x: isinstance(x, str), "a string"),
        (
            "steps",
            lambda x: x is None or _count(x, 1, MAX_STEPS),
            f"null or a count of 1 to {MAX_STEPS:,}",
        ),
        ("path", lambda x: x is None or isinstance(x, str), "null or a string"),
    )
    for key, ok, expected in checks:
        if key in cell and not ok(cell[key]):
            return f"cell {name!r}: {key} is {_shown(cell[key])}, expected {expected}"
    return None


def description_problem(d: Any) -> str | None:
    """Why `d` is not a recording's description as the writer writes it (None if it is): an
    object whose `cells` are objects with different names, every other key listed in the
    module docstring of the right type where present (`gatetrace record` writes them all;
    a description given to `RecordingWriter` may hold names only)."""
    if not isinstance(d, dict):
        return f"expected a JSON object, found {type(d).__name__}"
    cells = d.get("cells", _MISSING)
    if not isinstance(cells, list):
        return f"cells is {_shown(cells)}, expected a list of cells"
    for k, cell in enumerate(cells):
        why = _cell_problem(k, cell)
        if why:
            return why
    names = [c["name"] for c in cells]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        return f"the cell {twice!r} is listed twice"
    source = d.get("source", {})
    if not (
        isinstance(source, dict)
        and all(isinstance(source.get(k, ""), str) for k in ("path", "format", "runtime"))
    ):
        return (
            f"source is {_shown(source)}, expected an object with the model's path and format (and "
            "the runtime that ran it, as text)"
        )
    if not (d.get("gatetrace_version") is None or isinstance(d.get("gatetrace_version"), str)):
        return f"gatetrace_version is {_shown(d.get('gatetrace_version'))}, expected a string"
    selection = d.get("selection", {})
    if not (isinstance(selection, dict) and _names(selection.get("values", []), 0)):
        return "selection.values is not a list of names"
    steps = selection.get("steps", [None, None])
    if not (
        isinstance(steps, list)
        and len(steps) == 2
        and all(s is None or _count(s, -MAX_STEPS, MAX_STEPS) for s in steps)
    ):
        return f"selection.steps is {_shown(steps)}, expected [START, STOP] (null for open)"
    for key in ("shards", "examples"):
        if key in d and not _count(d[key], 1 if key == "shards" else 0, _MAX_COUNT):
            return f"{key} is {_shown(d[key])}, expected a count"
    rows = d.get("rows", {})
    if not (isinstance(rows, dict) and all(_count(v, 0, _MAX_COUNT) for v in rows.values())):
        return "rows is not an object of row counts"
    held = d.get("held", ["-"])
    if not (
        isinstance(held, list)
        and 1 <= len(held) <= _MAX_NAMES
        and all(isinstance(h, str) and h and h.isprintable() for h in held)
    ):
        return f"held is {_shown(held)}, expected the values held, as a list of printable text"
    if "rounding" in d:
        why = _rounding_problem(d["rounding"])
        if why:
            return why
    if "means_from" in d:
        why = _means_from_problem(d["means_from"])
        if why:
            return why
    if "outputs" in d:
        return _outputs_problem(d["outputs"])
    return None


def _means_from_problem(means_from: Any) -> str | None:
    """Why a description's `means_from` (the recording `--means-from` took the held means from:
    its `path`, and its `rounding` where it was rounded) is not as the writer writes it."""
    if not (
        isinstance(means_from, dict)
        and set(means_from) <= {"path", "rounding"}
        and isinstance(means_from.get("path"), str)
        and 0 < len(means_from["path"]) <= 4096
        and means_from["path"].isprintable()
    ):
        return f"means_from is {_shown(means_from)}, expected the recording the means came from (its path, as printable text)"
    if "rounding" in means_from:
        why = _rounding_problem(means_from["rounding"])
        if why:
            return f"means_from.{why}"
    return None


def _rounding_problem(rounding: Any) -> str | None:
    """Why a description's `rounding` is not as the writer writes it: the mantissa bits kept
    (`MIN_BITS` to `MAX_BITS`) and the errors they allow (`Rounding.describe`)."""
    if not isinstance(rounding, dict):
        return f"rounding is {_shown(rounding)}, expected an object (the mantissa bits kept)"
    bits = rounding.get("mantissa_bits", _MISSING)
    if not _count(bits, MIN_BITS, MAX_BITS):
        return (
            f"rounding.mantissa_bits is {_shown(bits)}, expected a whole number from {MIN_BITS} "
            f"to {MAX_BITS}"
        )
    expected = Rounding(bits).describe()
    if rounding != expected:
        return (
            f"rounding is {json.dumps(rounding)[:200]}, expected {json.dumps(expected)} (the "
            f"errors {Rounding(bits).kept()} allow)"
        )
    return None


def _outputs_problem(outputs: Any) -> str | None:
    """Why a description's `outputs` is not a list of the model's outputs as the writer lists
    them: each an object with a different `name`, its `units` and whether it is a `sequence`
    (then with its `steps`)."""
    if not isinstance(outputs, list) or not 1 <= len(outputs) <= _MAX_NAMES:
        return f"outputs is {_shown(outputs)}, expected a list of the model's outputs"
    for k, o in enumerate(outputs):
        if not (
            isinstance(o, dict)
            and isinstance(o.get("name"), str)
            and 0 < len(o["name"]) <= 4096
            and o["name"].isprintable()
            and _count(o.get("units"), 1, MAX_UNITS)
            and isinstance(o.get("sequence"), bool)
            and (not o["sequence"] or o.get("steps") is None or _count(o["steps"], 1, MAX_STEPS))
        ):
            return (
                f"outputs[{k}] is {_shown(o)}, expected an object with its name, units and whether it is a "
                "sequence (and its steps)"
            )
    names = [o["name"] for o in outputs]
    if len(set(names)) != len(names):
        return "an output is listed twice"
    return None


def _shown(x: Any) -> str:
    """A value as an error shows it: short."""
    if x is _MISSING:
        return "missing"
    text = (
        json.dumps(x)
        if not isinstance(x, (dict, list))
        else type(x).__name__.replace("dict", "an object").replace("list", "a list")
    )
    return text if len(text) <= 40 else text[:37] + "..."
