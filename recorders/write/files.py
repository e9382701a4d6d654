"""Publishing outputs atomically: write under a hidden temporary name, rename at the end.

A folder or file that gatetrace writes appears under its final name only once it is
complete, so a run that fails (or is killed) leaves nothing that looks finished.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from recorders.errors import OutputExistsError, RecordingError, listing, option
from recorders.write.folder import kind_of, temporary_name, temporary_of
from recorders.write.layout import PROGRESS_DIR, SUMMARY_DIR
from recorders.write.series import KEYS, SERIES_FILE

__all__ = [
    "is_uri",
    "local_path",
    "check_out",
    "kind_at",
    "refuse_non_folder",
    "refuse_inputs_inside",
    "refuse_out_inside_inputs",
    "refuse_inside_written",
    "check_folder_out",
    "written_folder",
    "refuse_links",
    "foreign_entries",
    "temp_sibling",
    "remove_left_partials",
    "exchange",
    "publish",
    "remove",
]


_URI = re.compile(r"^([a-z][a-z0-9+.-]*)://")


def is_uri(text: str) -> bool:
    """`s3://...`, `gs://...`: a location in object storage (`file://` is a local path)."""
    return bool(_URI.match(text)) and not text.startswith("file://")


def local_path(out: str | os.PathLike, what: str = "--out") -> Path:
    """`out` as a Path; RecordingError for a URI (`s3://...`, `gs://...`), which a Path would
    silently turn into a local folder named after the scheme. (`file://` is a local path.)"""
    text = os.fspath(out)
    if text.startswith("file://"):
        return Path(text[len("file://") :])
    scheme = _URI.match(text)
    if scheme:
        raise RecordingError(
            f"{what} {text}: this is written to a file system, not to {scheme.group(1)}:// object storage (only "
            "`gatetrace record --out` writes there); write it to a local or shared folder, then copy it (aws s3 cp, gsutil cp)"
        )
    return Path(text)


def check_out(
    out: Path,
    overwrite: bool,
    ours: Callable[[Path], list[str]] | None = None,
) -> None:
    """Refuse an output folder that is anything but a folder (a file, a FIFO, a device: said
    which), or one that holds something, unless `overwrite`; and even then refuse to replace
    what gatetrace did not write: `ours(out)` lists what in `out` is not gatetrace's (empty:
    it may be replaced). A single file's output: `recorders.write.weights_file.check_file_out`."""
    refuse_non_folder(out)
    taken = out.is_dir() and any(out.iterdir())
    foreign = ours(out) if taken and ours is not None else []
    if foreign:  # --overwrite would be refused: it is not suggested
        shown = listing(foreign, 5)
        raise OutputExistsError(
            f"{option('out', out)} holds what gatetrace did not write ({shown}); {option('overwrite')} replaces only gatetrace's own output: "
            "choose another path, or move those files away first"
        )
    if taken and not overwrite:
        raise OutputExistsError(
            f"{option('out', out)} exists and is not empty; choose another path or pass {option('overwrite')}"
        )


def refuse_non_folder(out: Path, named: str | None = None) -> None:
    """OutputExistsError if the output folder `out` exists and is not a folder (a file, a
    FIFO, a device, a socket: said which); `named`: how the message names it (`--out OUT`)."""
    if out.exists() and not out.is_dir():
        raise OutputExistsError(
            f"{named or option('out', out)} exists and is {kind_at(out)}; give a folder path"
        )


def kind_at(path: Path) -> str:
    """What `path` is, looked at without following a link, for a message: "a file" (a
    regular one), "a folder", "a symbolic link", "a FIFO", "a socket", a device."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "missing"
    return "a file" if stat.S_ISREG(mode) else kind_of(mode)


def refuse_inputs_inside(
    out: str | os.PathLike, inputs: Iterable[str | os.PathLike | None]
) -> None:
    """`--overwrite` removes the recording at `out`: refuse (OutputExistsError) when the model or
    an input file (`inputs`, local paths; URIs and None are passed over) is `out` or lies inside
    it, before anything is read or written."""
    if is_uri(os.fspath(out)):
        return
    root = Path(out).resolve()
    inside = [
        os.fspath(p)
        for p in inputs
        if p is not None and not is_uri(os.fspath(p)) and Path(p).resolve().is_relative_to(root)
    ]
    if inside:
        raise OutputExistsError(
            f"{option('overwrite')} would delete what this recording reads: {listing(inside, 3)} lie{'s' if len(inside) == 1 else ''} inside "
            f"{option('out', out)}; write the new recording to another folder, or move {'it' if len(inside) == 1 else 'them'} out first"
        )


def refuse_out_inside_inputs(
    out: str | os.PathLike,
    inputs: Iterable[str | os.PathLike | None],
    named: str | None = None,
) -> None:
    """Refuse (OutputExistsError) an `out` that is, or lies inside, a folder the command reads
    (a SavedModel's folder, a checkpoint's folder given as the model; `inputs`, local paths,
    links followed; URIs and None are passed over): gatetrace writes nothing into its inputs.
    `named`: how the message names `out` (`--out OUT`)."""
    if is_uri(os.fspath(out)):
        return
    target = Path(out).resolve()
    for p in inputs:
        if p is None or is_uri(os.fspath(p)):
            continue
        # the input itself (a checkpoint's prefix, which a folder of that name would hide from
        # TensorFlow), or a folder it lies inside
        if (
            target == Path(p).resolve()
            or Path(p).is_dir()
            and target.is_relative_to(Path(p).resolve())
        ):
            raise OutputExistsError(
                f"{named or option('out', out)} {'is' if target == Path(p).resolve() else 'lies inside'} {os.fspath(p)}, which this "
                f"command reads: gatetrace writes nothing into its inputs; give {'a folder' if named else 'an --out'} outside it"
            )


def written_folder(folder: Path) -> str | None:
    """ "recording" or "series" if gatetrace wrote one in `folder` (a recording has its progress
    folder, or its manifest beside its tables; a series its series file), else None."""
    if (folder / PROGRESS_DIR).is_dir() or (
        (folder / "manifest.json").is_file()
        and ((folder / "gates").is_dir() or (folder / SUMMARY_DIR).is_dir())
    ):
        return "recording"
    return "series" if (folder / SERIES_FILE).is_file() else None


def refuse_inside_written(out: str | os.PathLike, named: str | None = None) -> None:
    """Refuse (OutputExistsError) a local output folder `out` (links followed) that lies
    inside a recording or a series gatetrace wrote, which holds only what its writer wrote;
    a series' own key folder (`SERIES/KEY=VALUE`, where its writers record) is its place.
    URIs are passed over."""
    if is_uri(os.fspath(out)):
        return
    target = local_path(out).resolve()
    for folder in target.parents:
        what = written_folder(folder)
        key = target.parent == folder and target.name.split("=", 1)[0] in KEYS
        if what and not (what == "series" and key):
            raise OutputExistsError(
                f"{named or option('out', out)} lies inside the {what} {folder}, which holds only what its writer "
                f"wrote; give a folder outside it, e.g. {folder.parent / target.name}"
            )


def check_folder_out(
    out: str | os.PathLike,
    inputs: Iterable[str | os.PathLike | None] = (),
    named: str | None = None,
) -> None:
    """The rules every local output folder follows, checked before anything is written: not
    a file, a FIFO, a device or a socket (`refuse_non_folder`), not inside what the command
    reads (`refuse_out_inside_inputs`), not inside a recording or series
    (`refuse_inside_written`); `named`: how messages name it (`--out OUT`)."""
    if is_uri(os.fspath(out)):
        return
    refuse_non_folder(local_path(out), named)
    refuse_out_inside_inputs(out, inputs, named)
    refuse_inside_written(out, named)


def foreign_entries(
    folder: Path, names: Iterable[str], prefixes: tuple[str, ...] = ()
) -> list[str]:
    """The entries of `folder` that are neither one of `names` nor start with one of `prefixes`."""
    return (
        sorted(
            p.name
            for p in folder.iterdir()
            if p.name not in names and not p.name.startswith(prefixes)
        )
        if folder.is_dir()
        else []
    )


def refuse_links(out: Path) -> None:
    """Refuse a folder holding a symbolic link anywhere below it: gatetrace writes and deletes
    only real files inside --out, never what a link points to."""
    if not out.is_dir():
        return
    for root, dirs, files in os.walk(out, followlinks=False):
        for name in dirs + files:
            path = Path(root) / name
            if path.is_symlink():
                raise OutputExistsError(
                    f"{option('out', out)} holds a symbolic link, {path} -> {os.readlink(path)}; gatetrace writes only real files "
                    "inside the folder: remove the link, or record into a new folder"
                )


def temp_sibling(out: Path, tag: str = "partial") -> Path:
    """A hidden, unique path next to `out`: `.NAME.partial-PID-1a2b3c4d` (`temporary_name`)."""
    return out.parent / temporary_name(out.name, tag)


def _running(pid: int) -> bool:
    """Whether a process `pid` runs on this machine (this one included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's
        return True
    return True


def remove_left_partials(out: Path) -> None:
    """Remove the temporaries `temp_sibling(out)` made that a killed run left beside `out`
    (`.NAME.partial-PID-*`, PID no longer running; and, once `out` is there, the one `publish`
    moved the old `out` to, `.NAME.old-PID-*`): only a file or folder of this user's, never a
    link, nor what a running process, or an earlier gatetrace (no PID), writes."""
    if not out.parent.is_dir():
        return
    tags = ("partial", "old") if os.path.lexists(out) else ("partial",)
    for entry in os.listdir(out.parent):
        found = next((f for f in (temporary_of(entry, t) for t in tags) if f), None)
        if found is None or found[0] != out.name or found[1] is None or _running(found[1]):
            continue
        path = out.parent / entry
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if info.st_uid != os.getuid() or not (
            stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)
        ):
            continue
        remove(path)


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2  # <fcntl.h>, <linux/fs.h>


def exchange(a: Path, b: Path) -> bool:
    """Swap the two existing paths `a` and `b` in one step (Linux `renameat2` with
    RENAME_EXCHANGE): at every instant each name holds one of the two. False, with nothing
    changed, where the C library, the kernel or the file system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(b))


def publish(tmp: Path, out: Path) -> None:
    """Move the finished `tmp` (file or folder) to `out`, replacing what is there: in one
    exchange where the OS has it (a kill at any instant leaves the old or the new at `out`),
    else by moving the old aside first (a kill between the two renames leaves it aside, and
    the next run puts it back or finishes the move; `tracer`'s writer does)."""
    try:
        old = None
        if out.exists() and exchange(tmp, out):
            old = tmp  # it holds what `out` held
        elif out.exists():
            old = temp_sibling(out, "old")
            os.replace(out, old)
        if old is not tmp:
            try:
                os.replace(tmp, out)
            except OSError:
                if old is not None:
                    os.replace(old, out)
                raise
    except OSError as err:
        raise RecordingError(
            f"cannot move the finished output into place at {out}: {err.strerror or err}"
        ) from err
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
