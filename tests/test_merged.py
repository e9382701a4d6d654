"""Each shard's merged statistics file (`recorders.write.merged`): the overview reads one file a
shard instead of one footer a part file, and answers what merging every footer answers, to the
last bit, whatever happened to the recording (killed and resumed, shards, --overwrite); a merged
file that does not hold is one line naming it."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyarrow import fs

from recorders import Recording
from recorders.errors import RecordingError
from recorders.read.analysis import gate_summaries
from recorders.view.data import overview
from recorders.write import merged
from recorders.write.folder import Folder
from recorders.write.layout import partition_dir
from recorders.write.partstats import FOOTER_KEY, PartStats, Tally, read
from recorders.write.progress import Shard
from recorders.write.writer import RecordingWriter
from tests import test_object_storage, test_resume

s3 = test_object_storage.s3  # the S3 server (moto's) a test writes to
STEPS = 6
# two cells: gates through sigmoid and tanh (saturating), one through relu (not), and states
DESCRIPTION = {
    "cells": [
        {
            "name": "lstm",
            "gates": ["i", "j", "f", "o"],
            "states": ["c", "h"],
            "units": 5,
            "steps": STEPS,
            "nonlinearities": {"i": "sigmoid", "j": "tanh", "f": "sigmoid", "o": "sigmoid"},
        },
        {
            "name": "rnn",
            "gates": ["h"],
            "states": ["h"],
            "units": 3,
            "steps": STEPS,
            "nonlinearities": {"h": "relu"},
        },
    ]
}
SQUASH = {
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0),
}


def values(cell: dict, gate: str, examples: np.ndarray, seed: int) -> np.ndarray:
    """A gate's activations of `examples` [examples, steps, units], the same for an example
    whatever batch it is recorded in (a resumed batch records what the killed one would have)."""
    rows = [
        np.random.default_rng([seed, int(e), sum(map(ord, cell["name"] + gate))]).standard_normal(
            (STEPS, cell["units"])
        )
        * 2
        for e in examples
    ]
    return SQUASH[cell["nonlinearities"][gate]](np.stack(rows)).astype(np.float32)


def lengths(examples: np.ndarray) -> np.ndarray:
    """Each example's length: 1 to STEPS (rows past it are not written)."""
    return 1 + (examples * 7) % STEPS


def killed(writer: RecordingWriter) -> None:
    """What a killed process leaves: the writer stops where it is, nothing more is written (its
    lock and folder let go, as the system does for a process that dies)."""
    writer._pool.shutdown()
    writer._release()


def record(
    run: Path | str,
    examples: tuple[int, int],
    batch: int,
    shard: Shard = Shard(),
    seed: int = 0,
    kill_after: int | None = None,
    **options,
) -> None:
    """Record `examples` (this shard's part of them) in batches of `batch`; killed after
    `kill_after` batches if given."""
    writer = RecordingWriter(run, DESCRIPTION, examples=examples, shard=shard, **options)
    done = 0
    for lo, hi in writer.missing():
        for start in range(lo, hi, batch):
            stop = min(start + batch, hi)
            ids = np.arange(start, stop)
            writer.begin(start, stop)
            for cell in DESCRIPTION["cells"]:
                for gate in cell["gates"]:
                    act = values(cell, gate, ids, seed)
                    writer.write_gate(
                        cell["name"], gate, ids, np.arange(STEPS), act - 1, act, lengths(ids)
                    )
                for state in cell["states"]:
                    writer.write_state(
                        cell["name"],
                        state,
                        ids,
                        np.arange(STEPS),
                        values(cell, cell["gates"][0], ids, seed + 1),
                        lengths(ids),
                    )
            writer.commit()
            done += 1
            if done == kill_after:
                killed(writer)
                return
    writer.close()


class Opened:
    """Counts the files a reader opens (every file below a recording is opened through
    `Folder.open_regular`), and the part files among them."""

    def __init__(self, monkeypatch):
        self.files: list[str] = []
        opening = Folder.open_regular

        def counted(folder, rel):
            self.files.append(rel)
            return opening(folder, rel)

        monkeypatch.setattr(Folder, "open_regular", counted)

    @property
    def footers(self) -> int:
        """The part files opened (one may be opened twice: its footer, then its rows)."""
        return len({f for f in self.files if f.rpartition("/")[2].startswith("part-")})


def every_footer(run: Path, tmp_path: Path) -> Recording:
    """The recording as read from every footer: a copy without its merged statistics files."""
    copy = tmp_path / f"footers-{run.name}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(run, copy)
    shutil.rmtree(copy / "_statistics", ignore_errors=True)
    return Recording(copy)


GATES = sum(len(c["gates"]) for c in DESCRIPTION["cells"])  # part files a batch
STATES = sum(len(c["states"]) for c in DESCRIPTION["cells"])


def assert_as_every_footer(run: Path, tmp_path: Path, monkeypatch, uncovered: int = 0) -> None:
    """Each gate's statistics, its units' highest activations and each table's rows read with
    the merged statistics files are those read from every footer, bit for bit; and what they
    stand for was not opened: the
    footers read are those of the part files of the `uncovered` batches (committed after the
    last merge), and for the rows one more a cell (`Recording.summary` reads its steps from one
    file)."""
    slow = every_footer(run, tmp_path)
    with monkeypatch.context() as m:
        opened = Opened(m)
        fast = Recording(run)
        got = {(c, g): fast.activation_statistics(c, g) for c in fast.cells for g in fast.gates(c)}
        tops = {(c, g): fast.top_activations(c, g) for c, g in got}
        assert opened.footers == uncovered * GATES
        rows = fast.summary()["rows"]
        assert opened.footers <= uncovered * (GATES + STATES) + len(fast.cells)
    assert rows == slow.summary()["rows"]
    for (cell, gate), stats in got.items():
        want = slow.activation_statistics(cell, gate)
        assert stats is not None and want is not None
        assert stats.equals(want), (cell, gate)
        # against numpy over the rows pyarrow reads (the counts, and the means to rounding)
        folder = run / "gates" / partition_dir(cell=cell, gate=gate)
        table = pa.concat_tables(
            pq.read_table(f, columns=["step", "activation"])
            for f in sorted(folder.glob("*.parquet"))
        )
        step = table.column("step").to_numpy()
        act = table.column("activation").to_numpy().astype(np.float64)
        assert stats.count.tolist() == [int((step == s).sum()) for s in stats.steps]
        means = [act[step == s].mean() for s in stats.steps]
        np.testing.assert_allclose(stats.mean, means, rtol=1e-12)
        # each unit's highest activations: every footer's, and numpy's sort of the rows
        high, every = tops[cell, gate], slow.top_activations(cell, gate)
        assert high is not None and every is not None and high.equals(every), (cell, gate)
        rows = pa.concat_tables(
            pq.read_table(f, columns=["example", "step", "unit", "activation"])
            for f in sorted(folder.glob("*.parquet"))
        )
        unit = rows.column("unit").to_numpy()
        for u in range(high.units):
            at = unit == u
            e, s, v = (rows.column(c).to_numpy()[at] for c in ("example", "step", "activation"))
            order = np.lexsort((s, e, -v.astype(np.float64)))[: high.k]
            assert high.examples[u].tolist() == e[order].tolist()
            assert high.steps[u].tolist() == s[order].tolist()
            assert high.values[u].tobytes() == v[order].tobytes()
    Recording(run).check()  # every footer against the merged files


def test_a_recording_s_statistics_are_every_footer_s(tmp_path, monkeypatch):
    """Forty batches: the overview's statistics and rows, read from the merged statistics file
    and no footer, are those of every footer, bit for bit."""
    record(tmp_path / "run", (0, 80), 2)
    assert sorted(p.name for p in (tmp_path / "run" / "_statistics").iterdir()) == [
        "shard-0-of-1.json"
    ]
    assert_as_every_footer(tmp_path / "run", tmp_path, monkeypatch)


def test_killed_then_resumed_statistics_are_every_footer_s(tmp_path, monkeypatch):
    """Killed after 15 batches, the merged file written last after the tenth (the last five
    were committed after it, and a write cut short left a partial file): the reader completes it
    from the five batches' footers. Resumed, the shard starts from its file and those footers:
    its first write covers all 16 batches then (killed after its second, one is left to a
    footer); resumed to the end, the file covers every batch. Each time the answer is every
    footer's."""
    run = tmp_path / "run"
    monkeypatch.setattr(merged, "WRITE_EVERY", 0.0)  # a write at every commit...
    writes = {"left": 10}  # ...but these
    write = RecordingWriter._write_merged

    def stopping(self):
        if writes["left"]:
            writes["left"] -= 1
            write(self)

    with monkeypatch.context() as m:
        m.setattr(RecordingWriter, "_write_merged", stopping)
        record(run, (0, 80), 2, kill_after=15)
        (run / "_statistics" / ".shard-0-of-1.json.partial-0a1b2c3d").write_bytes(b'{"form')
        assert_as_every_footer(run, tmp_path, monkeypatch, uncovered=5)
        writes["left"] = 1
        record(run, (0, 80), 2, resume=True, kill_after=2)
        assert_as_every_footer(run, tmp_path, monkeypatch, uncovered=1)
    record(run, (0, 80), 2, resume=True)
    assert (run / "manifest.json").exists()
    assert_as_every_footer(run, tmp_path, monkeypatch)


def test_shards_statistics_are_every_footer_s(tmp_path, monkeypatch):
    """Three shards into one folder, each with a batch size of its own, one killed then resumed:
    one merged file a shard, together every footer's statistics."""
    run = tmp_path / "run"
    monkeypatch.setattr(merged, "WRITE_EVERY", 0.0)
    record(run, (0, 90), 3, Shard(2, 3))
    record(run, (0, 90), 2, Shard(0, 3), kill_after=4)
    record(run, (0, 90), 4, Shard(1, 3))
    assert_as_every_footer(run, tmp_path, monkeypatch)
    record(run, (0, 90), 2, Shard(0, 3), resume=True)
    assert (run / "manifest.json").exists()
    assert sorted(p.name for p in (run / "_statistics").iterdir()) == [
        f"shard-{k}-of-3.json" for k in range(3)
    ]
    assert_as_every_footer(run, tmp_path, monkeypatch)


def test_a_recording_in_object_storage_keeps_its_merged_file_there(s3, tmp_path, monkeypatch):
    """--out s3://...: the merged file is an object, written whole at each write (one PUT);
    killed after the write of the fifth batch's and resumed, the shard starts from it; the
    recording, copied out, reads as from every footer."""
    env, store = s3
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("AWS_DEFAULT_REGION", env["AWS_DEFAULT_REGION"])
    monkeypatch.setattr(merged, "WRITE_EVERY", 0.0)
    record("s3://data/merged", (0, 20), 2, kill_after=5)  # type: ignore[arg-type]
    said = json.loads(store.open_input_stream("data/merged/_statistics/shard-0-of-1.json").read())
    assert [e["files"] for e in said["entries"]][0] == [0, 2, 4, 6, 8]
    record("s3://data/merged", (0, 20), 2, resume=True)  # type: ignore[arg-type]
    run = tmp_path / "run"
    for info in store.get_file_info(fs.FileSelector("data/merged", recursive=True)):
        if info.type == fs.FileType.File:
            local = run / info.path[len("data/merged/") :]
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(store.open_input_stream(info.path).read())
    assert_as_every_footer(run, tmp_path, monkeypatch)


def test_overwritten_statistics_are_every_footer_s(tmp_path, monkeypatch):
    """A recording replaced by --overwrite with one of other values and fewer batches: its
    merged file is the new recording's alone."""
    run = tmp_path / "run"
    record(run, (0, 80), 2)
    record(run, (0, 30), 3, seed=7, overwrite=True)
    assert_as_every_footer(run, tmp_path, monkeypatch)
    assert Recording(run).summary()["examples"]["count"] == 30


@pytest.mark.parametrize("shards", [1, 3])
def test_the_overview_opens_a_few_files_whatever_the_part_files(tmp_path, monkeypatch, shards):
    """The overview of 40 batches (320 part files; the view's `overview`: the recording's
    figures and every gate's statistics) opens each shard's progress and merged statistics
    file, the manifest, and one part file a cell (its steps): not every part file's footer."""
    run = tmp_path / "run"
    for k in range(shards):
        record(run, (0, 80), 2, Shard(k, shards))
    with monkeypatch.context() as m:
        opened = Opened(m)
        shown = overview(Recording(run))
    assert len(list(run.rglob("part-*.parquet"))) >= 40 * (GATES + STATES) == 320
    cells = len(DESCRIPTION["cells"])
    assert opened.footers <= cells and len(opened.files) <= 2 * shards + 1 + 2 * cells, opened.files
    assert shown["summary"]["rows"] == every_footer(run, tmp_path).summary()["rows"]
    # from statistics (each quantile within a bin), not from every value
    assert all(g["within"] > 0 for c in shown["cells"] for g in c["gate_stats"])


def test_a_merged_file_written_after_the_folder_was_listed_is_read_around(tmp_path):
    """A reader that listed the folder before the recording went on: the merged file it reads
    covers a batch committed since, whose files it did not list; it reads the footers of the
    files it listed, as from every footer of those (not a line calling the file damaged)."""
    run = tmp_path / "run"
    record(run, (0, 20), 2, kill_after=4)
    before = every_footer(run, tmp_path)
    rec = Recording(run)
    rec._checked.files("gates")  # listed now
    rec._checked.files("states")
    record(run, (0, 20), 2, resume=True)
    for cell in rec.cells:
        for gate in rec.gates(cell):
            got, want = (
                rec.activation_statistics(cell, gate),
                before.activation_statistics(cell, gate),
            )
            assert got is not None and want is not None and got.equals(want)
    assert rec.summary()["rows"] == before.summary()["rows"]


def test_a_merged_file_over_a_quarter_of_the_budget_is_left_for_the_footers(tmp_path, monkeypatch):
    """Under a memory budget four times smaller than the merged file, the footers are read
    (merged within the budget), the same statistics."""
    run = tmp_path / "run"
    record(run, (0, 16), 2)
    size = (run / "_statistics" / "shard-0-of-1.json").stat().st_size
    memory = 4 * size - 4
    with monkeypatch.context() as m:
        opened = Opened(m)
        stats = Recording(run, memory=memory).activation_statistics("lstm", "f")
    assert opened.footers == 8
    want = every_footer(run, tmp_path)
    assert stats is not None and stats.equals(
        Recording(want.path, memory=memory).activation_statistics("lstm", "f")
    )


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("plain") / "run"
    record(run, (0, 12), 2)
    return run


def _edited(run: Path, edit) -> Path:
    """The merged file with `edit` applied to its JSON (a dict, edited in place; or bytes)."""
    path = run / "_statistics" / "shard-0-of-1.json"
    said = json.loads(path.read_bytes())
    out = edit(said)
    path.write_bytes(out if isinstance(out, bytes) else json.dumps(said).encode())
    return path


def _gate(said: dict, gate: str = "f") -> dict:
    return next(e for e in said["entries"] if e.get("name") == gate and e["table"] == "gates")


def _counts_bumped(said: dict) -> None:
    """The last bin's count of gate f one higher (8 bytes a bin in a merged file)."""
    stats = _gate(said)["statistics"]
    data = bytearray(base64.b64decode(stats["arrays"]))
    data[-8:] = (int.from_bytes(data[-8:], "little") + 1).to_bytes(8, "little")
    stats["arrays"] = base64.b64encode(bytes(data)).decode()


def _scaled(said: dict) -> None:
    """Gate f's values 1024 times larger, all else adding up (its sums and bins with them)."""
    stats = _gate(said)["statistics"]
    steps = len(stats["steps"])
    units = stats["units"]
    raw = base64.b64decode(stats["arrays"])
    at = 16 * units
    arrays = np.frombuffer(raw, "<f8", 3 * steps, at + 8 * steps).copy() * 1024
    exponent = np.frombuffer(raw, "<i8", steps, at + 32 * steps).copy() + 10
    data = bytearray(raw)
    data[at + 8 * steps : at + 32 * steps] = arrays.tobytes()
    data[at + 32 * steps : at + 40 * steps] = exponent.tobytes()
    stats["arrays"] = base64.b64encode(bytes(data)).decode()
    stats["sums"] = [format(int(s, 16) << 10, "x") for s in stats["sums"]]


def _twice(run: Path) -> None:
    """A second shard's merged file (of a 2-shard recording's name) covering the same files."""
    said = json.loads((run / "_statistics" / "shard-0-of-1.json").read_bytes())
    said["shard"] = [0, 2]
    (run / "_statistics" / "shard-0-of-2.json").write_text(json.dumps(said))


MERGED_LIES = {
    "not JSON": (lambda run: _edited(run, lambda s: b"{not json"), "(it is not JSON"),
    "another format": (
        lambda run: _edited(run, lambda s: s.update(format=2)),
        "(it is not of format 1)",
    ),
    "another shard's": (
        lambda run: _edited(run, lambda s: s.update(shard=[1, 2])),
        "it says it is of shard [1, 2], its name 0/1",
    ),
    "a file listed twice": (
        lambda run: _edited(run, lambda s: _gate(s)["files"].append(_gate(s)["files"][-1])),
        "the files of gate f of lstm are not first examples, ascending",
    ),
    "rows not its statistics'": (
        lambda run: _edited(run, lambda s: _gate(s).update(rows=_gate(s)["rows"] + 5)),
        "its statistics of gate f of lstm say 5 units of 42 rows, its files hold 215 rows",
    ),
    "a count changed": (
        lambda run: _edited(run, _counts_bumped),
        "have bins that do not add up to their counts",
    ),
    "a sum not its exact sum": (
        lambda run: _edited(
            run,
            lambda s: _gate(s)["statistics"]["sums"].__setitem__(
                0, "1" + _gate(s)["statistics"]["sums"][0]
            ),
        ),
        "have sums that are not their exact sums rounded",
    ),
    "a billion bins": (
        lambda run: _edited(run, lambda s: _gate(s)["statistics"].update(bins=10**9)),
        "its statistics say 1,000,000,000 bins, more than the 24,582 of 6 steps",
    ),
    "values beyond the gate's range": (
        lambda run: _edited(run, _scaled),
        "outside the gate's range, 0 to 1",
    ),
    "a covered file gone": (
        lambda run: next(run.glob("gates/cell=lstm/gate=f/part-0000000004.parquet")).unlink(),
        "gate=f/part-0000000004.parquet, which is not there",
    ),
    "a file two shards' files cover": (
        _twice,
        "which {run}/_statistics/shard-0-of-1.json counts too",
    ),
}


@pytest.mark.parametrize("lie", list(MERGED_LIES))
def test_a_merged_file_that_does_not_hold_is_named_in_one_line(plain, tmp_path, lie):
    """A merged statistics file that is malformed, contradicts itself or the gate, or covers
    files that are gone or that another covers is refused before a number is used: one line
    naming it and saying what to do, from the library and the view's overview."""
    from starlette.testclient import TestClient

    from recorders.view.server import make_app

    run = tmp_path / "run"
    shutil.copytree(plain, run)
    make, message = MERGED_LIES[lie]
    make(run)
    with pytest.raises(RecordingError) as caught:
        rec = Recording(run)
        rec.summary()
        rec.activation_statistics("lstm", "f")
    line = str(caught.value)
    named = "shard-0-of-2.json" if lie == "a file two shards' files cover" else "shard-0-of-1.json"
    assert line.startswith(f"{run}/_statistics/{named} is not a statistics file gatetrace wrote (")
    assert "\n" not in line and message.format(run=run) in line
    assert line.endswith(
        "remove it (the part files' footers are read instead), ask for the recording again, or "
        "record the model again"
    )
    answer = TestClient(make_app(Recording(run)), base_url="http://127.0.0.1").get("/api/overview")
    assert answer.status_code == 422 and answer.json()["error"] == line
    if lie != "a covered file gone":  # removed, the footers are read
        shutil.rmtree(run / "_statistics")
        assert (
            Recording(run)
            .activation_statistics("lstm", "f")
            .equals(Recording(plain).activation_statistics("lstm", "f"))
        )


def test_check_names_a_merged_file_that_is_not_its_footers(plain, tmp_path):
    """Gate i's and gate f's statistics swapped (both sigmoid gates of 5 units and as many rows:
    every check of the file itself holds): the overview cannot tell, `Recording.check` reads
    every footer and names the file."""
    run = tmp_path / "run"
    shutil.copytree(plain, run)

    def swap(said: dict) -> None:
        i, f = _gate(said, "i"), _gate(said, "f")
        i["statistics"], f["statistics"] = f["statistics"], i["statistics"]

    _edited(run, swap)
    with pytest.raises(RecordingError) as caught:
        Recording(run).check()
    assert str(caught.value).startswith(
        f"{run}/_statistics/shard-0-of-1.json is not a statistics file gatetrace wrote (its "
        "statistics of gate f of lstm are not those of the footers of the files it covers)"
    ) or str(caught.value).startswith(
        f"{run}/_statistics/shard-0-of-1.json is not a statistics file gatetrace wrote (its "
        "statistics of gate i of lstm are not those of the footers of the files it covers)"
    )


@pytest.mark.parametrize("edited", [0, 1])
def test_check_names_only_the_shard_whose_merged_file_is_not_its_footers(tmp_path, edited):
    """Of a recording of two shards, one shard's merged file with gate i's and gate f's
    statistics and top values swapped: `Recording.check` names that shard's file alone (each
    shard's file read alone beside the footers of the files the other covers)."""
    run = tmp_path / "run"
    for k in (0, 1):
        record(run, (0, 12), 2, Shard(k, 2))
    path = run / "_statistics" / f"shard-{edited}-of-2.json"
    said = json.loads(path.read_bytes())
    i, f = _gate(said, "i"), _gate(said, "f")
    for field in ("statistics", "top"):
        i[field], f[field] = f[field], i[field]
    path.write_text(json.dumps(said))
    with pytest.raises(RecordingError) as caught:
        Recording(run).check()
    line = str(caught.value)
    assert line.startswith(f"{path} is not a statistics file gatetrace wrote (its "), line
    assert f"shard-{1 - edited}-of-2" not in line and "\n" not in line


def test_a_gate_whose_file_carries_none_is_read_in_full_without_its_footers(tmp_path, monkeypatch):
    """A batch holding a NaN activation carries no statistics: the merged file says so, and the
    gate's overview reads its values (and says it did) without opening a footer first."""
    run = tmp_path / "run"
    description = {"cells": [{"name": "a", "gates": ["f"], "states": [], "units": 2, "steps": 3}]}
    with RecordingWriter(run, description, examples=(0, 6)) as writer:
        for start in (0, 2, 4):
            act = np.random.RandomState(start).rand(2, 3, 2).astype(np.float32)
            if start == 2:
                act[1, 2, 0] = np.nan
            writer.begin(start, start + 2)
            writer.write_gate("a", "f", np.arange(start, start + 2), np.arange(3), None, act)
            writer.commit()
    (entry,) = merged.decode((run / "_statistics" / "shard-0-of-1.json").read_bytes()).values()
    assert entry.files == (0, 2, 4) and entry.said is None
    with monkeypatch.context() as m:
        opened = Opened(m)
        assert Recording(run).activation_statistics("a", "f") is None
    assert opened.footers == 0
    summary = gate_summaries(Recording(run), exact=False)[("a", "f")]
    assert summary.read_in_full
    # the view's overview says so, and says nothing of the kind where the files carry them
    from recorders.view.data import overview

    (gate,) = overview(Recording(run))["cells"][0]["gate_stats"]
    assert gate["read_in_full"] is True
    clean = tmp_path / "clean"
    with RecordingWriter(clean, description, examples=(0, 2)) as writer:
        writer.begin(0, 2)
        act = np.random.RandomState(0).rand(2, 3, 2).astype(np.float32)
        writer.write_gate("a", "f", np.arange(2), np.arange(3), None, act)
        writer.commit()
    (gate,) = overview(Recording(clean))["cells"][0]["gate_stats"]
    assert gate["read_in_full"] is False


@st.composite
def parts(draw):
    """The statistics of 2 to 7 files of one gate (random values of a scale of their own and
    random steps written), and a random grouping of them."""
    files = draw(st.integers(2, 7))
    out = []
    for _ in range(files):
        seed = draw(st.integers(0, 2**31 - 1))
        rng = np.random.default_rng(seed)
        scale = draw(st.sampled_from([1e-6, 1.0, 1e4]))
        offset = draw(st.sampled_from([0.0, 0.5, -300.0]))
        v = (offset + scale * rng.standard_normal((3, 5, 2))).astype(np.float32)
        valid = rng.random((3, 5)) < 0.7
        tally = Tally(range(5), 0.1, 0.9)
        tally.add(v, valid)
        footer = tally.footer()
        if footer:
            out.append(read(footer[FOOTER_KEY], int(valid.sum()) * 2))
    order = draw(st.permutations(range(len(out))))
    cuts = sorted(draw(st.sets(st.integers(1, max(len(out) - 1, 1)), max_size=3)))
    return [out[k] for k in order], cuts, draw(st.sampled_from([None, 60, 400]))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts())
def test_a_merge_is_the_same_in_any_grouping_and_order(case):
    """Files merged in groups (a shard's merged file, then the footers it does not cover),
    in any order, within any budget: the same statistics to the last bit, sums included, as
    all of them at once; and through a merged file's encoding and back."""
    found, cuts, most = case
    if not found:
        return
    whole = PartStats.merge(found, most)
    groups = [g for g in np.split(np.arange(len(found)), cuts) if len(g)]
    inner = [PartStats.merge([found[k] for k in g]) for g in groups]
    again = [merged_and_read(p) for p in inner]
    assert PartStats.merge(inner[::-1], most).equals(whole)
    assert PartStats.merge(again, most).equals(whole)


def merged_and_read(stats: PartStats) -> PartStats:
    """`stats` through a merged file's encoding (`fields(merged=True)`) and back."""
    from recorders.write.partstats import read_merged

    said = json.loads(json.dumps(stats.fields(merged=True)))
    return read_merged(said, stats.units * stats.rows, None, 1 << 30)


long_run = test_resume.long_run  # a 30-step LSTMCell checkpoint and 48 sequences


def test_recorded_shards_stopped_and_resumed_read_as_every_footer(long_run, tmp_path, monkeypatch):
    """`gatetrace record --shard 0/2` stopped by Ctrl-C after its second batch, `--shard 1/2`,
    then `--shard 0/2 --resume`: the real cell's statistics and rows, read from the two merged
    files, are every footer's, bit for bit, at each stage."""
    argv, _ = long_run
    out = tmp_path / "out"
    run = [*argv, "--out", str(out), "--batch-size", "4"]
    assert test_resume.interrupted([*run, "--shard", "0/2"], monkeypatch) == 130
    assert_as_every_footer(out, tmp_path, monkeypatch)
    assert test_resume.main([*run, "--shard", "1/2"]) == 0
    assert test_resume.main([*run, "--shard", "0/2", "--resume"]) == 0
    assert (out / "manifest.json").exists()
    assert sorted(p.name for p in (out / "_statistics").iterdir()) == [
        "shard-0-of-2.json",
        "shard-1-of-2.json",
    ]
    assert_as_every_footer(out, tmp_path, monkeypatch)


def test_a_gate_read_in_full_keeps_its_values_within_the_memory_budget(tmp_path):
    """Its per-step quantiles need every value at once: counted against the reader's budget as
    they are kept, a MemoryBudgetError naming the gate where they do not fit, not a process
    that grows past the budget."""
    from recorders.errors import MemoryBudgetError

    run = tmp_path / "run"
    description = {"cells": [{"name": "a", "gates": ["f"], "states": [], "units": 16, "steps": 20}]}
    with RecordingWriter(run, description, examples=(0, 512)) as writer:
        for start in range(0, 512, 64):
            act = np.random.RandomState(start).rand(64, 20, 16).astype(np.float32)
            act[0, 0, 0] = np.nan  # no statistics in any file: read in full
            writer.begin(start, start + 64)
            writer.write_gate("a", "f", np.arange(start, start + 64), np.arange(20), None, act)
            writer.commit()
    assert gate_summaries(Recording(run), exact=False)[("a", "f")].read_in_full
    with pytest.raises(MemoryBudgetError, match="the values of gate f of a by step, read in full"):
        # each row group fits (409,600 bytes to read), the 163,840 values kept do not
        gate_summaries(Recording(run, memory=450_000), exact=False)
