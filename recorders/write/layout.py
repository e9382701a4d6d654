"""What a recording is on disk: its layout, its partition folders' names, each column's encoding.

Layout of a recording `OUT/`:

    gates/cell=<cell>/gate=<gate>/part-<first example>.parquet   example, step, unit, preactivation, activation
    states/cell=<cell>/state=<c|h>/part-<first example>.parquet  example, step, unit, value
    outputs/output=<name>/part-<first example>.parquet           example, step, unit, value (`--outputs`)
    weights.parquet                                              cell, gate, source, row, unit, value
    _progress/shard-K-of-N.json                                  which examples are complete (see recorders.write.progress)
    _statistics/shard-K-of-N.json                                the shard's part files' rows and statistics, merged (recorders.write.merged)
    manifest.json                                                what was recorded, from what, row counts

`outputs/` holds the model's own outputs where the recording was asked for them: each tensor
named, one row per example, step and unit (an output that is not a sequence, [batch, units], has
step 0 throughout; the manifest's `outputs` says which are sequences).

A summary recording (`--summary`) holds `summary/` and `_summary/` instead of `gates/` and
`states/`: see `recorders.write.summary`.

`gates/` and `states/` are Hive-partitioned datasets: `pandas.read_parquet("OUT/gates")`
returns the long table with `cell` and `gate` as categoricals, and a filter on them
reads only the matching folders. In partition values, characters that are unsafe in
folder names are percent-encoded (`/` in a cell name becomes `%2F`, see
`partition_dir`); pyarrow decodes them on reading. Each batch of examples is one
part file per (cell, gate) and (cell, state), named by the batch's first example, so
the files sort in example order and shards never collide. Within a file, rows are in
(example, step, unit) order, in row groups of whole examples of about a million rows
(`ROW_GROUP_ROWS`): the writer builds one row group's columns at a time.

By default (`fast`) the key columns are plain and lz4-compressed (their repeats compress
to almost nothing) and the float columns are plain and uncompressed: the random low bits
of float32 values leave lz4 5% to 12% to save on most of them (a quarter on an often
saturated gate's activations), for two to three times their encoding time (measured).
`lz4`, `zstd` and `snappy` compress every column, the floats byte-stream-split; `none`
compresses nothing. `fast` part files are written by `recorders.write.plain` (the same files
pyarrow writes for this layout, without its `ARROW:schema` entry), the others by pyarrow.
Every file carries the recording's description in its schema
metadata under the key `gatetrace`, and every page of it its CRC32 in its header (Parquet's page
checksum, `WRITE_CHECKSUMS`), which every reader verifies (`VERIFY_CHECKSUMS`): a byte changed
in a page is refused, not read as another value. A file written without them (by an older
gatetrace) is read as before. What a read of a damaged file raised is worded on one line by
`unreadable`.

The writer (`recorders.write.writer`) and every reader follow this module.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa

from recorders.write.columns import PARTS

__all__ = [
    "UNREADABLE",
    "WRITE_CHECKSUMS",
    "VERIFY_CHECKSUMS",
    "unreadable",
    "METADATA_KEY",
    "SUMMARY_DIR",
    "TOTALS_DIR",
    "STATISTICS_DIR",
    "ROOT_ENTRIES",
    "COMPRESSIONS",
    "DEFAULT_COMPRESSION",
    "WEIGHT_LABELS",
    "FLOATS",
    "REQUIRED",
    "NO_STATISTICS",
    "ZSTD_KEY_LEVEL",
    "partition_value",
    "partition_dir",
    "encodings",
]

# What reading a Parquet file that is damaged or not Parquet raises: pyarrow's errors, the system's,
# and ValueError (a footer whose names are not UTF-8 raises UnicodeDecodeError).
UNREADABLE = (OSError, ValueError, pa.ArrowException)
# pyarrow's options that write every page's CRC32 and verify it on reading (a page without one,
# an older gatetrace's, is read unverified)
WRITE_CHECKSUMS = {"write_page_checksum": True}
VERIFY_CHECKSUMS = {"page_checksum_verification": True}
_MOST_SHOWN = 300  # characters of what a read raised that a one-line error quotes
METADATA_KEY = b"gatetrace"
PROGRESS_DIR = "_progress"  # each shard's progress file and lock (recorders.write.progress)
SUMMARY_DIR = "summary"  # a summary recording's merged statistics (recorders.write.summary)
TOTALS_DIR = "_summary"  # its shards' running totals
STATISTICS_DIR = (
    "_statistics"  # each shard's part files' rows and statistics, merged (recorders.write.merged)
)
# what a recording's root holds (a reader opens them; --overwrite replaces only them)
ROOT_ENTRIES = (
    "gates",
    "states",
    "outputs",
    "weights.parquet",
    "manifest.json",
    PROGRESS_DIR,
    SUMMARY_DIR,
    TOTALS_DIR,
    STATISTICS_DIR,
)
# `fast`: lz4 on the keys only (see the module docstring). Measured on the benchmark's values
# (bench/encodings.py): 4.0 bytes per float value uncompressed, 3.65 with lz4, 3.50 with zstd.
COMPRESSIONS = ("fast", "lz4", "zstd", "snappy", "none")
DEFAULT_COMPRESSION = "fast"
WEIGHT_LABELS = ("cell", "gate", "source")  # the weights table's text columns, dictionary-encoded
FLOATS = ("preactivation", "activation", *PARTS, "value")
# Columns that never hold a null, written as required: no definition levels to encode (a
# quarter of the encoding time, measured). The parts stay optional (null where a cell kind
# has no such part).
REQUIRED = ("example", "step", "unit", "row", "preactivation", "activation", "value")
# Columns whose min and max per row group are not written: the floats (their statistics
# skip nothing) and `unit`, which spans every unit in every row group. Statistics cost 6%
# of the encoding for the floats, 0.6 ns a row for `unit` (measured).
NO_STATISTICS = (*FLOATS, "unit")
# zstd's level for the key and label columns: at its default, 1, the keys of a batch of the
# benchmark (bench/encodings.py's: runs of an example's 12,800 rows, steps of 256) took 0.43
# bytes a row, at 2 and 3 0.04, in less time (measured, pyarrow 26); the floats gain little
# beyond 1 (under 1% exact, 4% rounded to 10 bits: docs/recordings.md)
ZSTD_KEY_LEVEL = 3


# ASCII characters that must not appear in a folder name on any common file system, or
# that Hive partitioning gives a meaning: percent-encoded. Other characters stay as they
# are, so that non-ASCII names stay short.
_UNSAFE = set('/\\:*?"<>|%=') | {chr(i) for i in range(32)} | {chr(127)}
_MAX_FOLDER_BYTES = 255


def _encode(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _UNSAFE else c for c in value)


def partition_value(key: str, name: str) -> str:
    """The value that stands for `name` in the `key` partition column, as readers see it.

    It is `name` itself unless its folder would exceed the 255 bytes file systems allow;
    then it is the longest start of `name` that fits, `~`, and 16 hex digits of the name's
    SHA-256, unique and stable. `recorders.Recording` maps it back to the full name.
    """
    if len(f"{key}={_encode(name)}".encode()) <= _MAX_FOLDER_BYTES:
        return name
    digest = "~" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
    budget = _MAX_FOLDER_BYTES - len(f"{key}=".encode()) - len(digest)
    kept, used = [], 0
    for c in name:
        size = len(_encode(c).encode("utf-8"))
        if used + size > budget:
            break
        kept.append(c)
        used += size
    return "".join(kept) + digest


def partition_dir(**parts: str) -> str:
    """`cell=rnn%2Fbasic_lstm_cell/gate=f`: Hive partition folders, one per part.

    Characters in `_UNSAFE` are percent-encoded (pyarrow, DuckDB and Spark decode them),
    so a name from a graph, `../../x` or `C:\\x`, is always one folder inside the table;
    a name too long for a folder is shortened (`partition_value`).
    """
    return "/".join(
        f"{key}={_encode(partition_value(key, str(value)))}" for key, value in parts.items()
    )


def unreadable(err: BaseException) -> str:
    """What a read of a damaged Parquet file raised (one of `UNREADABLE`), on one line: pyarrow's
    words span several lines and may quote bytes of the file, which are shown escaped; cut to a
    few hundred characters."""
    text = " ".join(str(err).split()) or type(err).__name__
    shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    return shown if len(shown) <= _MOST_SHOWN else shown[: _MOST_SHOWN - 3] + "..."


def encodings(names: list[str], compression: str) -> dict[str, Any]:
    """The codec and encoding of each column for `compression`: with `fast`, lz4 for the
    keys and labels and no codec for the floats, all plain; otherwise that codec for every
    column, the floats byte-stream-split (which groups their bytes so that the codec
    finds the runs in the signs and exponents); zstd's other columns at level 3, the floats at
    its default, 1 (`ZSTD_KEY_LEVEL`)."""
    if compression == "fast":
        return {"compression": {n: "none" if n in FLOATS else "lz4" for n in names}}
    chosen: dict[str, Any] = {
        "compression": compression,
        "column_encoding": {n: "BYTE_STREAM_SPLIT" for n in names if n in FLOATS},
    }
    if compression == "zstd":
        chosen["compression_level"] = {n: ZSTD_KEY_LEVEL for n in names if n not in FLOATS}
    return chosen
