"""Cells in while loops (control flow v1 and v2), recorded from the loop itself (`tracer.values.emit`): the
values are TensorFlow's own, bit for bit those of the same cells unrolled by `static_rnn` with
the same weights, and a float64 numpy recomputation agrees within 1e-5. `--verify` replays them
in numpy as well and stops on a difference.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from recorders import Recording
from tests.conftest import CONFIGS, Built, R, build, randomise, run_cli, save, static_body
from tests.test_replay import LENGTHS, control_flow, dynamic_body, expected, feeds, grid
from tracer._tf import tf, v1

pytestmark = pytest.mark.e2e

X = np.random.RandomState(1).randn(6, 5, 4).astype(np.float32)


def record(path: str, tmp_path, name: str, *flags: str, **arrays: np.ndarray) -> Recording:
    args = []
    for key, value in arrays.items():
        np.save(tmp_path / f"{name}-{key}.npy", value)
        args += ["--feed", f"{key}={tmp_path / f'{name}-{key}.npy'}"]
    done = run_cli("record", path, *args, "--out", str(tmp_path / name), "--quiet", *flags)
    assert done.returncode == 0, done.stderr
    return Recording(tmp_path / name)


def saved(built, root) -> str:
    """`built` saved as a checkpoint in the new folder `root`."""
    root.mkdir()
    return save(built, "checkpoint", root)


def paths(rec: Recording) -> dict[str, str]:
    return {c["name"]: c["path"] for c in rec.manifest["cells"]}


def close(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal to float32's rounding: a loop whose steps stop at each sequence's length (a
    select in its body) and the unrolled steps are two graphs, whose sums TensorFlow may
    order otherwise from run to run (seen: one ulp apart, at random, on a busy machine); a
    step or unit taken for another is far outside it."""
    return np.allclose(a, b, rtol=1e-5, atol=1e-6)


def assert_same(a: Recording, b: Recording, cell: str) -> None:
    """Every gate and state of `cell` equal, bit for bit, in two recordings."""
    for gate in a.gates(cell):
        for column in ("preactivation", "activation"):
            assert np.array_equal(
                a.gate_array(cell, gate, column), b.gate_array(cell, gate, column)
            ), f"{cell} {gate} {column}"
    for state in a.states(cell):
        assert np.array_equal(a.state_array(cell, state), b.state_array(cell, state)), (
            f"{cell} {state}"
        )


@pytest.mark.parametrize("cf", ["v1", "v2"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_dynamic_rnn_records_bit_for_bit_what_the_same_static_rnn_computes(cf, name, tmp_path):
    config = CONFIGS[name]
    with control_flow(cf):
        looped = build(dynamic_body(config, lengths=False, initial=False))
    unrolled = build(static_body(config))  # the same seed, the same variables: the same weights
    loop = record(saved(looped, tmp_path / "a"), tmp_path, "loop", x=X)
    fetched = record(saved(unrolled, tmp_path / "b"), tmp_path, "fetch", x=X)
    (cell,) = loop.cells
    assert paths(loop) == {cell: "loop"} and paths(fetched) == {cell: "fetch"}
    assert_same(loop, fetched, cell)
    (weights,) = looped.weights.values()  # and a float64 numpy cell agrees
    units, width = (
        (config.make().state_size.c, config.make().output_size)
        if config.kind.endswith("LSTMCell")
        else (None, None)
    )
    zeros = {"h0": np.zeros((len(X), width or config.make().output_size), np.float32)}
    if config.kind.endswith("LSTMCell"):
        zeros["c0"] = np.zeros((len(X), units), np.float32)
    ref = expected(config, weights, {"x": X, **zeros})
    for g, gate in enumerate(loop.gates(cell)):
        np.testing.assert_allclose(
            loop.gate_array(cell, gate, "preactivation"), ref["preactivation"][:, :, g], atol=1e-5
        )
        np.testing.assert_allclose(
            loop.gate_array(cell, gate, "activation"), ref["activation"][:, :, g], atol=1e-5
        )
    for s, values in ref["states"].items():
        np.testing.assert_allclose(loop.state_array(cell, s), values, atol=1e-5)


@pytest.mark.parametrize("cf", ["v1", "v2"])
@pytest.mark.parametrize("name", ["LSTMCell-peepholes-proj-clip", "GRUCell"])
def test_lengths_initial_state_and_time_major_from_the_loop(cf, name, tmp_path):
    """Nothing past a length is written; before it, the loop's values are the reference's."""
    config = CONFIGS[name]
    with control_flow(cf):
        built = build(dynamic_body(config, time_major=True))
    (weights,) = built.weights.values()
    f = feeds(config, X)
    rec = record(saved(built, tmp_path / "model"), tmp_path, "rec", "--verify", **f)
    (cell,) = rec.cells
    assert paths(rec) == {cell: "loop"}
    ref = expected(config, weights, f)
    gates = len(rec.gates(cell))
    for g, gate in enumerate(rec.gates(cell)):
        got = grid(
            tmp_path / "rec",
            cell,
            "gates",
            gate,
            "preactivation",
            ref["preactivation"][:, :, g].shape,
        )
        for b, n in enumerate(LENGTHS):
            np.testing.assert_allclose(got[b, :n], ref["preactivation"][b, :n, g], atol=1e-5)
            assert np.isnan(got[b, n:]).all(), "rows past a length were written"
    assert gates == ref["preactivation"].shape[2]


@pytest.mark.parametrize("cf", ["v1", "v2"])
@pytest.mark.parametrize("lengths", [False, True])
def test_bidirectional_and_stacked_loops_by_input_position(cf, lengths, tmp_path):
    """bidirectional_dynamic_rnn of a MultiRNNCell [LSTMCell(peepholes, proj), GRUCell] each way,
    against static_bidirectional_rnn of the same cells: the backward loop's steps are mapped
    back to input positions, the stacked layer is read from the same loop."""

    def layers():
        return R.MultiRNNCell([R.LSTMCell(4, use_peepholes=True, num_proj=3), R.GRUCell(3)])

    def dynamic(x):
        seq = v1.placeholder(tf.int32, [None], name="len") if lengths else None
        return list(
            tf.nest.flatten(
                v1.nn.bidirectional_dynamic_rnn(
                    layers(), layers(), x, sequence_length=seq, dtype=tf.float32
                )
            )
        )

    def static(x):
        return [
            v1.nn.static_bidirectional_rnn(
                layers(), layers(), tf.unstack(x, axis=1), dtype=tf.float32
            )[0][-1]
        ]

    with control_flow(cf):
        looped = build(dynamic)
    unrolled = build(static)
    loop = record(
        saved(looped, tmp_path / "a"),
        tmp_path,
        "loop",
        "--verify",
        x=X,
        **({"len": LENGTHS} if lengths else {}),
    )
    fetched = record(saved(unrolled, tmp_path / "b"), tmp_path, "fetch", x=X)
    assert sorted(loop.cells) == sorted(fetched.cells) and len(loop.cells) == 4
    assert set(paths(loop).values()) == {"loop"}
    for cell in loop.cells:
        if not lengths:
            assert_same(loop, fetched, cell)
            continue
        # Nothing past a length; before it, the forward half is the unrolled one's (the backward
        # half reads each sequence from its own end, the unrolled one from the last step: the
        # replay of --verify checked it)
        for gate in loop.gates(cell):
            a, b = (
                loop.gate_array(cell, gate, "preactivation"),
                fetched.gate_array(cell, gate, "preactivation"),
            )
            for e, n in enumerate(LENGTHS[: len(a)]):
                assert np.isnan(a[e, n:]).all()
                assert "/bw/" in cell or close(a[e, :n], b[e, :n]), f"{cell} {gate} example {e}"


def test_verify_replays_the_loop_and_stops_on_a_difference(tmp_path, monkeypatch):
    built = build(dynamic_body(CONFIGS["BasicLSTMCell"], lengths=False, initial=False))
    path = saved(built, tmp_path / "model")
    record(path, tmp_path, "checked", "--verify", x=X)

    import tracer.values.sources as sources  # where a loop cell is replayed

    real = sources.replay

    def off(*args, **kwargs):  # a replay that disagrees with the loop in one value
        got = real(*args, **kwargs)
        got.preactivation[0, 2, 1, 0] += 1e-3
        return got

    monkeypatch.setattr(sources, "replay", off)
    np.save(tmp_path / "x.npy", X)
    done = run_cli(
        "record",
        path,
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "off"),
        "--quiet",
        "--verify",
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert (
        "--verify: the replayed preactivations differ from those its loop computed by up to 0.001"
        in done.stderr
    )
    assert not (tmp_path / "off" / "manifest.json").exists()
    assert (
        run_cli(
            "record",
            path,
            "--feed",
            f"x={tmp_path / 'x.npy'}",
            "--out",
            str(tmp_path / "unverified"),
            "--quiet",
        ).returncode
        == 0
    )


def test_inspect_says_the_loop_path_and_a_wrapped_state_stays_replayed(tmp_path):
    built = build(dynamic_body(CONFIGS["GRUCell"], lengths=False, initial=False))
    shown = run_cli("inspect", saved(built, tmp_path / "a"), "--json")
    assert shown.returncode == 0, shown.stderr
    (cell,) = json.loads(shown.stdout)["cells"]
    assert cell["path"] == "loop" and "rewritten to emit them at every step" in cell["why"]

    # a wrapper changes the state the loop carries: the replay's check decides
    class Doubled(R.RNNCell):
        def __init__(self):
            super().__init__()
            self._inner = R.GRUCell(3)

        state_size = property(lambda self: self._inner.state_size)
        output_size = property(lambda self: self._inner.output_size)

        def call(self, inputs, state):
            out, h = self._inner(inputs, state)
            return out * 2.0, h * 2.0

    wrapped = build(lambda x: [v1.nn.dynamic_rnn(Doubled(), x, dtype=tf.float32)[0]])
    shown = run_cli("inspect", saved(wrapped, tmp_path / "b"), "--json")
    (cell,) = json.loads(shown.stdout)["cells"]
    assert cell["path"] == "replay"


EXPORT = """
import sys
import numpy as np
import keras
path, unroll = sys.argv[1], sys.argv[2] == "unroll"
x = keras.Input((5, 4), name="x")
h = keras.layers.LSTM(3, return_sequences=True, unroll=unroll, name="lstm")(x)
h = keras.layers.GRU(2, return_sequences=True, unroll=unroll, name="gru")(h)
model = keras.Model(x, keras.layers.SimpleRNN(2, unroll=unroll, name="rnn")(h))
rng = np.random.RandomState(0)
model.set_weights([rng.uniform(-0.8, 0.8, w.shape).astype("float32") for w in model.get_weights()])
model.export(path)
"""


def test_a_keras_3_export_records_from_its_loops_what_the_same_model_unrolled_computes(tmp_path):
    """Keras 3 `model.export()` of LSTM, GRU and SimpleRNN layers: their While loops, rewritten,
    give bit for bit the values of the same model exported with `unroll=True`, whose steps
    are fetched from their own ops."""
    import subprocess
    import sys

    recs = {}
    for how in ("loop", "unroll"):
        done = subprocess.run(
            [sys.executable, "-c", EXPORT, str(tmp_path / how), how],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        recs[how] = record(str(tmp_path / how), tmp_path, f"rec-{how}", x=X)
    assert set(paths(recs["loop"]).values()) == {"loop"} and set(
        paths(recs["unroll"]).values()
    ) == {"fetch"}
    assert (
        sorted(recs["loop"].cells)
        == sorted(recs["unroll"].cells)
        == ["gru/gru_cell", "lstm/lstm_cell", "rnn/simple_rnn_cell"]
    )
    for cell in recs["loop"].cells:
        for gate in recs["loop"].gates(cell):
            for column in ("preactivation", "activation"):
                a, b = (recs[k].gate_array(cell, gate, column) for k in ("loop", "unroll"))
                assert np.array_equal(a, b), f"{cell} {gate} {column}: {np.nanmax(np.abs(a - b))}"


@pytest.mark.parametrize("cf", ["v1", "v2"])
def test_a_stack_of_dropout_wrapped_cells_under_dynamic_rnn(cf, tmp_path):
    """MultiRNNCell of DropoutWrapper cells (keep_prob left at its default 1.0), as TF1 scripts
    built them: the upper layer reads the lower one through the dropout, and both record bit
    for bit what the same cells under static_rnn compute (and --verify's replay agrees)."""

    def layers():
        keep = v1.placeholder_with_default(1.0, [], name="keep_prob")
        return R.MultiRNNCell(
            [
                R.DropoutWrapper(R.BasicLSTMCell(4), output_keep_prob=keep),
                R.DropoutWrapper(R.GRUCell(3), output_keep_prob=keep),
            ]
        )

    with control_flow(cf):
        looped = build(lambda x: [v1.nn.dynamic_rnn(layers(), x, dtype=tf.float32)[0]])
    unrolled = build(
        lambda x: [v1.nn.static_rnn(layers(), tf.unstack(x, axis=1), dtype=tf.float32)[0][-1]]
    )
    loop = record(saved(looped, tmp_path / "a"), tmp_path, "loop", "--verify", x=X)
    fetched = record(saved(unrolled, tmp_path / "b"), tmp_path, "fetch", x=X)
    assert (
        sorted(loop.cells)
        == sorted(fetched.cells)
        == ["rnn/multi_rnn_cell/cell_0/basic_lstm_cell", "rnn/multi_rnn_cell/cell_1/gru_cell"]
    )
    assert set(paths(loop).values()) == {"loop"}
    for cell in loop.cells:
        assert_same(loop, fetched, cell)


def test_a_frozen_loop_pruned_to_its_projected_final_state_records_its_projection(tmp_path):
    """LSTMCell(num_proj) with peepholes under a TF1 dynamic_rnn loop, frozen on its final h
    alone, its TensorArray without an element shape (as TF 1.x wrote it, and as keyword-spotting
    models fed their MFCCs): inside the loop no width is known, and the recurrent input is
    the projection (2 wide), found from what enters the loop. The gates equal a float64 numpy
    LSTM with projection."""
    config = CONFIGS["LSTMCell-peepholes-proj-clip"]

    def body(x):
        _, final = v1.nn.dynamic_rnn(config.make(), x, dtype=tf.float32)
        return [final.h]

    with control_flow("v1"):
        built = build(body)
    frozen = v1.graph_util.convert_variables_to_constants(
        built.session, built.graph.as_graph_def(), built.output_ops()
    )
    arrays = [n for n in frozen.node if n.op == "TensorArrayV3"]
    assert arrays
    for node in arrays:
        node.attr["element_shape"].shape.unknown_rank = True
        node.attr["element_shape"].shape.ClearField("dim")
    (tmp_path / "frozen.pb").write_bytes(frozen.SerializeToString())
    rec = record(str(tmp_path / "frozen.pb"), tmp_path, "rec", x=X)
    (cell,) = rec.cells
    (spec,) = rec.manifest["cells"]
    assert (spec["units"], spec["input_size"]) == (4, 4), spec
    (weights,) = built.weights.values()
    ref = expected(
        config,
        weights,
        {"x": X, "h0": np.zeros((len(X), 2), np.float32), "c0": np.zeros((len(X), 4), np.float32)},
    )
    for g, gate in enumerate(rec.gates(cell)):
        np.testing.assert_allclose(
            rec.gate_array(cell, gate, "preactivation"), ref["preactivation"][:, :, g], atol=1e-5
        )
        np.testing.assert_allclose(
            rec.gate_array(cell, gate, "activation"), ref["activation"][:, :, g], atol=1e-5
        )
    for s, values in ref["states"].items():
        np.testing.assert_allclose(rec.state_array(cell, s), values, atol=1e-5)


RESIDUAL = {name: CONFIGS[name] for name in ("LSTMCell", "GRUCell", "BasicLSTMCell")}


@pytest.mark.parametrize("cf", ["v1", "v2"])
@pytest.mark.parametrize("name", list(RESIDUAL))
def test_a_residual_stack_in_a_loop_records_bit_for_bit_what_static_rnn_computes(
    name, cf, tmp_path
):
    """GNMT's stacking: MultiRNNCell of ResidualWrapper cells under dynamic_rnn, each upper layer
    reading the sum of the layer below's output and its own input. The loop emits what each
    upper step read; `--verify` replays from it; every gate equals static_rnn's with the same
    weights bit for bit, the parts sum to the preactivation, and the upper layer equals a float64
    numpy cell on h_below + x."""
    config = RESIDUAL[name]

    def layers():
        return R.MultiRNNCell([R.ResidualWrapper(config.make()) for _ in range(2)])

    # 3 features: the residual adds them to 3 units
    wide = np.random.RandomState(2).randn(6, 5, 3).astype(np.float32)

    def dynamic(x):
        return [v1.nn.dynamic_rnn(layers(), x, dtype=tf.float32)[0]]

    def static(x):
        return [v1.nn.static_rnn(layers(), tf.unstack(x, axis=1), dtype=tf.float32)[0][-1]]

    with control_flow(cf):
        looped = build(dynamic, features=3)
    unrolled = build(static, features=3)
    loop = record(
        saved(looped, tmp_path / "a"),
        tmp_path,
        "loop",
        "--verify",
        "--values",
        "preactivation,activation,contributions",
        x=wide,
    )
    fetched = record(saved(unrolled, tmp_path / "b"), tmp_path, "fetch", x=wide)
    assert (
        sorted(loop.cells) == sorted(fetched.cells)
        and len(loop.cells) == 2
        and set(paths(loop).values()) == {"loop"}
    )
    for cell in loop.cells:
        assert_same(loop, fetched, cell)
    lower, upper = sorted(loop.cells)
    below = fetched.state_array(lower, "h").astype(np.float64)
    zeros = {
        "h0": np.zeros((6, 3), np.float32),
        **({"c0": np.zeros((6, 3), np.float32)} if "LSTM" in name else {}),
    }
    ref = expected(
        config,
        looped.weights[upper.rsplit("/", 1)[0] + "/" + config.scope_name],
        {"x": (below + wide).astype(np.float32), **zeros},
    )
    for g, gate in enumerate(loop.gates(upper)):
        np.testing.assert_allclose(
            loop.gate_array(upper, gate, "activation"), ref["activation"][:, :, g], atol=1e-5
        )
    frame = loop.gate_frame([upper], columns=["preactivation", "input", "recurrent", "bias"])
    parts = frame[["input", "recurrent", "bias"]].sum(axis=1)
    np.testing.assert_allclose(parts, frame["preactivation"], atol=1e-5)


@pytest.mark.parametrize("cf", ["v1", "v2"])
def test_a_bidirectional_residual_stack_with_lengths_records_what_static_rnn_computes(cf, tmp_path):
    def layers():
        return R.MultiRNNCell([R.ResidualWrapper(R.LSTMCell(3)) for _ in range(2)])

    wide = np.random.RandomState(2).randn(6, 5, 3).astype(np.float32)

    def dynamic(x):
        seq = v1.placeholder(tf.int32, [None], name="len")
        return list(
            tf.nest.flatten(
                v1.nn.bidirectional_dynamic_rnn(
                    layers(), layers(), x, sequence_length=seq, dtype=tf.float32
                )
            )
        )

    # static_rnn with sequence_length runs its steps in conds: recorded with --lengths instead
    def static(x):
        return [
            v1.nn.static_bidirectional_rnn(
                layers(), layers(), tf.unstack(x, axis=1), dtype=tf.float32
            )[0][-1]
        ]

    with control_flow(cf):
        looped = build(dynamic, features=3)
    unrolled = build(static, features=3)
    loop = record(saved(looped, tmp_path / "a"), tmp_path, "loop", "--verify", x=wide, len=LENGTHS)
    np.save(tmp_path / "len.npy", LENGTHS)
    fetched = record(
        saved(unrolled, tmp_path / "b"),
        tmp_path,
        "fetch",
        "--lengths",
        str(tmp_path / "len.npy"),
        x=wide,
    )
    assert sorted(loop.cells) == sorted(fetched.cells) and len(loop.cells) == 4
    # the backward half reads each sequence from its own end, the unrolled one from
    for cell in loop.cells:
        # the last step: --verify replayed it from what each step read
        for gate in loop.gates(cell):
            a, b = (
                loop.gate_array(cell, gate, "preactivation"),
                fetched.gate_array(cell, gate, "preactivation"),
            )
            for e, n in enumerate(LENGTHS):
                assert np.isnan(a[e, n:]).all() and ("/bw/" in cell or close(a[e, :n], b[e, :n])), (
                    f"{cell} {gate} example {e}"
                )


@pytest.mark.parametrize("cf", ["v1", "v2"])
def test_a_loop_bounded_by_the_features_records_its_steps_in_the_manifest(cf, tmp_path):
    """A while loop `i < tf.shape(x)[2]` over a [batch, 5, 3] input runs 3 steps: the manifest
    says the steps recorded, 3 (before: 5, the input's time axis), and each recorded h is the
    loop's, the last one TensorFlow's own final h."""
    steps, features = 5, 3
    x = np.random.RandomState(4).randn(2, steps, features).astype(np.float32)
    with control_flow(cf):
        graph = tf.Graph()
        with graph.as_default():
            inputs = v1.placeholder(tf.float32, [None, steps, features], name="x")
            cell = R.LSTMCell(4)
            read = tf.TensorArray(tf.float32, size=steps).unstack(tf.transpose(inputs, [1, 0, 2]))
            zero = cell.zero_state(tf.shape(inputs)[0], tf.float32)

            def step(i, c, h):
                _, new = cell(read.read(i), R.LSTMStateTuple(c, h))
                return i + 1, new.c, new.h

            count, _, h = tf.while_loop(
                lambda i, c, h: i < tf.shape(inputs)[2], step, [tf.constant(0), zero.c, zero.h]
            )
            session = v1.Session(graph=graph)
            session.run(v1.global_variables_initializer())
        randomise(session, graph)
        ran, final = session.run([count, h], {inputs: x})
        path = saved(Built(graph, session, inputs, [h], {}), tmp_path / "model")
    assert ran == features
    rec = record(path, tmp_path, "rec", x=x)
    (spec,) = rec.manifest["cells"]
    assert spec["path"] == "loop" and spec["steps"] == features
    recorded = rec.state_array(spec["name"], "h")
    assert recorded.shape[1] == features
    np.testing.assert_allclose(recorded[:, -1], final, atol=1e-6)
