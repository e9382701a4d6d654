"""Inputs in object storage (`s3://...`), read through pyarrow's file systems with ranged
reads, against a real S3-compatible server run by the test (moto's standalone server);
and `--out` in object storage, which is refused in one line rather than written to a local
folder named `s3:`."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

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
    from pyarrow import fs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        endpoint = f"http://127.0.0.1:{port}"
        env = {**os.environ, "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
               "AWS_DEFAULT_REGION": "us-east-1"}
        store = fs.S3FileSystem(endpoint_override=endpoint, access_key="test", secret_key="test", region="us-east-1",
                                allow_bucket_creation=True)
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
    table = pa.table({"x": pa.array([r.tolist() for r in rows], type=pa.list_(pa.list_(pa.float32())))})
    pq.write_table(table, buffer, row_group_size=3)
    return buffer.getvalue().to_pybytes()


@pytest.fixture
def record(s3, monkeypatch):
    """`gatetrace record ... --quiet` in this process, with the environment pointing at the server
    (spawned workers inherit it)."""
    env, _ = s3
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(key, env[key])
    return lambda *args: run_cli("record", *args, "--quiet")


def test_inputs_in_s3_record_the_same_rows_as_local_ones(s3, record, tmp_path):
    env, store = s3
    rows = np.random.RandomState(2).randn(13, STEPS, FEATURES).astype(np.float32)
    model = save(build(static_body(CONFIGS["GRUCell"]), steps=STEPS, features=FEATURES), "checkpoint", tmp_path)
    np.save(tmp_path / "x.npy", rows)
    npy, npz = io.BytesIO(), io.BytesIO()
    np.save(npy, rows)
    np.savez(npz, x=rows, other=np.zeros(2))
    put(store, "data/x.npy", npy.getvalue())
    put(store, "data/x.npz", npz.getvalue())
    put(store, "data/x.parquet", parquet_bytes(rows))
    put(store, "data/set/part-0.parquet", parquet_bytes(rows[:6]))  # a dataset: two files, read in name order
    put(store, "data/set/part-1.parquet", parquet_bytes(rows[6:]))
    for k, part in enumerate(np.array_split(rows, 2)):  # TFRecord shards, matched by a pattern
        write_examples(tmp_path / f"train-{k}.tfrecord", part, sequence=True)
        put(store, f"data/tf/train-{k}.tfrecord", (tmp_path / f"train-{k}.tfrecord").read_bytes())
    done = record(model, "--feed", f"x={tmp_path / 'x.npy'}", "--out", str(tmp_path / "local"), "--batch-size", "4")
    assert done.returncode == 0, done.stderr
    want = tables(tmp_path / "local")
    for name, spec in {"npy": "s3://data/x.npy", "npz": "s3://data/x.npz:x", "parquet": "s3://data/x.parquet:x",
                       "dataset": "s3://data/set:x", "tfrecord": "s3://data/tf/train-*.tfrecord:x"}.items():
        done = record(model, "--feed", f"x={spec}", "--out", str(tmp_path / name), "--batch-size", "4")
        assert done.returncode == 0, (name, done.stderr)
        got = tables(tmp_path / name)
        for table in want:
            assert got[table].equals(want[table]), (name, table)
    done = record(model, "--feed", "x=s3://data/x.npy", "--out", str(tmp_path / "pool"), "--batch-size", "4", "--workers", "2",
                  "--task-size", "1")
    assert done.returncode == 0, done.stderr
    assert "in 4 tasks" in done.stdout
    got = tables(tmp_path / "pool")
    assert all(got[t].equals(want[t]) for t in want)
    missing = record(model, "--feed", "x=s3://data/nothing.npy", "--out", str(tmp_path / "none"))
    assert missing.returncode == 2 and "feed x: no such file s3://data/nothing.npy" in missing.stderr


def test_an_out_in_object_storage_is_refused_in_one_line(s3, record, tmp_path, monkeypatch):
    env, store = s3
    model = save(build(static_body(CONFIGS["GRUCell"]), steps=STEPS, features=FEATURES), "checkpoint", tmp_path)
    np.save(tmp_path / "x.npy", np.zeros((2, STEPS, FEATURES), np.float32))
    monkeypatch.chdir(tmp_path)
    for extra in ([], ["--workers", "2"]):
        done = record(model, "--feed", f"x={tmp_path / 'x.npy'}", "--out", "s3://data/run1", *extra)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "--out s3://data/run1: gatetrace writes recordings to a folder of a file system, not to s3:// object storage" in done.stderr
        assert not (tmp_path / "s3:").exists()
    assert store.get_file_info("data/run1").type.name == "NotFound"
