"""Keras models: reading `.keras`, `.h5` and tf-keras SavedModel files, and the model they give.

`load_keras` reads `.keras` and `.h5` files (tf-keras or Keras 3, told from the file) and
tf-keras SavedModel folders (those holding keras_metadata.pb), in Keras' safe mode, after
`tracer.load.keras_files` has checked them; Keras 2.0/2.1 files are read as those versions
meant them (`keras2_fixes`), and Keras 2's cuDNN layers as the layers they equal on a CPU
(`tracer.load.keras_cudnn`). A `KerasModel` is the model with where it came from; `wrap`
makes one of a live model object. Finding the RNN layers is `tracer.find.keras`, capturing
and replaying them `tracer.values.keras`.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recorders.errors import GatetraceError, ModelFormatError, UnsafeGraphError, listing
from tracer._tf import tf
from tracer.load.formats import KerasInput, LoadRequest
from tracer.load.keras_cudnn import cudnn_layers, on_cpu
from tracer.load.keras_files import check_keras_file, custom_classes, keras2_fixes, keras_config

__all__ = [
    "read",
    "classes_outside_keras",
    "KerasModel",
    "KerasInput",
    "is_keras",
    "framework_of",
    "wrap",
    "is_keras_file",
    "load_keras",
    "to_numpy",
]


@dataclass
class KerasModel:
    """A Keras model (tf-keras or Keras 3) and where it came from.

    format says which Keras and which file: `keras3 .keras`, `tf-keras savedmodel`,
    `keras3 model` (an object handed to `wrap`) and so on.
    """

    model: Any
    source: str
    format: str
    notes: tuple[str, ...] = ()  # how it was read, where that is not plain

    @property
    def inputs(self) -> list[KerasInput]:
        names = getattr(self.model, "input_names", None) or [t.name for t in self.model.inputs]
        return [
            KerasInput(n.split(":")[0], tf.TensorShape(t.shape), tf.as_dtype(t.dtype))
            for n, t in zip(names, self.model.inputs, strict=True)
        ]

    def close(self) -> None:
        """Nothing to release (the model is an ordinary Python object); for symmetry with `Model`."""

    def __enter__(self) -> KerasModel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def is_keras(obj: Any) -> bool:
    """Whether `obj` is a Keras model object (tf-keras or Keras 3)."""
    return any(
        c.__module__.startswith(("keras.", "tf_keras."))
        and c.__name__ in ("Model", "Functional", "Sequential")
        for c in type(obj).__mro__
    )


def framework_of(obj: Any) -> str:
    """`tf-keras` or `keras3`: which Keras a model object is of."""
    return "tf-keras" if type(obj).__module__.startswith("tf_keras") else "keras3"


def wrap(model: Any, source: str = "Keras model") -> KerasModel:
    """A live Keras model object as a KerasModel (nothing is copied)."""
    return KerasModel(model, source, f"{framework_of(model)} model")


def is_keras_file(path: str | os.PathLike) -> bool:
    p = Path(path)
    return (p.is_file() and p.suffix in (".keras", ".h5", ".hdf5")) or (
        p.is_dir() and (p / "keras_metadata.pb").is_file()
    )


def classes_outside_keras(path: Path, allow_unsafe_ops: bool) -> list[str]:
    """The classes a tf-keras SavedModel folder's keras_metadata.pb names that Keras does not
    have (none for a file, or with `allow_unsafe_ops`): such a folder is read as a SavedModel
    (`tracer.load.saved_model.read`), not by Keras."""
    if allow_unsafe_ops or not (path.is_dir() and is_keras_file(path)):
        return []
    return custom_classes(path)


def read(path: Path, source: str, request: LoadRequest) -> KerasModel | None:
    """The Keras model in `path` (a `.keras`/`.h5` file, a tf-keras SavedModel folder whose
    classes are all Keras' own), or None."""
    if not is_keras_file(path) or classes_outside_keras(path, request.allow_unsafe_ops):
        return None
    return load_keras(
        path, allow_unsafe_ops=request.allow_unsafe_ops, custom_objects=request.custom_objects
    )


def _saved_by(p: Path) -> str:
    """`keras3` or `tf-keras`: which Keras wrote the file."""
    if p.is_dir():
        return "tf-keras"  # Keras 3 cannot save a SavedModel it can load again (only `export`)
    try:
        if p.suffix == ".keras":
            with zipfile.ZipFile(p) as z:
                version = json.loads(z.read("metadata.json")).get("keras_version", "")
        else:
            import h5py

            with h5py.File(p, "r") as f:
                version = f.attrs.get("keras_version", "")
                version = version.decode() if isinstance(version, bytes) else str(version)
    except Exception as err:
        raise ModelFormatError(f"{p}: cannot read it as a Keras {p.suffix} file: {err}") from None
    return "keras3" if version.startswith("3.") else "tf-keras"


def load_keras(
    path: str | os.PathLike,
    *,
    allow_unsafe_ops: bool = False,
    custom_objects: Mapping[str, Any] | None = None,
) -> KerasModel:
    """Load a Keras model file (see the module docstring), without compiling it.
    `custom_objects` are your own classes by name (`tracer.load.custom`): the file may name
    them, and Keras builds them.

    Unless `allow_unsafe_ops`, the file is checked first (`tracer.keras_files`): anything
    beyond Keras' own layers is refused before Keras reads it, and a tf-keras SavedModel
    is built from its checked configuration, its weights read from its checkpoint, so
    that none of the functions stored in it run. Whatever Keras unpacks goes to a
    temporary folder that is removed afterwards.
    """
    p, source = Path(path), str(path)
    framework = _saved_by(p)
    kind = "savedmodel" if p.is_dir() else p.suffix
    yours = dict(custom_objects or {})
    if not allow_unsafe_ops:
        check_keras_file(p, frozenset(yours))
    try:
        with _private_tempdir():
            if framework == "keras3":
                import keras

                model = keras.saving.load_model(
                    source, compile=False, safe_mode=not allow_unsafe_ops, custom_objects=yours
                )
            elif p.is_dir() and not allow_unsafe_ops:
                model = _tf_keras_from_saved_model(p, source)
            elif p.suffix in (".h5", ".hdf5") and (fixes := keras2_fixes(keras_config(p))):
                model = _tf_keras_from_h5(p, fixes, allow_unsafe_ops)
            else:
                import tf_keras
                from tf_keras.src.saving.serialization_lib import SafeModeScope

                with SafeModeScope(not allow_unsafe_ops):
                    model = tf_keras.models.load_model(
                        source, compile=False, safe_mode=not allow_unsafe_ops, custom_objects=yours
                    )
        cudnn = cudnn_layers(model) if framework == "tf-keras" else []
        if cudnn:  # Keras 2's CuDNNLSTM and CuDNNGRU, as what they compute
            model = on_cpu(model)
    except GatetraceError:
        raise
    except Exception as err:
        text = _first_sentence(err)
        if "safe_mode" in str(err) or "arbitrary code" in str(err):
            raise UnsafeGraphError(
                f"{source}: loading it would run Python code stored in the file ({text[:160]}); "
                "if you trust its source, rerun with --allow-unsafe-ops"
            ) from None
        raise ModelFormatError(f"{source}: cannot load it with {framework}: {text}") from None
    notes = (
        (
            f"{listing(cudnn, 4)} run cuDNN's fused op, which has no CPU kernel: recorded as the LSTM and "
            "GRU(reset_after=True) they equal (their weights converted as Keras' own loader converts them)",
        )
        if cudnn
        else ()
    )
    return KerasModel(model, source, f"{framework} {kind}", notes)


def _first_sentence(err: Exception) -> str:
    """The first sentence of what Keras says in `err`, whole: its first line, and the next
    ones where a line ends in a comma (Keras goes on with what it found: "Expected 'config'
    to be a dict for Functional,\ninstead got <class 'list'>\nFull config: ...")."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    end = 1
    while end < len(lines) and lines[end - 1].endswith(","):
        end += 1
    return " ".join(lines[:end])


def _tf_keras_from_saved_model(p: Path, source: str) -> Any:
    """A tf-keras model built from a SavedModel's checked configuration, with the weights of
    its variables checkpoint; every weight of the model must be found there."""
    from tf_keras.src.saving.legacy import model_config
    from tf_keras.src.saving.legacy.saved_model import json_utils

    config = json_utils.decode(json.dumps(keras_config(p)))
    model = model_config.model_from_config(config)
    status = model.load_weights(str(p / "variables" / "variables"))
    try:
        status.assert_existing_objects_matched()
    except AssertionError as err:
        raise ModelFormatError(
            f"{source}: its variables do not match the model its keras_metadata.pb describes: {str(err)[:200]}"
        ) from None
    status.expect_partial()
    return model


def _tf_keras_from_h5(p: Path, config: dict, allow_unsafe_ops: bool) -> Any:
    """A tf-keras model built from a Keras 2 `.h5` file's configuration as fixed by
    `keras2_fixes`, with the file's weights."""
    import tf_keras
    from tf_keras.src.saving.serialization_lib import SafeModeScope

    with SafeModeScope(not allow_unsafe_ops):
        model = tf_keras.models.model_from_json(json.dumps(config))
    model.load_weights(str(p))
    return model


@contextmanager
def _private_tempdir() -> Iterator[None]:
    """Point Python's temporary files at a folder of our own while Keras reads a file, then remove it."""
    import tempfile

    previous = tempfile.tempdir
    with tempfile.TemporaryDirectory(prefix="gatetrace-keras-") as folder:
        tempfile.tempdir = folder
        try:
            yield
        finally:
            tempfile.tempdir = previous


def variable_name(v: Any) -> str:
    """A Keras weight's name as the model knows it (Keras 3's path, tf-keras' name)."""
    return str(getattr(v, "path", None) or v.name).removesuffix(":0")


def to_numpy(v: Any) -> np.ndarray:
    """A Keras variable or tensor (either Keras) as a numpy array."""
    return np.asarray(v.numpy() if hasattr(v, "numpy") else v)
