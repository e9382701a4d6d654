"""The memory budget: the batch size is lowered so that a batch's data fits --memory."""

from __future__ import annotations

import numpy as np
import pytest

from recorders.errors import SelectionError
from tests.conftest import R, build, save
from tracer._tf import tf, v1
from tracer.budget import COPIES, fit_batch, parse_size
from tracer.cli import main


@pytest.mark.parametrize("text, size", [("2G", 2 * 2**30), ("500M", 500 * 2**20), ("1.5GB", int(1.5 * 2**30)), ("800k", 800 * 2**10), ("4096", 4096)])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "-1G", "0", "2Q"])
def test_bad_sizes(text):
    with pytest.raises(SelectionError, match="expected a size such as 2G, 500M or 1.5GB"):
        parse_size(text)


def test_fit_batch():
    assert fit_batch(256, 10 * 2**20, 2**20) == 10
    assert fit_batch(256, 2**40, 2**20) == 256
    assert fit_batch(256, 100, 2**20) == 1  # never below one sequence


def test_a_small_budget_lowers_the_batch_size(tmp_path, capsys):
    steps, features, units = 50, 8, 64

    def body(x):
        return [v1.nn.static_rnn(R.BasicLSTMCell(units), tf.unstack(x, axis=1), dtype=tf.float32)[0][-1]]

    model = save(build(body, steps=steps, features=features), "checkpoint", tmp_path)
    xs = np.random.RandomState(0).randn(30, steps, features).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    per_sequence = COPIES * steps * (4 * units * 2 + 2 * units) * 4 + steps * features * 4
    assert per_sequence == 769_600  # 6 copies x 50 steps x (4 gates x 64 units x 2 columns + 2 states x 64) x 4 bytes, + input
    budget = 10 * per_sequence + 1000  # room for 10 sequences
    argv = ["record", model, "--feed", f"x={tmp_path / 'x.npy'}", "--out", str(tmp_path / "rec"), "--quiet", "--memory", str(budget)]
    assert main(argv) == 0
    assert "batch size 256 lowered to 10 to stay within the memory budget of 7.3 MB (about 751.6 KB per sequence)" in capsys.readouterr().out
    parts = sorted(p.name for p in (tmp_path / "rec" / "gates").glob("cell=*/gate=f/*.parquet"))
    assert parts == ["part-0000000000.parquet", "part-0000000010.parquet", "part-0000000020.parquet"]
    assert main([*argv[:-2], "--memory", "lots"]) == 2
    assert "--memory 'lots': expected a size such as 2G, 500M or 1.5GB" in capsys.readouterr().err


def test_inspect_says_what_the_budget_makes_of_the_batch_size(tmp_path, capsys, monkeypatch):
    import tracer.budget

    def body(x):
        return [v1.nn.static_rnn(R.BasicLSTMCell(64), tf.unstack(x, axis=1), dtype=tf.float32)[0][-1]]

    model = save(build(body, steps=50, features=8), "checkpoint", tmp_path)
    per_sequence = COPIES * 50 * (4 * 64 * 2 + 2 * 64) * 4  # inputs are not known to inspect
    monkeypatch.setattr(tracer.budget, "default_budget", lambda: 10 * per_sequence + 1000)
    assert main(["inspect", model]) == 0
    assert "batch size: 256 by default, lowered to 10 to fit the memory budget of 7.3 MB (about 750.0 KB per sequence" in capsys.readouterr().out
    monkeypatch.setattr(tracer.budget, "default_budget", lambda: 2**40)
    assert main(["inspect", model]) == 0
    assert "batch size: 256 by default, fits the memory budget of 1024.0 GB" in capsys.readouterr().out
