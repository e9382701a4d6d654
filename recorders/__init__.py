"""gatetrace recorders: long-format Parquet tables of gate values, states and weights.

This package never imports TensorFlow: it takes numpy arrays and plain descriptions,
so reading and writing recordings costs only numpy, pandas and pyarrow. By direction:
`recorders.write` (the format, and the writer), `recorders.read` (`Recording`, analysis,
plots), `recorders.view` (`gatetrace view`); `recorders.errors` is shared by all of them.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from recorders import errors as _errors
from recorders.errors import *  # noqa: F403  (the exception classes, listed in _errors.__all__)

if TYPE_CHECKING:  # what type checkers and editors see: the same names, from the same modules
    from recorders.read import analysis, plots
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

# Each public name is loaded from its module on first use, so that a command which reads a
# manifest or a footer does not pay for pandas (imported by the analysis) when it starts.
_LAZY = {
    "analysis": ("recorders.read.analysis", None),
    "plots": ("recorders.read.plots", None),
    "Comparison": ("recorders.read.compare", "Comparison"),
    "compare": ("recorders.read.compare", "compare"),
    "gate_frame": ("recorders.read.frames", "gate_frame"),
    "Recording": ("recorders.read.reader", "Recording"),
    "Series": ("recorders.read.series", "Series"),
    "gate_columns": ("recorders.write.columns", "gate_columns"),
    "state_columns": ("recorders.write.columns", "state_columns"),
    "weight_columns": ("recorders.write.columns", "weight_columns"),
    "KeyCache": ("recorders.write.keys", "KeyCache"),
    "key_columns": ("recorders.write.keys", "key_columns"),
    "METADATA_KEY": ("recorders.write.layout", "METADATA_KEY"),
    "partition_dir": ("recorders.write.layout", "partition_dir"),
    "partition_value": ("recorders.write.layout", "partition_value"),
    "Intervals": ("recorders.write.progress", "Intervals"),
    "Shard": ("recorders.write.progress", "Shard"),
    "Stats": ("recorders.write.stats", "Stats"),
    "SummaryWriter": ("recorders.write.summary", "SummaryWriter"),
    "Bins": ("recorders.write.totals", "Bins"),
    "write_weights": ("recorders.write.weights_file", "write_weights"),
    "RecordingWriter": ("recorders.write.writer", "RecordingWriter"),
}


def __getattr__(name: str):
    if name in _LAZY:
        module, attribute = _LAZY[name]
        value = import_module(module)
        if attribute is not None:
            value = getattr(value, attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'recorders' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)


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
