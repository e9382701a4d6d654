"""gatetrace: every gate of every TensorFlow RNN cell, at every step, on your data.

    import tracer
    with tracer.load_model("model.ckpt") as model:
        cells = tracer.find_cells(model.graph)
        result = tracer.trace(model, {"inputs": x})
        df = result.frame("rnn/basic_lstm_cell")     # example, step, gate, unit, ...

Modules: `graph` (the walker), `cells` (one spec per cell type), `fetch` (the one-run
fetch plan), `weights` (per-gate slices), `reference` (numpy recomputation), `model`
(loading), `loops` and `replay` (cells inside while loops), `keras_layers` (Keras LSTM, GRU
and SimpleRNN layers), `feeds`, `inputs`, `safety`, `select`, `recording` (the main job),
`cli`, `demo`.
"""

from importlib import import_module

from recorders import __version__
from recorders import errors as _errors
from recorders.errors import *  # noqa: F403  (the exception classes, listed in _errors.__all__)
from recorders.progress import Shard

# Names importing TensorFlow are loaded on first use, so that `import tracer.cli` and
# `tracer.reference` stay light and the CLI can quiet TensorFlow before it loads.
_LAZY = {
    "CellSpec": "tracer.cells",
    "SPECS": "tracer.cells",
    "spec_for": "tracer.cells",
    "Cell": "tracer.graph",
    "Step": "tracer.graph",
    "find_cells": "tracer.graph",
    "Model": "tracer.model",
    "load_model": "tracer.model",
    "from_session": "tracer.model",
    "FetchPlan": "tracer.fetch",
    "Trace": "tracer.fetch",
    "CellTrace": "tracer.fetch",
    "trace": "tracer.recording",
    "find_all": "tracer.recording",
    "KerasModel": "tracer.keras_layers",
    "KerasCell": "tracer.keras_layers",
    "KerasPlan": "tracer.keras_layers",
    "find_layers": "tracer.keras_layers",
    "load_keras": "tracer.keras_layers",
    "Selection": "tracer.select",
    "record": "tracer.recording",
    "Job": "tracer.parallel",
    "record_task": "tracer.parallel",
    "record_parallel": "tracer.parallel",
    "run_cell": "tracer.reference",
    "GateWeights": "tracer.weights",
    "read_weights": "tracer.weights",
    "gate_weights": "tracer.weights",
    "weights_columns": "tracer.weights",
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
    "record",
    "Job",
    "record_task",
    "record_parallel",
    "Selection",
    "run_cell",
    "GateWeights",
    "read_weights",
    "gate_weights",
    "weights_columns",
]
