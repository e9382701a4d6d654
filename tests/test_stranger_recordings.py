"""A recording someone handed you: every reader treats its folder as untrusted input.

The cases a user met (a manifest that is not JSON, lacks `cells`, has `cells` as a number or
nests 100,000 lists deep; a part file replaced by a link to another recording's file; a 7 KB
part file claiming step 4095 and unit 2^20; a `--tokens` file nested 100,000 deep), each on
the command line (one line, exit 2) and in the view (a 4xx JSON error); then a property test
that mutates a real recording's manifest, progress file, part files and tokens file and
asserts that every outcome is the right data or one clean error: never a traceback, a hang,
a value read from outside the folder, or an allocation beyond a few hundred megabytes.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import resource
import shutil
import signal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracer
from recorders import GatetraceError, Recording, RecordingError, RecordingWriter, SelectionError
from recorders.view import load_labels
from recorders.view.server import make_app
from tests.conftest import R, build, run_cli
from tracer._tf import tf, v1

LSTM, GRU = "rnn/multi_rnn_cell/cell_0/basic_lstm_cell", "rnn/multi_rnn_cell/cell_1/gru_cell"
OUTSIDE = 777.0  # every value of the files outside the recording that links point to
MEMORY = 256 * 2**20  # the readers' budget in the property test
VALUES = ["preactivation", "activation", "input", "recurrent", "bias"]
HEADROOM = 3 * 2**30  # address space a read may add before the property test calls it runaway


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A recording as `gatetrace record` writes it: a BasicLSTMCell(3) under a GRUCell(2), 6
    sequences of 5 steps with lengths, in batches of 4, with the parts of the preactivations;
    and, beside it, a tokens file and a Parquet file and folder of 777s that links may point to."""

    def body(x):
        outputs, _ = v1.nn.static_rnn(
            R.MultiRNNCell([R.BasicLSTMCell(3), R.GRUCell(2)]),
            tf.unstack(x, axis=1),
            dtype=tf.float32,
        )
        return [outputs[-1]]

    root = tmp_path_factory.mktemp("stranger")
    model = tracer.from_session(build(body).session)
    x = np.random.RandomState(3).randn(6, 5, 4).astype(np.float32)
    tracer.record(
        model,
        {"x": x},
        root / "run",
        batch_size=4,
        lengths=np.array([5, 5, 3, 5, 1, 5]),
        values=("preactivation", "activation", "contributions"),
    )
    (root / "tokens.json").write_text(
        json.dumps([[f"t{e}.{s}" for s in range(5)] for e in range(6)])
    )
    first = next((root / "run" / "gates").glob("cell=*/gate=*/part-*.parquet"))
    table = pq.read_table(first)
    floats = [n for n in table.column_names if table.schema.field(n).type == pa.float32()]
    for n in floats:
        table = table.set_column(
            table.column_names.index(n), n, pa.array(np.full(table.num_rows, OUTSIDE, np.float32))
        )
    (root / "outside" / "gate=f").mkdir(parents=True)
    pq.write_table(table, root / "outside.parquet")
    pq.write_table(table, root / "outside" / "gate=f" / first.name)
    return root


@functools.cache
def expected(pristine: Path) -> dict:
    """Every row of the pristine recording, by table and key."""
    rec = Recording(pristine / "run")
    return {
        "gates": rows_of(rec.gate_frame(columns=VALUES), "gate"),
        "states": rows_of(rec.state_frame(), "state"),
    }


def fresh(pristine: Path, to: Path) -> Path:
    shutil.rmtree(to, ignore_errors=True)
    shutil.copytree(pristine / "run", to)
    return to


def part(run: Path, cell: str = LSTM, gate: str = "f") -> Path:
    folder = "cell=" + cell.replace("/", "%2F")
    return sorted((run / "gates" / folder / f"gate={gate}").glob("part-*.parquet"))[0]


def rewrite(path: Path, **columns) -> None:
    """The part file at `path` with some columns replaced (their row count sets the file's)."""
    table = pq.read_table(path)
    rows = len(next(iter(columns.values())))
    new = {
        n: columns.get(
            n,
            pa.concat_arrays([table.column(n).combine_chunks()] * (rows // table.num_rows + 1))[
                :rows
            ],
        )
        for n in table.column_names
    }
    path.unlink()
    pq.write_table(pa.table(new, schema=table.schema), path)


# ---- the cases a user met ---------------------------------------------------------------

MANIFESTS = {
    "not JSON": (b"{not json", "manifest.json is not a manifest gatetrace wrote (is not JSON: "),
    "no cells": (None, "(cells is missing, expected a list of cells)"),
    "cells a number": (3, "(cells is 3, expected a list of cells)"),
    "a runtime not text": (
        {"source": {"path": "m.tflite", "format": "tflite", "runtime": {"name": 1}}},
        "expected an object with the model's path and format (and the runtime that ran it, as text)",
    ),
    "nested 100,000 deep": (
        b"[" * 100_000 + b"]" * 100_000,
        "(nests 100000 levels deep; gatetrace writes and reads at most 32)",
    ),
}


@pytest.mark.parametrize("case", MANIFESTS)
def test_a_damaged_manifest_is_one_line_everywhere(pristine, tmp_path, case):
    run = fresh(pristine, tmp_path / "run")
    content, message = MANIFESTS[case]
    manifest = json.loads((run / "manifest.json").read_text())
    if isinstance(content, bytes):
        (run / "manifest.json").write_bytes(content)
    elif isinstance(content, dict):  # fields replaced
        (run / "manifest.json").write_text(json.dumps({**manifest, **content}))
    else:
        manifest.pop("cells") if content is None else manifest.update(cells=content)
        (run / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RecordingError) as err:
        Recording(run)
    assert message in str(err.value) and str(err.value).startswith(f"{run}/manifest.json")
    for command in (["inspect", str(run)], ["view", str(run), "--port", "1"]):
        result = run_cli(*command)
        assert result.returncode == 2 and result.stdout == ""
        (line,) = result.stderr.splitlines()
        assert line.startswith("gatetrace: error: ") and message in line, line


def test_a_deep_tokens_file_is_one_line(pristine, tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SelectionError, match="tokens.json nests 100000 levels deep"):
        load_labels(tokens)
    result = run_cli("view", str(pristine / "run"), "--tokens", str(tokens), "--port", "1")
    assert (
        result.returncode == 2
        and len(result.stderr.splitlines()) == 1
        and "nests 100000 levels deep" in result.stderr
    )


def client(rec: Recording, labels=None):
    from starlette.testclient import TestClient

    return TestClient(make_app(rec, labels), base_url="http://127.0.0.1")


def test_a_linked_part_file_is_not_read(pristine, tmp_path):
    run = fresh(pristine, tmp_path / "run")
    target = part(run)
    target.unlink()
    target.symlink_to(pristine / "outside.parquet")
    shown = f"{target} is a symbolic link to {pristine / 'outside.parquet'}: gatetrace reads only the regular files inside a recording"
    answer = client(Recording(run)).get(
        "/api/heatmap", params={"cell": LSTM, "label": "f", "example": 0}
    )
    assert answer.status_code == 422 and answer.json()["error"].startswith(shown)
    with pytest.raises(RecordingError, match="copy the recording with its links resolved"):
        Recording(run).gate_frame([LSTM], ["f"])
    with pytest.raises(RecordingError, match="is a symbolic link"):
        # nothing of the table is read: a folder with a link is not as gatetrace writes it
        Recording(run).gate_frame([LSTM], ["i"])
    # the other table reads as before
    assert (
        len(Recording(run).state_frame()) == len(Recording(pristine / "run").state_frame()) == 192
    )
    result = run_cli("view", str(run), "--port", "1")
    assert result.returncode == 2 and result.stderr.splitlines() == [
        f"gatetrace: error: {shown} (it writes nothing else) and "
        "read nothing from it; if you trust what it points to, copy the "
        "recording with its links resolved (cp -rL) and open the copy"
    ]


@pytest.mark.parametrize(
    "step, unit, message",
    [
        (4095, 2**20, "row group 0 holds steps 4095 to 4095, outside the cell's 0 to 4"),
        (
            4,
            2**20,
            "holds rows of unit 1048576, outside the 0 to 2 of its cell in the recording's description",
        ),
    ],
)
def test_a_part_file_claiming_far_steps_or_units_is_named(pristine, tmp_path, step, unit, message):
    run = fresh(pristine, tmp_path / "run")
    target = part(run)
    rewrite(
        target,
        step=pa.array([step, step], pa.int32()),
        unit=pa.array([unit, unit], pa.int32()),
        example=pa.array([0, 0], pa.int64()),
    )
    assert target.stat().st_size < 60_000  # a few rows (and their statistics in the footer)
    rec = Recording(run)
    # the overview reads the merged statistics file, which covers the file, and not the file
    # (`Recording.check` compares them); without it, the rewrite kept the footer's statistics
    # of the activations, which the overview reads (where the row groups' own statistics fit
    # the cell)
    assert client(rec).get("/api/overview").status_code == 200
    shutil.rmtree(run / "_statistics")
    rec = Recording(run)
    stale = "its statistics say 3 units of 18 rows, the file holds 2 rows"
    for path, said in (
        ("/api/heatmap", message),
        ("/api/overview", stale if step == 4 else message),
    ):
        answer = client(rec).get(path, params={"cell": LSTM, "label": "f", "example": 0})
        assert (
            answer.status_code == 422
            and answer.json()["error"].startswith(f"{target} ")
            and said in answer.json()["error"]
        )
    with pytest.raises(RecordingError, match=message):
        rec.gate_array(LSTM, "f")


@pytest.mark.parametrize("kind", ["fifo", "device", "linked folder"])
def test_only_regular_files_inside_are_opened(pristine, tmp_path, kind):
    run = fresh(pristine, tmp_path / "run")
    target = part(run)
    if kind == "fifo":
        target.unlink()
        os.mkfifo(target)  # opening it to read would block
        what = f"{target} is a FIFO"
    elif kind == "device":
        target.unlink()
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        # a character device (/dev/null's numbers)
        os.mknod(target, 0o600 | 0o020000, os.makedev(1, 3))
        what = f"{target} is a character device"
    else:
        shutil.rmtree(target.parent)
        target.parent.symlink_to(pristine / "outside" / "gate=f", target_is_directory=True)
        what = f"{target.parent} is a symbolic link to {pristine / 'outside' / 'gate=f'}"
    with pytest.raises(RecordingError) as err:
        Recording(run).check()
    assert str(err.value).startswith(what)
    result = run_cli("inspect", str(run))
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1 and what in result.stderr


def test_a_selection_larger_than_the_memory_budget_is_refused_before_it_is_read(pristine):
    rec = Recording(pristine / "run", memory=4_000)
    with pytest.raises(
        SelectionError, match="more than the memory budget of 4,000: select fewer examples or steps"
    ):
        rec.gate_frame()
    assert (
        len(
            Recording(pristine / "run", memory=4_000).gate_frame(
                [LSTM], ["f"], examples=(0, 1), columns=["preactivation", "activation"]
            )
        )
        == 5 * 3
    )


# ---- the property test ------------------------------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
KEY_VALUES = st.integers(-3, 8) | st.sampled_from([4095, 2**20, 2**31 - 1, -(2**31)])


@st.composite
def json_edits(draw, document):
    """`document` with one value somewhere in it replaced, or one key removed, or its text cut or nested deep."""
    how = draw(st.sampled_from(["replace", "remove", "cut", "deep", "garbage"]))
    text = json.dumps(document)
    if how == "cut":
        return text[: draw(st.integers(0, len(text) - 1))].encode()
    if how == "deep":
        depth = draw(st.integers(30, 5000))
        return ("[" * depth + text + "]" * depth).encode()
    if how == "garbage":
        return draw(st.binary(max_size=40))
    doc = json.loads(text)
    parent, key = None, None
    node = doc
    while isinstance(node, (dict, list)) and node and draw(st.integers(0, 3)):
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        parent, key = node, draw(st.sampled_from(keys))
        node = node[key]
    if parent is None:
        doc = draw(JSON)
    elif how == "remove" and isinstance(parent, dict):
        del parent[key]
    else:
        parent[key] = draw(JSON)
    return json.dumps(doc).encode()


@st.composite
def mutations(draw, pristine: Path):
    """(what to change, how): a recording's manifest, progress file, part files or tokens file."""
    where = draw(st.sampled_from(["manifest", "progress", "part", "part", "tokens"]))
    if where == "manifest":
        return where, draw(json_edits(json.loads((pristine / "run" / "manifest.json").read_text())))
    if where == "progress":
        return where, draw(
            json_edits(
                json.loads((pristine / "run" / "_progress" / "shard-0-of-1.json").read_text())
            )
        )
    if where == "tokens":
        return where, draw(
            json_edits(json.loads((pristine / "tokens.json").read_text())) | st.just("fifo")
        )
    cell, gate = draw(st.sampled_from([(LSTM, "f"), (LSTM, "i"), (GRU, "c")]))
    how = draw(
        st.sampled_from(["keys", "keys", "type", "bytes", "cut", "link", "fifo", "linked folder"])
    )
    detail: object = None
    if how == "keys":
        rows = draw(st.integers(1, 40))
        detail = {
            c: draw(st.lists(KEY_VALUES, min_size=rows, max_size=rows))
            for c in draw(st.sets(st.sampled_from(["example", "step", "unit"]), min_size=1))
        }
    elif how == "type":
        detail = draw(
            st.sampled_from(
                [
                    ("step", pa.int64()),
                    ("example", pa.int32()),
                    ("activation", pa.float64()),
                    ("unit", pa.string()),
                ]
            )
        )
    elif how == "bytes":
        detail = draw(
            st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=8)
        )
    elif how == "cut":
        detail = draw(st.floats(0, 1, exclude_max=True))
    return where, (cell, gate, how, detail)


def mutate(root: Path, run: Path, tokens: Path, where: str, how) -> set[tuple[str, str]]:
    """Apply a mutation; the (cell, gate) partitions whose files it changed."""
    if where in ("manifest", "progress"):
        (
            run / ("manifest.json" if where == "manifest" else "_progress/shard-0-of-1.json")
        ).write_bytes(how)
        return set()
    if where == "tokens":
        tokens.unlink()
        os.mkfifo(tokens) if how == "fifo" else tokens.write_bytes(how)
        return set()
    cell, gate, kind, detail = how
    target = part(run, cell, gate)
    if kind == "keys":
        table = pq.read_table(target)
        rewrite(target, **{c: pa.array(v, table.schema.field(c).type) for c, v in detail.items()})
    elif kind == "type":
        name, type_ = detail
        table = pq.read_table(target)
        column = (
            table.column(name).cast(type_)
            if type_ != pa.string()
            else pa.array([str(v) for v in table.column(name).to_pylist()])
        )
        target.unlink()
        pq.write_table(table.set_column(table.column_names.index(name), name, column), target)
    elif kind in ("bytes", "cut"):
        damage(target, kind, detail)
    elif kind == "link":
        target.unlink()
        target.symlink_to(root / "outside.parquet")
    elif kind == "fifo":
        target.unlink()
        os.mkfifo(target)
    else:
        shutil.rmtree(target.parent)
        target.parent.symlink_to(root / "outside" / "gate=f", target_is_directory=True)
    return {(cell, gate)}


def damage(path: Path, kind: str, detail) -> None:
    """`bytes`: each (offset, value) of `detail` written into the file; `cut`: the file cut to
    the fraction `detail` of its length."""
    data = bytearray(path.read_bytes())
    if kind == "bytes":
        for offset, value in detail:
            data[offset % len(data)] = value
    else:
        del data[int(len(data) * detail) :]
    path.write_bytes(bytes(data))


class Hang(Exception):
    pass


@contextlib.contextmanager
def bounded(seconds: int = 20):
    """Fail on a hang (SIGALRM) or on address space growing by more than HEADROOM (RLIMIT_AS)."""
    with open("/proc/self/status") as f:
        size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    previous = signal.signal(
        signal.SIGALRM, lambda *_: (_ for _ in ()).throw(Hang(f"no answer in {seconds} s"))
    )
    signal.alarm(seconds)
    resource.setrlimit(resource.RLIMIT_AS, (size + HEADROOM, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def rows_of(frame, label: str) -> dict:
    keys = zip(
        frame["cell"].astype(str),
        frame[label].astype(str),
        frame["example"],
        frame["step"],
        frame["unit"],
        strict=True,
    )
    return dict(
        zip(
            keys,
            frame.drop(columns=["cell", label, "example", "step", "unit"]).itertuples(index=False),
            strict=True,
        )
    )


def read_everything(run: Path, tokens: Path, description: dict) -> dict:
    """What a user reads, through the library and the view: frames, arrays, blocks, the summary,
    the view's answers; then a resume of the recording of `description`. A clean error anywhere
    is an outcome; anything else propagates."""
    out: dict = {}
    try:
        labels = load_labels(tokens)
    except SelectionError:
        labels = None
    try:
        rec = Recording(run, memory=MEMORY)
    except GatetraceError:
        return out
    for name, read in [
        ("summary", rec.summary),
        ("gates", lambda: rec.gate_frame(columns=VALUES)),
        ("states", rec.state_frame),
        ("array", lambda: rec.gate_array(LSTM, "f")),
        ("blocks", lambda: [b.values for g in rec.gates(GRU) for b in rec.gate_blocks(GRU, g)]),
    ]:
        try:
            out[name] = read()
        except GatetraceError:
            pass
    partitions = out.setdefault("partitions", {})  # each (cell, gate) read apart
    for cell in (LSTM, GRU):
        for gate in rec.gates(cell):
            try:
                partitions[(cell, gate)] = rec.gate_frame(
                    cells=[cell], gates=[gate], columns=VALUES
                )
            except GatetraceError:
                pass
    answers = []
    app = client(rec, labels)
    for path, params in [
        ("/api/overview", {}),
        ("/api/heatmap", {"cell": LSTM, "label": "f", "example": 1}),
        ("/api/heatmap", {"cell": GRU, "label": "h", "kind": "state", "example": 0}),
        ("/api/unit", {"cell": LSTM, "gate": "i", "unit": 1, "example": 0}),
    ]:
        answer = app.get(path, params=params)
        assert answer.status_code in (200, 400, 422), (path, answer.status_code, answer.text[:300])
        assert "error" in answer.json() if answer.status_code != 200 else True
        answers.append(answer.text)
    out["answers"] = answers
    try:  # --resume reads the progress file and counts the rows of the part files
        RecordingWriter(run, description, examples=(0, 6), resume=True).abort()
    except GatetraceError:
        pass
    return out


@settings(
    max_examples=80,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_damage_gives_the_right_data_or_one_clean_error(pristine, tmp_path, data):
    where, how = data.draw(mutations(pristine))
    run, tokens = fresh(pristine, tmp_path / "run"), tmp_path / "tokens.json"
    tokens.unlink(missing_ok=True)  # the examples share tmp_path: the last one may have left a FIFO
    shutil.copy(pristine / "tokens.json", tokens)
    changed = mutate(pristine, run, tokens, where, how)
    with bounded():
        got = read_everything(
            run,
            tokens,
            json.loads((pristine / "run" / "_progress" / "shard-0-of-1.json").read_text())[
                "description"
            ],
        )
    # no value from outside the folder, anywhere
    assert str(OUTSIDE) not in json.dumps(got.get("answers", []))
    for name in ("gates", "states"):
        if name not in got:
            continue
        frame = got[name]
        label = name[:-1]
        for (cell, lab, example, step, unit), values in rows_of(frame, label).items():
            assert OUTSIDE not in values
            # what a changed file holds, as long as it fits the description
            if (cell, lab) in changed:
                rec = Recording(run, memory=MEMORY)
                # (the selection starts at 0)
                assert 0 <= unit < rec.units(cell) and 0 <= step < rec.cell(cell)["steps"]
            else:  # every other row is a row of the recording, with its values
                want = expected(pristine)[name].get((cell, lab, example, step, unit))
                assert want is not None and np.allclose(values, want, equal_nan=True), (
                    cell,
                    lab,
                    example,
                    step,
                    unit,
                )
    if "array" in got:
        assert not (got["array"] == OUTSIDE).any()
    # what was left undamaged is read, whole: a reader that refused everything would fail here
    if where in ("manifest", "progress"):
        return  # the recording's description: refusing it all is right
    assert "partitions" in got, "the manifest and progress are intact: the recording opens"
    if where == "part" and how[2] in ("link", "fifo", "linked folder"):
        return  # a link or special file anywhere below a table refuses the table, in one line
    want = expected(pristine)["gates"]
    for (cell, gate), frame in got["partitions"].items():
        if (cell, gate) in changed:
            continue
        held = {k: v for k, v in want.items() if k[:2] == (cell, gate)}
        assert rows_of(frame, "gate").keys() == held.keys(), (cell, gate)
    untouched = {k[:2] for k in want} - changed
    assert untouched <= got["partitions"].keys(), untouched - got["partitions"].keys()
    if where == "tokens":  # the recording itself is untouched: every table read, every row
        assert rows_of(got["gates"], "gate").keys() == want.keys()
        assert rows_of(got["states"], "state").keys() == expected(pristine)["states"].keys()


def test_a_selection_of_no_files_is_an_empty_frame_of_the_tables_columns(pristine):
    frame = Recording(pristine / "run").gate_frame(gates=["no such gate"], columns=["activation"])
    assert frame.empty and list(frame.columns) == [
        "example",
        "step",
        "unit",
        "activation",
        "cell",
        "gate",
    ]
    assert frame["example"].dtype == np.int64 and frame["activation"].dtype == np.float32


def test_a_footer_whose_names_are_not_text_is_one_clean_error_to_readers_and_to_resume(
    pristine, tmp_path
):
    """Found by the property test: pyarrow raises UnicodeDecodeError on such a footer."""
    run = fresh(pristine, tmp_path / "run")
    target = part(run)
    data = target.read_bytes()
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    # a column name that pyarrow decodes
    for at in (m.start() for m in re.finditer(b"example", data[footer:])):
        damaged = bytearray(data)
        damaged[footer + at] = 0x80
        target.write_bytes(bytes(damaged))
        try:
            pq.read_metadata(target)
        except UnicodeDecodeError:
            break
    else:
        pytest.fail("no column name in the footer is decoded as text")
    with pytest.raises(RecordingError, match="is not readable Parquet"):
        Recording(run).check()
    description = json.loads((run / "_progress" / "shard-0-of-1.json").read_text())["description"]
    with pytest.raises(RecordingError, match="is not readable Parquet"):
        RecordingWriter(run, description, examples=(0, 6), resume=True)


def test_a_manifest_of_no_cells_reads_as_a_recording_of_no_rows(pristine, tmp_path):
    """Found by the property test: frames of a recording whose manifest lists no cell."""
    run = fresh(pristine, tmp_path / "run")
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "cells": []}))
    rec = Recording(run)
    assert (
        rec.cells == []
        and rec.gate_frame().empty
        and rec.state_frame().empty
        and rec.summary()["cells"] == []
    )
