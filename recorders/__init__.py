"""gatetrace recorders: long-format Parquet tables of gate values, states and weights.

This package never imports TensorFlow: it takes numpy arrays and plain descriptions,
so reading and writing recordings costs only numpy, pandas and pyarrow. By direction:
`recorders.write` (the format, and the writer), `recorders.read` (`Recording`, analysis,
plots), `recorders.view` (`gatetrace view`); `recorders.errors` is shared by all of them.
"""

from importlib.metadata import PackageNotFoundError, version

from recorders import errors as _errors
from recorders.errors import *  # noqa: F403  (the exception classes, listed in _errors.__all__)
from recorders.read import analysis, plots  # `from recorders import analysis`
from recorders.read.compare import Comparison, compare
from recorders.read.frames import gate_frame
from recorders.read.reader import Recording
from recorders.read.series import Series
from recorders.write.columns import gate_columns, state_columns, weight_columns
from recorders.write.keys import KeyCache, key_columns
from recorders.write.layout import METADATA_KEY, partition_dir, partition_value
from recorders.write.progress import Intervals, Shard
from recorders.write.stats import Stats
from recorders.write.summary import SummaryWriter
from recorders.write.totals import Bins
from recorders.write.weights_file import write_weights
from recorders.write.writer import RecordingWriter

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
    "SummaryWriter",
    "Bins",
    "Stats",
    "partition_dir",
    "partition_value",
    "write_weights",
    "Shard",
    "Intervals",
    "Recording",
    "compare",
    "Comparison",
    "Series",
    "analysis",
    "plots",
]
