"""Recording in several processes: `--workers N` (a process pool) and `--engine dask` (a
local Dask cluster), against one process recording the same batches.

Tasks are cut at batch boundaries, so each batch holds the same rows as in one process
and every value must be equal bit for bit. A worker killed mid-job (SIGKILL, as an
out-of-memory kill would) and a job stopped by Ctrl-C and resumed with another worker
count or by hand with `--shard` must give the same recording too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CONFIGS, as_a_shell_starts_it, build, run_cli, save, static_body
from tests.test_resume import assert_same_recording as same_recording
from tracer.cli import main

pytestmark = pytest.mark.e2e

SEQUENCES, STEPS, BATCH = 300, 30, 10


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A 30-step LSTMCell checkpoint, 300 sequences, and one process's recording of them."""
    root = tmp_path_factory.mktemp("parallel")
    path = save(build(static_body(CONFIGS["LSTMCell"]), steps=STEPS), "checkpoint", root)
    x = root / "x.npy"
    np.save(x, np.random.RandomState(1).randn(SEQUENCES, STEPS, 4).astype(np.float32))
    argv = ["record", path, "--feed", f"x={x}", "--quiet", "--batch-size", str(BATCH)]
    assert main([*argv, "--out", str(root / "one")]) == 0
    return argv, root / "one"


def assert_same_recording(out: Path, one: Path) -> None:
    same_recording(out, one, sequences=SEQUENCES)


def gatetrace(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tracer.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        **kw,
    )


def _children(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids += [int(k) for k in (task / "children").read_text().split()]
    return kids


def _committed(out: Path) -> int:
    total = 0
    for p in (out / "_progress").glob("*.json") if (out / "_progress").is_dir() else ():
        try:
            total += sum(b - a for a, b in json.loads(p.read_text())["complete"])
        except (ValueError, KeyError):
            pass
    return total


def _start(argv: list[str], out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tracer.cli", *argv, "--out", str(out), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_a_shell_starts_it,
    )


def _wait_for(condition, proc: subprocess.Popen, limit: float = 300) -> None:
    end = time.time() + limit
    while not condition():
        assert proc.poll() is None, (
            f"the job ended before the moment the test waits for: {proc.communicate()}"
        )
        assert time.time() < end, "the job never reached the moment the test waits for"
        time.sleep(0.05)


def test_a_killed_worker_is_replaced_and_its_task_resumed(job, tmp_path):
    argv, one = job
    out = tmp_path / "killed"
    # 2 tasks of 15 batches, one per worker
    proc = _start(argv, out, "--workers", "2", "--task-size", "15")
    _wait_for(lambda: _committed(out) >= BATCH, proc)
    victims = [
        k for k in _children(proc.pid) if b"spawn_main" in Path(f"/proc/{k}/cmdline").read_bytes()
    ]
    assert len(victims) == 2, "expected the pool's two worker processes"
    os.kill(victims[0], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr
    assert f"recorded 1 cell on {SEQUENCES} sequences in 2 tasks" in stdout
    assert_same_recording(out, one)
    parts = sorted(
        json.loads(p.read_text())["examples"] for p in (out / "_progress").glob("*.json")
    )
    assert parts == [[0, 150], [150, 300]]  # 30 batches of 10, 15 per task


def _running(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, ended but not reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_the_workers_end_when_the_job_is_killed(job, tmp_path):
    """`record --workers 2` killed with SIGKILL (no cleanup runs): its pool's processes end
    with it, busy or idle (before: they went on recording, then waited for tasks forever),
    and the job resumes to the same recording."""
    argv, one = job
    out = tmp_path / "orphans"
    proc = _start(argv, out, "--workers", "2", "--task-size", "15")
    _wait_for(lambda: _committed(out) >= BATCH, proc)
    workers = [
        k for k in _children(proc.pid) if b"spawn_main" in Path(f"/proc/{k}/cmdline").read_bytes()
    ]
    assert len(workers) == 2, "expected the pool's two worker processes"
    proc.kill()
    proc.wait()  # (not its output: the workers hold its pipes while they run)
    end = time.time() + 10
    while any(_running(k) for k in workers) and time.time() < end:
        time.sleep(0.05)
    left = [k for k in workers if _running(k)]
    for k in left:  # (what the test started ends with it)
        os.kill(k, signal.SIGKILL)
    proc.stdout.close()
    proc.stderr.close()
    assert not left, "the workers outlived the job"
    rest = gatetrace(*argv, "--out", str(out), "--resume", "--workers", "2")
    assert rest.returncode == 0, rest.stderr
    assert_same_recording(out, one)


def test_a_killed_dask_worker_is_replaced_and_its_task_resumed(job, tmp_path):
    """A local Dask cluster of two workers, one of them killed: the same recording as one process."""
    pytest.importorskip("distributed", reason='the dask extra: pip install "gatetrace[dask]"')
    argv, one = job
    out = tmp_path / "killed-dask"
    proc = _start(argv, out, "--engine", "dask", "--workers", "2", "--task-size", "15")
    _wait_for(lambda: _committed(out) >= BATCH, proc)
    workers = [
        k for k in _children(proc.pid) if b"spawn_main" in Path(f"/proc/{k}/cmdline").read_bytes()
    ]
    assert len(workers) == 2, "expected the local cluster's two worker processes"
    # its nanny starts a new one; the task runs again and resumes
    os.kill(workers[0], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr
    assert "in 2 tasks" in stdout
    assert_same_recording(out, one)


def test_a_stopped_job_resumes_with_another_worker_count_or_by_hand(job, tmp_path):
    argv, one = job
    out = tmp_path / "stopped"
    proc = _start(argv, out, "--workers", "2", "--task-size", "3")  # 10 tasks
    # stopped at its first batch committed: on two busy cores a later moment left the job
    # time to finish before the signal came (it ended with 0, nothing to resume)
    _wait_for(lambda: _committed(out) >= BATCH, proc)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 130 and "--resume" in stderr, (proc.returncode, stderr)
    assert not (out / "manifest.json").exists() and 0 < _committed(out) < SEQUENCES
    layout = json.loads(next((out / "_progress").glob("*.json")).read_text())["shard"]
    assert layout[1:] == [10, BATCH]
    # one task by hand, cut as the job cut it
    by_hand = run_cli(*argv, "--out", str(out), "--shard", "9/10", "--resume")
    assert by_hand.returncode == 0, by_hand.stderr
    assert "(shard 9/10)" in by_hand.stdout
    rest = gatetrace(*argv, "--out", str(out), "--resume")  # the others, on a pool of one worker
    assert rest.returncode == 0, rest.stderr
    assert "in 10 tasks" in rest.stdout
    assert_same_recording(out, one)


def test_parallel_runs_refuse_what_they_cannot_honour(job, tmp_path, capsys):
    argv, one = job
    for extra, why in (
        (["--shard", "0/2"], "--shard with --workers or --engine: the tasks are shards already"),
        (["--overwrite"], "--overwrite with --workers or --engine: remove the old recording first"),
        (
            ["--engine", "processes", "--scheduler", "tcp://head:8786"],
            "--scheduler and --scheduler-file are for --engine dask",
        ),
    ):
        assert main([*argv, "--out", str(tmp_path / "x"), "--workers", "2", *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and why in err, err
    assert main([*argv, "--out", str(one), "--workers", "2"]) == 2
    assert "already holds a recording; pass --resume" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_job_its_tasks_refuse_says_one_line(job, tmp_path):
    """A job whose tasks refuse a file as they start (lengths below zero) prints the error
    alone, progress shown or not (before: the progress bar's first line came before it)."""
    argv, _ = job
    lengths = tmp_path / "lengths.npy"
    np.save(lengths, np.full(SEQUENCES, -1))
    shown = [a for a in argv if a != "--quiet"]
    refused = gatetrace(
        *shown, "--lengths", str(lengths), "--workers", "2", "--out", str(tmp_path / "o")
    )
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith(
        "gatetrace: error: lengths: expected 300 non-negative integers"
    )


def test_record_parallel_takes_any_executor(job, tmp_path):
    """The Python API on an executor the caller made and owns (here two threads of this process)."""
    from concurrent.futures import ThreadPoolExecutor

    import tracer

    argv, one = job
    job_spec = tracer.Job(
        model=argv[1],
        feeds={"x": argv[3].split("=", 1)[1]},
        out=str(tmp_path / "api"),
        options={"batch_size": BATCH},
    )
    finished = []
    with ThreadPoolExecutor(2) as executor:
        summary = tracer.record_parallel(
            job_spec,
            executor=executor,
            task_size=5,
            progress=lambda n, total: finished.append((n, total)),
            poll=0.05,
        )
        assert executor.submit(abs, -1).result() == 1  # still the caller's, open
    assert (
        summary["complete"]
        and summary["tasks"] == {"count": 6, "task_size": 5}
        and summary["examples"] == SEQUENCES
    )
    # reported as batches commit
    assert finished[0] == (0, SEQUENCES) and sum(n for n, _ in finished) == SEQUENCES
    assert all(total == SEQUENCES and n % BATCH == 0 for n, total in finished)
    assert_same_recording(tmp_path / "api", one)


@pytest.mark.e2e
def test_the_local_dask_cluster_refuses_a_foreign_client():
    """The cluster `--engine dask` starts listens on loopback only and takes only clients
    holding its own credentials: another local user's client cannot run code in its workers."""
    pytest.importorskip("distributed", reason='the dask extra: pip install "gatetrace[dask]"')
    import socket
    import ssl

    from distributed import Client
    from distributed.security import Security

    from tracer.run.parallel import local_cluster

    with local_cluster(1) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tls://127.0.0.1:")
        with Client(cluster) as ours:  # the credentials it was made with work
            assert ours.submit(sum, [1, 2]).result(timeout=60) == 3
        for foreign in (
            {"address": address.replace("tls://", "tcp://")},
            {"address": address, "security": Security.temporary()},
        ):
            # no TLS, or credentials of another cluster
            with pytest.raises((OSError, TimeoutError)):
                Client(**foreign, timeout="3s")
        host, port = address[len("tls://") :].rsplit(":", 1)
        context = ssl.create_default_context()
        # trusts anything, shows no certificate
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with context.wrap_socket(
                socket.create_connection((host, int(port)), timeout=10)
            ) as conn:
                conn.sendall(b"\0" * 64)
                # the server ends the connection of a client without a certificate
                if not conn.recv(1):
                    raise ConnectionResetError("closed")


@pytest.mark.parametrize("error", ["timeout", "memory"])
def test_a_failing_task_suggests_what_resumes_the_job(tmp_path, error):
    """A task of a job (a shard cut at the batch size) whose batch fails says that the job's
    sequences are kept and suggests only what resumes it (before: "the 0 sequences recorded
    before are kept", the task's own count, and a smaller --batch-size, which the job's resume
    refuses: its tasks are cut at the batch size it began with)."""
    from recorders import RecordingWriter, Shard
    from recorders.errors import RunTimeout
    from tracer.run.stopping import failed_batch

    writer = RecordingWriter(
        tmp_path / "out", {"cells": [{"name": "a/b"}]}, shard=Shard(1, 3, 4), examples=(0, 24)
    )
    cause = RunTimeout("the run took too long") if error == "timeout" else MemoryError()
    said = str(failed_batch({"x": np.zeros((4, 3))}, cause, writer))
    writer.abort()
    assert "the sequences the job's tasks recorded are kept" in said and " 0 sequences" not in said
    if error == "timeout":
        assert said.endswith("kept: rerun with a larger --timeout and --resume"), said
    else:
        assert "rerun with fewer --workers and --resume, or record into a new folder" in said, said


def test_a_task_refusing_its_folder_suggests_removing_it(tmp_path):
    """A task of a job refusing the folder it is given (another recording there) suggests
    removing it (before: --overwrite, which --workers refuses)."""
    from recorders import RecordingWriter, Shard
    from recorders.errors import OutputExistsError

    out = tmp_path / "out"
    RecordingWriter(
        out, {"cells": [{"name": "a/b"}]}, shard=Shard(0, 3, 4), examples=(0, 24)
    ).abort()
    with pytest.raises(OutputExistsError) as refused:
        RecordingWriter(
            out, {"cells": [{"name": "c/d"}]}, shard=Shard(1, 3, 4), examples=(0, 24), resume=True
        )
    said = str(refused.value)
    assert said.endswith(f"choose another folder, or remove {out} to record it again"), said


def test_a_job_refusing_a_folder_of_other_files_suggests_another_path(tmp_path):
    """A job's folder holding files gatetrace did not write is refused naming them, suggesting
    another path (before: --overwrite, which --workers refuses)."""
    from recorders.errors import OutputExistsError
    from recorders.write import create_folder

    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(OutputExistsError) as refused:
        create_folder(taken)
    said = str(refused.value)  # (the API names its argument out=, the command line --out)
    assert said.endswith(
        f"{taken}' holds what gatetrace did not write (notes.txt); choose another path"
    )
    assert "overwrite" not in said
    assert create_folder(tmp_path / "another") and (tmp_path / "another").is_dir()


def test_a_job_resumed_with_another_batch_size_says_which(job, tmp_path):
    """A job's task resumed with another --batch-size is refused naming the batch size the
    job began with, in the words of the command line (before: "it is split into 30 shards, not
    15", and out='...' as Python names it); given that batch size, the job completes."""
    from recorders.errors import OutputExistsError
    from recorders.write import create_folder
    from tracer.run.parallel import Job, record_task

    argv, one = job
    out = tmp_path / "out"
    create_folder(out)
    began = Job(
        model=argv[1],
        feeds={"x": argv[3].split("=", 1)[1]},
        out=str(out),
        options={"batch_size": BATCH},
        options_as="command line",
    )
    record_task(began, 0, 2)  # a job stopped after its first task
    with pytest.raises(OutputExistsError) as refused:
        record_task(replace(began, options={"batch_size": 5}), 0, 4)
    assert str(refused.value).startswith(
        f"--out {out} holds another recording (it was recorded in tasks of "
    ), refused.value
    assert f"batches of {BATCH}, this run gives --batch-size 5: give --batch-size {BATCH});" in str(
        refused.value
    )
    record_task(began, 1, 2)  # as it says
    assert_same_recording(out, one)
