"""The memory budget: the batch size is lowered so that the process stays within --memory."""

from __future__ import annotations

import numpy as np
import pytest

from recorders.errors import SelectionError
from tests.conftest import R, build, save
from tracer._tf import tf, v1
from tracer.cli import main
from tracer.run.budget import COPIES, RESERVE, choose_batch, parse_size


@pytest.mark.parametrize(
    "text, size",
    [
        ("2G", 2 * 2**30),
        ("500M", 500 * 2**20),
        ("1.5GB", int(1.5 * 2**30)),
        ("800k", 800 * 2**10),
        ("4096", 4096),
    ],
)
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "-1G", "0", "2Q"])
def test_bad_sizes(text):
    with pytest.raises(SelectionError, match="expected a size such as 2G, 500M or 1.5GB"):
        parse_size(text)


USED = 500 * 2**20  # what the process is taken to hold: the tests fix it, pytest's own RSS varies


@pytest.fixture
def held(monkeypatch):
    """The process holds USED bytes and the machine has 24 GiB available, whatever they are."""
    import tracer.run.budget

    monkeypatch.setattr(tracer.run.budget, "current_rss", lambda: USED)
    monkeypatch.setattr(tracer.run.budget, "available_memory", lambda: 24 * 2**30)
    return tracer.run.budget


def test_choose_batch_keeps_the_process_within_the_budget(held):
    mb = 2**20
    assert choose_batch(256, mb, memory=USED + RESERVE + 10 * mb).size == 10
    assert choose_batch(256, mb, memory=2**40).size == 256
    # the default: what is held plus 512 MB, of which the reserve is 312 MB
    default = choose_batch(256, 3 * mb)
    assert (default.budget, default.used, default.size) == (USED + 512 * mb, USED, 66)
    # the default budget never refuses: one sequence at a time
    assert choose_batch(256, 2**30).size == 1
    assert choose_batch(256, mb, memory=USED + RESERVE + 10 * mb).why == (
        "batch size 256 lowered to 10 to keep the process within the memory budget of 822.0 MB (TensorFlow and the model "
        "hold 500.0 MB; about 1.0 MB per sequence); set it with --memory"
    )
    with pytest.raises(SelectionError) as err:
        choose_batch(256, mb, memory=600 * mb)
    assert str(err.value) == (
        "--memory 600.0 MB: TensorFlow and the model already hold 500.0 MB, and recording one sequence at a time needs "
        "about 313.0 MB more; give at least --memory 813.0MB"
    )


def test_the_parts_grow_with_the_batch_up_to_a_row_group_a_thread(held):
    """With `--values ...,contributions` each writer thread holds the parts of the examples it
    writes, of no more than the batch and at most a row group: 1 MB a sequence up to 10 MB here,
    beside 1 MB a sequence of values."""
    from tracer.run.budget import PartsHold

    mb = 2**20
    parts = PartsHold(per_sequence=mb, most=10 * mb)
    # below the most: 2 MB a sequence, 5 sequences in 10 MB
    small = choose_batch(256, mb, memory=USED + RESERVE + 10 * mb, parts=parts)
    assert (small.size, small.reserve) == (5, RESERVE + 5 * mb)
    # past it: the parts' 10 MB, then 1 MB a sequence: 20 in 30 MB (15 if they grew on)
    large = choose_batch(256, mb, memory=USED + RESERVE + 30 * mb, parts=parts)
    assert (large.size, large.reserve) == (20, RESERVE + 10 * mb)
    with pytest.raises(SelectionError) as err:
        choose_batch(256, mb, memory=USED + RESERVE + mb, parts=parts)
    assert "recording one sequence at a time needs about 314.0 MB more" in str(err.value)


def test_a_small_budget_lowers_the_batch_size(tmp_path, capsys, held):
    steps, features, units = 50, 8, 64

    def body(x):
        return [
            v1.nn.static_rnn(R.BasicLSTMCell(units), tf.unstack(x, axis=1), dtype=tf.float32)[0][-1]
        ]

    model = save(build(body, steps=steps, features=features), "checkpoint", tmp_path)
    xs = np.random.RandomState(0).randn(30, steps, features).astype(np.float32)
    np.save(tmp_path / "x.npy", xs)
    per_sequence = int(COPIES * steps * (4 * units * 2 + 2 * units) * 4) + steps * features * 4
    # 3 copies x 50 steps x (4 gates x 64 units x 2 columns + 2 states x 64) x 4 bytes, + input
    assert per_sequence == 385_600
    budget = USED + RESERVE + 10 * per_sequence + 1000  # room for 10 sequences
    argv = [
        "record",
        model,
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "rec"),
        "--quiet",
        "--memory",
        str(budget),
    ]
    assert main(argv) == 0
    assert (
        "batch size 256 lowered to 10 to keep the process within the memory budget of 815.7 MB (TensorFlow and the model "
        "hold 500.0 MB; about 376.6 KB per sequence); set it with --memory"
    ) in capsys.readouterr().out
    parts = sorted(p.name for p in (tmp_path / "rec" / "gates").glob("cell=*/gate=f/*.parquet"))
    assert parts == [
        "part-0000000000.parquet",
        "part-0000000010.parquet",
        "part-0000000020.parquet",
    ]
    assert main([*argv[:-2], "--out", str(tmp_path / "small"), "--memory", "600M"]) == 2
    assert (
        "give at least --memory 812.4MB" in capsys.readouterr().err
        and not (tmp_path / "small").exists()
    )
    assert main([*argv[:-2], "--memory", "lots"]) == 2
    assert "--memory 'lots': expected a size such as 2G, 500M or 1.5GB" in capsys.readouterr().err


def test_inspect_says_what_the_budget_makes_of_the_batch_size(tmp_path, capsys, held, monkeypatch):
    def body(x):
        return [
            v1.nn.static_rnn(R.BasicLSTMCell(64), tf.unstack(x, axis=1), dtype=tf.float32)[0][-1]
        ]

    model = save(build(body, steps=50, features=8), "checkpoint", tmp_path)
    per_sequence = int(COPIES * 50 * (4 * 64 * 2 + 2 * 64) * 4)  # inputs are not known to inspect
    monkeypatch.setattr(held, "DEFAULT_ROOM", RESERVE + 10 * per_sequence + 1000)
    assert main(["inspect", model]) == 0
    assert (
        "batch size: 256 by default, lowered to 10 to fit the memory budget of 815.7 MB (TensorFlow and the model hold "
        "500.0 MB; about 375.0 KB per sequence, inputs not counted; --memory changes the budget)"
    ) in capsys.readouterr().out
    monkeypatch.setattr(held, "DEFAULT_ROOM", 2**40)
    assert main(["inspect", model]) == 0
    assert (
        "batch size: 256 by default, fits the memory budget of 2.9 GB (TensorFlow and the model hold 500.0 MB;"
        in capsys.readouterr().out
    )


@pytest.mark.parametrize("available", [24 * 2**30, 2 * 2**30, 1 * 2**30])
def test_the_default_budget_never_refuses_what_fits(held, monkeypatch, tmp_path, available):
    """A tenth of the available memory below the reserve (a busy machine, a small container;
    a series holding many checkpoints) left a batch 0 bytes under the default budget, and a
    feed of 80-byte sequences was refused (before: "... more than the memory budget of 757.6
    MB leaves for a batch (0 bytes)"): the default now always holds the reserve and a batch of
    one, and the feed records."""
    from tests.conftest import run_cli

    monkeypatch.setattr(held, "available_memory", lambda: available)
    choice = choose_batch(256, 80)
    assert choice.size >= 1 and choice.budget - choice.used - RESERVE >= 80
    held.check_rows({"x": np.zeros((4, 5, 4), np.float32)}, choice)  # 80 bytes a sequence
    built = build(
        lambda x: [v1.nn.static_rnn(R.BasicLSTMCell(3), tf.unstack(x, axis=1), dtype=tf.float32)]
    )
    path = save(built, "checkpoint", tmp_path)
    np.save(tmp_path / "x.npy", np.zeros((4, 5, 4), np.float32))
    done = run_cli(
        "record", str(path), "--feed", f"x={tmp_path / 'x.npy'}", "--out", str(tmp_path / "out")
    )
    assert done.returncode == 0, done.stderr


def test_a_container_s_limit_bounds_the_available_memory(tmp_path):
    """cgroup v2: memory.max less memory.current; no limit ("max") is none."""
    from tracer.run.budget import _container_room

    (tmp_path / "memory.max").write_text("1073741824\n")
    (tmp_path / "memory.current").write_text("268435456\n")
    assert _container_room(str(tmp_path)) == 768 * 2**20
    (tmp_path / "memory.max").write_text("max\n")
    assert _container_room(str(tmp_path)) is None
    assert _container_room(str(tmp_path / "missing")) is None


def test_the_loops_a_recording_runs_are_made_before_the_budget_measures(tmp_path):
    """`partstats.ready`, called before the budget measures what the process holds, makes and
    runs the footer statistics' and top values' compiled loops for the types a recording gives
    them: recording after it compiles or loads nothing more (loaded at the first row group on a
    writer thread, their 45 MB were not counted, and the benchmark model went past --memory)."""
    from recorders.write import partstats, tops

    partstats.ready()
    made = [set(loop().signatures) for loop in (partstats._loop, tops._loop)]
    assert all(made), made

    def body(x):
        return [v1.nn.static_rnn(R.BasicLSTMCell(4), tf.unstack(x, axis=1), dtype=tf.float32)[0]]

    model = save(build(body, steps=5, features=3), "checkpoint", tmp_path)
    np.save(tmp_path / "x.npy", np.random.RandomState(0).randn(6, 5, 3).astype(np.float32))
    argv = ["record", model, "--feed", f"x={tmp_path / 'x.npy'}", "--out", str(tmp_path / "rec")]
    assert main([*argv, "--quiet", "--batch-size", "4"]) == 0
    assert [set(loop().signatures) for loop in (partstats._loop, tops._loop)] == made
