"""The checkpoints a training run left in a folder, each with the integer that orders them.

Recognised, in this order:

- a TF1 run's checkpoints: the folder's `checkpoint` state file lists them
  (`all_model_checkpoint_paths`, oldest first, as `tf.compat.v1.train.Saver` writes it), each a
  prefix `model.ckpt-1000` whose trailing number is the global step (the key `checkpoint`); two
  prefixes of one step (`model.ckpt-200`, `model.ckpt-0200`) are refused;
- Keras files saved per epoch (`.keras`, `.h5`, `.hdf5`), named by `ModelCheckpoint`'s
  `filepath`, a format string whose `{epoch:02d}` field is the epoch (the key `epoch`), with
  anything around it: `model-{epoch:02d}.keras`, `lstm2-{epoch:02d}.h5`,
  `weights.{epoch:02d}-{val_loss:.2f}.hdf5`. Given that format string (`names`), a file's epoch
  is its `{epoch}` field. Without it, it is read off the names: the files must share one
  pattern of text and numbers, and of its whole numbers (a decimal `0.39` is a metric) exactly
  one may differ from file to file, or, all being equal, exactly one may be there; anything
  else is refused in one line asking for the format string. Two files of one epoch are refused.

A series is a stranger's folder like any model: the state file is read as a regular file of at
most 1 MB; a checkpoint it names outside the folder is looked for inside it by its name (as
`load_model` does for one checkpoint), and each file of a checkpoint must be a regular file
inside the folder (a link out of it, a FIFO or a device is refused). Each checkpoint is loaded
by `load_model`, with every check that applies to one model.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from recorders.errors import ModelFormatError, SelectionError
from tracer.load.paths import checkpoint_files, files_inside, in_folder, read_checkpoint_state

__all__ = ["Checkpoint", "find_series", "choose", "epochs_of", "KERAS_SUFFIXES"]

KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")  # what ModelCheckpoint saves (Keras 2: .hdf5, .h5)
_STEP = re.compile(r"-(\d+)$")
# the numbers in a file's name: whole numbers, and decimals as `{val_loss:.2f}` writes them
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_EXAMPLE = "--names 'model-{epoch:02d}-{val_loss:.2f}.keras'"


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of a series: its key (`checkpoint` or `epoch`), its number, its path."""

    key: str
    value: int
    path: str


def find_series(folder: str | os.PathLike, names: str | None = None) -> list[Checkpoint]:
    """The checkpoints of a training run in `folder`, in order (see the module docstring);
    `names`: the `ModelCheckpoint` filepath the Keras files were saved with."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFormatError(f"--checkpoints: {folder} is not a folder of checkpoints")
    if names is None and (folder / "checkpoint").exists():
        return _tf1(folder)
    files = sorted(
        p.name for p in folder.iterdir() if p.suffix in KERAS_SUFFIXES and not p.is_dir()
    )
    found = epochs_of(files, names, str(folder))
    if not found:
        raise ModelFormatError(
            f"--checkpoints: {folder} holds no checkpoints: expected a TF1 run's 'checkpoint' state file, or Keras "
            "files saved per epoch (model-01.keras, model-02.keras, ...)"
        )
    files_inside(folder, [folder / name for _, name in found], "--checkpoints: ")
    return [Checkpoint("epoch", n, str(folder / name)) for n, name in found]


def epochs_of(files: list[str], names: str | None, where: str) -> list[tuple[int, str]]:
    """(epoch, file name) of each Keras file of a run, by epoch (see the module docstring):
    `names` is the `ModelCheckpoint` filepath (only its last part is used), or None to read the
    epochs off the names. ModelFormatError where they cannot say it, or two files share one."""
    if names is not None:
        pattern = _pattern(names)
        found = [(int(m.group("epoch")), f) for f in files if (m := pattern.fullmatch(f))]
        if not found and files:
            raise ModelFormatError(
                f"--names {names}: no file of {where} is named so (it holds {', '.join(files[:3])}"
                f"{', ...' if len(files) > 3 else ''}); give the filepath ModelCheckpoint saved them with"
            )
    else:
        found = _read_off(files, where)
    found.sort()
    for (a, first), (b, second) in zip(found, found[1:], strict=False):
        if a == b:
            raise ModelFormatError(
                f"--checkpoints: {where} holds {first} and {second}, both of epoch {a}; keep one per epoch"
            )
    return found


def _pattern(names: str) -> re.Pattern:
    """The file names a `ModelCheckpoint` filepath gives: `{epoch...}` a whole number, any other
    field anything."""
    name = names.replace("\\", "/").rsplit("/", 1)[-1]
    parts = re.split(r"(\{[^{}]*\})", name)
    fields = [p for p in parts if p.startswith("{")]
    epochs = [f for f in fields if re.fullmatch(r"\{epoch(:[^{}]*)?\}", f)]
    if len(epochs) != 1:
        raise SelectionError(
            f"--names {names}: expected the ModelCheckpoint filepath with one {{epoch}} field, e.g. {_EXAMPLE}"
        )
    out = []
    for p in parts:
        if p in epochs:
            out.append(r"(?P<epoch>\d+)")
        elif p.startswith("{"):
            out.append(r".+?")
        else:
            out.append(re.escape(p))
    return re.compile("".join(out))


def _read_off(files: list[str], where: str) -> list[tuple[int, str]]:
    """(epoch, name) of Keras files whose names alone say their epoch: see the module docstring."""
    shapes: dict[tuple, list[tuple[str, list[str]]]] = {}
    for f in files:
        stem, suffix = f[: f.rindex(".")], f[f.rindex(".") :]
        numbers = _NUMBER.findall(stem)
        if not any("." not in n for n in numbers):
            continue  # no whole number: not saved per epoch (best.h5)
        text = (*_NUMBER.split(stem), suffix)
        shapes.setdefault((text, tuple("." in n for n in numbers)), []).append((f, numbers))
    if not shapes:
        return []
    ask = f"pass the ModelCheckpoint filepath they were saved with, e.g. {_EXAMPLE}"
    if len(shapes) > 1:
        shown = ", ".join(group[0][0] for group in shapes.values())
        raise ModelFormatError(
            f"--checkpoints: {where} holds Keras files named in {len(shapes)} ways ({shown}), so their names do "
            f"not say which number is the epoch; {ask}"
        )
    (((_, decimal), group),) = shapes.items()
    whole = [k for k, d in enumerate(decimal) if not d]
    varying = [k for k in whole if len({int(numbers[k]) for _, numbers in group}) > 1]
    candidates = varying or whole  # none varying: one file, or files of one epoch (refused below)
    if len(candidates) != 1:
        raise ModelFormatError(
            f"--checkpoints: {where}: {len(candidates)} whole numbers of {group[0][0]}"
            f"{' and the others' if len(group) > 1 else ''} could be the epoch; {ask}"
        )
    k = candidates[0]
    return [(int(numbers[k]), f) for f, numbers in group]


def _tf1(folder: Path) -> list[Checkpoint]:
    parsed = read_checkpoint_state(folder, "", prefix="--checkpoints: ")
    named = list(parsed.all_model_checkpoint_paths) or [parsed.model_checkpoint_path]
    out: dict[int, Checkpoint] = {}
    for name in [n for n in named if n]:
        candidate, _ = in_folder(folder, name)  # a trainer's absolute path: the same name here
        step = _STEP.search(candidate.name)
        if step is None:
            raise ModelFormatError(
                f"--checkpoints: {folder}: its 'checkpoint' file names {name}, whose name ends in no global step "
                "(model.ckpt-1000); record it alone, without --checkpoints"
            )
        if not Path(f"{candidate}.index").is_file():
            raise ModelFormatError(
                f"--checkpoints: {folder}: its 'checkpoint' file names {name}, which is not in the folder "
                f"(no {candidate.name}.index)"
            )
        files_inside(folder, checkpoint_files(candidate), "--checkpoints: ")
        value = int(step.group(1))
        if value in out and out[value].path != str(candidate):
            raise ModelFormatError(
                f"--checkpoints: {folder}: its 'checkpoint' file names {Path(out[value].path).name} and "
                f"{candidate.name}, both of global step {value}; keep one of them in the list"
            )
        out[value] = Checkpoint("checkpoint", value, str(candidate))
    if not out:
        raise ModelFormatError(
            f"--checkpoints: {folder}: its 'checkpoint' file names no checkpoint"
        )
    return [out[k] for k in sorted(out)]


def choose(series: list[Checkpoint], which: str) -> list[Checkpoint]:
    """The checkpoints `which` picks: `all`, `last`, `every-N` (the first and every N-th
    after it), or numbers separated by commas (`1000,3000`)."""
    if which == "all":
        return list(series)
    if which == "last":
        return series[-1:]
    every = re.fullmatch(r"every-(\d+)", which)
    if every and int(every.group(1)) > 0:
        return series[:: int(every.group(1))]
    if re.fullmatch(r"\d+(,\d+)*", which):
        wanted = [int(v) for v in which.split(",")]
        by_value = {c.value: c for c in series}
        missing = [v for v in wanted if v not in by_value]
        if missing:
            held = ", ".join(str(c.value) for c in series)
            raise SelectionError(
                f"--checkpoints {which}: no checkpoint {missing[0]} in the series; it holds {series[0].key} {held}"
            )
        return [by_value[v] for v in sorted(set(wanted))]
    raise SelectionError(
        f"--checkpoints {which}: expected all, last, every-N or numbers separated by commas, e.g. --checkpoints every-2"
    )
