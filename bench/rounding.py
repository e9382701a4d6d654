"""What `gatetrace record --round-bits N` saves on disk and costs, whole processes.

    python bench/rounding.py [--rounds 3] [--sequences 1024]

Model: bench/record.py's (a 2-layer MultiRNNCell of BasicLSTMCell(256) under static_rnn, T=50
steps of D=64 inputs, random weights and inputs), recorded by `gatetrace record` as a user runs
it, in rounds that interleave the runs (reversed every other round):

- exact, at default settings (`fast`: floats plain and uncompressed), and with `--compression zstd`;
- `--round-bits 10` and `--round-bits 7` (compressed with zstd, their default), and
  `--round-bits 7 --compression lz4` and `fast`.

Reported for each: the median wall seconds and CPU seconds (user + system, the child's own), the
bytes on disk per stored value (every part file of gates/ and states/, keys included, over the
values they hold: two a gate row, one a state row), and the largest relative error of the
recorded activations of one gate against the exact recording's. Also, in this process, what
the rounding itself costs on the writer's threads: ns a value of `Rounding.apply` on one gate's
[256, 50, 256] values, against copying them. Prints the figures with the processor and writes
bench/rounding_results.json.
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

import numpy as np  # noqa: E402
from record import BATCH, FEATURES, STEPS, UNITS, _cpu_name, build_model  # noqa: E402

HERE = Path(__file__).resolve().parent
RUNS = {
    "exact (fast)": (),
    "exact, zstd": ("--compression", "zstd"),
    "--round-bits 10": ("--round-bits", "10"),
    "--round-bits 7": ("--round-bits", "7"),
    "--round-bits 7, lz4": ("--round-bits", "7", "--compression", "lz4"),
    "--round-bits 7, fast": ("--round-bits", "7", "--compression", "fast"),
}


def run(model: str, inputs: Path, out: Path, flags: tuple[str, ...]) -> tuple[float, float]:
    """One `gatetrace record` process: its wall seconds and CPU seconds."""
    argv = [sys.executable, "-m", "tracer.cli", "record", model, "--feed", f"x={inputs}"]
    argv += ["--out", str(out), "--quiet", "--overwrite", *flags]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def bytes_per_value(out: Path) -> float:
    manifest = json.loads((out / "manifest.json").read_text())
    values = 2 * manifest["rows"]["gates"] + manifest["rows"]["states"]
    size = sum(p.stat().st_size for t in ("gates", "states") for p in (out / t).rglob("*.parquet"))
    return size / values


def largest_error(exact: Path, rounded: Path) -> float:
    from recorders import Recording

    a, b = Recording(exact), Recording(rounded)
    x = a.gate_array(a.cells[0], "f").astype(np.float64)
    y = b.gate_array(b.cells[0], "f").astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.abs(y - x) / np.abs(x)
    return float(np.nanmax(rel[x != 0]))


def rounding_cost(rounds: int) -> dict:
    """ns a value of `Rounding.apply` and of a plain copy, on a gate's values cut out of a
    fetched [batch, steps, 4 x units] tensor (strided, as the writer's threads take them)."""
    from recorders.write.rounding import Rounding

    fetched = np.random.RandomState(0).randn(BATCH // 4, STEPS, 4 * UNITS).astype(np.float32)
    gate = fetched[:, :, UNITS : 2 * UNITS]
    times: dict[str, list[float]] = {"copy": [], "round": []}
    for _ in range(rounds * 5):
        start = time.perf_counter()
        np.ascontiguousarray(gate)
        times["copy"].append(time.perf_counter() - start)
        start = time.perf_counter()
        Rounding(7).apply(gate)
        times["round"].append(time.perf_counter() - start)
    return {k: round(min(v) / gate.size * 1e9, 3) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sequences", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        session, _, _, model = build_model(root)
        session.close()
        inputs = root / "x.npy"
        x = np.random.RandomState(1).randn(args.sequences, STEPS, FEATURES).astype(np.float32)
        np.save(inputs, x)
        names = list(RUNS)
        walls: dict[str, list[float]] = {n: [] for n in names}
        cpus: dict[str, list[float]] = {n: [] for n in names}
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                wall, cpu = run(model, inputs, root / f"rec{names.index(name)}", RUNS[name])
                walls[name].append(wall)
                cpus[name].append(cpu)
        exact = root / "rec0"
        results = {
            "processor": _cpu_name(),
            "cpus": os.cpu_count(),
            "rounds": args.rounds,
            "sequences": args.sequences,
            "runs": {
                name: {
                    "flags": " ".join(RUNS[name]),
                    "median_s": round(statistics.median(walls[name]), 2),
                    "median_cpu_s": round(statistics.median(cpus[name]), 2),
                    "bytes_per_value": round(bytes_per_value(root / f"rec{k}"), 3),
                    "largest_relative_error": largest_error(exact, root / f"rec{k}"),
                    "seconds": [round(t, 2) for t in walls[name]],
                }
                for k, name in enumerate(names)
            },
            "rounding_ns_per_value": rounding_cost(args.rounds),
        }
    (HERE / "rounding_results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(
        f"{results['processor']}, {results['cpus']} CPUs; {args.rounds} rounds of {args.sequences} sequences"
    )
    print(f"{'':24}{'wall s':>8}{'CPU s':>8}{'bytes/value':>13}{'largest rel. error':>20}")
    for name, r in results["runs"].items():
        print(
            f"{name:24}{r['median_s']:>8.2f}{r['median_cpu_s']:>8.2f}{r['bytes_per_value']:>13.3f}"
            f"{r['largest_relative_error']:>20.3g}"
        )
    cost = results["rounding_ns_per_value"]
    print(f"rounding: {cost['round']} ns a value (a copy of the same values: {cost['copy']} ns)")


if __name__ == "__main__":
    main()
