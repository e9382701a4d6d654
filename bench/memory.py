"""The memory budget on a large model: what batch size the default budget chooses, and the peak RSS.

    python bench/memory.py [--units 1024] [--steps 500] [--sequences 64] [--memory SIZE]

Model: one BasicLSTMCell(--units) under static_rnn, --steps steps of 64 inputs, random
weights and inputs. `gatetrace record` runs in a fresh process with no flag but `--quiet`
(or with `--memory`); the script prints the batch size the budget chose, the budget, the
process's peak RSS (VmHWM) and the time, and writes bench/memory_results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

from tracer._tf import tf, v1

FEATURES = 64
HERE = Path(__file__).resolve().parent

RECORD = """
import json, sys
from tracer.cli import main
code = main(sys.argv[1:])
status = open('/proc/self/status').read()
print(json.dumps({"code": code, "peak_kb": int(status.split('VmHWM:')[1].split()[0])}))
"""


def build(root: Path, units: int, steps: int) -> str:
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, steps, FEATURES], name="x")
        v1.nn.static_rnn(
            v1.nn.rnn_cell.BasicLSTMCell(units), tf.unstack(x, axis=1), dtype=tf.float32
        )
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            path = root / "model" / "model.ckpt"
            v1.train.Saver().save(session, str(path))
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument(
        "--memory", default=None, help="pass --memory SIZE (default: no flag, the default budget)"
    )
    parser.add_argument("--tmp", default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gatetrace-memory-", dir=args.tmp))
    try:
        model = build(root, args.units, args.steps)
        x = root / "x.npy"
        np.save(
            x,
            np.random.RandomState(0).randn(args.sequences, args.steps, FEATURES).astype(np.float32),
        )
        out = root / "out"
        argv = [
            "record",
            model,
            "--feed",
            f"x={x}",
            "--out",
            str(out),
            "--quiet",
            *(["--memory", args.memory] if args.memory else []),
        ]
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", RECORD, *argv], capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(done.stderr)
        measured = json.loads(done.stdout.strip().splitlines()[-1])
        manifest = json.loads((out / "manifest.json").read_text())
        lowered = re.search(r"batch size \d+ lowered to (\d+)[^\n]*", done.stdout)
        results = {
            "model": f"BasicLSTMCell({args.units}), static_rnn, T={args.steps}, D={FEATURES}",
            "processor": _cpu_name(),
            "cpus": os.cpu_count(),
            "sequences": args.sequences,
            "memory_flag": args.memory,
            "batch_size": int(lowered.group(1)) if lowered else 256,
            "said": lowered.group(0) if lowered else None,
            "peak_rss_mb": round(measured["peak_kb"] / 1024),
            "seconds": round(seconds, 1),
            "rows": manifest["rows"],
        }
        (HERE / "memory_results.json").write_text(json.dumps(results, indent=2) + "\n")
        print(json.dumps(results, indent=2))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
