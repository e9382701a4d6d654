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
_PREFIX = re.compile(rb"^[IWEF]\d{4} [\d:.]+\s+\d+ ")


def _import_tensorflow_once() -> None:
    """Import TensorFlow with what its C++ libraries write as they load shown once: two of
    its shared libraries each log the same start-up lines (each its own copy of the logger).
    File descriptor 2 is captured while they load, then written back, a line that repeats an
    earlier one but for its time and thread left out. GATETRACE_DEBUG=1 leaves it as it is."""
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
            seen: set[bytes] = set()
            for line in captured.read().splitlines(keepends=True):
                key = _PREFIX.sub(b"", line)
                if key not in seen:
                    seen.add(key)
                    os.write(2, line)


_import_tensorflow_once()

import tensorflow as tf  # noqa: E402  (loaded above)

# TensorFlow's own modules that gatetrace uses outside its public API, imported here for the
# same reason as `tf` itself: after the settings above
from tensorflow.core.example import example_pb2  # noqa: E402
from tensorflow.python.framework.function_def_to_graph import function_def_to_graph  # noqa: E402
from tensorflow.python.ops import control_flow_util_v2, list_ops  # noqa: E402

v1 = tf.compat.v1

__all__ = ["tf", "v1", "example_pb2", "function_def_to_graph", "control_flow_util_v2", "list_ops"]
