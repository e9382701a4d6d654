"""gatetrace recorders: long-format Parquet tables of gate values, states and weights.

This package never imports TensorFlow: it takes numpy arrays and plain descriptions,
so reading and writing recordings costs only numpy, pandas and pyarrow.
"""

from importlib.metadata import PackageNotFoundError, version

from recorders import errors as _errors
from recorders.errors import *  # noqa: F403  (the exception classes, listed in _errors.__all__)
from recorders.parquet import METADATA_KEY, RecordingWriter, partition_dir, partition_value, write_weights
from recorders.long import KeyCache, gate_columns, gate_frame, key_columns, state_columns, weight_columns
from recorders.progress import Intervals, Shard
from recorders.reader import Recording

try:
    __version__ = version("gatetrace")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"

__all__ = [
    "__version__",
    *_errors.__all__,
    "key_columns",
    "KeyCache",
    "gate_columns",
    "gate_frame",
    "state_columns",
    "weight_columns",
    "METADATA_KEY",
    "RecordingWriter",
    "partition_dir",
    "partition_value",
    "write_weights",
    "Shard",
    "Intervals",
    "Recording",
]
