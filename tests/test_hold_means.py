"""`--hold CELL:WHAT:UNITS=mean --means-from RUN`: units held at their means over a recording of
the model made without holds. The means are checked against the network written in numpy from
TensorFlow's documented equations (`tests.test_hold.oracle`), and the held recording against
the same equations with each unit held at its mean (as float32, what the model's tensors hold)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from recorders import Recording
from recorders.read.means import unit_means
from tests import test_hold
from tests.conftest import read_gates, read_state, record_x
from tests.test_hold import LAYERS, STEPS, oracle

# the network of tests/test_hold.py, unrolled and in while loops of both control flows
every_model, model = test_hold.every_model, test_hold.model


def _means_of(weights, x, layer: int, what: str) -> np.ndarray:
    """Each unit's mean over every example and step, from the equations (no hold)."""
    acts, c, h = oracle(weights, x.astype(np.float64))[layer]
    values = {"c": c, "h": h, **{g: acts[:, :, k] for k, g in enumerate("ijfo")}}[what]
    return values.reshape(-1, values.shape[-1]).mean(axis=0)


@pytest.mark.parametrize(
    ("layer", "what", "units"), [(0, "h", [1]), (1, "c", [0, 1, 2]), (0, "f", [0, 2])]
)
def test_units_held_at_their_means_are_those_of_the_equations(
    every_model, inputs, tmp_path, layer, what, units
):
    path, built, _ = every_model
    base = tmp_path / "base"
    assert record_x(path, inputs, base).returncode == 0
    means = _means_of(built.weights, inputs, layer, what)
    # what gatetrace reads from the plain recording is the equations' mean
    read = unit_means(
        Recording(base),
        "gates" if what in "ijfo" else "states",
        LAYERS[layer],
        what,
        "activation" if what in "ijfo" else "value",
        units,
    )
    np.testing.assert_allclose([read[u] for u in units], means[units], atol=1e-6)

    spec = f"{LAYERS[layer].split('/', 2)[2]}:{what}:{','.join(map(str, units)) if len(units) < 3 else 'all'}=mean"
    held = tmp_path / "held"
    done = record_x(path, inputs, held, "--hold", spec, "--means-from", str(base))
    assert done.returncode == 0, done.stderr
    values = [float(np.float32(read[u])) for u in units]
    expected = oracle(
        built.weights,
        inputs.astype(np.float64),
        [(layer, what, u, v, False, (0, STEPS)) for u, v in zip(units, values, strict=True)],
    )
    plain = oracle(built.weights, inputs.astype(np.float64))
    for k, name in enumerate(LAYERS):
        acts, c, h = expected[k]
        np.testing.assert_allclose(read_gates(held, name, ("i", "j", "f", "o"))[1], acts, atol=2e-6)
        np.testing.assert_allclose(read_state(held, name, "c"), c, atol=2e-6)
        np.testing.assert_allclose(read_state(held, name, "h"), h, atol=2e-6)
    # the hold changed the upper layer (a mean is not what the unit computes at every step)
    assert np.abs(expected[1][2] - plain[1][2]).max() > 1e-4
    # the manifest lists the numbers held, one unit each, exactly
    assert json.loads((held / "manifest.json").read_text())["held"] == [
        f"{LAYERS[layer]}:{what}:{u}={v!r}" for u, v in zip(units, values, strict=True)
    ]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (
            ["--hold", "cell_0/basic_lstm_cell:h:1=mean"],
            "expected --means-from RUN, the recording of this model made without --hold that each unit's "
            "mean is taken from, found none; record the model without --hold",
        ),
        (
            ["--hold", "cell_0/basic_lstm_cell:h:1=0", "--means-from", "BASE"],
            "expected a --hold that asks for a mean (CELL:WHAT:UNITS=mean), found "
            "'cell_0/basic_lstm_cell:h:1=0.0'; end a hold in =mean, or leave --means-from out",
        ),
        (
            ["--means-from", "BASE"],
            "expected a --hold that asks for a mean (CELL:WHAT:UNITS=mean), found no --hold; ",
        ),
        (
            ["--hold", "cell_0/basic_lstm_cell:f.pre:1=mean", "--means-from", "ACT"],
            "expected --means-from ACT to hold rnn/multi_rnn_cell/cell_0/basic_lstm_cell's f preactivations, "
            "found it recorded with --values activation; record the model again without --hold and with "
            "--values preactivation",
        ),
        (
            ["--hold", "cell_0/basic_lstm_cell:h:1=mean", "--means-from", "SERIES"],
            "expected one recording of the model, found a series of recordings (record --checkpoints: one a "
            "checkpoint); give the one of the checkpoint this records, e.g. --means-from SERIES/checkpoint=10",
        ),
        (
            ["--hold", "cell_0/basic_lstm_cell:h:1=mean", "--means-from", "HELD"],
            "made with values held",
        ),
        (
            ["--hold", "cell_0/basic_lstm_cell:i:1=mean", "--means-from", "BASE"],
            "not i; give a recording",
        ),
        (
            ["--hold", "gru_cell:h:1=mean", "--means-from", "BASE"],
            "expected a cell named 'gru_cell'",
        ),
        (
            ["--hold", "cell_0/basic_lstm_cell:h:1=mean", "--means-from", "NOWHERE"],
            "--means-from: ",
        ),
    ],
)
def test_a_mean_that_cannot_be_taken_is_one_line(model, inputs, tmp_path, flags, said):
    path, _ = model
    base, held = tmp_path / "base", tmp_path / "held"
    assert record_x(path, inputs, base, "--gates", "f").returncode == 0
    assert record_x(path, inputs, held, "--hold", "cell_0/basic_lstm_cell:h:1=0").returncode == 0
    places = {"BASE": str(base), "HELD": str(held), "NOWHERE": str(tmp_path / "nowhere")}
    if "ACT" in flags:  # recorded without preactivations
        places["ACT"] = str(tmp_path / "act")
        assert record_x(path, inputs, tmp_path / "act", "--values", "activation").returncode == 0
    if "SERIES" in flags:  # the layout record --checkpoints writes: series.json, KEY=VALUE/
        import shutil

        places["SERIES"] = str(tmp_path / "series")
        shutil.copytree(base, tmp_path / "series" / "checkpoint=10")
        (tmp_path / "series" / "series.json").write_text(
            json.dumps({"kind": "series", "key": "checkpoint", "values": [10], "source": str(path)})
        )
    done = record_x(path, inputs, tmp_path / "run", *[places.get(f, f) for f in flags])
    assert done.returncode == 2, done.stderr
    for name, place in places.items():
        said = said.replace(name, place)
    assert said in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "run").exists()


def test_means_from_an_unfinished_recording_are_refused(model, inputs, tmp_path):
    path, _ = model
    half = tmp_path / "half"
    assert record_x(path, inputs, half, "--shard", "0/2").returncode == 0  # one shard of two
    done = record_x(
        path,
        inputs,
        tmp_path / "run",
        *("--hold", "cell_0/basic_lstm_cell:h:1=mean", "--means-from", str(half)),
    )
    assert done.returncode == 2, done.stderr
    assert (
        "that recording is not finished (shards not finished: 1/2)" in done.stderr
        and "record --shard 1/2 into the same folder" in done.stderr
    ), done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "run").exists()


@pytest.mark.parametrize("done_shard", [0, 1])
def test_inspect_names_the_shards_a_recording_has_not_finished(model, inputs, tmp_path, done_shard):
    """One finished shard of two: inspect says 1 of 2 and which one is missing (the progress
    files on disk say which shards ran, of how many)."""
    from tests.conftest import run_cli

    path, _ = model
    half = tmp_path / "half"
    assert record_x(path, inputs, half, "--shard", f"{done_shard}/2").returncode == 0
    ran = [json.loads(p.read_text())["shard"] for p in (half / "_progress").glob("*.json")]
    assert ran == [[done_shard, 2]]
    missing = f"{1 - done_shard}/2"
    shown = run_cli("inspect", str(half)).stdout
    assert f"shards finished: 1 of 2 (not finished: {missing});" in shown, shown
    assert Recording(half).summary()["shards"] == {"finished": 1, "of": 2, "unfinished": [missing]}


def test_overwrite_never_replaces_the_recording_the_means_come_from(model, inputs, tmp_path):
    path, _ = model
    base = tmp_path / "base"
    assert record_x(path, inputs, base).returncode == 0
    manifest = (base / "manifest.json").read_text()
    done = record_x(
        path,
        inputs,
        base,
        *("--overwrite", "--hold", "cell_0/basic_lstm_cell:h:1=mean", "--means-from", str(base)),
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert (base / "manifest.json").read_text() == manifest  # the base is as it was


def test_the_means_are_read_within_memory_and_not_for_a_series(model, inputs, tmp_path):
    from argparse import Namespace

    from recorders.errors import SelectionError
    from tracer.commands.record_runs import holds

    path, _ = model
    base = tmp_path / "base"
    assert record_x(path, inputs, base).returncode == 0
    ask = {"hold": ["cell_0/basic_lstm_cell:h:all=mean"], "means_from": str(base)}
    assert len(holds(Namespace(**ask, memory=None, checkpoints=None))) == 3
    with pytest.raises(SelectionError, match="memory|budget"):  # --memory bounds this read too
        holds(Namespace(**ask, memory="1K", checkpoints=None))
    with pytest.raises(SelectionError, match="--means-from with --checkpoints"):
        holds(Namespace(**ask, memory=None, checkpoints="all"))


def test_means_from_a_recording_of_another_model_are_refused(model, inputs, tmp_path):
    """Another model of the same cells' names and sizes (other weights) gives means that are
    not this model's: one line; a copy of the same checkpoint elsewhere gives the same weights."""
    import shutil

    from tests.conftest import build, save

    path, _ = model
    (tmp_path / "other").mkdir()
    other = save(
        build(test_hold._two_layers, steps=STEPS, features=test_hold.FEATURES, seed=4),
        "checkpoint",
        tmp_path / "other",
    )
    spec = ("--hold", "cell_0/basic_lstm_cell:h:1=mean", "--means-from")
    assert record_x(other, inputs, tmp_path / "base").returncode == 0
    done = record_x(path, inputs, tmp_path / "run", *spec, str(tmp_path / "base"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "weights of rnn/multi_rnn_cell/cell_0/basic_lstm_cell are not those" in done.stderr
    assert not (tmp_path / "run").exists()
    # the same weights from another file: accepted, and the manifest says where the means came from
    root = Path(path).parent.parent
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    same = copy / Path(path).relative_to(root)
    assert record_x(same, inputs, tmp_path / "same").returncode == 0
    done = record_x(path, inputs, tmp_path / "run", *spec, str(tmp_path / "same"))
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["means_from"] == {"path": str(tmp_path / "same")}


@pytest.mark.parametrize("progress", [True, False], ids=["progress-files", "no-progress-files"])
def test_a_manifest_edited_to_drop_its_holds_is_not_believed(model, inputs, tmp_path, progress):
    """The manifest of a held recording edited to say nothing was held: its progress files (or,
    where they are gone, weights.parquet's footer) say what was, and the means are refused."""
    import shutil

    path, _ = model
    held = tmp_path / "held"
    assert record_x(path, inputs, held, "--hold", "cell_0/basic_lstm_cell:h:1=0").returncode == 0
    manifest = json.loads((held / "manifest.json").read_text())
    del manifest["held"]
    (held / "manifest.json").write_text(json.dumps(manifest))
    if not progress:
        shutil.rmtree(held / "_progress")
    done = record_x(
        path,
        inputs,
        tmp_path / "run",
        *("--hold", "cell_0/basic_lstm_cell:h:1=mean", "--means-from", str(held)),
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    where = "_progress/shard-0-of-1.json" if progress else "weights.parquet's footer"
    assert f"manifest.json says held is absent, but {where}" in done.stderr, done.stderr
    assert not (tmp_path / "run").exists()


def test_means_of_a_rounded_recording_are_taken_and_said_once(model, inputs, tmp_path, capfd):
    """A base recorded with --round-bits: its means are of rounded values, within the bound its
    manifest states of the exact ones; accepted, said once on stderr, kept in the held
    recording's manifest and shown by inspect. Oracle: pandas over the base's Parquet files,
    and the means of the equations in numpy."""
    import pandas as pd

    from tests.conftest import run_cli

    path, built = model
    base = tmp_path / "base"
    assert record_x(path, inputs, base, "--round-bits", "7").returncode == 0
    bound = json.loads((base / "manifest.json").read_text())["rounding"]["relative_error"]
    held = tmp_path / "held"
    capfd.readouterr()
    done = record_x(
        path, inputs, held, "--hold", "cell_0/basic_lstm_cell:h:0-2=mean", "--means-from", str(base)
    )
    assert done.returncode == 0, done.stderr
    said = "whose values were rounded to 7 mantissa bits (--round-bits 7): each value within 2^-8"
    # (gatetrace's notes go to the process' stderr itself, past TensorFlow's native logs)
    stderr = done.stderr + capfd.readouterr().err
    assert stderr.count(said) == 1, stderr
    manifest = json.loads((held / "manifest.json").read_text())
    assert manifest["means_from"]["path"] == str(base)
    assert manifest["means_from"]["rounding"]["mantissa_bits"] == 7
    assert said in run_cli("inspect", str(held)).stdout
    # the values held: pandas' means over the base's files, within the bound of the exact means
    frame = pd.read_parquet(base / "states", filters=[("state", "==", "h")])
    frame = frame[frame["cell"] == LAYERS[0]]
    means = frame.groupby("unit")["value"].apply(lambda v: v.astype(np.float64).mean())
    magnitude = frame.groupby("unit")["value"].apply(lambda v: np.abs(v.astype(np.float64)).mean())
    held_at = [float(h.rpartition("=")[2]) for h in manifest["held"]]
    np.testing.assert_array_equal(held_at, np.float32(means.to_numpy()).astype(np.float64))
    exact = _means_of(built.weights, inputs, 0, "h")
    assert (np.abs(np.asarray(held_at) - exact) <= bound * magnitude.to_numpy() + 1e-6).all()


@pytest.mark.parametrize("edited", [{"path": "x\x1b[31m"}, "base", {"path": "b", "rounding": 7}])
def test_a_manifests_means_from_is_checked(model, inputs, tmp_path, edited):
    """What inspect prints of where the means came from is text the writer could have written."""
    from tests.conftest import run_cli

    path, _ = model
    assert record_x(path, inputs, tmp_path / "base").returncode == 0
    held = tmp_path / "held"
    spec = ("--hold", "cell_0/basic_lstm_cell:h:1=mean", "--means-from", str(tmp_path / "base"))
    assert record_x(path, inputs, held, *spec).returncode == 0
    manifest = json.loads((held / "manifest.json").read_text())
    manifest["means_from"] = edited
    (held / "manifest.json").write_text(json.dumps(manifest))
    done = run_cli("inspect", str(held))
    assert done.returncode == 2 and "means_from" in done.stderr, done.stderr
    assert "\x1b" not in done.stderr and done.stderr.count("\n") == 1


def test_means_from_a_recording_without_weights_are_refused(model, inputs, tmp_path):
    """A base that keeps no weights (its weights.parquet gone) cannot be told to be this model's."""
    path, _ = model
    base = tmp_path / "base"
    assert record_x(path, inputs, base).returncode == 0
    (base / "weights.parquet").unlink()
    done = record_x(
        path,
        inputs,
        tmp_path / "run",
        *("--hold", "cell_0/basic_lstm_cell:h:1=mean", "--means-from", str(base)),
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "holds no weights of rnn/multi_rnn_cell/cell_0/basic_lstm_cell" in done.stderr
    assert not (tmp_path / "run").exists()
