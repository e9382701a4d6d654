"""How fast `gatetrace view` answers, on the 102.4M-gate-row recording of bench/read.py.

    python bench/view.py [--sequences 1000] [--rounds 3]

Records the model of bench/record.py on `--sequences` random sequences (`bench.read.make_recording`),
then asks the view's server (`recorders.view.server.make_app`, in process, through Starlette's
test client: the server's answer, without a browser's drawing) for: the overview (a fresh app
each round: nothing cached), a heatmap of one sequence, a unit's time course and top positions,
a select, and a match over all examples of one cell. Medians of `--rounds`; the issue's targets:
overview <= 2 s, every other answer <= 500 ms. Prints the figures with the processor and writes
bench/view_results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from read import make_recording
from record import _cpu_name

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from starlette.testclient import TestClient

    from recorders import Recording
    from recorders.view.server import make_app

    with tempfile.TemporaryDirectory() as tmp:
        out, manifest = make_recording(Path(tmp), args.sequences)
        rec = Recording(out)
        cell = rec.cells[0]
        base = {"cell": cell, "label": "f"}
        asks = {
            "heatmap": ("heatmap", {**base, "example": 7}),
            "unit": ("unit", {"cell": cell, "gate": "f", "unit": 3, "example": 7}),
            "select": ("select", {**base, "example": 7, "start": 10, "stop": 20, "threshold": 0.5}),
            "match": ("match", {**base, "units": "1,2,3", "threshold": 0.5, "length": 5}),
        }
        times: dict[str, list[float]] = {"overview": [], **{k: [] for k in asks}}
        for _ in range(args.rounds):
            client = TestClient(
                make_app(Recording(out)), base_url="http://127.0.0.1"
            )  # a host the view serves
            start = time.perf_counter()
            assert client.get("/api/overview").status_code == 200
            times["overview"].append(time.perf_counter() - start)
            for name, (path, params) in asks.items():
                start = time.perf_counter()
                response = client.get(f"/api/{path}", params=params)
                times[name].append(time.perf_counter() - start)
                assert response.status_code == 200, response.text
        results = {
            "processor": _cpu_name(),
            "cpus": os.cpu_count(),
            "gate_rows": manifest["rows"]["gates"],
            "median_seconds": {k: round(statistics.median(v), 3) for k, v in times.items()},
            "targets_seconds": {"overview": 2.0, **{k: 0.5 for k in asks}},
        }
    (HERE / "view_results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
