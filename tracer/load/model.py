"""Loading a model: a TF1 checkpoint, a SavedModel, a frozen GraphDef, a Keras file, or a live session.

`load_model(path)` returns a `Model`: a graph with its weights in a session, ready for
`find_cells` and `Session.run`. The format is told from what is on disk:

    P with P.meta beside it (or P.meta itself)     checkpoint: import meta graph, restore
    a directory holding a `checkpoint` file        its latest checkpoint
    a directory holding saved_model.pb             SavedModel: the meta graph tagged exactly `serve`;
                                                   a TF2 one (its signatures call functions) has the
                                                   functions of `signature` inlined (`tracer.load.inline`)
    a file ending in .pb                           frozen GraphDef: weights are Consts
    .keras, .h5, a folder with keras_metadata.pb   Keras: a `tracer.load.keras.KerasModel`

Before any graph is imported, `tracer.load.import_check` reads its serialized form and refuses
ops that TensorFlow could evaluate while importing and that do more than compute.
Loading runs what TensorFlow's loaders would run, taken from the file the way they take
it (a `LoadPlan`: the Saver's restore op, a SavedModel's init op), but gatetrace runs
those ops itself, after `tracer.load.safety` has checked them: every op on the allowlist,
every restore op reading the model's own checkpoint, and every variable it restores
present in that checkpoint. `allow_unsafe_ops` skips the op check. With `restore=False`
nothing runs at all (for `inspect`).

A graph calling cuDNN's RNN ops (exported on a GPU), which have no CPU kernel, is loaded with
those ops replaced by the same LSTM or GRU steps (`tracer.load.cudnn`); one of static_rnn given
sequence_length, with its steps drawn out of their conditionals (`tracer.load.conds`).

Each format is read by a module of its own, listed in `tracer.load.formats` (`checkpoint`,
`saved_model`, `frozen`, `keras`, `tflite`), and ends in the same `Model` (`tracer.load.loaded`;
a Keras model in a `KerasModel`, a TensorFlow Lite file in a `LiteModel`) through the same path
rules (`tracer.load.paths`); cuDNN ops are replaced and conditionals drawn straight in
`tracer.load.rebuild`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recorders.errors import ModelFormatError
from tracer.load.custom import custom_objects as custom_objects_of
from tracer.load.formats import DEFAULT_SIGNATURE, FORMAT_LIST, FORMATS, LoadRequest

if TYPE_CHECKING:  # each imports TensorFlow; a .tflite file is read without it
    from tracer.load.keras import KerasModel
    from tracer.load.loaded import Model
    from tracer.load.tflite import LiteModel

__all__ = ["load_model", "FORMATS"]


def load_model(
    path: str | os.PathLike,
    tag: str = "serve",
    *,
    signature: str = DEFAULT_SIGNATURE,
    restore: bool = True,
    allow_unsafe_ops: bool = False,
    custom_objects: str | os.PathLike | Mapping[str, Any] | None = None,
) -> Model | KerasModel | LiteModel:
    """Load the model at `path` (see the module docstring for the formats and the checks).

    `restore=False` loads the graph only, running nothing (enough to find cells). A Keras
    file (`.keras`, `.h5`, a SavedModel folder with keras_metadata.pb) gives a
    `tracer.load.keras.KerasModel` instead, a `.tflite` file a `tracer.load.tflite.LiteModel`
    (read without importing TensorFlow); `custom_objects` names the Python file that
    defines the classes of yours it is built from (imported: `tracer.load.custom`).
    """
    source, p = str(path), Path(path)
    request = LoadRequest(
        tag, signature, restore, allow_unsafe_ops, custom_objects_of(custom_objects)
    )
    # those read without TensorFlow first: trying the others imports it
    for fmt in sorted(FORMAT_LIST, key=lambda f: f.light_suffix is None):
        model = importlib.import_module(fmt.module).read(p, source, request)
        if model is not None:
            return model
    if not p.exists() and Path(f"{source}.index").is_file():
        from tracer.load.checkpoint import weights_only

        raise ModelFormatError(weights_only(source, source))
    if not p.exists():
        raise ModelFormatError(
            f"model not found: {source} does not exist (and neither does {source}.meta); expected {FORMATS}"
        )
    raise ModelFormatError(f"{source} is in no format gatetrace reads; expected {FORMATS}")
