"""Full-integer TensorFlow Lite LSTMs (int8 activations and weights, an int16 cell state):
recorded as TensorFlow Lite's integer kernel computes them (`tracer.values.integer`, on
`tracer.values.fixed_point`), refused in one line where gatetrace does not reproduce it.

The files are converted here as users convert them: a tf-keras LSTM (and a stack of two) with
`Optimize.DEFAULT`, a representative dataset and int8 builtins, with float or int8 inputs and
outputs. The oracles: TensorFlow's own interpreter run on the file (the recording runs LiteRT's),
each sequence alone, whose outputs the recorded output state equals code for code; the LSTM's
equations and the functions' definitions, which the recorded gates and states follow within
the kernel's fixed-point rounding; the file's codes and scales read through TensorFlow's own
flatbuffer schema.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli
from tests.test_keras import keras_module

T, D, H = 7, 5, 6


def _integer_file(inputs: str, layers: int, seed: int, reach: float) -> tuple[bytes, object]:
    """tf-keras LSTMs converted for integer arithmetic; `inputs` "int8" or "float" (the
    file quantises and dequantises at its ends); input weights drawn from [-reach, reach]
    (Keras' default where 0)."""
    from tracer._tf import tf

    keras = keras_module("tf-keras")
    init = keras.initializers
    x = inp = keras.Input((T, D), batch_size=1, name="seq")
    for k in range(layers):
        x = keras.layers.LSTM(
            H,
            return_sequences=True,
            kernel_initializer=init.RandomUniform(-reach, reach, seed=seed + k)
            if reach
            else init.GlorotUniform(seed=seed + k),
            recurrent_initializer=init.Orthogonal(seed=seed + 10 + k),
            bias_initializer=init.RandomUniform(-0.5, 0.5, seed=seed + 20 + k),
            name=f"lstm{k}",
        )(x)
    model = keras.Model(inp, x)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.RandomState(seed)
    converter.representative_dataset = lambda: (
        [rng.normal(0, 1, (1, T, D)).astype(np.float32)] for _ in range(30)
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if inputs == "int8":
        converter.inference_input_type = converter.inference_output_type = tf.int8
    return converter.convert(), model


# (inputs, layers, reach): "saturating" has weights whose products pass Q3.12's edge, 8
FILES = {
    "int8 io": ("int8", 1, 0),
    "float io": ("float", 1, 0),
    "stack": ("float", 2, 0),
    "saturating": ("float", 1, 3.0),
}


@pytest.fixture(scope="module")
def integer(tmp_path_factory):
    root = tmp_path_factory.mktemp("integer")
    for seed, (name, (inputs, layers, reach)) in enumerate(FILES.items()):
        data, model = _integer_file(inputs, layers, seed, reach)
        (root / f"{name}.tflite").write_bytes(data)
        if name == "stack":  # the model converted, as a user keeps it
            model.save(root / "stack.h5")
    return root


def _schema(path):
    from tensorflow.lite.python import schema_py_generated as fb

    return fb, fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(path.read_bytes(), 0))


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


@pytest.mark.parametrize("name", list(FILES))
def test_a_full_integer_lstm_records_what_its_integer_kernel_computed(integer, tmp_path, name):
    """Every output state equals, code for code, what TensorFlow's interpreter returns for each
    sequence alone (the last op's: the file's output; the first op's: its tensor, kept); the
    gates give the cell state by the LSTM's equation within one step of its scale, and the
    output state within half a step of its scale and tanh's fixed-point error; each activation
    is the sigmoid (tanh for j) of its preactivation within that error; every value is a code
    of the scale the manifest gives, and W per gate is the file's codes times their scale."""
    from recorders import Recording
    from tracer._tf import tf

    path = integer / f"{name}.tflite"
    rng = np.random.RandomState(3)
    x = rng.normal(0, 1.5, (30, T, D)).astype(np.float32)
    x[4] *= 6  # inputs far beyond the representative data: the products saturate
    x[5] = 0
    it = tf.lite.Interpreter(model_path=str(path), experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    into, out = it.get_input_details()[0], it.get_output_details()[0]
    if into["dtype"] == np.int8:  # the file is fed int8 codes: the input's own quantisation
        scale, zero = into["quantization"]
        x = np.clip(np.round(x / scale) + zero, -128, 127).astype(np.int8)
    np.save(tmp_path / "x.npy", x)
    run = tmp_path / "run"
    done = run_cli("record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(run))
    assert done.returncode == 0, done.stderr
    fb, model = _schema(path)
    ops = [
        k
        for k, op in enumerate(model.subgraphs[0].operators)
        if model.operatorCodes[op.opcodeIndex].builtinCode
        == fb.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM
    ]
    details = {d["index"]: d for d in it.get_tensor_details()}
    wanted: dict[int, list] = {k: [] for k in ops}
    returned = []  # the file's own output (its DEQUANTIZE's, where it returns floats)
    for row in x:
        it.reset_all_variables()
        it.set_tensor(into["index"], row[None])
        it.invoke()
        for k in ops:
            wanted[k].append(it.get_tensor(int(model.subgraphs[0].operators[k].outputs[0]))[0])
        returned.append(it.get_tensor(out["index"])[0])
    rec = Recording(run)
    manifest = json.loads((run / "manifest.json").read_text())
    assert len(rec.cells) == len(ops)
    for cell, k in zip(rec.cells, ops, strict=True):
        op = model.subgraphs[0].operators[k]
        want = np.stack(wanted[k]).astype(np.int64)  # [examples, steps, units] int8 codes
        described = next(c for c in manifest["cells"] if c["name"] == cell)
        assert described["numbers"].startswith("int8 full integer")
        h_tensor = details[int(op.outputs[0])]
        q = described["quantisation"]
        assert (q["h"]["scale"], q["h"]["zero_point"]) == pytest.approx(h_tensor["quantization"])
        assert q["c"]["scale"] == details[int(op.inputs[19])]["quantization"][0]
        assert np.array_equal(rec.state_codes(cell, "h"), want)  # code for code
        if k == ops[-1] and out["dtype"] == np.float32:  # the file's DEQUANTIZE, equal
            assert np.array_equal(rec.state_array(cell, "h"), np.stack(returned))
        a = {g: rec.gate_array(cell, g).astype(np.float64) for g in "ifjo"}
        z = {g: rec.gate_array(cell, g, "preactivation").astype(np.float64) for g in "ifjo"}
        for g in "ifjo":
            codes = rec.gate_codes(cell, g)
            assert codes.dtype == np.int16 and not codes.mask.any()
            np.testing.assert_array_equal(codes * 2.0**-15, a[g])
            f = np.tanh if g == "j" else _sigmoid
            np.testing.assert_allclose(a[g], f(z[g]), atol=4e-4)
        if name == "saturating":  # preactivations saturated at Q3.12's edges, as the op's
            assert min(z[g].min() for g in z) == -8 and max(z[g].max() for g in z) == 32767 / 4096
        c = rec.state_array(cell, "c").astype(np.float64)
        step = q["c"]["scale"]
        c_prev = np.concatenate([np.zeros_like(c[:, :1]), c[:, :-1]], axis=1)
        edge = 32767 * step
        np.testing.assert_allclose(
            c, np.clip(a["f"] * c_prev + a["i"] * a["j"], -edge - step, edge), atol=step * 1.01
        )
        h = rec.state_array(cell, "h").astype(np.float64)
        h_scale, h_zero = q["h"]["scale"], q["h"]["zero_point"]
        # int8 holds [-128, 127] - zero point steps: beyond, the output saturates
        low, high = (-128 - h_zero) * h_scale, (127 - h_zero) * h_scale
        np.testing.assert_allclose(
            h, np.clip(a["o"] * np.tanh(c), low, high), atol=h_scale / 2 + 4e-4 + 1e-7
        )
        # W of the forget gate: the file's int8 codes (input 2) times their one scale
        w = model.subgraphs[0].tensors[int(op.inputs[2])]
        assert w.type == fb.TensorType.INT8
        assert described["scales"]["W_f"] == w.quantization.scale[0]  # as inspect shows them
        file_w = np.frombuffer(bytes(model.buffers[w.buffer].data), np.int8).reshape(list(w.shape))
        weights = pd.read_parquet(run / "weights.parquet")
        got = weights[
            (weights["cell"] == cell) & (weights["gate"] == "f") & (weights["source"] == "input")
        ]
        got = got.pivot(index="row", columns="unit", values="value").to_numpy()
        np.testing.assert_array_equal(
            got, file_w.T.astype(np.float32) * np.float32(w.quantization.scale[0])
        )


def test_the_fixed_point_functions_are_sigmoid_and_tanh_within_their_rounding():
    """On every int16 input, gemmlowp's fixed-point logistic (Q3.12 in, as the kernel's gates)
    and tanh (0 to 6 integer bits, as the kernel's cell gate and cell state) are the functions
    within 6.5 and 12.5 steps of 2^-15 (what gemmlowp's own tests allow tanh on int16: 12 steps
    from the rounded value); 0 is 1/2 and 0 exactly."""
    from tracer.values.fixed_point import logistic16, tanh16

    x = np.arange(-(2**15), 2**15)
    got = logistic16(x, 3)
    assert got.min() >= 0 and got.max() <= 2**15 - 1 and got[x == 0] == 2**14
    assert np.abs(got / 2**15 - _sigmoid(x / 2**12)).max() < 6.5 / 2**15
    for bits in range(7):
        got = tanh16(x, bits)
        assert got[x == 0] == 0 and np.array_equal(tanh16(-x[1:], bits), -got[1:])  # odd
        assert np.abs(got / 2**15 - np.tanh(x / 2.0 ** (15 - bits))).max() < 12.5 / 2**15


def test_quantized_multipliers_round_as_exact_arithmetic_does():
    """A real factor as the kernel holds it (an int32 mantissa in [2^30, 2^31) and a shift) is
    the factor to 2^-31 of itself, and x times it, for int32 x, is the exact rational product
    rounded to nearest (within one: the kernel rounds twice)."""
    from fractions import Fraction

    from tracer.values.fixed_point import (
        multiply_by_quantized_multiplier,
        quantize_multiplier,
    )

    rng = np.random.default_rng(0)
    for real in np.exp(rng.uniform(np.log(2.0**-20), np.log(4.0), 200)):
        mantissa, shift = quantize_multiplier(float(real))
        assert 2**30 <= mantissa < 2**31
        held = Fraction(mantissa, 2**31) * Fraction(2) ** shift
        assert abs(held / Fraction(float(real)) - 1) <= Fraction(1, 2**30)
        x = rng.integers(-(2**24), 2**24, 50)
        got = multiply_by_quantized_multiplier(x, mantissa, shift)
        exact = [round(int(v) * held) for v in x]
        assert np.abs(got - np.array(exact)).max() <= 1
    assert quantize_multiplier(0.0) == (0, 0)


def test_a_replay_that_differs_by_one_code_is_refused(integer):
    """The replay is checked code for code: the same cell with its hidden zero point one off
    (every output a code away) is refused in one line, and nothing is recorded."""
    from dataclasses import replace

    from recorders.errors import ReplayMismatchError
    from tracer.find.lite import find_ops
    from tracer.load.tflite import read
    from tracer.values.lite import LitePlan

    path = integer / "float io.tflite"
    model = read(path, str(path), None)
    (cell,) = find_ops(model)
    assert cell.integer is not None
    x = np.random.RandomState(0).normal(0, 1, (3, T, D)).astype(np.float32)
    LitePlan(model, [cell]).fetch({model.inputs[0]: x})  # as the file says: equal
    wrong = replace(cell, integer=replace(cell.integer, hidden_zero=cell.integer.hidden_zero + 1))
    with pytest.raises(
        ReplayMismatchError,
        match=r"integer kernel's outputs differ from the op's in [\d,]+ of 126 codes",
    ):
        LitePlan(model, [wrong]).fetch({model.inputs[0]: x})


def _edited(source, change, path):
    """The file `source`, parsed with TensorFlow's own schema, changed by `change(model, fb)` and
    written to `path`."""
    import flatbuffers

    fb, model = _schema(source)
    change(model, fb)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    path.write_bytes(bytes(builder.Output()))
    return path


def _sixteen_bit(model, fb):
    """The LSTM's input declared int16 (16x8 quantisation: int16 activations)."""
    model.subgraphs[0].tensors[
        int(model.subgraphs[0].operators[0].inputs[0])
    ].type = fb.TensorType.INT16


def _peepholes(model, fb):
    """The LSTM given peepholes (inputs 9-11: here its biases' tensors, [units] each)."""
    op = model.subgraphs[0].operators[0]
    inputs = list(op.inputs)
    inputs[9:12] = inputs[12:15]
    op.inputs = np.array(inputs, np.int32)


def _eight_bit_cell(model, fb):
    """The LSTM given 12 intermediate tensors (the 8x8_8 kernel's: an int8 cell state)."""
    op = model.subgraphs[0].operators[0]
    op.intermediates = np.array(list(op.intermediates) * 3)[:12].astype(np.int32)


@pytest.mark.parametrize(
    "change, says",
    [
        (
            _sixteen_bit,
            "its input is int16 (16x8 quantisation: int16 activations); gatetrace reproduces TensorFlow Lite's "
            "integer LSTM kernel for int8 activations only",
        ),
        (
            _peepholes,
            "a full-integer LSTM with peepholes, whose integer arithmetic gatetrace does not reproduce yet",
        ),
        (_eight_bit_cell, "a full-integer LSTM with 12 intermediate tensors"),
    ],
)
def test_what_the_integer_replay_does_not_reproduce_is_one_line(integer, tmp_path, change, says):
    """`inspect` and `record` name what is not reproduced; nothing is written."""
    from tests.test_tflite import _one_line

    path = _edited(integer / "int8 io.tflite", change, tmp_path / "changed.tflite")
    assert says in _one_line(run_cli("inspect", str(path)))
    np.save(tmp_path / "x.npy", np.zeros((1, T, D), np.int8))
    out = tmp_path / "out"
    refused = _one_line(
        run_cli("record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out))
    )
    assert says in refused and not out.exists()


def test_compare_of_the_model_and_its_integer_file_equals_numpy(integer, tmp_path):
    """The Keras model against its full-integer file: both cells paired in order, every
    figure per gate equal to numpy's over the two recordings' gate tables, and the gate whose
    difference passes the tolerance first is the one numpy finds."""
    from recorders import Recording
    from tests.test_compare import _oracle

    x = np.random.RandomState(8).normal(0, 1, (12, T, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    for name, source in (("keras", "stack.h5"), ("integer", "stack.tflite")):
        done = run_cli(
            "record", str(integer / source), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(tmp_path / name), "--quiet"
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    a, b = tmp_path / "keras", tmp_path / "integer"
    done = run_cli("compare", str(a), str(b), "--tolerance", "0.01", "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    pairs = dict(zip(Recording(a).cells, Recording(b).cells, strict=True))
    gates, _, first = _oracle(a, b, pairs, 0.01)
    got = pd.DataFrame(shown["gates"]).set_index(["cell", "gate"])
    assert sorted(got.index) == sorted(gates.index) and len(got) == 8
    for column in ("max_abs", "mean_abs", "rmse", "units_beyond"):
        np.testing.assert_allclose(got[column], gates.loc[got.index, column], rtol=1e-9, atol=1e-15)
    # integer arithmetic is seen: every gate differs, by more than a float file's rounding
    assert (got["max_abs"] > 1e-3).all() and (got["max_abs"] < 0.5).all()
    assert shown["first_beyond"] == {
        "cell": first["cell"],
        "gate": first["gate"],
        "step": int(first["step"]),
    }


def test_a_loop_computing_its_gates_in_integers_is_one_line(tmp_path):
    """A WHILE loop whose gates are int8 (a full-integer body, as others' converters write
    them) is refused naming it: read as floats, its codes would be recorded as values."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as fb

    from tests.test_tflite import _converted, _one_line

    data = _converted("keras3")
    model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(data, 0))
    (loop,) = [
        op
        for op in model.subgraphs[0].operators
        if op.builtinOptionsType == fb.BuiltinOptions.WhileOptions
    ]
    body = model.subgraphs[loop.builtinOptions.bodySubgraphIndex]
    logistic = next(
        op
        for op in body.operators
        if model.operatorCodes[op.opcodeIndex].builtinCode == fb.BuiltinOperator.LOGISTIC
    )
    body.tensors[int(logistic.outputs[0])].type = fb.TensorType.INT8
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    path = tmp_path / "loop.tflite"
    path.write_bytes(bytes(builder.Output()))
    assert (
        "computes its gates in integers (quantised for integer arithmetic), which gatetrace does not record in loops yet"
        in _one_line(run_cli("inspect", str(path)))
    )


def test_inspect_says_how_a_full_integer_cell_holds_its_values(integer):
    """`inspect` names the kernel, each matrix's scale and each value's integer type and scale."""
    shown = run_cli("inspect", str(integer / "int8 io.tflite"))
    assert shown.returncode == 0, shown.stderr
    assert (
        "weights int8 full integer (int8 activations and weights, int16 cell state" in shown.stdout
    )
    assert (
        "codes preactivation=int16 x 0.0002441 activation=int16 x 3.052e-05 c=int16 x "
        in shown.stdout
    )
    assert " scales W_i=" in shown.stdout and "inputs: seq (int8, [1, 7, 5])" in shown.stdout


def test_contributions_of_a_quantised_op_are_refused(integer, tmp_path):
    """A quantised op's preactivation is an integer product (here: the full-integer kernel's),
    which float parts of the dequantised weights miss by up to a quantisation step (seen: 3e-4):
    `--values contributions` is refused in one line, before anything is written."""
    from tests.test_tflite import _one_line

    np.save(tmp_path / "x.npy", np.zeros((2, T, D), np.float32))
    out = tmp_path / "out"
    refused = _one_line(
        run_cli(
            "record",
            str(integer / "float io.tflite"),
            "--feed",
            f"seq={tmp_path / 'x.npy'}",
            "--out",
            str(out),
            "--values",
            "preactivation,activation,contributions",
        )  # fmt: skip
    )
    assert "compute their products on quantised values" in refused and not out.exists()


_SHAPE = "not a type int8 or int16 with a positive scale and a zero point of that type"


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda q: q["activation"].update(scale=-1.0), _SHAPE),
        (lambda q: q["activation"].update(type="int32"), _SHAPE),
        (lambda q: q["activation"].update(zero_point=40000), _SHAPE),
        (lambda q: q["activation"].update(scale=True), _SHAPE),
        (lambda q: q["activation"].update(scale=3e-5), "not an int16 code of scale 3e-05"),
        # every value within 1/1000 of a step of code 0, which stands for 0: not what they are
        (lambda q: q["activation"].update(scale=1e4), "not an int16 code of scale 10000"),
        (
            lambda q: q["activation"].update(scale=2.0**-15 * 4096),
            "not an int16 code of scale 0.125",
        ),
        (
            lambda q: q.pop("activation"),
            "says how c, h, inputs, preactivation are held, not activation",
        ),
    ],
)
def test_codes_follow_only_a_quantisation_that_holds(integer, tmp_path, change, says):
    """A recording's manifest may come from anyone: `gate_codes` reads its quantisation only
    where it is of the form gatetrace writes (an int8 or int16 type, a positive finite scale,
    a zero point of the type) and the values are codes of it, each given back by its code
    (a scale far larger than the values' would make every code 0); anything else is one line."""
    import shutil

    from recorders import Recording
    from recorders.errors import SelectionError

    x = np.random.RandomState(2).normal(0, 1, (4, T, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run = tmp_path / "run"
    done = run_cli(
        "record", str(integer / "float io.tflite"), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(run), "--quiet"
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cell = Recording(run).cells[0]
    assert Recording(run).gate_codes(cell, "f").dtype == np.int16  # as written: codes
    changed = tmp_path / "changed"
    shutil.copytree(run, changed)
    manifest = json.loads((changed / "manifest.json").read_text())
    change(next(c for c in manifest["cells"] if c["name"] == cell)["quantisation"])
    (changed / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SelectionError) as refused:
        Recording(changed).gate_codes(cell, "f")
    assert says in str(refused.value) and "\n" not in str(refused.value)


def _scale(at, value: float):
    def change(model, fb):
        """The scale of the LSTM's input `at` (or of its hidden intermediate) made `value`."""
        op = model.subgraphs[0].operators[0]
        tensor = int(op.intermediates[4]) if at == "hidden" else int(op.inputs[at])
        model.subgraphs[0].tensors[tensor].quantization.scale = np.array([value], np.float32)

    return change


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    "at, value, says",
    [
        (
            0,
            NAN,
            ("the scale of its input (", ") is nan; a quantisation scale is a positive finite"),
        ),
        (0, 0.0, ("the scale of its input (", ") is 0; a quantisation scale is a positive finite")),
        (18, INF, ("the scale of its output state (", ") is inf; a quantisation scale is")),
        (19, -1.0, ("the scale of its cell state (", ") is -1; a quantisation scale is")),
        ("hidden", NAN, ("the scale of its hidden intermediate (", ") is nan; a quantisation")),
        (2, 0.0, ("the scale of its input weights (", ") is 0; a quantisation scale is")),
        (6, -2.0, ("the scale of its recurrent weights (", ") is -2; a quantisation scale is")),
        (13, INF, ("the scale of its biases (", ") is inf; a quantisation scale is")),
        # finite, but the kernel's rescale would be a shift of 32 bits or more on int32
        (0, 1e30, ("kernel would rescale gate i's input products by 1.3", "2^31 or more")),
        ("hidden", 1e-30, ("kernel would rescale the output state by 9.3", "2^31 or more")),
    ],
)
def test_a_scale_that_is_no_positive_finite_number_is_one_line(integer, tmp_path, at, value, says):
    """Every scale the integer kernel reads (and the biases', by which W, U, b are shown) must
    be a positive finite number, its rescales ones its int32 arithmetic defines: `inspect` and
    `record` refuse any other in one line saying what the file holds (before: a NaN or an
    infinite scale was an internal ValueError or OverflowError, a scale of 0 "int8 with 1
    scales", a matrix's scale of 0 or less recorded), and nothing is written."""
    from tests.test_tflite import _one_line

    path = _edited(integer / "int8 io.tflite", _scale(at, value), tmp_path / "scale.tflite")
    inspected = _one_line(run_cli("inspect", str(path)))
    np.save(tmp_path / "x.npy", np.zeros((1, T, D), np.int8))
    out = tmp_path / "out"
    refused = _one_line(
        run_cli("record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out))
    )
    for line in (inspected, refused):
        assert all(part in line for part in says), line
    assert not out.exists()


_UNIT = 2  # the unit whose input gate's int32 sum wraps


def _wrapping(model, fb):
    """Unit 2's input-gate bias made 2^31 - 1, and its input gate's recurrent row, its cell
    gate's rows and bias 0: its preactivation is its input part alone, its j is 0 (so that its
    input gate reaches no output: c = f x c + i x 0)."""
    sub = model.subgraphs[0]
    op = sub.operators[0]
    for at, dtype, value in ((12, np.int32, 2**31 - 1), (5, np.int8, 0), (3, np.int8, 0),
                             (7, np.int8, 0), (14, np.int32, 0)):  # fmt: skip
        t = sub.tensors[int(op.inputs[at])]
        held = np.frombuffer(bytes(model.buffers[t.buffer].data), dtype).copy()
        held.reshape([int(d) for d in t.shape])[_UNIT] = value
        model.buffers[t.buffer].data = np.frombuffer(held.tobytes(), np.uint8)


def test_a_gate_sum_wraps_around_in_int32_as_the_kernel_sums_it(integer, tmp_path):
    """TensorFlow Lite's integer kernel sums each gate's products and bias in int32, which
    wraps around: with unit 2's input-gate bias 2^31 - 1 (`_wrapping`), the sum turns negative
    wherever the input adds to it, and that gate is near 0 there (before: summed in int64, it
    was recorded near 1 everywhere, and the outputs, which it does not reach, still checked).

    The oracles. (1) The kernel's sum written here in numpy int32 from the file's codes (the
    bias plus (input code - zero point) x matrix code, wrapping): its sign gives unit 2's
    preactivation, saturated at -8 or 8 - 2^-12 (its size times the rescale is far beyond
    Q3.12's range either way), and its gate is the sigmoid of it. (2) The interpreter's own
    codes, where it keeps them: after a run, its scratch tensors hold the last step's cell
    gate j, output gate o and i x j rounded to the cell state's scale (its input gate's buffer
    is overwritten by tanh(c) at the end of each step: the interpreter keeps no input gate);
    TensorFlow's interpreter run on every prefix of every sequence gives them for every step,
    and the recorded j, o and i x j (i of every unit whose j is not 0) equal them, every code."""
    from recorders import Recording
    from tracer._tf import tf

    path = _edited(integer / "int8 io.tflite", _wrapping, tmp_path / "wrapping.tflite")
    x = np.random.RandomState(5).randint(-128, 128, (12, T, D)).astype(np.int8)
    np.save(tmp_path / "x.npy", x)
    run = tmp_path / "run"
    done = run_cli("record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(run))
    assert done.returncode == 0, done.stderr
    rec = Recording(run)
    (cell,) = rec.cells
    got = {g: np.asarray(rec.gate_codes(cell, g)).astype(np.int64) for g in "ifjo"}
    pre = np.asarray(rec.gate_codes(cell, "i", "preactivation")).astype(np.int64)

    fb, model = _schema(path)
    sub = model.subgraphs[0]
    op = sub.operators[0]
    tensor = [sub.tensors[int(t)] for t in op.inputs]
    w = np.frombuffer(bytes(model.buffers[tensor[1].buffer].data), np.int8).reshape(H, D)
    bias = np.frombuffer(bytes(model.buffers[tensor[12].buffer].data), np.int32)[_UNIT]
    zero = int(tensor[0].quantization.zeroPoint[0])
    products = ((x.astype(np.int32) - zero) * w[_UNIT].astype(np.int32)).sum(-1, dtype=np.int32)
    total = products + bias  # int32 + int32: wraps, as the kernel's sum
    assert total.dtype == np.int32
    rescale = tensor[0].quantization.scale[0] * tensor[1].quantization.scale[0] * 2.0**12
    assert (np.abs(total.astype(np.float64)) * rescale > 2**16).all()  # saturated either way
    wrapped = total < 0
    assert 0.2 < wrapped.mean() < 0.8  # both ways in the batch
    np.testing.assert_array_equal(pre[..., _UNIT], np.where(wrapped, -32768, 32767))
    np.testing.assert_allclose(
        got["i"][..., _UNIT] / 2**15,
        _sigmoid(np.where(wrapped, -8.0, 32767 / 4096)),
        atol=6.5 / 2**15,
    )
    assert (got["j"][..., _UNIT] == 0).all()

    exponent = round(float(np.log2(tensor[19].quantization.scale[0])))  # cell state: 2^exponent
    shift = 30 + exponent
    count = len(sub.tensors)
    checked = 0
    for steps in range(1, T + 1):
        it = tf.lite.Interpreter(model_path=str(path), experimental_preserve_all_tensors=True)
        into = it.get_input_details()[0]["index"]
        it.resize_tensor_input(into, [1, steps, D], strict=False)
        it.allocate_tensors()
        # the tensors the interpreter adds to the file's: the op's scratch buffers, in order
        scratch = [d for d in it.get_tensor_details() if d["index"] >= count]
        assert [(d["dtype"], list(d["shape"])) for d in scratch] == [
            (np.int16, [1, H])] * 4 + [(np.int8, [1, H]), (np.int32, [1, H])]  # fmt: skip
        for row, sequence in enumerate(x):
            it.reset_all_variables()
            it.set_tensor(into, sequence[None, :steps])
            it.invoke()
            _, product, j, o = (it.get_tensor(d["index"])[0].astype(np.int64) for d in scratch[:4])
            t = steps - 1
            np.testing.assert_array_equal(got["j"][row, t], j)
            np.testing.assert_array_equal(got["o"][row, t], o)
            # i x j, rounded to nearest (halves away from zero) by 2^shift, cast to int16
            v = got["i"][row, t] * got["j"][row, t]
            rounded = np.sign(v) * ((np.abs(v) + (1 << (shift - 1))) >> shift)
            np.testing.assert_array_equal(rounded.astype(np.int16), product)
            checked += 1
    assert checked == len(x) * T


def _small_cell_file() -> bytes:
    """Two stacked tf-keras LSTMs converted for integer arithmetic (int8 inputs and outputs),
    the second with small weights and biases: its cell state stays within 0.5 on the
    representative data, so the converter calibrates its scale at 2^-16."""
    from tracer._tf import tf

    keras = keras_module("tf-keras")
    init = keras.initializers
    x = inp = keras.Input((T, D), batch_size=1, name="seq")
    x = keras.layers.LSTM(
        H,
        return_sequences=True,
        kernel_initializer=init.GlorotUniform(seed=0),
        recurrent_initializer=init.Orthogonal(seed=10),
        bias_initializer=init.RandomUniform(-0.5, 0.5, seed=20),
        name="lstm0",
    )(x)
    x = keras.layers.LSTM(
        H,
        return_sequences=True,
        kernel_initializer=init.RandomUniform(-0.1, 0.1, seed=1),
        recurrent_initializer=init.RandomUniform(-0.1, 0.1, seed=11),
        bias_initializer=init.RandomUniform(-0.2, 0.2, seed=21),
        name="lstm1",
    )(x)
    converter = tf.lite.TFLiteConverter.from_keras_model(keras.Model(inp, x))
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.RandomState(0)
    converter.representative_dataset = lambda: (
        [rng.normal(0, 1, (1, T, D)).astype(np.float32)] for _ in range(30)
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.int8
    return converter.convert()


def test_a_cell_state_scale_below_2_to_the_15_records_what_the_kernel_computes(tmp_path):
    """A cell state calibrated at scale 2^-16 (`_small_cell_file`): TensorFlow Lite's kernel
    accepts it (its Prepare takes any power of two up to 2^-9) and computes with it, so the
    file records (before: refused as outside 2^-15 to 2^-9). Its tanh of the cell state, with
    15 - 16 integer bits, is one the kernel does not compute: it writes nothing, and the
    output gate is multiplied by the input gate its buffer still holds.

    The oracles: TensorFlow's interpreter run on every prefix of every sequence. After each
    run, the second op's output (the file's output) holds every step's output state, its
    cell state variable the last step's cell state, and its scratch tensors the last step's
    input gate (left in the buffer tanh did not write), the product i x j rounded to the cell
    state's scale, j and o: the recorded codes equal them all, every step, every unit."""
    from recorders import Recording
    from tracer._tf import tf

    path = tmp_path / "small cell.tflite"
    path.write_bytes(_small_cell_file())
    fb, model = _schema(path)
    sub = model.subgraphs[0]
    ops = [
        op
        for op in sub.operators
        if model.operatorCodes[op.opcodeIndex].builtinCode
        == fb.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM
    ]
    assert len(ops) == 2
    cell_scale = sub.tensors[int(ops[1].inputs[19])].quantization.scale[0]
    assert cell_scale == 2.0**-16  # as the converter calibrated it
    x = np.random.RandomState(7).randint(-128, 128, (6, T, D)).astype(np.int8)
    np.save(tmp_path / "x.npy", x)
    run = tmp_path / "run"
    done = run_cli("record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(run))
    assert done.returncode == 0, done.stderr
    rec = Recording(run)
    cell = rec.cells[1]
    got = {g: np.asarray(rec.gate_codes(cell, g)).astype(np.int64) for g in "ifjo"}
    h = np.asarray(rec.state_codes(cell, "h")).astype(np.int64)
    c = np.asarray(rec.state_codes(cell, "c")).astype(np.int64)

    count = len(sub.tensors)
    checked = 0
    for steps in range(1, T + 1):
        it = tf.lite.Interpreter(model_path=str(path), experimental_preserve_all_tensors=True)
        into = it.get_input_details()[0]["index"]
        it.resize_tensor_input(into, [1, steps, D], strict=False)
        it.allocate_tensors()
        # the tensors the interpreter adds to the file's: each op's scratch buffers, in order
        scratch = [d for d in it.get_tensor_details() if d["index"] >= count]
        assert [(d["dtype"], list(d["shape"])) for d in scratch] == 2 * (
            [(np.int16, [1, H])] * 4 + [(np.int8, [1, H]), (np.int32, [1, H])])  # fmt: skip
        for row, sequence in enumerate(x):
            it.reset_all_variables()
            it.set_tensor(into, sequence[None, :steps])
            it.invoke()
            t = steps - 1
            output = it.get_tensor(int(ops[1].outputs[0]))[0].astype(np.int64)
            np.testing.assert_array_equal(h[row, :steps], output)
            state = it.get_tensor(int(ops[1].inputs[19])).reshape(-1).astype(np.int64)
            np.testing.assert_array_equal(c[row, t], state)
            i, product, j, o = (
                it.get_tensor(d["index"])[0].astype(np.int64) for d in scratch[6:10]
            )
            np.testing.assert_array_equal(got["i"][row, t], i)
            np.testing.assert_array_equal(got["j"][row, t], j)
            np.testing.assert_array_equal(got["o"][row, t], o)
            # i x j, rounded to nearest (halves away from zero) by 2^(30 - 16), cast to int16
            v = got["i"][row, t] * got["j"][row, t]
            rounded = np.sign(v) * ((np.abs(v) + (1 << 13)) >> 14)
            np.testing.assert_array_equal(rounded.astype(np.int16), product)
            checked += 1
    assert checked == len(x) * T


def _zero_point(at, value: int):
    def change(model, fb):
        """The zero point of the LSTM's input `at` made `value`."""
        tensor = int(model.subgraphs[0].operators[0].inputs[at])
        model.subgraphs[0].tensors[tensor].quantization.zeroPoint = np.array([value], np.int64)

    return change


@pytest.mark.parametrize(
    "change, says",
    [
        (
            _scale(0, 1e38),
            "has the quantisation scale 1e+38, by which its int8 codes stand for more",
        ),
        (
            _scale(2, 1e38),
            "has the quantisation scale 1e+38, by which its int8 codes stand for more",
        ),
        (_scale(13, 3e29), "has the quantisation scale 3e+29, by which its int32 codes stand for"),
        (_scale(0, 1e-45), "has the quantisation scale 1.4013e-45, a denormal float32"),
        (_scale("hidden", 1e-45), "has the quantisation scale 1.4013e-45, a denormal float32"),
        (_zero_point(0, 200), "has the zero point 200, which is no int8 code (-128 to 127)"),
        (_zero_point(0, -129), "has the zero point -129, which is no int8 code (-128 to 127)"),
    ],
)
def test_a_quantisation_no_kernel_computes_with_is_refused_by_the_check(
    integer, tmp_path, change, says
):
    """A scale whose codes stand for more than float32 holds, a denormal scale (whose
    reciprocal, the kernels' rescale, overflows) and a zero point outside its type's codes
    are refused by `inspect` and `record` before anything runs, in one line naming the
    tensor, with no warning printed (before: an internal OverflowError, numpy's overflow
    warnings, or a zero point accepted until a recording's codes were read)."""
    from tests.test_tflite import _one_line

    path = _edited(integer / "int8 io.tflite", change, tmp_path / "odd.tflite")
    inspected = _one_line(run_cli("inspect", str(path)))
    np.save(tmp_path / "x.npy", np.zeros((1, T, D), np.int8))
    out = tmp_path / "out"
    refused = _one_line(
        run_cli("record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out))
    )
    for line in (inspected, refused):
        assert says in line and "of subgraph 0" in line and "nothing was loaded" in line, line
    assert not out.exists()


def test_scales_whose_product_passes_float32_are_one_line(integer, tmp_path):
    """Input and weight scales each within float32, whose product the kernel's float32
    arithmetic makes infinite, are refused in one line by `inspect` (before: an internal
    OverflowError and numpy's overflow warning)."""
    from tests.test_tflite import _one_line

    def change(model, fb):
        _scale(0, 1e36)(model, fb)
        _scale(1, 1e36)(model, fb)

    path = _edited(integer / "int8 io.tflite", change, tmp_path / "odd.tflite")
    line = _one_line(run_cli("inspect", str(path)))
    assert "integer LSTM kernel would rescale gate i's input products by inf, 2^31 or more" in line
