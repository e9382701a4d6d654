"""`gatetrace view` answers within its time budget whatever the recording's size: a match scans
the sequences in example order until it has found enough or its time is spent, and says how
far it went and where to go on (each answer's matches against pandas reading every row, across
continuations, on recordings of many part files whose sequences have lengths); the units ranked
against labels answer at once how far their scoring is, then the ranking `unit_scores` gives."""

from __future__ import annotations

import re
import threading
import time
from contextlib import contextmanager

import numpy as np
import pandas as pd
import pytest

from recorders import Recording
from recorders.read import units as units_module
from recorders.read.labels import read_labels
from recorders.read.units import findings, unit_scores
from recorders.view import data
from recorders.view.server import make_app
from recorders.write.progress import Shard
from tests import test_view
from tests.test_merged import record

browser = test_view.browser  # the pages' Chromium (Debian's package)
EXAMPLES = 48


def client(rec: Recording, **options):
    from starlette.testclient import TestClient

    return TestClient(make_app(rec, **options), base_url="http://127.0.0.1")


def every_row(run, table: str) -> pd.DataFrame:
    """A table as pandas reads it: every row of every part file."""
    return pd.read_parquet(run / table)


def pandas_matches(rows: pd.DataFrame, units, threshold: float, length: int, column: str):
    """Per example, its longest run (the first of the longest) of consecutive steps at which
    every one of `units` has a row above `threshold`, where it is `length` or longer: a list of
    (example, start, stop) in example order."""
    mine = rows[rows["unit"].isin(units)]
    at = mine.assign(on=mine[column].astype(np.float64) > threshold)
    per = at.groupby(["example", "step"]).agg(on=("on", "all"), n=("unit", "nunique"))
    on = per[per["on"] & (per["n"] == len(set(units)))].reset_index()
    found = []
    for example, steps in on.groupby("example")["step"]:
        best, best_start, run = 0, 0, 0
        previous = None
        for s in sorted(steps):
            run = run + 1 if previous is not None and s == previous + 1 else 1
            previous = s
            if run > best:
                best, best_start = run, s - run + 1
        if best >= length:
            found.append((int(example), int(best_start), int(best_start + best)))
    return found


ASKS = {
    "a gate's activation": ("gates", "gate", "f", "activation", [0, 2], 0.3, 2),
    "a gate's preactivation, one unit": ("gates", "gate", "j", "preactivation", [4], -1.2, 3),
    "a state": ("states", "state", "c", "value", [1, 3], 0.2, 1),
}


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("ask", list(ASKS))
def test_a_match_is_pandas_over_every_row_across_continuations(tmp_path, monkeypatch, ask, shards):
    """A recording of 2 sequences a part file (the sequences 1 to 6 steps long, no rows past
    their length), its matches asked with no time to spend (each answer then reads one part
    file) and a few at a time: each answer's matches are exactly pandas' of the examples it
    scanned, [from, next), and going on from each `next` until it is null gives every match
    pandas finds, each example scanned once; with time, one answer scans them all."""
    run = tmp_path / "run"
    for k in range(shards):
        record(run, (0, EXAMPLES), 2, Shard(k, shards))
    table, kind, label, column, units, threshold, length = ASKS[ask]
    rows = every_row(run, table)
    rows = rows[(rows["cell"] == "lstm") & (rows[kind] == label)]
    want = pandas_matches(rows, units, threshold, length, column)
    assert 5 < len(want) < EXAMPLES - 5  # some sequences match, some do not
    rec = Recording(run)
    asked = {
        "cell": "lstm",
        "label": label,
        "kind": kind,
        **({"column": column} if kind == "gate" else {}),
        "units": ",".join(map(str, units)),
        "threshold": threshold,
        "length": length,
    }
    view = client(rec)
    monkeypatch.setattr(data, "MATCH_SECONDS", 0.0, raising=False)
    got, scanned, at, answers = [], 0, 0, 0
    while at is not None:
        answer = view.get("/api/match", params={**asked, "k": 3, "from": at})
        assert answer.status_code == 200, answer.text
        m = answer.json()
        assert m["from"] == at and m["sequences"] == EXAMPLES
        stop = EXAMPLES if m["next"] is None else m["next"]
        mine = [(x["example"], x["start"], x["stop"]) for x in m["matches"]]
        assert mine == [w for w in want if at <= w[0] < stop]
        assert all(x["length"] == x["stop"] - x["start"] for x in m["matches"])
        assert len(mine) <= 3
        # no time: one part file (2 sequences), or fewer where the third match ends it
        assert m["scanned"] == stop - at <= 2 or (m["next"] is None and m["scanned"] == 0)
        got += mine
        scanned += m["scanned"]
        at = m["next"]
        answers += 1
    assert got == want and scanned == EXAMPLES and answers >= EXAMPLES // 2
    monkeypatch.setattr(data, "MATCH_SECONDS", 60.0, raising=False)
    whole = view.get("/api/match", params={**asked, "k": 1000}).json()
    assert [(x["example"], x["start"], x["stop"]) for x in whole["matches"]] == want
    assert whole["next"] is None and whole["scanned"] == EXAMPLES
    # the code the answer shows reads the same examples
    scope: dict = {}
    exec(whole["python"], scope)
    on = scope["on"]
    assert on.shape[0] == EXAMPLES


def test_a_match_stops_at_the_k_th_and_goes_on_from_the_next_example(tmp_path):
    """Batches of 8 sequences: the k-th match ends the answer inside a part file's row group,
    and the next answer reads the rest of it (the examples from `next` on), not its first ones
    again."""
    run = tmp_path / "run"
    record(run, (0, EXAMPLES), 8)
    rows = every_row(run, "gates")
    rows = rows[(rows["cell"] == "lstm") & (rows["gate"] == "i")]
    want = pandas_matches(rows, [1], 0.5, 1, "activation")
    assert len(want) > 10
    view = client(Recording(run))
    asked = {"cell": "lstm", "label": "i", "units": "1", "threshold": 0.5, "length": 1, "k": 2}
    first = view.get("/api/match", params=asked).json()
    assert [x["example"] for x in first["matches"]] == [w[0] for w in want[:2]]
    assert first["next"] == want[1][0] + 1 and first["scanned"] == want[1][0] + 1
    second = view.get("/api/match", params={**asked, "from": first["next"]}).json()
    assert [x["example"] for x in second["matches"]] == [w[0] for w in want[2:4]]
    assert second["scanned"] == want[3][0] + 1 - first["next"]


def test_a_part_file_named_otherwise_is_one_line_for_a_match(tmp_path):
    """A part file of another name may hold any example: a scan in example order cannot know
    where it lies, and says so in one line naming it (was: read with the others)."""
    run = tmp_path / "run"
    record(run, (0, 12), 2)
    folder = run / "gates" / "cell=lstm" / "gate=f"
    (folder / "part-0000000004.parquet").rename(folder / "part-extra.parquet")
    answer = client(Recording(run)).get(
        "/api/match", params={"cell": "lstm", "label": "f", "units": "1", "threshold": 0.5}
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert "\n" not in error and error.startswith(
        f"{run}/gates/cell=lstm/gate=f/part-extra.parquet:"
    )


def test_the_ranked_units_answer_at_once_while_they_are_scored(tmp_path, monkeypatch):
    """While the units are scored (held after their first group), the ranked units answer at
    once how far the scoring is (units scored of all); once it is done, the ranking
    `unit_scores` gives. (Was: the answer waited for every unit to be scored.)"""
    run = tmp_path / "run"
    record(run, (0, 24), 4)
    rec = Recording(run)
    np.save(tmp_path / "labels.npy", np.arange(24) % 3 == 0)
    labels = read_labels(tmp_path / "labels.npy", rec.memory)
    release = threading.Event()
    give_up = time.monotonic() + 20  # (a server that waits for the scores answers after this)
    scoring, calls = units_module.score_columns, []

    def held(*args, **options):  # the first group of units scored, the others held
        calls.append(None)
        if len(calls) > 1:
            release.wait(max(0.0, give_up - time.monotonic()))
        return scoring(*args, **options)

    monkeypatch.setattr(units_module, "score_columns", held)
    view = client(rec, unit_labels=labels)
    units = sum(
        rec.width(table, cell, name) * (2 if table == "gates" else 1)
        for cell in rec.cells
        for table, names in (("gates", rec.gates(cell)), ("states", rec.states(cell)))
        for name in names
    )
    answer = None
    for _ in range(200):  # until a group is scored
        begun = time.monotonic()
        answer = view.get("/api/ranked").json()
        assert time.monotonic() - begun < 5 and answer["done"] is False, answer
        if answer["progress"]["scored"]:
            break
        time.sleep(0.05)
    assert answer is not None and answer["labels"].endswith("labels.npy")
    assert answer["metric"] == "auc" and answer["progress"]["units"] == units
    assert 0 < answer["progress"]["scored"] < units
    release.set()
    for _ in range(400):
        answer = view.get("/api/ranked", params={"k": 7}).json()
        if answer["done"]:
            break
        time.sleep(0.05)
    assert answer["done"] is True
    want = findings(unit_scores(rec, labels)).head(7)
    keys = ["cell", "table", "name", "column", "unit"]
    assert [[r[k] for k in keys] for r in answer["rows"]] == want[keys].values.tolist()
    np.testing.assert_allclose([r["score"] for r in answer["rows"]], want["score"], atol=1e-6)


def test_a_scoring_that_fails_answers_its_error_in_one_line(tmp_path):
    """Labels of fewer sequences than the recording holds: the scoring fails in the background,
    and the ranked units answer its error, one line."""
    run = tmp_path / "run"
    record(run, (0, 12), 4)
    rec = Recording(run)
    np.save(tmp_path / "labels.npy", np.arange(8) % 2 == 0)
    view = client(rec, unit_labels=read_labels(tmp_path / "labels.npy", rec.memory))
    for _ in range(400):
        answer = view.get("/api/ranked")
        if answer.status_code != 200 or answer.json()["done"]:
            break
        time.sleep(0.05)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert "\n" not in error and "does not cover the recording" in error


# -- the page ------------------------------------------------------------------------------------


@contextmanager
def serving_here(app):
    """`app` served by uvicorn on a free port of 127.0.0.1, in this process (so that a test may
    change what the server does); yields the port."""
    import uvicorn

    port = test_view.free_port()
    running = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    for _ in range(200):
        if running.started:
            break
        time.sleep(0.05)
    try:
        yield port
    finally:
        running.should_exit = True
        thread.join(10)


@pytest.mark.e2e
def test_the_page_goes_on_scanning_and_more_goes_on_again(tmp_path, monkeypatch, browser):
    """A match in the page, on a recording of 30 part files per gate, the server given no time
    (each answer reads one part file): the page goes on from each answer's `next` until it has
    20 matches, the first 20 in example order as pandas finds them, and says how many sequences
    it scanned; "more" goes on to the end, and then is gone."""
    run = tmp_path / "run"
    record(run, (0, 60), 2)
    rows = every_row(run, "gates")
    f = rows[(rows["cell"] == "lstm") & (rows["gate"] == "f")]
    first = f[(f["example"] == 0) & (f["step"] == 0)].sort_values("unit")["activation"]
    for threshold in np.round(np.sort(first.to_numpy())[::-1] - 0.005, 3):
        units = np.flatnonzero(first.to_numpy() > threshold).tolist()
        want = pandas_matches(f, units, threshold, 1, "activation")
        if 25 <= len(want) <= 50:
            break
    assert 25 <= len(want) <= 50  # "more" once or twice
    monkeypatch.setattr(data, "MATCH_SECONDS", 0.0, raising=False)
    with serving_here(make_app(Recording(run))) as port:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        asked: list[str] = []
        page.on("request", lambda r: asked.append(r.url) if "/api/match" in r.url else None)
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector("body[data-ready='1']", timeout=30000)
        page.fill("#start", "0")
        page.fill("#stop", "1")
        page.fill("#threshold", str(threshold))
        page.click("#select")
        page.wait_for_function("window.gatetrace.select !== null")
        assert page.evaluate("window.gatetrace.select.units") == units
        page.click("#match")
        page.wait_for_function("window.gatetrace.match !== null", timeout=30000)
        got = page.evaluate("window.gatetrace.match")
        shown = [(m["example"], m["start"], m["stop"]) for m in got["matches"]]
        assert shown == want[:20]
        scanned = want[19][0] + 1  # up to the 20th match
        assert got["scanned"] == scanned and got["next"] == scanned
        assert len(asked) >= scanned // 2  # an answer a part file
        note = page.inner_text("#match-count")
        assert f"the first {scanned} of 60 sequences" in note, note
        assert page.locator("#matches tbody tr").count() == 20
        assert page.locator("#match-more").is_visible()
        for more in range(1, 3):  # 20 more each time, to the end
            page.click("#match-more")
            page.wait_for_function("window.gatetrace.match !== null", timeout=30000)
            got = page.evaluate("window.gatetrace.match")
            assert [m["example"] for m in got["matches"]] == [w[0] for w in want[: 20 * (more + 1)]]
            if got["next"] is None:
                break
        assert [(m["example"], m["start"], m["stop"]) for m in got["matches"]] == want
        assert got["scanned"] == 60 and "in all 60 sequences" in page.inner_text("#match-count")
        assert page.locator("#matches tbody tr").count() == len(want)
        assert not page.locator("#match-more").is_visible()
        page.close()


@pytest.mark.e2e
def test_the_page_says_how_far_the_scoring_is_then_shows_the_ranking(
    tmp_path, monkeypatch, browser
):
    """The units being scored (held after their first group): the page's units panel says how
    many units are scored of all while the rest of the page is ready to use; once they all
    are, the ranking `unit_scores` gives."""
    run = tmp_path / "run"
    record(run, (0, 24), 4)
    rec = Recording(run)
    np.save(tmp_path / "labels.npy", np.arange(24) % 3 == 0)
    labels = read_labels(tmp_path / "labels.npy", rec.memory)
    release = threading.Event()
    give_up = time.monotonic() + 60
    scoring, calls = units_module.score_columns, []

    def held(*args, **options):
        calls.append(None)
        if len(calls) > 1:
            release.wait(max(0.0, give_up - time.monotonic()))
        return scoring(*args, **options)

    monkeypatch.setattr(units_module, "score_columns", held)
    with serving_here(make_app(rec, unit_labels=labels)) as port:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_function(
            "document.getElementById('units-note').textContent.includes('units scored')",
            timeout=20000,
        )
        note = page.inner_text("#units-note")
        assert re.search(
            r"Scoring every unit against the labels: [1-9]\d* of 59 units scored", note
        )
        assert page.evaluate("window.gatetrace.heatmap") is not None  # the sequence is shown
        assert page.evaluate("window.gatetrace.ranked") is None
        release.set()
        page.wait_for_selector("body[data-ready='1']", timeout=30000)
        ranked = page.evaluate("window.gatetrace.ranked")
        want = findings(unit_scores(rec, labels)).head(20)
        keys = ["cell", "table", "name", "column", "unit"]
        assert [[r[k] for k in keys] for r in ranked["rows"]] == want[keys].values.tolist()
        assert page.locator("#ranked tbody tr").count() == len(want)
        assert "units scored by AUC" in page.inner_text("#units-note")
        page.close()


def test_a_part_file_whose_row_groups_are_out_of_order_is_one_line_for_a_match(tmp_path):
    """A part file written again with its examples' row groups in reverse order (its name, rows
    and footer as they were): a scan that goes on from an example would skip those before it,
    so a match names the file in one line (was: read whole, in any order)."""
    import pyarrow.parquet as pq

    run = tmp_path / "run"
    record(run, (0, 12), 4)
    rel = "gates/cell=lstm/gate=f/part-0000000004.parquet"
    path = run / rel
    rows = pq.ParquetFile(path).read()
    metadata = pq.read_metadata(path).metadata
    examples = rows.column("example").to_numpy()
    schema = rows.schema.with_metadata(metadata)
    with pq.ParquetWriter(path, schema, write_page_checksum=True) as writer:
        for example in range(7, 3, -1):  # a row group an example, the last first
            writer.write_table(rows.filter(examples == example).cast(schema))
    assert pq.ParquetFile(path).num_row_groups == 4
    answer = client(Recording(run)).get(
        "/api/match", params={"cell": "lstm", "label": "f", "units": "1", "threshold": 0.5}
    )
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert "\n" not in error and error.startswith(f"{run}/{rel} is not a part file gatetrace wrote")
