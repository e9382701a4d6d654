"""Every page of the part files gatetrace writes carries its CRC32, and every read verifies it.

A byte changed inside a data page of a gate, state or output part file (the last value's lowest
bit: a value a little off, which nothing else would notice) is one line naming the file, from
every reader and from `Recording.check`; a damaged page header too (pyarrow words it on several
lines); on the command line `inspect --check`, `compare` and `view --compare` print that one line
and exit 2. A recording whose files carry no checksums (an older gatetrace's) reads as before.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import tracer
from recorders import Recording, RecordingError
from recorders.read.files import DAMAGED
from tests.conftest import R, build, run_cli
from tracer._tf import tf, v1

CELL = "rnn/basic_lstm_cell"
# a part file of each table, and the value column a flipped byte changes
PARTS = {
    "gates": ("gates/cell=rnn%2Fbasic_lstm_cell/gate=f", "activation"),
    "states": ("states/cell=rnn%2Fbasic_lstm_cell/state=c", "value"),
    "outputs": ("outputs/output=final%3A0", "value"),
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A BasicLSTMCell(3) over 5 steps, its final output recorded beside the gates: 6 sequences."""

    def body(x):
        outputs, _ = v1.nn.static_rnn(R.BasicLSTMCell(3), tf.unstack(x, axis=1), dtype=tf.float32)
        return [tf.identity(outputs[-1], name="final")]

    root = tmp_path_factory.mktemp("checksums")
    x = np.random.RandomState(5).randn(6, 5, 4).astype(np.float32)
    tracer.record(
        tracer.from_session(build(body).session), {"x": x}, root / "run", outputs=("final",)
    )
    return root / "run"


def part_file(run: Path, table: str) -> Path:
    return next((run / PARTS[table][0]).glob("part-*.parquet"))


def damage(pristine: Path, to: Path, table: str, where: str) -> Path:
    """A copy of the recording with one byte of a part file of `table` changed: in the value
    column's data page (`data`: its last value's lowest bit) or in the header before it
    (`header`: its first byte). Returns the damaged file."""
    shutil.copytree(pristine, to)
    path = part_file(to, table)
    group = pq.read_metadata(path).row_group(0)
    names = [group.column(i).path_in_schema for i in range(group.num_columns)]
    chunk = group.column(names.index(PARTS[table][1]))
    data = bytearray(path.read_bytes())
    if where == "data":  # the page ends the chunk: its last float's low byte
        data[chunk.data_page_offset + chunk.total_compressed_size - 4] ^= 0x01
    else:
        data[chunk.data_page_offset] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def read(run: Path, table: str) -> pd.DataFrame:
    """The table's values as `Recording` reads them."""
    rec = Recording(run)
    if table == "gates":
        return rec.gate_frame()
    if table == "states":
        return rec.state_frame()
    return rec.output_frame("final:0")


def one_line(err: RecordingError, path: Path) -> None:
    text = str(err)
    assert (
        "\n" not in text and text.startswith(f"{path} cannot be read (") and text.endswith(DAMAGED)
    ), text


@pytest.mark.parametrize("where", ["data", "header"])
@pytest.mark.parametrize("table", sorted(PARTS))
def test_a_damaged_page_is_one_line_naming_the_file(pristine, tmp_path, table, where):
    path = damage(pristine, tmp_path / "run", table, where)
    if where == "data":  # the byte changed a value, which a read that verifies nothing returns
        before = pq.read_table(part_file(pristine, table))[PARTS[table][1]].to_numpy()
        after = pq.read_table(path)[PARTS[table][1]].to_numpy()
        assert (before != after).sum() == 1
    with pytest.raises(RecordingError) as err:
        read(tmp_path / "run", table)
    one_line(err.value, path)
    if table == "gates":  # a gate a block at a time, and as an array
        for reading in (
            lambda rec: list(rec.gate_blocks(CELL, "f")),
            lambda rec: rec.gate_array(CELL, "f"),
        ):
            with pytest.raises(RecordingError) as err:
                reading(Recording(tmp_path / "run"))
            one_line(err.value, path)
    with pytest.raises(RecordingError) as err:
        Recording(tmp_path / "run").check()
    one_line(err.value, path)
    Recording(tmp_path / "run").check(pages=False)  # the footers are whole
    # the other tables read as before
    for other in sorted(set(PARTS) - {table}):
        assert read(tmp_path / "run", other).equals(read(pristine, other))


def test_a_damaged_page_of_the_weights_is_one_line_naming_the_file(pristine, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(pristine, run)
    path = run / "weights.parquet"
    group = pq.read_metadata(path).row_group(0)
    names = [group.column(i).path_in_schema for i in range(group.num_columns)]
    chunk = group.column(names.index("value"))
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size - 4] ^= 0x01
    path.write_bytes(bytes(data))
    for reading in (lambda rec: rec.weights_frame(CELL), lambda rec: rec.check()):
        with pytest.raises(RecordingError) as err:
            reading(Recording(run))
        one_line(err.value, path)


@pytest.mark.parametrize("table", ["gates", "outputs"])  # what compare reads
def test_the_commands_print_one_line_and_exit_2(pristine, tmp_path, table):
    path = damage(pristine, tmp_path / "run", table, "data")
    run = str(tmp_path / "run")
    for command in (
        ["compare", str(pristine), run],
        ["view", run, "--compare", str(pristine), "--port", "1"],
        ["inspect", run, "--check"],
    ):
        done = run_cli(*command)
        assert done.returncode == 2 and done.stdout == "", command
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"gatetrace: error: {path} cannot be read ("), line
    said = run_cli("inspect", str(pristine), "--check")
    assert said.returncode == 0 and "checked: every file's footer and pages" in said.stdout


def test_the_view_names_a_damaged_page_in_its_answer(pristine, tmp_path):
    from starlette.testclient import TestClient

    from recorders.view.server import make_app

    path = damage(pristine, tmp_path / "run", "gates", "data")
    client = TestClient(make_app(Recording(tmp_path / "run")), base_url="http://127.0.0.1")
    answer = client.get("/api/heatmap", params={"cell": CELL, "label": "f", "example": 0})
    assert answer.status_code == 422
    assert answer.json()["error"].startswith(f"{path} cannot be read (")
    assert "\n" not in answer.json()["error"]


def test_a_recording_without_checksums_reads_as_before(pristine, tmp_path):
    """Its part files and weights rewritten by pyarrow without page checksums, their footers'
    metadata and statistics kept: every table reads as pandas reads the original files."""
    run = tmp_path / "run"
    shutil.copytree(pristine, run)
    for path in sorted(run.rglob("*.parquet")):
        table = pq.read_table(path)
        part = path.name != "weights.parquet"  # plain pages, as the part files' own
        pq.write_table(table, path, write_page_checksum=False, use_dictionary=not part)
    # no checksums: a changed byte in a page is not noticed by a verifying read
    path = part_file(run, "states")
    group = pq.read_metadata(path).row_group(0)
    chunk = group.column(group.num_columns - 1)
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size - 4] ^= 0x01
    changed = tmp_path / "changed.parquet"
    changed.write_bytes(bytes(data))
    pq.read_table(changed, page_checksum_verification=True)
    rec = Recording(run)
    rec.check()
    for table, frame in (
        ("gates", rec.gate_frame()),
        ("states", rec.state_frame()),
        ("outputs", rec.output_frame("final:0")),
    ):
        want = pd.read_parquet(pristine / table)  # pyarrow's reading of the original files
        assert np.array_equal(values(frame), values(want)), table
    weights = pd.read_parquet(pristine / "weights.parquet")
    assert len(rec.weights_frame(CELL)) == len(weights) > 0


def values(frame: pd.DataFrame) -> np.ndarray:
    """A frame's rows as text, sorted: its labels (cell, gate or state, output), keys and values."""
    labels = [c for c in ("cell", "gate", "state") if c in frame]
    value = [c for c in ("preactivation", "activation", "value") if c in frame]
    rows = frame[[*labels, "example", "unit", *value]].astype(str)
    rows["step"] = frame["step"].astype(str) if "step" in frame else "0"
    return np.sort(rows.apply("|".join, axis=1).to_numpy())
