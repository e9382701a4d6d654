"""TensorFlow Lite files: checked as data before anything is allocated
(`tracer.load.tflite_check`), their fused recurrent ops recorded exactly (`tracer.find.lite`,
`tracer.values.lite`), what is not recorded refused in one line.

The files are converted here with `tf.lite.TFLiteConverter`, as a user converts them: tf-keras
LSTMs (each one fused UNIDIRECTIONAL_SEQUENCE_LSTM op; a stack, a Bidirectional layer and
go_backwards through REVERSE_V2), a Keras 3 LSTM (a WHILE loop of builtin ops) and a tf-keras
LSTM quantised for its weights (dynamic range). The recorded gates are checked against Keras'
formulas in float64 on the weights of the Keras model converted. Hostile files are the fused
one, changed through TensorFlow's own flatbuffer schema.
"""

from __future__ import annotations

import math
import os
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from tests.test_keras import keras_module, randomise, reference

T, D, H = 5, 3, 4


def _converted(framework: str, quantise: str = "", masked: bool = False) -> bytes:
    """A one-LSTM model converted; quantised (`weights`: dynamic range, with 64 units of 32
    features: the converter leaves a matrix of fewer than 1,024 weights as it is); behind a
    Masking layer. (Full-integer files: tests/test_tflite_integer.py.)"""
    from tracer._tf import tf

    keras = keras_module(framework)
    inp = keras.Input((T, 32 if quantise else D), batch_size=1, name="seq")
    x = keras.layers.Masking(0.0)(inp) if masked else inp
    # Keras' own initialisers, seeded: the same model at every run (a test's clip must bite)
    init = keras.initializers
    lstm = keras.layers.LSTM(
        64 if quantise else H,
        return_sequences=True,
        kernel_initializer=init.GlorotUniform(seed=1),
        recurrent_initializer=init.Orthogonal(seed=2),
    )
    model = keras.Model(inp, lstm(x))
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if quantise:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    return converter.convert()


def _model(name: str):
    """A model of `name` (FRAMEWORK-KIND), batch 1 (as TensorFlow Lite converts recurrent
    layers), its weights (biases too) drawn at random."""
    framework = "tf-keras" if name.startswith("tf-keras-") else "keras3"
    kind = name.removeprefix(f"{framework}-")
    keras = keras_module(framework)
    L = keras.layers
    inp = keras.Input((T, D), batch_size=1, name="seq")
    if kind in ("lstm", "lstm-float16"):
        out = L.LSTM(H, return_sequences=True, name="lstm")(inp)
    elif kind == "gru":
        out = L.GRU(H, return_sequences=True, name="gru")(inp)
    elif kind == "simple":
        out = L.SimpleRNN(H, return_sequences=True, name="simple")(inp)
    elif kind == "stack":  # the upper layer returns its last output only
        out = L.LSTM(H + 1, name="above")(L.LSTM(H, return_sequences=True, name="below")(inp))
    elif kind == "bidirectional":
        out = L.Bidirectional(L.LSTM(H, return_sequences=True), name="both")(inp)
    else:
        out = L.GRU(H, return_sequences=True, go_backwards=True, name="back")(inp)
    model = keras.Model(inp, out)
    randomise(model, seed=3)
    if kind.endswith("float16"):  # weights a float16 holds exactly, as the file will hold them
        for w in model.weights:
            w.assign(np.asarray(w).astype(np.float16).astype(np.float32))
    return model


# tf-keras LSTMs convert to fused UNIDIRECTIONAL_SEQUENCE_LSTM ops, the rest to WHILE loops
# (float16: weights stored as float16, widened by DEQUANTIZE ops)
FUSED = ("tf-keras-lstm", "tf-keras-stack", "tf-keras-bidirectional", "tf-keras-lstm-float16")
LOOPS = (
    "keras3-lstm",
    "keras3-gru",
    "keras3-simple",
    "keras3-stack",
    "keras3-bidirectional",
    "keras3-backwards",
    "tf-keras-gru",
    "tf-keras-simple",
)
# loops whose cond and body declare each stacked sequence (the input, the outputs so far) as
# [1, ...], its first element's shape, while the loop carries [steps, ...]: as some converters
# write them, and as the WHILE kernel allows (it resizes a body's inputs to what it carries)
DECLARED = ("keras3-lstm-declared", "tf-keras-gru-declared")
# a Bidirectional LSTM as one BIDIRECTIONAL_SEQUENCE_LSTM op (what TF 1.x's converters and
# tf.lite.experimental.nn wrote), its halves' outputs merged or apart
BIDIRECTIONAL_OPS = ("tf-keras-bidirectional-merged", "tf-keras-bidirectional-apart")


def _one_bidirectional_op(data: bytes, merged: bool) -> bytes:
    """The converted Bidirectional(LSTM) (two UNIDIRECTIONAL_SEQUENCE_LSTM ops, the backward
    one between two REVERSE_V2s, their outputs concatenated) written as one
    BIDIRECTIONAL_SEQUENCE_LSTM op on the same weights and states: its output the model's
    (merge_outputs), or its two outputs concatenated after it."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as fb

    model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(data, 0))
    main = model.subgraphs[0]
    kinds = [
        max(
            model.operatorCodes[op.opcodeIndex].builtinCode,
            model.operatorCodes[op.opcodeIndex].deprecatedBuiltinCode,
        )
        for op in main.operators
    ]
    lstm = fb.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM
    ops = [op for op, kind in zip(main.operators, kinds, strict=True) if kind == lstm]
    forward = next(op for op in ops if int(op.inputs[0]) in [int(i) for i in main.inputs])
    backward = next(op for op in ops if op is not forward)
    concat = next(
        op
        for op, kind in zip(main.operators, kinds, strict=True)
        if kind == fb.BuiltinOperator.CONCATENATION
    )
    code = fb.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = fb.BuiltinOperator.BIDIRECTIONAL_SEQUENCE_LSTM
    code.version = 1
    model.operatorCodes.append(code)
    op = fb.OperatorT()
    op.opcodeIndex = len(model.operatorCodes) - 1
    op.inputs = np.array(
        [int(main.inputs[0]), *forward.inputs[1:18], *backward.inputs[1:18], *forward.inputs[18:20],
         *backward.inputs[18:20], *[-1] * 9],
        np.int32,
    )  # fmt: skip
    options = fb.BidirectionalSequenceLSTMOptionsT()
    given = forward.builtinOptions
    options.fusedActivationFunction, options.cellClip, options.projClip = (
        given.fusedActivationFunction,
        given.cellClip,
        given.projClip,
    )
    options.mergeOutputs, options.timeMajor = merged, False
    op.builtinOptionsType, op.builtinOptions = (
        fb.BuiltinOptions.BidirectionalSequenceLSTMOptions,
        options,
    )
    if merged:
        op.outputs = np.array(concat.outputs, np.int32)
        main.operators = [op]
    else:
        op.outputs = np.array([forward.outputs[0], backward.outputs[0]], np.int32)
        concat.inputs = np.array(op.outputs, np.int32)
        main.operators = [op, concat]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _declared_as_first_elements(data: bytes) -> bytes:
    """A converted file whose WHILE loops' conds and bodies declare every input of more than
    one row along the first of its 3 dimensions as one row (see DECLARED)."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as fb

    model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(data, 0))
    loops = [
        op.builtinOptions
        for op in model.subgraphs[0].operators
        if isinstance(op.builtinOptions, fb.WhileOptionsT)
    ]
    changed = 0
    for options in loops:
        for g in (options.condSubgraphIndex, options.bodySubgraphIndex):
            subgraph = model.subgraphs[g]
            for i in subgraph.inputs:
                t = subgraph.tensors[i]
                if len(t.shape) == 3 and t.shape[0] > 1:
                    t.shape = np.array([1, *t.shape[1:]], np.int32)
                    changed += 1
    assert loops and changed
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Each of FUSED and LOOPS converted: {name: (path, Keras model)}."""
    from tracer._tf import tf

    root = tmp_path_factory.mktemp("converted")
    out = {}
    for name in (*FUSED, *LOOPS):
        model = _model(name)
        path = root / f"{name}.tflite"
        converter = tf.lite.TFLiteConverter.from_keras_model(model)
        if name.endswith("float16"):
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.target_spec.supported_types = [tf.float16]
        path.write_bytes(converter.convert())
        out[name] = (path, model)
    for name in DECLARED:
        path, model = out[name.removesuffix("-declared")]
        (root / f"{name}.tflite").write_bytes(_declared_as_first_elements(path.read_bytes()))
        out[name] = (root / f"{name}.tflite", model)
    for name in BIDIRECTIONAL_OPS:
        path, model = out["tf-keras-bidirectional"]
        data = _one_bidirectional_op(path.read_bytes(), merged=name.endswith("merged"))
        (root / f"{name}.tflite").write_bytes(data)
        out[name] = (root / f"{name}.tflite", model)
    return out


@pytest.fixture(scope="module")
def lite(tmp_path_factory):
    root = tmp_path_factory.mktemp("tflite")
    for name, framework, quantise, masked in (
        ("fused", "tf-keras", "", False),
        ("loop", "keras3", "", False),
        ("masked", "keras3", "", True),
        ("quantised", "tf-keras", "weights", False),
    ):
        (root / f"{name}.tflite").write_bytes(_converted(framework, quantise, masked))
    return root


def _one_line(done):
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("gatetrace: error: ")
    return done.stderr


def _layers(model) -> list:
    """The Keras RNN layers of a model, a Bidirectional layer's halves each."""
    out = []
    for layer in model.layers:
        if hasattr(layer, "forward_layer"):
            out += [layer.forward_layer, layer.backward_layer]
        elif hasattr(layer, "cell"):
            out.append(layer)
    return out


@pytest.mark.parametrize("name", (*FUSED, *LOOPS, *DECLARED, *BIDIRECTIONAL_OPS))
def test_a_converted_layer_records_keras_formulas_exactly(converted, tmp_path, name):
    """Every gate's preactivation and activation and every state at every input position, for
    each fused op or WHILE loop (a stack's two, a Bidirectional layer's forward and backward
    halves, a go_backwards layer's, a loop whose body declares other shapes than it carries),
    equal Keras' formulas in float64 on the weights of the model converted; each cell's
    weights per gate are its layer's kernel blocks."""
    import pandas as pd

    path, model = converted[name]
    x = np.random.RandomState(5).uniform(-1, 1, (9, T, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "run"
    done = run_cli("record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out))
    assert done.returncode == 0, done.stderr
    gates, states = pd.read_parquet(out / "gates"), pd.read_parquet(out / "states")
    weights = pd.read_parquet(out / "weights.parquet")
    layers, recorded = _layers(model), sorted(set(gates["cell"]))
    assert len(recorded) == len(layers)
    inputs = x.astype(np.float64)
    for layer in layers:
        # the op of the layer: the one of its units and direction not matched yet
        framework = "tf-keras" if name.startswith("tf-keras-") else "keras3"
        ref_gates, ref_states, outputs = reference(layer, inputs, None, None, framework)
        if "c" in ref_states:  # (the fused op clips its cell at 10: never reached here)
            assert np.abs(ref_states["c"]).max() < 10
        cell = next(
            c
            for c in recorded
            if (gates[gates["cell"] == c]["unit"].max() + 1 == layer.cell.units)
            and _direction(out, c) == ("backward" if layer.go_backwards else "forward")
        )
        recorded.remove(cell)
        for gate, (pre, act) in ref_gates.items():
            rows = gates[(gates["cell"] == cell) & (gates["gate"] == gate)]
            rows = rows.sort_values(["example", "step", "unit"])
            n = (x.shape[0], T, layer.cell.units)
            assert np.abs(rows["preactivation"].to_numpy().reshape(n) - pre).max() < 1e-5, gate
            assert np.abs(rows["activation"].to_numpy().reshape(n) - act).max() < 1e-5, gate
        for state, values in ref_states.items():
            rows = states[(states["cell"] == cell) & (states["state"] == state)]
            rows = rows.sort_values(["example", "step", "unit"])
            assert np.abs(rows["value"].to_numpy().reshape(values.shape) - values).max() < 1e-5
        # the weights of the gate of the second block (the first of a SimpleRNN)
        kernel, units = np.asarray(layer.cell.kernel), layer.cell.units
        second = list(ref_gates)[min(1, len(ref_gates) - 1)]
        block = min(1, len(ref_gates) - 1)
        W = weights[
            (weights["cell"] == cell) & (weights["gate"] == second) & (weights["source"] == "input")
        ]
        assert np.array_equal(
            W.sort_values(["row", "unit"])["value"].to_numpy().reshape(kernel.shape[0], -1),
            kernel[:, block * units : (block + 1) * units],
        )
        if name.endswith("stack"):  # the next layer reads these
            inputs = outputs


@pytest.mark.parametrize("name", ["tf-keras-lstm", "keras3-gru"])
def test_summary_and_weights_of_a_file_equal_its_recording(converted, tmp_path, name):
    """`record --summary` gives the full recording's per-unit means, extremes and counts;
    `gatetrace weights` the recording's weights table."""
    import pandas as pd

    path, _ = converted[name]
    np.save(
        tmp_path / "x.npy", np.random.RandomState(2).uniform(-1, 1, (6, T, D)).astype(np.float32)
    )
    feed = f"seq={tmp_path / 'x.npy'}"
    for args in (["--out", str(tmp_path / "full")], ["--summary", "--out", str(tmp_path / "sum")]):
        done = run_cli("record", str(path), "--feed", feed, *args)
        assert done.returncode == 0, done.stderr
    assert run_cli("weights", str(path), "--out", str(tmp_path / "w.parquet")).returncode == 0
    gates = pd.read_parquet(tmp_path / "full" / "gates")
    by_unit = gates.groupby(["cell", "gate", "unit"])["activation"].agg(
        ["mean", "min", "max", "count"]
    )
    units = pd.read_parquet(tmp_path / "sum" / "summary" / "units.parquet")
    units = units[(units["table"] == "gates") & (units["column"] == "activation")]
    units = units.set_index(["cell", "name", "unit"]).sort_index()
    assert list(units["count"]) == list(by_unit["count"]) == [6 * T] * len(units)
    for column in ("mean", "min", "max"):
        assert np.allclose(units[column].to_numpy(), by_unit[column].to_numpy(), atol=1e-6)
    recorded = pd.read_parquet(tmp_path / "full" / "weights.parquet")
    alone = pd.read_parquet(tmp_path / "w.parquet")
    assert len(recorded) and recorded.equals(alone)


def _direction(out, cell: str) -> str:
    import json

    manifest = json.loads((out / "manifest.json").read_text())
    return next(c["direction"] for c in manifest["cells"] if c["name"] == cell)


def test_the_replay_is_checked_against_the_interpreter(converted):
    """Weights that do not compute what the op computed are refused in one line, nothing recorded:
    the replay of every batch is checked against the op's own outputs and final states."""
    from dataclasses import replace

    from recorders.errors import ReplayMismatchError
    from tracer.find.lite import find_ops
    from tracer.load.tflite import LiteModel
    from tracer.load.tflite_check import checked
    from tracer.values.lite import LitePlan

    path, _ = converted["tf-keras-lstm"]
    model = LiteModel(*checked(path, "lstm.tflite"), "lstm.tflite")
    (cell,) = find_ops(model)
    arrays = dict(cell.arrays, bias=cell.arrays["bias"] + np.float32(0.01))
    x = np.random.RandomState(0).uniform(-1, 1, (3, T, D)).astype(np.float32)
    LitePlan(model, [cell]).fetch({model.inputs[0]: x})  # the file's own weights: checked, equal
    with pytest.raises(ReplayMismatchError, match="cell lstm: replayed"):
        LitePlan(model, [replace(cell, arrays=arrays)]).fetch({model.inputs[0]: x})


@pytest.mark.parametrize("name", ["tf-keras-lstm", "keras3-lstm"])
def test_every_row_starts_from_the_files_state(converted, tmp_path, name):
    """The op keeps its state between invocations: every row is still a sequence of its own
    (the same row recorded alone and after others has the same gates, to float32 rounding of
    the batch's matrix products; a state carried over would differ by far more)."""
    import pandas as pd

    path, _ = converted[name]
    x = np.random.RandomState(1).uniform(-1, 1, (4, T, D)).astype(np.float32)
    for name, rows in (("all", x), ("last", x[3:])):
        np.save(tmp_path / f"{name}.npy", rows)
        done = run_cli(
            "record",
            str(path),
            "--feed",
            f"seq={tmp_path / f'{name}.npy'}",
            "--out",
            str(tmp_path / name),
        )
        assert done.returncode == 0, done.stderr
    every = pd.read_parquet(tmp_path / "all" / "gates")
    alone = pd.read_parquet(tmp_path / "last" / "gates")
    keys = ["step", "gate", "unit"]
    after = every[every["example"] == 3].sort_values(keys)["activation"].to_numpy()
    assert np.abs(after - alone.sort_values(keys)["activation"].to_numpy()).max() < 1e-6


@pytest.mark.parametrize(
    "name, features, says",
    [
        (
            "masked",
            D,
            "reads a mask a step (a Masking layer's, or an Embedding's mask_zero), which gatetrace does not record "
            "in TensorFlow Lite loops yet",
        ),
    ],
)
def test_what_is_not_recorded_is_one_line(lite, tmp_path, name, features, says):
    """`inspect` and `record` say it is TensorFlow Lite, what it holds, and why it is not
    recorded (before: "is in no format gatetrace reads"); nothing is written."""
    path = str(lite / f"{name}.tflite")
    shown = _one_line(run_cli("inspect", path))
    assert says in shown
    np.save(tmp_path / "x.npy", np.zeros((1, T, features), np.float32))
    out = tmp_path / "out"
    refused = _one_line(
        run_cli("record", path, "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out))
    )
    assert says in refused and not out.exists()


def test_inspect_lists_the_ops(lite):
    shown = run_cli("inspect", str(lite / "fused.tflite"))
    assert shown.returncode == 0, shown.stderr
    assert "(tflite): 1 recurrent op" in shown.stdout
    assert "UnidirectionalSequenceLSTM" in shown.stdout and "cell_clip=10" in shown.stdout
    assert f"inputs: seq (float32, [1, {T}, {D}]); record with --feed seq=FILE.npy" in shown.stdout


def _changed(lite, change, name: str = "fused") -> bytes:
    """The fused file (or another of `lite`), its parsed model changed by `change`, written again."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as fb

    data = (lite / f"{name}.tflite").read_bytes()
    model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(data, 0))
    change(model, fb)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _added(model, shape, rng) -> int:
    """A float32 constant of `shape` drawn from `rng`, added to the model's main subgraph: its number."""
    from tensorflow.lite.python import schema_py_generated as fb

    buffer = fb.BufferT()
    buffer.data = np.frombuffer(
        rng.uniform(-0.5, 0.5, shape).astype(np.float32).tobytes(), np.uint8
    )
    model.buffers.append(buffer)
    t = fb.TensorT()
    t.shape, t.type, t.buffer = (
        np.array(shape, np.int32),
        fb.TensorType.FLOAT32,
        len(model.buffers) - 1,
    )
    t.name = f"added_{len(model.subgraphs[0].tensors)}".encode()
    model.subgraphs[0].tensors.append(t)
    return len(model.subgraphs[0].tensors) - 1


def _peepholes(model, fb):
    """The fused LSTM given peepholes (inputs 9-11) and a cell clip that bites (0.3)."""
    rng = np.random.RandomState(4)
    op = model.subgraphs[0].operators[0]
    inputs = list(op.inputs)
    inputs[9:12] = [_added(model, [H], rng) for _ in range(3)]
    op.inputs = np.array(inputs, np.int32)
    op.builtinOptions.cellClip = 0.3


P = 3  # the projection's width


def _projection(model, fb):
    """The fused LSTM given a projection of its output to P values (input 16) and a projection
    clip: its recurrent weights read P values, its output state and output are P wide."""
    rng = np.random.RandomState(5)
    sub = model.subgraphs[0]
    op = sub.operators[0]
    inputs = list(op.inputs)
    inputs[5:9] = [_added(model, [H, P], rng) for _ in range(4)]
    inputs[16] = _added(model, [P, H], rng)
    state = _added(model, [1, P], rng)
    sub.tensors[state].buffer, sub.tensors[state].isVariable = 0, True  # (a variable holds no data)
    inputs[18] = state
    op.inputs = np.array(inputs, np.int32)
    sub.tensors[int(op.outputs[0])].shape = np.array([1, T, P], np.int32)
    op.builtinOptions.projClip = 0.1


def _rnn(model, fb):
    """The fused LSTM's op made a UNIDIRECTIONAL_SEQUENCE_RNN (as TF1's
    `tf.lite.experimental.nn.dynamic_rnn` converted), on its forget gate's weights and bias."""
    code = model.operatorCodes[0]
    code.builtinCode = code.deprecatedBuiltinCode = fb.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_RNN
    code.version = 1
    op = model.subgraphs[0].operators[0]
    x, W, U, b, h = (int(op.inputs[k]) for k in (0, 2, 6, 13, 18))
    model.subgraphs[0].tensors[h].isVariable = True
    op.inputs = np.array([x, W, U, b, h], np.int32)
    options = fb.SequenceRNNOptionsT()
    options.timeMajor, options.fusedActivationFunction = False, fb.ActivationFunctionType.TANH
    op.builtinOptionsType, op.builtinOptions = fb.BuiltinOptions.SequenceRNNOptions, options


def _lite_weights(path):
    """The file's weights, by the op's input number, in float64."""
    from tracer.load.tflite import LiteModel
    from tracer.load.tflite_check import checked

    model = LiteModel(*checked(path, path.name), path.name)
    op, arrays = model.main.operators[0], {}
    for k, t in enumerate(op.inputs):
        tensor = model.main.tensors[int(t)] if t >= 0 else None
        data = None if tensor is None else model.parsed.buffers[tensor.buffer].data
        if data is not None and len(data) and tensor.type == 0:
            shape = [int(d) for d in tensor.shape]
            arrays[k] = np.frombuffer(bytes(data), np.float32).reshape(shape).astype(np.float64)
    return arrays, op.builtinOptions


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


@pytest.mark.parametrize("change", [_peepholes, _projection, _rnn])
def test_fused_ops_of_every_option_equal_their_semantics(lite, tmp_path, change):
    """A fused LSTM with peepholes and a cell clip that bites, one with a projection and a
    projection clip that bites, and a fused RNN, recorded: every
    gate and state equal TensorFlow Lite's semantics of the op computed in float64 from the
    file's weights (an LSTM's preactivation without its peephole term, as TensorFlow's
    LSTMCell's is recorded)."""
    import pandas as pd

    path = tmp_path / "changed.tflite"
    path.write_bytes(_changed(lite, change))
    x = np.random.RandomState(6).uniform(-2, 2, (3, T, D))
    np.save(tmp_path / "x.npy", x.astype(np.float32))
    done = run_cli(
        "record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(tmp_path / "run")
    )
    assert done.returncode == 0, done.stderr
    gates = pd.read_parquet(tmp_path / "run" / "gates").sort_values(
        ["example", "step", "gate", "unit"]
    )
    states = pd.read_parquet(tmp_path / "run" / "states").sort_values(
        ["example", "step", "state", "unit"]
    )
    w, options = _lite_weights(path)
    x = x.astype(np.float32).astype(np.float64)
    h, c = np.zeros((3, P if change is _projection else H)), np.zeros((3, H))
    pre, act, kept = {}, {}, {"c": [], "h": []}
    for t in range(T):
        if change is _rnn:
            pre["h"] = x[:, t] @ w[1].T + h @ w[2].T + w[3]
            act["h"] = h = np.tanh(pre["h"])
        else:  # inputs 1-4 input weights, 5-8 recurrent, 9-11 peepholes, 12-15 biases: i, f, c, o
            z = {g: x[:, t] @ w[1 + k].T + h @ w[5 + k].T + w[12 + k] for k, g in enumerate("ifjo")}
            peep = [w.get(k, np.zeros(H)) for k in (9, 10, 11)]
            i, f = _sigmoid(z["i"] + peep[0] * c), _sigmoid(z["f"] + peep[1] * c)
            j = np.tanh(z["j"])
            c = f * c + i * j
            c = np.clip(c, -options.cellClip, options.cellClip) if options.cellClip else c
            o = _sigmoid(z["o"] + peep[2] * c)
            h = o * np.tanh(c)
            if 16 in w:
                h = np.clip(h @ w[16].T, -options.projClip, options.projClip)
            pre, act = z, {"i": i, "f": f, "j": j, "o": o}
        kept["h"].append(h), kept["c"].append(c)
        for g in pre:
            rows = gates[(gates["step"] == t) & (gates["gate"] == g)]
            assert np.abs(rows["preactivation"].to_numpy().reshape(3, H) - pre[g]).max() < 1e-5
            assert np.abs(rows["activation"].to_numpy().reshape(3, H) - act[g]).max() < 1e-5
    if change is _peepholes:
        assert np.isclose(np.abs(np.stack(kept["c"])).max(), 0.3)  # the clip bit
    if change is _projection:
        assert np.isclose(np.abs(np.stack(kept["h"])).max(), 0.1)  # the clip bit
    for name in set(states["state"]):
        got = states[states["state"] == name]["value"].to_numpy().reshape(3, T, -1)
        assert np.abs(got - np.stack(kept[name], axis=1)).max() < 1e-5


def _huge(model, fb):
    model.subgraphs[0].tensors[0].shape = np.array([1 << 20, 1 << 20, 1 << 10], np.int32)


def _negative(model, fb):
    model.subgraphs[0].tensors[0].shape = np.array([1, -5, 3], np.int32)


def _custom(model, fb):
    model.operatorCodes[0].builtinCode = fb.BuiltinOperator.CUSTOM
    model.operatorCodes[0].deprecatedBuiltinCode = fb.BuiltinOperator.CUSTOM
    model.operatorCodes[0].customCode = b"Evil"


def _short_buffer(model, fb):
    k = model.subgraphs[0].operators[0].inputs[2]  # the input-to-forget weights
    buffer = model.buffers[model.subgraphs[0].tensors[k].buffer]
    buffer.data = buffer.data[:10]


def _no_buffer(model, fb):
    model.subgraphs[0].tensors[2].buffer = 10**6


def _no_opcode(model, fb):
    model.subgraphs[0].operators[0].opcodeIndex = 7


def _no_body(model, fb):
    """The loop file's WHILE op names a body subgraph the file does not hold."""
    model.subgraphs[0].operators[1].builtinOptions.bodySubgraphIndex = 7


def _no_tensor(model, fb):
    op = model.subgraphs[0].operators[0]
    op.inputs = np.array([*op.inputs[:2], 999, *op.inputs[3:]], np.int32)


@pytest.mark.parametrize(
    "change, says",
    [
        (_huge, "more than the memory budget"),
        (_negative, "with a negative dimension"),
        (_custom, "the custom op Evil, whose code the file does not hold"),
        (_short_buffer, "but its buffer holds 10"),
        (_no_buffer, "names buffer 1000000"),
        (_no_opcode, "op 0 of subgraph 0 names opcode 7, of 1"),
        (_no_tensor, "names a tensor outside the"),
        (_no_body, "op 1 of subgraph 0, a WHILE, names subgraphs [1, 7], of 3"),
    ],
)
def test_a_hostile_flatbuffer_is_refused_before_anything_is_allocated(lite, tmp_path, change, says):
    path = tmp_path / "hostile.tflite"
    path.write_bytes(_changed(lite, change, "loop" if change is _no_body else "fused"))
    shown = _one_line(run_cli("inspect", str(path)))
    assert says in shown and "nothing was loaded" in shown


def _state_with_data(model, fb):
    """The fused LSTM's output state made a variable that holds data (the interpreter refuses it)."""
    _projection(model, fb)
    sub = model.subgraphs[0]
    state = int(sub.operators[0].inputs[18])
    buffer = fb.BufferT()
    buffer.data = np.zeros(4 * P, np.uint8)
    model.buffers.append(buffer)
    sub.tensors[state].buffer = len(model.buffers) - 1


def test_what_the_interpreter_refuses_is_one_line(lite, tmp_path):
    path = tmp_path / "odd.tflite"
    path.write_bytes(_changed(lite, _state_with_data))
    np.save(tmp_path / "x.npy", np.zeros((2, T, D), np.float32))
    out = tmp_path / "out"
    shown = _one_line(
        run_cli("record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out))
    )
    assert "odd.tflite: the TensorFlow Lite interpreter (ai-edge-litert " in shown
    assert ") refuses it: " in shown and not out.exists()


def test_damaged_files_are_one_line(lite, tmp_path):
    data = (lite / "fused.tflite").read_bytes()
    for name, content, says in (
        ("truncated", data[: len(data) // 3], "damaged"),
        (
            "noise",
            data[:8] + bytes(np.random.RandomState(0).randint(0, 256, 400, np.uint8)),
            "damaged",
        ),
        ("text", b"not a model at all", "no TFL3 identifier"),
    ):
        path = tmp_path / f"{name}.tflite"
        path.write_bytes(content)
        assert says in _one_line(run_cli("inspect", str(path))), name


def test_a_fifo_is_refused_never_opened_and_a_link_the_user_named_is_followed(lite, tmp_path):
    fifo = tmp_path / "pipe.tflite"
    os.mkfifo(fifo)
    done: dict = {}
    worker = threading.Thread(target=lambda: done.update(r=run_cli("inspect", str(fifo))))
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "reading a FIFO blocked"
    assert "cannot read it as a TensorFlow Lite file" in _one_line(done["r"])
    link = tmp_path / "link.tflite"
    link.symlink_to(lite / "fused.tflite")
    shown = run_cli("inspect", str(link))
    assert shown.returncode == 0 and "UnidirectionalSequenceLSTM" in shown.stdout


@pytest.mark.parametrize("name", ["fused", "loop"])
@settings(max_examples=40, derandomize=True, deadline=None)
@given(data=st.data())
def test_any_damage_is_the_model_or_one_clean_error(lite, name, data):
    """Bytes of the fused file flipped, cut or inserted anywhere: the checks pass a model,
    whose cells are then found or refused in one line, or refuse it in one line; nothing else
    escapes, nothing hangs."""
    from pathlib import Path

    from recorders.errors import GatetraceError, ModelFormatError
    from tracer.find.lite import find_ops
    from tracer.load.tflite import LiteModel
    from tracer.load.tflite_check import checked

    original = (lite / f"{name}.tflite").read_bytes()
    content = bytearray(original)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(content) - 1))
        how = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if how == "flip":
            content[at] ^= data.draw(st.integers(1, 255))
        elif how == "cut":
            del content[at:]
            if not content:
                content = bytearray(b"\x00")
        else:
            content[at:at] = bytes(data.draw(st.integers(0, 255)) for _ in range(4))
    path = Path(lite / "damaged.tflite")
    path.write_bytes(bytes(content))
    try:
        data, model = checked(path, "damaged.tflite", memory=1 << 26)
    except ModelFormatError as err:
        assert "\n" not in str(err)
        return
    lite_model = LiteModel(data, model, "damaged.tflite")
    lite_model.describe()  # what passed the checks can be described, its cells found or refused
    try:
        find_ops(lite_model)
    except GatetraceError as err:
        assert "\n" not in str(err)


def _counted_from_one(data: bytes) -> bytes:
    """A converted file whose WHILE loop counts from 1 to T (its counters' start and limit,
    constants, raised by one): as many iterations as steps, which the file's checks accept,
    but the last reads a step past the sequence, which only running it shows."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as fb

    model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(data, 0))
    main = model.subgraphs[0]
    (loop,) = [op for op in main.operators if isinstance(op.builtinOptions, fb.WhileOptionsT)]
    cond = model.subgraphs[loop.builtinOptions.condSubgraphIndex]

    def set_ints(subgraph, tensors, value):
        for i in tensors:
            t = subgraph.tensors[i]
            buffer = model.buffers[t.buffer]
            if t.type == fb.TensorType.INT32 and buffer.data is not None and len(buffer.data) == 4:
                buffer.data = np.frombuffer(np.int32(value).tobytes(), np.uint8)

    set_ints(main, loop.inputs, 1)
    set_ints(cond, [i for op in cond.operators for i in op.inputs], T + 1)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def test_inspect_calls_recordable_only_what_record_records(converted, tmp_path):
    """`inspect` runs what `record` runs on one sequence before it lists a file's cells: a loop
    its interpreter cannot run to the end is refused by both in the same line (before:
    listed as recordable, then refused by `record` alone); nothing is written."""
    path, _ = converted["keras3-lstm"]
    bad = tmp_path / "more.tflite"
    bad.write_bytes(_counted_from_one(path.read_bytes()))
    shown = _one_line(run_cli("inspect", str(bad)))
    assert "TensorFlow Lite interpreter (ai-edge-litert " in shown and ") refuses it" in shown
    np.save(tmp_path / "x.npy", np.zeros((2, T, D), np.float32))
    out = tmp_path / "out"
    refused = _one_line(
        run_cli("record", str(bad), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out))
    )
    assert refused == shown and not out.exists()
    listed = run_cli("inspect", str(path))  # the file as converted is listed
    assert listed.returncode == 0 and "1 recurrent op" in listed.stdout, listed.stderr


# Hostile files of issue round 7, each made by editing a converted file through the schema
def _while_of(model, fb):
    (k,) = [
        k
        for k, op in enumerate(model.subgraphs[0].operators)
        if isinstance(op.builtinOptions, fb.WhileOptionsT)
    ]
    return model.subgraphs[0].operators[k]


def _body_calls_itself(model, fb):
    """The loop's body holds a WHILE whose body is that body (a segmentation fault before)."""
    import copy

    loop = _while_of(model, fb)
    body = model.subgraphs[loop.builtinOptions.bodySubgraphIndex]
    again = copy.deepcopy(loop)
    again.inputs, again.outputs = np.array(body.inputs), np.array(body.outputs)
    body.operators.append(again)


def _cond_runs_the_loop(model, fb):
    """The loop's cond runs the loop again before it answers."""
    import copy

    loop = _while_of(model, fb)
    cond = model.subgraphs[loop.builtinOptions.condSubgraphIndex]
    again = copy.deepcopy(loop)
    again.inputs = np.array(cond.inputs)
    again.outputs = np.array([])
    cond.operators.insert(0, again)


def _cond_always_holds(model, fb):
    """The cond's comparisons recoded as NOT_EQUAL with a limit the counters never reach (the
    loop ran for ever, deaf to --timeout and Ctrl-C, before)."""
    loop = _while_of(model, fb)
    cond = model.subgraphs[loop.builtinOptions.condSubgraphIndex]
    code = fb.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = fb.BuiltinOperator.NOT_EQUAL
    model.operatorCodes.append(code)
    less = cond.operators[0].opcodeIndex
    for op in cond.operators:
        if op.opcodeIndex == less:
            op.opcodeIndex = len(model.operatorCodes) - 1
    for i in cond.operators[0].inputs:
        buffer = model.buffers[cond.tensors[i].buffer]
        if buffer.data is not None and len(buffer.data) == 4:
            buffer.data = np.frombuffer(np.int32(-1).tobytes(), np.uint8)


def _flex_recoded(code_number: int, deprecated: int):
    def change(model, fb):
        """An op of an unknown code (a Flex op recoded) in front of the fused LSTM."""
        code = fb.OperatorCodeT()
        code.builtinCode, code.deprecatedBuiltinCode = code_number, deprecated
        code.customCode = b"FlexTensorListReserve"
        model.operatorCodes.append(code)
        op = fb.OperatorT()
        op.opcodeIndex = len(model.operatorCodes) - 1
        first = model.subgraphs[0].operators[0]
        op.inputs, op.outputs = np.array(first.inputs[:1]), np.array([], np.int32)
        model.subgraphs[0].operators.insert(0, op)

    return change


def _fill_32_gib(model, fb):
    """A FILL of constant dimensions [8, 1024, 1024, 1024] float32: 32 GiB when it runs."""
    sub = model.subgraphs[0]
    code = fb.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = fb.BuiltinOperator.FILL
    model.operatorCodes.append(code)
    rng = np.random.RandomState(0)
    dims = fb.BufferT()
    dims.data = np.frombuffer(np.array([8, 1024, 1024, 1024], np.int32).tobytes(), np.uint8)
    model.buffers.append(dims)
    shape = fb.TensorT()
    shape.shape, shape.type, shape.buffer = (
        np.array([4], np.int32),
        fb.TensorType.INT32,
        len(model.buffers) - 1,
    )
    shape.name = b"dims"
    sub.tensors.append(shape)
    value = _added(model, [], rng)
    out = fb.TensorT()
    out.shape, out.type, out.buffer, out.name = (
        np.array([1], np.int32),
        fb.TensorType.FLOAT32,
        0,
        b"filled",
    )
    sub.tensors.append(out)
    op = fb.OperatorT()
    op.opcodeIndex = len(model.operatorCodes) - 1
    op.inputs = np.array([len(sub.tensors) - 2 - 1, value], np.int32)
    op.outputs = np.array([len(sub.tensors) - 1], np.int32)
    sub.operators.insert(0, op)


@pytest.mark.parametrize(
    "name, change, says",
    [
        ("loop", _body_calls_itself, "its subgraphs call each other in a cycle (2 -> 2)"),
        ("loop", _cond_runs_the_loop, "its subgraphs call each other in a cycle (1 -> 1)"),
        (
            "loop",
            _cond_always_holds,
            "gatetrace cannot read from the file how many iterations the WHILE loop of op 1 of "
            "subgraph 0 runs: its cond answers with a NOT_EQUAL",
        ),
        ("fused", _flex_recoded(9999, 127), "operator code 9999, which is no builtin operator"),
        ("fused", _flex_recoded(32, 127), "operator code 127, which is no builtin operator"),
        (
            "fused",
            _fill_32_gib,
            "a FILL, makes a tensor of [8, 1024, 1024, 1024] (34,359,738,368 bytes)",
        ),
    ],
)
def test_a_hostile_file_is_refused_in_one_line_in_seconds(lite, tmp_path, name, change, says):
    """Each refused by `inspect` and by `record` in one line, exit 2, before the interpreter
    is built (a crash, a loop without end or an internal error before), nothing left in --out."""
    import time

    path = tmp_path / "hostile.tflite"
    path.write_bytes(_changed(lite, change, name))
    np.save(tmp_path / "x.npy", np.zeros((2, T, D), np.float32))
    started = time.monotonic()
    shown = _one_line(run_cli("inspect", str(path)))
    out = tmp_path / "out"
    refused = _one_line(
        run_cli("record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out))
    )
    assert time.monotonic() - started < 10
    for line in (shown, refused):  # (the budget follows the memory free at the time)
        assert says in line and "nothing was loaded" in line, line
    assert not out.exists()


def test_a_sparse_file_of_gigabytes_is_refused_before_it_is_read(lite, tmp_path):
    """Its size is looked at before a byte is read (before: 2 GiB read, then refused)."""
    import resource

    path = tmp_path / "sparse.tflite"
    path.write_bytes((lite / "fused.tflite").read_bytes())
    os.truncate(path, 4 << 30)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    shown = _one_line(run_cli("inspect", str(path)))
    assert "holds 4,294,967,296 bytes, more than the" in shown
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 256 << 10  # KiB


def test_an_input_is_fed_by_its_signature_name_or_its_tensor_name(converted, tmp_path):
    """`seq` (the signature's) and `serving_default_seq:0` (the tensor's, as the interpreter's
    get_input_details() lists it) feed the same input (before: the tensor's name was refused);
    both at once is one line."""
    import pandas as pd

    path, _ = converted["tf-keras-lstm"]
    np.save(
        tmp_path / "x.npy", np.random.RandomState(1).uniform(-1, 1, (3, T, D)).astype(np.float32)
    )
    tables = []
    for k, name in enumerate(("seq", "serving_default_seq", "serving_default_seq:0")):
        out = tmp_path / f"run{k}"
        done = run_cli(
            "record", str(path), "--feed", f"{name}={tmp_path / 'x.npy'}", "--out", str(out)
        )
        assert done.returncode == 0, done.stderr
        tables.append(pd.read_parquet(out / "gates"))
    assert len(tables[0]) and all(t.equals(tables[0]) for t in tables[1:])
    twice = (
        "--feed",
        f"seq={tmp_path / 'x.npy'}",
        "--feed",
        f"serving_default_seq={tmp_path / 'x.npy'}",
    )
    refused = _one_line(run_cli("record", str(path), *twice, "--out", str(tmp_path / "no")))
    assert "input seq is fed twice, as seq and serving_default_seq: feed it once" in refused


def _bidirectional_rnn(model, fb):
    """The fused LSTM's op made a BIDIRECTIONAL_SEQUENCE_RNN (as TF1's converters wrote
    `tf.lite.experimental.nn.bidirectional_dynamic_rnn` of RNN cells), forward on the LSTM's
    forget gate's weights and bias, backward on its output gate's, outputs merged."""
    sub = model.subgraphs[0]
    code = model.operatorCodes[0]
    code.builtinCode = code.deprecatedBuiltinCode = fb.BuiltinOperator.BIDIRECTIONAL_SEQUENCE_RNN
    code.version = 1
    op = sub.operators[0]
    x, h = int(op.inputs[0]), int(op.inputs[18])
    sub.tensors[h].isVariable = True
    back = _added(model, [1, H], np.random.RandomState(7))
    sub.tensors[back].buffer, sub.tensors[back].isVariable = 0, True  # (a variable holds no data)
    forward, backward = (
        (int(op.inputs[k]) for k in (2, 6, 13)),
        (int(op.inputs[k]) for k in (4, 8, 15)),
    )
    op.inputs = np.array([x, *forward, h, *backward, back, -1, -1, -1], np.int32)
    sub.tensors[int(op.outputs[0])].shape = np.array([1, T, 2 * H], np.int32)
    options = fb.BidirectionalSequenceRNNOptionsT()
    options.timeMajor, options.mergeOutputs = False, True
    options.fusedActivationFunction = fb.ActivationFunctionType.TANH
    op.builtinOptionsType = fb.BuiltinOptions.BidirectionalSequenceRNNOptions
    op.builtinOptions = options


def test_a_bidirectional_rnn_op_records_as_its_two_halves(lite, tmp_path):
    """Each half equals the RNN's equations in float64 on the file's weights (the backward one
    from the sequence's end), checked against the op's merged outputs; rows by input position."""
    import pandas as pd

    path = tmp_path / "bidirectional.tflite"
    path.write_bytes(_changed(lite, _bidirectional_rnn))
    x = np.random.RandomState(6).uniform(-2, 2, (3, T, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "run"
    done = run_cli("record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out))
    assert done.returncode == 0, done.stderr
    gates = pd.read_parquet(out / "gates").sort_values(["cell", "example", "step", "unit"])
    w, _ = _lite_weights(path)
    cells = sorted(set(gates["cell"]))
    assert [c.rpartition("/")[2] for c in cells] == ["backward", "forward"], cells
    for cell, (W, U, b), order in (
        (cells[1], (w[1], w[2], w[3]), range(T)),
        (cells[0], (w[5], w[6], w[7]), range(T)[::-1]),
    ):
        h, want = np.zeros((3, H)), np.zeros((3, T, H))
        for t in order:
            h = np.tanh(x[:, t].astype(np.float64) @ W.T + h @ U.T + b)
            want[:, t] = h
        rows = gates[gates["cell"] == cell]["activation"].to_numpy().reshape(3, T, H)
        assert np.abs(rows - want).max() < 1e-5, cell


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_a_dynamic_range_loop_records_with_its_weights_dequantised(tmp_path, kind):
    """A Keras 3 LSTM and GRU converted with Optimize.DEFAULT (int8 weights in the loop's
    body): recorded, the cell says `int8 dynamic range`, and W, U per gate are the file's codes
    dequantised: within half a quantisation step (per output channel) of the Keras model's own
    weights, which are no reading of the file (before: no weights, nothing said)."""
    import json

    import pandas as pd

    from tracer._tf import tf

    keras = keras_module("keras3")
    inp = keras.Input((T, 32), batch_size=1, name="seq")
    layer = getattr(keras.layers, kind)(64, return_sequences=True, name="rnn")
    model = keras.Model(inp, layer(inp))
    randomise(model, seed=4)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    path = tmp_path / "dynamic.tflite"
    path.write_bytes(converter.convert())
    np.save(
        tmp_path / "x.npy", np.random.RandomState(3).uniform(-1, 1, (2, T, 32)).astype(np.float32)
    )
    out = tmp_path / "run"
    done = run_cli("record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out))
    assert done.returncode == 0, done.stderr
    (cell,) = json.loads((out / "manifest.json").read_text())["cells"]
    assert cell["numbers"] == "int8 dynamic range"
    weights = pd.read_parquet(out / "weights.parquet")
    kernel, recurrent = (
        np.asarray(w, np.float64) for w in (layer.cell.kernel, layer.cell.recurrent_kernel)
    )
    gates = list(cell["gates"])
    units = 64
    for source, keras_matrix in (("input", kernel), ("recurrent", recurrent)):
        for k, gate in enumerate(gates):
            got = weights[(weights["gate"] == gate) & (weights["source"] == source)]
            got = got.pivot(index="row", columns="unit", values="value").to_numpy()
            want = keras_matrix[:, k * units : (k + 1) * units]
            # per output channel of each matrix: a scale of max |w| / 127, codes within half a step
            step = np.abs(want).max(axis=0) / 127
            assert got.shape == want.shape
            assert (np.abs(got - want) <= step / 2 + 1e-6).all(), (source, gate)
            assert not np.array_equal(got, want.astype(np.float32))  # quantised: not the floats


@pytest.mark.parametrize(
    "name", ["tf-keras-lstm", "keras3-gru", "tf-keras-bidirectional-apart", "tf-keras-gru-declared"]
)
def test_litert_and_tensorflow_s_interpreters_record_the_same(
    converted, tmp_path, monkeypatch, name
):
    """LiteRT's interpreter (the default where `ai-edge-litert` is installed, as the test extra
    installs it) and TensorFlow's (GATETRACE_LITE_RUNTIME=tensorflow) record the same rows of
    a fused op, a loop, a bidirectional op and a loop whose body declares other shapes; each
    recording names the runtime that ran it. A loop's values are what each interpreter
    computed, whose kernels may sum in another order: they agree to float32 rounding (seen: 1
    ulp on a GRU's). The values themselves are checked against Keras' formulas by the tests
    above, under the default runtime."""
    import json

    import pandas as pd

    path, _ = converted[name]
    np.save(tmp_path / "x.npy", np.random.RandomState(2).uniform(-1, 1, (3, T, D)).astype("f4"))
    tables, runtimes = [], []
    for runtime in ("litert", "tensorflow"):
        monkeypatch.setenv("GATETRACE_LITE_RUNTIME", runtime)
        out = tmp_path / runtime
        done = run_cli(
            "record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out)
        )
        assert done.returncode == 0, done.stderr
        tables.append([pd.read_parquet(out / what) for what in ("gates", "states")])
        runtimes.append(json.loads((out / "manifest.json").read_text())["source"]["runtime"])
    assert runtimes[0].startswith("ai-edge-litert ") and runtimes[1].startswith("tensorflow 2.")
    assert len(tables[0][0])
    for a, b in zip(*tables, strict=True):
        numbers = [c for c in a.columns if a[c].dtype == np.float32]
        pd.testing.assert_frame_equal(a.drop(columns=numbers), b.drop(columns=numbers))
        np.testing.assert_allclose(a[numbers], b[numbers], rtol=1e-6, atol=1e-6)


def _in_a_fresh_process(code: str, **env: str) -> subprocess.CompletedProcess:
    import sys

    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


_INSPECTED = """
import sys
{before}
from tracer.cli import main
code = main(["inspect", {path!r}])
print("exit", code, "tensorflow imported:", "tensorflow" in sys.modules)
"""


@pytest.mark.parametrize("name", ["fused", "loop"])
def test_inspect_of_a_tflite_file_runs_it_without_importing_tensorflow(lite, name):
    """`inspect` of a `.tflite` reads, checks and tries the file with LiteRT alone: TensorFlow is
    never imported (it was: about 3 s of every answer, 22 s on a busy machine), and the
    answer names the runtime. A damaged file is refused the same way, in one line."""
    done = _in_a_fresh_process(_INSPECTED.format(before="", path=str(lite / f"{name}.tflite")))
    assert "exit 0 tensorflow imported: False" in done.stdout, done.stderr
    assert "note: run by ai-edge-litert " in done.stdout and "1 recurrent op" in done.stdout
    (lite / "empty.tflite").write_bytes(b"")
    done = _in_a_fresh_process(_INSPECTED.format(before="", path=str(lite / "empty.tflite")))
    assert "exit 2 tensorflow imported: False" in done.stdout
    assert done.stderr.count("\n") == 1 and "not a TensorFlow Lite flatbuffer" in done.stderr


def test_without_litert_tensorflow_s_interpreter_runs_the_file(lite):
    """Where `ai-edge-litert` is not installed (the `lite` extra), TensorFlow's own interpreter
    runs the file; asking for LiteRT there is one line saying how to install it."""
    hidden = "sys.modules['ai_edge_litert'] = None  # as if not installed"
    done = _in_a_fresh_process(_INSPECTED.format(before=hidden, path=str(lite / "fused.tflite")))
    assert "exit 0 tensorflow imported: True" in done.stdout, done.stderr
    assert "note: run by tensorflow 2." in done.stdout
    done = _in_a_fresh_process(
        _INSPECTED.format(before=hidden, path=str(lite / "fused.tflite")),
        GATETRACE_LITE_RUNTIME="litert",
    )
    assert "exit 2" in done.stdout
    said = [line for line in done.stderr.splitlines() if line.startswith("gatetrace: ")]
    assert said == [
        "gatetrace: error: GATETRACE_LITE_RUNTIME=litert, but ai-edge-litert is not installed: "
        f'pip install "{Path(__file__).resolve().parents[1]}[lite]" adds it; or unset '
        "GATETRACE_LITE_RUNTIME to use TensorFlow's"
    ], done.stderr
    done = _in_a_fresh_process(
        _INSPECTED.format(before="", path=str(lite / "fused.tflite")),
        GATETRACE_LITE_RUNTIME="tflite",
    )
    assert "exit 2" in done.stdout and done.stderr == (
        "gatetrace: error: GATETRACE_LITE_RUNTIME='tflite': expected one of litert, tensorflow; "
        "unset it to use LiteRT where it is installed\n"
    )


def _symmetric(model, fb):
    """The hybrid LSTM made to quantise its inputs symmetrically (as converters before TF 2.3
    wrote it: `asymmetric_quantize_inputs` false)."""
    model.subgraphs[0].operators[0].builtinOptions.asymmetricQuantizeInputs = False


@pytest.mark.parametrize("variant", ["asymmetric", "symmetric", "rnn"])
def test_a_dynamic_range_fused_op_records_what_its_hybrid_kernel_computes(lite, tmp_path, variant):
    """A tf-keras LSTM converted with Optimize.DEFAULT is one fused op with int8 matrices that
    quantises its input and its recurrent input a row at a time (before: refused). Recorded as
    the kernel computes (`tracer.values.hybrid`): the states equal, at every step, what
    TensorFlow's own interpreter returns for each sequence run alone (within 1e-6); the gates
    give the states by the LSTM's equations; the preactivations are the quantised products,
    not float products on the dequantised weights (those differ by more than 1e-5); W, U are
    the file's codes times their scale, read here through the schema. Also with the inputs
    quantised symmetrically, and as an RNN op on the same int8 matrices."""
    import json

    import pandas as pd

    from tracer._tf import tf

    path = tmp_path / f"{variant}.tflite"
    if variant == "asymmetric":
        path.write_bytes((lite / "quantised.tflite").read_bytes())
    else:
        path.write_bytes(
            _changed(lite, _symmetric if variant == "symmetric" else _rnn, "quantised")
        )
    x = np.random.RandomState(7).uniform(-1, 1, (40, T, 32)).astype(np.float32)
    x[3] = 0  # a sequence of zeros: every row quantises to zero
    # a row whose value 10 lands 4e-6 above a rounding tie when the span max - min is taken
    # in double, below it as the kernel takes it, in float32 (seen: a code off by one)
    x[5, 2] = np.random.RandomState(0).uniform(-1, 1, (2000, 50, 32)).astype(np.float32)[52, 3]
    # a row whose value -0.04296875 is a tie of v / scale (-7.5) and, with the zero point 8, a
    # tie again (0.5): the kernel rounds before it adds the zero point (code 0, not 1)
    x[6, 1] = 0
    x[6, 1, :3] = (-0.78125, 0.6796875, -0.04296875)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "run"
    done = run_cli("record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out))
    assert done.returncode == 0, done.stderr
    (cell,) = json.loads((out / "manifest.json").read_text())["cells"]
    how = "symmetric" if variant != "asymmetric" else "asymmetric"
    assert cell["numbers"] == f"int8 dynamic range (hybrid kernel, inputs quantised {how} per row)"
    it = tf.lite.Interpreter(model_path=str(path))
    it.allocate_tensors()
    want = []
    for row in x:
        it.reset_all_variables()
        it.set_tensor(it.get_input_details()[0]["index"], row[None])
        it.invoke()
        want.append(it.get_tensor(it.get_output_details()[0]["index"])[0])
    want = np.stack(want)  # [examples, steps, units]
    states = pd.read_parquet(out / "states").sort_values(["state", "example", "step", "unit"])
    h = states[states["state"] == "h"]["value"].to_numpy().reshape(want.shape)
    assert np.abs(h - want).max() <= 1e-6
    gates = pd.read_parquet(out / "gates").sort_values(["gate", "example", "step", "unit"])
    a = {
        g: v["activation"].to_numpy().reshape(want.shape).astype(np.float64)
        for g, v in gates.groupby("gate", observed=True)
    }
    z = {
        g: v["preactivation"].to_numpy().reshape(want.shape).astype(np.float64)
        for g, v in gates.groupby("gate", observed=True)
    }
    h_prev = np.concatenate([np.zeros_like(want[:, :1]), want[:, :-1]], axis=1).astype(np.float64)
    weights = pd.read_parquet(out / "weights.parquet")
    if variant == "rnn":
        np.testing.assert_allclose(a["h"], np.tanh(z["h"]), atol=1e-6)
        np.testing.assert_allclose(a["h"], want, atol=1e-6)
    else:
        c = (
            states[states["state"] == "c"]["value"]
            .to_numpy()
            .reshape(want.shape)
            .astype(np.float64)
        )
        c_prev = np.concatenate([np.zeros_like(c[:, :1]), c[:, :-1]], axis=1)
        np.testing.assert_allclose(
            c, np.clip(a["f"] * c_prev + a["i"] * a["j"], -10, 10), atol=1e-6
        )
        np.testing.assert_allclose(want, a["o"] * np.tanh(c), atol=1e-6)
    # the file's int8 codes and scales, read here through the schema
    from tensorflow.lite.python import schema_py_generated as fb

    model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(path.read_bytes(), 0))
    op = model.subgraphs[0].operators[0]
    numbers = {"rnn": (1, 2, 3)}.get(variant, (2, 6, 13))  # the forget gate's W, U and b
    gate = "h" if variant == "rnn" else "f"
    matrices = []
    for at, role in zip(numbers[:2], ("W", "U"), strict=True):
        t = model.subgraphs[0].tensors[int(op.inputs[at])]
        codes = np.frombuffer(bytes(model.buffers[t.buffer].data), np.int8).reshape(list(t.shape))
        assert t.type == fb.TensorType.INT8
        matrices.append(codes.T.astype(np.float64) * float(t.quantization.scale[0]))
        # the manifest (and inspect) give each matrix's scale
        assert cell["scales"][role if variant == "rnn" else f"{role}_f"] == t.quantization.scale[0]
    bias_t = model.subgraphs[0].tensors[int(op.inputs[numbers[2]])]
    bias = np.frombuffer(bytes(model.buffers[bias_t.buffer].data), np.float32).astype(np.float64)
    for source, matrix in zip(("input", "recurrent"), matrices, strict=True):
        got = weights[(weights["gate"] == gate) & (weights["source"] == source)]
        got = got.pivot(index="row", columns="unit", values="value").to_numpy()
        np.testing.assert_allclose(got, matrix, rtol=1e-7, atol=0)
    floats = x.astype(np.float64) @ matrices[0] + h_prev @ matrices[1] + bias
    apart = np.abs(z[gate] - floats)
    assert apart.max() > 1e-5 and apart.max() < 0.05  # quantised products, near the float ones
    assert np.abs(z[gate][3, 0] - bias).max() == 0  # zeros in, zeros out: the bias alone


def test_a_hybrid_lstm_with_peepholes_is_one_line(lite, tmp_path):
    """What the hybrid replay does not cover (peepholes, a projection) is refused naming it."""
    path = tmp_path / "peep.tflite"
    path.write_bytes(_changed(lite, _peepholes, "quantised"))
    shown = _one_line(run_cli("inspect", str(path)))
    assert (
        "a hybrid (int8 weights) LSTM with peepholes, which gatetrace does not replay yet" in shown
    )


def _hybrid_scale(value: float):
    def change(model, fb):
        """The hybrid LSTM's input-to-forget matrix (op input 2) given the scale `value`."""
        op = model.subgraphs[0].operators[0]
        held = model.subgraphs[0].tensors[int(op.inputs[2])].quantization
        held.scale = np.array([value], np.float32)

    return change


@pytest.mark.parametrize("value, shown", [(float("nan"), "nan"), (0.0, "0"), (-0.5, "-0.5")])
def test_a_hybrid_matrix_whose_scale_is_no_positive_number_is_one_line(
    lite, tmp_path, value, shown
):
    """A matrix's value is scale x code: a scale that is NaN, 0 or negative is refused by
    `inspect` and `record` in one line saying what the file holds (before: NaN, a replay said to
    differ "by up to 0"; 0 and -0.5, recorded), and nothing is written."""
    path = tmp_path / "scale.tflite"
    path.write_bytes(_changed(lite, _hybrid_scale(value), "quantised"))
    says = f") is {shown}; a quantisation scale is a positive finite number"
    inspected = _one_line(run_cli("inspect", str(path)))
    assert "the scale of its input weights (" in inspected and says in inspected, inspected
    np.save(tmp_path / "x.npy", np.ones((1, T, 32), np.float32))
    out = tmp_path / "out"
    refused = _one_line(
        run_cli("record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out))
    )
    assert says in refused and not out.exists()


def _recoded(kind: str):
    def change(model, fb):
        """The fused LSTM op's code made `kind` (its 24 inputs and 1 output left as they are)."""
        for code in model.operatorCodes:
            if code.builtinCode == fb.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM:
                code.builtinCode = code.deprecatedBuiltinCode = getattr(fb.BuiltinOperator, kind)

    return change


@pytest.mark.parametrize(
    "kind, takes",
    [
        ("BIDIRECTIONAL_SEQUENCE_LSTM", "takes 48 inputs and writes 2 outputs (one a half)"),
        ("BIDIRECTIONAL_SEQUENCE_RNN", "takes 12 inputs and writes 2 outputs (one a half)"),
        ("UNIDIRECTIONAL_SEQUENCE_RNN", "takes 5 inputs and writes 1 output,"),
    ],
)
def test_an_lstm_op_recoded_as_another_kind_is_one_line(lite, tmp_path, kind, takes):
    """An op of the inputs and outputs of another kind than its code says (as TensorFlow Lite's
    kernel of that kind checks them) is refused by `inspect` and `record` in one line naming
    both (before: an IndexError for a bidirectional code), and nothing is written."""
    path = tmp_path / "recoded.tflite"
    path.write_bytes(_changed(lite, _recoded(kind)))
    says = f"op 0 is a {kind} of 24 inputs and 1 output; TensorFlow Lite's {kind} {takes}"
    assert says in _one_line(run_cli("inspect", str(path)))
    np.save(tmp_path / "x.npy", np.zeros((1, T, D), np.float32))
    out = tmp_path / "out"
    refused = _one_line(
        run_cli("record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out))
    )
    assert says in refused and not out.exists()


def _repeated_offsets(tensors: int, subgraphs: int) -> bytes:
    """A flatbuffer whose subgraphs vector reaches one subgraph `subgraphs` times, whose tensors
    vector reaches one tensor `tensors` times: `tensors` x `subgraphs` tables to parse in a
    file of some 4 x (`tensors` + `subgraphs`) bytes."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as fb

    b = flatbuffers.Builder(1024)
    name = b.CreateString("t")
    fb.TensorStartShapeVector(b, 2)
    b.PrependInt32(3)
    b.PrependInt32(1)
    shape = b.EndVector()
    fb.TensorStart(b)
    fb.TensorAddShape(b, shape)
    fb.TensorAddName(b, name)
    tensor = fb.TensorEnd(b)
    fb.SubGraphStartTensorsVector(b, tensors)
    for _ in range(tensors):
        b.PrependUOffsetTRelative(tensor)
    listed = b.EndVector()
    fb.SubGraphStart(b)
    fb.SubGraphAddTensors(b, listed)
    subgraph = fb.SubGraphEnd(b)
    fb.ModelStartSubgraphsVector(b, subgraphs)
    for _ in range(subgraphs):
        b.PrependUOffsetTRelative(subgraph)
    listed = b.EndVector()
    fb.ModelStart(b)
    fb.ModelAddVersion(b, 3)
    fb.ModelAddSubgraphs(b, listed)
    b.Finish(fb.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def test_a_flatbuffer_whose_offsets_repeat_is_refused_before_it_is_parsed(tmp_path):
    """Vectors reaching the same table again and again are refused by `inspect` and by
    `record` in one line, before the object API parses them (before: parsed in time and memory
    of the square of the file's size, then said to hold no recurrent op)."""
    path = tmp_path / "repeated.tflite"
    path.write_bytes(_repeated_offsets(100, 100))
    says = "its flatbuffer's offsets reach the same bytes again and again"
    assert says in _one_line(run_cli("inspect", str(path)))
    np.save(tmp_path / "x.npy", np.zeros((1, T, D), np.float32))
    out = tmp_path / "out"
    refused = _one_line(
        run_cli("record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out))
    )
    assert says in refused and "nothing was loaded" in refused and not out.exists()


@pytest.mark.parametrize(
    "value, says",
    [
        (1e38, "has the quantisation scale 1e+38, by which its int8 codes stand for more"),
        (1e-45, "has the quantisation scale 1.4013e-45, a denormal float32"),
    ],
)
def test_a_hybrid_matrix_scale_past_float32_is_refused_by_the_check(lite, tmp_path, value, says):
    """`inspect` and `weights` refuse a dynamic-range matrix whose scale makes its values
    infinite or is a denormal in one line naming the tensor, printing no warning and writing
    nothing (before: numpy's overflow warning, and infinite weights written)."""
    path = tmp_path / "scale.tflite"
    path.write_bytes(_changed(lite, _hybrid_scale(value), "quantised"))
    out = tmp_path / "w.parquet"
    for done in (run_cli("inspect", str(path)), run_cli("weights", str(path), "--out", str(out))):
        line = _one_line(done)
        assert says in line and "of subgraph 0" in line and "nothing was loaded" in line, line
    assert not out.exists()


def test_a_nan_fed_to_a_float_fused_lstm_is_said_where_it_is(lite, tmp_path):
    """A fused LSTM fed a NaN (its kernel clips its cell state, taking the NaN to the clip,
    where the cell's equations keep a NaN) is one line saying which example and step hold
    it, and nothing is written (before: "a modified cell?")."""
    x = np.zeros((3, T, D), np.float32)
    x[1, 2, 0] = np.nan
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    line = _one_line(
        run_cli("record", str(lite / "fused.tflite"), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out))
    )  # fmt: skip
    assert ": its input holds nan at example 1, step 2 (1 value NaN or infinite)" in line
    assert "modified cell" not in line and not out.exists()


def _carries_int8(n: int):
    def change(model, fb):
        """The loop file's WHILE made to carry an int8 [n] its body passes on unchanged, its
        cond's limit made n: n iterations, within the rows of what it carries."""
        main, cond, body = model.subgraphs
        buffer = fb.BufferT()
        buffer.data = np.zeros(n, np.uint8)
        model.buffers.append(buffer)
        for subgraph, data in ((main, len(model.buffers) - 1), (main, 0), (cond, 0), (body, 0)):
            t = fb.TensorT()
            t.shape, t.type, t.buffer = np.array([n], np.int32), fb.TensorType.INT8, data
            t.name = f"carried_{len(subgraph.tensors)}".encode()
            subgraph.tensors.append(t)
        loop = _while_of(model, fb)
        loop.inputs = np.append(loop.inputs, len(main.tensors) - 2).astype(np.int32)
        loop.outputs = np.append(loop.outputs, len(main.tensors) - 1).astype(np.int32)
        cond.inputs = np.append(cond.inputs, len(cond.tensors) - 1).astype(np.int32)
        body.inputs = np.append(body.inputs, len(body.tensors) - 1).astype(np.int32)
        body.outputs = np.append(body.outputs, len(body.tensors) - 1).astype(np.int32)
        for op in cond.operators:
            for i in op.inputs:
                held = model.buffers[cond.tensors[i].buffer]
                if held.data is not None and len(held.data) == 4:
                    held.data = np.frombuffer(np.int32(n).tobytes(), np.uint8)

    return change


def _range_of(limit: int, kind: str):
    def change(model, fb):
        """A RANGE of `kind` from 0 to `limit` by 1, its inputs constants, in front of the LSTM."""
        sub = model.subgraphs[0]
        code = fb.OperatorCodeT()
        code.builtinCode = code.deprecatedBuiltinCode = fb.BuiltinOperator.RANGE
        model.operatorCodes.append(code)
        for value in (0, limit, 1, None):
            t = fb.TensorT()
            t.type, t.buffer, t.name = getattr(fb.TensorType, kind), 0, f"r{value}".encode()
            t.shape = np.array([] if value is not None else [1], np.int32)
            if value is not None:
                buffer = fb.BufferT()
                buffer.data = np.frombuffer(np.array(value, kind.lower()).tobytes(), np.uint8)
                model.buffers.append(buffer)
                t.buffer = len(model.buffers) - 1
            sub.tensors.append(t)
        op = fb.OperatorT()
        op.opcodeIndex = len(model.operatorCodes) - 1
        last = len(sub.tensors) - 1
        op.inputs, op.outputs = (
            np.array([last - 3, last - 2, last - 1], np.int32),
            np.array([last], np.int32),
        )
        sub.operators.insert(0, op)

    return change


def _fill_computed(model, fb):
    """A FILL whose dimensions a MUL computes from constants: [4096, 4096] x 2."""
    sub = model.subgraphs[0]
    _fill_32_gib(model, fb)
    fill = sub.operators[0]
    dims = sub.tensors[int(fill.inputs[0])]
    dims.shape = np.array([2], np.int32)
    model.buffers[dims.buffer].data = np.frombuffer(
        np.array([4096, 4096], np.int32).tobytes(), np.uint8
    )
    two = fb.BufferT()
    two.data = np.frombuffer(np.array([2], np.int32).tobytes(), np.uint8)
    model.buffers.append(two)
    for shape, buffer in (([1], len(model.buffers) - 1), ([2], 0)):
        t = fb.TensorT()
        t.shape, t.type, t.buffer, t.name = (
            np.array(shape, np.int32),
            fb.TensorType.INT32,
            buffer,
            b"m",
        )
        sub.tensors.append(t)
    code = fb.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = fb.BuiltinOperator.MUL
    model.operatorCodes.append(code)
    op = fb.OperatorT()
    op.opcodeIndex = len(model.operatorCodes) - 1
    op.inputs = np.array([int(fill.inputs[0]), len(sub.tensors) - 2], np.int32)
    op.outputs = np.array([len(sub.tensors) - 1], np.int32)
    fill.inputs = np.array([len(sub.tensors) - 1, int(fill.inputs[1])], np.int32)
    sub.operators.insert(0, op)


def _bounded_by_a_made_int8(n: int):
    def change(model, fb):
        """The loop file's WHILE bounded by the rows of an int8 tensor it carries, which a FILL
        makes [n] when it runs (declared [1], its rows open): `SHAPE -> STRIDED_SLICE` of it, a
        loop variable the body passes on unchanged, the cond's limit."""
        from tests.test_tflite_converters import _carry, _counter_and_limit, _loops, _op, _tensor

        main = model.subgraphs[0]
        ((loop, cond, body),) = _loops(model, fb)
        dims = _tensor(model, fb, main, "dims", data=np.array([n], np.int32))
        zero = _tensor(model, fb, main, "zero", data=np.array(0, np.int32).reshape(()))
        main.tensors[zero].type = fb.TensorType.INT8
        model.buffers[main.tensors[zero].buffer].data = np.zeros(1, np.uint8)
        made, shape, length = (
            _tensor(model, fb, main, name, data=np.zeros(1, np.int32))
            for name in ("made", "shape", "length")
        )
        main.tensors[made].type, main.tensors[made].shapeSignature = (
            fb.TensorType.INT8,
            np.array([-1], np.int32),
        )
        main.tensors[length].shape = np.array([], np.int32)
        for t in (made, shape, length):
            main.tensors[t].buffer = 0  # (computed: no data)
        begin, end, strides = (
            _tensor(model, fb, main, f"slice_{k}", data=np.array([v], np.int32))
            for k, v in enumerate((0, 1, 1))
        )
        options, out_type = fb.StridedSliceOptionsT(), fb.ShapeOptionsT()
        options.shrinkAxisMask, out_type.outType = 1, fb.TensorType.INT32
        main.operators[0:0] = [
            _op(model, fb, main, "FILL", [dims, zero], [made]),
            _op(model, fb, main, "SHAPE", [made], [shape], out_type, fb.BuiltinOptions.ShapeOptions),
            _op(model, fb, main, "STRIDED_SLICE", [shape, begin, end, strides], [length], options,
                fb.BuiltinOptions.StridedSliceOptions),
        ]  # fmt: skip
        _carry(model, fb, (loop, cond, body), made)
        limit, _ = _carry(model, fb, (loop, cond, body), length)
        constant = int(_counter_and_limit(model, fb, cond)[0].inputs[1])
        for o in cond.operators:
            if len(o.inputs) == 2 and int(o.inputs[1]) == constant:
                o.inputs = np.array([o.inputs[0], limit], np.int32)

    return change


@pytest.mark.parametrize(
    "name, change, says",
    [
        (
            "loop",
            _bounded_by_a_made_int8(100_000),
            "the WHILE loop of op 4 of subgraph 0 runs 100,000 iterations, each copying the 100,",
        ),
        (
            "loop",
            _carries_int8(10_000),
            "the WHILE loop of op 1 of subgraph 0 runs 10,000 iterations, each copying the 10,",
        ),
        (
            "fused",
            _range_of(2**31 - 1, "INT32"),
            "a RANGE, makes a tensor of [2147483647] (8,589,934,588 bytes)",
        ),
        ("fused", _range_of(2**40, "INT64"), "a RANGE, makes a tensor of [1099511627776]"),
        (
            "fused",
            _range_of(2**30, "FLOAT32"),
            "a RANGE, makes a tensor of [1073741824] (4,294,967,296 bytes)",
        ),
        ("fused", _fill_computed, "a FILL, makes a tensor of [8192, 8192] (268,435,456 bytes)"),
    ],
)
def test_what_a_file_makes_when_it_runs_is_checked_against_the_budget(
    lite, tmp_path, name, change, says
):
    """A loop whose iterations copy what it carries past the budget (n iterations of an int8
    [n] it carries: n^2 bytes; bounded by a constant, or by the rows of an int8 a FILL makes
    when it runs), a RANGE and a FILL of computed dimensions larger than the memory budget
    are one line before the interpreter is built (before: accepted, then run)."""
    from recorders.errors import ModelFormatError
    from tracer.load.tflite_check import checked

    path = tmp_path / "made.tflite"
    path.write_bytes(_changed(lite, change, name))
    with pytest.raises(ModelFormatError) as refused:
        checked(path, "made.tflite", memory=1 << 20)
    line = str(refused.value)
    assert says in line and "nothing was loaded" in line and "\n" not in line, line
    assert checked(lite / f"{name}.tflite", "as converted", memory=1 << 20)  # the file as converted


def _concatenated(links: int, between: str = "", fan: bool = False):
    def change(model, fb):
        """`links` CONCATENATIONs in front of the fused LSTM, each of the tensor before it with
        itself from a float32 constant [1024] on (an op `between` after each), or each of the
        constant with itself (`fan`), each declared [1], the last one an output of the model."""
        from tests.test_tflite_converters import _op, _tensor

        main = model.subgraphs[0]
        constant = _tensor(model, fb, main, "c", data=np.zeros(1024, np.int32))
        main.tensors[constant].type = fb.TensorType.FLOAT32
        ops, last = [], constant
        for n in range(links):
            out = _tensor(model, fb, main, f"doubled{n}", like=main.tensors[constant])
            main.tensors[out].shape = np.array([1], np.int32)
            two = [constant] * 2 if fan else [last] * 2
            options, kind = fb.ConcatenationOptionsT(), fb.BuiltinOptions.ConcatenationOptions
            ops.append(_op(model, fb, main, "CONCATENATION", two, [out], options, kind))
            last = out
            if between:
                out = _tensor(model, fb, main, f"{between}{n}", like=main.tensors[out])
                ops.append(_op(model, fb, main, between, [last], [out]))
                last = out
        main.operators[0:0] = ops
        main.outputs = np.append(main.outputs, last).astype(np.int32)

    return change


def _squared(n: int):
    def change(model, fb):
        """An ADD of float32 constants [n, 1] and [1, n] in front of the fused LSTM, declared
        [1], an output of the model (it broadcasts to [n, n])."""
        from tests.test_tflite_converters import _op, _tensor

        main = model.subgraphs[0]
        a, b = (
            _tensor(model, fb, main, name, data=np.zeros(shape, np.int32))
            for name, shape in (("column", (n, 1)), ("row", (1, n)))
        )
        out = _tensor(model, fb, main, "sum", like=main.tensors[a])
        main.tensors[out].shape = np.array([1], np.int32)
        for t in (a, b, out):
            main.tensors[t].type = fb.TensorType.FLOAT32
        main.operators.insert(0, _op(model, fb, main, "ADD", [a, b], [out]))
        main.outputs = np.append(main.outputs, out).astype(np.int32)

    return change


def _grown(copies: int = 0, added: int = 0):
    def change(model, fb):
        """The loop file's WHILE made to carry a float32 constant [2, 4] of the main graph,
        which its body gives back as `copies` copies of itself (a CONCATENATION), or with
        `added` rows of a constant after it, declared as it came in; what the loop gives back
        an output of the model."""
        from tests.test_tflite_converters import _carry, _loops, _op, _tensor

        main = model.subgraphs[0]
        ((loop, cond, body),) = _loops(model, fb)
        carried = _tensor(model, fb, main, "carried", data=np.zeros((2, 4), np.int32))
        main.tensors[carried].type = fb.TensorType.FLOAT32
        _, arg = _carry(model, fb, (loop, cond, body), carried)
        parts = [arg] * copies
        if added:
            extra = _tensor(model, fb, body, "extra", data=np.zeros((added, 4), np.int32))
            body.tensors[extra].type = fb.TensorType.FLOAT32
            parts = [arg, extra]
        out = _tensor(model, fb, body, "grown", like=body.tensors[arg])
        options, kind = fb.ConcatenationOptionsT(), fb.BuiltinOptions.ConcatenationOptions
        body.operators.append(_op(model, fb, body, "CONCATENATION", parts, [out], options, kind))
        body.outputs = np.array([*body.outputs[:-1], out], np.int32)
        main.outputs = np.append(main.outputs, loop.outputs[-1]).astype(np.int32)

    return change


def _grown_as_interpreted(
    tmp_path: Path, data: bytes, memory: int, says: str, shape: list[int], interpreters=None
) -> None:
    """`data`, written as grown.tflite: refused past `memory` in one line holding `says`,
    accepted within 1 MiB, and the last output each of TensorFlow Lite's interpreters (or of
    `interpreters`) gives once it ran the file (the oracle) of `shape`."""
    from recorders.errors import ModelFormatError
    from tests.test_tflite_converters import _interpreters
    from tracer.load.tflite_check import checked

    path = tmp_path / "grown.tflite"
    path.write_bytes(data)
    with pytest.raises(ModelFormatError) as refused:
        checked(path, "grown.tflite", memory=memory)
    line = str(refused.value)
    assert says in line and "nothing was loaded" in line and "\n" not in line, line
    assert checked(path, "grown.tflite", memory=1 << 20)
    for interpreter in _interpreters() if interpreters is None else interpreters:
        it = interpreter(model_content=path.read_bytes())
        it.allocate_tensors()
        (given,) = it.get_input_details()
        it.set_tensor(given["index"], np.zeros(given["shape"], np.float32))
        it.invoke()
        *_, last = it.get_output_details()
        assert list(it.get_tensor(last["index"]).shape) == shape, interpreter


@pytest.mark.parametrize(
    "name, change, memory, shape, says",
    [
        (
            "fused",
            _concatenated(3),
            20_000,
            [8192],
            "op 2 of subgraph 0, a CONCATENATION, makes a tensor of [8192] (32,768 bytes)",
        ),
        (
            "fused",
            _concatenated(3, between="ABS"),
            20_000,
            [8192],
            "op 4 of subgraph 0, a CONCATENATION, makes a tensor of [8192] (32,768 bytes)",
        ),
        (
            "fused",
            _squared(128),
            20_000,
            [128, 128],
            "op 0 of subgraph 0, a ADD, makes a tensor of [128, 128] (65,536 bytes)",
        ),
        (
            "fused",
            _concatenated(3, fan=True),
            20_000,
            [2048],
            # (the fused LSTM's output too, [1, 5, 4]: 80 bytes, and its scratch buffer,
            # [1, 36]: 144 bytes)
            "the tensors its ops make when it runs (from op 0 of subgraph 0, a CONCATENATION on) "
            "claim 24,800 bytes together",
        ),
        (
            "loop",
            _grown(copies=4),
            16_384,
            [2048, 4],
            "op 1 of subgraph 0, a WHILE whose body grows loop variable 6 at each of its 5 "
            "iterations, makes a tensor of [2048, 4] (32,768 bytes)",
        ),
        (
            "loop",
            _grown(added=200),
            15_000,
            [1002, 4],
            "op 1 of subgraph 0, a WHILE whose body grows loop variable 6 at each of its 5 "
            "iterations, makes a tensor of [1002, 4] (16,032 bytes)",
        ),
    ],
    ids=["doubled", "doubled-abs", "broadcast", "together", "loop-doubled", "loop-added"],
)
def test_what_a_file_grows_when_it_runs_is_what_its_interpreter_makes(
    lite, tmp_path, name, change, memory, shape, says
):
    """A chain of CONCATENATIONs doubling a tensor (an ABS after each too), a broadcasting ADD,
    a WHILE loop whose body concatenates what it carries with itself (or with rows of a
    constant) at each iteration, each declared [1] or as it came in, and concatenations each
    within the memory budget but not all together: refused in one line past the budget,
    naming the shape TensorFlow Lite's interpreters give the model's last output (`shape`,
    the oracle: read from each interpreter once it ran the file), before anything runs
    (before: accepted, then allocated); within the budget, the file is accepted."""
    _grown_as_interpreted(tmp_path, _changed(lite, change, name), memory, says, shape)


def test_a_loop_whose_carried_shapes_keep_changing_is_followed_only_so_far(
    lite, tmp_path, monkeypatch
):
    """A loop whose body grows what it carries by another amount at each iteration is followed
    iteration by iteration, up to the iterations gatetrace follows in a check: past them, the
    file is refused in one line saying what it cannot bound."""
    from recorders.errors import ModelFormatError
    from tracer.load import tflite_check

    path = tmp_path / "grown.tflite"
    path.write_bytes(_changed(lite, _grown(copies=4), "loop"))
    assert tflite_check.checked(path, "grown.tflite", memory=1 << 30)  # 5 iterations followed
    monkeypatch.setattr(tflite_check, "_FOLLOWED", 3)
    with pytest.raises(ModelFormatError) as refused:
        tflite_check.checked(path, "grown.tflite", memory=1 << 30)
    assert str(refused.value) == (
        "grown.tflite: gatetrace cannot bound what the WHILE loop of op 1 of subgraph 0 carries: its "
        "body changes their shapes at every iteration ([], [], [5, 1, 4], [1, 4], [1, 4], [5, 1, 3], "
        "[2, 4] -> [], [], [5, 1, 4], [1, 4], [1, 4], [5, 1, 3], [128, 4]) past the 3 iterations "
        "gatetrace follows; it runs no loop whose tensors it cannot bound; nothing was loaded"
    )


def _constant_in(model, fb, sub, name: str, array: np.ndarray) -> int:
    """A constant of `array` (int32 or float32) added to subgraph `sub`: its number."""
    from tests.test_tflite_converters import _tensor

    t = _tensor(model, fb, sub, name, data=np.zeros(array.shape, np.int32))
    if array.dtype == np.float32:
        sub.tensors[t].type = fb.TensorType.FLOAT32
        model.buffers[sub.tensors[t].buffer].data = np.frombuffer(array.tobytes(), np.uint8)
    else:
        model.buffers[sub.tensors[t].buffer].data = np.frombuffer(
            array.astype(np.int32).tobytes(), np.uint8
        )
    return t


def _kernel_made(*steps):
    def change(model, fb):
        """Ops in front of the fused LSTM, each (KIND, its inputs: an array for a constant,
        an int for the output of the step that many steps back, options or None[, how many
        outputs it has, its first the one later steps take]), each output float32 declared
        [1], the last an output of the model."""
        from tests.test_tflite_converters import _op, _tensor

        main, ops, made = model.subgraphs[0], [], []
        for n, (kind, inputs, options, *outputs) in enumerate(steps):
            given = [
                made[-i] if isinstance(i, int) else _constant_in(model, fb, main, f"in{n}_{j}", i)
                for j, i in enumerate(inputs)
            ]
            like = next(t for t in main.tensors if t.type == fb.TensorType.FLOAT32)
            outs = [
                _tensor(model, fb, main, f"{kind.lower()}{n}" + (f"_{j}" if j else ""), like=like)
                for j in range(outputs[0] if outputs else 1)
            ]
            for out in outs:
                main.tensors[out].shape = np.array([1], np.int32)
                main.tensors[out].shapeSignature = None
            out = outs[0]
            made_options, number = None, None
            if options is not None:
                name, fields = options
                made_options = getattr(fb, f"{name}OptionsT")()
                for field, v in fields.items():
                    setattr(made_options, field, v)
                number = getattr(fb.BuiltinOptions, f"{name}Options")
            ops.append(_op(model, fb, main, kind, given, outs, made_options, number))
            made.append(out)
        main.operators[0:0] = ops
        main.outputs = np.append(main.outputs, made[-1]).astype(np.int32)

    return change


def _options(kind: str, **fields) -> tuple[str, dict]:
    """The options of an op of `kind` (the schema's `{kind}Options`), made where a file is."""
    return kind, fields


def _f(*shape) -> np.ndarray:
    return np.arange(math.prod(shape), dtype=np.float32).reshape(shape) % 7


def _i(*values, shape=None) -> np.ndarray:
    return np.array(values, np.int32).reshape(shape if shape is not None else (len(values),))


GROWN = {
    "pad": ([("PAD", [_f(4, 2), _i(0, 4092, 0, 0, shape=(2, 2))], _options("Pad"))], [4096, 2]),
    "padv2": (
        [("PADV2", [_f(4, 2), _i(0, 4092, 0, 0, shape=(2, 2)), _f()], _options("PadV2"))],
        [4096, 2],
    ),
    "mirror-pad": (
        [
            ("PAD", [_f(4, 2), _i(0, 1020, 0, 0, shape=(2, 2))], _options("Pad")),
            ("MIRROR_PAD", [1, _i(1024, 1024, 0, 0, shape=(2, 2))], _options("MirrorPad", mode=1)),
        ],
        [3072, 2],
    ),
    "one-hot": (
        [("ONE_HOT", [_i(*range(8)), _i(1000, shape=()), _f(), _f()], _options("OneHot", axis=-1))],
        [8, 1000],
    ),
    "slice-concatenated": (
        [
            ("SLICE", [_f(1200), _i(100), _i(1000)], _options("Slice")),
            ("CONCATENATION", [1, 1], _options("Concatenation")),
            ("CONCATENATION", [1, 1], _options("Concatenation")),
            ("CONCATENATION", [1, 1], _options("Concatenation")),
        ],
        [8000],
    ),
    "strided-slice-concatenated": (
        [
            ("STRIDED_SLICE", [_f(1200), _i(100), _i(1100), _i(1)], _options("StridedSlice")),
            ("CONCATENATION", [1, 1], _options("Concatenation")),
            ("CONCATENATION", [1, 1], _options("Concatenation")),
            ("CONCATENATION", [1, 1], _options("Concatenation")),
        ],
        [8000],
    ),
    "gather": ([("GATHER", [_f(256, 4), _i(*[3] * 2048)], _options("Gather"))], [2048, 4]),
    "gather-nd": ([("GATHER_ND", [_f(256, 4), _i(*[5] * 2048, shape=(2048, 1))], None)], [2048, 4]),
    "resize-bilinear": (
        [("RESIZE_BILINEAR", [_f(1, 2, 2, 1), _i(100, 100)], _options("ResizeBilinear"))],
        [1, 100, 100, 1],
    ),
    "resize-nearest": (
        [("RESIZE_NEAREST_NEIGHBOR", [_f(1, 2, 2, 1), _i(100, 100)], _options("ResizeNearestNeighbor"))],
        [1, 100, 100, 1],
    ),
    "fully-connected": (
        [
            ("PAD", [_f(1, 4), _i(0, 1023, 0, 0, shape=(2, 2))], _options("Pad")),
            ("FULLY_CONNECTED", [1, _f(16, 4)], _options("FullyConnected")),
        ],
        [1024, 16],
    ),
    "batch-matmul": ([("BATCH_MATMUL", [_f(128, 1), _f(1, 128)], _options("BatchMatMul"))], [128, 128]),
    "space-to-batch": (
        [("SPACE_TO_BATCH_ND", [_f(1, 4, 1), _i(2), _i(0, 8188, shape=(1, 2))], _options("SpaceToBatchND"))],
        [2, 4096, 1],
    ),
    "depth-to-space-pad": (
        [
            ("DEPTH_TO_SPACE", [_f(1, 1, 1, 4)], _options("DepthToSpace", blockSize=2)),
            ("PAD", [1, _i(0, 0, 0, 98, 0, 98, 0, 0, shape=(4, 2))], _options("Pad")),
        ],
        [1, 100, 100, 1],
    ),
}  # fmt: skip


# (an op that makes no more numbers than its input holds is seen through what an op after it
# grows from it: a TILE)
GROWN_MORE = {
    "embedding-lookup": ([("EMBEDDING_LOOKUP", [_i(*[3] * 2048), _f(256, 4)], None)], [2048, 4]),
    "conv-2d": (
        [(
            "CONV_2D", [_f(1, 32, 32, 1), _f(8, 1, 1, 1), _f(8)],
            _options("Conv2D", strideW=1, strideH=1),
        )],
        [1, 32, 32, 8],
    ),
    "conv-2d-valid-strided-dilated": (
        [(
            "CONV_2D", [_f(1, 50, 40, 1), _f(8, 3, 3, 1), _f(8)], _options(
                "Conv2D", padding=1, strideW=1, strideH=2, dilationWFactor=2, dilationHFactor=3
            ),
        )],
        [1, 22, 36, 8],
    ),
    "depthwise-conv-2d": (
        [(
            "DEPTHWISE_CONV_2D", [_f(1, 32, 32, 1), _f(1, 1, 1, 8), _f(8)],
            _options("DepthwiseConv2D", strideW=1, strideH=1, depthMultiplier=8),
        )],
        [1, 32, 32, 8],
    ),
    "transpose-conv": (
        [(
            "TRANSPOSE_CONV", [_i(1, 64, 64, 2), _f(2, 1, 1, 1), _f(1, 32, 32, 1)],
            _options("TransposeConv", strideW=2, strideH=2),
        )],
        [1, 64, 64, 2],
    ),
    "batch-to-space-tiled": (
        [
            ("BATCH_TO_SPACE_ND", [_f(64, 8, 1), _i(64), _i(0, 0, shape=(1, 2))], _options("BatchToSpaceND")),
            ("TILE", [1, _i(1, 16, 1)], None),
        ],
        [1, 8192, 1],
    ),
    "split-tiled": (
        [
            ("SPLIT", [_i(0, shape=()), _f(1024, 2)], _options("Split", numSplits=2), 2),
            ("TILE", [1, _i(8, 1)], None),
        ],
        [4096, 2],
    ),
    "split-v-tiled": (
        [
            ("SPLIT_V", [_f(1024, 2), _i(1000, -1), _i(0, shape=())], _options("SplitV", numSplits=2), 2),
            ("TILE", [1, _i(4, 1)], None),
        ],
        [4000, 2],
    ),
    "unpack-tiled": (
        [
            ("UNPACK", [_f(2, 1024)], _options("Unpack", num=2, axis=0), 2),
            ("TILE", [1, _i(8)], None),
        ],
        [8192],
    ),
    # (a vector of 96 made the diagonal of a [96, 96] matrix: matrix_diag.cc)
    "matrix-diag": ([("MATRIX_DIAG", [_f(96)], None)], [96, 96]),
}  # fmt: skip
GROWN.update(GROWN_MORE)


@pytest.mark.parametrize("case", list(GROWN))
def test_what_an_op_makes_is_what_its_kernel_makes_whatever_the_file_declares(lite, tmp_path, case):
    """PAD, PADV2, MIRROR_PAD, ONE_HOT, SLICE, STRIDED_SLICE, GATHER, GATHER_ND, RESIZE_BILINEAR,
    RESIZE_NEAREST_NEIGHBOR, FULLY_CONNECTED, BATCH_MATMUL, SPACE_TO_BATCH_ND,
    DEPTH_TO_SPACE and MATRIX_DIAG, each output declared [1], on constants (and on what an op before makes):
    past the budget, refused in one line naming the shape TensorFlow Lite's interpreters give
    it (the oracle: read from each interpreter once it ran the file), before anything runs
    (before: taken at [1], then allocated as its kernel computes it); within it, accepted."""
    steps, shape = GROWN[case]
    says = f"op {len(steps) - 1} of subgraph 0, a {steps[-1][0]}, makes a tensor of {shape} ("
    _grown_as_interpreted(tmp_path, _changed(lite, _kernel_made(*steps)), 24_000, says, shape)


def _long_input(data: bytes, steps: int) -> bytes:
    """`data` (a file of one [1, T, D] input) with its input declared `steps` long, and nothing
    else changed: what its ops make of it is declared T long."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as fb

    model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(data, 0))
    main = model.subgraphs[0]
    (given,) = main.inputs
    main.tensors[given].shape = np.array([1, steps, D], np.int32)
    main.tensors[given].shapeSignature = None
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


@pytest.mark.parametrize(
    "name, width",
    [
        ("UNIDIRECTIONAL_SEQUENCE_LSTM", H),
        ("UNIDIRECTIONAL_SEQUENCE_RNN", H),
        ("BIDIRECTIONAL_SEQUENCE_RNN", 2 * H),
        ("BIDIRECTIONAL_SEQUENCE_LSTM", 2 * H),
        ("BIDIRECTIONAL_SEQUENCE_LSTM-apart", H),
    ],
)
def test_what_a_recurrent_op_makes_is_what_its_kernel_makes(lite, converted, tmp_path, name, width):
    """A recurrent op fed a sequence of 2,048 steps while its output is declared 5 steps long:
    refused in one line past the budget naming the shape TensorFlow Lite's interpreters give its
    output (the oracle: read from each interpreter once it ran the file), the steps it is fed by
    the width its weights give, before anything runs (before: taken as declared, then allocated
    as its kernel computes it); within it, accepted. A bidirectional op's halves merged or apart."""
    if name.startswith("BIDIRECTIONAL_SEQUENCE_LSTM"):
        merged = "bidirectional-apart" if name.endswith("apart") else "bidirectional-merged"
        data = converted[f"tf-keras-{merged}"][0].read_bytes()
    else:
        change = {
            "UNIDIRECTIONAL_SEQUENCE_RNN": _rnn,
            "BIDIRECTIONAL_SEQUENCE_RNN": _bidirectional_rnn,
        }
        data = _changed(lite, change.get(name, lambda model, fb: None))
    shape = [1, 2048, width]
    says = f"op 0 of subgraph 0, a {name.removesuffix('-apart')}, makes a tensor of {shape} ("
    # (apart, the model's output is the halves concatenated after the op)
    last = [1, 2048, 2 * width] if name.endswith("apart") else shape
    _grown_as_interpreted(tmp_path, _long_input(data, 2048), 4 * 2048 * width - 1, says, last)


def _where_of(kind: str):
    def change(model, fb):
        """A WHERE of a [64, 64] float32 constant of no zero, its output (declared of type
        `kind`) an output of the model."""
        _kernel_made(("WHERE", [_f(64, 64) + 1], None))(model, fb)
        main = model.subgraphs[0]
        main.tensors[int(main.outputs[-1])].type = getattr(fb.TensorType, kind)

    return change


@pytest.mark.parametrize("kind", ["INT64", "INT8", "BOOL"])
def test_what_a_where_makes_is_at_most_every_position_of_its_condition(lite, tmp_path, kind):
    """A WHERE whose output is declared [1] (its kernel makes [number of nonzero values, rank]
    int64, whatever type the file declares: where.cc sets it): refused past the budget naming
    every position of its condition, the shape TensorFlow Lite's interpreters give it here
    (no value is zero), at 8 bytes a number (before: at the declared type's, an int8 or bool
    output's an eighth of what they make); within it, accepted."""
    from tests.test_tflite_converters import _interpreters

    says = "op 0 of subgraph 0, a WHERE, makes a tensor of [4096, 2] (65,536 bytes)"
    data = _changed(lite, _where_of(kind))
    _grown_as_interpreted(tmp_path, data, 60_000, says, [4096, 2])
    for interpreter in _interpreters():  # (the oracle: int64 whatever the file declares)
        it = interpreter(model_content=data)
        it.allocate_tensors()
        it.invoke()
        assert it.get_tensor(it.get_output_details()[-1]["index"]).nbytes == 65_536


def test_the_scratch_a_convolution_needs_is_counted(lite, tmp_path):
    """A CONV_2D of a [1, 32, 32, 1] image by a 9 x 9 filter makes a [1, 32, 32, 1] output and,
    in TensorFlow Lite's optimized kernel, an im2col scratch tensor of [batch, output height,
    output width, input depth x 9 x 9] (conv.cc: for any filter larger than 1 x 1), 81 times
    the image: past the budget, refused in one line naming it (before: not counted); within it,
    accepted, and the interpreters give the output the shape the scratch follows."""
    change = _kernel_made(
        (
            "CONV_2D",
            [_f(1, 32, 32, 1), _f(1, 9, 9, 1), _f(1)],
            _options("Conv2D", strideW=1, strideH=1),
        )
    )
    says = (
        "op 0 of subgraph 0, a CONV_2D, needs a scratch tensor of [1, 32, 32, 81] (331,776 bytes)"
    )
    _grown_as_interpreted(tmp_path, _changed(lite, change), 300_000, says, [1, 32, 32, 1])


def _fed(model, shape: list[int]) -> None:
    """The model's one input declared `shape` (fed as declared)."""
    main = model.subgraphs[0]
    (given,) = main.inputs
    main.tensors[given].shape = np.array(shape, np.int32)
    main.tensors[given].shapeSignature = None


def _rank_four(model, fb):
    """The fused LSTM's op made a UNIDIRECTIONAL_SEQUENCE_RNN (`_rnn`) fed [1, 2048, D, 1]."""
    _rnn(model, fb)
    _fed(model, [1, 2048, D, 1])


def _diagonal(model, fb):
    """The fused LSTM's recurrent matrices (inputs 5-8) made diagonal, vectors of H (as its
    kernel allows), fed 2,048 steps."""
    rng = np.random.RandomState(6)
    op = model.subgraphs[0].operators[0]
    inputs = list(op.inputs)
    inputs[5:9] = [_added(model, [H], rng) for _ in range(4)]
    op.inputs = np.array(inputs, np.int32)
    _fed(model, [1, 2048, D])


@pytest.mark.parametrize(
    "change, name, interpreters",
    [
        (_rank_four, "UNIDIRECTIONAL_SEQUENCE_RNN", slice(0, 1)),
        (_diagonal, "UNIDIRECTIONAL_SEQUENCE_LSTM", slice(None)),
    ],
    ids=["rank-4", "diagonal"],
)
def test_a_recurrent_op_is_computed_whatever_its_input_s_rank_or_its_matrices(
    lite, tmp_path, change, name, interpreters
):
    """A sequence RNN fed a tensor of four dimensions (TensorFlow's kernel reads its first
    three and makes [batch, time, units]; LiteRT's refuses it), and a sequence LSTM whose
    recurrent matrices are diagonal (its width is the length of its recurrent-to-output
    vector), each fed 2,048 steps while its output is declared 5 steps long: refused past the
    budget naming the shape TensorFlow Lite's interpreters give its output (the oracle: read
    from each interpreter that runs the file), before anything runs (before: taken as
    declared, then allocated as the kernel computes it); within it, accepted."""
    from tests.test_tflite_converters import _interpreters

    says = f"op 0 of subgraph 0, a {name}, makes a tensor of [1, 2048, {H}] (32,768 bytes)"
    data = _changed(lite, change)
    runs = _interpreters()[interpreters]
    _grown_as_interpreted(tmp_path, data, 4 * 2048 * H - 1, says, [1, 2048, H], runs)


def test_a_recurrent_op_fed_fewer_dimensions_than_its_kernel_reads_is_one_line(lite, tmp_path):
    """A sequence RNN fed [2048, D] (its kernel reads the input's third dimension whatever its
    rank, past the two it has: unidirectional_sequence_rnn.cc) is refused in one line naming
    the op and the shape it is fed (before: its output taken as declared)."""

    def change(model, fb):
        _rnn(model, fb)
        _fed(model, [2048, D])

    assert _computed_refusal(tmp_path, _changed(lite, change)) == (
        "computed.tflite: op 0 of subgraph 0, a UNIDIRECTIONAL_SEQUENCE_RNN, is fed a tensor of "
        "[2048, 3], where its kernel reads 3 dimensions (it would read past its shape); convert "
        "the model again; nothing was loaded"
    )


def _time_major_apart(model, fb):
    """`_bidirectional_rnn` fed [7 steps, a batch of 2, D] time-major, its halves apart (two
    outputs, each an output of the model)."""
    from tests.test_tflite_converters import _tensor

    _bidirectional_rnn(model, fb)
    main = model.subgraphs[0]
    op = main.operators[0]
    _fed(model, [7, 2, D])
    for k in (4, 8):  # (the hidden states: [batch, units])
        main.tensors[int(op.inputs[k])].shape = np.array([2, H], np.int32)
    op.builtinOptions.timeMajor, op.builtinOptions.mergeOutputs = True, False
    backward = _tensor(model, fb, main, "backward", like=main.tensors[int(op.outputs[0])])
    op.outputs = main.outputs = np.array([int(op.outputs[0]), backward], np.int32)


def test_a_time_major_bidirectional_rnn_gives_both_halves_time_major(lite, tmp_path):
    """A time-major BIDIRECTIONAL_SEQUENCE_RNN of [7, 2, D] whose halves are apart: the shape
    the check computes of each output is the one TensorFlow Lite's interpreters give it once
    allocated (the oracle), [7, 2, H] both (before: the backward one [2, 7, H], as an older
    kernel made it, which the ops after it would take)."""
    from tests.test_tflite_converters import _interpreters
    from tracer.load.lite_runtime import runtime
    from tracer.load.tflite_check import _made, checked

    path = tmp_path / "apart.tflite"
    path.write_bytes(_changed(lite, _time_major_apart))
    _, parsed = checked(path, "apart.tflite")
    made = _made(parsed, runtime().schema(), 0, 1 << 30)
    for interpreter in _interpreters():
        it = interpreter(model_path=str(path))
        it.allocate_tensors()
        given = [list(d["shape"]) for d in it.get_output_details()]
        assert given == [[7, 2, H]] * 2
        assert [made[d["index"]][2] for d in it.get_output_details()] == given


def _basic_lstm(model, fb):
    """The fused LSTM's op replaced by an LSTM op of the basic kernel (five inputs: a
    [1000, D] input, its previous output and state [1000, H] (variables), weights
    [4H, D + H] and a bias [4H]; four outputs, each declared [1] and an output of the
    model)."""
    from tests.test_tflite_converters import _op, _tensor

    main = model.subgraphs[0]
    _fed(model, [1000, D])
    (x,) = main.inputs
    rng = np.random.RandomState(8)
    weights, bias = _added(model, [4 * H, D + H], rng), _added(model, [4 * H], rng)
    states = [_added(model, [1000, H], rng) for _ in range(2)]
    for t in states:
        main.tensors[t].buffer, main.tensors[t].isVariable = 0, True
    outputs = []
    for name in ("output", "state", "concatenated", "activations"):
        outputs.append(_tensor(model, fb, main, name, like=main.tensors[x]))
        main.tensors[outputs[-1]].shape = np.array([1], np.int32)
    options = fb.LSTMOptionsT()
    options.kernelType = fb.LSTMKernelType.BASIC
    options.fusedActivationFunction = fb.ActivationFunctionType.TANH
    inputs = [x, states[0], weights, bias, states[1]]
    op = _op(model, fb, main, "LSTM", inputs, outputs, options, fb.BuiltinOptions.LSTMOptions)
    main.operators, main.outputs = [op], np.array(outputs, np.int32)


def test_an_lstm_op_of_the_basic_kernel_makes_what_its_kernel_makes(lite, tmp_path):
    """An LSTM op of the basic kernel (lstm.cc's basic::Prepare: its output and state as its
    previous ones, [batch, depth + units] and [batch, 4 x units]) of a batch of 1,000 whose
    four outputs are declared [1]: refused past the budget naming the last, [1000, 4H], the
    shape TensorFlow Lite's interpreters give it (the oracle) (before: taken as declared);
    within it, accepted."""
    says = f"op 0 of subgraph 0, a LSTM, makes a tensor of [1000, {4 * H}] (64,000 bytes)"
    _grown_as_interpreted(tmp_path, _changed(lite, _basic_lstm), 60_000, says, [1000, 4 * H])


def _narrower(kind: str, at: int):
    def change(model, fb):
        """The fused LSTM (made an RNN where `kind` says so, `_rnn`) fed 4,096 steps, its
        output (`at` -1) or its input `at` (a state) declared int8."""
        if kind == "UNIDIRECTIONAL_SEQUENCE_RNN":
            _rnn(model, fb)
        _fed(model, [1, 4096, D])
        op = model.subgraphs[0].operators[0]
        t = model.subgraphs[0].tensors[int(op.outputs[0] if at < 0 else op.inputs[at])]
        quantised = fb.QuantizationParametersT()
        quantised.scale, quantised.zeroPoint = np.array([1.0], np.float32), np.array([0])
        t.type, t.quantization = fb.TensorType.INT8, quantised

    return change


@pytest.mark.parametrize(
    "kind, at, role",
    [
        ("UNIDIRECTIONAL_SEQUENCE_LSTM", -1, "output StatefulPartitionedCall:0"),
        ("UNIDIRECTIONAL_SEQUENCE_LSTM", 19, "state arith.constant11"),
        ("UNIDIRECTIONAL_SEQUENCE_RNN", -1, "output StatefulPartitionedCall:0"),
        ("UNIDIRECTIONAL_SEQUENCE_RNN", 4, "state arith.constant"),
    ],
    ids=["lstm-output", "lstm-cell", "rnn-output", "rnn-state"],
)
def test_a_float_recurrent_op_writing_a_narrower_tensor_is_one_line(lite, tmp_path, kind, at, role):
    """A float recurrent op whose output or state is declared int8: the interpreters give it
    a buffer of one byte a number (the oracle: its type once allocated), where the kernel
    writes float32, four (unidirectional_sequence_lstm.cc, unidirectional_sequence_rnn.cc:
    GetTensorData<float>; an LSTM's output overran the heap, malloc aborted). Refused in one
    line naming the op and the tensor, before anything runs (before: accepted)."""
    from tests.test_tflite_converters import _interpreters

    data = _changed(lite, _narrower(kind, at))
    for interpreter in _interpreters():  # (allocated, not run)
        it = interpreter(model_content=data)
        it.allocate_tensors()
        op_tensors = [d for d in it.get_tensor_details() if d["name"] == role.split()[-1]]
        assert [d["dtype"] for d in op_tensors] == [np.int8]
    assert _computed_refusal(tmp_path, data) == (
        f"computed.tflite: op 0 of subgraph 0, a {kind} fed float32, has the {role} of type INT8, "
        "which its kernel writes as float32 (4 bytes a number, past the end of the buffer the "
        "interpreter gives it); convert the model again; nothing was loaded"
    )


U = 32  # the units of the RNN a loop's body holds


def _rnn_in_the_body(model, fb):
    """The loop file's WHILE made to carry a float32 constant [1, 2048, D] of the main graph,
    which its body (and cond) declare [1, 5, D] (the WHILE kernel resizes them to what it
    carries) and feed to a UNIDIRECTIONAL_SEQUENCE_RNN of U units, declared [1, 5, U]; the
    loop carries out the SHAPE of what that op makes, an output of the model."""
    from tests.test_tflite_converters import _carry, _loops, _op, _tensor

    main = model.subgraphs[0]
    ((loop, cond, body),) = _loops(model, fb)
    sequence = _tensor(model, fb, main, "long", data=np.zeros((1, 2048, D), np.int32))
    main.tensors[sequence].type = fb.TensorType.FLOAT32
    _, arg = _carry(model, fb, (loop, cond, body), sequence)
    for sub in (cond, body):
        sub.tensors[int(sub.inputs[-1])].shape = np.array([1, T, D], np.int32)
    shape = _tensor(model, fb, main, "shape", data=np.zeros(3, np.int32))
    _, shape_arg = _carry(model, fb, (loop, cond, body), shape)
    rng = np.random.RandomState(9)

    def weights(dims):
        t = _tensor(model, fb, body, f"w{len(body.tensors)}", data=np.zeros(dims, np.int32))
        body.tensors[t].type = fb.TensorType.FLOAT32
        values = rng.uniform(-0.1, 0.1, dims).astype(np.float32)
        model.buffers[body.tensors[t].buffer].data = np.frombuffer(values.tobytes(), np.uint8)
        return t

    matrices = [weights((U, D)), weights((U, U)), weights((U,))]
    h = _tensor(model, fb, body, "h", like=body.tensors[matrices[0]])
    body.tensors[h].shape, body.tensors[h].isVariable = np.array([1, U], np.int32), True
    y = _tensor(model, fb, body, "y", like=body.tensors[matrices[0]])
    body.tensors[y].shape = np.array([1, T, U], np.int32)
    options = fb.SequenceRNNOptionsT()
    options.fusedActivationFunction = fb.ActivationFunctionType.TANH
    kind = fb.BuiltinOptions.SequenceRNNOptions
    rnn = _op(
        model, fb, body, "UNIDIRECTIONAL_SEQUENCE_RNN", [arg, *matrices, h], [y], options, kind
    )
    made = _tensor(model, fb, body, "made", like=body.tensors[shape_arg])
    options = fb.ShapeOptionsT()
    options.outType = fb.TensorType.INT32
    measured = _op(model, fb, body, "SHAPE", [y], [made], options, fb.BuiltinOptions.ShapeOptions)
    body.operators += [rnn, measured]
    body.outputs = np.array([*body.outputs[:-1], made], np.int32)
    main.outputs = np.append(main.outputs, loop.outputs[-1]).astype(np.int32)


def test_what_a_loop_body_makes_is_computed_from_what_the_loop_carries(lite, tmp_path):
    """A WHILE loop carrying [1, 2048, D] into a body that declares it [1, 5, D] and feeds it
    to an RNN of 32 units: the RNN makes [1, 2048, 32] at each iteration (the oracle: the
    SHAPE of it the loop carries out, read from each interpreter once it ran the file).
    Refused past the budget naming it and the loop, before anything runs (before: the body
    checked as it declares its inputs, [1, 5, 32]); within it, accepted."""
    from recorders.errors import ModelFormatError
    from tests.test_tflite_converters import _interpreters
    from tracer.load.tflite_check import checked

    path = tmp_path / "body.tflite"
    path.write_bytes(_changed(lite, _rnn_in_the_body, "loop"))
    with pytest.raises(ModelFormatError) as refused:
        checked(path, "body.tflite", memory=100_000)
    line = str(refused.value)
    assert line.endswith(
        f"a UNIDIRECTIONAL_SEQUENCE_RNN, makes a tensor of [1, 2048, {U}] (262,144 bytes) when it "
        "runs, more than the memory budget of 100,000, from what the WHILE loop of op 1 of "
        "subgraph 0 carries into it; nothing was loaded"
    ), line
    assert checked(path, "body.tflite", memory=1 << 20)
    for interpreter in _interpreters():
        it = interpreter(model_path=str(path))
        it.allocate_tensors()
        (given,) = it.get_input_details()
        it.set_tensor(given["index"], np.zeros(given["shape"], np.float32))
        it.invoke()
        shape = it.get_tensor(it.get_output_details()[-1]["index"])
        assert shape.tolist() == [1, 2048, U], interpreter


def _temporaries_as_allocated(path: Path) -> list[tuple[list, list]]:
    """The temporaries the check counts for the ops of `path`'s main graph ((shape, bytes),
    sorted), and, by interpreter, those it allocates (the tensors past the file's own)."""
    from tests.test_tflite_converters import _interpreters
    from tracer.load.lite_runtime import runtime
    from tracer.load.tflite_check import _made, _scratch, checked

    _, parsed = checked(path, path.name)
    schema = runtime().schema()
    found = _scratch(parsed, schema, 0, _made(parsed, schema, 0, 1 << 30))
    counted = sorted((list(dims), nbytes) for _, _, dims, nbytes in found)
    owned = len(parsed.subgraphs[0].tensors)
    out = []
    for interpreter in _interpreters():
        it = interpreter(model_path=str(path))
        it.allocate_tensors()
        allocated = sorted(
            (
                [int(d) for d in t["shape"]],
                float(np.prod(t["shape"]) * np.dtype(t["dtype"]).itemsize),
            )
            for t in it.get_tensor_details()
            if t["index"] >= owned
        )
        out.append((counted, allocated))
    return out


def _batch_of(n: int):
    def change(model, fb):
        """The fused LSTM fed a batch of `n` sequences of one step, its states [n, H]."""
        op = model.subgraphs[0].operators[0]
        _fed(model, [n, 1, D])
        for k in (18, 19):
            model.subgraphs[0].tensors[int(op.inputs[k])].shape = np.array([n, H], np.int32)

    return change


@pytest.mark.parametrize(
    "name, change",
    [
        ("fused", None),
        ("quantised", None),
        ("quantised", _rnn),
        ("fused", _batch_of(1000)),
    ],
    ids=["float-lstm", "hybrid-lstm", "hybrid-rnn", "batch-of-1000"],
)
def test_the_temporaries_a_recurrent_op_needs_are_what_its_kernel_allocates(
    lite, tmp_path, name, change
):
    """The temporaries the check counts for a fused LSTM (its scratch buffer), a hybrid one
    (int8 matrices: its input and states quantised, accumulators, row sums, scaling vectors)
    and a hybrid RNN are, shape for shape and byte for byte, those TensorFlow Lite's
    interpreters allocate once they allocated the file (the oracle: the tensors they hold
    past the file's own)."""
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(
        _changed(lite, change, name) if change else (lite / f"{name}.tflite").read_bytes()
    )
    for counted, allocated in _temporaries_as_allocated(path):
        assert counted == allocated


def test_the_temporaries_a_recurrent_op_needs_are_counted(lite, tmp_path):
    """A fused LSTM of a batch of 1,000 sequences needs a scratch buffer of [1000, 5H + 16]
    (144,000 bytes; its output 16,000): past the budget, refused in one line naming it
    (before: not counted); within it, accepted, and the interpreters give its output the
    shape that buffer follows."""
    says = (
        f"op 0 of subgraph 0, a UNIDIRECTIONAL_SEQUENCE_LSTM, needs a scratch tensor of "
        f"[1000, {5 * H + 16}] (144,000 bytes)"
    )
    data = _changed(lite, _batch_of(1000))
    _grown_as_interpreted(tmp_path, data, 100_000, says, [1000, 1, H])


def _computed_refusal(tmp_path: Path, data: bytes) -> str:
    """The one line `data`, written as computed.tflite, is refused with (a budget of 1 MiB)."""
    from recorders.errors import ModelFormatError
    from tracer.load.tflite_check import checked

    path = tmp_path / "computed.tflite"
    path.write_bytes(data)
    with pytest.raises(ModelFormatError) as refused:
        checked(path, "computed.tflite", memory=1 << 20)
    return str(refused.value)


def test_an_op_whose_size_gatetrace_cannot_read_is_one_line(lite, tmp_path):
    """A PAD whose paddings an ABS computes (its kernel pads by whatever they hold when it
    runs) is refused naming the op and its paddings (before: taken at its declared [1])."""
    change = _kernel_made(
        ("ABS", [_f(2, 2)], None), ("PAD", [_f(4, 2), 1], _options("Pad"))
    )  # (ABS of a float: the paddings' type aside, gatetrace cannot read what it computes)
    assert _computed_refusal(tmp_path, _changed(lite, change)) == (
        "computed.tflite: op 1 of subgraph 0, a PAD, takes its paddings from abs0, which gatetrace "
        "cannot read from the file (neither a constant nor computed from constants and shapes): it "
        "cannot bound the tensor the op makes when it runs, and runs no file whose tensors it cannot "
        "bound; nothing was loaded"
    )


def test_a_transpose_conv_whose_output_shape_gatetrace_cannot_read_is_one_line(lite, tmp_path):
    """A TRANSPOSE_CONV whose output shape a NEG computes (its kernel makes the shape that
    tensor holds when it runs) is refused naming the op and that tensor (before: taken at its
    declared [1])."""
    change = _kernel_made(
        ("NEG", [_f(4)], None),
        (
            "TRANSPOSE_CONV", [1, _f(2, 1, 1, 1), _f(1, 4, 4, 1)],
            _options("TransposeConv", strideW=2, strideH=2),
        ),
    )  # fmt: skip
    assert _computed_refusal(tmp_path, _changed(lite, change)) == (
        "computed.tflite: op 1 of subgraph 0, a TRANSPOSE_CONV, takes its output shape from neg0, "
        "which gatetrace cannot read from the file (neither a constant nor computed from constants "
        "and shapes): it cannot bound the tensor the op makes when it runs, and runs no file whose "
        "tensors it cannot bound; nothing was loaded"
    )


def _converted_as_allocated(model, tmp_path: Path, kinds: set[str]):
    """`model` converted as a user converts it (ordinary.tflite), accepted by the check, ops
    of `kinds` among those whose outputs it computes, and every shape it computes the shape
    LiteRT's interpreter gives the tensor once allocated: the file and that interpreter."""
    from ai_edge_litert import interpreter as litert

    from tracer._tf import tf
    from tracer.load.lite_runtime import runtime
    from tracer.load.tflite_check import _made, checked

    path = tmp_path / "ordinary.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    _, parsed = checked(path, "ordinary.tflite")
    made = _made(parsed, runtime().schema(), 0, 1 << 30)
    assert kinds <= {kind for _, kind, _ in made.values()}
    it = litert.Interpreter(model_path=str(path))
    it.allocate_tensors()
    for t, (_, kind, dims) in made.items():
        assert list(it.get_tensor_details()[t]["shape"]) == dims, kind
    return path, it


def test_an_ordinary_file_of_pad_gather_and_dense_loads_and_records_what_it_runs(tmp_path):
    """A converted model padding its sequence (PAD), cutting a step off each end
    (STRIDED_SLICE), an LSTM, a dense layer at every step
    (FULLY_CONNECTED) and a GATHER of two of its units: every shape the check computes is the
    shape LiteRT's interpreter gives the tensor once allocated, and its output is recorded as
    the interpreter returns it, bit for bit."""
    from ai_edge_litert import interpreter as litert

    from recorders import Recording
    from tests.conftest import record_x
    from tests.test_outputs_returned import _values
    from tracer._tf import tf

    keras = keras_module("tf-keras")
    inp = keras.Input((T, D), batch_size=1, name="x")
    x = keras.layers.ZeroPadding1D(2)(inp)
    x = keras.layers.Lambda(lambda v: v[:, 1:-1])(x)
    x = keras.layers.LSTM(H, return_sequences=True)(x)
    x = keras.layers.Dense(3)(x)
    out = keras.layers.Lambda(lambda v: tf.gather(v, [2, 0], axis=2))(x)
    model = keras.Model(inp, out)
    randomise(model, seed=3)
    path, it = _converted_as_allocated(
        model, tmp_path, {"PAD", "STRIDED_SLICE", "FULLY_CONNECTED", "GATHER"}
    )
    name = it.get_output_details()[0]["name"]
    feed = np.random.RandomState(5).uniform(-1, 1, (3, T, D)).astype(np.float32)
    done = record_x(path, feed, tmp_path / "run", "--outputs", name)
    assert done.returncode == 0, done.stderr
    own = []
    for row in feed:
        it = litert.Interpreter(
            model_path=str(path),
            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        )
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], row[None])
        it.invoke()
        own.append(it.get_tensor(it.get_output_details()[0]["index"])[0])
    np.testing.assert_array_equal(_values(Recording(tmp_path / "run"), name), np.stack(own))


def test_an_ordinary_file_of_conv_split_and_unpack_loads_with_the_shapes_it_runs(tmp_path):
    """A converted model of a 1-D convolution (CONV_2D), a SPLIT of its channels, an UNPACK
    and a PACK of its steps and an LSTM is accepted, and every shape the check computes is
    the shape LiteRT's interpreter gives the tensor once allocated."""
    from tracer._tf import tf

    keras = keras_module("tf-keras")
    inp = keras.Input((T, D), batch_size=1, name="x")
    x = keras.layers.Conv1D(4, 3, padding="same", dilation_rate=2)(inp)
    x = keras.layers.Lambda(lambda v: tf.split(v, 2, axis=2)[1])(x)
    x = keras.layers.Lambda(lambda v: tf.stack(tf.unstack(v, axis=1)[1:], axis=1))(x)
    out = keras.layers.LSTM(H, return_sequences=True)(x)
    model = keras.Model(inp, out)
    randomise(model, seed=4)
    _converted_as_allocated(model, tmp_path, {"CONV_2D", "SPLIT", "UNPACK"})
