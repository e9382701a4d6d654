"""Keras files, checked before any Keras code reads them.

A Keras file names the classes and functions its model is built from, and Keras imports
and calls what it names: a `Lambda` layer's function (bytecode, or any module function
given by name), a custom layer, a function revived from a SavedModel. Keras' safe mode
only blocks bytecode. So gatetrace reads the file's configuration itself first, as JSON,
and accepts only what it knows to be Keras' own pure building blocks:

    .keras   a zip of exactly config.json, metadata.json and model.weights.h5, within
             size limits (no extra members: nothing else is unpacked anywhere)
    .h5      the `model_config` attribute (a file without it holds weights only)
    folder   keras_metadata.pb of a tf-keras SavedModel: the model's configuration (its root)

HDF5 files (`.h5`, and the `.keras` archive's model.weights.h5) are walked first, link by
link, without reading any data: a dataset stored in another file (external raw storage),
a link to another file, or a virtual dataset (which maps other files' datasets in) would
make Keras read a file that is not the model, so any of them is refused.

What is checked is what the loader builds: the model's layers and what they hold. Loading
never compiles, so a compiled model's optimizer, loss and metrics (`compile_config`,
`training_config`, the metric objects a SavedModel lists) are never built and not checked.
Every `class_name` must be a known layer or dtype policy of Keras (`KNOWN_CLASSES`), or one
of the initializers, regularizers and constraints Keras itself ships (read from the modules
of each Keras installed, at run time: `OrthogonalInitializer` is Keras 3's name for
`Orthogonal`), from Keras' own modules. A tf-keras
SavedModel is then never handed to a loader: the model is built from its checked
configuration and its weights read from its variables checkpoint, so none of the
functions or resource initializers stored in the folder run. `allow_unsafe_ops` skips
all of this and loads the file as Keras would.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
import zipfile
from pathlib import Path
from typing import Any, Iterator

from recorders.errors import ModelFormatError, UnsafeGraphError, listing

__all__ = ["KNOWN_CLASSES", "keras_own_classes", "h5_problems", "check_keras_file", "keras_config", "keras2_fixes"]

KNOWN_CLASSES = frozenset(
    """
    InputLayer Functional Model Sequential
    LSTM GRU SimpleRNN RNN LSTMCell GRUCell SimpleRNNCell StackedRNNCells Bidirectional TimeDistributed
    Masking Dense Dropout SpatialDropout1D GaussianNoise GaussianDropout AlphaDropout Embedding
    Activation ReLU LeakyReLU PReLU ELU Softmax ThresholdedReLU Flatten Reshape Permute RepeatVector
    Cropping1D ZeroPadding1D UpSampling1D Concatenate Add Subtract Multiply Average Maximum Minimum Dot
    Conv1D SeparableConv1D DepthwiseConv1D MaxPooling1D AveragePooling1D MaxPool1D AvgPool1D
    GlobalAveragePooling1D GlobalMaxPooling1D GlobalAvgPool1D GlobalMaxPool1D
    BatchNormalization LayerNormalization UnitNormalization Rescaling Identity
    GlorotUniform GlorotNormal HeNormal HeUniform LecunNormal LecunUniform Orthogonal Zeros Ones Constant
    RandomNormal RandomUniform TruncatedNormal VarianceScaling IdentityInitializer
    L1 L2 L1L2 OrthogonalRegularizer MaxNorm MinMaxNorm NonNeg UnitNorm
    DTypePolicy FloatDTypePolicy Policy
    __keras_tensor__ __tuple__ TensorShape TypeSpec InputSpec
    """.split()
)
# Keras 3 names the module of each object; these are Keras' own. Its functional models
# also hold Keras' math operations (keras.src.ops.*) as nodes.
_MODULES = {None, "keras", "keras.layers", "keras.initializers", "keras.regularizers", "keras.constraints", "keras.mixed_precision"}
_MODEL_MODULES = {
    "keras.models", "keras.src.models.functional", "keras.src.models.sequential", "keras.src.models.model",
    "tf_keras.src.engine.functional", "tf_keras.src.engine.sequential", "tf_keras.src.engine.training",
}
_OPS_MODULE = re.compile(r"keras\.src\.ops\.\w+")
_OP_CLASS = re.compile(r"[A-Z][A-Za-z0-9]*")

_MEMBERS = {"config.json": 64 << 20, "metadata.json": 1 << 20, "model.weights.h5": None}  # name -> largest size (None: see below)
_WEIGHTS_RATIO = 50  # the most an uncompressed weights file may exceed its compressed size by, beyond 64 MiB


@functools.cache
def keras_own_classes() -> frozenset[str]:
    """The names of the initializers, regularizers and constraints that Keras ships, read from
    the modules of each Keras installed (tf-keras, Keras 3): pure objects that make weights'
    starting values or penalties, whatever names a version gives them."""
    names: set[str] = set()
    for package in ("keras", "tf_keras"):
        try:
            keras = importlib.import_module(package)
        except ImportError:
            continue
        for kind, base in (("initializers", "Initializer"), ("regularizers", "Regularizer"), ("constraints", "Constraint")):
            module = getattr(keras, kind, None)
            root = getattr(module, base, None)
            for name in dir(module) if root is not None else ():
                obj = getattr(module, name)
                if isinstance(obj, type) and issubclass(obj, root) and obj is not root and obj.__module__.split(".")[0] == package:
                    names |= {name, obj.__name__}
    return frozenset(names)


def _objects(value: Any, where: str = "config") -> Iterator[tuple[str, dict]]:
    """Every (path, object) of a configuration that names a class."""
    if isinstance(value, dict):
        if "class_name" in value:
            yield where, value
        for key, item in value.items():
            yield from _objects(item, f"{where}.{key}")
    elif isinstance(value, list):
        for k, item in enumerate(value):
            yield from _objects(item, f"{where}[{k}]")


def _refused(config: Any) -> list[str]:
    """What in a configuration gatetrace does not accept, as `Class (why)` items."""
    found = []
    for _, obj in _objects(config):
        name, module = obj.get("class_name"), obj.get("module")
        if not isinstance(name, str) or not (module is None or isinstance(module, str)):
            found.append(f"{name!r} (not a class name)")
        elif module is not None and _OPS_MODULE.fullmatch(module):
            if not _OP_CLASS.fullmatch(name):
                found.append(f"{name} (not an operation of {module})")
        elif name not in KNOWN_CLASSES and name not in keras_own_classes():
            why = "runs a Python function named in the file" if name in ("Lambda", "function") else "not one of Keras' own layers"
            found.append(f"{name} ({why})")
        elif module not in _MODULES and not (name in ("Functional", "Sequential", "Model") and module in _MODEL_MODULES):
            found.append(f"{name} (from the module {module}, not Keras)")
        elif obj.get("registered_name") not in (None, name):
            found.append(f"{name} (registered as {obj['registered_name']}, a custom object)")
    return sorted(set(found))


def _refuse(source: str, found: list[str], what: str = "loading it would build objects gatetrace does not check as safe") -> None:
    """UnsafeGraphError naming `found` (`thing (why)` items), if there are any."""
    if found:
        raise UnsafeGraphError(
            f"{source}: {what}: {listing(found, 6)}; nothing was loaded. If you trust this model, pass --allow-unsafe-ops"
        )


def _zip_config(p: Path, source: str) -> dict:
    try:
        with zipfile.ZipFile(p) as z:
            infos = z.infolist()
            extra = sorted(i.filename for i in infos if i.filename not in _MEMBERS)
            if extra:
                raise UnsafeGraphError(
                    f"{source}: the archive holds members a Keras model file does not ({', '.join(extra[:5])}); "
                    "nothing was unpacked. If you trust this model, pass --allow-unsafe-ops"
                )
            for i in infos:
                limit = _MEMBERS[i.filename] or max(64 << 20, _WEIGHTS_RATIO * i.compress_size)
                if i.file_size > limit:
                    raise UnsafeGraphError(
                        f"{source}: its member {i.filename} unpacks to {i.file_size:,} bytes from {i.compress_size:,}, "
                        f"more than the {limit:,} a Keras model file needs; nothing was unpacked"
                    )
            if "config.json" not in z.namelist():
                raise ModelFormatError(f"{source}: the archive has no config.json; it is not a Keras model file")
            return json.loads(z.read("config.json"))
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise ModelFormatError(f"{source}: cannot read it as a Keras .keras file (a zip archive): {err}") from None


_OUTSIDE = "its HDF5 weights would be read from outside the file (a Keras file holds its own)"


def h5_problems(source: str, file) -> list[str]:
    """`path (why)` for every object of an HDF5 file (a path or a binary file object) whose
    data would be read from outside it: external raw storage, external links, virtual
    datasets. Only the file's structure is read, never a dataset's values, and no link is followed."""
    import h5py

    problems, seen = [], set()
    try:
        with h5py.File(file, "r") as f:
            stack = [f]
            while stack:
                group = stack.pop()
                for name in group:
                    path = f"{group.name.rstrip('/')}/{name}"
                    link = group.get(name, getlink=True)
                    if isinstance(link, h5py.ExternalLink):
                        problems.append(f"{path} (a link to {link.filename}, another file)")
                        continue
                    if isinstance(link, h5py.SoftLink):  # a name for an object of this file, visited by its own
                        continue
                    obj = group[name]
                    address = h5py.h5o.get_info(obj.id).addr  # an object linked twice is walked once
                    if address in seen:
                        continue
                    seen.add(address)
                    if isinstance(obj, h5py.Group):
                        stack.append(obj)
                    elif isinstance(obj, h5py.Dataset):
                        plist = obj.id.get_create_plist()
                        if plist.get_external_count():
                            problems.append(f"{path} (stored in {plist.get_external(0)[0].decode(errors='replace')}, another file)")
                        elif plist.get_layout() == h5py.h5d.VIRTUAL:
                            problems.append(f"{path} (a virtual dataset, mapping other files in)")
    except (OSError, ValueError, KeyError) as err:
        raise ModelFormatError(f"{source}: cannot read it as an HDF5 file: {err}") from None
    return sorted(problems)


def _h5_config(p: Path, source: str) -> dict:
    import h5py

    try:
        with h5py.File(p, "r") as f:
            text = f.attrs.get("model_config")
            if text is None:
                what = "layer_names" in f.attrs or "model_weights" not in f
                raise ModelFormatError(
                    f"{source}: the file holds {'weights only' if what else 'no model'} (saved with save_weights?) and no "
                    "architecture: save the model with model.save, or build it in Python and pass it to tracer.record"
                )
            return json.loads(text.decode() if isinstance(text, bytes) else text)
    except (OSError, ValueError) as err:
        raise ModelFormatError(f"{source}: cannot read it as a Keras .h5 file: {err}") from None


def _saved_model_metadata(p: Path, source: str) -> list[dict]:
    """The metadata of every object a tf-keras SavedModel's keras_metadata.pb lists, root first."""
    from tf_keras.protobuf import saved_metadata_pb2

    try:
        proto = saved_metadata_pb2.SavedMetadata.FromString((p / "keras_metadata.pb").read_bytes())
        nodes = sorted(proto.nodes, key=lambda n: n.node_path != "root")
        return [json.loads(n.metadata) for n in nodes]
    except Exception as err:
        raise ModelFormatError(f"{source}: cannot read its keras_metadata.pb: {err}") from None


def keras_config(path: str | Path) -> dict:
    """The model configuration a Keras file holds (`{"class_name": ..., "config": ...}`), read as data."""
    p, source = Path(path), str(path)
    if p.is_dir():
        metadata = _saved_model_metadata(p, source)
        if not metadata or "config" not in metadata[0]:
            raise ModelFormatError(f"{source}: its keras_metadata.pb describes no model")
        return {"class_name": metadata[0].get("class_name"), "config": metadata[0]["config"]}
    config = _zip_config(p, source) if p.suffix == ".keras" else _h5_config(p, source)
    return {k: v for k, v in config.items() if k != "compile_config"}  # models are loaded without compiling


def check_keras_file(path: str | Path) -> None:
    """UnsafeGraphError (ModelFormatError) if the Keras file at `path` names anything beyond
    Keras' own building blocks (is not a Keras file gatetrace can read); nothing is loaded."""
    p, source = Path(path), str(path)
    _refuse(source, _refused(keras_config(p)))  # (an archive's members and sizes are checked first)
    if p.is_dir():
        return
    if p.suffix == ".keras":
        with zipfile.ZipFile(p) as z:
            if "model.weights.h5" in z.namelist():
                with z.open("model.weights.h5") as weights:
                    _refuse(f"{source} (model.weights.h5)", h5_problems(source, weights), _OUTSIDE)
    else:
        _refuse(source, h5_problems(source, p), _OUTSIDE)


def keras2_fixes(config: dict) -> dict | None:
    """The configuration with what Keras 2.0 and 2.1 files leave out filled in as they meant
    it, or None when nothing is missing: a GRU without `reset_after` is `reset_after=False`
    (the key came with Keras 2.1.3; tf-keras defaults it to True and then cannot load the
    weights)."""
    fixed = json.loads(json.dumps(config))
    changed = False
    for _, obj in _objects(fixed):
        if obj.get("class_name") in ("GRU", "GRUCell") and isinstance(obj.get("config"), dict) and "reset_after" not in obj["config"]:
            obj["config"]["reset_after"] = False
            changed = True
    return fixed if changed else None
