"""A part file damaged anywhere (a byte changed in its footer or its pages, the file cut short)
reads as the original or is one line naming it (a RecordingError), from every reader of a gate:
its frame, its blocks (the dense path of `units`, `view` and `--means-from`) and its units'
means. Never a crash, never other values: the oracle is pyarrow reading the undamaged file.

pyarrow ends the process where a footer's column chunk says another type than its schema, so the
reads run in a worker process: a worker that dies is reported as the damage that killed it.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracer
from tests.conftest import R, build
from tracer._tf import tf, v1

CELL = "rnn/basic_lstm_cell"
PART = "gates/cell=rnn%2Fbasic_lstm_cell/gate=f/part-0000000000.parquet"

# reads the recording named on each line of stdin; one JSON line of what it read, or the error
# (in at most 3 GiB of address space)
WORKER = """
import json, resource, sys
# an array sized by a lying claim fails at once here, rather than swapping the machine
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
import numpy as np
from recorders import Recording
from recorders.errors import RecordingError, SelectionError
from recorders.read.means import unit_means
cell = sys.argv[1]
for line in sys.stdin:
    run = line.strip()
    try:
        frame = Recording(run).gate_frame(cells=[cell], gates=["f"])
        frame = frame.sort_values(["example", "step", "unit"])
        blocks = list(Recording(run).gate_blocks(cell, "f"))
        means = unit_means(Recording(run), "gates", cell, "f", "activation", None)
        said = {
            "frame": frame[["example", "step", "unit", "activation"]].to_numpy().tolist(),
            "blocks": [
                [b.examples.tolist(), b.steps.tolist(), b.values.tolist(),
                 None if b.present is None else b.present.tolist()] for b in blocks
            ],
            "means": [means[u] for u in sorted(means)],
        }
    except (RecordingError, SelectionError) as err:
        said = {"error": str(err)}
    except BaseException as err:
        said = {"crash": f"{type(err).__name__}: {err}"}
    print(json.dumps(said), flush=True)
"""


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A BasicLSTMCell(3) over 5 steps: 6 sequences."""

    def body(x):
        outputs, _ = v1.nn.static_rnn(R.BasicLSTMCell(3), tf.unstack(x, axis=1), dtype=tf.float32)
        return [outputs[-1]]

    root = tmp_path_factory.mktemp("damaged")
    x = np.random.RandomState(7).randn(6, 5, 4).astype(np.float32)
    tracer.record(tracer.from_session(build(body).session), {"x": x}, root / "run")
    return root / "run"


@pytest.fixture(scope="module")
def oracle(pristine) -> dict:
    """The undamaged file as pyarrow reads it: each (example, step, unit)'s activation, and each
    unit's mean."""
    table = pq.read_table(pristine / PART).to_pandas().sort_values(["example", "step", "unit"])
    rows = table[["example", "step", "unit", "activation"]].to_numpy()
    means = table.groupby("unit")["activation"].apply(lambda v: v.astype(np.float64).mean())
    return {"rows": rows, "means": means.to_numpy()}


class Worker:
    """A process reading recordings with gatetrace (`WORKER`), started again after one dies."""

    def __init__(self):
        self.process: subprocess.Popen | None = None

    def read(self, run: Path) -> dict:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen(
                [sys.executable, "-c", WORKER, CELL],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(f"{run}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            assert self.process.stderr
            return {"crash": f"the process ended ({code}): {self.process.stderr.read()[-300:]}"}
        return json.loads(line)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    w.close()


def damaged(pristine: Path, to: Path, data: bytes) -> Path:
    """A copy of the recording whose gate f part file holds `data`."""
    if to.exists():
        shutil.rmtree(to)
    shutil.copytree(pristine, to)
    (to / PART).write_bytes(data)
    return to


def assert_right_or_refused(said: dict, oracle: dict, path: Path) -> None:
    """The values read are the oracle's, or the read was refused in one line naming `path`."""
    assert "crash" not in said, said["crash"]
    if "error" in said:
        text = said["error"]
        assert "\n" not in text and str(path) in text, text
        return
    np.testing.assert_array_equal(np.array(said["frame"]), oracle["rows"])
    values = []
    for examples, steps, block, present in said["blocks"]:
        block = np.array(block, np.float32)
        for e, example in enumerate(examples):
            for s, step in enumerate(steps):
                if present is None or present[e][s]:
                    values += [(example, step, u, v) for u, v in enumerate(block[e, s])]
    np.testing.assert_array_equal(np.array(sorted(values)), oracle["rows"])
    np.testing.assert_allclose(said["means"], oracle["means"], rtol=1e-12)


def footer_start(data: bytes) -> int:
    return len(data) - 8 - struct.unpack("<I", data[-8:-4])[0]


def test_a_column_chunk_of_another_type_than_its_schema_is_refused(
    pristine, tmp_path, worker, oracle
):
    """The footer's first column chunk (example, INT64) said to be BOOLEAN: pyarrow would end
    the process reading its statistics."""
    data = bytearray((pristine / PART).read_bytes())
    start = footer_start(data)
    # ColumnMetaData (field 3 of a ColumnChunk, a struct) begins with its type (field 1, i32):
    # INT64 is 2, zigzag 0x04; BOOLEAN 0
    at = data.index(b"\x1c\x15\x04\x19", start)
    data[at + 2] = 0x00
    run = damaged(pristine, tmp_path / "run", bytes(data))
    said = worker.read(run)
    assert_right_or_refused(said, oracle, run / PART)
    assert "error" in said and "column chunk example BOOLEAN" in said["error"], said


@st.composite
def damage(draw, size: int, footer: int):
    """A byte flipped in the footer or in the pages, or the file cut short."""
    kind = draw(st.sampled_from(["footer", "pages", "cut"]))
    if kind == "cut":
        return kind, draw(st.integers(1, size - 1)), 0
    low, high = (footer, size - 1) if kind == "footer" else (0, footer - 1)
    return kind, draw(st.integers(low, high)), draw(st.sampled_from([0x01, 0x04, 0x80, 0xFF]))


def test_any_damage_reads_right_or_is_refused(pristine, tmp_path_factory, worker, oracle):
    data = (pristine / PART).read_bytes()
    root = tmp_path_factory.mktemp("damages")

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(damage(len(data), footer_start(data)))
    def check(change):
        kind, at, bits = change
        if kind == "cut":
            changed = data[:at]
        else:
            changed = bytearray(data)
            changed[at] ^= bits
        run = damaged(pristine, root / "run", bytes(changed))
        assert_right_or_refused(worker.read(run), oracle, run / PART)

    check()


def test_a_manifest_claiming_other_units_than_the_files_is_refused(
    pristine, tmp_path, worker, oracle, units=16_000_000
):
    """The manifest says the cell has `units` units, its part files' footers 3: refused from the
    footers, before an array is sized by the claim (16 million units would take gigabytes)."""
    run = tmp_path / "run"
    shutil.copytree(pristine, run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["cells"][0]["units"] = manifest["cells"][0]["output_size"] = units
    (run / "manifest.json").write_text(json.dumps(manifest))
    said = worker.read(run)
    assert_right_or_refused(said, oracle, run / "gates")
    assert "error" in said and f"description says {units:,}" in said["error"], said


def test_a_key_column_holding_a_null_is_refused(pristine, tmp_path, worker, oracle):
    """The gate's part file rewritten with one example key null (its footer's description and
    statistics kept): the dense blocks and the frame name the file."""
    import pyarrow as pa

    run = tmp_path / "run"
    shutil.copytree(pristine, run)
    shutil.rmtree(run / "_statistics")  # (which would stand for the rewritten footer)
    table = pq.read_table(run / PART)
    examples = table["example"].to_pylist()
    examples[5] = None
    table = table.set_column(
        0, pa.field("example", pa.int64(), nullable=True), pa.array(examples, pa.int64())
    ).replace_schema_metadata(pq.read_metadata(run / PART).metadata)
    pq.write_table(table, run / PART)
    said = worker.read(run)
    assert_right_or_refused(said, oracle, run / PART)
    assert "error" in said and "example column holds nulls" in said["error"], said
