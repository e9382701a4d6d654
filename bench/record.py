"""What recording costs: forward pass, gate fetch, end-to-end record, the pandas way, bytes, memory.

    python bench/record.py [--rounds 5] [--batches 8] [--sizes 1000,8000,32000] [--whole-rounds 3] [--profile]

Model: a 2-layer MultiRNNCell of BasicLSTMCell(256) under static_rnn, T=50 steps of
D=64 inputs, batch 256, random inputs. Measured side by side, in alternating order,
each round:

1. forward: `Session.run` of the final output;
2. fetch: one `Session.run` of every gate and state tensor (and with numpy assembly);
3. record: `tracer.record` of all gates, both value columns, and states to Parquet, over
   `--batches` batches; the time per batch;
4. melt: the same values of one batch the naive way: a wide pandas DataFrame per cell,
   `melt` to long, `to_parquet`;

then 5. bytes on disk per stored value (keys included); 6. whole processes as a user
runs them (`whole_process`): the marginal cost of a batch of `gatetrace record` (at default
settings, with `--memory 8G`, and with `--compression lz4`) against
a script running only the forward pass, with where a batch's CPU goes (TensorFlow's threads,
the writer's, the main thread: `thread_cpu`); and 7. the peak RSS of `gatetrace record` at
each of `--sizes` sequences, each in a fresh process at the default memory budget. Ratios
are medians of per-round ratios against the same round's forward pass. Prints a table
and writes bench/results.json.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pandas as pd

import tracer
from tracer._tf import tf, v1

STEPS, FEATURES, UNITS, BATCH = 50, 64, 256, 256
HERE = Path(__file__).resolve().parent


def build_model(root: Path):
    """The benchmark model with random weights, saved as a checkpoint; returns (session, x, output, path)."""
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, STEPS, FEATURES], name="x")
        cell = v1.nn.rnn_cell.MultiRNNCell([v1.nn.rnn_cell.BasicLSTMCell(UNITS) for _ in range(2)])
        outputs, _ = v1.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32)
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
        path = root / "model" / "model.ckpt"
        v1.train.Saver().save(session, str(path))
    return session, x, outputs[-1], str(path)


def melt_way(trace: tracer.Trace, examples: np.ndarray, out: Path) -> None:
    """The long table of one batch as people write it with pandas: wide frame, melt, to_parquet."""
    for k, ct in enumerate(trace):
        n, t, g, u = ct.preactivation.shape
        index = pd.MultiIndex.from_product(
            [examples, range(t), list(ct.cell.gates)], names=["example", "step", "gate"]
        )
        long = []
        for column in ("preactivation", "activation"):
            wide = pd.DataFrame(
                getattr(ct, column).reshape(n * t * g, u), index=index
            ).reset_index()
            long.append(
                wide.melt(id_vars=["example", "step", "gate"], var_name="unit", value_name=column)
            )
        gates = long[0].assign(activation=long[1]["activation"].to_numpy())
        gates.insert(0, "cell", ct.cell.name)
        gates.to_parquet(out / f"gates-{k}.parquet")
        for name, values in ct.states.items():
            wide = pd.DataFrame(
                values.reshape(n * t, -1),
                index=pd.MultiIndex.from_product([examples, range(t)], names=["example", "step"]),
            )
            state = wide.reset_index().melt(
                id_vars=["example", "step"], var_name="unit", value_name="value"
            )
            state.insert(0, "cell", ct.cell.name)
            state.to_parquet(out / f"states-{k}-{name}.parquet")


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*.parquet"))


def stored_values(manifest: dict) -> int:
    """Values in the gates (two columns) and states (one) tables."""
    return 2 * manifest["rows"]["gates"] + manifest["rows"]["states"]


def peak_rss(model: str, sequences: int, root: Path, flags: tuple[str, ...] = ()) -> dict:
    """Record `sequences` random sequences with the CLI in a fresh process, at the default
    memory budget (which chooses the batch size); its peak RSS.

    The peak is the child's VmHWM: `ru_maxrss` would include the parent's peak, which
    Linux carries across fork and exec.
    """
    x = root / f"x{sequences}.npy"
    inputs = np.lib.format.open_memmap(
        x, mode="w+", dtype=np.float32, shape=(sequences, STEPS, FEATURES)
    )
    rng = np.random.RandomState(1)
    for start in range(0, sequences, 4096):
        inputs[start : start + 4096] = rng.randn(min(4096, sequences - start), STEPS, FEATURES)
    inputs.flush()
    del inputs
    out = root / f"rss{sequences}"
    code = (
        "import sys; from tracer.cli import main; "
        f"code = main(['record', {model!r}, '--feed', 'x={x}', '--out', {str(out)!r}, '--quiet', *{list(flags)!r}]); "
        "print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]); sys.exit(code)"
    )
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    seconds = time.perf_counter() - start
    rss_mb = int(result.stdout.strip().splitlines()[-1]) / 1024
    # by the default memory budget
    lowered = re.search(r"batch size \d+ lowered to (\d+)", result.stdout)
    size = folder_bytes(out)
    shutil.rmtree(out)
    x.unlink()
    return {
        "sequences": sequences,
        "batch_size": int(lowered.group(1)) if lowered else BATCH,
        "peak_rss_mb": round(rss_mb),
        "seconds": round(seconds, 1),
        "bytes_on_disk": size,
    }


FORWARD_SCRIPT = """
import sys
from tracer.cli import _quiet_tensorflow
_quiet_tensorflow()
import tracer
from tracer.inputs.files import open_input
model, x, output, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with tracer.load_model(model) as m:
    rows = open_input(x, "x")
    for start in range(0, len(rows), batch):
        m.session.run(output, {"x:0": rows[start : start + batch]})
"""


DISK_SCRIPT = """
import json, os, sys
from concurrent.futures import ThreadPoolExecutor
from recorders.write.direct import WRITE_THREADS, open_direct
from recorders.write.folder import Folder
sizes, out = json.loads(open(sys.argv[1]).read()), sys.argv[2]
chunk = os.urandom(1 << 20)  # the content does not matter to the disk
os.mkdir(out)
with Folder(out) as folder:
    def write(item):
        rel, size = item
        # as the writer: past the page cache, or through it where the file system refuses that
        f = open_direct(folder, rel) or folder.create(rel)
        with f:
            left = size
            while left:
                n = min(left, len(chunk))
                f.write(chunk[:n])
                left -= n
    with ThreadPoolExecutor(WRITE_THREADS) as pool:
        list(pool.map(write, sizes))
"""


THREADS_SCRIPT = """
import os, runpy, sys, threading, time
# Each thread's CPU seconds (user + system, /proc/self/task/TID/stat), sampled every 0.1 s
# until the run ends; a thread is named by its Python name (gatetrace's threads are named)
# or, for threads Python did not start (TensorFlow's), by the kernel's name.
tick, seen, done = os.sysconf("SC_CLK_TCK"), {}, threading.Event()
def sample():
    while True:
        names = {str(t.native_id): t.name for t in threading.enumerate()}
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            name = "main" if tid == str(os.getpid()) else names.get(tid, stat[stat.index("(") + 1 : stat.rindex(")")])
            seen[tid] = (name, (int(fields[11]) + int(fields[12])) / tick)
        if done.wait(0.1):
            return
sampler = threading.Thread(target=sample, name="sampler", daemon=True)
sampler.start()
out, sys.argv = sys.argv[1], sys.argv[2:]
try:
    if sys.argv[0] == "-c":
        sys.argv = sys.argv[1:]
        exec(compile(sys.argv[0], "<script>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = sys.argv[1:]
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
except SystemExit as end:
    if end.code:
        raise
finally:
    done.set()
    sampler.join()
    with open(out, "w") as f:
        f.write(repr(sorted(seen.values())))
"""


def thread_cpu(jobs: dict, spans: dict, root: Path) -> dict:
    """Where the CPU of a batch goes, for the forward pass and the record: each process run
    once more at its two batch counts under THREADS_SCRIPT, its threads' CPU seconds summed by
    kind, the marginal per batch: `tensorflow` (threads Python did not start, which
    TensorFlow's runtime starts, and `gatetrace-run`, the thread `Session.run` is called on),
    `writer` (`gatetrace-write`, the writer's pool: columns, statistics, checksums, files),
    `main` (the main thread: the batch's arrays cut from the fetched tensors, the plan)."""

    def kind(name: str) -> str | None:
        if name == "sampler":
            return None
        if name.startswith("gatetrace-write"):
            return "writer"
        if name == "main":
            return "main"
        return "tensorflow"

    found = {}
    for key in [(k, n) for k in ("forward", "record") for n in spans[k]]:
        out = root / f"threads-out-{key[0]}-{key[1]}"
        log = root / "threads.txt"
        tail = [] if key[0] == "forward" else ["--out", str(out)]
        subprocess.run(
            [sys.executable, "-c", THREADS_SCRIPT, str(log), *jobs[key], *tail],
            check=True,
            capture_output=True,
        )
        shutil.rmtree(out, ignore_errors=True)
        totals: dict[str, float] = {}
        for name, seconds in ast.literal_eval(log.read_text()):
            if kind(name):
                totals[kind(name)] = totals.get(kind(name), 0.0) + seconds
        found[key] = totals
    result = {}
    for k in ("forward", "record"):
        lo, hi = spans[k]
        result[k] = {
            group: round(
                (found[(k, hi)].get(group, 0.0) - found[(k, lo)].get(group, 0.0)) / (hi - lo), 3
            )
            for group in ("tensorflow", "writer", "main")
        }
    return result


def part_sizes(folder: Path) -> list[tuple[str, int]]:
    """Every file under `folder` but the progress and statistics files: (relative path, bytes)."""
    return [
        (str(p.relative_to(folder)), p.stat().st_size)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.relative_to(folder).parts[0].startswith("_")
    ]


def whole_process(
    model: str,
    output: str,
    root: Path,
    rounds: int,
    small: int = 2,
    large: int = 10,
    forward_large: int = 30,
    variants: dict[str, list[str]] | None = None,
    base_flags: tuple[str, ...] = (),
) -> dict:
    """The marginal cost of a batch as a user meets it: whole processes, `gatetrace record
    --quiet` at default settings (plus `base_flags`) against a script that loads the same
    checkpoint and runs only the forward pass over the same kind of file, in batches of 256. Per round, each one's marginal cost of a
    batch, (time at many batches - time at `small`) / (the difference in batches): record
    at `small` and `large` batches, the forward pass at `small` and `forward_large` (a
    forward batch is short beside a process's start, whose noise would swamp it over fewer
    batches); and their ratio. Rounds interleave the runs (in alternating order); medians
    of the per-round figures. `variants`: more `record` runs by name, each with its own flags
    (e.g. {"record_parts": ["--values", "preactivation,activation,contributions"]}), measured in
    the same rounds: `<name>_s_per_batch` and `<name>_ratio`.

    The disk's floor, in the same rounds: a process writes the files a record at `small` and at
    `large` batches wrote (the same paths and sizes, taken from one record of each before the
    rounds), as the writer writes them (`O_DIRECT` through `open_direct`, `WRITE_THREADS`
    threads), into the same folder; its marginal cost of a batch is `disk_s_per_batch`. The
    record's limit is max(forward, disk floor) each round; `ratio_to_limit` is the median of
    record / limit (the target is 1.25)."""
    files = {}
    for n in sorted({small, large, forward_large}):
        files[n] = root / f"whole{n}.npy"
        np.save(
            files[n], np.random.RandomState(n).randn(n * BATCH, STEPS, FEATURES).astype(np.float32)
        )

    def run(argv: list[str]) -> tuple[float, float, float]:
        """Wall, CPU (user + system) and system seconds of one process."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, *argv], check=True, capture_output=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        system = after.ru_stime - before.ru_stime
        return wall, after.ru_utime - before.ru_utime + system, system

    records = {"record": [], **(variants or {})}
    spans = {
        "forward": (small, forward_large),
        "disk": (small, large),
        **{name: (small, large) for name in records},
    }
    jobs = {}
    for n in spans["disk"]:
        sized = root / f"sizes-out-{n}"
        subprocess.run(
            [sys.executable, "-m", "tracer.cli", "record", model, "--feed", f"x={files[n]}"]
            + ["--quiet", *base_flags, "--out", str(sized)],
            check=True,
            capture_output=True,
        )
        (root / f"sizes{n}.json").write_text(json.dumps(part_sizes(sized)))
        shutil.rmtree(sized)
        jobs[("disk", n)] = ["-c", DISK_SCRIPT, str(root / f"sizes{n}.json")]
    for n in spans["forward"]:
        jobs[("forward", n)] = ["-c", FORWARD_SCRIPT, model, str(files[n]), output, str(BATCH)]
    for name, flags in records.items():
        for n in spans[name]:
            jobs[(name, n)] = [
                "-m",
                "tracer.cli",
                "record",
                model,
                "--feed",
                f"x={files[n]}",
                "--quiet",
                *base_flags,
                *flags,
            ]
    per_round: dict[str, list[float]] = {
        k: [] for name in spans for k in (name, f"{name}_ratio", f"{name}_cpu", f"{name}_sys")
    }
    per_round["record_to_limit"] = []
    for r in range(rounds):
        t = {}
        for key, argv in list(jobs.items()) if r % 2 == 0 else list(jobs.items())[::-1]:
            out = root / f"whole-out-{r}-{key[0]}-{key[1]}"
            tail = {"forward": [], "disk": [str(out)]}.get(key[0], ["--out", str(out)])
            t[key] = run(argv + tail)
            shutil.rmtree(out, ignore_errors=True)
        # per batch: (wall, CPU, system) seconds
        marginal = {
            kind: [(t[(kind, hi)][i] - t[(kind, lo)][i]) / (hi - lo) for i in range(3)]
            for kind, (lo, hi) in spans.items()
        }
        for kind in spans:
            per_round[kind].append(marginal[kind][0])
            per_round[f"{kind}_cpu"].append(marginal[kind][1])
            per_round[f"{kind}_sys"].append(marginal[kind][2])
            per_round[f"{kind}_ratio"].append(marginal[kind][0] / marginal["forward"][0])
        per_round["record_to_limit"].append(
            marginal["record"][0] / max(marginal["forward"][0], marginal["disk"][0])
        )

    def median(k):
        return statistics.median(per_round[k])

    return {
        "batches": {kind: list(span) for kind, span in spans.items()},
        "forward_s_per_batch": round(median("forward"), 3),
        "record_s_per_batch": round(median("record"), 3),
        "ratio": round(median("record_ratio"), 2),
        "disk_s_per_batch": round(median("disk"), 3),
        "disk_cpu_s_per_batch": round(median("disk_cpu"), 3),
        "ratio_to_limit": round(median("record_to_limit"), 2),
        "forward_cpu_s_per_batch": round(median("forward_cpu"), 3),
        "record_cpu_s_per_batch": round(median("record_cpu"), 3),
        "record_sys_s_per_batch": round(median("record_sys"), 3),
        "cpu_by_thread_per_batch": thread_cpu(jobs, spans, root),
        "record_write_calls_per_batch": write_calls(
            jobs[("record", small)], jobs[("record", large)], root, large - small
        ),
        **{f"{name}_s_per_batch": round(median(name), 3) for name in variants or {}},
        **{f"{name}_ratio": round(median(f"{name}_ratio"), 2) for name in variants or {}},
        **{f"{name}_cpu_s_per_batch": round(median(f"{name}_cpu"), 3) for name in variants or {}},
        "per_round": {
            k: [round(v, 3) for v in vs]
            for k, vs in per_round.items()
            if not k.startswith(("forward_", "disk_")) and not k.endswith(("_cpu", "_sys"))
        },
    }


def write_calls(small: list[str], large: list[str], root: Path, batches: int) -> int | None:
    """The `write()` calls (and their kin: pwrite, writev) a batch adds to a `gatetrace record`
    process, counted by strace (None where strace is not installed)."""
    if shutil.which("strace") is None:
        return None
    counts = []
    for argv in (small, large):
        out, log = root / "strace-out", root / "strace.txt"
        subprocess.run(
            [
                "strace",
                "-f",
                "-c",
                "-o",
                str(log),
                "-e",
                "trace=write,pwrite64,writev,pwritev",
                sys.executable,
                *argv,
                "--out",
                str(out),
            ],
            check=True,
            capture_output=True,
        )
        shutil.rmtree(out, ignore_errors=True)
        rows = re.findall(
            r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", log.read_text(), re.M
        )
        counts.append(sum(int(calls) for calls, name in rows if name != "total"))
    return round((counts[1] - counts[0]) / batches)


def profile(session, plan: tracer.FetchPlan, feed: dict, root: Path, rounds: int) -> dict:
    """Each pass a batch's values make on their way to disk, timed alone on one thread
    (medians over `rounds`): the fetch (one Session.run), cutting each gate's and state's
    [examples, steps, units] array out of the fetched tensors, building its long columns
    (keys and values), and encoding the Parquet files. In `record` the last three run on
    two worker threads while the next batch is fetched."""
    from recorders.write.columns import gate_columns, state_columns
    from recorders.write.keys import KeyCache
    from recorders.write.rowgroups import write_parquet

    keep = BATCH
    times: dict[str, list[float]] = {k: [] for k in ("fetch", "cut", "columns", "encode")}
    for r in range(rounds):
        start = time.perf_counter()
        values = plan.fetch(session, feed)
        times["fetch"].append(time.perf_counter() - start)
        start = time.perf_counter()
        arrays = []
        for k, cell in enumerate(plan.cells):
            steps = plan.steps(values, k)
            for g in range(len(cell.gates)):
                arrays.append(
                    (
                        "gate",
                        steps,
                        plan.gate(values, k, g, "preactivation", slice(keep)),
                        plan.gate(values, k, g, "activation", slice(keep)),
                    )
                )
            for state in cell.spec.states:
                arrays.append(("state", steps, plan.state(values, k, state, slice(keep)), None))
        times["cut"].append(time.perf_counter() - start)
        ids, keys = np.arange(keep, dtype=np.int64), KeyCache()
        start = time.perf_counter()
        columns = [
            gate_columns(ids, steps, a, b, None, keys)
            if kind == "gate"
            else state_columns(ids, steps, a, None, keys)
            for kind, steps, a, b in arrays
        ]
        times["columns"].append(time.perf_counter() - start)
        start = time.perf_counter()
        for n, c in enumerate(columns):
            write_parquet(root / f"profile-{r}-{n}.parquet", [c], b"{}")
        times["encode"].append(time.perf_counter() - start)
        for f in root.glob(f"profile-{r}-*.parquet"):
            f.unlink()
    return {k: round(statistics.median(v), 4) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--batches", type=int, default=8, help="batches per end-to-end record round"
    )
    parser.add_argument(
        "--sizes",
        default="1000,8000,32000",
        help="sequence counts for the peak-RSS runs ('' to skip)",
    )
    parser.add_argument(
        "--tmp", default=None, help="scratch folder (default: the system's temp folder)"
    )
    parser.add_argument(
        "--whole-rounds",
        type=int,
        default=3,
        help="rounds of the whole-process measurement (0 to skip)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also time each pass over a batch's values (fetch, cut, columns, encode)",
    )
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="gatetrace-bench-", dir=args.tmp))
    try:
        session, x, output, model_path = build_model(root)
        rng = np.random.RandomState(0)
        inputs = rng.randn(BATCH * args.batches, STEPS, FEATURES).astype(np.float32)
        feed = {x: inputs[:BATCH]}
        model = tracer.from_session(session)
        cells = tracer.find_cells(session.graph)
        plan = tracer.FetchPlan(session.graph, cells)

        def timed(f) -> float:
            start = time.perf_counter()
            f()
            return time.perf_counter() - start

        times: dict[str, list[float]] = {
            k: [] for k in ("forward", "fetch", "fetch_assembled", "record_per_batch", "melt")
        }
        manifest = None
        session.run(plan.tensors, feed)  # warm-up
        for r in range(args.rounds):
            out = root / f"record{r}"

            def record(out: Path = out) -> None:
                nonlocal manifest
                manifest = tracer.record(
                    model, {"x": inputs}, out, cells=cells, batch_size=BATCH, memory=2**40
                )

            def melt(r: int = r) -> None:
                folder = root / f"melt{r}"
                folder.mkdir()
                melt_way(plan.run(session, feed), np.arange(BATCH), folder)

            jobs = [
                ("forward", lambda: session.run(output, feed)),
                ("fetch", lambda: session.run(plan.tensors, feed)),
                ("fetch_assembled", lambda: plan.run(session, feed)),
                ("record_per_batch", record),
                ("melt", melt),
            ]
            for name, job in jobs if r % 2 == 0 else jobs[::-1]:
                seconds = timed(job)
                times[name].append(
                    seconds / args.batches if name == "record_per_batch" else seconds
                )
            if r == 0:
                record_bytes, melt_bytes = (
                    folder_bytes(out),
                    folder_bytes(root / "melt0") * args.batches,
                )
            shutil.rmtree(out)
            shutil.rmtree(root / f"melt{r}")

        ratio = {
            k: statistics.median(t / f for t, f in zip(v, times["forward"], strict=True))
            for k, v in times.items()
        }
        results = {
            "model": f"2-layer MultiRNNCell of BasicLSTMCell({UNITS}), static_rnn, T={STEPS}, D={FEATURES}, batch {BATCH}",
            "machine": {
                "cpus": os.cpu_count(),
                "processor": _cpu_name(),
                "python": platform.python_version(),
                "tensorflow": tf.__version__,
                "pyarrow": __import__("pyarrow").__version__,
                "pandas": pd.__version__,
            },
            "rounds": args.rounds,
            "batches_per_record": args.batches,
            "fetched_tensors": len(plan),
            "median_seconds": {k: round(statistics.median(v), 4) for k, v in times.items()},
            "ratio_to_forward": {k: round(v, 2) for k, v in ratio.items()},
            "record_vs_melt": round(
                statistics.median(
                    m / r for m, r in zip(times["melt"], times["record_per_batch"], strict=True)
                ),
                1,
            ),
            "bytes_per_value": round(record_bytes / stored_values(manifest), 2),
            "melt_bytes_per_value": round(melt_bytes / stored_values(manifest), 2),
            "peak_rss": [],
        }
        if args.profile:
            results["profile_s"] = profile(session, plan, feed, root, args.rounds)
        if args.whole_rounds:
            results["whole_process"] = whole_process(
                model_path,
                output.name,
                root,
                args.whole_rounds,
                variants={
                    "memory_8g": ["--memory", "8G"],
                    "compression_lz4": ["--compression", "lz4"],
                },
            )
        for n in [int(s) for s in args.sizes.split(",") if s]:
            results["peak_rss"].append(peak_rss(model_path, n, root))
            print(
                f"  peak RSS at {n:,} sequences: {results['peak_rss'][-1]['peak_rss_mb']} MB",
                file=sys.stderr,
            )
        (HERE / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        _print(results)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _print(r: dict) -> None:
    m, ratio = r["median_seconds"], r["ratio_to_forward"]
    print(
        f"{r['model']}; {r['machine']['cpus']} CPUs ({r['machine']['processor']}); {r['rounds']} rounds"
    )
    print(f"{'':28}{'median s':>10}{'x forward':>11}")
    rows = [
        ("forward pass", "forward"),
        (f"gate fetch ({r['fetched_tensors']} tensors)", "fetch"),
        ("gate fetch + numpy arrays", "fetch_assembled"),
        ("record, per batch", "record_per_batch"),
        ("pandas melt + to_parquet", "melt"),
    ]
    for label, key in rows:
        print(f"{label:28}{m[key]:>10.3f}{ratio[key]:>10.2f}x")
    print(f"record is {r['record_vs_melt']}x faster than the pandas way")
    print(
        f"bytes on disk per stored value: {r['bytes_per_value']} (pandas way: {r['melt_bytes_per_value']})"
    )
    if "profile_s" in r:
        passes = ", ".join(f"{k} {v:.3f} s" for k, v in r["profile_s"].items())
        print(f"passes over one batch, each alone on one thread: {passes}")
    w = r.get("whole_process")
    if w:
        b = w["batches"]
        print(
            f"whole processes, marginal per batch (forward {b['forward'][0]} -> {b['forward'][1]} batches, record {b['record'][0]} -> "
            f"{b['record'][1]}) on {r['machine']['processor']}: forward {w['forward_s_per_batch']:.3f} s, "
            f"record {w['record_s_per_batch']:.3f} s: {w['ratio']:.2f}x"
        )
        print(
            f"  CPU seconds per batch: forward {w['forward_cpu_s_per_batch']:.3f}, record {w['record_cpu_s_per_batch']:.3f} "
            f"(system {w['record_sys_s_per_batch']:.3f}); write() calls per batch: {w['record_write_calls_per_batch']}"
        )
        t = w.get("cpu_by_thread_per_batch")
        if t:
            cores = r["machine"]["cpus"]
            need = sum(t["record"].values()) / cores
            print(
                f"  where a batch's CPU goes (threads' CPU s): forward: TensorFlow {t['forward']['tensorflow']:.3f}, "
                f"main {t['forward']['main']:.3f}; record: TensorFlow {t['record']['tensorflow']:.3f}, "
                f"writer {t['record']['writer']:.3f}, main {t['record']['main']:.3f}; on {cores} cores the record's "
                f"CPU alone needs {need:.3f} s a batch: {need / w['forward_s_per_batch']:.2f}x the forward pass"
            )
        print(
            f"  the disk's floor (the same files written as the writer writes them): {w['disk_s_per_batch']:.3f} s a batch; "
            f"record against max(forward, disk floor): {w['ratio_to_limit']:.2f}x (target 1.25x)"
        )
        for name in ("memory_8g", "compression_lz4"):
            if f"{name}_ratio" in w:
                print(
                    f"  record {name}: {w[f'{name}_s_per_batch']:.3f} s: {w[f'{name}_ratio']:.2f}x"
                )
    for p in r["peak_rss"]:
        print(
            f"peak RSS recording {p['sequences']:>6,} sequences: {p['peak_rss_mb']:>5} MB ({p['seconds']} s, batches of {p['batch_size']})"
        )


if __name__ == "__main__":
    main()
