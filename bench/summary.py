"""What a summary recording (`gatetrace record --summary`) costs, beside a full recording.

    python bench/summary.py [--whole-rounds 5] [--sizes 1000,8000]

Model: the benchmark model of bench/record.py (a 2-layer MultiRNNCell of BasicLSTMCell(256)
under static_rnn, T=50 steps of D=64 inputs). Measured as a user runs it:

1. whole processes (`record.whole_process`): the marginal cost of a batch of
   `gatetrace record --quiet` at default settings, full and with `--summary`, against a script
   running only the forward pass; rounds interleave the runs; medians of per-round ratios;
2. in one process, side by side in alternating order: the forward pass; the forward pass with
   every gate and state value read once in the graph (a sum of each tensor a full recording
   fetches); the same with the values stacked into a tensor a column; a batch's summary
   (its run and every column's statistics, one after the other), computed from the fetched
   arrays by the compiled loop (the default on a CPU) and in the graph (on a GPU, or without
   numba), wall and CPU seconds; and TensorBoard's way, the anchor:
   `tf.compat.v1.summary.histogram` of every gate and state tensor a full recording fetches,
   merged, run and written by a `FileWriter` (what a user would otherwise add to their graph);
3. the peak RSS and the bytes on disk of `gatetrace record --summary` at each of `--sizes`
   sequences, in fresh processes at the default memory budget (the output's size does not
   grow with the sequences).

The target: --summary at or below the full recording's ratio to the forward pass, whole
processes, in the same run. Prints the figures with the processor and writes
bench/summary_results.json.
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
from unittest import mock

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record as bench  # noqa: E402  (bench/record.py: the model and the whole-process method)

import tracer  # noqa: E402
from recorders import Bins  # noqa: E402
from tracer._tf import tf  # noqa: E402
from tracer.run.batch import Batch  # noqa: E402
from tracer.run.prepare import prepare, summarising  # noqa: E402
from tracer.run.select import Selection  # noqa: E402
from tracer.values import summaries  # noqa: E402
from tracer.values.fetch import FetchPlan  # noqa: E402

HERE = Path(__file__).resolve().parent


class _AtOnce:
    """A stand-in for the summary writer: each column's statistics computed when handed over
    (in the recording, on the writer's threads while the next batch runs)."""

    def add_later(self, compute) -> None:
        compute()


def in_process(model_path: str, output_name: str, rounds: int, logs: Path) -> dict:
    """In one process, side by side: the forward pass; the least any statistic in the graph
    costs (the forward pass and every gate and state value read once: a sum of each tensor a
    full recording fetches); the same values stacked into a tensor a column (what the graph's
    statistics reduce); a batch's summary computed from the fetched arrays by the compiled
    loop (the default on a CPU), and in the graph (on a GPU, or without numba), each run and
    every column's statistics computed, one after the other; TensorBoard's histograms of the
    same tensors, written to `logs`."""
    x = np.random.RandomState(0).randn(bench.BATCH, bench.STEPS, bench.FEATURES).astype(np.float32)
    with tracer.load_model(model_path) as model:
        prepared, plan, numpy_plan = prepare(model, {"x": x}, None)
        arrays = summarising(model, prepared, plan, numpy_plan, Selection(), Bins(), None)
        assert not summaries.in_graph(), "this benchmark needs numba installed and no GPU"
        with mock.patch.object(summaries.compiled, "available", lambda: False):
            in_graph = summarising(model, prepared, plan, numpy_plan, Selection(), Bins(), None)
        feed = prepared.feeds
        output = model.graph.get_tensor_by_name(output_name)
        assert isinstance(plan, FetchPlan)  # a graph's
        with model.graph.as_default():
            stacked = [plan.graph_values(c.cell, c.key[3], c.index) for c in in_graph.columns]
            read_once = [tf.reduce_sum(t) for t in plan.tensors]  # what a recording fetches
            one_each = [s[0, 0, 0] for s in stacked]
            histograms = tf.compat.v1.summary.merge(
                [
                    tf.compat.v1.summary.histogram(f"value_{k}", t)
                    for k, t in enumerate(plan.tensors)
                ]
            )
            writer = tf.compat.v1.summary.FileWriter(str(logs))  # (a graph's: not in eager mode)
        fetch = model.session.run
        written = iter(range(10**9))
        ids = np.arange(bench.BATCH)

        def summarise(how) -> None:
            how.run(Batch(feed)).write(_AtOnce(), Selection(), ids, bench.BATCH, None)

        runs = {
            "forward": lambda: fetch(output, feed),
            "read_once": lambda: fetch(read_once, feed),
            "stacked": lambda: fetch(one_each, feed),
            "summary": lambda: summarise(arrays),
            "summary_in_graph": lambda: summarise(in_graph),
            "tensorboard": lambda: writer.add_summary(fetch(histograms, feed), next(written)),
        }
        for f in runs.values():
            f()
        times: dict[str, list[float]] = {name: [] for name in runs}
        cpu: dict[str, list[float]] = {name: [] for name in runs}
        for r in range(rounds):
            order = list(runs.items())
            for name, f in order if r % 2 == 0 else order[::-1]:
                start, used = time.perf_counter(), time.process_time()
                f()
                times[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - used)
        writer.close()
        out_tensors = len(plan.tensors)
    forward = np.array(times["forward"])
    out = {f"{name}_s": round(statistics.median(t), 4) for name, t in times.items()}
    out.update({f"{name}_cpu_s": round(statistics.median(t), 4) for name, t in cpu.items()})
    for name in runs:
        if name != "forward":
            out[f"{name}_ratio"] = round(float(np.median(np.array(times[name]) / forward)), 2)
    out["tensors"] = out_tensors
    return out


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
            "in_process": in_process(model_path, output.name, args.rounds, root / "tensorboard"),
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
            f"in one process: forward {p['forward_s']} s; every value read once {p['read_once_s']} s "
            f"({p['read_once_ratio']}x), stacked {p['stacked_s']} s ({p['stacked_ratio']}x); "
            f"a batch's summary from the arrays (compiled loop) {p['summary_s']} s ({p['summary_ratio']}x, "
            f"{p['summary_cpu_s']} CPU s), in the graph {p['summary_in_graph_s']} s ({p['summary_in_graph_ratio']}x, "
            f"{p['summary_in_graph_cpu_s']} CPU s); the forward pass {p['forward_cpu_s']} CPU s; TensorBoard's "
            f"histograms of the same {p['tensors']} tensors, merged and written {p['tensorboard_s']} s "
            f"({p['tensorboard_ratio']}x)"
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
