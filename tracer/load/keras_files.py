"""Keras files, checked before any Keras code reads them.

A Keras file names the classes and functions its model is built from, and Keras imports
and calls what it names: a `Lambda` layer's function (bytecode, or any module function
given by name), a custom layer, a function revived from a SavedModel. Keras' safe mode
only blocks bytecode. So gatetrace reads the file's configuration itself first, as JSON,
and accepts only what it knows to be Keras' own pure building blocks:

    .keras   a zip of config.json, metadata.json, model.weights.h5 and the assets Keras
             saves for the model's layers (`assets/layers/NAME/...`: a vocabulary, read by
             Keras from inside the archive), within size limits; nothing else
    .h5      the `model_config` attribute (a file without it holds weights only)
    folder   keras_metadata.pb of a tf-keras SavedModel: the model's configuration (its root)

HDF5 files (`.h5`, and the `.keras` archive's model.weights.h5) are walked first, link by
link, without reading any data: a dataset stored in another file (external raw storage),
a link to another file, or a virtual dataset (which maps other files' datasets in) would
make Keras read a file that is not the model, so any of them is refused (the HDF5 walk:
`tracer.load.keras_h5`).

What is checked is what the loader builds: the model's layers and what they hold. Loading
never compiles, so a compiled model's optimizer, loss and metrics (`compile_config`,
`training_config`, the metric objects a SavedModel lists) are never built and not checked.
"Keras' own" is read from each Keras installed (tf-keras, Keras 3), not kept in a list:
every layer, initializer, regularizer and constraint its public namespaces export
(`keras_own_classes`), from a module of Keras or tf-keras, besides its models, dtype
policies and tensor markers (`KNOWN_CLASSES`). Out of those, what runs code or reads files
that are not the model is refused by name (`RUNS_CODE`: `Lambda`, `TFSMLayer`, the
PyTorch, JAX and Flax wrappers), as is a layer whose configuration names a file to read (a
lookup layer's vocabulary given as a path) and any function named in the configuration.
A recurrent layer gatetrace does not record (a cell class of one's own) loads, and the finder
names it.
A tf-keras SavedModel is then never handed to a loader: the model is built from its checked
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
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from recorders.errors import ModelFormatError, UnsafeGraphError, listing
from tracer.load.keras_h5 import WEIGHTS_RATIO, config_json, h5_config, h5_oversized, h5_problems

__all__ = [
    "KNOWN_CLASSES",
    "RUNS_CODE",
    "keras_own_classes",
    "check_keras_file",
    "keras_config",
    "keras2_fixes",
]

# What a Keras configuration names besides layers: its models, dtype policies, and the
# markers Keras writes for tensors and shapes. Layers, initializers, regularizers and
# constraints are read from the installed Keras and tf-keras themselves (`keras_own_classes`).
KNOWN_CLASSES = frozenset(
    """
    Functional Model Sequential DTypePolicy FloatDTypePolicy Policy
    __keras_tensor__ __tuple__ TensorShape TypeSpec InputSpec
    """.split()
)
# Keras' own layers that run code, or read files, that are not the model: never accepted.
RUNS_CODE = {
    "Lambda": "runs a Python function named in the file",
    "TFSMLayer": "loads a SavedModel from a path outside the file",
    "TorchModuleWrapper": "unpickles a PyTorch module stored in the file",
    "JaxLayer": "calls JAX functions named in the file",
    "FlaxLayer": "calls a Flax module named in the file",
}
# Configuration keys whose text value Keras reads as a file name (a lookup layer's vocabulary
# given as a path, a vectorizer's IDF weights): a layer naming a file this way reads outside the model.
_FILE_KEYS = ("vocabulary", "idf_weights", "filepath")
# A configuration names the module of each object: any module of Keras or tf-keras is
# Keras' (the class must still be one of Keras' own). tf.keras 2.13-2.15 files name their
# modules `keras.src.engine...`: that Keras is tf-keras today. Functional models of Keras 3
# also hold Keras' math operations (keras.src.ops.*) as nodes.
_KERAS_PACKAGES = ("keras", "tf_keras")
NOT_KERAS = "not one of Keras' own layers"  # a class whose code a Keras file does not hold
# (package, the namespace that exports its objects): tf-keras' TF2 one, and its TF1 one,
# `tf.compat.v1.keras`, whose layers include Keras 2's CuDNNLSTM and CuDNNGRU
_NAMESPACES = (("keras", "keras"), ("tf_keras", "tf_keras"), ("tf_keras", "tf_keras.api._v1.keras"))
_OPS_MODULE = re.compile(r"keras\.src\.ops\.\w+")
_OP_CLASS = re.compile(r"[A-Z][A-Za-z0-9]*")

# name -> largest size (None: see below)
_MEMBERS = {"config.json": 64 << 20, "metadata.json": 1 << 20, "model.weights.h5": None}


@functools.cache
def keras_own_classes() -> frozenset[str]:
    """The names of the layers, initializers, regularizers and constraints that Keras ships,
    read from the public namespaces of each Keras installed (tf-keras and its
    `tf.compat.v1.keras`, Keras 3): every class
    `keras.layers` (`keras.initializers`, ...) exports that derives from its `Layer`
    (`Initializer`, ...) and is defined in that package, whatever names a version gives them
    (`OrthogonalInitializer` is Keras 3's name for `Orthogonal`). `RUNS_CODE` is left out."""
    names: set[str] = set()
    for package, namespace in _NAMESPACES:
        try:
            keras = importlib.import_module(namespace)
        except ImportError:
            continue
        for kind, base in (
            ("layers", "Layer"),
            ("initializers", "Initializer"),
            ("regularizers", "Regularizer"),
            ("constraints", "Constraint"),
        ):
            module = getattr(keras, kind, None)
            root = getattr(module, base, None)
            if root is None:
                continue
            for name in dir(module):
                obj = getattr(module, name)
                if (
                    isinstance(obj, type)
                    and issubclass(obj, root)
                    and obj.__module__.split(".")[0] == package
                ):
                    names |= {name, obj.__name__}
    return frozenset(names - set(RUNS_CODE))


def _reads_a_file(obj: dict) -> str | None:
    """The file a layer's configuration names for Keras to read (`_FILE_KEYS`), if any."""
    config = obj.get("config")
    if not isinstance(config, dict):
        return None
    return next((v for v in (config.get(key) for key in _FILE_KEYS) if isinstance(v, str)), None)


# how deeply objects that name a class may nest (a model in a model in a wrapper in an RNN
# over stacked cells is 5 deep): Keras builds them by recursion, which a deeper file exhausts
MAX_NESTING = 32


def _objects(value: Any, where: str = "config") -> Iterator[tuple[str, dict]]:
    """Every (path, object) of a configuration that names a class, walked without recursion;
    an object nested more than MAX_NESTING deep is given (its path starting with `>`), but
    not what it holds."""
    todo: list[tuple[Any, str, int]] = [(value, where, 0)]
    while todo:
        item, path, depth = todo.pop()
        if isinstance(item, dict):
            if "class_name" in item:
                depth += 1
                if depth > MAX_NESTING:
                    yield f">{path}", item
                    continue
                yield path, item
            todo += [(v, f"{path}.{k}", depth) for k, v in reversed(list(item.items()))]
        elif isinstance(item, list):
            todo += [(v, f"{path}[{k}]", depth) for k, v in reversed(list(enumerate(item)))]


def _refused(config: Any, yours: frozenset[str] = frozenset()) -> list[str]:
    """What in a configuration gatetrace does not accept, as `Class (why)` items; the
    classes `yours` names (the user's own, `tracer.load.custom`) are accepted by name, what
    they hold is checked as everything else."""
    found = []
    for path, obj in _objects(config):
        name, module = obj.get("class_name"), obj.get("module")
        if path.startswith(">"):
            found.append(
                f"{name} (nested more than {MAX_NESTING} objects deep, deeper than any model Keras saves; Keras "
                "would build it by recursion without end)"
            )
        elif isinstance(name, str) and name in yours and name not in RUNS_CODE:
            continue
        if not isinstance(name, str) or not (module is None or isinstance(module, str)):
            found.append(f"{name!r} (not a class name)")
        elif module is not None and _OPS_MODULE.fullmatch(module):
            if not _OP_CLASS.fullmatch(name):
                found.append(f"{name} (not an operation of {module})")
        elif name in RUNS_CODE or name == "function":
            found.append(
                f"{name} ({RUNS_CODE.get(name, 'runs a Python function named in the file')})"
            )
        elif name not in KNOWN_CLASSES and name not in keras_own_classes():
            found.append(f"{name} ({NOT_KERAS})")
        elif module is not None and module.split(".")[0] not in _KERAS_PACKAGES:
            found.append(f"{name} (from the module {module}, not Keras)")
        elif obj.get("registered_name") not in (None, name):
            found.append(f"{name} (registered as {obj['registered_name']}, a custom object)")
        elif _reads_a_file(obj) is not None:
            found.append(f"{name} (reads {_reads_a_file(obj)}, a file outside the model)")
    return sorted(set(found))


def _refuse(
    source: str,
    found: list[str],
    what: str = "loading it would build objects gatetrace does not check as safe",
) -> None:
    """UnsafeGraphError naming `found` (`thing (why)` items), if there are any."""
    if found:
        yours = (
            " If the classes are yours, name the Python file defining them with --custom-objects FILE.py "
            "(importing it runs its code)."
            if all(f.endswith(f"({NOT_KERAS})") for f in found)
            else ""
        )
        raise UnsafeGraphError(
            f"{source}: {what}: {listing(found, 6)}; nothing was loaded.{yours} If you trust this model, pass "
            "--allow-unsafe-ops"
        )


# the most one asset (a vocabulary, say) may unpack to; all of them: 4 times that
_ASSET_LIMIT = 64 << 20


def _not_an_asset(name: str) -> bool:
    """Whether an archive member under `assets/` is not a layer's asset as Keras saves one
    (`assets/layers/NAME/...`, a plain relative path)."""
    parts = PurePosixPath(name).parts
    return (
        name.startswith("/")
        or "\\" in name
        or any(part in ("..", ".") for part in parts)
        or len(parts) < 3
        or parts[1] != "layers"
    )


def _snake_case(name: str) -> str:
    """A class name as Keras names its object in a saved archive (`TextVectorization` -> `text_vectorization`)."""
    # as keras.src.utils.naming.to_snake_case
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", re.sub(r"\W+", "", name))
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def _asset_owner(name: str, classes: set[str]) -> bool:
    """Whether `assets/layers/DIR/...` belongs to a layer of the model: Keras names DIR after
    the layer's class, numbered from the second of a class on (`string_lookup_1`)."""
    folder = PurePosixPath(name).parts[2]
    return re.sub(r"_\d+$", "", folder) in classes or folder in classes


def _zip_config(p: Path, source: str) -> dict:
    """The configuration of a `.keras` archive, after its members are checked: config.json,
    metadata.json, model.weights.h5 and the assets Keras saves for its layers (a vocabulary
    under `assets/layers/NAME/`, read by Keras from inside the archive), each within size limits."""
    try:
        with zipfile.ZipFile(p) as z:
            infos = z.infolist()
            assets = [i for i in infos if i.filename.startswith("assets/")]
            extra = sorted(
                i.filename
                for i in infos
                if i.filename not in _MEMBERS and not i.filename.startswith("assets/")
            )
            extra += sorted(i.filename for i in assets if _not_an_asset(i.filename))
            if extra:
                raise UnsafeGraphError(
                    f"{source}: the archive holds members a Keras model file does not ({', '.join(extra[:5])}); "
                    "nothing was unpacked. If you trust this model, pass --allow-unsafe-ops"
                )
            for i in infos:
                limit = (
                    _ASSET_LIMIT
                    if i in assets
                    else _MEMBERS[i.filename] or max(64 << 20, WEIGHTS_RATIO * i.compress_size)
                )
                if i.file_size > limit:
                    raise UnsafeGraphError(
                        f"{source}: its member {i.filename} unpacks to {i.file_size:,} bytes from {i.compress_size:,}, "
                        f"more than the {limit:,} a Keras model file needs; nothing was unpacked"
                    )
            if sum(i.file_size for i in assets) > 4 * _ASSET_LIMIT:
                raise UnsafeGraphError(
                    f"{source}: its assets unpack to more than {4 * _ASSET_LIMIT:,} bytes; nothing was unpacked"
                )
            if "config.json" not in z.namelist():
                raise ModelFormatError(
                    f"{source}: the archive has no config.json; it is not a Keras model file"
                )
            config = config_json(z.read("config.json"), source)
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise ModelFormatError(
            f"{source}: cannot read it as a Keras .keras file (a zip archive): {err}"
        ) from None
    classes = {
        _snake_case(obj["class_name"])
        for _, obj in _objects(config)
        if isinstance(obj.get("class_name"), str)
    }
    strays = sorted(i.filename for i in assets if not _asset_owner(i.filename, classes))
    if strays:
        raise UnsafeGraphError(
            f"{source}: the archive holds assets of no layer of the model ({', '.join(strays[:5])}); nothing was unpacked. "
            "If you trust this model, pass --allow-unsafe-ops"
        )
    return config


_OUTSIDE = "its HDF5 weights would be read from outside the file (a Keras file holds its own)"


def _refuse_oversized(source: str, found: list[str]) -> None:
    if found:
        raise ModelFormatError(
            f"{source}: its HDF5 weights declare far more than the file holds or memory takes ({listing(found, 3)}); "
            "reading them would allocate it all: nothing was loaded. The file is damaged or made to exhaust memory: "
            "save the model again"
        )


def _saved_model_metadata(p: Path, source: str) -> list[dict]:
    """The metadata of every object a tf-keras SavedModel's keras_metadata.pb lists, root first."""
    from tf_keras.protobuf import saved_metadata_pb2

    try:
        proto = saved_metadata_pb2.SavedMetadata.FromString((p / "keras_metadata.pb").read_bytes())
        nodes = sorted(proto.nodes, key=lambda n: n.node_path != "root")
        return [config_json(n.metadata, source) for n in nodes]
    except Exception as err:
        raise ModelFormatError(f"{source}: cannot read its keras_metadata.pb: {err}") from None


def _json_kind(value: Any) -> str:
    """What a JSON value is, for a message: "a list", "a string", "null", ..."""
    kinds = {dict: "a JSON object", list: "a list", str: "a string", bool: "true or false"}
    return "null" if value is None else kinds.get(type(value), "a number")


def _an_object(config: Any, source: str, where: str) -> dict:
    """`config` where it is a JSON object, as a model's configuration is; else ModelFormatError
    saying what it is."""
    if isinstance(config, dict):
        return config
    raise ModelFormatError(
        f"{source}: its {where} is {_json_kind(config)}, not the JSON object a Keras model's "
        'configuration is ({"class_name": ..., "config": ...}); it is not a Keras model file'
    )


def _settings_problem(config: dict) -> str | None:
    """Why an object of Keras' own classes in a configuration is refused: its settings
    (`"config"`) are no JSON object (a Sequential's may be a list of layers, as Keras 2.0 and
    2.1 wrote it); None where none is."""
    own = KNOWN_CLASSES | keras_own_classes()
    for path, obj in _objects(config, "model"):
        name, settings = obj.get("class_name"), obj.get("config", {})
        if name not in own or isinstance(settings, dict):
            continue
        if name == "Sequential" and isinstance(settings, list):
            continue
        return (
            f'{path} ({name}) gives its settings ("config") as {_json_kind(settings)}, where Keras keeps '
            "them in a JSON object; the file is damaged or was not written by Keras: save the model again "
            "with Keras"
        )
    return None


def keras_config(path: str | Path) -> dict:
    """The model configuration a Keras file holds (`{"class_name": ..., "config": ...}`), read as data."""
    p, source = Path(path), str(path)
    if p.is_dir():
        metadata = _saved_model_metadata(p, source)
        if not metadata or "config" not in _an_object(metadata[0], source, "keras_metadata.pb"):
            raise ModelFormatError(f"{source}: its keras_metadata.pb describes no model")
        return {"class_name": metadata[0].get("class_name"), "config": metadata[0]["config"]}
    zipped = p.suffix == ".keras"
    config = _an_object(
        _zip_config(p, source) if zipped else h5_config(p, source),
        source,
        "config.json" if zipped else "model_config",
    )
    # models are loaded without compiling
    return {k: v for k, v in config.items() if k != "compile_config"}


def custom_classes(path: str | Path) -> list[str]:
    """The classes a Keras file's configuration names that are not Keras' own (a subclassed
    model, a custom layer), as `Class (why)` items, where nothing else in it is refused; else
    empty (a file of Keras' own blocks, or one naming something that runs code)."""
    found = _refused(keras_config(Path(path)))
    return found if all(f.endswith(f"({NOT_KERAS})") for f in found) else []


def check_keras_file(path: str | Path, yours: frozenset[str] = frozenset()) -> None:
    """UnsafeGraphError (ModelFormatError) if the Keras file at `path` names anything beyond
    Keras' own building blocks and the classes `yours` names (is not a Keras file gatetrace
    can read); nothing is loaded."""
    p, source = Path(path), str(path)
    # (an archive's members and sizes are checked first)
    config = keras_config(p)
    _refuse(source, _refused(config, yours))
    why = _settings_problem(config)
    if why:
        raise ModelFormatError(f"{source}: {why}; nothing was loaded")
    if p.is_dir():
        return
    if p.suffix == ".keras":
        with zipfile.ZipFile(p) as z:
            if "model.weights.h5" in z.namelist():
                with z.open("model.weights.h5") as weights:
                    _refuse(f"{source} (model.weights.h5)", h5_problems(source, weights), _OUTSIDE)
                with z.open("model.weights.h5") as weights:
                    _refuse_oversized(f"{source} (model.weights.h5)", h5_oversized(source, weights))
    else:
        _refuse(source, h5_problems(source, p), _OUTSIDE)
        _refuse_oversized(source, h5_oversized(source, p))


def keras2_fixes(config: dict) -> dict | None:
    """The configuration with what Keras 2.0 and 2.1 files leave out filled in as they meant
    it, or None when nothing is missing: a GRU without `reset_after` is `reset_after=False`
    (the key came with Keras 2.1.3; tf-keras defaults it to True and then cannot load the
    weights)."""
    fixed = json.loads(json.dumps(config))
    changed = False
    for _, obj in _objects(fixed):
        if (
            obj.get("class_name") in ("GRU", "GRUCell")
            and isinstance(obj.get("config"), dict)
            and "reset_after" not in obj["config"]
        ):
            obj["config"]["reset_after"] = False
            changed = True
    return fixed if changed else None
