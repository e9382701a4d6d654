"""What the page checksums cost the writer: one batch's part files written with and without them.

    python bench/checksums.py [--rounds 7]

One batch of bench/record.py's model (2 x BasicLSTMCell(256), 50 steps, 256 sequences): per
cell four gate files of two float columns and two state files of one, 3,276,800 rows each,
random float32 values, cut into row groups and written by the default layout's writer
(`recorders.write.plain`, one thread) into a sink that only counts the bytes, so that only the
encoding is timed. Each round writes the batch with the CRC32 of every page (what the writer
does) and without (the CRC replaced by 0, the only difference), in alternating order; the key
arrays are new each round (`KeyCache`), so their pages are encoded, and checksummed, once a
round as in a recording. Prints the medians of the CPU seconds (`time.process_time`) with the
processor and writes bench/checksums_results.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pyarrow as pa

from recorders.write import plain, rowgroups
from recorders.write.keys import KeyCache

STEPS, UNITS, BATCH, CELLS = 50, 256, 256, 2
FILES = [2] * 4 + [1] * 2  # value columns of each file of a cell: four gates, two states
HERE = Path(__file__).resolve().parent


class Counted:
    """A sink that keeps nothing: the bytes written, counted."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data) -> int:
        n = memoryview(data).nbytes
        self.size += n
        return n


def batch(seed: int) -> list[dict[str, np.ndarray]]:
    """Each file's value columns, [examples, steps, units] float32."""
    rng = np.random.default_rng(seed)
    names = {1: ["value"], 2: ["preactivation", "activation"]}
    return [
        {name: rng.standard_normal((BATCH, STEPS, UNITS), dtype=np.float32) for name in names[n]}
        for _ in range(CELLS)
        for n in FILES
    ]


def write(files: list[dict[str, np.ndarray]]) -> tuple[float, int]:
    """CPU seconds and bytes of writing the batch's files, with fresh key arrays."""
    keys, examples, steps = KeyCache(), np.arange(BATCH), np.arange(STEPS, dtype=np.int32)
    start, size = time.process_time(), 0
    for columns in files:
        sink = Counted()
        plain.write_plain(
            sink,
            rowgroups.chunks(examples, steps, columns, None, keys),
            b"{}",
            "fast",
        )
        size += sink.size
    return time.process_time() - start, size


def cpu_name() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    files = batch(0)
    write(files)  # warm: pages touched, lz4 loaded
    times: dict[str, list[float]] = {"with": [], "without": []}
    sizes = {}
    for r in range(args.rounds):
        for how in ("with", "without") if r % 2 == 0 else ("without", "with"):
            if how == "with":
                seconds, sizes[how] = write(files)
            else:
                with mock.patch.object(plain, "crc32", lambda data, value=0: 0):
                    seconds, sizes[how] = write(files)
            times[how].append(seconds)
    with_, without = statistics.median(times["with"]), statistics.median(times["without"])
    delta = statistics.median(a - b for a, b in zip(times["with"], times["without"], strict=True))
    result = {
        "processor": cpu_name(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "rounds": args.rounds,
        "files": len(files),
        "bytes": sizes["with"],
        "cpu_s_with": round(with_, 4),
        "cpu_s_without": round(without, 4),
        "cpu_s_added": round(delta, 4),
        "gb_per_s_of_crc": round(sizes["with"] / delta / 1e9, 2) if delta > 0 else None,
        "times": times,
    }
    print(
        f"{result['processor']}: one batch's {len(files)} part files, {sizes['with'] / 1e6:.0f} MB: "
        f"{with_:.3f} CPU s with the page checksums, {without:.3f} s without, "
        f"{delta:.3f} s added (medians of {args.rounds})"
    )
    (HERE / "checksums_results.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
