"""What a held recording costs against a plain one (`gatetrace record --hold`), whole processes.

    python bench/hold.py [--rounds 5] [--sequences 512,1536]

Models: the benchmark network of bench/loops.py, a 2-layer MultiRNNCell of BasicLSTMCell(256),
T=50 steps of D=64 inputs, under `static_rnn` (unrolled: the graph rewritten) and `dynamic_rnn`
(control flow v2: the loop's body rewritten), the same weights. For each model and each number of
sequences, `gatetrace record` at default settings, plain and with 16 units of the lower layer's h
ablated (`--hold 'cell_0/basic_lstm_cell:h:0-15=0'`), as a user runs it: rounds interleave the
runs (reversed every other round). Reported: the medians of the whole-process times, the median of
the per-round ratios held / plain at each size, and the marginal cost of the extra sequences (the
time at the larger size minus the smaller) held against plain: the rewrite's fixed cost (a second
import and restore of the graph) shows in the first, what a held batch costs in the last.

Prints the figures with the processor and writes bench/hold_results.json. No target is set by
the issue; held recordings are expected to cost a fixed rewrite plus about what a plain batch costs.
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loops import FEATURES, STEPS, tf1_models  # noqa: E402
from record import _cpu_name  # noqa: E402

HOLD = "cell_0/basic_lstm_cell:h:0-15=0"
HERE = Path(__file__).resolve().parent


def run(model: str, inputs: Path, out: Path, held: bool) -> float:
    argv = [sys.executable, "-m", "tracer.cli", "record", model, "--feed", f"x={inputs}"]
    argv += ["--out", str(out), "--quiet", "--overwrite"] + (["--hold", HOLD] if held else [])
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sequences", default="512,1536")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sequences.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = tf1_models(root)
        files = {}
        for n in sizes:
            files[n] = root / f"x{n}.npy"
            np.save(files[n], np.random.RandomState(n).randn(n, STEPS, FEATURES).astype(np.float32))
        jobs = [(m, n, held) for m in models for n in sizes for held in (False, True)]
        times: dict[tuple[str, int, bool], list[float]] = {job: [] for job in jobs}
        for r in range(args.rounds):
            for model, n, held in jobs if r % 2 == 0 else list(reversed(jobs)):
                out = root / f"rec-{model}-{n}-{held}"
                times[(model, n, held)].append(run(models[model], files[n], out, held))
    small, large = sizes[0], sizes[-1]
    result: dict = {
        "machine": {"processor": _cpu_name(), "cpus": os.cpu_count()},
        "hold": HOLD,
        "rounds": args.rounds,
        "sequences": sizes,
        "seconds": {
            f"{m}@{n}{' held' if h else ''}": [round(t, 2) for t in v]
            for (m, n, h), v in times.items()
        },
    }
    for model in models:
        figures = {}
        for n in sizes:
            plain, held = times[(model, n, False)], times[(model, n, True)]
            figures[f"median_s@{n}"] = [
                round(statistics.median(plain), 2),
                round(statistics.median(held), 2),
            ]
            figures[f"ratio@{n}"] = round(
                statistics.median(h / p for p, h in zip(plain, held, strict=True)), 3
            )
        marginal = [
            (times[(model, large, h)][k] - times[(model, small, h)][k])
            for h in (False, True)
            for k in range(args.rounds)
        ]
        plain_m, held_m = marginal[: args.rounds], marginal[args.rounds :]
        ratios = [h / p for p, h in zip(plain_m, held_m, strict=True) if p > 0]
        figures["marginal_ratio"] = round(statistics.median(ratios), 3) if ratios else None
        result[model] = figures
    (HERE / "hold_results.json").write_text(json.dumps(result, indent=1) + "\n")
    m = result["machine"]
    print(f"{m['processor']}, {m['cpus']} CPUs; {args.rounds} rounds; --hold {HOLD}")
    for model in models:
        f = result[model]
        cells = ", ".join(
            f"{n} sequences: plain {f[f'median_s@{n}'][0]} s, held {f[f'median_s@{n}'][1]} s (x{f[f'ratio@{n}']})"
            for n in sizes
        )
        print(
            f"{model}: {cells}; the extra {large - small} sequences held / plain: x{f['marginal_ratio']}"
        )


if __name__ == "__main__":
    main()
