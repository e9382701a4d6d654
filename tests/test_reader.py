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
def recorded(tmp_path_factory):
    """A BasicLSTMCell(3) under a GRUCell(2), recorded on 6 sequences with lengths, and its trace."""

    def body(x):
        outputs, _ = v1.nn.static_rnn(R.MultiRNNCell([R.BasicLSTMCell(3), R.GRUCell(2)]), tf.unstack(x, axis=1), dtype=tf.float32)
        return [outputs[-1]]

    built = build(body)
    x = np.random.RandomState(7).randn(6, 5, 4).astype(np.float32)
    out = tmp_path_factory.mktemp("rec") / "run"
    model = tracer.from_session(built.session)
    tracer.record(model, {"x": x}, out, batch_size=4, lengths=np.array([5, 5, 3, 5, 1, 5]))
    return Recording(out), tracer.trace(model, {"x": x})


LSTM, GRU = "rnn/multi_rnn_cell/cell_0/basic_lstm_cell", "rnn/multi_rnn_cell/cell_1/gru_cell"


def test_listings(recorded):
    rec, _ = recorded
    assert rec.complete and rec.cells == [LSTM, GRU]
    assert rec.gates(LSTM) == ["i", "j", "f", "o"] and rec.gates(GRU) == ["r", "u", "c"] and rec.states(LSTM) == ["c", "h"]
    assert rec.units(GRU) == 2 and rec.examples == [[0, 6]] and rec.steps(LSTM).tolist() == [0, 1, 2, 3, 4]
    assert repr(rec).endswith("2 cells, 6 examples, complete)")
    with pytest.raises(SelectionError, match="no cell 'nope' in .*; its cells are rnn/multi_rnn_cell/cell_0/basic_lstm_cell"):
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
    np.testing.assert_allclose(wide.loc[(2, 1)].to_numpy(), trace[GRU].preactivation[2, 1, 2], atol=1e-6, rtol=0)


def test_selections_read_only_what_is_asked(recorded):
    rec, _ = recorded
    df = rec.gate_frame(cells=[LSTM], gates=["i", "o"], steps=(1, 3), examples=(0, 2), units=[2], columns=["activation"])
    assert list(df.columns) == ["example", "step", "unit", "activation", "cell", "gate"]
    assert isinstance(df["cell"].dtype, pd.CategoricalDtype) and isinstance(df["gate"].dtype, pd.CategoricalDtype)
    assert sorted(df["gate"].astype(str).unique()) == ["i", "o"] and set(df["step"]) == {1, 2} and set(df["unit"]) == {2}
    assert len(df) == 2 * 2 * 2 * 1
    # The cell and gate filter picks folders: 2 of the 14 gate partitions' files are opened.
    fragments = list(rec._dataset("gates").get_fragments(filter=(ds.field("cell") == LSTM) & ds.field("gate").isin(["i", "o"])))
    assert len(fragments) == 2 * 2  # two gates x two batches
    with pytest.raises(SelectionError, match="expected some of preactivation, activation"):
        rec.gate_frame(columns=["value"])


def test_not_a_recording(tmp_path):
    with pytest.raises(RecordingError, match="is not a gatetrace recording: it has no gates/ folder"):
        Recording(tmp_path)
