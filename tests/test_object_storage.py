"""Inputs in object storage (`s3://...`), read through pyarrow's file systems with ranged
reads, against a real S3-compatible server run by the test (moto's standalone server);
and `--out` in object storage, which is refused in one line rather than written to a local
folder named `s3:`."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyarrow import fs

from tests.conftest import CONFIGS, build, run_cli, save, static_body
from tests.test_resume import tables
from tests.test_tfrecords import write_examples

pytestmark = pytest.mark.e2e
STEPS, FEATURES = 5, 4


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on a free port, a bucket `data`, and the environment that points
    pyarrow (and so gatetrace) at it."""
    pytest.importorskip("moto.server", reason="moto's server: pip install 'moto[server]'")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        endpoint = f"http://127.0.0.1:{port}"
        env = {
            **os.environ,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        store = fs.S3FileSystem(
            endpoint_override=endpoint,
            access_key="test",
            secret_key="test",
            region="us-east-1",
            allow_bucket_creation=True,
        )
        store.create_dir("data")
        yield env, store
    finally:
        server.terminate()
        server.wait(timeout=30)


def put(store, key: str, data: bytes) -> None:
    with store.open_output_stream(key) as f:
        f.write(data)


def parquet_bytes(rows: np.ndarray) -> bytes:
    buffer = pa.BufferOutputStream()
    table = pa.table(
        {"x": pa.array([r.tolist() for r in rows], type=pa.list_(pa.list_(pa.float32())))}
    )
    pq.write_table(table, buffer, row_group_size=3)
    return buffer.getvalue().to_pybytes()


@pytest.fixture
def record(s3, monkeypatch):
    """`gatetrace record ... --quiet` in this process, with the environment pointing at the server
    (spawned workers inherit it)."""
    env, _ = s3
    for key in (
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_DEFAULT_REGION",
    ):
        monkeypatch.setenv(key, env[key])
    return lambda *args: run_cli("record", *args, "--quiet")


def saved_model(tmp_path, kind: str, seed: int) -> tuple[str, np.ndarray]:
    """A checkpoint of one `kind` of cell with random weights, and 13 random input rows saved
    as `tmp_path/x.npy`."""
    rows = np.random.RandomState(seed).randn(13, STEPS, FEATURES).astype(np.float32)
    model = save(
        build(static_body(CONFIGS[kind]), steps=STEPS, features=FEATURES), "checkpoint", tmp_path
    )
    np.save(tmp_path / "x.npy", rows)
    return model, rows


def test_inputs_in_s3_record_the_same_rows_as_local_ones(s3, record, tmp_path):
    env, store = s3
    model, rows = saved_model(tmp_path, "GRUCell", seed=2)
    npy, npz = io.BytesIO(), io.BytesIO()
    np.save(npy, rows)
    np.savez(npz, x=rows, other=np.zeros(2))
    put(store, "data/x.npy", npy.getvalue())
    put(store, "data/x.npz", npz.getvalue())
    put(store, "data/x.parquet", parquet_bytes(rows))
    # a dataset: two files, read in name order
    put(store, "data/set/part-0.parquet", parquet_bytes(rows[:6]))
    put(store, "data/set/part-1.parquet", parquet_bytes(rows[6:]))
    for k, part in enumerate(np.array_split(rows, 2)):  # TFRecord shards, matched by a pattern
        write_examples(tmp_path / f"train-{k}.tfrecord", part, sequence=True)
        put(store, f"data/tf/train-{k}.tfrecord", (tmp_path / f"train-{k}.tfrecord").read_bytes())
    done = record(
        model,
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "local"),
        "--batch-size",
        "4",
    )
    assert done.returncode == 0, done.stderr
    want = tables(tmp_path / "local")
    for name, spec in {
        "npy": "s3://data/x.npy",
        "npz": "s3://data/x.npz:x",
        "parquet": "s3://data/x.parquet:x",
        "dataset": "s3://data/set:x",
        "tfrecord": "s3://data/tf/train-*.tfrecord:x",
    }.items():
        done = record(
            model, "--feed", f"x={spec}", "--out", str(tmp_path / name), "--batch-size", "4"
        )
        assert done.returncode == 0, (name, done.stderr)
        got = tables(tmp_path / name)
        for table in want:
            assert got[table].equals(want[table]), (name, table)
    done = record(
        model,
        "--feed",
        "x=s3://data/x.npy",
        "--out",
        str(tmp_path / "pool"),
        "--batch-size",
        "4",
        "--workers",
        "2",
        "--task-size",
        "1",
    )
    assert done.returncode == 0, done.stderr
    assert "in 4 tasks" in done.stdout
    got = tables(tmp_path / "pool")
    assert all(got[t].equals(want[t]) for t in want)
    missing = record(model, "--feed", "x=s3://data/nothing.npy", "--out", str(tmp_path / "none"))
    assert (
        missing.returncode == 2 and "feed x: no such file s3://data/nothing.npy" in missing.stderr
    )


def s3_tables(store, prefix: str) -> dict[str, pd.DataFrame]:
    """`tables` of a recording in the S3 server (`prefix` is bucket/key)."""
    keys = {
        "gates": ["cell", "gate", "example", "step", "unit"],
        "states": ["cell", "state", "example", "step", "unit"],
    }
    frames = {}
    for table, order in keys.items():
        df = pd.read_parquet(f"{prefix}/{table}", filesystem=store)
        for c in order[:2]:
            df[c] = df[c].astype(str)
        frames[table] = df.sort_values(order, ignore_index=True)
    return frames


def read_json(store, key: str):
    with store.open_input_stream(key) as f:
        return json.loads(f.read())


def test_a_recording_written_to_s3_equals_the_local_one_through_a_crash_and_a_resume(
    s3, record, tmp_path, monkeypatch
):
    """--out s3://...: objects written at their final keys, each batch committed by its
    progress object; a failure midway keeps the committed batches, and a resume with
    another batch size replaces the uncommitted part objects (no row twice)."""
    import recorders.write.rowgroups

    env, store = s3
    store.create_dir("out")
    model, rows = saved_model(tmp_path, "GRUCell", seed=3)
    feed = ["--feed", f"x={tmp_path / 'x.npy'}"]
    assert (
        record(model, *feed, "--out", str(tmp_path / "local"), "--batch-size", "4").returncode == 0
    )
    want = tables(tmp_path / "local")

    done = record(model, *feed, "--out", "s3://out/one", "--batch-size", "4")
    assert done.returncode == 0, done.stderr
    got = s3_tables(store, "out/one")
    assert all(got[t].equals(want[t]) for t in want)
    assert read_json(store, "out/one/manifest.json")["examples"] == 13
    assert read_json(store, "out/one/_progress/shard-0-of-1.json")["complete"] == [[0, 13]]
    assert sorted(i.base_name for i in store.get_file_info(fs_selector("out/one"))) == [
        "_progress",
        "_statistics",
        "gates",
        "manifest.json",
        "states",
        "weights.parquet",
    ]

    write, calls = recorders.write.rowgroups.write_parquet, []

    def fails_at_once(path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:  # the first batch's first file, after the weights
            raise OSError(28, "No space left on device")
        return write(path, *args, **kwargs)

    monkeypatch.setattr(recorders.write.rowgroups, "write_parquet", fails_at_once)
    assert record(model, *feed, "--out", "s3://out/first", "--batch-size", "4").returncode == 2
    monkeypatch.setattr(recorders.write.rowgroups, "write_parquet", write)
    # nothing a rerun would refuse
    assert store.get_file_info(fs_selector("out/first", recursive=True)) == []
    assert record(model, *feed, "--out", "s3://out/first", "--batch-size", "4").returncode == 0
    calls.clear()

    def disk_full_in_the_second_batch(path, *args, **kwargs):
        calls.append(path)
        # the weights, 4 files of the first batch (3 gates, 1 state), then the second's third
        if len(calls) == 8:
            raise OSError(28, "No space left on device")
        return write(path, *args, **kwargs)

    monkeypatch.setattr(recorders.write.rowgroups, "write_parquet", disk_full_in_the_second_batch)
    failed = record(model, *feed, "--out", "s3://out/crash", "--batch-size", "4")
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1, failed.stderr
    assert "No space left on device; the 4 sequences recorded before are kept" in failed.stderr
    monkeypatch.setattr(recorders.write.rowgroups, "write_parquet", write)
    assert read_json(store, "out/crash/_progress/shard-0-of-1.json")["complete"] == [[0, 4]]
    listed = [i.path for i in store.get_file_info(fs_selector("out/crash/gates", recursive=True))]
    # written, not committed: the resume replaces it
    assert any(p.endswith("part-0000000004.parquet") for p in listed)
    assert (
        "already holds a partial recording; pass --resume"
        in record(model, *feed, "--out", "s3://out/crash").stderr
    )
    done = record(model, *feed, "--out", "s3://out/crash", "--batch-size", "3", "--resume")
    assert done.returncode == 0, done.stderr
    got = s3_tables(store, "out/crash")
    # another batch size after the resume: the same rows, values to float32 precision
    for t in want:
        assert len(got[t]) == len(want[t])
        pd.testing.assert_frame_equal(got[t], want[t], check_exact=False, rtol=1e-5, atol=1e-6)
    # resumed once finished, it writes nothing (objects' times are whole seconds: one passes)
    listed = store.get_file_info(fs_selector("out/crash", recursive=True))
    before = {i.path: i.mtime for i in listed if i.type == fs.FileType.File}
    time.sleep(1.1)
    done = record(model, *feed, "--out", "s3://out/crash", "--batch-size", "3", "--resume")
    assert done.returncode == 0, done.stderr
    listed = store.get_file_info(fs_selector("out/crash", recursive=True))
    assert {i.path: i.mtime for i in listed if i.type == fs.FileType.File} == before

    done = record(
        model,
        *feed,
        "--out",
        "s3://out/pool",
        "--batch-size",
        "4",
        "--workers",
        "2",
        "--task-size",
        "1",
    )
    assert done.returncode == 0, done.stderr
    assert "in 4 tasks" in done.stdout
    got = s3_tables(store, "out/pool")
    assert all(got[t].equals(want[t]) for t in want)

    refused = record(model, *feed, "--out", "s3://out/one", "--overwrite")
    assert (
        refused.returncode == 2
        and "object storage cannot swap a new recording in at once" in refused.stderr
    )
    # only what works in object storage is suggested
    again = record(model, *feed, "--out", "s3://out/one")
    assert (
        again.returncode == 2
        and again.stderr.count("\n") == 1
        and "--overwrite" not in again.stderr
    ), again.stderr
    assert (
        "already holds a finished recording; pass --resume to continue it, or remove it first (aws s3 rm --recursive"
        in again.stderr
    )
    # a single file: written locally, then copied
    weights = run_cli("weights", model, "--out", "s3://out/w.parquet")
    assert weights.returncode == 2 and weights.stderr.count("\n") == 1
    assert "(only `gatetrace record --out` writes there)" in weights.stderr


def fs_selector(prefix: str, recursive: bool = False):
    return fs.FileSelector(prefix, recursive=recursive)


def test_a_summary_written_to_s3_by_workers_equals_the_local_one(s3, record, tmp_path):
    """--summary --out s3://...: each task's running totals and the merged tables are objects;
    the tables equal those one local process writes."""
    _, store = s3
    model, rows = saved_model(tmp_path, "BasicLSTMCell", seed=3)
    feed = ["--feed", f"x={tmp_path / 'x.npy'}", "--summary", "--batch-size", "4"]
    done = record(model, *feed, "--out", str(tmp_path / "local"))
    assert done.returncode == 0, done.stderr
    done = record(model, *feed, "--out", "s3://data/summary1", "--workers", "2", "--task-size", "1")
    assert done.returncode == 0, done.stderr
    assert "summarised 1 cell on 13 sequences in 4 tasks" in done.stdout
    for name in ("units", "steps"):
        want = pd.read_parquet(tmp_path / "local" / "summary" / f"{name}.parquet")
        got = pd.read_parquet(f"data/summary1/summary/{name}.parquet", filesystem=store)
        exact = [c for c in want.columns if c not in ("mean", "variance", "m2", "histogram")]
        pd.testing.assert_frame_equal(got[exact], want[exact])
        assert all(
            np.array_equal(a, b) for a, b in zip(got["histogram"], want["histogram"], strict=True)
        )
        np.testing.assert_allclose(got["mean"], want["mean"], rtol=1e-12)
    assert read_json(store, "data/summary1/manifest.json")["kind"] == "summary"
