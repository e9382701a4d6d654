"""TensorFlow Lite files as the converters of TensorFlow 2.2-2.4 wrote them: recorded.

Today's converter (TensorFlow 2.21) writes each loop in today's form; each older form is made
here as the older converter wrote it, by rewriting a file TensorFlow 2.21 converted through
TensorFlow Lite's own flatbuffer schema (`schema_py_generated`, its object API):

    no scalar shapes       every scalar tensor's `shape` left out (an absent shape is a scalar)
    bias-less GRU          a Conv1D and a GRU(use_bias=False), scalar shapes left out
    stacked, declared      two dynamic-range LSTM loops of 269 steps, the second one's input
                           declared [1, 1, 1] (what it holds is known only when it runs); also
                           each bounded by its input's length (below), the second's read when
                           it runs
    carried constant       the loop bounded by a loop variable the body passes on unchanged,
                           from a constant of the main graph; the LSTM's weights loop
                           variables too
    carried length         the loop bounded by loop variables the body passes on unchanged,
                           from SHAPE -> STRIDED_SLICE of the input (TensorFlow's
                           `maximum_iterations` and the sequence's length, under LOGICAL_AND)
    body shapes            the body's and cond's tensors declared with other shapes than the
                           loop carries (the WHILE kernel resizes them to what it carries)
    no optional field      every field the schema makes optional left out where that changes
                           nothing the file computes (names, signatures, `builtin_code`, ...)

A loop whose bound the file does not give is refused in one line saying what gatetrace
cannot read in it.

Every file runs in TensorFlow Lite's own interpreters (TensorFlow's and LiteRT's), and the
oracle is theirs: the model's sequence output (h at every step), the Keras cell's equations
written here (from Keras' documentation) on the recorded gates, and, where the file is float,
Keras' equations on the Keras model's own weights.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.test_keras import keras_module, randomise

T, D = 8, 3


def _rewritten(data: bytes, change: Callable[[object, object], None]) -> bytes:
    """`data` with `change(model, schema)` applied to its parsed model, packed again."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as fb

    model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(data, 0))
    change(model, fb)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _kind(model, fb, op) -> str:
    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    code = model.operatorCodes[op.opcodeIndex]
    return names[max(code.builtinCode, code.deprecatedBuiltinCode)]


def _opcode(model, fb, name: str) -> int:
    """The index of builtin `name`'s operator code, added where the file has none."""
    number = getattr(fb.BuiltinOperator, name)
    for k, code in enumerate(model.operatorCodes):
        if max(code.builtinCode, code.deprecatedBuiltinCode) == number:
            return k
    code = fb.OperatorCodeT()
    code.builtinCode, code.deprecatedBuiltinCode, code.version = number, min(number, 127), 1
    model.operatorCodes.append(code)
    return len(model.operatorCodes) - 1


def _tensor(model, fb, subgraph, name: str, like=None, data: np.ndarray | None = None) -> int:
    """A new tensor of `subgraph` (its type and shape those of tensor `like`, or of `data`,
    which it then holds); its index."""
    t = fb.TensorT()
    t.name = name.encode()
    if data is not None:
        t.type = {np.dtype(np.int32): fb.TensorType.INT32}[data.dtype]
        t.shape = np.array(data.shape, np.int32)
        buffer = fb.BufferT()
        buffer.data = np.frombuffer(data.tobytes(), np.uint8)
        model.buffers.append(buffer)
        t.buffer = len(model.buffers) - 1
    else:
        t.type, t.shape, t.quantization = like.type, like.shape, like.quantization
        t.buffer = 0
    subgraph.tensors.append(t)
    return len(subgraph.tensors) - 1


def _op(model, fb, subgraph, name: str, inputs, outputs, options=None, kind=None) -> object:
    op = fb.OperatorT()
    op.opcodeIndex = _opcode(model, fb, name)
    op.inputs, op.outputs = np.array(inputs, np.int32), np.array(outputs, np.int32)
    if options is not None:
        op.builtinOptionsType, op.builtinOptions = kind, options
    return op


def _loops(model, fb):
    """The main graph's WHILE ops, with their cond and body subgraphs."""
    main = model.subgraphs[0]
    return [
        (op, model.subgraphs[op.builtinOptions.condSubgraphIndex],
         model.subgraphs[op.builtinOptions.bodySubgraphIndex])
        for op in main.operators
        if isinstance(op.builtinOptions, fb.WhileOptionsT)
    ]  # fmt: skip


def _carry(model, fb, loop, main_tensor: int) -> tuple[int, int]:
    """Main tensor `main_tensor` made one more loop variable of WHILE `loop`, which the body
    passes on unchanged; its tensor in the cond and in the body."""
    op, cond, body = loop
    main = model.subgraphs[0]
    like = main.tensors[main_tensor]
    out = _tensor(model, fb, main, f"while_carried_{len(op.inputs)}", like)
    op.inputs = np.append(op.inputs, main_tensor).astype(np.int32)
    op.outputs = np.append(op.outputs, out).astype(np.int32)
    ends = []
    for subgraph in (cond, body):
        arg = _tensor(model, fb, subgraph, f"carried_arg{len(subgraph.inputs)}", like)
        subgraph.inputs = np.append(subgraph.inputs, arg).astype(np.int32)
        ends.append(arg)
    body.outputs = np.append(body.outputs, ends[1]).astype(np.int32)
    return ends[0], ends[1]


def _counter_and_limit(model, fb, cond):
    """The cond's LESS of a counter against a constant: the op and the constant's value."""
    for o in cond.operators:
        if _kind(model, fb, o) == "LESS":
            limit = cond.tensors[int(o.inputs[1])]
            data = model.buffers[limit.buffer].data
            if data is not None and len(data):
                return o, int(np.frombuffer(bytes(data), np.int32)[0])
    raise AssertionError("no LESS of a counter against a constant")


def no_scalar_shapes(model, fb) -> None:
    """Every scalar tensor's shape left out, as converters of 2020-2021 wrote them."""
    for subgraph in model.subgraphs:
        for t in subgraph.tensors:
            if t.shape is not None and len(t.shape) == 0:
                t.shape = None
                if t.shapeSignature is not None and len(t.shapeSignature) == 0:
                    t.shapeSignature = None


def bound_by_a_carried_constant(model, fb) -> None:
    """Each loop's cond compares its counter with a loop variable the body passes on
    unchanged, from a constant of the main graph (the steps); the body's weights (the
    products' matrices, the bias they add) are loop variables carried from the main graph's
    constants too."""
    main = model.subgraphs[0]
    for loop in _loops(model, fb):
        op, cond, body = loop
        less, limit = _counter_and_limit(model, fb, cond)
        steps = _tensor(model, fb, main, "steps", data=np.array(limit, np.int32).reshape(()))
        arg, _ = _carry(model, fb, loop, steps)
        for o in cond.operators:  # every comparison with the constant, now with the carried one
            if _kind(model, fb, o) == "LESS":
                o.inputs = np.array([o.inputs[0], arg], np.int32)
        weights = sorted(
            {
                int(t)
                for o in body.operators
                if _kind(model, fb, o) in ("FULLY_CONNECTED", "ADD")
                for t in o.inputs
                if t >= 0
                and body.tensors[t].type == fb.TensorType.FLOAT32
                and len(body.tensors[t].shape) >= 1
                and model.buffers[body.tensors[t].buffer].data is not None
                and len(model.buffers[body.tensors[t].buffer].data)
            }
        )
        assert weights
        for t in weights:  # the body's constant becomes an argument, its data the main graph's
            held = body.tensors[t]
            constant = _tensor(model, fb, main, held.name.decode() + "_value", held)
            main.tensors[constant].buffer = held.buffer
            _, arg = _carry(model, fb, loop, constant)
            for o in body.operators:
                o.inputs = np.array([arg if int(i) == t else int(i) for i in o.inputs], np.int32)


def bound_by_the_input_length(model, fb) -> None:
    """Each loop bounded as `while_v2` writes `maximum_iterations` and Keras' `time <
    time_steps`: two loop variables the body passes on unchanged, each the first dimension of
    the time-major sequence (SHAPE -> STRIDED_SLICE in the main graph), the cond
    LOGICAL_AND(LESS(counter, maximum), LESS(time, steps))."""
    main = model.subgraphs[0]
    for loop in _loops(model, fb):
        op, cond, body = loop
        sequence = int(op.inputs[-1])  # the time-major input the loop gathers from
        less, _ = _counter_and_limit(model, fb, cond)
        lengths = []
        for what in ("max_iterations", "time_steps"):
            shape = _tensor(model, fb, main, f"{what}/Shape", data=np.zeros(3, np.int32))
            main.tensors[shape].buffer = 0  # (computed: no data)
            begin, end, strides = (
                _tensor(model, fb, main, f"{what}/{n}", data=np.array([v], np.int32))
                for n, v in (("begin", 0), ("end", 1), ("strides", 1))
            )
            length = _tensor(model, fb, main, what, data=np.array(0, np.int32).reshape(()))
            main.tensors[length].buffer = 0
            options = fb.StridedSliceOptionsT()
            options.shrinkAxisMask = 1
            out_type = fb.ShapeOptionsT()
            out_type.outType = fb.TensorType.INT32
            main.operators[0:0] = [
                _op(model, fb, main, "SHAPE", [sequence], [shape], out_type,
                    fb.BuiltinOptions.ShapeOptions),
                _op(model, fb, main, "STRIDED_SLICE", [shape, begin, end, strides], [length],
                    options, fb.BuiltinOptions.StridedSliceOptions),
            ]  # fmt: skip
            lengths.append(_carry(model, fb, loop, length)[0])
        # (SHAPE reads the sequence: it must run after the op that writes it)
        writer = next(
            k for k, o in enumerate(main.operators) if sequence in [int(t) for t in o.outputs]
        )
        moved = main.operators[:4]
        main.operators[: writer + 1] = main.operators[4 : writer + 1] + moved
        counter = int(cond.inputs[0])
        first = _tensor(model, fb, cond, "max_iterations/Less", cond.tensors[int(less.outputs[0])])
        both = _tensor(model, fb, cond, "LogicalAnd", cond.tensors[int(less.outputs[0])])
        less.inputs = np.array([less.inputs[0], lengths[1]], np.int32)
        cond.operators += [
            _op(model, fb, cond, "LESS", [counter, lengths[0]], [first]),
            _op(model, fb, cond, "LOGICAL_AND", [first, int(less.outputs[0])], [both]),
        ]
        cond.outputs = np.array([both], np.int32)


def body_declares_other_shapes(model, fb) -> None:
    """Every tensor a loop's cond and body compute or receive (no constant) declared one row
    of one column in each dimension, signature open: other shapes than the loop carries."""
    for _, cond, body in _loops(model, fb):
        for subgraph in (cond, body):
            for t in subgraph.tensors:
                held = model.buffers[t.buffer].data
                if (held is None or not len(held)) and t.shape is not None and len(t.shape):
                    t.shape = np.ones(len(t.shape), np.int32)
                    t.shapeSignature = -np.ones(len(t.shape), np.int32)


def second_input_declared_one(model, fb) -> None:
    """The second loop's input (the first one's outputs) declared [1, 1, 1], signature open."""
    (_, _, _), (second, _, _) = _loops(model, fb)
    t = model.subgraphs[0].tensors[int(second.inputs[-1])]
    t.shape, t.shapeSignature = np.ones(3, np.int32), -np.ones(3, np.int32)


def every_optional_field_absent(model, fb) -> None:
    """Every field the schema makes optional left out where the file allows it without
    changing what it computes: scalars' shapes, every name but the input's (tensors,
    subgraphs), the signatures, static shapes' signatures, empty quantization tables, operator codes'
    `builtin_code` (in `deprecated_builtin_code` alone, as files before TensorFlow 2.4 hold
    it) and each options table that holds its defaults."""
    no_scalar_shapes(model, fb)
    main_inputs = {int(i) for i in model.subgraphs[0].inputs}
    for g, subgraph in enumerate(model.subgraphs):
        subgraph.name = None
        for k, t in enumerate(subgraph.tensors):
            if not (g == 0 and k in main_inputs):
                t.name = None
            if t.shapeSignature is not None and (np.asarray(t.shapeSignature) >= 0).all():
                t.shapeSignature = None  # (absent: the shape is static)
            q = t.quantization
            if q is not None and (q.scale is None or not len(q.scale)):
                t.quantization = None
        for op in subgraph.operators:
            options = op.builtinOptions
            if options is not None and vars(options) == vars(type(options)()):
                op.builtinOptionsType, op.builtinOptions = 0, None
    model.signatureDefs = None
    for code in model.operatorCodes:
        if code.builtinCode < 127:
            code.deprecatedBuiltinCode, code.builtinCode = code.builtinCode, 0


# --------------------------------------------------------------------------------------------
# the fixtures: {name: (file, Keras model, its RNN layers in order)}

LSTM_STEPS = 269  # the stacked dynamic-range file's


def _convert(model, dynamic_range: bool = False) -> bytes:
    from tracer._tf import tf

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if dynamic_range:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    return converter.convert()


def _models() -> dict[str, tuple[object, bytes, bool]]:
    """Each Keras model converted, {name: (model, bytes, float file)}."""
    out = {}
    for framework, kind in (("tf-keras", "GRU"), ("keras3", "LSTM")):
        keras = keras_module(framework)
        inp = keras.Input((T, D), batch_size=1, name="seq")
        layer = getattr(keras.layers, kind)(4, return_sequences=True, name=kind.lower())
        model = keras.Model(inp, layer(inp))
        randomise(model, seed=3)
        out[f"{framework}-{kind.lower()}"] = (model, _convert(model), True)
    keras = keras_module("tf-keras")
    inp = keras.Input((T, D), batch_size=1, name="seq")
    conv = keras.layers.Conv1D(5, 2, padding="same", name="conv")(inp)
    gru = keras.layers.GRU(4, use_bias=False, return_sequences=True, name="gru")
    model = keras.Model(inp, gru(conv))
    randomise(model, seed=4)
    out["conv1d-gru"] = (model, _convert(model), True)
    keras = keras_module("keras3")
    inp = keras.Input((LSTM_STEPS, 32), batch_size=1, name="seq")
    low = keras.layers.LSTM(32, return_sequences=True, name="low")(inp)
    model = keras.Model(inp, keras.layers.LSTM(32, return_sequences=True, name="high")(low))
    randomise(model, seed=5)
    for w in model.weights:  # (weights of a trained model's size: the states stay in range)
        w.assign(np.asarray(w) * 0.4)
    out["stacked-lstm"] = (model, _convert(model, dynamic_range=True), False)
    return out


def _both(*changes):
    def change(model, fb):
        for c in changes:
            c(model, fb)

    return change


# name: (the model converted, how its file is rewritten)
PATTERNS = {
    "tf-keras-gru-no-scalar-shapes": ("tf-keras-gru", no_scalar_shapes),
    "conv1d-gru-no-bias-no-scalar-shapes": ("conv1d-gru", no_scalar_shapes),
    "stacked-dynamic-range-lstm-declared-1-1-1": (
        "stacked-lstm",
        _both(no_scalar_shapes, second_input_declared_one),
    ),
    "stacked-dynamic-range-lstm-bound-by-the-input-length": (
        "stacked-lstm",
        _both(no_scalar_shapes, second_input_declared_one, bound_by_the_input_length),
    ),
    "keras3-lstm-bound-by-a-carried-constant": ("keras3-lstm", bound_by_a_carried_constant),
    "tf-keras-gru-bound-by-the-input-length": ("tf-keras-gru", bound_by_the_input_length),
    "tf-keras-gru-body-declares-other-shapes": ("tf-keras-gru", body_declares_other_shapes),
    "keras3-lstm-body-declares-other-shapes": ("keras3-lstm", body_declares_other_shapes),
    "tf-keras-gru-every-optional-field-absent": ("tf-keras-gru", every_optional_field_absent),
}


@pytest.fixture(scope="module")
def models() -> dict[str, tuple[object, bytes, bool]]:
    return _models()


@pytest.fixture(scope="module")
def files(tmp_path_factory, models) -> dict[str, tuple[Path, object, bool]]:
    """Each of PATTERNS written: {name: (path, Keras model, float file)}."""
    root = tmp_path_factory.mktemp("older")
    out = {}
    for name, (base, change) in PATTERNS.items():
        model, data, floats = models[base]
        path = root / f"{name}.tflite"
        path.write_bytes(_rewritten(data, change))
        out[name] = (path, model, floats)
    return out


# --------------------------------------------------------------------------------------------
# the oracles


def _interpreters() -> list[type]:
    """TensorFlow Lite's interpreters: TensorFlow's, and LiteRT's where it is installed."""
    import warnings

    from tracer._tf import tf

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = [tf.lite.Interpreter]
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return found
    return [*found, Interpreter]


def _interpreted(data: bytes, x: np.ndarray) -> list[dict[str, np.ndarray]]:
    """What each interpreter computes from each row of `x`: the model's output ("output",
    [rows, steps, units]) and each loop's sequence input and h after every step ("loop K
    sequence", "loop K h": [rows, steps, ...], read with every tensor kept), by interpreter."""
    import warnings

    from tensorflow.lite.python import schema_py_generated as fb

    model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(data, 0))
    loops = []  # (each WHILE, the main tensor its body gathers a step from)
    for op in model.subgraphs[0].operators:
        if isinstance(op.builtinOptions, fb.WhileOptionsT):
            body = model.subgraphs[op.builtinOptions.bodySubgraphIndex]
            arguments = [int(t) for t in body.inputs]
            (read,) = [
                int(o.inputs[0])
                for o in body.operators
                if _kind(model, fb, o) == "GATHER" and int(o.inputs[0]) in arguments
            ]
            loops.append((op, int(op.inputs[arguments.index(read)])))
    out = []
    for make in _interpreters():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            it = make(model_content=data, experimental_preserve_all_tensors=True)
        it.allocate_tensors()
        (given,), (answer,) = it.get_input_details(), it.get_output_details()
        got: dict[str, list] = {}
        for row in x:
            it.set_tensor(given["index"], row[None])
            it.invoke()
            got.setdefault("output", []).append(it.get_tensor(answer["index"])[0])
            for k, (op, sequence) in enumerate(loops):
                for what, t in (("sequence", sequence), ("h", op.outputs[2])):
                    # (time-major [steps, 1, ...]: the sequence read, the outputs written)
                    got.setdefault(f"loop {k} {what}", []).append(it.get_tensor(int(t))[:, 0])
        out.append({k: np.stack(v) for k, v in got.items()})
    return out


def _recorded(out: Path) -> tuple[dict, dict, dict]:
    """A recording's cells (manifest), gates {(cell, gate): (pre, act)} and states {(cell,
    state): values}, each [examples, steps, units] by input position."""
    import pandas as pd

    cells = {c["name"]: c for c in json.loads((out / "manifest.json").read_text())["cells"]}
    gates, states = pd.read_parquet(out / "gates"), pd.read_parquet(out / "states")
    g, s = {}, {}
    for (cell, gate), rows in gates.groupby(["cell", "gate"], observed=True):
        rows = rows.sort_values(["example", "step", "unit"])
        n = (rows["example"].nunique(), rows["step"].nunique(), rows["unit"].nunique())
        g[cell, gate] = tuple(
            rows[c].to_numpy(np.float64).reshape(n) for c in ("preactivation", "activation")
        )
    for (cell, state), rows in states.groupby(["cell", "state"], observed=True):
        rows = rows.sort_values(["example", "step", "unit"])
        n = (rows["example"].nunique(), rows["step"].nunique(), rows["unit"].nunique())
        s[cell, state] = rows["value"].to_numpy(np.float64).reshape(n)
    return cells, g, s


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def _keras_equations(kind: str, gates: dict, h0: np.ndarray) -> dict[str, np.ndarray]:
    """The states Keras' cell equations give from the recorded gates' activations, each step
    from the last (Keras' documentation: LSTM c = f * c + i * g, h = o * tanh(c); GRU, z the
    update gate, h~ the candidate: h = z * h + (1 - z) * h~), [examples, steps, units]."""
    h, c = h0.copy(), np.zeros_like(h0)
    out = {"h": [], "c": []}
    for t in range(next(iter(gates.values()))[1].shape[1]):
        if kind == "LSTM":
            i, f, g, o = (gates[k][1][:, t] for k in "ifjo")
            c = f * c + i * g
            h = o * np.tanh(c)
        else:
            z, candidate = gates["u"][1][:, t], gates["c"][1][:, t]
            h = z * h + (1 - z) * candidate
        out["h"].append(h)
        out["c"].append(c)
    return {k: np.stack(v, axis=1) for k, v in out.items()}


def _keras_gates(layer, x: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each gate's preactivation and activation as Keras' documentation writes its cell, in
    float64 on the Keras layer's own weights, over `x` [examples, steps, features]: LSTM
    [i, f, g, o] = x K + h R + b; a GRU of reset_after (Keras' default) z, r = sigmoid(x K +
    b_x + h R + b_h) by block, h~ = tanh(x K_h + b_x,h + r * (h R_h + b_h,h)); no bias where
    the layer has none."""
    cell = layer.cell
    K, R = (np.asarray(w, np.float64) for w in (cell.kernel, cell.recurrent_kernel))
    u = R.shape[0]
    bias = np.zeros((2, 3 * u) if "GRU" in type(cell).__name__ else (4 * u,))
    if cell.use_bias:
        bias = np.asarray(cell.bias, np.float64)
    h, c = np.zeros((x.shape[0], u)), np.zeros((x.shape[0], u))
    labels = "ifjo" if "LSTM" in type(cell).__name__ else "urc"
    out: dict[str, list] = {g: [] for g in labels}
    for t in range(x.shape[1]):
        xt = x[:, t].astype(np.float64)
        if labels == "ifjo":
            pre = np.split(xt @ K + h @ R + bias, 4, axis=1)
            act = [_sigmoid(pre[0]), _sigmoid(pre[1]), np.tanh(pre[2]), _sigmoid(pre[3])]
            c = act[1] * c + act[0] * act[2]
            h = act[3] * np.tanh(c)
        else:
            xs, hs = np.split(xt @ K + bias[0], 3, axis=1), np.split(h @ R + bias[1], 3, axis=1)
            r = _sigmoid(xs[1] + hs[1])
            pre = [xs[0] + hs[0], xs[1] + hs[1], xs[2] + r * hs[2]]
            act = [_sigmoid(pre[0]), r, np.tanh(pre[2])]
            h = act[0] * h + (1 - act[0]) * act[2]
        for g, p, a in zip(labels, pre, act, strict=True):
            out[g].append((p, a))
    return {g: tuple(np.stack(v, axis=1) for v in zip(*out[g], strict=True)) for g in labels}


def _rnn_layers(model) -> list:
    return [layer for layer in model.layers if hasattr(layer, "cell")]


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PATTERNS)
def test_a_file_of_an_older_converter_records_what_its_interpreter_computes(files, tmp_path, name):
    """Each older form runs in TensorFlow Lite's interpreters (TensorFlow's and LiteRT's agree
    on it), and gatetrace records every loop of it (before: a TypeError, a refusal, or, for a
    body declaring other shapes, a cell of 1 unit): `inspect` lists each cell with its units
    and steps; each recorded h at every step is what the interpreter computed (the model's
    sequence output, the first loop's outputs read with every tensor kept) within float32
    rounding; the recorded gates give the recorded states and the interpreter's h by Keras'
    cell equations; in a float file each gate is Keras' equations on the Keras model's own
    weights, and the weights gatetrace reads are the Keras model's."""
    import pandas as pd

    path, model, floats = files[name]
    data = path.read_bytes()
    steps, features = (LSTM_STEPS, 32) if "stacked" in name else (T, D)
    x = np.random.RandomState(7).uniform(-1, 1, (3, steps, features)).astype(np.float32)
    oracles = _interpreted(data, x)
    for other in oracles[1:]:
        for k in oracles[0]:
            np.testing.assert_allclose(other[k], oracles[0][k], rtol=1e-5, atol=1e-6)
    oracle = oracles[0]

    shown = run_cli("inspect", str(path))
    assert shown.returncode == 0, shown.stderr
    layers = _rnn_layers(model)
    assert f"{len(layers)} recurrent op" in shown.stdout, shown.stdout
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "run"
    feed = "serving_default_seq" if "absent" in name else "seq"  # (no signature: the tensor's)
    done = run_cli("record", str(path), "--feed", f"{feed}={tmp_path / 'x.npy'}", "--out", str(out))
    assert done.returncode == 0, done.stderr
    cells, gates, states = _recorded(out)
    assert len(cells) == len(layers)
    # the cells in the order their loops run (each named by its body, or by its op)
    order = sorted(cells, key=lambda c: cells[c]["op"])
    weights = pd.read_parquet(out / "weights.parquet")
    for k, (cell, layer) in enumerate(zip(order, layers, strict=True)):
        units, kind = layer.cell.units, cells[cell]["kind"]
        assert (cells[cell]["units"], cells[cell]["steps"]) == (units, steps)
        assert f"{cell}" in shown.stdout
        h = oracle[f"loop {k} h"]
        np.testing.assert_allclose(states[cell, "h"], h, rtol=1e-5, atol=1e-6)
        if k == len(layers) - 1:
            np.testing.assert_allclose(states[cell, "h"], oracle["output"], rtol=1e-5, atol=1e-6)
        mine = {g: gates[cell, g] for g in cells[cell]["gates"]}
        for g, (pre, act) in mine.items():  # each activation the nonlinearity of its input
            want = np.tanh(pre) if cells[cell]["nonlinearities"][g] == "tanh" else _sigmoid(pre)
            np.testing.assert_allclose(act, want, rtol=1e-5, atol=1e-6)
        derived = _keras_equations(kind, mine, np.zeros_like(h[:, 0]))
        np.testing.assert_allclose(derived["h"], h, rtol=1e-5, atol=1e-5)
        if kind == "LSTM":
            np.testing.assert_allclose(derived["c"], states[cell, "c"], rtol=1e-5, atol=1e-5)
        if not floats:
            continue
        keras = _keras_gates(layer, oracle[f"loop {k} sequence"].astype(np.float64))
        for g, (pre, act) in keras.items():
            assert np.abs(mine[g][0] - pre).max() < 1e-5, g
            assert np.abs(mine[g][1] - act).max() < 1e-5, g
        # the weights read: the Keras layer's input and recurrent matrices, block by block
        for source, matrix in (
            ("input", layer.cell.kernel),
            ("recurrent", layer.cell.recurrent_kernel),
        ):
            matrix = np.asarray(matrix)
            for b, g in enumerate(cells[cell]["gates"]):
                got = weights[
                    (weights["cell"] == cell)
                    & (weights["gate"] == g)
                    & (weights["source"] == source)
                ]
                got = got.pivot(index="row", columns="unit", values="value").to_numpy()
                np.testing.assert_array_equal(got, matrix[:, b * units : (b + 1) * units])


def _limit_changed_by_the_body(model, fb) -> None:
    """The cond's limit a loop variable carried from a constant, which the body replaces by
    its counter each iteration."""
    bound_by_a_carried_constant(model, fb)
    ((op, cond, body),) = _loops(model, fb)
    less = next(o for o in cond.operators if _kind(model, fb, o) == "LESS")
    raised = next(o for o in body.operators if _kind(model, fb, o) == "ADD")
    m = [int(t) for t in cond.inputs].index(int(less.inputs[1]))
    body.outputs[m] = raised.outputs[0]


def _limit_computed(model, fb) -> None:
    """The cond's limit a loop variable carried unchanged from the sum of two constants."""
    main = model.subgraphs[0]
    ((op, cond, body),) = _loops(model, fb)
    less, limit = _counter_and_limit(model, fb, cond)
    half = _tensor(model, fb, main, "half", data=np.array(limit // 2, np.int32).reshape(()))
    total = _tensor(model, fb, main, "total", main.tensors[half])
    main.operators.insert(0, _op(model, fb, main, "ADD", [half, half], [total]))
    arg, _ = _carry(model, fb, (op, cond, body), total)
    less.inputs = np.array([less.inputs[0], arg], np.int32)


def _limit_an_open_dimension(model, fb) -> None:
    """The loop bounded by the input's length (`bound_by_the_input_length`), but each
    STRIDED_SLICE picks the sequence's last dimension, which the file leaves open."""
    bound_by_the_input_length(model, fb)
    main = model.subgraphs[0]
    for o in main.operators:
        if _kind(model, fb, o) == "STRIDED_SLICE":
            for t, value in zip(o.inputs[1:3], (2, 3), strict=True):
                buffer = model.buffers[main.tensors[int(t)].buffer]
                buffer.data = np.frombuffer(np.array([value], np.int32).tobytes(), np.uint8)
        if _kind(model, fb, o) == "SHAPE":
            main.tensors[int(o.inputs[0])].shapeSignature = np.array([T, 1, -1], np.int32)


@pytest.mark.parametrize(
    "change, says",
    [
        (
            _limit_changed_by_the_body,
            "compares its counter with loop variable 5, which the body changes",
        ),
        (
            _limit_computed,
            "compares its counter with loop variable 5, which the body passes on unchanged from total, "
            "neither a constant nor a dimension of a tensor's shape (SHAPE -> STRIDED_SLICE)",
        ),
        (
            _limit_an_open_dimension,
            "its limit is dimension 2 of transpose;1, whose shape the file leaves open "
            f"([{T}, 1, -1]) until it runs",
        ),
    ],
    ids=["changed-by-the-body", "computed", "an-open-dimension"],
)
def test_a_loop_whose_bound_the_file_does_not_give_is_refused_naming_what(
    models, tmp_path, change, says
):
    """A loop whose limit the file does not fix (one the body changes, one computed, the open
    dimension of a tensor the loop does not carry) is refused by `inspect` and `record` in one
    line saying what in the file gatetrace cannot read (before: "convert the model again",
    which someone holding only the file cannot do); nothing is written."""
    _, data, _ = models["tf-keras-gru"]
    path = tmp_path / "unbounded.tflite"
    path.write_bytes(_rewritten(data, change))
    np.save(tmp_path / "x.npy", np.zeros((2, T, D), np.float32))
    out = tmp_path / "out"
    for args in (
        ["inspect", str(path)],
        ["record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out)],
    ):
        done = run_cli(*args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("gatetrace: error: ")
        assert (
            "gatetrace cannot read from the file how many iterations the WHILE loop" in done.stderr
        )
        assert says in done.stderr, done.stderr
        assert "convert the model again" not in done.stderr
    assert not out.exists()


def test_finding_a_file_s_loops_runs_it_where_ctrl_c_reaches(files, monkeypatch):
    """Finding a file's loops runs its main subgraph once (what each loop carries): `record`
    (`find_all`) and `inspect` do it on the worker thread of `interrupts.stoppable`, so that
    Ctrl-C stops it as it stops the recording's own runs (before: on the main thread, deaf to
    Ctrl-C while the interpreter ran)."""
    import threading

    import tracer.find.lite
    import tracer.run.prepare
    from tracer.load.tflite import read

    path, _, _ = files["tf-keras-gru-bound-by-the-input-length"]
    found = tracer.find.lite.find_ops
    threads = []

    def find_ops(model):
        threads.append(threading.current_thread().name)
        return found(model)

    monkeypatch.setattr(tracer.run.prepare, "find_ops", find_ops)
    monkeypatch.setattr(tracer.find.lite, "find_ops", find_ops)
    (cell,) = tracer.run.prepare.find_all(read(path, path.name, None))
    assert cell.units == 4
    assert run_cli("inspect", str(path)).returncode == 0
    assert threads == ["gatetrace-call", "gatetrace-call"]
