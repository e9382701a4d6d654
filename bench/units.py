"""How fast `gatetrace units` ranks every unit, against one read of the same columns.

    python bench/units.py [--sequences 1000] [--rounds 3]

Records the model of bench/record.py (2 x BasicLSTMCell(256), T=50) on `--sequences` random
sequences (`bench.read.make_recording`: 102.4M gate rows at 1000), labels every (example, step)
with a random binary label, then times, in rounds side by side, each a fresh process:
- read: one pass over every column `units` scores (each gate's preactivation and activation,
  each state), `Recording.blocks`, nothing else;
- sorts: the same read, and the sorts no exact ranking here can go without: each unit of each
  preactivation and state sorted once (numpy's 64-bit sort of the values packed with their
  positions, 16 units at a time, the columns in a thread a core as `units` takes them), nothing
  else: the floor of the method;
- units: the whole `gatetrace units RUN --labels labels.npy` process at default settings
  (20 shuffles).
Medians of `--rounds`; the issue's target: units <= 3x read. Also the peak memory of each
process (GNU time's). Prints the figures with the processor and writes bench/units_results.json.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from read import arguments, make_recording
from record import _cpu_name

HERE = Path(__file__).resolve().parent

READ = """
import sys
from recorders import Recording
from recorders.read.units import targets
rec = Recording(sys.argv[1])
for cell, table, name, column in targets(rec):
    for block in rec.blocks(table, cell, name, column):
        pass
"""


SORTS = """
import os
import sys
from concurrent.futures import ThreadPoolExecutor
import numpy as np
from recorders import Recording
from recorders.read.labels import gather, read_labels
from recorders.read.units import targets
rec = Recording(sys.argv[1])
labels = read_labels(sys.argv[2])

def sort(target):
    cell, table, name, column = target
    g = gather(rec, table, cell, name, column, labels, check=False)
    if column == "activation":  # ranked from its preactivation's order
        return
    n = len(g.labels)
    positions = np.arange(n, dtype=np.uint64)
    for a in range(0, g.units, 16):
        bits = g.columns(a, a + 16).T.copy().view(np.uint32)
        key = (bits ^ ((bits.view(np.int32) >> 31).view(np.uint32) | np.uint32(0x80000000))).astype(np.uint64)
        key <<= np.uint64(32)
        key |= positions
        key.sort(axis=1)

with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
    list(pool.map(sort, targets(rec)))
"""


def _timed(command: list[str]) -> tuple[float, int]:
    """Seconds and peak resident kilobytes of one child process. The peak comes from GNU time
    (`/usr/bin/time -f %M`, 0 where it is missing): a child forked from this process would
    report this process's own peak, the recording's."""
    timer = ["/usr/bin/time", "-f", "%M"] if Path("/usr/bin/time").exists() else []
    start = time.perf_counter()
    done = subprocess.run(
        [*timer, *command], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    took = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return took, int(done.stderr.strip().splitlines()[-1]) if timer else 0


def main() -> None:
    args = arguments(__doc__).parse_args()
    import numpy as np
    from record import STEPS

    with tempfile.TemporaryDirectory(prefix="gatetrace-bench-units-", dir=args.tmp) as tmp:
        root = Path(tmp)
        folder, manifest = make_recording(root, args.sequences)
        labels = np.random.RandomState(1).randint(0, 2, (args.sequences, STEPS)).astype(bool)
        np.save(root / "labels.npy", labels)
        gatetrace = str(Path(sys.executable).with_name("gatetrace"))
        runs: dict[str, list[float]] = {"read": [], "sorts": [], "units": []}
        peak: dict[str, int] = {"read": 0, "sorts": 0, "units": 0}
        commands = {
            "read": [sys.executable, "-c", READ, str(folder)],
            "sorts": [sys.executable, "-c", SORTS, str(folder), str(root / "labels.npy")],
            "units": [gatetrace, "units", str(folder), "--labels", str(root / "labels.npy")],
        }
        _timed(commands["read"])  # warm-up: every file in the page cache
        for r in range(args.rounds):
            for what in list(commands) if r % 2 == 0 else list(commands)[::-1]:
                command = commands[what]
                took, kb = _timed(command)
                runs[what].append(took)
                peak[what] = max(peak[what], kb)
    median = {k: statistics.median(v) for k, v in runs.items()}
    result = {
        "processor": _cpu_name(),
        "sequences": args.sequences,
        "gate_rows": manifest["rows"]["gates"],
        "state_rows": manifest["rows"]["states"],
        "rounds": runs,
        "median_seconds": median,
        "units_over_read": median["units"] / median["read"],
        "sorts_over_read": median["sorts"] / median["read"],
        "target": "units <= 3x read",
        "peak_rss_kb": peak,
    }
    print(
        f"{_cpu_name()}: {result['gate_rows']:,} gate rows and {result['state_rows']:,} state rows; "
        f"read {median['read']:.2f} s, read and sorts {median['sorts']:.2f} s "
        f"({result['sorts_over_read']:.2f}x), gatetrace units {median['units']:.2f} s "
        f"({result['units_over_read']:.2f}x; target 3x); peak RSS: read {peak['read'] / 1024:.0f} MB, "
        f"units {peak['units'] / 1024:.0f} MB"
    )
    (HERE / "units_results.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
