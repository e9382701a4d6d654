"""The model formats `load_model` reads: one `Format` each, with what it reads as the help and
the errors name it, and the module that reads it. Imports nothing heavy: the command line's
help is made from it before TensorFlow loads.

Each format's module has one hook, `read(path, source, request)`: the model loaded (a
`tracer.load.loaded.Model`, a `tracer.load.keras.KerasModel`, a `tracer.load.tflite.LiteModel`),
or None where `path` is not in its format. `KerasInput` is what a Keras model or TensorFlow Lite
file takes, where a graph takes placeholders. The formats' rules do not overlap, so the order
they are tried in does not matter to what is read: a folder holding saved_model.pb is a
SavedModel's, not a checkpoint's, and a tf-keras SavedModel folder is Keras' unless its metadata
names classes Keras does not have. It matters to how long it takes: a format whose module
imports no TensorFlow (`light_suffix`) is tried first, so that a `.tflite` file is read
without it. A new format is a module with that hook and its line here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracer._tf import tf

__all__ = [
    "Format",
    "LoadRequest",
    "KerasInput",
    "FORMAT_LIST",
    "FORMATS",
    "DEFAULT_SIGNATURE",
    "without_tensorflow",
    "LITE_SUFFIX",
]

DEFAULT_SIGNATURE = "serving_default"  # the signature a SavedModel serves unless asked


@dataclass(frozen=True)
class LoadRequest:
    """How `load_model` was asked to load: the SavedModel tag and signature, whether to
    restore the weights (False: load the graph only, running nothing), whether ops
    outside the allowlist may run, and your own Keras classes (`tracer.load.custom`)."""

    tag: str
    signature: str
    restore: bool = True
    allow_unsafe_ops: bool = False
    custom_objects: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class KerasInput:
    """One input of a Keras model or a TensorFlow Lite file, standing where a placeholder
    stands in a graph's feeds (its shape and dtype TensorFlow's, made where it is read);
    `aliases`: other names it is fed by (a TensorFlow Lite input's tensor name, beside its
    signature's name)."""

    name: str
    shape: tf.TensorShape
    dtype: tf.DType
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Format:
    """One model format: `name` (a loaded model's `format`), what it reads as the help says
    it, and the module whose `read` hook reads it."""

    name: str
    reads: str
    module: str
    # the suffix that alone says a file is in this format, where reading it imports no TensorFlow
    light_suffix: str | None = None


LITE_SUFFIX = ".tflite"  # what names a TensorFlow Lite file (its `read` hook asks the same)

FORMAT_LIST = (
    Format(
        "checkpoint",
        "a checkpoint prefix P with P.meta beside it, a folder holding a 'checkpoint' file",
        "tracer.load.checkpoint",
    ),
    Format("saved_model", "a SavedModel folder (saved_model.pb)", "tracer.load.saved_model"),
    Format("frozen", "a frozen GraphDef .pb", "tracer.load.frozen"),
    Format("keras", "a Keras .keras/.h5 file (or tf-keras SavedModel folder)", "tracer.load.keras"),
    Format(
        "tflite", "a TensorFlow Lite .tflite file", "tracer.load.tflite", light_suffix=LITE_SUFFIX
    ),
)

# as the help and the errors say it: "a ..., a ..., or a ..."
_LISTED = [f.reads for f in FORMAT_LIST]
FORMATS = ", ".join(_LISTED[:-1]) + ", or " + _LISTED[-1]


def without_tensorflow(path: str) -> bool:
    """Whether the model at `path` is read without importing TensorFlow (a `.tflite` file:
    `inspect` answers it in about a second)."""
    return any(f.light_suffix and Path(path).suffix == f.light_suffix for f in FORMAT_LIST)
