"""Running a graph so that it can be stopped: Ctrl-C and a time limit cancel a `Session.run`.

Python runs signal handlers only between bytecodes of the main thread, and a
`Session.run` in progress is one long call into TensorFlow: a model that loops forever
would ignore Ctrl-C. `run` therefore calls `Session.run` on a worker thread while the
main thread waits in short steps, where Ctrl-C reaches it. A KeyboardInterrupt there
closes the session, which cancels the step in flight; `timeout` is handed to TensorFlow
as `RunOptions(timeout_in_ms)`, which cancels the step when it runs out.

Cancelling is not always prompt: a loop that never ends, on a busy machine, was seen to
keep its step (and `Session.close`) running for 20 s and more. So the session is closed
on a thread of its own, and the command line arms `end_process_after_interrupt`: once a
Ctrl-C has interrupted a run, the process ends within that many seconds whatever
TensorFlow still does (a library caller's process, a notebook's kernel, is never ended).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from recorders.errors import ModelFormatError, RunTimeout
from tracer._tf import tf, v1

__all__ = ["run", "stoppable", "end_process_after_interrupt", "INTERRUPT_EXIT"]

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


def _arm() -> None:
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


def run(
    session: v1.Session, fetches: Any, feed_dict: Any = None, timeout: float | None = None
) -> Any:
    """`session.run(fetches, feed_dict)`, stoppable by Ctrl-C; RunTimeout after `timeout` seconds."""
    options = v1.RunOptions(timeout_in_ms=max(1, int(timeout * 1000))) if timeout else None
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["value"] = session.run(fetches, feed_dict=feed_dict, options=options)
        except BaseException as err:  # handed to the main thread
            outcome["error"] = err

    worker = threading.Thread(target=work, name="gatetrace-run", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.05)
    except KeyboardInterrupt:
        _arm()
        # cancels the step in flight
        closing = threading.Thread(target=session.close, name="gatetrace-close", daemon=True)
        closing.start()
        closing.join(1)
        raise
    error = outcome.get("error")
    if isinstance(error, tf.errors.DeadlineExceededError):
        raise RunTimeout(
            f"running the model took longer than --timeout {timeout:g} s and was stopped "
            "(a loop that never ends, or a batch too large for the limit)"
        ) from None
    if isinstance(error, tf.errors.FailedPreconditionError):
        missing = re.search(
            r"(?:Could not find variable|uninitialized value) ([\w./-]+)", error.message
        )
        if missing:
            raise ModelFormatError(
                f"the model's variable {missing.group(1).rstrip('.')} holds no value: the checkpoint has none for it (its "
                "Saver was made with a var_list that left it out, or the graph was changed after saving); give a "
                "checkpoint that holds every variable the cells read"
            ) from None
    if error is not None:
        raise error
    return outcome["value"]


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
        _arm()
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
