"""The steps a recording holds for a cell (`Recording.steps`), and what counts on them: every
step of every part file, not the first file's, checked against pandas reading every row.

Recorded with `--lengths` whose first batch holds the short sequences (batches of 2), so that
the first part file of a cell holds fewer steps than the recording: the step count `summary`
and `inspect` give, compare's check that two recordings hold the same steps, whether labels
cover the recording and which input positions they may name, and the heatmap's step axis."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracer
from recorders import Bins, Recording, RecordingWriter, SelectionError, partition_dir
from recorders.read.compare import compare
from recorders.read.labels import positions
from recorders.read.units import unit_scores
from tests.conftest import R, build
from tests.test_merged import Opened
from tracer._tf import tf, v1
from tracer.cli import main
from tracer.run.select import Selection

CELL = "rnn/basic_lstm_cell"
EXAMPLES, STEPS = 6, 5
SHORT_FIRST = np.array([2, 1, 5, 3, 4, 5])  # the first batch of 2 ends at step 1
ALL_SHORT = np.array([2, 1, 3, 3, 1, 2])  # no sequence reaches the model's last 2 steps


@pytest.fixture(scope="module")
def model():
    def body(x):
        outputs, _ = v1.nn.static_rnn(R.BasicLSTMCell(3), tf.unstack(x, axis=1), dtype=tf.float32)
        return [outputs[-1]]

    built = build(body, steps=STEPS)
    x = np.random.RandomState(3).randn(EXAMPLES, STEPS, 4).astype(np.float32)
    return tracer.from_session(built.session), x


RUNS = {
    # name: the options it is recorded with
    "short first": dict(batch_size=2, lengths=SHORT_FIRST),
    "one batch": dict(batch_size=EXAMPLES, lengths=SHORT_FIRST),
    # --steps 2: and a first batch of lengths 2 and 1: its part files hold no row
    "window": dict(batch_size=2, lengths=SHORT_FIRST, selection=Selection(steps=(2, None))),
    "all short": dict(batch_size=2, lengths=ALL_SHORT),
    "first two steps": dict(batch_size=2, selection=Selection(steps=(0, 2))),
    "summary": dict(batch_size=2, lengths=ALL_SHORT, summary=Bins()),
}


@pytest.fixture(scope="module")
def runs(model, tmp_path_factory):
    """Each of `RUNS` recorded, by name: its folder."""
    model, x = model
    root = tmp_path_factory.mktemp("steps")
    out = {}
    for name, options in RUNS.items():
        out[name] = root / name.replace(" ", "_")
        tracer.record(model, {"x": x}, out[name], **options)
    return out


def held(run: Path, table: str, cell: str, label: str) -> list[int]:
    """The steps of every row of a gate's (or state's) part files, as pandas reads them."""
    kind = {"gates": "gate", "states": "state"}[table]
    folder = run / table / partition_dir(cell=cell, **{kind: label})
    files = sorted(folder.glob("part-*.parquet"))
    steps = pd.concat([pd.read_parquet(f, columns=["step"]) for f in files])["step"]
    return sorted(int(s) for s in steps.unique())


@pytest.mark.parametrize("name", ["short first", "one batch", "window", "all short"])
def test_steps_are_every_step_any_part_file_holds(runs, name):
    rec = Recording(runs[name])
    want = held(runs[name], "gates", CELL, "f")
    assert want == held(runs[name], "states", CELL, "h")
    assert rec.steps(CELL).tolist() == want
    (cell,) = rec.summary()["cells"]
    assert cell["steps"] == len(want)


def test_inspect_counts_every_step(runs, capsys):
    assert main(["inspect", str(runs["short first"])]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(CELL))
    assert row.split()[:6] == [CELL, "BasicLSTMCell", "3", "i,j,f,o", "c,h", str(STEPS)]


def test_a_summary_holds_the_steps_with_values(runs):
    """A summary keeps statistics at steps no sequence reached (none counted): not steps it
    holds. The longest sequence is 3 steps."""
    rec = Recording(runs["summary"])
    assert rec.steps(CELL).tolist() == list(range(ALL_SHORT.max()))
    assert rec.steps(CELL).tolist() == held(runs["all short"], "gates", CELL, "f")


def test_compare_lines_up_recordings_whose_first_batches_differ(runs):
    """The same sequences and lengths in batches of 2 and in one: the same steps."""
    a, b = Recording(runs["short first"]), Recording(runs["one batch"])
    found = compare(a, b)
    assert set(found.gates["gate"]) == {"i", "j", "f", "o"}
    assert (found.gates["values"] == (SHORT_FIRST.sum() * 3)).all()
    assert found.gates["max_abs"].max() < 1e-5
    for _, steps in found.steps.groupby("gate"):
        assert steps["step"].tolist() == held(runs["short first"], "gates", CELL, "f")


def test_compare_refuses_other_steps_naming_them(runs):
    """Steps 0 to 4 against the steps 0 and 1 of `--steps 0:2`: the steps, not a sequence."""
    a, b = Recording(runs["short first"]), Recording(runs["first two steps"])
    with pytest.raises(
        SelectionError, match=r"hold steps 0\.\.4 and 0\.\.1: record both with the same --steps"
    ):
        compare(a, b)


def test_labels_short_of_the_steps_held_are_refused(runs):
    """Labels of the first 2 positions do not cover a recording of 5: refused, not scored over
    the positions they reach."""
    rec = Recording(runs["short first"])
    labels = np.random.RandomState(0).randn(EXAMPLES, 2)
    with pytest.raises(
        SelectionError,
        match=r"shape \[6, 2\] does not cover the recording .* steps to 4\): expected at least \[6, 5\]",
    ):
        unit_scores(rec, labels, shuffles=0)


@pytest.mark.parametrize("name", ["short first", "one batch"])
@pytest.mark.parametrize("per", ["position", "sequence"])
def test_labels_at_a_step_before_the_last(runs, name, per):
    """Step 3 is an input position the recording holds (the first batch's sequences end before
    it): labels per position or per sequence, at that step, scored over the examples recorded
    there, as numpy scores pandas' rows."""
    run = runs[name]
    rec = Recording(run)
    assert positions(rec, [CELL]) == max(held(run, "gates", CELL, "f")) + 1 == STEPS
    rng = np.random.RandomState(1)
    labels = rng.randn(EXAMPLES, STEPS) if per == "position" else rng.randn(EXAMPLES)
    got = unit_scores(rec, labels, cells=[CELL], tables=["gates"], step=3, shuffles=0)
    rows = pd.read_parquet(run / "gates" / partition_dir(cell=CELL, gate="f"))
    rows = rows[rows["step"] == 3]
    assert sorted(rows["example"].unique()) == np.flatnonzero(SHORT_FIRST > 3).tolist()
    scored = got[(got["name"] == "f") & (got["column"] == "activation")].set_index("unit")
    assert len(scored) == 3
    for unit, of in rows.groupby("unit"):
        at = labels[of["example"], 3] if per == "position" else labels[of["example"]]
        r = np.corrcoef(of["activation"].astype(np.float64), at)[0, 1]
        assert scored.loc[unit, "n"] == len(of) == 3
        np.testing.assert_allclose(scored.loc[unit, "score"], abs(r), rtol=1e-9)


def test_the_heatmap_s_steps_when_the_first_files_hold_none(runs):
    """`--steps 2:` and a first batch that ends before step 2: the heatmap of example 2 runs
    from step 2 to 4, its values pandas' rows."""
    pytest.importorskip("matplotlib")
    from recorders.read.plots import gate_heatmap

    run = runs["window"]
    fig = gate_heatmap(Recording(run), CELL, "f", 2)
    (image,) = fig.axes[0].images
    assert image.get_extent() == [-0.5, 2.5, 4.5, 1.5]
    rows = pd.read_parquet(run / "gates" / partition_dir(cell=CELL, gate="f"))
    want = rows[rows["example"] == 2].pivot(index="step", columns="unit", values="activation")
    assert want.index.tolist() == [2, 3, 4]
    np.testing.assert_array_equal(image.get_array(), want.to_numpy())


def test_written_steps_with_a_gap_a_cell_without_gates_and_a_gate_without_statistics(
    tmp_path, monkeypatch
):
    """Rows written with lengths and a mask that leaves steps 3 and 5 out of every example: a
    cell of states only, a gate whose part files carry statistics, one of whose does not (a NaN
    activation). Each holds steps 0, 1, 2 and 4, as pandas reads them; a recording whose first
    file holds every step is answered from that file's footer."""
    run = tmp_path / "run"
    cells = [
        {"name": "plain", "gates": [], "states": ["h"], "units": 2, "steps": 6},
        {"name": "counted", "gates": ["f"], "states": [], "units": 2, "steps": 6},
        {"name": "nan", "gates": ["f"], "states": [], "units": 2, "steps": 6},
    ]
    gap = np.array([[1, 1, 0, 0, 1, 0], [1, 0, 0, 0, 0, 0]], bool)
    batches = [((0, 2), np.array([1, 2])), ((2, 4), gap), ((4, 6), np.array([3, 1]))]
    with RecordingWriter(run, {"cells": cells}, examples=(0, 6)) as writer:
        for (start, stop), lengths in batches:
            ids = np.arange(start, stop)
            values = np.random.RandomState(start).rand(2, 6, 2).astype(np.float32)
            writer.begin(start, stop)
            writer.write_state("plain", "h", ids, np.arange(6), values, lengths)
            writer.write_gate("counted", "f", ids, np.arange(6), None, values, lengths)
            if start == 2:
                values = values.copy()
                values[0, 0, 1] = np.nan
            writer.write_gate("nan", "f", ids, np.arange(6), None, values, lengths)
            writer.commit()
    rec = Recording(run)
    assert rec.activation_statistics("counted", "f") is not None
    assert rec.activation_statistics("nan", "f") is None
    for table, cell, label in [
        ("states", "plain", "h"),
        ("gates", "counted", "f"),
        ("gates", "nan", "f"),
    ]:
        assert held(run, table, cell, label) == [0, 1, 2, 4]
        assert rec.steps(cell).tolist() == [0, 1, 2, 4], cell
    # every row of every step: the first file's footer says so, and nothing else is read
    whole = tmp_path / "whole"
    with RecordingWriter(whole, {"cells": cells[:1]}, examples=(0, 6)) as writer:
        for start in (0, 2, 4):
            writer.begin(start, start + 2)
            values = np.ones((2, 6, 2), np.float32)
            writer.write_state("plain", "h", np.arange(start, start + 2), np.arange(6), values)
            writer.commit()
    with monkeypatch.context() as m:
        opened = Opened(m)
        assert Recording(whole).steps("plain").tolist() == list(range(6))
    assert opened.footers == 1
