"""TensorFlow Lite files at the command line, as users convert them and meet them.

- A file gatetrace refuses (a Flex op, a loop calling itself, an unrolled LSTM, a full-integer
  LSTM with an int8 cell state) is one line on stderr and exit 2 from every command that reads
  a model, on LiteRT's interpreter and on TensorFlow's, in a fresh process that sets no
  TF_CPP_MIN_LOG_LEVEL (TensorFlow's own start-up lines would show).
- One model converted float, dynamic range and full integer (float16 too, for a Keras 3 one)
  gives its cells the same names in every file: the name the file's signature gives the
  layer's output.
- A file's input is shown as the file declares it (a batch fixed at 1 is 1), and `inspect`
  and `record` say how many sequences its interpreter runs at a time; recorded so, a file's
  batch at a time.
- A replay whose NaN or infinities do not line up with the runtime's says what each holds,
  and where.

The files are converted here by TensorFlow's converter (`tf.lite.TFLiteConverter`); the
refused ones are real converters' output, or such a file edited through TensorFlow Lite's own
flatbuffer schema (the helpers of tests/test_tflite.py and tests/test_tflite_integer.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli
from tests.test_keras import keras_module

T, D, H = 5, 3, 4

# the commands that read a model, each with what it takes beyond the model (OUT: a new path)
COMMANDS = {
    "inspect": [],
    "record": ["--feed", "seq={x}", "--out", "{out}"],
    "weights": ["--out", "{out}.parquet"],
}


def _convert(model, **settings) -> bytes:
    from tracer._tf import tf

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    for name, value in settings.items():
        setattr(converter, name, value)
    return converter.convert()


def _one_layer(framework: str, layer: str, **options):
    keras = keras_module(framework)
    inputs = keras.Input((T, D), batch_size=1, name="seq")
    kind = {"lstm": keras.layers.LSTM, "gru": keras.layers.GRU}[layer]
    return keras.Model(inputs, kind(H, return_sequences=True, name=layer, **options)(inputs))


def _full_integer(model) -> bytes:
    """`model` converted for integer arithmetic (int8 activations and weights), fed and
    returning int8 codes."""
    from tracer._tf import tf

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.RandomState(0)
    converter.representative_dataset = lambda: (
        [rng.normal(0, 1, (1, T, D)).astype(np.float32)] for _ in range(20)
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.int8
    return converter.convert()


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    """Four files gatetrace refuses, by what each holds: {what: path}."""
    from tests.test_tflite import _body_calls_itself, _changed
    from tests.test_tflite_integer import _eight_bit_cell
    from tracer._tf import tf

    root = tmp_path_factory.mktemp("refused")
    # a Keras 3 LSTM's tensor lists kept as TensorFlow ops (Flex ops), as the converter suggests
    flex = tf.lite.TFLiteConverter.from_keras_model(_one_layer("keras3", "lstm"))
    flex.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS, tf.lite.OpsSet.SELECT_TF_OPS]
    flex._experimental_lower_tensor_list_ops = False
    (root / "flex.tflite").write_bytes(flex.convert())
    (root / "loop.tflite").write_bytes(_convert(_one_layer("keras3", "lstm")))
    (root / "calls itself.tflite").write_bytes(_changed(root, _body_calls_itself, "loop"))
    (root / "unrolled.tflite").write_bytes(_convert(_one_layer("tf-keras", "lstm", unroll=True)))
    (root / "integer.tflite").write_bytes(_full_integer(_one_layer("tf-keras", "lstm")))
    (root / "int8 cell.tflite").write_bytes(_changed(root, _eight_bit_cell, "integer"))
    np.save(root / "x.npy", np.zeros((2, T, D), np.float32))
    return {
        what: root / f"{what}.tflite" for what in ("flex", "calls itself", "unrolled", "int8 cell")
    }


# Run in a fresh process: each command on each file in turn, what each call writes to file
# descriptor 2 (TensorFlow's C++ logs too) kept apart; the results as JSON in a file.
_EACH_CALL = """
import json, os, sys, tempfile
from tracer.cli import main
said = []
for args in json.loads(sys.argv[1]):
    with tempfile.TemporaryFile() as err:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            code = main(args)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        said.append([code, err.read().decode(errors="replace")])
open(sys.argv[2], "w").write(json.dumps(said))
"""


@pytest.mark.parametrize("runtime", ["litert", "tensorflow"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_refuses_a_file_in_one_line_on_both_runtimes(
    refused, tmp_path, runtime, command
):
    """`inspect` with TensorFlow's interpreter printed TensorFlow's start-up lines (absl,
    oneDNN, cudart: 7 lines) before its error: it imported `tensorflow.lite` itself, past the
    filter `tracer._tf` applies and before the command line quietened TensorFlow. Each command,
    in a fresh process without TF_CPP_MIN_LOG_LEVEL, is one line and exit 2 on each file (the
    files rotate, so that each is some process's first, when TensorFlow loads); nothing is
    written."""
    files = list(refused.items())
    turn = list(COMMANDS).index(command) + 3 * (runtime == "tensorflow")
    files = files[turn % len(files) :] + files[: turn % len(files)]
    x = next(iter(refused.values())).parent / "x.npy"
    calls = [
        [command, str(path)]
        + [a.format(x=x, out=tmp_path / f"out {what}") for a in COMMANDS[command]]
        for what, path in files
    ]
    env = {
        k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "GATETRACE_DEBUG")
    }
    env["GATETRACE_LITE_RUNTIME"] = runtime
    done = subprocess.run(
        [sys.executable, "-c", _EACH_CALL, json.dumps(calls), str(tmp_path / "said.json")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    said = json.loads((tmp_path / "said.json").read_text())
    for (what, _), (code, err) in zip(files, said, strict=True):
        assert code == 2 and err.count("\n") == 1, (what, err)
        assert err.startswith("gatetrace: error: ") and err.endswith("\n"), (what, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["said.json"]


# the converter's settings of each kind of file: float, float16 weights, dynamic range (int8
# weights, float activations), full integer (int8 activations and weights)
QUANTISATIONS = ("float", "float16", "dynamic range", "full integer")
# what `inspect --json` says of each op's weights, by quantisation
NUMBERS = {
    "float": "float32",
    "float16": "float16",
    "dynamic range": "int8 dynamic range",
    "full integer": "int8 full integer",
}


def _quantised(model, quantisation: str, features: int) -> bytes:
    """`model` converted as `quantisation` says."""
    from tracer._tf import tf

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if quantisation != "float":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantisation == "float16":
        converter.target_spec.supported_types = [tf.float16]
    if quantisation == "full integer":
        rng = np.random.RandomState(0)
        converter.representative_dataset = lambda: (
            [rng.normal(0, 1, (1, T, features)).astype(np.float32)] for _ in range(30)
        )
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    return converter.convert()


def _named_model(framework: str, features: int, units: int):
    """An LSTM `lstm` below another, `top`; the model returns the sequence of the first and
    the last step of the second."""
    keras = keras_module(framework)
    init = keras.initializers
    inputs = keras.Input((T, features), batch_size=1, name="seq")
    below = keras.layers.LSTM(
        units,
        return_sequences=True,
        kernel_initializer=init.GlorotUniform(seed=1),
        recurrent_initializer=init.Orthogonal(seed=2),
        name="lstm",
    )(inputs)
    # (input weights that calibrate its cell state's scale within 2^-15 to 2^-9)
    top = keras.layers.LSTM(
        units,
        kernel_initializer=init.RandomUniform(-1, 1, seed=3),
        recurrent_initializer=init.Orthogonal(seed=4),
        name="top",
    )(below)
    return keras.Model(inputs, [below, top])


@pytest.mark.parametrize(
    "framework, quantisations",
    [
        ("tf-keras", ("float", "dynamic range", "full integer")),
        # (TensorFlow 2.21's converter crashes on a Keras 3 LSTM's full-integer conversion)
        ("keras3", ("float", "float16", "dynamic range")),
    ],
)
def test_one_model_s_files_name_its_cells_alike(tmp_path, framework, quantisations):
    """A tf-keras LSTM was the cell `lstm` in its float file and `StatefulPartitionedCall` in
    its full-integer one (its output reaches the signature's `lstm` through a DEQUANTIZE): the
    float, dynamic-range and full-integer files of one model give each cell the same name, the
    Keras layer's where the signature names the layer's output (the upper layer's reaches it
    through the slice of its last step, and a DEQUANTIZE); a Keras 3 model's loops likewise, in
    the files the converter writes. Each file holds the weights its quantisation says (matrices
    of 32 x 32: the converter quantises those of 1,024 weights and more)."""
    features = units = 32
    model = _named_model(framework, features, units)
    names, numbers = {}, {}
    for quantisation in quantisations:
        path = tmp_path / f"{quantisation}.tflite"
        path.write_bytes(_quantised(model, quantisation, features))
        shown = run_cli("inspect", str(path), "--json")
        assert shown.returncode == 0, (quantisation, shown.stderr)
        cells = json.loads(shown.stdout)["cells"]
        names[quantisation] = [c["name"] for c in cells]
        numbers[quantisation] = {c.get("numbers", "float32").split(" (")[0] for c in cells}
    assert numbers["dynamic range"] == {NUMBERS["dynamic range"]}
    if framework == "tf-keras":  # (a loop's float16 weights are widened before it: float32)
        assert numbers == {q: {NUMBERS[q]} for q in quantisations}
    assert all(found == names["float"] for found in names.values()), names
    assert len(names["float"]) == 2
    if framework == "tf-keras":  # one fused op a layer, named as the signature names it
        assert names["float"] == ["lstm", "top"]


def _free_batch(model, fb):
    """The input's shape signature made [-1, steps, features]: a batch the file leaves free."""
    main = model.subgraphs[0]
    t = main.tensors[int(main.inputs[0])]
    t.shapeSignature = np.array([-1, *list(t.shape)[1:]], np.int32)


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    """A tf-keras LSTM's file of each batch: fixed at 1, fixed at 3, left free (allocated as
    1): {name: (path, its input's shape as the file declares it)}."""
    from tests.test_tflite import _changed

    root = tmp_path_factory.mktemp("batches")
    keras = keras_module("tf-keras")
    for batch in (1, 3):
        inputs = keras.Input((T, D), batch_size=batch, name="seq")
        lstm = keras.layers.LSTM(
            H,
            return_sequences=True,
            kernel_initializer=keras.initializers.GlorotUniform(seed=1),
            bias_initializer=keras.initializers.RandomUniform(-0.5, 0.5, seed=2),
            name="lstm",
        )
        (root / f"fixed {batch}.tflite").write_bytes(_convert(keras.Model(inputs, lstm(inputs))))
    (root / "free.tflite").write_bytes(_changed(root, _free_batch, "fixed 1"))
    return {
        "fixed 1": (root / "fixed 1.tflite", [1, T, D]),
        "fixed 3": (root / "fixed 3.tflite", [3, T, D]),
        "free": (root / "free.tflite", [None, T, D]),
    }


@pytest.mark.parametrize(
    "name, says",
    [
        (
            "fixed 1",
            "fixes its batch at 1 (seq [1, 5, 3]): its interpreter runs one sequence at a time",
        ),
        (
            "fixed 3",
            "fixes its batch at 3 (seq [3, 5, 3]): its interpreter runs 3 sequences at a time",
        ),
        (
            "free",
            "leaves its batch free, allocated as 1 (seq [None, 5, 3]): its interpreter runs one "
            "sequence at a time",
        ),
    ],
)
def test_a_file_s_batch_is_shown_as_it_declares_it_and_recorded_in_it(
    batches, tmp_path, capfd, name, says
):
    """`inspect` listed a file's input as [None, 5, 3] where the file says [1, 5, 3], and
    `record` announced batches of 256 only: the input is shown as the file declares it (its
    shape signature, -1 shown None, where it has one), and both say how many sequences the
    interpreter runs at a time. Recorded 7 sequences, the file's batch at a time (the last
    rows of a batch of 3 filled): every output state h equals what TensorFlow's interpreter
    returns for the same rows, run by hand as the file takes them."""
    from tracer._tf import tf

    path, declared = batches[name]
    shown = run_cli("inspect", str(path))
    assert shown.returncode == 0, shown.stderr
    assert f"inputs: seq (float32, {declared}); record with --feed seq=FILE.npy" in shown.stdout
    assert shown.stdout.rstrip().endswith(f"{path} {says}")
    described = json.loads(run_cli("inspect", str(path), "--json").stdout)
    assert described["inputs"] == [{"name": "seq", "dtype": "float32", "shape": declared}]

    x = np.random.RandomState(4).uniform(-1, 1, (7, T, D)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run = tmp_path / "run"
    done = run_cli("record", str(path), "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(run))
    assert done.returncode == 0, done.stderr
    # (what the command line writes on standard error beside TensorFlow's logs: file descriptor 2)
    err = capfd.readouterr().err
    assert f"gatetrace: {path} {says}" in err.replace("\r", "\n").splitlines(), err
    it = tf.lite.Interpreter(model_path=str(path))
    it.allocate_tensors()
    into, out = it.get_input_details()[0], it.get_output_details()[0]
    per = into["shape"][0]
    wanted = []
    for start in range(0, len(x), per):
        rows = x[start : start + per]
        it.reset_all_variables()
        it.set_tensor(
            into["index"], np.concatenate([rows, np.zeros((per - len(rows), T, D), "f4")])
        )
        it.invoke()
        wanted.append(it.get_tensor(out["index"])[: len(rows)])
    states = pd.read_parquet(run / "states")
    h = states[states["state"] == "h"].sort_values(["example", "step", "unit"])
    got = h["value"].to_numpy().reshape(len(x), T, H)
    assert np.abs(got - np.concatenate(wanted)).max() < 1e-6


def _replayed(outputs: np.ndarray):
    """A replay whose outputs are `outputs` [examples, steps, units] and h its last step."""
    from tracer.values.replay import Replayed

    empty = np.zeros(outputs.shape[:2] + (1, outputs.shape[2]), np.float32)
    return Replayed(empty, empty, {"h": outputs}, outputs, {"h": outputs[:, -1]})


@pytest.mark.parametrize(
    "mine, theirs, says",
    [
        (
            np.nan,
            0.5,
            "replayed outputs are nan at example 1, step 2, unit 3 where the model's are 0.5",
        ),
        (
            0.25,
            np.nan,
            "replayed outputs are 0.25 at example 1, step 2, unit 3 where the model's are nan",
        ),
        (
            np.inf,
            -np.inf,
            "replayed outputs are inf at example 1, step 2, unit 3 where the model's are -inf",
        ),
        (
            np.inf,
            np.nan,
            "replayed outputs are inf at example 1, step 2, unit 3 where the model's are nan",
        ),
    ],
)
def test_a_replay_whose_nan_or_infinities_miss_the_runtime_s_says_where(mine, theirs, says):
    """Where the replay and the runtime disagree on a NaN or an infinity, `check` said they
    "differ ... by up to 0" (a NaN where the runtime has a number), or let it pass (a number,
    or the other infinity, where the runtime has NaN): it says what each holds, where, and how
    many such values there are. NaN in both, or the same infinity, is no difference."""
    from recorders.errors import ReplayMismatchError
    from tracer.values.replay import check

    theirs_out = np.random.RandomState(0).uniform(-1, 1, (3, T, H)).astype(np.float32)
    theirs_out[2, 4] = [np.nan, np.inf, -np.inf, np.nan]  # the same in both: no difference
    mine_out = theirs_out.copy()
    check("lstm", _replayed(mine_out), theirs_out, {"h": theirs_out[:, -1]})
    mine_out[1, 2, 3], theirs_out[1, 2, 3] = mine, theirs
    mine_out[0, 3, 0], theirs_out[0, 3, 0] = mine, theirs  # a second one, at a later step
    with pytest.raises(ReplayMismatchError) as raised:
        check("lstm", _replayed(mine_out), theirs_out, {})
    said = str(raised.value)
    assert said.startswith(
        f"cell lstm: {says} (2 values where a NaN or an infinity of one is not the other's)"
    )
    assert "by up to" not in said and "\n" not in said
