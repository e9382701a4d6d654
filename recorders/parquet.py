"""Writing a recording folder as Parquet, atomically.

Layout of a finished recording `OUT/`:

    gates/cell=<cell>/gate=<gate>/part-00000.parquet    example, step, unit, preactivation, activation
    states/cell=<cell>/state=<c|h>/part-00000.parquet   example, step, unit, value
    weights.parquet                                     cell, gate, source, row, unit, value
    manifest.json                                       what was recorded, from what, row counts

`gates/` and `states/` are Hive-partitioned datasets: `pandas.read_parquet("OUT/gates")`
returns the long table with `cell` and `gate` as categoricals, and a filter on them
reads only the matching folders. Partition values are percent-encoded (`/` in a cell
name becomes `%2F`), which pyarrow decodes on reading.

Files are written with zstd; float columns use byte-stream-split, key columns
dictionary encoding. Every file carries the recording's description in its schema
metadata under the key `gatetrace`. Everything is written into a hidden temporary
folder next to `OUT` and renamed to `OUT` only when `close()` succeeds, so a failed
run leaves nothing that looks complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from recorders.errors import RecordingError
from recorders.files import check_out, publish, remove, temp_sibling
from recorders.long import gate_columns, state_columns

__all__ = ["METADATA_KEY", "RecordingWriter", "write_weights", "partition_dir"]

METADATA_KEY = b"gatetrace"
_FLOATS = ("preactivation", "activation", "value")
_KEYS = ("example", "step", "unit", "row")


def partition_dir(**parts: str) -> str:
    """`cell=rnn%2Fbasic_lstm_cell/gate=f`: Hive partition folders, percent-encoded."""
    return "/".join(f"{k}={quote(str(v), safe='')}" for k, v in parts.items())


def _write_table(path: Path, columns: Mapping[str, Any], metadata: bytes, dictionary_columns=()) -> int:
    arrays, names = [], []
    for name, values in columns.items():
        if name in dictionary_columns:
            arrays.append(pa.array(values, type=pa.string()).dictionary_encode())
        else:
            arrays.append(pa.array(values))
        names.append(name)
    table = pa.Table.from_arrays(arrays, names=names).replace_schema_metadata({METADATA_KEY: metadata})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        table,
        path,
        compression="zstd",
        use_dictionary=[n for n in names if n in _KEYS or n in dictionary_columns],
        use_byte_stream_split=[n for n in names if n in _FLOATS],
    )
    return table.num_rows


def write_weights(
    path: str | os.PathLike, columns: Mapping[str, Any], description: Mapping[str, Any], overwrite: bool = False
) -> int:
    """Write the weights table (`tracer.weights.weights_columns`) to one Parquet file, atomically."""
    path = Path(path)
    check_out(path, overwrite, folder=False)
    tmp = temp_sibling(path)
    try:
        rows = _write_table(tmp, columns, json.dumps(description).encode(), dictionary_columns=("cell", "gate", "source"))
        publish(tmp, path)
    except BaseException:
        remove(tmp)
        raise
    return rows


class RecordingWriter:
    """Writes one recording folder (see the module docstring); a context manager.

    `description` (JSON-ready) goes into every file's schema metadata and, with the row
    counts, into manifest.json. Leaving the `with` block normally finishes the folder;
    leaving it on an exception removes everything written. `close()` and `abort()` are
    idempotent.
    """

    def __init__(self, out: str | os.PathLike, description: Mapping[str, Any], overwrite: bool = False):
        self.out = Path(out)
        check_out(self.out, overwrite)
        self.description = dict(description)
        self._metadata = json.dumps(self.description).encode()
        self._tmp = temp_sibling(self.out)
        try:
            self._tmp.mkdir(parents=True)
        except OSError as err:
            raise RecordingError(f"cannot create {self._tmp}: {err.strerror}") from err
        self._parts: dict[str, int] = {}
        self.rows = {"gates": 0, "states": 0, "weights": 0}
        self.manifest: dict[str, Any] | None = None
        self._state = "open"

    def _next_part(self, folder: str) -> Path:
        n = self._parts.get(folder, 0)
        self._parts[folder] = n + 1
        return self._tmp / folder / f"part-{n:05d}.parquet"

    def _guard(self) -> None:
        if self._state != "open":
            raise RecordingError(f"recording {self.out} is already {self._state}")

    def write_gate(self, cell: str, gate: str, examples, steps, preactivation, activation, lengths=None) -> None:
        """One gate of one cell: value arrays [examples, steps, units] (either may be None).

        With `lengths`, no rows are written for steps at or past an example's length.
        """
        self._guard()
        path = self._next_part("gates/" + partition_dir(cell=cell, gate=gate))
        columns = gate_columns(examples, steps, preactivation, activation, lengths)
        self.rows["gates"] += _write_table(path, columns, self._metadata)

    def write_state(self, cell: str, state: str, examples, steps, values, lengths=None) -> None:
        """One state (`c` or `h`) of one cell: [examples, steps, units]."""
        self._guard()
        path = self._next_part("states/" + partition_dir(cell=cell, state=state))
        self.rows["states"] += _write_table(path, state_columns(examples, steps, values, lengths), self._metadata)

    def write_weights(self, columns: Mapping[str, Any]) -> None:
        self._guard()
        self.rows["weights"] += write_weights(self._tmp / "weights.parquet", columns, self.description)

    def close(self, **extra: Any) -> dict[str, Any]:
        """Write manifest.json (the description, `extra` and row counts) and move the
        folder into place; returns the manifest."""
        if self._state == "closed":
            return self.manifest
        self._guard()
        manifest = {**self.description, **extra, "rows": dict(self.rows)}
        try:
            (self._tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
            publish(self._tmp, self.out)
        except (OSError, RecordingError) as err:
            self.abort()
            raise RecordingError(f"cannot finish recording {self.out}: {err}") from err
        self.manifest = manifest
        self._state = "closed"
        return manifest

    def abort(self) -> None:
        """Remove everything written so far."""
        if self._state == "open":
            self._state = "aborted"
            remove(self._tmp)

    def __enter__(self) -> "RecordingWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
