"""How fast `gatetrace units` ranks every unit, against one read of the same columns.

    python bench/units.py [--sequences 1000] [--rounds 3]

Records the model of bench/record.py (2 x BasicLSTMCell(256), T=50) on `--sequences` random
sequences (`bench.read.make_recording`: 102.4M gate rows at 1000), labels every (example, step)
with a random binary label, then times, in rounds side by side:
- read: one pass over every column `units` scores (each gate's preactivation and activation,
  each state), `Recording.blocks` in a fresh process, nothing else;
- units: the whole `gatetrace units RUN --labels labels.npy` process at default settings
  (20 shuffles).
Medians of `--rounds`; the issue's target: units <= 3x read. Also the peak memory of each
process. Prints the figures with the processor and writes bench/units_results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from read import make_recording
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


def _timed(command: list[str]) -> tuple[float, int]:
    """Seconds and peak resident kilobytes of one child process."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return took, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--tmp", default=None, help="scratch folder (default: the system's temp folder)"
    )
    args = parser.parse_args()
    import numpy as np
    from record import STEPS

    with tempfile.TemporaryDirectory(prefix="gatetrace-bench-units-", dir=args.tmp) as tmp:
        root = Path(tmp)
        folder, manifest = make_recording(root, args.sequences)
        labels = np.random.RandomState(1).randint(0, 2, (args.sequences, STEPS)).astype(bool)
        np.save(root / "labels.npy", labels)
        gatetrace = str(Path(sys.executable).with_name("gatetrace"))
        runs: dict[str, list[float]] = {"read": [], "units": []}
        peak = {}
        for _ in range(args.rounds):
            runs["read"].append(_timed([sys.executable, "-c", READ, str(folder)])[0])
            took, peak["read_or_units_kb"] = _timed(
                [gatetrace, "units", str(folder), "--labels", str(root / "labels.npy")]
            )
            runs["units"].append(took)
    median = {k: statistics.median(v) for k, v in runs.items()}
    result = {
        "processor": _cpu_name(),
        "sequences": args.sequences,
        "gate_rows": manifest["rows"]["gates"],
        "state_rows": manifest["rows"]["states"],
        "rounds": runs,
        "median_seconds": median,
        "units_over_read": median["units"] / median["read"],
        "target": "units <= 3x read",
        "peak_rss_kb_of_any_child": peak["read_or_units_kb"],
    }
    print(
        f"{_cpu_name()}: {result['gate_rows']:,} gate rows and {result['state_rows']:,} state rows; "
        f"read {median['read']:.2f} s, gatetrace units {median['units']:.2f} s "
        f"({result['units_over_read']:.2f}x; target 3x); peak RSS {peak['read_or_units_kb'] / 1024:.0f} MB"
    )
    (HERE / "units_results.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
