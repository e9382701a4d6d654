"""How fast `gatetrace view` answers, every endpoint, on the 102.4M-gate-row recording of bench/read.py
or on a recording you give.

    python bench/view.py [--sequences 1000] [--rounds 3]
    python bench/view.py --recording DIR [--labels FILE] [--compare OTHER] [--rounds 3] [--out FILE]

Records the model of bench/record.py on `--sequences` random sequences (`bench.read.make_recording`),
a second time with the preactivation's parts (`--values ...,contributions`, for "what drives
the gate"), and a third time for a comparison; labels each sequence at random (for the units
ranked against labels). Then asks the view's server (`recorders.view.server.make_app`, in
process, through Starlette's test client: the server's answer, without a browser's drawing),
a fresh app each round (nothing cached), for every endpoint: the overview, a heatmap of one
sequence, a unit's time course and top positions, a select, a match (its first answer, which
scans for at most `recorders.view.data.MATCH_SECONDS`, and how many sequences it scanned), one unit's course beside
the labels, the comparison, the units ranked against the labels (the answer while they are
scored, and once scored: the view scores them in the background from its start) and the parts
of one gate at one step. Also times what `gatetrace view --compare` does before it serves
(comparing the two recordings), how long after the view's start the units are scored, and a
match gone on from answer to answer over every sequence. Medians of `--rounds`; the target:
every answer under 1 s. Prints the figures with the processor and writes bench/view_results.json.

With `--recording DIR`, an existing recording instead (made by `gatetrace record`, of any size:
its part files are counted, nothing is recorded): the same endpoints on its first cell's forget
gate (or first gate), unit 3 (or its last), the middle example complete and a select over the
middle third of that example's steps; the units ranked against `--labels FILE` (default: a label
per sequence drawn at random, as above), the comparison with `--compare OTHER` (default: none)
and the parts where the recording holds them. Writes `--out` (default
bench/view_recording_results.json).
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
    parser.add_argument("--recording", help="an existing recording folder to time the view on")
    parser.add_argument("--labels", help="with --recording: labels to rank the units against")
    parser.add_argument("--compare", help="with --recording: another recording to compare with")
    parser.add_argument("--out", help="with --recording: where to write the results")
    args = parser.parse_args()
    import numpy as np

    if args.recording is None:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            out, _ = make_recording(root / "plain", args.sequences)
            parted, _ = make_recording(
                root / "parts",
                args.sequences,
                values=["preactivation", "activation", "contributions"],
            )
            other, _ = make_recording(root / "again", args.sequences)
            labels_file = root / "labels.npy"
            np.save(labels_file, np.random.RandomState(1).rand(args.sequences) > 0.5)
            results = measure(out, labels_file, other, parted, args.rounds)
        target = HERE / "view_results.json"
    else:
        with tempfile.TemporaryDirectory() as tmp:
            labels_file = args.labels
            if labels_file is None:  # a label per sequence, at random
                from recorders import Recording

                stop = max((b for _, b in Recording(args.recording).examples), default=0)
                labels_file = Path(tmp) / "labels.npy"
                np.save(labels_file, np.random.RandomState(1).rand(stop) > 0.5)
            results = measure(Path(args.recording), labels_file, args.compare, None, args.rounds)
        target = Path(args.out) if args.out else HERE / "view_recording_results.json"
    target.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


def measure(out, labels_file, other, parted, rounds: int) -> dict:
    """Each endpoint's time on the recording `out` (medians of `rounds`, a fresh server each):
    the units ranked against `labels_file`, compared with `other` (None: not), the parts of
    `parted` (None: of `out`, where it holds them)."""
    from starlette.testclient import TestClient

    from recorders import Recording
    from recorders.read.compare import compare
    from recorders.read.labels import read_labels
    from recorders.view.server import make_app

    rec = Recording(out)
    cell = rec.cells[0]
    gates = rec.gates(cell)
    gate = "f" if "f" in gates else gates[0]
    unit = min(3, rec.units(cell) - 1)
    pairs = rec.examples
    complete = sum(b - a for a, b in pairs)
    middle, example = complete // 2, pairs[0][0] if pairs else 0
    for a, b in pairs:  # the middle complete example
        if middle < b - a:
            example = a + middle
            break
        middle -= b - a
    base = {"cell": cell, "label": gate}
    # a select over the middle third of the example's steps
    shown = TestClient(make_app(rec), base_url="http://127.0.0.1").get(
        "/api/heatmap", params={**base, "example": example}
    )
    assert shown.status_code == 200, shown.text
    steps = shown.json()["steps"]
    start = steps[len(steps) // 3]
    stop = start + max(1, len(steps) // 3)
    units = ",".join(str(u) for u in range(1, min(4, rec.units(cell))) or ["0"])
    asks = {
        "heatmap": ("heatmap", {**base, "example": example}),
        "unit": ("unit", {"cell": cell, "gate": gate, "unit": unit, "example": example}),
        "select": (
            "select",
            {**base, "example": example, "start": start, "stop": stop, "threshold": 0.5},
        ),
        "match": ("match", {**base, "units": units, "threshold": 0.5, "length": stop - start}),
        "labelled": ("labelled", {"cell": cell, "name": gate, "unit": unit, "example": example}),
    }
    if other is not None:
        asks["compare"] = ("compare", {})
    times: dict[str, list[float]] = {
        "overview": [],
        **{k: [] for k in asks},
        "ranked_while_scoring": [],
        "ranked": [],
        "units_scored_after": [],
        "match_every_sequence": [],
    }
    scanned: list[int] = []  # the sequences the first answer of a match scanned
    if other is not None:
        times["compare_before_serving"] = []
    parts = parted if parted is not None else (out if rec.has_parts() else None)
    if parts is not None:
        times["parts"] = []
    for _ in range(rounds):
        comparison = None
        if other is not None:
            begun = time.perf_counter()
            comparison = compare(Recording(out), Recording(other))
            times["compare_before_serving"].append(time.perf_counter() - begun)
        fresh = Recording(out)
        opened = time.perf_counter()  # the units start being scored in the background
        client = TestClient(
            make_app(
                fresh, unit_labels=read_labels(labels_file, fresh.memory), comparison=comparison
            ),
            base_url="http://127.0.0.1",  # a host the view serves
        )
        begun = time.perf_counter()
        assert client.get("/api/overview").status_code == 200
        times["overview"].append(time.perf_counter() - begun)
        for name, (path, params) in asks.items():
            begun = time.perf_counter()
            response = client.get(f"/api/{path}", params=params)
            times[name].append(time.perf_counter() - begun)
            assert response.status_code == 200, response.text
            if name == "match":
                scanned.append(response.json()["scanned"])
        # the units panel: while the units are scored (from the view's start) it answers how far
        # the scoring is, asked again until it is done; then a panel of another length answers
        # from the scores
        begun = time.perf_counter()
        response = client.get("/api/ranked")
        times["ranked_while_scoring"].append(time.perf_counter() - begun)
        while response.status_code == 200 and not response.json()["done"]:
            time.sleep(0.05)
            response = client.get("/api/ranked")
        assert response.status_code == 200, response.text
        times["units_scored_after"].append(time.perf_counter() - opened)
        begun = time.perf_counter()
        response = client.get("/api/ranked", params={"k": 50})
        times["ranked"].append(time.perf_counter() - begun)
        assert response.status_code == 200, response.text
        # the match gone on from each answer's `next` to the last sequence, as the page does
        begun, at = time.perf_counter(), 0
        while at is not None:
            params = {**asks["match"][1], "k": 1000, "from": at}
            response = client.get("/api/match", params=params)
            assert response.status_code == 200, response.text
            at = response.json()["next"]
        times["match_every_sequence"].append(time.perf_counter() - begun)
        if parts is not None:
            with_parts = TestClient(make_app(Recording(parts)), base_url="http://127.0.0.1")
            begun = time.perf_counter()
            response = with_parts.get(
                "/api/parts", params={"cell": cell, "gate": gate, "example": example, "step": start}
            )
            times["parts"].append(time.perf_counter() - begun)
            assert response.status_code == 200, response.text
    waits = ("compare_before_serving", "units_scored_after", "match_every_sequence")
    answers = [k for k in times if k not in waits]
    return {
        "processor": _cpu_name(),
        "cpus": os.cpu_count(),
        "recording": str(out),
        "gate_rows": rec.summary()["rows"]["gates"],
        "part_files": sum(1 for _ in Path(out).rglob("part-*.parquet")),
        "asked": {"cell": cell, "gate": gate, "unit": unit, "example": example},
        "median_seconds": {k: round(statistics.median(v), 3) for k, v in times.items()},
        # the sequences the first answer of the match scanned (of all the recording holds)
        "match_scanned": {"median": statistics.median(scanned), "of": complete},
        "targets_seconds": {k: TARGET for k in answers},
    }


if __name__ == "__main__":
    main()
