"""A billion gate rows: recorded at the disk's pace, opened in a second, ranked and compared within budget.

    python bench/scale.py [--sequences 9984] [--compare-sequences 1792] [--rounds 3]
                          [--tmp DIR] [--plain-python PATH]

Everything is measured as a user meets it: whole `gatetrace` processes at default settings
and HTTP requests to a `gatetrace view` process, on the model of bench/record.py (a 2-layer
MultiRNNCell of BasicLSTMCell(256), T=50, batches of 256). 9,984 sequences give
1,022,361,600 gate rows (about 20 GB).

1. `gatetrace record` of the billion rows, beside, in the same folder, the forward pass alone
   (bench/record.py's script: the checkpoint loaded, `Session.run` of the output a batch) and
   the disk's floor (the record's own files, same paths and sizes, written as the writer
   writes them: `O_DIRECT`, its threads): the record against max(forward, disk floor).
2. The view: a `gatetrace view --labels` process started fresh each round; the time from its
   start to its first answer, then each endpoint's answer (the overview, a heatmap, a unit, a
   select, a match's first answer (it scans for under a second), a unit beside the labels, the
   ranked units while they are scored and once scored). How many files each answer opens is
   counted by the tests (tests/test_merged.py, tests/test_view_reads.py), not here.
3. `gatetrace units --labels` and `gatetrace compare` on two recordings of
   `--compare-sequences` sequences each (1,792: 183.5M gate rows), two models of the same
   shape on the same inputs: wall time and peak RSS against the default memory budget (half
   the memory available).
4. With `--plain-python`, a Python whose environment has gatetrace installed without any
   optional extra (`pip install .`): the billion rows recorded by it, then step 2 on that
   recording, and its overview checked equal to the first recording's.

Medians of `--rounds`. Prints the figures with the processor and writes
bench/scale_results.json. Needs about 2 x 20 GB free in `--tmp` (the two billion-row
recordings are made one after the other; the first is removed before the second).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

HERE = Path(__file__).resolve().parent
TARGET = 1.0  # seconds, every answer of the view


def timed_run(argv: list[str]) -> dict:
    """One process: its wall seconds, its own peak RSS (MB, from wait4) and its standard output."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode:
            err.seek(0)
            raise RuntimeError(
                f"{argv[:4]} exited {process.returncode}: {err.read().decode()[-2000:]}"
            )
        out.seek(0)
        return {
            "seconds": wall,
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "stdout": out.read().decode(),
        }


def gatetrace(python: str, *args: str) -> list[str]:
    return [python, "-m", "tracer.cli", *args]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def view_round(python: str, recording: Path, labels: Path, cell: str) -> dict:
    """One fresh `gatetrace view` process: the seconds to its first answer and each endpoint's."""
    port = free_port()
    started = time.perf_counter()
    server = subprocess.Popen(
        gatetrace(python, "view", str(recording), "--port", str(port), "--labels", str(labels)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"

    def get(path: str, params: dict | None = None) -> tuple[float, bytes]:
        query = "&".join(f"{k}={v}" for k, v in (params or {}).items())
        start = time.perf_counter()
        with urllib.request.urlopen(
            f"{base}{path}{'?' + query if query else ''}", timeout=600
        ) as r:
            body = r.read()
        return time.perf_counter() - start, body

    try:
        while True:
            try:
                get("/")
                break
            except OSError:
                if server.poll() is not None:
                    raise RuntimeError(server.stderr.read().decode()[-2000:]) from None
                time.sleep(0.05)
        times = {"first_answer_after_start": time.perf_counter() - started}
        times["overview"], overview = get("/api/overview")
        asks = {
            "heatmap": ("/api/heatmap", {"cell": cell, "label": "f", "example": 7}),
            "unit": ("/api/unit", {"cell": cell, "gate": "f", "unit": 3, "example": 7}),
            "select": (
                "/api/select",
                {
                    "cell": cell,
                    "label": "f",
                    "example": 7,
                    "start": 10,
                    "stop": 20,
                    "threshold": 0.5,
                },
            ),
            "match": (
                "/api/match",
                {"cell": cell, "label": "f", "units": "1,2,3", "threshold": 0.5, "length": 5},
            ),
            "labelled": ("/api/labelled", {"cell": cell, "name": "f", "unit": 3, "example": 7}),
        }
        for name, (path, params) in asks.items():
            times[name], _ = get(path, params)
        # the units panel: while the units are scored (begun at the view's start) it answers
        # how far the scoring is, asked again until it is done
        times["ranked_while_scoring"], body = get("/api/ranked")
        while not json.loads(body)["done"]:
            time.sleep(0.1)
            _, body = get("/api/ranked")
        times["units_scored_after_start"] = time.perf_counter() - started
        times["ranked"], _ = get("/api/ranked", {"k": 50})
        # the overview's numbers, the recording's folder (which it names) left out
        shown = overview.decode().replace(json.dumps(str(recording))[1:-1], "RUN")
        return {"times": times, "overview": json.loads(shown)}
    finally:
        server.terminate()
        server.wait()


def view_bench(python: str, recording: Path, labels: Path, cell: str, rounds: int) -> dict:
    per: dict[str, list[float]] = {}
    overview = None
    for _ in range(rounds):
        answer = view_round(python, recording, labels, cell)
        overview = answer["overview"]
        for k, v in answer["times"].items():
            per.setdefault(k, []).append(v)
    medians = {k: round(statistics.median(v), 3) for k, v in per.items()}
    answers = [
        k for k in medians if k not in ("first_answer_after_start", "units_scored_after_start")
    ]
    return {
        "median_seconds": medians,
        "every_answer_under_1s": all(medians[k] < TARGET for k in answers),
        "overview": overview,
    }


def record_bench(python: str, model: str, output: str, inputs: Path, root: Path, name: str) -> dict:
    """The record of `inputs`, the forward pass alone over the same file, and the disk's floor
    (the record's files written again as the writer writes them), each a whole process."""
    from record import DISK_SCRIPT, FORWARD_SCRIPT, part_sizes

    out = root / name
    recorded = timed_run(
        gatetrace(python, "record", model, "--feed", f"x={inputs}", "--out", str(out), "--quiet")
    )
    manifest = json.loads((out / "manifest.json").read_text())
    sizes = root / f"{name}-sizes.json"
    files = part_sizes(out)
    sizes.write_text(json.dumps(files))
    forward = timed_run([python, "-c", FORWARD_SCRIPT, model, str(inputs), output, "256"])
    disk_out = root / f"{name}-disk"
    disk = timed_run([python, "-c", DISK_SCRIPT, str(sizes), str(disk_out)])
    shutil.rmtree(disk_out)
    limit = max(forward["seconds"], disk["seconds"])
    return {
        "folder": out,
        "manifest": manifest,
        "figures": {
            "gate_rows": manifest["rows"]["gates"],
            "bytes": sum(size for _, size in files),
            "part_files": len(files),
            "record_seconds": round(recorded["seconds"], 1),
            "record_peak_rss_mb": recorded["peak_rss_mb"],
            "forward_seconds": round(forward["seconds"], 1),
            "disk_floor_seconds": round(disk["seconds"], 1),
            "record_to_limit": round(recorded["seconds"] / limit, 2),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=9984)
    parser.add_argument("--compare-sequences", type=int, default=1792)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tmp", default=None, help="scratch folder (about 40 GB free)")
    parser.add_argument(
        "--plain-python",
        default=None,
        help="a Python with gatetrace installed without optional extras (pip install .)",
    )
    parser.add_argument(
        "--skip", default="", help="parts to skip, of record,view,units,compare,plain"
    )
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    import numpy as np
    from record import FEATURES, STEPS, _cpu_name, build_model

    from recorders.read.files import default_memory

    results: dict = {
        "processor": _cpu_name(),
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
        "default_memory_budget_mb": round(default_memory() / 2**20),
        "model": "2-layer MultiRNNCell of BasicLSTMCell(256), static_rnn, T=50, D=64, batches of 256",
    }
    python = sys.executable
    root = Path(tempfile.mkdtemp(prefix="gatetrace-scale-", dir=args.tmp))
    try:
        (root / "a").mkdir()
        (root / "b").mkdir()
        _, _, output, model = build_model(root / "a")
        _, _, _, other_model = build_model(root / "b")
        rng = np.random.RandomState(0)
        big = root / "big.npy"
        np.save(big, rng.randn(args.sequences, STEPS, FEATURES).astype(np.float32))
        labels = root / "labels.npy"
        np.save(labels, rng.rand(args.sequences) > 0.5)
        small = root / "small.npy"
        np.save(small, rng.randn(args.compare_sequences, STEPS, FEATURES).astype(np.float32))
        small_labels = root / "small_labels.npy"
        np.save(small_labels, rng.rand(args.compare_sequences) > 0.5)

        if not {"record", "view"} <= skip:
            made = record_bench(python, model, output.name, big, root, "billion")
            results["record"] = made["figures"]
            print(json.dumps(results["record"], indent=2), flush=True)
            cell = json.loads((made["folder"] / "manifest.json").read_text())["cells"][0]["name"]
            first_overview = None
            if "view" not in skip:
                viewed = view_bench(python, made["folder"], labels, cell, args.rounds)
                first_overview = viewed.pop("overview")
                results["view"] = viewed
                print(json.dumps(results["view"], indent=2), flush=True)
            shutil.rmtree(made["folder"])
            if args.plain_python and "plain" not in skip:
                plain = record_bench(args.plain_python, model, output.name, big, root, "plain")
                results["record_without_extras"] = plain["figures"]
                viewed = view_bench(python, plain["folder"], labels, cell, args.rounds)
                overview = viewed.pop("overview")
                viewed["overview_equal_to_the_first"] = (
                    first_overview is None or overview == first_overview
                )
                results["view_without_extras"] = viewed
                print(json.dumps(results["view_without_extras"], indent=2), flush=True)
                shutil.rmtree(plain["folder"])

        if not {"units", "compare"} <= skip:
            a, b = root / "compare-a", root / "compare-b"
            for m, folder in ((model, a), (other_model, b)):
                subprocess.run(
                    gatetrace(python, "record", m, "--feed", f"x={small}", "--out", str(folder))
                    + ["--quiet"],
                    check=True,
                    capture_output=True,
                )
            rows = json.loads((a / "manifest.json").read_text())["rows"]["gates"]
            per: dict[str, list[dict]] = {"units": [], "compare": []}
            for _ in range(args.rounds):
                if "units" not in skip:
                    per["units"].append(
                        timed_run(gatetrace(python, "units", str(a), "--labels", str(small_labels)))
                    )
                if "compare" not in skip:
                    per["compare"].append(timed_run(gatetrace(python, "compare", str(a), str(b))))
            results["units_and_compare"] = {
                "gate_rows_each": rows,
                **{
                    name: {
                        "median_seconds": round(statistics.median(r["seconds"] for r in runs), 1),
                        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
                    }
                    for name, runs in per.items()
                    if runs
                },
            }
            print(json.dumps(results["units_and_compare"], indent=2), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results["load_average_at_end"] = os.getloadavg()
    (HERE / "scale_results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
