"""How fast the command line answers what needs no model run: whole `gatetrace` processes.

    python bench/answers.py [--rounds 7]

Each round, in one process each, in turn: `gatetrace inspect RUN` on the demo's recording,
`gatetrace record` of a model that is not there, `gatetrace record` of the demo's model with a
feed file that is not there, and `gatetrace --version` (the floor: Python and gatetrace's
import). Target: each under 1 s on 2 cores (checked by the commands before TensorFlow loads:
`early` in `tracer/commands/`). Prints the medians and writes bench/answers_results.json with
the processor's name.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 1.0  # seconds, whole process


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
    args = p.parse_args()
    gatetrace = [sys.executable, "-m", "tracer"]
    with tempfile.TemporaryDirectory() as tmp:
        here = Path(tmp)
        subprocess.run(
            [*gatetrace, "demo", "--out", str(here / "demo")], check=True, capture_output=True
        )
        cases = {
            "inspect RUN": ["inspect", str(here / "demo" / "recording")],
            "record: no such model": ["record", str(here / "missing.ckpt"), "--feed", "x=x.npy", "--out", str(here / "o")],
            "record: no such feed file": [
                "record", str(here / "demo" / "model" / "model.ckpt"), "--feed", f"inputs={here / 'nofile.npy'}",
                "--out", str(here / "o"),
            ],
            "--version (the floor)": ["--version"],
        }  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, argv in cases.items():
                start = time.perf_counter()
                subprocess.run([*gatetrace, *argv], capture_output=True)
                times[name].append(time.perf_counter() - start)
    cpu = processor()
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"{cpu}, medians of {args.rounds} rounds, whole processes:")
    for name, t in medians.items():
        print(f"  {name:28s} {t:6.2f} s  {'ok' if t < TARGET else 'over the 1 s target'}")
    out = Path(__file__).with_name("answers_results.json")
    out.write_text(
        json.dumps({"processor": cpu, "rounds": args.rounds, "medians_s": medians}, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
