"""The gatetrace command: every subcommand, and every bad input answered in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import CONFIGS, build, run_cli, save, static_body
from tracer._tf import tf, v1
from tracer.cli import main


@pytest.fixture
def model(tmp_path):
    """A BasicLSTMCell checkpoint over [None, 5, 4] inputs, and an inputs file."""
    path = save(build(static_body(CONFIGS["BasicLSTMCell"])), "checkpoint", tmp_path)
    x = tmp_path / "x.npy"
    np.save(x, np.random.RandomState(0).randn(3, 5, 4).astype(np.float32))
    return path, x


def fails(capsys, argv) -> str:
    """Run the CLI expecting a user error; return its one stderr line."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("gatetrace: error: ")
    assert "Traceback" not in err
    return lines[0][len("gatetrace: error: ") :]


def test_record_writes_the_recording(model, tmp_path, capfd):
    path, x = model
    out = tmp_path / "run1"
    assert main(["record", path, "--feed", f"x={x}", "--out", str(out), "--batch-size", "2"]) == 0
    stdout, stderr = capfd.readouterr()
    # stderr is not a terminal here: a line per tenth of the work, no carriage returns
    assert (
        "gatetrace: recording, batches of 2: 66% (2 of 3 sequences), 180 rows written\n" in stderr
        and "\r" not in stderr
    )
    assert (
        "gatetrace: recording, batches of 2: 100% (3 of 3 sequences), 270 rows written\n" in stderr
    )
    assert "gatetrace: recording, batches of 2: starting on 3 sequences\n" in stderr
    assert (
        main(["record", path, "--feed", f"x={x}", "--out", str(tmp_path / "quiet"), "--quiet"]) == 0
    )
    assert capfd.readouterr().err == ""
    assert "recorded 1 cell on 3 sequences: 180 gate rows, 90 state rows" in stdout
    assert sorted(p.name for p in out.iterdir()) == [
        "_progress",
        "_statistics",
        "gates",
        "manifest.json",
        "states",
        "weights.parquet",
    ]
    # a finished shard leaves no lock file
    assert [p.name for p in (out / "_progress").iterdir()] == ["shard-0-of-1.json"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"] == {"path": path, "format": "checkpoint"}
    assert manifest["feeds"] == {"x:0": [3, 5, 4]}
    assert manifest["cells"][0]["first_step"]["gate_tensors"][0] == "rnn/basic_lstm_cell/split:0"
    assert manifest["cells"][0]["last_step"]["gate_op"] == "rnn/basic_lstm_cell/split_4"
    assert len(pd.read_parquet(out / "gates")) == 3 * 5 * 4 * 3


def test_inspect_table_and_json(model, capsys):
    path, _ = model
    assert main(["inspect", path]) == 0
    table = capsys.readouterr().out
    assert "rnn/basic_lstm_cell  BasicLSTMCell  3      4      5      i,j,f,o  forward" in table
    assert "rnn/basic_lstm_cell/split ... rnn/basic_lstm_cell/split_4" in table
    # what to feed, and how
    assert "feed x (float32 [None, 5, 4], tensor x:0): --feed x=FILE.npy" in table
    assert main(["inspect", path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"] == [
        {"name": "x", "tensor": "x:0", "dtype": "float32", "shape": [None, 5, 4]}
    ]
    (cell,) = doc["cells"]
    assert {k: cell[k] for k in ("name", "kind", "units", "input_size", "steps", "gates")} == {
        "name": "rnn/basic_lstm_cell",
        "kind": "BasicLSTMCell",
        "units": 3,
        "input_size": 4,
        "steps": 5,
        "gates": ["i", "j", "f", "o"],
    }


def test_weights_command(model, tmp_path, capsys):
    path, _ = model
    out = tmp_path / "w.parquet"
    assert main(["weights", path, "--out", str(out)]) == 0
    table = pd.read_parquet(out)
    assert len(table) == 4 * (4 * 3 + 3 * 3 + 3)
    assert set(table["source"].astype(str)) == {"input", "recurrent", "bias"}
    assert "exists" in fails(capsys, ["weights", path, "--out", str(out)])
    assert main(["weights", path, "--out", str(out), "--overwrite"]) == 0


def test_scalar_feeds_and_names_with_index(tmp_path, capsys):
    def body(x):
        keep = v1.placeholder_with_default(1.0, [], name="keep_prob")
        cell = v1.nn.rnn_cell.DropoutWrapper(v1.nn.rnn_cell.GRUCell(3), output_keep_prob=keep)
        outputs, _ = v1.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32)
        return [outputs[-1]]

    path = save(build(body), "checkpoint", tmp_path)
    x = tmp_path / "x.npy"
    np.save(x, np.ones((2, 5, 4), np.float32))
    assert (
        main(
            [
                "record",
                path,
                "--feed",
                f"x:0={x}",
                "--feed",
                "keep_prob=1.0",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "o" / "manifest.json").read_text())["feeds"] == {
        "x:0": [2, 5, 4],
        "keep_prob:0": [],
    }


# ---- bad input: one line, exit code 2, nothing half-written --------------------------


def test_missing_model(tmp_path, capsys):
    msg = fails(capsys, ["inspect", str(tmp_path / "nope.ckpt")])
    assert msg.startswith(f"model not found: {tmp_path / 'nope.ckpt'} does not exist")
    assert "a checkpoint prefix P with P.meta beside it" in msg and "a frozen GraphDef .pb" in msg


def test_model_in_no_known_format(tmp_path, capsys):
    (tmp_path / "model.txt").write_text("hello")
    msg = fails(capsys, ["inspect", str(tmp_path / "model.txt")])
    assert msg.startswith(
        f"{tmp_path / 'model.txt'} is in no format gatetrace reads; expected a checkpoint prefix"
    )


def test_corrupt_frozen_graph(tmp_path, capsys):
    (tmp_path / "model.pb").write_bytes(b"\x00\x01not a graph")
    assert "cannot read it as a frozen GraphDef" in fails(
        capsys, ["inspect", str(tmp_path / "model.pb")]
    )


def test_savedmodel_without_the_tag(tmp_path, capsys):
    path = save(build(static_body(CONFIGS["GRUCell"])), "savedmodel", tmp_path)
    msg = fails(capsys, ["inspect", path, "--tag", "train"])
    assert msg == (
        f"{path}: SavedModel has no meta graph tagged exactly 'train'; its tag sets are 'serve': "
        "choose one with --tag (several tags comma-separated)"
    )


def test_graph_without_rnn_cell(tmp_path, capsys):
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 4], name="features")
        v1.layers.dense(x, 3, name="classifier")
        with v1.Session() as s:
            s.run(v1.global_variables_initializer())
            v1.train.Saver().save(s, str(tmp_path / "dense.ckpt"))
    msg = fails(capsys, ["inspect", str(tmp_path / "dense.ckpt")])
    assert msg.startswith(
        f"no RNN cell found in {tmp_path / 'dense.ckpt'}: looked for Split ops fed by a kernel MatMul"
    )
    assert "nearest ops: classifier/" in msg


@pytest.mark.parametrize(
    "feed, expected",
    [
        (
            "nope={x}",
            "unknown feed 'nope': {path} has no op named nope; its placeholders are x: feed those the "
            "cells need by name (gatetrace inspect {path} lists them), e.g. --feed x=FILE.npy",
        ),
        # any feedable tensor
        (
            "unstack={x}",
            "feed unstack: tensor (Unpack output) unstack:0 expects shape [None, 4], given [3, 5, 4]",
        ),
        ("x={bad_shape}", "feed x: placeholder x:0 expects shape [None, 5, 4], given [3, 5, 3]"),
        (
            "x={bad_dtype}",
            "feed x: placeholder x:0 expects float32, given complex64; convert the array to float32",
        ),
        ("x={bad_rank}", "feed x: placeholder x:0 expects shape [None, 5, 4], given [3, 20]"),
        ("x=missing.npy", "feed x: no such file missing.npy"),
        (
            "x",
            "feed 'x': expected NAME=FILE.npy or NAME=VALUE, e.g. --feed inputs=x.npy --feed keep_prob=1.0",
        ),
        (
            "x=abc",
            "feed x=abc: 'abc' is neither a .npy/.npz/.parquet file nor a number or true/false",
        ),
    ],
)
def test_bad_feeds(model, tmp_path, capsys, feed, expected):
    path, x = model
    np.save(tmp_path / "bad_shape.npy", np.zeros((3, 5, 3), np.float32))
    np.save(tmp_path / "bad_dtype.npy", np.zeros((3, 5, 4), np.complex64))
    np.save(tmp_path / "bad_rank.npy", np.zeros((3, 20), np.float32))
    feed = feed.format(
        x=x,
        bad_shape=tmp_path / "bad_shape.npy",
        bad_dtype=tmp_path / "bad_dtype.npy",
        bad_rank=tmp_path / "bad_rank.npy",
    )
    out = tmp_path / "out"
    said = fails(capsys, ["record", path, "--feed", feed, "--out", str(out)])
    assert said == expected.format(path=path)
    assert not out.exists()


def test_unfed_placeholder(model, tmp_path, capsys):
    path, _ = model
    msg = fails(capsys, ["record", path, "--out", str(tmp_path / "out")])
    assert msg == "placeholder x (float32, shape [None, 5, 4]) must be fed: add --feed x=FILE.npy"


def test_out_not_empty(model, tmp_path, capsys):
    path, x = model
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    msg = fails(capsys, ["record", path, "--feed", f"x={x}", "--out", str(out)])
    assert msg == f"--out {out} holds what gatetrace did not write (mine.txt); choose another path"
    assert (out / "mine.txt").read_text() == "keep me"
    msg = fails(capsys, ["record", path, "--feed", f"x={x}", "--out", str(out), "--overwrite"])
    assert msg.startswith(
        f"--out {out} holds what gatetrace did not write (mine.txt); --overwrite replaces only gatetrace's own output"
    )
    assert (out / "mine.txt").read_text() == "keep me"
    (out / "mine.txt").unlink()
    assert main(["record", path, "--feed", f"x={x}", "--out", str(out), "--quiet"]) == 0
    assert (
        main(["record", path, "--feed", f"x={x}", "--out", str(out), "--overwrite", "--quiet"]) == 0
    )
    assert (out / "manifest.json").exists() and sorted(
        p.name for p in tmp_path.iterdir() if p.name.startswith(".")
    ) == []


def test_a_disk_failure_keeps_finished_batches_and_resume_completes_them(
    model, tmp_path, capsys, monkeypatch
):
    import recorders.write.rowgroups

    path, x = model
    out, clean = tmp_path / "out", tmp_path / "clean"
    argv = ["record", path, "--feed", f"x={x}", "--batch-size", "1", "--quiet"]
    assert main([*argv, "--out", str(clean)]) == 0
    write_table, calls = recorders.write.rowgroups.write_parquet, []

    def disk_full_in_the_second_batch(path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 8:  # 4 gates + 2 states per batch: the second batch's third file
            raise OSError(28, "No space left on device")
        return write_table(path, *args, **kwargs)

    monkeypatch.setattr(recorders.write.rowgroups, "write_parquet", disk_full_in_the_second_batch)
    msg = fails(capsys, [*argv, "--out", str(out)])
    assert msg.startswith(f"cannot write {out}/") and msg.endswith(
        "No space left on device; the 1 sequences recorded before are kept: fix the cause and rerun with --resume"
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "_progress",
        "_statistics",
        "gates",
        "states",
        "weights.parquet",
    ]
    assert json.loads((out / "_progress" / "shard-0-of-1.json").read_text())["complete"] == [[0, 1]]
    monkeypatch.setattr(recorders.write.rowgroups, "write_parquet", write_table)
    assert "already holds a partial recording; pass --resume" in fails(
        capsys, [*argv, "--out", str(out)]
    )
    assert main([*argv, "--out", str(out), "--resume"]) == 0
    assert (
        "recorded 1 cell on 3 sequences (2 in this run): 180 gate rows, 90 state rows"
        in capsys.readouterr().out
    )
    for table in ("gates", "states"):
        pd.testing.assert_frame_equal(pd.read_parquet(out / table), pd.read_parquet(clean / table))
    manifest, clean_manifest = (json.loads((d / "manifest.json").read_text()) for d in (out, clean))
    assert manifest["rows"] == clean_manifest["rows"] and manifest["examples"] == 3


# ---- end to end, through the installed command -------------------------------------


def run(*args, cwd=None):
    env = {
        k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "GATETRACE_DEBUG")
    }
    return subprocess.run(
        [sys.executable, "-m", "tracer.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


@pytest.mark.e2e
def test_command_output_is_free_of_tensorflow_noise(model, tmp_path):
    path, x = model
    result = run("inspect", path, "--json")
    assert result.returncode == 0 and result.stderr == ""
    assert json.loads(result.stdout)["cells"][0]["name"] == "rnn/basic_lstm_cell"
    result = run("record", path, "--feed", f"nope={x}", "--out", str(tmp_path / "o"))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"gatetrace: error: unknown feed 'nope': {path} has no op named nope; its placeholders are x: feed "
        f"those the cells need by name (gatetrace inspect {path} lists them), e.g. --feed x=FILE.npy"
    ]


@pytest.mark.e2e
def test_help_texts_carry_examples():
    for command in ("inspect", "record", "weights", "demo", "view", "units"):
        result = run(command, "--help")
        assert result.returncode == 0 and "example: gatetrace " + command in result.stdout
    # record's flags come in groups a reader can find their way in
    shown = run("record", "--help").stdout
    titles = [
        line
        for line in shown.splitlines()
        if line and not line.startswith(" ") and line.endswith(":")
    ]
    assert titles == [
        "options:",
        "loading the model:",
        "the sequences to record:",
        "what to record:",
        "where and how it is written:",
        "in other processes or on a Dask cluster:",
        "a training run's checkpoints, one recording each:",
        "a summary recording: statistics instead of every value:",
    ]


@pytest.mark.e2e
def test_demo(tmp_path):
    result = run("demo", "--out", str(tmp_path / "demo"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "mean forget-gate activation per step:" in result.stdout
    accuracy = float(result.stdout.split("held-out accuracy ")[1].split("%")[0])
    assert accuracy > 75.0  # chance is 50%
    # The demo's seeds are fixed: its summary is the one the README shows, line for line.
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    shown = readme.split("training a BasicLSTMCell(16)", 1)[1].split("```", 1)[0]
    for line in shown.splitlines()[1:]:
        if line.strip() and line != "...":
            assert line in result.stdout.splitlines(), (
                f"the README shows {line!r}; the demo printed:\n{result.stdout}"
            )
    # the summary recording's saturation lines are the full recording's, number for number
    lines = result.stdout.splitlines()
    full = lines.index("units whose forget gate is most often above 0.9:")
    same = next(k for k, line in enumerate(lines) if line.startswith("the same, from the summary"))
    assert lines[full + 1 : full + 4] == lines[same + 1 : same + 4]
    recording = tmp_path / "demo" / "recording"
    f = pd.read_parquet(recording / "gates", filters=[("gate", "==", "f")])
    assert len(f) == 512 * 20 * 16
    assert f["activation"].between(0, 1).all()
    # The recording is reproducible from the saved model and inputs by the record command.
    again = run_cli(
        "record",
        str(tmp_path / "demo" / "model"),
        "--feed",
        f"inputs={tmp_path / 'demo' / 'inputs.npy'}",
        "--out",
        str(tmp_path / "again"),
    )
    assert again.returncode == 0, again.stderr
    g = pd.read_parquet(tmp_path / "again" / "gates", filters=[("gate", "==", "f")])
    sort = ["example", "step", "unit"]
    np.testing.assert_array_equal(
        f.sort_values(sort)["activation"].to_numpy(), g.sort_values(sort)["activation"].to_numpy()
    )


@pytest.mark.e2e
def test_every_help_example_runs_as_shown(tmp_path, monkeypatch):
    """Each command's help example, run as its help shows it in a fresh folder: the demo's first
    (twice: a demo replaces its own earlier output), then the ones that read what it wrote
    (`gatetrace view` serves until stopped: tests/test_view.py runs it)."""
    import shlex

    from tracer.cli import COMMANDS

    monkeypatch.chdir(tmp_path)
    demo = shlex.split(COMMANDS["demo"].EXAMPLE)[1:]
    for _ in range(2):
        done = run(*demo)
        assert done.returncode == 0, done.stderr
    for name, command in COMMANDS.items():
        if name in ("demo", "view"):
            continue
        done = run_cli(*shlex.split(command.EXAMPLE)[1:])
        assert done.returncode == 0, f"{command.EXAMPLE}: {done.stderr}"
    top = shlex.split(main_example())
    assert run_cli(*top[1:]).returncode == 0


def main_example() -> str:
    """The example `gatetrace --help` ends with."""
    return run("--help").stdout.split("example, after `gatetrace demo`: ")[1].strip()


@pytest.mark.e2e
def test_a_second_demo_replaces_the_first_but_nothing_of_the_user_s(tmp_path, monkeypatch, capsys):
    """A demo's output is replaced by the next demo however --out is spelled (which removes
    what a killed demo left beside it); a file of the user's inside it, or its model folder
    replaced by a link, is refused in one line and kept."""
    from tracer.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--out", str(tmp_path / "demo")]) == 0
    ended = subprocess.Popen(["true"])
    ended.wait()
    killed = tmp_path / f".demo.partial-{ended.pid}-1a2b3c4d"  # what a killed demo left
    (killed / "model").mkdir(parents=True)
    assert main(["demo", "--out", "./demo"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]
    (tmp_path / "demo" / "recording" / "notes.txt").write_text("mine")
    (tmp_path / "mine").mkdir()
    shutil.rmtree(tmp_path / "demo" / "model")
    (tmp_path / "demo" / "model").symlink_to(tmp_path / "mine")
    capsys.readouterr()
    assert main(["demo", "--out", "demo", "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "gatetrace: error: --out demo holds what the demo did not write (model (a symbolic link), "
        "recording/notes.txt); the demo replaces only its own earlier output: choose another path, "
        "or move those away first\n"
    )
    assert (tmp_path / "demo" / "recording" / "notes.txt").read_text() == "mine"
    assert (tmp_path / "demo" / "model").is_symlink() and (tmp_path / "mine").is_dir()


def earlier_demo(out: Path) -> None:
    """A folder as an earlier demo leaves it (a few of its files, and its mark)."""
    from tracer.demo import _mark

    (out / "model").mkdir(parents=True)
    (out / "model" / "model.ckpt.index").write_bytes(b"index")
    (out / "recording" / "gates").mkdir(parents=True)
    (out / "recording" / "manifest.json").write_text("{}")
    (out / "inputs.npy").write_bytes(b"inputs")
    _mark(out)


PLANTED = {
    "a file of the user's in its recording": (
        lambda out: (out / "recording" / "notes.txt").write_text("mine"),
        "holds what the demo did not write (recording/notes.txt)",
    ),
    "a folder of the user's": (
        lambda out: (out / "recording" / "mine").mkdir(),
        "holds what the demo did not write (recording/mine)",
    ),
    "its model folder replaced by a link": (
        lambda out: (shutil.rmtree(out / "model"), (out / "model").symlink_to(out.parent)),
        "holds what the demo did not write (model (a symbolic link))",
    ),
    "no mark": (
        lambda out: (out / ".gatetrace-demo.json").unlink(),
        "exists and is not empty, and holds no earlier demo's output",
    ),
    "its mark of another tree": (
        lambda out: (out / ".gatetrace-demo.json").write_text('{"gatetrace": "demo"}'),
        "exists and is not empty, and holds no earlier demo's output",
    ),
}


@pytest.mark.parametrize("overwrite", [False, True], ids=["", "overwrite"])
@pytest.mark.parametrize("planted", sorted(PLANTED))
def test_a_demo_replaces_only_what_it_wrote(planted, overwrite, tmp_path, capsys):
    """An earlier demo's folder holding anything its mark does not list (a file or folder
    of the user's, a link) is refused in one line, also with --overwrite, before the demo
    trains, and is left as it was; so is a folder without the demo's mark."""
    from tracer.cli import main

    out = tmp_path / "demo"
    earlier_demo(out)
    plant, said = PLANTED[planted]
    plant(out)
    before = sorted((str(p), p.is_symlink()) for p in out.rglob("*"))
    assert main(["demo", "--out", str(out), *(["--overwrite"] if overwrite else [])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"gatetrace: error: --out {out} {said}"), err
    assert sorted((str(p), p.is_symlink()) for p in out.rglob("*")) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]  # no temporary left


def test_an_earlier_demo_is_known_by_its_mark_wherever_it_is(tmp_path, monkeypatch):
    """An earlier demo's output is recognised by its mark, however its path is spelled (or
    wherever it was moved); one whose files were changed since is replaced only with
    --overwrite; a link at --out is never written through."""
    from recorders.errors import OutputExistsError
    from tracer.demo import check_demo_out

    earlier_demo(tmp_path / "first")
    (tmp_path / "first").rename(tmp_path / "demo")
    monkeypatch.chdir(tmp_path)
    for spelled in ("demo", "./demo", str(tmp_path / "demo"), "../" + tmp_path.name + "/demo"):
        check_demo_out(Path(spelled), overwrite=False)
    (tmp_path / "demo" / "inputs.npy").write_bytes(b"changed")
    with pytest.raises(
        OutputExistsError, match=r"changed since \(inputs.npy\); pass overwrite=True"
    ):
        check_demo_out(Path("demo"), overwrite=False)
    check_demo_out(Path("demo"), overwrite=True)
    (tmp_path / "alias").symlink_to(tmp_path / "demo")
    with pytest.raises(OutputExistsError, match="alias.? is a symbolic link to"):
        check_demo_out(Path("alias"), overwrite=True)


def test_the_version_and_python_m_tracer():
    from recorders import __version__

    for command in (["gatetrace"], [sys.executable, "-m", "tracer"]):
        done = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.strip() == f"gatetrace {__version__}", done


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["record", "m", "--gate", "i", "--out", "o"],
            "unrecognized arguments: --gate i (did you mean --gates?); see gatetrace record --help",
        ),
        (  # a misspelt --out: said so, not "--out is required"
            ["record", "m", "--feed", "x=a.npy", "--otu", "x1"],
            "unrecognized arguments: --otu (did you mean --out?); see gatetrace record --help",
        ),
        (
            ["nosuch"],
            "argument COMMAND: invalid choice: 'nosuch'",
        ),
        (
            ["record", "m", "--feeds", "x=a.npy", "--out", "o"],
            "unrecognized arguments: --feeds x=a.npy (did you mean --feed?)",
        ),
        (
            ["record", "m", "--feed", "x", "a/x.npy", "--out", "o"],
            "unrecognized arguments: a/x.npy (--feed takes NAME=FILE as one word: --feed x=a/x.npy)",
        ),
    ],
)
def test_flags_are_taken_only_in_full_and_the_nearest_is_suggested(argv, expected, capsys):
    assert fails(capsys, argv).startswith(expected)


def test_weights_out_naming_a_folder_is_refused(model, tmp_path, capsys):
    path, _ = model
    msg = fails(capsys, ["weights", path, "--out", f"{tmp_path / 'wdir'}/"])
    assert (
        msg
        == f"--out {tmp_path / 'wdir'}/ names a folder; give a file path, e.g. {tmp_path / 'wdir'}/weights.parquet"
    )
    assert not (tmp_path / "wdir").exists()


def test_progress_is_a_bar_on_a_terminal_and_lines_elsewhere():
    import io

    from tracer.run.bar import LineProgress, progress_bar

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert not isinstance(progress_bar(100, True, "x", Terminal()), LineProgress)
    log = io.StringIO()
    with progress_bar(100, True, "recording", log) as bar:
        for _ in range(20):
            bar.set_postfix_str("5 rows")
            bar.update(5)
    lines = log.getvalue().splitlines()
    assert len(lines) == 11 and lines[0] == "gatetrace: recording: starting on 100 sequences"
    assert lines[1] == "gatetrace: recording: 10% (10 of 100 sequences), 5 rows"
    assert lines[-1] == "gatetrace: recording: 100% (100 of 100 sequences), 5 rows"
    unknown = io.StringIO()
    with progress_bar(None, True, "recording", unknown) as bar:
        for _ in range(25):
            bar.update(3)
    assert unknown.getvalue().splitlines() == [
        "gatetrace: recording: starting",
        "gatetrace: recording: 30 sequences",
        "gatetrace: recording: 60 sequences",
    ]
    quiet = io.StringIO()
    progress_bar(100, False, "recording", quiet).update(100)
    assert quiet.getvalue() == ""


def test_inspect_on_a_recording_folder_says_what_it_holds(model, tmp_path, capsys):
    path, x = model
    out = tmp_path / "run1"
    assert main(["record", path, "--feed", f"x={x}", "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    shown = capsys.readouterr().out
    assert f"{out}: a gatetrace recording (complete) of {path} (checkpoint)" in shown
    assert "examples: 3 (0:3)" in shown
    # where the values came from, in the words compare and the view use
    assert "steps  values from\n" in shown
    assert "rnn/basic_lstm_cell  BasicLSTMCell  3      i,j,f,o  c,h     5      fetched\n" in shown
    assert "rows: 180 gate rows, 90 state rows, 96 weight rows; shards finished: 1 of 1;" in shown
    assert main(["inspect", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["complete"] and doc["rows"] == {"gates": 180, "states": 90, "weights": 96}
    assert doc["bytes"] == sum(f.stat().st_size for f in out.rglob("*") if f.is_file())


def test_what_needs_no_model_run_is_answered_before_tensorflow_loads(model, tmp_path):
    """A recording's inspect, a missing model, a missing or damaged feed or lengths file: answered
    in a process that never imports TensorFlow (bench/answers.py measures them under 1 s)."""
    path, x = model
    run_dir = tmp_path / "run"
    assert main(["record", path, "--feed", f"x={x}", "--out", str(run_dir), "--quiet"]) == 0
    (tmp_path / "bad.npy").write_bytes(b"not an array")
    cases = {
        ("inspect", str(run_dir)): (0, "a gatetrace recording (complete)"),
        (
            "record",
            str(tmp_path / "nothing.ckpt"),
            "--feed",
            f"x={x}",
            "--out",
            str(tmp_path / "o"),
        ): (
            2,
            "gatetrace: error: model not found: ",
        ),
        ("record", path, "--feed", f"x={tmp_path / 'none.npy'}", "--out", str(tmp_path / "o")): (
            2,
            "gatetrace: error: feed x: no such file ",
        ),
        ("record", path, "--feed", f"x={tmp_path / 'bad.npy'}", "--out", str(tmp_path / "o")): (
            2,
            "bad.npy: its .npy header cannot be read",
        ),
        (
            "record",
            path,
            "--feed",
            f"x={x}",
            "--lengths",
            str(tmp_path / "no.npy"),
            "--out",
            str(tmp_path / "o"),
        ): (
            2,
            "gatetrace: error: --lengths: no such file ",
        ),
        ("weights", str(tmp_path / "nothing"), "--out", str(tmp_path / "w.parquet")): (
            2,
            "gatetrace: error: model not found: ",
        ),
    }
    for argv, (code, says) in cases.items():
        script = (
            "import sys; from tracer.cli import main; code = main(sys.argv[1:]); "
            "print('TENSORFLOW' if 'tensorflow' in sys.modules else 'NONE'); sys.exit(code)"
        )
        done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True)
        assert done.returncode == code, (argv, done.stderr)
        assert says in done.stdout + done.stderr, (argv, done.stderr)
        assert done.stdout.rstrip().endswith("NONE"), (argv, "TensorFlow was imported")
    assert not (tmp_path / "o").exists()


def test_a_help_example_is_never_broken_inside_a_word(monkeypatch, capsys):
    """On a narrow terminal, each command's example wraps at spaces only, so each of its words
    can be copied whole (before: `gatetrace-` / `demo/labels.npy`)."""
    from tracer.cli import COMMANDS, main

    monkeypatch.setenv("COLUMNS", "50")
    for command in COMMANDS.values():
        assert main([command.NAME, "--help"]) == 0
        shown = capsys.readouterr().out.split()
        for word in command.EXAMPLE.split():
            assert word in shown, (command.NAME, word)


@pytest.mark.parametrize("level", ["0", "1", "3"])
def test_tensorflow_s_start_up_lines_show_once_in_python_at_the_level_asked(level):
    """`import tracer._tf` (what the library does before it builds or loads a model) shows what
    TensorFlow's C++ libraries write as they load once, not once per library (before: every
    line twice), and only at the severities TF_CPP_MIN_LOG_LEVEL asks (they log before they
    read it: before, its INFO lines showed at every level, after pytest's summary and in the
    notebooks' outputs); each line, its time and thread aside, appears once."""
    import os
    import re
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "import tracer._tf"],
        capture_output=True,
        timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": level},
    )
    assert done.returncode == 0, done.stderr
    lines = [re.sub(rb"^[IWEF]\d{4} [\d:.]+\s+\d+ ", b"", x) for x in done.stderr.splitlines()]
    if level == "0":  # TensorFlow's own INFO lines (its CPU features, no CUDA driver)
        assert lines and len(lines) == len(set(lines)), done.stderr.decode()
    else:
        assert lines == [], done.stderr.decode()
