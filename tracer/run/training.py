"""Logging gates while a Keras model trains: `GateLogger`, a callback for `model.fit`.

    logger = tracer.keras.GateLogger(probe, "gates-by-epoch/", every=1)
    model.fit(x, y, epochs=10, callbacks=[logger])
    recorders.Series("gates-by-epoch/").gate_frame(gates=["f"])      # an `epoch` column first

At the end of every `every`-th epoch the callback records every recurrent layer of the model
on the fixed `probe` inputs (`tracer.run.recording.record`, one call of the model per batch,
as `gatetrace record` records a saved model) into `OUT/epoch=N/` (N counted from 1, as Keras'
`ModelCheckpoint` names files), a series (`tracer.run.series`) read by `recorders.Series`.
With `by="batch"`, after every `every`-th training batch instead, into `OUT/batch=N/`: N the
batches trained since training began (the optimizer's `iterations`, counted from 1 as a global
step is), each one's epoch kept in the series file (`Series` adds an `epoch` column). It is
a plain object with the methods Keras calls (both Keras 3 and tf-keras take it). Logged with
`summary=recorders.Bins()`, each epoch is a summary recording; with `tensorboard=DIR`, each
gate's saturation and activation histogram is also written there (`tracer.run.tensorboard`).

Faults: an epoch's folder appears complete (its manifest) only once recorded, so a run killed
midway leaves every logged epoch before it readable; a restarted run (`fit(initial_epoch=...)`)
logs into the same folder after them, and refuses in one line to log an epoch already there. The
epoch in flight when the run was killed is discarded and logged anew by the restarted run (never
continued: its first batches would hold the killed model's gates). A
recording that fails (a full disk) stops the training with the error (`on_error="stop"`, the
default) or is reported once on stderr while the training goes on (`on_error="warn"`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from recorders.errors import FeedError, GatetraceError, SelectionError
from recorders.write import place_of
from recorders.write.totals import Bins
from tracer.load.keras import wrap
from tracer.run.recording import record
from tracer.run.series import SERIES_FILE, fresh_key, logged_folder, open_logged
from tracer.run.tensorboard import GateSummaries, check_logdir
from tracer.values.keras import resolve_inputs

__all__ = ["GateLogger", "report_failure"]


class GateLogger:
    """A Keras callback that records the model's gates on `probe` every `every` epochs (see the
    module docstring). `probe`: the model's input array (a list or mapping for several
    inputs), at most a few thousand sequences; `out`: a new folder, or one this logger wrote."""

    def __init__(
        self,
        probe: Any,
        out: str | os.PathLike,
        every: int = 1,
        *,
        by: str = "epoch",
        summary: Bins | None = None,
        batch_size: int = 256,
        values: tuple[str, ...] | None = None,
        tensorboard: str | os.PathLike | None = None,
        on_error: str = "stop",
    ):
        if not isinstance(every, int) or every < 1:
            raise SelectionError(
                f"GateLogger every={every!r}: expected a whole number of epochs, 1 or more"
            )
        if on_error not in ("stop", "warn"):
            raise SelectionError(f"GateLogger on_error={on_error!r}: expected 'stop' or 'warn'")
        if by not in ("epoch", "batch"):
            raise SelectionError(f"GateLogger by={by!r}: expected 'epoch' or 'batch'")
        self.probe, self.out, self.every, self.by = probe, logged_folder(out), every, by
        self.summary, self.batch_size, self.values = summary, batch_size, values
        self.tensorboard, self.on_error = tensorboard, on_error
        self.logged: list[int] = []  # the epochs (or batches) logged by this object
        self._epoch = 0  # the epoch in progress, counted from 1
        self._series: dict[str, Any] = {}  # the series file (by batch: each batch's epoch)
        self.failed: str | None = None  # the first failure, once reported (on_error="warn")
        self.model: Any = None
        self.params: dict = {}
        self._board: GateSummaries | None = None  # while training, with `tensorboard`

    # -- what Keras calls ------------------------------------------------------------------

    def set_model(self, model: Any) -> None:
        self.model = model

    def set_params(self, params: dict) -> None:
        self.params = params

    def on_train_begin(self, logs: dict | None = None) -> None:
        # a probe the model cannot take is said before the first epoch trains, not after it
        resolved = resolve_inputs(wrap(self.model), self.probe)
        if any(len(np.asarray(v)) == 0 for v in resolved.values()):
            raise FeedError(
                "GateLogger: the probe holds no sequence; give it the sequences to record at every log, e.g. "
                "GateLogger(x_val[:256], 'gates-by-epoch/')"
            )
        if self.tensorboard is not None:  # refused before the series begins
            check_logdir(self.tensorboard, self.out, (), f"GateLogger: {self.tensorboard}")
            self._board = GateSummaries(self.tensorboard)
        self._series = open_logged(self.out, self.by, "GateLogger")
        if self.by == "batch":  # each logged batch's epoch, those of a restarted run's first
            self._series["epochs"] = dict(self._series.get("epochs") or {})

    def on_train_end(self, logs: dict | None = None) -> None:
        if self._board is not None:
            self._board.close()
            self._board = None

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch = epoch + 1

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self.by == "epoch" and (epoch + 1) % self.every == 0:
            self._log(epoch + 1)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.by != "batch":
            return
        done = int(np.asarray(self.model.optimizer.iterations))  # batches trained, all epochs
        if done % self.every == 0:
            self._log(done)

    def _log(self, n: int) -> None:
        """Record the probe into `OUT/KEY=n/` (KEY: epoch or batch)."""
        again = "fit(initial_epoch=...) past the epochs there"
        if self.by == "batch":
            again = "the optimizer's state restored (its iteration count goes on)"
        where = fresh_key(self.out, self.by, n, "GateLogger", again)
        try:
            # by batch, its epoch first: the series file names it before its folder is complete
            if self.by == "batch":
                self._series["epochs"][str(n)] = self._epoch
                place_of(self.out).write_json(SERIES_FILE, self._series)
            record(
                self.model,
                self.probe,
                where,
                batch_size=self.batch_size,
                values=self.values,
                summary=self.summary,
            )
            if self._board is not None:
                self._board.write(where, n)
        except (GatetraceError, OSError) as err:
            report_failure(self, f"GateLogger could not log {self.by} {n}", err)
            return
        self.logged.append(n)

    def __getattr__(self, name: str) -> Any:
        """Every other callback method Keras may call: nothing to do."""
        if name.startswith("on_"):
            return _nothing
        raise AttributeError(name)

    # tf-keras asks these of its callbacks before calling the per-batch ones
    _supports_tf_logs = False

    def _implements_train_batch_hooks(self) -> bool:
        return self.by == "batch"

    def _implements_test_batch_hooks(self) -> bool:
        return False

    def _implements_predict_batch_hooks(self) -> bool:
        return False


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def report_failure(logger: Any, what: str, err: BaseException) -> None:
    """A logger's failed write: raised with `on_error="stop"`; with "warn", said once on stderr
    (kept in `logger.failed`) while the training goes on."""
    if logger.on_error == "stop":
        raise err
    if logger.failed is None:
        logger.failed = str(err)
        print(f"gatetrace: {what} (training goes on): {err}", file=sys.stderr)
