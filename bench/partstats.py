"""What the statistics a gate's part file carries cost while recording (`recorders.write.partstats`).

    python bench/partstats.py [--rounds 5] [--small 2] [--large 10]

Whole processes as a user runs them: `gatetrace record MODEL --feed x=FILE --out OUT --quiet`
at default settings, on the model of bench/record.py (two LSTM layers of 256 units, 50 steps,
batches of 256), against the same command in a process where the statistics are turned off
(`Tally.add` and `Tally.footer` do nothing: nothing else differs). Each round runs both at
`--small` and `--large` batches, in alternating order; the cost of a batch is the difference
over the difference in batches (a process's start, some seconds, left out). Medians of the
per-round figures; the target: the statistics cost at most 2% of a batch. Also the ratio of
the whole processes at `--large` batches (their start, with numba's import, included). Prints the figures
with the processor and writes bench/partstats_results.json.
"""

from __future__ import annotations

import argparse
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
WITH = "import sys\nfrom tracer.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--small", type=int, default=2)
    parser.add_argument("--large", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        session, _, _, model = build_model(root)
        session.close()
        files = {}
        for n in (args.small, args.large):
            files[n] = root / f"x{n}.npy"
            x = np.random.RandomState(n).randn(n * BATCH, STEPS, FEATURES).astype(np.float32)
            np.save(files[n], x)

        def run(script: str, n: int) -> float:
            out = root / "out"
            argv = [
                "record",
                model,
                "--feed",
                f"x={files[n]}",
                "--out",
                str(out),
                "--quiet",
                "--overwrite",
            ]
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", script, *argv], check=True, capture_output=True)
            return time.perf_counter() - start

        run(WITH, args.small)  # the compiled loop made and cached once, as a user's first run does
        per_round: dict[str, list[float]] = {
            "with": [],
            "without": [],
            "ratio": [],
            "whole_ratio": [],
        }
        for r in range(args.rounds):
            order = [("with", WITH), ("without", WITHOUT)]
            if r % 2:
                order.reverse()
            t = {}
            for name, script in order:
                for n in (args.small, args.large):
                    t[(name, n)] = run(script, n)
            batch = {
                name: (t[(name, args.large)] - t[(name, args.small)]) / (args.large - args.small)
                for name in ("with", "without")
            }
            per_round["with"].append(batch["with"])
            per_round["without"].append(batch["without"])
            per_round["ratio"].append(batch["with"] / batch["without"])
            per_round["whole_ratio"].append(t[("with", args.large)] / t[("without", args.large)])
            print(f"round {r}: {batch['with']:.3f} s a batch with, {batch['without']:.3f} without")
        results = {
            "processor": _cpu_name(),
            "cpus": os.cpu_count(),
            "batch": [BATCH, STEPS, 256],
            "median_seconds_per_batch": {
                k: round(statistics.median(per_round[k]), 3) for k in ("with", "without")
            },
            "median_ratio": round(statistics.median(per_round["ratio"]), 4),
            "ratios": [round(x, 4) for x in per_round["ratio"]],
            # the whole processes at --large batches, their start (numba's import included) too
            "median_whole_process_ratio": round(statistics.median(per_round["whole_ratio"]), 4),
            "target_ratio": TARGET,
        }
    (HERE / "partstats_results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
