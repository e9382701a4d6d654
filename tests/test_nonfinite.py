"""Recordings that hold infinite and NaN values, as real models give them: `gatetrace view`'s
answers and `gatetrace compare --json` are JSON as the standard has it (no `Infinity` or `NaN`
token: each such number is the text "inf", "-inf" or "nan"), and say what the values are.

The model is Keras' own: a SimpleRNN (relu) whose unit 0 takes 1e3 x the first feature, then an
LSTM. Fed 1e38 in one example, unit 0 overflows float32 to +inf, and the LSTM's preactivations
become +inf, -inf and NaN (inf - inf); a copy whose unit 0 takes 1 x the feature stays finite.
The figures are checked against Keras' outputs and numpy over the gate tables as pandas reads
them, not through `Recording`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli

T, D, H, N = 4, 2, 3, 5
HUGE = 2  # the example fed 1e38


def strict_json(text: str):
    """JSON as the standard has it: a NaN or Infinity token is an error, not a number."""

    def refused(token: str):
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refused)


def _model(scale: float):
    import keras

    x = keras.Input((T, D), name="x")
    rnn = keras.layers.SimpleRNN(H, activation="relu", return_sequences=True, name="rnn")
    lstm = keras.layers.LSTM(H, return_sequences=True, name="lstm")
    model = keras.Model(x, lstm(rnn(x)))
    kernel = np.zeros((D, H), np.float32)
    kernel[0, 0], kernel[1, 1:] = scale, 0.5
    rnn.set_weights([kernel, np.full((H, H), 0.1, np.float32), np.zeros(H, np.float32)])
    rng = np.random.RandomState(0)
    lk = rng.uniform(-0.5, 0.5, (H, 4 * H)).astype(np.float32)
    lk[0] = 1.0  # the RNN's unit 0 drives every preactivation
    lstm.set_weights(
        [lk, rng.uniform(-0.5, 0.5, (H, 4 * H)).astype(np.float32), np.zeros(4 * H, np.float32)]
    )
    return keras.Model(x, [rnn.output, model.output])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """{"big": its recording, "small": the finite copy's, "x": the inputs, "rnn": Keras' own
    outputs of the big model's SimpleRNN}."""
    root = tmp_path_factory.mktemp("nonfinite")
    x = np.random.RandomState(0).uniform(0.5, 1, (N, T, D)).astype(np.float32)
    x[HUGE, :, 0] = 1e38
    np.save(root / "x.npy", x)
    out: dict = {"x": x}
    for name, scale in (("big", 1e3), ("small", 1.0)):
        model = _model(scale)
        model.save(root / f"{name}.keras")
        if name == "big":
            out["rnn"] = np.asarray(model.predict(x, verbose=0)[0], np.float64)
        done = run_cli(
            "record", str(root / f"{name}.keras"), "--feed", f"x={root / 'x.npy'}", "--out", str(root / name), "--quiet"
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        out[name] = root / name
    # what the model gives: infinities, and NaN behind them
    assert np.isinf(out["rnn"]).any()
    return out


def _ready(values) -> list:
    """Numbers as the answers hold them: rounded, non-finite ones as text."""
    return [
        "nan" if np.isnan(v) else ("inf" if v > 0 else "-inf") if np.isinf(v) else v for v in values
    ]


def test_the_view_answers_json_for_infinite_values(runs):
    """The overview of a recording holding +inf (its file carries no statistics: the values
    are read) and a sequence holding +inf and NaN: every answer parses as strict JSON; the
    SimpleRNN's mean per step is Keras' (over examples and units), +inf where it is; the
    sequence shown is Keras' output."""
    from starlette.testclient import TestClient

    from recorders import Recording
    from recorders.view.server import make_app

    client = TestClient(make_app(Recording(runs["big"])), base_url="http://127.0.0.1")
    answer = client.get("/api/overview")
    assert answer.status_code == 200, answer.text
    overview = strict_json(answer.text)
    (rnn,) = [g for c in overview["cells"] if c["name"] == "rnn" for g in c["gate_stats"]]
    with np.errstate(invalid="ignore"):
        expected = runs["rnn"].mean(axis=(0, 2))
    assert "inf" in rnn["mean"]
    assert rnn["mean"] == _ready([round(float(v), 5) for v in expected])
    answer = client.get(f"/api/heatmap?cell=rnn&label=h&example={HUGE}")
    assert answer.status_code == 200, answer.text
    shown = strict_json(answer.text)["values"]
    assert shown == [_ready([round(float(v), 6) for v in row]) for row in runs["rnn"][HUGE]]
    for url in (
        f"/api/heatmap?cell=lstm&label=f&example={HUGE}&column=preactivation",
        f"/api/unit?cell=rnn&gate=h&unit=0&example={HUGE}",
        f"/api/unit?cell=lstm&gate=j&unit=0&example={HUGE}&column=preactivation",
    ):
        answer = client.get(url)
        assert answer.status_code == 200, (url, answer.text)
        strict_json(answer.text)


def _expected(a: Path, b: Path, column: str) -> pd.DataFrame:
    """Per cell and gate, from the two gate tables: the largest |B - A| over the values NaN in
    neither (0 where both hold the same infinity), and the values NaN in one only."""
    keys = ["cell", "gate", "example", "step", "unit"]
    x, y = (pd.read_parquet(r / "gates").astype({"cell": str, "gate": str}) for r in (a, b))
    both = x[[*keys, column]].merge(y[[*keys, column]], on=keys, suffixes=("_a", "_b"))
    va, vb = (both[f"{column}_{k}"].to_numpy(np.float64) for k in "ab")
    with np.errstate(invalid="ignore"):
        d = np.where(va == vb, 0.0, np.abs(vb - va))
    both["d"] = np.where(np.isnan(va) | np.isnan(vb), np.nan, d)
    both["nan_a"] = np.isnan(va) & ~np.isnan(vb)
    both["nan_b"] = np.isnan(vb) & ~np.isnan(va)
    return both.groupby(["cell", "gate"]).agg(
        max_abs=("d", "max"), nan_a_only=("nan_a", "sum"), nan_b_only=("nan_b", "sum")
    )


def test_compare_json_of_infinite_and_nan_values(runs):
    """The overflowing model against its finite copy, by preactivation: `compare --json` and the
    view's panel are strict JSON, the same; each gate's largest difference is numpy's ("inf"
    where one holds an infinity the other does not); values NaN in one only are counted apart,
    as numpy counts them, and are beyond the tolerance from their step on."""
    from starlette.testclient import TestClient

    from recorders import Recording, compare
    from recorders.view.server import make_app

    a, b = runs["big"], runs["small"]
    done = run_cli("compare", str(a), str(b), "--column", "preactivation", "--json")
    assert done.returncode == 0, done.stderr
    shown = strict_json(done.stdout)
    got = pd.DataFrame(shown["gates"]).set_index(["cell", "gate"])
    expected = _expected(a, b, "preactivation").loc[got.index]
    assert got["max_abs"].tolist() == _ready(expected["max_abs"].tolist())
    assert "inf" in got["max_abs"].tolist()
    assert got["nan_a_only"].tolist() == expected["nan_a_only"].tolist()
    assert got["nan_b_only"].tolist() == expected["nan_b_only"].tolist()
    assert (got.loc[got["nan_a_only"] > 0, "first_step_beyond"].notna()).all()
    assert expected["nan_a_only"].sum() > 0  # the LSTM's inf - inf
    found = compare(Recording(a), Recording(b), column="preactivation", top=5)
    panel = TestClient(make_app(Recording(a), comparison=found), base_url="http://127.0.0.1")
    answer = panel.get("/api/compare")
    assert answer.status_code == 200, answer.text
    assert strict_json(answer.text)["gates"] == shown["gates"]
    text = run_cli("compare", str(a), str(b), "--column", "preactivation")
    assert text.returncode == 0 and "inf" in text.stdout, text.stderr
