"""Loops compiled by numba, their machine code cached only where no one else can write.

`Loop(function)` is a plain Python function made into machine code by numba (without the
GIL) the first time it is called, once per process, about a second; the writer's threads
run it while the next batch runs. numba reads a cache's index with `pickle`, so whoever can
write the cache folder can run code as the user: the code is cached only in gatetrace's own
folder (`$XDG_CACHE_HOME/gatetrace/numba`, else `~/.cache/gatetrace/numba`), created mode
0700 and checked before numba is asked (`trusted_cache`: a folder, not a link, the user's
own, writable by no one else, in folders no one else can rename it out of), never in the
folder `NUMBA_CACHE_DIR` names nor beside the function's module; where that check fails the
loop is compiled in every process, without a cache. `available()` says whether numba is
installed (`pip install ".[fast]"`, or `.[test]`).

The loops: a summary's statistics (`tracer.values.compiled`) and the statistics a gate's
part file carries in its footer (`recorders.write.partstats`).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    # where numba will write (its cache's path): never a folder relative to wherever the
    # user is; a numba that keeps it elsewhere is taken at its word
    where = getattr(getattr(made, "_cache", None), "_cache_path", str(folder))
    if not os.path.isabs(str(where)):
        made = numba.njit(nogil=True, cache=False)(function)
    return made


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
    return folder
