"""Gate summaries for TensorBoard, from a recording: where users already watch their training.

`GateSummaries(logdir).write(recording, step)` appends one TensorBoard event at `step` (an epoch,
a checkpoint's global step) to its event file in `logdir`, holding for each gate of each cell:

    gatetrace/CELL/GATE/left_saturated     scalar: the mean over units of the fraction of activations < low
    gatetrace/CELL/GATE/right_saturated    scalar: the same > high
    gatetrace/CELL/GATE/activation         histogram of the activations, over the summary's bins

From a summary recording (`--summary`) the histogram is its own, the units merged; from a full
recording, the values counted in the bins a summary would use (`recorders.write.totals.Bins`).
Bucket i of the histogram holds the values up to its limit: the first the underflow (below the
lowest edge), then each bin, then the overflow. Written with TensorBoard's own event writer and
protocol buffers (TensorBoard comes with TensorFlow), read back by its event reader in the tests.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from recorders.errors import SelectionError, install_hint, option
from recorders.read.reader import Recording
from recorders.write.files import check_folder_out, is_uri, local_path
from recorders.write.stats import Stats
from recorders.write.totals import Bins, nonlinearity

__all__ = ["GateSummaries", "check_logdir"]


def check_logdir(
    logdir: str | os.PathLike,
    out: str | os.PathLike,
    reads: Iterable[str | os.PathLike | None] = (),
    named: str | None = None,
) -> None:
    """Refuse, before anything is written, a TensorBoard folder that breaks the rules of every
    output folder (`recorders.write.files.check_folder_out`: a file, a FIFO, a device; inside
    what the run reads, `reads`; inside a recording or series), or that lies inside the
    recordings' own folder `out`; `named`: how messages name it (`--tensorboard DIR`)."""
    named = named or option("tensorboard", os.fspath(logdir))
    check_folder_out(logdir, reads, named)
    text = os.fspath(out).rstrip("/")
    if not is_uri(text) and Path(logdir).resolve().is_relative_to(local_path(text).resolve()):
        raise SelectionError(
            f"{named} lies inside {option('out', text)}: a series holds only its recordings; give "
            f"TensorBoard a folder of its own, e.g. {option('tensorboard', 'logs/gates')}"
        )


class GateSummaries:
    """Gate summaries written into one event file in `logdir` (TensorBoard reads a run's
    events file by file: a new file for each step would start the run again); a context
    manager, `close` idempotent."""

    def __init__(self, logdir: str | os.PathLike):
        try:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError:
            raise SelectionError(
                f"TensorBoard summaries need the tensorboard package: {install_hint('tensorboard')}"
            ) from None
        try:
            os.makedirs(logdir, exist_ok=True)
            self._writer: Any = EventFileWriter(os.fspath(logdir))
        except OSError as err:
            raise SelectionError(
                f"--tensorboard {logdir}: cannot write TensorBoard events there ({err.strerror or err}); "
                "give a folder you can write to"
            ) from None

    def write(self, recording: str | os.PathLike, step: int) -> None:
        """Append the gates' saturation and histograms of `recording` at `step`."""
        from tensorboard.compat.proto import event_pb2, summary_pb2

        rec = Recording(recording)
        values = []
        for cell in rec.cells:
            for gate in rec.gates(cell):
                per_unit = _unit_stats(rec, cell, gate)
                tag = f"gatetrace/{cell}/{gate}"
                rows = per_unit.count > 0  # the units with rows
                if rows.any():
                    for side, counts in (("left", per_unit.below), ("right", per_unit.above)):
                        fractions = counts[rows] / per_unit.count[rows]
                        values.append(
                            summary_pb2.Summary.Value(
                                tag=f"{tag}/{side}_saturated", simple_value=float(fractions.mean())
                            )
                        )
                    histo = _histogram(per_unit.reduce(0))
                    values.append(summary_pb2.Summary.Value(tag=f"{tag}/activation", histo=histo))
        self._writer.add_event(
            event_pb2.Event(
                wall_time=time.time(), step=int(step), summary=summary_pb2.Summary(value=values)
            )
        )
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> GateSummaries:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _unit_stats(rec: Recording, cell: str, gate: str) -> Stats:
    """One gate's activations per unit (its saturation, and, the units merged, its histogram),
    from a summary's statistics or from one read of a full recording's gate, a row group at a
    time, in the bins a summary would use."""
    if rec.kind == "summary":
        return rec.statistics.stats(cell, "gates", gate, "activation", "unit")[1]
    bins = Bins()
    edges = bins.edges("activation", nonlinearity(rec.cell(cell), gate))
    total: Stats | None = None
    for block in rec.gate_blocks(cell, gate, "activation"):  # each [examples, steps, units]
        kept = ~np.isnan(block.values)  # NaN where no row was recorded
        part = Stats.of(block.values, (0, 1), edges, bins.low, bins.high, kept)
        total = part if total is None else total.merge(part)
    if total is None:  # no rows: nothing counted
        return Stats.of(np.zeros((0, rec.units(cell))), (0,), edges, bins.low, bins.high)
    return total


def _histogram(s: Stats):
    """A TensorBoard HistogramProto of a scalar `Stats`: underflow, the bins, overflow."""
    from tensorboard.compat.proto import summary_pb2

    n = float(s.count)
    limits = [*s.edges.tolist(), max(float(s.maximum), float(s.edges[-1])) + 1e-12]
    return summary_pb2.HistogramProto(
        min=float(s.minimum),
        max=float(s.maximum),
        num=n,
        sum=float(s.mean) * n,
        sum_squares=float(s.m2 + n * s.mean * s.mean),
        bucket_limit=limits,
        bucket=[float(c) for c in s.histogram.tolist()],
    )
