"""What every input reader shares: slicing rows off a file, and reaching a file locally or in object storage.

`Rows` is the base of every reader (`tracer.inputs.files`, `tracer.inputs.tfrecords`): an
array-like with `shape`, `dtype`, `ndim`, `len()` and `[start:stop]` slices along the first
axis (the sequences), read when asked for; a reader's own errors become one `FeedError`
naming the input. `file_kind` and `open_file` reach a path on the local disk, or in object
storage through a pyarrow FileSystem (`store`).
"""

from __future__ import annotations

import os
import zipfile
import zlib
from pathlib import Path

import numpy as np

from recorders.errors import FeedError

__all__ = ["Rows", "file_kind", "open_file"]


class Rows:
    """Slicing along the first axis on top of `_read(start, stop)`."""

    path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    what: str | None = None  # the input, as errors name it (`--feed x=FILE`)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: slice) -> np.ndarray:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError(f"{type(self).__name__} supports only [start:stop] slices")
        start, stop, _ = key.indices(self.shape[0])
        try:
            return self._read(start, max(start, stop))
        except FeedError as err:
            where = self.what
            if where and not str(err).startswith(where):
                raise FeedError(f"{where}: {err}") from None
            raise
        except (OSError, EOFError, ValueError, zlib.error, zipfile.BadZipFile) as err:
            where = self.what
            raise FeedError(
                f"{where + ': ' if where else ''}cannot read rows {start}:{stop} of {self.path}: {err or type(err).__name__}; "
                "the file is damaged"
            ) from None

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return np.asarray(self[:], dtype=dtype)

    def _read(self, start: int, stop: int) -> np.ndarray:
        raise NotImplementedError


def file_kind(store, path: str, what: str = "input") -> tuple[str, int]:
    """("file", size), ("dir", 0) or ("missing", 0); FeedError (naming `what`) if the object
    store holding it cannot be reached."""
    if store is None:
        p = Path(path)
        return (
            ("file", p.stat().st_size)
            if p.is_file()
            else ("dir", 0)
            if p.is_dir()
            else ("missing", 0)
        )
    from pyarrow import fs

    try:
        info = store.get_file_info(path)
    except OSError as err:  # not an answer that the file is missing: the store did not answer
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        where = (
            f"at {endpoint} (AWS_ENDPOINT_URL)" if endpoint else "at its scheme's default endpoint"
        )
        raise FeedError(
            f"{what}: cannot reach {path} in object storage {where}: {str(err).strip()}; check the endpoint and the credentials"
        ) from None
    return (
        ("file", info.size)
        if info.type == fs.FileType.File
        else ("dir", 0)
        if info.type == fs.FileType.Directory
        else ("missing", 0)
    )


def open_file(store, path: str):
    """A binary file to read, with seek, tell and read (and read_at, remote)."""
    return open(path, "rb") if store is None else store.open_input_file(path)
