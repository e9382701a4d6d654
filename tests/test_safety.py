"""Untrusted graphs: ops that touch files, run Python or print are refused before anything runs."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tracer
from recorders import Recording
from recorders.errors import UnsafeGraphError
from tests.conftest import CONFIGS, build, save
from tracer._tf import tf, v1
from tracer.cli import main

CALLS: list[int] = []  # the PyFunc's Python function appends here when it runs


def hostile(kind: str, target):
    """A BasicLSTMCell graph whose input passes through an op of `kind`, named `hostile`."""

    def body(x):
        if kind == "PyFunc":
            x = v1.py_func(lambda a: CALLS.append(1) or a, [x], tf.float32, name="hostile")
            x.set_shape([None, 5, 4])
        else:
            op = {
                "WriteFile": lambda: tf.io.write_file(str(target), "pwned", name="hostile"),
                "ReadFile": lambda: tf.io.read_file(str(target.parent / "x.npy"), name="hostile"),
                "PrintV2": lambda: tf.print("pwned", name="hostile"),
            }[kind]()
            with tf.control_dependencies([op]):
                x = tf.identity(x)
        outputs, _ = v1.nn.static_rnn(
            CONFIGS["BasicLSTMCell"].make(), tf.unstack(x, axis=1), dtype=tf.float32
        )
        return [outputs[-1]]

    return body


@pytest.mark.parametrize("fmt", ["checkpoint", "savedmodel", "frozen"])
@pytest.mark.parametrize("kind", ["WriteFile", "ReadFile", "PyFunc", "PrintV2"])
def test_record_refuses_unsafe_ops_in_the_gate_path(kind, fmt, tmp_path, capsys):
    target = tmp_path / "pwned.txt"
    path = save(build(hostile(kind, target)), fmt, tmp_path)
    np.save(tmp_path / "x.npy", np.ones((2, 5, 4), np.float32))
    CALLS.clear()
    argv = [
        "record",
        path,
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "out"),
        "--quiet",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    # (PrintV2's StringFormat only computes, by the rule imports are judged by: not listed)
    found = [f"hostile ({kind})"]
    # not marked stateful: TensorFlow could run it while importing, so it is refused before
    if kind == "ReadFile":
        assert err == (
            f"gatetrace: error: {path}: importing its graph could run 1 op that TensorFlow evaluates while it infers shapes "
            "and that do more than compute: hostile (ReadFile); nothing was imported. If you trust this model, pass --allow-unsafe-ops"
        )
        assert main(["inspect", path, "--json"]) == 2
        assert "hostile (ReadFile); nothing was imported" in capsys.readouterr().err
        assert main(["inspect", path, "--json", "--allow-unsafe-ops"]) == 0
    else:
        assert err == (
            f"gatetrace: error: {path}: fetching the gates and weights would run {len(found)} op{'s' * (len(found) > 1)} outside "
            f"the allowlist of pure math, array, variable and control-flow ops: {', '.join(found)}; nothing was run. "
            "If you trust this model, pass --allow-unsafe-ops"
        )
        assert main(["inspect", path, "--json"]) == 0
    assert not target.exists() and not CALLS and not (tmp_path / "out").exists()
    assert json.loads(capsys.readouterr().out)["unsafe_ops"] == found
    if kind == "WriteFile":  # the flag really is what stopped it
        assert main([*argv, "--allow-unsafe-ops"]) == 0
        assert target.read_text() == "pwned"


def test_a_checkpoint_whose_restore_writes_a_file_is_not_restored(tmp_path, capsys):
    built = build(
        lambda x: [
            v1.nn.static_rnn(CONFIGS["GRUCell"].make(), tf.unstack(x, axis=1), dtype=tf.float32)[0][
                -1
            ]
        ]
    )
    target = tmp_path / "pwned.txt"
    with built.graph.as_default():
        saver = v1.train.Saver()
        write = tf.io.write_file(str(target), "pwned", name="evil_write")
        evil = tf.group(
            built.graph.get_operation_by_name(saver.saver_def.restore_op_name),
            write,
            name="evil_restore",
        )
        saver.saver_def.restore_op_name = evil.name
        saver.save(built.session, str(tmp_path / "model.ckpt"))
    with pytest.raises(
        UnsafeGraphError,
        match=r"restoring its variables would run 1 op .*: evil_write \(WriteFile\); nothing was run",
    ):
        tracer.load_model(tmp_path / "model.ckpt")
    assert not target.exists()
    # inspect runs nothing and reports it
    assert main(["inspect", str(tmp_path / "model.ckpt")]) == 0
    out = capsys.readouterr().out
    assert (
        "unsafe ops that loading or recording would run (1): evil_write (WriteFile)" in out
        and not target.exists()
    )
    with tracer.load_model(tmp_path / "model.ckpt", allow_unsafe_ops=True):
        assert target.read_text() == "pwned"


def test_safe_models_say_so(tmp_path, capsys):
    path = save(
        build(
            lambda x: [
                v1.nn.static_rnn(
                    CONFIGS["LSTMCell"].make(), tf.unstack(x, axis=1), dtype=tf.float32
                )[0][-1]
            ]
        ),
        "savedmodel",
        tmp_path,
    )
    assert main(["inspect", path]) == 0
    assert (
        "unsafe ops: none (loading and recording run only allowlisted ops)"
        in capsys.readouterr().out
    )


def test_dropout_between_stacked_cells_records_with_keep_prob_1(tmp_path, capsys):
    """MultiRNNCell of DropoutWrapper cells, as TF1 scripts built them: the upper cell's input
    passes through dropout's RandomUniform, which reads and writes nothing. Fed keep_prob=1.0
    (the example of `record --help`), the gates equal a float64 GRU written here."""
    R = v1.nn.rnn_cell

    def body(x):
        keep = v1.placeholder_with_default(0.5, [], name="keep_prob")
        cells = R.MultiRNNCell(
            [R.DropoutWrapper(R.GRUCell(3), output_keep_prob=keep) for _ in range(2)]
        )
        return [v1.nn.static_rnn(cells, tf.unstack(x, axis=1), dtype=tf.float32)[0][-1]]

    built = build(body)
    path = save(built, "checkpoint", tmp_path)
    xs = np.random.RandomState(4).uniform(-1, 1, (3, 5, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    argv = [
        "record",
        path,
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--feed",
        "keep_prob=1.0",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
    ]
    assert main(argv) == 0, capsys.readouterr().err

    def sigmoid(v):
        return 1 / (1 + np.exp(-v))

    inputs = xs.astype(np.float64)
    for layer in range(2):
        w = {
            k: v.astype(np.float64)
            for k, v in built.weights[f"rnn/multi_rnn_cell/cell_{layer}/gru_cell"].items()
        }
        h, outs, u_act = np.zeros((3, 3)), [], []
        for t in range(5):
            r, u = np.split(
                sigmoid(np.concatenate([inputs[:, t], h], 1) @ w["kernel"] + w["bias"]), 2, axis=1
            )
            c = np.tanh(
                np.concatenate([inputs[:, t], r * h], 1) @ w["candidate_kernel"]
                + w["candidate_bias"]
            )
            h = u * h + (1 - u) * c
            outs.append(h)
            u_act.append(u)
        cell = f"rnn/multi_rnn_cell/cell_{layer}/gru_cell"
        np.testing.assert_allclose(
            Recording(tmp_path / "rec").gate_array(cell, "u", "activation"),
            np.stack(u_act, 1),
            atol=1e-5,
        )
        inputs = np.stack(outs, 1)


def test_inspect_says_exactly_what_each_command_will_do(tmp_path, capsys):
    """One of two cells reads its input through a WriteFile: `weights` runs nothing unsafe,
    `record` is refused, `record --cells` of the other cell is not; inspect says each, and each
    command then does what it said."""
    target = tmp_path / "pwned.txt"

    def body(x):
        with tf.control_dependencies([tf.io.write_file(str(target), "pwned", name="evil_write")]):
            tainted = tf.identity(x)
        clean, _ = v1.nn.static_rnn(
            CONFIGS["GRUCell"].make(), tf.unstack(x, axis=1), dtype=tf.float32, scope="clean"
        )
        dirty, _ = v1.nn.static_rnn(
            CONFIGS["GRUCell"].make(), tf.unstack(tainted, axis=1), dtype=tf.float32, scope="dirty"
        )
        return [clean[-1], dirty[-1]]

    path = save(build(body), "checkpoint", tmp_path)
    assert main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert "  weights: runs only allowlisted ops" in out
    assert (
        "  record: refused unless --allow-unsafe-ops (it would run evil_write (WriteFile))" in out
    )
    assert "  record --cells clean/gru_cell: runs only allowlisted ops" in out
    assert main(["inspect", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["refused_without_allow_unsafe_ops"] == {
        "record": ["evil_write (WriteFile)"]
    }
    np.save(tmp_path / "x.npy", np.ones((2, 5, 4), np.float32))
    feed = ["--feed", f"x={tmp_path / 'x.npy'}"]
    assert main(["weights", path, "--out", str(tmp_path / "w.parquet")]) == 0
    assert main(["record", path, *feed, "--out", str(tmp_path / "all"), "--quiet"]) == 2
    assert (
        main(
            [
                "record",
                path,
                *feed,
                "--out",
                str(tmp_path / "clean"),
                "--cells",
                "clean/gru_cell",
                "--quiet",
            ]
        )
        == 0
    )
    assert not target.exists()
