"""Where a recording's writer spends its CPU, pass by pass, and how busy the two cores are.

    python bench/writer_passes.py [--sequences 4096] [--rounds 3]

Records the benchmark model of bench/record.py (2 x BasicLSTMCell(256), 50 steps of 64 inputs) on
`--sequences` random sequences as a user runs it, `gatetrace record MODEL --feed x=FILE --out DIR
--quiet` at default settings (the memory budget chooses the batch), in a fresh process each round
(`tracer.cli.main`, as the command calls it), with the passes a batch's values make on the
writer's threads wrapped to count the CPU time of the thread that runs them (`time.thread_time`;
each pass its own time, what it calls that is counted apart subtracted):

- `cut`: each gate's and state's [examples, steps, units] array cut out of the fetched step
  tensors (`tracer.values.sources.Unrolled.gate` and `.state`);
- `keys`: the example, step and unit columns (`recorders.write.keys.KeyCache`);
- `statistics` and `tops`: what each gate file's footer counts of its activations
  (`recorders.write.partstats.Tally.add`, `recorders.write.tops.TopTally.add`), and
  `footer`: those encoded (`Tally.footer`);
- `pages`: each page's checksum, statistics and the key columns' compression
  (`recorders.write.plain._encode`);
- `copy`: the bytes copied into the aligned buffers written past the page cache
  (`recorders.write.direct.DirectFile.write`), `write`: the write() calls
  (`DirectFile._flush`, `.close`);
- `layout`: the rest of the Parquet file in Python (headers, footers: `write_plain`), and `files`:
  opening the files and the rest of a file's task (`RecordingWriter._write_parquet`);

and, on the main thread, the record's two phases per batch: while the batch runs
(`tracer.values.running.run`, which waits for `Session.run`; the writer writes the batch before
beside it) and while `commit` waits for the writer, each with its wall time and the process's
CPU seconds in it (`busy`: the share of two cores used). Medians of the
rounds; prints them with the processor (`lscpu`) and writes bench/writer_passes_results.json.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = Path(__file__).resolve().parent

# (pass, module, qualified name) of what is wrapped; a name that is gone fails the bench
PASSES = [
    ("cut", "tracer.values.sources", "Unrolled.gate"),
    ("cut", "tracer.values.sources", "Unrolled.state"),
    ("keys", "recorders.write.keys", "KeyCache.__call__"),
    ("statistics", "recorders.write.partstats", "Tally.add"),
    ("tops", "recorders.write.tops", "TopTally.add"),
    ("footer", "recorders.write.partstats", "Tally.footer"),
    ("pages", "recorders.write.plain", "_encode"),
    ("copy", "recorders.write.direct", "DirectFile.write"),
    ("write", "recorders.write.direct", "DirectFile._flush"),
    ("write", "recorders.write.direct", "DirectFile.close"),
    ("layout", "recorders.write.plain", "write_plain"),
    ("files", "recorders.write.writer", "RecordingWriter._write_parquet"),
]


def _child(argv: list[str]) -> None:
    """One recording with the passes wrapped; prints what they took as JSON."""
    seconds: dict[str, float] = {}
    lock, local = threading.Lock(), threading.local()

    def wrap(name: str, module: str, qualname: str) -> None:
        owner: object = importlib.import_module(module)
        *path, attribute = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        function = getattr(owner, attribute)

        @functools.wraps(function)
        def counted(*args, **kwargs):
            stack = local.__dict__.setdefault("stack", [])
            start = time.thread_time()
            stack.append(0.0)
            try:
                return function(*args, **kwargs)
            finally:
                spent = time.thread_time() - start
                inner = stack.pop()
                if stack:
                    stack[-1] += spent
                with lock:
                    seconds[name] = seconds.get(name, 0.0) + spent - inner

        setattr(owner, attribute, counted)

    from recorders.write import partstats

    partstats.ready()  # (the compiled loops loaded once a process, as a recording does first)
    for name, module, qualname in PASSES:
        wrap(name, module, qualname)
    # the names other modules imported before the wrapping
    import recorders.write.plain as plain
    import recorders.write.rowgroups as rowgroups

    rowgroups.write_plain = plain.write_plain

    from recorders.write.writer import RecordingWriter
    from tracer.values import running

    phases: dict[str, list[float]] = {"run": [0.0, 0.0], "commit": [0.0, 0.0]}

    def phase(owner: object, attribute: str, name: str) -> None:
        function = getattr(owner, attribute)

        @functools.wraps(function)
        def timed(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                if threading.current_thread() is threading.main_thread():
                    phases[name][0] += time.perf_counter() - wall
                    phases[name][1] += time.process_time() - cpu

        setattr(owner, attribute, timed)

    phase(running, "run", "run")  # Session.run, on a thread of its own the main thread waits for
    phase(RecordingWriter, "commit", "commit")
    from tracer.cli import main

    wall, cpu = time.perf_counter(), time.process_time()
    if main(argv) != 0:
        raise SystemExit("the recording failed")
    print(
        json.dumps(
            {
                "passes": seconds,
                "phases": {k: {"wall": w, "cpu": c} for k, (w, c) in phases.items()},
                "process": {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu},
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tmp", default=None, help="scratch folder (default: the system's)")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import numpy as np
    from answers import processor  # (the bench's other scripts, beside this one)
    from record import FEATURES, STEPS, build_model

    root = Path(tempfile.mkdtemp(prefix="gatetrace-passes-", dir=args.tmp))
    runs = []
    try:
        _, _, _, model = build_model(root)
        x = root / "x.npy"
        inputs = np.lib.format.open_memmap(
            x, mode="w+", dtype=np.float32, shape=(args.sequences, STEPS, FEATURES)
        )
        inputs[:] = np.random.RandomState(1).randn(args.sequences, STEPS, FEATURES)
        inputs.flush()
        del inputs
        for r in range(args.rounds):
            out = root / f"out{r}"
            argv = ["record", model, "--feed", f"x={x}", "--out", str(out), "--quiet"]
            done = subprocess.run(
                [sys.executable, __file__, "--child", *argv],
                check=True,
                capture_output=True,
                text=True,
            )
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
            # a batch is a part file of each gate: the first gate's files count them
            gate = next(p for p in sorted((out / "gates").glob("cell=*/gate=*")) if p.is_dir())
            batch = -(-args.sequences // len(list(gate.glob("part-*.parquet"))))
            subprocess.run(["rm", "-rf", str(out)], check=True)
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)

    def median(get) -> float:
        return round(statistics.median(get(run) for run in runs), 3)

    names = list(dict.fromkeys(name for name, _, _ in PASSES))
    passes = {name: median(lambda run, n=name: run["passes"].get(n, 0.0)) for name in names}
    phases = {
        name: {
            "wall": median(lambda run, n=name: run["phases"][n]["wall"]),
            "cpu": median(lambda run, n=name: run["phases"][n]["cpu"]),
            "busy": median(
                lambda run, n=name: run["phases"][n]["cpu"] / run["phases"][n]["wall"] / 2
            ),
        }
        for name in ("run", "commit")
    }
    results = {
        "processor": processor(),
        "cpus": os.cpu_count(),
        "load_average_at_end": list(os.getloadavg()),
        "sequences": args.sequences,
        "batch_size": batch,
        "rounds": args.rounds,
        "writer_cpu_seconds": passes,
        "writer_cpu_total": round(sum(passes.values()), 3),
        "phases": phases,
        "process": {
            "wall": median(lambda run: run["process"]["wall"]),
            "cpu": median(lambda run: run["process"]["cpu"]),
        },
    }
    print(
        f"{results['processor']}, {args.sequences} sequences, batches of {batch}, medians of {args.rounds}"
    )
    for name, value in sorted(passes.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<11} {value:6.3f} CPU s")
    print(f"  {'writer':<11} {results['writer_cpu_total']:6.3f} CPU s in all")
    for name, p in phases.items():
        print(
            f"  {name:<11} {p['wall']:6.3f} s wall, {p['cpu']:.3f} CPU s, {p['busy']:.0%} of two cores"
        )
    (HERE / "writer_passes_results.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2:])
    else:
        main()
