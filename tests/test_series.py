"""A training run's checkpoints recorded as a series (`gatetrace record DIR --checkpoints ...`):
each key's recording equals a recording of that checkpoint alone; the series is read as one
table with the key as a column; a killed run resumes after its last complete checkpoint; the
cells may not change along a series; a folder without checkpoints gets one line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracer
from recorders import Recording, Series
from recorders.errors import ModelFormatError, RecordingError
from recorders.read.analysis import dead_units_across, saturation, saturation_across
from tests.conftest import run_cli
from tracer._tf import tf, v1

pytestmark = pytest.mark.e2e

STEPS, FEATURES = 6, 3
SEED = 2  # some units shut at checkpoints 2 and 6, none within 5e-3 of its threshold
X = np.random.RandomState(9).randn(10, STEPS, FEATURES).astype(np.float32)


def train_tf1(folder, saves=(2, 4, 6)) -> None:
    """A TF1 script's training loop: a BasicLSTMCell under static_rnn, saved by a Saver at
    the global steps `saves` (model.ckpt-2, -4, -6 and the 'checkpoint' state file)."""
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        x = v1.placeholder(tf.float32, [None, STEPS, FEATURES], name="x")
        y = v1.placeholder(tf.float32, [None], name="y")
        # initialisers seeded here: the graph's seed alone leaves the cell's to tf-keras' own
        # generator, whose state depends on what the process built before (seen: a test
        # order in which no unit was shut)
        with v1.variable_scope("", initializer=v1.glorot_uniform_initializer(seed=SEED)):
            outputs, _ = v1.nn.static_rnn(
                v1.nn.rnn_cell.BasicLSTMCell(4), tf.unstack(x, axis=1), dtype=tf.float32
            )
        dense = v1.glorot_uniform_initializer(seed=SEED + 1)
        logits = tf.squeeze(v1.layers.dense(outputs[-1], 1, kernel_initializer=dense), 1)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
        step = v1.train.get_or_create_global_step()
        train = v1.train.AdamOptimizer(0.05).minimize(loss, global_step=step)
        saver = v1.train.Saver(max_to_keep=10)
        rng = np.random.RandomState(0)
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            for k in range(1, max(saves) + 1):
                session.run(train, {x: rng.randn(16, STEPS, FEATURES), y: rng.randint(0, 2, 16)})
                if k in saves:
                    saver.save(session, str(folder / "model.ckpt"), global_step=step)


def test_a_tf1_run_recorded_checkpoint_by_checkpoint(tmp_path):
    run = tmp_path / "run"
    train_tf1(run)
    np.save(tmp_path / "x.npy", X)
    done = run_cli(
        "record",
        str(run),
        "--checkpoints",
        "all",
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        f"{tmp_path / 'series'}/",
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    assert "recorded 3 of 3 checkpoints (checkpoint 2, 4, 6)" in done.stdout
    # one slash between the folder given with its own and the checkpoint's folder
    assert f"or one: {tmp_path / 'series'}/checkpoint=6\n" in done.stdout
    series = Series(tmp_path / "series")
    assert (series.key, series.values, series.complete) == ("checkpoint", [2, 4, 6], [2, 4, 6])
    shown = run_cli("inspect", str(tmp_path / "series")).stdout
    assert "a gatetrace series of 3 recordings, by checkpoint" in shown
    frame = series.gate_frame(gates=["f"], columns=["activation"])
    assert frame.columns[0] == "checkpoint" and sorted(frame["checkpoint"].unique()) == [2, 4, 6]
    for step in (2, 6):  # each key: what recording that checkpoint alone writes
        with tracer.load_model(run / f"model.ckpt-{step}") as model:
            tracer.record(model, {"x": X}, tmp_path / f"alone{step}")
        alone = Recording(tmp_path / f"alone{step}")
        cell = alone.cells[0]
        for gate in alone.gates(cell):
            np.testing.assert_array_equal(
                series.recording(step).gate_array(cell, gate), alone.gate_array(cell, gate)
            )
    # training moved the gates
    first, last = (series.recording(s).gate_array(cell, "f") for s in (2, 6))
    assert not np.array_equal(first, last)
    sat = saturation_across(series)
    want = saturation(series.recording(4))
    got = sat[sat["checkpoint"] == 4].drop(columns="checkpoint").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want)
    # dead units: from the values themselves, a fraction that some units pass and some do not
    for step in (2, 6):
        values = np.stack([series.recording(step).gate_array(cell, g) for g in "ijfo"])
        rows = np.isfinite(values[0, :, :, 0])
        # below where each gate saturates: 0.1 for the sigmoid gates, -0.9 for the tanh j
        low = np.array([0.1, -0.9, 0.1, 0.1])[:, None, None, None]
        shut = (values < low)[:, rows].mean(axis=1)  # [gate, unit]
        fraction = float(np.quantile(shut[shut > 0], 0.5))
        dead = dead_units_across(series, fraction=fraction)
        dead = dead[dead["checkpoint"] == step]
        gates, units = np.nonzero(shut >= fraction)
        want = {("ijfo"[g], u) for g, u in zip(gates, units, strict=True)}
        got = {
            (g, u)
            for g, u, s in zip(dead["gate"], dead["unit"], dead["state"], strict=True)
            if s == "shut"
        }
        assert got == want and 0 < len(want) < shut.size
        np.testing.assert_allclose(
            sorted(dead.loc[dead["state"] == "shut", "share"]),
            sorted(shut[gates, units]),
            rtol=1e-12,
        )
    for which, values in (("last", [6]), ("every-2", [2, 6]), ("4,2", [2, 4])):
        out = tmp_path / f"pick-{which}"
        done = run_cli(
            "record",
            str(run),
            "--checkpoints",
            which,
            "--feed",
            f"x={tmp_path / 'x.npy'}",
            "--out",
            str(out),
            "--quiet",
            "--summary",
            "--tensorboard",
            str(tmp_path / f"tb-{which}"),
        )
        assert done.returncode == 0, done.stderr
        assert Series(out).complete == values
        assert Series(out).recording(values[0]).kind == "summary"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb-every-2"), size_guidance={"histograms": 0})
    events.Reload()
    assert [e.step for e in events.Scalars(f"gatetrace/{cell}/f/right_saturated")] == [2, 6]
    assert [e.step for e in events.Histograms(f"gatetrace/{cell}/i/activation")] == [2, 6]


def test_a_killed_series_resumes_after_its_last_complete_checkpoint(tmp_path, monkeypatch):
    from tracer.run import series as series_module

    run = tmp_path / "run"
    train_tf1(run)
    real = series_module.record
    calls = []

    def failing(model, feeds, where, **options):
        calls.append(where)
        if len(calls) == 2:
            raise RecordingError("stopped for the test")
        return real(model, feeds, where, **options)

    monkeypatch.setattr(series_module, "record", failing)
    with pytest.raises(RecordingError, match="stopped"):
        tracer.record_series(run, {"x": X}, tmp_path / "s")
    assert Series(tmp_path / "s").complete == [2]
    monkeypatch.setattr(series_module, "record", real)
    again = run_cli(
        "record", str(run), "--checkpoints", "all", "--out", str(tmp_path / "s"), "--quiet"
    )
    assert again.returncode == 2 and "already holds a series; pass --resume" in again.stderr
    done = tracer.record_series(run, {"x": X}, tmp_path / "s", resume=True)
    assert done["recorded"] == [4, 6]  # the complete one is not recorded again
    assert Series(tmp_path / "s").complete == [2, 4, 6]


def keras_run(folder, units=(3, 3, 3)) -> None:
    """Keras 3 files saved per epoch, as ModelCheckpoint('model-{epoch:02d}.keras') names them
    (`units` per epoch: a changed one makes a series whose cells change)."""
    import keras

    folder.mkdir()
    rng = np.random.RandomState(0)
    x, y = rng.randn(32, STEPS, FEATURES).astype(np.float32), rng.randint(0, 2, 32)
    for epoch, n in enumerate(units, 1):
        keras.utils.set_random_seed(epoch)
        inputs = keras.Input((STEPS, FEATURES), name="x")
        model = keras.Model(
            inputs, keras.layers.Dense(1)(keras.layers.LSTM(n, name="lstm")(inputs))
        )
        model.compile("adam", "mse")
        model.fit(x, y, epochs=1, verbose=0)
        model.save(folder / f"model-{epoch:02d}.keras")


def test_keras_files_saved_per_epoch_and_a_series_whose_cells_change(tmp_path):
    keras_run(tmp_path / "run")
    done = tracer.record_series(tmp_path / "run", X, tmp_path / "s", "all")
    assert (done["key"], done["values"]) == ("epoch", [1, 2, 3])
    assert sorted(Series(tmp_path / "s").state_frame()["epoch"].unique()) == [1, 2, 3]
    keras_run(tmp_path / "changed", units=(3, 3, 5))
    with pytest.raises(ModelFormatError, match=r"at epoch 3 cell lstm has units 5, at epoch 1 3"):
        tracer.record_series(tmp_path / "changed", X, tmp_path / "c", "all")
    assert Series(tmp_path / "c").complete == [1, 2]
    assert not (tmp_path / "c" / "epoch=3").exists()


def test_bad_series_get_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    np.save(tmp_path / "x.npy", X)
    done = run_cli(
        "record",
        str(tmp_path / "empty"),
        "--checkpoints",
        "all",
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "o"),
    )
    assert done.returncode == 2 and "holds no checkpoints" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    run = tmp_path / "run"
    train_tf1(run, saves=(1, 2))
    for which, message in (
        ("7", "no checkpoint 7 in the series"),
        ("some", "expected all, last, every-N"),
    ):
        done = run_cli("record", str(run), "--checkpoints", which, "--out", str(tmp_path / "o2"))
        assert done.returncode == 2 and message in done.stderr, done.stderr
    with pytest.raises(RecordingError, match="is not a series of recordings"):
        Series(tmp_path / "empty")


@pytest.mark.parametrize("odd", ["link", "fifo", "zero", "big"])
def test_a_series_folder_reads_only_its_own_files(tmp_path, odd):
    """A key's folder that is a link to another recording, and a series.json that is a FIFO, a
    link to /dev/zero or over 1 MB, are refused in one line, never followed, opened or read whole."""
    import os
    import shutil

    run = tmp_path / "run"
    train_tf1(run, saves=(2, 4))
    tracer.record_series(run, {"x": X}, tmp_path / "s")
    s = tmp_path / "s"
    if odd == "link":
        shutil.copytree(s / "checkpoint=4", tmp_path / "other")
        shutil.rmtree(s / "checkpoint=4")
        (s / "checkpoint=4").symlink_to(tmp_path / "other")
        for read in (
            lambda: Series(s).complete,
            lambda: Series(s).recording(4),
            lambda: saturation_across(Series(s)),
        ):
            with pytest.raises(RecordingError, match=r"checkpoint=4 is a symbolic link to .*other"):
                read()
        return
    (s / "series.json").unlink()
    if odd == "fifo":
        os.mkfifo(s / "series.json")
    elif odd == "zero":
        (s / "series.json").symlink_to("/dev/zero")
    else:
        with open(s / "series.json", "wb") as f:
            f.truncate(1 << 30)  # sparse: 1 GiB of zeros, none on disk
    want = {
        "fifo": "is a FIFO",
        "zero": "is a symbolic link",
        "big": "more than the 1,048,576 bytes",
    }[odd]
    with pytest.raises(RecordingError, match=want):
        Series(s)


def test_a_refused_series_leaves_nothing_behind(tmp_path):
    """A first checkpoint refused, a --tensorboard inside the series or unusable: one line, and
    no series.json that would ask the corrected command for --resume, nor the folder the series
    made (before: left empty); a folder that was there before stays."""
    run = tmp_path / "run"
    train_tf1(run, saves=(2, 4))
    np.save(tmp_path / "x.npy", X)
    base = [
        "record",
        str(run),
        "--checkpoints",
        "all",
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--quiet",
    ]
    inside = run_cli(
        *base, "--out", str(tmp_path / "s"), "--tensorboard", str(tmp_path / "s" / "checkpoint=4")
    )
    assert inside.returncode == 2 and "lies inside --out" in inside.stderr
    (tmp_path / "file").write_text("not a folder")
    unusable = run_cli(*base, "--out", str(tmp_path / "s"), "--tensorboard", str(tmp_path / "file"))
    assert (
        unusable.returncode == 2 and "exists and is a file; give a folder path" in unusable.stderr
    )
    # refused once the first checkpoint is loaded: a feed it has not, a cell it has not
    for wrong in (["--feed", "nothing=1"], [*base[-3:-1], "--cells", "nope"]):
        done = run_cli(*base[:-3], *wrong, "--quiet", "--out", str(tmp_path / "s"))
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "unknown feed 'nothing'" in done.stderr or "--cells nope" in done.stderr
        assert not (tmp_path / "s").exists()
    (tmp_path / "mine").mkdir()
    done = run_cli(*base[:-3], "--feed", "nothing=1", "--quiet", "--out", str(tmp_path / "mine"))
    assert done.returncode == 2 and not list((tmp_path / "mine").iterdir())
    (run / "model.ckpt-2.meta").write_bytes(b"not a graph")
    refused = run_cli(*base, "--out", str(tmp_path / "s"))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert not (tmp_path / "s").exists()
    keras_run(tmp_path / "keras")
    done = run_cli(
        "record",
        str(tmp_path / "keras"),
        "--checkpoints",
        "all",
        "--out",
        str(tmp_path / "s"),
        "--quiet",
        "--feed",
        f"x={tmp_path / 'x.npy'}",
    )
    assert done.returncode == 0, done.stderr


def test_resuming_a_series_whose_key_folder_is_a_link_says_so(tmp_path):
    """--resume over a series whose checkpoint=4 folder was replaced by a link: one line that
    says it is a link and what to do (before: "Not a directory"); the link's target untouched."""
    import shutil

    run = tmp_path / "run"
    train_tf1(run, saves=(2, 4))
    np.save(tmp_path / "x.npy", X)
    args = ("record", str(run), "--checkpoints", "all", "--feed", f"x={tmp_path / 'x.npy'}")
    s = tmp_path / "s"
    assert run_cli(*args, "--out", str(s)).returncode == 0
    shutil.copytree(s / "checkpoint=4", tmp_path / "other")
    shutil.rmtree(s / "checkpoint=4")
    (s / "checkpoint=4").symlink_to(tmp_path / "other")
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "other").rglob("*"))
    done = run_cli(*args, "--out", str(s), "--resume")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"{s / 'checkpoint=4'} is a symbolic link (to {tmp_path / 'other'})" in done.stderr
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "other").rglob("*")) == before


def test_a_series_resumed_with_other_inputs_or_options_is_refused(tmp_path, monkeypatch, capsys):
    """A series killed between checkpoints, resumed with other inputs, other --lengths, other
    --gates or --steps, is refused in one line naming what changed, before anything of the next
    checkpoint is written (before: the next checkpoints were recorded from the new inputs or
    options, beside the first one's); resumed as it began, it completes."""
    from tracer.cli import main
    from tracer.run import series as series_module

    run = tmp_path / "run"
    train_tf1(run)
    np.save(tmp_path / "x.npy", X)
    other = X.copy()
    other[3, 2, 1] += 1.0
    np.save(tmp_path / "other.npy", other)
    np.save(tmp_path / "six.npy", np.full(len(X), STEPS))
    np.save(tmp_path / "three.npy", np.full(len(X), 3))
    out = tmp_path / "s"
    base = ["record", str(run), "--checkpoints", "all", "--quiet", "--out", str(out)]
    began = ["--feed", f"x={tmp_path / 'x.npy'}", "--lengths", str(tmp_path / "six.npy")]
    real, calls = series_module.record, []

    def killed(model, feeds, where, **options):
        calls.append(where)
        if len(calls) == 2:  # as if killed once the first checkpoint was complete
            raise KeyboardInterrupt
        return real(model, feeds, where, **options)

    monkeypatch.setattr(series_module, "record", killed)
    assert main([*base, *began]) == 130
    monkeypatch.setattr(series_module, "record", real)
    assert Series(out).complete == [2] and sorted(p.name for p in out.iterdir()) == [
        "checkpoint=2",
        "series.json",
    ]
    said = f"--out {out} holds a series whose checkpoint 2 was recorded otherwise: "
    changes = {
        "other inputs": (
            ["--feed", f"x={tmp_path / 'other.npy'}", *began[2:]],
            "different inputs: it was fed other sequences as x:0: feed x:0 the file it was recorded with",
        ),
        "other lengths": (
            [*began[:2], "--lengths", str(tmp_path / "three.npy")],
            "it was recorded with other sequence lengths: give the lengths it was recorded with",
        ),
        "no lengths": (
            began[:2],
            "it was recorded with sequence lengths, this run has none: give the lengths it was recorded with",
        ),
        "gates": (
            [*began, "--gates", "i,f"],
            "it was recorded with no --gates, this run gives --gates i,f: leave --gates out",
        ),
        "steps": (
            [*began, "--steps", "0:3"],
            "it was recorded with no --steps, this run gives --steps 0:3: leave --steps out",
        ),
    }
    for change, (argv, why) in changes.items():
        capsys.readouterr()
        assert main([*base, *argv, "--resume"]) == 2, change
        err = capsys.readouterr().err
        assert err == f"gatetrace: error: {said}{why}, or choose another folder\n", change
        assert not (out / "checkpoint=4").exists(), change
    assert main([*base, *began, "--resume"]) == 0
    assert Series(out).complete == [2, 4, 6]


def test_a_series_refused_in_its_first_checkpoint_suggests_what_works(
    tmp_path, monkeypatch, capsys
):
    """A series stopped within its first checkpoint, resumed with other inputs, is refused in
    one line that suggests only what works: another folder, or removing the series (before:
    --overwrite, which --checkpoints refuses); done, the series records."""
    import shutil

    from tests.test_resume import interrupted
    from tracer.cli import main

    run = tmp_path / "run"
    train_tf1(run)
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "other.npy", X + 1.0)
    out = tmp_path / "s"
    base = ["record", str(run), "--checkpoints", "all", "--quiet", "--batch-size", "2"]
    began = [*base, "--feed", f"x={tmp_path / 'x.npy'}", "--out", str(out)]
    assert interrupted(began, monkeypatch) == 130
    assert Series(out).complete == [] and (out / "checkpoint=2" / "_progress").is_dir()
    capsys.readouterr()
    other = [*base, "--feed", f"x={tmp_path / 'other.npy'}", "--out", str(out), "--resume"]
    assert main(other) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--overwrite" not in err, err
    assert err.endswith(f"; choose another folder, or remove the series {out} to record it again\n")
    shutil.rmtree(out)  # as it says
    assert main(other[:-1]) == 0
    assert Series(out).complete == [2, 4, 6]


def test_a_complete_series_resumed_with_other_options_is_refused(tmp_path, capsys):
    """A complete series resumed with other --round-bits, none, other --gates or other inputs
    is refused in one line naming what changed, as a resumed recording is, leaving every file
    as it was (before: every checkpoint was skipped as complete and it said "recorded 0 of 3");
    resumed as it was recorded, it records nothing, says so and leaves every file as it was
    (before, its last checkpoint's weights table, progress file and manifest were written again)."""
    from tracer.cli import main

    run = tmp_path / "run"
    train_tf1(run)
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "other.npy", X + 1.0)
    out = tmp_path / "s"
    base = ["record", str(run), "--checkpoints", "all", "--out", str(out)]
    began = [*base, "--feed", f"x={tmp_path / 'x.npy'}", "--round-bits", "3"]
    assert main(began) == 0
    assert Series(out).complete == [2, 4, 6]

    def files():
        return sorted((str(p), p.stat().st_mtime_ns) for p in out.rglob("*"))

    before = files()
    said = f"--out {out} holds a series whose checkpoint 6 was recorded otherwise: "
    changes = {
        "round bits": (
            [*began[:-1], "4"],
            "it was recorded with --round-bits 3, this run gives --round-bits 4: give --round-bits 3",
        ),
        "no round bits": (
            began[:-2],
            "it was recorded with --round-bits 3, this run gives no --round-bits: give --round-bits 3",
        ),
        "gates": (
            [*began, "--gates", "i,f"],
            "it was recorded with no --gates, this run gives --gates i,f: leave --gates out",
        ),
        "inputs": (
            [*base, "--feed", f"x={tmp_path / 'other.npy'}", *began[-2:]],
            "different inputs: it was fed other sequences as x:0: feed x:0 the file it was recorded with",
        ),
    }
    for change, (argv, why) in changes.items():
        capsys.readouterr()
        assert main([*argv, "--resume"]) == 2, change
        err = capsys.readouterr().err
        assert err == f"gatetrace: error: {said}{why}, or choose another folder\n", change
        assert files() == before, change
    capsys.readouterr()
    assert main([*began, "--resume"]) == 0
    assert "recorded 0 of 3 checkpoints" in capsys.readouterr().out
    assert Series(out).complete == [2, 4, 6]
    # (its folders' times are not: a resume holds its lock file while it checks the recording)
    assert [f for f in files() if Path(f[0]).is_file()] == [
        f for f in before if Path(f[0]).is_file()
    ]
