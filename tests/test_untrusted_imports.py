"""Hostile graphs that act while they are imported, or hide what they run in function attributes.

TensorFlow evaluates small constant subgraphs while it imports a graph (shape inference
wants `Fill`'s dims), with real kernels: a model can make the import read a file and dump
it into a folder of its choosing. These tests build such models in every graph format and
prove the folder stays absent. Others hide a `WriteFile` function behind an attribute
placeholder bound by the caller or by a default, or nest functions until TensorFlow
would crash: each is refused in one line and the marker file stays absent.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.conftest import CONFIGS, build, save, static_body
from tracer._tf import tf, v1
from tracer.cli import main


def _cli_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def _dumping(dump_dir, secret):
    """A GRUCell graph whose input is added 0 * the size of a Fill whose dims are the length
    of `secret` read by ReadFile and passed through DebugIdentity dumping into `dump_dir`."""

    def body(x):
        read = tf.expand_dims(
            tf.raw_ops.ReadFile(filename=tf.constant(str(secret)), name="read_secret"), 0
        )
        dumped = tf.raw_ops.DebugIdentity(
            input=read, tensor_name="secret:0", debug_urls=[f"file://{dump_dir}"], name="dump"
        )
        filled = tf.fill(tf.strings.length(dumped), 1.0, name="filled")
        x = x + 0.0 * tf.reduce_sum(filled)
        return static_body(CONFIGS["GRUCell"])(x)

    return body


@pytest.mark.parametrize("fmt", ["checkpoint", "savedmodel", "frozen"])
def test_ops_that_would_run_while_importing_are_refused_before_it(fmt, tmp_path, capsys):
    secret = tmp_path / "secret.txt"
    secret.write_text("AWS_SECRET_ACCESS_KEY=hunter2")
    dump_dir = tmp_path / "exfiltrated"
    path = save(build(_dumping(dump_dir, secret)), fmt, tmp_path)
    assert dump_dir.is_dir()  # building the graph here ran them: this is what an import would do
    shutil.rmtree(dump_dir)
    np.save(tmp_path / "x.npy", np.ones((2, 5, 4), np.float32))
    for argv in (
        ["inspect", path],
        ["record", path, "--feed", f"x={tmp_path / 'x.npy'}", "--out", str(tmp_path / "out")],
        ["weights", path, "--out", str(tmp_path / "w.parquet")],
    ):
        msg = _cli_error(capsys, argv)
        assert (
            f"{path}: importing its graph could run 2 ops that TensorFlow evaluates while it infers shapes"
            in msg
        )
        assert "dump (DebugIdentity), read_secret (ReadFile); nothing was imported" in msg
        assert not dump_dir.exists()
    assert not (tmp_path / "out").exists() and not (tmp_path / "w.parquet").exists()
    assert main(["inspect", path, "--allow-unsafe-ops"]) == 0  # the check is what stopped it
    assert dump_dir.is_dir()


def _evil_function(marker) -> tf.compat.v1.FunctionDef:
    @tf.function(input_signature=[tf.TensorSpec([None, 5, 4], tf.float32)], autograph=False)
    def evil(x):
        with tf.control_dependencies([tf.io.write_file(str(marker), "pwned")]):
            return tf.identity(x)

    return evil.get_concrete_function().function_def


def _hidden_behind_a_placeholder(marker, how: str):
    """A frozen GRUCell graph whose input passes through function `apply`, which calls the
    function its attribute `g` names; `g` is bound to the WriteFile function by the call's
    NameAttrList (`bound`) or by `apply`'s default (`default`)."""
    from tensorflow.core.framework import attr_value_pb2, function_pb2, node_def_pb2

    built = build(static_body(CONFIGS["GRUCell"]))
    graph_def = v1.graph_util.convert_variables_to_constants(
        built.session, built.graph.as_graph_def(), built.output_ops()
    )
    evil = _evil_function(marker)
    name = evil.signature.name
    apply = function_pb2.FunctionDef()
    apply.signature.name = "apply"
    apply.signature.input_arg.add(name="x", type=tf.float32.as_datatype_enum)
    apply.signature.output_arg.add(name="y", type=tf.float32.as_datatype_enum)
    g = apply.signature.attr.add(name="g", type="func")
    if how == "default":
        g.default_value.func.name = name
    call = apply.node_def.add(name="call", op="StatefulPartitionedCall", input=["x"])
    call.attr["f"].placeholder = "g"
    call.attr["Tin"].list.type.append(tf.float32.as_datatype_enum)
    call.attr["Tout"].list.type.append(tf.float32.as_datatype_enum)
    apply.ret["y"] = "call:output:0"
    graph_def.library.function.extend([evil, apply])
    node = node_def_pb2.NodeDef(name="through", op="StatefulPartitionedCall", input=["x"])
    node.attr["f"].func.name = "apply"
    if how == "bound":
        node.attr["f"].func.attr["g"].CopyFrom(
            attr_value_pb2.AttrValue(func=attr_value_pb2.NameAttrList(name=name))
        )
    node.attr["Tin"].list.type.append(tf.float32.as_datatype_enum)
    node.attr["Tout"].list.type.append(tf.float32.as_datatype_enum)
    for n in graph_def.node:
        n.input[:] = ["through" if i == "x" else i for i in n.input]
    graph_def.node.append(node)
    return graph_def


@pytest.mark.parametrize("how", ["bound", "default"])
def test_functions_named_through_attribute_placeholders_are_checked(how, tmp_path, capsys):
    marker = tmp_path / "pwned.txt"
    path = tmp_path / "frozen.pb"
    path.write_bytes(_hidden_behind_a_placeholder(marker, how).SerializeToString())
    np.save(tmp_path / "x.npy", np.ones((2, 5, 4), np.float32))
    argv = [
        "record",
        str(path),
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "out"),
    ]
    msg = _cli_error(capsys, argv)
    assert (
        "fetching the gates and weights would run 1 op outside the allowlist" in msg
        and "(WriteFile)" in msg
    )
    assert not marker.exists() and not (tmp_path / "out").exists()
    assert main(["inspect", str(path), "--json"]) == 0
    unsafe = json.loads(capsys.readouterr().out)["unsafe_ops"]
    assert len(unsafe) == 1 and unsafe[0].endswith("(WriteFile)") and " in function " in unsafe[0]
    # the graph is sound: the check is what stopped it
    assert main([*argv, "--allow-unsafe-ops", "--quiet"]) == 0
    assert marker.read_text() == "pwned"


def test_a_call_not_marked_stateful_into_a_function_that_writes_is_refused_before_import(
    tmp_path, capsys
):
    """TensorFlow's constant folder may evaluate a call that is not marked stateful, body and
    all: a PartitionedCall of a WriteFile function is refused before the graph is imported."""
    marker = tmp_path / "pwned.txt"
    graph_def = _hidden_behind_a_placeholder(marker, "bound")
    through = next(n for n in graph_def.node if n.name == "through")
    through.op = "PartitionedCall"
    path = tmp_path / "frozen.pb"
    path.write_bytes(graph_def.SerializeToString())
    msg = _cli_error(capsys, ["inspect", str(path)])
    assert (
        "importing its graph could run 1 op" in msg
        and "through (PartitionedCall, not marked stateful, calls function " in msg
    )
    assert ", which reaches " in msg and "(WriteFile)); nothing was imported" in msg
    assert not marker.exists()


def _function(name: str, calls: str | None):
    from tensorflow.core.framework import function_pb2

    f = function_pb2.FunctionDef()
    f.signature.name = name
    f.signature.input_arg.add(name="x", type=tf.float32.as_datatype_enum)
    f.signature.output_arg.add(name="y", type=tf.float32.as_datatype_enum)
    if calls:
        f.node_def.add(name="inner", op=calls, input=["x"])
        f.ret["y"] = "inner:y:0"
    else:
        f.ret["y"] = "x"
    return f


@pytest.mark.parametrize(
    "chain, expected",
    [
        (
            ["f", "f"],
            "its graph holds a function f (calls itself, through f -> f); TensorFlow cannot run it: nothing was imported",
        ),
        (
            ["a", "b", "c", "a"],
            "its graph holds a function a (calls itself, through a -> b -> c -> a); TensorFlow cannot run it",
        ),
        (
            [f"f{k}" for k in range(20_000)],
            "its graph holds a function f19899 (calls nested 101 deep, more than the 100 gatetrace follows)",
        ),
    ],
)
def test_recursive_and_deeply_nested_functions_are_refused_in_one_line(
    chain, expected, tmp_path, capsys
):
    graph_def = v1.GraphDef()
    graph_def.node.add(name="x", op="Placeholder").attr["dtype"].type = tf.float32.as_datatype_enum
    graph_def.node.add(name="call", op=chain[0], input=["x"])
    names = list(dict.fromkeys(chain))
    for k, name in enumerate(names):
        graph_def.library.function.append(
            _function(name, chain[k + 1] if k + 1 < len(chain) else None)
        )
    path = tmp_path / "frozen.pb"
    path.write_bytes(graph_def.SerializeToString())
    for flags in ([], ["--allow-unsafe-ops"]):  # TensorFlow would crash: no flag lets it through
        assert expected in _cli_error(capsys, ["inspect", str(path), *flags])


def _reading_and_dumping(secret, dump_dir):
    """ReadFile of `secret` through DebugIdentity into `dump_dir`, sized by a Fill: every path
    back ends at a constant, so a shape function asking for the Fill's dims evaluates it."""
    read = tf.expand_dims(
        tf.raw_ops.ReadFile(filename=tf.constant(str(secret)), name="read_secret"), 0
    )
    dumped = tf.raw_ops.DebugIdentity(
        input=read, tensor_name="secret:0", debug_urls=[f"file://{dump_dir}"], name="dump"
    )
    return tf.reduce_sum(tf.fill(tf.strings.length(dumped), 1.0, name="filled"))


@pytest.mark.parametrize("where", ["call", "cond"])
def test_function_bodies_are_judged_by_what_importing_evaluates(where, tmp_path, capsys):
    """A call's function body is shape-inferred while importing, constants and all: the dump
    it holds is refused before import (and, allowed, really happens at import). A `cond`'s
    branch is not entered while importing, and off the path to the gates it never runs: the
    model records, and nothing is dumped."""
    secret, dump_dir = tmp_path / "secret.txt", tmp_path / "exfiltrated"
    secret.write_text("AWS_SECRET_ACCESS_KEY=hunter2")

    def body(x):
        if where == "call":
            leak = tf.function(lambda: _reading_and_dumping(secret, dump_dir), autograph=False)()
        else:
            leak = tf.cond(
                tf.constant(False),
                lambda: _reading_and_dumping(secret, dump_dir),
                lambda: tf.constant(0.0),
            )
        gated = static_body(CONFIGS["GRUCell"])(x)
        return [*gated, tf.identity(leak, name="leak")]

    built = build(body)
    shutil.rmtree(dump_dir, ignore_errors=True)  # building ran it in the call's case
    types = {op.type for op in built.graph.get_operations()}
    assert ("PartitionedCall" in types) if where == "call" else ({"If", "StatelessIf"} & types)
    path = save(built, "frozen", tmp_path)
    np.save(tmp_path / "x.npy", np.ones((2, 5, 4), np.float32))
    record = [
        "record",
        path,
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "out"),
        "--quiet",
    ]
    if where == "call":
        msg = _cli_error(capsys, ["inspect", path])
        assert (
            "importing its graph could run 2 ops" in msg
            and "dump in function " in msg
            and "(DebugIdentity)" in msg
        ), msg
        assert "read_secret in function " in msg and not dump_dir.exists()
        # the route is real: the import itself dumps
        assert main(["inspect", path, "--allow-unsafe-ops"]) == 0
        assert dump_dir.is_dir()
    else:
        assert main(["inspect", path]) == 0
        assert main(record) == 0, capsys.readouterr().err
        assert not dump_dir.exists()
