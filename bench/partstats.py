"""What the statistics a gate's part file carries cost while recording (`recorders.write.partstats`).

    python bench/partstats.py [--rounds 9] [--small 1] [--large 6] [--tmp /dev/shm]

Whole processes as a user runs them: `gatetrace record MODEL --feed x=FILE --out OUT --quiet`
at default settings, on the model of bench/record.py (two LSTM layers of 256 units, 50 steps,
batches of 256), against the same command in a process where the statistics are turned off
(`Tally.add` and `Tally.footer` do nothing: nothing else differs). Each round runs both at
`--small` and `--large` batches, in alternating order; the cost of a batch is the difference
over the difference in batches (a process's start, some seconds, left out), in wall time
and in CPU time (user and system, of the process). The recordings are written into `--tmp`
(by default /dev/shm where there is one: memory, so that the disk's writeback, which varies
by tens of percent from one run to the next, stays out of the figures). Medians of the
per-round figures; the target: the statistics cost at most 2% of a batch. The process with
the statistics also counts their own CPU time (every thread's time in `Tally.add` and
`Tally.footer`): their share of a batch's CPU time, steadier than the differences of whole
runs, which vary by tens of percent from run to run on a shared virtual machine. Also the ratio of
the whole processes at `--large` batches (their start, with numba's import, included).

Two floors, measured the same way in processes whose `Tally.add` runs a compiled loop that does
less than any exact statistic can: `read` reads every activation once (a sum per unit), `count`
counts every activation into a bin of a histogram (bins 2^-8 wide, the arithmetic of the real
loop's second pass, nothing else): what one more read of the values, and what exact quantiles,
cost at the least in this recording. Prints the figures with the processor and writes
bench/partstats_results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from record import BATCH, FEATURES, STEPS, _cpu_name, build_model

HERE = Path(__file__).resolve().parent
TARGET = 1.02  # a batch with the statistics against one without

# `gatetrace record`'s own entry point, with the statistics turned off
WITHOUT = """
import sys
from recorders.write import partstats
partstats.Tally.add = lambda self, values, valid: None
partstats.Tally.footer = lambda self: {}
from tracer.cli import main
sys.exit(main(sys.argv[1:]))
"""
# the same, the CPU time spent counting the statistics (every thread's) printed at the end
WITH = """
import sys, threading, time
from recorders.write import partstats
spent, lock = [0.0], threading.Lock()

def timed(method):
    def counted(*args):
        start = time.thread_time()
        try:
            return method(*args)
        finally:
            with lock:
                spent[0] += time.thread_time() - start
    return counted

partstats.Tally.add = timed(partstats.Tally.add)
partstats.Tally.footer = timed(partstats.Tally.footer)
from tracer.cli import main
code = main(sys.argv[1:])
print("statistics", spent[0])
sys.exit(code)
"""
# the floors: `Tally.add` replaced by a loop that does only `FLOOR` (see the docstring), timed
# as in WITH; no statistics written
FLOOR = """
import numba
import numpy as np

@numba.njit(nogil=True)
def read(x):
    rows, steps, units = x.shape
    sums = np.zeros(units)
    for b in range(rows):
        for t in range(steps):
            row = x[b, t]
            for u in range(units):
                sums[u] += row[u]
    return sums.sum()

@numba.njit(nogil=True)
def count(x, counts):
    rows, steps, units = x.shape
    number = np.empty(units, np.int64)
    for b in range(rows):
        for t in range(steps):
            row = x[b, t]
            bins = counts[t]
            for u in range(units):
                number[u] = min(max(np.int64(np.floor(np.float64(row[u]) * 256.0)) + 256, 0), 512)
            for u in range(units):
                bins[number[u]] += 1

def add(self, values, valid):
    x = np.ascontiguousarray(values, dtype=np.float32)
    if FLOOR == "read":
        read(x)
    else:
        count(x, np.zeros((x.shape[1], 513), np.int64))

add(None, np.zeros((1, 1, 1), np.float32), None)  # compiled before the recording starts
partstats.Tally.add = add
partstats.Tally.footer = lambda self: {}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--small", type=int, default=1)
    parser.add_argument("--large", type=int, default=6)
    shm = Path("/dev/shm")
    parser.add_argument("--tmp", default=str(shm) if shm.is_dir() else None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        root = Path(tmp)
        session, _, _, model = build_model(root)
        session.close()
        files = {}
        for n in (args.small, args.large):
            files[n] = root / f"x{n}.npy"
            x = np.random.RandomState(n).randn(n * BATCH, STEPS, FEATURES).astype(np.float32)
            np.save(files[n], x)

        spent: list[float] = []  # the CPU seconds the statistics took, in each run

        def run(script: str, n: int) -> tuple[float, float]:
            """Wall and CPU seconds of one process, its recording removed after it."""
            out = root / "out"
            argv = ["record", model, "--feed", f"x={files[n]}", "--out", str(out), "--quiet"]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-c", script, *argv], check=True, capture_output=True, text=True
            )
            wall = time.perf_counter() - start
            counted = [line for line in done.stdout.splitlines() if line.startswith("statistics ")]
            spent.append(float(counted[-1].split()[1]) if counted else 0.0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            shutil.rmtree(out)
            cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            return wall, cpu

        run(WITH, args.small)  # the compiled loop made and cached once, as a user's first run does
        per_round: dict[str, list[float]] = {
            k: []
            for k in (
                "with",
                "without",
                "ratio",
                "cpu_ratio",
                "stats_share",
                "whole_ratio",
                "read_share",
                "count_share",
            )
        }
        floors = {
            name: WITH.replace(
                "partstats.Tally.add = timed",
                f"FLOOR = {name!r}\n{FLOOR}\npartstats.Tally.add = timed",
            )
            for name in ("read", "count")
        }
        for r in range(args.rounds):
            order = [("with", WITH), ("without", WITHOUT), *floors.items()]
            if r % 2:
                order.reverse()
            t = {}
            counted = {}
            for name, script in order:
                for n in (args.small, args.large):
                    t[(name, n)] = run(script, n)
                    counted[(name, n)] = spent[-1]
            extra = args.large - args.small
            wall = {
                k: (t[(k, args.large)][0] - t[(k, args.small)][0]) / extra
                for k in ("with", "without")
            }
            cpu = {
                k: (t[(k, args.large)][1] - t[(k, args.small)][1]) / extra
                for k in ("with", "without")
            }
            per_round["with"].append(wall["with"])
            per_round["without"].append(wall["without"])
            per_round["ratio"].append(wall["with"] / wall["without"])
            per_round["cpu_ratio"].append(cpu["with"] / cpu["without"])
            # the statistics' own CPU time a batch, against a batch's CPU time without them
            stats_cpu = (counted[("with", args.large)] - counted[("with", args.small)]) / extra
            per_round["stats_share"].append(stats_cpu / cpu["without"])
            for name in floors:
                floor_cpu = (counted[(name, args.large)] - counted[(name, args.small)]) / extra
                per_round[f"{name}_share"].append(floor_cpu / cpu["without"])
            per_round["whole_ratio"].append(
                t[("with", args.large)][0] / t[("without", args.large)][0]
            )
            print(
                f"round {r}: a batch {wall['with']:.3f} s with, {wall['without']:.3f} s without; "
                f"CPU {cpu['with']:.3f} s with, {cpu['without']:.3f} s without; shares of it: "
                f"statistics {per_round['stats_share'][-1]:.3f}, read "
                f"{per_round['read_share'][-1]:.3f}, count {per_round['count_share'][-1]:.3f}"
            )
        results = {
            "processor": _cpu_name(),
            "cpus": os.cpu_count(),
            "batch": [BATCH, STEPS, 256],
            "median_seconds_per_batch": {
                k: round(statistics.median(per_round[k]), 3) for k in ("with", "without")
            },
            "median_ratio": round(statistics.median(per_round["ratio"]), 4),
            "ratios": [round(x, 4) for x in per_round["ratio"]],
            "median_cpu_ratio": round(statistics.median(per_round["cpu_ratio"]), 4),
            # measured inside the process (threads' CPU time in the statistics' code): steadier
            "median_statistics_share_of_batch_cpu": round(
                statistics.median(per_round["stats_share"]), 4
            ),
            # the least one more read of the activations, and an exact histogram, cost
            "median_floor_shares_of_batch_cpu": {
                name: round(statistics.median(per_round[f"{name}_share"]), 4) for name in floors
            },
            # the whole processes at --large batches, their start (numba's import included) too
            "median_whole_process_ratio": round(statistics.median(per_round["whole_ratio"]), 4),
            "target_ratio": TARGET,
        }
    (HERE / "partstats_results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
