"""The bad-input catalogue: every mistake a user (or a damaged file) can make, one clear line each.

Each case builds what the user would have on disk, runs the CLI in this process and
checks that it exits with code 2, prints exactly one line on stderr (no traceback, no
usage block, no TensorFlow log line) that contains the expected reason, and that no
--out was left behind for a rerun to refuse.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import CONFIGS, build, save, static_body
from tracer._tf import v1
from tracer.cli import main


@pytest.fixture(scope="module")
def disk(tmp_path_factory) -> Path:
    """A GRUCell checkpoint and SavedModel, good inputs, and every kind of bad file."""
    root = tmp_path_factory.mktemp("catalogue")
    built = build(static_body(CONFIGS["GRUCell"]))
    save(built, "checkpoint", root)
    save(built, "savedmodel", root)
    np.save(root / "x.npy", np.ones((6, 5, 4), np.float32))
    np.save(root / "x7.npy", np.ones((7, 5, 4), np.float32))
    np.save(root / "wide.npy", np.ones((6, 5, 3), np.float32))
    np.save(root / "flat.npy", np.ones((6, 20), np.float32))
    np.save(root / "complex.npy", np.ones((6, 5, 4), np.complex64))
    np.save(root / "objects.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    np.save(root / "fortran.npy", np.asfortranarray(np.ones((6, 5, 4), np.float32)))
    np.save(root / "scalar.npy", np.float32(1.0))
    data = (root / "x.npy").read_bytes()
    (root / "truncated.npy").write_bytes(data[: len(data) // 2])
    (root / "garbage.npy").write_bytes(b"not an npy file at all")
    for name, shape in (("huge", (10**13, 10**7, 4)), ("negative", (-6, 5, 4))):
        with open(root / f"{name}.npy", "wb") as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "<f4", "fortran_order": False, "shape": shape}
            )
            f.write(b"\0" * 480)
    np.savez(root / "two.npz", a=np.ones((6, 5, 4), np.float32), b=np.ones((6, 5, 4), np.float32))
    np.savez_compressed(root / "one.npz", x=np.ones((6, 5, 4), np.float32))
    (root / "broken.npz").write_bytes(b"PK\x03\x04 broken zip")
    np.savez_compressed(
        root / "long.npz", x=np.random.RandomState(0).rand(600, 5, 4).astype(np.float32)
    )
    # zeros in the middle: found by the CRC at the end
    damaged = bytearray((root / "long.npz").read_bytes())
    damaged[len(damaged) // 2 : len(damaged) // 2 + 64] = bytes(64)
    (root / "corrupt.npz").write_bytes(bytes(damaged))
    pq.write_table(
        pa.table({"x": pa.array([], pa.list_(pa.list_(pa.float32())))}), root / "empty.parquet"
    )
    pq.write_table(pa.table({"y": [[1.0] * 4] * 6}), root / "other.parquet")
    (root / "notes.txt").write_text("hello")
    os.mkfifo(root / "fifo.npy")  # opened to be read, it would wait for a writer
    np.save(root / "big.npy", np.full((6, 5, 4), 2**24 + 1, np.int64))
    np.save(root / "none.npy", np.zeros((0, 5, 4), np.float32))
    (root / "fixed").mkdir()  # a graph whose placeholder takes batches of exactly 2
    save(build(static_body(CONFIGS["GRUCell"]), batch=2), "checkpoint", root / "fixed")
    # a Saver given a var_list without the cell's weights, as a published one was
    (root / "partial").mkdir()
    partial = build(
        lambda x: [
            v1.get_variable("global_step", [], initializer=v1.zeros_initializer()),
            *static_body(CONFIGS["GRUCell"])(x),
        ]
    )
    with partial.graph.as_default():
        step = [v for v in v1.global_variables() if v.op.name == "global_step"]
        v1.train.Saver(var_list=step).save(partial.session, str(root / "partial" / "model.ckpt"))
    np.save(root / "lengths_bad.npy", np.array([[1, 2]]))
    np.save(root / "lengths_negative.npy", np.array([5, 5, -1, 5, 5, 5]))
    np.save(root / "lengths_float.npy", np.ones(6, np.float32))
    (root / "afile").write_text("I am a file")
    (root / "mine").mkdir()
    (root / "mine" / "keep.txt").write_text("keep")
    (root / "empty.meta").write_bytes(b"")
    (root / "garbage.meta").write_bytes(b"\xff\xfe garbage \x00\x01")
    (root / "garbage.pb").write_bytes(b"\xff\xfe garbage \x00\x01")
    (root / "nothing").mkdir()
    (root / "stale").mkdir()
    (root / "stale" / "checkpoint").write_text('model_checkpoint_path: "gone.ckpt"\n')
    (root / "bad.keras").write_bytes(b"not a zip")
    (root / "bad.h5").write_bytes(b"not hdf5")
    with zipfile.ZipFile(root / "noconfig.keras", "w") as z:
        z.writestr("metadata.json", "{}")
    return root


M, SM, X = "{d}/ckpt/model.ckpt", "{d}/savedmodel", "x={d}/x.npy"
R = ["record", M, "--feed", X, "--quiet", "--out", "{o}"]  # a good record command

CASES = {
    # the command line
    "no command": ([], "the following arguments are required: COMMAND"),
    "unknown command": (["frob"], "invalid choice: 'frob'"),
    "record without --out": (
        ["record", M, "--feed", X],
        "the following arguments are required: --out",
    ),
    "record without a model": (
        ["record", "--out", "o"],
        "the following arguments are required: MODEL",
    ),
    "batch size 0": (
        [*R, "--batch-size", "0"],
        "--batch-size: expected a whole number of at least 1, given '0'",
    ),
    "batch size text": (
        [*R, "--batch-size", "many"],
        "--batch-size: expected a whole number of at least 1, given 'many'",
    ),
    "batch size negative": (
        [*R, "--batch-size", "-5"],
        "expected a whole number of at least 1, given '-5'",
    ),
    "timeout 0": (
        [*R, "--timeout", "0"],
        "--timeout: expected a positive number of seconds, given '0'",
    ),
    "timeout text": (
        [*R, "--timeout", "soon"],
        "expected a positive number of seconds, given 'soon'",
    ),
    "timeout inf": ([*R, "--timeout", "inf"], "expected a positive number of seconds, given 'inf'"),
    "timeout nan": ([*R, "--timeout", "nan"], "expected a positive number of seconds, given 'nan'"),
    "unknown compression": (
        [*R, "--compression", "gz"],
        "argument --compression: invalid choice: 'gz'",
    ),
    "unknown option": ([*R, "--fast"], "unrecognized arguments: --fast"),
    "shard out of range": ([*R, "--shard", "3/2"], "--shard 3/2: expected K/N with 0 <= K < N"),
    "shard not K/N": ([*R, "--shard", "half"], "--shard 'half': expected K/N"),
    "shard zero parts": ([*R, "--shard", "0/0"], "expected K/N with 0 <= K < N"),
    "examples past the rows": (
        [*R, "--examples", "10:20"],
        "--examples 10:20: the inputs hold 6 sequences (rows 0 to 5)",
    ),
    "examples stop past the rows": (
        [*R, "--examples", "0:7"],
        "--examples 0:7: the inputs hold 6 sequences",
    ),
    "examples not a range": ([*R, "--examples", "a:b"], "examples"),
    "steps not a range": ([*R, "--steps", "x"], "steps"),
    "no such gate": ([*R, "--gates", "q"], "q"),
    "no such cell": ([*R, "--cells", "nope/*"], "nope/*"),
    "no such value column": ([*R, "--values", "logits"], "logits"),
    "overwrite and resume": (
        [*R, "--overwrite", "--resume"],
        "--overwrite starts again and --resume continues: pass one of them",
    ),
    "overwrite with shards": (
        [*R, "--overwrite", "--shard", "0/2"],
        "--overwrite with --shard 0/2: it would replace the folder",
    ),
    # the model
    "no such model": (
        ["inspect", "{d}/nowhere.ckpt"],
        "model not found: {d}/nowhere.ckpt does not exist",
    ),
    "a folder with no model": (["inspect", "{d}/nothing"], "is in no format gatetrace reads"),
    "a text file as model": (["inspect", "{d}/notes.txt"], "is in no format gatetrace reads"),
    "an empty meta graph": (["inspect", "{d}/empty.meta"], ""),
    "a garbage meta graph": (["inspect", "{d}/garbage.meta"], "is not a readable MetaGraphDef"),
    "a garbage frozen graph": (
        ["inspect", "{d}/garbage.pb"],
        "cannot read it as a frozen GraphDef",
    ),
    "a checkpoint file naming a missing checkpoint": (
        ["inspect", "{d}/stale"],
        "its 'checkpoint' file names no checkpoint that exists",
    ),
    "a SavedModel tag it lacks": (
        ["inspect", SM, "--tag", "train"],
        "no meta graph tagged exactly 'train'",
    ),
    "a SavedModel tag set it lacks": (
        ["inspect", SM, "--tag", "serve,gpu"],
        "no meta graph tagged exactly 'serve,gpu'",
    ),
    "a .keras that is not a zip": (
        ["inspect", "{d}/bad.keras"],
        "cannot read it as a Keras .keras file",
    ),
    "a .keras without config": (
        ["inspect", "{d}/noconfig.keras"],
        "the archive has no config.json; it is not a Keras model file",
    ),
    "an .h5 that is not HDF5": (["inspect", "{d}/bad.h5"], "cannot read it as a Keras .h5 file"),
    "weights of a missing model": (
        ["weights", "{d}/nowhere", "--out", "{d}/w.parquet"],
        "model not found",
    ),
    # the feeds
    "feed without =": (
        ["record", M, "--feed", "x", "--out", "{o}"],
        "feed 'x': expected NAME=FILE.npy or NAME=VALUE",
    ),
    "feed with empty value": (
        ["record", M, "--feed", "x=", "--out", "{o}"],
        "feed 'x=': expected NAME=FILE.npy or NAME=VALUE",
    ),
    "feed with empty name": (
        ["record", M, "--feed", "={d}/x.npy", "--out", "{o}"],
        "expected NAME=FILE.npy or NAME=VALUE",
    ),
    "feed of a word": (
        ["record", M, "--feed", "x=abc", "--out", "{o}"],
        "'abc' is neither a .npy/.npz/.parquet file nor a number",
    ),
    "feed of a text file": (
        ["record", M, "--feed", "x={d}/notes.txt", "--out", "{o}"],
        "is neither a .npy/.npz/.parquet file",
    ),
    "feed of a missing file": (
        ["record", M, "--feed", "x={d}/missing.npy", "--out", "{o}"],
        "feed x: no such file",
    ),
    # a FIFO or a device: said what it is (was: "no such file"), never opened
    "feed of a FIFO": (
        ["record", M, "--feed", "x={d}/fifo.npy", "--out", "{o}"],
        "feed x: {d}/fifo.npy is a FIFO, not a regular file: gatetrace reads its inputs from regular files",
    ),
    "lengths of a FIFO": (
        ["record", M, "--feed", "x={d}/x.npy", "--lengths", "{d}/fifo.npy", "--out", "{o}"],
        "--lengths: {d}/fifo.npy is a FIFO, not a regular file",
    ),
    "feed of a device": (
        ["record", M, "--feed", "x=/dev/null", "--out", "{o}"],
        "feed x: /dev/null is a character device, not a regular file: gatetrace reads its inputs",
    ),
    "unknown feed name": (
        ["record", M, "--feed", "nope={d}/x.npy", "--out", "{o}"],
        "unknown feed 'nope': {d}/ckpt/model.ckpt has no op named nope; its placeholders are x",
    ),
    "feed of another tensor's shape": (
        ["record", M, "--feed", "unstack={d}/x.npy", "--out", "{o}"],
        "tensor (Unpack output) unstack:0 expects shape [None, 4]",
    ),
    "no feed at all": (
        ["record", M, "--out", "{o}"],
        "placeholder x (float32, shape [None, 5, 4]) must be fed: add --feed x=FILE.npy",
    ),
    "feed of the wrong width": (
        ["record", M, "--feed", "x={d}/wide.npy", "--out", "{o}"],
        "expects shape [None, 5, 4], given [6, 5, 3]",
    ),
    "feed of the wrong rank": (
        ["record", M, "--feed", "x={d}/flat.npy", "--out", "{o}"],
        "expects shape [None, 5, 4], given [6, 20]",
    ),
    "feed of the wrong dtype": (
        ["record", M, "--feed", "x={d}/complex.npy", "--out", "{o}"],
        "expects float32, given complex64",
    ),
    "feed of a scalar for a sequence": (
        ["record", M, "--feed", "x=1.5", "--out", "{o}"],
        "expects shape [None, 5, 4]",
    ),
    "feed of a 0-d .npy for a sequence": (
        ["record", M, "--feed", "x={d}/scalar.npy", "--out", "{o}"],
        "expects shape [None, 5, 4]",
    ),
    "feed of Python objects": (
        ["record", M, "--feed", "x={d}/objects.npy", "--out", "{o}"],
        "holds Python objects; give a numeric array",
    ),
    "feed in Fortran order": (
        ["record", M, "--feed", "x={d}/fortran.npy", "--out", "{o}"],
        "is stored in Fortran order",
    ),
    "feed truncated": (
        ["record", M, "--feed", "x={d}/truncated.npy", "--out", "{o}"],
        "is shorter than its header says: [6, 5, 4] of float32 needs 480 bytes",
    ),
    "feed not an npy": (
        ["record", M, "--feed", "x={d}/garbage.npy", "--out", "{o}"],
        "garbage.npy",
    ),
    "feed with an absurd header": (
        ["record", M, "--feed", "x={d}/huge.npy", "--out", "{o}"],
        "huge.npy",
    ),
    "feed with a negative shape": (
        ["record", M, "--feed", "x={d}/negative.npy", "--out", "{o}"],
        "negative.npy",
    ),
    "npz with two arrays, none named": (
        ["record", M, "--feed", "x={d}/two.npz", "--out", "{o}"],
        "holds 2 arrays (a, b); name one",
    ),
    "npz member it lacks": (
        ["record", M, "--feed", "x={d}/two.npz:c", "--out", "{o}"],
        "has no array 'c'; it holds a, b",
    ),
    "npz that is not a zip": (
        ["record", M, "--feed", "x={d}/broken.npz", "--out", "{o}"],
        "feed x: cannot read {d}/broken.npz as a .npz file",
    ),
    "npy given a member": (
        ["record", M, "--feed", "x={d}/x.npy:a", "--out", "{o}"],
        "x.npy:a' is neither a .npy/.npz/.parquet file nor a number",
    ),
    "parquet column it lacks": (
        ["record", M, "--feed", "x={d}/other.parquet:x", "--out", "{o}"],
        "has no column 'x'; it holds y",
    ),
    "parquet with no rows": (
        ["record", M, "--feed", "x={d}/empty.parquet", "--out", "{o}"],
        "empty.parquet:x holds no rows; an empty Parquet file cannot tell the shape",
    ),
    "npz damaged inside": (
        ["record", M, "--feed", "x={d}/corrupt.npz", "--out", "{o}"],
        # found before the first batch: the digest of the inputs the manifest keeps reads them all
        "feed x: cannot read rows 0:600 of {d}/corrupt.npz: Bad CRC-32 for file 'x.npy'; the file is damaged",
    ),
    "one placeholder fed twice": (
        ["record", M, "--feed", X, "--feed", "x:0={d}/x7.npy", "--out", "{o}"],
        "feed x:0={d}/x7.npy feeds the same input as x={d}/x.npy: feed each input once",
    ),
    "lengths of the wrong shape": (
        [*R, "--lengths", "{d}/lengths_bad.npy"],
        "lengths: expected 6 non-negative integers, one per sequence; given shape [1, 2]",
    ),
    "negative lengths": (
        [*R, "--lengths", "{d}/lengths_negative.npy"],
        "lengths: expected 6 non-negative integers",
    ),
    "lengths as floats": ([*R, "--lengths", "{d}/lengths_float.npy"], "given shape [6] of float32"),
    "lengths file missing": ([*R, "--lengths", "{d}/nope.npy"], "no such file"),
    "no sequences for a fixed batch": (
        ["record", "{d}/fixed/ckpt/model.ckpt", "--feed", "x={d}/none.npy", "--out", "{o}"],
        "feed x:0: the input holds no sequences, and the graph's placeholders take batches of exactly 2: feed at least one sequence",
    ),
    "a checkpoint without the cell's weights": (
        ["record", "{d}/partial/model.ckpt", "--feed", X, "--out", "{o}"],
        "holds no value: the checkpoint has none for it",
    ),
    "an integer float32 cannot hold": (
        ["record", M, "--feed", "x={d}/big.npy", "--out", "{o}"],
        "feed x:0: row 0 holds the integer 16,777,217, which float32 (the placeholder's type) cannot hold exactly",
    ),
    # flags a newcomer mistypes
    "--feeds for --feed": (
        ["record", M, "--feeds", X, "--out", "{o}"],
        "unrecognized arguments: --feeds x={d}/x.npy (did you mean --feed?)",
    ),
    "--feed NAME FILE": (
        ["record", M, "--feed", "x", "{d}/x.npy", "--out", "{o}"],
        "(--feed takes NAME=FILE as one word: --feed x={d}/x.npy)",
    ),
    "--gate for --gates": (
        [*R, "--gate", "i"],
        "unrecognized arguments: --gate i (did you mean --gates?)",
    ),
    # the output
    "weights out with a trailing slash": (
        ["weights", M, "--out", "{d}/wdir/"],
        "--out {d}/wdir/ names a folder; give a file path, e.g. {d}/wdir/weights.parquet",
    ),
    "out is a file": (
        [*R[:-1], "{d}/afile"],
        "--out {d}/afile exists and is a file; give a folder path",
    ),
    "out inside a file": (
        [*R[:-1], "{d}/afile/out"],
        "cannot create {d}/afile/out: Not a directory",
    ),
    "out not empty": (
        [*R[:-1], "{d}/mine"],
        "--out {d}/mine holds what gatetrace did not write (keep.txt); choose another path",
    ),
    "overwrite a user's folder": (
        [*R[:-1], "{d}/mine", "--overwrite"],
        "holds what gatetrace did not write (keep.txt)",
    ),
    "weights out is a folder": (
        ["weights", M, "--out", "{d}/mine"],
        "--out {d}/mine is a folder; give a file path",
    ),
    "weights overwrite a user's file": (
        ["weights", M, "--out", "{d}/notes.txt", "--overwrite"],
        "holds what gatetrace did not write (notes.txt, not a gatetrace Parquet file)",
    ),
    "weights out exists": (
        ["weights", M, "--out", "{d}/notes.txt"],
        "--out {d}/notes.txt holds what gatetrace did not write (notes.txt, not a gatetrace Parquet file); --overwrite replaces only",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_clear_line(disk, tmp_path, capsys, case):
    argv, expected = CASES[case]
    out = tmp_path / "out"
    fill = {"d": str(disk), "o": str(out)}
    argv = [a.format(**fill) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gatetrace"), err
    assert "Traceback" not in err and "ERROR:tensorflow" not in err and "usage:" not in err
    assert expected.format(**fill) in err
    assert not out.exists()  # nothing a rerun would refuse


def test_the_catalogue_is_large():
    assert len(CASES) >= 75


def test_an_object_store_that_cannot_be_reached_is_named_with_its_endpoint(
    disk, tmp_path, capsys, monkeypatch
):
    """Nothing listens at the endpoint: not "no such file", but that the store could not be reached, and where."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert (
        main(
            [
                "record",
                M.format(d=disk),
                "--feed",
                "x=s3://bkt/x.npy",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "feed x: cannot reach bkt/x.npy in object storage at http://127.0.0.1:9 (AWS_ENDPOINT_URL)"
        in err
    )
    assert not (tmp_path / "out").exists()
