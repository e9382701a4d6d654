"""What drives a gate (`--values ...,contributions`): each preactivation's input, recurrent and
bias parts (peephole, recurrent_bias where a kind has them), for every cell kind and every
path (unrolled, emitted by a rewritten loop, replayed, fused op, Keras layer), against a
float64 numpy recomputation written here from the inputs fed and the weights in the file.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import tracer
from recorders import Recording, SelectionError
from recorders.read.analysis import dominant_part
from tests.conftest import CONFIGS, build, randomise, run_cli, save, static_body
from tests.test_fused import build as build_fused
from tests.test_loops import EXPORT
from tests.test_replay import control_flow
from tracer._tf import tf, v1

PARTS = ["input", "recurrent", "bias", "peephole", "recurrent_bias"]
X = np.random.RandomState(3).randn(4, 5, 4).astype(np.float32)
TOL = 1e-5


def sig(v):
    return 1.0 / (1.0 + np.exp(-v))


ACT = {"tanh": np.tanh, "relu": lambda v: np.maximum(v, 0.0), "sigmoid": sig}


def expected_parts(
    kind: str,
    w: dict,
    x: np.ndarray,
    order: tuple[str, ...],
    forget_bias=1.0,
    cell_clip=None,
    proj_clip=None,
    activation="tanh",
    with_outputs=False,
) -> dict[str, dict[str, np.ndarray]]:
    """Per gate and part, [examples, steps, units] float64 (None where the kind has no such
    part), running the cell in float64 over `x` from zero state. `w` holds `kernel` on
    [x, h_prev] (input rows first), `bias`, and per kind `candidate_kernel`/`candidate_bias`
    (GRUCell), `w_*_diag`, `projection`, `recurrent_bias` (Keras GRU, reset_after). `order`
    is the kind's gate order (column blocks of `kernel`). `with_outputs`: also the h states
    [examples, steps, width], the input of a layer above."""
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    x = x.astype(np.float64)
    n, steps, d = x.shape
    k, b = w["kernel"], w["bias"]
    gru = kind in ("GRUCell", "GRU")
    units = w["candidate_kernel"].shape[1] if kind == "GRUCell" else k.shape[1] // len(order)
    width = k.shape[0] - d
    h, c = np.zeros((n, width)), np.zeros((n, units))
    outputs = []
    # GRUCell: c has its own kernel
    out = {g: {p: [] for p in PARTS} for g in (*order, "c") if g in order or kind == "GRUCell"}
    act = ACT[activation]

    def put(gate, **parts):
        for p in PARTS:
            out[gate][p].append(parts.get(p))

    def block(m, g):
        return m[..., order.index(g) * units : (order.index(g) + 1) * units]

    for t in range(steps):
        xt = x[:, t]
        if kind in ("BasicLSTMCell", "LSTMCell", "LSTM"):
            z = {g: block(xt @ k[:d] + h @ k[d:] + b, g) for g in "ijfo"}
            peep = "w_i_diag" in w
            i = sig(z["i"] + (w["w_i_diag"] * c if peep else 0))
            f = sig(z["f"] + forget_bias + (w["w_f_diag"] * c if peep else 0))
            c_new = f * c + i * act(z["j"])
            if cell_clip is not None:
                c_new = np.clip(c_new, -cell_clip, cell_clip)
            o = sig(z["o"] + (w["w_o_diag"] * c_new if peep else 0))
            for g in "ijfo":
                pp = {"i": c, "f": c, "o": c_new}.get(g)
                put(
                    g,
                    input=block(xt @ k[:d], g),
                    recurrent=block(h @ k[d:], g),
                    bias=np.broadcast_to(block(b, g), (n, units)),
                    peephole=w[f"w_{g}_diag"] * pp if peep and pp is not None else None,
                )
            h_new = o * act(c_new)
            if "projection" in w:
                h_new = h_new @ w["projection"]
                if proj_clip is not None:
                    h_new = np.clip(h_new, -proj_clip, proj_clip)
            h, c = h_new, c_new
        elif gru:
            gates = [g for g in order if g != "c"]
            rb = w.get("recurrent_bias")
            # the recurrent product (+ Keras' recurrent bias)
            inner = h @ k[d:] + (0 if rb is None else rb)
            for g in gates:
                put(
                    g,
                    input=block(xt @ k[:d], g),
                    recurrent=block(h @ k[d:], g),
                    bias=np.broadcast_to(block(b, g), (n, units)),
                    recurrent_bias=None
                    if rb is None
                    else np.broadcast_to(block(rb, g), (n, units)),
                )
            ru = {g: sig(block(xt @ k[:d] + b + inner, g)) for g in gates}
            r, u = ru["r"], ru["u"]
            if kind == "GRUCell":
                kc, bc = w["candidate_kernel"], w["candidate_bias"]
                parts = dict(
                    input=xt @ kc[:d],
                    recurrent=(r * h) @ kc[d:],
                    bias=np.broadcast_to(bc, (n, units)),
                )
            elif rb is not None:  # Keras, reset_after
                parts = dict(
                    input=block(xt @ k[:d], "c"),
                    recurrent=r * block(h @ k[d:], "c"),
                    bias=np.broadcast_to(block(b, "c"), (n, units)),
                    recurrent_bias=r * block(rb, "c"),
                )
            else:
                parts = dict(
                    input=block(xt @ k[:d], "c"),
                    recurrent=(r * h) @ block(k[d:], "c"),
                    bias=np.broadcast_to(block(b, "c"), (n, units)),
                )
            put("c", **parts)
            cand = act(sum(v for v in parts.values()))
            h = u * h + (1 - u) * cand
        else:  # BasicRNNCell, SimpleRNN
            put(
                order[0], input=xt @ k[:d], recurrent=h @ k[d:], bias=np.broadcast_to(b, (n, units))
            )
            h = act(xt @ k[:d] + h @ k[d:] + b)
        outputs.append(h)
    parts = {
        g: {p: None if v[0] is None else np.stack(v, axis=1) for p, v in ps.items()}
        for g, ps in out.items()
    }
    return (parts, np.stack(outputs, axis=1)) if with_outputs else parts


def check(rec: Recording, cell: str, want: dict, gates=None, steps=None) -> None:
    """Every recorded part equals `want` within TOL, a part the kind lacks is null, and the
    parts add up to the recorded preactivation within float32 rounding."""
    df = rec.gate_frame([cell], gates, steps=steps, columns=["preactivation", *PARTS])
    assert len(df)
    for gate, g in df.groupby("gate", observed=True):
        ex, st, un = (g[k].to_numpy() for k in ("example", "step", "unit"))
        for p in PARTS:
            if want[gate][p] is None:
                assert g[p].isna().all(), (gate, p)
            else:
                assert g[p].notna().all(), (gate, p)
                np.testing.assert_allclose(
                    g[p].to_numpy(),
                    want[gate][p][ex, st, un],
                    atol=TOL,
                    rtol=0,
                    err_msg=f"{gate} {p}",
                )
        total = (
            g[["input", "recurrent", "bias", "recurrent_bias"]]
            .fillna(0)
            .astype(np.float64)
            .sum(axis=1)
        )
        scale = g[["input", "recurrent", "bias", "recurrent_bias"]].abs().fillna(0).sum(axis=1)
        assert (np.abs(total - g["preactivation"]) <= 1e-6 * (scale + 1)).all(), gate


def tf1_order(kind: str) -> tuple[str, ...]:
    return ("r", "u") if kind == "GRUCell" else tracer.spec_for(kind).gates


def tf1_expected(name: str, w: dict) -> dict:
    config = CONFIGS[name]
    p = config.params
    kind = config.kind
    want = expected_parts(
        kind,
        w,
        X,
        tf1_order(kind),
        forget_bias=p.get("forget_bias", 1.0),
        cell_clip=p.get("cell_clip"),
        proj_clip=p.get("proj_clip"),
        activation=p.get("activation", "tanh"),
    )
    return want


def save_session(session, graph, root) -> str:
    with graph.as_default():
        return v1.train.Saver().save(session, str(root / "model.ckpt"))


def record(model, out, **kw) -> Recording:
    tracer.record(
        model, {"x": X}, out, values=["preactivation", "activation", "contributions"], **kw
    )
    return Recording(out)


@pytest.mark.parametrize("how", ["static", "loop-v2", "loop-v1", "replay"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_parts_of_every_tf1_cell_on_every_path(name, how, tmp_path):
    config = CONFIGS[name]
    if how == "static":
        built = build(static_body(config), features=4)
    else:
        with control_flow("v1" if how == "loop-v1" else "v2"):
            built = build(
                lambda x: [v1.nn.dynamic_rnn(config.make(), x, dtype=tf.float32)[0]], features=4
            )
    cell = f"rnn/{config.scope_name}"
    if how == "replay":  # a live session's loop cannot be rebuilt: its cells are replayed
        model = tracer.from_session(built.session)
    else:
        model = tracer.load_model(save(built, "checkpoint", tmp_path))
    with model:
        rec = record(model, tmp_path / "out")
    path = rec.cell(cell)["path"]
    assert (
        path == {"static": "fetch", "loop-v2": "loop", "loop-v1": "loop", "replay": "replay"}[how]
    )
    check(rec, cell, tf1_expected(name, built.weights[cell]))


def test_one_process_rewrites_a_loop_to_emit_other_tensors_again(tmp_path):
    """TensorFlow keeps the functions it makes in one registry a process, by name: a loop
    rewritten to emit its gates, then (in the same process) its gates and what each step read,
    then its gates again, is recorded each time (the rewrites are named after what they
    emit; one name for both was refused as a duplicate of a different definition)."""
    config = CONFIGS["GRUCell"]
    with control_flow("v2"):
        built = build(
            lambda x: [v1.nn.dynamic_rnn(config.make(), x, dtype=tf.float32)[0]], features=4
        )
    cell = f"rnn/{config.scope_name}"
    with tracer.load_model(save(built, "checkpoint", tmp_path)) as model:
        gates = [tmp_path / "gates", tmp_path / "gates-again"]
        tracer.record(model, {"x": X}, gates[0])
        rec = record(model, tmp_path / "parts")
        tracer.record(model, {"x": X}, gates[1])
    assert rec.cell(cell)["path"] == "loop"
    check(rec, cell, tf1_expected("GRUCell", built.weights[cell]))
    for out in gates:
        pd.testing.assert_frame_equal(
            Recording(out).gate_frame(), rec.gate_frame()[Recording(out).gate_frame().columns]
        )


@pytest.mark.parametrize("where", ["unrolled", "loop-v1", "loop-v2"])
@pytest.mark.parametrize("kind", ["LSTMBlockCell", "GRUBlockCell"])
def test_parts_of_fused_ops(kind, where, tmp_path):
    """LSTMBlockCell (peepholes, forget bias, cell clip) and GRUBlockCell ops, one per step or
    inside a dynamic_rnn loop (control flow v1 and v2)."""
    from tests.test_fused import D, T, _BlockCell

    if where == "unrolled":
        graph, session, values = build_fused(kind)
    else:
        with control_flow(where[-2:]):
            graph = tf.Graph()
            with graph.as_default():
                v1.nn.dynamic_rnn(
                    _BlockCell(kind),
                    v1.placeholder(tf.float32, [None, T, D], name="x"),
                    dtype=tf.float32,
                )
                session = v1.Session(graph=graph)
                session.run(v1.global_variables_initializer())
            randomise(session, graph)
            with graph.as_default():
                values = {v.op.name: session.run(v) for v in v1.global_variables()}
    x = np.random.RandomState(5).randn(3, T, D).astype(np.float32)
    with (
        tracer.from_session(session)
        if where == "unrolled"
        else tracer.load_model(save_session(session, graph, tmp_path)) as model
    ):
        tracer.record(model, {"x": x}, tmp_path / "out", values=["contributions", "preactivation"])
    rec = Recording(tmp_path / "out")
    (cell,) = rec.cells
    assert rec.cell(cell)["path"] == ("fused" if where == "unrolled" else "loop")
    if kind == "GRUBlockCell":
        w = {
            "kernel": values["rnn/gru_cell/gates/kernel"],
            "bias": values["rnn/gru_cell/gates/bias"],
            "candidate_kernel": values["rnn/gru_cell/candidate/kernel"],
            "candidate_bias": values["rnn/gru_cell/candidate/bias"],
        }
        want = expected_parts("GRUCell", w, x, ("r", "u"))
    else:
        w = {
            "kernel": values["rnn/lstm_cell/kernel"],
            "bias": values["rnn/lstm_cell/bias"],
            **{n: values[f"rnn/lstm_cell/{n}"] for n in ("w_i_diag", "w_f_diag", "w_o_diag")},
        }
        want = expected_parts(
            "LSTMCell", w, x, ("i", "j", "f", "o"), forget_bias=0.6, cell_clip=0.8
        )
    check(rec, cell, want)
    assert "activation" not in pd.read_parquet(tmp_path / "out" / "gates").columns


def keras_models():
    import keras

    def one(layer):
        inp = keras.Input((5, 4), name="x")  # fed as {"x": X}: by its own name
        return keras.Model(inp, layer(inp))

    return {
        "LSTM": lambda: one(keras.layers.LSTM(3, return_sequences=True)),
        "GRU-reset_after": lambda: one(
            keras.layers.GRU(3, return_sequences=True, reset_after=True)
        ),
        "GRU-reset_before": lambda: one(
            keras.layers.GRU(3, return_sequences=True, reset_after=False)
        ),
        "SimpleRNN": lambda: one(keras.layers.SimpleRNN(3, return_sequences=True)),
    }


@pytest.mark.parametrize("name", ["LSTM", "GRU-reset_after", "GRU-reset_before", "SimpleRNN"])
def test_parts_of_keras_layers(name, tmp_path):
    model = keras_models()[name]()
    rng = np.random.RandomState(2)
    model.set_weights([rng.uniform(-1, 1, w.shape).astype(np.float32) for w in model.get_weights()])
    layer = model.layers[1]
    kernel, recurrent, bias = (np.asarray(v) for v in layer.get_weights())
    w = {"kernel": np.concatenate([kernel, recurrent]), "bias": bias[0] if bias.ndim == 2 else bias}
    if bias.ndim == 2:
        w["recurrent_bias"] = bias[1]
    order = {"LSTM": ("i", "f", "j", "o"), "SimpleRNN": ("h",)}.get(
        name.split("-")[0], ("u", "r", "c")
    )
    kind = name.split("-")[0]
    # Keras adds no forget bias of its own
    want = expected_parts(kind, w, X, order, forget_bias=0.0)
    rec = record(model, tmp_path / "out")
    (cell,) = rec.cells
    check(rec, cell, want)


def test_a_selection_writes_parts_only_for_what_it_selects(tmp_path):
    config = CONFIGS["LSTMCell-peepholes-proj-clip"]
    built = build(static_body(config), features=4)
    path = save(built, "checkpoint", tmp_path)
    np.save(tmp_path / "x.npy", X)
    done = run_cli(
        "record",
        path,
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "out"),
        "--quiet",
        "--gates",
        "f,o",
        "--steps",
        "1:3",
        "--values",
        "activation,contributions",
    )
    assert done.returncode == 0, done.stderr
    gates = pd.read_parquet(tmp_path / "out" / "gates")
    assert set(gates["gate"]) == {"f", "o"} and set(gates["step"]) == {1, 2}
    assert list(gates.columns[:9]) == ["example", "step", "unit", "activation", *PARTS]
    rec = Recording(tmp_path / "out")
    want = tf1_expected("LSTMCell-peepholes-proj-clip", built.weights["rnn/lstm_cell"])
    df = rec.gate_frame(columns=PARTS)
    for gate, g in df.groupby("gate", observed=True):
        ex, st, un = (g[k].to_numpy() for k in ("example", "step", "unit"))
        for p in ("input", "recurrent", "bias", "peephole"):
            np.testing.assert_allclose(g[p].to_numpy(), want[gate][p][ex, st, un], atol=TOL, rtol=0)
        assert g["recurrent_bias"].isna().all()


def test_parts_are_refused_by_name_in_a_recording_without_them(tmp_path):
    built = build(static_body(CONFIGS["BasicRNNCell"]), features=4)
    with tracer.load_model(save(built, "checkpoint", tmp_path)) as model:
        tracer.record(model, {"x": X}, tmp_path / "out")
    with pytest.raises(
        SelectionError, match="record with --values preactivation,activation,contributions"
    ):
        Recording(tmp_path / "out").gate_frame(columns=["input"])
    with pytest.raises(
        SelectionError, match="expected some of preactivation, activation, contributions"
    ):
        tracer.Selection(values=("inputs",))


@pytest.mark.parametrize(
    "values", [("preactivation", "activation", "contributions"), ("activation",)]
)
def test_gate_frame_holds_every_value_column_pandas_reads(values, tmp_path):
    """`Recording.gate_frame()` returns the value columns `pandas.read_parquet` of `gates/`
    returns, the parts included (before: preactivation and activation only, and a recording of
    activations alone refused it)."""
    built = build(static_body(CONFIGS["BasicLSTMCell"]), features=4)
    with tracer.load_model(save(built, "checkpoint", tmp_path)) as model:
        tracer.record(model, {"x": X}, tmp_path / "out", values=list(values))
    ours = Recording(tmp_path / "out").gate_frame()
    theirs = pd.read_parquet(tmp_path / "out" / "gates")
    assert list(ours.columns) == list(theirs.columns)
    assert len(ours) == len(theirs) > 0


def test_dominant_part(tmp_path):
    """A BasicRNNCell whose bias is far larger than anything else: bias dominates every unit;
    with the bias and the recurrent kernel zeroed, the input does. The table's figures
    equal pandas over the same rows."""
    config = CONFIGS["BasicRNNCell"]
    built = build(static_body(config), features=4)
    with built.graph.as_default():
        (kernel,) = [v for v in v1.global_variables() if v.op.name.endswith("kernel")]
        (bias,) = [v for v in v1.global_variables() if v.op.name.endswith("bias")]
        bias.load(np.full(3, 50.0, np.float32), built.session)
    with tracer.from_session(built.session) as model:
        rec = record(model, tmp_path / "big-bias")
    cell = rec.cells[0]
    assert {rec.dominant_part(cell, "h", u, steps=(1, 4)) for u in range(3)} == {"bias"}
    with built.graph.as_default():
        k = built.session.run(kernel)
        k[4:] = 0
        kernel.load(k, built.session)
        bias.load(np.zeros(3, np.float32), built.session)
    with tracer.from_session(built.session) as model:
        rec = record(model, tmp_path / "input")
    assert {rec.dominant_part(cell, "h", u) for u in range(3)} == {"input"}

    table = dominant_part(rec, cell, "h", steps=(1, 4))
    df = rec.gate_frame([cell], ["h"], steps=(1, 4), columns=PARTS)
    for (unit, part), row in table.set_index(["unit", "part"]).iterrows():
        values = df.loc[df["unit"] == unit, part]
        assert row["mean_abs"] == pytest.approx(values.abs().mean()) and row[
            "mean"
        ] == pytest.approx(values.mean())
        assert row["rows"] == len(values) == 4 * 3
    # the kind has no peephole nor recurrent bias
    assert set(table["part"]) == {"input", "recurrent", "bias"}
    assert table.groupby("unit")["share"].sum().to_numpy() == pytest.approx(np.ones(3))
    assert table.loc[table["dominant"], "part"].tolist() == ["input"] * 3


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["loop", "unroll"])
def test_parts_of_a_keras_3_export(how, tmp_path):
    """A TF2 SavedModel (Keras 3 `model.export()`) of LSTM, GRU (reset_after) and SimpleRNN
    layers, recorded from its rewritten loops or its unrolled steps: every part of every
    layer against Keras' formulas in float64, each layer fed the one below it."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", EXPORT, str(tmp_path / "model"), how],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    rng = np.random.RandomState(0)  # the weights the script sets, in model.get_weights() order
    shapes = {
        "lstm": [(4, 12), (3, 12), (12,)],
        "gru": [(3, 6), (2, 6), (2, 6)],
        "rnn": [(2, 2), (2, 2), (2,)],
    }
    weights = {
        name: [rng.uniform(-0.8, 0.8, shape).astype(np.float32) for shape in s]
        for name, s in shapes.items()
    }
    np.save(tmp_path / "x.npy", X)
    done = run_cli(
        "record",
        str(tmp_path / "model"),
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "out"),
        "--quiet",
        "--values",
        "preactivation,contributions",
    )
    assert done.returncode == 0, done.stderr
    rec = Recording(tmp_path / "out")
    assert {rec.cell(c)["path"] for c in rec.cells} == {"loop" if how == "loop" else "fetch"}
    x = X
    for layer, kind, order, cell in [
        ("lstm", "LSTM", ("i", "f", "j", "o"), "lstm/lstm_cell"),
        ("gru", "GRU", ("u", "r", "c"), "gru/gru_cell"),
        ("rnn", "SimpleRNN", ("h",), "rnn/simple_rnn_cell"),
    ]:
        kernel, recurrent, bias = weights[layer]
        w = {
            "kernel": np.concatenate([kernel, recurrent]),
            "bias": bias[0] if bias.ndim == 2 else bias,
        }
        if bias.ndim == 2:
            w["recurrent_bias"] = bias[1]
        want, x = expected_parts(kind, w, x, order, forget_bias=0.0, with_outputs=True)
        check(rec, cell, want)
