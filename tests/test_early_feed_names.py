"""A `--feed NAME` the model's file names nothing of is refused before TensorFlow loads, in every
format whose file names its inputs (`tracer.load.feed_names`), and every name the loaders accept
still passes; the protocol buffer reader (`tracer.load.wire`) reads what TensorFlow's own parse
reads, and damaged bytes give names or one ModelFormatError, never another exception."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recorders.errors import ModelFormatError
from tests.conftest import CONFIGS, build, run_cli, save, static_body
from tracer.load.feed_names import feed_names
from tracer.load.wire import graph_names

STEPS, FEATURES = 4, 3
KERAS = ("keras3 .keras", "keras3 .h5", "tf-keras .keras", "tf-keras .h5")
GRAPHS = ("checkpoint", "checkpoint folder", "TF1 SavedModel", "frozen")
FORMATS = (*KERAS, *GRAPHS, "TF2 SavedModel", ".tflite")
# the name each format's model is fed by, in a spelling the loader accepts (not the plainest)
RIGHT = {
    **{f: "seq:0" for f in KERAS},
    **{f: "x:0" for f in GRAPHS},
    "TF1 SavedModel": "x",  # the signature's input key
    "TF2 SavedModel": "serving_default_seq:0",  # the signature's tensor
    ".tflite": "serving_default_seq",  # the input's tensor, beside its signature name `seq`
}
# what the refusal lists as the model's inputs
LISTED = {
    **{f: "its inputs are seq" for f in KERAS},
    **{f: "its placeholders are x" for f in GRAPHS},
    "TF1 SavedModel": "its signature serving_default's inputs are x (tensor x:0)",
    "TF2 SavedModel": "its signature serving_default's inputs are seq (tensor serving_default_seq:0)",
    ".tflite": "its inputs are seq (tensor serving_default_seq)",
}


def _keras_model(framework: str, batch: int | None = None):
    from tests.test_keras import keras_module

    keras = keras_module(framework)
    seq = keras.Input((STEPS, FEATURES), batch_size=batch, name="seq")
    return keras.Model(seq, keras.layers.LSTM(2, return_sequences=True, name="lstm")(seq))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    """Each format's tiny model, saved as its own tools save it, and an input file."""
    import tensorflow as tf

    root = tmp_path_factory.mktemp("early")
    paths = {}
    for framework in ("keras3", "tf-keras"):
        model = _keras_model(framework)
        for suffix in (".keras", ".h5"):
            paths[f"{framework} {suffix}"] = root / f"{framework}{suffix}"
            model.save(str(paths[f"{framework} {suffix}"]))
    for fmt, how in (
        ("checkpoint", "checkpoint"),
        ("checkpoint folder", "checkpoint-dir"),
        ("TF1 SavedModel", "savedmodel"),
        ("frozen", "frozen"),
    ):
        (root / how).mkdir()
        built = build(static_body(CONFIGS["GRUCell"]), steps=STEPS, features=FEATURES)
        paths[fmt] = save(built, how, root / how)
    keras3 = _keras_model("keras3")
    paths["TF2 SavedModel"] = root / "exported"
    keras3.export(str(paths["TF2 SavedModel"]), verbose=False)
    lite = root / "lstm.tflite"
    converter = tf.lite.TFLiteConverter.from_keras_model(_keras_model("tf-keras", batch=1))
    lite.write_bytes(converter.convert())
    paths[".tflite"] = lite
    np.save(root / "x.npy", np.random.RandomState(0).randn(2, STEPS, FEATURES).astype(np.float32))
    return {k: str(v) for k, v in paths.items()} | {"inputs": str(root / "x.npy")}


def _one_line(done) -> str:
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("gatetrace: error: ")
    return done.stderr


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_wrong_feed_name_is_refused_before_the_model_loads(models, tmp_path, monkeypatch, fmt):
    """A feed name the model does not have is one line naming what the model takes and how to
    feed it, and no model is loaded (before: answered once TensorFlow had loaded the model)."""
    import tracer

    def loading(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(tracer, "load_model", loading)
    out = tmp_path / "out"
    feed = f"sqe={models['inputs']}"
    said = _one_line(run_cli("record", models[fmt], "--feed", feed, "--out", str(out)))
    assert f"error: unknown feed 'sqe': {models[fmt]} has no " in said, said
    assert LISTED[fmt] in said and "e.g. --feed " in said, said
    if fmt not in GRAPHS:  # `seq`, near `sqe`
        assert "(did you mean seq?)" in said, said
    assert not out.exists()


def test_no_tensorflow_is_imported_to_refuse_a_wrong_feed_name(models, tmp_path):
    """In a fresh process, every format's wrong feed name is refused without importing
    TensorFlow (where LiteRT reads the .tflite file)."""
    script = (
        "import json, sys, io, contextlib\n"
        "from tracer.cli import main\n"
        "said = {}\n"
        "for fmt, model in json.loads(sys.argv[1]).items():\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err):\n"
        "        code = main(['record', model, '--feed', 'nothing=' + sys.argv[2], '--out', sys.argv[3]])\n"
        "    said[fmt] = [code, err.getvalue()]\n"
        "print(json.dumps({'said': said, 'tensorflow': 'tensorflow' in sys.modules}))\n"
    )
    chosen = {f: models[f] for f in FORMATS}
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(chosen), models["inputs"], str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    for fmt in FORMATS:
        code, said = answer["said"][fmt]
        assert code == 2 and said.startswith("gatetrace: error: unknown feed 'nothing': "), (
            fmt,
            said,
        )
    assert answer["tensorflow"] is False
    assert not (tmp_path / "o").exists()


def _accepted(fmt: str, path: str) -> list[str]:
    """Every name the format's loader accepts for the model, as it resolves feed names."""
    import tracer
    from tracer.load.keras import KerasModel
    from tracer.load.tflite import LiteModel

    model = tracer.load_model(path, restore=False)
    if isinstance(model, (KerasModel, LiteModel)):
        names = [n for i in model.inputs for n in (i.name, *i.aliases)]
    else:
        with model:
            names = [op.name for op in model.graph.get_operations()] + list(model.inputs)
    return [spelling for n in names for spelling in (n, f"{n}:0")]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_name_the_loader_accepts_passes_the_early_check(models, fmt):
    """Every op of the graph as the loader builds it (a TF2 SavedModel's functions inlined),
    every signature input, Keras input and .tflite input or tensor name, with or without `:0`,
    passes; and the file is read (the check is not skipped)."""
    known = feed_names(models[fmt])
    assert known is not None
    refused = [n for n in _accepted(fmt, models[fmt]) if not known.accepts(n)]
    assert refused == []
    assert not known.accepts("sqe") and not known.accepts("sqe:0")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_right_feed_name_records(models, tmp_path, fmt):
    """The model records, fed by a name in a spelling its loader accepts."""
    from recorders import Recording

    feed = f"{RIGHT[fmt]}={models['inputs']}"
    done = run_cli("record", models[fmt], "--feed", feed, "--out", str(tmp_path / "o"), "--quiet")
    assert done.returncode == 0, done.stderr
    assert Recording(tmp_path / "o").cells


def _tensorflow_names(kind: str, data: bytes) -> tuple[dict, dict, dict]:
    """(node name -> op, placeholder -> dtype, signature -> [(key, tensor)]) as TensorFlow's
    own classes parse `data`."""
    from tensorflow.core.framework import graph_pb2
    from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

    if kind == "graph_def":
        metas = [meta_graph_pb2.MetaGraphDef(graph_def=graph_pb2.GraphDef.FromString(data))]
    elif kind == "meta_graph":
        metas = [meta_graph_pb2.MetaGraphDef.FromString(data)]
    else:
        metas = list(saved_model_pb2.SavedModel.FromString(data).meta_graphs)
    nodes = {n.name: {n.op} for m in metas for n in m.graph_def.node}
    dtypes = {
        n.name: {n.attr["dtype"].type}
        for m in metas
        for n in m.graph_def.node
        if n.op in ("Placeholder", "PlaceholderWithDefault")
    }
    signatures = {
        key: [(k, t.name) for k, t in s.inputs.items()]
        for m in metas
        for key, s in m.signature_def.items()
    }
    return nodes, dtypes, signatures


def _graph_file(fmt: str, path: str) -> tuple[str, bytes]:
    from pathlib import Path

    if "SavedModel" in fmt:
        return "saved_model", (Path(path) / "saved_model.pb").read_bytes()
    if fmt == "frozen":
        return "graph_def", Path(path).read_bytes()
    if fmt == "checkpoint folder":
        return "meta_graph", (Path(path) / "model.ckpt.meta").read_bytes()
    return "meta_graph", Path(f"{path}.meta").read_bytes()


@pytest.mark.parametrize("fmt", [*GRAPHS, "TF2 SavedModel"])
def test_the_wire_reader_reads_what_tensorflow_parses(models, fmt):
    kind, data = _graph_file(fmt, models[fmt])
    found = graph_names(data, kind, fmt)
    nodes, dtypes, signatures = _tensorflow_names(kind, data)
    assert found.ops == nodes
    assert found.dtypes == dtypes
    assert {k: sorted(v) for k, v in found.signatures.items()} == {
        k: sorted(v) for k, v in signatures.items()
    }


def test_the_field_numbers_are_tensorflow_s():
    """The field numbers the reader goes by, against TensorFlow's own message descriptors."""
    from tensorflow.core.framework import attr_value_pb2, graph_pb2, node_def_pb2, types_pb2
    from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

    from tracer.load import feed_names as names
    from tracer.load import wire

    def number(message, field: str) -> int:
        return message.DESCRIPTOR.fields_by_name[field].number

    assert wire.SAVED_MODEL_META_GRAPHS == number(saved_model_pb2.SavedModel, "meta_graphs")
    assert wire.META_GRAPH_GRAPH_DEF == number(meta_graph_pb2.MetaGraphDef, "graph_def")
    assert wire.META_GRAPH_SIGNATURE_DEF == number(meta_graph_pb2.MetaGraphDef, "signature_def")
    assert wire.SIGNATURE_INPUTS == number(meta_graph_pb2.SignatureDef, "inputs")
    assert wire.TENSOR_INFO_NAME == number(meta_graph_pb2.TensorInfo, "name")
    assert wire.GRAPH_NODE == number(graph_pb2.GraphDef, "node")
    assert (wire.NODE_NAME, wire.NODE_OP, wire.NODE_ATTR) == tuple(
        number(node_def_pb2.NodeDef, f) for f in ("name", "op", "attr")
    )
    assert wire.ATTR_VALUE_TYPE == number(attr_value_pb2.AttrValue, "type")
    entry = meta_graph_pb2.MetaGraphDef.SignatureDefEntry
    assert (wire.MAP_KEY, wire.MAP_VALUE) == (number(entry, "key"), number(entry, "value"))
    assert names._DT_STRING == types_pb2.DT_STRING

    from tracer.load.rebuild import GPU_ONLY_OPS

    assert set(names._CUDNN) == GPU_ONLY_OPS


@pytest.fixture(scope="module")
def saved_bytes(models) -> bytes:
    return _graph_file("TF2 SavedModel", models["TF2 SavedModel"])[1]


def _read_within_budget(data: bytes) -> None:
    """graph_names of `data` gives names or a ModelFormatError (nothing else), and allocates
    no more than a small multiple of the bytes it was given."""
    tracemalloc.start()
    try:
        graph_names(data, "saved_model", "damaged.pb")
    except ModelFormatError as err:
        assert "\n" not in str(err)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 64 * len(data) + (1 << 20), peak


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cut=st.integers(0, 1 << 20),
    flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=8),
)
def test_damaged_bytes_give_names_or_one_clean_error(saved_bytes, cut, flips):
    """A real SavedModel's bytes, cut short and with bytes changed anywhere."""
    data = bytearray(saved_bytes[: cut % (len(saved_bytes) + 1)])
    for at, value in flips:
        if data:
            data[at % len(data)] = value
    _read_within_budget(bytes(data))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_any_bytes_give_names_or_one_clean_error(data):
    _read_within_budget(data)


@pytest.mark.parametrize(
    "data, why",
    [
        (
            b"\x12\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
            "past the end of its message",
        ),  # 2^63 bytes claimed
        (b"\x12" + b"\xff" * 11, "a varint longer than 10 bytes"),
        (b"\x13", "wire type 3"),  # a group
        (b"\x12\x04\x12\x02\x12\x05", "past the end"),  # a meta graph whose graph_def runs over
        (
            b"\x12\x07\x12\x05\x0a\x03\x0a\x01\xff",
            "not UTF-8",
        ),  # a node named by a byte that is not UTF-8
    ],
)
def test_hostile_lengths_are_refused_in_one_line(data, why):
    with pytest.raises(ModelFormatError, match=why):
        graph_names(data, "saved_model", "hostile.pb")


def test_a_file_that_is_not_read_as_data_is_left_to_its_loader(models, tmp_path):
    """A text .meta file (which the loader reads too), a damaged SavedModel and a tf-keras
    SavedModel folder are not judged early: their loader answers, as before."""
    import shutil
    from pathlib import Path

    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        tf.compat.v1.train.export_meta_graph(str(tmp_path / "text.meta"), as_text=True)
    assert (tmp_path / "text.meta").read_bytes().startswith(b"meta_info_def")
    assert feed_names(str(tmp_path / "text.meta")) is None

    damaged = tmp_path / "damaged"
    shutil.copytree(models["TF2 SavedModel"], damaged)
    pb = damaged / "saved_model.pb"
    pb.write_bytes(pb.read_bytes()[:-7])
    assert feed_names(str(damaged)) is None

    folder = Path(models["TF1 SavedModel"])
    keras_like = tmp_path / "keras_like"
    shutil.copytree(folder, keras_like)
    (keras_like / "keras_metadata.pb").write_bytes(b"")
    assert feed_names(str(keras_like)) is None


def _keras_shape(framework: str, shape: str):
    """A Keras model of `shape`: a Sequential (its input given as an Input, or as the first
    layer's input_shape), or a functional model of two inputs (a dict of them in Keras 3)."""
    from tests.test_keras import keras_module

    keras = keras_module(framework)
    L = keras.layers
    if shape == "Sequential":
        return keras.Sequential([keras.Input((STEPS, FEATURES)), L.LSTM(2)])
    if shape == "Sequential, input_shape":
        return keras.Sequential([L.LSTM(2, input_shape=(STEPS, FEATURES))])
    a, b = keras.Input((STEPS, FEATURES), name="a"), keras.Input((STEPS, FEATURES), name="b")
    inputs = {"b": b, "a": a} if framework == "keras3" else [b, a]
    return keras.Model(inputs, L.GRU(2)(L.Add()([a, b])))


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
@pytest.mark.parametrize("shape", ["Sequential", "Sequential, input_shape", "two inputs"])
@pytest.mark.parametrize("framework", ["keras3", "tf-keras"])
def test_a_keras_file_s_inputs_are_those_its_loader_gives(tmp_path, framework, shape, suffix):
    """The inputs read from a Keras file's configuration are those of the model Keras builds
    from it, in its order (an auto-named Sequential input, `input_layer`, `lstm_input`...)."""
    import warnings

    import tracer

    path = tmp_path / f"model{suffix}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Keras 3 on input_shape and on .h5
        _keras_shape(framework, shape).save(str(path))
    known = feed_names(str(path))
    assert known is not None
    loaded = [i.name for i in tracer.load_model(str(path)).inputs]
    assert list(known.expected) == loaded
    assert all(known.accepts(n) and known.accepts(f"{n}:0") for n in loaded)


SECOND_NAMES = {  # feeds -> what the line says
    ("seq:7",): "feed 'seq:7': input seq is one tensor, index 0 only: feed it as seq (or seq:0)",
    ("seq:1",): "feed 'seq:1': input seq is one tensor, index 0 only: feed it as seq (or seq:0)",
    (
        "seq",
        "serving_default_seq",
    ): "input seq is fed twice, as seq and serving_default_seq: feed it once",
    (
        "serving_default_seq:0",
        "seq",
    ): "input seq is fed twice, as serving_default_seq:0 and seq: feed it once",
}


@pytest.mark.parametrize(
    "fmt, feeds",
    [(f, k) for f in (*KERAS, ".tflite") for k in SECOND_NAMES if f == ".tflite" or len(k) == 1],
)
def test_an_index_or_a_second_name_of_an_input_is_refused_before_the_model_loads(
    models, tmp_path, monkeypatch, fmt, feeds
):
    """A Keras or .tflite input is one tensor, `seq` or `seq:0`, under one name: `seq:7`, or
    `seq` and its tensor's `serving_default_seq` together, is one line before TensorFlow loads
    (before: refused only by the loaded model)."""
    import tracer

    def loading(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(tracer, "load_model", loading)
    args = [a for name in feeds for a in ("--feed", f"{name}={models['inputs']}")]
    said = _one_line(run_cli("record", models[fmt], *args, "--out", str(tmp_path / "out")))
    assert SECOND_NAMES[feeds] in said, said
    assert not (tmp_path / "out").exists()
