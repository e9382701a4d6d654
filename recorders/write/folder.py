"""A local folder written only through directory handles, so that no write follows a link.

A recording is written over minutes or hours. Anyone who can write into its folder
meanwhile could replace one of its subfolders (`gates/cell=a/gate=f`) by a symbolic
link to a place outside it, and a writer that names files by path would follow it. A
`Folder` opens its root once and reaches everything below it from that handle, one path
component at a time, each opened with `O_NOFOLLOW` (folders also with `O_DIRECTORY`): a
link anywhere below the root makes the operation fail with ELOOP or ENOTDIR, instead of
writing, renaming or removing what it points to. Paths are relative, with `/`.

Parquet files are written by pyarrow's own native writer through `/proc/self/fd/N`,
which names the file already opened (not a path to resolve again), where the system has
it; elsewhere through the Python file object.

Reading a recording someone else wrote goes the same way (`open_regular`, and pyarrow's
reads through `ReadOnlyFiles`): only regular files below the root are opened, never
through a link, and never a FIFO (which would block) or a device (which may act on being
opened); anything else is a `NotRegularFile` error naming what it is.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import sys
import uuid
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.fs as pafs

__all__ = ["Folder", "NotRegularFile", "ReadOnlyFiles", "kind_of", "temporary_name", "temporary_of"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_PROC_FD = Path("/proc/self/fd")


class NotRegularFile(OSError):
    """A path below a folder that is not a regular file reached through folders only (a link,
    a FIFO, a device, a socket), or a link among the folders above it."""


_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
}


def kind_of(mode: int) -> str:
    """What a file of `mode` (an `st_mode`, looked at without following a link) is, in words:
    "a regular file", "a folder", "a symbolic link", "a FIFO", "a socket", a device."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


_TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?P<tag>[a-z]+)-(?:(?P<pid>[0-9]+)-)?[0-9a-f]{8}")


def temporary_name(name: str, tag: str = "partial") -> str:
    """The hidden name a file or folder `name` is written under before it is renamed into place:
    `.NAME.TAG-PID-1a2b3c4d` (PID: this process, so that what a killed run left is told from
    what a running one writes)."""
    return f".{name}.{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def temporary_of(entry: str, tag: str = "partial") -> tuple[str, int | None] | None:
    """(NAME, PID) if `entry` is named as `temporary_name(NAME, tag)` names one (PID None for
    the names of an earlier gatetrace, `.NAME.TAG-1a2b3c4d`), else None."""
    found = _TEMPORARY.fullmatch(entry)
    if found is None or found["tag"] != tag:
        return None
    return found["name"], None if found["pid"] is None else int(found["pid"])


def remove_folder_at(parent: int, name: str) -> None:
    """Remove the folder `name` of the folder open as `parent`, with everything in it, by
    handle: links inside are removed, never what they point to."""
    if sys.version_info >= (3, 11):
        shutil.rmtree(name, dir_fd=parent)
    else:  # Python 3.10's shutil.rmtree takes no dir_fd
        walk_and_remove_at(parent, name)


def walk_and_remove_at(parent: int, name: str) -> None:
    """`remove_folder_at`, by hand: each folder opened by handle without following a link."""
    fd = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=parent)
    try:
        for entry in os.scandir(fd):
            if entry.is_dir(follow_symlinks=False):
                walk_and_remove_at(fd, entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


class Folder:
    """The folder at `path` (which must exist and not be a link), held open; a context manager."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.fd: int | None = os.open(self.path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __str__(self) -> str:
        return str(self.path)

    # -- reaching a folder below the root ----------------------------------------------------

    def _open_dir(self, parts: list[str], create: bool) -> int:
        """A new handle of the folder `parts` below the root (created if `create`); the caller closes it."""
        if self.fd is None:
            raise OSError(errno.EBADF, "the folder was closed", str(self.path))
        fd = os.dup(self.fd)
        try:
            for part in parts:
                if part in ("", ".", ".."):
                    raise OSError(
                        errno.EINVAL, f"not a plain path below {self.path}", "/".join(parts)
                    )
                if create:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                child = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _split(self, rel: str) -> tuple[list[str], str]:
        *parents, name = rel.split("/")
        return parents, name

    # -- operations --------------------------------------------------------------------------

    def mkdir(self, rel: str) -> None:
        """Create the folder `rel` and its parents, if they are not there."""
        os.close(self._open_dir(rel.split("/"), create=True))

    def is_dir(self, rel: str) -> bool:
        try:
            os.close(self._open_dir(rel.split("/"), create=False))
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    def open_fd(self, rel: str, flags: int, mode: int = 0o644, create_parents: bool = False) -> int:
        """A file descriptor of the file `rel`, opened with `flags` and never through a link."""
        parents, name = self._split(rel)
        parent = self._open_dir(parents, create=create_parents)
        try:
            return os.open(name, flags | _NOFOLLOW, mode, dir_fd=parent)
        finally:
            os.close(parent)

    def create(self, rel: str) -> BinaryIO:
        """A new file `rel` (its folder created if need be), open for writing; it must not exist."""
        fd = self.open_fd(rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, create_parents=True)
        return os.fdopen(fd, "wb")

    def native_target(self, file: BinaryIO) -> Any:
        """What pyarrow writes `file` through: its own native file on `/proc/self/fd/N` where
        the system has it (the open file itself, not a path looked up again), else `file`.
        Unbuffered: behind a 4 MB buffer (64 writes of a 256 MB file instead of 18,600 a
        batch) the benchmark's record took 0.25 s more CPU a batch, and no less time."""
        proc = _PROC_FD / str(file.fileno())
        if _PROC_FD.is_dir() and proc.exists():
            return pa.OSFile(str(proc), "wb")
        return file

    def read_bytes(self, rel: str, limit: int | None = None) -> bytes:
        """The regular file `rel` (`open_regular`), whole: with `limit`, OSError if it holds more
        bytes, its size looked at before a byte is read (a sparse file of gigabytes is refused
        at once)."""
        with os.fdopen(self.open_regular(rel), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if limit is not None and size > limit:
                raise OSError(
                    errno.EFBIG,
                    f"it holds {size:,} bytes, more than the {limit:,} bytes expected",
                    rel,
                )
            if limit is None:
                data = f.read()
            else:  # a MiB at a time: reading limit + 1 at once allocates that much first
                parts, held = [], 0
                while held <= limit:
                    part = f.read(min(1 << 20, limit + 1 - held))
                    if not part:
                        break
                    parts.append(part)
                    held += len(part)
                data = b"".join(parts)
        if limit is not None and len(data) > limit:
            raise OSError(errno.EFBIG, f"it holds more than the {limit:,} bytes expected", rel)
        return data

    def open_read(self, rel: str) -> BinaryIO:
        """The regular file `rel`, open for reading (`open_regular`)."""
        return os.fdopen(self.open_regular(rel), "rb")

    def open_regular(self, rel: str) -> int:
        """A read-only descriptor of the regular file `rel`. Its type is looked at before it is
        opened (opening a FIFO blocks, a device may act on it) and checked again once open;
        anything else, or a link on the way, is a NotRegularFile error saying what it is."""
        parents, name = self._split(rel)
        try:
            parent = self._open_dir(parents, create=False)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                raise NotRegularFile(
                    err.errno, f"a folder on the way is {self.kind(rel)}", rel
                ) from None
            raise
        try:
            before = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if not stat.S_ISREG(before.st_mode):
                raise NotRegularFile(
                    errno.EINVAL,
                    f"it is {_KINDS.get(stat.S_IFMT(before.st_mode), 'not a regular file')}",
                    rel,
                )
            fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _NONBLOCK, dir_fd=parent)
        finally:
            os.close(parent)
        # A file replaced in between by a rename (as progress files are, while other shards
        # run) is read as it now is; anything but a regular file is refused.
        after = os.fstat(fd)
        if not stat.S_ISREG(after.st_mode):
            os.close(fd)
            kind = _KINDS.get(stat.S_IFMT(after.st_mode), "not a regular file")
            raise NotRegularFile(errno.EINVAL, f"it became {kind} while being opened", rel)
        return fd

    def kind(self, rel: str) -> str:
        """What `rel` is, in words, for a message ("a symbolic link to /x", "a FIFO", ...):
        the first component on the way that is not a folder, looked at without following it."""
        at = self.path
        for part in rel.split("/"):
            at = at / part
            try:
                mode = stat.S_IFMT(os.lstat(at).st_mode)
            except OSError:
                return "missing"
            if mode == stat.S_IFLNK:
                return f"a symbolic link to {os.readlink(at)}"
            if mode != stat.S_IFDIR:
                return _KINDS.get(
                    mode, "a regular file" if mode == stat.S_IFREG else "not a regular file"
                )
        return "a folder"

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write a whole file: to a hidden sibling, then renamed over `rel` (a link there is
        replaced, never followed), so that readers see the old one or the new one, whenever
        the process is stopped. It is not forced to disk (no fsync): on ext4 that waits for
        every file written before it, the whole batch (0.17 s a batch in the benchmark)."""
        parents, name = self._split(rel)
        parent = self._open_dir(parents, create=True)
        tmp = temporary_name(name)
        try:
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644, dir_fd=parent
            )
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=parent)
                except OSError:
                    pass
                raise
        finally:
            os.close(parent)

    def replace(self, src: str, dst: str) -> None:
        """Rename the file `src` to `dst` (creating `dst`'s folder), replacing what is there."""
        src_parents, src_name = self._split(src)
        dst_parents, dst_name = self._split(dst)
        a = self._open_dir(src_parents, create=False)
        try:
            b = self._open_dir(dst_parents, create=True)
            try:
                os.replace(src_name, dst_name, src_dir_fd=a, dst_dir_fd=b)
            finally:
                os.close(b)
        finally:
            os.close(a)

    def remove(self, rel: str) -> None:
        """Remove a file, a link, or a folder with everything in it; nothing if there is none."""
        parents, name = self._split(rel)
        try:
            parent = self._open_dir(parents, create=False)
        except (FileNotFoundError, NotADirectoryError):
            return
        try:
            try:
                os.unlink(name, dir_fd=parent)
            except FileNotFoundError:
                pass
            # a folder (unlink of a folder: EISDIR, or EPERM on some systems)
            except (IsADirectoryError, PermissionError):
                remove_folder_at(parent, name)
        finally:
            os.close(parent)

    def entries(self, rel: str = "") -> list[str]:
        """The names directly in the folder `rel` (the root by default), sorted; empty if it is not there."""
        try:
            fd = self._open_dir(rel.split("/") if rel else [], create=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    def special(self, rel: str = "") -> list[tuple[str, str]]:
        """(name, what it is) of each entry directly in the folder `rel` that is neither a
        regular file nor a folder: a link, a FIFO, a socket, a device."""
        try:
            fd = self._open_dir(rel.split("/") if rel else [], create=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        try:
            modes = [(name, _mode(name, fd)) for name in sorted(os.listdir(fd))]
        finally:
            os.close(fd)
        return [
            (name, _KINDS.get(mode, "not a regular file"))
            for name, mode in modes
            if mode not in (None, stat.S_IFREG, stat.S_IFDIR)
        ]

    def files(self, sub: str) -> list[str]:
        """Every regular file below the folder `sub`, as paths relative to the root, sorted (links are not followed)."""
        return [rel for rel, _ in self.tree(sub)[0]]

    def tree(self, sub: str) -> tuple[list[tuple[str, int]], list[str]]:
        """Below the folder `sub` (the root: "", nothing if it is not a folder): every regular file as (path
        relative to the root, size), sorted, and every other entry (a link, a FIFO, a socket, a
        device), sorted; links are not followed."""
        try:
            fd = self._open_dir(sub.split("/") if sub else [], create=False)
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        found, odd = [], []
        try:
            for top, folders, names, top_fd in os.fwalk(".", dir_fd=fd):
                for name in names + [f for f in folders if _mode(f, top_fd) == stat.S_IFLNK]:
                    rel = os.path.normpath(os.path.join(sub, top, name))
                    try:
                        info = os.stat(name, dir_fd=top_fd, follow_symlinks=False)
                    # another writer renamed its temporary file into place meanwhile
                    except FileNotFoundError:
                        continue
                    if stat.S_ISREG(info.st_mode):
                        found.append((rel, info.st_size))
                    else:
                        odd.append(rel)
        finally:
            os.close(fd)
        return sorted(found), sorted(odd)


def _mode(name: str, dir_fd: int) -> int | None:
    """The file type of the entry `name` (`stat.S_IFREG`, ...), never following a link; None if
    it is gone (another writer renamed its temporary file into place meanwhile)."""
    try:
        return stat.S_IFMT(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return None


class ReadOnlyFiles(pafs.FileSystemHandler):
    """A pyarrow file system handler (`pyarrow.fs.PyFileSystem(ReadOnlyFiles(folder))`) that
    reads the regular files below `folder` by relative path through `Folder.open_regular`,
    with pyarrow's native reader on `/proc/self/fd/N` where the system has it; it lists and
    writes nothing (paths are given to pyarrow, never discovered)."""

    def __init__(self, folder: Folder):
        self.folder = folder

    def get_type_name(self) -> str:
        return "gatetrace-recording"

    def normalize_path(self, path: str) -> str:
        return path

    def equals(self, other: Any) -> bool:
        return isinstance(other, ReadOnlyFiles) and other.folder is self.folder

    def get_file_info(self, paths: list[str]) -> list:
        infos = []
        for path in paths:
            try:
                fd = self.folder.open_regular(path)
            except FileNotFoundError:
                infos.append(pafs.FileInfo(path, pafs.FileType.NotFound))
                continue
            try:
                infos.append(pafs.FileInfo(path, pafs.FileType.File, size=os.fstat(fd).st_size))
            finally:
                os.close(fd)
        return infos

    def open_input_file(self, path: str) -> Any:
        fd = self.folder.open_regular(path)
        proc = _PROC_FD / str(fd)
        if _PROC_FD.is_dir():
            try:
                return pa.OSFile(str(proc), "rb")
            finally:
                os.close(fd)
        return pa.PythonFile(os.fdopen(fd, "rb"), mode="r")

    open_input_stream = open_input_file

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EROFS, "a recording is read, never written, through this file system")

    get_file_info_selector = create_dir = delete_dir = delete_dir_contents = (
        delete_root_dir_contents
    ) = _read_only
    delete_file = move = copy_file = open_output_stream = open_append_stream = _read_only
