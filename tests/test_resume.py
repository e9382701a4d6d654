"""Crash safety: kills at many moments, Ctrl-C, --resume, and --shard K/N.

Each check compares against an uninterrupted run of the same command: the final
dataset must be equal row for row.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from recorders import Recording
from recorders.write.partstats import FOOTER_KEY, read
from tests.conftest import CONFIGS, as_a_shell_starts_it, build, save, static_body, tf, v1
from tracer.cli import main

SEQUENCES = 48


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    """A 30-step LSTMCell checkpoint, 48 input sequences, and an uninterrupted recording of them."""
    root = tmp_path_factory.mktemp("long")
    path = save(build(static_body(CONFIGS["LSTMCell"]), steps=30), "checkpoint", root)
    x = root / "x.npy"
    np.save(x, np.random.RandomState(1).randn(SEQUENCES, 30, 4).astype(np.float32))
    argv = ["record", path, "--feed", f"x={x}", "--quiet"]
    assert main([*argv, "--out", str(root / "clean"), "--batch-size", "2"]) == 0
    return argv, root / "clean"


def tables(out: Path) -> dict[str, pd.DataFrame]:
    keys = {
        "gates": ["cell", "gate", "example", "step", "unit"],
        "states": ["cell", "state", "example", "step", "unit"],
    }
    frames = {}
    for table, order in keys.items():
        df = pd.read_parquet(out / table)
        for c in order[:2]:
            df[c] = df[c].astype(str)
        frames[table] = df.sort_values(order, ignore_index=True)
    return frames


def assert_same_recording(
    out: Path, clean: Path, exact: bool = True, sequences: int = SEQUENCES
) -> None:
    """Equal row for row; bit for bit when both ran the same batches (`exact`).

    TensorFlow's matrix products may round differently for another batch size, so
    across batch sizes the values agree to float32 precision.
    """
    got, want = tables(out), tables(clean)
    for table in want:
        pd.testing.assert_frame_equal(
            got[table], want[table], check_exact=exact, rtol=1e-6, atol=1e-6
        )
    manifest, expected = (json.loads((d / "manifest.json").read_text()) for d in (out, clean))
    assert (
        manifest["rows"] == expected["rows"]
        and manifest["examples"] == expected["examples"] == sequences
    )


def complete(out: Path) -> int:
    """Examples the progress file marks complete (0 while it does not exist)."""
    try:
        progress = json.loads((out / "_progress" / "shard-0-of-1.json").read_text())
    except (OSError, ValueError):
        return 0
    return sum(b - a for a, b in progress["complete"])


# `gatetrace` with each batch handed to the writer 50 ms (`pace`) late: every moment the tests wait for
# (a count of batches, a file) then lasts long enough for them to act on it however busy the
# machine is; unpaced, the last batches of this small model take a few milliseconds, and a
# test that looked a little late found the recording finished.
PACED = (
    "import os, sys, time; from tracer.cli import main; saved = os.dup(2); os.dup2(os.open(os.devnull, os.O_WRONLY), 2); "
    # TensorFlow's import logs, as main() hides them
    "import tracer.run.batch as b; os.dup2(saved, 2); hand = b.Values.write; "
    "b.Values.write = lambda *a, **k: (time.sleep({pace}), hand(*a, **k))[1]; summed = b.Statistics.write; "
    "b.Statistics.write = lambda *a, **k: (time.sleep({pace}), summed(*a, **k))[1]; sys.exit(main(sys.argv[1:]))"
)


def start(argv: list[str], pace: float = 0.05) -> subprocess.Popen:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.Popen(
        [sys.executable, "-c", PACED.format(pace=pace), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=as_a_shell_starts_it,
    )


def wait_until(proc: subprocess.Popen, ready, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, (
            f"the recording ended before the moment to interrupt it: {proc.communicate()}"
        )
        assert time.monotonic() < deadline, "timed out waiting for the recording to make progress"
        time.sleep(0.005)


def check_what_a_kill_left(out: Path) -> None:
    """Only complete Parquet files, no manifest, and every complete example fully present."""
    assert not (out / "manifest.json").exists()
    done = complete(out)
    for table in ("gates", "states"):
        files = sorted((out / table).rglob("*.parquet")) if (out / table).exists() else []
        for f in files:
            footer = pq.read_metadata(f)  # raises on a truncated file
            if table == "gates":  # a gate file exists only with its statistics, which add up
                read(footer.metadata[FOOTER_KEY], footer.num_rows)
        if done:
            examples = pd.read_parquet(out / table, columns=["example"])["example"]
            assert set(range(done)) <= set(examples.unique())


@pytest.mark.e2e
def test_killed_at_many_moments_then_resumed_equals_an_uninterrupted_run(long_run, tmp_path):
    argv, clean = long_run
    out = tmp_path / "out"
    run = [*argv, "--out", str(out), "--batch-size", "2"]
    moments = [
        lambda: out.exists(),  # the folder was just created
        lambda: complete(out) >= 2,  # right after the first batch
        # mid-commit
        lambda: (
            any((out / "gates").rglob("part-0000000030.parquet"))
            if (out / "gates").exists()
            else False
        ),
        lambda: complete(out) >= 40,
    ]
    for k, moment in enumerate(moments):
        proc = start(run if k == 0 else [*run, "--resume"])
        wait_until(proc, moment)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        check_what_a_kill_left(out)
    assert complete(out) >= 40
    assert main([*run, "--resume"]) == 0
    assert_same_recording(out, clean)
    assert not list(out.glob(".staging-*"))
    # the statistics the gate files carry count what the uninterrupted run's count
    resumed, whole = Recording(out), Recording(clean)
    for cell in resumed.cells:
        for gate in resumed.gates(cell):
            a, b = (r.activation_statistics(cell, gate) for r in (resumed, whole))
            assert a is not None and b is not None and a.rows == b.rows
            assert np.array_equal(a.count, b.count) and np.array_equal(a.below, b.below)
            np.testing.assert_allclose(a.mean, b.mean, rtol=1e-12)


@pytest.mark.e2e
def test_ctrl_c_stops_after_the_batch_in_flight(long_run, tmp_path):
    argv, clean = long_run
    out = tmp_path / "out"
    run = [*argv, "--out", str(out), "--batch-size", "2"]
    proc = start(run)
    wait_until(proc, lambda: complete(out) >= 4)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    done = complete(out)
    assert stderr.splitlines() == [
        f"gatetrace: interrupted: {done:,} sequences are recorded in {out}; run the same command with --resume to continue"
    ]
    assert 4 <= done < SEQUENCES and stdout == ""
    assert not list(out.glob(".staging-*")) and not (out / "manifest.json").exists()
    assert main([*run, "--resume", "--batch-size", "5"]) == 0  # another batch size is fine
    assert_same_recording(out, clean, exact=False)


@pytest.mark.e2e
def test_a_summary_killed_then_resumed_or_stopped_equals_an_uninterrupted_one(long_run, tmp_path):
    """A summary writes its running totals at most once a second: killed twice, what it left
    holds just the examples its progress file lists (its totals count them, no more), and the
    resumed summary equals an uninterrupted one; stopped by Ctrl-C, the examples it says are
    recorded are those on disk."""
    argv, _ = long_run
    run = [*argv, "--summary", "--batch-size", "2"]
    clean = tmp_path / "clean"
    assert main([*run, "--out", str(clean)]) == 0

    def counted(out: Path) -> int:
        """Sequences the totals file holds (a unit's count over all steps / steps)."""
        files = list((out / "_summary").glob("*.parquet"))
        if not files:
            return 0
        totals = pq.read_table(files[0]).to_pandas()
        return int(totals[totals["axis"] == "unit"]["count"].max()) // 30

    out = tmp_path / "out"
    for k, enough in enumerate((2, 20)):
        proc = start([*run, "--out", str(out), *(["--resume"] if k else [])], pace=0.15)
        wait_until(proc, lambda n=enough: complete(out) >= n)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not (out / "manifest.json").exists()
        assert counted(out) == complete(out) >= enough
    assert main([*run, "--out", str(out), "--resume"]) == 0
    stopped = tmp_path / "stopped"
    proc = start([*run, "--out", str(stopped)], pace=0.15)
    wait_until(proc, lambda: complete(stopped) >= 4)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    done = complete(stopped)
    assert f"interrupted: {done:,} sequences are recorded" in stderr
    assert counted(stopped) == done < SEQUENCES
    assert main([*run, "--out", str(stopped), "--resume"]) == 0
    want = Recording(clean).statistics
    for got in (Recording(out).statistics, Recording(stopped).statistics):
        for axis in ("unit", "step"):
            a, b = got.frame(axis), want.frame(axis)
            pd.testing.assert_frame_equal(
                a.drop(columns="histogram"), b.drop(columns="histogram"), rtol=1e-12
            )
            assert all(
                np.array_equal(p, q) for p, q in zip(a["histogram"], b["histogram"], strict=True)
            )


# `gatetrace` killed (os._exit, as SIGKILL) at a moment of a summary's writing: "totals N", just
# after its N-th running-totals file is written, before the progress file lists what it holds
# (0: the last one, of every example); "manifest", once summary/ is written, before the manifest
KILLED_AT = (
    "import os, sys; import recorders.write.summary as s, recorders.write.writer as w; "
    "s.WRITE_EVERY = 0.0; at, n = sys.argv[1], int(sys.argv[2]); calls = []; write = s.SummaryWriter._write_totals\n"
    "def totals(self):\n"
    "    save = self._save_progress\n"
    "    def dying(finished):\n"
    "        calls.append(1)\n"
    "        if at == 'totals' and (len(calls) == n or (n == 0 and not self.missing())): os._exit(9)\n"
    "        save(finished)\n"
    "    self._save_progress = dying\n"
    "    try: write(self)\n"
    "    finally: del self._save_progress\n"
    "s.SummaryWriter._write_totals = totals\n"
    "if at == 'manifest': w.write_manifest = lambda *a: os._exit(9)\n"
    "from tracer.cli import main; sys.exit(main(sys.argv[3:]))"
)


@pytest.mark.parametrize(
    "moment", [("totals", "2"), ("totals", "0"), ("manifest", "0")], ids="-".join
)
def test_a_summary_killed_between_its_files_resumes_to_an_uninterrupted_one(
    long_run, tmp_path, moment
):
    """A summary killed after its running totals were written but before the progress file
    listed them (between batches, or at the last batch), or while its summary/ files were
    written, resumes to the manifest and statistics of an uninterrupted run, value for value
    (before: a resume that had no batch left to run kept the rows the progress file counted,
    one write behind the totals)."""
    argv, _ = long_run
    run = [*argv, "--summary", "--batch-size", "8"]
    clean, out = tmp_path / "clean", tmp_path / "out"
    assert main([*run, "--out", str(clean)]) == 0
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AT, *moment, *run, "--out", str(out)],
        capture_output=True,
        env=env,
    )
    assert killed.returncode == 9, killed.stderr
    assert not (out / "manifest.json").exists()
    assert main([*run, "--out", str(out), "--resume"]) == 0
    manifest, expected = (json.loads((d / "manifest.json").read_text()) for d in (out, clean))
    assert manifest == expected
    for name in ("units", "steps"):
        got, want = (pd.read_parquet(d / "summary" / f"{name}.parquet") for d in (out, clean))
        pd.testing.assert_frame_equal(
            got.drop(columns="histogram"), want.drop(columns="histogram"), check_exact=True
        )
        assert all(np.array_equal(a, b) for a, b in zip(got.histogram, want.histogram, strict=True))


@pytest.mark.e2e
def test_shards_write_one_dataset_equal_to_a_single_run(long_run, tmp_path, capsys):
    argv, clean = long_run
    out = tmp_path / "out"
    for k in (2, 0, 1):  # in any order
        assert main([*argv, "--out", str(out), "--shard", f"{k}/3", "--batch-size", "2"]) == 0
        printed = capsys.readouterr().out
        assert f"on 16 sequences (shard {k}/3)" in printed
        assert (out / "manifest.json").exists() == (k == 1)
    assert "read it with" in printed
    assert_same_recording(out, clean)
    assert json.loads((out / "manifest.json").read_text())["shards"] == 3


def _files(out: Path) -> dict[str, tuple[int, bytes]]:
    """Every file below `out`: when it was last written, and what it holds."""
    return {
        str(p.relative_to(out)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in out.rglob("*")
        if p.is_file()
    }


@pytest.mark.parametrize(
    "flags",
    [[], ["--summary"], ["--shard", "1/3"]],
    ids=["recording", "summary", "a shard of three"],
)
def test_a_finished_recording_resumed_is_left_as_it_is(long_run, tmp_path, capsys, flags):
    """Resumed with the flags it was recorded with, a finished recording (or shard, the others
    not begun) runs nothing and writes nothing: every file keeps its bytes and its time (before,
    its weights table, progress file and manifest were written again)."""
    argv, _ = long_run
    out = tmp_path / "out"
    given = [*argv, "--out", str(out), "--batch-size", "16", *flags]
    assert main(given) == 0
    before = _files(out)
    assert any(name.endswith(".json") for name in before)
    capsys.readouterr()
    assert main([*given, "--resume"]) == 0
    assert "(0 in this run)" in capsys.readouterr().out
    assert _files(out) == before


def test_shards_with_their_own_batch_sizes(long_run, tmp_path):
    argv, clean = long_run
    out = tmp_path / "out"
    for k, batch_size in ((1, "2"), (0, "7"), (2, "4")):
        assert (
            main([*argv, "--out", str(out), "--shard", f"{k}/3", "--batch-size", batch_size]) == 0
        )
    assert_same_recording(out, clean, exact=False)
    # Each example was written by exactly one shard, in files named by their first example.
    starts = sorted(int(p.stem[5:]) for p in (out / "gates").glob("cell=*/gate=i/part-*.parquet"))
    assert starts == [0, 7, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 36, 40, 44]


def test_a_shard_that_gets_no_sequence_says_what_that_means(long_run, tmp_path, capsys):
    """More shards than sequences (3 of them in 4 shards): the shard whose part is empty is done
    and says so, whether it finishes first or last (before: only "on 0 sequences", and, last,
    "the inputs hold no sequences: the recording is empty" of a recording of 3); the recording
    equals a single run's rows of those sequences."""
    argv, clean = long_run
    said = (
        "shard 0/4 holds none of the 3 sequences: cut into 4 parts, they leave 1 part empty. It is "
        "done, with nothing to record; the other shards {} every sequence (with N at most 3, every "
        "part holds sequences)"
    )
    for order in ((0, 1, 2, 3), (1, 2, 3, 0)):
        out = tmp_path / "".join(map(str, order))
        for k in order:
            shard = ["--examples", "0:3", "--out", str(out), "--shard", f"{k}/4"]
            assert main([*argv, *shard]) == 0
            printed = " ".join(capsys.readouterr().out.split())
            last = k == order[-1]
            assert (said.format("recorded" if last else "record") in printed) == (k == 0), printed
            assert "the inputs hold no sequences" not in printed
            assert ("read it with" in printed) == last, printed
        got, want = tables(out), tables(clean)
        for table in want:
            first = want[table][want[table]["example"] < 3].reset_index(drop=True)
            pd.testing.assert_frame_equal(got[table], first, rtol=1e-6, atol=1e-6)
        assert json.loads((out / "manifest.json").read_text())["examples"] == 3


def test_a_shard_or_a_resume_fed_other_values_is_refused(long_run, tmp_path, capsys):
    """The shards of one recording, and a resumed run, must read the same inputs: one fed a file
    of other values (same shape) is refused in one line, naming the inputs (before: its rows were
    written beside the others', one dataset of two inputs). A progress file written before the
    manifests kept digests of the lengths, scalar feeds and weights is refused: nothing it holds
    tells whether they were the same."""
    argv, _ = long_run
    x = Path(argv[argv.index("--feed") + 1].split("=", 1)[1])
    other = tmp_path / "other.npy"
    changed = np.load(x)
    changed[40, 3, 1] += 0.5
    np.save(other, changed)
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out), "--shard", "0/2"]) == 0
    mixed = [a if a != f"x={x}" else f"x={other}" for a in argv]
    capsys.readouterr()
    assert main([*mixed, "--out", str(out), "--shard", "1/2"]) == 2
    said = capsys.readouterr().err
    assert (
        said.count("\n") == 1
        and "holds another recording (different inputs: it was fed other sequences as x:0: feed x:0 the file it was recorded with)"
        in said
    )
    progress = out / "_progress" / "shard-0-of-2.json"
    kept = progress.read_text()
    older = json.loads(kept)
    for key in ("inputs", "digests"):  # as gatetrace wrote it before
        older["description"].pop(key, None)
    progress.write_text(json.dumps(older))
    assert main([*argv, "--out", str(out), "--shard", "1/2"]) == 2
    said = capsys.readouterr().err
    assert (
        said.count("\n") == 1
        and "its progress file, of an earlier gatetrace, keeps no digests" in said
    )
    progress.write_text(kept)
    assert main([*argv, "--out", str(out), "--shard", "1/2"]) == 0
    assert (out / "manifest.json").exists()


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    """A 5-step LSTMCell checkpoint whose cell reads x * s (s a scalar placeholder), the same
    checkpoint with other weights, 12 sequences, and lengths of 5 steps and of 3 for each."""

    def body(x):
        return static_body(CONFIGS["LSTMCell"])(x * v1.placeholder(tf.float32, [], name="s"))

    root = tmp_path_factory.mktemp("scaled")
    (root / "model").mkdir()
    (root / "retrained").mkdir()
    model = Path(save(build(body), "checkpoint", root / "model"))
    retrained = Path(save(build(body, seed=1), "checkpoint", root / "retrained"))
    np.save(root / "x.npy", np.random.RandomState(2).randn(12, 5, 4).astype(np.float32))
    np.save(root / "five.npy", np.full(12, 5))
    np.save(root / "three.npy", np.full(12, 3))
    return root, model.parent, retrained.parent


def interrupted(argv: list[str], monkeypatch, batches: int = 2) -> int:
    """`gatetrace ARGV` in this process, Ctrl-C pressed while its `batches`-th batch is
    written: it stops once that batch is complete."""
    import tracer.run.batch as b

    write, calls = b.Values.write, []

    def pressing(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == batches:
            signal.raise_signal(signal.SIGINT)
        return write(self, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(b.Values, "write", pressing)
        return main(argv)


# what a resume changes: (the value of s, more arguments, the model's weights) and what the
# refusal says; the first run feeds s=1.0, with 5-step lengths where the change is other lengths
CHANGES = {
    "other lengths": (
        ("1.0", ["--lengths", "three.npy"], "model"),
        "it was recorded with other sequence lengths: give the lengths it was recorded with",
    ),
    "lengths added": (
        ("1.0", ["--lengths", "three.npy"], "model"),
        "it was recorded without sequence lengths: leave them out",
    ),
    "another scalar": (
        ("0.5", [], "model"),
        "it was fed another value of s:0: feed s:0 the value it was recorded with",
    ),
    "other weights": (
        ("1.0", [], "retrained"),
        "its cells' weights differ from this model's: the model changed since it was recorded",
    ),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_resume_that_would_record_other_values_is_refused(
    scaled, tmp_path, monkeypatch, capsys, change
):
    """A resume whose sequence lengths, scalar feed or model weights differ from the run it
    continues is refused in one line, naming what differs, and leaves the folder as it was
    (before: it was accepted, and one recording held 5-step and 3-step sequences, or values
    of s=1.0 and s=0.5, or of two models); resumed as it began, the recording equals an
    uninterrupted run."""
    root, model, retrained = scaled
    (s, more, weights), says = CHANGES[change]
    here = tmp_path / "model"
    shutil.copytree(model, here)

    def command(out: str, s: str = "1.0", more: tuple[str, ...] = ()) -> list[str]:
        lengths = ["--lengths", str(root / "five.npy")] if change == "other lengths" else []
        extra = [str(root / a) if a.endswith(".npy") else a for a in more]
        return [
            *("record", str(here / "model.ckpt"), "--feed", f"x={root / 'x.npy'}"),
            *("--feed", f"s={s}", "--batch-size", "2", "--quiet", "--out", out),
            *(extra or lengths),
        ]

    clean, out = tmp_path / "clean", tmp_path / "out"
    assert main(command(str(clean))) == 0
    assert interrupted(command(str(out)), monkeypatch) == 130
    done = complete(out)
    assert 2 <= done < 12
    capsys.readouterr()
    if weights == "retrained":  # the model retrained since, saved at the same path
        shutil.copytree(retrained, here, dirs_exist_ok=True)
    assert main([*command(str(out), s, tuple(more)), "--resume"]) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and said.startswith("gatetrace: error: ")
    assert f"--out {out} holds another recording ({says}); choose another folder" in said
    assert complete(out) == done and not (out / "manifest.json").exists()
    shutil.copytree(model, here, dirs_exist_ok=True)
    assert main([*command(str(out)), "--resume"]) == 0
    assert_same_recording(out, clean, sequences=12)


def test_the_readme_duckdb_query_reads_the_dataset(long_run):
    """The DuckDB query shown in the README, on a finished recording, agrees with pandas."""
    import duckdb

    _, clean = long_run
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    query = (
        readme.split("```sql\n")[1]
        .split("```")[0]
        .replace("'run1/", f"'{clean}/")
        .replace("rnn/basic_lstm_cell", "rnn/lstm_cell")
    )
    got = duckdb.sql(query).df()
    f = pd.read_parquet(
        clean / "gates", filters=[("cell", "==", "rnn/lstm_cell"), ("gate", "==", "f")]
    )
    want = f.groupby("step")["activation"].agg(["mean", lambda a: (a > 0.9).mean()])
    assert got["step"].tolist() == list(range(30))
    np.testing.assert_allclose(got["forget"], want["mean"], rtol=1e-6)
    np.testing.assert_allclose(got["saturated"], want.iloc[:, 1], rtol=1e-6)


def test_a_resume_with_other_steps_names_them(long_run, tmp_path, capsys):
    """A resume given other --steps than the recording's is refused naming the flag and its
    value (before: "different cells", the cells' steps being what differed first)."""
    argv, clean = long_run
    out = tmp_path / "out"
    shutil.copytree(clean, out)
    capsys.readouterr()
    assert main([*argv, "--out", str(out), "--batch-size", "2", "--steps", "0:3", "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and (
        "holds another recording (it was recorded with no --steps, this run gives --steps 0:3: "
        "leave --steps out)" in err
    ), err
    assert main([*argv, "--out", str(out), "--batch-size", "2", "--resume"]) == 0  # as it says


def test_an_input_refused_midway_suggests_what_records_it_fixed(long_run, tmp_path, capsys):
    """An input refused at a row past the batches recorded (an integer float32 cannot hold)
    suggests recording the fixed input afresh, which works (before: fix it and rerun with
    --resume, which refuses a fixed input as another input)."""
    argv, _ = long_run
    model = argv[1]
    x = np.ones((6, 30, 4), np.int64)
    x[3, 1, 0] = 2**24 + 1
    path, out = tmp_path / "x.npy", tmp_path / "out"
    np.save(path, x)
    run = [
        "record",
        model,
        "--feed",
        f"x={path}",
        "--quiet",
        "--batch-size",
        "1",
        "--out",
        str(out),
    ]
    capsys.readouterr()
    assert main(run) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith(
        "; fix the input, then record it into another folder, or pass --overwrite to record it again "
        "(a recording resumes only on the inputs it began with)\n"
    ), err
    x[3, 1, 0] = 1
    np.save(path, x)
    assert main([*run, "--overwrite"]) == 0  # as it says
    assert json.loads((out / "manifest.json").read_text())["examples"] == 6


def test_lengths_past_the_steps_are_one_line(long_run, tmp_path, capsys):
    """A --lengths value past the sequences' steps (30) is refused in one line naming the
    sequence, before anything is written (before: it was taken, as if the sequence were whole)."""
    argv, _ = long_run
    lengths = tmp_path / "lengths.npy"
    np.save(lengths, np.r_[np.full(SEQUENCES - 1, 30), 31])
    out = tmp_path / "out"
    capsys.readouterr()
    assert main([*argv, "--lengths", str(lengths), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        "gatetrace: error: --lengths: sequence 47 has length 31, but the sequences have 30 steps: give one "
        "length per sequence, each at most 30\n"
    )
    assert not out.exists()
    np.save(lengths, np.full(SEQUENCES, 30))  # as it says
    assert main([*argv, "--lengths", str(lengths), "--out", str(out), "--examples", "0:4"]) == 0
