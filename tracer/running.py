"""Running a graph so that it can be stopped: Ctrl-C and a time limit cancel a `Session.run`.

Python runs signal handlers only between bytecodes of the main thread, and a
`Session.run` in progress is one long call into TensorFlow: a model that loops forever
would ignore Ctrl-C. `run` therefore calls `Session.run` on a worker thread while the
main thread waits in short steps, where Ctrl-C reaches it. A KeyboardInterrupt there
closes the session, which cancels the step in flight; `timeout` is handed to TensorFlow
as `RunOptions(timeout_in_ms)`, which cancels the step when it runs out.
"""

from __future__ import annotations

import threading
from typing import Any

from recorders.errors import RunTimeout
from tracer._tf import tf, v1

__all__ = ["run"]


def run(session: v1.Session, fetches: Any, feed_dict: Any = None, timeout: float | None = None) -> Any:
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
        session.close()  # cancels the step in flight
        worker.join(10)
        raise
    error = outcome.get("error")
    if isinstance(error, tf.errors.DeadlineExceededError):
        raise RunTimeout(
            f"running the model took longer than --timeout {timeout:g} s and was stopped "
            "(a loop that never ends, or a batch too large for the limit)"
        ) from None
    if error is not None:
        raise error
    return outcome["value"]
