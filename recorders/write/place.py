"""Where a recording is written: a local folder, or a prefix in object storage.

A `Place` is the recording's root with the few operations the writer and the progress
files need, by paths relative to the root (`gates/cell=a/gate=f/part-0000000000.parquet`).
`place_of("run1/")` is a `LocalPlace`; `place_of("s3://bucket/run1")` (or `gs://...`) a
`StorePlace` on pyarrow's file system for the URI (credentials and endpoint as pyarrow
reads them, e.g. AWS_ENDPOINT_URL).

What each guarantees when a file is written: locally, under a temporary name, flushed,
then renamed into place, every operation below the root reached through the root's
handle without following links (`recorders.write.folder`); in object storage, an object appears only once it is
completely written (a PUT, or a multipart upload completed at close), so it is written
at its final key and never renamed. Object stores have no locks: two processes must
not write the same shard at once (shards write disjoint objects).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from recorders.errors import RecordingError
from recorders.write import rowgroups
from recorders.write.files import is_uri
from recorders.write.folder import Folder
from recorders.write.schema import MAX_JSON_BYTES, parse_json

__all__ = ["Place", "LocalPlace", "StorePlace", "place_of"]


class Place(ABC):
    """A recording's root; see the module docstring. Paths are relative, with `/`."""

    local: bool

    @abstractmethod
    def exists(self) -> bool:
        """Whether the root holds anything (a local folder: whether it exists)."""

    @abstractmethod
    def entries(self) -> list[str]:
        """The names directly in the root, sorted."""

    @abstractmethod
    def files(self, sub: str) -> list[str]:
        """Every file below the folder `sub`, as paths relative to the root, sorted."""

    @abstractmethod
    def read_bytes(self, rel: str, limit: int | None = None) -> bytes:
        """A whole file (RecordingError, or OSError locally, if it holds more than `limit` bytes)."""

    @abstractmethod
    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a whole file, so that readers see the old one or the new one, never a part."""

    @abstractmethod
    def remove(self, rel: str) -> None:
        """Remove a file, or a folder with everything in it; nothing if there is none."""

    @abstractmethod
    def parquet_metadata(self, rel: str) -> Any:
        """The footer of the Parquet file `rel` (`pyarrow.parquet.FileMetaData`)."""

    # A new file is written where `stage` says, then `land`ed at its final name: a local
    # folder writes it into the staging folder and renames it into place (only a complete
    # file ever has its final name); object storage writes it at its final key, where an
    # object appears only once complete.

    @abstractmethod
    def stage(self, final: str, staging: str | None, name: str | None = None) -> str:
        """Where to write the new file whose final name is `final`: in `staging` (as `name`,
        or a fresh unique name) for a local folder, at `final` in object storage."""

    def land(self, staged: str, final: str) -> None:  # noqa: B027  (object storage: nothing)
        """Give the file written at `staged` its final name `final`."""

    @abstractmethod
    def write_parquet(
        self,
        staged: str,
        chunks: Iterable[Mapping[str, Any]],
        metadata: bytes,
        labels: Sequence[str],
        compression: str,
        footer: Callable[[], Mapping[bytes, bytes]] | None = None,
    ) -> int:
        """Write the new Parquet file `staged` (`recorders.write.rowgroups`): its row groups
        `chunks`, `labels` dictionary-encoded, `metadata` in its footer, and what `footer()`
        gives once the rows are written. Returns its rows."""

    def close(self) -> None:  # noqa: B027  (not abstract: most places hold nothing open)
        """Release what the place holds open (a local folder's handle); it is opened again when used."""

    def read_json(self, rel: str) -> Any:
        """A JSON file, of bounded size and nesting (`recorders.write.schema.parse_json`)."""
        return parse_json(self.read_bytes(rel, limit=MAX_JSON_BYTES), f"{self}/{rel}")

    def write_json(self, rel: str, content: Any) -> None:
        self.write_bytes(rel, (json.dumps(content, indent=1) + "\n").encode())


class LocalPlace(Place):
    """A folder of the local file system; once it exists, everything below it is reached
    through its handle (`recorders.write.folder.Folder`), so that no write follows a link."""

    local = True

    def __init__(self, path: Path):
        self.path = Path(path)
        self._folder: Folder | None = None

    def __str__(self) -> str:
        return str(self.path)

    @property
    def folder(self) -> Folder:
        """The folder's handle, opened on first use (the folder must exist)."""
        if self._folder is None:
            self._folder = Folder(self.path)
        return self._folder

    def stage(self, final: str, staging: str | None, name: str | None = None) -> str:
        if staging is None:
            raise RecordingError(
                f"{self}: a local recording stages its files in a folder of its own"
            )
        staged = f"{staging}/{name or uuid.uuid4().hex + '.parquet'}"
        if name is not None:  # left there by a run that was killed
            self.folder.remove(staged)
        return staged

    def land(self, staged: str, final: str) -> None:
        self.folder.replace(staged, final)

    def write_parquet(
        self,
        staged: str,
        chunks: Iterable[Mapping[str, Any]],
        metadata: bytes,
        labels: Sequence[str],
        compression: str,
        footer: Callable[[], Mapping[bytes, bytes]] | None = None,
    ) -> int:
        # through the folder's handle, past the page cache where it can be
        return rowgroups.write_in(
            self.folder, staged, chunks, metadata, labels, compression, footer
        )

    def close(self) -> None:
        if self._folder is not None:
            self._folder.close()
            self._folder = None

    def exists(self) -> bool:
        return self.path.exists()

    @property
    def _there(self) -> bool:
        """Whether the folder is open, or exists to be opened."""
        return self._folder is not None or self.path.is_dir()

    def entries(self) -> list[str]:
        return self.folder.entries() if self._there else []

    def files(self, sub: str) -> list[str]:
        return self.folder.files(sub) if self._there else []

    def read_bytes(self, rel: str, limit: int | None = None) -> bytes:
        return self.folder.read_bytes(rel, limit)

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write to a temporary sibling and rename it into place (`Folder.write_bytes`)."""
        try:
            self.folder.write_bytes(rel, data)
        except OSError as err:
            raise RecordingError(f"cannot write {self.path / rel}: {err.strerror or err}") from err

    def remove(self, rel: str) -> None:
        if self._there:
            self.folder.remove(rel)

    def parquet_metadata(self, rel: str) -> Any:
        import pyarrow.parquet as pq

        with self.folder.open_read(rel) as f:
            return pq.read_metadata(f)


class StorePlace(Place):
    """A prefix (`bucket/run1`) of an object store, through a pyarrow FileSystem."""

    local = False

    def __init__(self, store: Any, root: str, uri: str):
        self.store, self.root, self.uri = store, root.rstrip("/"), uri.rstrip("/")

    def __str__(self) -> str:
        return self.uri

    def _key(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def exists(self) -> bool:
        return bool(self.entries())

    def _listed(self, rel: str, recursive: bool) -> list:
        from pyarrow import fs

        try:
            return self.store.get_file_info(
                fs.FileSelector(self._key(rel), recursive=recursive, allow_not_found=True)
            )
        except OSError as err:
            raise RecordingError(f"cannot list {self.uri}/{rel}: {err}") from None

    def entries(self) -> list[str]:
        return sorted(i.base_name for i in self._listed("", recursive=False))

    def files(self, sub: str) -> list[str]:
        from pyarrow import fs

        cut = len(self.root) + 1
        return sorted(
            i.path[cut:] for i in self._listed(sub, recursive=True) if i.type == fs.FileType.File
        )

    def read_bytes(self, rel: str, limit: int | None = None) -> bytes:
        try:
            with self.store.open_input_stream(self._key(rel)) as f:
                data = f.read() if limit is None else f.read(limit + 1)
        except OSError as err:
            raise RecordingError(f"cannot read {self.uri}/{rel}: {err}") from None
        if limit is not None and len(data) > limit:
            raise RecordingError(f"{self.uri}/{rel} holds more than the {limit:,} bytes expected")
        return data

    def write_bytes(self, rel: str, data: bytes) -> None:
        """One PUT: the object appears whole, or not at all."""
        try:
            with self.store.open_output_stream(self._key(rel)) as f:
                f.write(data)
        except OSError as err:
            raise RecordingError(f"cannot write {self.uri}/{rel}: {err}") from None

    def remove(self, rel: str) -> None:
        from pyarrow import fs

        info = self.store.get_file_info(self._key(rel))
        try:
            if info.type == fs.FileType.File:
                self.store.delete_file(self._key(rel))
            elif info.type == fs.FileType.Directory:
                self.store.delete_dir(self._key(rel))
        except OSError as err:
            raise RecordingError(f"cannot remove {self.uri}/{rel}: {err}") from None

    def stage(self, final: str, staging: str | None, name: str | None = None) -> str:
        return final

    def write_parquet(
        self,
        staged: str,
        chunks: Iterable[Mapping[str, Any]],
        metadata: bytes,
        labels: Sequence[str],
        compression: str,
        footer: Callable[[], Mapping[bytes, bytes]] | None = None,
    ) -> int:
        return rowgroups.write_parquet(
            self._key(staged),
            chunks,
            metadata,
            labels,
            compression,
            filesystem=self.store,
            footer=footer,
        )

    def parquet_metadata(self, rel: str) -> Any:
        import pyarrow.parquet as pq

        return pq.read_metadata(self._key(rel), filesystem=self.store)

    def read_json(self, rel: str, attempts: int = 5) -> Any:
        """An object read as JSON. pyarrow reads an object in ranged requests after asking its
        size, so a read that crosses another process's PUT of the same key (shards read each
        other's progress objects) can see parts of both, which do not parse: such a read is
        made again. (Seen against moto's S3 server with four tasks writing at once.)"""
        for attempt in range(attempts):
            try:
                return super().read_json(rel)
            except RecordingError:
                if attempt == attempts - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))


def place_of(out: str | os.PathLike, what: str = "--out") -> Place:
    """The Place for a folder path, a `file://` URI, or an object-storage URI."""
    text = os.fspath(out)
    if text.startswith("file://"):
        return LocalPlace(Path(text[len("file://") :]))
    if not is_uri(text):
        return LocalPlace(Path(text))
    from pyarrow import fs

    try:
        store, root = fs.FileSystem.from_uri(text)
    except Exception as err:  # an unknown scheme, a malformed URI, missing credentials
        raise RecordingError(f"{what} {text}: cannot open it: {err}") from None
    return StorePlace(store, root, text)
