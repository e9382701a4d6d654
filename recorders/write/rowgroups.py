"""Encoding one Parquet file of long rows, a row group at a time, so that a batch's long columns never exist at once.

`chunks` cuts a batch's [examples, steps, units] arrays into row groups of whole examples
of about `ROW_GROUP_ROWS` rows, each as long columns (`recorders.write.columns`);
`write_parquet` encodes them as `recorders.write.layout` says (required columns,
statistics, codecs): the default layout's part files directly (`recorders.write.plain`),
anything else through pyarrow; `write_in` into a new file of a local folder through its handle.
"""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from recorders.write.columns import ABSENT, long_columns, written
from recorders.write.direct import open_direct
from recorders.write.folder import Folder
from recorders.write.layout import (
    DEFAULT_COMPRESSION,
    METADATA_KEY,
    NO_STATISTICS,
    REQUIRED,
    WRITE_CHECKSUMS,
    encodings,
)
from recorders.write.partstats import Tally
from recorders.write.plain import plain_chunk, write_plain

__all__ = ["ROW_GROUP_ROWS", "write_parquet", "write_in", "failure_reason", "chunks"]

# Rows per row group of a part file: a batch is encoded this many rows at a time, so that
# the long columns of a whole batch never exist at once; readers that filter on
# `example` skip row groups by their statistics.
ROW_GROUP_ROWS = 1 << 20


def write_parquet(
    path: Path | str | Any,
    chunks: Iterable[Mapping[str, Any]],
    metadata: bytes,
    dictionary_columns=(),
    compression: str | None = None,
    filesystem: Any = None,
    footer: Callable[[], Mapping[bytes, bytes]] | None = None,
) -> int:
    """Write column chunks as one Parquet file, one row group per chunk with rows (a file
    with no rows still has the schema of the first). Columns that never hold a null are
    required (`REQUIRED`); `dictionary_columns` are dictionary-encoded, the others as
    `_layout` says for `compression` (one of COMPRESSIONS, None: DEFAULT_COMPRESSION).
    Statistics (min and max per row group, which readers use to skip row groups) are
    kept for every column but `NO_STATISTICS`. `path`: a file path, or a file open for
    writing; `filesystem`: a pyarrow FileSystem that `path` is in (default: the local one);
    `footer`, called once the rows are written, more key-value metadata for the footer (a
    part file's statistics). Returns the rows written.

    The part files of the default layout are written by `recorders.write.plain` (no encoder
    needed: the floats' bytes as they are, the keys' pages reused); anything else by pyarrow."""
    compression = compression or DEFAULT_COMPRESSION
    first, chunks = _first(chunks)
    if first is None:
        return 0
    if _plain(first, dictionary_columns, compression):
        if filesystem is not None:
            with filesystem.open_output_stream(path) as stream:
                return write_plain(stream, chunks, metadata, compression, footer)
        if isinstance(path, (str, Path)):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as f:
                return write_plain(f, chunks, metadata, compression, footer)
        return write_plain(path, chunks, metadata, compression, footer)
    return _write_arrow(path, chunks, metadata, dictionary_columns, compression, filesystem, footer)


def _write_arrow(
    path, chunks, metadata, dictionary_columns, compression, filesystem, footer=None
) -> int:
    """`write_parquet` through pyarrow's encoder."""
    writer, rows = None, 0
    if filesystem is None and isinstance(path, (str, Path)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        for columns in chunks:
            size = next(len(v) for v in columns.values() if v is not ABSENT)
            arrays = [
                pa.nulls(size, pa.float32())
                if v is ABSENT
                else _labels(v)
                if name in dictionary_columns
                else pa.array(v)
                for name, v in columns.items()
            ]
            fields = [
                pa.field(name, a.type, nullable=name not in REQUIRED)
                for name, a in zip(columns, arrays, strict=True)
            ]
            table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
            if writer is None:
                writer = pq.ParquetWriter(
                    str(path) if isinstance(path, Path) else path,
                    table.schema.with_metadata({METADATA_KEY: metadata}),
                    filesystem=filesystem,
                    use_dictionary=list(dictionary_columns),
                    write_statistics=[n for n in columns if n not in NO_STATISTICS],
                    **encodings(list(columns), compression),
                    **WRITE_CHECKSUMS,
                )
            if table.num_rows:
                writer.write_table(table, row_group_size=table.num_rows)
                rows += table.num_rows
        if writer is not None and footer is not None:
            writer.add_key_value_metadata(dict(footer()))
    finally:
        if writer is not None:
            writer.close()
    return rows


def write_in(
    folder: Folder,
    rel: str,
    chunks: Iterable[Mapping[str, Any]],
    metadata: bytes,
    dictionary_columns=(),
    compression: str | None = None,
    footer: Callable[[], Mapping[bytes, bytes]] | None = None,
) -> int:
    """`write_parquet` into the new file `rel` of a local folder, reached through its handle: a
    part file of the default layout past the page cache where the file system allows
    (`recorders.write.direct`)."""
    first, chunks = _first(chunks)
    plain = first is not None and _plain(first, dictionary_columns, compression)
    direct = open_direct(folder, rel) if plain else None
    if direct is not None:
        with direct:
            return write_parquet(
                direct, chunks, metadata, dictionary_columns, compression, footer=footer
            )
    with folder.create(rel) as f:
        sink = folder.native_target(f)
        try:
            return write_parquet(
                sink, chunks, metadata, dictionary_columns, compression, footer=footer
            )
        finally:
            if sink is not f:
                sink.close()


def _first(chunks: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any] | None, Iterator]:
    """The first chunk (None if there is none), and all the chunks again."""
    chunks = iter(chunks)
    first = next(chunks, None)
    return first, itertools.chain(() if first is None else [first], chunks)


def _plain(first: Mapping[str, Any], dictionary_columns, compression: str | None) -> bool:
    """Whether a file whose first chunk is `first` is written by `recorders.write.plain`."""
    return not dictionary_columns and plain_chunk(first, compression or DEFAULT_COMPRESSION)


def failure_reason(err: BaseException) -> str:
    """Why a write failed, as the system says it (`No space left on device`), from an OSError
    or from pyarrow's wording of one (`Error writing bytes to file. Detail: [errno 28] ...`)."""
    text = getattr(err, "strerror", None) or str(err)
    found = re.search(r"\[errno (\d+)\] ([^\n]+)", text)
    return found.group(2).strip() if found else text


def _labels(values) -> pa.DictionaryArray:
    """A text column, dictionary-encoded: from a pandas Categorical (its codes, no string
    per row) or from a sequence of strings (None: a null)."""
    pd = sys.modules.get("pandas")  # a Categorical exists only once pandas was imported
    if pd is not None and isinstance(values, pd.Categorical):
        codes = np.asarray(values.codes, dtype=np.int32)
        dictionary = pa.array(list(values.categories), type=pa.string())
        return pa.DictionaryArray.from_arrays(pa.array(codes, mask=codes < 0), dictionary)
    return pa.array(values, type=pa.string()).dictionary_encode()


def chunks(
    examples,
    steps,
    values: Mapping[str, Any],
    lengths,
    keys,
    parts=None,
    tally: Tally | None = None,
) -> Iterator[dict[str, Any]]:
    """The long columns of one part file (`recorders.write.columns`), a chunk of examples at a time,
    each chunk about ROW_GROUP_ROWS rows. `values` are [examples, steps, units] arrays, None
    (the column is left out), or callables taking a slice of examples and returning their
    rows; `parts`, a callable taking a slice of examples and returning several columns at
    once ({name: rows, or None for a column of nulls}). Only one chunk's columns exist at a time.
    `tally` is given each chunk's `activation` rows, those written (`recorders.write.partstats`)."""
    examples = np.asarray(examples, dtype=np.int64)
    steps = np.asarray(steps)
    present = {name: v for name, v in values.items() if v is not None}
    first = (
        _rows(next(iter(present.values())), slice(0, 1))
        if present
        else next(a for a in parts(slice(0, 1)).values() if a is not None)
    )
    n, per_chunk = len(examples), max(1, ROW_GROUP_ROWS // max(1, len(steps) * first.shape[2]))
    for start in range(0, max(n, 1), per_chunk):
        rows = slice(start, min(n, start + per_chunk))
        chunk = {name: _rows(v, rows) for name, v in present.items()}
        if parts is not None:
            chunk |= {name: ABSENT if a is None else a for name, a in parts(rows).items()}
        if tally is not None and "activation" in chunk:
            # made contiguous once, for the statistics and the column alike
            chunk["activation"] = np.ascontiguousarray(chunk["activation"], dtype=np.float32)
            valid = (
                np.ones((rows.stop - rows.start, len(steps)), bool)
                if lengths is None
                else written(steps, np.asarray(lengths)[rows])
            )
            tally.add(chunk["activation"], valid)
        yield long_columns(
            examples[rows],
            steps,
            chunk,
            None if lengths is None else np.asarray(lengths)[rows],
            keys,
        )


def _rows(values, rows: slice) -> np.ndarray:
    """The examples `rows` of an [examples, steps, units] array, or of what a callable returns for them."""
    return values(rows) if callable(values) else np.asarray(values)[rows]
