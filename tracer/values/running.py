"""Running a graph so that it can be stopped: Ctrl-C and a time limit cancel a `Session.run`.

Python runs signal handlers only between bytecodes of the main thread, and a
`Session.run` in progress is one long call into TensorFlow: a model that loops forever
would ignore Ctrl-C. `run` therefore calls `Session.run` on a worker thread while the
main thread waits in short steps, where Ctrl-C reaches it. A KeyboardInterrupt there
closes the session, which cancels the step in flight; `timeout` is handed to TensorFlow
as `RunOptions(timeout_in_ms)`, which cancels the step when it runs out.

Cancelling is not always prompt: a loop that never ends, on a busy machine, was seen to
keep its step (and `Session.close`) running for 20 s and more. So the session is closed
on a thread of its own, and the command line arms `tracer.values.interrupts`: once a
Ctrl-C has interrupted a run, the process ends within seconds whatever TensorFlow still
does (a library caller's process, a notebook's kernel, is never ended).
"""

from __future__ import annotations

import re
import threading
from typing import Any

from recorders.errors import ModelFormatError, RunTimeout
from tracer._tf import tf, v1
from tracer.values.interrupts import after_interrupt

__all__ = ["run"]


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
        after_interrupt()
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
