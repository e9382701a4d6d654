"""`gatetrace compare A B` and `recorders.compare`: two recordings of the same network compared
gate by gate (`recorders.read.compare`).

The recordings are made as a user makes them: a Keras 3 model (an LSTM then a GRU, 32 units
over 32 features) saved as `.keras`, converted with `tf.lite.TFLiteConverter` as it is and
with `Optimize.DEFAULT` (dynamic range: int8 weights), each recorded with `gatetrace record`
on the same inputs. Every figure compare prints and writes is checked against numpy over the
two recordings' gate tables as pandas reads them from Parquet (not through `Recording`).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli

T, D, H, N = 8, 32, 32, 12
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{name: recording folder} of the Keras model, its float file and its quantised file;
    `short`: the Keras model on 6 of the examples; `summary`: the Keras model's --summary;
    `other`: on inputs with one value changed; `float64`: on the same inputs saved as float64."""
    import keras

    from tracer._tf import tf

    root = tmp_path_factory.mktemp("compare")
    init = keras.initializers
    inputs = keras.Input((T, D), batch_size=1, name="seq")
    lstm = keras.layers.LSTM(
        H, return_sequences=True, kernel_initializer=init.GlorotUniform(seed=1), name="lstm"
    )
    gru = keras.layers.GRU(
        H, return_sequences=True, kernel_initializer=init.GlorotUniform(seed=2), name="gru"
    )
    model = keras.Model(inputs, gru(lstm(inputs)))
    model.save(root / "model.keras")
    (root / "float.tflite").write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    (root / "dynamic.tflite").write_bytes(converter.convert())
    x = np.random.RandomState(0).uniform(-1, 1, (N, T, D)).astype(np.float32)
    np.save(root / "x.npy", x)
    np.save(root / "x64.npy", x.astype(np.float64))  # the same values, saved as float64
    other = x.copy()
    other[5, 3, 7] += 1e-3  # one value of one example changed
    np.save(root / "other.npy", other)
    out = {}
    for name, model_file, fed, extra in (
        ("keras", "model.keras", "x.npy", ()),
        ("float", "float.tflite", "x.npy", ()),
        ("dynamic", "dynamic.tflite", "x.npy", ()),
        ("short", "model.keras", "x.npy", ("--examples", "0:6")),
        ("summary", "model.keras", "x.npy", ("--summary",)),
        ("other", "model.keras", "other.npy", ()),
        ("float64", "model.keras", "x64.npy", ()),
    ):
        done = run_cli(
            "record", str(root / model_file), "--feed", f"seq={root / fed}", "--out", str(root / name), "--quiet", *extra
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        out[name] = root / name
    return out


def _gates(run) -> pd.DataFrame:
    return pd.read_parquet(run / "gates")


def _oracle(a, b, pairs: dict[str, str], tolerance: float, column: str = "activation"):
    """The differences `compare` reports, computed from the two gate tables alone."""
    x, y = _gates(a), _gates(b)
    y["cell"] = y["cell"].astype(str).map({v: k for k, v in pairs.items()})
    x["cell"] = x["cell"].astype(str)
    keys = ["cell", "gate", "example", "step", "unit"]
    for t in (x, y):
        t["gate"] = t["gate"].astype(str)
    both = x[keys + [column]].merge(
        y[keys + [column]], on=keys, suffixes=("_a", "_b"), validate="1:1"
    )
    assert len(both) == len(x) == len(y)
    d = both[f"{column}_b"].astype(np.float64) - both[f"{column}_a"].astype(np.float64)
    both["abs"], both["sq"] = d.abs(), d * d
    # saturated near either end of the gate's nonlinearity: the candidates (LSTM j, GRU c)
    # through tanh (beyond -0.9 or 0.9), every other gate of these layers through sigmoid
    tanh = both["gate"].isin(["j", "c"])
    low, high = np.where(tanh, -0.9, 0.1), 0.9
    both["sat_a"] = (both[f"{column}_a"] < low) | (both[f"{column}_a"] > high)
    both["sat_b"] = (both[f"{column}_b"] < low) | (both[f"{column}_b"] > high)
    gates = both.groupby(["cell", "gate"]).agg(
        max_abs=("abs", "max"), mean_abs=("abs", "mean"), sq=("sq", "mean"), values=("abs", "size")
    )
    gates["rmse"] = np.sqrt(gates.pop("sq"))
    per_unit = both.groupby(["cell", "gate", "unit"])["abs"].max()
    gates["units_beyond"] = (per_unit > tolerance).groupby(["cell", "gate"]).mean()
    steps = both.groupby(["cell", "gate", "step"])["abs"].agg(["max", "mean"])
    over = steps[steps["max"] > tolerance].reset_index()
    gates["first_step_beyond"] = over.groupby(["cell", "gate"])["step"].min()
    gates["saturated_a_only"] = (
        (both["sat_a"] & ~both["sat_b"]).groupby([both["cell"], both["gate"]]).sum()
    )
    gates["saturated_b_only"] = (
        (both["sat_b"] & ~both["sat_a"]).groupby([both["cell"], both["gate"]]).sum()
    )
    first = (
        over.sort_values(["step", "max"], ascending=[True, False]).iloc[0] if len(over) else None
    )
    return gates, steps, first


def test_compare_of_a_model_and_its_quantised_file_equals_numpy_on_the_two_recordings(
    runs, tmp_path
):
    """The Keras model against its dynamic-range file: the cells paired in order (`lstm` with
    `functional_1/lstm_1`), every figure per gate and per step equal to numpy's over the two
    gate tables; the gate it names first beyond the tolerance is the one numpy finds; the
    Parquet table holds the same; and the Python call gives what the command printed."""
    from recorders import Recording, compare

    out = tmp_path / "differences.parquet"
    done = run_cli(
        "compare",
        str(runs["keras"]),
        str(runs["dynamic"]),
        "--tolerance",
        str(TOLERANCE),
        "--json",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    b_cells = Recording(runs["dynamic"]).cells
    pairs = dict(zip(Recording(runs["keras"]).cells, b_cells, strict=True))
    assert pairs == {"lstm": b_cells[0], "gru": b_cells[1]} and "lstm" in b_cells[0]
    gates, steps, first = _oracle(runs["keras"], runs["dynamic"], pairs, TOLERANCE)
    got = pd.DataFrame(shown["gates"]).set_index(["cell", "gate"])
    assert sorted(got.index) == sorted(gates.index) and len(got) == 4 + 3
    for column in ("max_abs", "mean_abs", "rmse", "units_beyond"):
        np.testing.assert_allclose(got[column], gates.loc[got.index, column], rtol=1e-9, atol=1e-15)
    for column in ("values", "saturated_a_only", "saturated_b_only"):
        assert (got[column] == gates.loc[got.index, column]).all(), column
    assert (
        got["first_step_beyond"].astype(float).fillna(-1)
        == gates.loc[got.index, "first_step_beyond"].fillna(-1)
    ).all()
    # quantisation is seen: every gate differs, by more than the tolerance somewhere
    assert (got["max_abs"] > TOLERANCE).all() and (got["max_abs"] < 0.1).all()
    per_step = pd.DataFrame(shown["steps"]).set_index(["cell", "gate", "step"])
    np.testing.assert_allclose(per_step["max_abs"], steps.loc[per_step.index, "max"], rtol=1e-9)
    np.testing.assert_allclose(per_step["mean_abs"], steps.loc[per_step.index, "mean"], rtol=1e-9)
    assert shown["first_beyond"] == {
        "cell": first["cell"],
        "gate": first["gate"],
        "step": int(first["step"]),
    }
    # the units that differ most, by mean absolute difference, as numpy ranks them
    units = pd.DataFrame(shown["units"])
    assert len(units) == 5
    per_unit = pd.read_parquet(out).query("level == 'units'")
    table = pd.read_parquet(out)
    assert set(table["level"]) == {"gates", "steps", "units", "examples"}
    np.testing.assert_allclose(
        table.query("level == 'gates'").set_index(["cell", "gate"]).loc[got.index, "rmse"],
        gates.loc[got.index, "rmse"],
        rtol=1e-9,
    )
    assert per_unit["mean_abs"].tolist() == units["mean_abs"].tolist()
    python = compare(
        Recording(runs["keras"]), Recording(runs["dynamic"]), tolerance=TOLERANCE, top=5
    )
    assert python.first_beyond() == (first["cell"], first["gate"], int(first["step"]))
    pd.testing.assert_frame_equal(
        python.gates.set_index(["cell", "gate"])[["max_abs", "rmse"]],
        got[["max_abs", "rmse"]],
        check_exact=True,
    )


def test_a_model_and_its_float_file_agree_to_float32_rounding(runs):
    """The float file computes what the model computes (the converter's own ops): compare says
    no gate differs beyond 1e-5 and prints the tables a user reads."""
    done = run_cli("compare", str(runs["keras"]), str(runs["float"]), "--tolerance", "1e-5")
    assert done.returncode == 0, done.stderr
    assert "no gate differs by more than 1e-05 at any step" in done.stdout
    assert "mean absolute difference along the steps:" in done.stdout
    assert f"B: {runs['float']} (" in done.stdout and "tflite, ai-edge-litert" in done.stdout


@pytest.mark.parametrize(
    "b, extra, says",
    [
        ("short", (), "holds examples [[0, 12]] and "),
        (
            "other",
            (),
            "were fed other values (the digests of their inputs in the manifests differ)",
        ),
        ("summary", (), "is a summary recording (--summary): it holds statistics, not the values"),
        ("dynamic", ("--cells", "lstm=nosuch"), "--cells names nosuch, not a cell of "),
        ("dynamic", ("--cells", "lstm=functional_1/gru_1"), "have gates i,f,j,o and "),
        (
            "dynamic",
            ("--tolerance", "-1"),
            "argument --tolerance: expected a number >= 0, given '-1'",
        ),
        (
            "dynamic",
            ("--tolerance", "nan"),
            "argument --tolerance: expected a number >= 0, given 'nan'",
        ),
        ("dynamic", ("--cells", "lstm"), "expected CELL_A=CELL_B[,CELL_A=CELL_B...], given 'lstm'"),
    ],
)
def test_recordings_that_do_not_line_up_are_one_line(runs, tmp_path, b, extra, says):
    """What compare cannot pair is refused in one line saying what differs, exit 2, and no
    table is written."""
    if "gru" in " ".join(extra):  # the file's GRU's name, as its recording lists it
        from recorders import Recording

        extra = ("--cells", f"lstm={Recording(runs['dynamic']).cells[1]}")
    out = tmp_path / "d.parquet"
    done = run_cli("compare", str(runs["keras"]), str(runs[b]), *extra, "--out", str(out))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert says in done.stderr and not out.exists()


def test_its_table_replaces_only_its_own(runs, tmp_path):
    """--out: an existing file is kept without --overwrite, a file gatetrace did not write is
    never replaced, a folder is refused with a file name that works."""
    a, b = str(runs["keras"]), str(runs["float"])
    out = tmp_path / "d.parquet"
    assert run_cli("compare", a, b, "--out", str(out)).returncode == 0
    again = run_cli("compare", a, b, "--out", str(out))
    assert again.returncode == 2 and "pass --overwrite" in again.stderr
    assert run_cli("compare", a, b, "--out", str(out), "--overwrite").returncode == 0
    mine = tmp_path / "mine.parquet"
    pd.DataFrame({"x": [1]}).to_parquet(mine)
    kept = run_cli("compare", a, b, "--out", str(mine), "--overwrite")
    assert kept.returncode == 2 and "not a gatetrace Parquet file" in kept.stderr
    assert pd.read_parquet(mine)["x"].tolist() == [1]
    folder = run_cli("compare", a, b, "--out", str(tmp_path))
    assert folder.returncode == 2 and f"e.g. {tmp_path / 'differences.parquet'}" in folder.stderr


def test_the_same_values_are_the_same_inputs_and_a_recording_without_digests_is_said(
    runs, tmp_path
):
    """The same inputs saved as float64 digest alike (the values are hashed in a canonical type);
    a recording whose manifest keeps no digest (an older gatetrace's) is compared, and compare
    says its inputs were not checked."""
    import shutil

    done = run_cli("compare", str(runs["keras"]), str(runs["float64"]), "--tolerance", "0")
    assert done.returncode == 0, done.stderr
    assert (
        "inputs: the same values (the digests of the inputs in both manifests agree)" in done.stdout
    )
    assert "no gate differs by more than 0 at any step" in done.stdout
    old = tmp_path / "old"
    shutil.copytree(runs["float"], old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["inputs"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    done = run_cli("compare", str(runs["keras"]), str(old))
    assert done.returncode == 0, done.stderr
    assert f"inputs: not checked: {old} keeps no digest of its inputs" in done.stdout
