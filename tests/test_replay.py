"""Cells inside while loops (dynamic_rnn): replayed in numpy, checked against the loop, recorded like unrolled ones."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest

import tracer
from recorders import Recording, ReplayMismatchError
from tests.conftest import CONFIGS, R, build, read_gates, save, static_body
from tracer._tf import tf, v1
from tracer.cells.reference import run_cell
from tracer.values.replay import replay

LENGTHS = np.array([5, 3, 0, 1, 5, 2], np.int32)


@contextmanager
def control_flow(version: str):
    """Build graphs with TF1-era loops (Enter/Exit) for "v1", the default While op for "v2"."""
    if version == "v1":
        v1.disable_control_flow_v2()
    try:
        yield
    finally:
        v1.enable_control_flow_v2()


def widths(config) -> tuple[int, int]:
    """(units, state width) of a config's cell."""
    cell = config.make()
    size = cell.output_size
    return (cell.state_size.c if isinstance(cell.state_size, R.LSTMStateTuple) else size), size


def dynamic_body(config, lengths: bool = True, initial: bool = True, time_major: bool = False):
    """dynamic_rnn of the config's cell, with a `len` placeholder and a fed initial state (`c0`, `h0`);
    `time_major` feeds it the inputs transposed to [steps, batch, features]."""

    def body(x):
        cell = config.make()
        units, width = widths(config)
        state = None
        if initial:
            h0 = v1.placeholder(tf.float32, [None, width], name="h0")
            state = (
                R.LSTMStateTuple(v1.placeholder(tf.float32, [None, units], name="c0"), h0)
                if config.kind.endswith("LSTMCell")
                else h0
            )
        seq = v1.placeholder(tf.int32, [None], name="len") if lengths else None
        if time_major:
            x = tf.transpose(x, [1, 0, 2])
        out, final = v1.nn.dynamic_rnn(
            cell,
            x,
            sequence_length=seq,
            initial_state=state,
            dtype=tf.float32,
            time_major=time_major,
        )
        return [out, *tf.nest.flatten(final)]

    return body


def feeds(config, x: np.ndarray) -> dict:
    units, width = widths(config)
    rng = np.random.RandomState(3)
    out = {"x": x, "len": LENGTHS, "h0": rng.uniform(-1, 1, (len(x), width)).astype(np.float32)}
    if config.kind.endswith("LSTMCell"):
        out["c0"] = rng.uniform(-1, 1, (len(x), units)).astype(np.float32)
    return out


def grid(out, cell: str, table: str, name: str, column: str, shape) -> np.ndarray:
    """One gate or state of a recording as a full [examples, steps, units] array, NaN where no row was written."""
    rec = Recording(out)
    df = (
        rec.gate_frame([cell], [name], columns=[column])
        if table == "gates"
        else rec.state_frame([cell], [name])
    )
    a = np.full(shape, np.nan, np.float32)
    a[df["example"], df["step"], df["unit"]] = df[column]
    return a


def expected(config, weights, f: dict) -> dict:
    initial = {"h": f["h0"], **({"c": f["c0"]} if "c0" in f else {})}
    return run_cell(config.kind, weights, f["x"], initial_state=initial, **config.params)


# -- the numpy replay itself --------------------------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_replay_is_the_reference_within_lengths_and_carries_the_state_past_them(name):
    config = CONFIGS[name]
    built = build(dynamic_body(config))  # for the weights' shapes and values only
    (weights,) = built.weights.values()
    x = np.random.RandomState(1).randn(6, 5, 4).astype(np.float32)
    f = feeds(config, x)
    ref = expected(config, weights, f)
    params = {k: v for k, v in config.params.items()}
    got = replay(
        config.kind,
        weights,
        x,
        {"h": f["h0"], **({"c": f["c0"]} if "c0" in f else {})},
        LENGTHS,
        **params,
    )
    for b, n in enumerate(LENGTHS):
        np.testing.assert_allclose(got.preactivation[b, :n], ref["preactivation"][b, :n], atol=1e-5)
        np.testing.assert_allclose(got.activation[b, :n], ref["activation"][b, :n], atol=1e-5)
        for s, values in ref["states"].items():
            last = values[b, n - 1] if n else f[f"{s}0"][b]
            np.testing.assert_allclose(got.final[s][b], last, atol=1e-5)
            np.testing.assert_allclose(
                got.states[s][b, n:], np.broadcast_to(last, got.states[s][b, n:].shape), atol=1e-5
            )
        assert (got.outputs[b, n:] == 0).all()


# -- dynamic_rnn graphs, recorded --------------------------------------------------------------

CASES = [(cf, name, "checkpoint") for cf in ("v1", "v2") for name in CONFIGS]
CASES += [(cf, "BasicLSTMCell", fmt) for cf in ("v1", "v2") for fmt in ("savedmodel", "frozen")]


@pytest.mark.parametrize("cf, name, fmt", CASES)
def test_dynamic_rnn_recording_equals_numpy(cf, name, fmt, tmp_path):
    config = CONFIGS[name]
    with control_flow(cf):
        built = build(dynamic_body(config))
    (weights,) = built.weights.values()
    model_path = save(built, fmt, tmp_path)
    x = np.random.RandomState(1).randn(6, 5, 4).astype(np.float32)
    f = feeds(config, x)
    with tracer.load_model(model_path) as model:
        (cell,) = tracer.find_cells(model.graph)
        assert (
            cell.path == "replay" and cell.loop.control_flow == cf and cell.loop.lengths is not None
        )
        tracer.record(model, f, tmp_path / "out", batch_size=4)
    ref = expected(config, weights, f)
    rows = 0
    for g, gate in enumerate(cell.gates):
        for column in ("preactivation", "activation"):
            got, want = (
                grid(
                    tmp_path / "out", cell.name, "gates", gate, column, ref[column][:, :, g].shape
                ),
                ref[column][:, :, g],
            )
            for b, n in enumerate(LENGTHS):
                np.testing.assert_allclose(got[b, :n], want[b, :n], atol=1e-5)
                assert np.isnan(got[b, n:]).all()  # no rows at or past the length
        rows += int(LENGTHS.sum()) * cell.units
    assert Recording(tmp_path / "out").manifest["rows"]["gates"] == rows
    for s in cell.spec.states:
        got = grid(tmp_path / "out", cell.name, "states", s, "value", ref["states"][s].shape)
        for b, n in enumerate(LENGTHS):
            np.testing.assert_allclose(got[b, :n], ref["states"][s][b, :n], atol=1e-5)
            assert np.isnan(got[b, n:]).all()


@pytest.mark.parametrize("cf", ["v1", "v2"])
@pytest.mark.parametrize("name", ["LSTMCell-peepholes-proj-clip", "GRUCell"])
def test_time_major_dynamic_rnn(cf, name):
    """dynamic_rnn(time_major=True): the loop reads the inputs as given; the trace is still
    [examples, steps, ...] by input position and equals the reference within each length."""
    config = CONFIGS[name]
    with control_flow(cf):
        built = build(dynamic_body(config, time_major=True))
    (weights,) = built.weights.values()
    x = np.random.RandomState(7).randn(6, 5, 4).astype(np.float32)
    f = feeds(config, x)
    trace = tracer.trace(tracer.from_session(built.session), f)
    (ct,) = trace
    assert ct.cell.path == "replay" and list(ct.steps) == [0, 1, 2, 3, 4]
    ref = expected(config, weights, f)
    for b, n in enumerate(LENGTHS):
        np.testing.assert_allclose(ct.preactivation[b, :n], ref["preactivation"][b, :n], atol=1e-5)
        np.testing.assert_allclose(ct.activation[b, :n], ref["activation"][b, :n], atol=1e-5)
        for s in ct.cell.spec.states:
            np.testing.assert_allclose(ct.states[s][b, :n], ref["states"][s][b, :n], atol=1e-5)


@pytest.mark.parametrize("cf", ["v1", "v2"])
def test_a_stacked_dynamic_rnn_equals_the_same_static_rnn(cf, tmp_path):
    """MultiRNNCell [LSTMCell(peepholes, proj), GRUCell, BasicRNNCell]: the replayed loop equals the fetched unrolled graph."""

    def layers():
        return R.MultiRNNCell(
            [R.LSTMCell(4, use_peepholes=True, num_proj=3), R.GRUCell(3), R.BasicRNNCell(2)]
        )

    def dynamic(x):
        return [v1.nn.dynamic_rnn(layers(), x, dtype=tf.float32)[0]]

    def static(x):
        return [v1.nn.static_rnn(layers(), tf.unstack(x, axis=1), dtype=tf.float32)[0][-1]]

    with control_flow(cf):
        looped = build(dynamic)
    unrolled = build(static)
    assert {k: sorted(v) for k, v in looped.weights.items()} == {
        k: sorted(v) for k, v in unrolled.weights.items()
    }
    for scope, roles in looped.weights.items():  # same random seed, same variables: same values
        for role, value in roles.items():
            np.testing.assert_array_equal(value, unrolled.weights[scope][role])
    x = np.random.RandomState(1).randn(6, 5, 4).astype(np.float32)
    a = tracer.trace(tracer.from_session(looped.session), {"x": x})
    b = tracer.trace(tracer.from_session(unrolled.session), {"x": x})
    assert sorted(a.cells) == sorted(b.cells) and len(a.cells) == 3
    for name in a.cells:
        assert a[name].cell.path == "replay" and b[name].cell.path == "fetch"
        np.testing.assert_allclose(a[name].preactivation, b[name].preactivation, atol=1e-5)
        np.testing.assert_allclose(a[name].activation, b[name].activation, atol=1e-5)
        for s in a[name].states:
            np.testing.assert_allclose(a[name].states[s], b[name].states[s], atol=1e-5)
    # Recording only the top layer still replays the two below it.
    top = "rnn/multi_rnn_cell/cell_2/basic_rnn_cell"
    sel = tracer.Selection(cells=(top,), steps=(1, 4))
    tracer.record(tracer.from_session(looped.session), {"x": x}, tmp_path / "top", selection=sel)
    pre, _ = read_gates(tmp_path / "top", top, ("h",))
    assert Recording(tmp_path / "top").cells == [top] and Recording(tmp_path / "top").steps(
        top
    ).tolist() == [1, 2, 3]
    np.testing.assert_allclose(pre, b[top].preactivation[:, 1:4], atol=1e-5)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_on_an_unrolled_graph_replay_equals_the_fetched_gate_ops(name):
    """The two paths on the same static model: the graph's own Split ops and the numpy replay."""
    config = CONFIGS[name]
    built = build(static_body(config))
    (weights,) = built.weights.values()
    x = np.random.RandomState(1).randn(6, 5, 4).astype(np.float32)
    (fetched,) = tracer.trace(tracer.from_session(built.session), {"x": x})
    got = replay(config.kind, weights, x, **config.params)
    np.testing.assert_allclose(got.preactivation, fetched.preactivation, atol=1e-5)
    np.testing.assert_allclose(got.activation, fetched.activation, atol=1e-5)
    for s, values in fetched.states.items():
        np.testing.assert_allclose(got.states[s], values, atol=1e-5)


class _Doubled(R.RNNCell):
    """A BasicLSTMCell whose new h is doubled: the walker sees an LSTM, the loop computes something else."""

    def __init__(self):
        super().__init__()
        self._inner = R.BasicLSTMCell(3)

    @property
    def state_size(self):
        return self._inner.state_size

    @property
    def output_size(self):
        return self._inner.output_size

    def call(self, inputs, state):
        out, (c, h) = self._inner(inputs, state)
        return out * 2.0, R.LSTMStateTuple(c, h * 2.0)


@pytest.mark.parametrize("cf", ["v1", "v2"])
def test_a_loop_the_replay_does_not_reproduce_fails_loudly(cf, tmp_path):
    with control_flow(cf):
        built = build(lambda x: [v1.nn.dynamic_rnn(_Doubled(), x, dtype=tf.float32)[0]])
    model = tracer.from_session(built.session)
    (cell,) = tracer.find_cells(built.graph)
    x = np.random.RandomState(1).randn(6, 5, 4).astype(np.float32)
    with pytest.raises(
        ReplayMismatchError,
        match=rf"cell {cell.name}: replayed final [ch] differ from the graph's by up to [0-9.e-]+ \(tolerance 0.0001\)",
    ):
        tracer.trace(model, {"x": x})
    with pytest.raises(ReplayMismatchError):
        tracer.record(model, {"x": x}, tmp_path / "out")
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_describe_says_which_path_and_why():
    built = build(dynamic_body(CONFIGS["GRUCell"], lengths=False, initial=False))
    (cell,) = tracer.find_cells(built.graph)
    d = cell.describe()
    assert (
        d["path"] == "replay" and d["loop"]["loop"] == "rnn/while" and d["loop"]["lengths"] is None
    )
    assert (
        d["loop"]["inputs"] == "rnn/transpose:0"
        and d["loop"]["outputs"] == "rnn/TensorArrayV2Stack/TensorListStack:0"
    )
    assert "inside a While op's body function (rnn/while) and cannot be fetched" in d["why"]
    static = tracer.find_cells(build(static_body(CONFIGS["GRUCell"])).graph)[0].describe()
    assert static["path"] == "fetch" and static["first_step"]["gate_op"] == "rnn/gru_cell/split"


def test_the_cli_inspects_and_records_a_dynamic_rnn_checkpoint(tmp_path, capsys):
    from tracer.cli import main

    config = CONFIGS["BasicLSTMCell"]
    with control_flow("v1"):
        built = build(dynamic_body(config, initial=False))
    (weights,) = built.weights.values()
    model = save(built, "checkpoint", tmp_path)
    assert main(["inspect", model]) == 0
    out = capsys.readouterr().out
    assert (
        "rnn/basic_lstm_cell  BasicLSTMCell  3      4      5 (loop)  i,j,f,o  forward    loop"
        in out
    )
    assert (
        "rnn/basic_lstm_cell: from its loop, forget_bias=0.7, activation=tanh: its gate ops run inside a TF1 while loop "
        "(Enter/Exit) (rnn/while/while_context), rewritten to emit them at every step"
    ) in out
    x = np.random.RandomState(1).randn(6, 5, 4).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "len.npy", LENGTHS)
    argv = [
        "record",
        model,
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--feed",
        f"len={tmp_path / 'len.npy'}",
        "--out",
        str(tmp_path / "out"),
        "--quiet",
    ]
    assert main(argv) == 0
    ref = run_cell(config.kind, weights, x, **config.params)
    got = grid(tmp_path / "out", "rnn/basic_lstm_cell", "gates", "f", "activation", (6, 5, 3))
    for b, n in enumerate(LENGTHS):
        np.testing.assert_allclose(got[b, :n], ref["activation"][b, :n, 2], atol=1e-5)
        assert np.isnan(got[b, n:]).all()


@pytest.mark.parametrize("cf, lengths", [("v1", True), ("v2", True), ("v2", False)])
def test_bidirectional_dynamic_rnn_steps_are_input_positions(cf, lengths):
    """The backward loop reads the reversed sequence (ReverseSequence, or ReverseV2 without
    lengths); its rows are indexed by input position, as for static bidirectional graphs."""

    def body(x):
        seq = v1.placeholder(tf.int32, [None], name="len") if lengths else None
        (fw, bw), _ = v1.nn.bidirectional_dynamic_rnn(
            R.BasicLSTMCell(3), R.GRUCell(3), x, sequence_length=seq, dtype=tf.float32
        )
        return [fw, bw]

    with control_flow(cf):
        built = build(body)
    x = np.random.RandomState(1).randn(6, 5, 4).astype(np.float32)
    n = LENGTHS if lengths else np.full(6, 5)
    f = {"x": x, **({"len": LENGTHS} if lengths else {})}
    result = tracer.trace(tracer.from_session(built.session), f)
    fw_out, bw_out = built.session.run(
        built.outputs, {built.inputs: x, **({"len:0": LENGTHS} if lengths else {})}
    )
    fw, bw = result["bidirectional_rnn/fw/basic_lstm_cell"], result["bidirectional_rnn/bw/gru_cell"]
    assert bw.cell.backward and bw.cell.loop.reversed and not fw.cell.backward
    for b, k in enumerate(n):
        np.testing.assert_allclose(fw.states["h"][b, :k], fw_out[b, :k], atol=1e-5)
        # TF gives bw outputs by input position
        np.testing.assert_allclose(bw.states["h"][b, :k], bw_out[b, :k], atol=1e-5)
        ref = run_cell(
            "GRUCell",
            built.weights["bidirectional_rnn/bw/gru_cell"],
            x[b : b + 1, :k],
            backward=True,
        )
        np.testing.assert_allclose(bw.activation[b, :k], ref["activation"][0], atol=1e-5)
        np.testing.assert_allclose(bw.preactivation[b, :k], ref["preactivation"][0], atol=1e-5)


def test_the_manifest_says_how_many_steps_were_recorded_where_the_model_leaves_them_open(
    tmp_path, capsys
):
    """An input of [None, None, 4]: `inspect` cannot tell the steps (null); the manifest of a
    recording of 16-step sequences says 16, for the stacked cells of the loop alike."""
    import json

    from tracer.cli import main

    def body(x):
        return [
            v1.nn.dynamic_rnn(
                R.MultiRNNCell([R.GRUCell(3), R.BasicLSTMCell(2)]), x, dtype=tf.float32
            )[0]
        ]

    model = save(build(body, steps=None), "checkpoint", tmp_path)
    assert main(["inspect", model, "--json"]) == 0
    assert [c["steps"] for c in json.loads(capsys.readouterr().out)["cells"]] == [None, None]
    np.save(tmp_path / "x.npy", np.random.RandomState(1).randn(3, 16, 4).astype(np.float32))
    assert (
        main(
            [
                "record",
                model,
                "--feed",
                f"x={tmp_path / 'x.npy'}",
                "--out",
                str(tmp_path / "out"),
                "--quiet",
            ]
        )
        == 0
    )
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [c["steps"] for c in manifest["cells"]] == [16, 16]
