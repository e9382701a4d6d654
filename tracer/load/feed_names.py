"""The names `--feed` may use for a model, read from its file as data before TensorFlow loads,
and the refusal in one line of a name that none of them matches (`check_feed_names`).

What each format's loader accepts as a feed's NAME (`tracer.inputs.feeds`, `tracer.values.keras`),
each with or without an output index (`x`, `x:0`; a wrong index is the loader's to refuse in a
graph, and refused here for a Keras or .tflite input, one tensor, as is an input fed twice under
two names, `seq` and its tensor's `serving_default_seq`):

    checkpoint        the name of any op of its graph (the `.meta` file's GraphDef)
    SavedModel        the name of any op of its graph, or an input key of the signature
                      (`saved_model.pb`; a TF2 one's functions are inlined under their call
                      ops' names, which are then the loader's to judge)
    frozen GraphDef   the name of any op of the graph
    Keras file        an input layer's name (`.keras`: config.json; `.h5`: `model_config`)
    .tflite file      an input's signature name or its tensor's name (`tracer.load.tflite`)

A file that cannot be read as data that way (a text protocol buffer, a tf-keras SavedModel
folder, a Keras model of a class of its own, a graph calling cuDNN's ops, which the loader
replaces, a `.tflite` file where only TensorFlow's runtime reads them, anything damaged or
larger than the memory budget) gives None: its loader answers as it always has. Names are
always taken generously (every occurrence of a field a file repeats): a name the loader
would accept is never refused here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from recorders.errors import FeedError, GatetraceError, listing
from tracer.inputs.files import crossed_name, feed_arg, feed_index, input_name
from tracer.load.formats import DEFAULT_SIGNATURE, LITE_SUFFIX

__all__ = ["FeedNames", "feed_names", "check_feed_names"]

_CALLS = ("StatefulPartitionedCall", "PartitionedCall")  # as `tracer.load.inline` reads them
# cuDNN's RNN ops, which `tracer.load.rebuild` (GPU_ONLY_OPS) replaces by ops of new names
_CUDNN = ("CudnnRNN", "CudnnRNNV2", "CudnnRNNV3")
_PLACEHOLDERS = ("Placeholder", "PlaceholderWithDefault")
_DT_STRING = 7  # TensorFlow's DataType number of a string (a Saver's file name)
_PROTOBUF_LIMIT = 2**31  # the most a protocol buffer's parser reads
# ops gatetrace's loaders add to a graph: a Saver's (`save/`, `save_1/`) and its own
_ADDED = re.compile(r"(save(_\d+)?/|.*\bgatetrace)")
_SHOWN = 6  # names a refusal lists
_KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")  # as `tracer.load.keras.is_keras_file` reads them


@dataclass(frozen=True)
class FeedNames:
    """What the file of a model lets `--feed` name: `names` (its ops, inputs, signature keys and
    their aliases), `prefixes` (names below which the loader makes ops of its own, which are
    its to judge), and what a refusal says: what a name must be (`sought`), and what the
    model takes (`expected`, which are `what`). `graph`: the names are a graph's. `inputs`: each
    input's name (a signature's) and its tensor's, the same where it has one name: what
    `tracer.inputs.files.crossed_name` judges, and for a Keras or .tflite file (no graph), each
    feed's input, as its loader reads the name (`input_name`: one feed an input, index 0)."""

    names: frozenset[str]
    expected: tuple[str, ...]
    what: str
    sought: str = "input"
    prefixes: tuple[str, ...] = ()
    graph: bool = False
    inputs: tuple[tuple[str, str], ...] = ()

    def accepts(self, name: str) -> bool:
        """Whether a loader of the model may accept `name` (`NAME` or `NAME:K`)."""
        try:
            base = feed_index(name)[0]
        except GatetraceError:  # refused by `split_feeds` before this is asked
            return True
        return (
            name in self.names
            or base in self.names
            or base.startswith(self.prefixes)
            or (self.graph and _ADDED.match(base) is not None)
        )


def _read(path: Path, limit: int | None = None) -> bytes | None:
    """The regular file `path` (a link the user named is followed), within the protocol
    buffer's limit and the memory budget; None where it is not one or holds more."""
    import os

    from recorders.read.files import default_memory
    from recorders.write.folder import Folder

    resolved = Path(os.path.realpath(path))
    most = min(_PROTOBUF_LIMIT, default_memory()) if limit is None else limit
    try:
        with Folder(resolved.parent) as folder:
            return folder.read_bytes(resolved.name, most)
    except (OSError, ValueError):
        return None


def _is_text(data: bytes) -> bool:
    """Whether `data` reads as text (a text protocol buffer, which TensorFlow's loaders also
    take): no control byte but tabs and line ends. A binary GraphDef holds one in each node
    (the tag of its op's name, 0x12)."""
    return re.search(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", data) is None


def _graph(path: Path, kind: str, signature: str | None, source: str) -> FeedNames | None:
    """The names a graph file (one of `tracer.load.wire.KINDS`) gives; `signature`: the one
    whose inputs the loader takes as names (None: no signature's, as for a checkpoint)."""
    from tracer.load.wire import graph_names

    data = _read(path)
    if data is None or _is_text(data):
        return None
    try:
        found = graph_names(data, kind, source)
    except GatetraceError:
        return None
    if not found.ops or found.nodes_of(*_CUDNN):
        return None
    calls = found.nodes_of(*_CALLS)
    names = set(found.ops)
    inputs: list[tuple[str, str]] = []
    if signature is not None:
        if signature in found.signatures and not signature.startswith("__"):
            inputs = found.signatures[signature]
        elif calls or signature != DEFAULT_SIGNATURE:
            return None  # the loader says which signatures there are
        names |= {key for listed in found.signatures.values() for key, _ in listed}
    if inputs:
        expected = tuple(dict.fromkeys(f"{key} (tensor {tensor})" for key, tensor in inputs))
        what = f"its signature {signature}'s inputs"
    else:
        expected = tuple(
            name
            for name in found.nodes_of(*_PLACEHOLDERS)
            if _DT_STRING not in found.dtypes.get(name, set())
        )
        what = "its placeholders"
    # grappler's inliner names a function's ops `CALL/...`, and the ops it adds between the
    # call and them `Func/CALL/input/_N`, `Func/CALL/output/_N`...
    inlined = tuple(f"{c}/" for c in calls) + (("Func/",) if calls else ())
    sought = "op" if signature is None else "op or signature input"
    return FeedNames(
        frozenset(names), expected, what, sought, inlined, graph=True, inputs=tuple(inputs)
    )


def _state_prefix(folder: Path) -> Path | None:
    """The checkpoint a folder's `checkpoint` file names (as `tracer.load.paths` takes it),
    where the file is plain enough to read without TensorFlow's text format: one
    `model_checkpoint_path: "..."` line, no escapes."""
    from tracer.load.paths import in_folder, inside

    data = _read(folder / "checkpoint", 1 << 20)
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    named = re.findall(r'(?m)^[ \t]*model_checkpoint_path[ \t]*:[ \t]*"([^"\\\n]*)"[ \t]*$', text)
    mentions = re.findall(r"(?<!\w)model_checkpoint_path(?!\w)", text)
    if len(named) != 1 or len(mentions) != 1 or not named[0]:
        return None
    prefix = in_folder(folder, named[0])[0]
    return prefix if inside(Path(f"{prefix}.meta"), folder) else None


def _meta(prefix: Path, source: str) -> FeedNames | None:
    """The names of the graph of the checkpoint `prefix` (its `.meta` file), fed by op name only."""
    meta = Path(f"{prefix}.meta")
    return _graph(meta, "meta_graph", None, source) if meta.is_file() else None


def _keras(path: Path, source: str) -> FeedNames | None:
    """The input layers' names a Keras file's configuration gives a model of Keras' own
    classes (a Functional or Sequential model); None for any other."""
    from tracer.load.keras_files import keras_config

    try:
        config = keras_config(path)
    except GatetraceError:
        return None
    body = config.get("config")
    if config.get("class_name") not in ("Functional", "Model", "Sequential") or not isinstance(
        body, dict
    ):
        return None
    named: list[str] = []
    todo = [body.get("input_layers")]  # what is left, the next last
    while todo:  # a structure of [name, node, tensor] triples: a list, a dict, one triple
        item = todo.pop()
        if (
            isinstance(item, list)
            and len(item) == 3
            and isinstance(item[0], str)
            and all(isinstance(i, int) for i in item[1:])
        ):
            named.append(item[0])
        elif isinstance(item, list):
            todo += reversed(item)
        elif isinstance(item, dict):  # flattened in the order of its keys, as Keras does
            todo += [item[key] for key in sorted(item, key=str, reverse=True)]
    layers = body.get("layers")
    for layer in layers if isinstance(layers, list) else []:
        if not isinstance(layer, dict) or layer.get("class_name") != "InputLayer":
            continue
        inner = layer.get("config")
        if isinstance(inner, dict) and isinstance(inner.get("name"), str):
            named.append(inner["name"])
    if not named:
        return None
    names = tuple(dict.fromkeys(named))
    return FeedNames(frozenset(names), names, "its inputs", inputs=tuple((n, n) for n in names))


def _lite(path: Path, source: str) -> FeedNames | None:
    """The inputs of a `.tflite` file as `tracer.load.tflite` names them, where its runtime
    reads the file without TensorFlow (LiteRT)."""
    from tracer.load.lite_runtime import runtime

    try:
        if runtime().first:  # TensorFlow's runtime: imported with TensorFlow
            return None
        from tracer.load.tflite import LiteModel
        from tracer.load.tflite_check import checked

        data, parsed = checked(path, source)
        specs = LiteModel(data, parsed, source, runtime()).input_specs
    except GatetraceError:
        return None
    if not specs:
        return None
    names = {s.name for s in specs} | {s.tensor for s in specs if s.tensor}
    expected = tuple(f"{s.name} (tensor {s.tensor})" if s.tensor else s.name for s in specs)
    inputs = tuple((s.name, s.tensor or s.name) for s in specs)
    return FeedNames(frozenset(names), expected, "its inputs", inputs=inputs)


def feed_names(model: str, signature: str = DEFAULT_SIGNATURE) -> FeedNames | None:
    """What the file of `model` (a path as `gatetrace record` takes it) lets `--feed` name,
    read as data, the format told as `tracer.load_model` tells it; None where that cannot be
    told without its loader (see the module docstring)."""
    from recorders.write import is_uri
    from tracer.load.paths import checkpoint_prefix

    if is_uri(model):
        return None
    path, source = Path(model), model
    if path.suffix == LITE_SUFFIX:
        return _lite(path, source)
    if path.is_dir():
        if any((path / n).is_file() for n in ("saved_model.pb", "saved_model.pbtxt")):
            if (path / "keras_metadata.pb").is_file():
                return None  # read by Keras, or through its functions: the loader tells which
            return _graph(path / "saved_model.pb", "saved_model", signature, source)
        if (path / "checkpoint").is_file():
            prefix = _state_prefix(path)
            return None if prefix is None else _meta(prefix, source)
        return None
    found = checkpoint_prefix(path)  # (a folder's `checkpoint` file is read above)
    if found is not None:
        return _meta(Path(found[0]), source)
    if path.is_file() and path.suffix == ".pb":
        return _graph(path, "graph_def", None, source)
    if path.is_file() and path.suffix in _KERAS_SUFFIXES:
        return _keras(path, source)
    return None


def check_feed_names(model: str, names: Iterable[str], signature: str = DEFAULT_SIGNATURE) -> None:
    """FeedError, in one line saying what the model takes, for the first of `names` that its
    file names nothing of (see the module docstring); nothing where the file cannot tell."""
    names = list(names)
    if not names:
        return
    known = feed_names(model, signature)
    if known is None:
        return
    given: dict[str, str] = {}  # input -> the name it is fed by
    for name in names:
        if not known.accepts(name):
            raise FeedError(_refusal(model, name, known))
        crossed = crossed_name(name, dict(known.inputs))
        if crossed is not None:
            raise FeedError(crossed)
        if known.graph or not known.inputs:
            continue
        # a Keras or .tflite input, as its loader reads the name (`NAME:K`, K not 0, refused)
        inputs = frozenset(n for n, _ in known.inputs)
        found = input_name(name, inputs, {t: n for n, t in known.inputs if t != n})
        if found in given:
            raise FeedError(
                f"input {found} is fed twice, as {given[found]} and {name}: feed it once"
            )
        given[found] = name


def _refusal(model: str, name: str, known: FeedNames) -> str:
    base = feed_index(name)[0]
    keys = [e.split(" (")[0] for e in known.expected]
    near = difflib.get_close_matches(base, keys, n=1, cutoff=0.6)
    hint = f" (did you mean {near[0]}?)" if near else ""
    unknown = f"unknown feed {name!r}: {model} has no {known.sought} named {base}{hint}"
    if not known.graph:
        return (
            f"{unknown}; {known.what} are {listing(list(known.expected), _SHOWN)}: feed each by its name, "
            f"e.g. --feed {feed_arg(keys[0])}"
        )
    if not keys:
        return (
            f"{unknown}, and no placeholder: feed a tensor of its graph by its op's name (gatetrace "
            f"inspect {model} lists what the cells read)"
        )
    return (
        f"{unknown}; {known.what} are {listing(list(known.expected), _SHOWN)}: feed those the cells need "
        f"by name (gatetrace inspect {model} lists them), e.g. --feed {feed_arg(keys[0])}"
    )
