"""What recording in tasks costs: whole `gatetrace record` processes, one against several.

    python bench/parallel.py [--rounds 3] [--sequences 2048]

Model: the benchmark model of bench/record.py (a 2-layer BasicLSTMCell(256) under
static_rnn, T=50, D=64), batch 256. Each round runs, in turn, as a user would:

1. `gatetrace record` in one process;
2. `--workers 1 --task-size 1`: the same work as one task per batch on a pool of one
   process, so that (2 - 1) / tasks is the overhead of a task (submitting it, opening its
   shard, its progress files) plus, once, the pool and the driver's own model load;
3. `--workers 2 --task-size 1`, and 4. `--engine dask --workers 2 --task-size 1`
   (a LocalCluster), when the machine has two cores for them.

Prints medians over rounds and writes bench/parallel_results.json, with the processor.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from record import BATCH, FEATURES, STEPS, _cpu_name, build_model


def run(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tracer.cli", *argv], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sequences", type=int, default=2048)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gatetrace-bench-parallel-"))
    try:
        _, _, _, model = build_model(root)
        x = root / "x.npy"
        np.save(
            x, np.random.RandomState(0).randn(args.sequences, STEPS, FEATURES).astype(np.float32)
        )
        tasks = -(-args.sequences // BATCH)
        base = ["record", model, "--feed", f"x={x}", "--quiet", "--batch-size", str(BATCH)]
        configs = {
            "one process": [],
            "--workers 1, a task per batch": ["--workers", "1", "--task-size", "1"],
            "--workers 2, a task per batch": ["--workers", "2", "--task-size", "1"],
            "--engine dask --workers 2, a task per batch": [
                "--engine",
                "dask",
                "--workers",
                "2",
                "--task-size",
                "1",
            ],
        }
        times: dict[str, list[float]] = {name: [] for name in configs}
        for r in range(args.rounds):
            for k, (name, extra) in enumerate(configs.items()):
                out = root / f"out-{r}-{k}"
                times[name].append(run([*base, "--out", str(out), *extra]))
                shutil.rmtree(out)
        medians = {name: statistics.median(t) for name, t in times.items()}
        one = medians["one process"]
        result = {
            "processor": _cpu_name(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "sequences": args.sequences,
            "batch": BATCH,
            "tasks": tasks,
            "rounds": args.rounds,
            "seconds": medians,
            "all_seconds": times,
            "overhead_per_task_s": (medians["--workers 1, a task per batch"] - one) / tasks,
        }
        (HERE / "parallel_results.json").write_text(json.dumps(result, indent=1) + "\n")
        print(
            f"{args.sequences} sequences, {tasks} batches of {BATCH}; {result['processor']}, {result['cpus']} CPUs; medians of {args.rounds} rounds"
        )
        for name, t in medians.items():
            print(f"  {name:45s} {t:7.2f} s  {t / one:5.2f}x")
        print(
            f"  overhead per task (pool of one against one process): {result['overhead_per_task_s']:.2f} s"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
