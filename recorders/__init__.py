"""gatetrace recorders: long-format Parquet tables of gate values, states and weights.

This package never imports TensorFlow: it takes numpy arrays and plain descriptions,
so reading and writing recordings costs only numpy, pandas and pyarrow.
"""

from recorders.errors import (
    FeedError,
    GatetraceError,
    GraphPatternError,
    ModelFormatError,
    NoCellFoundError,
    OutputExistsError,
    RecordingError,
)
from recorders.long import gate_columns, gate_frame, key_columns, state_columns, weight_columns


__all__ = [
    "GatetraceError",
    "ModelFormatError",
    "NoCellFoundError",
    "GraphPatternError",
    "FeedError",
    "OutputExistsError",
    "RecordingError",
    "key_columns",
    "gate_columns",
    "gate_frame",
    "state_columns",
    "weight_columns",



]
