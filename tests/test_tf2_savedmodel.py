"""TF2 SavedModels: Keras 3 `model.export`, `tf.saved_model.save` of a tf-keras model and of a
`tf.Module`, and a tf-keras SavedModel without keras_metadata.pb (as TF 2.2 wrote them).

Their RNN layers run as While ops inside the functions the serving signature calls.
Every model gets random weights; each recording, made by the `gatetrace` command, is
compared with a float64 numpy recomputation from Keras' formulas (`tests.test_keras.reference`)
on each layer's input as the in-memory model computes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from recorders import Recording
from tests.conftest import record_with_cli, run_cli
from tests.test_keras import FEATURES, T, keras_module, layer_inputs, randomise, reference
from tracer._tf import tf

pytestmark = pytest.mark.e2e


gatetrace = run_cli  # the command, in this process


def stack(framework: str, small: bool = False):
    """LSTM -> GRU (reset_after=False) -> Bidirectional(GRU) -> LSTM going backwards -> SimpleRNN
    (relu); `small`: the first two only (tf-keras takes long to save each layer)."""
    keras = keras_module(framework)
    L = keras.layers
    x = keras.Input((T, FEATURES), name="x")
    a = L.LSTM(4, return_sequences=True, name="lstm")(x)
    b = L.GRU(3, reset_after=False, return_sequences=True, name="gru_v1")(a)
    if not small:
        b = L.Bidirectional(L.GRU(3, return_sequences=True, name="gru"), name="bi")(b)
        c = L.LSTM(2, go_backwards=True, return_sequences=True, name="back")(b)
        b = L.SimpleRNN(2, activation="relu", name="rnn")(c)
    model = keras.Model(x, b)
    randomise(model)
    return model


# Recorded cell (variable path) -> (layer name, which direction of a Bidirectional)
CELLS = {
    "lstm/lstm_cell": ("lstm", None),
    "gru_v1/gru_cell": ("gru_v1", None),
    "bi/forward_gru/gru_cell": ("bi", "forward_layer"),
    "bi/backward_gru/gru_cell": ("bi", "backward_layer"),
    "back/lstm_cell": ("back", None),
    "rnn/simple_rnn_cell": ("rnn", None),
}


def save(model, framework: str, how: str, path) -> int:
    """Save as `how` says; the number of unused reads dropped (see `drop_unused_reads`)."""
    import tensorflow as tf

    if how == "export":  # Keras 3
        model.export(str(path))
    elif how == "tf.saved_model.save":
        tf.saved_model.save(model, str(path))
    # a Keras SavedModel as TF 2.2 wrote it: no keras_metadata.pb, layers in the object graph only
    else:
        model.save(str(path), save_format="tf")
        os.remove(path / "keras_metadata.pb")
        return drop_unused_reads(path)
    return 0


def drop_unused_reads(path) -> int:
    """Remove from a SavedModel's functions the variable reads whose value nothing uses, with
    the dead ops they feed. Newer tf-keras runs its generic loop's step once outside the loop
    (for the output's shape), reading the cell's weights there, and keeps that step alive by
    control edges only; TF 2.2 to 2.4 wrote no such step, so only the loop body read the
    weights. Returns how many reads were dropped."""
    from tensorflow.core.protobuf import saved_model_pb2

    effects = {
        "NoOp",
        "While",
        "StatelessWhile",
        "StatefulPartitionedCall",
        "PartitionedCall",
        "If",
        "StatelessIf",
    }
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((path / "saved_model.pb").read_bytes())
    dropped = 0
    for function in saved.meta_graphs[0].graph_def.library.function:
        while True:
            used = {
                i.partition(":")[0]
                for n in function.node_def
                for i in n.input
                if not i.startswith("^")
            }
            used |= {v.partition(":")[0] for v in function.ret.values()}
            dead = {
                n.name
                for n in function.node_def
                if n.name not in used and n.op not in effects and not n.op.startswith("Assign")
            }
            if not dead:
                break
            dropped += sum(n.op == "ReadVariableOp" for n in function.node_def if n.name in dead)
            kept = [n for n in function.node_def if n.name not in dead]
            for n in kept:
                inputs = [i for i in n.input if i[1:] not in dead]
                del n.input[:]
                n.input.extend(inputs)
            del function.node_def[:]
            function.node_def.extend(kept)
            for key in [k for k, v in function.control_ret.items() if v in dead]:
                del function.control_ret[key]
    (path / "saved_model.pb").write_bytes(saved.SerializeToString())
    return dropped


def check_recording(rec: Recording, model, framework: str, x: np.ndarray, cells: dict) -> int:
    keras = keras_module(framework)
    inputs = layer_inputs(keras, model, x)
    checked = 0
    for cell, (name, half) in cells.items():
        layer = model.get_layer(name)
        layer = getattr(layer, half) if half else layer
        gates, states, _ = reference(layer, inputs[name], None, None, framework)
        for g, values in gates.items():  # our gate names: Keras' c of an LSTM is j
            for column, want in zip(("preactivation", "activation"), values, strict=True):
                np.testing.assert_allclose(
                    rec.gate_array(cell, g, column), want, atol=1e-5, err_msg=f"{cell} {g} {column}"
                )
        for s, want in states.items():
            np.testing.assert_allclose(
                rec.state_array(cell, s), want, atol=1e-5, err_msg=f"{cell} {s}"
            )
        checked += 1
    return checked


@pytest.mark.parametrize(
    "framework, how",
    [
        ("keras3", "export"),
        ("keras3", "tf.saved_model.save"),
        ("tf-keras", "tf.saved_model.save"),
        ("tf-keras", "no keras_metadata.pb"),
    ],
)
def test_every_value_of_a_tf2_saved_model_equals_keras_formulas(framework, how, tmp_path):
    small = how == "no keras_metadata.pb"
    model = stack(framework, small)
    cells = {k: v for k, v in CELLS.items() if not small or v[0] in ("lstm", "gru_v1")}
    path = tmp_path / "model"
    save(model, framework, how, path)
    x = np.random.RandomState(3).uniform(-1, 1, (9, T, FEATURES)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)

    shown = gatetrace("inspect", str(path), "--json")
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)
    assert sorted(c["name"] for c in info["cells"]) == sorted(cells) and info["unsafe_ops"] == []
    assert (
        small
        or {c["name"]: c["direction"] for c in info["cells"]}["bi/backward_gru/gru_cell"]
        == "backward"
    )
    # Keras 3's call argument, or the Input's name
    name = "inputs" if (framework, how) == ("keras3", "tf.saved_model.save") else "x"
    assert info["inputs"] == [
        {
            "name": name,
            "tensor": f"serving_default_{name}:0",
            "dtype": "float32",
            "shape": [None, T, FEATURES],
        }
    ]
    # the object graph of a tf-keras model names its layers' kinds
    keras_objects = framework == "tf-keras"
    assert (
        info["format"]
        == f"TF2 savedmodel{', of tf-keras layers' if keras_objects else ''}, signature serving_default"
    )

    done = gatetrace(
        "record",
        str(path),
        "--feed",
        f"{name}={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    assert f"recorded {len(cells)} cells on 9 sequences" in done.stdout
    rec = Recording(tmp_path / "rec")
    assert {c["path"] for c in rec.manifest["cells"]} == {"loop"}  # taken from the loops themselves
    assert check_recording(rec, model, framework, x, cells) == len(cells)


SCRIPT_HEAD = """
import sys
import numpy as np
sys.path.insert(0, {root!r})
from tests.test_keras import keras_module, randomise, T, FEATURES
import tensorflow as tf
"""


def run_script(body: str, **fields: str) -> None:
    """Run `body`, a script that builds and saves a tf.Module as users' scripts do, in a fresh
    interpreter (tracing tf.functions in this one is affected by the tests before)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    built = subprocess.run(
        [sys.executable, "-c", (SCRIPT_HEAD + body).format(root=root, **fields)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr


MODULE_SCRIPT = """
tk = keras_module("tf-keras")

class Tagger(tf.Module):
    def __init__(self):
        super().__init__()
        self.gru = tk.layers.GRU(3, return_sequences=True, name="gru")
        self.lstm = tk.layers.LSTM(2, return_sequences=True, name="lstm")
        self.gru.build((None, T, FEATURES))
        self.lstm.build((None, T, 3))

    @tf.function(input_signature=[tf.TensorSpec([None, T, FEATURES], tf.float32, name="tokens")])
    def tag(self, tokens):
        return {{"tags": self.lstm(self.gru(tokens))}}

module = Tagger()
randomise(module.gru, seed=1)
randomise(module.lstm, seed=2)
tf.saved_model.save(module, {path!r}, signatures={{"tag": module.tag}})
np.savez({weights!r}, *module.gru.get_weights(), *module.lstm.get_weights())
"""


def test_a_tf_module_with_a_keras_gru_and_its_own_signature(tmp_path):
    """A tf.Module holding a tf-keras GRU (reset_after) and LSTM, exported by a script with a
    tf.function signature of its own naming its input `tokens`; fed by that name or by tensor name."""
    run_script(MODULE_SCRIPT, path=str(tmp_path / "module"), weights=str(tmp_path / "w.npz"))
    tk = keras_module("tf-keras")
    gru, lstm = tk.layers.GRU(3, return_sequences=True), tk.layers.LSTM(2, return_sequences=True)
    gru.build((None, T, FEATURES))
    lstm.build((None, T, 3))
    w = np.load(tmp_path / "w.npz")
    gru.set_weights([w["arr_0"], w["arr_1"], w["arr_2"]])
    lstm.set_weights([w["arr_3"], w["arr_4"], w["arr_5"]])
    x = np.random.RandomState(5).uniform(-1, 1, (4, T, FEATURES)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)

    missing = gatetrace("inspect", str(tmp_path / "module"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert (
        "has no signature 'serving_default'; its signatures are 'tag': choose one with --signature"
        in missing.stderr
    )

    for feed in ("tokens", "tag_tokens"):  # the signature's input name, and the placeholder's
        out = tmp_path / feed
        done = gatetrace(
            "record",
            str(tmp_path / "module"),
            "--signature",
            "tag",
            "--feed",
            f"{feed}={tmp_path / 'x.npy'}",
            "--out",
            str(out),
            "--quiet",
        )
        assert done.returncode == 0, done.stderr
        rec = Recording(out)
        assert sorted(rec.cells) == ["gru_cell", "lstm_cell"]
        gates, states, outputs = reference(gru, x, None, None, "tf-keras")
        for g in "urc":
            np.testing.assert_allclose(
                rec.gate_array("gru_cell", g, "activation"), gates[g][1], atol=1e-5
            )
            np.testing.assert_allclose(
                rec.gate_array("gru_cell", g, "preactivation"), gates[g][0], atol=1e-5
            )
        gates, states, _ = reference(lstm, outputs, None, None, "tf-keras")
        for g in "ifjo":
            np.testing.assert_allclose(
                rec.gate_array("lstm_cell", g, "activation"), gates[g][1], atol=1e-5
            )
        np.testing.assert_allclose(rec.state_array("lstm_cell", "c"), states["c"], atol=1e-5)


ONE_LAYER_SCRIPT = """
class One(tf.Module):
    def __init__(self):
        super().__init__()
        self.layer = keras_module({framework!r}).layers.{layer}
        self.layer.build((None, T, FEATURES))

    @tf.function(input_signature=[tf.TensorSpec([None, T, FEATURES], tf.float32, name="x")])
    def __call__(self, x):
        {before}
        return {{"y": self.layer(x)}}

module = One()
tf.saved_model.save(module, {path!r}, signatures=module.__call__)
"""


def test_an_unsafe_op_in_a_signature_function_is_refused_before_anything_runs(tmp_path):
    """A WriteFile inside the function the signature calls, before a GRU: after inlining it
    sits in the graph that recording would run, and nothing runs."""
    marker = tmp_path / "pwned.txt"
    # the GRU waits for it
    write = f"with tf.control_dependencies([tf.io.write_file({str(marker)!r}, 'pwned')]): x = tf.identity(x)"
    run_script(
        ONE_LAYER_SCRIPT,
        framework="tf-keras",
        layer='GRU(2, return_sequences=True, name="gru")',
        before=write,
        path=str(tmp_path / "planted"),
    )
    marker.unlink(missing_ok=True)  # tracing the function ran it once
    np.save(tmp_path / "x.npy", np.zeros((2, T, FEATURES), np.float32))
    done = gatetrace(
        "record",
        str(tmp_path / "planted"),
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "rec"),
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "WriteFile" in done.stderr and "nothing was run" in done.stderr
    assert not marker.exists() and not (tmp_path / "rec").exists()


def test_a_keras_3_layer_inside_a_tf_module_is_restored_as_tensorflow_restores_it(tmp_path):
    """A Keras 3 layer inside a tf.Module: the signature captures a second handle per weight,
    which the restore function does not fill; TensorFlow's loader binds it to the saved object
    and restores it by the checkpoint's object graph, and so does gatetrace. Each recorded h is
    the layer's output as TensorFlow's own loader computes it."""
    run_script(
        ONE_LAYER_SCRIPT,
        framework="keras3",
        layer='LSTM(2, return_sequences=True, name="lstm")',
        before="pass",
        path=str(tmp_path / "holder"),
    )
    x = np.random.RandomState(6).uniform(-1, 1, (4, T, FEATURES)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    done = gatetrace(
        "record",
        str(tmp_path / "holder"),
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    rec = Recording(tmp_path / "rec")
    (cell,) = rec.cells
    expected = (
        tf.saved_model.load(str(tmp_path / "holder"))
        .signatures["serving_default"](x=tf.constant(x))["y"]
        .numpy()
    )
    assert np.abs(expected).max() > 0.05  # real weights, not zeros
    np.testing.assert_allclose(rec.state_array(cell, "h"), expected, atol=1e-6)


@pytest.mark.parametrize("steps", [1, T])
def test_activations_other_than_tanh_in_a_saved_model_without_keras_metadata(steps, tmp_path):
    """As TF 2.2 to 2.4 wrote them: no keras_metadata.pb, and weights read only inside the loop
    that does not run cuDNN's equations (the LSTM with relu). A GRU with activation="linear" (Keras
    applies no op at all to its candidate) over one step or several, and an LSTM with relu."""
    keras = keras_module("tf-keras")
    x = keras.Input((steps, FEATURES), name="x")
    gru = keras.layers.GRU(7, activation="linear", return_sequences=True, name="gru")(x)
    model = keras.Model(x, keras.layers.LSTM(3, activation="relu", name="lstm")(gru))
    randomise(model, seed=4)
    path = tmp_path / "model"
    # the LSTM with relu runs Keras' generic loop, whose body alone reads the weights
    assert save(model, "tf-keras", "no keras_metadata.pb", path) > 0
    xs = np.random.RandomState(5).uniform(-1, 1, (6, steps, FEATURES)).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    done = gatetrace(
        "record",
        str(path),
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    rec = Recording(tmp_path / "rec")
    cells = {c: (c.partition("/")[0], None) for c in rec.cells}
    assert sorted(cells) == ["gru/gru_cell", "lstm/lstm_cell"]
    assert check_recording(rec, model, "tf-keras", xs, cells) == 2
    assert {c["name"]: c["activation"] for c in rec.manifest["cells"]} == {
        "gru/gru_cell": "linear",
        "lstm/lstm_cell": "relu",
    }


FIXTURES = Path(__file__).resolve().parent / "fixtures" / "keras3_exports"


@pytest.mark.parametrize("version", sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()))
def test_keras_3_exports_of_older_versions_record_from_their_loops(version, tmp_path):
    """Exports written by Keras 3.0 and 3.10 (`tests/fixtures/keras3_exports/make.py`), whose loop
    bodies add each bias with AddV2: every cell found and recorded from its loop, each value the
    float64 reference of the same model read back by the Keras installed here."""
    folder = FIXTURES / version
    x = np.load(folder / "x.npy")
    done = gatetrace(
        "record",
        str(folder / "export"),
        "--feed",
        f"x={folder / 'x.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    rec = Recording(tmp_path / "rec")
    cells = {
        "bi/forward_lstm/lstm_cell": ("bi", "forward_layer"),
        "bi/backward_lstm/lstm_cell": ("bi", "backward_layer"),
        "gru/gru_cell": ("gru", None),
        "rnn/simple_rnn_cell": ("rnn", None),
        "back/lstm_cell": ("back", None),
    }
    assert sorted(rec.cells) == sorted(cells)
    assert {c["path"] for c in rec.manifest["cells"]} == {"loop"}
    model = keras_module("keras3").models.load_model(folder / "model.keras")
    assert check_recording(rec, model, "keras3", x, cells) == len(cells)


CALLS = []  # each call of the subclassed model's Python code


def test_a_subclassed_keras_model_is_recorded_through_its_traced_functions(tmp_path):
    """A TF 2 script's subclassed model (`class LSTM_Model_Base(Model)`, Keras' own LSTM and Dense
    layers inside), saved as a SavedModel: its keras_metadata.pb names a class whose code is not in
    the folder. It is recorded through the traced functions and variables, the class's Python
    code never run, each value as Keras' formulas give it."""
    keras = keras_module("tf-keras")

    class LSTM_Model_Base(keras.Model):  # noqa: N801  (as the script named it)
        def __init__(self):
            super().__init__()
            self.lstm = keras.layers.LSTM(4, return_sequences=True, name="lstm")
            self.top = keras.layers.LSTM(3, name="top")
            self.dense = keras.layers.Dense(1, name="dense")

        def call(self, x):
            CALLS.append(1)
            return self.dense(self.top(self.lstm(x)))

    model = LSTM_Model_Base()
    x = np.random.RandomState(3).uniform(-1, 1, (5, T, FEATURES)).astype(np.float32)
    model(x)
    randomise(model, seed=7)
    model.compile("adam", "mse")  # saved compiled, with an optimizer, as the script did
    model.save(str(tmp_path / "saved"), save_format="tf")
    CALLS.clear()
    shown = gatetrace("inspect", str(tmp_path / "saved"))
    assert shown.returncode == 0, shown.stderr
    assert "names LSTM_Model_Base (not one of Keras' own layers): recorded through" in shown.stdout
    rec = record_with_cli(tmp_path / "saved", {"input_1": x}, tmp_path / "rec")
    assert CALLS == []  # the class's code never ran
    lstm, top = rec.cells
    assert lstm.endswith("/lstm/lstm_cell") and top.endswith("/top/lstm_cell")
    below = x
    for name, layer in ((lstm, model.lstm), (top, model.top)):
        gates, states, outputs = reference(layer, below, None, None, "tf-keras")
        for g, (pre, act) in gates.items():
            np.testing.assert_allclose(rec.gate_array(name, g, "preactivation"), pre, atol=1e-5)
            np.testing.assert_allclose(rec.gate_array(name, g, "activation"), act, atol=1e-5)
        below = outputs.astype(np.float32)
