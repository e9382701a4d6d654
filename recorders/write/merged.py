"""Each shard's merged statistics file: what a recording's overview needs, in one read a shard.

    _statistics/shard-K-of-N.json

The overview of a full recording (`gatetrace view`'s, `gate_summaries(exact=False)`,
`Recording.summary`) needs the rows of each (cell, gate) and (cell, state) and each gate's
activation statistics merged over its part files (`recorders.write.partstats`); a unit's page, its
highest activations and where they lie (`recorders.write.tops`). Every gate part
file carries its statistics in its footer, but reading footers is one request a file: 435 files
for 183 million gate rows, 2,400 for a billion, each a request in object storage. So each
shard's writer keeps, per (cell, gate) and (cell, state), the part files it has committed, their
rows and (a gate's) their statistics and each unit's highest activations merged (`PartStats.merge`,
`Tops.merge`, the same to the last bit in any grouping and order), and writes them, with the files
they cover, into this file.

When it is written: only after the progress file lists a batch as complete (it covers complete
files only, which a resume never removes); at most every `WRITE_EVERY` seconds, when the writer
closes (before its progress file says it is finished) and when it stops on an error or Ctrl-C;
whole, in place of the one before (`Place.write_bytes`: a file renamed over the old one, or one
PUT in object storage). A gate's statistics are merged `PENDING` files at a time, on the
writer's threads (idle while the next batch is computed), and when the file is written. A run
that is killed leaves the file of its last write, which does not cover the files committed
since. A resumed shard starts from its file and the footers of the complete part files the
file does not cover; where the file is missing or does not hold (it covers a file that is not
complete, or is not as written here), from the footers of all of them.

A reader (`recorders.read.files.CheckedFiles.covering`) takes each shard's file for the files
it covers and reads the footers of the others (a killed run's last batches, a batch committed
after the file was written), so that it answers what merging every footer answers, bit for bit.
The file may come from anyone and is checked as footers are before a number is used: its form
(`decode`); each gate's statistics (`partstats.read_merged`: counts against the rows the entry
says its files hold and against each other, each step's least and largest value, mean, bins
and sums, the values within the range of the gate's nonlinearity, its units and steps the
cell's); and the files it covers against those in the folder. One that does not hold (a lie,
damage, a complete batch's file it covers that is not there, a file two shards' files both
cover) is one line naming it (a RecordingError), saying that removing it makes readers read the
footers instead: gatetrace writes it only once the files it covers are complete and never
removes those, so such a file was edited or damaged, as a footer that lies is, and is named
rather than quietly read around. Two cases read the footers instead, silently: a file it
covers that is not there and not complete in the progress files as the reader read them (the
file was written after the reader listed the folder, while the recording goes on), and a file
larger than a quarter of the reader's memory budget (footers are merged within it). A part
file edited after it was covered is found when its values or its footer are read;
`Recording.check` reads every footer and names a merged file that is not its files'.

Its JSON:

    {"format": 1, "shard": [K, N],
     "entries": [{"table": "gates", "cell": C, "name": G,
                  "files": [the first example of each part file covered, ascending],
                  "rows": the rows of those files,
                  "statistics": their statistics merged (`PartStats.fields(merged=True)`),
                                or null where one of them carries none,
                  "top": each unit's highest activations over them (`Tops.fields()`), or null
                         where one of them carries none (missing in a file of an older gatetrace)},
                 {"table": "states", "cell": C, "name": S, "files": [...], "rows": R}, ...]}
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from recorders.errors import RecordingError
from recorders.write.layout import STATISTICS_DIR, UNREADABLE, partition_dir
from recorders.write.partstats import FOOTER_KEY, PartStats, read, read_merged
from recorders.write.progress import Intervals, Shard
from recorders.write.schema import MAX_JSON_BYTES, parse_json
from recorders.write.tops import TOP_KEY, Tops
from recorders.write.tops import read as read_tops
from recorders.write.totals import RANGES

if TYPE_CHECKING:  # (the writer's: a reader imports this module for the format alone)
    from recorders.write.place import Place

__all__ = [
    "FORMAT",
    "WRITE_EVERY",
    "PENDING",
    "SHARD_FILE",
    "Entry",
    "Merging",
    "decode",
    "part_file",
    "part_start",
    "statistics_file",
    "span_of",
    "resumed",
]

FORMAT = 1
# seconds: the file is written at most this often while a shard records, and when the writer
# closes or stops. Each write is the whole file: 1.3 MB for 8 gates x 50 steps x 256 units of
# sigmoid activations, 20 ms to merge and encode on an idle 2-core AMD EPYC, 50 ms on a busy
# one; every 5 s that is 1 ms a batch (measured over 600 batches of 32 and 128 examples, whose
# commits took as long with the file as without it, within the machine's noise).
WRITE_EVERY = 5.0
# a gate's statistics of this many files wait at most to be merged into its running merge
PENDING = 16
SHARD_FILE = re.compile(r"shard-(\d+)-of-(\d+)\.json")
_KIND = {"gates": "gate", "states": "state"}
_MAX_START = 2**53  # example numbers, exact in JSON
_MAX_ROWS = 2**62

Key = tuple[str, str, str]  # table (gates or states), cell, gate or state


def part_file(table: str, cell: str, name: str, start: int) -> str:
    """The part file of (cell, gate or state) of `table` whose batch begins at example `start`
    (of the output `name` in `outputs`, which no cell holds)."""
    folder = (
        partition_dir(output=name)
        if table == "outputs"
        else partition_dir(cell=cell, **{_KIND[table]: name})
    )
    return f"{table}/{folder}/part-{start:010d}.parquet"


def part_start(rel: str) -> int | None:
    """The first example of the part file `rel` (a path or a name) as `part_file` names it,
    `part-<first example>.parquet`; None for any other name."""
    matched = re.fullmatch(r"part-(\d{10,16})\.parquet", rel.rpartition("/")[2])
    return int(matched.group(1)) if matched else None


def statistics_file(shard: Shard) -> str:
    """The merged statistics file of `shard`, in the recording."""
    return f"{STATISTICS_DIR}/{shard.tag}.json"


def span_of(cell: Mapping[str, Any] | None, gate: str) -> tuple[float, float] | None:
    """The least and largest value of `gate`'s nonlinearity where the cell's description lists
    it (as gatetrace record does; a guess from a gate's name would refuse a writer's own values),
    else None."""
    listed = cell.get("nonlinearities") if cell is not None else None
    named = listed.get(gate) if isinstance(listed, Mapping) else None
    return RANGES.get(named.lower()) if isinstance(named, str) else None


@dataclass(frozen=True)
class Entry:
    """What a merged statistics file says of one (cell, gate) or (cell, state) of `table`: the
    first example of each part file it covers (`files`), their `rows`, and for a gate their
    statistics as stored (`said`; None where one of the files carries none) and each unit's
    highest activations (`said_top`; None likewise)."""

    table: str
    cell: str
    name: str
    files: tuple[int, ...]
    rows: int
    said: dict[str, Any] | None = None
    said_top: dict[str, Any] | None = None

    def paths(self) -> list[str]:
        """The part files it covers, in the recording."""
        folder = part_file(self.table, self.cell, self.name, 0).rpartition("/")[0]
        return [f"{folder}/part-{s:010d}.parquet" for s in self.files]

    def statistics(self, span: tuple[float, float] | None, most_bytes: int) -> PartStats | None:
        """A gate's statistics, checked (`partstats.read_merged`: ValueError saying what does
        not hold); None where a file it covers carries none."""
        if self.said is None:
            return None
        return read_merged(self.said, self.rows, span, most_bytes)

    def tops(
        self,
        units: int,
        steps: tuple[int, int],
        span: tuple[float, float] | None,
        most_bytes: int,
        examples: tuple[int, int] = (0, _MAX_START),
    ) -> Tops | None:
        """A gate's units' highest activations, checked (`tops.read`: ValueError saying what
        does not hold) against the cell's `units` and `steps`; None where a file it covers
        carries none."""
        if self.said_top is None:
            return None
        return read_tops(self.said_top, self.rows, units, examples, steps, span, most_bytes)


def _whole(n: Any, top: int) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and 0 <= n < top


def decode(data: bytes, shard: Shard | None = None) -> dict[Key, Entry]:
    """The entries of a merged statistics file, their form checked (ValueError saying what is
    not as written here); `shard`: the one its name says it is of. Their statistics are checked
    when decoded (`Entry.statistics`)."""
    try:
        said = parse_json(data, "it")
    except RecordingError as err:
        raise ValueError(str(err)) from None
    if not isinstance(said, dict) or said.get("format") != FORMAT:
        raise ValueError(f"it is not of format {FORMAT}")
    tagged = said.get("shard")
    if shard is not None and tagged != [shard.index, shard.count]:
        raise ValueError(f"it says it is of shard {tagged}, its name {shard.index}/{shard.count}")
    entries = said.get("entries")
    if not isinstance(entries, list):
        raise ValueError("its entries are not a list")
    out: dict[Key, Entry] = {}
    for e in entries:
        if not isinstance(e, dict) or e.get("table") not in _KIND:
            raise ValueError("an entry is not of the gates or the states")
        table, cell, name, files = e["table"], e.get("cell"), e.get("name"), e.get("files")
        if not isinstance(cell, str) or not isinstance(name, str):
            raise ValueError("an entry's cell or name is not text")
        what = f"{_KIND[table]} {name} of {cell}"
        if (
            not isinstance(files, list)
            or not all(_whole(s, _MAX_START) for s in files)
            or any(a >= b for a, b in zip(files, files[1:], strict=False))
        ):
            raise ValueError(f"the files of {what} are not first examples, ascending")
        if not _whole(e.get("rows"), _MAX_ROWS):
            raise ValueError(f"the rows of {what} are not a count")
        statistics = e.get("statistics")
        if table == "gates" and (
            "statistics" not in e or not (statistics is None or isinstance(statistics, dict))
        ):
            raise ValueError(f"the statistics of {what} are missing")
        if table == "states" and ("statistics" in e or "top" in e):
            raise ValueError(f"{what} has statistics, which only gates have")
        top = e.get("top")  # (missing in a file of an older gatetrace: none)
        if not (top is None or isinstance(top, dict)):
            raise ValueError(f"the top values of {what} are malformed")
        if isinstance(statistics, dict):
            units, per_unit = statistics.get("units"), statistics.get("rows")
            if not (_whole(units, _MAX_ROWS) and _whole(per_unit, _MAX_ROWS)):
                raise ValueError(f"the units or rows of the statistics of {what} are not counts")
            if int(units) * int(per_unit) != e["rows"]:  # type: ignore[arg-type]
                raise ValueError(
                    f"its statistics of {what} say {units:,} units of {per_unit:,} rows, its "
                    f"files hold {e['rows']:,} rows"
                )
        if (table, cell, name) in out:
            raise ValueError(f"{what} is listed twice")
        out[table, cell, name] = Entry(table, cell, name, tuple(files), e["rows"], statistics, top)
    return out


@dataclass
class _Running:
    """One (table, cell, name) of a `Merging`."""

    files: set[int] = field(default_factory=set)
    rows: int = 0
    stats: PartStats | None = None
    pending: list[PartStats] = field(default_factory=list)
    folding: Future | None = None  # `stats` merged with the files pending then, in the background
    kind: tuple[int, float | None, float | None] | None = None  # units and thresholds
    none: bool = False  # a file carries no statistics
    # files whose statistics do not merge (other units or thresholds, which readers refuse):
    # none of its files is covered, readers read their footers and name the file
    apart: bool = False
    tops: Tops | None = None  # each unit's highest activations, merged
    tops_waiting: list[Tops] = field(default_factory=list)  # and those of files added since
    tops_none: bool = False  # a file carries none

    def top(self) -> Tops | None:
        """Each unit's highest activations over every file added (None where a file carries
        none)."""
        if self.tops_none:
            return None
        if self.tops_waiting:
            parts = [self.tops, *self.tops_waiting] if self.tops is not None else self.tops_waiting
            try:
                self.tops = Tops.merge(parts)
            except ValueError:  # other units: readers read the footers, and name the file
                self.tops_none, self.tops = True, None
            self.tops_waiting = []
        return self.tops

    def settle(self) -> None:
        """Wait for the merge in the background, if one is."""
        if self.folding is not None:
            self.stats, self.folding = self.folding.result(), None

    def fold(self, submit: Callable[..., Future] | None = None) -> PartStats | None:
        """The statistics of every file added, merged now (None where a file carries none);
        with `submit`, merged in the background (`settle` waits for it) and None returned."""
        self.settle()
        if self.pending:
            parts = [self.stats, *self.pending] if self.stats is not None else self.pending
            if submit is not None:
                self.folding, self.pending = submit(PartStats.merge, parts), []
                return None
            self.stats, self.pending = PartStats.merge(parts), []
        return None if self.none else self.stats


class Merging:
    """A shard writer's running merge (see the module docstring): `add` each part file once its
    batch is complete; `encode` gives the file. `changed`: whether it holds more than the file
    last written. `submit`: where a gate's pending statistics are merged in the background (the
    writer's threads, idle while the next batch is computed), else at once."""

    def __init__(self) -> None:
        self._running: dict[Key, _Running] = {}
        self.changed = False
        self.submit: Callable[..., Future] | None = None

    def covers(self, key: Key, start: int) -> bool:
        running = self._running.get(key)
        return running is not None and start in running.files

    def add(
        self,
        key: Key,
        start: int,
        rows: int,
        stats: PartStats | None,
        tops: Tops | None = None,
    ) -> None:
        """The part file of `key` beginning at example `start`: its `rows` and, for a gate,
        the statistics and the units' highest activations its footer carries (None where
        none)."""
        running = self._running.setdefault(key, _Running())
        running.files.add(start)
        running.rows += rows
        if key[0] == "gates":
            if tops is None:
                running.tops_none, running.tops, running.tops_waiting = True, None, []
            elif not running.tops_none:
                running.tops_waiting.append(tops)
                if len(running.tops_waiting) >= PENDING:
                    running.top()
        if key[0] == "gates" and stats is not None:
            kind = (stats.units, stats.low, stats.high)
            running.apart = running.apart or running.kind not in (None, kind)
            running.kind = kind
        if key[0] == "gates" and not running.apart:
            if stats is None:
                running.settle()
                running.none, running.stats, running.pending = True, None, []
            elif not running.none:
                running.pending.append(stats)
                if len(running.pending) >= PENDING:
                    running.fold(self.submit)
        self.changed = True

    def load(self, entry: Entry, stats: PartStats | None, tops: Tops | None = None) -> None:
        """What a file written before says of an entry (`stats`: its statistics, `tops` its
        units' highest activations, decoded)."""
        key = (entry.table, entry.cell, entry.name)
        kind = None if stats is None else (stats.units, stats.low, stats.high)
        none = entry.table == "gates" and stats is None
        self._running[key] = _Running(
            set(entry.files),
            entry.rows,
            stats,
            kind=kind,
            none=none,
            tops=tops,
            tops_none=entry.table == "gates" and tops is None,
        )

    def encode(self, shard: Shard) -> bytes:
        """The file's bytes (every pending statistics merged first)."""
        entries = []
        for (table, cell, name), running in sorted(self._running.items()):
            if running.apart:
                continue
            entry: dict[str, Any] = {
                "table": table,
                "cell": cell,
                "name": name,
                "files": sorted(running.files),
                "rows": running.rows,
            }
            if table == "gates":
                stats = running.fold()
                entry["statistics"] = None if stats is None else stats.fields(merged=True)
                tops = running.top()
                entry["top"] = None if tops is None else tops.fields()
            entries.append(entry)
        said = {"format": FORMAT, "shard": [shard.index, shard.count], "entries": entries}
        return json.dumps(said, separators=(",", ":")).encode()


def _own_files(
    place: Place,
    cells: Mapping[str, Mapping[str, Any]],
    examples: tuple[int, int] | None,
    complete: Intervals,
) -> dict[Key, dict[int, str]]:
    """key: {first example: part file} of the complete part files of a shard's `examples`
    (None: all) of the described `cells`."""
    lo, hi = examples if examples is not None else (0, _MAX_START)
    folders = {
        part_file(table, c, name, 0).rpartition("/")[0]: (table, c, name)
        for table in _KIND
        for c, cell in cells.items()
        for name in cell.get(table) or ()
        if isinstance(name, str)
    }
    found: dict[Key, dict[int, str]] = {}
    for table in _KIND:
        for rel in place.files(table):
            folder, _, file = rel.rpartition("/")
            start = part_start(file)
            key = folders.get(folder)
            if key is not None and start is not None and lo <= start < hi and start in complete:
                found.setdefault(key, {})[start] = rel
    return found


def resumed(
    place: Place,
    shard: Shard,
    description: Mapping[str, Any],
    examples: tuple[int, int] | None,
    complete: Intervals,
) -> Merging:
    """A resumed shard's running merge (see the module docstring): its file's where it holds,
    and the footers of the complete part files it does not cover (`examples`: the shard's)."""
    cells = {
        c["name"]: c
        for c in description.get("cells", [])
        if isinstance(c, Mapping) and isinstance(c.get("name"), str)
    }
    own = _own_files(place, cells, examples, complete)
    merging = Merging()
    try:
        data: bytes | None = place.read_bytes(statistics_file(shard), MAX_JSON_BYTES)
    except (OSError, RecordingError):
        data = None
    if data is not None:
        try:
            loaded = Merging()
            for key, entry in decode(data, shard).items():
                if not set(entry.files) <= set(own.get(key, ())):
                    raise ValueError("it covers files that are not complete")
                span = span_of(cells.get(entry.cell), entry.name)
                units = (cells.get(entry.cell) or {}).get("units")
                tops = (
                    entry.tops(units, (0, 2**31), span, 1 << 62)
                    if isinstance(units, int) and entry.table == "gates"
                    else None
                )
                loaded.load(entry, entry.statistics(span, 1 << 62), tops)
            merging = loaded
        except ValueError:
            merging.changed = True  # written again, from the footers
    for key, files in own.items():
        units = (cells.get(key[1]) or {}).get("units")
        _add_footers(
            merging,
            place,
            key,
            files,
            span_of(cells.get(key[1]), key[2]),
            units if isinstance(units, int) else None,
        )
    return merging


def _add_footers(
    merging: Merging,
    place: Place,
    key: Key,
    files: Mapping[int, str],
    span: tuple[float, float] | None,
    units: int | None,
) -> None:
    """Add the files of `key` the merge does not cover, from their footers; a file whose
    statistics do not hold is left out (a reader reads its footer, and names it), one whose
    highest activations do not is added without them (a reader then reads the values)."""
    for start, rel in sorted(files.items()):
        if merging.covers(key, start):
            continue
        try:
            footer = place.parquet_metadata(rel)
        except (*UNREADABLE, RecordingError):
            continue
        stats = tops = None
        said = footer.metadata or {}
        value = said.get(FOOTER_KEY)
        if key[0] == "gates" and value is not None:
            try:
                stats = read(value, footer.num_rows, span)
            except ValueError:
                continue
        top = said.get(TOP_KEY)
        if key[0] == "gates" and top is not None and units is not None:
            try:
                tops = read_tops(top, footer.num_rows, units, (start, _MAX_START), (0, 2**31), span)
            except ValueError:
                tops = None
        merging.add(key, start, footer.num_rows, stats, tops)
