"""Reading recordings back: listings, selections pushed down, wide views and arrays."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest

import tracer
from recorders import Recording, RecordingError, SelectionError
from tests.conftest import R, build
from tracer._tf import tf, v1


@pytest.fixture(scope="module")
def model():
    """A BasicLSTMCell(3) under a GRUCell(2), and 6 sequences of 5 steps for it."""

    def body(x):
        outputs, _ = v1.nn.static_rnn(
            R.MultiRNNCell([R.BasicLSTMCell(3), R.GRUCell(2)]),
            tf.unstack(x, axis=1),
            dtype=tf.float32,
        )
        return [outputs[-1]]

    built = build(body)
    return tracer.from_session(built.session), np.random.RandomState(7).randn(6, 5, 4).astype(
        np.float32
    )


@pytest.fixture(scope="module")
def recorded(model, tmp_path_factory):
    """The model recorded on its 6 sequences with lengths, and its trace."""
    model, x = model
    out = tmp_path_factory.mktemp("rec") / "run"
    tracer.record(model, {"x": x}, out, batch_size=4, lengths=np.array([5, 5, 3, 5, 1, 5]))
    return Recording(out), tracer.trace(model, {"x": x})


LSTM, GRU = "rnn/multi_rnn_cell/cell_0/basic_lstm_cell", "rnn/multi_rnn_cell/cell_1/gru_cell"


def test_listings(recorded):
    rec, _ = recorded
    assert rec.complete and rec.cells == [LSTM, GRU]
    assert (
        rec.gates(LSTM) == ["i", "j", "f", "o"]
        and rec.gates(GRU) == ["r", "u", "c"]
        and rec.states(LSTM) == ["c", "h"]
    )
    assert (
        rec.units(GRU) == 2
        and rec.examples == [[0, 6]]
        and rec.steps(LSTM).tolist() == [0, 1, 2, 3, 4]
    )
    assert repr(rec).endswith("2 cells, 6 examples, complete)")
    with pytest.raises(
        SelectionError,
        match="no cell 'nope' in .*; its cells are rnn/multi_rnn_cell/cell_0/basic_lstm_cell",
    ):
        rec.gates("nope")


def test_arrays_and_wide_views_equal_the_trace(recorded):
    rec, trace = recorded
    a = rec.gate_array(LSTM, "f")
    want = trace[LSTM].activation[:, :, 2]
    lengths = np.array([5, 5, 3, 5, 1, 5])
    past = np.arange(5)[None, :] >= lengths[:, None]
    assert a.shape == (6, 5, 3)
    np.testing.assert_array_equal(np.isnan(a).all(axis=2), past)  # no rows at or past each length
    # (The trace ran all 6 sequences at once, the recording 4 + 2: matmuls may round the last bit differently.)
    np.testing.assert_allclose(a[~past], want[~past], atol=1e-6, rtol=0)
    h = rec.state_array(GRU, "h")
    np.testing.assert_allclose(h[~past], trace[GRU].states["h"][~past], atol=1e-6, rtol=0)
    wide = rec.gate_wide(GRU, "c", "preactivation")
    assert wide.shape == ((~past).sum(), 2)
    np.testing.assert_allclose(
        wide.loc[(2, 1)].to_numpy(), trace[GRU].preactivation[2, 1, 2], atol=1e-6, rtol=0
    )


def test_selections_read_only_what_is_asked(recorded):
    rec, _ = recorded
    df = rec.gate_frame(
        cells=[LSTM],
        gates=["i", "o"],
        steps=(1, 3),
        examples=(0, 2),
        units=[2],
        columns=["activation"],
    )
    assert list(df.columns) == ["example", "step", "unit", "activation", "cell", "gate"]
    assert isinstance(df["cell"].dtype, pd.CategoricalDtype) and isinstance(
        df["gate"].dtype, pd.CategoricalDtype
    )
    assert (
        sorted(df["gate"].astype(str).unique()) == ["i", "o"]
        and set(df["step"]) == {1, 2}
        and set(df["unit"]) == {2}
    )
    assert len(df) == 2 * 2 * 2 * 1
    # The cell and gate filter picks folders: 2 of the 14 gate partitions' files are opened.
    fragments = list(
        rec._dataset("gates").get_fragments(
            filter=(ds.field("cell") == LSTM) & ds.field("gate").isin(["i", "o"])
        )
    )
    assert len(fragments) == 2 * 2  # two gates x two batches
    with pytest.raises(SelectionError, match="expected some of preactivation, activation"):
        rec.gate_frame(columns=["value"])


def test_not_a_recording(tmp_path):
    with pytest.raises(
        RecordingError, match="is not a gatetrace recording: it has no gates/ folder"
    ):
        Recording(tmp_path)
    with pytest.raises(RecordingError, match="nosuch does not exist"):
        Recording(tmp_path / "nosuch")


# ---- analysis helpers, each checked against a direct numpy computation ------------------


def test_saturation_follows_each_gate_s_nonlinearity(recorded):
    """A sigmoid gate saturates below 0.1 and above 0.9, a tanh candidate below -0.9 and above
    0.9 (before: 0.1 and 0.9 for every gate, so the negative half of a tanh gate counted as
    saturated): each fraction as numpy counts it over the recorded values."""
    from recorders.read.analysis import saturation

    rec, _ = recorded
    sat = saturation(rec, cells=[LSTM])
    for gate, (low, high) in {
        "i": (0.1, 0.9),
        "f": (0.1, 0.9),
        "o": (0.1, 0.9),
        "j": (-0.9, 0.9),
    }.items():
        a = rec.gate_array(LSTM, gate)
        part = sat[sat["gate"] == gate].sort_values("unit")
        assert set(part["low"]) == {low} and set(part["high"]) == {high}, gate
        valid = ~np.isnan(a[:, :, 0])
        for u, row in zip(range(a.shape[2]), part.itertuples(), strict=True):
            values = a[:, :, u][valid]
            assert row.left == pytest.approx((values < low).mean()), (gate, u)
            assert row.right == pytest.approx((values > high).mean()), (gate, u)
    j = sat[sat["gate"] == "j"]
    assert (j["left"] < 0.5).all()  # (below 0.1 would count about half of every tanh unit)


def test_saturation_and_step_stats(recorded):
    from recorders.read.analysis import saturation, step_stats

    rec, _ = recorded
    f = rec.gate_array(LSTM, "f")  # NaN where no row
    sat = saturation(rec, cells=[LSTM], gates=["f"])
    assert list(sat.columns) == ["cell", "gate", "unit", "left", "right", "n", "low", "high"]
    assert len(sat) == 3 and set(sat["low"]) == {0.1} and set(sat["high"]) == {0.9}
    valid = ~np.isnan(f[:, :, 0])
    for u in range(3):
        row = sat[sat["unit"] == u].iloc[0]
        values = f[:, :, u][valid]
        assert row["n"] == valid.sum()
        assert row["left"] == pytest.approx((values < 0.1).mean()) and row[
            "right"
        ] == pytest.approx((values > 0.9).mean())
    # thresholds a quarter of a float32 step from recorded values: float32(low) is a value
    # below low, float32(high) one above high; counted as such, as float64 compares them
    values = np.sort(f[:, :, 0][valid]).astype(np.float64)
    low = values[len(values) // 3] + np.spacing(np.float32(values[len(values) // 3])) / 4
    high = values[2 * len(values) // 3] - np.spacing(np.float32(values[2 * len(values) // 3])) / 4
    assert np.float32(low) in values and np.float32(high) in values
    row = saturation(rec, cells=[LSTM], gates=["f"], low=float(low), high=float(high)).iloc[0]
    assert row["left"] == (values < low).mean() and row["right"] == (values > high).mean()
    stats = step_stats(rec, cells=[GRU], gates=["u"])
    u = rec.gate_array(GRU, "u")
    for step in range(5):
        values = u[:, step][~np.isnan(u[:, step])]
        row = stats[stats["step"] == step].iloc[0]
        assert row["mean"] == pytest.approx(values.mean(), rel=1e-6)
        assert row["q50"] == pytest.approx(np.quantile(values, 0.5), rel=1e-6)
        assert row["q90"] == pytest.approx(np.quantile(values, 0.9), rel=1e-6)


@pytest.mark.parametrize("lengths", [None, [5, 5, 3, 5, 1, 5]], ids=["every-step", "lengths"])
def test_gate_summaries_read_blocks_and_equal_numpy(lengths, model, recorded, tmp_path):
    """One read per gate, dense row groups from the value column alone; saturation, means and
    quantiles equal a float64 numpy computation over the trace's activations."""
    from recorders.read.analysis import gate_summaries

    rec, trace = recorded
    if lengths is None:
        tracer.record(model[0], {"x": model[1]}, tmp_path / "run", batch_size=4)
        rec = Recording(tmp_path / "run")
    blocks = list(rec.gate_blocks(LSTM, "f"))
    # two batches, one row group each
    assert [b.present is None for b in blocks] == [lengths is None] * 2
    valid = (
        np.ones((6, 5), bool)
        if lengths is None
        else np.arange(5)[None, :] < np.array(lengths)[:, None]
    )
    got = gate_summaries(rec, quantiles=(0.25, 0.9))
    assert sorted(got) == sorted((c, g) for c in (LSTM, GRU) for g in rec.gates(c))
    for cell in (LSTM, GRU):
        for k, gate in enumerate(rec.gates(cell)):
            a = trace[cell].activation[:, :, k].astype(np.float64)  # [examples, steps, units]
            s = got[(cell, gate)]
            rows = a[valid]  # [rows, units]
            np.testing.assert_array_equal(s.n, [valid.sum()] * a.shape[2])
            low = -0.9 if gate in ("j", "c") else 0.1  # tanh candidates, sigmoid gates
            assert (s.low, s.high) == (low, 0.9)
            np.testing.assert_array_equal(s.left, (rows < low).sum(axis=0))
            np.testing.assert_array_equal(s.right, (rows > 0.9).sum(axis=0))
            assert s.steps.tolist() == [t for t in range(5) if valid[:, t].any()]
            for j, t in enumerate(s.steps):
                at = a[valid[:, t], t, :].reshape(-1)
                assert s.mean[j] == pytest.approx(at.mean(), abs=1e-6)
                np.testing.assert_allclose(
                    [q[j] for q in s.quantiles], np.quantile(at, [0.25, 0.9]), atol=1e-6
                )


def test_time_courses_top_positions_and_label_correlation(recorded):
    from recorders.read.analysis import label_correlation, time_courses, top_positions

    rec, _ = recorded
    i = rec.gate_array(LSTM, "i")
    tc = time_courses(rec, LSTM, "i", examples=[3, 0], units=[1])
    assert (
        tc["example"].tolist() == [0] * 5 + [3] * 5 and tc["step"].tolist() == [0, 1, 2, 3, 4] * 2
    )
    np.testing.assert_array_equal(tc["value"].to_numpy(), np.concatenate([i[0, :, 1], i[3, :, 1]]))
    top = top_positions(rec, LSTM, "i", unit=2, k=3)
    flat = np.where(np.isnan(i[:, :, 2]), -np.inf, i[:, :, 2])
    best = np.argsort(flat, axis=None)[::-1][:3]
    assert list(zip(top["example"], top["step"], strict=True)) == [
        tuple(int(v) for v in np.unravel_index(b, flat.shape)) for b in best
    ]
    assert top["rank"].tolist() == [1, 2, 3] and top["value"].is_monotonic_decreasing
    low = top_positions(rec, LSTM, "i", unit=2, k=2, lowest=True)
    assert low["value"].iloc[0] == np.nanmin(i[:, :, 2])
    labels = np.random.RandomState(0).randn(6, 5)
    corr = label_correlation(rec, LSTM, "i", labels)
    valid = ~np.isnan(i[:, :, 0])
    for u in range(3):
        want = np.corrcoef(i[:, :, u][valid], labels[valid])[0, 1]
        assert corr.loc[corr["unit"] == u, "correlation"].item() == pytest.approx(want, rel=1e-5)
    with pytest.raises(SelectionError, match=r"labels: shape \[2, 5\] does not cover"):
        label_correlation(rec, LSTM, "i", labels[:2])


def test_plots_draw_what_the_analysis_computes(recorded):
    from recorders.read.plots import gate_heatmap, saturation_scatter, step_band

    rec, _ = recorded
    fig = gate_heatmap(rec, LSTM, "f", example=2)
    (image,) = fig.axes[0].get_images()
    np.testing.assert_array_equal(image.get_array(), rec.gate_array(LSTM, "f", examples=(2, 3))[0])
    fig.canvas.draw()
    ticks = [
        t
        for t in fig.axes[0].get_yticks()
        if fig.axes[0].get_ylim()[1] <= t <= fig.axes[0].get_ylim()[0]
    ]
    assert ticks and all(float(t).is_integer() for t in ticks)  # steps are whole input positions
    assert fig.axes[0].get_ylabel() == "step (input position)"
    shown = rec.gate_array(LSTM, "f", examples=(2, 3)).shape[1]  # the steps example 2 has rows for
    assert fig.axes[0].get_ylim() == (shown - 0.5, -0.5)
    fig = saturation_scatter(rec, GRU)
    assert [ax.get_title() for ax in fig.axes] == ["r", "u", "c"]
    assert [ax.get_xlabel() for ax in fig.axes] == [
        "left-saturated (< 0.1 | > 0.9)",
        "left-saturated (< 0.1 | > 0.9)",
        "left-saturated (< -0.9 | > 0.9)",
    ]
    offsets = fig.axes[0].collections[0].get_offsets()
    assert len(offsets) == 2 and ((offsets >= 0) & (offsets <= 1)).all()
    fig = step_band(rec, LSTM, "o")
    line = fig.axes[0].get_lines()[0]
    from recorders.read.analysis import step_stats

    np.testing.assert_allclose(line.get_ydata(), step_stats(rec, [LSTM], ["o"])["mean"])
    with pytest.raises(SelectionError, match="example 99 has no rows"):
        gate_heatmap(rec, LSTM, "f", example=99)


@pytest.mark.parametrize(
    "values", [[5, 3, 3, 9], [7], [0, 10**9, 4], list(range(100, 0, -3)) * 2, []]
)
def test_sorted_unique_is_numpys_unique(values):
    from recorders.read.tables import _sorted_unique

    v = np.asarray(values, dtype=np.int64)
    got, expected = _sorted_unique(v), np.unique(v, return_inverse=True)
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])


def test_a_gate_without_a_range_does_not_saturate_and_hard_sigmoid_does(tmp_path):
    """A Keras LSTM with relu as its activation (the candidate `j`) and hard_sigmoid gates: `j`
    has no saturation (NaN fractions and thresholds: relu has no upper end), the gates
    saturate below 0.1 and above 0.9 (hard sigmoid's range is sigmoid's); a cell of your own
    gets each gate's from the op its pattern named."""
    import tracer
    from recorders.read.analysis import saturation
    from tests.test_keras import keras_module, randomise
    from tracer.cells.kinds.named import named_spec

    keras = keras_module("keras3")
    x = keras.Input((5, 3))
    layer = keras.layers.LSTM(4, activation="relu", recurrent_activation="hard_sigmoid")
    model = keras.Model(x, layer(x))
    randomise(model, seed=3)
    tracer.record(
        model,
        np.random.RandomState(0).uniform(-1, 1, (6, 5, 3)).astype(np.float32),
        tmp_path / "rec",
    )
    sat = saturation(Recording(tmp_path / "rec"))
    j, f = sat[sat["gate"] == "j"], sat[sat["gate"] == "f"]
    assert len(j) == 4 and j[["left", "right", "low", "high"]].isna().all().all()
    assert set(f["low"]) == {0.1} and set(f["high"]) == {0.9} and f["left"].notna().all()
    spec = named_spec(("a", "b", "c"), ("Sigmoid rnn/a", "Relu rnn/b", "Tanh rnn/c"), ("h",))
    assert spec.nonlinearities(None, None) == {"a": "sigmoid", "b": "relu", "c": "tanh"}


def test_codes_of_a_float_recording_are_refused(recorded):
    """`gate_codes` and `state_codes` of a cell recorded from float arithmetic say so: its
    values are no codes (a full-integer file's are: tests/test_tflite_integer.py)."""
    rec, _ = recorded
    for read in (
        lambda: rec.gate_codes(rec.cells[0], rec.gates(rec.cells[0])[0]),
        lambda: rec.state_codes(rec.cells[0], "h"),
    ):
        with pytest.raises(SelectionError, match="was not recorded from integer arithmetic"):
            read()
