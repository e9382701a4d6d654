"""What taking the gates from a while loop costs, against the forward pass and against the same
cells unrolled.

    python bench/loops.py [--rounds 7] [--whole-rounds 3] [--skip-keras]

Models: a 2-layer MultiRNNCell of BasicLSTMCell(256), T=50 steps of D=64 inputs, batch 256,
under `dynamic_rnn` (control flow v2) and, with the same weights, under `static_rnn`; and a
Keras 3 model of two LSTM(256) layers exported with `model.export()` (a TF2 SavedModel whose
layers run as While loops) beside the same model with `unroll=True`.

1. In process, side by side in alternating order each round, on the models as `gatetrace`
   loads them (the dynamic one rebuilt so that its loop emits every gate and state,
   `tracer.values.emit`): the forward pass of the dynamic model (its outputs), one
   `Session.run` of the rewritten loop fetching every gate and state, the same with the
   numpy arrays assembled, and the static model's forward pass and fetch. Medians of the
   per-round ratios to the forward pass.
2. Whole processes as a user runs them: the marginal cost of a batch of
   `gatetrace record --batch-size 256 --memory 8G --quiet` (the time at 6 batches minus
   the time at 2, over 4), for each model; rounds interleave the runs; medians.

Prints the figures with the processor and writes bench/loops_results.json. The issue's
targets: the loop's fetch <= 1.2x the forward pass; `record` of the loop model within 10%
of the unrolled one, per batch.
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

import tracer
from tracer._tf import tf, v1
from tracer.run.prepare import from_loops

STEPS, FEATURES, UNITS, BATCH = 50, 64, 256, 256
HERE = Path(__file__).resolve().parent

KERAS_SCRIPT = """
import sys
import numpy as np
import keras
path, unroll = sys.argv[1], sys.argv[2] == "unroll"
x = keras.Input(({steps}, {features}), name="x")
h = keras.layers.LSTM({units}, return_sequences=True, unroll=unroll, name="lstm_a")(x)
model = keras.Model(x, keras.layers.LSTM({units}, unroll=unroll, name="lstm_b")(h))
rng = np.random.RandomState(0)
model.set_weights([rng.uniform(-0.1, 0.1, w.shape).astype("float32") for w in model.get_weights()])
model.export(path)
"""


def tf1_models(root: Path) -> dict[str, str]:
    """The dynamic_rnn and static_rnn checkpoints (same weights: the static one restores the dynamic one's)."""
    paths = {}
    for kind in ("dynamic", "static"):
        graph = tf.Graph()
        with graph.as_default():
            x = v1.placeholder(tf.float32, [None, STEPS, FEATURES], name="x")
            cell = v1.nn.rnn_cell.MultiRNNCell(
                [v1.nn.rnn_cell.BasicLSTMCell(UNITS) for _ in range(2)]
            )
            if kind == "dynamic":
                out, _ = v1.nn.dynamic_rnn(cell, x, dtype=tf.float32)
                tf.identity(out, name="y")
            else:
                out, _ = v1.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32)
                tf.identity(tf.stack(out, axis=1), name="y")
            saver = v1.train.Saver()
            with v1.Session(graph=graph) as session:
                if kind == "dynamic":
                    session.run(v1.global_variables_initializer())
                else:
                    saver.restore(session, paths["dynamic"])
                paths[kind] = saver.save(session, str(root / kind / "model.ckpt"))
    return paths


def in_process(paths: dict[str, str], rounds: int) -> dict:
    feed_value = np.random.RandomState(0).randn(BATCH, STEPS, FEATURES).astype(np.float32)
    runs = {}
    models = []
    for kind in ("dynamic", "static"):
        model = tracer.load_model(paths[kind])
        models.append(model)
        cells = tracer.find_cells(model.graph)
        context = from_loops(model, cells, progress=False)
        rebuilt, cells = context.__enter__()
        models.append(context)
        plan = tracer.FetchPlan(rebuilt.graph, cells)
        # the forward pass of the model as saved, not of the rewritten loop
        forward = {model.graph.get_tensor_by_name("x:0"): feed_value}
        y = model.graph.get_tensor_by_name("y:0")
        runs[f"{kind}_forward"] = lambda s=model.session, y=y, f=forward: s.run(y, f)
        feed = {rebuilt.graph.get_tensor_by_name("x:0"): feed_value}
        session = rebuilt.session
        runs[f"{kind}_fetch"] = lambda s=session, p=plan, f=feed: s.run(p.tensors, f)
        runs[f"{kind}_fetch_assembled"] = lambda s=session, p=plan, f=feed: p.run(s, f)
        paths[f"{kind}_paths"] = sorted({c.path for c in cells})
        paths[f"{kind}_tensors"] = len(plan.tensors)
    for run in runs.values():
        run()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(rounds):
        for name in list(runs) if r % 2 == 0 else list(reversed(runs)):
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)
    for m in models:
        if hasattr(m, "__exit__"):
            m.__exit__(None, None, None)
        else:
            m.close()
    base = times["dynamic_forward"]
    return {
        "median_seconds": {k: round(statistics.median(v), 4) for k, v in times.items()},
        "ratio_to_dynamic_forward": {
            k: round(statistics.median([a / b for a, b in zip(v, base, strict=True)]), 3)
            for k, v in times.items()
        },
        "paths": {k: paths[f"{k}_paths"] for k in ("dynamic", "static")},
        "fetched_tensors": {k: paths[f"{k}_tensors"] for k in ("dynamic", "static")},
    }


def whole_process(
    models: dict[str, str], root: Path, rounds: int, small: int = 2, large: int = 6
) -> dict:
    """Per model, the marginal cost of a batch of `gatetrace record`, whole processes."""
    files = {n: root / f"x{n}.npy" for n in (small, large)}
    for n, f in files.items():
        np.save(f, np.random.RandomState(n).randn(n * BATCH, STEPS, FEATURES).astype(np.float32))
    times: dict[tuple[str, int], list[float]] = {(m, n): [] for m in models for n in files}
    jobs = list(times)
    for r in range(rounds):
        for model, n in jobs if r % 2 == 0 else list(reversed(jobs)):
            out = root / f"rec-{model}-{n}"
            argv = [
                sys.executable,
                "-m",
                "tracer.cli",
                "record",
                models[model],
                "--feed",
                f"x={files[n]}",
                "--out",
                str(out),
                "--batch-size",
                str(BATCH),
                "--memory",
                "8G",
                "--quiet",
                "--overwrite",
            ]
            start = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True)
            times[(model, n)].append(time.perf_counter() - start)
    per_batch = {
        m: [
            (b - a) / (large - small)
            for a, b in zip(times[(m, small)], times[(m, large)], strict=True)
        ]
        for m in models
    }
    return {
        "batches": [small, large],
        "seconds": {f"{m}@{n}": [round(t, 2) for t in v] for (m, n), v in times.items()},
        "marginal_seconds_per_batch": {
            m: round(statistics.median(v), 3) for m, v in per_batch.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--whole-rounds", type=int, default=3)
    parser.add_argument("--skip-keras", action="store_true")
    args = parser.parse_args()
    processor = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = next(
        (
            line.split(":", 1)[1].strip()
            for line in processor.splitlines()
            if line.startswith("Model name")
        ),
        "unknown",
    )
    results = {
        "processor": name,
        "cpus": os.cpu_count(),
        "model": "2 x BasicLSTMCell(256), T=50, D=64, batch 256",
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths = tf1_models(root)
        results["in_process"] = in_process(dict(paths), args.rounds)
        models = {"dynamic_rnn": paths["dynamic"], "static_rnn": paths["static"]}
        if not args.skip_keras:
            script = KERAS_SCRIPT.format(steps=STEPS, features=FEATURES, units=UNITS)
            for how in ("loop", "unroll"):
                models[f"keras3_export_{how}"] = str(root / f"keras-{how}")
                subprocess.run(
                    [sys.executable, "-c", script, models[f"keras3_export_{how}"], how],
                    check=True,
                    capture_output=True,
                )
        results["whole_process"] = whole_process(models, root, args.whole_rounds)
    per = results["whole_process"]["marginal_seconds_per_batch"]
    results["record_loop_vs_unrolled"] = {
        "dynamic_rnn / static_rnn": round(per["dynamic_rnn"] / per["static_rnn"], 3)
    }
    if "keras3_export_loop" in per:
        results["record_loop_vs_unrolled"]["keras3 export: loop / unroll=True"] = round(
            per["keras3_export_loop"] / per["keras3_export_unroll"], 3
        )
    (HERE / "loops_results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
