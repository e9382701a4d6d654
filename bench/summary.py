"""What a summary recording (`gatetrace record --summary`) costs, beside a full recording.

    python bench/summary.py [--whole-rounds 5] [--sizes 1000,8000]

Model: the benchmark model of bench/record.py (a 2-layer MultiRNNCell of BasicLSTMCell(256)
under static_rnn, T=50 steps of D=64 inputs). Measured as a user runs it:

1. whole processes (`record.whole_process`): the marginal cost of a batch of
   `gatetrace record --quiet` at default settings, full and with `--summary`, against a script
   running only the forward pass; rounds interleave the runs; medians of per-round ratios;
2. in one process, side by side in alternating order: the forward pass, and one `Session.run`
   of every column's statistics (what --summary fetches instead of the gates);
3. the peak RSS and the bytes on disk of `gatetrace record --summary` at each of `--sizes`
   sequences, in fresh processes at the default memory budget (the output's size does not
   grow with the sequences).

The issue's target: --summary <= 1.3x the forward pass, whole processes. Prints the figures
with the processor and writes bench/summary_results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record as bench  # noqa: E402  (bench/record.py: the model and the whole-process method)

import tracer  # noqa: E402
from recorders import Bins  # noqa: E402
from tracer.run import recording  # noqa: E402

HERE = Path(__file__).resolve().parent


def in_process(model_path: str, output_name: str, rounds: int) -> dict:
    """The forward pass and the summary's one run, side by side in one process."""
    x = np.random.RandomState(0).randn(bench.BATCH, bench.STEPS, bench.FEATURES).astype(np.float32)
    with tracer.load_model(model_path) as model:
        _, plan, feed, run = recording._prepare(model, {"x": x}, None, summary=Bins())
        output = model.graph.get_tensor_by_name(output_name)
        forward = lambda: model.session.run(output, feed)  # noqa: E731
        summary = lambda: run(feed)  # noqa: E731
        for f in (forward, summary):
            f()
        times: dict[str, list[float]] = {"forward": [], "summary": []}
        for r in range(rounds):
            order = [("forward", forward), ("summary", summary)]
            for name, f in order if r % 2 == 0 else order[::-1]:
                start = time.perf_counter()
                f()
                times[name].append(time.perf_counter() - start)
    ratios = [s / f for s, f in zip(times["summary"], times["forward"], strict=True)]
    return {
        "forward_s": round(statistics.median(times["forward"]), 4),
        "summary_run_s": round(statistics.median(times["summary"]), 4),
        "ratio": round(statistics.median(ratios), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--whole-rounds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=9, help="in-process rounds")
    parser.add_argument("--sizes", default="1000,8000")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gatetrace-bench-summary-"))
    try:
        session, _, output, model_path = bench.build_model(root)
        session.close()
        results = {
            "model": "2 x BasicLSTMCell(256), static_rnn, T=50, D=64",
            "machine": {"cpus": os.cpu_count(), "processor": bench._cpu_name()},
            "in_process": in_process(model_path, output.name, args.rounds),
            "whole_process": bench.whole_process(
                model_path,
                output.name,
                root,
                args.whole_rounds,
                variants={"summary": ["--summary"]},
            ),
            "summary_rss": [
                bench.peak_rss(model_path, int(n), root, ("--summary",))
                for n in args.sizes.split(",")
            ],
        }
        (HERE / "summary_results.json").write_text(json.dumps(results, indent=2) + "\n")
        w, p = results["whole_process"], results["in_process"]
        print(
            f"{results['model']}; {results['machine']['cpus']} CPUs ({results['machine']['processor']})"
        )
        print(
            f"whole processes, per batch of {bench.BATCH}: forward {w['forward_s_per_batch']} s, "
            f"full record {w['record_s_per_batch']} s ({w['ratio']}x), "
            f"--summary {w['summary_s_per_batch']} s ({w['summary_ratio']}x)"
        )
        print(
            f"in one process: forward {p['forward_s']} s, the summary's run {p['summary_run_s']} s ({p['ratio']}x)"
        )
        for r in results["summary_rss"]:
            print(
                f"--summary at {r['sequences']:,} sequences: peak RSS {r['peak_rss_mb']} MB, "
                f"{r['bytes_on_disk'] / 1e6:.2f} MB on disk"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
