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
    `other`: on inputs with one value changed; `float64`: on the same inputs saved as float64;
    `some_gates`: the Keras model's gates i, f (LSTM) and u (GRU) only; `other_gates`: its
    gates j and o only (the LSTM's: the GRU has neither)."""
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
        ("some_gates", "model.keras", "x.npy", ("--gates", "i,f,u")),
        ("other_gates", "model.keras", "x.npy", ("--gates", "j,o")),
    ):
        done = run_cli(
            "record", str(root / model_file), "--feed", f"seq={root / fed}", "--out", str(root / name), "--quiet", *extra
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        out[name] = root / name
    return out


def _gates(run) -> pd.DataFrame:
    return pd.read_parquet(run / "gates")


def _oracle(a, b, pairs: dict[str, str], tolerance: float, column: str = "activation", only=None):
    """The differences `compare` reports, computed from the two gate tables alone (of the
    (cell, gate) pairs `only`, where given)."""
    x, y = _gates(a), _gates(b)
    y["cell"] = y["cell"].astype(str).map({v: k for k, v in pairs.items()})
    x["cell"] = x["cell"].astype(str)
    keys = ["cell", "gate", "example", "step", "unit"]
    for t in (x, y):
        t["gate"] = t["gate"].astype(str)
    if only is not None:
        x, y = (
            t[[(c, g) in only for c, g in zip(t["cell"], t["gate"], strict=True)]] for t in (x, y)
        )
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
        ("short", (), "holds examples 0:12 and "),
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
    del manifest["inputs"], manifest["digests"]  # as a gatetrace before it kept either
    (old / "manifest.json").write_text(json.dumps(manifest))
    done = run_cli("compare", str(runs["keras"]), str(old))
    assert done.returncode == 0, done.stderr
    assert (
        f"inputs: not checked: {old}: recorded by a gatetrace that kept no digest of the inputs; "
        "make sure both were fed the same values"
    ) in done.stdout


@pytest.mark.parametrize("partial_is", ["b", "a"])
def test_gates_one_recording_left_out_are_named_and_the_others_compared(runs, partial_is):
    """One recording made with --gates i,f,u: compare compares the gates both hold, each figure
    numpy's over the two gate tables, and names every other gate as not compared, with the
    recording that holds it, in its table, its JSON and the view's panel."""
    from starlette.testclient import TestClient

    from recorders import Recording, compare
    from recorders.view.server import make_app

    full, partial = runs["keras"], runs["some_gates"]
    a, b = (full, partial) if partial_is == "b" else (partial, full)
    done = run_cli("compare", str(a), str(b), "--json", "--tolerance", str(TOLERANCE))
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    both = {("lstm", "i"), ("lstm", "f"), ("gru", "u")}
    gates, _, _ = _oracle(a, b, {"lstm": "lstm", "gru": "gru"}, TOLERANCE, only=both)
    got = pd.DataFrame(shown["gates"]).set_index(["cell", "gate"])
    assert set(got.index) == both == set(gates.index)
    for column in ("max_abs", "mean_abs", "rmse", "units_beyond"):
        np.testing.assert_allclose(got[column], gates.loc[got.index, column], rtol=1e-9, atol=1e-15)
    assert (got["values"] == gates.loc[got.index, "values"]).all()
    apart = {("lstm", "j"), ("lstm", "o"), ("gru", "r"), ("gru", "c")}
    assert {(n["cell"], n["gate"]) for n in shown["not_compared"]} == apart
    assert {n["only_in"] for n in shown["not_compared"]} == {str(full)}
    text = run_cli("compare", str(a), str(b))
    assert text.returncode == 0, text.stderr
    assert f"not compared: gate j of cell lstm (recorded in {full} only)" in text.stdout
    found = compare(Recording(a), Recording(b))
    panel = TestClient(make_app(Recording(a), comparison=found), base_url="http://127.0.0.1")
    answer = panel.get("/api/compare").json()
    assert answer["not_compared"] == shown["not_compared"]
    assert {(g["cell"], g["gate"]) for g in answer["gates"]} == both


def test_recordings_that_share_no_gate_are_one_line(runs):
    """One recorded with --gates i,f,u, the other with --gates j,o: nothing to compare, said in
    one line naming what each holds."""
    done = run_cli(
        "compare", str(runs["some_gates"]), str(runs["other_gates"]), "--cells", "lstm=lstm"
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "share no gate to compare" in done.stderr
    assert f"{runs['some_gates']} gates i,f of cell lstm" in done.stderr
    assert f"{runs['other_gates']} gates j,o of cell lstm" in done.stderr


def _claiming(run, examples: int, to):
    """A copy of the recording `run` whose manifest and progress files claim `examples`
    complete examples, edited as anyone would edit them: as JSON."""
    import shutil

    shutil.copytree(run, to)
    manifest = json.loads((to / "manifest.json").read_text())
    manifest["examples"] = examples
    (to / "manifest.json").write_text(json.dumps(manifest))
    for path in (to / "_progress").glob("*.json"):
        progress = json.loads(path.read_text())
        progress.update(complete=[[0, examples]], examples=[0, examples], total=[0, examples])
        path.write_text(json.dumps(progress))
    return to


def test_a_manifest_that_claims_more_examples_than_were_fed_is_one_line(runs, tmp_path):
    """Manifest and progress edited to claim 2^50 complete examples of the 12 its feeds held:
    refused in one line naming the file, before anything is sized by the claim (compare of two
    such copies allocated an array of 2^50 example numbers)."""
    from recorders import Recording, compare
    from recorders.errors import RecordingError

    big = [_claiming(runs["keras"], 2**50, tmp_path / name) for name in ("a", "b")]
    done = run_cli("compare", str(big[0]), str(big[1]))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"gatetrace: error: {big[0]}/manifest.json says examples up to")
    assert "hold 12 sequences" in done.stderr
    with pytest.raises(RecordingError, match="manifest.json says examples up to"):
        compare(Recording(big[0], memory=256 << 20), Recording(big[1], memory=256 << 20))


def _written(out, gates=("i", "f"), examples=(0, 6), seed=0):
    """A recording written through `RecordingWriter` (no feeds in its description): one LSTM
    cell of 3 units over 5 steps, `gates` of it, uniform activations."""
    from recorders.write.writer import RecordingWriter

    description = {
        "cells": [
            {
                "name": "a",
                "kind": "lstm",
                "gates": ["i", "f", "j", "o"],
                "states": [],
                "units": 3,
                "steps": 5,
            }
        ]
    }
    values = np.random.RandomState(seed).rand(examples[1] - examples[0], 5, 3).astype(np.float32)
    with RecordingWriter(out, description, examples=examples) as writer:
        writer.begin(*examples)
        for gate in gates:
            writer.write_gate("a", gate, np.arange(*examples), np.arange(5), values, values)
        writer.commit()
    return out


def test_examples_claimed_beyond_the_rows_are_not_allocated(tmp_path):
    """A recording that keeps no feeds, edited to claim 2^50 complete examples of which 6 have
    rows: compare sizes nothing by the claim (it allocated 2^50 example numbers, under a budget
    of 256 MiB) and compares the examples the files hold, each difference numpy's."""
    from recorders import Recording, compare

    a = _claiming(_written(tmp_path / "a0"), 2**50, tmp_path / "a")
    b = _claiming(_written(tmp_path / "b0", seed=1), 2**50, tmp_path / "b")
    found = compare(Recording(a, memory=256 << 20), Recording(b, memory=256 << 20), top=100)
    keys = ["gate", "example", "step", "unit"]
    x, y = (pd.read_parquet(r / "gates").astype({"gate": str}).sort_values(keys) for r in (a, b))
    x["abs"] = np.abs(y["activation"].to_numpy(np.float64) - x["activation"].to_numpy(np.float64))
    per_example = x.groupby(["gate", "example"])["abs"].agg(["max", "mean"])
    got = found.examples.astype({"gate": str}).set_index(["gate", "example"]).sort_index()
    assert got.index.tolist() == per_example.index.tolist()  # the 6 examples of both gates
    np.testing.assert_allclose(got["max_abs"], per_example["max"], rtol=0, atol=0)
    np.testing.assert_allclose(got["mean_abs"], per_example["mean"], rtol=1e-12)
    assert found.gates["values"].sum() == len(x)


def test_compare_over_its_memory_budget_says_what_works_for_it(runs):
    """compare reads each gate whole: over the memory budget it says to give a larger one, not to
    select fewer examples or steps (it selects none)."""
    from recorders import Recording, compare
    from recorders.errors import SelectionError

    with pytest.raises(SelectionError) as caught:
        compare(Recording(runs["keras"], memory=100_000), Recording(runs["float"], memory=100_000))
    line = str(caught.value)
    assert "select fewer" not in line and "Recording(path, memory=...)" in line, line


def test_the_view_short_of_memory_says_what_works_for_it(tmp_path, monkeypatch):
    """A sequence over the view's memory budget, and a MemoryError while answering: each one line
    saying what works for the view (it advised selecting fewer examples for one sequence, and
    called running out of memory a defect to report)."""
    from starlette.testclient import TestClient

    from recorders import Recording
    from recorders.view import data
    from recorders.view.server import make_app

    run = _written(tmp_path / "run")
    client = TestClient(make_app(Recording(run, memory=3000)), base_url="http://127.0.0.1")
    answer = client.get("/api/heatmap?cell=a&label=f&example=0")
    error = answer.json()["error"]
    assert answer.status_code == 400 and "memory budget of 3,000" in error
    assert "select fewer" not in error and "Recording(path, memory=...)" in error

    def short_of_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(data, "heatmap", short_of_memory)
    answer = TestClient(make_app(Recording(run)), base_url="http://127.0.0.1").get(
        "/api/heatmap?cell=a&label=f&example=0"
    )
    error = answer.json()["error"]
    assert answer.status_code == 503 and error.startswith("out of memory answering this")
    assert "report" not in error


def test_out_of_memory_advises_only_what_each_command_has(monkeypatch):
    """After a MemoryError, each command's one line names only options it has (compare's used
    to advise --batch-size, which only record has)."""
    import re

    from tracer import cli

    def short_of_memory(*args):
        raise MemoryError

    monkeypatch.setattr(cli, "_run", short_of_memory)
    parser = cli._parser()
    commands = parser._subparsers._group_actions[0].choices
    given = {
        "inspect": ["m"],
        "view": ["r"],
        "units": ["r", "--labels", "l.npy"],
        "compare": ["a", "b"],
        "record": ["m", "--feed", "x=x.npy", "--out", "o"],
        "weights": ["m", "--out", "w.parquet"],
        "demo": [],
    }
    assert set(given) == set(commands)
    for name, args in given.items():
        done = run_cli(name, *args)
        assert done.returncode == 2 and done.stderr.startswith("gatetrace: error: out of memory")
        flags = set(re.findall(r"--[a-z][a-z-]*", done.stderr))
        assert flags <= set(commands[name]._option_string_actions), (name, done.stderr)
    assert "--batch-size" in run_cli("record", *given["record"]).stderr


def test_opening_a_recording_allocates_what_its_files_hold(tmp_path):
    """Opening a recording reads its manifest and progress files: that allocated 256 MiB (the
    most JSON gatetrace reads) before a byte was read, whatever the memory budget (64 MiB here);
    now about what the files hold."""
    import tracemalloc

    from recorders import Recording

    run = _written(tmp_path / "run")
    tracemalloc.start()
    try:
        Recording(run, memory=64 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak:,} bytes"


@pytest.fixture(scope="module")
def tf_keras_runs(tmp_path_factory):
    """{name: recording folder} of a tf-keras LSTM saved as `.h5` (`h5`), its float `.tflite`
    file (`float`: one fused op) and its dynamic-range file (`dynamic`: int8 weights), each
    recorded with `gatetrace record` on the same inputs; `root` their folder."""
    import tf_keras

    from tracer._tf import tf

    root = tmp_path_factory.mktemp("tf_keras")
    # 32 features, 32 units: a gate's matrices of 1,024 numbers, which dynamic range quantises
    inputs = tf_keras.Input((5, 32), batch_size=1, name="seq")
    init = tf_keras.initializers.GlorotUniform(seed=3)
    lstm = tf_keras.layers.LSTM(32, return_sequences=True, kernel_initializer=init, name="lstm")
    model = tf_keras.Model(inputs, lstm(inputs))
    model.save(root / "lstm.h5")
    (root / "float.tflite").write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    (root / "dynamic.tflite").write_bytes(converter.convert())
    np.save(root / "x.npy", np.random.RandomState(1).uniform(-1, 1, (6, 5, 32)).astype(np.float32))
    out = {"root": root}
    for name, model_file in (
        ("h5", "lstm.h5"),
        ("float", "float.tflite"),
        ("dynamic", "dynamic.tflite"),
    ):
        done = run_cli(
            "record", str(root / model_file), "--feed", f"seq={root / 'x.npy'}", "--out", str(root / name), "--quiet"
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        out[name] = root / name
    return out


def _weights_equal(a, b) -> bool:
    """Whether two recordings' weights tables hold the same rows, as pandas reads them."""
    keys = ["cell", "gate", "source", "row", "unit"]
    x, y = (
        pd.read_parquet(r / "weights.parquet").astype({"cell": str, "gate": str, "source": str})
        for r in (a, b)
    )
    x, y = (t.sort_values(keys).reset_index(drop=True) for t in (x, y))
    return x.equals(y)


def test_a_zero_between_two_replays_of_equal_weights_is_said_to_prove_only_that(
    tf_keras_runs, tmp_path
):
    """A tf-keras `.h5` and its float `.tflite`: both recordings are gatetrace's replays (the
    layer's loop and the fused op compute their gates inside themselves) of the same weights,
    so they differ by float32 rounding at most (on a smaller model, not at all). compare says where each side's values came from, beside
    every figure (text, --json, the --out table), and that a 0 here proves only equal weights;
    against the dynamic-range file (int8 weights: other weights) it says the hybrid kernel was
    replayed and makes no such note."""
    h5, lite, dynamic = tf_keras_runs["h5"], tf_keras_runs["float"], tf_keras_runs["dynamic"]
    assert _weights_equal(h5, lite) and not _weights_equal(h5, dynamic)
    out = tmp_path / "d.parquet"
    done = run_cli("compare", str(h5), str(lite), "--out", str(out))
    assert done.returncode == 0, done.stderr
    replayed = (
        "gatetrace's replay of the cell from its weights (checked against the model's outputs)"
    )
    assert f"  A, cell lstm: replayed: {replayed}" in done.stdout
    assert f"  B, cell lstm: replayed: {replayed}" in done.stdout
    note = "a difference of 0 proves only that the weights are equal, not that the two runtimes compute alike"
    assert "note: cell lstm: both sides are gatetrace's replays of equal weights" in done.stdout
    assert note in done.stdout
    gates_text = _gates_text(done.stdout)
    assert gates_text[0].split()[:4] == ["cell", "gate", "from_a", "from_b"], gates_text
    assert all(line.split()[2:4] == ["replayed", "replayed"] for line in gates_text[1:])
    # the differences, in numpy over the two gate tables: float32 rounding's, as printed
    x, y = (_gates(r).sort_values(["gate", "example", "step", "unit"]) for r in (h5, lite))
    largest = np.abs(y["activation"].to_numpy(np.float64) - x["activation"].to_numpy(np.float64))
    assert largest.max() < 1e-6
    table = pd.read_parquet(out)
    assert set(table["from_a"]) == set(table["from_b"]) == {"replayed"}
    assert table["replays_of_equal_weights"].all()
    shown = json.loads(run_cli("compare", str(h5), str(lite), "--json").stdout)
    assert [(g["from_a"], g["from_b"]) for g in shown["gates"]] == [("replayed", "replayed")] * 4
    (sides,) = shown["origins"]
    assert sides["a"]["from"] == sides["b"]["from"] == "replayed" and not sides["a"]["own"]
    assert sides["replays_of_equal_weights"] and note in shown["notes"][0]
    other = json.loads(run_cli("compare", str(h5), str(dynamic), "--json").stdout)
    assert [(g["from_a"], g["from_b"]) for g in other["gates"]] == [
        ("replayed", "hybrid kernel replayed")
    ] * 4
    assert other["notes"] == [] and not other["origins"][0]["replays_of_equal_weights"]
    assert max(g["max_abs"] for g in other["gates"]) > 1e-3  # int8 weights


def test_a_runtime_s_own_tensors_are_said_to_be_so(runs):
    """The Keras 3 model (replayed: its layer runs its own loop) against its float file, whose
    loop the interpreter runs an iteration at a time: B's values are the interpreter's own."""
    shown = json.loads(run_cli("compare", str(runs["keras"]), str(runs["float"]), "--json").stdout)
    assert {(g["from_a"], g["from_b"]) for g in shown["gates"]} == {("replayed", "interpreter")}
    assert all(o["b"]["own"] and not o["a"]["own"] for o in shown["origins"])
    assert shown["notes"] == []
    from recorders import Recording

    text = run_cli("compare", str(runs["keras"]), str(runs["float"])).stdout
    for cell in Recording(runs["float"]).cells:
        assert f"B, cell {cell}: interpreter: the interpreter's own tensors" in text


def _gates_text(stdout: str) -> list[str]:
    """The lines of the gates' table compare prints (header first)."""
    after = stdout.split("; beyond: a difference above ")[1].split("\n\n")
    return after[1].splitlines()


def test_the_text_spells_nothing_one_way_and_ranges_as_inspect_does(runs):
    """first_step_beyond where no difference passes the tolerance: "none", whether no gate's
    does (the column held None) or some gates' do (it held NaN); the examples as `0:12`."""
    from recorders import Recording, compare

    found = compare(Recording(runs["keras"]), Recording(runs["dynamic"]), tolerance=0)
    largest = sorted(found.gates["max_abs"])
    between = (largest[2] + largest[3]) / 2  # 3 gates within it, the others beyond
    for b, tolerance in (("float64", "0"), ("dynamic", repr(between))):
        done = run_cli("compare", str(runs["keras"]), str(runs[b]), "--tolerance", tolerance)
        assert done.returncode == 0, done.stderr
        words = set(done.stdout.split())
        assert not words & {"None", "NaN", "nan", "<NA>"} and "[[" not in done.stdout, done.stdout
        assert "B - A over examples 0:12;" in done.stdout
        table = done.stdout.split("\n\ncell ")[1].split("\n\n")[0].splitlines()
        column = (
            table[0].split().index("first_step_beyond") + 1
        )  # (the cell column's name left out)
        firsts = [line.split()[column] for line in table[1:]]
        assert "none" in firsts and all(f == "none" or f.isdigit() for f in firsts), table
        if b == "dynamic":
            assert sum(f == "none" for f in firsts) == 3


def test_training_logs_say_why_they_keep_no_digest(tmp_path):
    """Two steps GateLoggingHook logged while the demo's model trained (as `gatetrace demo`
    logs them): compare says what they are (each the gates of the batch its global step trained
    on, a new batch at every step), not that they were fed a stream or made by an older
    gatetrace."""
    from tracer.demo import build_and_train

    build_and_train(str(tmp_path / "model" / "model.ckpt"), iterations=201, log=tmp_path / "log")
    a, b = tmp_path / "log" / "global_step=100", tmp_path / "log" / "global_step=200"
    done = run_cli("compare", str(a), str(b))
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("inputs: ")]
    assert line == (
        f"inputs: not checked: {a} (global step 100) and {b} (global step 200): gates "
        "GateLoggingHook logged while training, each on the batch its global step trained on, "
        "with no digest of it; a training run usually trains each step on another batch "
        "(gatetrace demo's does), and where it did, the differences are the inputs' as well as "
        "the weights'"
    )
    assert "stream" not in line and "older" not in line
