"""The exception classes of gatetrace.

Every error a user can cause derives from `GatetraceError`; the CLI turns it into one
line on stderr and exit code 2. They live here, in the TensorFlow-free half of the
project, so that `recorders` and `tracer` share them, with how their messages name an
option (`option`): a flag on the command line (`--overwrite`), a keyword in Python
(`overwrite=True`), as `options_as` says for the code it runs.
"""

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "GatetraceError",
    "ModelFormatError",
    "NoCellFoundError",
    "GraphPatternError",
    "FeedError",
    "SelectionError",
    "MemoryBudgetError",
    "OutputExistsError",
    "RecordingError",
    "Interrupted",
    "UnsafeGraphError",
    "ReplayMismatchError",
    "RunTimeout",
    "listing",
    "install_hint",
    "option",
    "options_as",
]

# how messages name options: "python" (keywords of the library's functions) or "command line"
_OPTIONS_AS: contextvars.ContextVar[str] = contextvars.ContextVar(
    "gatetrace_options_as", default="python"
)


@contextmanager
def options_as(way: str) -> Iterator[None]:
    """Within the block, messages name options as `way` does ("command line" or "python",
    the default): the CLI runs its commands so."""
    if way not in ("command line", "python"):
        raise ValueError(f"options_as({way!r}): expected 'command line' or 'python'")
    token = _OPTIONS_AS.set(way)
    try:
        yield
    finally:
        _OPTIONS_AS.reset(token)


def option(name: str, value: object = None) -> str:
    """Option `name` (with `value`, where it takes one) as the user gives it: `--out run1` or
    `--overwrite` on the command line, `out='run1'` or `overwrite=True` in Python."""
    if _OPTIONS_AS.get() == "command line":
        flag = "--" + name.replace("_", "-")
        return flag if value is None else f"{flag} {value}"
    return f"{name}=True" if value is None else f"{name}={str(value)!r}"


def listing(items: list[str], most: int) -> str:
    """`a, b, c and 4 more`: the first `most` of `items`, for a one-line error."""
    return ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most else "")


def install_hint(extra: str) -> str:
    """The pip command that adds the optional `extra` to gatetrace as it was installed: from a
    folder (a clone, `pip install ".[test]"`) by that folder, else by name; the name alone fails
    for whoever installed from a clone."""
    import json
    from importlib.metadata import PackageNotFoundError, distribution
    from pathlib import Path
    from urllib.parse import unquote, urlparse

    folder = None
    try:
        described = distribution("gatetrace").read_text("direct_url.json")
        origin = json.loads(described) if described else {}
        if "dir_info" in origin and str(origin.get("url", "")).startswith("file://"):
            folder = unquote(urlparse(origin["url"]).path)
    except (PackageNotFoundError, ValueError, OSError):
        pass
    here = Path(__file__).resolve().parents[1]  # a source tree (an editable install, or none)
    if folder is None and (here / "setup.cfg").is_file():
        folder = str(here)
    return f'pip install "{folder}[{extra}]"' if folder else f'pip install "gatetrace[{extra}]"'


class GatetraceError(Exception):
    """Base class: a problem with the user's input, model or output location."""


class ModelFormatError(GatetraceError):
    """The model path is missing or in no format gatetrace reads."""


class NoCellFoundError(GatetraceError):
    """The graph holds no RNN cell gatetrace recognises."""


class GraphPatternError(GatetraceError):
    """A cell was found but part of its structure is not what its TensorFlow class builds."""


class FeedError(GatetraceError):
    """A feed names no placeholder, or its value does not fit the placeholder."""


class SelectionError(GatetraceError):
    """A selection (cells, gates, steps, values, examples) that matches nothing or is malformed."""


class MemoryBudgetError(SelectionError):
    """A read would take more memory than the reader's budget (`Recording(path, memory=...)`):
    it keeps `what`, the bytes it would take (`size`) and the budget (`memory`), so that a
    caller can say what works for it (`advised`)."""

    def __init__(self, what: str, size: int, memory: int, advice: str):
        super().__init__(
            f"{what} would take {size:,} bytes, more than the memory budget of {memory:,}: {advice}"
        )
        self.what, self.size, self.memory = what, size, memory

    def advised(self, advice: str) -> "MemoryBudgetError":
        """The same error, with `advice` as what to do."""
        return MemoryBudgetError(self.what, self.size, self.memory, advice)


class OutputExistsError(GatetraceError):
    """The output location exists and is not empty, and overwriting was not asked for."""


class RecordingError(GatetraceError):
    """Writing a recording failed; what was finished before stays, marked complete."""


class Interrupted(GatetraceError):
    """The user stopped a recording (Ctrl-C); it can be resumed."""


class UnsafeGraphError(GatetraceError):
    """Running the graph would execute ops outside the allowlist (files, Python, printing, network)."""


class ReplayMismatchError(GatetraceError):
    """A cell replayed in numpy does not reproduce the outputs or final state of its while loop."""


class RunTimeout(GatetraceError):
    """Running the model took longer than the time limit (`--timeout`) and was cancelled."""
