"""`--hold`: values held inside the model's own computation, checked against models gatetrace
did not rewrite: two stacked BasicLSTMCells written in numpy from TensorFlow's documented
equations with the hold in them, and, for a unit of h ablated at every step, the model whose
weights are edited so that the unit reaches nothing, run by TensorFlow itself. The same network
unrolled (`static_rnn`) and in a while loop (`dynamic_rnn`, control flow v2 and v1)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import tracer
from recorders import Recording
from recorders.errors import SelectionError
from tests.conftest import build, read_gates, read_state, record_x, run_cli, save
from tracer._tf import tf, v1
from tracer.cells.holds import Hold, parse_hold

UNITS, FEATURES, STEPS, FORGET_BIAS = 3, 4, 5, 0.7
LAYERS = ("rnn/multi_rnn_cell/cell_0/basic_lstm_cell", "rnn/multi_rnn_cell/cell_1/basic_lstm_cell")


def _two_layers(x):
    cells = [v1.nn.rnn_cell.BasicLSTMCell(UNITS, forget_bias=FORGET_BIAS) for _ in LAYERS]
    outputs, _ = v1.nn.static_rnn(
        v1.nn.rnn_cell.MultiRNNCell(cells), tf.unstack(x, axis=1), dtype=tf.float32
    )
    return [outputs[-1]]


def _in_a_loop(x):
    cells = [v1.nn.rnn_cell.BasicLSTMCell(UNITS, forget_bias=FORGET_BIAS) for _ in LAYERS]
    outputs, _ = v1.nn.dynamic_rnn(v1.nn.rnn_cell.MultiRNNCell(cells), x, dtype=tf.float32)
    return [outputs[:, -1]]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    built = build(_two_layers, steps=STEPS, features=FEATURES, seed=3)
    path = save(built, "checkpoint", tmp_path_factory.mktemp("hold"))
    return path, built


FLAVOURS = ("static_rnn", "dynamic_rnn-v2", "dynamic_rnn-v1", "dynamic_rnn-v1-frozen")


@pytest.fixture(scope="module", params=FLAVOURS)
def every_model(request, tmp_path_factory):
    """The network as TF1 scripts built it: unrolled, or in a while loop of either control flow."""
    if "-v1" in request.param:
        v1.disable_control_flow_v2()
    try:
        body = _two_layers if request.param == "static_rnn" else _in_a_loop
        built = build(body, steps=STEPS, features=FEATURES, seed=3)
    finally:
        v1.enable_control_flow_v2()
    # a frozen TF1 loop leaves its states' widths open (Merge): the cell says them
    fmt = "frozen" if request.param.endswith("frozen") else "checkpoint"
    path = save(built, fmt, tmp_path_factory.mktemp("hold"))
    return path, built, request.param


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def oracle(weights, x, holds=()):
    """BasicLSTMCell as TensorFlow documents it, layer over layer: [i, j, f, o] =
    [x, h] @ kernel + bias; c = c * sigmoid(f + forget_bias) + sigmoid(i) * tanh(j);
    h = tanh(c) * sigmoid(o); each hold (layer, what, unit, value, scale, steps) applied
    where the cell's next ops read it. Returns per layer: gates' activations [N, T, 4, U], c, h."""
    out = []
    below = x
    for layer, name in enumerate(LAYERS):
        kernel, bias = weights[name]["kernel"], weights[name]["bias"]
        n = below.shape[0]
        c = np.zeros((n, UNITS), np.float64)
        h = np.zeros((n, UNITS), np.float64)
        acts, cs, hs = [], [], []
        for t in range(STEPS):

            def held(what, value, layer=layer, t=t):
                for lay, w, unit, v, scale, (start, stop) in holds:
                    if lay == layer and w == what and start <= t < stop:
                        value = value.copy()
                        value[:, unit] = value[:, unit] * v if scale else v
                return value

            z = np.concatenate([below[:, t], h], axis=1) @ kernel + bias
            i, j, f, o = np.split(z, 4, axis=1)
            ai, aj = held("i", _sigmoid(i)), held("j", np.tanh(j))
            af, ao = held("f", _sigmoid(f + FORGET_BIAS)), held("o", _sigmoid(o))
            c = held("c", c * af + ai * aj)
            h = held("h", np.tanh(c) * ao)
            acts.append(np.stack([ai, aj, af, ao], axis=1))
            cs.append(c)
            hs.append(h)
        out.append((np.stack(acts, axis=1), np.stack(cs, axis=1), np.stack(hs, axis=1)))
        below = out[-1][2]
    return out


def _record(model_path, x, out, holds):
    with tracer.load_model(model_path) as m:
        tracer.record(m, {"x": x}, out, holds=tuple(parse_hold(h) for h in holds))
    return out


CASES = {
    # a unit of the lower layer's output ablated at every step
    "h-ablated": (["cell_0/basic_lstm_cell:h:1=0"], [(0, "h", 1, 0.0, False, (0, STEPS))]),
    # the upper layer's unit 2 never forgets from step 2 on
    "f-held": (
        ["rnn/multi_rnn_cell/cell_1/basic_lstm_cell:f:2=1@2:"],
        [(1, "f", 2, 1.0, False, (2, STEPS))],
    ),
    # two holds: memory halved at steps 1 and 2, an input gate closed at step 3
    # the same hold twice: applied twice, in order
    "c-scaled-twice": (
        ["cell_0/basic_lstm_cell:c:0=x0.5", "cell_0/basic_lstm_cell:c:0=x0.5"],
        [(0, "c", 0, 0.5, True, (0, STEPS)), (0, "c", 0, 0.5, True, (0, STEPS))],
    ),
    "c-scaled-and-i-set": (
        ["cell_0/basic_lstm_cell:c:0=x0.5@1:3", "cell_0/basic_lstm_cell:i:0,2=0@3"],
        [(0, "c", 0, 0.5, True, (1, 3)), (0, "i", [0, 2], 0.0, False, (3, 4))],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_held_values_are_those_of_the_documented_equations_with_the_hold(
    every_model, inputs, tmp_path, case
):
    path, built, flavour = every_model
    specs, holds = CASES[case]
    if "-v1" in flavour and any("@" in s for s in specs):
        with pytest.raises(SelectionError, match="leave @STEPS out"):
            _record(path, inputs, tmp_path / "run", specs)
        return
    out = _record(path, inputs, tmp_path / "run", specs)
    expected = oracle(built.weights, inputs.astype(np.float64), holds)
    plain = oracle(built.weights, inputs.astype(np.float64))
    for layer, name in enumerate(LAYERS):
        acts, c, h = expected[layer]
        _, recorded = read_gates(out, name, ("i", "j", "f", "o"))
        np.testing.assert_allclose(recorded, acts, atol=2e-6)
        np.testing.assert_allclose(read_state(out, name, "c"), c, atol=2e-6)
        np.testing.assert_allclose(read_state(out, name, "h"), h, atol=2e-6)
    # the hold changed what the upper layer computed: the test sees a difference
    assert np.abs(expected[1][2] - plain[1][2]).max() > 1e-3
    # the manifest says what was held, each cell by its full name
    full = [replace(h, cell=_full(h.cell)).describe() for h in map(parse_hold, specs)]
    assert json.loads((out / "manifest.json").read_text())["held"] == full


def _full(cell: str) -> str:
    return next(n for n in LAYERS if n == cell or n.endswith("/" + cell))


def test_an_ablated_unit_of_h_equals_the_model_whose_weights_no_longer_read_it(
    every_model, inputs, tmp_path
):
    """The oracle TensorFlow computes: layer 0's unit 1 zeroed in the rows of every matrix
    that reads it (its own recurrent rows, the upper layer's input rows), the model run by
    the builder's own session; its upper layer's output is what the held recording's is."""
    path, built, _ = every_model
    out = _record(path, inputs, tmp_path / "run", ["cell_0/basic_lstm_cell:h:1=0"])
    with built.graph.as_default():
        kernels = {v.op.name: v for v in v1.global_variables() if v.op.name.endswith("kernel")}
        lower, upper = (kernels[f"{name}/kernel"] for name in LAYERS)
        k0, k1 = built.session.run([lower, upper])
        edited0, edited1 = k0.copy(), k1.copy()
        edited0[FEATURES + 1] = 0  # the lower cell's recurrent row of h unit 1
        edited1[1] = 0  # the upper cell's input row of it
        lower.load(edited0, built.session)
        upper.load(edited1, built.session)
        try:
            top = built.session.run(built.outputs[0], {built.inputs: inputs})
        finally:
            lower.load(k0, built.session)
            upper.load(k1, built.session)
    np.testing.assert_allclose(read_state(out, LAYERS[1], "h")[:, -1], top, atol=1e-6)
    plain = built.session.run(built.outputs[0], {built.inputs: inputs})
    assert np.abs(plain - top).max() > 1e-3  # the edit matters


def test_a_hold_of_nothing_records_exactly_the_plain_recording(every_model, inputs, tmp_path):
    path, _, _ = every_model
    plain = _record(path, inputs, tmp_path / "plain", [])
    same = _record(path, inputs, tmp_path / "same", ["cell_0/basic_lstm_cell:h:all=x1"])
    for name in LAYERS:
        a, b = (
            read_gates(plain, name, ("i", "j", "f", "o")),
            read_gates(same, name, ("i", "j", "f", "o")),
        )
        assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
        for state in ("c", "h"):
            assert np.array_equal(read_state(plain, name, state), read_state(same, name, state))


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("cell_0/basic_lstm_cell:h:3=0", "has 3 units (0 to 2); found unit 3"),
        ("cell_0/basic_lstm_cell:r:0=0", "has states c, h and gates i, j, f, o"),
        ("basic_lstm_cell:h:0=0", "several cells' names end with /basic_lstm_cell"),
        ("gru_cell:h:0=0", "no cell is named so or ends with /gru_cell"),
        (
            "cell_0/basic_lstm_cell:h:0=0@9:",
            "holds no step of rnn/multi_rnn_cell/cell_0/basic_lstm_cell",
        ),
    ],
)
def test_a_hold_that_does_not_fit_the_model_is_one_line(model, inputs, tmp_path, spec, said):
    path, _ = model
    done = record_x(path, inputs, tmp_path / "run", "--hold", spec)
    assert done.returncode == 2
    assert said in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("cell:h=0", "expected CELL:WHAT:UNITS=VALUE"),
        ("cell:h:1", "expected CELL:WHAT:UNITS=VALUE"),
        ("cell:h:a=0", "expected UNITS as 17, 3,7 or 0-3"),
        ("cell:h:3-1=0", "ends before it starts"),
        ("cell:h:1=nan", "not a finite float32"),
        ("cell:h:1=1e39", "not a finite float32"),
        ("cell:h:1=zero", "expected VALUE as a number"),
        ("cell:h:1=0@", "expected CELL:WHAT:UNITS=VALUE"),
        ("cell:h:1=0@5:2", "hold nothing"),
        ("cell:h:1=0@x", "expected STEPS"),
        ("cell:f.pre.pre:1=0", "expected WHAT"),
        ("cell:h:1=0@2:4294967300", "steps are numbered 0 to 2147483647"),
        ("cell:h:1=0@99999999999999999999:", "steps are numbered 0 to 2147483647"),
        ("cell:h:0-1048576=0", "names units past 1048575"),
        ("cell:h:" + ",".join(f"0-{2**19}" for _ in range(3)) + "=0", "names units past 1048575"),
        ("nope\nX:h:1=0", "found a control character"),
    ],
)
def test_a_malformed_hold_is_refused_before_anything_loads(spec, said):
    with pytest.raises(SelectionError, match=said.replace("(", r"\(").replace(")", r"\)")):
        parse_hold(spec)


def test_a_hold_is_spelled_one_way():
    assert parse_hold("c:f:7,2-3=1@2:").describe() == "c:f:2-3,7=1.0@2:"
    assert parse_hold("c:c:all=x0.5@4") == Hold("c", "c", None, 0.5, True, (4, 5))
    # the value exactly as given: two holds that differ in the 7th digit are two holds
    assert parse_hold("c:c:1=0.5000001").describe() == "c:c:1=0.5000001"
    assert parse_hold("c:c:1=x1.0000001").describe() == "c:c:1=x1.0000001"
    assert parse_hold("c:h:1=0@0:") == parse_hold("c:h:1=0")  # from the first step: every step


def test_every_reader_says_a_recording_was_held(model, inputs, tmp_path):
    """inspect, compare (its lines, --json and --out's metadata) and the view's overview say
    what was held; a recording of the model's own computation says nothing of holds."""
    from recorders.view.data import overview

    path, _ = model
    np.save(tmp_path / "x.npy", inputs)
    feed = ["--feed", f"x={tmp_path / 'x.npy'}", "--quiet"]
    spec = "cell_0/basic_lstm_cell:h:1=0"
    full = "rnn/multi_rnn_cell/cell_0/basic_lstm_cell:h:1=0.0"
    for name, extra in (("base", []), ("held", ["--hold", spec])):
        done = run_cli("record", path, *feed, "--out", str(tmp_path / name), *extra)
        assert done.returncode == 0, done.stderr
    said = run_cli("inspect", str(tmp_path / "held")).stdout
    assert f"held: values held inside the model ({full})" in said
    assert "held" not in run_cli("inspect", str(tmp_path / "base")).stdout
    compared = run_cli("compare", str(tmp_path / "base"), str(tmp_path / "held"))
    assert f"note: B was recorded with values held inside the model ({full})" in compared.stdout
    as_json = json.loads(
        run_cli("compare", str(tmp_path / "base"), str(tmp_path / "held"), "--json").stdout
    )
    assert [n for n in as_json["notes"] if full in n] and not [
        n for n in as_json["notes"] if n.startswith("A ")
    ]
    assert overview(Recording(tmp_path / "held"))["held"].startswith("values held inside")
    assert overview(Recording(tmp_path / "base"))["held"] is None
    # the upper layer moved: compare sees it
    assert "first beyond" in compared.stdout


def test_a_manifest_whose_holds_are_not_text_is_refused(model, inputs, tmp_path):
    path, _ = model
    out = _record(path, inputs, tmp_path / "run", ["cell_0/basic_lstm_cell:h:1=0"])
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["held"] = [{"cell": 1}]
    (out / "manifest.json").write_text(json.dumps(manifest))
    done = run_cli("inspect", str(out))
    assert done.returncode == 2 and "held is" in done.stderr, done.stderr


def _gru(x):
    outputs, _ = v1.nn.static_rnn(
        v1.nn.rnn_cell.GRUCell(UNITS), tf.unstack(x, axis=1), dtype=tf.float32
    )
    return [outputs[-1]]


def test_a_gate_sharing_one_tensor_with_another_is_held_in_its_own_columns(inputs, tmp_path):
    """GRUCell computes r and u by one sigmoid over [batch, 2 x units]: holding u's unit 1
    holds that column alone. Oracle: GRUCell as TensorFlow documents it, r, u =
    sigmoid([x, h] @ W + b); c = tanh([x, r * h] @ Wc + bc); h = u * h + (1 - u) * c."""
    built = build(_gru, steps=STEPS, features=FEATURES, seed=5)
    path = save(built, "checkpoint", tmp_path)
    out = _record(path, inputs, tmp_path / "run", ["gru_cell:u:1=0@2:"])
    w = built.weights["rnn/gru_cell"]
    h = np.zeros((len(inputs), UNITS))
    gates, hs = [], []
    for t in range(STEPS):
        x = inputs[:, t].astype(np.float64)
        ru = _sigmoid(np.concatenate([x, h], 1) @ w["kernel"] + w["bias"])
        r, u = np.split(ru, 2, axis=1)
        if t >= 2:
            u = u.copy()
            u[:, 1] = 0.0
        c = np.tanh(np.concatenate([x, r * h], 1) @ w["candidate_kernel"] + w["candidate_bias"])
        h = u * h + (1 - u) * c
        gates.append(np.stack([r, u, c], axis=1))
        hs.append(h)
    _, recorded = read_gates(out, "rnn/gru_cell", ("r", "u", "c"))
    np.testing.assert_allclose(recorded, np.stack(gates, axis=1), atol=2e-6)
    np.testing.assert_allclose(
        read_state(out, "rnn/gru_cell", "h"), np.stack(hs, axis=1), atol=2e-6
    )
    assert (recorded[:, 2:, 1, 1] == 0).all() and (recorded[:, :2, 1, 1] != 0).all()


def test_what_cannot_be_held_is_one_line(model, tmp_path):
    """A fused op's cell, a live session's graph: refused, each naming why,
    before anything is written."""
    from tests.test_fused import build as fused

    x = np.zeros((2, 5, 4), np.float32)
    graph, session, _ = fused("LSTMBlockCell")
    with graph.as_default():
        v1.train.Saver().save(session, str(tmp_path / "model.ckpt"))
    with tracer.load_model(str(tmp_path / "model.ckpt")) as m:
        with pytest.raises(SelectionError, match=r"one fused op \(LSTMBlockCell\)"):
            tracer.record(m, {"x": x}, tmp_path / "a", holds=(parse_hold("lstm_cell:h:0=0"),))
    _, built = model
    live = tracer.from_session(built.session)
    with pytest.raises(SelectionError, match="a live session's graph"):
        tracer.record(
            live, {"x": x}, tmp_path / "b", holds=(parse_hold("cell_0/basic_lstm_cell:h:0=0"),)
        )
    assert not any((tmp_path / n).exists() for n in "ab")  # (Keras layers: test_hold_keras.py)


def test_verify_with_a_hold_is_one_line(model, inputs, tmp_path):
    path, _ = model
    np.save(tmp_path / "x.npy", inputs)
    done = run_cli(
        "record",
        path,
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "run"),
        "--hold",
        "cell_0/basic_lstm_cell:h:0=0",
        "--verify",
        "--quiet",
    )
    assert done.returncode == 2 and "--verify with --hold" in done.stderr, done.stderr


def test_an_output_the_hold_replaces_is_recorded_held(model, inputs, tmp_path):
    """static_rnn's last output is the cell's last h itself: named as an output, it is the
    held value the model's later ops read, not the value before the hold."""
    path, _ = model
    with tracer.load_model(path) as m:
        (cell,) = [c for c in tracer.find_all(m) if c.name == LAYERS[1]]
        last_h = cell.steps[-1].states[cell.spec.states.index("h")]
        tracer.record(
            m,
            {"x": inputs},
            tmp_path / "run",
            outputs=(last_h,),
            holds=(parse_hold("cell_1/basic_lstm_cell:h:all=0@4"),),
        )
    rec = Recording(tmp_path / "run")
    assert (rec.output_frame(last_h)["value"] == 0).all()
    assert (read_state(tmp_path / "run", LAYERS[1], "h")[:, -1] == 0).all()


def _open_length(x):
    cells = [v1.nn.rnn_cell.BasicLSTMCell(UNITS) for _ in LAYERS]
    outputs, _ = v1.nn.dynamic_rnn(v1.nn.rnn_cell.MultiRNNCell(cells), x, dtype=tf.float32)
    return [outputs[:, -1]]


def test_a_hold_past_the_steps_a_loop_runs_is_one_line(inputs, tmp_path):
    """A loop whose length only the fed sequences set: a hold from step 50 of 5 holds nothing."""
    built = build(_open_length, steps=None, features=FEATURES, seed=3)
    path = save(built, "checkpoint", tmp_path)
    done = record_x(path, inputs, tmp_path / "run", "--hold", "cell_0/basic_lstm_cell:h:0=0@50:")
    assert done.returncode == 2 and "whose loop ran steps 0 to 4" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "run").exists()
    done = record_x(path, inputs, tmp_path / "run", "--hold", "cell_0/basic_lstm_cell:h:0=0@3:")
    assert done.returncode == 0, done.stderr


def test_a_resume_with_other_holds_names_them(model, inputs, tmp_path):
    path, _ = model
    np.save(tmp_path / "x.npy", inputs)
    feed = ["--feed", f"x={tmp_path / 'x.npy'}", "--out", str(tmp_path / "run"), "--quiet"]
    spec = "cell_0/basic_lstm_cell:h:1=0"
    assert run_cli("record", path, *feed, "--hold", spec).returncode == 0
    done = run_cli("record", path, *feed, "--resume")
    full = "rnn/multi_rnn_cell/cell_0/basic_lstm_cell:h:1=0.0"
    assert (
        done.returncode == 2
        and f"recorded with --hold '{full}', this run gives no --hold: give the holds it was recorded with)"
        in done.stderr
    ), done.stderr


def test_a_manifests_holds_are_printable_text(model, inputs, tmp_path):
    path, _ = model
    out = _record(path, inputs, tmp_path / "run", ["cell_0/basic_lstm_cell:h:1=0"])
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["held"] = ["x\x1b[31m\ngatetrace: error: fake"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    done = run_cli("inspect", str(out))
    assert done.returncode == 2 and "printable text" in done.stderr and "\x1b" not in done.stderr


def test_units_says_the_recording_was_held(model, inputs, tmp_path):
    path, _ = model
    out = _record(path, inputs, tmp_path / "run", ["cell_0/basic_lstm_cell:h:1=0"])
    np.save(tmp_path / "labels.npy", np.arange(len(inputs)) % 2)
    said = run_cli("units", str(out), "--labels", str(tmp_path / "labels.npy"), "--top", "2").stdout
    assert said.startswith(f"note: {out} was recorded with values held inside the model"), said


def test_a_held_tensor_nothing_reads_is_one_line(tmp_path):
    """A cell of one's own whose named state is an Identity beside the computation (the next
    step reads the raw sum): holding it would change the recording and nothing the model
    computes, the recording contradicting itself."""
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, STEPS, FEATURES], name="x")
        w = {k: v1.get_variable(f"my_lstm/W_{k}", [FEATURES + UNITS, UNITS]) for k in "ifoc"}
        h = c = tf.zeros([tf.shape(x)[0], UNITS])
        for t, x_t in enumerate(tf.unstack(x, axis=1)):
            z = {k: tf.matmul(tf.concat([x_t, h], 1), w[k]) for k in "ifoc"}
            i = tf.sigmoid(z["i"], name=f"my_lstm/input_gate_{t}")
            f = tf.sigmoid(z["f"], name=f"my_lstm/forget_gate_{t}")
            o = tf.sigmoid(z["o"], name=f"my_lstm/output_gate_{t}")
            g = tf.tanh(z["c"], name=f"my_lstm/cell_gate_{t}")
            c = f * c + i * g
            tf.identity(c, name=f"my_lstm/c_state_{t}")  # named, read by nothing
            h = tf.identity(o * tf.tanh(c), name=f"my_lstm/h_state_{t}")
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            v1.train.Saver().save(session, str(tmp_path / "model.ckpt"))
    done = record_x(
        str(tmp_path / "model.ckpt"),
        np.ones((2, STEPS, FEATURES), np.float32),
        tmp_path / "run",
        "--hold",
        "my_lstm:c:all=0",
        "--gate-ops",
        r"(?P<cell>my_lstm)/(?P<gate>\w+)_gate_(?P<step>\d+)",
        "--state-ops",
        r"(?P<cell>my_lstm)/(?P<state>[ch])_state_(?P<step>\d+)",
    )
    assert done.returncode == 2 and "no op of the model reads my_lstm/c_state_0:0" in done.stderr, (
        done.stderr
    )
    assert not (tmp_path / "run").exists()
