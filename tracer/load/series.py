"""The checkpoints a training run left in a folder, each with the integer that orders them.

Recognised, in this order:

- a TF1 run's checkpoints: the folder's `checkpoint` state file lists them
  (`all_model_checkpoint_paths`, oldest first, as `tf.compat.v1.train.Saver` writes it), each a
  prefix `model.ckpt-1000` whose trailing number is the global step (the key `checkpoint`);
- Keras files saved per epoch (`ModelCheckpoint("model-{epoch:02d}.keras")`, `.h5`): the last
  number in each file's name is the epoch (the key `epoch`).

A series is a stranger's folder like any model: the state file is read as text (at most 1 MB);
a checkpoint it names outside the folder is looked for inside it by its name (as `load_model`
does for one checkpoint), and nothing outside the folder is read. Each checkpoint is loaded by
`load_model`, with every check that applies to one model.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from recorders.errors import ModelFormatError, SelectionError
from tracer.load.model import in_folder, inside, read_checkpoint_state

__all__ = ["Checkpoint", "find_series", "choose"]

_STEP = re.compile(r"-(\d+)$")
_NUMBER = re.compile(r"(\d+)")


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of a series: its key (`checkpoint` or `epoch`), its number, its path."""

    key: str
    value: int
    path: str


def find_series(folder: str | os.PathLike) -> list[Checkpoint]:
    """The checkpoints of a training run in `folder`, in order (see the module docstring)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFormatError(f"--checkpoints: {folder} is not a folder of checkpoints")
    if (folder / "checkpoint").is_file():
        return _tf1(folder)
    keras = [
        p for p in folder.iterdir() if p.suffix in (".keras", ".h5") and _NUMBER.search(p.stem)
    ]
    if keras:
        found = sorted(
            (int(_NUMBER.findall(p.stem)[-1]), p.name, str(p)) for p in keras if inside(p, folder)
        )
        numbers = [n for n, _, _ in found]
        twice = sorted({n for n in numbers if numbers.count(n) > 1})
        if twice:
            same = [name for n, name, _ in found if n == twice[0]]
            raise ModelFormatError(
                f"--checkpoints: {folder} holds {' and '.join(same)}, both of epoch {twice[0]}; keep one per epoch"
            )
        return [Checkpoint("epoch", n, path) for n, _, path in found]
    raise ModelFormatError(
        f"--checkpoints: {folder} holds no checkpoints: expected a TF1 run's 'checkpoint' state file, or Keras "
        "files saved per epoch (model-01.keras, model-02.keras, ...)"
    )


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
        if not Path(f"{candidate}.index").is_file() or not inside(
            Path(f"{candidate}.index"), folder
        ):
            raise ModelFormatError(
                f"--checkpoints: {folder}: its 'checkpoint' file names {name}, which is not in the folder "
                f"(no {candidate.name}.index)"
            )
        out[int(step.group(1))] = Checkpoint("checkpoint", int(step.group(1)), str(candidate))
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
