"""How the cost of `gatetrace record` grows with the model: units, steps, cells and value columns.

    python bench/growth.py [--rounds 3]

Whole processes at default settings (no --batch-size, no --memory), as bench/record.py's
`whole_process` measures them: per configuration, the marginal cost of 256 sequences of
`gatetrace record` (the time at 3 x 256 sequences minus the time at 256, over 2) against a script that runs only the forward pass of the same checkpoint over the same
file. One configuration changes one thing from the benchmark model (2 x BasicLSTMCell(256),
static_rnn, 50 steps of 64 inputs, both gate value columns, states):

- units 64, 256, 1024;  steps 10, 50, 500;  cells 1, 2, 4;
- value columns: `--values activation` (one), the default (preactivation and activation),
  and the default with `contributions` (the parts); states are always recorded.

Each row: forward and record seconds per 256 sequences, their ratio, and the record's
throughput in gate and state rows per second and in MB written per second. Medians of
`--rounds` interleaved rounds. Prints a table with the processor and writes
bench/growth_results.json.
"""

from __future__ import annotations

import argparse
import json
import os
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
from record import FORWARD_SCRIPT, _cpu_name

HERE = Path(__file__).resolve().parent
FEATURES, SEQUENCES = 64, 256
BASE = {"units": 256, "steps": 50, "cells": 2, "values": "preactivation,activation"}
CONFIGS = [
    {**BASE, "units": 64},
    BASE,
    {**BASE, "units": 1024},
    {**BASE, "steps": 10},
    {**BASE, "steps": 500},
    {**BASE, "cells": 1},
    {**BASE, "cells": 4},
    {**BASE, "values": "activation"},
    {**BASE, "values": "preactivation,activation,contributions"},
]


def build(root: Path, units: int, steps: int, cells: int) -> tuple[str, str]:
    """The model of one configuration, saved as a checkpoint: (path, output tensor name)."""
    from tracer._tf import tf, v1

    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, steps, FEATURES], name="x")
        cell = v1.nn.rnn_cell.MultiRNNCell(
            [v1.nn.rnn_cell.BasicLSTMCell(units) for _ in range(cells)]
        )
        outputs, _ = v1.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32)
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            path = v1.train.Saver().save(session, str(root / "model.ckpt"))
    return path, outputs[-1].name


def name_of(c: dict) -> str:
    return f"units={c['units']} steps={c['steps']} cells={c['cells']} values={c['values']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tmp", default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gatetrace-bench-growth-", dir=args.tmp))
    small, large, forward_large = 1, 3, 9  # in 256 sequences
    try:
        setups = []
        for k, c in enumerate(CONFIGS):
            folder = root / f"model{k}"
            path, output = build(folder, c["units"], c["steps"], c["cells"])
            files = {}
            for n in (small, large, forward_large):
                files[n] = folder / f"x{n}.npy"
                np.save(
                    files[n],
                    np.random.RandomState(n)
                    .randn(n * SEQUENCES, c["steps"], FEATURES)
                    .astype(np.float32),
                )
            setups.append((c, path, output, files))

        def run(argv: list[str]) -> float:
            start = time.perf_counter()
            subprocess.run([sys.executable, *argv], check=True, capture_output=True)
            return time.perf_counter() - start

        per: dict[str, dict[str, list[float]]] = {
            name_of(c): {"forward": [], "record": [], "rows": [], "bytes": []} for c in CONFIGS
        }
        for r in range(args.rounds):
            order = setups if r % 2 == 0 else setups[::-1]
            for c, path, output, files in order:
                t = {}
                for n in (small, forward_large):
                    t[("forward", n)] = run(
                        ["-c", FORWARD_SCRIPT, path, str(files[n]), output, str(SEQUENCES)]
                    )
                for n in (small, large):
                    out = root / f"out-{n}"
                    t[("record", n)] = run(
                        [
                            "-m",
                            "tracer.cli",
                            "record",
                            path,
                            "--feed",
                            f"x={files[n]}",
                            "--out",
                            str(out),
                            "--quiet",
                            "--values",
                            c["values"],
                        ]
                    )
                    if n == large:
                        manifest = json.loads((out / "manifest.json").read_text())
                        rows = manifest["rows"]["gates"] + manifest["rows"]["states"]
                        size = sum(f.stat().st_size for f in out.rglob("*.parquet"))
                    shutil.rmtree(out)
                p = per[name_of(c)]
                p["forward"].append(
                    (t[("forward", forward_large)] - t[("forward", small)])
                    / (forward_large - small)
                )
                p["record"].append((t[("record", large)] - t[("record", small)]) / (large - small))
                p["rows"].append(rows / large)
                p["bytes"].append(size / large)
        table = []
        for c in CONFIGS:
            p = per[name_of(c)]
            ratios = [rec / fwd for rec, fwd in zip(p["record"], p["forward"], strict=True)]
            record = statistics.median(p["record"])
            table.append(
                {
                    **c,
                    "forward_s": round(statistics.median(p["forward"]), 3),
                    "record_s": round(record, 3),
                    "ratio": round(statistics.median(ratios), 2),
                    "rows_per_s": round(p["rows"][0] / record),
                    "mb_per_s": round(p["bytes"][0] / record / 1e6, 1),
                    "ratios": [round(x, 2) for x in ratios],
                }
            )
        results = {
            "processor": _cpu_name(),
            "cpus": os.cpu_count(),
            "per": f"{SEQUENCES} sequences, default settings",
            "rounds": args.rounds,
            "table": table,
        }
        (HERE / "growth_results.json").write_text(json.dumps(results, indent=2) + "\n")
        print(
            f"{results['processor']}, {results['cpus']} CPUs; seconds per {SEQUENCES} sequences, medians of {args.rounds} rounds"
        )
        for row in table:
            print(
                f"{name_of(row):70s} forward {row['forward_s']:7.3f}  record {row['record_s']:7.3f}  {row['ratio']:6.2f}x  "
                f"{row['rows_per_s']:>12,} rows/s  {row['mb_per_s']:6.1f} MB/s"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
