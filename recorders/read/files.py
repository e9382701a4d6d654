"""The files of a recording folder, listed once and each checked before anything is read from it.

A recording may come from anyone, so the folder is untrusted input. Its manifest and
progress files must pass `recorders.write.schema` before anything is taken from them, and agree
with each other and with the inputs they say were fed (no example complete beyond the sequences
of the feeds); only
the regular files inside the folder are opened (`recorders.write.folder`: a link, a FIFO or a
device is refused in one line, never followed or opened), and of those only the part
files of the cells and gates (or states) the description lists. What a part file says is
checked against the description before anything is allocated from it: its columns and
their types; each row group's example and step statistics (present, within the cell's
steps, and, in a complete recording, within its examples); its row count (at most one
row per example, step and unit of those ranges; each row group's that of its key columns, the
row groups' together the file's); the units of the rows read (below the
cell's units). Every array built from a file (a row group, a selection, a dense array)
must fit `memory` bytes first, and so must each row group, which is read whole. Anything off
is a RecordingError naming the file (a row group or a selection too large for `memory`, a
`MemoryBudgetError`, which is a SelectionError): never a traceback or a runaway allocation.

Each shard's merged statistics file (`recorders.write.merged`) stands for the footers of the
part files it covers, where it holds (`CheckedFiles.covering`): what the overview needs is read in
one request a shard, and the footers of the files it does not cover.

A part file's name says its first example (`part-<first example>.parquet`, `merged.part_file`),
and it holds no example before it nor any from the next file's of its folder on: the writer
writes each batch's own examples into the files named for it. So the files a selection of
examples reads are found by their names alone (`CheckedFiles.overlapping`): one sequence of a
recording of thousands of part files opens the few that hold it, not every footer. Each footer
read is checked against its name (a row group of examples outside the range its name and the next
file's leave it is a RecordingError naming the file, as any other edited file is); a file of any
other name may hold any examples, and is read for every selection.

`CheckedFiles` does this for a `recorders.Recording`, which makes one when it has opened the
folder and read its description.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from recorders.errors import MemoryBudgetError, RecordingError
from recorders.write.columns import GATE_COLUMNS
from recorders.write.folder import Folder, ReadOnlyFiles
from recorders.write.layout import (
    METADATA_KEY,
    PROGRESS_DIR,
    ROOT_ENTRIES,
    STATISTICS_DIR,
    SUMMARY_DIR,
    TOTALS_DIR,
    UNREADABLE,
    VERIFY_CHECKSUMS,
    partition_dir,
    unreadable,
)
from recorders.write.merged import SHARD_FILE, Entry, decode, part_start
from recorders.write.progress import Intervals, Shard, read_progress
from recorders.write.rounding import holds_integers
from recorders.write.schema import MAX_JSON_BYTES, MAX_UNITS, description_problem, parse_json

__all__ = [
    "CheckedFiles",
    "Covered",
    "refuse",
    "TABLES",
    "KEYS",
    "DAMAGED",
    "READ",
    "statistics",
    "key_ranges",
    "sequences_fed",
]

TABLES = {"gates": "gate", "states": "state"}  # table: its label column
KEYS = {"example": pa.int64(), "step": pa.int32(), "unit": pa.int32()}
# float32, the value columns each table may hold
_VALUES = {"gates": GATE_COLUMNS, "states": ("value",), "outputs": ("value",)}
DAMAGED = "it was edited or damaged; ask for the recording again, or record the model again"
# a merged statistics file that does not hold (`recorders.write.merged`)
MERGED_DAMAGED = (
    "it was edited or damaged; remove it (the part files' footers are read instead), ask for "
    "the recording again, or record the model again"
)
# what a reader opens in the root
READ = ROOT_ENTRIES
_NO_END = 2**63 - 1  # the examples the last part file of a folder may hold: from its name on


@dataclass(frozen=True)
class Covered:
    """What a shard's merged statistics file (`rel`, in the recording) says of the part files
    `files` of one (cell, gate) or (cell, state): `entry` (`recorders.write.merged.Entry`)."""

    rel: str
    files: frozenset[str]
    entry: Entry


def default_memory() -> int:
    """The default memory budget of a reader: half of the memory available now (4 GiB where
    the system does not say)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except (OSError, ValueError, IndexError):
        pass
    return 4 * 2**30


def refuse(path: Path, folder: Folder, rel: str) -> None:
    """RecordingError for an entry of the recording `path` that is not a regular file or a folder."""
    kind = folder.kind(rel)
    advice = (
        "if you trust what it points to, copy the recording with its links resolved (cp -rL) and open the copy"
        if kind.startswith("a symbolic link")
        else "remove it"
    )
    raise RecordingError(
        f"{path}/{rel} is {kind}: gatetrace reads only the regular files inside a recording "
        f"(it writes nothing else) and read nothing from it; {advice}"
    )


# what the values are, which the manifest copies from the description each shard's progress
# file keeps: values held inside the model, where held means came from, their rounding, the
# model's outputs recorded (each one's dtype says whether it was rounded and what it holds)
_SAID_ALIKE = ("held", "means_from", "rounding", "outputs")


def _check_agrees(
    path: Path, manifest: dict[str, Any], progress: dict[str, dict[str, Any]]
) -> None:
    """RecordingError unless the manifest says what each progress file's description says of
    what its values are (`_SAID_ALIKE`): a manifest edited to drop `held` is not believed."""
    for tag, p in sorted(progress.items()):
        if not p["description"]:
            continue
        for key in _SAID_ALIKE:
            mine, theirs = manifest.get(key), p["description"].get(key)
            if mine != theirs:
                key, mine, theirs = _named_apart(key, mine, theirs)
                where = (
                    f"{tag}'s footer, written before its first batch,"
                    if tag.endswith(".parquet")
                    else f"{PROGRESS_DIR}/{tag}.json, written as its batches were,"
                )
                raise RecordingError(
                    f"{path}/manifest.json says {key} is {_said(mine)}, but {where} "
                    f"says {_said(theirs)}: {DAMAGED}"
                )


def _said(value: Any) -> str:
    return "absent" if value is None else repr(value)[:200]


def _named_apart(key: str, mine: Any, theirs: Any) -> tuple[str, Any, Any]:
    """Where two lists of named entries (`outputs`) differ in one field of one entry of the
    same name, that field, named ("output probs's dtype"), and its two values; else as given."""
    if not (isinstance(mine, list) and isinstance(theirs, list) and len(mine) == len(theirs)):
        return key, mine, theirs
    for a, b in zip(mine, theirs, strict=True):
        if a == b:
            continue
        if not (isinstance(a, dict) and isinstance(b, dict) and a.get("name") == b.get("name")):
            break
        field = next(f for f in sorted({*a, *b}, key=str) if a.get(f) != b.get(f))
        return f"{key.rstrip('s')} {a.get('name')}'s {field}", a.get(field), b.get(field)
    return key, mine, theirs


class CheckedFiles:
    """A recording's files, listed once and checked before they are read (see the module
    docstring): those of the folder `folder` opened for the recording `path`, whose
    `description` (its `manifest`, or else its `progress` files') lists its cells,
    `examples` the examples complete, and which is `complete` (has a manifest) or not. No
    array larger than `memory` bytes is made from them. `open_recording` makes one."""

    def __init__(
        self,
        path: Path,
        folder: Folder,
        memory: int,
        progress: dict[str, dict[str, Any]],
        manifest: dict[str, Any] | None,
    ):
        self.path, self.folder, self.memory = path, folder, memory
        self.progress, self.manifest = progress, manifest
        self.complete = manifest is not None
        description = manifest or next((p["description"] for p in progress.values()), None)
        if description is None:
            raise RecordingError(
                f"{path} has neither manifest.json nor a progress file; it was not written by gatetrace"
            )
        self.description: dict[str, Any] = description
        self.cells: dict[str, dict[str, Any]] = {c["name"]: c for c in description["cells"]}
        self.examples = Intervals()
        for p in progress.values():
            for start, stop in p["complete"]:
                self.examples.add(start, stop)
        done = self.examples.total()
        if manifest is not None and progress and manifest.get("examples", done) != done:
            raise RecordingError(
                f"{path}/manifest.json counts {manifest['examples']:,} examples but the progress files "
                f"{done:,}: {DAMAGED}"
            )
        fed = sequences_fed(description)
        last = max((stop for p in progress.values() for _, stop in p["complete"]), default=0)
        if fed is not None and last > fed:
            tag = next(t for t, p in progress.items() if any(b > fed for _, b in p["complete"]))
            named = "manifest.json" if manifest is not None else f"{PROGRESS_DIR}/{tag}.json"
            raise RecordingError(
                f"{path}/{named} says examples up to {last - 1:,} are complete, but the inputs it "
                f"says were fed (its feeds) hold {fed:,} sequences: {DAMAGED}"
            )
        self.fs = pafs.PyFileSystem(ReadOnlyFiles(folder))  # what pyarrow reads them through
        if manifest is not None:  # what its values are, as written while they were
            said = progress or {"weights.parquet": {"description": self._weights_said()}}
            _check_agrees(path, manifest, said)
        self._listed: dict[str, dict[tuple[str, str], list[str]]] = {}
        self._metadata: dict[str, Any] = {}  # part file: its footer, once checked
        # part file: the [low, high) of the examples its name leaves it (`overlapping`)
        self._spans: dict[str, tuple[int, int]] = {}
        self._merged: list[tuple[str, dict]] | None = None  # each shard's merged file, read
        self._merging = threading.Lock()  # (gates are summarised on threads: read once)

    def _weights_said(self) -> dict[str, Any]:
        """The description weights.parquet's footer keeps (written before the first batch),
        or {} where it keeps none."""
        if "weights.parquet" not in self.folder.entries():
            return {}
        try:
            with self.fs.open_input_file("weights.parquet") as f:
                kept = (pq.read_metadata(f).metadata or {}).get(METADATA_KEY)
        except UNREADABLE as err:
            raise RecordingError(
                f"{self.path}/weights.parquet is not readable Parquet ({unreadable(err)}): {DAMAGED}"
            ) from None
        said = parse_json(kept, f"{self.path}/weights.parquet") if kept else {}
        return said if isinstance(said, dict) else {}

    def weights_rows(self) -> int:
        if "weights.parquet" not in self.folder.entries():
            return 0
        try:
            with self.fs.open_input_file("weights.parquet") as f:
                metadata = pq.read_metadata(f)
            why = chunks_problem(metadata)
        except UNREADABLE as err:
            raise RecordingError(
                f"{self.path}/weights.parquet is not readable Parquet ({unreadable(err)}): {DAMAGED}"
            ) from None
        if why:
            raise RecordingError(
                f"{self.path}/weights.parquet is not a table gatetrace wrote ({why}): {DAMAGED}"
            )
        return int(metadata.num_rows)

    def weights(self, columns: Sequence[str] | None = None) -> pa.Table:
        """`columns` of weights.parquet (None: all), its pages' checksums verified, within the
        memory budget: RecordingError naming it where it cannot be read."""
        rows = self.weights_rows()
        self.allot((rows,), 32, "reading weights.parquet")  # the table, and a cell of it
        try:
            with self.fs.open_input_file("weights.parquet") as f:
                return pq.read_table(f, columns=columns, **VERIFY_CHECKSUMS)
        except UNREADABLE as err:
            raise RecordingError(
                f"{self.path}/weights.parquet cannot be read ({unreadable(err)}): {DAMAGED}"
            ) from None

    @property
    def outputs(self) -> dict[str, dict[str, Any]]:
        """The model's outputs the description lists (`--outputs`), by name."""
        return {o["name"]: o for o in self.description.get("outputs", [])}

    def files(self, table: str) -> dict[tuple[str, str], list[str]]:
        """(cell, gate or state): its part files, for the cells (and the labels) of the
        description, listed once (in `outputs`, ("", output name)); RecordingError if anything
        below the table is not a regular file or a folder."""
        if table not in self._listed:
            files, odd = self.folder.tree(table)
            if odd:
                refuse(self.path, self.folder, odd[0])
            if table == "outputs":
                named = {f"outputs/{partition_dir(output=n)}": n for n in self.outputs}
                outputs: dict[tuple[str, str], list[str]] = {}
                for rel, _ in files:
                    folder, _, name = rel.rpartition("/")
                    if folder in named and name.startswith("part-") and name.endswith(".parquet"):
                        outputs.setdefault(("", named[folder]), []).append(rel)
                self._listed[table] = outputs
                self._span(outputs)
                return outputs
            kind = TABLES[table]
            cells = {f"{table}/{partition_dir(cell=c)}": c for c in self.cells}
            found: dict[tuple[str, str], list[str]] = {}
            folders: dict[str, tuple[str, str] | None] = {}  # each folder's (cell, label), once
            for rel, _ in files:
                folder, _, name = rel.rpartition("/")
                if not (name.startswith("part-") and name.endswith(".parquet")):
                    continue
                if folder in folders:
                    key = folders[folder]
                    if key is not None:
                        found[key].append(rel)
                    continue
                folders[folder] = None
                cell_folder, _, label_folder = folder.rpartition("/")
                cell = cells.get(cell_folder)
                if cell is None or not label_folder.startswith(f"{kind}="):
                    continue
                label = unquote(label_folder[len(kind) + 1 :])
                listed = self.cells[cell].get(kind + "s")
                if (
                    listed is None or label in listed
                ) and folder == f"{table}/{partition_dir(cell=cell, **{kind: label})}":
                    folders[folder] = (cell, label)
                    found.setdefault((cell, label), []).append(rel)
            self._listed[table] = found
            self._span(found)
        return self._listed[table]

    def _span(self, listed: dict[tuple[str, str], list[str]]) -> None:
        """The examples each part file of `listed` may hold, by the names of its folder's files
        (see the module docstring): from its first example to the next file's."""
        for files in listed.values():
            starts = sorted((s, rel) for rel in files if (s := part_start(rel)) is not None)
            ends = [s for s, _ in starts[1:]] + [_NO_END]
            for (s, rel), end in zip(starts, ends, strict=True):
                self._spans[rel] = (s, end)

    def span(self, rel: str) -> tuple[int, int] | None:
        """The [low, high) of the examples the listed part file `rel` may hold, by its name and
        the next file's (None: a file of another name, which may hold any)."""
        return self._spans.get(rel)

    def overlapping(self, rel: str, examples: tuple[int | None, int | None] | None) -> bool:
        """Whether the listed part file `rel` may hold rows of `examples` ([start, stop), None:
        open), by its name (see the module docstring): a file of another name may."""
        span = self._spans.get(rel)
        if examples is None or span is None:
            return True
        lo, hi = examples
        return (lo is None or span[1] > lo) and (hi is None or span[0] < hi)

    def merged_files(self) -> list[tuple[str, dict]]:
        """(path in the recording, entries) of each shard's merged statistics file
        (`recorders.write.merged`), read once, its form checked: RecordingError naming one that
        is not as gatetrace writes it. One larger than a quarter of the memory budget is not
        read (its parsed form takes up to some four times its size): the footers are."""
        with self._merging:
            if self._merged is None:
                self._merged = self._read_merged()
        return self._merged

    def _read_merged(self) -> list[tuple[str, dict]]:
        """`merged_files`, read."""
        found, odd = self.folder.tree(STATISTICS_DIR)
        if odd:
            refuse(self.path, self.folder, odd[0])
        limit = min(MAX_JSON_BYTES, self.memory // 4)
        out = []
        for rel, size in found:
            folder, _, name = rel.rpartition("/")
            shard = SHARD_FILE.fullmatch(name)
            if folder != STATISTICS_DIR or shard is None or size > limit:
                continue  # (a write cut short leaves a hidden partial file)
            k, n = int(shard.group(1)), int(shard.group(2))
            if k >= n:
                continue  # no shard's name
            try:
                entries = decode(self.folder.read_bytes(rel, limit), Shard(k, n))
            except OSError as err:
                raise RecordingError(
                    f"{self.path}/{rel} cannot be read ({err.strerror or err}): {MERGED_DAMAGED}"
                ) from None
            except ValueError as err:
                raise RecordingError(
                    f"{self.path}/{rel} is not a statistics file gatetrace wrote ({err}): {MERGED_DAMAGED}"
                ) from None
            out.append((rel, entries))
        return out

    def covering(self, table: str, cell: str, label: str) -> list[Covered]:
        """What the shards' merged statistics files say of the part files of (cell, label) of
        `table` that they cover (`recorders.write.merged`): each file's covered files all listed
        (else, where one of them is complete, a RecordingError naming it: a file it covers is
        gone; where none is, it was written after the folder was listed, and the footers are
        read instead), no part file covered by two."""
        listed = set(self.files(table).get((cell, label), []))
        out: list[Covered] = []
        seen: dict[str, str] = {}
        for rel, entries in self.merged_files():
            entry = entries.get((table, cell, label))
            if entry is None:
                continue
            paths = entry.paths()
            gone = [(s, p) for s, p in zip(entry.files, paths, strict=True) if p not in listed]
            complete = [p for s, p in gone if s in self.examples]
            if complete:
                raise RecordingError(
                    f"{self.path}/{rel} is not a statistics file gatetrace wrote (it counts "
                    f"{self.path}/{complete[0]}, which is not there): {MERGED_DAMAGED}"
                )
            if gone:
                continue  # written after the folder was listed: the footers are read
            twice = next((p for p in paths if p in seen), None)
            if twice is not None:
                raise RecordingError(
                    f"{self.path}/{rel} is not a statistics file gatetrace wrote (it counts "
                    f"{self.path}/{twice}, which {self.path}/{seen[twice]} counts too): {MERGED_DAMAGED}"
                )
            seen.update(dict.fromkeys(paths, rel))
            out.append(Covered(rel, frozenset(paths), entry))
        return out

    def rows(self, table: str) -> int:
        """The rows of every part file of `table`: from the merged statistics files where they
        cover the files (`covering`), else from the footers."""
        total = 0
        for (cell, label), files in self.files(table).items():
            covered: set[str] = set()
            for c in self.covering(table, cell, label):
                total += c.entry.rows
                covered |= c.files
            total += sum(
                self.footer(table, cell, rel).num_rows for rel in files if rel not in covered
            )
        return total

    def column(self, table: str, cell: str, rel: str, column: str) -> np.ndarray:
        """One column of a checked part file, whole."""
        file = self.parquet(table, cell, rel)
        return self.read(
            rel, lambda: file.read(columns=[column], use_threads=False).column(0).to_numpy()
        )

    def footer(self, table: str, cell: str, rel: str) -> Any:
        """The checked footer (`pyarrow.parquet.FileMetaData`) of a part file of `cell`."""
        if rel not in self._metadata:
            try:
                with self.fs.open_input_file(rel) as f:
                    metadata = pq.read_metadata(f)
                why = self._part_problem(table, cell, metadata, self._spans.get(rel), rel)
            except UNREADABLE as err:
                raise RecordingError(
                    f"{self.path}/{rel} is not readable Parquet ({unreadable(err)}): {DAMAGED}"
                ) from None
            if why:
                raise RecordingError(
                    f"{self.path}/{rel} is not a part file gatetrace wrote ({why}): {DAMAGED}"
                )
            # a row group is read whole, whatever is selected of it
            row_bytes = 16 + 4 * (metadata.num_columns - 3)  # the keys, then float32 values
            for k in range(metadata.num_row_groups):
                self.allot(
                    (metadata.row_group(k).num_rows, row_bytes),
                    1,
                    f"row group {k} of {self.path}/{rel} ({metadata.row_group(k).num_rows:,} rows)",
                    "a row group is read whole: open the recording with Recording(path, memory=...) for more",
                )
            self._metadata[rel] = metadata
        return self._metadata[rel]

    def parquet(self, table: str, cell: str, rel: str) -> pq.ParquetFile:
        """A checked part file, open for reading, each page's checksum verified as it is read."""
        metadata = self.footer(table, cell, rel)
        return pq.ParquetFile(self.fs.open_input_file(rel), metadata=metadata, **VERIFY_CHECKSUMS)

    def pages(self, table: str, cell: str, rel: str) -> None:
        """Read every page of a checked part file, a row group at a time (each fits the memory
        budget: `footer`), verifying its checksum: RecordingError naming the file where one
        cannot be read."""
        metadata = self.footer(table, cell, rel)
        whole = table == "outputs" and holds_integers(self.outputs.get(cell, {}))

        def read() -> None:
            with self.fs.open_input_file(rel) as f:
                file = pq.ParquetFile(f, metadata=metadata, **VERIFY_CHECKSUMS)
                for k in range(file.num_row_groups):
                    group = file.read_row_group(k, use_threads=False)
                    if whole:
                        self.check_whole(cell, rel, group.column("value").to_numpy())

        self.read(rel, read)

    def check_whole(self, name: str, rel: str, values: np.ndarray) -> None:
        """RecordingError naming the part file `rel` of the output `name` where its description
        says it holds integers (or booleans: 0 or 1) and one of `values`, read from it, is not."""
        dtype = str(self.outputs[name].get("dtype"))
        if not holds_integers(self.outputs[name]):
            return
        if dtype == "bool":
            wrong, kind = ~np.isin(values, (0, 1)), "0 or 1"
        else:
            with np.errstate(invalid="ignore"):
                wrong, kind = ~(np.isfinite(values) & (values == np.round(values))), "whole numbers"
        if wrong.any():
            raise RecordingError(
                f"{self.path}/{rel} holds {int(np.count_nonzero(wrong)):,} values of output {name} "
                f"that are not {kind}, but the recording's description says it is {dtype}: {DAMAGED}"
            )

    def described_width(
        self, table: str, cell: str, rel: str, description: dict[str, Any] | None = None
    ) -> int | None:
        """The units each row of the part file `rel` of `cell` spans, as `description` (the
        recording's by default) says (None where it does not): a gate's the cell's units, a
        state's its own (`h` a projection's output size), an output's its units."""
        description = self.description if description is None else description
        kind = "outputs" if table == "outputs" else "cells"
        listed = description.get(kind)
        found = [
            c
            for c in (listed if isinstance(listed, list) else [])
            if isinstance(c, dict) and c.get("name") == cell
        ]
        if len(found) != 1:
            return None
        units = found[0].get("units")
        if table == "states" and rel.split("/")[-2] == f"{TABLES[table]}=h":
            units = found[0].get("output_size") or units
        return units if isinstance(units, int) and not isinstance(units, bool) else None

    def _footer_width(self, table: str, cell: str, rel: str, metadata: Any) -> str | None:
        """Why the description the writer kept in a part file's footer (`METADATA_KEY`) gives
        its rows other units than the recording's does (None where they agree or it keeps
        none): a manifest that claims more units than the files hold is not believed."""
        kept = (metadata.metadata or {}).get(METADATA_KEY)
        if not kept:
            return None
        try:
            said = json.loads(kept)
        except ValueError:
            return "the description its footer keeps is not JSON"
        width = self.described_width(table, cell, rel)
        written = self.described_width(table, cell, rel, said if isinstance(said, dict) else {})
        if width is not None and written is not None and width != written:
            return (
                f"its footer says its rows hold {written:,} units; the recording's description "
                f"says {width:,}"
            )
        return None

    def _part_problem(
        self,
        table: str,
        cell: str,
        metadata: Any,
        span: tuple[int, int] | None = None,
        rel: str = "",
    ) -> str | None:
        """Why a part file's footer does not fit the description, or the examples its name
        leaves it (`span`), (None if it does)."""
        why = chunks_problem(metadata)
        if why:
            return why
        schema = metadata.schema.to_arrow_schema()
        types = dict(zip(schema.names, schema.types, strict=True))
        values = [n for n in schema.names if n not in KEYS]
        if (
            any(types.get(k) != t for k, t in KEYS.items())
            or not values
            or any(n not in _VALUES[table] or types[n] != pa.float32() for n in values)
        ):
            shown = ", ".join(f"{n} {t}" for n, t in types.items())
            return f"its columns are {shown}; expected example int64, step int32, unit int32 and float values"
        why = self._footer_width(table, cell, rel, metadata)
        if why:
            return why
        bounds = self.bounds(cell, table)
        (_, examples), (_, steps), (_, units) = bounds["example"], bounds["step"], bounds["unit"]
        for k in range(metadata.num_row_groups):
            group = metadata.row_group(k)
            # pyarrow reads as many rows as a row group counts: its key columns must hold as many
            for i in range(group.num_columns):
                column = group.column(i)
                if column.path_in_schema in KEYS and column.num_values != group.num_rows:
                    return (
                        f"row group {k} counts {group.num_rows:,} rows, but its "
                        f"{column.path_in_schema} column holds {column.num_values:,} values"
                    )
            ranges = statistics(group)
            if ranges is None:
                return f"row group {k} has no example and step statistics"
            (e0, e1), (s0, s1) = ranges
            if not 0 <= e0 <= e1 < examples:
                return f"row group {k} holds examples {e0} to {e1}, outside the recording's 0 to {examples - 1}"
            if not 0 <= s0 <= s1 < steps:
                return (
                    f"row group {k} holds steps {s0} to {s1}, outside the cell's 0 to {steps - 1}"
                )
            if span is not None and not span[0] <= e0 <= e1 < span[1]:
                leaves = f"{span[0]} on" if span[1] == _NO_END else f"{span[0]} to {span[1] - 1}"
                return (
                    f"row group {k} holds examples {e0} to {e1}; its name and the next file's "
                    f"leave it examples {leaves}"
                )
            if group.num_rows > (e1 - e0 + 1) * (s1 - s0 + 1) * units:
                return f"row group {k} claims {group.num_rows:,} rows, more than its examples, steps and {units:,} units have"
        counted = sum(metadata.row_group(k).num_rows for k in range(metadata.num_row_groups))
        if counted != metadata.num_rows:
            return f"its row groups count {counted:,} rows, the file {metadata.num_rows:,}"
        return None

    def read(self, rel: str, read: Any) -> Any:
        """`read()`, a read of the part file `rel`: RecordingError naming it, in one line, if
        its pages are damaged (a page whose checksum fails, one that does not decode)."""
        try:
            return read()
        except UNREADABLE as err:
            raise RecordingError(
                f"{self.path}/{rel} cannot be read ({unreadable(err)}): {DAMAGED}"
            ) from None

    def bounds(self, cell: str, table: str = "gates") -> dict[str, tuple[int, int]]:
        """The [low, high) of each key column of `cell`'s rows: examples within the recording's
        (any, while it is partial), steps within the cell's, units within its units (of the
        output `cell` in `outputs`: within its steps, one where it is not a sequence, and units)."""
        examples = (
            self.examples.pairs()[-1][1] if self.complete and self.examples.total() else 2**53
        )
        if table == "outputs":
            o = self.outputs[cell]
            steps = (o.get("steps") or 2**31) if o["sequence"] else 1
            return {"example": (0, examples), "step": (0, steps), "unit": (0, o["units"])}
        c = self.cells[cell]
        described = self.described_steps(cell)
        return {
            "example": (0, examples),
            "step": (0, described[1] if described else 2**31),
            "unit": (0, c.get("units") or MAX_UNITS),
        }

    def described_steps(self, cell: str) -> tuple[int, int] | None:
        """The [first, stop) of the input positions the description says `cell` was recorded
        at (None where it does not count them): its `steps` counts them from the first the
        selection (--steps START:STOP) keeps."""
        counted = self.cells[cell].get("steps")
        first = max((self.description.get("selection", {}).get("steps") or [None])[0] or 0, 0)
        return (first, first + counted) if counted else None

    def held_steps(
        self,
        table: str,
        cell: str,
        files: Sequence[str],
        width: int,
        every: tuple[int, int] | None = None,
    ) -> np.ndarray:
        """The steps at which the part files `files` of `cell` (of `width` units a row) hold
        rows, ascending, without their values: a row group's step range where it holds every
        (example, step, unit) of its ranges (`key_ranges`, from its footer), else its step
        column (checked against the cell's steps). No further file is read once every step of
        `every` ([first, stop), the steps the description allows) is found."""
        found = np.zeros(0, np.int64)
        for rel in files:
            metadata = self.footer(table, cell, rel)
            file: pq.ParquetFile | None = None
            for k in range(metadata.num_row_groups):
                ranges = key_ranges(metadata.row_group(k), width)
                if ranges is not None:
                    steps = np.arange(ranges[1][0], ranges[1][1] + 1)
                else:
                    file = file or self.parquet(table, cell, rel)
                    steps = self.read(
                        rel,
                        lambda k=k, file=file: (
                            file.read_row_group(k, columns=["step"], use_threads=False)
                            .column(0)
                            .to_numpy()
                        ),
                    )
                    self.check_keys(rel, cell, {"step": steps}, table)
                found = np.union1d(found, steps)
            if every is not None:
                first, stop = every
                if np.count_nonzero((found >= first) & (found < stop)) == stop - first:
                    break
        return found.astype(np.int32)

    def check_keys(
        self, rel: str, cell: str, keys: dict[str, np.ndarray], table: str = "gates"
    ) -> None:
        """RecordingError naming `rel` if the key columns read from it leave `_bounds` (the
        statistics a file's footer shows are checked before; its pages may still disagree)."""
        for key, (low, high) in self.bounds(cell, table).items():
            values = keys.get(key)
            if (
                values is not None
                and len(values)
                and not low <= int(values.min()) <= int(values.max()) < high
            ):
                bad = int(values.min()) if int(values.min()) < low else int(values.max())
                raise RecordingError(
                    f"{self.path}/{rel} holds rows of {key} {bad}, outside the {low} to {high - 1} of "
                    f"its cell in the recording's description: {DAMAGED}"
                )

    def allot(
        self,
        shape: Sequence[int],
        itemsize: int,
        what: str,
        advice: str = "select fewer examples or steps, or open the recording with "
        "Recording(path, memory=...) for more",
    ) -> None:
        """MemoryBudgetError (a SelectionError) unless an array of `shape` (of `itemsize` bytes
        an item) fits the memory budget; `advice` says what to do."""
        size = int(np.prod([int(n) for n in shape], dtype=object)) * itemsize
        if size > self.memory:
            raise MemoryBudgetError(what, size, self.memory, advice)


def sequences_fed(description: dict[str, Any]) -> int | None:
    """How many sequences a recording's inputs held, by its description's feeds (the first
    dimension they share); None where it does not say (a pipeline, a TFRecord file)."""
    feeds = description.get("feeds")
    if not isinstance(feeds, dict):
        return None
    firsts = {
        shape[0]
        for shape in feeds.values()
        if isinstance(shape, list)
        and len(shape) >= 2
        and isinstance(shape[0], int)
        and not isinstance(shape[0], bool)
    }
    return firsts.pop() if len(firsts) == 1 else None


def chunks_problem(metadata: Any) -> str | None:
    """Why the column chunks a footer lists do not match its schema (None if they do): each row
    group must list the schema's columns, in its order, of its physical types. pyarrow reads a
    chunk's statistics by the schema's type and ends the process (an abort, not an exception)
    where the chunk says another: this is checked before any statistics are read."""
    schema = metadata.schema
    expected = [(schema.column(i).path, schema.column(i).physical_type) for i in range(len(schema))]
    for k in range(metadata.num_row_groups):
        group = metadata.row_group(k)
        found = [
            (group.column(i).path_in_schema, group.column(i).physical_type)
            for i in range(group.num_columns)
        ]
        if found != expected:
            wrong = next(
                (f"{p} {t}" for (p, t), e in zip(found, expected, strict=False) if (p, t) != e),
                f"{len(found)} columns",
            )
            return f"row group {k} lists a column chunk {wrong} where its schema has " + ", ".join(
                f"{p} {t}" for p, t in expected
            )
    return None


def statistics(group: Any) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The (min, max) of `example` and of `step` in a row group, from its statistics (None
    where they are missing, as gatetrace always writes them)."""
    names = [group.column(i).path_in_schema for i in range(group.num_columns)]
    ranges = []
    for key in ("example", "step"):
        stats = group.column(names.index(key)).statistics if key in names else None
        if stats is None or not stats.has_min_max:
            return None
        ranges.append((int(stats.min), int(stats.max)))
    return ranges[0], ranges[1]


def key_ranges(group: Any, units: int) -> tuple[tuple[int, int], ...] | None:
    """The (min, max) of example, step and unit of a row group whose row count and statistics
    fit every combination of them, else None. Example and step ranges come from the row
    group's statistics; units are 0 to `units` - 1. The footer says nothing of the rows'
    order: a reader that places values by it checks the keys are in C order first
    (`recorders.read.tables.file_blocks`)."""
    ranges = statistics(group)
    if ranges is None:
        return None
    (e0, e1), (s0, s1) = ranges
    size = (e1 - e0 + 1) * (s1 - s0 + 1) * units
    names = [group.column(i).path_in_schema for i in range(group.num_columns)]
    unit = group.column(names.index("unit")).statistics if "unit" in names else None
    if unit is not None and unit.has_min_max and (int(unit.min), int(unit.max)) != (0, units - 1):
        return None  # not every unit: read the keys
    return ((e0, e1), (s0, s1), (0, units - 1)) if size == group.num_rows > 0 else None


def open_recording(path: Path, memory: int) -> CheckedFiles:
    """The recording folder `path` opened (a link the user named is followed; none below it
    is) and its manifest or progress files checked: RecordingError if it is not one."""
    if not os.path.lexists(path):
        raise RecordingError(
            f"{path} does not exist: give the --out folder a recording was written to"
        )
    not_one = RecordingError(
        f"{path} is not a gatetrace recording: it has no gates/ folder (nor states/, nor a summary's summary/)"
    )
    try:
        folder = Folder(path.resolve())
    except OSError:
        raise not_one from None
    try:
        odd = dict(folder.special())
        for name in READ:
            if name in odd:
                refuse(path, folder, name)
        # (a recording of cells of your own that apply no nonlinearity holds states only)
        if not any(folder.is_dir(n) for n in ("gates", "states", SUMMARY_DIR, TOTALS_DIR)):
            raise not_one
        progress = read_progress(folder.path)
        manifest = _manifest(path, folder) if "manifest.json" in folder.entries() else None
        return CheckedFiles(path, folder, memory, progress, manifest)
    except BaseException:
        folder.close()
        raise


def _manifest(path: Path, folder: Folder) -> dict[str, Any]:
    """manifest.json, checked against `recorders.write.schema`."""
    shown = f"{path}/manifest.json"
    try:
        manifest = parse_json(folder.read_bytes("manifest.json", MAX_JSON_BYTES), shown)
        why = description_problem(manifest)
    except OSError as err:
        why = f"cannot read it: {err.strerror or err}"
    except RecordingError as err:
        why = str(err).removeprefix(f"{shown} ")
    if why:
        raise RecordingError(f"{shown} is not a manifest gatetrace wrote ({why}): {DAMAGED}")
    return manifest
