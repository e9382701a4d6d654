"""The one place gatetrace imports TensorFlow.

`tf.compat.v1.nn.rnn_cell.*` lives in tf-keras and is only reachable when
`TF_USE_LEGACY_KERAS=1` is set before TensorFlow is first imported, so every module
of `tracer` takes `tf` from here. Graph building and loading happen inside explicit
`tf.Graph` contexts, so eager execution is left as the user has it.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

# TensorFlow's own modules that gatetrace uses outside its public API, imported here for the
# same reason as `tf` itself: after the settings above
from tensorflow.core.example import example_pb2
from tensorflow.python.framework.function_def_to_graph import function_def_to_graph
from tensorflow.python.ops import control_flow_util_v2, list_ops

v1 = tf.compat.v1

__all__ = ["tf", "v1", "example_pb2", "function_def_to_graph", "control_flow_util_v2", "list_ops"]
