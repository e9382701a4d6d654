"""What recording a quantised `.tflite` file costs: whole processes, against the interpreter's own run.

    python bench/lite_quantised.py [--rounds 5] [--sequences 2000]

A tf-keras LSTM(64) over 50 steps of 32 features is converted three times (batch 1): as it is
(a fused float op), with `Optimize.DEFAULT` (the same op with int8 matrices: the hybrid kernel,
replayed by `tracer.values.hybrid`), and for integer arithmetic (a representative dataset and
int8 builtins: the integer kernel, replayed by `tracer.values.integer`). Each round runs, in
turn, whole processes at default settings on the same sequences:

    interpreter          LiteRT's interpreter over every sequence, one invocation each (what
                         running the quantised file costs without gatetrace)
    integer interpreter  the same, of the full-integer file
    float                gatetrace record of the float file
    quantised            gatetrace record of the quantised file
    integer              gatetrace record of the full-integer file

Targets: recording the quantised file costs at most 1.5 times recording the float one (the
hybrid replay quantises each row and multiplies integers in numpy), the full-integer one at
most 2 times (its replay computes sigmoid and tanh in gemmlowp's fixed point, about a hundred
integer operations each). Prints the medians and writes bench/lite_quantised_results.json with
the processor's name.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from answers import processor  # noqa: E402

TARGET = 1.5
INTEGER_TARGET = 2.0

CONVERT = """
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf
import tf_keras as K
out = sys.argv[1]
inputs = K.Input((50, 32), batch_size=1, name="seq")
model = K.Model(inputs, K.layers.LSTM(64, return_sequences=True)(inputs))
import numpy as np
rng = np.random.RandomState(1)
for name in ("float", "quantised", "integer"):
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if name != "float":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if name == "integer":
        converter.representative_dataset = lambda: (
            [rng.uniform(-1, 1, (1, 50, 32)).astype(np.float32)] for _ in range(50)
        )
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    with open(os.path.join(out, name + ".tflite"), "wb") as f:
        f.write(converter.convert())
"""

INTERPRETER = """
import sys
import numpy as np
from ai_edge_litert.interpreter import Interpreter
it = Interpreter(model_path=sys.argv[1])
it.allocate_tensors()
x = np.load(sys.argv[2])
i, o = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
for row in x:
    it.reset_all_variables()
    it.set_tensor(i, row[None])
    it.invoke()
    it.get_tensor(o)
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sequences", type=int, default=2000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        here = Path(tmp)
        subprocess.run([sys.executable, "-c", CONVERT, tmp], check=True, capture_output=True)
        x = np.random.RandomState(0).uniform(-1, 1, (args.sequences, 50, 32)).astype(np.float32)
        np.save(here / "x.npy", x)

        def record(name: str) -> list[str]:
            return [
                sys.executable, "-m", "tracer", "record", str(here / f"{name}.tflite"), "--feed",
                f"seq={here / 'x.npy'}", "--quiet", "--overwrite", "--out", str(here / name),
            ]  # fmt: skip

        ways = {
            "interpreter": [
                sys.executable,
                "-c",
                INTERPRETER,
                str(here / "quantised.tflite"),
                str(here / "x.npy"),
            ],  # fmt: skip
            "integer interpreter": [
                sys.executable,
                "-c",
                INTERPRETER,
                str(here / "integer.tflite"),
                str(here / "x.npy"),
            ],  # fmt: skip
            "float": record("float"),
            "quantised": record("quantised"),
            "integer": record("integer"),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, argv in ways.items():
                start = time.perf_counter()
                subprocess.run(argv, check=True, capture_output=True)
                times[name].append(time.perf_counter() - start)
    cpu = processor()
    medians = {name: statistics.median(t) for name, t in times.items()}
    ratio = medians["quantised"] / medians["float"]
    integer = medians["integer"] / medians["float"]
    print(
        f"{cpu}, medians of {args.rounds} rounds, whole processes, {args.sequences} sequences of 50 steps:"
    )
    for name, t in medians.items():
        print(f"  {name:12s} {t:6.2f} s")
    print(
        f"  quantised / float recording: {ratio:.2f} ({'ok' if ratio <= TARGET else 'over'} the {TARGET} target); "
        f"quantised recording / the interpreter's own run: {medians['quantised'] / medians['interpreter']:.2f}"
    )
    print(
        f"  full-integer / float recording: {integer:.2f} ({'ok' if integer <= INTEGER_TARGET else 'over'} the "
        f"{INTEGER_TARGET} target); full-integer recording / the interpreter's own run: "
        f"{medians['integer'] / medians['integer interpreter']:.2f}"
    )
    out = Path(__file__).with_name("lite_quantised_results.json")
    out.write_text(
        json.dumps(
            {
                "processor": cpu,
                "rounds": args.rounds,
                "sequences": args.sequences,
                "medians_s": medians,
                "quantised_over_float": ratio,
                "quantised_over_interpreter": medians["quantised"] / medians["interpreter"],
                "integer_over_float": integer,
                "integer_over_interpreter": medians["integer"] / medians["integer interpreter"],
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
