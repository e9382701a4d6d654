"""The memory budget held: the batch size a budget chooses, and the peak RSS of the whole process.

    python bench/memory.py [--units 1024] [--steps 500] [--sequences 64] [--memory SIZE]
    python bench/memory.py --benchmark        # the targets, on bench/record.py's model

Model: --layers BasicLSTMCell(--units) in a MultiRNNCell under static_rnn, --steps steps of 64
inputs, random weights and inputs. `gatetrace record` runs in a fresh process with no flag but
`--quiet` (or with `--memory`); the script prints the batch size the budget chose, the budget,
the process's peak RSS (VmHWM) and the time, and writes bench/memory_results.json.

`--benchmark` records bench/record.py's model (2 x BasicLSTMCell(256), 50 steps) on 3,584
sequences twice, at the default budget and with `--memory 1.1G`, and checks the targets: the
default under 1.4 GB (1,400,000,000 bytes: what TensorFlow, the model and the statistics' compiled
loops hold, about 759 MB, and the default room, 512 MiB) and `--memory 1.1G` within it, peak RSS
measured. (`--memory 1G` was the target before every recording loaded those loops: it is refused
now, the process holding too much at the start for one sequence beside the writer's reserve.)
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


# peak RSS, bytes: --memory flag -> target
TARGETS = {None: 1_400_000_000, "1.1G": int(1.1 * 2**30)}


def build(root: Path, units: int, steps: int, layers: int = 1) -> str:
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, steps, FEATURES], name="x")
        cells = [v1.nn.rnn_cell.BasicLSTMCell(units) for _ in range(layers)]
        cell = cells[0] if layers == 1 else v1.nn.rnn_cell.MultiRNNCell(cells)
        v1.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32)
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            path = root / "model" / "model.ckpt"
            v1.train.Saver().save(session, str(path))
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument(
        "--memory", default=None, help="pass --memory SIZE (default: no flag, the default budget)"
    )
    parser.add_argument(
        "--benchmark", action="store_true", help="check the targets on bench/record.py's model"
    )
    parser.add_argument("--tmp", default=None)
    args = parser.parse_args()
    if args.benchmark:
        args.units, args.layers, args.steps, args.sequences = 256, 2, 50, 3584
    root = Path(tempfile.mkdtemp(prefix="gatetrace-memory-", dir=args.tmp))
    try:
        model = build(root, args.units, args.steps, args.layers)
        x = root / "x.npy"
        np.save(
            x,
            np.random.RandomState(0).randn(args.sequences, args.steps, FEATURES).astype(np.float32),
        )
        flags = list(TARGETS) if args.benchmark else [args.memory]
        runs = [measure(root, model, x, args, flag) for flag in flags]
        results = runs[0] if len(runs) == 1 else {"runs": runs}
        (HERE / "memory_results.json").write_text(json.dumps(results, indent=2) + "\n")
        print(json.dumps(results, indent=2))
        if args.benchmark and not all(r["held"] for r in runs):
            sys.exit("a budget was not held")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def measure(root: Path, model: str, x: Path, args: argparse.Namespace, flag: str | None) -> dict:
    """One `gatetrace record` in a fresh process, at the budget `flag` sets (None: the default)."""
    out = root / f"out-{flag}"
    argv = [
        "record",
        model,
        "--feed",
        f"x={x}",
        "--out",
        str(out),
        "--quiet",
        *(["--memory", flag] if flag else []),
    ]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", RECORD, *argv], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(done.stderr)
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    manifest = json.loads((out / "manifest.json").read_text())
    lowered = re.search(r"batch size \d+ lowered to (\d+)[^\n]*", done.stdout)
    peak = measured["peak_kb"] * 1024
    shutil.rmtree(out, ignore_errors=True)
    cells = f"{args.layers} x " if args.layers > 1 else ""
    result = {
        "model": f"{cells}BasicLSTMCell({args.units}), static_rnn, T={args.steps}, D={FEATURES}",
        "processor": _cpu_name(),
        "cpus": os.cpu_count(),
        "sequences": args.sequences,
        "memory_flag": flag,
        "batch_size": int(lowered.group(1)) if lowered else 256,
        "said": lowered.group(0) if lowered else None,
        "peak_rss_bytes": peak,
        "peak_rss_mb": round(peak / 1e6),
        "seconds": round(seconds, 1),
        "rows": manifest["rows"],
    }
    if args.benchmark:
        result["target_bytes"] = TARGETS[flag]
        result["held"] = peak < TARGETS[flag]
    return result


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
