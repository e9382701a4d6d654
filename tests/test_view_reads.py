"""What `gatetrace view`'s unit page reads, whatever the number of part files: a sequence from the
files its examples' names point to (`CheckedFiles.overlapping`), a unit's top positions from the
highest activations the part files carry (`recorders.write.tops`, merged into each shard's
statistics file); each answer against pandas reading every row, and the tops against numpy
sorting every value."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from recorders import Recording
from recorders.errors import RecordingError, SelectionError
from recorders.read.analysis import top_positions
from recorders.read.labels import read_labels
from recorders.view import data
from recorders.view.labelled import labelled_course
from recorders.write.partstats import Tally
from recorders.write.progress import Shard
from recorders.write.tops import K, Tops, TopTally
from recorders.write.writer import RecordingWriter
from tests.test_merged import (
    DESCRIPTION,
    STEPS,
    Opened,
    _edited,
    _gate,
    every_footer,
    lengths,
    record,
    values,
)

BATCHES = 40  # of 2 examples: 320 part files


def every_row(run) -> pd.DataFrame:
    """The gates table as pandas reads it: every row of every part file."""
    return pd.read_parquet(run / "gates").astype({"cell": str, "gate": str})


def highest(rows: pd.DataFrame, k: int) -> pd.DataFrame:
    """The k highest activations of some rows, ties the earliest example and step first."""
    ordered = rows.sort_values(["activation", "example", "step"], ascending=[False, True, True])
    return ordered[ordered["activation"].notna()].head(k)


@pytest.mark.parametrize("shards", [1, 3])
def test_the_unit_page_opens_a_few_files_whatever_the_part_files(tmp_path, monkeypatch, shards):
    """A unit opened in the view (its course along a sequence and its top positions, its course
    beside the labels, the sequence's heatmap and a select in it) on a recording of 320 part
    files opens the part file of each gate asked that holds the sequence, and no other: the
    top positions come from each shard's merged statistics file, read for the overview. A
    preactivation's colour scale reads the first 16 files. Each answer is what pandas reading
    every row gives."""
    run = tmp_path / "run"
    for k in range(shards):
        record(run, (0, 2 * BATCHES), 2, Shard(k, shards))
    labels = tmp_path / "labels.npy"
    np.save(labels, (np.arange(2 * BATCHES * STEPS).reshape(-1, STEPS) % 3 == 0))
    rec = Recording(run)
    unit_labels = read_labels(labels, rec.memory)
    data.overview(rec)  # what the page shows first
    example = 2 * BATCHES - 9  # (its length is STEPS)
    with monkeypatch.context() as m:
        opened = Opened(m)
        answers = [
            (cell, gate, unit, data.unit(rec, cell, gate, unit, example))
            for cell, gate, unit in (("lstm", "f", 3), ("lstm", "j", 0), ("rnn", "h", 2))
        ]
        course = labelled_course(rec, unit_labels, "lstm", "gates", "f", "activation", 3, example)
        heatmap = data.heatmap(rec, "lstm", "f", example)
        data.select(rec, "lstm", "f", example, 1, 3, 0.5)
    part_files = {f for f in opened.files if f.rpartition("/")[2].startswith("part-")}
    with monkeypatch.context() as m:  # a preactivation's colour scale: from the first files
        scaled = Opened(m)
        data.scale(rec, "lstm", "f", "gate", "preactivation")
    assert len({f for f in scaled.files if "part-" in f}) == data.SCALE_GROUPS
    assert len(list(run.rglob("part-*.parquet"))) >= BATCHES * 8
    holding = {
        folder: max(p.name for p in (run / "gates" / folder).glob("part-*") if p.name <= own)
        for folder in ("cell=lstm/gate=f", "cell=lstm/gate=j", "cell=rnn/gate=h")
        for own in [f"part-{example:010d}.parquet"]
    }
    assert part_files == {f"gates/{folder}/{name}" for folder, name in holding.items()}
    assert len(opened.files) <= 3 * len(part_files), opened.files  # (a footer, then its rows)
    rows = every_row(run)
    for cell, gate, unit, answer in answers:
        mine = rows[(rows["cell"] == cell) & (rows["gate"] == gate) & (rows["unit"] == unit)]
        along = mine[mine["example"] == example].sort_values("step")
        assert answer["steps"] == along["step"].tolist()
        assert answer["values"] == [round(float(v), 6) for v in along["activation"]]
        top = highest(mine, 10)
        assert answer["top"]["example"] == top["example"].tolist()
        assert answer["top"]["step"] == top["step"].tolist()
        assert answer["top"]["value"] == [round(float(v), 6) for v in top["activation"]]
    mine = rows[(rows["cell"] == "lstm") & (rows["gate"] == "f") & (rows["unit"] == 3)]
    along = mine[mine["example"] == example].sort_values("step")
    assert course["steps"] == heatmap["steps"] == list(range(STEPS))
    assert course["values"] == [round(float(v), 6) for v in along["activation"]]
    assert course["label"] == [float(s % 3 == 0) for s in example * STEPS + np.arange(STEPS)]
    f = rows[(rows["cell"] == "lstm") & (rows["gate"] == "f") & (rows["example"] == example)]
    assert heatmap["values"] == [
        [round(float(v), 6) for v in f[f["step"] == s].sort_values("unit")["activation"]]
        for s in range(STEPS)
    ]


def test_top_positions_read_from_the_values_are_those_the_files_carry(tmp_path, monkeypatch):
    """A recording whose files carry no highest activations (an older gatetrace's) reads the
    unit's values: the same positions, in the same order (ties the earliest first), for every
    k up to K; a larger k, lowest and a range of examples read the values too, as pandas."""
    run = tmp_path / "run"
    record(run, (0, 40), 4)
    rec = Recording(run)
    rows = every_row(run)
    for gate, unit in (("f", 0), ("j", 4)):
        mine = rows[(rows["cell"] == "lstm") & (rows["gate"] == gate) & (rows["unit"] == unit)]
        carried = top_positions(rec, "lstm", gate, unit, k=K)
        with monkeypatch.context() as m:
            m.setattr(Recording, "top_activations", lambda self, cell, gate: None)
            read = top_positions(Recording(run), "lstm", gate, unit, k=K)
        pd.testing.assert_frame_equal(carried, read)
        assert carried["value"].tolist() == highest(mine, K)["activation"].tolist()
        more = top_positions(rec, "lstm", gate, unit, k=K + 5)
        assert more["example"].tolist() == highest(mine, K + 5)["example"].tolist()
        low = top_positions(rec, "lstm", gate, unit, k=3, lowest=True)
        lowest = mine.sort_values(["activation", "example", "step"]).head(3)
        assert low["example"].tolist() == lowest["example"].tolist()


def _tallied(values: np.ndarray, examples: np.ndarray, groups: int) -> Tops:
    """The tops of one file of `values` [examples, steps, units], added `groups` row groups at a
    time, as the writer counts them."""
    tally = Tally(np.arange(values.shape[1]), 0.1, 0.9, examples=examples)
    for rows in np.array_split(np.arange(len(values)), groups):
        tally.add(values[rows], np.ones((len(rows), values.shape[1]), bool))
    tally.footer()
    assert tally.carried_top is not None
    return tally.carried_top


def test_tops_are_numpy_s_and_merge_exactly_in_any_grouping():
    """Files of values with ties (exact 0s and 1s), NaN and infinities: each file's tops are
    numpy's sort of its values (highest first, ties the earliest example and step first, NaN
    left out), and merged in any grouping and order they are the sort of every value, to the
    last bit."""
    rng = np.random.default_rng(0)
    files, parts = [], []
    for start in range(0, 60, 6):
        v = rng.random((6, 7, 5)).astype(np.float32)
        v[rng.random(v.shape) < 0.2] = 1.0
        v[rng.random(v.shape) < 0.1] = 0.0
        v[rng.random(v.shape) < 0.05] = np.nan
        if start == 12:
            v[0, 3, 1], v[2, 2, 2], v[:, :, 4] = np.inf, -np.inf, np.nan
        examples = np.arange(start, start + 6)
        files.append((v, examples))
        parts.append(_tallied(v, examples, groups=1 + start % 3))

    def numpy_s(chosen) -> Tops:
        count, values, examples, steps = [], [], [], []
        for u in range(5):
            v = np.concatenate([f[0][:, :, u].ravel() for f in chosen]).astype(np.float64)
            e = np.concatenate([np.repeat(f[1], 7) for f in chosen])
            s = np.concatenate([np.tile(np.arange(7), len(f[1])) for f in chosen])
            keep = ~np.isnan(v)
            v, e, s = v[keep], e[keep], s[keep]
            order = np.lexsort((s, e, -v))[:K]
            pad = K - len(order)
            count.append(len(order))
            values.append(np.concatenate([v[order], np.full(pad, np.nan)]).astype(np.float32))
            examples.append(np.concatenate([e[order], np.full(pad, -1)]))
            steps.append(np.concatenate([s[order], np.full(pad, -1)]))
        return Tops(K, np.array(count), np.array(values), np.array(examples), np.array(steps))

    for f, p in zip(files, parts, strict=True):
        assert p.equals(numpy_s([f]))
    whole = numpy_s(files)
    assert parts[2].count[4] == 0 and whole.values[1, 0] == np.inf  # all NaN: none; inf first
    assert Tops.merge(parts).equals(whole)
    for seed in range(5):
        order = np.random.default_rng(seed).permutation(len(parts))
        cut = 1 + seed % (len(parts) - 1)
        halves = [
            Tops.merge([parts[i] for i in order[:cut]]),
            Tops.merge([parts[i] for i in order[cut:]]),
        ]
        assert Tops.merge(halves[::-1]).equals(whole)
    assert TopTally(np.arange(7), np.arange(6)).tops() is None  # nothing added: nothing said


def _footer_tops(run, rel: str) -> dict:
    import pyarrow.parquet as pq

    return json.loads(pq.read_metadata(run / rel).metadata[b"gatetrace.top"])


def _rewritten(run, rel: str, edit) -> None:
    """The part file `rel` written again with its footer's tops edited by `edit` (a dict, in
    place), its rows and other metadata as they were."""
    import base64

    import pyarrow.parquet as pq

    path = run / rel
    table = pq.ParquetFile(path).read()
    said = _footer_tops(run, rel)
    raw = bytearray(base64.b64decode(said["arrays"]))
    edit(said, raw)
    said["arrays"] = base64.b64encode(bytes(raw)).decode()
    metadata = dict(pq.read_metadata(path).metadata)
    metadata[b"gatetrace.top"] = json.dumps(said).encode()
    pq.write_table(table.replace_schema_metadata(metadata), path)


def _set(raw: bytearray, dtype: str, at: int, value) -> None:
    item = np.dtype(dtype).itemsize
    raw[at : at + item] = np.array([value], dtype).tobytes()


# the arrays of 5 units, K each: count (8 bytes), values (4), examples (8), steps (4)
_VALUES, _EXAMPLES, _STEPS = 5 * 8, 5 * 8 + 5 * K * 4, 5 * 8 + 5 * K * 12
FOOTER_LIES = {
    "a value beyond the gate's range": (
        lambda s, raw: _set(raw, "<f4", _VALUES, 3.0),
        "its top values hold 3, outside the gate's range, 0 to 1",
    ),
    "a NaN": (lambda s, raw: _set(raw, "<f4", _VALUES, np.nan), "its top values hold a NaN"),
    "an example its name does not leave it": (
        lambda s, raw: _set(raw, "<i8", _EXAMPLES, 10 if raw[_EXAMPLES] == 9 else 9),
        "its top values lie at example 9, outside the 4 to 5 its files hold",
    ),
    "a step beyond the cell's": (
        lambda s, raw: _set(raw, "<i4", _STEPS, STEPS),
        f"its top values lie at step {STEPS}, outside the cell's 0 to {STEPS - 1}",
    ),
    "out of order": (
        lambda s, raw: _set(raw, "<f4", _VALUES + 4, 1.0),
        "its top values are not in order, highest first (or hold one twice)",
    ),
    "more kept than a unit has rows": (
        lambda s, raw: s.update(k=40) or raw.extend(bytes(5 * 30 * 16)) or _set(raw, "<i8", 0, 41),
        "its top values keep 41 values of a unit, more than",
    ),
    "other units": (lambda s, raw: s.update(units=6), "its top values are of 6 units"),
}


@pytest.mark.parametrize("lie", list(FOOTER_LIES))
def test_tops_that_do_not_hold_are_named_in_one_line(tmp_path, lie):
    """A part file's highest activations edited (its rows as they were) are one line naming
    the file before a number is used, read from its footer; the same edit in a merged statistics
    file names that file."""
    run = tmp_path / "run"
    record(run, (0, 12), 2)
    shutil.rmtree(run / "_statistics")
    rel = "gates/cell=lstm/gate=f/part-0000000004.parquet"
    edit, message = FOOTER_LIES[lie]
    _rewritten(run, rel, edit)
    with pytest.raises(RecordingError) as caught:
        data.unit(Recording(run), "lstm", "f", 0, 1)
    line = str(caught.value)
    assert line.startswith(f"{run}/{rel} is not a part file gatetrace wrote (") and "\n" not in line
    assert message in line, line
    merged = tmp_path / "merged"
    record(merged, (0, 12), 2)

    def lied(said: dict) -> None:
        import base64

        top = _gate(said)["top"]
        raw = bytearray(base64.b64decode(top["arrays"]))
        edit(top, raw)
        top["arrays"] = base64.b64encode(bytes(raw)).decode()

    _edited(merged, lied)
    with pytest.raises(RecordingError) as caught:
        rec = Recording(merged)
        # (example 9 lies within the recording's: the footers of the files it covers hold
        # other top values)
        rec.top_activations("lstm", "f")
        rec.check()
    line = str(caught.value)
    assert line.startswith(f"{merged}/_statistics/shard-0-of-1.json is not a statistics file")
    assert message.replace("4 to 5", "0 to 11") in line or "example" in lie, line


def test_check_names_a_merged_file_whose_tops_are_not_its_footers(tmp_path):
    """Gate i's and gate f's highest activations swapped in the merged file (both sigmoid gates
    of 5 units: every check of the file itself holds): `Recording.check` names the file."""
    run = tmp_path / "run"
    record(run, (0, 12), 2)

    def swap(said: dict) -> None:
        i, f = _gate(said, "i"), _gate(said, "f")
        i["top"], f["top"] = f["top"], i["top"]

    _edited(run, swap)
    assert Recording(run).top_activations("lstm", "f") is not None
    with pytest.raises(RecordingError) as caught:
        Recording(run).check()
    assert "its top values of gate" in str(caught.value)
    assert str(caught.value).startswith(f"{run}/_statistics/shard-0-of-1.json is not a statistics")


def test_a_part_file_named_for_other_examples_is_named_in_one_line(tmp_path):
    """A part file renamed (part-4, holding examples 4 and 5, as part-5): read for example 5
    by its name, its footer's examples are not those its name leaves it, one line naming it;
    `check` names it too."""
    run = tmp_path / "run"
    record(run, (0, 12), 2)
    shutil.rmtree(run / "_statistics")
    folder = run / "gates" / "cell=lstm" / "gate=f"
    (folder / "part-0000000004.parquet").rename(folder / "part-0000000005.parquet")
    rel = "gates/cell=lstm/gate=f/part-0000000005.parquet"
    with pytest.raises(RecordingError) as caught:
        data.heatmap(Recording(run), "lstm", "f", 5)
    assert str(caught.value) == (
        f"{run}/{rel} is not a part file gatetrace wrote (row group 0 holds examples 4 to 5; its "
        "name and the next file's leave it examples 5 to 5): it was edited or damaged; ask for the "
        "recording again, or record the model again"
    )
    with pytest.raises(RecordingError, match="part-0000000005.parquet is not a part file"):
        Recording(run).check()


def test_the_writer_refuses_examples_outside_the_batch(tmp_path):
    """Rows of examples outside the batch begun would make its files' names lie: refused in one
    line, nothing written."""
    description = {"cells": [{"name": "a", "gates": ["f"], "states": [], "units": 2, "steps": 3}]}
    with RecordingWriter(tmp_path / "run", description, examples=(0, 2)) as writer:
        writer.begin(0, 2)
        act = np.zeros((2, 3, 2), np.float32)
        with pytest.raises(RecordingError) as caught:
            writer.write_gate("a", "f", np.array([1, 2]), np.arange(3), None, act)
        assert str(caught.value) == (
            "examples 1 to 2 written into the batch 0:2: write each batch's own examples, those "
            "begin(start, stop) gave"
        )
        writer.write_gate("a", "f", np.array([0, 1]), np.arange(3), None, act)
        writer.commit()
    assert every_footer(tmp_path / "run", tmp_path).summary()["rows"]["gates"] == 12


def client(rec: Recording, **options):
    from starlette.testclient import TestClient

    from recorders.view.server import make_app

    return TestClient(make_app(rec, **options), base_url="http://127.0.0.1")


HUGE = 1e37  # float32 holds it; numpy's and pandas' round(6) of a float32 overflow past ~3.4e32


def test_values_past_3e32_are_answered_as_stored(tmp_path):
    """A recording whose values reach 1e37 (float32 holds up to 3.4e38): the unit page's course
    and top positions, of a relu's activation (tops the files carry) and the preactivation (tops
    read from the values), and the heatmap, answer the stored values rounded, finite, as
    pandas reads them from the part files (before: the unit's course and tops were +-inf)."""
    run = tmp_path / "run"
    writer = RecordingWriter(run, DESCRIPTION, examples=(0, 8))
    for start in (0, 4):
        ids = np.arange(start, start + 4)
        writer.begin(start, start + 4)
        for cell in DESCRIPTION["cells"]:
            for gate in cell["gates"]:
                act = values(cell, gate, ids, 0)
                pre = (act - np.float32(0.5)) * np.float32(HUGE)
                if cell["nonlinearities"][gate] == "relu":  # activations of any size
                    act = act * np.float32(HUGE)
                writer.write_gate(cell["name"], gate, ids, np.arange(STEPS), pre, act, lengths(ids))
            for state in cell["states"]:
                shown = values(cell, cell["gates"][0], ids, 1)
                writer.write_state(cell["name"], state, ids, np.arange(STEPS), shown, lengths(ids))
        writer.commit()
    rows = every_row(run)
    app = client(Recording(run))
    example = 5  # its length is STEPS
    for cell, gate, column in (("rnn", "h", "activation"), ("lstm", "f", "preactivation")):
        answer = app.get(
            "/api/unit",
            params={"cell": cell, "gate": gate, "unit": 2, "example": example, "column": column},
        )
        assert answer.status_code == 200, answer.text
        got = answer.json()
        mine = rows[(rows["cell"] == cell) & (rows["gate"] == gate) & (rows["unit"] == 2)]
        along = mine[mine["example"] == example].sort_values("step")
        assert got["values"] == [round(float(v), 6) for v in along[column]]
        top = mine.sort_values([column, "example", "step"], ascending=[False, True, True])
        assert got["top"]["value"] == [round(float(v), 6) for v in top[column].head(10)]
        assert got["top"]["example"] == top["example"].head(10).tolist()
        shown = got["values"] + got["top"]["value"]
        assert all(isinstance(v, float) and np.isfinite(v) for v in shown), shown
        assert max(abs(v) for v in shown) > 1e36
        answer = app.get(
            "/api/heatmap",
            params={"cell": cell, "label": gate, "example": example, "column": column},
        )
        assert answer.status_code == 200, answer.text
        f = rows[(rows["cell"] == cell) & (rows["gate"] == gate) & (rows["example"] == example)]
        assert answer.json()["values"] == [
            [round(float(v), 6) for v in f[f["step"] == s].sort_values("unit")[column]]
            for s in range(STEPS)
        ]


HOLDS = "(the recording holds examples [[0, 40]])"
NOT_RECORDED = {  # (endpoint, parameters): what its 400 says
    "select, an example past the recorded": (
        "/api/select?cell=lstm&label=i&threshold=0.5&example=40&start=0&stop=2",
        f"example 40: no rows of lstm gate i {HOLDS}",
    ),
    "select, an example far past": (
        "/api/select?cell=lstm&label=i&threshold=0.5&example=999&start=0&stop=2",
        f"example 999: no rows of lstm gate i {HOLDS}",
    ),
    "select of a state": (
        "/api/select?cell=lstm&label=c&kind=state&threshold=0.5&example=999&start=0&stop=2",
        f"example 999: no rows of lstm state c {HOLDS}",
    ),
    "select, steps past the example's length": (  # example 3 is 4 steps long
        "/api/select?cell=lstm&label=i&threshold=0.5&example=3&start=4&stop=6",
        "steps 4:6 of example 3: not every step has rows of lstm gate i (the example holds steps 0 to 3)",
    ),
    "select, steps running past the example's length": (
        "/api/select?cell=lstm&label=j&threshold=0.5&example=3&start=2&stop=6&column=preactivation",
        "steps 2:6 of example 3: not every step has rows of lstm gate j (the example holds steps 0 to 3)",
    ),
    "select, steps far past": (  # (nothing as long as the range asked is made)
        "/api/select?cell=lstm&label=i&threshold=0.5&example=3&start=0&stop=1000000000000",
        "steps 0:1000000000000 of example 3: not every step has rows of lstm gate i (the example holds steps 0 to 3)",
    ),
    "unit": (
        "/api/unit?cell=lstm&gate=f&unit=0&example=999999999",
        f"example 999999999: no rows of lstm gate f {HOLDS}",
    ),
    "heatmap": (
        "/api/heatmap?cell=rnn&label=h&kind=state&example=999999999",
        f"example 999999999: no rows of rnn state h {HOLDS}",
    ),
    "labelled": (
        "/api/labelled?cell=lstm&table=gates&name=f&unit=0&example=40",
        f"example 40: no rows of lstm gate f {HOLDS}",
    ),
    "labelled, a state": (
        "/api/labelled?cell=lstm&table=states&name=h&unit=0&example=999",
        f"example 999: no rows of lstm state h {HOLDS}",
    ),
    "match from past the recorded": (  # (from=40: a scan that ended at 39 goes on: nothing)
        "/api/match?cell=lstm&label=f&units=0&threshold=0.5&from=41",
        f"from=41: no example from there {HOLDS}",
    ),
}


@pytest.fixture(scope="module")
def lengthened(tmp_path_factory):
    """A recording of examples [0, 40) whose sequences have lengths (1 to STEPS), its labels."""
    root = tmp_path_factory.mktemp("lengthened")
    record(root / "run", (0, 40), 4)
    np.save(root / "labels.npy", np.arange(40 * STEPS).reshape(-1, STEPS) % 3 == 0)
    return root / "run", root / "labels.npy"


@pytest.mark.parametrize("ask", list(NOT_RECORDED))
def test_an_example_or_steps_not_recorded_are_a_400_naming_what_is_held(lengthened, ask):
    """Every view endpoint taking an example or steps, asked for one the recording does not
    hold (past its examples, past a sequence's length): a 400 whose one-line error says what
    the recording (or the example) holds; never a 500, never an empty 200 (before: select's
    500 IndexError, unit's and match's 200 with nothing, select's and labelled's errors naming
    nothing held)."""
    run, labels = lengthened
    rec = Recording(run)
    path, said = NOT_RECORDED[ask]
    answer = client(rec, unit_labels=read_labels(labels, rec.memory)).get(path)
    assert answer.status_code == 400, answer.text
    assert answer.json() == {"error": said}


def test_a_select_is_pandas_over_the_example_s_rows(lengthened):
    """Select over steps an example holds: the units above the threshold at every step of the
    range (and, with outside, not above it just before and after where recorded), as pandas
    finds them over the part files' rows."""
    run, _ = lengthened
    rec = Recording(run)
    rows = every_row(run)
    for example, start, stop, outside in ((5, 1, 3, False), (5, 2, 4, True), (3, 2, 4, True)):
        for threshold in (0.2, 0.5):
            got = data.select(rec, "lstm", "f", example, start, stop, threshold, outside=outside)
            mine = rows[
                (rows["cell"] == "lstm") & (rows["gate"] == "f") & (rows["example"] == example)
            ]
            wide = mine.pivot(index="step", columns="unit", values="activation").astype(np.float64)
            on = (wide.loc[start : stop - 1] > threshold).all(axis=0)
            if outside:
                for edge in (start - 1, stop):
                    if edge in wide.index:
                        on &= ~(wide.loc[edge] > threshold)
            assert got["units"] == [int(u) for u in on[on].index], (example, start, stop)


def test_parts_of_an_example_or_step_not_recorded_are_a_400_naming_what_is_held(tmp_path):
    """The parts panel (a recording with contributions, of a BasicLSTMCell run by TensorFlow)
    asked for an example past the recorded, or a step past the sequence: a 400 saying what the
    recording, or the example, holds (before: a bare "no rows")."""
    from tests.test_view import CELL, STEPS, N, planted_recording

    app = client(Recording(planted_recording(tmp_path)))
    for params, said in (
        ({"example": 999, "step": 0}, f"example 999: no rows of {CELL} gate f (the recording holds examples [[0, {N}]])"),
        ({"example": 2, "step": 99}, f"steps 99:100 of example 2: not every step has rows of {CELL} gate f (the example holds steps 0 to {STEPS - 1})"),
    ):  # fmt: skip
        answer = app.get("/api/parts", params={"cell": CELL, "gate": "f", **params})
        assert answer.status_code == 400, answer.text
        assert answer.json() == {"error": said}
    answer = app.get("/api/parts", params={"cell": CELL, "gate": "f", "example": 2, "step": 5})
    assert answer.status_code == 200, answer.text


def test_a_select_of_rows_that_begin_past_step_0_reads_each_row_at_its_step(tmp_path):
    """A recording whose sequences have rows from step 2 on (the writer's mask), unit u on (1)
    at step 2 + u only: a select over steps 1:3 is a 400 naming the steps held (step 1 has no
    rows); over steps the example holds, with and without outside, the units pandas finds over
    the rows (before: the first row read was taken for the step asked, step 3's units answered
    for step 2, silently; and steps 2:6, all held, were refused)."""
    run = tmp_path / "run"
    cells = {"cells": [DESCRIPTION["cells"][1]]}  # rnn: one gate (relu), 3 units
    writer = RecordingWriter(run, cells, examples=(0, 4))
    ids = np.arange(4)
    writer.begin(0, 4)
    mask = np.zeros((4, STEPS), bool)
    mask[:, 2:] = True
    act = np.zeros((4, STEPS, 3), np.float32)
    for u in range(3):
        act[:, 2 + u, u] = 1.0
    writer.write_gate("rnn", "h", ids, np.arange(STEPS), act - 1, act, mask)
    writer.write_state("rnn", "h", ids, np.arange(STEPS), act, mask)
    writer.commit()
    rec = Recording(run)
    with pytest.raises(SelectionError) as refused:
        data.select(rec, "rnn", "h", 1, 1, 3, 0.5)
    assert str(refused.value) == (
        "steps 1:3 of example 1: not every step has rows of rnn gate h (the example holds steps 2 to 5)"
    )
    mine = every_row(run)
    mine = mine[mine["example"] == 1]
    wide = mine.pivot(index="step", columns="unit", values="activation").astype(np.float64)
    asked = [(s, s + 1, o, 0.5) for s in range(2, 6) for o in (False, True)]
    for start, stop, outside, threshold in [*asked, (2, 6, False, -0.5), (2, 4, False, 0.5)]:
        got = data.select(rec, "rnn", "h", 1, start, stop, threshold, outside=outside)
        on = (wide.loc[start : stop - 1] > threshold).all(axis=0)
        if outside:
            for edge in (start - 1, stop):
                if edge in wide.index:
                    on &= ~(wide.loc[edge] > threshold)
        assert got["units"] == [int(u) for u in on[on].index], (start, stop, outside)
    assert data.select(rec, "rnn", "h", 1, 2, 3, 0.5)["units"] == [0]
