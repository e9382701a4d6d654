"""How fast `gatetrace view` answers, every endpoint, on the 102.4M-gate-row recording of bench/read.py.

    python bench/view.py [--sequences 1000] [--rounds 3]

Records the model of bench/record.py on `--sequences` random sequences (`bench.read.make_recording`),
a second time with the preactivation's parts (`--values ...,contributions`, for "what drives
the gate"), and a third time for a comparison; labels each sequence at random (for the units
ranked against labels). Then asks the view's server (`recorders.view.server.make_app`, in
process, through Starlette's test client: the server's answer, without a browser's drawing),
a fresh app each round (nothing cached), for every endpoint: the overview, a heatmap of one
sequence, a unit's time course and top positions, a select, a match over all examples of one
cell, one unit's course beside the labels, the comparison, the units ranked against the labels
(once scored: the view scores them in the background from its start) and the parts of one
gate at one step. Also times what `gatetrace view --compare` does before it serves (comparing
the two recordings) and how long after the view's start the units are scored. Medians of `--rounds`; the target: every answer
under 1 s. Prints the figures with the processor and writes bench/view_results.json.
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
TARGET = 1.0  # seconds, every answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import numpy as np
    from starlette.testclient import TestClient

    from recorders import Recording
    from recorders.read.compare import compare
    from recorders.read.labels import read_labels
    from recorders.view.server import make_app

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        out, manifest = make_recording(root / "plain", args.sequences)
        parted, _ = make_recording(
            root / "parts", args.sequences, values=["preactivation", "activation", "contributions"]
        )
        other, _ = make_recording(root / "again", args.sequences)
        labels_file = root / "labels.npy"
        np.save(labels_file, np.random.RandomState(1).rand(args.sequences) > 0.5)
        rec = Recording(out)
        cell = rec.cells[0]
        base = {"cell": cell, "label": "f"}
        asks = {
            "heatmap": ("heatmap", {**base, "example": 7}),
            "unit": ("unit", {"cell": cell, "gate": "f", "unit": 3, "example": 7}),
            "select": ("select", {**base, "example": 7, "start": 10, "stop": 20, "threshold": 0.5}),
            "match": ("match", {**base, "units": "1,2,3", "threshold": 0.5, "length": 5}),
            "labelled": ("labelled", {"cell": cell, "name": "f", "unit": 3, "example": 7}),
            "compare": ("compare", {}),
        }
        times: dict[str, list[float]] = {
            "overview": [],
            **{k: [] for k in asks},
            "ranked": [],
            "parts": [],
            "compare_before_serving": [],
            "units_scored_after": [],
        }
        for _ in range(args.rounds):
            start = time.perf_counter()
            comparison = compare(Recording(out), Recording(other))
            times["compare_before_serving"].append(time.perf_counter() - start)
            fresh = Recording(out)
            opened = time.perf_counter()  # the units start being scored in the background
            client = TestClient(
                make_app(
                    fresh,
                    unit_labels=read_labels(labels_file, fresh.memory),
                    comparison=comparison,
                ),
                base_url="http://127.0.0.1",  # a host the view serves
            )
            start = time.perf_counter()
            assert client.get("/api/overview").status_code == 200
            times["overview"].append(time.perf_counter() - start)
            for name, (path, params) in asks.items():
                start = time.perf_counter()
                response = client.get(f"/api/{path}", params=params)
                times[name].append(time.perf_counter() - start)
                assert response.status_code == 200, response.text
            # the units panel: the first answer waits for the scores (from the view's start), then
            # a panel of another length answers from them
            assert client.get("/api/ranked").status_code == 200
            times["units_scored_after"].append(time.perf_counter() - opened)
            start = time.perf_counter()
            response = client.get("/api/ranked", params={"k": 50})
            times["ranked"].append(time.perf_counter() - start)
            assert response.status_code == 200, response.text
            with_parts = TestClient(make_app(Recording(parted)), base_url="http://127.0.0.1")
            start = time.perf_counter()
            response = with_parts.get(
                "/api/parts", params={"cell": cell, "gate": "f", "example": 7, "step": 10}
            )
            times["parts"].append(time.perf_counter() - start)
            assert response.status_code == 200, response.text
        answers = [k for k in times if k not in ("compare_before_serving", "units_scored_after")]
        results = {
            "processor": _cpu_name(),
            "cpus": os.cpu_count(),
            "gate_rows": manifest["rows"]["gates"],
            "median_seconds": {k: round(statistics.median(v), 3) for k, v in times.items()},
            "targets_seconds": {k: TARGET for k in answers},
        }
    (HERE / "view_results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
