"""--out is gatetrace's alone: links, --overwrite, a second process, tampered progress files.

Every test plants something a hostile or careless setup could leave in --out, runs the
CLI, and proves that nothing outside --out was written or deleted, that nothing of the
user's was lost, and that the answer is one line with exit code 2.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CONFIGS, build, save, static_body
from tracer import FetchPlan
from tracer.cli import main


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("model")
    path = save(build(static_body(CONFIGS["GRUCell"])), "checkpoint", root)
    x = root / "x.npy"
    np.save(x, np.random.RandomState(0).randn(6, 5, 4).astype(np.float32))
    return path, str(x)


def record(model, out, *extra) -> list[str]:
    path, x = model
    return [
        "record",
        path,
        "--feed",
        f"x={x}",
        "--out",
        str(out),
        "--quiet",
        "--batch-size",
        "2",
        *extra,
    ]


def error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gatetrace: error: "), err
    return err.strip()[len("gatetrace: error: ") :]


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_progress_link_planted_in_an_empty_out_is_refused(model, tmp_path, capsys):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "_progress").symlink_to(elsewhere)
    msg = error(capsys, record(model, out))
    assert msg.startswith(
        f"--out {out} holds a symbolic link, {out / '_progress'} -> {elsewhere}; gatetrace writes only real files"
    )
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("table", ["gates", "states"])
def test_tables_replaced_by_links_are_not_followed_on_resume(model, tmp_path, capsys, table):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    assert main(record(model, out)) == 0
    (out / table).rename(elsewhere)
    (out / table).symlink_to(elsewhere)
    (out / "_progress" / "shard-0-of-1.json").write_text(
        (out / "_progress" / "shard-0-of-1.json")
        .read_text()
        .replace('"finished": true', '"finished": false')
    )
    before = snapshot(elsewhere)
    msg = error(capsys, record(model, out, "--resume"))
    assert f"holds a symbolic link, {out / table} -> {elsewhere}" in msg
    assert snapshot(elsewhere) == before


def test_a_link_to_a_file_inside_a_table_is_refused(model, tmp_path, capsys):
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    assert main(record(model, out)) == 0
    victim.write_text("keep me")
    part = next((out / "gates").rglob("part-*.parquet"))
    part.unlink()
    part.symlink_to(victim)
    assert "holds a symbolic link" in error(capsys, record(model, out, "--overwrite"))
    assert victim.read_text() == "keep me"


def test_overwrite_never_deletes_what_gatetrace_did_not_write(model, tmp_path, capsys):
    path, _ = model
    out = tmp_path / "data"
    out.mkdir()
    x = out / "inputs.npy"  # the user's input, inside the folder named as --out
    np.save(x, np.ones((4, 5, 4), np.float32))
    msg = error(capsys, ["record", path, "--feed", f"x={x}", "--out", str(out), "--overwrite"])
    assert msg.startswith(
        f"--out {out} holds what gatetrace did not write (inputs.npy); --overwrite replaces only gatetrace's own output"
    )
    assert np.array_equal(np.load(x), np.ones((4, 5, 4), np.float32))


def test_a_failing_overwrite_keeps_the_recording_it_was_to_replace(
    model, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "out"
    assert main(record(model, out)) == 0
    before = snapshot(out)
    real, calls = FetchPlan.fetch, []

    def fails_on_the_second_batch(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise MemoryError
        return real(self, *args, **kwargs)

    monkeypatch.setattr(FetchPlan, "fetch", fails_on_the_second_batch)
    assert main(record(model, out, "--overwrite")) == 2
    capsys.readouterr()
    assert snapshot(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_out_given_as_a_link_is_recorded_into_its_target(model, tmp_path, capsys):
    target, link = tmp_path / "target", tmp_path / "link"
    assert main(record(model, target)) == 0
    link.symlink_to(target)
    assert main(record(model, link, "--overwrite")) == 0
    assert (
        link.is_symlink()
        and os.readlink(link) == str(target)
        and (target / "manifest.json").exists()
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "target"]


def test_a_second_process_on_the_same_shard_is_told_another_holds_it(model, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(record(model, out, "--examples", "0:2")) == 0
    progress = out / "_progress" / "shard-0-of-1.json"
    progress.write_text(progress.read_text().replace('"finished": true', '"finished": false'))
    with open(out / "_progress" / "shard-0-of-1.lock", "w") as held:  # another run holds the shard
        fcntl.flock(held, fcntl.LOCK_EX)
        before = snapshot(out)
        msg = error(capsys, record(model, out, "--examples", "0:2", "--resume"))
    assert msg == (
        f"another gatetrace process is recording {out} (it holds {out / '_progress' / 'shard-0-of-1.lock'}); "
        "wait for it to finish, or stop it and rerun with --resume"
    )
    assert snapshot(out) == before
    assert main(record(model, out, "--examples", "0:2", "--resume")) == 0  # once it is released


TAMPERED = {
    "not an object": lambda p: [1, 2],
    "a key missing": lambda p: {k: v for k, v in p.items() if k != "rows"},
    "shard as text": lambda p: {**p, "shard": "0/1"},
    "shard out of range": lambda p: {**p, "shard": [3, 2]},
    "a huge range": lambda p: {**p, "total": [0, 10**30], "examples": [0, 10**30]},
    "a negative interval": lambda p: {**p, "complete": [[-4, 2]]},
    "an inverted interval": lambda p: {**p, "complete": [[4, 2]]},
    "examples not the shard's part": lambda p: {**p, "examples": [0, 3]},
    "complete past the examples": lambda p: {**p, "complete": [[0, 9]]},
    "overlapping intervals": lambda p: {**p, "complete": [[0, 4], [2, 6]]},
    "finished but incomplete": lambda p: {**p, "complete": [[0, 2]]},
    "rows negative": lambda p: {**p, "rows": {"gates": -1, "states": 0, "weights": 0}},
    "finished as text": lambda p: {**p, "finished": "yes"},
}


@pytest.mark.parametrize("how", sorted(TAMPERED))
def test_tampered_progress_files_are_refused_naming_the_file(model, tmp_path, capsys, how):
    out = tmp_path / "out"
    assert main(record(model, out)) == 0
    path = out / "_progress" / "shard-0-of-1.json"
    path.write_text(json.dumps(TAMPERED[how](json.loads(path.read_text()))))
    before = snapshot(out)
    msg = error(capsys, record(model, out, "--resume"))
    assert (
        msg.startswith(f"the progress file {path} is not one gatetrace wrote (")
        and "record into a new folder" in msg
    )
    assert snapshot(out) == before


def test_an_extra_shard_file_is_refused(model, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(record(model, out)) == 0
    (out / "_progress" / "shard-5-of-3.json").write_text("{}")
    msg = error(capsys, record(model, out, "--resume"))
    assert msg.startswith(
        f"the progress file {out / '_progress' / 'shard-5-of-3.json'} is not one gatetrace wrote (expected the keys"
    )


def test_complete_batches_whose_files_are_gone_are_not_taken_as_recorded(model, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(record(model, out)) == 0
    path = out / "_progress" / "shard-0-of-1.json"
    path.write_text(path.read_text().replace('"finished": true', '"finished": false'))
    victim = sorted((out / "gates").rglob("part-0000000002.parquet"))[0]
    victim.unlink()
    msg = error(capsys, record(model, out, "--resume"))
    assert msg.startswith(
        f"cannot resume into {out}: its progress file counts 270 gate rows as complete but their part files hold 240"
    )


@pytest.mark.parametrize("what", ["feed", "lengths", "model"])
def test_overwrite_never_deletes_what_the_recording_reads(what, model, tmp_path, capsys):
    """An input kept inside the recording being replaced (here below its gates/ folder, which
    is gatetrace's own) would be deleted by the swap: refused in one line, and nothing changes."""
    path, x = model
    out = tmp_path / "out"
    assert main(record(model, out)) == 0
    inner = next((out / "gates").iterdir())
    argv = record(model, out, "--overwrite")
    if what == "feed":
        (inner / "x.npy").write_bytes(Path(x).read_bytes())
        argv[argv.index(f"x={x}")] = f"x={inner / 'x.npy'}"
        named = inner / "x.npy"
    elif what == "lengths":
        np.save(inner / "lengths.npy", np.full(6, 5))
        argv += ["--lengths", str(inner / "lengths.npy")]
        named = inner / "lengths.npy"
    else:
        copy = inner / "model"
        copy.mkdir()
        for f in Path(path).parent.iterdir():
            (copy / f.name).write_bytes(f.read_bytes())
        argv[1] = named = str(copy / Path(path).name)
    before = snapshot(out)
    msg = error(capsys, argv)
    assert msg == (
        f"--overwrite would delete what this recording reads: {named} lies inside --out {out}; "
        "write the new recording to another folder, or move it out first"
    )
    assert snapshot(out) == before


def model_copy(path: str, folder: Path) -> Path:
    """A copy of the checkpoint's folder at `folder` (the model given as a folder of its own)."""
    folder.mkdir()
    for f in Path(path).parent.iterdir():
        if f.is_file():
            (folder / f.name).write_bytes(f.read_bytes())
    return folder


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_recording_is_never_written_inside_the_model_folder_it_reads(
    overwrite, model, tmp_path, capsys
):
    """The model given as its folder (a checkpoint's here, as a SavedModel's): an --out inside
    it is refused in one line, new or not, and the folder is left as it was (before: a new
    --out inside it was recorded into)."""
    path, x = model
    folder = model_copy(path, tmp_path / "model")
    out = folder / "run"
    argv = record(model, out, *(["--overwrite"] if overwrite else []))
    argv[1] = str(folder)
    before = snapshot(folder)
    msg = error(capsys, argv)
    assert msg == (
        f"--out {out} lies inside {folder}, which this command reads: gatetrace writes nothing into "
        "its inputs; give an --out outside it"
    )
    assert snapshot(folder) == before and not out.exists()


def test_a_recording_is_never_written_at_the_checkpoint_prefix_it_reads(model, tmp_path, capsys):
    """--out naming the checkpoint's prefix itself: a folder of that name would make the
    checkpoint unreadable by TensorFlow; refused in one line, nothing made (before: recorded)."""
    path, x = model
    folder = model_copy(path, tmp_path / "model")
    prefix = folder / Path(path).name
    argv = record(model, prefix)
    argv[1] = str(prefix)
    msg = error(capsys, argv)
    assert msg == (
        f"--out {prefix} is {prefix}, which this command reads: gatetrace writes nothing into its "
        "inputs; give an --out outside it"
    )
    assert not prefix.exists()


@pytest.mark.parametrize("how", ["remove_folder_at", "walk_and_remove_at"])
def test_a_folder_is_removed_by_handle_and_what_its_links_point_to_is_kept(tmp_path, how):
    """Removing a folder of a recording (the shutil walk of Python 3.11+, and the walk by hand
    that Python 3.10 takes) removes links inside it, never what they point to."""
    from recorders.write import folder as folder_module

    outside = tmp_path / "outside"
    (outside / "kept").mkdir(parents=True)
    (outside / "kept" / "data.parquet").write_bytes(b"user's")
    gone = tmp_path / "root" / "gone"
    (gone / "a" / "b").mkdir(parents=True)
    (gone / "a" / "b" / "part.parquet").write_bytes(b"x")
    (gone / "file").write_bytes(b"y")
    (gone / "a" / "to_folder").symlink_to(outside / "kept")
    (gone / "to_file").symlink_to(outside / "kept" / "data.parquet")
    parent = os.open(tmp_path / "root", os.O_RDONLY)
    try:
        getattr(folder_module, how)(parent, "gone")
    finally:
        os.close(parent)
    assert not gone.exists() and os.listdir(tmp_path / "root") == []
    assert (outside / "kept" / "data.parquet").read_bytes() == b"user's"


@pytest.mark.parametrize("swapped_in", ["a new version", "a FIFO"])
def test_a_file_replaced_while_being_opened_is_read_as_it_now_is_if_regular(
    tmp_path, monkeypatch, swapped_in
):
    """Progress files are replaced by a rename while other shards run: a reader that finds one
    replaced between looking at it and opening it reads the new one (a recording in several
    processes once failed at random so); anything else swapped in is still refused."""
    from recorders.write import folder as folder_module

    (tmp_path / "p.json").write_text('{"v": 1}')
    real_open = os.open

    def swap_then_open(path, flags, *args, dir_fd=None, **kwargs):
        if path == "p.json":
            if swapped_in == "a FIFO":
                os.unlink(tmp_path / "p.json")
                os.mkfifo(tmp_path / "p.json")
            else:
                (tmp_path / "new").write_text('{"v": 2}')
                os.replace(tmp_path / "new", tmp_path / "p.json")
            monkeypatch.setattr(folder_module.os, "open", real_open)
        return real_open(path, flags, *args, dir_fd=dir_fd, **kwargs)

    with folder_module.Folder(tmp_path) as folder:
        monkeypatch.setattr(folder_module.os, "open", swap_then_open)
        if swapped_in == "a FIFO":
            with pytest.raises(folder_module.NotRegularFile, match="became a FIFO"):
                folder.open_regular("p.json")
        else:
            with os.fdopen(folder.open_regular("p.json"), "rb") as f:
                assert json.loads(f.read()) == {"v": 2}


# -- single-file outputs: `compare --out`, `weights --out` ------------------------------------


@pytest.fixture(scope="module")
def recordings(model, tmp_path_factory):
    """Two recordings of the module's model (A: all six examples, B: the same again)."""
    root = tmp_path_factory.mktemp("recordings")
    for name in ("a", "b"):
        assert main(record(model, root / name)) == 0
    return root / "a", root / "b"


def single_file(command, model, recordings, out, *extra) -> list[str]:
    """The command line of a command that writes the one file `out`."""
    if command == "compare":
        return ["compare", str(recordings[0]), str(recordings[1]), "--out", str(out), *extra]
    return ["weights", model[0], "--out", str(out), *extra]


def make_socket(path: Path) -> None:
    """A UNIX socket's node at `path` (bound by its name in the current folder: a socket's path
    is limited to about 100 bytes)."""
    import socket

    with socket.socket(socket.AF_UNIX) as s:
        s.bind(path.name)


SPECIAL = {
    "a character device": (
        lambda p: os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 3)),
        stat.S_ISCHR,
    ),
    "a FIFO": (os.mkfifo, stat.S_ISFIFO),
    "a socket": (make_socket, stat.S_ISSOCK),
}


@pytest.mark.parametrize("overwrite", [False, True], ids=["new", "overwrite"])
@pytest.mark.parametrize("kind", sorted(SPECIAL))
@pytest.mark.parametrize("command", ["compare", "weights"])
def test_a_single_file_output_never_replaces_a_special_file(
    command, kind, overwrite, model, recordings, tmp_path, capsys, monkeypatch
):
    """`--out /dev/null` (here a device node made in a temporary folder), a FIFO or a socket
    is refused before any work, with or without --overwrite, and is left as it was."""
    monkeypatch.chdir(tmp_path)
    node = tmp_path / "node"
    make, still = SPECIAL[kind]
    make(node)
    extra = ["--overwrite"] if overwrite else []
    msg = error(capsys, single_file(command, model, recordings, node, *extra))
    assert msg.startswith(f"--out {node} is {kind}; gatetrace writes only regular files"), msg
    assert still(os.lstat(node).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node"]  # no temporary file left


def training_run(model, run: Path) -> Path:
    """A training run's folder holding the module's checkpoint as its global step 1."""
    prefix = Path(model[0])
    run.mkdir()
    for f in prefix.parent.glob(prefix.name + ".*"):
        (run / f.name.replace(prefix.name, prefix.name + "-1", 1)).write_bytes(f.read_bytes())
    (run / "checkpoint").write_text(
        f'model_checkpoint_path: "{prefix.name}-1"\nall_model_checkpoint_paths: "{prefix.name}-1"\n'
    )
    return run


@pytest.mark.parametrize("kind", sorted(SPECIAL))
@pytest.mark.parametrize("command", ["record", "summary", "series", "demo"])
def test_a_folder_output_never_replaces_a_special_file(
    command, kind, model, tmp_path, capsys, monkeypatch
):
    """The folder outputs refuse a special file at --out as well, and say what it is."""
    monkeypatch.chdir(tmp_path)
    node = tmp_path / "node"
    make, still = SPECIAL[kind]
    make(node)
    argv = {
        "record": record(model, node, "--overwrite"),
        "summary": record(model, node, "--summary", "--overwrite"),
        "series": [
            "record",
            str(training_run(model, tmp_path / "run")),
            "--checkpoints",
            "all",
            "--feed",
            f"x={model[1]}",
            "--out",
            str(node),
            "--quiet",
        ],
        "demo": ["demo", "--out", str(node), "--overwrite"],
    }[command]
    msg = error(capsys, argv)
    assert msg == f"--out {node} exists and is {kind}; give a folder path"
    assert still(os.lstat(node).st_mode)


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_a_logger_s_folder_is_never_a_special_file(kind, tmp_path, monkeypatch):
    """The Keras callback's and the TF1 hook's folder (`open_logged`, which both begin with)
    refuses a special file, saying what it is, and leaves it as it was."""
    from recorders.errors import OutputExistsError
    from tracer.run.series import open_logged

    monkeypatch.chdir(tmp_path)
    node = tmp_path / "node"
    make, still = SPECIAL[kind]
    make(node)
    with pytest.raises(OutputExistsError) as raised:
        open_logged(str(node), "epoch", "GateLogger")
    assert str(raised.value) == f"GateLogger: {node} exists and is {kind}; give a folder path"
    assert still(os.lstat(node).st_mode)


@pytest.mark.parametrize("command", ["compare", "weights"])
def test_a_link_out_of_its_folder_is_refused(command, model, recordings, tmp_path, capsys):
    """--out naming a link to a file in another folder (even a table gatetrace wrote) is
    refused, with --overwrite too: the link and the file it points to are left as they were."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    theirs = elsewhere / "t.parquet"
    assert main(single_file(command, model, recordings, theirs)) == 0
    before = theirs.read_bytes()
    (tmp_path / "here").mkdir()
    link = tmp_path / "here" / "t.parquet"
    link.symlink_to(theirs)
    msg = error(capsys, single_file(command, model, recordings, link, "--overwrite"))
    assert msg.startswith(f"--out {link} is a symbolic link to {theirs}, out of its folder"), msg
    assert link.is_symlink() and theirs.read_bytes() == before


@pytest.mark.parametrize("command", ["compare", "weights"])
def test_a_link_inside_its_folder_is_written_through(command, model, recordings, tmp_path):
    """A link to a file in the same folder (`latest.parquet -> v1.parquet`): --overwrite
    replaces the file it points to, and the link stays."""
    target, link = tmp_path / "v1.parquet", tmp_path / "latest.parquet"
    assert main(single_file(command, model, recordings, target)) == 0
    target.write_bytes(target.read_bytes())  # a new inode, to tell it was replaced
    inode = target.stat().st_ino
    link.symlink_to("v1.parquet")
    assert main(single_file(command, model, recordings, link, "--overwrite")) == 0
    assert link.is_symlink() and os.readlink(link) == "v1.parquet"
    assert target.stat().st_ino != inode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.parquet", "v1.parquet"]


@pytest.mark.parametrize("through", ["path", "link"])
@pytest.mark.parametrize("overwrite", [False, True], ids=["new", "overwrite"])
def test_compare_never_writes_inside_a_recording_it_compares(
    overwrite, through, model, recordings, tmp_path, capsys
):
    """compare --out naming a part file of A with --overwrite (a file gatetrace wrote), or a
    new file inside A, is refused before anything is compared, also when named through a
    link to A: nothing in A changes."""
    a = recordings[0]
    before = snapshot(a)
    part = next((a / "gates").rglob("part-*.parquet"))
    rel = part.relative_to(a) if overwrite else Path("differences.parquet")
    root = a
    if through == "link":
        root = tmp_path / "alias"
        root.symlink_to(a)
    out = root / rel
    extra = ["--overwrite"] if overwrite else []
    msg = error(capsys, single_file("compare", model, recordings, out, *extra))
    assert msg == (
        f"--out {out} lies inside {a}, which this command reads; write it to another folder"
    )
    assert snapshot(a) == before and sorted(p.name for p in a.iterdir()) == sorted(
        ["gates", "states", "weights.parquet", "manifest.json", "_progress", "_statistics"]
    )


@pytest.mark.parametrize("overwrite", [False, True], ids=["new", "overwrite"])
def test_weights_never_writes_inside_the_model_it_reads(overwrite, model, tmp_path, capsys):
    """weights --out naming one of the checkpoint's files (with --overwrite), or a new file in
    the checkpoint folder given as the model, is refused before the model is loaded."""
    path, _ = model
    folder = Path(path).parent
    before = snapshot(folder)
    if overwrite:
        argv = ["weights", path, "--out", f"{path}.index", "--overwrite"]
        inside = f"is {path}.index, which this command reads"
    else:
        argv = ["weights", str(folder), "--out", str(folder / "w.parquet")]
        inside = f"lies inside {folder}, which this command reads"
    msg = error(capsys, argv)
    assert msg == f"--out {argv[3]} {inside}; write it to another folder"
    assert snapshot(folder) == before and not (folder / "w.parquet").exists()


@pytest.mark.parametrize("command", ["compare", "weights"])
def test_a_single_file_never_replaces_part_of_another_recording(
    command, model, recordings, tmp_path, capsys
):
    """--out naming a file of a recording the command does not read (its weights table, a
    gatetrace Parquet file) is refused with --overwrite too: the recording stays whole."""
    other = tmp_path / "other"
    assert main(record(model, other)) == 0
    before = snapshot(other)
    out = other / "weights.parquet"
    msg = error(capsys, single_file(command, model, recordings, out, "--overwrite"))
    assert msg == (
        f"--out {out} lies inside the recording {other}, which holds only what its writer wrote; "
        f"write it beside the recording, e.g. {tmp_path / ('differences.parquet' if command == 'compare' else 'weights.parquet')}"
    )
    assert snapshot(other) == before


# -- a series' folder and its TensorBoard folder follow the rules of every --out ---------------


@pytest.fixture(scope="module")
def written(model, recordings, tmp_path_factory):
    """A recording (the module's A), a series of the module's checkpoint, and its training run."""
    root = tmp_path_factory.mktemp("written")
    run = training_run(model, root / "run")
    series = root / "series"
    assert main(series_argv(model, run, series)) == 0
    return {"recording": recordings[0], "series": series, "run": run}


def series_argv(model, run, out, *extra) -> list[str]:
    return ["record", str(run), "--checkpoints", "all", "--feed", f"x={model[1]}", "--out", str(out), "--quiet", *extra]  # fmt: skip


FOLDER_OUTS = {
    # name: (the option written, where: (folder written, name inside it) or a special case)
    "out in a recording": ("out", "recording"),
    "out in a series": ("out", "series"),
    "out in the training run": ("out", "run"),
    "tensorboard in a recording": ("tensorboard", "recording"),
    "tensorboard in a series": ("tensorboard", "series"),
    "tensorboard in the training run": ("tensorboard", "run"),
    "tensorboard through a link into a recording": ("tensorboard", "link"),
    "tensorboard in its own out": ("tensorboard", "own"),
    "record out in a recording": ("record", "recording"),
    "demo out in a series": ("demo", "series"),
}


@pytest.mark.parametrize("case", sorted(FOLDER_OUTS))
def test_a_series_folder_and_its_tensorboard_folder_follow_the_rules_of_every_out(
    case, model, written, tmp_path, capsys
):
    """`record --checkpoints --out`, its `--tensorboard`, and a recording's --out inside a
    recording, a series or the training run the series reads are refused in one line naming
    the path and where to write instead; nothing is written there."""
    option_, where = FOLDER_OUTS[case]
    run = written["run"]
    before = {k: snapshot(v) for k, v in written.items()}
    new = tmp_path / "new"
    inside = {"link": written["recording"], "own": new / "checkpoint=1"}.get(where)
    folder = written.get(where, inside)
    if where == "link":
        (tmp_path / "alias").symlink_to(folder)
        path = tmp_path / "alias" / "sub"
    else:
        path = folder / "sub"
    if option_ == "out":
        argv = series_argv(model, run, path)
    elif option_ == "record":
        argv = record(model, path)
    elif option_ == "demo":
        argv = ["demo", "--out", str(path)]
    else:
        argv = series_argv(model, run, new, "--tensorboard", str(path))
    msg = error(capsys, argv)
    named = f"--{'tensorboard' if option_ == 'tensorboard' else 'out'} {path}"
    if where == "own":
        assert msg.startswith(f"{named} lies inside --out {new}: a series holds only its"), msg
    elif where == "run":
        assert msg == (
            f"{named} lies inside {run}, which this command reads: gatetrace writes nothing "
            "into its inputs; give a folder outside it"
        )
    else:
        kind = "series" if where == "series" else "recording"
        assert msg == (
            f"{named} lies inside the {kind} {folder}, which holds only what its writer wrote; "
            f"give a folder outside it, e.g. {folder.parent / 'sub'}"
        )
    assert {k: snapshot(v) for k, v in written.items()} == before
    assert not (folder / "sub").exists() and not new.exists()


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_a_tensorboard_folder_is_never_a_special_file(kind, model, written, tmp_path, capsys, monkeypatch):  # fmt: skip
    """--tensorboard naming a FIFO, a socket or a device says what it is, before any work."""
    monkeypatch.chdir(tmp_path)
    node = tmp_path / "node"
    make, still = SPECIAL[kind]
    make(node)
    argv = series_argv(model, written["run"], tmp_path / "new", "--tensorboard", str(node))
    assert error(capsys, argv) == f"--tensorboard {node} exists and is {kind}; give a folder path"
    assert still(os.lstat(node).st_mode) and not (tmp_path / "new").exists()


@pytest.mark.parametrize("what", ["series", "tensorboard"])
def test_a_logger_never_writes_inside_a_recording(what, written, tmp_path):
    """The Keras callback's and the TF1 hook's folders (`open_logged`, `check_logdir`, which
    both begin with) refuse a place inside a recording before anything is written."""
    from recorders.errors import OutputExistsError
    from tracer.run.series import open_logged
    from tracer.run.tensorboard import check_logdir

    rec = written["recording"]
    before = snapshot(rec)
    with pytest.raises(OutputExistsError) as raised:
        if what == "series":
            open_logged(str(rec / "sub"), "epoch", "GateLogger")
        else:
            check_logdir(rec / "sub", tmp_path / "logged", (), f"GateLogger: {rec / 'sub'}")
    assert str(raised.value).startswith(
        f"GateLogger: {rec / 'sub'} lies inside the recording {rec}, which holds only what its writer wrote"
    )
    assert snapshot(rec) == before and not (rec / "sub").exists()


# -- --overwrite removes only the temporaries it marked ---------------------------------------


@pytest.mark.parametrize("how", ["--overwrite", "--resume"])
@pytest.mark.parametrize("planted", ["a folder of the user's", "a copy of a marked temporary"])
@pytest.mark.parametrize("tag", ["overwrite", "old"])
def test_overwrite_removes_only_the_temporaries_it_marked(
    tag, planted, how, model, tmp_path, capsys
):
    """A folder beside --out named as --overwrite's temporaries (`.NAME.overwrite-*`,
    `.NAME.old-*`) holding a `_progress` folder is the user's unless it carries the mark an
    --overwrite of NAME gave that very folder: a copy of a marked one is not it either. It is
    kept, whole, by the next --overwrite or --resume of NAME."""
    out = tmp_path / "X"
    assert main(record(model, out)) == 0
    capsys.readouterr()
    theirs = tmp_path / f".X.{tag}-1a2b3c4d"
    if planted == "a folder of the user's":
        (theirs / "_progress").mkdir(parents=True)
        (theirs / "_progress" / "notes.json").write_text("{}")
        (theirs / "precious.txt").write_text("keep me")
    else:
        from recorders.write.swap import mark_swapped

        marked = tmp_path / "marked"
        assert main(record(model, marked)) == 0
        mark_swapped(marked, out)
        shutil.copytree(marked, theirs, symlinks=True)
        (theirs / "precious.txt").write_text("keep me")
    before = snapshot(theirs)
    assert main(record(model, out, how)) == 0
    assert snapshot(theirs) == before


def test_a_killed_overwrite_s_own_temporary_is_removed_by_the_next_run(tmp_path):
    """The temporary an --overwrite writes into carries its mark: left by a run that stopped
    (its locks gone, as a killed process's are), the next run into --out removes it."""
    from recorders import RecordingWriter

    out = tmp_path / "X"
    values = np.ones((2, 3, 4), np.float32)
    for overwrite in (False, True):
        writer = RecordingWriter(
            out, {"cells": [{"name": "a"}]}, examples=(0, 2), overwrite=overwrite
        )
        writer.begin(0, 2)
        writer.write_gate("a", "f", np.arange(2), np.arange(3), values, values)
        writer.commit()
        if not overwrite:
            writer.close()
    writer._release()  # killed: the temporary is left, no process holds its locks
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith(".X.overwrite-")]
    assert len(left) == 1
    RecordingWriter(out, {"cells": [{"name": "a"}]}, examples=(0, 2), resume=True).abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X"]


# -- what a killed run half-wrote is removed by the next run, and only that --------------------


def dead_pid() -> int:
    """The process id of a process that has ended."""
    import subprocess

    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


@pytest.mark.parametrize("how", ["--overwrite", "--resume"])
def test_what_a_killed_run_half_wrote_is_removed_by_the_next_run(how, model, tmp_path):
    """A run killed while writing its manifest or progress file leaves it under a hidden
    temporary name (`.manifest.json.partial-PID-*`, also as an earlier gatetrace named it):
    the next --overwrite is not refused for it, and --overwrite or --resume leave none."""
    out = tmp_path / "X"
    assert main(record(model, out)) == 0
    pid = dead_pid()
    for name in (f".manifest.json.partial-{pid}-1a2b3c4d", ".manifest.json.partial-5e6f7a8b"):
        (out / name).write_text('{"half')
    (out / "_progress" / f".shard-0-of-1.json.partial-{pid}-1a2b3c4d").write_text('{"half')
    assert main(record(model, out, how)) == 0
    left = [p.name for p in out.rglob(".*")]
    assert left == [] and sorted(p.name for p in tmp_path.iterdir()) == ["X"]


def test_a_single_file_s_partials_left_by_a_killed_run_are_removed_and_nothing_else(
    model, tmp_path
):
    """`weights --out W` removes the temporaries a killed run writing W left beside it
    (`.W.partial-PID-*`, PID ended; `.W.old-PID-*` once W is there), and keeps a running process's, a name without a
    process id (it cannot tell whose), a link named like one, and what names another file."""
    import subprocess

    out = tmp_path / "w.parquet"
    running = subprocess.Popen(["sleep", "60"])
    try:
        dead, target = dead_pid(), tmp_path / "elsewhere"
        target.write_text("keep")
        left = tmp_path / f".w.parquet.partial-{dead}-1a2b3c4d"
        left.write_bytes(b"PAR1 half")
        (tmp_path / f".w.parquet.partial-{dead}-5e6f7a8b").mkdir()
        kept = [
            tmp_path / f".w.parquet.partial-{running.pid}-1a2b3c4d",
            tmp_path / ".w.parquet.partial-1a2b3c4d",
            tmp_path / f".other.parquet.partial-{dead}-1a2b3c4d",
        ]
        for path in kept:
            path.write_bytes(b"PAR1 half")
        link = tmp_path / f".w.parquet.partial-{dead}-9abcdef0"
        link.symlink_to(target)
        assert main(["weights", model[0], "--out", str(out)]) == 0
        # the old file `publish` moved aside, killed before it removed it: gone once W is there
        (tmp_path / f".w.parquet.old-{dead}-1a2b3c4d").write_bytes(b"PAR1 old")
        assert main(["weights", model[0], "--out", str(out), "--overwrite"]) == 0
    finally:
        running.kill()
        running.wait()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["w.parquet", "elsewhere", link.name, *(p.name for p in kept)]
    )
    assert target.read_text() == "keep" and link.is_symlink()


# -- --overwrite replaces only a file of the kind the command writes ---------------------------


@pytest.mark.parametrize(
    "command, planted",
    [
        ("weights", "comparison"),
        ("weights", "part file"),
        ("compare", "weights table"),
        ("compare", "part file"),
    ],
)
def test_overwrite_replaces_only_a_file_of_the_kind_the_command_writes(
    command, planted, model, recordings, tmp_path, capsys
):
    """`weights --overwrite` never replaces a comparison or a copy of a recording's part file,
    `compare --overwrite` never a weights table or a part file: one line, the file kept."""
    out = tmp_path / "table.parquet"
    if planted == "part file":
        shutil.copyfile(next((recordings[0] / "gates").rglob("part-*.parquet")), out)
    else:
        other = "compare" if command == "weights" else "weights"
        assert main(single_file(other, model, recordings, out)) == 0
    capsys.readouterr()
    before = out.read_bytes()
    msg = error(capsys, single_file(command, model, recordings, out, "--overwrite"))
    kinds = {
        "comparison": "a comparison (gatetrace compare --out)",
        "weights table": "a weights table (gatetrace weights)",
        "part file": "a file of a recording's tables (gatetrace record)",
    }
    mine = "a weights table (gatetrace weights)" if command == "weights" else kinds["comparison"]
    assert msg == (
        f"--out {out} is {kinds[planted]}, not {mine}; --overwrite replaces only a file of the "
        "kind this command writes: choose another path"
    )
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [out.name]


@pytest.mark.parametrize("command", ["compare", "weights"])
def test_an_empty_out_is_one_line(command, model, recordings, tmp_path, capsys, monkeypatch):
    """`--out ''` is refused in one line before any work, and nothing is written."""
    monkeypatch.chdir(tmp_path)
    msg = error(capsys, single_file(command, model, recordings, ""))
    example = "differences.parquet" if command == "compare" else "weights.parquet"
    assert msg == f"the output path is empty; give a file path, e.g. {example}"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["checkpoint", "model.ckpt.data-00000-of-00002", "model.ckpt"])
def test_weights_never_writes_a_name_tensorflow_reads_beside_the_checkpoint(
    name, model, tmp_path, capsys
):
    """`weights P --out` in P's folder, named as TensorFlow names the checkpoint's files (a
    new P.data-* shard, P itself) or the folder's `checkpoint` file (absent here), is refused:
    the checkpoint would no longer read as it was. Another name there is written."""
    folder = model_copy(model[0], tmp_path / "ckpt")
    (folder / "checkpoint").unlink()
    prefix = folder / Path(model[0]).name
    before = snapshot(folder)
    msg = error(capsys, ["weights", str(prefix), "--out", str(folder / name)])
    assert msg.startswith(f"--out {folder / name} "), msg
    assert snapshot(folder) == before and not (folder / name).exists()
    assert main(["weights", str(prefix), "--out", str(folder / "weights.parquet")]) == 0
