"""What a recording's writer opens: where it writes, and what `--out` holds before it does.

`for_writing(out, overwrite)` gives the writer's `Target`, the one place that tells a local
folder from object storage: a local folder is settled first (what a killed `--overwrite`
left is finished or undone: `recorders.write.swap`), its links refused, and with
`--overwrite` recorded into a hidden sibling while the recording it replaces stays locked;
in object storage the prefix itself, written at its final keys (there is no swap, so
`--overwrite` is refused). Then, before anything is written:

    previous_progress   what `--out` holds, refused where a writer must not write into it (a
                        file, what gatetrace did not write, another recording, this shard's
                        recording without --resume); this shard's progress when resuming
    Target.make_ready   a local folder's progress folder, this shard's lock, a fresh staging
                        folder (object storage has no folders and no locks)
    remove_unfinished_parts, check_parts
                        a resumed shard's part files kept to what its progress file counts
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recorders.errors import OutputExistsError, RecordingError, listing, option
from recorders.write.files import (
    check_out,
    refuse_inputs_inside,
    refuse_inside_written,
    refuse_links,
    refuse_non_folder,
    refuse_out_inside_inputs,
    temp_sibling,
)
from recorders.write.layout import UNREADABLE, unreadable
from recorders.write.place import LocalPlace, Place, place_of
from recorders.write.progress import PROGRESS_DIR, Intervals, Shard, read_progress
from recorders.write.series import SERIES_FILE
from recorders.write.swap import (
    hold_every_lock,
    hold_lock,
    mark_swapped,
    not_a_recording,
    ours,
    remove_partials,
    settle_swap,
)

__all__ = [
    "Target",
    "for_writing",
    "previous_progress",
    "remove_unfinished_parts",
    "check_parts",
    "series_difference",
]


@dataclass
class Target:
    """Where a writer writes: `place`, the folder written into (`out`: a hidden sibling of
    the recording when replacing one), and the recording as the user named it (`shown`).
    Locally a Path each, in object storage the place itself (only messages name them)."""

    place: Place
    shown: Any
    out: Any
    replacing: bool = False
    # the locks of the recording replaced, and the lock files taken to hold them
    replaced_locks: list[int] = field(default_factory=list)
    created_locks: list[str] = field(default_factory=list)
    # written by a job's tasks (--workers, --engine), which take no --overwrite
    job: bool = False

    @property
    def start_again(self) -> str:
        """How to record the folder afresh, in words that work for this kind of place."""
        if self.place.local:
            series = Path(self.shown).parent  # a series' recordings are recorded again with it
            if (series / SERIES_FILE).is_file():
                return f"remove the series {series} to record it again"
            if self.job:
                return f"remove {self.shown} to record it again"
            return f"pass {option('overwrite')} to record it again"
        return "remove it first (aws s3 rm --recursive, gsutil rm -r) to record it again"

    def staging(self, shard: Shard) -> str | None:
        """The folder in the root a shard's files are written into before they are renamed
        into place (object storage: none, objects are written at their final keys)."""
        return f".staging-{shard.tag}" if self.place.local else None

    def make_ready(self, shard: Shard, mine: Mapping[str, Any] | None) -> int | None:
        """A local folder's progress folder, this shard's lock (returned: a file descriptor)
        and an empty staging folder; object storage has none of them (None)."""
        if not isinstance(self.place, LocalPlace):
            return None
        out, staging = self.out, self.staging(shard)
        assert staging is not None  # (a local folder's)
        try:
            # the root, and the folders above it, by path; below it, by handle
            out.mkdir(parents=True, exist_ok=True)
            folder = self.place.folder
            folder.mkdir(PROGRESS_DIR)
            if self.replacing:  # the new recording beside the old: marked as --overwrite's own
                mark_swapped(out, self.shown)
            which = "" if shard.count == 1 else f" shard {shard} of"
            lock = hold_lock(folder, f"{PROGRESS_DIR}/{shard.tag}.lock", out, which)
            remove_partials(folder, shard)  # what a killed run of this shard half-wrote
            folder.remove(staging)
            folder.mkdir(staging)
            return lock
        except OSError as err:
            reason = err.strerror or str(err)
            if mine is None:
                raise RecordingError(f"cannot create {out}: {reason}") from err
            kept = Intervals(mine["complete"]).total()
            raise RecordingError(
                f"cannot write {out}: {reason}; nothing was changed and the {kept:,} examples recorded before are kept: "
                "fix the cause and rerun with --resume"
            ) from err

    def remove_if_empty(self) -> None:
        """Remove the folder a writer created, if nothing is left in it (object storage has
        no folders to remove)."""
        if self.place.local and not self.place.entries():
            self.place.close()
            self.out.rmdir()


def for_writing(out: Any, overwrite: bool) -> Target:
    """The target for `--out` (see the module docstring)."""
    place = place_of(out)
    if not isinstance(place, LocalPlace):
        if overwrite:
            raise RecordingError(
                f"--overwrite with --out {out}: object storage cannot swap a new recording in at once; remove the old "
                "one first (aws s3 rm --recursive, gsutil rm -r), then record"
            )
        return Target(place, place, place)
    # where the recording is, or will be once published
    target = place.path.resolve()
    settle_swap(target)
    refuse_links(target)
    refuse_non_folder(target)
    # --overwrite records into a hidden sibling and swaps it in at the end (the writer's
    # `close`), so that the recording it replaces is kept until the new one is complete...
    if not (overwrite and target.is_dir() and any(target.iterdir())):
        return Target(LocalPlace(target), target, target)
    # ...and holds the locks of the recording it replaces until then: no process may still
    # be writing it, nor start to.
    held, created = hold_every_lock(target)
    sibling = temp_sibling(target, "overwrite")
    return Target(LocalPlace(sibling), target, sibling, True, held, created)


def previous_progress(
    target: Target,
    shard: Shard,
    description: Mapping[str, Any],
    examples: tuple[int, int] | None,
    overwrite: bool,
    resume: bool,
    reads: Iterable[Any],
) -> dict[str, Any] | None:
    """Check what `--out` holds; return this shard's previous progress when resuming (see
    the module docstring). `reads` are the model and input files, which --overwrite may not
    delete."""
    out, reads = target.shown, list(reads)
    refuse_out_inside_inputs(str(out), reads)  # (object storage: its URI, passed over)
    refuse_inside_written(str(out))
    if overwrite:
        check_out(out, overwrite, ours=not_a_recording)
        refuse_inputs_inside(out, reads)
        out = target.out  # a new, empty sibling
    place = target.place
    found = read_progress(place)
    if not found and any(not ours(name) for name in place.entries()):
        foreign = not_a_recording(out) if place.local else place.entries()
        if foreign:
            raise OutputExistsError(
                f"{option('out', out)} holds what gatetrace did not write ({listing(foreign, 5)}); choose another path"
            )
        raise OutputExistsError(
            f"{option('out', out)} holds parts of a recording but no progress file; choose another path, or {target.start_again}"
        )
    for progress in found.values():
        why = _difference(progress, shard, description, examples)
        if why:
            raise OutputExistsError(
                f"{option('out', out)} holds another recording ({why}); choose another folder, or {target.start_again}"
            )
    mine = found.get(shard.tag)
    if mine is not None and not resume:
        which = "" if shard.count == 1 else f" of shard {shard}"
        state = "finished" if mine.get("finished") else "partial"
        raise OutputExistsError(
            f"{option('out', out)} already holds a {state} recording{which}; pass {option('resume')} to continue it, or {target.start_again}"
        )
    return mine


def _difference(
    progress: Mapping[str, Any],
    shard: Shard,
    description: Mapping[str, Any],
    examples: tuple[int, int] | None,
) -> str | None:
    """Why a progress file found in `out` belongs to another recording (None if it does not)."""
    unit = (progress.get("shard", [0, 1])[2:] or [1])[0]
    if unit > 1 and shard.unit > 1 and unit != shard.unit:  # both a job's tasks (--workers)
        return (
            f"it was recorded in tasks of batches of {unit}, this run gives --batch-size {shard.unit}: give "
            f"--batch-size {unit}"
        )
    if progress.get("shard", [0, 1])[1] != shard.count:
        return f"it is split into {progress['shard'][1]} shards, not {shard.count}"
    unit = (progress["shard"][2:] or [1])[0]
    if unit != shard.unit:
        return f"its shards are cut at multiples of {unit} examples, not {shard.unit} (--workers cuts them at --batch-size)"
    why = _description_difference(
        _comparable(progress.get("description", {})), _comparable(description)
    )
    if why:
        return why
    if progress.get("total") != (None if examples is None else list(examples)):
        return f"its examples are {progress.get('total')}, not {examples}"
    return None


def series_difference(recorded: Mapping[str, Any], description: Mapping[str, Any]) -> str | None:
    """Why a recording described by `description` may not join a series beside the recording
    of another checkpoint whose manifest is `recorded` (None if it may): what a resume checks
    (`previous_progress`), but the model's path and weights, which change along a series,
    and its cells, whose shapes the series checks."""

    def shared(d: Mapping[str, Any]) -> dict[str, Any]:
        d = {k: v for k, v in _comparable(d).items() if k not in _PER_CHECKPOINT}
        if isinstance(d.get("digests"), dict):
            d["digests"] = {k: v for k, v in d["digests"].items() if k != "weights"}
        return d

    return _description_difference(shared(recorded), shared(description))


# what a series' recordings do not share: the cells' names in the graph and steps as recorded
# (the series compares their shapes), and what a manifest adds to its description
_PER_CHECKPOINT = ("cells", "kind", "examples", "rows", "shards")
# the selection's flags, as a description names them
_FLAGS = {k: f"--{k}" for k in ("cells", "gates", "steps", "values", "examples")}


def _selection_difference(theirs: Any, mine: Any) -> str | None:
    """The flag of `--cells`, `--gates`, `--steps`, `--values` or `--examples` whose value
    differs between two descriptions' `selection`, in a sentence (None if none does)."""
    if not (isinstance(theirs, dict) and isinstance(mine, dict)):
        return None

    def shown(key: str, value: Any) -> str:
        if not value or value == [None, None]:
            return f"no {_FLAGS[key]}" if key != "values" else "the default --values"
        if key in ("steps", "examples"):
            text = ":".join("" if v is None else str(v) for v in value)
        else:
            text = ",".join(map(str, value))
        return f"{_FLAGS[key]} {text}"

    for key in _FLAGS:
        if theirs.get(key) != mine.get(key):
            was = shown(key, theirs.get(key))
            now = shown(key, mine.get(key))
            fix = f"leave {_FLAGS[key]} out" if was.startswith("no ") else f"give {was}"
            return f"it was recorded with {was}, this run gives {now}: {fix}"
    return None


def _description_difference(theirs: dict[str, Any], mine: dict[str, Any]) -> str | None:
    """What differs between two recordings' descriptions, in words (None if nothing does)."""
    selection = _selection_difference(theirs.get("selection"), mine.get("selection"))
    if selection:
        return selection
    # A progress file of an older gatetrace keeps no digests of the lengths, the scalar feeds
    # and the weights: nothing it holds tells whether they were the same, so it is refused.
    if "digests" in mine and "digests" not in theirs:
        return (
            "its progress file, of an earlier gatetrace, keeps no digests of the sequence lengths, scalar feeds "
            "and weights it was recorded with: this run cannot be checked against them"
        )
    # what an older gatetrace did not write: the runtime of a .tflite file
    if isinstance(theirs.get("source"), dict) and isinstance(mine.get("source"), dict):
        if "runtime" not in theirs["source"]:
            mine["source"] = {k: v for k, v in mine["source"].items() if k != "runtime"}
    # what was held names the held tensors among the cells': said first, as it was given
    if theirs.get("held") != mine.get("held"):
        said = [
            " ".join(f"--hold '{h}'" for h in d.get("held") or ()) or "no --hold"
            for d in (theirs, mine)
        ]
        return f"it was recorded with {said[0]}, this run gives {said[1]}: give the holds it was recorded with"
    if theirs.get("outputs") != mine.get("outputs"):
        named = [
            "--outputs " + ",".join(o.get("name", "?") for o in d["outputs"])
            if d.get("outputs")
            else "no --outputs"
            for d in (theirs, mine)
        ]
        return f"it was recorded with {named[0]}, this run gives {named[1]}: give the outputs it was recorded with"
    if theirs.get("rounding") != mine.get("rounding"):  # `--round-bits`: what the values hold
        said = [
            f"--round-bits {d['rounding'].get('mantissa_bits')}"
            if isinstance(d.get("rounding"), dict)
            else "no --round-bits"
            for d in (theirs, mine)
        ]
        fix = "leave --round-bits out" if said[0] == "no --round-bits" else f"give {said[0]}"
        return f"it was recorded with {said[0]}, this run gives {said[1]}: {fix}"
    for key in sorted(set(theirs) | set(mine)):
        if theirs.get(key) != mine.get(key):
            if (
                key == "digests"
                and isinstance(theirs[key], dict)
                and isinstance(mine.get(key), dict)
            ):
                return _other_digests(theirs[key], mine[key])
            if (
                key == "inputs"
                and isinstance(theirs[key], dict)
                and isinstance(mine.get(key), dict)
            ):
                return _other_inputs(theirs[key], mine[key])
            if key == "summary":
                if theirs.get(key) is None:
                    return "it was recorded in full, not as a --summary: leave --summary out"
                if mine.get(key) is None:
                    return "it was recorded as a --summary: add --summary"
                return "it was summarised with other --bins or --saturation: give those it was recorded with"
            return f"different {key}"
    return None


def _other_inputs(theirs: Mapping[str, Any], mine: Mapping[str, Any]) -> str:
    """Which feed of sequences differs between a recording's `inputs` and this run's
    (`tracer.inputs.digest.input_digests`)."""
    for name in sorted(set(theirs) | set(mine)):
        if theirs.get(name) != mine.get(name):
            return f"different inputs: it was fed other sequences as {name}: feed {name} the file it was recorded with"
    return "different inputs"


def _other_digests(theirs: Mapping[str, Any], mine: Mapping[str, Any]) -> str:
    """What differs between a recording's `digests` and this run's (`tracer.inputs.digest`),
    and how to run with what it was recorded with."""
    fed, feeding = theirs.get("feeds") or {}, mine.get("feeds") or {}
    for name in sorted(set(fed) | set(feeding)):
        if name not in feeding:
            return (
                f"it was fed {name}, which this run does not feed: feed {name} as it was recorded"
            )
        if name not in fed:
            return f"it was not fed {name}, which this run feeds: leave {name} out"
        if fed[name] != feeding[name]:
            return f"it was fed another value of {name}: feed {name} the value it was recorded with"
    lengths = theirs.get("lengths"), mine.get("lengths")
    if lengths[0] != lengths[1]:
        if lengths[1] is None:
            return "it was recorded with sequence lengths, this run has none: give the lengths it was recorded with"
        if lengths[0] is None:
            return "it was recorded without sequence lengths: leave them out"
        return "it was recorded with other sequence lengths: give the lengths it was recorded with"
    if theirs.get("weights") != mine.get("weights"):
        return (
            "its cells' weights differ from this model's: the model changed since it was recorded"
        )
    return "different digests"


def _own_parts(place: Place, examples: tuple[int, int] | None) -> Iterator[tuple[str, str, int]]:
    """(table, path in the recording, first example) of every part file in a shard's range
    of `examples` (None: all)."""
    lo, hi = examples if examples is not None else (0, float("inf"))
    for table in ("gates", "states", "outputs"):
        for rel in place.files(table):
            start = _part_start(rel)
            if start is not None and lo <= start < hi:
                yield table, rel, start


def remove_unfinished_parts(
    place: Place, examples: tuple[int, int] | None, complete: Intervals
) -> None:
    """Delete the part files of a shard's `examples` that no committed batch wrote."""
    for _, rel, start in _own_parts(place, examples):
        if start not in complete:
            place.remove(rel)


def check_parts(
    target: Target, examples: tuple[int, int] | None, progress: Mapping[str, Any]
) -> None:
    """Refuse to resume when the part files of the complete examples do not hold the rows
    the progress file counts (files removed, replaced or damaged since)."""
    complete = Intervals(progress["complete"])
    found = {"gates": 0, "states": 0, "outputs": 0}
    for table, rel, start in _own_parts(target.place, examples):
        if start in complete:
            try:
                found[table] += target.place.parquet_metadata(rel).num_rows
            except UNREADABLE as err:
                raise RecordingError(
                    f"cannot resume into {target.out}: {target.place}/{rel} is not readable Parquet ({unreadable(err)}); "
                    f"{target.start_again}"
                ) from None
    for table, rows in found.items():
        if rows != progress["rows"].get(table, 0):
            raise RecordingError(
                f"cannot resume into {target.out}: its progress file counts {progress['rows'][table]:,} {table[:-1]} rows as complete "
                f"but their part files hold {rows:,}: files were removed or changed since; {target.start_again}"
            )


def _part_start(path: str) -> int | None:
    """The first example of a part file, from its name `part-<first example>.parquet`."""
    name = path.rsplit("/", 1)[-1]
    if not (name.startswith("part-") and name.endswith(".parquet")):
        return None
    try:
        return int(name[len("part-") : -len(".parquet")])
    except ValueError:
        return None


def _comparable(description: Mapping[str, Any]) -> dict[str, Any]:
    """A description without what may differ between shards of one recording (the model's path)."""
    d = dict(description)
    if isinstance(d.get("source"), dict):
        d["source"] = {k: v for k, v in d["source"].items() if k != "path"}
    return d
