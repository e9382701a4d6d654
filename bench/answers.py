"""How fast the command line answers what needs no model run: whole `gatetrace` processes.

    python bench/answers.py [--rounds 7]

Each round, in one process each, in turn: `gatetrace inspect RUN` on the demo's recording,
`gatetrace record` of a model that is not there, `gatetrace record` of the demo's model with a
feed file that is not there, `gatetrace record` of a model of each format with a feed name the
model does not have (tiny models saved first, in a process of their own, as each format's tools
save them), and `gatetrace --version` (the floor: Python and gatetrace's import). Target: each
under 1 s on 2 cores (checked by the commands before TensorFlow loads: `early` in
`tracer/commands/`). Prints the medians and writes bench/answers_results.json with the
processor's name.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 1.0  # seconds, whole process
STEPS, FEATURES = 5, 3
# the model of each format, saved by `build` into the folder it is given
MODELS = {
    "keras3 .keras": "keras3.keras",
    "keras3 .h5": "keras3.h5",
    "tf-keras .keras": "tf-keras.keras",
    "tf-keras .h5": "tf-keras.h5",
    "TF2 SavedModel": "exported",
    "TF1 SavedModel": "tf1_saved",
    "checkpoint": "ckpt/model.ckpt",
    "frozen GraphDef": "frozen.pb",
    ".tflite": "lstm.tflite",
}


def build(root: Path) -> None:
    """A tiny LSTM over an input `seq` in every format of MODELS, saved into `root`."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf
    import tf_keras

    v1 = tf.compat.v1
    for name, k in (("keras3", keras), ("tf-keras", tf_keras)):
        seq = k.Input((STEPS, FEATURES), name="seq")
        model = k.Model(seq, k.layers.LSTM(4, return_sequences=True)(seq))
        for suffix in (".keras", ".h5"):
            model.save(str(root / f"{name}{suffix}"))
        if name == "keras3":
            model.export(str(root / MODELS["TF2 SavedModel"]), verbose=False)
    fixed = tf_keras.Input((STEPS, FEATURES), batch_size=1, name="seq")
    lite = tf_keras.Model(fixed, tf_keras.layers.LSTM(4, return_sequences=True)(fixed))
    (root / MODELS[".tflite"]).write_bytes(tf.lite.TFLiteConverter.from_keras_model(lite).convert())
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, STEPS, FEATURES], name="seq")
        outputs, _ = v1.nn.dynamic_rnn(v1.nn.rnn_cell.LSTMCell(4), x, dtype=tf.float32)
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            v1.train.Saver().save(session, str(root / MODELS["checkpoint"]))
            frozen = v1.graph_util.convert_variables_to_constants(
                session, graph.as_graph_def(), [outputs.op.name]
            )
            (root / MODELS["frozen GraphDef"]).write_bytes(frozen.SerializeToString())
            v1.saved_model.simple_save(
                session, str(root / MODELS["TF1 SavedModel"]), {"seq": x}, {"y": outputs}
            )


def processor() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(
            line.split(":", 1)[1].strip()
            for line in out.splitlines()
            if line.startswith("Model name")
        )
    except (OSError, StopIteration):
        return platform.processor() or "unknown"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument(
        "--build", metavar="DIR", help=argparse.SUPPRESS
    )  # `build` in a process of its own
    args = p.parse_args()
    if args.build:
        return build(Path(args.build))
    gatetrace = [sys.executable, "-m", "tracer"]
    with tempfile.TemporaryDirectory() as tmp:
        here = Path(tmp)
        subprocess.run(
            [*gatetrace, "demo", "--out", str(here / "demo")], check=True, capture_output=True
        )
        subprocess.run(
            [sys.executable, __file__, "--build", str(here)], check=True, capture_output=True
        )
        x = here / "demo" / "inputs.npy"
        wrong = {
            f"record: wrong feed name, {fmt}": [
                "record",
                str(here / path),
                "--feed",
                f"sqe={x}",
                "--out",
                str(here / "o"),
            ]
            for fmt, path in MODELS.items()
        }
        cases = {
            "inspect RUN": ["inspect", str(here / "demo" / "recording")],
            "record: no such model": ["record", str(here / "missing.ckpt"), "--feed", "x=x.npy", "--out", str(here / "o")],
            "record: no such feed file": [
                "record", str(here / "demo" / "model" / "model.ckpt"), "--feed", f"inputs={here / 'nofile.npy'}",
                "--out", str(here / "o"),
            ],
            **wrong,
            "--version (the floor)": ["--version"],
        }  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, argv in cases.items():
                start = time.perf_counter()
                done = subprocess.run([*gatetrace, *argv], capture_output=True, text=True)
                times[name].append(time.perf_counter() - start)
                if name in wrong and "unknown feed 'sqe'" not in done.stderr:
                    sys.exit(f"{name}: expected the early refusal, got: {done.stderr.strip()}")
    cpu = processor()
    load = os.getloadavg()[0]  # on a shared machine, what else ran: the floor moves with it
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"{cpu}, medians of {args.rounds} rounds, whole processes (load average {load:.1f}):")
    for name, t in medians.items():
        print(f"  {name:44s} {t:6.2f} s  {'ok' if t < TARGET else 'over the 1 s target'}")
    out = Path(__file__).with_name("answers_results.json")
    out.write_text(
        json.dumps(
            {"processor": cpu, "rounds": args.rounds, "load_average": load, "medians_s": medians},
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
