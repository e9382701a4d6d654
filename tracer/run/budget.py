"""The memory budget: the peak RSS a recording process may reach, and the batch size that keeps it there.

A recording process holds TensorFlow and the model (measured when recording starts, as
the process's RSS), the writer's working set (`RESERVE`: a row group's long columns per
writer thread, the key columns, the weights table, the buffers of the files written past
the page cache), and one batch: its fetched tensors and the arrays cut out of them,
while the batch before is written. Peak RSS was measured
to grow by 0.94 to 1.2 times a batch's recorded values (two float32 columns per gate, one
per state, every unit and step) for unrolled cells when batches ran one at a time:
`COPIES` allows 3, for the batch written while the next runs, and for what that
measurement did not cover (a replayed loop's fetched inputs and outputs beside the
values computed from them). `bytes_per_sequence` estimates one sequence's share of a
batch, with its input rows; `choose_batch` lowers the batch size so that what is held,
the reserve and the batch stay within the budget. What the writer holds beyond the reserve
where it encodes through pyarrow (a `--compression` other than fast) or rounds the values
(`--round-bits`) is counted by `writer_reserve`; the parts each writer thread makes with
`--values ...,contributions` (of a row group, or of the batch where it is smaller), by `parts_reserve`.

The default budget is what TensorFlow and the model hold plus `DEFAULT_ROOM` (or a
tenth of the available memory, if that is less), while a large model's batch is lowered and
a tiny model keeps DEFAULT_BATCH_SIZE; it never leaves less than the reserve and a batch of
one sequence: when what is already held leaves too little, the default is wrong, not the
input. Under it, only a sequence of more than DEFAULT_ROOM (or than the machine's available
memory leaves beside the reserve) is refused, with the `--memory` that would take it. `bench/memory.py --benchmark` checks that the budget
holds, whole process, on the benchmark model.
`--memory` sets the budget of the whole process instead.

`tune_allocators` sets how a recording process reuses freed memory (the `gatetrace`
command and its worker processes call it before anything is allocated).
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from recorders.errors import SelectionError
from recorders.write.direct import BUFFER as DIRECT_BUFFER
from recorders.write.direct import WRITE_THREADS

__all__ = [
    "COPIES",
    "LOOP_COPIES",
    "MARGIN",
    "RESERVE",
    "ENCODER_RESERVE",
    "writer_reserve",
    "PART_ROW_BYTES",
    "PartsHold",
    "parts_reserve",
    "DEFAULT_ROOM",
    "DEFAULT_BATCH_SIZE",
    "BatchChoice",
    "available_memory",
    "current_rss",
    "default_budget",
    "tune_allocators",
    "parse_size",
    "bytes_per_sequence",
    "fixed_size_problem",
    "check_rows",
    "choose_batch",
    "describe_size",
]

COPIES = 3
# A cell taken from its loop (tracer.values.emit) holds two copies more while a batch runs: the
# loop's TensorLists and their stack (measured: 1,346 MB against 1,067 MB for the same cells
# unrolled, 2 x BasicLSTMCell(256), 50 steps, batch 256, whose values are 131 MB a copy).
LOOP_COPIES = 3
# 272 MB, and a buffer for files written past the page cache per writer thread and one for
# the weights table (recorders.write.direct: they exist once the first files are written, after
# the RSS the budget starts from was measured). Measured on the benchmark model (2 x
# BasicLSTMCell(256), 50 steps, 3,584 sequences, AMD EPYC), whole process: 282 MiB above the RSS
# when recording starts (TensorFlow, the model and the statistics' compiled loops, `partstats.ready`)
# plus 2.33 MiB a sequence of a batch (batches of 46 and 95); 223 MB and 2.32 MB when 208 MB was set
# here, before every recording wrote its footer statistics (`--memory 1.1G` then peaked 22 MiB
# above its budget, batch 46). Plus `MARGIN`: what the peak of the same run at the same batch
# varies by from run to run (the allocator, what TensorFlow holds when the batch runs): 1,105 to
# 1,123 MiB over four runs at batch 46 here, 8 MB between two runs of the contributions test in
# tests/test_memory.py, and a run of the budget test there once 0.8 MB above its budget where it
# had kept within it in the two runs before.
MARGIN = 32 * 2**20
RESERVE = 272 * 2**20 + MARGIN + (WRITE_THREADS + 1) * DIRECT_BUFFER
# What the writer's threads hold beyond RESERVE where the part files go through pyarrow's encoder
# (a `--compression` other than fast: pages encoded and compressed beside the columns). Measured
# whole process (an LSTM(64) over 100 steps, batches of 300, AMD EPYC): up to 20 MB above the
# default layout's peak with zstd, and a budgeted run of lz4 11 MB past a budget RESERVE alone kept.
ENCODER_RESERVE = 32 * 2**20


# What a writer thread holds to write a row group of a gate's parts (`--values ...,contributions`:
# `tracer.values.parts`, a row group of examples at a time, in float64 from what the cell read):
# PART_ROW_BYTES a row (the part columns and their keys), and 12 bytes (float32 and float64) per
# value read a row (the input and states of the row's step, over the cell's units). Measured whole
# process on the benchmark model (2 x BasicLSTMCell(256), 50 steps, AMD EPYC, load 3-4.4): peak RSS
# 1042, 1290, 1533 and 1737 MB at batches of 26, 81, 163 and 256 (`--memory` 1G, 1.2G, 1.5G, 2G),
# 4.5 MB a sequence up to a row group's 81 sequences and 2.2 MB past it: 186 to 243 MB for the
# three threads' row groups of 1,036,800 rows (60 to 78 bytes a row; here 36 + 12 x 768 / 256 =
# 72), which the budget did not count (`--memory 1.2G` peaked 61 MB above it, 1G 18 MB). Counted
# as a full row group a thread: 1019, 1354 and 1700 MB at 1.2G, 1.5G and 2G (batches of 23, 106,
# 244; load 1.8-2.6); 1G refused. Counted as they grow, a batch's sequences' up to a row group
# (`PartsHold`), with today's RESERVE: peak RSS 1,035 MiB at --memory 1.2G (batch 24), 1,254 MiB at
# 1.5G (73), 1,603 MiB at 2G (205), and 1,076 MiB at the default budget (1,270 MiB, batches of 31,
# where a full row group counted would have left batches of 1), AMD EPYC, load 1-2.
PART_ROW_BYTES = 36


@dataclass(frozen=True)
class PartsHold:
    """What the writer's threads hold beside RESERVE to write the parts of the gates (bytes):
    `per_sequence` for each sequence of a batch, up to `most` (a row group of parts a thread:
    a thread makes the parts of at most a row group's examples at once, and of no more than
    the batch holds)."""

    per_sequence: int
    most: int

    def of(self, batch: int) -> int:
        """What a batch of `batch` sequences makes them hold."""
        return min(self.most, batch * self.per_sequence)


def parts_reserve(cells: Iterable[Any], feeds: Mapping[Any, Any]) -> PartsHold:
    """What the writer's threads hold to write the parts of `cells`' gates, a thread each a
    row group of the widest cell's (`PART_ROW_BYTES` a row, and what the row's step read)."""
    from recorders.write.rowgroups import ROW_GROUP_ROWS  # (pyarrow: not at the parser's import)

    hint = _steps_hint(feeds)
    per_sequence = most = 0
    for cell in cells:
        steps, width = _steps(cell, hint), max(cell.units, cell.output_size)
        read = cell.input_size + len(cell.spec.states) * width
        row = PART_ROW_BYTES + 12 * read // max(1, cell.units)
        rows = steps * cell.units  # a sequence's
        per_sequence = max(per_sequence, rows * row)
        most = max(most, max(1, ROW_GROUP_ROWS // max(1, rows)) * rows * row)
    return PartsHold(WRITE_THREADS * per_sequence, WRITE_THREADS * most)


def writer_reserve(compression: str | None, rounded_columns: int = 0) -> int:
    """The reserve of a recording whose part files are written in `compression` (None: the
    default, fast) with `rounded_columns` value columns a file rounded (`--round-bits`: each
    writer thread copies a row group's columns to round them, a float32 a row; 0: none)."""
    from recorders.write.rowgroups import ROW_GROUP_ROWS  # (pyarrow: not at the parser's import)

    encoder = ENCODER_RESERVE if compression not in (None, "fast") else 0
    return RESERVE + encoder + WRITE_THREADS * rounded_columns * ROW_GROUP_ROWS * 4


# on top of what TensorFlow and the model hold, by default: the benchmark model's process peaks
# at 1.19 GB (1.42 GB with 768 MB)
DEFAULT_ROOM = 512 * 2**20
DEFAULT_BATCH_SIZE = 256  # sequences per Session.run, before the budget lowers it
_UNITS = {
    "": 1,
    "B": 1,
    "K": 2**10,
    "KB": 2**10,
    "M": 2**20,
    "MB": 2**20,
    "G": 2**30,
    "GB": 2**30,
    "T": 2**40,
    "TB": 2**40,
}


def tune_allocators() -> None:
    """Set the process's allocators for batch after batch of large arrays (glibc only; elsewhere
    Arrow's part alone).

    - Blocks of 1 MB and more are mapped and given back to the system when freed
      (M_MMAP_THRESHOLD): by default glibc raises that threshold after such frees, up to
      32 MB, and keeps the blocks in its heaps, which added about 200 MB to the peak RSS.
    - Up to 64 MB freed at the top of a heap are kept for reuse (M_TOP_PAD) rather than given
      back: otherwise the smaller blocks a batch allocates and frees by the thousand (a
      TensorFlow tensor of one step, 256 KB in the benchmark) are faulted in afresh each
      time. Measured on the benchmark model (whole processes, 8 batches of 256): page faults
      77,000 -> 800 per batch, system CPU 0.23 -> 0.12 s per batch, record 0.427 -> 0.399 s
      per batch, peak RSS +40 MB.
    - Arrow allocates through the system's allocator, not its own (mimalloc keeps about 60 MB
      of freed encoding buffers).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-2, 64 << 20)  # M_TOP_PAD
    except (OSError, AttributeError):
        pass
    import pyarrow

    pyarrow.set_memory_pool(pyarrow.system_memory_pool())


def _proc_bytes(path: str, field: str) -> int | None:
    """A `Field:  N kB` line of a /proc file, in bytes; None where it cannot be read."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _container_room(root: str = "/sys/fs/cgroup") -> int | None:
    """What the process's container (a cgroup v2 memory limit) leaves: memory.max less
    memory.current, in bytes; None where there is no limit or it cannot be read."""
    try:
        with open(f"{root}/memory.max") as f:
            limit = f.read().strip()
        with open(f"{root}/memory.current") as f:
            current = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" or not limit.isdigit() else max(0, int(limit) - current)


def available_memory() -> int:
    """MemAvailable from /proc/meminfo, or what a container's limit leaves if that is less,
    in bytes (8 GiB where neither can be read)."""
    found = [
        m
        for m in (_proc_bytes("/proc/meminfo", "MemAvailable"), _container_room())
        if m is not None
    ]
    return min(found) if found else 8 * 2**30


def current_rss() -> int:
    """This process's resident memory (VmRSS from /proc/self/status), in bytes; 0 where it cannot be read."""
    return _proc_bytes("/proc/self/status", "VmRSS") or 0


def default_budget(used: int, per_sequence: int = 0, reserve: int = RESERVE) -> int:
    """The budget when none is given: `used` (what the process holds) plus DEFAULT_ROOM, or
    plus a tenth of the available memory if that is less; never less than the reserve and
    one sequence of `per_sequence` bytes above `used` (a batch of one is always tried)."""
    return used + max(min(DEFAULT_ROOM, available_memory() // 10), reserve + per_sequence)


def parse_size(text: str) -> int:
    """`"2G"`, `"500M"`, `"1.5GB"`, `"800k"` -> bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else None
    if match is None or unit not in _UNITS or float(match.group(1)) <= 0:
        raise SelectionError(f"--memory {text!r}: expected a size such as 2G, 500M or 1.5GB")
    return int(float(match.group(1)) * _UNITS[unit])


def describe_size(n: float, up: bool = False) -> str:
    """`1.5 GB`, `751.6 KB`; with `up`, rounded up to the tenth (`--memory 1.1GB`-style, never below `n`)."""
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= size:
            if up:
                return f"{np.ceil(n / size * 10) / 10:.1f}{unit}"
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} bytes"


def _steps(cell: Any, hint: int | None) -> int:
    steps = cell.describe().get("steps")
    return int(steps) if steps else int(hint or 1)


def _shapes(feeds: Mapping[Any, Any]) -> list[tuple[int, ...]]:
    return [
        tuple(np.shape(v)) if not hasattr(v, "shape") else tuple(v.shape) for v in feeds.values()
    ]


def _steps_hint(feeds: Mapping[Any, Any]) -> int | None:
    """The steps of the [sequences, steps, ...] inputs, for cells that do not say theirs."""
    return max((s[1] for s in _shapes(feeds) if len(s) >= 3), default=None)


def bytes_per_sequence(cells: Iterable[Any], feeds: Mapping[Any, Any], parts: bool = False) -> int:
    """One sequence's share of a batch at its peak: COPIES times its recorded values (two
    float32 columns per gate, one per state, every unit and step; LOOP_COPIES more for a
    cell taken from its loop; with `parts`, what each step read: its input and states) plus
    its input rows. (The parts themselves are computed a row group at a time by the writer's
    threads: `parts_reserve`.)"""
    shapes = _shapes(feeds)
    hint = _steps_hint(feeds)
    values = 0
    for cell in cells:
        per_step = len(cell.gates) * cell.units * 2 + len(cell.spec.states) * max(
            cell.units, cell.output_size
        )
        if parts:
            per_step += cell.input_size + len(cell.spec.states) * max(cell.units, cell.output_size)
        copies = COPIES + (LOOP_COPIES if getattr(cell, "path", None) == "loop" else 0)
        values += copies * _steps(cell, hint) * per_step * 4
    inputs = sum(
        int(np.prod(s[1:], dtype=np.int64)) * np.dtype(getattr(v, "dtype", np.float32)).itemsize
        for s, v in zip(shapes, feeds.values(), strict=True)
        if len(s) >= 1
    )
    return int(values) + inputs


@dataclass(frozen=True)
class BatchChoice:
    """The batch size a budget allows, and the figures it was chosen from (bytes)."""

    size: int
    requested: int
    budget: int
    # what the process held when recording started: TensorFlow, the model, its inputs in memory
    used: int
    per_sequence: int
    given: bool = False  # the budget is the user's (--memory), not the default
    # what the writer holds beside the batch (`writer_reserve`, and the parts its threads make of it)
    reserve: int = RESERVE

    @property
    def why(self) -> str | None:
        """The line that says why the batch is smaller than asked, or None."""
        if self.size >= self.requested:
            return None
        return (
            f"batch size {self.requested} lowered to {self.size} to keep the process within the memory budget of "
            f"{describe_size(self.budget)} (TensorFlow and the model hold {describe_size(self.used)}; about "
            f"{describe_size(self.per_sequence)} per sequence); set it with --memory"
        )

    def to_dict(self) -> dict[str, Any]:
        d = {
            "size": self.size,
            "requested": self.requested,
            "budget": self.budget,
            "used": self.used,
            "per_sequence": self.per_sequence,
        }
        return d if self.why is None else {**d, "why": self.why}


def fixed_size_problem(ops: Iterable[Any], limit: int | None = None) -> str | None:
    """`name (Type) makes ...` for the first op whose output has a fully known shape (one
    that no batch size changes) too large for `limit` bytes (default: the available memory),
    or None. A model can ask for a tensor of 10^12 values that no batch size makes fit."""
    limit = available_memory() if limit is None else limit
    for op in ops:
        for out in op.outputs:
            shape = out.shape
            if shape.rank is None or not shape.is_fully_defined() or out.dtype.size is None:
                continue
            size = int(np.prod([int(d) for d in shape], dtype=object)) * out.dtype.size
            if size > limit:
                return (
                    f"{op.name} ({op.type}) makes a tensor of {shape.as_list()} {out.dtype.name} ({describe_size(size)}) "
                    f"whatever the batch size, more than this machine's available memory ({describe_size(limit)})"
                )
    return None


def check_rows(feeds: Mapping[Any, Any], choice: BatchChoice) -> None:
    """Refuse, before any row is read, an input one sequence of which does not fit in what
    the budget leaves for a batch: a compressed `.npz` member of 2 MB may declare rows of
    gigabytes, and reading one would end the process with no word (an allocation failing
    in TensorFlow aborts it). Under the default budget, what is refused is a sequence of
    more than DEFAULT_ROOM, or than the machine's available memory takes beside the reserve
    (the budget grows to hold a batch of one of anything smaller); under `--memory`, one the
    user's budget cannot take."""
    reserve = choice.reserve
    room = (
        choice.budget - choice.used - reserve
        if choice.given
        else min(DEFAULT_ROOM, available_memory() - reserve)
    )
    for name, value in feeds.items():
        shape = tuple(getattr(value, "shape", ()))
        if len(shape) < 1:
            continue
        row = (
            int(np.prod(shape[1:], dtype=object))
            * np.dtype(getattr(value, "dtype", np.float32)).itemsize
        )
        if row <= room:
            continue
        needed = choice.used + reserve + row
        hint = (
            f"if it is right, give --memory {describe_size(needed, up=True)}"
            if needed < available_memory()
            else f"that is more than this machine's available memory ({describe_size(available_memory())})"
        )
        what = (
            f"the memory budget of {describe_size(choice.budget)} (--memory) leaves for a batch, TensorFlow and the "
            f"model holding {describe_size(choice.used)}"
            if choice.given
            else "the default memory budget takes for one sequence"
        )
        raise SelectionError(
            f"feed {getattr(name, 'name', name)}: its header declares sequences of {list(shape[1:])} {np.dtype(value.dtype).name}, "
            f"{describe_size(row)} each, more than {what} ({describe_size(max(0, room))}); nothing was read: check the "
            f"input, and {hint}"
        )


def choose_batch(
    requested: int,
    per_sequence: int,
    memory: int | None = None,
    used: int | None = None,
    reserve: int = RESERVE,
    parts: PartsHold | None = None,
) -> BatchChoice:
    """The largest batch size, at most `requested` and at least 1, that keeps the process
    within `memory` bytes (default: `default_budget`), `used` (default: the RSS now) being
    held already, `reserve` kept for the writer (`writer_reserve`) and, with `parts`, what
    its threads hold of the batch's parts (`parts_reserve`). A `memory` too small for even
    one sequence is refused with what it would take; the default budget always allows one."""
    used = current_rss() if used is None else used
    parts = parts or PartsHold(0, 0)
    one = per_sequence + parts.of(1)
    budget = default_budget(used, one, reserve) if memory is None else memory
    room = budget - used - reserve
    if memory is not None and room < one:
        needed = used + reserve + one
        raise SelectionError(
            f"--memory {describe_size(memory)}: TensorFlow and the model already hold {describe_size(used)}, and recording "
            f"one sequence at a time needs about {describe_size(reserve + one)} more; give at least "
            f"--memory {describe_size(needed, up=True)}"
        )
    # the parts grow with the batch up to their most, then stay
    size = room // max(1, per_sequence + parts.per_sequence)
    if parts.of(size) >= parts.most:
        size = (room - parts.most) // max(1, per_sequence)
    size = max(1, min(requested, size))
    return BatchChoice(
        size,
        requested,
        budget,
        used,
        per_sequence,
        given=memory is not None,
        reserve=reserve + parts.of(size),
    )
