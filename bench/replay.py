"""What replaying a dynamic_rnn costs, against the graph's own forward pass.

    python bench/replay.py [--rounds 7]

Model: a 2-layer MultiRNNCell of BasicLSTMCell(256) under `dynamic_rnn` (control flow
v2), T=50 steps of D=64 inputs, batch 256, random weights and inputs. Measured side by
side, in alternating order, each round:

1. forward: `Session.run` of the outputs;
2. replay: the numpy replay of both layers alone, from values fetched once;
3. fetch + replay: what recording a batch costs before writing: one `Session.run` of
   what enters and leaves the loop, then the replay and its check;
4. products only: the matrix products the replay computes (the input projection into a
   fresh preactivation buffer, then the recurrent product of every step), in the same
   blocks of rows on the same threads, and nothing else: a floor for any numpy replay.

Prints medians and per-round paired ratios to the forward pass; writes
bench/replay_results.json. The issue's target: replay <= 1x the forward pass.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

import tracer
from tracer._tf import tf, v1
from tracer.values.replay import _blas_threads, _row_blocks

STEPS, FEATURES, UNITS, BATCH = 50, 64, 256, 256
HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, STEPS, FEATURES], name="x")
        cell = v1.nn.rnn_cell.MultiRNNCell([v1.nn.rnn_cell.BasicLSTMCell(UNITS) for _ in range(2)])
        outputs, _ = v1.nn.dynamic_rnn(cell, x, dtype=tf.float32)
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
    feed = {x: np.random.RandomState(0).randn(BATCH, STEPS, FEATURES).astype(np.float32)}
    cells = tracer.find_cells(graph)
    plan = tracer.FetchPlan(graph, cells)
    raw = session.run(plan.tensors, feed)
    session.run(outputs, feed)  # warm-up

    kernels = session.run([c.weights["kernel"] for c in cells])
    rng = np.random.RandomState(1)
    layer_inputs = [feed[x].transpose(1, 0, 2), rng.randn(STEPS, BATCH, UNITS).astype(np.float32)]
    h = rng.randn(BATCH, UNITS).astype(np.float32)

    def products_only() -> None:
        def run(rows: slice) -> None:
            for kernel, xin in zip(kernels, layer_inputs):
                d = xin.shape[2]
                pre = np.empty((STEPS, BATCH, kernel.shape[1]), np.float32)
                np.matmul(xin[:, rows], kernel[:d], out=pre[:, rows])
                scratch = np.empty((rows.stop - rows.start, kernel.shape[1]), np.float32)
                for _ in range(STEPS):
                    np.matmul(h[rows], kernel[d:], out=scratch)

        blocks = _row_blocks(BATCH)
        with _blas_threads(1), ThreadPoolExecutor(len(blocks)) as pool:
            list(pool.map(run, blocks))

    def replay_only() -> None:
        values = list(raw)
        for c in plan._replays:
            values.append(plan._replay(c, values))

    jobs = [("forward", lambda: session.run(outputs, feed)), ("replay", replay_only), ("fetch_and_replay", lambda: plan.fetch(session, feed)), ("products_only", products_only)]
    times: dict[str, list[float]] = {name: [] for name, _ in jobs}
    for r in range(args.rounds):
        for name, job in jobs if r % 2 == 0 else jobs[::-1]:
            start = time.perf_counter()
            job()
            times[name].append(time.perf_counter() - start)
    ratio = {k: round(statistics.median(t / f for t, f in zip(v, times["forward"])), 2) for k, v in times.items()}
    results = {
        "model": f"2-layer MultiRNNCell of BasicLSTMCell({UNITS}), dynamic_rnn (control flow v2), T={STEPS}, D={FEATURES}, batch {BATCH}",
        "cpus": os.cpu_count(),
        "rounds": args.rounds,
        "median_seconds": {k: round(statistics.median(v), 4) for k, v in times.items()},
        "ratio_to_forward": ratio,
    }
    (HERE / "replay_results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(results["model"])
    for k in times:
        print(f"{k:18}{results['median_seconds'][k]:>8.3f} s{ratio[k]:>8.2f}x forward")


if __name__ == "__main__":
    main()
