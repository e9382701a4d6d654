"""What reading a slice of a large recording costs, against reading all of it.

    python bench/read.py [--sequences 1000] [--rounds 3]

Records the model of bench/record.py (2-layer BasicLSTMCell(256), T=50) on `--sequences`
random sequences: 1000 give 102.4M gate rows. Then, each in a fresh process (so that
nothing is cached in Python) and in alternating order per round, reads:

- full: every gate row, all columns (`pandas.read_parquet` of `gates/`);
- one gate: one cell's forget gate, all columns (`Recording.gate_frame`);
- one gate, one column, 1% of the examples (`gate_frame` with `examples=` and `columns=`);
- one gate as an array (`Recording.gate_array`: [examples, steps, units]).

Bytes read are the process's `rchar` from /proc/self/io (everything read through
read/pread, whether or not the OS had it cached); time is the read call alone. The
files are in the OS page cache for every run after the warm-up, so the times measure
decoding, not the disk. Prints a table and writes bench/read_results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
READS = ("full", "one_gate", "one_gate_slice", "one_gate_array")


def child(kind: str, folder: str) -> None:
    """Run one read in this process and print {seconds, bytes_read, rows} as JSON."""
    import pandas as pd

    from recorders import Recording

    rec = Recording(folder)
    cell = rec.cells[0]
    n = rec.examples[-1][1]

    def rchar() -> int:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
        raise RuntimeError("no rchar in /proc/self/io")

    before, start = rchar(), time.perf_counter()
    if kind == "full":
        rows = len(pd.read_parquet(Path(folder) / "gates"))
    elif kind == "one_gate":
        rows = len(rec.gate_frame([cell], ["f"]))
    elif kind == "one_gate_slice":
        rows = len(
            rec.gate_frame([cell], ["f"], examples=(0, max(1, n // 100)), columns=["activation"])
        )
    else:
        rows = rec.gate_array(cell, "f").size
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "bytes_read": rchar() - before, "rows": rows}))


def run_child(kind: str, folder: Path) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(folder)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def make_recording(root: Path, sequences: int, values=None) -> tuple[Path, dict]:
    """The model of bench/record.py recorded on `sequences` random sequences into `root/recording`
    (`values`: the value columns, default the recording's default); its folder and manifest."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    from record import BATCH, FEATURES, STEPS, build_model

    import tracer

    root.mkdir(parents=True, exist_ok=True)
    session, _, _, _ = build_model(root)
    x = np.random.RandomState(0).randn(sequences, STEPS, FEATURES).astype(np.float32)
    out = root / "recording"
    options = {} if values is None else {"values": values}
    manifest = tracer.record(
        tracer.from_session(session), {"x": x}, out, batch_size=BATCH, **options
    )
    session.close()
    return out, manifest


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """The options of a benchmark over `make_recording`'s recording: its size, the rounds, and
    the scratch folder; `doc` the script's docstring."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--sequences", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--tmp", default=None, help="scratch folder (default: the system's temp folder)"
    )
    return parser


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--child", nargs=2, metavar=("READ", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return

    root = Path(tempfile.mkdtemp(prefix="gatetrace-bench-read-", dir=args.tmp))
    try:
        folder, manifest = make_recording(root, args.sequences)
        on_disk = sum(p.stat().st_size for p in (folder / "gates").rglob("*.parquet"))
        run_child("full", folder)  # warm-up: every file in the page cache
        runs: dict[str, list[dict]] = {k: [] for k in READS}
        for r in range(args.rounds):
            for kind in READS if r % 2 == 0 else READS[::-1]:
                runs[kind].append(run_child(kind, folder))
        full = statistics.median(x["seconds"] for x in runs["full"])
        results = {
            "recording": f"{args.sequences} sequences of bench/record.py's model: {manifest['rows']['gates']:,} gate rows, "
            f"{len(manifest['cells'])} cells x 4 gates, {on_disk / 1e6:.0f} MB of gate files",
            "cpus": os.cpu_count(),
            "rounds": args.rounds,
            "reads": {
                kind: {
                    "rows": v[0]["rows"],
                    "median_seconds": round(statistics.median(x["seconds"] for x in v), 3),
                    "bytes_read": int(statistics.median(x["bytes_read"] for x in v)),
                    "time_vs_full": round(statistics.median(x["seconds"] for x in v) / full, 4),
                }
                for kind, v in runs.items()
            },
        }
        (HERE / "read_results.json").write_text(json.dumps(results, indent=2) + "\n")
        print(results["recording"])
        print(f"{'':18}{'rows':>14}{'median s':>10}{'MB read':>10}{'time vs full':>14}")
        for kind, r in results["reads"].items():
            print(
                f"{kind:18}{r['rows']:>14,}{r['median_seconds']:>10.3f}{r['bytes_read'] / 1e6:>10.1f}{r['time_vs_full']:>14.4f}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
