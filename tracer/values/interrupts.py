"""Long calls into a runtime that cannot be cancelled, made stoppable; the process ended
after Ctrl-C where such a call may still run. Imports no TensorFlow.

`stoppable(call, timeout, what)` runs `call` (TensorFlow Lite's interpreter, which releases
the GIL while it runs) on a worker thread while the main thread waits in short steps, where
Ctrl-C reaches it; after `timeout` seconds it raises RunTimeout. The call is then abandoned.
The command line arms `end_process_after_interrupt`: once a Ctrl-C has interrupted such a
call (or a `Session.run`: `tracer.values.running`), the process ends within that many
seconds whatever the runtime still does (a library caller's process, a notebook's kernel,
is never ended).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from recorders.errors import RunTimeout

__all__ = [
    "stoppable",
    "end_process_after_interrupt",
    "after_interrupt",
    "interrupted_run_pending",
    "INTERRUPT_EXIT",
]

INTERRUPT_EXIT = 130  # the exit code of a process ended by Ctrl-C
_hard_exit: tuple[float, str] | None = None  # (seconds, last words): set by the command line only
_armed = threading.Event()


def end_process_after_interrupt(seconds: float, message: str) -> None:
    """Once a Ctrl-C interrupts a run, end the process within `seconds`, printing `message`
    on stderr if it has not ended by itself by then (for the command line)."""
    global _hard_exit
    _hard_exit = (seconds, message)


def interrupted_run_pending() -> bool:
    """Whether a run was interrupted and may still hold TensorFlow (the process should end with `os._exit`)."""
    return _armed.is_set()


def after_interrupt() -> None:
    """A run was interrupted: where the command line armed it, end the process in its seconds."""
    if _hard_exit is None or _armed.is_set():
        return
    _armed.set()
    seconds, message = _hard_exit

    def end() -> None:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
        os._exit(INTERRUPT_EXIT)

    timer = threading.Timer(seconds, end)
    timer.daemon = True
    timer.start()


def stoppable(call: Callable[[], Any], timeout: float | None, what: str) -> Any:
    """`call()`, one long call into a runtime that cannot be cancelled (TensorFlow Lite's
    interpreter releases the GIL while it runs), on a worker thread: Ctrl-C reaches the main
    thread, and RunTimeout is raised after `timeout` seconds. The call is then abandoned (its
    interpreter is not used again) and, on the command line, the process ends as after any
    interrupted run. `what` says what ran, for the timeout's line."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["value"] = call()
        except BaseException as err:  # handed to the main thread
            outcome["error"] = err

    worker = threading.Thread(target=work, name="gatetrace-call", daemon=True)
    deadline = None if timeout is None else time.monotonic() + timeout
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.05)
            if deadline is not None and worker.is_alive() and time.monotonic() > deadline:
                raise RunTimeout(
                    f"{what} took longer than --timeout {timeout:g} s and was stopped (a loop that never ends, "
                    "or a batch too large for the limit)"
                )
    except KeyboardInterrupt:
        after_interrupt()
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
