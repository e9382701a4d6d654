"""How long `gatetrace inspect` of a `.tflite` file takes: whole processes, LiteRT against TensorFlow's interpreter.

    python bench/lite_inspect.py [--rounds 7]

A tf-keras LSTM(32) over 50 steps is converted (one fused op, batch 1), and a Keras 3 GRU(32)
(a WHILE loop). Each round runs `gatetrace inspect FILE` on each, at default settings, in
turn with LiteRT's interpreter (the default where `ai-edge-litert` is installed: no
TensorFlow imported) and with `GATETRACE_LITE_RUNTIME=tensorflow`. Target: with LiteRT the
median answer takes at most 1.5 s (about a second). Prints the medians and writes
bench/lite_inspect_results.json with the processor's name.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from answers import processor  # noqa: E402

TARGET_S = 1.5

CONVERT = """
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "0"
import tensorflow as tf
import keras
import tf_keras
out = sys.argv[1]
for name, K, layer in (("lstm", tf_keras, "LSTM"), ("gru", keras, "GRU")):
    inputs = K.Input((50, 8), batch_size=1, name="seq")
    model = K.Model(inputs, getattr(K.layers, layer)(32, return_sequences=True)(inputs))
    with open(os.path.join(out, name + ".tflite"), "wb") as f:
        f.write(tf.lite.TFLiteConverter.from_keras_model(model).convert())
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-c", CONVERT, tmp], check=True, capture_output=True)
        ways = {"litert": {}, "tensorflow": {"GATETRACE_LITE_RUNTIME": "tensorflow"}}
        times: dict[str, list[float]] = {f"{m} {w}": [] for m in ("lstm", "gru") for w in ways}
        for _ in range(args.rounds):
            for model in ("lstm", "gru"):
                for way, env in ways.items():
                    argv = [sys.executable, "-m", "tracer", "inspect", f"{tmp}/{model}.tflite"]
                    start = time.perf_counter()
                    subprocess.run(argv, check=True, capture_output=True, env={**os.environ, **env})
                    times[f"{model} {way}"].append(time.perf_counter() - start)
    cpu = processor()
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"{cpu}, medians of {args.rounds} rounds, whole `gatetrace inspect` processes:")
    for name, t in medians.items():
        print(f"  {name:18s} {t:6.2f} s")
    worst = max(medians["lstm litert"], medians["gru litert"])
    print(
        f"  LiteRT: {worst:.2f} s at most ({'ok' if worst <= TARGET_S else 'over'} the {TARGET_S} s target)"
    )
    out = Path(__file__).with_name("lite_inspect_results.json")
    out.write_text(
        json.dumps(
            {"processor": cpu, "rounds": args.rounds, "medians_s": medians, "target_s": TARGET_S},
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
