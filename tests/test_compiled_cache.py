"""The compiled loops' cache (`recorders.write.compiled`): numba reads a cache's index and
data files with `pickle`, so only files that no one else could have written are loaded.

Each test plants, in gatetrace's own cache folder (mode 0700), an index or data file of a
loop that makes a marker file when unpickled: another user's file, a link to a file
elsewhere, a file others may write, or the user's file in another user's folder. The loop
then compiles without running it, gives the right answer, and its cache is written anew.
"""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba")

NOBODY = 65534


def _double(x):  # compiled by numba in the tests, its cache beside gatetrace's loops'
    return x * 2.0


class Payload:
    """Unpickled, it creates the file `marker` (as a planted cache file's code would run)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def cache_files(root: Path) -> tuple[Path, Path]:
    """Where numba keeps `_double`'s index and first data file when its cache folder is `root`."""
    from numba.core import config
    from numba.core.caching import FunctionCache

    before = config.CACHE_DIR
    config.CACHE_DIR = str(root)
    try:
        files = FunctionCache(_double)._cache_file
    finally:
        config.CACHE_DIR = before
    return Path(files._index_path), Path(files._data_path(files._data_name(1)))


def run_loop() -> np.ndarray:
    from recorders.write.compiled import Loop

    return Loop(_double)()(np.arange(3.0))


def plant(path: Path, how: str, marker: Path, elsewhere: Path) -> None:
    """Put the payload at `path` as `how` says."""
    data = pickle.dumps(Payload(marker))
    path.unlink(missing_ok=True)
    if how == "a link":
        elsewhere.write_bytes(data)
        path.symlink_to(elsewhere)
        return
    path.write_bytes(data)
    if how == "another user's":
        os.chown(path, NOBODY, NOBODY)
    elif how == "writable by others":
        os.chmod(path, 0o666)
    elif how == "in another user's folder":
        os.chown(path.parent, NOBODY, NOBODY)


@pytest.mark.skipif(os.getuid() != 0, reason="makes files of another user (chown)")
@pytest.mark.parametrize(
    "how", ["another user's", "a link", "writable by others", "in another user's folder"]
)
@pytest.mark.parametrize("which", ["index", "data"])
def test_a_cache_file_someone_else_could_write_is_never_loaded(which, how, tmp_path, monkeypatch):
    from recorders.write.compiled import trusted_cache

    (tmp_path / "home").mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home"))
    root = trusted_cache()
    assert root == tmp_path / "home" / "gatetrace" / "numba"
    index, data = cache_files(root)
    assert np.array_equal(run_loop(), [0.0, 2.0, 4.0])  # cached as it should be
    assert index.is_file() and data.is_file()
    marker = tmp_path / "ran"
    plant(index if which == "index" else data, how, marker, tmp_path / "payload")

    assert np.array_equal(run_loop(), [0.0, 2.0, 4.0])
    assert not marker.exists()
    for made in (index, data):  # compiled again, into a cache of the user's own files
        st = os.lstat(made)
        assert stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid(), (made, st)
    assert os.lstat(index.parent).st_uid == os.getuid()
    assert (tmp_path / "payload").exists() == (how == "a link")  # what a link named is kept


def test_the_cache_is_used_again_once_it_is_sound(tmp_path, monkeypatch):
    """The check removes nothing of a sound cache: the user's own files are loaded as they are."""
    from recorders.write.compiled import trusted_cache

    (tmp_path / "home").mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home"))
    root = trusted_cache()
    assert root is not None
    run_loop()
    index, data = cache_files(root)
    before = {p: os.stat(p).st_ino for p in (index, data)}
    assert trusted_cache() == root
    run_loop()
    assert {p: os.stat(p).st_ino for p in (index, data)} == before


def test_a_umask_that_lets_the_group_write_still_keeps_the_cache(tmp_path, monkeypatch):
    """Under a umask that lets the group write (002, many systems' default for their users),
    numba's cache files are still written the user's alone: the next process loads them
    instead of removing them as files others may have changed."""
    from recorders.write.compiled import trusted_cache

    (tmp_path / "home").mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home"))
    root = trusted_cache()
    assert root is not None
    was = os.umask(0o002)
    try:
        run_loop()
    finally:
        os.umask(was)
    index, data = cache_files(root)
    before = {p: os.stat(p).st_ino for p in (index, data)}
    assert all(not os.stat(p).st_mode & 0o022 for p in (index, data))
    assert trusted_cache() == root
    assert not os.stat(index.parent).st_mode & 0o022
    run_loop()
    assert {p: os.stat(p).st_ino for p in (index, data)} == before


def test_nothing_is_cached_where_numba_would_fall_back_to_another_folder(tmp_path, monkeypatch):
    """Where numba cannot use gatetrace's folder it falls back to one beside the module (or
    the user's shared cache): the loop is then compiled without a cache."""
    from numba.core import caching

    from recorders.write.compiled import Loop

    (tmp_path / "home").mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(
        caching.UserProvidedCacheLocator, "from_function", classmethod(lambda cls, f, p: None)
    )
    made = Loop(_double)()
    assert getattr(made._cache, "_cache_path", None) is None, made._cache._cache_path
    assert np.array_equal(made(np.arange(3.0)), [0.0, 2.0, 4.0])
