"""Loops compiled by numba, their machine code cached only where no one else can write.

`Loop(function)` is a plain Python function made into machine code by numba (without the
GIL) the first time it is called, once per process, about a second; the writer's threads
run it while the next batch runs. numba reads a cache's index with `pickle`, so whoever can
write the cache folder can run code as the user: the code is cached only in gatetrace's own
folder (`$XDG_CACHE_HOME/gatetrace/numba`, else `~/.cache/gatetrace/numba`), created mode
0700 and checked before numba is asked (`trusted_cache`: a folder, not a link, the user's
own, writable by no one else, in folders no one else can rename it out of), never in the
folder `NUMBA_CACHE_DIR` names nor beside the function's module; where that check fails the
loop is compiled in every process, without a cache. Below that folder, every entry numba
could open (its index `*.nbi` and data `*.nbc` files, and the folders holding them) must be
the user's own regular file or folder, its files writable by no one else: anything else
(another user's file or folder, a link, a file others may write, a FIFO) is removed first,
without being opened, and numba compiles the loop again into the clean cache. numba's own
files are written mode 0600 whatever the umask (`_write_privately`), so that they are kept.
`available()` says whether numba is installed (`pip install ".[fast]"`, or `.[test]`).

The loops: a summary's statistics (`tracer.values.compiled`) and the statistics a gate's
part file carries in its footer (`recorders.write.partstats`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import stat
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from recorders.write.folder import Folder, remove_folder_at

__all__ = ["Loop", "available", "trusted_cache"]


@functools.cache
def available() -> bool:
    """Whether compiled loops can run (numba, an optional dependency, is installed; it is
    imported only when a loop is first made)."""
    return importlib.util.find_spec("numba") is not None


# held while a loop is made: numba reads its cache folder from a global setting, which
# `Loop` sets for that moment; two writer threads making one at once would each restore
# it under the other (seen: a cache folder named by a relative path, made in the user's
# current folder)
_making = threading.Lock()
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class Loop:
    """`function` compiled by numba (see the module docstring); calling the `Loop` returns
    the compiled function, made at the first call."""

    def __init__(self, function: Callable[..., Any]):
        self.function = function
        self._made: Any = None

    def __call__(self) -> Any:
        """The compiled function, its machine code cached only in `trusted_cache()`: numba's
        cache folder is set to it while the function is made (where numba picks the folder),
        whatever `NUMBA_CACHE_DIR` says; without it, nothing is cached."""
        with _making:
            if self._made is None:
                self._made = _make(self.function)
        return self._made


def _make(function: Callable[..., Any]) -> Any:
    folder = trusted_cache()  # checked before numba is imported
    import numba
    from numba.core import config

    if folder is None:
        return numba.njit(nogil=True, cache=False)(function)
    before = getattr(config, "CACHE_DIR", "")
    setattr(config, "CACHE_DIR", str(folder))  # noqa: B010 (set at import from the environment)
    try:
        made = numba.njit(nogil=True, cache=True)(function)
    finally:
        setattr(config, "CACHE_DIR", before)  # noqa: B010
    # where numba will read and write (its cache's path), and how it writes there: only
    # inside gatetrace's folder (never a folder relative to wherever the user is, nor the
    # one beside the module numba falls back to where it cannot write there), each file
    # made the user's alone; a numba that cannot be told so caches nothing
    cache = getattr(made, "_cache", None)
    where = getattr(cache, "_cache_path", None)
    files: Any = getattr(cache, "_cache_file", None)
    if (
        where is None
        or not Path(str(where)).is_relative_to(folder)
        or not callable(getattr(files, "_open_for_write", None))
    ):
        return numba.njit(nogil=True, cache=False)(function)
    files._open_for_write = _write_privately
    return made


@contextlib.contextmanager
def _write_privately(path: str) -> Iterator[BinaryIO]:
    """numba's way of writing a cache file (a unique temporary name, renamed into place), the
    file made mode 0600 whatever the umask: a file the group may write is never loaded (see
    the module docstring), so one written so would be compiled again in every process."""
    tmp = f"{path}.tmp.{uuid.uuid4().hex[:16]}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _safe(path: Path, own: bool) -> bool:
    """Whether `path` is a folder (not a link) that no one but the user, or root, can change:
    with `own`, the user's and writable by no one else; else owned by the user or root and
    writable by no one else, or sticky (no one else can rename what the user owns there)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return False
    if own:
        return st.st_uid == os.getuid() and not st.st_mode & 0o077
    others_write = st.st_mode & 0o022
    return st.st_uid in (0, os.getuid()) and (not others_write or bool(st.st_mode & stat.S_ISVTX))


def trusted_cache() -> Path | None:
    """gatetrace's own cache folder for numba's machine code, made mode 0700 where missing,
    or None where it is not safe to read code from (see the module docstring)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(os.path.abspath(base)) / "gatetrace" / "numba"
    try:
        folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    if not _safe(folder, own=True) or not _safe(folder.parent, own=True):
        return None
    if not all(_safe(p, own=False) for p in folder.parent.parents):
        return None
    try:
        with Folder(folder) as opened:
            assert opened.fd is not None  # (open until closed)
            _keep_only_own(opened.fd)
    except OSError:  # (a file that cannot be removed, a folder swapped for a link meanwhile)
        return None
    return folder


def _own(st: os.stat_result) -> bool:
    """Whether a file's or folder's `st` is the user's and writable by no one else."""
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def _keep_only_own(fd: int) -> None:
    """Remove from the folder open as `fd`, and from every folder below it, each entry that is
    not the user's own regular file writable by no one else, or the user's own folder (see
    the module docstring), by handle: no file is opened, and no link followed."""
    for name in os.listdir(fd):
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            child = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=fd)
            try:
                # the user's folder that the group may write (numba makes its folders as the
                # umask says): made the user's alone; each file in it is checked all the same
                if st.st_mode & 0o022:
                    os.fchmod(child, stat.S_IMODE(st.st_mode) & ~0o022)
                _keep_only_own(child)
            finally:
                os.close(child)
        elif stat.S_ISDIR(st.st_mode):
            remove_folder_at(fd, name)
        elif not (stat.S_ISREG(st.st_mode) and _own(st)):
            os.unlink(name, dir_fd=fd)
