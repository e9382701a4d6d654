"""Selection flags drop exactly the rows they should, and nothing else."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import tracer
from tests.conftest import R, build, save
from tracer._tf import tf, v1
from tracer.cli import main

TOL = 1e-5


@pytest.fixture
def stack(tmp_path, inputs):
    """A two-layer stack (BasicLSTMCell(3) under GRUCell(2)) saved as a checkpoint, and its inputs."""

    def body(x):
        outputs, _ = v1.nn.static_rnn(
            R.MultiRNNCell([R.BasicLSTMCell(3), R.GRUCell(2)]),
            tf.unstack(x, axis=1),
            dtype=tf.float32,
        )
        return [outputs[-1]]

    built = build(body)
    np.save(tmp_path / "x.npy", inputs)
    return built, save(built, "checkpoint", tmp_path), str(tmp_path / "x.npy")


def test_every_selection_flag_together(stack, tmp_path, inputs, capsys):
    built, path, x = stack
    out = tmp_path / "sel"
    argv = ["record", path, "--feed", f"x={x}", "--out", str(out), "--batch-size", "2"]
    argv += [
        "--cells",
        "*/cell_1/*",
        "--gates",
        "r,c",
        "--steps",
        "1:4",
        "--values",
        "activation",
        "--examples",
        "2:5",
    ]
    assert main(argv) == 0
    gates = pd.read_parquet(out / "gates")
    assert gates["cell"].astype(str).unique().tolist() == ["rnn/multi_rnn_cell/cell_1/gru_cell"]
    assert sorted(gates["gate"].astype(str).unique()) == ["c", "r"]
    assert sorted(gates["step"].unique()) == [1, 2, 3]
    assert sorted(gates["example"].unique()) == [2, 3, 4]
    assert "preactivation" not in gates.columns
    assert len(gates) == 3 * 3 * 2 * 2  # examples x steps x gates x units
    # Values are those of the full run at the same (example, step): the layer below feeds it.
    lstm = tracer.run_cell(
        "BasicLSTMCell", built.weights["rnn/multi_rnn_cell/cell_0/basic_lstm_cell"], inputs
    )
    gru = tracer.run_cell(
        "GRUCell", built.weights["rnn/multi_rnn_cell/cell_1/gru_cell"], lstm["states"]["h"]
    )
    for (ex, step, gate, unit), value in gates.set_index(["example", "step", "gate", "unit"])[
        "activation"
    ].items():
        assert value == pytest.approx(gru["activation"][ex, step, "ruc".index(gate), unit], abs=TOL)
    states = pd.read_parquet(out / "states")
    assert sorted(states["example"].unique()) == [2, 3, 4] and sorted(states["step"].unique()) == [
        1,
        2,
        3,
    ]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["examples"] == 3
    assert manifest["selection"]["gates"] == ["r", "c"]
    assert [c["steps"] for c in manifest["cells"]] == [3]


@pytest.mark.parametrize(
    "flag, expected",
    [
        (
            ["--cells", "decoder/*"],
            "--cells decoder/* matches no cell; the cells are rnn/multi_rnn_cell/cell_0/basic_lstm_cell, rnn/multi_rnn_cell/cell_1/gru_cell",
        ),
        (
            ["--gates", "z"],
            "--gates: no selected cell has gate z; their gates are c, f, i, j, o, r, u",
        ),
        (
            ["--steps", "7:9"],
            "--steps 7:9 selects no step of rnn/multi_rnn_cell/cell_0/basic_lstm_cell, whose steps are 0:5",
        ),
        (["--steps", "a:b"], "--steps 'a:b': expected START:STOP, e.g. --steps 0:10"),
        (
            ["--values", "gradient"],
            "--values gradient: expected some of preactivation, activation, contributions, e.g. --values preactivation,activation,contributions",
        ),
    ],
)
def test_bad_selections(stack, tmp_path, capsys, flag, expected):
    _, path, x = stack
    assert main(["record", path, "--feed", f"x={x}", "--out", str(tmp_path / "o"), *flag]) == 2
    assert capsys.readouterr().err.strip() == f"gatetrace: error: {expected}"
    assert not (tmp_path / "o").exists()


def test_lengths_drop_rows_at_or_past_each_sequence_length(stack, tmp_path, inputs):
    built, path, x = stack
    lengths = np.array([5, 0, 3, 1, 4, 2])
    np.save(tmp_path / "len.npy", lengths)
    out = tmp_path / "out"
    argv = [
        "record",
        path,
        "--feed",
        f"x={x}",
        "--out",
        str(out),
        "--lengths",
        str(tmp_path / "len.npy"),
    ]
    assert main([*argv, "--batch-size", "4", "--examples", "1:6", "--quiet"]) == 0
    for table in ("gates", "states"):
        df = pd.read_parquet(out / table)
        kept = df.groupby("example")["step"].agg(["max", "nunique"])
        # example 0 is not selected, example 1 has length 0
        assert kept.index.tolist() == [2, 3, 4, 5]
        assert kept["nunique"].tolist() == [3, 1, 4, 2]
        assert (df["step"].to_numpy() < lengths[df["example"].to_numpy()]).all()
    gates = pd.read_parquet(out / "gates")
    # steps x (LSTM 4 gates x 3 units + GRU 3 x 2)
    assert len(gates) == (3 + 1 + 4 + 2) * (4 * 3 + 3 * 2)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["rows"]["gates"] == len(gates)


@pytest.mark.parametrize("bad", [np.array([5, 5]), np.array([1.5] * 6), np.array([-1] * 6)])
def test_bad_lengths(stack, tmp_path, capsys, bad):
    _, path, x = stack
    np.save(tmp_path / "len.npy", bad)
    assert (
        main(
            [
                "record",
                path,
                "--feed",
                f"x={x}",
                "--out",
                str(tmp_path / "o"),
                "--lengths",
                str(tmp_path / "len.npy"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"gatetrace: error: lengths: expected 6 non-negative integers, one per sequence; given shape {list(bad.shape)} of {bad.dtype}"
    )
