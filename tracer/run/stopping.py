"""A recording that stops: Ctrl-C, a batch out of memory or out of time, an input that turns
out unreadable midway. Each says what is kept and how to go on (`--resume`, a smaller
`--batch-size`, a larger `--timeout`); `no_collector_passes` keeps the garbage collector
off the model's objects while recording.
"""

from __future__ import annotations

import gc
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import FrameType
from typing import Any

import numpy as np

from recorders import RecordingWriter
from recorders.errors import FeedError, GatetraceError, RecordingError, RunTimeout
from recorders.write.summary import SummaryWriter
from tracer.run.budget import describe_size

__all__ = ["StopOnCtrlC", "failed_batch", "reading", "no_collector_passes"]


@contextmanager
def no_collector_passes() -> Iterator[None]:
    """While recording, the objects alive before it (the model's graph: hundreds of thousands
    of Python objects) are out of the cyclic garbage collector's sight (`gc.freeze`); its
    passes over them were 6% of a batch's time in the benchmark. What the batches create is
    collected as ever, and everything is in sight again afterwards."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def reading(batches, writer: RecordingWriter | SummaryWriter, settle: Callable[[], None]) -> Any:
    """`batches`, where an input that turns out unreadable midway says what is kept (the
    error is the input's, found only when its rows are read), once `settle` has committed
    the batch in flight."""
    try:
        yield from batches
    except FeedError as err:
        settle()
        kept, flag = writer.kept()
        if flag == "--resume":  # a fixed input is another input: a resume refuses it
            raise FeedError(
                f"{err}; fix the input, then record it into another folder, or {writer.start_again} (a recording "
                "resumes only on the inputs it began with)"
            ) from None
        raise FeedError(
            f"{err}; {kept}: fix the input and rerun{' with ' + flag if flag else ''}"
        ) from None


def failed_batch(
    batch: Mapping, err: Exception, writer: RecordingWriter | SummaryWriter
) -> GatetraceError:
    """The error for a batch that does not fit in memory or ran out of time, with what to do."""
    size = max((len(v) for v in batch.values() if np.ndim(v)), default=0)
    kept, flag = writer.kept()
    then = f" and {flag}" if flag else ""
    # a job of tasks (--workers) resumes only with the batch size it began with
    task = writer.shard.unit > 1
    if isinstance(err, RunTimeout):
        smaller = "" if task else " (or a smaller --batch-size)"
        return RunTimeout(f"{err}; {kept}: rerun with a larger --timeout{smaller}{then}")
    fixed = _fixed_allocation(err, size)
    if fixed:
        return RecordingError(
            f"the model's op {fixed} does not fit in memory, whatever the batch size; {kept}"
        )
    if size <= 1:
        return RecordingError(
            f"running the model on a single sequence does not fit in memory ({type(err).__name__}): the model itself needs "
            f"more than this machine has; {kept}"
        )
    if task:
        return RecordingError(
            f"a batch of {size} sequences does not fit in memory ({type(err).__name__}); {kept}: rerun with fewer "
            f"--workers{then}, or record into a new folder with a smaller --batch-size (a job resumes with the "
            "batch size it began with)"
        )
    return RecordingError(
        f"a batch of {size} sequences does not fit in memory ({type(err).__name__}); {kept}: rerun with a smaller --batch-size{then}"
    )


def _fixed_allocation(err: Exception, batch: int) -> str | None:
    """`NAME, a tensor of [shape] TYPE (SIZE)` when TensorFlow ran out of memory allocating a
    tensor none of whose dimensions is the batch size (a smaller batch would not help)."""
    text = getattr(err, "message", None) or str(err)
    found = re.search(r"OOM when allocating tensor with shape\[([\d,\s]*)\] and type (\w+)", text)
    node = re.search(r"\{\{node ([^}]+)\}\}", text)
    if not found:
        return None
    shape = [int(d) for d in found.group(1).replace(" ", "").split(",") if d]
    if batch in shape:
        return None
    width = {
        "float": 4,
        "double": 8,
        "half": 2,
        "bfloat16": 2,
        "int32": 4,
        "int64": 8,
        "int8": 1,
        "uint8": 1,
        "bool": 1,
    }.get(found.group(2))
    size = int(np.prod(shape, dtype=object)) * width if width else None
    where = node.group(1) if node else "(unnamed)"
    return f"{where}, a tensor of {shape} {found.group(2)}" + (
        f" ({describe_size(size)})" if size else ""
    )


class StopOnCtrlC:
    """While active, the first Ctrl-C only sets `pressed` (the loop stops after the batch
    in flight is written); a second one interrupts at once. Only on the main thread."""

    def __init__(self, announce: bool):
        self.pressed = False
        self._announce = announce
        # the SIGINT handler before, as signal.signal returns it
        self._previous: Callable[[int, FrameType | None], Any] | int | None = None

    def _handler(self, signum, frame) -> None:
        if self.pressed:
            raise KeyboardInterrupt
        self.pressed = True
        if self._announce:
            print(
                "\ngatetrace: stopping after the batch in flight (Ctrl-C again to stop at once)",
                file=sys.stderr,
            )

    def __enter__(self) -> StopOnCtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
