"""Recording a training run's checkpoints: one recording per checkpoint, under one folder.

    OUT/series.json                 the key (`checkpoint`: global step, or `epoch`), its values, the folder
    OUT/checkpoint=1000/            a complete recording (`tracer.run.recording.record`) of that checkpoint
    OUT/checkpoint=2000/            ...

Each key's folder is an ordinary recording (full or `--summary`), written and resumed as one: a
run killed midway leaves every key recorded before it complete and readable, and the one in
flight partial (no manifest); `resume` skips the complete ones and continues the partial one,
refusing inputs or options other than those the complete ones were recorded with (a series
complete before the resume: those of its last checkpoint, checked as a resumed recording is).
`recorders.read.series.Series` reads them as one table with the key as a column; DuckDB reads
`OUT/*/gates/*/*/*.parquet` with `hive_partitioning = true` the same way.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from recorders.errors import (
    GatetraceError,
    Interrupted,
    ModelFormatError,
    OutputExistsError,
    SelectionError,
    option,
)
from recorders.write import LocalPlace, is_uri, place_of
from recorders.write.files import check_folder_out
from recorders.write.schema import RecordingSummary, parse_json
from recorders.write.series import SERIES_FILE, key_folder
from tracer.load.model import load_model
from tracer.load.series import Checkpoint, choose, find_series
from tracer.run.options import RecordOptions
from tracer.run.recording import find_all, record
from tracer.run.tensorboard import GateSummaries, check_logdir

__all__ = ["record_series", "open_logged", "fresh_key", "logged_folder", "SERIES_FILE"]


def record_series(
    folder: str | os.PathLike,
    feeds: Any,
    out: str | os.PathLike,
    checkpoints: str = "all",
    *,
    names: str | None = None,
    resume: bool = False,
    progress: bool = False,
    allow_unsafe_ops: bool = False,
    custom_objects: str | os.PathLike | None = None,
    tensorboard: str | os.PathLike | None = None,
    options: RecordOptions | None = None,
    **changes: Any,
) -> dict:
    """Record each checkpoint `checkpoints` picks (`tracer.load.series.choose`) of the training
    run in `folder` on `feeds`, into `out/KEY=VALUE/` (see the module docstring); `options` and
    `changes` are `tracer.record`'s; `names`: the `ModelCheckpoint` filepath Keras files were saved with
    (`tracer.load.series.find_series`). Returns {"key", "values", "recorded": those recorded in this run,
    "summaries": each one's `record` summary}."""
    options = RecordOptions.of(options, **changes)
    for flag, given in (
        ("overwrite", options.overwrite),
        ("shard", options.shard.count > 1),
        ("carry_state", options.carry_state),
    ):
        if given:
            raise SelectionError(
                f"--checkpoints with --{flag.replace('_', '-')}: a series is recorded one checkpoint after another "
                "into folders of its own; remove an old series first, and record the whole series in one process"
            )
    chosen = choose(find_series(folder, names), checkpoints)
    key = chosen[0].key
    folders = {c.value: key_folder(key, c.value) for c in chosen}  # each a key a reader takes
    out_text = str(out).rstrip("/")
    place = place_of(out_text)
    description = {
        "kind": "series",
        "key": key,
        "values": [c.value for c in chosen],
        "source": os.fspath(folder),
    }
    reads = (folder, *options.reads)  # the training run's folder, the feeds
    started = _check_start(place, description, resume, out_text, reads)
    created = not place.exists()  # made by this series: a refusal leaves no folder
    if tensorboard is not None:
        check_logdir(tensorboard, out_text, reads)
    board: GateSummaries | None = None
    summaries: dict[int, RecordingSummary] = {}
    recorded: list[int] = []
    first: list[dict] | None = None
    # a recording of the series complete before this run, which the others must agree with
    joins: tuple[str, dict] | None = None
    last: tuple[Checkpoint, str, tuple[str, dict]] | None = None  # the last one complete before
    try:
        for c in chosen:
            where = f"{out_text}/{folders[c.value]}"
            sub = place_of(where)
            if resume and sub.exists() and "manifest.json" in sub.entries():
                own = (
                    f"{option('out', out_text)} holds a series whose {key} {c.value}",
                    sub.read_json("manifest.json"),
                )
                joins = joins or own
                last = (c, where, own)
                continue  # recorded before
            if progress:
                print(f"gatetrace: {key} {c.value}: {c.path}", file=sys.stderr)
            with load_model(
                c.path, allow_unsafe_ops=allow_unsafe_ops, custom_objects=custom_objects
            ) as model:
                cells = [_shape(cell.describe()) for cell in find_all(model)]
                if first is None:
                    first = cells
                elif cells != first:  # checked before anything of this checkpoint is written
                    raise ModelFormatError(_changed(chosen[0], c, first, cells))
                if tensorboard is not None and board is None:
                    board = GateSummaries(tensorboard)
                if not started:  # the first checkpoint loaded: the series begins
                    _begin(place, description)
                    started = True
                summaries[c.value] = record(
                    model,
                    feeds,
                    where,
                    options=replace(
                        options,
                        resume=resume and sub.exists() and bool(sub.entries()),
                        progress=progress,
                        joins=joins,
                    ),
                )
            if board is not None:
                board.write(where, c.value)
            recorded.append(c.value)
        if not recorded and last is not None:  # every checkpoint complete: resumed as it began?
            _check_complete(*last, feeds, options, allow_unsafe_ops, custom_objects)
    except GatetraceError as err:
        # refused before a batch of the first checkpoint was written: nothing worth resuming
        # (an interrupted or failing recording keeps its batches, for --resume)
        first_key = f"{out_text}/{folders[chosen[0].value]}"
        if (
            not resume
            and not recorded
            and started
            and not isinstance(err, Interrupted)
            and not place_of(first_key).files("gates")
        ):
            for name in place.entries():
                place.remove(name)
            if created and isinstance(place, LocalPlace) and not place.entries():
                place.close()
                place.path.rmdir()
        raise
    finally:
        if board is not None:
            board.close()
    return {
        "key": key,
        "values": description["values"],
        "recorded": recorded,
        "summaries": summaries,
    }


def _check_complete(
    checkpoint: Checkpoint,
    where: str,
    own: tuple[str, dict],
    feeds: Any,
    options: RecordOptions,
    allow_unsafe_ops: bool,
    custom_objects: str | os.PathLike | None,
) -> None:
    """Refuse the resume of a complete series with inputs or options other than those its
    last checkpoint `checkpoint` (in `where`, `own`: what it is, in words, and its manifest)
    was recorded with, as a resumed recording refuses them, before anything is written;
    resumed as it was recorded, that recording records nothing more (it is not counted as
    recorded in this run)."""
    with load_model(
        checkpoint.path, allow_unsafe_ops=allow_unsafe_ops, custom_objects=custom_objects
    ) as model:
        record(model, feeds, where, options=replace(options, resume=True, joins=own))


def _check_start(
    place: Any, description: dict, resume: bool, out: str, reads: tuple[Any, ...]
) -> bool:
    """Whether the series in `out` has begun (resumed: its `series.json` matches); refuses a
    folder holding anything else, anything but a folder, or one inside what the series reads
    or inside a recording or series (`check_folder_out`), before anything is written."""
    if isinstance(place, LocalPlace):
        check_folder_out(place.path, reads, option("out", out))
    if SERIES_FILE in place.entries():
        if not resume:
            raise OutputExistsError(
                f"{option('out', out)} already holds a series; pass {option('resume')} to continue it, or choose another folder"
            )
        found = parse_json(place.read_bytes(SERIES_FILE, 1 << 20), f"{out}/{SERIES_FILE}")
        if not isinstance(found, dict) or {k: found.get(k) for k in ("key", "values")} != {
            k: description[k] for k in ("key", "values")
        }:
            raise OutputExistsError(
                f"{option('out', out)} holds a series of other checkpoints; resume with the same {option('checkpoints')}, or choose "
                "another folder"
            )
        return True
    if place.exists() and place.entries():
        raise OutputExistsError(
            f"{option('out', out)} is not empty; give a new folder for the series"
        )
    return False


def _begin(place: Any, description: dict) -> None:
    """Write `series.json` into the new series folder."""
    if isinstance(place, LocalPlace):
        place.path.mkdir(parents=True, exist_ok=True)
    place.write_json(SERIES_FILE, description)


def _shape(cell: dict) -> dict:
    """What must not change along a series: a cell's name, kind, sizes, gates and states."""
    return {k: cell.get(k) for k in ("name", "kind", "units", "input_size", "gates", "states")}


def _changed(first: Checkpoint, now: Checkpoint, before: list[dict], after: list[dict]) -> str:
    """The one line that says how the cells changed between two checkpoints of a series."""
    names_before, names_after = [c["name"] for c in before], [c["name"] for c in after]
    if names_before != names_after:
        what = f"its cells are {', '.join(names_after)}, at {first.key} {first.value} {', '.join(names_before)}"
    else:
        a, b = next((a, b) for a, b in zip(before, after, strict=True) if a != b)
        field = next(k for k in a if a[k] != b[k])
        what = f"cell {a['name']} has {field} {b[field]}, at {first.key} {first.value} {a[field]}"
    return (
        f"{option('checkpoints')}: the cells change along the series: at {now.key} {now.value} {what}; "
        "record the checkpoints of one model"
    )


def logged_folder(out: str | os.PathLike) -> str:
    """The folder a logger writes into: a local path as the user named it, its links followed
    (as `record` takes --out: the user named the link), or an object-storage URI as it is."""
    text = os.fspath(out).rstrip("/")
    if is_uri(text) and not text.startswith("file://"):
        return text
    return str(Path(text.removeprefix("file://")).resolve())


def open_logged(out: str, key: str, who: str) -> dict[str, Any]:
    """Write the series file of a run logged while training, keyed by `key` (its values: the
    folders there), or check the one a restarted run left there, and return it; `who` names
    the logger in the one-line errors."""
    place = place_of(out)
    if isinstance(place, LocalPlace):
        check_folder_out(place.path, (), f"{who}: {out}")
    if SERIES_FILE in place.entries():
        found = parse_json(place.read_bytes(SERIES_FILE, 1 << 20), f"{out}/{SERIES_FILE}")
        if not isinstance(found, dict) or found.get("key") != key:
            raise OutputExistsError(
                f"{who}: {out} holds a series of another kind; log into another folder"
            )
        return found  # a restarted run logs after what is there
    if place.exists() and place.entries():
        raise OutputExistsError(f"{who}: {out} is not empty; give a new folder")
    if isinstance(place, LocalPlace):
        place.path.mkdir(parents=True, exist_ok=True)
    described: dict[str, Any] = {"kind": "series", "key": key, "values": None, "source": "training"}
    if key == "batch":
        described["epochs"] = {}  # each logged batch's epoch, by batch
    place.write_json(SERIES_FILE, described)
    return described


def fresh_key(out: str, key: str, value: int, who: str, again: str) -> str:
    """The folder `OUT/KEY=VALUE` of a value a logger is about to log, made ready: a complete one
    (its manifest there) is refused ("restart with AGAIN"); an incomplete one, left by a run
    killed while logging it, is removed, so that a key holds one model's gates or none."""
    name = key_folder(key, value)
    place = place_of(out)
    if name in place.entries():
        if "manifest.json" in place_of(f"{out}/{name}").entries():
            raise OutputExistsError(
                f"{who}: {key} {value} is already logged in {out}; restart with {again}, or log into a new folder"
            )
        place.remove(name)
    return f"{out}/{name}"
