"""Feed names: `NAME:INDEX` must name an output the tensor or input has, and no input is fed twice."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import CONFIGS, build, run_cli, save, static_body

STEPS, FEATURES = 5, 3
# an index no placeholder or model input has: another, a negative one, 20 digits, a leading zero
WRONG = ("7", "-1", "12345678901234567890", "01")


def _one_line(done) -> str:
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("gatetrace: error: ")
    return done.stderr


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A checkpoint of an LSTMCell on placeholder x, a .tflite file of a Keras LSTM on input
    `seq` (its tensor `serving_default_seq`), and inputs for each."""
    from tests.test_keras import keras_module
    from tracer._tf import tf

    root = tmp_path_factory.mktemp("feeds")
    (root / "graph").mkdir()
    graph = save(
        build(static_body(CONFIGS["LSTMCell"]), steps=STEPS, features=FEATURES),
        "checkpoint",
        root / "graph",
    )
    keras = keras_module("tf-keras")
    seq = keras.Input((STEPS, FEATURES), batch_size=1, name="seq")
    model = keras.Model(seq, keras.layers.LSTM(4, return_sequences=True)(seq))
    lite = root / "lstm.tflite"
    lite.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    rng = np.random.RandomState(0)
    for name in ("a", "b"):
        np.save(root / f"{name}.npy", rng.randn(3, STEPS, FEATURES).astype(np.float32))
    return root, graph, lite


@pytest.mark.parametrize("index", WRONG)
def test_a_graph_feed_names_an_output_its_op_has(models, tmp_path, index):
    """`x:K` of a placeholder is refused in one line naming x and how to feed it (before: `x:-1`
    and `x:01` were taken as x:0, as TensorFlow reads them)."""
    root, graph, _ = models
    feed = f"x:{index}={root / 'a.npy'}"
    said = _one_line(run_cli("record", graph, "--feed", feed, "--out", str(tmp_path / "out")))
    assert f"feed 'x:{index}': " in said and "feed it as x (or x:0)" in said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["serving_default_seq", "seq"])
@pytest.mark.parametrize("index", WRONG)
def test_a_tflite_feed_names_its_input_or_its_input_0(models, tmp_path, name, index):
    """A .tflite input is one tensor: `serving_default_seq:7` (or `:-1`, or 20 digits, or the
    signature's `seq:01`) is refused in one line naming the input and how to feed it (before:
    each was taken as `:0`)."""
    root, _, lite = models
    feed = f"{name}:{index}={root / 'a.npy'}"
    said = _one_line(run_cli("record", str(lite), "--feed", feed, "--out", str(tmp_path / "out")))
    assert f"feed '{name}:{index}': " in said and f"feed it as {name} (or {name}:0)" in said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("second", ["x", "x:0"])
@pytest.mark.parametrize("workers", [[], ["--workers", "2"]])
def test_an_input_fed_twice_is_refused_before_the_model_loads(
    models, tmp_path, monkeypatch, second, workers
):
    """`--feed x=a.npy --feed x=b.npy` (before: b.npy silently won), or x and x:0 (before:
    refused only once TensorFlow had loaded the model), is one line, before the model loads."""
    import tracer

    def loading(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(tracer, "load_model", loading)
    root, graph, _ = models
    a, b = root / "a.npy", root / "b.npy"
    feeds = ("--feed", f"x={a}", "--feed", f"{second}={b}")
    said = _one_line(run_cli("record", graph, *feeds, *workers, "--out", str(tmp_path / "out")))
    assert f"feed {second}={b} feeds the same input as x={a}: feed each input once" in said
    assert not (tmp_path / "out").exists()


def rewritten(data: bytes, change) -> bytes:
    """The .tflite file `data` with `change(model)` made to its parsed flatbuffer."""
    import flatbuffers

    from tracer.load.lite_runtime import runtime

    model = runtime().parse(data)
    change(model)
    builder = flatbuffers.Builder(len(data) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


@pytest.fixture(scope="module")
def crossed(tmp_path_factory):
    """Models whose signature inputs and tensors cross: signature input `a` is tensor `b`, and
    `b` is tensor `a`. A TF1 SavedModel of an LSTMCell on a - 2b (its signature maps a to the
    placeholder b), a .tflite file of a Keras LSTM on [a, b] (its input tensors renamed), the
    inputs A and B, and each model's output as its own runtime computes it on a=A, b=B."""
    from tests.conftest import randomise
    from tests.test_keras import keras_module
    from tracer._tf import tf, v1
    from tracer.load.lite_runtime import runtime

    root = tmp_path_factory.mktemp("crossed")
    rng = np.random.RandomState(3)
    a, b = (rng.uniform(-1, 1, (3, STEPS, FEATURES)).astype(np.float32) for _ in "ab")
    np.save(root / "a.npy", a)
    np.save(root / "b.npy", b)

    graph = tf.Graph()
    with graph.as_default():
        pa = v1.placeholder(tf.float32, [None, STEPS, FEATURES], name="a")
        pb = v1.placeholder(tf.float32, [None, STEPS, FEATURES], name="b")
        outputs, _ = v1.nn.static_rnn(
            v1.nn.rnn_cell.LSTMCell(3), tf.unstack(pa - 2 * pb, axis=1), dtype=tf.float32
        )
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
        randomise(session, graph)
        v1.saved_model.simple_save(
            session,
            str(root / "saved"),
            inputs={"a": pb, "b": pa},
            outputs={"y": tf.stack(outputs, axis=1)},
        )
    signature = tf.saved_model.load(str(root / "saved")).signatures["serving_default"]
    saved_y = signature(a=tf.constant(a), b=tf.constant(b))["y"].numpy()

    keras = keras_module("tf-keras")
    ka = keras.Input((STEPS, FEATURES), batch_size=1, name="a")
    kb = keras.Input((STEPS, FEATURES), batch_size=1, name="b")
    lstm = keras.layers.LSTM(4, return_sequences=True)(keras.layers.Concatenate()([ka, kb]))
    data = tf.lite.TFLiteConverter.from_keras_model(keras.Model([ka, kb], lstm)).convert()
    renamed = {b"serving_default_a:0": b"b:0", b"serving_default_b:0": b"a:0"}

    def cross(model) -> None:
        main = model.subgraphs[0]
        for i in main.inputs:
            main.tensors[int(i)].name = renamed[main.tensors[int(i)].name]

    lite_file = rewritten(data, cross)
    (root / "crossed.tflite").write_bytes(lite_file)

    def lite_y(i: int) -> np.ndarray:  # a fresh interpreter each: its LSTM keeps its state
        it = runtime().interpreter(lite_file)
        runner = it.get_signature_runner()
        assert {n: d["name"] for n, d in runner.get_input_details().items()} == {
            "a": "b:0",
            "b": "a:0",
        }
        (y,) = runner(a=a[i : i + 1], b=b[i : i + 1]).values()
        return y

    lite = np.concatenate([lite_y(i) for i in range(len(a))])
    return root, {
        "SavedModel": (str(root / "saved"), saved_y),
        ".tflite": (str(root / "crossed.tflite"), lite),
    }


@pytest.mark.parametrize("fmt", ["SavedModel", ".tflite"])
def test_crossed_names_feed_the_signature_s_inputs(crossed, tmp_path, fmt):
    """`--feed a=A --feed b=B` feeds signature input a and b, as TensorFlow's signature runner
    does: every recorded h is the model's output as its own runtime computes it (before: a
    .tflite file's `a` fed its tensor a, the signature's b, and the recording was of A and B
    swapped, silently)."""
    from recorders import Recording

    root, models = crossed
    model, expected = models[fmt]
    feeds = ["--feed", f"a={root / 'a.npy'}", "--feed", f"b={root / 'b.npy'}"]
    done = run_cli("record", model, *feeds, "--out", str(tmp_path / "out"), "--quiet")
    assert done.returncode == 0, done.stderr
    recording = Recording(tmp_path / "out")
    (cell,) = recording.cells
    assert np.abs(expected).max() > 0.05
    np.testing.assert_allclose(recording.state_array(cell, "h"), expected, atol=1e-5)


@pytest.mark.parametrize("fmt", ["SavedModel", ".tflite"])
@pytest.mark.parametrize("name, other", [("a", "b"), ("b", "a")])
def test_a_crossed_tensor_name_is_refused_before_the_model_loads(
    crossed, tmp_path, monkeypatch, fmt, name, other
):
    """`a:0` names signature input a and tensor a:0, which is signature input b: one line
    saying both and how to feed each, before TensorFlow loads the model (before: the
    SavedModel fed the signature's a; the .tflite file the tensor's, signature input b)."""
    import tracer

    def loading(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(tracer, "load_model", loading)
    root, models = crossed
    feeds = ["--feed", f"{name}:0={root / 'a.npy'}", "--feed", f"{other}={root / 'b.npy'}"]
    said = _one_line(run_cli("record", models[fmt][0], *feeds, "--out", str(tmp_path / "out")))
    assert (
        f"feed '{name}:0' is ambiguous: signature input {name} (tensor {other}:0) or tensor "
        f"{name}:0 (signature input {other}); a signature's input names come first: "
        f"--feed {name}=FILE.npy for the first, --feed {other}=FILE.npy for the second"
    ) in said, said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fmt", ["SavedModel", ".tflite"])
def test_a_crossed_tensor_name_is_refused_by_the_loaded_model_too(crossed, fmt):
    """Where the early check cannot read the file, the loaded model refuses `a:0` alike, and
    takes `a` as the signature's input a."""
    import tracer
    from recorders.errors import FeedError
    from tracer.inputs.feeds import resolve_feeds
    from tracer.values.keras import resolve_inputs

    root, models = crossed
    x = np.load(root / "a.npy")[:1]
    with tracer.load_model(models[fmt][0]) as model:

        def fed(feeds) -> dict:  # tensor name -> what it is fed
            if fmt == ".tflite":
                return {f"{i.aliases[0]}:0": v for i, v in resolve_inputs(model, feeds).items()}
            resolved = resolve_feeds(model.graph, feeds, aliases=model.inputs)
            return {t.name: v for t, v in resolved.items()}

        with pytest.raises(
            FeedError, match=r"feed 'a:0' is ambiguous: signature input a \(tensor b:0\)"
        ):
            fed({"a:0": x, "b": 2 * x})
        feeds = fed({"a": x, "b": 2 * x})
        assert np.array_equal(np.asarray(feeds["b:0"]), x)  # signature input a is tensor b
        assert np.array_equal(np.asarray(feeds["a:0"]), 2 * x)


def _no_inputs(model) -> None:
    model.subgraphs[0].inputs = np.array([], np.int32)
    model.signatureDefs[0].inputs = []


def _name_not_utf8(model) -> None:
    model.signatureDefs[0].inputs[0].name = b"\xff\xfeseq"


@pytest.mark.parametrize(
    "change, said",
    [
        (_no_inputs, "its main subgraph takes no input"),
        (_name_not_utf8, "its signature names an input b'\\xff\\xfeseq', not text in UTF-8"),
    ],
)
@pytest.mark.parametrize("command", ["record", "inspect"])
def test_a_tflite_file_of_unusable_inputs_is_one_line(models, tmp_path, change, said, command):
    """A .tflite file whose main subgraph takes no input, or whose signature names an input in
    bytes that are not UTF-8: one line saying so (before: IndexError, UnicodeDecodeError)."""
    root, _, lite = models
    path = tmp_path / "changed.tflite"
    path.write_bytes(rewritten(lite.read_bytes(), change))
    args = ["--feed", f"seq={root / 'a.npy'}", "--out", str(tmp_path / "out")]
    msg = _one_line(run_cli(command, str(path), *(args if command == "record" else [])))
    assert f"error: {path}: {said}" in msg, msg
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["rnn/lstm_cell/kernel", "rnn/lstm_cell/kernel:0"])
def test_a_variable_s_name_is_refused_as_a_feed(models, tmp_path, name):
    """A variable (a VarHandleOp's resource handle) holds no values to feed: one line naming it
    and the placeholders (before: KeyError)."""
    root, graph, _ = models
    feeds = ["--feed", f"x={root / 'a.npy'}", "--feed", f"{name}={root / 'b.npy'}"]
    msg = _one_line(run_cli("record", graph, *feeds, "--out", str(tmp_path / "out")))
    assert (
        f"feed '{name}': rnn/lstm_cell/kernel:0 is the resource output of a VarHandleOp op (a variable), not values"
        in msg
    ), msg
    assert "its placeholders are x" in msg and not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["record", "inspect"])
def test_the_feed_suggested_for_a_name_holding_an_equals_sign_records(tmp_path, command):
    """A Keras input named `se=q`: the `--feed` the refusal (or inspect) suggests, split as a
    shell splits it, records (before: it suggested `--feed se=q=FILE.npy`, which fed `se`)."""
    import re
    import shlex

    from recorders import Recording
    from tests.test_keras import keras_module

    keras = keras_module("keras3")
    seq = keras.Input((STEPS, FEATURES), name="se=q")
    keras.Model(seq, keras.layers.LSTM(2)(seq)).save(str(tmp_path / "m.keras"))
    x = tmp_path / "x.npy"
    np.save(x, np.random.RandomState(0).randn(2, STEPS, FEATURES).astype(np.float32))
    model, out = str(tmp_path / "m.keras"), str(tmp_path / "out")
    if command == "record":
        said = _one_line(run_cli("record", model, "--feed", f"seq={x}", "--out", out)).strip()
    else:
        done = run_cli("inspect", model)
        assert done.returncode == 0, done.stderr
        said = done.stdout
    suggested = re.search(r"--feed ('[^']*'|\S+)", said)
    assert suggested is not None, said
    (arg,) = shlex.split(suggested.group(1).replace("FILE.npy", str(x)))
    done = run_cli("record", model, "--feed", arg, "--out", out, "--quiet")
    assert done.returncode == 0, done.stderr
    assert Recording(out).cells


@pytest.mark.parametrize(
    "item, split",
    [
        ("x=in.npy", ("x", "in.npy")),
        ("x=data/day=3/in.npy", ("x", "data/day=3/in.npy")),  # a partitioned dataset's path
        ("se\\=q=in.npy", ("se=q", "in.npy")),
        ("a\\=b\\=c=day=3/in.npy", ("a=b=c", "day=3/in.npy")),
    ],
)
def test_a_feed_splits_at_its_first_unescaped_equals_sign(item, split):
    import shlex

    from tracer.inputs.files import feed_arg, split_feed

    assert split_feed(item) == split
    (arg,) = shlex.split(feed_arg(*split))  # as a shell reads it
    assert split_feed(arg) == split


def test_record_s_help_says_how_a_name_holding_an_equals_sign_is_fed(capsys):
    """`record --help` says that `--feed` writes an `=` in a name `\\=`, with an example a
    shell and `split_feed` read as that name (before: the help did not say it)."""
    import re
    import shlex

    from tracer.cli import main
    from tracer.inputs.files import split_feed

    assert main(["record", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    example = re.search(r"--feed ('[^' ]*\\=[^' ]*')", shown)
    assert example is not None, shown
    (arg,) = shlex.split(example.group(1))
    name, _ = split_feed(arg)
    assert "=" in name and f"(the input {name})" in shown
