"""Stateful Keras layers, and layers hidden in wrappers: one semantics that every path honours.

By default a stateful layer is reset before each batch, so every row is an independent
sequence from zero state: `--examples`, `--shard` and `--resume` then equal a full run
exactly. `--carry-state` feeds rows in order as one stream (row k of a batch continues
row k of the batch before); it refuses `--shard`, and a resume rebuilds the state by
feeding the batches recorded before again. Values are checked against the float64 Keras
formulas of tests/test_keras.py.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from recorders import Recording
from tests.test_keras import FEATURES, T, keras_module, randomise, reference
from tracer.cli import main
from tracer.values.keras import KerasPlan

pytestmark = pytest.mark.e2e
BATCH = 2


@pytest.fixture(scope="module")
def stateful(tmp_path_factory):
    keras = keras_module("keras3")
    root = tmp_path_factory.mktemp("stateful")
    x = keras.Input(batch_shape=(BATCH, T, FEATURES), name="x")
    model = keras.Model(x, keras.layers.GRU(3, stateful=True, return_sequences=True, name="gru")(x))
    randomise(model, seed=4)
    model.save(root / "m.keras")
    xs = np.random.RandomState(7).uniform(-1, 1, (6, T, FEATURES)).astype(np.float32)
    np.save(root / "x.npy", xs)
    return model, root, xs


def run(root, out, *extra) -> None:
    assert (
        main(
            [
                "record",
                str(root / "m.keras"),
                "--feed",
                f"x={root / 'x.npy'}",
                "--out",
                str(out),
                "--quiet",
                *extra,
            ]
        )
        == 0
    )


def gates(out) -> pd.DataFrame:
    df = pd.read_parquet(out / "gates")
    return df.sort_values(["gate", "example", "step", "unit"]).reset_index(drop=True)


def test_every_row_starts_from_zero_state_and_every_path_agrees(stateful, tmp_path):
    model, root, xs = stateful
    run(root, tmp_path / "full")
    expected, _, _ = reference(model.get_layer("gru"), xs, None, None, "keras3")
    rec = Recording(tmp_path / "full")
    for g in "urc":
        np.testing.assert_allclose(
            rec.gate_array("gru", g, "activation"), expected[g][1], atol=1e-5
        )
    full = gates(tmp_path / "full")
    run(root, tmp_path / "part", "--examples", "2:6")
    pd.testing.assert_frame_equal(
        gates(tmp_path / "part"),
        full[full["example"] >= 2].reset_index(drop=True),
        check_categorical=False,
    )
    for k in range(2):
        run(root, tmp_path / "shards", "--shard", f"{k}/2")
    pd.testing.assert_frame_equal(gates(tmp_path / "shards"), full, check_categorical=False)


def test_carry_state_continues_each_row_slot_and_resumes_exactly(
    stateful, tmp_path, monkeypatch, capsys
):
    model, root, xs = stateful
    run(root, tmp_path / "stream", "--carry-state")
    layer = model.get_layer("gru")
    rec = Recording(tmp_path / "stream")
    h = None
    for start in range(0, 6, BATCH):  # row k of each batch continues row k of the batch before
        expected, states, _ = reference(layer, xs[start : start + BATCH], None, h, "keras3")
        for g in "urc":
            np.testing.assert_allclose(
                rec.gate_array("gru", g, "activation")[start : start + BATCH],
                expected[g][1],
                atol=1e-5,
            )
        h = [states["h"][:, -1]]
    assert (
        main(
            [
                "record",
                str(root / "m.keras"),
                "--feed",
                f"x={root / 'x.npy'}",
                "--out",
                str(tmp_path / "s"),
                "--carry-state",
                "--shard",
                "0/2",
            ]
        )
        == 2
    )
    assert (
        "--carry-state with --shard 0/2: each shard would start its stream from zero state"
        in capsys.readouterr().err
    )
    real, calls = KerasPlan.fetch, []

    def fails_on_the_third_batch(self, batch):
        calls.append(1)
        if len(calls) == 3:
            raise MemoryError
        return real(self, batch)

    monkeypatch.setattr(KerasPlan, "fetch", fails_on_the_third_batch)
    assert (
        main(
            [
                "record",
                str(root / "m.keras"),
                "--feed",
                f"x={root / 'x.npy'}",
                "--out",
                str(tmp_path / "cut"),
                "--quiet",
                "--carry-state",
            ]
        )
        == 2
    )
    monkeypatch.setattr(KerasPlan, "fetch", real)
    capsys.readouterr()
    progress = json.loads((tmp_path / "cut" / "_progress" / "shard-0-of-1.json").read_text())
    assert progress["complete"] == [[0, 4]]  # two batches kept; the third failed
    # feeds batches 0:2 and 2:4 again to rebuild the state
    run(root, tmp_path / "cut", "--carry-state", "--resume")
    pd.testing.assert_frame_equal(
        gates(tmp_path / "cut"), gates(tmp_path / "stream"), check_categorical=False
    )
    assert len(calls) == 3


@pytest.mark.parametrize("framework", ["keras3", "tf-keras"])
def test_a_layer_inside_time_distributed_is_named_not_hidden(framework, tmp_path, capsys):
    import json

    keras = keras_module(framework)
    x = keras.Input((4, T, FEATURES), name="x")  # 4 sentences of T words
    words = keras.layers.TimeDistributed(keras.layers.LSTM(3, name="word_lstm"), name="td")(x)
    model = keras.Model(x, keras.layers.GRU(2, name="sentence_gru")(words))
    model.save(tmp_path / "m.keras")
    assert main(["inspect", str(tmp_path / "m.keras"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in info["cells"]] == ["sentence_gru"] and info["cells"][0]["steps"] == 4
    assert (
        info["not_recorded"] == ["td/word_lstm (a LSTM inside TimeDistributed)"]
        and info["unsafe_ops"] == []
    )
    np.save(tmp_path / "x.npy", np.ones((2, 4, T, FEATURES), np.float32))
    assert (
        main(
            [
                "record",
                str(tmp_path / "m.keras"),
                "--feed",
                f"x={tmp_path / 'x.npy'}",
                "--out",
                str(tmp_path / "rec"),
                "--quiet",
            ]
        )
        == 0
    )
    assert (
        "not recorded: td/word_lstm (a LSTM inside TimeDistributed); its inner layer runs on reshaped rows"
        in capsys.readouterr().out
    )
    only = keras.Model(x, words)
    only.save(tmp_path / "only.keras")
    assert main(["inspect", str(tmp_path / "only.keras")]) == 2
    assert (
        "td/word_lstm (a LSTM inside TimeDistributed): wrapped layers run on reshaped rows and are not recorded"
        in capsys.readouterr().err
    )
