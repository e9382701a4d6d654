"""Publishing outputs atomically: write under a hidden temporary name, rename at the end.

A folder or file that gatetrace writes appears under its final name only once it is
complete, so a run that fails (or is killed) leaves nothing that looks finished.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from recorders.errors import OutputExistsError, RecordingError

__all__ = ["check_out", "temp_sibling", "publish", "remove", "clear"]


def check_out(out: Path, overwrite: bool, folder: bool = True) -> None:
    """Refuse an output location that holds something, unless `overwrite`."""
    if folder and out.exists() and not out.is_dir():
        raise OutputExistsError(f"--out {out} exists and is a file; give a folder path")
    if not folder and out.is_dir():
        raise OutputExistsError(f"--out {out} is a folder; give a file path, e.g. {out / 'weights.parquet'}")
    taken = out.is_file() or (out.is_dir() and any(out.iterdir()))
    if taken and not overwrite:
        raise OutputExistsError(f"--out {out} exists and is not empty; choose another path or pass --overwrite")


def temp_sibling(out: Path, tag: str = "partial") -> Path:
    """A hidden, unique path next to `out`: `.NAME.partial-1a2b3c4d`."""
    return out.parent / f".{out.name}.{tag}-{uuid.uuid4().hex[:8]}"


def publish(tmp: Path, out: Path) -> None:
    """Move the finished `tmp` (file or folder) to `out`, replacing what is there."""
    try:
        old = None
        if out.exists():
            old = temp_sibling(out, "old")
            os.replace(out, old)
        try:
            os.replace(tmp, out)
        except OSError:
            if old is not None:
                os.replace(old, out)
            raise
    except OSError as err:
        raise RecordingError(f"cannot move the finished output into place at {out}: {err.strerror or err}") from err
    if old is not None:
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)


def remove(path: Path) -> None:
    """Remove a temporary file or folder, if it is there."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def clear(out: Path) -> None:
    """Empty the folder `out` (moving it aside first, so a crash leaves no half-deleted folder)."""
    if not out.is_dir() or not any(out.iterdir()):
        return
    old = temp_sibling(out, "old")
    try:
        os.replace(out, old)
    except OSError as err:
        raise RecordingError(f"cannot replace {out}: {err.strerror or err}") from err
    shutil.rmtree(old, ignore_errors=True)
