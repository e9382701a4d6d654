"""Who may write a recording, and replacing one: the shards' lock files and the `--overwrite` swap.

Each shard holds `_progress/shard-K-of-N.lock` while it writes (`hold_lock`); `--overwrite`
records into a hidden sibling, holds every lock of the recording it replaces
(`hold_every_lock`) and swaps the new one in once it is complete; `settle_swap` finishes
or undoes a swap a killed run left. `create_folder` prepares the folder that parallel
shards write into.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import stat
from pathlib import Path

from recorders.errors import OutputExistsError, RecordingError, listing, option
from recorders.write.files import foreign_entries, refuse_links, refuse_non_folder
from recorders.write.folder import Folder, temporary_of
from recorders.write.layout import ROOT_ENTRIES
from recorders.write.place import LocalPlace, place_of
from recorders.write.progress import PROGRESS_DIR, Shard

__all__ = [
    "RECORDING",
    "hold_lock",
    "hold_every_lock",
    "drop_locks",
    "create_folder",
    "settle_swap",
    "mark_swapped",
    "unmark_swapped",
    "not_a_recording",
    "ours",
    "remove_partials",
]


def hold_lock(
    folder: Folder,
    rel: str,
    out: Path,
    which: str = "",
    then: str = "stop it and rerun with --resume",
) -> int | None:
    """Take the lock file `rel` of the recording in `folder` for as long as this process
    writes it; RecordingError if another process holds it. Returns the lock's file descriptor."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system: no lock
        return None
    path = out / rel
    fd = folder.open_fd(rel, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RecordingError(
            f"another gatetrace process is recording{which} {out} (it holds {path}); wait for it to finish, or {then}"
        ) from None
    return fd


def hold_every_lock(out: Path) -> tuple[list[int], list[str]]:
    """The lock of every shard of the recording in `out` (one for each lock or progress file
    there), for --overwrite: RecordingError, holding none, if any other process holds one.
    Returns the locks' file descriptors and the lock files it had to create (a finished
    shard's lock file is removed), which `drop_locks` removes again."""
    held: list[int] = []
    created: list[str] = []
    with Folder(out) as folder:
        names = [Path(n) for n in folder.entries(PROGRESS_DIR)]
        tags = sorted(
            {n.stem for n in names if n.suffix in (".lock", ".json") and not n.name.startswith(".")}
        )
        try:
            for tag in tags:
                rel = f"{PROGRESS_DIR}/{tag}.lock"
                if f"{tag}.lock" not in {n.name for n in names}:
                    created.append(rel)
                fd = hold_lock(folder, rel, out, then="stop it, then rerun with --overwrite")
                if fd is not None:
                    held.append(fd)
        except BaseException:
            drop_locks(out, held, created)
            raise
    return held, created


def drop_locks(out: Path, held: list[int], created: list[str]) -> None:
    """Remove the lock files `hold_every_lock` created in `out` (if it is still there), then let the locks go."""
    if created and out.is_dir():
        with Folder(out) as folder:
            for rel in created:
                folder.remove(rel)
    for fd in held:
        os.close(fd)


RECORDING = ROOT_ENTRIES


def create_folder(out: str | os.PathLike) -> bool:
    """Create the folder of a recording whose shards are about to start side by side (and
    its progress folder), so that no shard is the one that created it and none removes it
    on failure. Refuses a file, a link, or a folder holding anything but a recording.
    In object storage there is no folder to create: only what the prefix holds is checked.
    Returns whether the folder was created."""
    place = place_of(out)
    if not isinstance(place, LocalPlace):
        others = [name for name in place.entries() if not (name in RECORDING or ours(name))]
        if others:  # (a job takes no --overwrite)
            raise OutputExistsError(
                f"{option('out', out)} holds what gatetrace did not write ({listing(others, 5)}); choose another path"
            )
        return False
    folder = place.path.resolve()
    refuse_links(folder)
    refuse_non_folder(folder)
    foreign = not_a_recording(folder) if folder.is_dir() else []
    if foreign:
        raise OutputExistsError(
            f"{option('out', folder)} holds what gatetrace did not write ({listing(foreign, 5)}); choose another path"
        )
    created = not folder.exists()
    try:
        (folder / PROGRESS_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RecordingError(f"cannot create {folder}: {err.strerror or err}") from None
    return created


def _in_use(folder: Path) -> bool:
    """Whether a process holds a lock of the recording in `folder` (it is being written)."""
    try:
        held, created = hold_every_lock(folder)
    except RecordingError:
        return True
    except OSError:
        return False
    drop_locks(folder, held, created)
    return False


# What marks a folder as one an --overwrite made or moved aside: gatetrace's own, to remove.
SWAP_MARK = f"{PROGRESS_DIR}/.swap.json"


def _mark(fd: int, target: Path) -> dict:
    """The mark of the folder open as `fd` for an --overwrite of `target`: the recording it
    replaces, and the folder's own device and inode (a copy, or another folder given the
    mark's text, is not the folder marked)."""
    info = os.fstat(fd)
    return {
        "gatetrace": "overwrite",
        "of": str(target),
        "device": info.st_dev,
        "inode": info.st_ino,
    }


def mark_swapped(folder: Path, target: Path) -> None:
    """Mark the recording `folder` as taking part in an --overwrite of `target` (the new one,
    written beside it; the old one, about to be moved aside): only a folder so marked is ever
    removed or moved by `settle_swap`."""
    with Folder(folder) as f:
        assert f.fd is not None
        f.write_bytes(SWAP_MARK, json.dumps(_mark(f.fd, target)).encode())


def unmark_swapped(folder: Path) -> None:
    """Remove the mark from the recording now at `folder` (once swapped in); nothing if there is none."""
    try:
        with Folder(folder) as f:
            f.remove(SWAP_MARK)
    except OSError:
        pass  # a mark left is harmless: it names the folder only at this inode, as this recording


def _marked(folder: Path, target: Path) -> bool:
    """Whether `folder` (never through a link) carries the mark `mark_swapped` gave it for `target`."""
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return False
        with Folder(folder) as f:
            assert f.fd is not None
            found = json.loads(f.read_bytes(SWAP_MARK, 4096))
            return bool(found == _mark(f.fd, target))
    except (OSError, ValueError):
        return False


def settle_swap(target: Path) -> None:
    """Finish or undo what a killed --overwrite left, before anything else looks at `target`.

    --overwrite records into `.NAME.overwrite-*` beside the recording and, once that is
    complete, renames the old one to `.NAME.old-*`, the new one into place, and removes
    the old one. Killed between the renames, `target` is missing: the swap is finished
    if the new recording is complete (it has its manifest), else undone. Siblings left by
    killed runs (an unfinished new recording no process writes, an old one already
    replaced) are removed. Only folders carrying the mark an --overwrite of `target` gave
    them (`mark_swapped`: the target, the folder's own inode) are touched; a folder of the
    user's, whatever its name or content, never is."""
    parent, name = target.parent, target.name
    if not parent.is_dir():
        return

    def siblings(tag: str) -> list[Path]:
        found = parent.glob(f".{glob.escape(name)}.{tag}-*")
        return sorted(p for p in found if _marked(p, target))

    old, new = siblings("old"), [p for p in siblings("overwrite") if not _in_use(p)]
    if not os.path.lexists(target):
        finished = [p for p in new if (p / "manifest.json").is_file()]
        if finished or old:
            os.replace(finished[0] if finished else old[0], target)
            unmark_swapped(target)
    if os.path.lexists(target):
        for p in old + new:
            if p.exists():
                shutil.rmtree(p, ignore_errors=True)


def not_a_recording(out: Path) -> list[str]:
    """What in `out` is not part of a gatetrace recording (for --overwrite): a file a killed
    run was writing (`.manifest.json.partial-*`) is."""
    return [name for name in foreign_entries(out, RECORDING, (".staging-",)) if not _left(name)]


def _left(name: str) -> bool:
    """Whether `name` is the temporary name of a file of a recording's root (`Folder.write_bytes`)."""
    found = temporary_of(name)
    return found is not None and found[0] in RECORDING


def remove_partials(folder: Folder, shard: Shard) -> None:
    """Remove what a killed run of `shard` (whose lock this process holds) left half-written:
    its progress file's temporaries, and, when it is the recording's only shard, those of
    the root's files (its manifest's); another shard's, which may be writing them, are kept."""
    tag = f"{shard.tag}.json"
    for name in folder.entries(PROGRESS_DIR):
        found = temporary_of(name)
        if found is not None and found[0] == tag:
            folder.remove(f"{PROGRESS_DIR}/{name}")
    if shard.count == 1:
        for name in folder.entries():
            if _left(name):
                folder.remove(name)


def ours(name: str) -> bool:
    """Entries of `OUT` that a run killed before its first progress file may leave."""
    return name == PROGRESS_DIR or name.startswith(".staging-") or _left(name)
