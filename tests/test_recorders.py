"""The TensorFlow-free half: long columns, the batch-by-batch Parquet writer, resume and shards."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from recorders import (
    Intervals,
    KeyCache,
    OutputExistsError,
    RecordingError,
    RecordingWriter,
    SelectionError,
    Shard,
    key_columns,
    partition_dir,
)
from recorders.write.layout import COMPRESSIONS

DESCRIPTION = {"cells": [{"name": "a/b"}]}


def batch(writer, start, stop, cell="rnn/basic_lstm_cell", name="f", commit=True):
    """Write examples [start, stop) of one gate with values 100 * example + position; return them."""
    examples = np.arange(start, stop)
    values = (100 * examples[:, None, None] + np.arange(6).reshape(1, 3, 2)).astype(np.float32)
    writer.begin(start, stop)
    writer.write_gate(cell, name, examples, np.array([0, 1, 2]), values, -values)
    if commit:
        writer.commit()
    return values


def progress(out, tag="shard-0-of-1"):
    return json.loads((out / "_progress" / f"{tag}.json").read_text())


def test_key_columns_are_c_ordered():
    keys = key_columns(np.array([5, 6]), np.array([0, 1, 2]), 2)
    assert keys["example"].tolist() == [5] * 6 + [6] * 6
    assert keys["step"].tolist() == [0, 0, 1, 1, 2, 2] * 2
    assert keys["unit"].tolist() == [0, 1] * 6


def test_key_cache_equals_key_columns():
    cache = KeyCache(size=2, starts=2)
    for examples in (
        [3, 4, 5],
        [6, 7, 8],
        [9, 10],
        [4, 2, 7],
        [],
        [3, 4, 5],
        [0, 1, 2],
        [6, 7, 8],
        [3, 4, 5],
    ):
        got, want = (
            cache(np.array(examples), np.array([2, 3]), 3),
            key_columns(np.array(examples), np.array([2, 3]), 3),
        )
        assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in want.items()}


def test_key_cache_hands_out_one_example_column_per_start_across_threads():
    """A batch's files ask for the same row groups from two writer threads: each start's
    example column is built once and shared, and every column stays right."""
    from concurrent.futures import ThreadPoolExecutor

    cache, steps = KeyCache(starts=3), np.arange(50)
    starts = [0, 81, 162] * 40

    def keys(start: int) -> dict:
        return cache(np.arange(start, start + 81), steps, 256)

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(keys, starts))
    for start, columns in zip(starts, got, strict=True):
        want = key_columns(np.arange(start, start + 81), steps, 256)
        assert all(np.array_equal(columns[k], want[k]) for k in want)
    assert len({id(columns["example"]) for columns in got}) == 3


def test_recording_round_trips_and_close_is_idempotent(tmp_path):
    out = tmp_path / "run"
    with RecordingWriter(out, DESCRIPTION, examples=(0, 4)) as writer:
        first, second = batch(writer, 0, 2), batch(writer, 2, 4)
        manifest = writer.close()
        assert writer.close() is manifest
    assert manifest["rows"]["gates"] == 24 and manifest["examples"] == 4 and manifest["complete"]
    df = pd.read_parquet(out / "gates")
    assert df["cell"].astype(str).unique().tolist() == ["rnn/basic_lstm_cell"]
    values = np.concatenate([first, second])
    assert df["example"].tolist() == np.repeat([0, 1, 2, 3], 6).tolist()
    assert df["preactivation"].tolist() == values.reshape(-1).tolist()
    assert df["activation"].tolist() == (-values).reshape(-1).tolist()
    assert json.loads((out / "manifest.json").read_text()) == {
        **DESCRIPTION,
        "examples": 4,
        "rows": manifest["rows"],
        "shards": 1,
    }
    assert sorted(p.name for p in out.iterdir()) == [
        "_progress",
        "_statistics",
        "gates",
        "manifest.json",
    ]
    assert sorted(
        p.name for p in (out / "gates" / "cell=rnn%2Fbasic_lstm_cell" / "gate=f").iterdir()
    ) == [
        "part-0000000000.parquet",
        "part-0000000002.parquet",
    ]
    assert progress(out)["complete"] == [[0, 4]] and progress(out)["finished"]


def test_a_batch_is_written_a_row_group_of_examples_at_a_time(tmp_path, monkeypatch):
    """Values given as callables are asked for one row group's examples at a time; the
    file holds one row group per chunk, with every value in place and lengths applied."""
    import pyarrow.parquet as pq

    import recorders.write.rowgroups

    # 2 examples of 3 steps x 2 units
    monkeypatch.setattr(recorders.write.rowgroups, "ROW_GROUP_ROWS", 12)
    examples = np.arange(10, 15)
    values = (100 * examples[:, None, None] + np.arange(6).reshape(1, 3, 2)).astype(np.float32)
    asked = []

    def rows(r: slice) -> np.ndarray:
        asked.append((r.start, r.stop))
        return values[r]

    lengths = np.array([3, 1, 0, 2, 3])
    with RecordingWriter(tmp_path / "run", DESCRIPTION, examples=(10, 15)) as writer:
        writer.begin(10, 15)
        writer.write_gate("a/b", "f", examples, np.array([0, 1, 2]), rows, None, lengths)
        writer.write_state("a/b", "h", examples, np.array([0, 1, 2]), values, None)
    assert asked == [(0, 1), (0, 2), (2, 4), (4, 5)]  # the first call reads the width
    gates = pq.ParquetFile(next((tmp_path / "run" / "gates").rglob("*.parquet")))
    assert [gates.metadata.row_group(k).num_rows for k in range(gates.num_row_groups)] == [8, 4, 6]
    df = gates.read().to_pandas()
    keep = np.arange(3)[None, :] < lengths[:, None]
    assert df["example"].tolist() == np.repeat(examples, keep.sum(1) * 2).tolist()
    assert df["preactivation"].tolist() == values[keep].reshape(-1).tolist()
    states = pd.read_parquet(tmp_path / "run" / "states")
    assert (
        states["value"].tolist() == values.reshape(-1).tolist()
        and states["step"].tolist() == np.tile(np.repeat([0, 1, 2], 2), 5).tolist()
    )


def test_columns_without_nulls_are_required_and_read_as_before(tmp_path):
    """Keys and values are written as required columns (no definition levels), the parts a
    cell kind may lack as optional; pandas, pyarrow and DuckDB read the same rows and dtypes,
    also from a folder mixing such files with files of optional columns (a recording resumed
    from an older version)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from recorders.write.columns import ABSENT

    out = tmp_path / "run"
    examples = np.arange(0, 3)
    values = (100 * examples[:, None, None] + np.arange(6).reshape(1, 3, 2)).astype(np.float32)
    with RecordingWriter(out, DESCRIPTION, examples=(0, 3)) as writer:
        writer.begin(0, 3)
        parts = {"input": values, "recurrent": -values, "bias": ABSENT, "peephole": None}
        writer.write_gate(
            "a/b",
            "f",
            examples,
            np.arange(3),
            values,
            -values,
            parts=lambda r: {
                k: (v if v is None or v is ABSENT else v[r]) for k, v in parts.items()
            },
        )
        writer.write_state("a/b", "h", examples, np.arange(3), values)
    gate_file = next((out / "gates").rglob("*.parquet"))
    schema = pq.read_schema(gate_file)
    assert {f.name: f.nullable for f in schema} == {
        "example": False,
        "step": False,
        "unit": False,
        "preactivation": False,
        "activation": False,
        "input": True,
        "recurrent": True,
        "bias": True,
        "peephole": True,
    }
    assert not any(f.nullable for f in pq.read_schema(next((out / "states").rglob("*.parquet"))))
    # an older file of the same gate, with optional columns, beside the new one
    old = pq.read_table(gate_file)
    old = pa.Table.from_arrays(
        old.columns, schema=pa.schema([f.with_nullable(True) for f in old.schema])
    )
    pq.write_table(old, gate_file.with_name("part-0000000003.parquet"))
    df = pd.read_parquet(out / "gates")
    assert (
        len(df) == 2 * values.size
        and df["example"].dtype == np.int64
        and df["activation"].dtype == np.float32
    )
    assert (
        df["preactivation"].tolist() == values.reshape(-1).tolist() * 2 and df["bias"].isna().all()
    )
    duckdb = pytest.importorskip("duckdb")
    got = duckdb.sql(
        f"select count(*), sum(preactivation), count(bias) from read_parquet('{out}/gates/*/*/*.parquet')"
    ).fetchall()[0]
    assert got == (2 * values.size, 2 * float(values.sum()), 0)


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_each_compression_lays_out_the_columns_as_documented_and_reads_back_exactly(
    tmp_path, compression
):
    """`fast` (the default): keys plain and lz4, floats plain and uncompressed; lz4, zstd,
    snappy: that codec on every column, floats byte-stream-split; none: no codec. Min and
    max are written for example and step, never for unit or the floats. Every value reads
    back bit for bit (pandas and DuckDB)."""
    import pyarrow.parquet as pq

    from recorders.write.columns import ABSENT

    out = tmp_path / "run"
    rng = np.random.default_rng(0)
    examples, steps = np.arange(4, 7), np.arange(2, 6)
    values = rng.standard_normal((3, 4, 5)).astype(np.float32)
    with RecordingWriter(
        out,
        DESCRIPTION,
        examples=(4, 7),
        compression=None if compression == "fast" else compression,
    ) as writer:
        writer.begin(4, 7)
        writer.write_gate(
            "a/b",
            "f",
            examples,
            steps,
            values,
            -values,
            parts=lambda r: {
                "input": values[r],
                "recurrent": None,
                "bias": ABSENT,
                "peephole": None,
            },
        )
        writer.write_state("a/b", "c", examples, steps, 2 * values)
    codec = {
        "fast": "LZ4",
        "lz4": "LZ4",
        "zstd": "ZSTD",
        "snappy": "SNAPPY",
        "none": "UNCOMPRESSED",
    }[compression]
    floats = ("UNCOMPRESSED", "PLAIN") if compression == "fast" else (codec, "BYTE_STREAM_SPLIT")
    for table, expected in (
        ("gates", {"preactivation": values, "activation": -values, "input": values}),
        ("states", {"value": 2 * values}),
    ):
        file = pq.ParquetFile(next((out / table).rglob("*.parquet")))
        group = file.metadata.row_group(0)
        for k in range(group.num_columns):
            column = group.column(k)
            name, stats = column.path_in_schema, column.statistics
            is_float = name not in ("example", "step", "unit")
            assert (
                column.compression,
                "BYTE_STREAM_SPLIT" if "BYTE_STREAM_SPLIT" in column.encodings else "PLAIN",
            ) == (floats if is_float else (codec, "PLAIN")), name
            if name in ("example", "step"):
                assert (stats.min, stats.max) == {"example": (4, 6), "step": (2, 5)}[name]
            else:
                assert stats is None or not stats.has_min_max, name
        df = file.read().to_pandas()
        assert df["example"].tolist() == np.repeat(examples, 20).tolist()
        assert (
            df["step"].tolist() == np.tile(np.repeat(steps, 5), 3).tolist()
            and df["unit"].tolist() == list(range(5)) * 12
        )
        for name, want in expected.items():
            assert np.array_equal(
                df[name].to_numpy().view(np.uint32), want.reshape(-1).view(np.uint32)
            ), name
    duckdb = pytest.importorskip("duckdb")
    got = duckdb.sql(
        f"select preactivation from read_parquet('{out}/gates/*/*/*.parquet') order by example, step, unit"
    ).fetchnumpy()
    assert np.array_equal(got["preactivation"].view(np.uint32), values.reshape(-1).view(np.uint32))
    assert duckdb.sql(
        f"select count(bias), count(*) from read_parquet('{out}/gates/*/*/*.parquet')"
    ).fetchall() == [(0, 60)]


def test_a_failure_keeps_committed_batches_and_writes_no_manifest(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="model failed"):
        with RecordingWriter(out, DESCRIPTION, examples=(0, 6)) as writer:
            batch(writer, 0, 2)
            batch(writer, 2, 4, commit=False)
            raise RuntimeError("model failed")
    assert sorted(p.name for p in out.iterdir()) == ["_progress", "_statistics", "gates"]
    assert pd.read_parquet(out / "gates")["example"].unique().tolist() == [0, 1]
    assert progress(out)["complete"] == [[0, 2]] and not progress(out)["finished"]
    with pytest.raises(RecordingError, match="already aborted"):
        batch(writer, 4, 6)
    writer.abort()  # idempotent


def test_resume_continues_where_the_last_run_stopped(tmp_path):
    out = tmp_path / "run"
    writer = RecordingWriter(out, DESCRIPTION, examples=(0, 6))
    batch(writer, 0, 2)
    batch(writer, 2, 4, commit=False)
    writer.abort()
    # A batch whose files were moved into place but never committed (a kill mid-commit).
    folder = out / "gates" / "cell=rnn%2Fbasic_lstm_cell" / "gate=f"
    (folder / "part-0000000003.parquet").write_bytes(
        (folder / "part-0000000000.parquet").read_bytes()
    )
    with pytest.raises(
        OutputExistsError,
        match="already holds a partial recording; pass resume=True to continue it, or pass overwrite=True to record it again",
    ):
        RecordingWriter(out, DESCRIPTION, examples=(0, 6))
    with RecordingWriter(out, DESCRIPTION, examples=(0, 6), resume=True) as writer:
        assert writer.resumed and writer.remaining() == [(2, 6)]
        assert not (folder / "part-0000000003.parquet").exists()
        batch(writer, 2, 5)
        batch(writer, 5, 6)
    df = pd.read_parquet(out / "gates")
    assert df["example"].tolist() == np.repeat(np.arange(6), 6).tolist()
    assert json.loads((out / "manifest.json").read_text())["rows"]["gates"] == 36


def test_refuses_another_recording_and_non_empty_folders(tmp_path):
    out = tmp_path / "run"
    with RecordingWriter(out, DESCRIPTION, examples=(0, 2)) as writer:
        batch(writer, 0, 2)
    other = {"cells": [{"name": "c/d"}]}
    with pytest.raises(
        OutputExistsError,
        match=r"holds another recording \(different cells\); choose another folder, or pass overwrite=True to record it again",
    ):
        RecordingWriter(out, other, examples=(0, 2), resume=True)
    with pytest.raises(
        OutputExistsError, match=r"holds another recording \(it is split into 1 shards, not 2\)"
    ):
        RecordingWriter(out, DESCRIPTION, examples=(0, 2), shard=Shard(1, 2))
    with pytest.raises(RecordingError, match="pass one of them"):
        RecordingWriter(out, DESCRIPTION, overwrite=True, resume=True)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    with pytest.raises(
        OutputExistsError,
        match=rf"out={re.escape(repr(str(mine)))} holds what gatetrace did not write \(keep.txt\); choose another path$",
    ):
        RecordingWriter(mine, DESCRIPTION)
    with pytest.raises(
        OutputExistsError,
        match=r"holds what gatetrace did not write \(keep.txt\); overwrite=True replaces only",
    ):
        RecordingWriter(mine, DESCRIPTION, overwrite=True, examples=(0, 2))
    assert (
        sorted(p.name for p in mine.iterdir()) == ["keep.txt"]
        and (mine / "keep.txt").read_text() == "mine"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "run"]


def test_overwrite_replaces_a_recording_only_once_the_new_one_is_complete(tmp_path):
    out = tmp_path / "run"
    with RecordingWriter(out, DESCRIPTION, examples=(0, 4)) as writer:
        batch(writer, 0, 4)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(RuntimeError, match="the run fails"):
        with RecordingWriter(out, DESCRIPTION, overwrite=True, examples=(0, 2)) as writer:
            batch(writer, 0, 1)
            raise RuntimeError("the run fails")
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no hidden sibling left behind
    with RecordingWriter(out, DESCRIPTION, overwrite=True, examples=(0, 2)) as writer:
        # the old one stays until the end
        assert writer.out != out.resolve() and (out / "manifest.json").exists()
        batch(writer, 0, 2)
    assert json.loads((out / "manifest.json").read_text())["examples"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    with pytest.raises(
        RecordingError,
        match=r"--overwrite with --shard 0/2: it would replace the folder the other shards write into",
    ):
        RecordingWriter(out, DESCRIPTION, overwrite=True, examples=(0, 2), shard=Shard(0, 2))


def test_shards_write_one_dataset_and_the_last_one_writes_the_manifest(tmp_path):
    out = tmp_path / "run"
    shards = [Shard.parse(f"{k}/3") for k in range(3)]
    assert [s.part(10, 20) for s in shards] == [(10, 13), (13, 16), (16, 20)]
    writers = [RecordingWriter(out, DESCRIPTION, examples=(10, 20), shard=s) for s in shards]
    for w in writers:
        ((start, stop),) = w.remaining()
        batch(w, start, stop)
    summaries = [w.close() for w in reversed(writers)]
    assert [s["complete"] for s in summaries] == [False, False, True]
    assert [s["examples"] for s in summaries] == [4, 3, 3]
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["examples"], manifest["rows"]["gates"], manifest["shards"]) == (10, 60, 3)
    assert sorted(pd.read_parquet(out / "gates")["example"].unique().tolist()) == list(
        range(10, 20)
    )


@pytest.mark.parametrize("text", ["3/3", "-1/2", "1", "a/b", "0/0"])
def test_bad_shards(text):
    with pytest.raises(SelectionError, match="expected K/N with 0 <= K < N"):
        Shard.parse(text)


def test_intervals():
    done = Intervals([[5, 7], [0, 2]])
    done.add(2, 3)
    done.add(9, 9)
    assert done.pairs() == [[0, 3], [5, 7]] and done.total() == 5
    assert [x in done for x in (0, 2, 3, 4, 5, 6, 7)] == [
        True,
        True,
        False,
        False,
        True,
        True,
        False,
    ]
    assert done.missing(1, 10) == [(3, 5), (7, 10)] and done.missing(0, 3) == []
    done.add(3, 5)
    assert done.pairs() == [[0, 7]]


def test_partition_names_are_percent_encoded_and_read_back(tmp_path):
    assert partition_dir(cell="a/b c", gate="f") == "cell=a%2Fb c/gate=f"
    with RecordingWriter(tmp_path / "run", DESCRIPTION, examples=(0, 1)) as writer:
        batch(writer, 0, 1, cell="enc/rnn/multi_rnn_cell/cell_0/lstm_cell")
    assert pd.read_parquet(tmp_path / "run" / "gates")["cell"].astype(str).unique().tolist() == [
        "enc/rnn/multi_rnn_cell/cell_0/lstm_cell"
    ]


def test_recorders_never_import_tensorflow():
    code = "import sys, recorders, recorders.write.writer, tracer.cells.reference; print('tensorflow' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_the_command_line_starts_without_pandas_and_every_public_name_resolves():
    """`gatetrace --version` and the parser of every command load neither pandas nor the
    writer (each public name of `recorders` is loaded on first use), and every name listed
    in `recorders.__all__` and `recorders.write.__all__` is there when asked for."""
    code = (
        "import sys, contextlib, io, recorders, recorders.write, tracer.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    tracer.cli.main(['--version'])\n"
        "print(sorted(m for m in ('pandas', 'recorders.write.writer', 'recorders.read.reader') if m in sys.modules))\n"
        "missing = [n for mod in (recorders, recorders.write) for n in mod.__all__ if getattr(mod, n, None) is None]\n"
        "print(missing)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.split("\n")[:2] == ["[]", "[]"], result.stdout


def test_a_shard_that_fails_before_its_first_batch_leaves_the_other_shards_work(tmp_path):
    out = tmp_path / "run"
    with RecordingWriter(out, DESCRIPTION, examples=(0, 4), shard=Shard(0, 2)) as writer:
        batch(writer, 0, 2)
    before = sorted(p.relative_to(out) for p in out.rglob("*.parquet"))
    with pytest.raises(RuntimeError, match="the shard fails"):
        with RecordingWriter(out, DESCRIPTION, examples=(0, 4), shard=Shard(1, 2)):
            raise RuntimeError("the shard fails")
    assert sorted(p.relative_to(out) for p in out.rglob("*.parquet")) == before and before
    assert progress(out, "shard-1-of-2")["complete"] == []
    with pytest.raises(
        OutputExistsError, match="already holds a partial recording of shard 1/2; pass resume=True"
    ):
        RecordingWriter(out, DESCRIPTION, examples=(0, 4), shard=Shard(1, 2))
    with RecordingWriter(
        out, DESCRIPTION, examples=(0, 4), shard=Shard(1, 2), resume=True
    ) as writer:
        batch(writer, 2, 4)
    assert json.loads((out / "manifest.json").read_text())["examples"] == 4


def test_shards_that_all_fail_before_their_first_batch_can_be_resumed(tmp_path):
    """Every shard of a shared folder fails after writing the weights table: the folder
    stays a recording (each keeps its empty progress file) that a retry resumes."""
    out = tmp_path / "run"
    for k in range(2):
        with pytest.raises(RuntimeError, match="the shard fails"):
            with RecordingWriter(out, DESCRIPTION, examples=(0, 4), shard=Shard(k, 2)) as writer:
                writer.write_weights(
                    {
                        "cell": ["a/b"],
                        "gate": ["f"],
                        "source": ["input"],
                        "row": np.zeros(1, np.int32),
                        "unit": np.zeros(1, np.int32),
                        "value": np.ones(1, np.float32),
                    }
                )
                raise RuntimeError("the shard fails")
    assert sorted(p.name for p in out.iterdir()) == ["_progress", "weights.parquet"]
    assert [progress(out, f"shard-{k}-of-2")["complete"] for k in range(2)] == [[], []]
    for k in range(2):
        with RecordingWriter(
            out, DESCRIPTION, examples=(0, 4), shard=Shard(k, 2), resume=True
        ) as writer:
            batch(writer, 2 * k, 2 * k + 2)
    assert sorted(pd.read_parquet(out / "gates")["example"].unique().tolist()) == [0, 1, 2, 3]
    assert json.loads((out / "manifest.json").read_text())["examples"] == 4


def test_overwrite_is_refused_while_another_writer_holds_the_recording(tmp_path):
    """--overwrite of a recording another writer is still writing is refused, and leaves that
    writer's recording whole; once it is finished, --overwrite replaces it."""
    out = tmp_path / "run"
    running = RecordingWriter(out, DESCRIPTION, examples=(0, 6))
    first = batch(running, 0, 2)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(
        RecordingError,
        match=r"another gatetrace process is recording .*run \(it holds .*shard-0-of-1.lock\); "
        r"wait for it to finish, or stop it, then rerun with --overwrite",
    ):
        RecordingWriter(out, DESCRIPTION, examples=(0, 6), overwrite=True)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no sibling was left behind
    rest = [batch(running, 2, 4), batch(running, 4, 6)]
    assert running.close()["examples"] == 6
    df = pd.read_parquet(out / "gates")
    assert df["preactivation"].tolist() == np.concatenate([first, *rest]).reshape(-1).tolist()
    with RecordingWriter(out, DESCRIPTION, examples=(0, 2), overwrite=True) as replacing:
        batch(replacing, 0, 2)
    assert json.loads((out / "manifest.json").read_text())["examples"] == 2


def test_an_install_hint_says_what_works_for_how_gatetrace_was_installed(tmp_path, monkeypatch):
    """From a folder (a clone, as the README installs it): that folder with the extra, which
    pip installs; by name only where gatetrace came from the index (the name alone fails for
    a clone). Before: `pip install "gatetrace[view]"` everywhere."""
    import importlib.metadata
    import json

    from recorders import errors

    class Installed:
        def __init__(self, described):
            self.described = described

        def read_text(self, name):
            return self.described if name == "direct_url.json" else None

    clone = tmp_path / "my clone"
    origin = json.dumps({"url": clone.as_uri(), "dir_info": {}})
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Installed(origin))
    assert errors.install_hint("view") == f'pip install "{clone}[view]"'
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Installed(None))
    monkeypatch.setattr(
        errors, "__file__", str(tmp_path / "site-packages" / "recorders" / "errors.py")
    )
    assert errors.install_hint("view") == 'pip install "gatetrace[view]"'


def test_output_errors_name_options_as_the_caller_gives_them(tmp_path):
    """In Python an occupied output is answered with the function's keywords (`out='...'`,
    `resume=True`, `overwrite=True`); on the command line, the same refusal names the flags."""
    from recorders.errors import option, options_as

    assert (option("out", tmp_path), option("resume")) == (f"out={str(tmp_path)!r}", "resume=True")
    with options_as("command line"):
        assert (option("out", "run1"), option("overwrite")) == ("--out run1", "--overwrite")
    assert option("overwrite") == "overwrite=True"  # the block's way ends with it
    with pytest.raises(ValueError):
        with options_as("shell"):
            pass
