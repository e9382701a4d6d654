"""gatetrace recorders: long-format Parquet tables of gate values, states and weights.

This package never imports TensorFlow: it takes numpy arrays and plain descriptions,
so reading and writing recordings costs only numpy, pandas and pyarrow.
"""

from importlib.metadata import PackageNotFoundError, version

from recorders.errors import (
    FeedError,
    GatetraceError,
    GraphPatternError,
    ModelFormatError,
    NoCellFoundError,
    OutputExistsError,
    RecordingError,
    SelectionError,
)
from recorders.parquet import METADATA_KEY, RecordingWriter, partition_dir, write_weights
from recorders.long import gate_columns, gate_frame, key_columns, state_columns, weight_columns

try:
    __version__ = version("gatetrace")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"

__all__ = [
    "__version__",
    "GatetraceError",
    "ModelFormatError",
    "NoCellFoundError",
    "GraphPatternError",
    "FeedError",
    "SelectionError",
    "OutputExistsError",
    "RecordingError",
    "key_columns",
    "gate_columns",
    "gate_frame",
    "state_columns",
    "weight_columns",
    "METADATA_KEY",
    "RecordingWriter",
    "partition_dir",
    "write_weights",
]
