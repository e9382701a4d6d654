"""Bad inputs and faults: every one answered in one line, nothing finished lost, nothing written outside --out."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracer
from recorders import RecordingWriter
from tests.conftest import CONFIGS, build, save, static_body
from tests.test_cli import fails
from tracer.cli import main


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """One BasicLSTMCell graph saved as a checkpoint, a SavedModel and a frozen graph."""
    root = tmp_path_factory.mktemp("models")
    built = build(static_body(CONFIGS["BasicLSTMCell"]))
    return built, {fmt: save(built, fmt, root) for fmt in ("checkpoint", "savedmodel", "frozen")}


def damaged(
    tmp_path, path: str, part: str, keep: float = 0.5, flip: bool = False
) -> tuple[str, int]:
    """A copy of the model at `path` whose file `part` (relative to the model's folder) is
    cut to `keep` of its bytes, or with `flip` keeps its size but has 16 bytes in the middle
    inverted; returns the copy's model path and the damaged file's size."""
    src = Path(path)
    folder = src if src.is_dir() else src.parent
    copy = tmp_path / "damaged" / folder.name
    shutil.copytree(folder, copy)
    victim = copy / part
    data = bytearray(victim.read_bytes())
    if flip:
        middle = len(data) // 2
        data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    else:
        del data[int(len(data) * keep) :]
    victim.write_bytes(bytes(data))
    return str(copy if src.is_dir() else copy / src.name), victim.stat().st_size


@pytest.mark.parametrize(
    "fmt, part, expected",
    [
        (
            "checkpoint",
            "model.ckpt.meta",
            "model.ckpt.meta is not a readable MetaGraphDef ({size} bytes, neither binary nor text protobuf): the file is truncated or corrupted; export it again",
        ),
        (
            "checkpoint",
            "model.ckpt.data-00000-of-00001",
            "cannot restore the variables from checkpoint {model}: Read less bytes than requested (are its .index and .data files complete?)",
        ),
        (
            "checkpoint",
            "model.ckpt.index",
            "cannot restore the variables from checkpoint {model}: not an sstable (bad magic number) (are its .index and .data files complete?)",
        ),
        (
            "frozen",
            "frozen.pb",
            "cannot read it as a frozen GraphDef: Error parsing message with type 'tensorflow.GraphDef': Wire format was corrupt",
        ),
        (
            "savedmodel",
            "saved_model.pb",
            "cannot read SavedModel: Error parsing message with type 'tensorflow.SavedModel': Wire format was corrupt",
        ),
        (
            "savedmodel",
            "variables/variables.data-00000-of-00001",
            "cannot read SavedModel: Read less bytes than requested",
        ),
    ],
)
def test_truncated_model_files(models, tmp_path, capsys, fmt, part, expected):
    check_damaged(models, tmp_path, capsys, fmt, part, expected, flip=False)


@pytest.mark.parametrize(
    "fmt, part, expected",
    [
        (
            "checkpoint",
            "model.ckpt.data-00000-of-00001",
            "cannot restore the variables from checkpoint {model}: TensorBundle at {model} shard 0 (",
        ),
        ("checkpoint", "model.ckpt.data-00000-of-00001", "Checksum does not match: stored "),
        (
            "checkpoint",
            "model.ckpt.index",
            "Perhaps the file is corrupt or was produced by a newer version of TensorFlow with format changes",
        ),
        (
            "savedmodel",
            "variables/variables.data-00000-of-00001",
            "cannot read SavedModel: TensorBundle at ",
        ),
        (
            "savedmodel",
            "variables/variables.data-00000-of-00001",
            "Checksum does not match: stored ",
        ),
    ],
)
def test_corrupted_model_files(models, tmp_path, capsys, fmt, part, expected):
    check_damaged(models, tmp_path, capsys, fmt, part, expected, flip=True)


def check_damaged(models, tmp_path, capsys, fmt, part, expected, flip):
    _, paths = models
    model, size = damaged(tmp_path, paths[fmt], part, flip=flip)
    msg = fails(capsys, ["weights", model, "--out", str(tmp_path / "w.parquet")])
    assert msg.startswith(f"{model}: ") and expected.format(model=model, size=f"{size:,}") in msg


def test_an_empty_feed_is_an_empty_valid_recording(models, tmp_path, capsys):
    _, paths = models
    np.save(tmp_path / "x.npy", np.zeros((0, 5, 4), np.float32))
    assert (
        main(
            [
                "record",
                paths["checkpoint"],
                "--feed",
                f"x={tmp_path / 'x.npy'}",
                "--out",
                str(tmp_path / "out"),
                "--quiet",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "on 0 sequences: 0 gate rows, 0 state rows, 96 weight rows" in out
    assert (
        "the inputs hold no sequences (x:0 [0, 5, 4]): the recording is empty, its tables have no rows"
        in out
    )
    gates = pd.read_parquet(tmp_path / "out" / "gates")
    assert len(gates) == 0 and list(gates.columns) == [
        "example",
        "step",
        "unit",
        "preactivation",
        "activation",
        "cell",
        "gate",
    ]
    assert (
        len(pd.read_parquet(tmp_path / "out" / "states")) == 0
        and (tmp_path / "out" / "manifest.json").exists()
    )


def test_an_empty_feed_for_a_fixed_batch_placeholder_is_named(tmp_path, capsys):
    model = save(build(static_body(CONFIGS["GRUCell"]), batch=2), "checkpoint", tmp_path)
    np.save(tmp_path / "x.npy", np.zeros((0, 5, 4), np.float32))
    msg = fails(
        capsys,
        ["record", model, "--feed", f"x={tmp_path / 'x.npy'}", "--out", str(tmp_path / "out")],
    )
    assert msg == (
        "feed x:0: the input holds no sequences, and the graph's placeholders take batches of exactly 2: feed at least "
        "one sequence; nothing was recorded: fix the input and rerun"
    )
    assert not (tmp_path / "out").exists()


def test_nan_and_inf_inputs_are_recorded_as_computed(models, tmp_path):
    built, _ = models
    x = np.random.RandomState(5).randn(3, 5, 4).astype(np.float32)
    x[1, 2, 0], x[2, 0, 3] = np.nan, np.inf
    result = tracer.trace(tracer.from_session(built.session), {"x": x})
    tracer.record(tracer.from_session(built.session), {"x": x}, tmp_path / "out")
    df = pd.read_parquet(tmp_path / "out" / "gates", filters=[("gate", "==", "f")]).sort_values(
        ["example", "step", "unit"]
    )
    expected = result["rnn/basic_lstm_cell"].activation[:, :, 2].reshape(-1)
    # NaN where TensorFlow computed NaN
    np.testing.assert_array_equal(df["activation"].to_numpy(), expected)
    assert np.isnan(expected[1 * 15 :]).any() and not np.isnan(expected[:10]).any()


def test_an_out_that_cannot_be_created_names_the_path(models, tmp_path, capsys):
    _, paths = models
    (tmp_path / "file").write_text("not a folder")
    np.save(tmp_path / "x.npy", np.zeros((2, 5, 4), np.float32))
    out = tmp_path / "file" / "out"
    msg = fails(
        capsys,
        ["record", paths["checkpoint"], "--feed", f"x={tmp_path / 'x.npy'}", "--out", str(out)],
    )
    assert msg == f"cannot create {out}: Not a directory"


@pytest.mark.parametrize(
    "name",
    [
        "../../escape",
        "..",
        "a\\b\\..\\c",
        "/etc/passwd",
        "C:\\Windows",
        "cell=x%2F",
        "zelle/über/€",
        "x" * 240,
        "rnn/" + "ü" * 100,
    ],
)
def test_cell_names_become_folders_inside_out(tmp_path, name):
    out = tmp_path / "out"
    with RecordingWriter(out, {"cells": [{"name": name}]}, examples=(0, 2)) as writer:
        writer.begin(0, 2)
        values = np.ones((2, 3, 4), np.float32)
        writer.write_gate(name, "f", np.arange(2), np.arange(3), values, values)
        writer.write_state(name, "h", np.arange(2), np.arange(3), values)
        writer.commit()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert all(out.resolve() in p.resolve().parents for p in files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    for table in ("gates", "states"):
        assert pd.read_parquet(out / table)["cell"].astype(str).unique().tolist() == [name]


def test_cell_names_too_long_for_a_folder_are_shortened_and_read_back_whole(tmp_path):
    from recorders import Recording, partition_value

    long_ascii, long_slashes = "x" * 300, "scope/" * 60 + "a"
    twins = ["ü" * 200 + "/fw", "ü" * 200 + "/bw"]  # share the start that fits
    names = [long_ascii, long_slashes, *twins, "short"]
    out = tmp_path / "out"
    with RecordingWriter(
        out,
        {"cells": [{"name": n, "gates": ["f"], "states": ["h"], "units": 4} for n in names]},
        examples=(0, 2),
    ) as writer:
        writer.begin(0, 2)
        for k, name in enumerate(names):
            values = np.full((2, 3, 4), k, np.float32)
            writer.write_gate(name, "f", np.arange(2), np.arange(3), values, values)
            writer.write_state(name, "h", np.arange(2), np.arange(3), values)
        writer.commit()
    folders = sorted(p.name for p in (out / "gates").iterdir())
    assert len(folders) == 5 and max(len(f.encode()) for f in folders) <= 255
    assert all(out.resolve() in p.resolve().parents for p in tmp_path.rglob("*.parquet"))
    stored = [partition_value("cell", n) for n in names]
    assert stored[-1] == "short" and len(set(stored)) == 5
    assert (
        stored[0]
        == "x" * (255 - len("cell=") - 17)
        + "~"
        + hashlib.sha256(long_ascii.encode()).hexdigest()[:16]
    )
    rec = Recording(out)
    for k, name in enumerate(names):
        df = rec.gate_frame([name])
        assert (
            df["cell"].astype(str).unique().tolist() == [name]
            and (df["activation"] == k).all()
            and len(df) == 24
        )
        assert (rec.state_array(name, "h") == k).all() and rec.steps(name).tolist() == [0, 1, 2]
    everything = rec.gate_frame()
    assert sorted(everything["cell"].astype(str).unique()) == sorted(names)
    # pandas alone sees the shortened names, each distinct
    assert sorted(pd.read_parquet(out / "gates")["cell"].astype(str).unique()) == sorted(stored)


def test_a_batch_too_large_for_memory_gets_advice(models, tmp_path, capsys, monkeypatch):
    """The second batch exhausts memory (simulated): the first stays recorded, and the error says what to do."""
    from tracer.values.fetch import FetchPlan

    _, paths = models
    np.save(tmp_path / "x.npy", np.zeros((8, 5, 4), np.float32))
    fetch, calls = FetchPlan.fetch, []

    def out_of_memory(self, session, feed_dict=None, timeout=None):
        calls.append(1)
        if len(calls) == 2:
            raise MemoryError
        return fetch(self, session, feed_dict)

    monkeypatch.setattr(FetchPlan, "fetch", out_of_memory)
    argv = [
        "record",
        paths["checkpoint"],
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "out"),
        "--quiet",
    ]
    msg = fails(capsys, [*argv, "--batch-size", "4"])
    assert msg == (
        "a batch of 4 sequences does not fit in memory (MemoryError); the 4 sequences recorded before are kept: "
        "rerun with a smaller --batch-size and --resume"
    )
    monkeypatch.setattr(FetchPlan, "fetch", fetch)
    assert main([*argv, "--batch-size", "2", "--resume"]) == 0
    assert sorted(pd.read_parquet(tmp_path / "out" / "gates")["example"].unique()) == list(range(8))


@pytest.fixture
def three_batches(tmp_path):
    """A 24-sequence recording in 3 batches whose last batch writes far bigger files than the
    first two; returns the CLI arguments without --out and an uninterrupted run of them."""
    from tests.conftest import R
    from tracer._tf import tf, v1

    def body(x):
        return [
            v1.nn.static_rnn(R.BasicLSTMCell(16), tf.unstack(x, axis=1), dtype=tf.float32)[0][-1]
        ]

    model = save(build(body, steps=40), "checkpoint", tmp_path)
    np.save(tmp_path / "x.npy", np.random.RandomState(2).randn(24, 40, 4).astype(np.float32))
    np.save(tmp_path / "len.npy", np.array([1] * 8 + [2] * 8 + [40] * 8))
    argv = [
        "record",
        model,
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--lengths",
        str(tmp_path / "len.npy"),
        "--batch-size",
        "8",
        "--quiet",
    ]
    clean = tmp_path / "clean"
    assert main([*argv, "--out", str(clean)]) == 0
    return argv, clean


def batch_files(clean: Path, *starts: int) -> list[Path]:
    return [p for start in starts for p in clean.rglob(f"part-{start:010d}.parquet")]


def assert_first_two_batches_kept(line: str, out: Path, reason: str) -> None:
    assert line.startswith(f"gatetrace: error: cannot write {out}/") and line.endswith(
        f"{reason}; the 16 sequences recorded before are kept: fix the cause and rerun with --resume"
    ), line
    assert not (out / "manifest.json").exists() and not list(out.glob(".staging-*"))
    assert sorted(pd.read_parquet(out / "gates")["example"].unique()) == list(range(16))


@pytest.mark.e2e
def test_a_file_size_limit_midway_keeps_finished_batches_and_resume_completes(
    three_batches, tmp_path
):
    """A real fault: the kernel refuses writes past RLIMIT_FSIZE."""
    import resource

    argv, clean = three_batches
    small = [p.stat().st_size for p in batch_files(clean, 0, 8)]
    small += [(clean / "weights.parquet").stat().st_size, (clean / "manifest.json").stat().st_size]
    large = [p.stat().st_size for p in batch_files(clean, 16)]
    assert max(small) < min(large)
    limit = (max(small) + min(large)) // 2

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "tracer.cli", *argv, "--out", str(out)],
        capture_output=True,
        text=True,
        preexec_fn=limit_file_size,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert_first_two_batches_kept(line, out, "File too large")
    assert main([*argv, "--out", str(out), "--resume"]) == 0
    assert_same_recording_of(out, clean)


def mount_namespace() -> list[str]:
    """The command prefix that runs a program in a private mount namespace (as root, or
    as the mapped root of a new user namespace). Where neither is allowed the test is skipped,
    except in CI (CI=true), whose machines allow it: there it fails, so it cannot silently stop running."""
    for prefix in (["unshare", "-m"], ["unshare", "-r", "-m"]):
        try:
            if (
                subprocess.run(
                    [*prefix, "mount", "-t", "tmpfs", "tmpfs", "/mnt"], capture_output=True
                ).returncode
                == 0
            ):
                return prefix
        except FileNotFoundError:
            break
    why = "needs a private mount namespace (unshare -m) to mount a small or read-only file system"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why}, and CI machines allow one: the fault tests did not run")
    pytest.skip(why)


def cli_in(
    prefix: list[str], setup: str, argv: list[str], keep: Path | None = None
) -> subprocess.CompletedProcess:
    """Run the CLI after the shell commands `setup` in a private mount namespace; its mounts end
    with it, so with `keep` the mounted folder's `out` is first copied there."""
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "tracer.cli", *argv])
    copy = (
        f"cp -a {shlex.quote(str(keep.parent / 'disk' / 'out'))} {shlex.quote(str(keep))}"
        if keep
        else "true"
    )
    script = f"set -e; {setup}; set +e; {command}; rc=$?; {copy}; exit $rc"
    return subprocess.run(
        [*prefix, "sh", "-c", script], capture_output=True, text=True, timeout=300
    )


@pytest.mark.e2e
def test_a_full_file_system_midway_keeps_finished_batches_and_resume_completes(
    three_batches, tmp_path
):
    """A real full disk: a tmpfs with room for the first two batches but not the third."""
    prefix = mount_namespace()
    argv, clean = three_batches

    def pages(files):
        return sum(-(-p.stat().st_size // 4096) for p in files)

    kept = pages([*batch_files(clean, 0, 8), clean / "weights.parquet", *clean.glob("_progress/*")])
    third = pages(batch_files(clean, 16))
    assert third > 16
    size = 4096 * (kept + 8 + third // 2)
    disk, keep = tmp_path / "disk", tmp_path / "kept"
    disk.mkdir()
    result = cli_in(
        prefix,
        f"mount -t tmpfs -o size={size} tmpfs {disk}",
        [*argv, "--out", str(disk / "out")],
        keep,
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert "No space left on device" in line
    assert_first_two_batches_kept(
        line.replace(str(disk / "out"), str(keep)), keep, "No space left on device"
    )
    assert main([*argv, "--out", str(keep), "--resume"]) == 0
    assert_same_recording_of(keep, clean)


@pytest.mark.e2e
def test_a_read_only_folder_is_named_and_its_recording_stays_resumable(three_batches, tmp_path):
    """A new --out under a read-only folder is refused; an unfinished recording there is left as it was."""
    import resource

    prefix = mount_namespace()
    argv, clean = three_batches
    folder = tmp_path / "ro"
    folder.mkdir()
    read_only = f"mount --bind {folder} {folder}; mount -o remount,bind,ro {folder}"

    result = cli_in(prefix, read_only, [*argv, "--out", str(folder / "new")])
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"gatetrace: error: cannot create {folder / 'new'}: Read-only file system"
    ]
    assert list(folder.iterdir()) == []

    # An unfinished recording (its third batch failed), then the folder turns read-only.
    limit = min(p.stat().st_size for p in batch_files(clean, 16)) - 1
    out = folder / "run"
    subprocess.run(
        [sys.executable, "-m", "tracer.cli", *argv, "--out", str(out)],
        capture_output=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
        timeout=300,
    )
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    result = cli_in(prefix, read_only, [*argv, "--out", str(out), "--resume"])
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"gatetrace: error: cannot write {out}: Read-only file system; nothing was changed and the 16 examples "
        "recorded before are kept: fix the cause and rerun with --resume"
    ]
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(pd.read_parquet(out / "gates")["example"].unique()) == list(range(16))
    assert main([*argv, "--out", str(out), "--resume"]) == 0
    assert_same_recording_of(out, clean)


def assert_same_recording_of(out: Path, clean: Path) -> None:
    for table in ("gates", "states"):
        keys = ["cell", table[:-1], "example", "step", "unit"]  # gate or state
        got, want = (
            pd.read_parquet(d / table)
            .astype({keys[0]: str, keys[1]: str})
            .sort_values(keys, ignore_index=True)
            for d in (out, clean)
        )
        pd.testing.assert_frame_equal(got, want, check_exact=True)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize(
    "swapped", ["gates/cell=a%2Fb/gate=f", "gates", "_progress", ".staging-shard-0-of-1"]
)
def test_a_folder_swapped_for_a_link_during_a_run_is_never_written_through(tmp_path, swapped):
    """Someone replaces a folder of a running recording by a link to a folder outside it:
    the writer fails on the link instead of writing, renaming or removing through it."""
    from recorders.errors import RecordingError
    from tests.test_recorders import batch

    out, outside = tmp_path / "out", tmp_path / "outside"
    writer = RecordingWriter(out, {"cells": [{"name": "a/b"}]}, examples=(0, 6))
    batch(writer, 0, 2, cell="a/b")
    shutil.move(out / swapped, outside)  # the folder's files, now outside --out
    os.symlink(outside, out / swapped)
    (outside / "keep.txt").write_text("not gatetrace's")
    before = _snapshot(outside)
    with pytest.raises(RecordingError, match=r"Too many levels of symbolic links|Not a directory"):
        batch(writer, 2, 4, cell="a/b")
        writer.close()
    writer.abort()
    # (aborting removes the staging link itself, never what it points to)
    assert _snapshot(outside) == before


@pytest.mark.e2e
def test_an_npz_bomb_is_refused_before_a_row_is_read(tmp_path):
    """A 2 MB .npz whose compressed member declares sequences of 2 GiB: reading one would
    end the process with no word; it is refused in one line, from its header alone."""
    import zipfile

    from tracer._tf import tf, v1

    def body(x):
        return [v1.nn.dynamic_rnn(CONFIGS["GRUCell"].make(), x, dtype=tf.float32)[0]]

    model = save(build(body, steps=None), "checkpoint", tmp_path)
    shape = (1, 2**27, 4)  # one sequence of 2**27 steps: 2 GiB of float32
    bomb = tmp_path / "bomb.npz"
    with (
        zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z,
        z.open("x.npy", "w", force_zip64=True) as f,
    ):
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": shape}
        )
        zeros = bytes(64 << 20)
        for _ in range(2**31 // len(zeros)):
            f.write(zeros)
    assert bomb.stat().st_size < 16 << 20
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracer.cli",
            "record",
            model,
            "--feed",
            f"x={bomb}",
            "--out",
            str(tmp_path / "out"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert (
        line.startswith(
            "gatetrace: error: feed x:0: its header declares sequences of [134217728, 4] float32, 2.0 GB each, "
            "more than the default memory budget takes for one sequence (512.0 MB)"
        )
        and "nothing was read: check the input" in line
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_a_fault_under_overwrite_says_the_old_recording_is_kept(three_batches, tmp_path):
    """A file-size limit hit while --overwrite records: the line says the recording it was to
    replace is left as it was (not that the new run's sequences are kept), and it is."""
    import resource

    argv, clean = three_batches
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 0
    table = tmp_path / "weights.parquet"  # beside the recording: nothing is written inside one
    assert main(["weights", argv[1], "--out", str(table)]) == 0
    before, table_before = _snapshot(out), table.read_bytes()
    weights = (clean / "weights.parquet").stat().st_size
    for command, limit in (
        (
            [*argv, "--out", str(out), "--overwrite"],
            max(p.stat().st_size for p in batch_files(clean, 0, 8)) + weights,
        ),
        (["weights", argv[1], "--out", str(table), "--overwrite"], weights // 2),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "tracer.cli", *command],
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=lambda limit=limit: resource.setrlimit(
                resource.RLIMIT_FSIZE, (limit, limit)
            ),
        )
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.splitlines()
        if command[0] == "record":
            assert line.endswith(
                f"File too large; {out} is left as it was (--overwrite replaces it only once the new recording is "
                "complete): fix the cause and rerun with --overwrite"
            ), line
        else:
            assert (
                line
                == f"gatetrace: error: cannot write {table}: File too large; the file there is left as it was: fix the cause and rerun"
            )
        assert (
            _snapshot(out) == before
            and table.read_bytes() == table_before
            and sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
        )


def _recording(path: Path, value: float, finished: bool = True) -> None:
    from recorders import RecordingWriter

    writer = RecordingWriter(path, {"cells": [{"name": "a"}]}, examples=(0, 2))
    writer.begin(0, 2)
    values = np.full((2, 3, 4), value, np.float32)
    writer.write_gate("a", "f", np.arange(2), np.arange(3), values, values)
    writer.commit()
    writer.close() if finished else writer.abort()


@pytest.mark.parametrize(
    "left",
    [
        "killed between the renames",
        "killed before the new one was complete",
        "killed after the swap",
    ],
)
def test_the_next_run_finishes_or_undoes_a_half_done_overwrite_and_removes_its_litter(
    tmp_path, left
):
    from recorders import Recording
    from recorders.errors import OutputExistsError
    from recorders.write.swap import mark_swapped

    out = tmp_path / "out"
    old, new = tmp_path / ".out.old-1a2b3c4d", tmp_path / ".out.overwrite-5e6f7a8b"
    _recording(old, 1.0)
    _recording(new, 2.0, finished=left != "killed before the new one was complete")
    for sibling in (old, new):  # as the --overwrite of `out` marked them
        mark_swapped(sibling, out)
    # the old one renamed away and the new one in place, not yet removed
    if left == "killed after the swap":
        shutil.copytree(new, out)
    with pytest.raises(
        OutputExistsError,
        match="already holds a finished recording; pass resume=True to continue it",
    ):
        # any next run into --out settles it first
        RecordingWriter(out, {"cells": [{"name": "a"}]}, examples=(0, 2))
    expected = 1.0 if left == "killed before the new one was complete" else 2.0
    assert set(Recording(out).gate_frame(["a"])["preactivation"]) == {expected}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_fifo_planted_as_a_progress_file_is_named_and_never_opened(tmp_path):
    from recorders.errors import RecordingError

    out = tmp_path / "out"
    _recording(out, 1.0, finished=False)
    (out / "_progress" / "shard-0-of-1.json").unlink()
    os.mkfifo(out / "_progress" / "shard-0-of-1.json")  # opening it to read would wait forever
    with pytest.raises(
        RecordingError,
        match=r"_progress/shard-0-of-1.json is a FIFO, not a progress file gatetrace wrote "
        r"\(nothing was read from it\): remove it, or record into a new folder",
    ):
        RecordingWriter(out, {"cells": [{"name": "a"}]}, examples=(0, 2), resume=True)


def test_a_parquet_input_whose_steps_change_midway_is_refused_before_anything_is_recorded(
    models, tmp_path, capsys
):
    """A later row group of sequences of another length is found from the file's metadata,
    before a row is read: one line, and no partial --out."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    _, paths = models
    rows = [np.ones((5, 4), np.float32).tolist()] * 8 + [np.ones((6, 4), np.float32).tolist()] * 8
    data = tmp_path / "x.parquet"
    pq.write_table(
        pa.table({"x": pa.array(rows, pa.list_(pa.list_(pa.float32())))}), data, row_group_size=8
    )
    out = tmp_path / "out"
    msg = fails(
        capsys,
        [
            "record",
            paths["checkpoint"],
            "--feed",
            f"x={data}:x",
            "--out",
            str(out),
            "--batch-size",
            "8",
        ],
    )
    assert msg == (
        f"{data}:x: the 8 rows from row 8 on hold 192 values, not 160 (20 a row, as the first rows [5, 4]); every sequence "
        "must have one shape: pad them to one; nothing was recorded"
    )
    assert not out.exists()


@pytest.mark.parametrize("how", ["BroadcastTo", "Fill", "Fill of a size known only when it runs"])
def test_a_tensor_no_batch_size_makes_fit_is_named_with_its_size(how, tmp_path, capsys):
    from tracer._tf import tf

    def body(x):
        if how == "BroadcastTo":
            big = tf.broadcast_to(tf.reduce_sum(x), [10**6, 10**6], name="huge")
        elif how == "Fill":
            big = tf.fill(tf.constant([2**40], tf.int64), 1.0, name="huge")
        else:  # the size comes from the data: nothing tells it before the run
            rows = tf.cast(tf.reduce_sum(x) * 0.0 + 1e6, tf.int32)
            big = tf.fill(tf.stack([rows, rows]), 1.0, name="huge")
        return static_body(CONFIGS["GRUCell"])(x + 0.0 * tf.reduce_sum(big))

    model = save(build(body), "checkpoint", tmp_path)
    np.save(tmp_path / "x.npy", np.ones((2, 5, 4), np.float32))
    msg = fails(
        capsys,
        ["record", model, "--feed", f"x={tmp_path / 'x.npy'}", "--out", str(tmp_path / "out")],
    )
    if how == "BroadcastTo":
        assert msg.startswith(
            f"{model}: its op huge (BroadcastTo) makes a tensor of [1000000, 1000000] float32 (3725.3 GB) "
            "whatever the batch size, more than this machine's available memory"
        )
    elif how == "Fill":
        assert msg.startswith(
            f"{model}: its op huge (Fill) makes a tensor of [1099511627776] float32 (4096.0 GB) whatever"
        )
    else:
        assert (
            msg
            == "the model's op huge, a tensor of [1000000, 1000000] float (3725.3 GB) does not fit in memory, whatever the batch size; nothing was recorded"
        )
    assert "--batch-size" not in msg and not (tmp_path / "out").exists()


def test_inputs_of_another_type_are_cast_with_a_word_and_never_changed(models, tmp_path, capfd):
    _, paths = models
    x = np.random.RandomState(6).randn(3, 5, 4)
    np.save(tmp_path / "x64.npy", x)
    np.save(tmp_path / "x32.npy", x.astype(np.float32))

    def run(name, *flags):
        return main(
            [
                "record",
                paths["checkpoint"],
                "--feed",
                f"x={tmp_path / name}",
                "--out",
                str(tmp_path / name[:-4]),
                *flags,
            ]
        )

    assert run("x64.npy") == 0
    assert (
        "gatetrace: feed x:0: the input is float64, the placeholder float32: values are cast, rounding each value"
        in capfd.readouterr().err
    )
    assert run("x32.npy", "--quiet") == 0 and capfd.readouterr().err == ""
    assert pd.read_parquet(tmp_path / "x64" / "gates").equals(
        pd.read_parquet(tmp_path / "x32" / "gates")
    )
    big = np.ones((3, 5, 4), np.int64)
    big[2, 1, 0] = 2**24 + 1  # float32 would make it 2**24
    np.save(tmp_path / "xint.npy", big)
    assert run("xint.npy", "--quiet") == 2
    assert (
        capfd.readouterr()
        .err.strip()
        .endswith(
            "feed x:0: row 2 holds the integer 16,777,217, which float32 (the placeholder's type) cannot hold exactly (beyond "
            "16,777,216): convert the input to the values the model expects; nothing was recorded: fix the input and rerun"
        )
    )
    assert not (tmp_path / "xint").exists()


def test_the_overwrite_swap_is_one_exchange_and_a_kill_after_it_keeps_the_new_recording(tmp_path):
    """Where the OS swaps two folders in one step (renameat2 RENAME_EXCHANGE), `--out` holds a
    whole recording at every instant: a watcher reading its manifest while it is swapped back
    and forth 300 times never finds it missing. Killed after the exchange, before the old one
    (now at the temporary name) is removed, the next run removes it and keeps the new one."""
    import threading

    from recorders import Recording
    from recorders.errors import OutputExistsError
    from recorders.write.files import exchange, publish
    from recorders.write.swap import mark_swapped

    out, spare = tmp_path / "out", tmp_path / "spare"
    _recording(out, 1.0)
    _recording(spare, 2.0)
    if not exchange(spare, out):
        pytest.skip("this OS or file system cannot exchange two folders in one step")
    missing, done = [], threading.Event()

    def watch():
        while not done.is_set():
            if not (out / "manifest.json").is_file():
                missing.append(1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for _ in range(300):
            assert exchange(spare, out)
    finally:
        done.set()
        watcher.join()
    assert not missing
    new = tmp_path / ".out.overwrite-5e6f7a8b"
    _recording(new, 3.0)
    mark_swapped(out, out)  # the old one, as the writer marks it before the swap
    # the swap publish makes; killed here, the old one waits at the new one's name
    assert exchange(new, out)
    with pytest.raises(OutputExistsError, match="already holds a finished recording"):
        RecordingWriter(out, {"cells": [{"name": "a"}]}, examples=(0, 2))
    assert set(Recording(out).gate_frame(["a"])["preactivation"]) == {3.0}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "spare"]
    publish(spare, out)  # and publish itself leaves nothing beside
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and set(
        Recording(out).gate_frame(["a"])["preactivation"]
    ) == {1.0}


def test_a_call_that_does_not_return_is_stopped_by_the_time_limit():
    """What runs outside a Session (TensorFlow Lite's interpreter) runs on a worker thread:
    --timeout stops the wait for it in time, and its error, if it raises, reaches the caller."""
    import time

    from recorders.errors import RunTimeout
    from tracer.values import interrupts

    started = time.monotonic()
    with pytest.raises(RunTimeout, match=r"the interpreter took longer than --timeout 0.2 s"):
        interrupts.stoppable(lambda: time.sleep(30), 0.2, "the interpreter")
    assert time.monotonic() - started < 2
    assert interrupts.stoppable(lambda: 7, 1.0, "x") == 7
    with pytest.raises(ZeroDivisionError):
        interrupts.stoppable(lambda: 1 / 0, None, "x")
