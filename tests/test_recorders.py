"""The TensorFlow-free half: long columns and the atomic Parquet writer."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from recorders import OutputExistsError, RecordingError, RecordingWriter, key_columns, partition_dir

DESCRIPTION = {"cells": [{"name": "a/b"}]}


def gate(writer, cell="rnn/basic_lstm_cell", name="f", examples=(0, 1)):
    values = np.arange(len(examples) * 3 * 2, dtype=np.float32).reshape(len(examples), 3, 2)
    writer.write_gate(cell, name, np.array(examples), np.array([0, 1, 2]), values, -values)
    return values


def test_key_columns_are_c_ordered():
    keys = key_columns(np.array([5, 6]), np.array([0, 1, 2]), 2)
    assert keys["example"].tolist() == [5] * 6 + [6] * 6
    assert keys["step"].tolist() == [0, 0, 1, 1, 2, 2] * 2
    assert keys["unit"].tolist() == [0, 1] * 6


def test_recording_round_trips_and_close_is_idempotent(tmp_path):
    out = tmp_path / "run"
    with RecordingWriter(out, DESCRIPTION) as writer:
        values = gate(writer)
        manifest = writer.close(examples=2)
        assert writer.close() is manifest
    assert manifest["rows"]["gates"] == 12 and manifest["examples"] == 2
    df = pd.read_parquet(out / "gates")
    assert df["cell"].astype(str).unique().tolist() == ["rnn/basic_lstm_cell"]
    assert df["preactivation"].tolist() == values.reshape(-1).tolist()
    assert df["activation"].tolist() == (-values).reshape(-1).tolist()
    assert json.loads((out / "manifest.json").read_text())["rows"]["gates"] == 12
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_a_failure_leaves_nothing_that_looks_complete(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="model failed"):
        with RecordingWriter(out, DESCRIPTION) as writer:
            gate(writer)
            raise RuntimeError("model failed")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RecordingError, match="already aborted"):
        gate(writer)


def test_refuses_a_non_empty_folder_unless_overwrite(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match=f"--out {out} exists and is not empty; .*--overwrite"):
        RecordingWriter(out, DESCRIPTION)
    with RecordingWriter(out, DESCRIPTION, overwrite=True) as writer:
        gate(writer)
    assert sorted(p.name for p in out.iterdir()) == ["gates", "manifest.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_partition_names_are_percent_encoded_and_read_back(tmp_path):
    assert partition_dir(cell="a/b c", gate="f") == "cell=a%2Fb%20c/gate=f"
    with RecordingWriter(tmp_path / "run", DESCRIPTION) as writer:
        gate(writer, cell="enc/rnn/multi_rnn_cell/cell_0/lstm_cell")
    assert pd.read_parquet(tmp_path / "run" / "gates")["cell"].astype(str).unique().tolist() == [
        "enc/rnn/multi_rnn_cell/cell_0/lstm_cell"
    ]


def test_recorders_never_import_tensorflow():
    code = "import sys, recorders, recorders.parquet, tracer.reference; print('tensorflow' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
