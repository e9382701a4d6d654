"""The one place gatetrace imports TensorFlow.

`tf.compat.v1.nn.rnn_cell.*` lives in tf-keras and is only reachable when
`TF_USE_LEGACY_KERAS=1` is set before TensorFlow is first imported, so every module
of `tracer` takes `tf` from here. Graph building and loading happen inside explicit
`tf.Graph` contexts, so eager execution is left as the user has it.
"""

import os
import re
import sys
import tempfile

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# a C++ log line's prefix: severity, date, time, thread (what differs between two copies)
_PREFIX = re.compile(rb"^([IWEF])\d{4} [\d:.]+\s+\d+ ")
# TF_CPP_MIN_LOG_LEVEL's numbers of the severities; absl's notice that lines logged before its
# set-up go to stderr is shown with the first of them that is shown
_SEVERITY = {b"I": 0, b"W": 1, b"E": 2, b"F": 3}
_EARLY_NOTICE = b"WARNING: All log messages before absl::InitializeLog() is called"


def _min_log_level() -> int:
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        return 0


def _import_tensorflow_once() -> None:
    """Import TensorFlow with what its C++ libraries write as they load shown once, and only
    at the severities TF_CPP_MIN_LOG_LEVEL asks for: two of its shared libraries each log the
    same start-up lines (each its own copy of the logger), before the logger reads that
    setting. File descriptor 2 is captured while they load, then written back, a line that
    repeats an earlier one but for its time and thread left out, and a line of a severity
    below the level too. GATETRACE_DEBUG=1 leaves it as it is."""
    if "tensorflow" in sys.modules or os.environ.get("GATETRACE_DEBUG"):
        import tensorflow  # noqa: F401

        return
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no standard error to show anything on
        import tensorflow  # noqa: F401

        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            level, seen, severity, notice = _min_log_level(), set(), 3, b""
            for line in captured.read().splitlines(keepends=True):
                if line.startswith(_EARLY_NOTICE):  # said before the first line shown, if any
                    notice = line
                    continue
                key = _PREFIX.sub(b"", line)
                prefix = _PREFIX.match(line)
                if prefix:  # a line without one continues the line before (or is not a log line)
                    severity = _SEVERITY[prefix.group(1)]
                if key not in seen and severity >= level:
                    seen.add(key)
                    os.write(2, notice + line)
                    notice = b""


_import_tensorflow_once()

import tensorflow as tf  # noqa: E402  (loaded above)

# TensorFlow's own modules that gatetrace uses outside its public API, imported here for the
# same reason as `tf` itself: after the settings above
from tensorflow.core.example import example_pb2  # noqa: E402
from tensorflow.python.framework.function_def_to_graph import function_def_to_graph  # noqa: E402
from tensorflow.python.ops import control_flow_util_v2, list_ops  # noqa: E402

v1 = tf.compat.v1

__all__ = ["tf", "v1", "example_pb2", "function_def_to_graph", "control_flow_util_v2", "list_ops"]
