"""gatetrace: every gate of every TensorFlow RNN cell, at every step, on your data.

    import tracer
    with tracer.load_model("model.ckpt") as model:
        cells = tracer.find_cells(model.graph)
        result = tracer.trace(model, {"inputs": x})
        df = result.frame("rnn/basic_lstm_cell")     # example, step, gate, unit, ...

Modules: `graph` (the walker), `cells` (one spec per cell type), `fetch` (the one-run
fetch plan), `weights` (per-gate slices), `reference` (numpy recomputation), `model`
(loading), `feeds`, `record` (the main job), `cli`, `demo`.
"""

from recorders import __version__
from recorders.errors import (
    FeedError,
    GatetraceError,
    GraphPatternError,
    ModelFormatError,
    NoCellFoundError,
    OutputExistsError,
    RecordingError,
)
from tracer.cells import SPECS, CellSpec, spec_for
from tracer.fetch import CellTrace, FetchPlan, Trace
from tracer.graph import Cell, Step, find_cells
from tracer.model import Model, from_session, load_model
from tracer.record import record, trace
from tracer.reference import run_cell
from tracer.weights import GateWeights, gate_weights, read_weights, weights_columns

__all__ = [
    "__version__",
    "GatetraceError",
    "ModelFormatError",
    "NoCellFoundError",
    "GraphPatternError",
    "FeedError",
    "OutputExistsError",
    "RecordingError",
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
    "record",
    "run_cell",
    "GateWeights",
    "read_weights",
    "gate_weights",
    "weights_columns",
]
