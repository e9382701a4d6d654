"""Models exported on a GPU: their cuDNN RNN ops, which have no CPU kernel, are replaced by
the same LSTM and GRU steps (`tracer.load.cudnn`) and recorded on the CPU.

Keras 3 exports are built by Keras' own code, in a fresh interpreter told that a GPU is
there (Keras then calls `CudnnRNNV3`, as on a GPU); a raw `CudnnRNNV3` with both of cuDNN's
biases, and TF1's `CudnnRNN` in a checkpoint, stand for TF1's CudnnLSTM. Every value is compared with a float64 numpy
recomputation: Keras' formulas for the Keras models, cuDNN's documented layout and equations
(written out here) for the raw op; the model's output with that of the same model on the CPU.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from recorders import Recording
from tests.conftest import run_cli
from tests.test_keras import keras_module, layer_inputs, reference
from tracer._tf import tf, v1

pytestmark = pytest.mark.e2e

T, FEATURES, EXAMPLES = 5, 3, 7

EXPORT_ON_A_GPU = """
import importlib, sys
import numpy as np
import keras
layer, path = sys.argv[1], sys.argv[2]
x = keras.Input(({T}, {FEATURES}), name="x")
h = keras.layers.Masking(0.0)(x) if "mask" in layer else x
first = keras.layers.LSTM(4, return_sequences=True, name="first") if "lstm" in layer else keras.layers.GRU(4, return_sequences=True, name="first")
model = keras.Model(x, keras.layers.Dense(2, name="dense")(keras.layers.LSTM(3, go_backwards=True, name="top")(first(h))))
rng = np.random.RandomState(0)
model.set_weights([rng.uniform(-0.8, 0.8, w.shape).astype("float32") for w in model.get_weights()])
xs = rng.uniform(-1, 1, ({EXAMPLES}, {T}, {FEATURES})).astype("float32")
np.save(path + ".x.npy", xs)
np.save(path + ".y.npy", model.predict(xs, verbose=0))  # on the CPU
model.save(path + ".keras")
importlib.import_module("keras.src.backend.tensorflow.rnn")._is_gpu_available = lambda: True  # as on a GPU
model.export(path)
"""


def export_on_a_gpu(layer: str, path) -> None:
    script = EXPORT_ON_A_GPU.format(T=T, FEATURES=FEATURES, EXAMPLES=EXAMPLES)
    done = subprocess.run(
        [sys.executable, "-c", script, layer, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert cudnn_ops(path) == 2, "the export runs no cuDNN op: the test would prove nothing"


def cudnn_ops(path) -> int:
    """How many cuDNN RNN ops the SavedModel's functions call (those its serving signature reaches among them)."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((path / "saved_model.pb").read_bytes())
    names = {
        n.name
        for f in saved.meta_graphs[0].graph_def.library.function
        for n in f.node_def
        if n.op.startswith("CudnnRNN")
    }
    return len(names)


def signature_output(path, x: np.ndarray) -> np.ndarray:
    """The model's output as gatetrace's loaded graph computes it (its cuDNN ops replaced)."""
    from tracer.load.model import load_model

    with load_model(path) as model:
        (output,) = [
            op.outputs[0]
            for op in model.graph.get_operations()
            if op.name == "StatefulPartitionedCall_1"
        ]
        return model.session.run(output, {model.inputs["x"]: x})


@pytest.mark.parametrize("layer", ["lstm", "gru"])
def test_a_keras_model_exported_on_a_gpu_records_on_the_cpu(layer, tmp_path):
    path = tmp_path / "model"
    export_on_a_gpu(layer, path)
    x = np.load(f"{path}.x.npy")
    done = run_cli(
        "record", str(path), "--feed", f"x={path}.x.npy", "--out", str(tmp_path / "rec"), "--quiet"
    )
    assert done.returncode == 0, done.stderr
    rec = Recording(tmp_path / "rec")
    first = "first/lstm_cell" if layer == "lstm" else "first/gru_cell"
    assert sorted(rec.cells) == sorted([first, "top/lstm_cell"])
    assert {c["name"]: c["steps"] for c in rec.manifest["cells"]} == {first: T, "top/lstm_cell": T}

    keras = keras_module("keras3")
    model = keras.models.load_model(f"{path}.keras")
    inputs = layer_inputs(keras, model, x)
    for cell, name in ((first, "first"), ("top/lstm_cell", "top")):
        gates, states, _ = reference(model.get_layer(name), inputs[name], None, None, "keras3")
        for g, values in gates.items():
            for column, want in zip(("preactivation", "activation"), values, strict=True):
                np.testing.assert_allclose(
                    rec.gate_array(cell, g, column), want, atol=1e-5, err_msg=f"{cell} {g} {column}"
                )
        for s, want in states.items():
            np.testing.assert_allclose(
                rec.state_array(cell, s), want, atol=1e-5, err_msg=f"{cell} {s}"
            )

    # the weights table: Keras' kernels per gate, and its bias (cuDNN's recurrent bias; the input bias Keras gives is 0)
    weights = pd.read_parquet(tmp_path / "rec" / "weights.parquet")
    cell = model.get_layer("first").cell
    kernel, recurrent, bias = (
        np.asarray(v.numpy(), np.float64) for v in (cell.kernel, cell.recurrent_kernel, cell.bias)
    )
    labels = ("i", "f", "j", "o") if layer == "lstm" else ("u", "r", "c")
    for k, gate in enumerate(labels):
        block = slice(k * 4, (k + 1) * 4)
        mine = weights[(weights.cell == first) & (weights.gate == gate)]
        for source, want in (("input", kernel[:, block]), ("recurrent", recurrent[:, block])):
            got = (
                mine[mine.source == source]
                .pivot(index="row", columns="unit", values="value")
                .to_numpy()
            )
            np.testing.assert_allclose(got, want, atol=1e-7, err_msg=f"{gate} {source}")
        b = bias[block] if layer == "lstm" else bias[0, block]
        np.testing.assert_allclose(
            mine[mine.source == "bias"].sort_values("unit").value, b, atol=1e-7
        )
        if layer == "gru":
            np.testing.assert_allclose(
                mine[mine.source == "recurrent_bias"].sort_values("unit").value,
                bias[1, block],
                atol=1e-7,
            )

    # downstream of the replaced ops, the model computes what the same model computes on the CPU
    np.testing.assert_allclose(signature_output(path, x), np.load(f"{path}.y.npy"), atol=1e-5)


def test_a_keras_mask_on_a_gpu_export_is_refused_in_one_line(tmp_path):
    """With a mask, Keras gives cuDNN per-example lengths, which the steps do not follow yet."""
    path = tmp_path / "model"
    export_on_a_gpu("lstm mask", path)
    done = run_cli("inspect", str(path))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert (
        "CudnnRNNV3 (" in done.stderr
        and "per-example sequence_lengths (a Keras mask)" in done.stderr
    )


# cuDNN's LSTM, one layer, one direction (as its documentation lays out the packed params):
# W_i W_f W_c W_o [units, input], R_i R_f R_c R_o [units, units], bW_i..bW_o, bR_i..bR_o [units]
UNITS = 2


def cudnn_lstm_reference(x: np.ndarray, params: np.ndarray, misread: bool = False):
    """Gates (i, f, c~, o: pre, act) and states (c, h) of cuDNN's LSTM, float64, time-major x
    [T, B, F]: each matrix `[units, rows]` row-major, as cuDNN documents its buffer (`misread`:
    `[rows, units]`, Keras' layout, to show this reference tells the two apart)."""
    u, k = UNITS, x.shape[2]
    p = params.astype(np.float64)
    W = p[: 4 * u * k].reshape(4, u, k)
    R = p[4 * u * k : 4 * u * (k + u)].reshape(4, u, u)
    if misread:
        W = p[: 4 * u * k].reshape(4, k, u).transpose(0, 2, 1)
        R = p[4 * u * k : 4 * u * (k + u)].reshape(4, u, u).transpose(0, 2, 1)
    bW, bR = (
        p[4 * u * (k + u) : 4 * u * (k + u) + 4 * u].reshape(4, u),
        p[4 * u * (k + u) + 4 * u :].reshape(4, u),
    )
    h = c = np.zeros((x.shape[1], u))
    pre = {g: [] for g in "ifjo"}
    act = {g: [] for g in "ifjo"}
    cs, hs = [], []
    for t in range(x.shape[0]):
        z = [x[t] @ W[g].T + bW[g] + h @ R[g].T + bR[g] for g in range(4)]  # i, f, c~, o
        a = [
            1 / (1 + np.exp(-z[0])),
            1 / (1 + np.exp(-z[1])),
            np.tanh(z[2]),
            1 / (1 + np.exp(-z[3])),
        ]
        c = a[1] * c + a[0] * a[2]
        h = a[3] * np.tanh(c)
        for g, zz, aa in zip("ifjo", z, a, strict=True):
            pre[g].append(zz)
            act[g].append(aa)
        cs.append(c)
        hs.append(h)

    def by_example(xs):  # [B, T, u]
        return np.stack(xs, axis=1)

    return (
        {g: (by_example(pre[g]), by_example(act[g])) for g in "ifjo"},
        {"c": by_example(cs), "h": by_example(hs)},
        np.stack(hs),
    )


class CudnnLSTM(tf.Module):
    """TF1's CudnnLSTM as exported on a GPU: a params variable holding both of cuDNN's biases,
    a batch-major input made time-major, and sequence_lengths the whole length."""

    def __init__(self, params: np.ndarray):
        self.params = tf.Variable(params, name="params")

    @tf.function(
        input_signature=[tf.TensorSpec([None, T, FEATURES], tf.float32, name="x")], autograph=False
    )
    def __call__(self, x):
        batch = tf.shape(x)[0]
        h = tf.zeros(tf.stack([1, batch, UNITS]))
        out = tf.raw_ops.CudnnRNNV3(
            input=tf.transpose(x, [1, 0, 2]),
            input_h=h,
            input_c=h,
            params=self.params,
            sequence_lengths=tf.fill([batch], T),
            rnn_mode="lstm",
            is_training=False,
        )
        return {"y": out[0]}


def test_a_raw_cudnn_lstm_with_both_biases_records_as_cudnn_computes_it(tmp_path):
    rng = np.random.RandomState(2)
    params = rng.uniform(-0.8, 0.8, 4 * UNITS * (FEATURES + UNITS) + 8 * UNITS).astype(np.float32)
    module = CudnnLSTM(params)
    tf.saved_model.save(module, str(tmp_path / "gpu"), signatures=module.__call__)
    x = rng.uniform(-1, 1, (EXAMPLES, T, FEATURES)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    shown = run_cli("inspect", str(tmp_path / "gpu"))
    assert shown.returncode == 0, shown.stderr
    done = run_cli(
        "record",
        str(tmp_path / "gpu"),
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    rec = Recording(tmp_path / "rec")
    (cell,) = rec.cells
    gates, states, outputs = cudnn_lstm_reference(x.transpose(1, 0, 2).astype(np.float64), params)
    misread, _, _ = cudnn_lstm_reference(x.transpose(1, 0, 2).astype(np.float64), params, True)
    assert np.abs(misread["i"][0] - gates["i"][0]).max() > 0.05  # the reference tells them apart
    for g, (pre, act) in gates.items():
        np.testing.assert_allclose(
            rec.gate_array(cell, g, "preactivation"), pre, atol=1e-5, err_msg=g
        )
        np.testing.assert_allclose(rec.gate_array(cell, g, "activation"), act, atol=1e-5, err_msg=g)
    for s, want in states.items():
        np.testing.assert_allclose(rec.state_array(cell, s), want, atol=1e-5, err_msg=s)
    from tracer.load.model import load_model

    with load_model(tmp_path / "gpu") as model:
        (y,) = [
            op.outputs[0]
            for op in model.graph.get_operations()
            if op.name == "StatefulPartitionedCall"
        ]
        np.testing.assert_allclose(model.session.run(y, {model.inputs["x"]: x}), outputs, atol=1e-5)


# the packed parameters of one cuDNN LSTM layer on FEATURES inputs: 4 kernels, 4 recurrent kernels, 8 biases
ONE_LAYER = 4 * UNITS * (FEATURES + UNITS) + 8 * UNITS


def inspect_raw_cudnn_lstm(tmp_path, params: int, layers: int):
    """`gatetrace inspect` of a SavedModel whose one op is a raw `CudnnRNN` (LSTM, time-major)
    with `params` packed parameters and `layers` layers."""

    class RawCudnn(tf.Module):
        def __init__(self):
            self.params = tf.Variable(tf.zeros([params]), name="params")

        @tf.function(
            input_signature=[tf.TensorSpec([T, None, FEATURES], tf.float32)], autograph=False
        )
        def __call__(self, x):
            h = tf.zeros(tf.stack([layers, tf.shape(x)[1], UNITS]))
            return tf.raw_ops.CudnnRNN(
                input=x,
                input_h=h,
                input_c=h,
                params=self.params,
                rnn_mode="lstm",
                is_training=False,
            )[0]

    tf.saved_model.save(RawCudnn(), str(tmp_path / "gpu"))
    done = run_cli("inspect", str(tmp_path / "gpu"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"{tmp_path / 'gpu'}: CudnnRNN (" in done.stderr, done.stderr
    return done.stderr


def test_two_layers_in_one_cudnn_op_are_refused_naming_it(tmp_path):
    assert "runs 2 layers" in inspect_raw_cudnn_lstm(tmp_path, 2 * ONE_LAYER, layers=2)


def test_cudnn_params_of_the_wrong_size_are_refused_naming_the_model(tmp_path):
    """The refusal names the model file, as every other refusal of a cuDNN op does (it once
    named the op's input tensor instead)."""
    said = inspect_raw_cudnn_lstm(tmp_path, ONE_LAYER - 1, layers=1)
    assert (
        f"packs {ONE_LAYER - 1} parameters where one layer of {UNITS} units on {FEATURES} inputs "
        f"has {ONE_LAYER}," in said
    ), said


def test_a_tf1_cudnn_lstm_checkpoint_records_on_the_cpu(tmp_path):
    """TF1's CudnnLSTM: the v1 op `CudnnRNN` on a time-major input, its packed params one
    variable (`opaque_kernel`), saved with a Saver on the CPU (nothing runs the op there)."""
    rng = np.random.RandomState(4)
    params = rng.uniform(-0.8, 0.8, 4 * UNITS * (FEATURES + UNITS) + 8 * UNITS).astype(np.float32)
    with tf.Graph().as_default() as graph:  # the weights, as the GPU session saved them
        v1.get_variable("cudnn_lstm/opaque_kernel", initializer=params)
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            v1.train.Saver().save(session, str(tmp_path / "model.ckpt"), write_meta_graph=False)
    with tf.Graph().as_default():  # the graph, which no CPU session can run
        x = v1.placeholder(tf.float32, [None, T, FEATURES], name="x")
        kernel = v1.get_variable("cudnn_lstm/opaque_kernel", initializer=params)
        h = tf.zeros(tf.stack([1, tf.shape(x)[0], UNITS]))
        out = tf.raw_ops.CudnnRNN(
            input=tf.transpose(x, [1, 0, 2]),
            input_h=h,
            input_c=h,
            params=kernel,
            rnn_mode="lstm",
            name="cudnn_lstm/CudnnRNN",
        )[0]
        tf.identity(out, name="y")
        v1.train.Saver().export_meta_graph(str(tmp_path / "model.ckpt.meta"))
    xs = rng.uniform(-1, 1, (EXAMPLES, T, FEATURES)).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    done = run_cli(
        "record",
        str(tmp_path / "model.ckpt"),
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    rec = Recording(tmp_path / "rec")
    assert rec.cells == ["cudnn_lstm/lstm_cell"]
    gates, states, _ = cudnn_lstm_reference(xs.transpose(1, 0, 2).astype(np.float64), params)
    for g, (pre, act) in gates.items():
        np.testing.assert_allclose(
            rec.gate_array("cudnn_lstm/lstm_cell", g, "preactivation"), pre, atol=1e-5, err_msg=g
        )
        np.testing.assert_allclose(
            rec.gate_array("cudnn_lstm/lstm_cell", g, "activation"), act, atol=1e-5, err_msg=g
        )
    for s, want in states.items():
        np.testing.assert_allclose(
            rec.state_array("cudnn_lstm/lstm_cell", s), want, atol=1e-5, err_msg=s
        )
