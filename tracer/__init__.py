"""gatetrace: every gate of every TensorFlow RNN cell, at every step, on your data.

    import tracer
    with tracer.load_model("model.ckpt") as model:
        cells = tracer.find_cells(model.graph)
        result = tracer.trace(model, {"inputs": x})
        df = result.frame("rnn/basic_lstm_cell")     # example, step, gate, unit, ...

The package is laid out by stage, in the order data flows; a module imports only from its
own stage and the stages below it (`tests/test_layout.py` holds it to that):

    stage  package          what it holds
    0      tracer._tf       TensorFlow, imported once and quiet (any stage may use it)
    1      tracer.cells     cell specs and gate orders, what a finder returns, the numpy math
    2      tracer.inputs    input files read by rows (.npy, .npz, Parquet, TFRecord), feeds
    3      tracer.load      model files: formats, the checks before import and before running
    4      tracer.find      finding cells: step patterns per cell family, chains, loops, fused ops
    5      tracer.values    the values: the one-run fetch, loop replay, Keras and TFLite capture, weights
    6      tracer.run       the recording job: selection, memory budget, parallel tasks
    7      tracer.cli, tracer.commands, tracer.demo   the command line (one module a command) on top

The public names below are loaded from their stage on first use.
"""

from importlib import import_module
from typing import TYPE_CHECKING

from recorders import __version__
from recorders import errors as _errors
from recorders.errors import *  # noqa: F403  (the exception classes, listed in _errors.__all__)
from recorders.write.progress import Shard

if TYPE_CHECKING:  # what type checkers and editors see: the same names, from the same modules
    from tracer.cells.found import Cell, KerasCell, LiteCell, Step
    from tracer.cells.holds import Hold, holds_at_means, parse_hold
    from tracer.cells.kinds import SPECS, CellSpec, spec_for
    from tracer.cells.reference import run_cell
    from tracer.find.graph import find_cells
    from tracer.find.keras import find_layers
    from tracer.find.lite import find_ops
    from tracer.find.named import find_named
    from tracer.load.keras import KerasModel, load_keras
    from tracer.load.loaded import Model, from_session
    from tracer.load.model import load_model
    from tracer.load.series import find_series
    from tracer.load.tflite import LiteModel
    from tracer.run.hook import GateLoggingHook
    from tracer.run.options import RecordOptions
    from tracer.run.parallel import Job, record_parallel, record_task
    from tracer.run.recording import find_all, record, trace
    from tracer.run.select import Selection
    from tracer.run.series import record_series
    from tracer.values.fetch import FetchPlan
    from tracer.values.keras import KerasPlan
    from tracer.values.lite import LitePlan
    from tracer.values.trace import CellTrace, Trace
    from tracer.values.weights import GateWeights, gate_weights, read_weights, weights_columns

# Names importing TensorFlow are loaded on first use, so that `import tracer.cli` and
# `tracer.cells.reference` stay light and the CLI can quiet TensorFlow before it loads.
_LAZY = {
    "CellSpec": "tracer.cells.kinds",
    "SPECS": "tracer.cells.kinds",
    "spec_for": "tracer.cells.kinds",
    "Cell": "tracer.cells.found",
    "find_named": "tracer.find.named",
    "Step": "tracer.cells.found",
    "find_cells": "tracer.find.graph",
    "Model": "tracer.load.loaded",
    "load_model": "tracer.load.model",
    "from_session": "tracer.load.loaded",
    "FetchPlan": "tracer.values.fetch",
    "Trace": "tracer.values.trace",
    "CellTrace": "tracer.values.trace",
    "trace": "tracer.run.recording",
    "find_all": "tracer.run.recording",
    "KerasModel": "tracer.load.keras",
    "KerasCell": "tracer.cells.found",
    "KerasPlan": "tracer.values.keras",
    "find_layers": "tracer.find.keras",
    "load_keras": "tracer.load.keras",
    "LiteModel": "tracer.load.tflite",
    "LiteCell": "tracer.cells.found",
    "LitePlan": "tracer.values.lite",
    "find_ops": "tracer.find.lite",
    "Selection": "tracer.run.select",
    "record": "tracer.run.recording",
    "RecordOptions": "tracer.run.options",
    "record_series": "tracer.run.series",
    "GateLoggingHook": "tracer.run.hook",
    "find_series": "tracer.load.series",
    "Job": "tracer.run.parallel",
    "record_task": "tracer.run.parallel",
    "record_parallel": "tracer.run.parallel",
    "run_cell": "tracer.cells.reference",
    "GateWeights": "tracer.values.weights",
    "read_weights": "tracer.values.weights",
    "gate_weights": "tracer.values.weights",
    "weights_columns": "tracer.values.weights",
    "Hold": "tracer.cells.holds",
    "parse_hold": "tracer.cells.holds",
    "holds_at_means": "tracer.cells.holds",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tracer' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)


__all__ = [
    "__version__",
    *_errors.__all__,
    "Shard",
    "CellSpec",
    "SPECS",
    "spec_for",
    "Cell",
    "Step",
    "find_cells",
    "find_named",
    "Model",
    "load_model",
    "from_session",
    "FetchPlan",
    "Trace",
    "CellTrace",
    "trace",
    "find_all",
    "KerasModel",
    "KerasCell",
    "KerasPlan",
    "find_layers",
    "load_keras",
    "LiteModel",
    "LiteCell",
    "LitePlan",
    "find_ops",
    "record",
    "RecordOptions",
    "record_series",
    "find_series",
    "GateLoggingHook",
    "Job",
    "record_task",
    "record_parallel",
    "Selection",
    "run_cell",
    "GateWeights",
    "read_weights",
    "gate_weights",
    "weights_columns",
    "Hold",
    "parse_hold",
    "holds_at_means",
]
