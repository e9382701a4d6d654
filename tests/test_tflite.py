"""TensorFlow Lite files: checked as data before anything is allocated, described in one line,
not recorded yet (`tracer.load.tflite`).

The files are converted here with `tf.lite.TFLiteConverter`, as a user converts them: a
tf-keras LSTM (one fused UNIDIRECTIONAL_SEQUENCE_LSTM op), a Keras 3 LSTM (a WHILE loop of
builtin ops) and the first quantised for its weights (dynamic range). Hostile files are
those, changed through TensorFlow's own flatbuffer schema.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli

T, D, H = 5, 3, 4


def _converted(framework: str, quantise: bool = False) -> bytes:
    """A one-LSTM model converted; quantised for its weights, with 64 units of 32 features (the
    converter leaves a matrix of fewer than 1,024 weights as it is)."""
    from tests.test_keras import keras_module
    from tracer._tf import tf

    keras = keras_module(framework)
    inp = keras.Input((T, 32 if quantise else D), batch_size=1, name="seq")
    model = keras.Model(inp, keras.layers.LSTM(64 if quantise else H, return_sequences=True)(inp))
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if quantise:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    return converter.convert()


@pytest.fixture(scope="module")
def lite(tmp_path_factory):
    root = tmp_path_factory.mktemp("tflite")
    for name, framework, quantise in (
        ("fused", "tf-keras", False),
        ("loop", "keras3", False),
        ("quantised", "tf-keras", True),
    ):
        (root / f"{name}.tflite").write_bytes(_converted(framework, quantise))
    return root


def _one_line(done):
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("gatetrace: error: ")
    return done.stderr


@pytest.mark.parametrize(
    "name, features, says",
    [
        (
            "fused",
            D,
            "UNIDIRECTIONAL_SEQUENCE_LSTM (4 units, 3 inputs, float32 weights, activation tanh",
        ),
        ("loop", D, "a WHILE loop whose body"),
        ("quantised", 32, "UNIDIRECTIONAL_SEQUENCE_LSTM (64 units, 32 inputs, int8 weights"),
    ],
)
def test_a_tflite_file_is_named_and_described_in_one_line(lite, tmp_path, name, features, says):
    """`inspect` and `record` say it is TensorFlow Lite, what it holds, and that recording it is
    not done yet (before: "is in no format gatetrace reads")."""
    path = str(lite / f"{name}.tflite")
    shown = _one_line(run_cli("inspect", path))
    assert (
        f"a TensorFlow Lite file (inputs serving_default_seq:0 [1, {T}, {features}] float32; "
        in shown
    )
    assert says in shown
    assert "does not record them yet" in shown
    np.save(tmp_path / "x.npy", np.zeros((1, T, features), np.float32))
    out = tmp_path / "out"
    refused = _one_line(
        run_cli("record", path, "--feed", f"seq={tmp_path / 'x.npy'}", "--out", str(out))
    )
    assert says in refused and not out.exists()


def _changed(lite, change) -> bytes:
    """The fused file, its parsed model changed by `change`, written again."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as fb

    data = (lite / "fused.tflite").read_bytes()
    model = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(data, 0))
    change(model, fb)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


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
    ],
)
def test_a_hostile_flatbuffer_is_refused_before_anything_is_allocated(lite, tmp_path, change, says):
    path = tmp_path / "hostile.tflite"
    path.write_bytes(_changed(lite, change))
    shown = _one_line(run_cli("inspect", str(path)))
    assert says in shown and "nothing was loaded" in shown


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
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in _one_line(run_cli("inspect", str(link)))


@settings(max_examples=60, derandomize=True, deadline=None)
@given(data=st.data())
def test_any_damage_is_the_model_or_one_clean_error(lite, data):
    """Bytes of the fused file flipped, cut or inserted anywhere: `check_tflite` returns a
    model that passed every check, or refuses in one line; nothing else escapes, nothing hangs."""
    from pathlib import Path

    from recorders.errors import ModelFormatError
    from tracer.load.tflite import check_tflite, describe

    original = (lite / "fused.tflite").read_bytes()
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
        model = check_tflite(path, "damaged.tflite", memory=1 << 26)
    except ModelFormatError as err:
        assert "\n" not in str(err)
    else:
        describe(model)  # what passed the checks can be described
