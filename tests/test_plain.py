"""The default layout's part files, written without pyarrow's encoder (recorders.write.plain): the
same files pyarrow writes for them, read back equal by pyarrow, pandas, DuckDB and Polars, with
the statistics that skip row groups; a key array's page encoded once while it lives; and the
files written past the page cache (recorders.write.direct) byte for byte as through it."""

from __future__ import annotations

import errno
import fcntl
import gc
import os

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from recorders.write import direct, plain, rowgroups
from recorders.write.folder import Folder
from recorders.write.keys import KeyCache

STEPS, UNITS = 7, 5


def values(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, STEPS, UNITS)).astype(np.float32)


# What a part file can hold: a gate's two value columns, a state's one, a gate's parts with
# one of them a column of nulls (a part the cell kind does not have).
TABLES = {
    "gate": lambda n: ({"preactivation": values(n, 1), "activation": values(n, 2)}, None),
    "state": lambda n: ({"value": values(n, 3)}, None),
    "parts": lambda n: (
        {"preactivation": values(n, 1), "activation": None},
        lambda rows: {"input": values(n, 4)[rows], "peephole": None},
    ),
}


def chunks(table: str, n: int, first: int, keys, lengths=None):
    columns, parts = TABLES[table](n)
    steps = np.arange(STEPS, dtype=np.int32)
    return rowgroups.chunks(np.arange(first, first + n), steps, columns, lengths, keys, parts)


def both(tmp_path, table, layout, n=40, first=1000, lengths=None):
    """The same columns written by write_parquet (plain) and by pyarrow's encoder: their ParquetFiles."""
    ours, theirs = tmp_path / "plain.parquet", tmp_path / "arrow.parquet"
    rows = rowgroups.write_parquet(
        ours, chunks(table, n, first, KeyCache(), lengths), b'{"a": 1}', compression=layout
    )
    rowgroups._write_arrow(
        theirs, chunks(table, n, first, KeyCache(), lengths), b'{"a": 1}', (), layout, None
    )
    return rows, pq.ParquetFile(ours), pq.ParquetFile(theirs)


@pytest.fixture
def small_row_groups(monkeypatch):
    """Row groups of 3 examples (7 x 5 rows each): files of many row groups."""
    monkeypatch.setattr(rowgroups, "ROW_GROUP_ROWS", 3 * STEPS * UNITS)


@pytest.mark.parametrize("layout", plain.PLAIN_LAYOUTS)
@pytest.mark.parametrize("table", sorted(TABLES))
@pytest.mark.parametrize("masked", [False, True], ids=["all-steps", "lengths"])
def test_plain_files_are_the_files_pyarrow_writes(
    tmp_path, small_row_groups, layout, table, masked
):
    lengths = np.random.default_rng(0).integers(0, STEPS + 1, 40) if masked else None
    rows, ours, theirs = both(tmp_path, table, layout, lengths=lengths)
    assert ours.metadata.created_by.startswith("gatetrace")
    assert ours.schema == theirs.schema  # Parquet types, required or optional
    assert ours.schema_arrow.metadata == {b"gatetrace": b'{"a": 1}'}
    read = pq.read_table(tmp_path / "plain.parquet")
    want = pq.read_table(tmp_path / "arrow.parquet")
    assert read.schema.equals(want.schema.remove_metadata().with_metadata(read.schema.metadata))
    assert read.equals(want) and rows == want.num_rows > 0
    if table == "parts":
        assert read["peephole"].null_count == rows and read["input"].null_count == 0
    m, w = ours.metadata, theirs.metadata
    assert m.num_row_groups == w.num_row_groups == 14  # ceil(40 / 3)
    for g in range(m.num_row_groups):
        assert m.row_group(g).num_rows == w.row_group(g).num_rows
        for c in range(m.num_columns):
            a, b = m.row_group(g).column(c), w.row_group(g).column(c)
            assert (a.compression, a.encodings, a.num_values) == (
                b.compression,
                b.encodings,
                b.num_values,
            )
            assert a.is_stats_set == b.is_stats_set, a.path_in_schema
            if b.is_stats_set:
                sa, sb = a.statistics, b.statistics
                assert (sa.has_min_max, sa.min, sa.max, sa.null_count) == (
                    sb.has_min_max,
                    sb.min,
                    sb.max,
                    sb.null_count,
                )


@pytest.mark.parametrize("table", sorted(TABLES))
def test_duckdb_polars_and_a_filtered_dataset_read_the_same_rows(tmp_path, small_row_groups, table):
    rows, ours, _ = both(tmp_path, table, "fast")
    path = tmp_path / "plain.parquet"
    want = pq.read_table(tmp_path / "arrow.parquet").to_pandas()
    got = duckdb.sql(f"SELECT * FROM read_parquet('{path}') ORDER BY example, step, unit").df()
    assert got.equals(want)
    polars = pytest.importorskip("polars")
    assert polars.read_parquet(path).to_pandas().equals(want)
    # a filter on example skips row groups by their statistics: pyarrow reads only those that match
    fragment = next(ds.dataset(path).get_fragments())
    kept = fragment.subset(ds.field("example") >= 1036).row_groups
    assert [g.id for g in kept] == [12, 13]  # examples 1036-1038 and 1039
    got = ds.dataset(path).to_table(filter=ds.field("example") >= 1036).to_pandas()
    assert got.equals(want[want.example >= 1036].reset_index(drop=True))


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_page_carries_the_checksum_pyarrow_verifies(tmp_path, small_row_groups, table):
    """Each page's CRC32 as the plain writer computes it (and pyarrow's encoder, for the other
    layouts) is the one pyarrow verifies: the files read whole with verification, and a byte
    changed at the end of any page (a value, a compressed key, definition levels) is refused."""
    lengths = np.random.default_rng(1).integers(0, STEPS + 1, 40)
    both(tmp_path, table, "fast", lengths=lengths)
    for name in ("plain.parquet", "arrow.parquet"):
        path = tmp_path / name
        pq.read_table(path, page_checksum_verification=True)
        original, metadata = path.read_bytes(), pq.read_metadata(path)
        for g in range(metadata.num_row_groups):
            for c in range(metadata.num_columns):
                chunk = metadata.row_group(g).column(c)
                assert not chunk.has_dictionary_page  # one data page: the chunk ends with its body
                changed = bytearray(original)
                changed[chunk.data_page_offset + chunk.total_compressed_size - 1] ^= 0x01
                (tmp_path / "changed.parquet").write_bytes(bytes(changed))
                with pytest.raises(OSError, match="CRC checksum verification failed"):
                    pq.read_table(tmp_path / "changed.parquet", page_checksum_verification=True)


def test_a_key_page_is_encoded_once_while_its_array_lives(tmp_path, monkeypatch):
    encoded = []
    encode = plain._encode
    monkeypatch.setattr(
        plain, "_encode", lambda column, *a: encoded.append(column) or encode(column, *a)
    )
    keys = KeyCache()
    for k in range(3):  # three part files of one batch: the same examples, steps and units
        rowgroups.write_parquet(tmp_path / f"{k}.parquet", chunks("gate", 10, 0, keys), b"{}")
    key_pages = [c for c in encoded if c.dtype.kind == "i"]
    assert len(key_pages) == 3  # example, step and unit, once
    assert len(encoded) == 3 + 3 * 2  # and each file's two float columns
    tables = [pq.read_table(tmp_path / f"{k}.parquet") for k in range(3)]
    assert tables[0].equals(tables[2])
    assert tables[0]["example"].to_pylist() == np.repeat(np.arange(10), STEPS * UNITS).tolist()
    # the pages go with their arrays
    del keys, key_pages, encoded[:]
    gc.collect()
    assert not plain._ENCODED._chunks


def test_an_array_that_can_change_is_encoded_each_time(tmp_path):
    """A writable key column (no KeyCache) is never taken from the cache: what it holds when
    written is what the file holds."""
    example = np.zeros(4, np.int64)
    columns = {"example": example, "step": np.zeros(4, np.int32), "value": np.ones(4, np.float32)}
    rowgroups.write_parquet(tmp_path / "a.parquet", [columns], b"{}")
    example[:] = 7
    rowgroups.write_parquet(tmp_path / "b.parquet", [columns], b"{}")
    assert pq.read_table(tmp_path / "a.parquet")["example"].to_pylist() == [0] * 4
    assert pq.read_table(tmp_path / "b.parquet")["example"].to_pylist() == [7] * 4
    assert (
        pq.ParquetFile(tmp_path / "b.parquet").metadata.row_group(0).column(0).statistics.min == 7
    )


def test_a_file_of_no_rows_has_the_schema(tmp_path):
    rows, ours, theirs = both(tmp_path, "gate", "fast", lengths=np.zeros(40, int))
    assert rows == 0 and ours.metadata.num_row_groups == 0 and ours.schema == theirs.schema
    assert pq.read_table(tmp_path / "plain.parquet").num_rows == 0


@pytest.mark.parametrize(
    "column",
    [
        np.ones(6, np.float64),  # a type the layout does not have
        np.ones(12, np.float32)[::2],  # not contiguous
    ],
    ids=["float64", "strided"],
)
def test_columns_the_plain_writer_does_not_take_go_through_pyarrow(tmp_path, column):
    columns = {"example": np.arange(6), "value": column}
    assert not plain.plain_chunk(columns, "fast")
    rowgroups.write_parquet(tmp_path / "x.parquet", [columns], b"{}")
    assert pq.read_table(tmp_path / "x.parquet")["value"].to_pylist() == [1.0] * 6
    assert pq.ParquetFile(tmp_path / "x.parquet").metadata.created_by.startswith("parquet-cpp")


def test_columns_of_different_lengths_are_refused_as_pyarrow_refuses_them(tmp_path):
    columns = {"example": np.arange(6), "value": np.ones(5, np.float32)}
    assert not plain.plain_chunk(columns, "fast")
    with pytest.raises(pa.ArrowInvalid, match="length"):
        rowgroups.write_parquet(tmp_path / "x.parquet", [columns], b"{}")


def test_compressed_layouts_go_through_pyarrow(tmp_path):
    rowgroups.write_parquet(
        tmp_path / "z.parquet", chunks("gate", 4, 0, KeyCache()), b"{}", compression="zstd"
    )
    meta = pq.ParquetFile(tmp_path / "z.parquet").metadata
    assert (
        meta.created_by.startswith("parquet-cpp")
        and meta.row_group(0).column(3).compression == "ZSTD"
    )


# -- past the page cache (recorders.write.direct) ----------------------------------------------


def pieces(seed: int, sizes) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]


@pytest.mark.parametrize(
    "sizes",
    [
        [],
        [1],
        [4096],
        [direct.BUFFER],
        [direct.BUFFER + 1, 7],
        [3, direct.BUFFER - 5, 4096 * 3 + 1, 2 * direct.BUFFER],
    ],
    ids=["empty", "one-byte", "a-block", "a-buffer", "past-a-buffer", "mixed"],
)
def test_a_direct_file_holds_exactly_what_was_written(tmp_path, sizes):
    folder = Folder(tmp_path)
    f = direct.open_direct(folder, "x.bin")
    if f is None:
        pytest.skip(f"{tmp_path}'s file system does not take O_DIRECT")
    data = pieces(0, sizes)
    with f:
        for d in data:
            assert f.write(d) == len(d)
    assert (tmp_path / "x.bin").read_bytes() == b"".join(data)
    f.close()  # idempotent


def test_two_direct_files_open_in_one_thread_keep_their_own_bytes(tmp_path):
    folder = Folder(tmp_path)
    a, b = direct.open_direct(folder, "a.bin"), direct.open_direct(folder, "b.bin")
    if a is None or b is None:
        pytest.skip(f"{tmp_path}'s file system does not take O_DIRECT")
    da, db = pieces(1, [5000, direct.BUFFER]), pieces(2, [direct.BUFFER - 3, 9])
    for x, y in zip(da, db, strict=True):
        a.write(x)
        b.write(y)
    a.close()
    b.close()
    assert (tmp_path / "a.bin").read_bytes() == b"".join(da)
    assert (tmp_path / "b.bin").read_bytes() == b"".join(db)


def test_a_file_system_refusing_direct_writes_gets_the_file_through_the_page_cache(
    tmp_path, monkeypatch
):
    """Where O_DIRECT is taken at open and refused at the first write (EINVAL), the file is
    written all the same; where it is refused at open, `open_direct` says so (None)."""
    folder = Folder(tmp_path)
    f = direct.open_direct(folder, "x.bin")
    if f is None:
        pytest.skip(f"{tmp_path}'s file system does not take O_DIRECT")
    write, refused = os.write, []

    def refuse_direct(fd, data):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(fd)
            raise OSError(errno.EINVAL, "Invalid argument")
        return write(fd, data)

    monkeypatch.setattr(direct.os, "write", refuse_direct)
    data = pieces(3, [direct.BUFFER + 10, 100])
    with f:
        for d in data:
            f.write(d)
    assert refused and (tmp_path / "x.bin").read_bytes() == b"".join(data)

    def no_direct(*a, **k):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(folder, "open_fd", no_direct)
    assert direct.open_direct(folder, "y.bin") is None


@pytest.mark.parametrize("way", ["past the page cache", "through it"])
def test_part_files_are_the_same_past_the_page_cache_and_through_it(
    tmp_path, small_row_groups, monkeypatch, way
):
    """`write_in` (a recording's part files) past the page cache, and where the file system
    refuses that (`open_direct` gives None), writes what `write_parquet` does."""
    want = tmp_path / "want.parquet"
    rowgroups.write_parquet(want, chunks("parts", 40, 0, KeyCache()), b"{}")
    opened = []
    if way == "through it":
        monkeypatch.setattr(rowgroups, "open_direct", lambda folder, rel: opened.append(rel))
    rows = rowgroups.write_in(
        Folder(tmp_path), "a/part.parquet", chunks("parts", 40, 0, KeyCache()), b"{}"
    )
    assert rows == 40 * STEPS * UNITS
    assert (tmp_path / "a" / "part.parquet").read_bytes() == want.read_bytes()
    assert opened == ([] if way == "past the page cache" else ["a/part.parquet"])


def test_the_page_checksum_is_computed_by_isa_l():
    """The CRC32 of every page comes from ISA-L (a requirement: a fifth of zlib's CPU time a
    batch, bench/checksums.py); pyarrow verifies the value in the test above."""
    from recorders.write import plain

    assert plain.crc32.__module__ == "isal.isal_zlib"
