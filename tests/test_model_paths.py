"""What a model may point at: nothing outside its folder is read because a file of the model names it.

A TF1 `checkpoint` state file names the checkpoint to load; published ones carry the trainer's
absolute paths (`/home/them/train/model.ckpt-2000`). gatetrace takes the same name inside the
folder, as a user who moved the folder would, and says so; it never reads the path named, even
when a checkpoint exists there. A SavedModel whose parts link out of its folder is refused.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from recorders import Recording
from tests.conftest import CONFIGS, build, save, static_body
from tracer.cli import main


def _cli_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


@pytest.fixture
def two_models(tmp_path):
    """Two checkpoints of the same GRUCell graph with different weights: `ours` in a folder, `theirs` elsewhere."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ours = save(build(static_body(CONFIGS["GRUCell"]), seed=1), "checkpoint-dir", tmp_path / "a")
    theirs = build(static_body(CONFIGS["GRUCell"]), seed=2)
    theirs_path = save(theirs, "checkpoint-dir", tmp_path / "b")
    np.save(tmp_path / "x.npy", np.random.RandomState(0).randn(3, 5, 4).astype(np.float32))
    return tmp_path, ours, theirs_path


def _weights(folder) -> np.ndarray:
    """What the recording's gates say of the weights: the r gate of its one cell."""
    rec = Recording(folder)
    return rec.gate_array(rec.cells[0], "r")


@pytest.mark.parametrize("how", ["absolute", "dotdot"])
def test_a_state_file_naming_a_checkpoint_outside_reads_the_one_inside(how, two_models, capsys):
    tmp_path, ours, theirs = two_models
    named = f"{theirs}/model.ckpt" if how == "absolute" else "../../b/ckptdir/model.ckpt"
    (tmp_path / "a" / "ckptdir" / "checkpoint").write_text(
        f'model_checkpoint_path: "{named}"\nall_model_checkpoint_paths: "{named}"\n'
    )
    x = f"x={tmp_path / 'x.npy'}"
    for folder, out in ((ours, "ours"), (theirs, "theirs")):
        assert (
            main(["record", folder, "--feed", x, "--out", str(tmp_path / out), "--quiet"]) == 0
        ), capsys.readouterr().err
    assert not np.array_equal(_weights(tmp_path / "ours"), _weights(tmp_path / "theirs"))
    assert main(["inspect", ours, "--json"]) == 0
    printed = capsys.readouterr().out
    assert json.loads(printed.splitlines()[-1])["notes"] == [
        f"its 'checkpoint' file names {named}, outside {ours}: read model.ckpt in the folder instead"
    ]
    # the inside checkpoint is what was recorded: its weights, not the other model's
    assert main(["record", ours, "--feed", x, "--out", str(tmp_path / "again"), "--quiet"]) == 0
    assert np.array_equal(_weights(tmp_path / "again"), _weights(tmp_path / "ours"))
    # with no checkpoint of that name inside, one line; the outside one is still not read
    for f in (tmp_path / "a" / "ckptdir").glob("model.ckpt*"):
        f.rename(f.with_name(f.name.replace("model.ckpt", "other.ckpt")))
    msg = _cli_error(capsys, ["record", ours, "--feed", x, "--out", str(tmp_path / "none")])
    assert (
        f"its 'checkpoint' file names {named}, outside the folder, and the folder holds no model.ckpt"
        in msg
    )
    assert not (tmp_path / "none").exists()


def test_a_checkpoint_whose_files_link_out_of_the_folder_is_refused(two_models, capsys):
    tmp_path, ours, theirs = two_models
    index = tmp_path / "a" / "ckptdir" / "model.ckpt.index"
    index.unlink()
    index.symlink_to(f"{theirs}/model.ckpt.index")
    msg = _cli_error(capsys, ["inspect", ours])
    assert (
        "model.ckpt.index links out of the folder; gatetrace reads a checkpoint's files only inside its folder"
        in msg
    )


def test_a_savedmodel_whose_variables_link_out_of_its_folder_is_refused(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ours = save(build(static_body(CONFIGS["GRUCell"]), seed=1), "savedmodel", tmp_path / "a")
    theirs = save(build(static_body(CONFIGS["GRUCell"]), seed=2), "savedmodel", tmp_path / "b")
    shutil.rmtree(f"{ours}/variables")
    (tmp_path / "a" / "savedmodel" / "variables").symlink_to(f"{theirs}/variables")
    np.save(tmp_path / "x.npy", np.ones((2, 5, 4), np.float32))
    msg = _cli_error(
        capsys,
        ["record", ours, "--feed", f"x={tmp_path / 'x.npy'}", "--out", str(tmp_path / "out")],
    )
    assert f"{ours}: variables links out of the SavedModel's folder" in msg
    assert not (tmp_path / "out").exists()
