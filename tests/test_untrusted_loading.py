"""Hostile model files: what loading runs is exactly what was checked.

Each test builds a model that tries to make gatetrace run an op it did not check
(through a SavedModel's init-op signature, a second meta graph, the Saver's fallback
for object-based checkpoints, a restore op reading another checkpoint, an op hidden in
a function or a While body) and proves the side effect did not happen: the marker
file it would write is absent, and the message is one line naming what was refused.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import tracer
from recorders.errors import ModelFormatError, UnsafeGraphError
from tests.conftest import CONFIGS, as_a_shell_starts_it, build, save, static_body
from tracer._tf import tf, v1
from tracer.cli import main


def _cli_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def _saved_model(tmp_path, builder_steps) -> str:
    """A SavedModel of a GRUCell graph; `builder_steps(builder, built, marker)` adds its meta graphs."""
    built = build(static_body(CONFIGS["GRUCell"]))
    path = tmp_path / "sm"
    marker = tmp_path / "pwned.txt"
    with built.graph.as_default():
        builder = v1.saved_model.Builder(str(path))
        builder_steps(builder, built, marker)
        builder.save()
    return str(path), marker


def _signature(built):
    return {
        "serving_default": v1.saved_model.predict_signature_def(
            {"x": built.inputs}, {"y": built.outputs[0]}
        )
    }


def test_an_init_op_given_as_the_init_signature_is_checked(tmp_path, capsys):
    def steps(builder, built, marker):
        evil = tf.io.write_file(str(marker), "pwned", name="evil_init")
        builder.add_meta_graph_and_variables(
            built.session, ["serve"], signature_def_map=_signature(built), main_op=evil
        )

    path, marker = _saved_model(tmp_path, steps)
    from tensorflow.core.protobuf import saved_model_pb2

    # Move the init op from the main-op collection to the signature TensorFlow's loader reads first.
    proto = saved_model_pb2.SavedModel.FromString(open(f"{path}/saved_model.pb", "rb").read())
    meta = proto.meta_graphs[0]
    del meta.collection_def["saved_model_main_op"]
    meta.signature_def["__saved_model_init_op"].outputs["__saved_model_init_op"].name = "evil_init"
    open(f"{path}/saved_model.pb", "wb").write(proto.SerializeToString())
    np.save(tmp_path / "x.npy", np.ones((2, 5, 4), np.float32))
    msg = _cli_error(
        capsys,
        ["record", path, "--feed", f"x={tmp_path / 'x.npy'}", "--out", str(tmp_path / "out")],
    )
    assert (
        "restoring its variables and running its init op would run 1 op" in msg
        and "evil_init (WriteFile)" in msg
    )
    assert not marker.exists() and not (tmp_path / "out").exists()
    assert main(["inspect", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["unsafe_ops"] == ["evil_init (WriteFile)"]
    assert not marker.exists()
    with tracer.load_model(path, allow_unsafe_ops=True):  # the check is what stopped it
        assert marker.read_text() == "pwned"


def test_the_meta_graph_checked_is_the_one_tagged_exactly(tmp_path, capsys):
    def steps(builder, built, marker):
        builder.add_meta_graph_and_variables(
            built.session, ["serve", "gpu"], signature_def_map=_signature(built)
        )
        evil = tf.io.write_file(str(marker), "pwned", name="evil_init")
        builder.add_meta_graph(["serve"], signature_def_map=_signature(built), main_op=evil)

    path, marker = _saved_model(tmp_path, steps)
    with pytest.raises(
        UnsafeGraphError, match=r"running its init op would run 1 op .*: evil_init \(WriteFile\)"
    ):
        tracer.load_model(path)
    assert not marker.exists()
    # the harmless one, by its exact tag set
    with tracer.load_model(path, tag="gpu,serve") as model:
        assert model.load_plan.init_op is None
    assert not marker.exists()
    msg = _cli_error(
        capsys, ["weights", path, "--tag", "gpu", "--out", str(tmp_path / "w.parquet")]
    )
    assert msg.endswith(
        "no meta graph tagged exactly 'gpu'; its tag sets are 'gpu,serve', 'serve': choose one with --tag (several tags comma-separated)"
    )


def test_an_object_based_checkpoint_is_named_and_the_saver_fallback_never_runs(
    tmp_path, monkeypatch
):
    built = build(static_body(CONFIGS["BasicLSTMCell"]))
    with built.graph.as_default():
        v1.train.Saver().export_meta_graph(str(tmp_path / "model.ckpt.meta"))
    # An object-based checkpoint at the same prefix, as tf.train.Checkpoint writes one.
    with tf.Graph().as_default(), v1.Session() as session:
        kernel = v1.Variable(np.ones((7, 12), np.float32), name="kernel")
        session.run(kernel.initializer)
        v1.train.Checkpoint(kernel=kernel).write(str(tmp_path / "model.ckpt"), session=session)

    def fallback(*args, **kwargs):
        raise AssertionError("Saver.restore was called")

    monkeypatch.setattr(v1.train.Saver, "restore", fallback)
    with pytest.raises(ModelFormatError) as err:
        tracer.load_model(tmp_path / "model.ckpt")
    msg = str(err.value)
    assert (
        "lacks 2 variables the graph restores: rnn/basic_lstm_cell/bias, rnn/basic_lstm_cell/kernel"
        in msg
    )
    assert (
        "(it is object-based, as tf.train.Checkpoint and Keras write them)" in msg
        and "\n" not in msg
    )


def test_a_checkpoint_of_another_shape_is_named_before_anything_runs(tmp_path):
    small = build(static_body(CONFIGS["LSTMCell"]))
    path = save(small, "checkpoint", tmp_path)
    other = build(
        lambda x: [
            v1.nn.static_rnn(v1.nn.rnn_cell.LSTMCell(5), tf.unstack(x, axis=1), dtype=tf.float32)[
                0
            ][-1]
        ]
    )
    with other.graph.as_default():
        v1.train.Saver().save(
            other.session, str(tmp_path / "other" / "model.ckpt"), write_meta_graph=False
        )
    import shutil

    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copy(tmp_path / "other" / f"model.ckpt{suffix}", f"{path}{suffix}")
    with pytest.raises(
        ModelFormatError,
        match=r"holds 2 in another shape: rnn/lstm_cell/bias \(graph \[12\], checkpoint \[20\]\)",
    ):
        tracer.load_model(path)


def test_a_restore_op_reading_another_checkpoint_is_refused(tmp_path, capsys):
    other = build(static_body(CONFIGS["GRUCell"]), seed=7)
    with other.graph.as_default():
        v1.train.Saver().save(other.session, str(tmp_path / "other" / "model.ckpt"))
    built = build(static_body(CONFIGS["GRUCell"]))
    with built.graph.as_default():
        saver = v1.train.Saver()
        variables = v1.global_variables()
        read = tf.raw_ops.RestoreV2(
            prefix=tf.constant(str(tmp_path / "other" / "model.ckpt"), name="other_checkpoint"),
            tensor_names=[v.op.name for v in variables],
            shape_and_slices=[""] * len(variables),
            dtypes=[v.dtype.base_dtype for v in variables],
            name="elsewhere",
        )
        evil = tf.group(
            *[v1.assign(v, r) for v, r in zip(variables, read, strict=True)], name="evil_restore"
        )
        saver.saver_def.restore_op_name = evil.name
        saver.save(built.session, str(tmp_path / "ckpt" / "model.ckpt"))
    path = str(tmp_path / "ckpt" / "model.ckpt")
    msg = _cli_error(capsys, ["weights", path, "--out", str(tmp_path / "w.parquet")])
    assert "restoring its variables would run 1 op" in msg
    assert (
        "elsewhere (RestoreV2 reading the path other_checkpoint:0, not the model's own checkpoint)"
        in msg
    )
    assert not (tmp_path / "w.parquet").exists()


def _write_in_function(marker):
    @tf.function
    def hidden(x):
        tf.io.write_file(str(marker), "pwned", name="evil_in_function")
        return x * 1.0

    return hidden


@pytest.mark.parametrize("where", ["function", "while_body"])
def test_unsafe_ops_inside_functions_and_while_bodies_are_found(where, tmp_path, capsys):
    marker = tmp_path / "pwned.txt"

    def body(x):
        if where == "function":
            x = _write_in_function(marker)(x)
        else:

            def step(i, y):
                with tf.control_dependencies(
                    [tf.io.write_file(str(marker), "pwned", name="evil_in_body")]
                ):
                    return i + 1, tf.identity(y)

            _, x = tf.while_loop(lambda i, y: i < 1, step, [tf.constant(0), x])
        outputs, _ = v1.nn.static_rnn(
            CONFIGS["GRUCell"].make(), tf.unstack(x, axis=1), dtype=tf.float32
        )
        return [outputs[-1]]

    path = save(build(body), "checkpoint", tmp_path)
    np.save(tmp_path / "x.npy", np.ones((2, 5, 4), np.float32))
    msg = _cli_error(
        capsys,
        ["record", path, "--feed", f"x={tmp_path / 'x.npy'}", "--out", str(tmp_path / "out")],
    )
    name = "evil_in_function" if where == "function" else "evil_in_body"
    assert (
        "fetching the gates and weights would run 1 op" in msg
        and f"{name} in function " in msg
        and "(WriteFile)" in msg
    )
    assert not marker.exists() and not (tmp_path / "out").exists()


def _endless(x):
    """A GRUCell graph whose input passes through a while loop that never ends (allowlisted ops only)."""
    _, x = tf.while_loop(
        lambda i, y: i >= 0, lambda i, y: (i + 1, y * 1.0), [tf.constant(0), x], name="endless"
    )
    outputs, _ = v1.nn.static_rnn(
        CONFIGS["GRUCell"].make(), tf.unstack(x, axis=1), dtype=tf.float32
    )
    return [outputs[-1]]


def _stuck(x):
    """A GRUCell graph whose input passes through one MatMul of two 12000 x 12000 matrices:
    a single kernel of 10 s or more, which no cancellation interrupts."""
    n = 12000
    big = tf.fill([n, n], 1e-9 + 0.0 * tf.reduce_sum(x))
    x = x + tf.reduce_sum(tf.matmul(big, big)) * 0.0
    outputs, _ = v1.nn.static_rnn(
        CONFIGS["GRUCell"].make(), tf.unstack(x, axis=1), dtype=tf.float32
    )
    return [outputs[-1]]


@pytest.fixture(scope="module")
def endless(tmp_path_factory):
    root = tmp_path_factory.mktemp("endless")
    np.save(root / "x.npy", np.ones((2, 5, 4), np.float32))
    return save(build(_endless), "checkpoint", root), str(root / "x.npy")


def test_an_endless_loop_is_stopped_by_the_timeout(endless, tmp_path, capsys):
    import time

    path, x = endless
    started = time.monotonic()
    msg = _cli_error(
        capsys,
        ["record", path, "--feed", f"x={x}", "--out", str(tmp_path / "out"), "--timeout", "1"],
    )
    assert time.monotonic() - started < 60
    assert not (tmp_path / "out").exists()
    assert msg == (
        "gatetrace: error: running the model took longer than --timeout 1 s and was stopped (a loop that never ends, or a "
        "batch too large for the limit); nothing was recorded: rerun with a larger --timeout (or a smaller --batch-size)"
    )


@pytest.mark.e2e
@pytest.mark.parametrize("body", [_endless, _stuck], ids=["endless loop", "long kernel"])
def test_two_ctrl_c_end_the_process_within_5_s_on_a_busy_machine(body, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    np.save(tmp_path / "x.npy", np.ones((2, 5, 4), np.float32))
    path, x = save(build(body), "checkpoint", tmp_path), str(tmp_path / "x.npy")
    # both cores loaded
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tracer.cli",
                "record",
                path,
                "--feed",
                f"x={x}",
                "--out",
                str(tmp_path / "out"),
            ],
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=as_a_shell_starts_it,
        )
        seen = ""
        while "recording" not in seen:  # the progress bar appears just before the first run
            seen += proc.stderr.read(1)
            assert proc.poll() is None, seen
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None  # the first Ctrl-C waits for the batch in flight
        proc.send_signal(signal.SIGINT)
        second = time.monotonic()
        assert proc.wait(timeout=30) == 130
        assert time.monotonic() - second < 5
    finally:
        for p in busy:
            p.kill()
    assert (
        "gatetrace: interrupted; finished batches are kept (record: rerun with --resume)"
        in proc.stderr.read()
    )


def test_functions_nothing_calls_are_not_held_against_the_model(tmp_path, capsys):
    """A function in the graph's library that the fetches never call (as a SavedModel's
    save functions) does not run, so it is not refused; one they call is."""
    marker = tmp_path / "pwned.txt"

    @tf.function
    def harmless(v):
        return v * 1.0

    def body(x):
        _write_in_function(marker)(tf.zeros([1]))  # in the library, called by nothing fetched
        x = harmless(x)  # a call in the gate path: its function is checked, and only it
        outputs, _ = v1.nn.static_rnn(
            CONFIGS["GRUCell"].make(), tf.unstack(x, axis=1), dtype=tf.float32
        )
        return [outputs[-1]]

    path = save(build(body), "checkpoint", tmp_path)
    assert main(["inspect", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["unsafe_ops"] == []
    np.save(tmp_path / "x.npy", np.ones((2, 5, 4), np.float32))
    assert (
        main(
            [
                "record",
                path,
                "--feed",
                f"x={tmp_path / 'x.npy'}",
                "--out",
                str(tmp_path / "out"),
                "--quiet",
            ]
        )
        == 0
    )
    assert not marker.exists()


@pytest.mark.parametrize(
    "how", ["tf.train.Checkpoint", "a folder of them", "a Saver without its meta graph"]
)
def test_a_checkpoint_of_weights_only_says_what_to_give_instead(how, tmp_path, capsys):
    """An object-based checkpoint (an .index and .data, no .meta) holds no graph: the line says
    so and names what to give, instead of saying the path does not exist."""
    with tf.Graph().as_default(), v1.Session() as session:
        kernel = v1.Variable(np.ones((7, 12), np.float32), name="kernel")
        session.run(kernel.initializer)
        if how == "a Saver without its meta graph":
            v1.train.Saver().save(session, str(tmp_path / "encoder"), write_meta_graph=False)
        else:
            v1.train.Checkpoint(kernel=kernel).write(str(tmp_path / "encoder"), session=session)
    if how == "a folder of them":
        (tmp_path / "checkpoint").write_text('model_checkpoint_path: "encoder"\n')
    path = str(tmp_path if how == "a folder of them" else tmp_path / "encoder")
    msg = _cli_error(capsys, ["inspect", path])
    assert (
        f"the checkpoint {tmp_path / 'encoder'} holds weights but no graph ({tmp_path / 'encoder'}.index and its data files, no "
        in msg
    )
    assert (
        "give the model's SavedModel (tf.saved_model.save, model.export), its Keras file (model.save)"
        in msg
    )


def test_a_checkpoint_that_never_saved_the_cell_weights_says_so(tmp_path, capsys):
    """A published checkpoint whose Saver was given a var_list without the LSTM's variables:
    TensorFlow's 'Could not find variable' becomes what it means."""

    def body(x):
        v1.get_variable("global_step", [], initializer=v1.zeros_initializer())
        return static_body(CONFIGS["BasicLSTMCell"])(x)

    built = build(body)
    with built.graph.as_default():
        step = [v for v in v1.global_variables() if v.op.name == "global_step"]
        v1.train.Saver(var_list=step).save(built.session, str(tmp_path / "model.ckpt"))
    np.save(tmp_path / "x.npy", np.ones((2, 5, 4), np.float32))
    for argv in (
        [
            "record",
            str(tmp_path / "model.ckpt"),
            "--feed",
            f"x={tmp_path / 'x.npy'}",
            "--out",
            str(tmp_path / "out"),
        ],
        ["weights", str(tmp_path / "model.ckpt"), "--out", str(tmp_path / "w.parquet")],
    ):
        msg = _cli_error(capsys, argv)
        assert (
            "gatetrace: error: the model's variable rnn/basic_lstm_cell/" in msg
            and "holds no value: the checkpoint has none for it" in msg
        )
    assert not (tmp_path / "out").exists() and not (tmp_path / "w.parquet").exists()
