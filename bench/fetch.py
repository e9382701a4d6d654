"""Cost of the one-run gate fetch against the forward pass alone, side by side.

    python bench/fetch.py [--rounds 7]

Model: a 2-layer MultiRNNCell of BasicLSTMCell(256) under static_rnn, T=50 steps of
D=64 inputs, batch 256, random inputs. Each round times, in alternating order,
`Session.run` of the final output (forward pass) and of every gate tensor the fetch
plan lists plus the final output. Prints medians and the median of the paired ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

import tracer  # noqa: E402
from tracer._tf import tf, v1  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    steps, features, units, batch = 50, 64, 256, 256
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, steps, features], name="x")
        cell = v1.nn.rnn_cell.MultiRNNCell([v1.nn.rnn_cell.BasicLSTMCell(units) for _ in range(2)])
        outputs, _ = v1.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32)
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
    inputs = np.random.RandomState(0).randn(batch, steps, features).astype(np.float32)
    feed = {x: inputs}
    cells = tracer.find_cells(graph)
    plan = tracer.FetchPlan(graph, cells)
    fetches = plan.tensors + [outputs[-1]]

    def timed(f) -> float:
        start = time.perf_counter()
        f()
        return time.perf_counter() - start

    forward, gates, assembled = [], [], []
    session.run(fetches, feed)  # warm-up
    for r in range(args.rounds):
        pair = [lambda: forward.append(timed(lambda: session.run(outputs[-1], feed))),
                lambda: gates.append(timed(lambda: session.run(fetches, feed)))]
        for run in (pair if r % 2 == 0 else pair[::-1]):
            run()
        assembled.append(timed(lambda: plan.run(session, feed)))
    ratios = [g / f for f, g in zip(forward, gates)]
    print(f"{len(cells)} cells, {len(plan)} fetched tensors, batch {batch}, {args.rounds} rounds, {os.cpu_count()} CPUs")
    print(f"forward pass          median {statistics.median(forward):.3f} s")
    print(f"one-run gate fetch    median {statistics.median(gates):.3f} s   ratio {statistics.median(ratios):.2f}x (median of paired ratios)")
    print(f"fetch + numpy arrays  median {statistics.median(assembled):.3f} s   ratio {statistics.median(assembled) / statistics.median(forward):.2f}x")


if __name__ == "__main__":
    main()
