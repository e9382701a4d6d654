"""What a model path may point at: the files of a TF1 checkpoint (`P.index`, `P.data-*`,
`P.meta`) and a folder's `checkpoint` state file, each a regular file inside the model's
folder, read without following a link out of it. `checkpoint_prefix` tells the checkpoint a
path names (a prefix, its `.meta`, or a folder holding a `checkpoint` file).
"""

from __future__ import annotations

import glob
import os
import stat
from pathlib import Path
from typing import Any

from recorders.errors import ModelFormatError
from recorders.write.folder import Folder

__all__ = [
    "inside",
    "read_checkpoint_state",
    "checkpoint_files",
    "files_inside",
    "in_folder",
    "checkpoint_prefix",
]


def inside(path: Path, folder: Path) -> bool:
    """Whether `path`, its links followed, lies inside `folder`."""
    return path.resolve().is_relative_to(folder.resolve())


def read_checkpoint_state(folder: Path, hint: str, prefix: str = "") -> Any:
    """The `CheckpointState` of a folder's `checkpoint` file, read only as a regular file of at
    most 1 MB inside the folder (`Folder.read_bytes`: never through a link, never a FIFO or a
    device); ModelFormatError "PREFIX FOLDER: cannot read ...; HINT" else."""
    from google.protobuf import text_format
    from tensorflow.python.checkpoint.checkpoint_management import CheckpointState

    try:
        with Folder(folder.resolve()) as opened:  # the folder the user named, a link to it followed
            data = opened.read_bytes("checkpoint", 1 << 20)
        return text_format.Parse(data.decode("utf-8"), CheckpointState())
    except (OSError, ValueError, text_format.ParseError) as err:
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ModelFormatError(
            f"{prefix}{folder}: cannot read its 'checkpoint' file: {why}{hint}"
        ) from None


def checkpoint_files(prefix: Path) -> list[Path]:
    """The files of the TF1 checkpoint `prefix`: its .meta, .index and .data-* files."""
    return [
        Path(f"{prefix}.meta"),
        Path(f"{prefix}.index"),
        *prefix.parent.glob(f"{glob.escape(prefix.name)}.data-*"),
    ]


def files_inside(folder: Path, files: list[Path], prefix: str = "") -> None:
    """ModelFormatError unless each of `files` that is there is a regular file inside `folder`
    (a link that stays inside it is one): a trainer writes nothing else, and a link out of the
    folder would read another run's weights, a FIFO block, a device act on being opened."""
    for f in files:
        if not os.path.lexists(f):
            continue
        if not inside(f, folder):
            raise ModelFormatError(
                f"{prefix}{folder}: {f.name} links out of the folder; gatetrace reads a checkpoint's files only "
                "inside its folder: copy them in"
            )
        kind = stat.S_IFMT(os.stat(f).st_mode)
        if kind != stat.S_IFREG:
            raise ModelFormatError(
                f"{prefix}{folder}: {f.name} is {'a folder' if kind == stat.S_IFDIR else 'not a regular file'}; "
                "a checkpoint's files are regular files: remove it, or copy the run's files into a new folder"
            )


def in_folder(folder: Path, named: str) -> tuple[Path, str | None]:
    """The checkpoint a state file names, inside `folder`, and a note if it named one outside
    (published checkpoints carry their trainer's absolute paths: the same name inside the
    folder is taken, as a user who moved it would)."""
    candidate = folder / named
    if Path(named).is_absolute() or not inside(candidate, folder):
        candidate = folder / Path(named).name
        return (
            candidate,
            f"its 'checkpoint' file names {named}, outside {folder}: read {candidate.name} in the folder instead",
        )
    return candidate, None


def _state_prefix(folder: Path) -> tuple[str, str | None]:
    """The checkpoint prefix a folder's `checkpoint` state file names, inside the folder
    (`in_folder`), and a note if the file named one outside it. Nothing outside the folder is
    read because the file names it."""
    named = read_checkpoint_state(
        folder, "; point at a checkpoint prefix P with P.meta beside it instead"
    ).model_checkpoint_path
    if not named:
        raise ModelFormatError(
            f"{folder}: its 'checkpoint' file names no checkpoint; point at a checkpoint prefix P with P.meta beside it instead"
        )
    candidate, note = in_folder(folder, named)
    if not Path(f"{candidate}.index").is_file() and not Path(f"{candidate}.meta").is_file():
        where = (
            f"names {named}, outside the folder, and the folder holds no {candidate.name}"
            if note
            else f"names no checkpoint that exists ({named})"
        )
        raise ModelFormatError(
            f"{folder}: its 'checkpoint' file {where}; point at a checkpoint prefix P with P.meta beside it instead"
        )
    files_inside(folder, checkpoint_files(candidate))
    return str(candidate), note


def checkpoint_prefix(path: Path) -> tuple[str, str | None] | None:
    """The checkpoint prefix `path` names, if it names one, with a note on how it was found."""
    if path.is_dir() and (path / "checkpoint").is_file():
        return _state_prefix(path)
    if path.suffix == ".meta" and path.is_file():
        return str(path)[: -len(".meta")], None
    if Path(str(path) + ".meta").is_file():
        return str(path), None
    return None
