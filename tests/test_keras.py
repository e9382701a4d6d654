"""Keras LSTM, GRU and SimpleRNN layers (tf-keras and Keras 3): replayed, checked, recorded.

Every model gets random weights, biases included. The yardstick is a float64 numpy
recomputation written here from Keras' own formulas, in Keras' gate order, run on each
layer's input as Keras computed it (a probe model returns the layers' inputs).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import tracer
from recorders import GatetraceError, Recording, ReplayMismatchError
from recorders.errors import FeedError
from tests.conftest import run_cli
from tracer.find.keras import find_layers
from tracer.load.keras import wrap
from tracer.values.keras import KerasPlan, resolve_inputs

FRAMEWORKS = ("keras3", "tf-keras")
T, FEATURES = 6, 3


def keras_module(framework: str):
    import tracer._tf  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow loads)

    if framework == "keras3":
        import keras
    else:
        import tf_keras as keras
    return keras


def sequences(n: int = 7, seed: int = 1) -> np.ndarray:
    """Inputs with padding (zeros, which the Masking layer masks) at the end of some rows and
    at the start of others (Keras' pad_sequences pads at the start by default)."""
    x = np.random.RandomState(seed).uniform(-1, 1, (n, T, FEATURES)).astype(np.float32)
    x[1, 4:] = 0
    x[2, :3] = 0
    x[3, :] = 0
    x[5, 1] = 0  # a hole in the middle
    return x


def randomise(model, seed: int = 0) -> None:
    rng = np.random.RandomState(seed)
    for w in model.weights:
        w.assign(rng.uniform(-0.8, 0.8, tuple(w.shape)).astype(np.float32))


def masked_model(framework: str):
    """Masking -> LSTM (hard_sigmoid gates) -> Bidirectional(GRU, reset_after=False) ->
    GRU (reset_after, go_backwards) -> SimpleRNN (relu, return_state)."""
    keras = keras_module(framework)
    L = keras.layers
    x = keras.Input((T, FEATURES), name="x")
    m = L.Masking(0.0)(x)
    a = L.LSTM(4, return_sequences=True, recurrent_activation="hard_sigmoid", name="lstm")(m)
    b = L.Bidirectional(L.GRU(3, reset_after=False, return_sequences=True, name="gru"), name="bi")(
        a
    )
    c = L.GRU(3, return_sequences=True, go_backwards=True, name="gru_back")(b)
    d, h = L.SimpleRNN(2, activation="relu", return_state=True, name="rnn")(c)
    model = keras.Model(x, [d, h])
    randomise(model)
    return model


def initial_state_model(framework: str):
    """An LSTM with a fed initial state, a GRU and a SimpleRNN going backwards, no mask."""
    keras = keras_module(framework)
    L = keras.layers
    x = keras.Input((T, FEATURES), name="x")
    h0, c0 = keras.Input((4,), name="h0"), keras.Input((4,), name="c0")
    a, h, c = L.LSTM(4, return_sequences=True, return_state=True, name="lstm")(
        x, initial_state=[h0, c0]
    )
    b = L.GRU(2, activation="softsign", name="gru")(a)
    model = keras.Model([x, h0, c0], [b, h, c])
    randomise(model, seed=2)
    return model


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def activation(name: str, framework: str):
    return {
        "tanh": np.tanh,
        "sigmoid": _sigmoid,
        "relu": lambda v: np.maximum(v, 0),
        "softsign": lambda v: v / (1 + np.abs(v)),
        "linear": lambda v: v,
        "hard_sigmoid": (lambda v: np.clip(0.2 * v + 0.5, 0, 1))
        if framework == "tf-keras"
        else (lambda v: np.clip(v + 3, 0, 6) / 6),
    }[name]


def reference(layer, x, mask, initial, framework):
    """Keras' formulas in float64. Returns gates {label: (pre, act)} and states {name: ...},
    each [examples, steps, units] indexed by input position, and the outputs in Keras'
    processing order."""
    cell = layer.cell
    kind = type(cell).__name__
    K, R = (np.asarray(v.numpy(), np.float64) for v in (cell.kernel, cell.recurrent_kernel))
    b = np.asarray(cell.bias.numpy(), np.float64) if cell.bias is not None else np.zeros(K.shape[1])
    act = activation(cell.activation.__name__, framework)
    ract = (
        activation(cell.recurrent_activation.__name__, framework)
        if hasattr(cell, "recurrent_activation")
        else None
    )
    n, steps, _ = x.shape
    u = R.shape[0]
    h = np.zeros((n, u)) if initial is None else np.asarray(initial[0], np.float64)
    c = (
        np.zeros((n, u))
        if initial is None or len(initial) < 2
        else np.asarray(initial[1], np.float64)
    )
    mask = np.ones((n, steps), bool) if mask is None else mask
    labels = {"LSTMCell": "ifjo", "GRUCell": "urc", "SimpleRNNCell": "h"}[kind]
    gates = {g: (np.zeros((n, steps, u)), np.zeros((n, steps, u))) for g in labels}
    states = {s: np.zeros((n, steps, u)) for s in ("ch" if kind == "LSTMCell" else "h")}
    outputs, prev_out = [], np.zeros((n, u))
    for t in range(steps)[::-1] if layer.go_backwards else range(steps):
        xt = x[:, t].astype(np.float64)
        if kind == "LSTMCell":
            z = xt @ K + h @ R + b
            pre = np.split(z, 4, axis=1)  # Keras: i, f, c, o
            post = [ract(pre[0]), ract(pre[1]), act(pre[2]), ract(pre[3])]
            c_new = post[1] * c + post[0] * post[2]
            h_new = post[3] * act(c_new)
        elif kind == "GRUCell":
            if b.ndim == 2:  # reset_after: input bias, recurrent bias
                xz, rz = xt @ K + b[0], h @ R + b[1]
                zu, zr = xz[:, :u] + rz[:, :u], xz[:, u : 2 * u] + rz[:, u : 2 * u]
                r = ract(zr)
                zc = xz[:, 2 * u :] + r * rz[:, 2 * u :]
            else:
                xz = xt @ K + b
                zu, zr = xz[:, :u] + h @ R[:, :u], xz[:, u : 2 * u] + h @ R[:, u : 2 * u]
                r = ract(zr)
                zc = xz[:, 2 * u :] + (r * h) @ R[:, 2 * u :]
            pre = [zu, zr, zc]  # Keras: z, r, h
            post = [ract(zu), r, act(zc)]
            h_new = post[0] * h + (1 - post[0]) * post[2]
        else:
            pre = [xt @ K + b + h @ R]
            post = [act(pre[0])]
            h_new = post[0]
        keep = mask[:, t : t + 1]
        for g, p, a in zip(labels, pre, post, strict=True):
            gates[g][0][:, t], gates[g][1][:, t] = p, a
        h = np.where(keep, h_new, h)
        if kind == "LSTMCell":
            c = np.where(keep, c_new, c)
            states["c"][:, t] = c
        states["h"][:, t] = h
        prev_out = np.where(keep, h_new, 0 if layer.zero_output_for_mask else prev_out)
        outputs.append(prev_out)
    return gates, states, np.stack(outputs, axis=1)


def layer_inputs(keras, model, feeds):
    """Each RNN layer's (or Bidirectional's) input as Keras computes it, by layer name."""
    names = [
        layer.name
        for layer in model.layers
        if hasattr(layer, "cell") or hasattr(layer, "forward_layer")
    ]
    # Keras 3 lists a layer's mask after its input: keep the sequence
    first = [model.get_layer(n).input for n in names]
    probe = keras.Model(model.inputs, [t[0] if isinstance(t, (list, tuple)) else t for t in first])
    got = probe(feeds, training=False)
    return dict(
        zip(
            names,
            [np.asarray(v) for v in (got if isinstance(got, (list, tuple)) else [got])],
            strict=True,
        )
    )


def check_against_reference(framework, model, feeds, trace, mask, initial_of=lambda name: None):
    """Every gate and state of every cell in `trace` equals the reference where `mask` (the
    Masking layer's, which every layer here receives) lets it run."""
    keras = keras_module(framework)
    inputs = layer_inputs(keras, model, feeds)
    checked = 0
    for ct in trace:
        top = ct.cell.name.split("/")[0]
        x = inputs[top]
        gates, states, _ = reference(ct.cell.layer, x, mask, initial_of(ct.cell.name), framework)
        valid = np.ones(x.shape[:2], bool) if mask is None else mask
        assert list(ct.steps) == list(range(T))
        for k, g in enumerate(ct.cell.gates):
            np.testing.assert_allclose(
                ct.preactivation[:, :, k][valid],
                gates[g][0][valid],
                atol=1e-5,
                err_msg=f"{ct.cell.name} {g}",
            )
            np.testing.assert_allclose(
                ct.activation[:, :, k][valid],
                gates[g][1][valid],
                atol=1e-5,
                err_msg=f"{ct.cell.name} {g}",
            )
        for s, v in ct.states.items():
            np.testing.assert_allclose(
                v[valid], states[s][valid], atol=1e-5, err_msg=f"{ct.cell.name} {s}"
            )
        checked += 1
    return checked


def zero_mask(x):
    return np.any(x != 0, axis=-1)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_masked_stack_equals_the_reference(framework):
    """Gate order mapping, hard_sigmoid, both GRU kinds, Bidirectional, go_backwards, a
    mask with end, start and middle padding: every value equals Keras' formulas."""
    model = masked_model(framework)
    x = sequences()
    trace = tracer.trace(model, x)
    assert list(trace.cells) == ["lstm", "bi/forward_gru", "bi/backward_gru", "gru_back", "rnn"]
    assert [trace[n].cell.gates for n in ("lstm", "bi/forward_gru", "rnn")] == [
        ("i", "f", "j", "o"),
        ("u", "r", "c"),
        ("h",),
    ]
    assert check_against_reference(framework, model, x, trace, zero_mask(x)) == 5


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_fed_initial_state_and_unmasked_layers(framework):
    model = initial_state_model(framework)
    rng = np.random.RandomState(4)
    x = sequences()
    h0, c0 = (rng.uniform(-1, 1, (len(x), 4)).astype(np.float32) for _ in range(2))
    trace = tracer.trace(model, {"x": x, "h0": h0, "c0": c0})
    initial = {"lstm": [h0, c0]}
    assert (
        check_against_reference(
            framework, model, [x, h0, c0], trace, None, lambda name: initial.get(name)
        )
        == 2
    )
    # the initial state matters: without it the first step's forget-gated c differs
    assert not np.allclose(
        trace["lstm"].states["c"][:, 0],
        tracer.trace(model, [x, 0 * h0, 0 * c0])["lstm"].states["c"][:, 0],
    )


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_sequential_model(framework):
    keras = keras_module(framework)
    L = keras.layers
    model = keras.Sequential(
        [keras.Input((T, FEATURES)), L.GRU(3, return_sequences=True), L.LSTM(2, go_backwards=True)]
    )
    randomise(model, seed=5)
    x = sequences(seed=6)
    # a model of one input takes its array alone; under a name, only under the input's own
    with pytest.raises(FeedError, match="unknown input inputs: the model's inputs are "):
        tracer.trace(model, {"inputs": x})
    trace = tracer.trace(model, x)
    probe_inputs = [x, np.asarray(model.layers[0](x))]
    for ct, xin in zip(trace, probe_inputs, strict=True):
        gates, states, _ = reference(ct.cell.layer, xin, None, None, framework)
        for k, g in enumerate(ct.cell.gates):
            np.testing.assert_allclose(ct.activation[:, :, k], gates[g][1], atol=1e-5)
        np.testing.assert_allclose(ct.states["h"], states["h"], atol=1e-5)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_record_writes_no_rows_where_masked_and_keras_weight_blocks(framework, tmp_path):
    model = masked_model(framework)
    x = sequences()
    summary = tracer.record(model, x, tmp_path / "rec", batch_size=3)
    trace = tracer.trace(model, x)
    rec = Recording(tmp_path / "rec")
    valid = zero_mask(x)  # every layer here sees the Masking layer's mask
    for name in ("lstm", "bi/backward_gru", "gru_back"):
        ct = trace[name]
        for k, g in enumerate(ct.cell.gates):
            got = rec.gate_array(name, g, "activation")
            assert got.shape == (len(x), T, ct.cell.units)
            np.testing.assert_array_equal(np.isnan(got[..., 0]), ~valid)
            np.testing.assert_allclose(got[valid], ct.activation[:, :, k][valid], atol=1e-6)
    units = {ct.cell.name: ct.cell.units for ct in trace}
    expected_rows = sum(int(valid.sum()) * units[n] * len(trace[n].cell.gates) for n in units)
    assert summary["rows"]["gates"] == expected_rows
    # weights: Keras LSTM column block 2 (c) is our j; GRU block 0 (z) is our u; reset_after's recurrent bias
    w = pd_read(tmp_path / "rec" / "weights.parquet")
    lstm = model.get_layer("lstm").cell
    u = 4
    j_in = (
        w[(w.cell == "lstm") & (w.gate == "j") & (w.source == "input")]
        .pivot(index="row", columns="unit", values="value")
        .to_numpy()
    )
    np.testing.assert_array_equal(j_in, lstm.kernel.numpy()[:, 2 * u : 3 * u])
    f_rec = (
        w[(w.cell == "lstm") & (w.gate == "f") & (w.source == "recurrent")]
        .pivot(index="row", columns="unit", values="value")
        .to_numpy()
    )
    np.testing.assert_array_equal(f_rec, lstm.recurrent_kernel.numpy()[:, u : 2 * u])
    gru = model.get_layer("gru_back").cell
    rb = (
        w[(w.cell == "gru_back") & (w.gate == "u") & (w.source == "recurrent_bias")]
        .sort_values("unit")
        .value.to_numpy()
    )
    np.testing.assert_array_equal(rb, gru.bias.numpy()[1, :3])
    # reset_after=False: one bias
    assert not ((w.cell == "bi/forward_gru") & (w.source == "recurrent_bias")).any()


def pd_read(path):
    import pandas as pd

    return pd.read_parquet(path)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_steps_window_and_lengths_with_a_mask(framework, tmp_path):
    model = masked_model(framework)
    x = sequences()
    lengths = np.array([6, 6, 5, 6, 2, 6, 4])
    tracer.record(
        model,
        x,
        tmp_path / "rec",
        selection=tracer.Selection(cells=("lstm",), gates=("f",), steps=(1, 5)),
        lengths=lengths,
    )
    rec = Recording(tmp_path / "rec")
    df = rec.gate_frame()
    assert rec.cells == ["lstm"] and set(df["gate"]) == {"f"}
    want = zero_mask(x) & (np.arange(T)[None, :] < lengths[:, None])
    want[:, [0, 5]] = False
    got = np.zeros_like(want)
    got[df["example"], df["step"]] = True
    np.testing.assert_array_equal(got, want)
    ref = tracer.trace(model, x)["lstm"].activation[:, :, 1]
    np.testing.assert_allclose(
        df["activation"], ref[df["example"], df["step"], df["unit"]], atol=1e-6
    )


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_stateful_layer_starts_from_its_state(framework):
    """A stateful LSTM called before: with carry_state the replay starts from the state the
    layer held; by default the layer is reset and starts from zero."""
    keras = keras_module(framework)
    x = keras.Input(batch_shape=(7, T, FEATURES), name="x")
    model = keras.Model(
        x, keras.layers.LSTM(4, stateful=True, return_sequences=True, name="lstm")(x)
    )
    randomise(model)
    xs = sequences()
    model(xs)  # moves the state away from zero
    held = [np.array(s) for s in model.get_layer("lstm").states]
    assert np.abs(held[0]).max() > 0.1
    trace = tracer.trace(model, xs, carry_state=True)
    gates, states, _ = reference(model.get_layer("lstm"), xs, None, held, framework)
    for k, g in enumerate(trace["lstm"].cell.gates):
        np.testing.assert_allclose(trace["lstm"].activation[:, :, k], gates[g][1], atol=1e-5)
    np.testing.assert_allclose(trace["lstm"].states["c"], states["c"], atol=1e-5)
    trace = tracer.trace(model, xs)  # reset first: from zero state
    gates, states, _ = reference(model.get_layer("lstm"), xs, None, None, framework)
    np.testing.assert_allclose(trace["lstm"].states["c"], states["c"], atol=1e-5)


def test_a_changed_layer_fails_loudly():
    """Weights read, then changed in the model: the replay no longer matches the layer."""
    model = masked_model("keras3")
    km = wrap(model)
    cells = find_layers(km)
    lstm = model.get_layer("lstm").cell
    lstm.recurrent_kernel.assign(lstm.recurrent_kernel.numpy() * 1.5)
    with pytest.raises(
        ReplayMismatchError, match=r"cell lstm: replayed outputs differ .* by up to"
    ):
        KerasPlan(km, cells).fetch(resolve_inputs(km, sequences()))


def test_feed_errors_name_the_inputs():
    model = initial_state_model("keras3")
    with pytest.raises(
        GatetraceError,
        match=r"input h0, c0 not fed: the model's inputs are x \(float32, shape \(None, 6, 3\)\)",
    ):
        tracer.trace(model, {"x": sequences()})
    with pytest.raises(
        GatetraceError, match=r"feed x: input x expects shape \[None, 6, 3\], given \[7, 5, 3\]"
    ):
        tracer.trace(
            model, {"x": sequences()[:, :5], "h0": np.zeros((7, 4)), "c0": np.zeros((7, 4))}
        )


def test_no_rnn_layer():
    keras = keras_module("keras3")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    with pytest.raises(
        GatetraceError,
        match="no RNN layer found in .*looked for Keras LSTM, GRU, SimpleRNN and ConvLSTM layers",
    ):
        tracer.trace(model, np.zeros((2, 3), np.float32))


# -- files and the command line -------------------------------------------------------------

# Keras 3 writes .h5 files of masked models that it cannot read back itself ("Unknown layer:
# 'NotEqual'"), and SavedModels only as serving exports: its format is .keras.
FILES = [
    ("keras3", "m.keras"),
    ("tf-keras", "m.keras"),
    ("tf-keras", "m.h5"),
    ("tf-keras", "saved"),
]


gatetrace = run_cli


@pytest.mark.e2e
@pytest.mark.parametrize("framework, name", FILES)
def test_cli_records_a_keras_file(framework, name, tmp_path):
    """`gatetrace record model.keras --feed x=FILE.npy` equals the library's trace of the in-memory model."""
    model = masked_model(framework)
    path = tmp_path / name
    model.save(str(path)) if name != "saved" else model.save(str(path), save_format="tf")
    x = sequences()
    np.save(tmp_path / "x.npy", x)
    shown = gatetrace("inspect", str(path), "--json")
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)
    assert [c["name"] for c in info["cells"]] == [
        "lstm",
        "bi/forward_gru",
        "bi/backward_gru",
        "gru_back",
        "rnn",
    ]
    assert info["format"].startswith(framework) and info["inputs"] == [
        {"name": "x", "dtype": "float32", "shape": [None, T, FEATURES]}
    ]
    assert {c["path"] for c in info["cells"]} == {"replay"} and info["cells"][3][
        "direction"
    ] == "backward"
    # the halves of Bidirectional too, from the wrapper's input
    assert [c["steps"] for c in info["cells"]] == [T] * 5
    # a name the model's one input does not have is refused, as a graph's placeholder is: read
    # from a file before TensorFlow loads, from a tf-keras SavedModel once Keras has loaded it
    wrong = gatetrace(
        "record", str(path), "--feed", f"inputs={tmp_path / 'x.npy'}", "--out", str(tmp_path / "no")
    )
    assert wrong.returncode == 2 and wrong.stderr.startswith(
        "gatetrace: error: unknown input inputs:"
        if name == "saved"
        else f"gatetrace: error: unknown feed 'inputs': {path} has no input named inputs; its inputs are x:"
    )
    assert not (tmp_path / "no").exists()
    done = gatetrace(
        "record",
        str(path),
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    assert "recorded 5 cells on 7 sequences" in done.stdout
    trace = tracer.trace(model, x)
    rec = Recording(tmp_path / "rec")
    valid = zero_mask(x)
    for ct in trace:
        for k, g in enumerate(ct.cell.gates):
            np.testing.assert_allclose(
                rec.gate_array(ct.cell.name, g, "preactivation")[valid],
                ct.preactivation[:, :, k][valid],
                atol=1e-5,
            )


def stacked_model(framework: str):
    """RNN over a list of cells, as Keras' guide writes it (an LSTMCell under a GRUCell), then
    RNN over StackedRNNCells going backwards (a SimpleRNNCell under an LSTMCell), masked."""
    keras = keras_module(framework)
    L = keras.layers
    x = keras.Input((T, FEATURES), name="x")
    m = L.Masking(0.0)(x)
    a = L.RNN([L.LSTMCell(4), L.GRUCell(3)], return_sequences=True, name="stack")(m)
    cells = L.StackedRNNCells([L.SimpleRNNCell(2), L.LSTMCell(3)])
    b = L.RNN(cells, return_sequences=True, go_backwards=True, name="stacked_back")(a)
    model = keras.Model(x, b)
    randomise(model, seed=5)
    return model


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_cell_of_a_stacked_rnn_is_recorded_as_a_layer_of_its_own(framework, tmp_path):
    from types import SimpleNamespace

    model = stacked_model(framework)
    x = sequences()
    mask = zero_mask(x)
    trace = tracer.trace(model, x)
    stack, back = model.get_layer("stack"), model.get_layer("stacked_back")
    names = [f"stack/{c.name}" for c in stack.cell.cells] + [
        f"stacked_back/{c.name}" for c in back.cell.cells
    ]
    assert list(trace.cells) == names
    assert [trace[n].cell.kind for n in names] == ["LSTM", "GRU", "SimpleRNN", "LSTM"]
    keras = keras_module(framework)
    given = layer_inputs(keras, model, x)["stack"]
    for layer in (stack, back):
        below = given
        for cell in layer.cell.cells:
            alone = SimpleNamespace(
                cell=cell,
                go_backwards=layer.go_backwards,
                zero_output_for_mask=layer.zero_output_for_mask,
            )
            gates, states, outputs = reference(alone, below, mask, None, framework)
            got = trace[f"{layer.name}/{cell.name}"]
            for k, g in enumerate(got.cell.gates):
                np.testing.assert_allclose(
                    got.preactivation[:, :, k][mask], gates[g][0][mask], atol=1e-5
                )
                np.testing.assert_allclose(
                    got.activation[:, :, k][mask], gates[g][1][mask], atol=1e-5
                )
            for s, v in got.states.items():
                np.testing.assert_allclose(v[mask], states[s][mask], atol=1e-5)
            # the next cell reads this one's outputs, by input position
            below = (outputs[:, ::-1] if layer.go_backwards else outputs).astype(np.float32)
        if layer is stack:
            given = np.asarray(
                keras.Model(model.inputs, stack.output)(x, training=False), np.float32
            )
    tracer.record(model, x, tmp_path / "rec")
    from recorders import Recording
    from tracer.run.select import Selection

    rec = Recording(tmp_path / "rec")
    assert rec.cells == names
    # a cell chosen alone still reads the outputs of the cells below it in its stack
    tracer.record(model, x, tmp_path / "upper", selection=Selection(cells=[names[1], names[3]]))
    upper = Recording(tmp_path / "upper")
    assert upper.cells == [names[1], names[3]]
    for name in upper.cells:
        for g in upper.gates(name):
            np.testing.assert_array_equal(upper.gate_array(name, g), rec.gate_array(name, g))
    np.testing.assert_array_equal(
        rec.gate_array("stack/" + stack.cell.cells[1].name, "u")[mask],
        trace["stack/" + stack.cell.cells[1].name].activation[:, :, 0][mask],
    )
