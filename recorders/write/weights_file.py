"""A table as a file of its own: the weights table (`gatetrace weights`) and a comparison's
(`gatetrace compare --out`). One Parquet file, written under a temporary name and renamed
into place, so that a failed write leaves the file that was there, or nothing; an existing
file is replaced (with `overwrite`) only where gatetrace wrote it. The weights' columns:
`tracer.values.weights.weights_columns`; their layout: `recorders.write.layout`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from recorders.errors import OutputExistsError, RecordingError
from recorders.write import rowgroups
from recorders.write.files import check_out, local_path, publish, remove, temp_sibling
from recorders.write.layout import WEIGHT_LABELS
from recorders.write.rowgroups import failure_reason
from recorders.write.swap import not_a_weights_table

__all__ = ["write_weights", "write_table"]


def write_weights(
    path: str | os.PathLike,
    columns: Mapping[str, Any],
    description: Mapping[str, Any],
    overwrite: bool = False,
) -> int:
    """Write the weights table (`tracer.values.weights.weights_columns`) to one Parquet file, atomically."""
    return write_table(path, columns, description, overwrite, WEIGHT_LABELS, "weights.parquet")


def write_table(
    path: str | os.PathLike,
    columns: Mapping[str, Any],
    description: Mapping[str, Any],
    overwrite: bool = False,
    dictionary_columns: tuple[str, ...] = (),
    example: str = "table.parquet",
) -> int:
    """Write `columns` to one Parquet file, atomically, `description` in its metadata (what
    marks it as gatetrace's); `example` is the file name an error suggests. Returns the rows."""
    if os.fspath(path).endswith(("/", os.sep)):
        shown = os.fspath(path)
        raise OutputExistsError(
            f"--out {shown} names a folder; give a file path, e.g. {shown.rstrip('/' + os.sep)}/{example}"
        )
    path = local_path(path)
    check_out(path, overwrite, folder=False, ours=not_a_weights_table, example=example)
    tmp = temp_sibling(path)
    try:
        rows = rowgroups.write_parquet(
            tmp, [columns], json.dumps(description).encode(), dictionary_columns=dictionary_columns
        )
        publish(tmp, path)
    except (OSError, pa.ArrowException) as err:
        remove(tmp)
        kept = "the file there is left as it was" if path.exists() else "nothing was written"
        raise RecordingError(
            f"cannot write {path}: {failure_reason(err)}; {kept}: fix the cause and rerun"
        ) from err
    except BaseException:
        remove(tmp)
        raise
    return rows
