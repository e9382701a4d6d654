"""Part files rewritten by another tool: rows in another order, a row group's count edited in the footer.

Each is valid Parquet whose checksums hold. A reader takes its values where its keys put them
(pandas reading the file is the oracle), or names the file in one line: never values under
the wrong units, never rows silently dropped.
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
from recorders.read.means import unit_means
from recorders.write.thrift import varint
from tests.conftest import R, build
from tracer._tf import tf, v1

LSTM = "rnn/basic_lstm_cell"


def record_small_lstm(out: Path, seed: int) -> Path:
    """A BasicLSTMCell(3) recorded into `out` on 6 sequences of 5 steps (inputs of `seed`), in
    batches of 4: two part files a gate, every row group holding every (example, step, unit)
    of its ranges (the dense blocks' fast case), each file carrying statistics and top values."""

    def body(x):
        outputs, _ = v1.nn.static_rnn(R.BasicLSTMCell(3), tf.unstack(x, axis=1), dtype=tf.float32)
        return [outputs[-1]]

    x = np.random.RandomState(seed).randn(6, 5, 4).astype(np.float32)
    tracer.record(tracer.from_session(build(body).session), {"x": x}, out, batch_size=4)
    return out


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return record_small_lstm(tmp_path_factory.mktemp("order") / "run", seed=5)


def copy(pristine: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the recording, and its first part file of gate f."""
    run = tmp_path / "run"
    shutil.copytree(pristine, run)
    folder = run / "gates" / ("cell=" + LSTM.replace("/", "%2F")) / "gate=f"
    return run, sorted(folder.glob("part-*.parquet"))[0]


def oracle(run: Path) -> np.ndarray:
    """Gate f's activations as [examples, steps, units], by pandas from the files."""
    folder = run / "gates" / ("cell=" + LSTM.replace("/", "%2F")) / "gate=f"
    df = pd.concat([pd.read_parquet(p) for p in sorted(folder.glob("part-*.parquet"))])
    out = np.full((6, 5, 3), np.nan, np.float32)
    out[df["example"], df["step"], df["unit"]] = df["activation"]
    return out


def from_blocks(rec: Recording) -> np.ndarray:
    out = np.full((6, 5, 3), np.nan, np.float32)
    for b in rec.gate_blocks(LSTM, "f"):
        out[np.ix_(b.examples, b.steps)] = b.values
    return out


@pytest.mark.parametrize("order", [None, ["unit", "example", "step"], ["step", "example", "unit"]])
def test_rows_in_another_order_are_read_where_their_keys_put_them(pristine, tmp_path, order):
    run, rel = copy(pristine, tmp_path)
    if order is not None:
        table = pq.read_table(rel).sort_by([(k, "ascending") for k in order])
        pq.write_table(table, rel, write_page_checksum=True, compression="none")
    want = oracle(run)
    assert not np.isnan(want).any()
    rec = Recording(run)
    rec.check()
    np.testing.assert_array_equal(from_blocks(rec), want)
    np.testing.assert_array_equal(rec.gate_array(LSTM, "f"), want)
    means = unit_means(rec, "gates", LSTM, "f", "activation", None)
    np.testing.assert_allclose(list(means.values()), want.mean(axis=(0, 1)), rtol=1e-6)


def edit_footer(path: Path, old: bytes, new: bytes) -> None:
    """Replace the one occurrence of `old` in the file's footer with `new` (of its length)."""
    data = path.read_bytes()
    size = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - size
    footer = data[start:-8]
    assert footer.count(old) == 1 and len(old) == len(new)
    path.write_bytes(data[:start] + footer.replace(old, new) + data[-8:])


def i64(n: int, width: int | None = None) -> bytes:
    """A Thrift compact i64 (zigzag varint), padded to `width` bytes (a varint may carry
    zero groups: pyarrow reads it)."""
    b = bytearray(varint(n << 1))
    while width is not None and len(b) < width:
        b[-1] |= 0x80
        b.append(0)
    return bytes(b)


@pytest.mark.parametrize("also_file", [False, True], ids=["row group", "row group and file"])
def test_a_row_group_count_edited_in_the_footer_is_named(pristine, tmp_path, also_file):
    run, rel = copy(pristine, tmp_path)
    metadata = pq.read_metadata(rel)
    assert metadata.num_row_groups == 1
    group = metadata.row_group(0)
    rows, fewer = group.num_rows, group.num_rows // 3
    width = len(i64(rows))
    head = b"\x16" + i64(group.total_byte_size) + b"\x16"
    edit_footer(rel, head + i64(rows), head + i64(fewer, width))
    if also_file:  # FileMetaData's num_rows, just before its list of one row group
        edit_footer(
            rel, b"\x16" + i64(rows) + b"\x19\x1c", b"\x16" + i64(fewer, width) + b"\x19\x1c"
        )
    edited = pq.read_metadata(rel)
    assert edited.row_group(0).num_rows == fewer
    assert edited.num_rows == (fewer if also_file else rows)
    assert len(pq.read_table(rel)) == fewer  # read as it says: silently short
    shown = f"{run}/{rel.relative_to(run)} is not a part file gatetrace wrote (row group 0 counts {fewer}"
    for read in (
        lambda rec: rec.check(pages=False),
        lambda rec: list(rec.gate_blocks(LSTM, "f")),
        lambda rec: rec.gate_array(LSTM, "f"),
    ):
        with pytest.raises(RecordingError) as err:
            read(Recording(run))
        assert str(err.value).startswith(shown) and "\n" not in str(err.value), str(err.value)
