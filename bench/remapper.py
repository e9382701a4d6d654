"""What turning Grappler's remapper off costs a recording: whole `gatetrace record` processes.

    python bench/remapper.py [--rounds 5] [--sequences 4096]

gatetrace's sessions run with the remapper off (`tracer.load.loaded.FETCHING`): it fuses ops
(oneDNN's Swish among them) and drops tensors gatetrace fetches. Each round records the demo's
`BasicLSTMCell(16)` checkpoint over the same sequences twice, in turn: as gatetrace runs it,
and in a process whose sessions keep the remapper on (TensorFlow's default), both at default
settings otherwise. Target: the remapper off costs at most 5% of a recording (ratio of medians
<= 1.05). Prints the medians and writes bench/remapper_results.json with the processor's name.
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

TARGET = 1.05

# a gatetrace process whose sessions keep the remapper on, otherwise the command line itself
REMAPPER_ON = """
import sys
import tracer.load.loaded as loaded
from tracer._tf import v1
loaded.FETCHING.CopyFrom(v1.ConfigProto())
from tracer.cli import main
sys.exit(main(sys.argv[1:]))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sequences", type=int, default=4096)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        here = Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "tracer", "demo", "--out", str(here / "demo")],
            check=True,
            capture_output=True,
        )
        x = np.random.RandomState(0).standard_normal((args.sequences, 20, 2)).astype(np.float32)
        np.save(here / "x.npy", x)
        record = [
            "record", str(here / "demo" / "model" / "model.ckpt"), "--feed", f"inputs={here / 'x.npy'}",
            "--quiet", "--overwrite", "--out",
        ]  # fmt: skip
        ways = {
            "remapper off (gatetrace)": [sys.executable, "-m", "tracer", *record],
            "remapper on (TensorFlow's default)": [sys.executable, "-c", REMAPPER_ON, *record],
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.rounds):
            for k, (name, argv) in enumerate(ways.items()):
                start = time.perf_counter()
                subprocess.run([*argv, str(here / f"out{k}")], check=True, capture_output=True)
                times[name].append(time.perf_counter() - start)
    cpu = processor()
    medians = {name: statistics.median(t) for name, t in times.items()}
    off, on = medians.values()
    print(f"{cpu}, medians of {args.rounds} rounds, whole processes, {args.sequences} sequences:")
    for name, t in medians.items():
        print(f"  {name:36s} {t:6.2f} s")
    print(
        f"  ratio off / on: {off / on:.3f} ({'ok' if off / on <= TARGET else 'over'} the {TARGET} target)"
    )
    out = Path(__file__).with_name("remapper_results.json")
    out.write_text(
        json.dumps(
            {
                "processor": cpu,
                "rounds": args.rounds,
                "sequences": args.sequences,
                "medians_s": medians,
                "ratio": off / on,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
