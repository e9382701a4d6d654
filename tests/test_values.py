"""Every recorded value, for every cell kind and model format, against numpy in float64."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import tracer
from recorders import METADATA_KEY
from tests.conftest import CONFIGS, build, read_gates, read_state, save, static_body

FORMATS = ["checkpoint", "checkpoint-dir", "savedmodel", "frozen"]
TOL = 1e-5


def reference(config, weights, x, backward=False):
    return tracer.run_cell(config.kind, weights, x, backward=backward, **config.params)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_recording_matches_numpy(name, fmt, tmp_path, inputs):
    config = CONFIGS[name]
    built = build(static_body(config))
    model_path = save(built, fmt, tmp_path)
    cell_name = f"rnn/{config.scope_name}"
    expected = reference(config, built.weights[cell_name], inputs)

    with tracer.load_model(model_path) as model:
        assert model.format == fmt.split("-")[0]
        manifest = tracer.record(model, {"x": inputs}, tmp_path / "out")
    out = tmp_path / "out"

    (cell,) = manifest["cells"]
    assert (cell["name"], cell["kind"], cell["steps"]) == (cell_name, config.kind, 5)
    pre, act = read_gates(out, cell_name, tuple(cell["gates"]))
    np.testing.assert_allclose(pre, expected["preactivation"], atol=TOL, rtol=0)
    np.testing.assert_allclose(act, expected["activation"], atol=TOL, rtol=0)
    for state in cell["states"]:
        np.testing.assert_allclose(
            read_state(out, cell_name, state), expected["states"][state], atol=TOL, rtol=0
        )

    gates = pd.read_parquet(out / "gates")
    assert list(gates["example"].unique()) == list(range(6))
    assert gates["example"].dtype == np.int64
    assert gates["preactivation"].dtype == np.float32 and gates["activation"].dtype == np.float32
    assert isinstance(gates["cell"].dtype, pd.CategoricalDtype) and isinstance(
        gates["gate"].dtype, pd.CategoricalDtype
    )
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk["rows"]["gates"] == len(gates) == 6 * 5 * len(cell["gates"]) * cell["units"]
    assert on_disk["source"]["format"] == model.format


@pytest.mark.parametrize("name", list(CONFIGS))
def test_weights_table_slices_the_kernel(name, tmp_path):
    config = CONFIGS[name]
    built = build(static_body(config))
    cell_name = f"rnn/{config.scope_name}"
    w = built.weights[cell_name]
    with tracer.load_model(save(built, "checkpoint", tmp_path)) as model:
        tracer.record(model, {"x": np.zeros((1, 5, 4), np.float32)}, tmp_path / "out")
    table = pd.read_parquet(tmp_path / "out" / "weights.parquet")

    def matrix(gate, source):
        rows = table[(table.cell == cell_name) & (table.gate == gate) & (table.source == source)]
        return rows.pivot(index="row", columns="unit", values="value").to_numpy()

    gates = tracer.spec_for(config.kind).gates
    kernel_gates = [g for g in gates if g != "c"]  # a GRU's candidate has its own kernel
    units = w["kernel"].shape[1] // len(kernel_gates)
    for k, gate in enumerate(kernel_gates):
        cols = slice(k * units, (k + 1) * units)
        np.testing.assert_array_equal(matrix(gate, "input"), w["kernel"][:4, cols])
        np.testing.assert_array_equal(matrix(gate, "recurrent"), w["kernel"][4:, cols])
        np.testing.assert_array_equal(matrix(gate, "bias")[0], w["bias"][cols])
    if "c" in gates:
        np.testing.assert_array_equal(matrix("c", "input"), w["candidate_kernel"][:4])
        np.testing.assert_array_equal(matrix("c", "recurrent"), w["candidate_kernel"][4:])
    if "w_i_diag" in w:
        for gate in "ifo":
            np.testing.assert_array_equal(matrix(gate, "peephole")[0], w[f"w_{gate}_diag"])
        proj = (
            table[table.source == "projection"]
            .pivot(index="row", columns="unit", values="value")
            .to_numpy()
        )
        np.testing.assert_array_equal(proj, w["projection"])
        assert table[table.source == "projection"]["gate"].isna().all()


def test_live_session_trace_without_writing(inputs):
    config = CONFIGS["BasicLSTMCell"]
    built = build(static_body(config))
    model = tracer.from_session(built.session)
    result = tracer.trace(model, {"x:0": inputs})
    expected = reference(config, built.weights["rnn/basic_lstm_cell"], inputs)
    ct = result["rnn/basic_lstm_cell"]
    np.testing.assert_allclose(ct.preactivation, expected["preactivation"], atol=TOL, rtol=0)
    np.testing.assert_allclose(ct.states["h"], expected["states"]["h"], atol=TOL, rtol=0)
    df = result.frame("rnn/basic_lstm_cell")
    assert list(df.columns) == ["example", "step", "gate", "unit", "preactivation", "activation"]
    assert list(df["gate"].cat.categories) == ["i", "j", "f", "o"]
    row = df[(df.example == 2) & (df.step == 3) & (df.gate == "f") & (df.unit == 1)]
    assert row["activation"].item() == pytest.approx(expected["activation"][2, 3, 2, 1], abs=TOL)
    model.close()  # a live session stays the caller's
    assert not built.session._closed


def test_preactivation_is_exactly_the_split_output(inputs):
    built = build(static_body(CONFIGS["LSTMCell-peepholes-proj-clip"]))
    model = tracer.from_session(built.session)
    ct = tracer.trace(model, {"x": inputs})["rnn/lstm_cell"]
    names = [f"rnn/lstm_cell/split_{k}" if k else "rnn/lstm_cell/split" for k in range(5)]
    splits = built.session.run(
        [[f"{n}:{g}" for g in range(4)] for n in names], {built.inputs: inputs}
    )
    for t, per_gate in enumerate(splits):
        for g, value in enumerate(per_gate):
            np.testing.assert_array_equal(ct.preactivation[:, t, g], value)


def test_schema_metadata_holds_the_description(tmp_path, inputs):
    import pyarrow.parquet as pq

    built = build(static_body(CONFIGS["GRUCell"]))
    with tracer.load_model(save(built, "frozen", tmp_path)) as model:
        tracer.record(model, {"x": inputs}, tmp_path / "out")
    files = sorted((tmp_path / "out").rglob("*.parquet"))
    assert len(files) == 3 + 1 + 1  # three gates, one state, weights
    for f in files:
        meta = json.loads(pq.read_schema(f).metadata[METADATA_KEY])
        assert meta["cells"][0]["name"] == "rnn/gru_cell"
        assert meta["cells"][0]["gates"] == ["r", "u", "c"]
        assert meta["source"]["format"] == "frozen"


@pytest.mark.parametrize("batch_size", [1, 4, 6, 100])
def test_batches_record_the_same_rows_as_one_run(tmp_path, inputs, batch_size):
    config = CONFIGS["LSTMCell-peepholes-proj-clip"]
    built = build(static_body(config))
    expected = reference(config, built.weights["rnn/lstm_cell"], inputs)
    manifest = tracer.record(
        tracer.from_session(built.session), {"x": inputs}, tmp_path / "out", batch_size=batch_size
    )
    assert manifest["examples"] == 6
    assert manifest["rows"]["gates"] == 6 * 5 * 4 * 4
    parts = list((tmp_path / "out" / "gates").rglob("*.parquet"))
    assert len(parts) == 4 * -(-6 // batch_size)  # one file per gate per batch
    pre, act = read_gates(tmp_path / "out", "rnn/lstm_cell", ("i", "j", "f", "o"))
    np.testing.assert_allclose(pre, expected["preactivation"], atol=TOL, rtol=0)
    np.testing.assert_allclose(act, expected["activation"], atol=TOL, rtol=0)
    np.testing.assert_allclose(
        read_state(tmp_path / "out", "rnn/lstm_cell", "h"),
        expected["states"]["h"],
        atol=TOL,
        rtol=0,
    )


def test_a_fixed_batch_placeholder_takes_any_number_of_sequences(tmp_path, inputs):
    """A placeholder shaped [2, 5, 4] is fed two sequences at a time; the last batch is padded."""
    config = CONFIGS["GRUCell"]
    built = build(static_body(config), batch=2)
    np.save(tmp_path / "x.npy", inputs[:5])  # 5 sequences: the last batch is padded
    from tracer.inputs.feeds import parse_feed_args

    feeds = parse_feed_args([f"x={tmp_path / 'x.npy'}"])
    assert not isinstance(feeds["x"], np.ndarray)  # read batch by batch
    manifest = tracer.record(tracer.from_session(built.session), feeds, tmp_path / "out")
    assert manifest["examples"] == 5
    pre, act = read_gates(tmp_path / "out", "rnn/gru_cell", ("r", "u", "c"))
    expected = reference(config, built.weights["rnn/gru_cell"], inputs[:5])
    np.testing.assert_allclose(act, expected["activation"], atol=TOL, rtol=0)
    assert pre.shape == (5, 5, 3, 3)


def test_a_trace_says_what_it_holds_not_its_numbers(tmp_path):
    """repr() of a Trace (what a notebook shows) is a line per cell, not 33 KB of arrays."""
    import tracer
    from tests.conftest import R
    from tracer._tf import tf, v1

    built = build(
        lambda x: [v1.nn.static_rnn(R.BasicLSTMCell(3), tf.unstack(x, axis=1), dtype=tf.float32)]
    )
    trace = tracer.trace(tracer.from_session(built.session), {"x": np.zeros((4, 5, 4), np.float32)})
    assert repr(trace) == (
        "Trace(4 examples: CellTrace('rnn/basic_lstm_cell', 4 examples x 5 steps x gates i, j, f, o x 3 units, "
        "states c, h))"
    )
