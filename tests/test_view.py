"""`gatetrace view` in a real browser: headless Chromium (the OS package) driven by Playwright
against a whole `gatetrace view` process, on a recording of a real model with a planted
pattern (unit 3 of the forget gate forced high over steps 5-9 in some examples), on the
demo's recording, and the server's answers to bad requests.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

import tracer
from recorders import Recording
from tracer._tf import tf, v1

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
CELL = "rnn/basic_lstm_cell"
PLANTED = [1, 4, 6]  # the examples whose unit 3 of f is on over steps 5-9
STEPS, UNITS, N = 14, 6, 9


def planted_recording(root: Path) -> Path:
    """A BasicLSTMCell(6) whose forget gate unit 3 follows input feature 0 (weight 6) and no other
    unit does (weights of 0.05): feature 0 is +2 over steps 5-9 of the planted examples, -2 elsewhere."""
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, STEPS, 2], name="x")
        v1.nn.static_rnn(
            v1.nn.rnn_cell.BasicLSTMCell(UNITS), tf.unstack(x, axis=1), dtype=tf.float32
        )
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
        kernel = next(v for v in v1.global_variables() if v.op.name.endswith("kernel"))
        k = np.random.RandomState(0).uniform(-0.05, 0.05, kernel.shape.as_list()).astype(np.float32)
        k[0, 2 * UNITS + 3] = 6.0  # feature 0 -> f (third block), unit 3
        kernel.load(k, session)
        path = v1.train.Saver().save(session, str(root / "model" / "model.ckpt"))
    xs = np.full((N, STEPS, 2), 0.0, np.float32)
    xs[:, :, 0] = -2.0
    xs[PLANTED, 5:10, 0] = 2.0
    with tracer.load_model(path) as model:
        tracer.record(
            model, {"x": xs}, root / "rec", values=["preactivation", "activation", "contributions"]
        )
    tokens = np.array([[f"t{e}.{s}" for s in range(STEPS)] for e in range(N)])
    np.save(root / "tokens.npy", tokens)
    return root / "rec"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def view(*args: str, cwd: Path | None = None) -> subprocess.Popen:
    """`gatetrace view ARGS`, run in `cwd` (the paths the page shows are those given, so the
    screenshots of the docs show a user's relative paths, not the tests' folders)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tracer.cli", "view", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )


def wait_up(port: int, process: subprocess.Popen) -> None:
    for _ in range(200):
        if process.poll() is not None:
            raise AssertionError(process.stderr.read())
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("gatetrace view did not start")


@contextmanager
def serving(run: Path, *args: str, cwd: Path | None = None):
    """`gatetrace view RUN [ARGS]` on a free port (run in `cwd`), stopped on leaving; yields the port."""
    port = free_port()
    process = view(str(run), "--port", str(port), *args, cwd=cwd)
    try:
        wait_up(port, process)
        yield port
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("view")
    rec = planted_recording(root)
    port = free_port()
    process = view(str(rec), "--port", str(port), "--tokens", str(root / "tokens.npy"))
    try:
        wait_up(port, process)
        yield rec, port, root
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: .ci/run installs the OS package chromium")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield b
        b.close()


def shots_folder(tmp_path: Path) -> list[Path]:
    """Where screenshots go: the test's folder, and docs/ when GATETRACE_DOCS_SCREENSHOTS is set."""
    folders = [tmp_path]
    if os.environ.get("GATETRACE_DOCS_SCREENSHOTS"):
        folders.append(Path(__file__).resolve().parent.parent / "docs")
    return folders


def test_every_view_in_a_browser(served, browser, tmp_path):
    rec_path, port, root = served
    rec = Recording(rec_path)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(f"http://127.0.0.1:{port}/")
    page.wait_for_selector("body[data-ready='1']", timeout=30000)
    assert all(u.startswith(f"http://127.0.0.1:{port}/") for u in requests), (
        "the page loads nothing from elsewhere"
    )

    # overview: the cells, their gates, a saturation and a band plot per gate
    rows = page.locator("#cells tbody tr").all_inner_texts()
    assert len(rows) == 1 and rows[0].split("\t")[:3] == [CELL, "BasicLSTMCell", str(UNITS)]
    assert (
        page.locator("#saturation .main-svg").count() >= 4
        and page.locator("#bands .main-svg").count() >= 4
    )
    shots = [tmp_path]  # the README's screenshots come from the demo's recording (below)
    for folder in shots:
        page.locator("#overview").screenshot(path=str(folder / "view-overview.png"))

    # one sequence: example 2 of gate f, values equal the recording's, steps labelled by --tokens
    page.fill("#example", "2")
    page.select_option("#label", "f")
    page.click("#show")
    page.wait_for_function("window.gatetrace.heatmap && window.gatetrace.heatmap.example === 2")
    heat = page.evaluate("window.gatetrace.heatmap")
    want = rec.gate_array(CELL, "f", examples=(2, 3))[0]
    assert np.array(heat["values"]).shape == (STEPS, UNITS)
    np.testing.assert_allclose(np.array(heat["values"], dtype=np.float64), want, atol=1e-6)
    assert heat["tokens"] == [f"t2.{s}" for s in range(STEPS)]
    ticks = page.eval_on_selector_all("#heatmap .ytick text", "els => els.map(e => e.textContent)")
    assert "5 t2.5" in ticks
    for folder in shots:
        page.locator("#sequence").screenshot(path=str(folder / "view-sequence.png"))

    # select over the planted pattern, in a planted example: unit 3 only; match finds the planted examples
    page.fill("#example", "4")
    page.click("#show")
    page.wait_for_function("window.gatetrace.heatmap.example === 4")
    page.fill("#start", "5")
    page.fill("#stop", "10")
    page.fill("#threshold", "0.95")
    page.check("#outside")
    page.click("#select")
    page.wait_for_function("window.gatetrace.select && window.gatetrace.select.example === 4")
    assert page.inner_text("#selected-units") == "3"
    page.click("#match")
    page.wait_for_function("window.gatetrace.match !== null")
    found = page.evaluate("window.gatetrace.match.matches")
    assert sorted(m["example"] for m in found) == PLANTED and {
        (m["start"], m["stop"]) for m in found
    } == {(5, 10)}
    assert len(page.locator("#matches tbody tr").all()) == len(PLANTED)
    for folder in shots:
        page.locator("#select-panel").screenshot(path=str(folder / "view-select.png"))

    # clicking a cell: the unit's time course and top positions, and the step's parts
    page.locator("#heatmap").scroll_into_view_if_needed()
    box = page.locator("#heatmap .nsewdrag").first.bounding_box()
    page.evaluate("Plotly.relayout('heatmap', {dragmode: 'zoom'})")
    # unit 3, step 6
    at = (box["x"] + box["width"] * (3.5 / UNITS), box["y"] + box["height"] * (6.5 / STEPS))
    page.mouse.move(*at)
    # Plotly's tooltip: the exact value, example, step, unit
    page.wait_for_selector("#heatmap .hovertext")
    tooltip = page.eval_on_selector("#heatmap .hovertext", "e => e.textContent")
    assert "example 4" in tooltip and "step 6 (t4.6)" in tooltip and "unit 3" in tooltip
    value = float(rec.gate_array(CELL, "f", examples=(4, 5))[0, 6, 3])
    assert f"activation {round(value, 6)}"[:20] in tooltip
    page.mouse.click(*at)
    page.wait_for_function("window.gatetrace.unit !== null && window.gatetrace.parts !== null")
    unit = page.evaluate("window.gatetrace.unit")
    assert unit["unit"] == 3 and unit["example"] == 4
    np.testing.assert_allclose(
        unit["values"], rec.gate_array(CELL, "f", examples=(4, 5))[0, :, 3], atol=1e-6
    )
    top = unit["top"]
    # where unit 3 is forced on
    assert set(zip(top["example"], top["step"], strict=True)) <= {
        (e, s) for e in PLANTED for s in range(5, 10)
    }
    column = rec.gate_array(CELL, "f")[:, :, 3]
    np.testing.assert_allclose(top["value"], np.sort(column, axis=None)[::-1][:10], atol=1e-6)
    parts = page.evaluate("window.gatetrace.parts")
    assert parts["step"] == 6
    df = rec.gate_frame(
        [CELL], ["f"], steps=(6, 7), examples=(4, 5), columns=["input", "recurrent", "bias"]
    )
    np.testing.assert_allclose(parts["input"], df["input"], atol=1e-6)
    np.testing.assert_allclose(parts["recurrent"], df["recurrent"], atol=1e-6)
    # the link to Python: run it, get the same
    code = page.eval_on_selector("#parts-python", "e => e.textContent")
    *setup, last = code.strip().splitlines()
    scope: dict = {}
    exec("\n".join(setup), scope)  # the code the page shows
    np.testing.assert_allclose(eval(last, scope)["input"], parts["input"], atol=1e-6)
    for folder in shots:
        page.locator("#unit-panel").screenshot(path=str(folder / "view-unit.png"))
        page.locator("#parts-panel").screenshot(path=str(folder / "view-parts.png"))

    # a malformed request from the page gets an answer in the page, not a traceback
    page.fill("#example", "-1")
    page.click("#show")
    page.wait_for_selector("#error:not([hidden])")
    assert "parameter 'example'" in page.inner_text("#error")
    page.close()


def test_bad_requests_get_clear_answers(served):
    rec_path, port, _ = served

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    for path in (
        "/static/../manifest.json",
        "/static/..%2Fmanifest.json",
        "/gates/",
        "/manifest.json",
        "/static/x.py",
    ):
        code, body = get(path)
        assert code == 404 and "Traceback" not in body, path
    code, body = get("/api/heatmap?cell=rnn/basic_lstm_cell&label=f&example=abc")
    assert code == 400 and "expected an integer" in body
    code, body = get("/api/match?cell=rnn/basic_lstm_cell&label=f&units=1;DROP&threshold=0.5")
    assert code == 400 and "integers separated by commas" in body
    code, body = get("/api/heatmap?cell=../../etc&label=f&example=0")
    assert code == 400 and "the recording's cells are" in body
    code, body = get(
        "/api/select?cell=rnn/basic_lstm_cell&label=f&example=0&start=5&stop=10&threshold=nan"
    )
    assert code == 400 and "finite" in body
    for path in ("/favicon.ico", "/static/favicon.svg"):  # (before: a 404 on every load)
        code, body = get(path)
        assert code == 200 and body.startswith("<svg"), path
    # a unit past the cell's: said by number (before: 200 with empty arrays)
    code, body = get("/api/unit?cell=rnn/basic_lstm_cell&gate=f&unit=99&example=0")
    assert code == 400 and "unit 99: rnn/basic_lstm_cell gate f has units 0 to " in body, body
    from recorders import Recording
    from recorders.errors import SelectionError
    from recorders.view.labelled import labelled_course

    for table, name in (("gates", "f"), ("states", "h")):  # what /api/labelled answers
        with pytest.raises(
            SelectionError, match=f"unit 99: rnn/basic_lstm_cell {table[:-1]} {name} has"
        ):
            labelled_course(
                Recording(rec_path), None, "rnn/basic_lstm_cell", table, name, "activation", 99, 0
            )


def _get(url: str, headers: dict | None = None) -> tuple[int, str, dict]:
    """(status, body, headers) of a GET, errors included."""
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers or {}), timeout=10
        ) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), dict(err.headers)


def test_a_foreign_host_is_refused_and_no_cors_header_is_sent(served):
    """DNS rebinding: a page of another site whose name resolves to 127.0.0.1 sends its own name
    as Host. Refused (400); the page's own names are served, and no answer allows another origin."""
    _, port, _ = served
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example"):
        code, body, _ = _get(f"http://127.0.0.1:{port}/api/overview", {"Host": host})
        assert code == 400 and "Traceback" not in body, host
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        code, body, headers = _get(
            f"http://127.0.0.1:{port}/api/overview", {"Host": host, "Origin": "http://evil.example"}
        )
        assert code == 200 and '"cells"' in body, host
        assert not any(k.lower().startswith("access-control-") for k in headers), headers


def test_on_another_address_the_view_needs_its_token(served):
    """Bound to another address (here 127.0.0.2, still this machine), the server prints a URL with a
    token; without it every request gets a 403, with it the page and the API answer, and the
    cookie it sets lets the page's own requests through."""
    rec_path, _, _ = served
    port = free_port()
    process = view(str(rec_path), "--port", str(port), "--host", "127.0.0.2")
    try:
        line = process.stderr.readline()
        assert f"at http://127.0.0.2:{port}/?token=" in line, line
        url = line.split(" at ")[1].split()[0]
        token = url.split("token=")[1]
        for _ in range(200):
            try:
                code, body, headers = _get(url)
                break
            except urllib.error.URLError:  # not listening yet
                time.sleep(0.1)
        assert code == 200 and "<html" in body.lower()
        cookie = headers.get("set-cookie") or headers.get("Set-Cookie")
        assert (
            cookie.startswith(f"gatetrace_view_token={token};")
            and "HttpOnly" in cookie
            and "SameSite=Strict" in cookie
        )
        base = f"http://127.0.0.2:{port}"
        wrong = token[:-1] + ("y" if token.endswith("x") else "x")  # (one ending in x: not wrong)
        for path in ("/", "/api/overview", f"/api/overview?token={wrong}"):
            code, body, _ = _get(base + path)
            assert code == 403 and "needs its token" in body, path
        assert _get(base + "/api/overview", {"Cookie": cookie.split(";")[0]})[0] == 200
        # the token is the check here
        assert _get(base + f"/api/overview?token={token}", {"Host": "evil.example"})[0] == 200
    finally:
        process.terminate()
        process.wait(10)


def test_a_bad_run_folder_and_a_port_in_use_get_one_line(served, tmp_path):
    _, port, _ = served
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracer.cli",
            "view",
            str(tmp_path / "nothing"),
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (  # (before: "has no gates/ folder" of a folder that is not there)
        done.returncode == 2
        and done.stderr.count("\n") == 1
        and f"{tmp_path / 'nothing'} does not exist" in done.stderr
    )
    rec_path, _, _ = served
    done = subprocess.run(
        [sys.executable, "-m", "tracer.cli", "view", str(rec_path), "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        done.returncode == 2
        and done.stderr.count("\n") == 1
        and f"port {port}" in done.stderr
        and "--port" in done.stderr
    )


@pytest.fixture(scope="module")
def demo_served(tmp_path_factory):
    """`gatetrace view` over the recording `gatetrace demo` makes."""
    from tracer.demo import run_demo

    root = tmp_path_factory.mktemp("demo")
    run_demo(root / "demo")
    port = free_port()
    process = view("demo/recording", "--port", str(port), cwd=root)
    try:
        wait_up(port, process)
        yield root / "demo", port
    finally:
        process.terminate()
        process.wait(10)


def test_the_demo_recording_in_a_browser(demo_served, browser, tmp_path):
    """Every view over the demo's recording, each checked against numpy over the recording;
    the README's screenshots are these."""
    from recorders.read.analysis import saturation

    demo, port = demo_served
    rec = Recording(demo / "recording")
    (cell,) = rec.cells
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"http://127.0.0.1:{port}/")
    page.wait_for_selector("body[data-ready='1']", timeout=60000)
    shots = shots_folder(tmp_path)

    # overview: the cell, and each gate's saturation as analysis computes it
    rows = page.locator("#cells tbody tr").all_inner_texts()
    assert [r.split("\t")[:2] for r in rows] == [[cell, "BasicLSTMCell"]]
    shown = {g["gate"]: g for g in page.evaluate("window.gatetrace.overview.cells[0].gate_stats")}
    sat = saturation(rec)
    for gate in rec.gates(cell):
        want = sat[sat["gate"] == gate].sort_values("unit")
        np.testing.assert_allclose(shown[gate]["left"], want["left"], atol=1e-4)
        np.testing.assert_allclose(shown[gate]["right"], want["right"], atol=1e-4)
    # what a reader reads: the axes say what left and right are, the size is in bytes' units
    note = page.inner_text("#saturation-note")
    assert "below 0.1 and above 0.9 for sigmoid, below -0.9 and above 0.9 for tanh" in note
    layouts = page.evaluate(
        "[...document.querySelectorAll('#saturation > div')].map((d) => d.layout)"
    )
    by_gate = dict(zip(rec.gates(cell), layouts, strict=True))  # i j f o: j is the tanh candidate
    assert (
        by_gate["i"]["xaxis"]["title"]["text"] == "share below 0.1"
        and layouts[0]["xaxis"]["range"][0] < 0
    )
    assert by_gate["j"]["xaxis"]["title"]["text"] == "share below -0.9"
    assert by_gate["j"]["title"]["text"] == "j (tanh): saturation"
    band = page.evaluate("document.querySelector('#bands > div').layout")
    assert band["showlegend"] and band["yaxis"]["title"]["text"] == "activation"
    # the band comes from the statistics the files carry, and its legend says how near it is
    names = page.evaluate("document.querySelector('#bands > div').data.map((t) => t.name)")
    assert 0 < shown["i"]["within"] <= 2 / 256
    assert f"10th-90th percentile (within {shown['i']['within']:.2g})" in names
    size = page.locator("#summary tr", has_text="on disk").inner_text()
    assert size.split("\t")[1].endswith(("KB", "MB")), size
    for folder in shots:
        page.locator("#overview").screenshot(path=str(folder / "view-overview.png"))

    # before a click, the unit panel says what to do (no blank box)
    assert page.locator("#unit-hint").is_visible() and not page.locator("#course").is_visible()

    # one sequence whose marker was +1: the forget gate's heatmap equals the recording's
    marked = np.load(demo / "inputs.npy")[:, 0, 1]
    example = int(np.flatnonzero(marked > 0)[0])
    page.fill("#example", str(example))
    page.select_option("#label", "f")
    page.click("#show")
    page.wait_for_function(
        f"window.gatetrace.heatmap && window.gatetrace.heatmap.example === {example}"
    )
    f = rec.gate_array(cell, "f")  # [examples, steps, units]
    np.testing.assert_allclose(
        np.array(page.evaluate("window.gatetrace.heatmap.values"), np.float64),
        f[example],
        atol=1e-6,
    )
    # one colour scale per gate and column, titled, the same for every sequence
    trace = page.evaluate("document.getElementById('heatmap').data[0]")
    assert (trace["zmin"], trace["zmax"]) == (0, 1)
    assert trace["colorbar"]["title"]["text"] == "activation"
    assert page.inner_text("#label-caption") == "gate"
    scales = []
    for shown, column in ((example + 1, "preactivation"), (example, "preactivation")):
        page.fill("#example", str(shown))
        page.select_option("#column", column)
        page.click("#show")
        page.wait_for_function(
            f"window.gatetrace.heatmap && window.gatetrace.heatmap.example === {shown} "
            f"&& window.gatetrace.heatmap.column === '{column}'"
        )
        trace = page.evaluate("document.getElementById('heatmap').data[0]")
        scales.append((trace["zmin"], trace["zmax"]))
    pre = np.abs(rec.gate_array(cell, "f", "preactivation")).max()
    assert (
        scales[0] == scales[1]
        and scales[0][1] == pytest.approx(pre, rel=1e-6)
        and scales[0][0] == -scales[0][1]
    )
    page.select_option("#column", "activation")
    page.click("#show")
    page.wait_for_function("window.gatetrace.heatmap.column === 'activation'")

    # select: the units of f on over steps 1-19 (the threshold just under the best unit's minimum);
    # match: the examples where they are on together as long, in example order, as numpy finds them
    lows = f[example, 1:].min(axis=0)
    threshold = round(float(lows.max()) - 0.005, 3)
    want_units = np.flatnonzero((f[example, 1:] > threshold).all(axis=0)).tolist()
    page.fill("#start", "1")
    page.fill("#stop", str(f.shape[1]))
    page.fill("#threshold", str(threshold))
    page.click("#select")
    page.wait_for_function(
        f"window.gatetrace.select && window.gatetrace.select.example === {example}"
    )
    assert page.evaluate("window.gatetrace.select.units") == want_units
    page.click("#match")
    page.wait_for_function("window.gatetrace.match !== null")
    got = page.evaluate("window.gatetrace.match")
    on = (f[:, :, want_units] > threshold).all(axis=2)
    runs = [
        max((len(r) for r in "".join("1" if v else "0" for v in row).split("0")), default=0)
        for row in on
    ]
    full = set(np.flatnonzero(np.array(runs) >= f.shape[1] - 1).tolist())
    assert example in full and got["count"] == min(20, len(full))
    # the first 20 in example order, each its longest run
    assert [m["example"] for m in got["matches"]] == sorted(full)[:20]
    assert all(m["length"] == runs[m["example"]] for m in got["matches"])
    for folder in shots:
        page.locator("#select-panel").screenshot(path=str(folder / "view-select.png"))
        page.locator("#sequence").screenshot(path=str(folder / "view-sequence.png"))

    # clicking the heatmap at the first selected unit, step 1: its course, and the step's parts
    unit_ = want_units[0]
    page.locator("#heatmap").scroll_into_view_if_needed()
    page.evaluate("Plotly.relayout('heatmap', {dragmode: 'zoom'})")
    box = page.locator("#heatmap .nsewdrag").first.bounding_box()
    page.mouse.click(
        box["x"] + box["width"] * ((unit_ + 0.5) / f.shape[2]),
        box["y"] + box["height"] * (1.5 / f.shape[1]),
    )
    page.wait_for_function("window.gatetrace.unit !== null && window.gatetrace.parts !== null")
    assert page.evaluate("window.gatetrace.unit.unit") == unit_
    np.testing.assert_allclose(
        page.evaluate("window.gatetrace.unit.values"), f[example, :, unit_], atol=1e-6
    )
    assert not page.locator("#unit-hint").is_visible() and page.locator("#course").is_visible()
    values = [r.split("\t")[3] for r in page.locator("#top tbody tr").all_inner_texts()]
    assert values and all(len(v.split(".")[1]) == 4 for v in values), (
        values
    )  # 4 decimals, as the tables
    parts = page.evaluate("window.gatetrace.parts")
    df = rec.gate_frame(
        [cell],
        ["f"],
        steps=(parts["step"], parts["step"] + 1),
        examples=(example, example + 1),
        columns=["preactivation", "input", "recurrent", "bias"],
    )
    for column in ("preactivation", "input", "recurrent", "bias"):
        np.testing.assert_allclose(parts[column], df[column], atol=1e-6)
    for folder in shots:
        page.locator("#unit-panel").screenshot(path=str(folder / "view-unit.png"))
        page.locator("#parts-panel").screenshot(path=str(folder / "view-parts.png"))

    # an error is in view wherever the reader is, and no stale sequence stays under it
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    page.fill("#example", "99999")
    page.click("#show")
    page.wait_for_selector("#error:not([hidden])")
    box = page.locator("#error").bounding_box()
    assert 0 <= box["y"] < 900 and "example 99999" in page.inner_text("#error")
    assert page.evaluate("window.gatetrace.heatmap") is None
    assert page.evaluate("(document.getElementById('heatmap').data || []).length") == 0
    page.close()


def test_units_for_a_label_in_a_browser(demo_served, browser, tmp_path):
    """`--labels`: the ranked units are `analysis.unit_scores`' best, the label's track beside
    the heatmap is the label of each step, and a row clicked shows that unit beside the label."""
    from recorders.read.units import findings, unit_scores

    demo, _ = demo_served
    rec = Recording(demo / "recording")
    (cell,) = rec.cells
    marker = np.load(demo / "labels.npy").astype(np.float64)
    labels = np.repeat(marker[:, None], 20, axis=1)  # the marker at every step ...
    labels[:, 5] = np.nan  # ... but step 5
    np.save(tmp_path / "marker.npy", labels)
    # (run beside the labels, named as a user names them: the docs' screenshot shows that name)
    with serving(demo / "recording", "--labels", "marker.npy", cwd=tmp_path) as port:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector("body[data-ready='1']", timeout=60000)
        assert page.locator("#units-panel").is_visible()
        assert page.inner_text("#units-source") == "marker.npy"  # as given, not a test's folder
        ranked = page.evaluate("window.gatetrace.ranked")
        want = findings(unit_scores(rec, labels)).head(20)
        keys = ["cell", "table", "name", "column", "unit"]
        assert [[r[k] for k in keys] for r in ranked["rows"]] == want[keys].values.tolist()
        np.testing.assert_allclose([r["score"] for r in ranked["rows"]], want["score"], atol=1e-6)
        np.testing.assert_allclose([r["chance"] for r in ranked["rows"]], want["chance"], atol=1e-6)
        assert ranked["chance_best"] == pytest.approx(want.attrs["chance_best"], abs=1e-6)
        assert page.locator("#ranked tbody tr").count() == 20
        example = int(page.evaluate("window.gatetrace.heatmap.example"))
        track = page.evaluate("window.gatetrace.heatmap.label_track")
        assert track == [None if np.isnan(v) else v for v in labels[example]]
        # the label track: one fixed colour a label value, whatever the sequence
        other = int(np.flatnonzero(marker != marker[example])[0])
        tracks = []
        for shown in (example, other):
            page.fill("#example", str(shown))
            page.click("#show")
            page.wait_for_function(f"window.gatetrace.heatmap.example === {shown}")
            trace = page.evaluate("document.getElementById('heatmap').data[1]")
            tracks.append((trace["zmin"], trace["zmax"], trace["z"][0][0]))
        assert tracks[0][:2] == tracks[1][:2] == (0, 1)
        assert {tracks[0][2], tracks[1][2]} == {0, 1}  # the two ends of its colour scale
        # its colour key: the label's two values at the two ends, beside the values' colour bar
        key = page.evaluate("document.getElementById('heatmap').data[1]")
        assert key["showscale"] and key["colorbar"]["title"]["text"] == "label"
        assert key["colorbar"]["tickvals"] == [0, 1] and key["colorbar"]["ticktext"] == ["0", "1"]
        assert page.locator("#heatmap .colorbar").count() == 2  # both keys drawn
        page.fill("#example", str(example))
        page.click("#show")
        page.wait_for_function(f"window.gatetrace.heatmap.example === {example}")
        note = page.inner_text("#units-note")
        assert f"best unit scored {ranked['chance_best']:.4f}." in note
        page.locator("#ranked tbody tr").nth(0).click()
        page.wait_for_function("window.gatetrace.labelled !== null")
        shown = page.evaluate("window.gatetrace.labelled")
        top = want.iloc[0]
        assert [shown[k] for k in keys] == [top[k] for k in keys]
        values = (
            rec.gate_array(cell, top["name"], top["column"])
            if top["table"] == "gates"
            else rec.state_array(cell, top["name"])
        )[example, :, top["unit"]]
        np.testing.assert_allclose(shown["values"], values, atol=1e-6)
        assert shown["label"] == track
        layout = page.evaluate("document.getElementById('labelled').layout")
        axis = layout["yaxis2"]
        assert axis["tickvals"] == [0, 1] and axis["zeroline"] is False  # a boolean's two values
        assert layout["xaxis"]["zeroline"] is False  # no stray line at step 0
        for folder in shots_folder(tmp_path):
            page.locator("#units-panel").screenshot(path=str(folder / "view-units.png"))


def test_a_summary_recording_in_a_browser(demo_served, browser, tmp_path):
    """The demo's summary recording: the overview's saturation is the full recording's, its
    quantile band read off the histogram; the panels of one sequence are hidden, with a note."""
    from recorders.read.analysis import saturation

    demo, _ = demo_served
    with serving(demo / "summary") as port:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector("body[data-ready='1']", timeout=60000)
        shown = {
            g["gate"]: g for g in page.evaluate("window.gatetrace.overview.cells[0].gate_stats")
        }
        sat = saturation(Recording(demo / "recording"))
        for gate, g in shown.items():
            want = sat[sat["gate"] == gate].sort_values("unit")
            np.testing.assert_allclose(g["left"], want["left"], atol=1e-4)
            np.testing.assert_allclose(g["right"], want["right"], atol=1e-4)
        assert page.locator("#summary-note").is_visible()
        assert not page.locator("#sequence").is_visible()
        assert not page.locator("#parts-panel").is_visible()  # (no parts: nothing a click shows)
        figures = page.locator("#summary").inner_text()  # no rows in a summary: values counted
        assert "gate values summarised" in figures and "gates rows" not in figures, figures


def test_a_series_in_a_browser(browser, tmp_path):
    """A checkpoint series: the view shows the last checkpoint, the gates' saturation along the
    series as analysis computes it, and the one picked in its list."""
    from recorders import Series
    from recorders.read.analysis import saturation, saturation_across
    from tests.test_series import X, train_tf1

    train_tf1(tmp_path / "run")
    tracer.record_series(tmp_path / "run", {"x": X}, tmp_path / "series")
    series = Series(tmp_path / "series")
    with serving(tmp_path / "series") as port:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector("body[data-ready='1']", timeout=60000)
        shown = page.evaluate("window.gatetrace.overview.series")
        assert (shown["key"], shown["values"], shown["at"]) == ("checkpoint", [2, 4, 6], 6)
        sat = saturation_across(series)
        (cell,) = series.recording(6).cells
        f = sat[(sat["cell"] == cell) & (sat["gate"] == "f")].groupby("checkpoint")["right"].mean()
        np.testing.assert_allclose(shown["gates"][cell]["f"]["right"], f.to_numpy(), atol=1e-4)
        assert page.locator("#across .plot-container").count() == 1
        page.select_option("#at", "2")
        page.wait_for_function("window.gatetrace.overview.series.at === 2")
        stats = page.evaluate("window.gatetrace.overview.cells[0].gate_stats")
        want = saturation(series.recording(2))
        right = want[want["gate"] == "f"].sort_values("unit")["right"]
        np.testing.assert_allclose(
            next(g for g in stats if g["gate"] == "f")["right"], right, atol=1e-4
        )
        page.wait_for_function("window.gatetrace.heatmap !== null")


def test_two_checkpoints_compared_in_a_browser(demo_served, browser, tmp_path):
    """`gatetrace view RUN --compare OTHER`: the panel shows, per gate, what `recorders.compare`
    computes of the two recordings (the demo's run at 200 and at 100 training steps), the
    difference along the steps as a plot, and the examples that differ most, each opening its
    sequence; a page served without --compare answers /api/compare with a 400."""
    from recorders import Recording, compare

    demo, plain_port = demo_served
    a, b = Path("training/global_step=200"), Path("training/global_step=100")  # as typed in demo/
    want = compare(Recording(demo / a), Recording(demo / b), tolerance=0.01)
    with serving(a, "--compare", str(b), "--tolerance", "0.01", cwd=demo) as port:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector("body[data-ready='1']", timeout=60000)
        assert page.locator("#compare-panel").is_visible()
        shown = page.evaluate("window.gatetrace.compare")
        assert shown["tolerance"] == 0.01 and shown["b"] == str(b)
        got = {(g["cell"], g["gate"]): g for g in shown["gates"]}
        for _, g in want.gates.iterrows():
            mine = got[(g["cell"], g["gate"])]
            for column in ("max_abs", "mean_abs", "rmse", "units_beyond"):
                assert mine[column] == pytest.approx(g[column], rel=1e-12), column
            assert mine["saturated_a_only"] == g["saturated_a_only"]
        assert page.locator("#compare-gates tbody tr").count() == len(want.gates)
        assert page.locator("#compare-steps .plot-container").count() == 1
        first = want.first_beyond()
        note = page.locator("#compare-note").inner_text()
        assert f"First beyond: gate {first[1]} of {first[0]}, at step {first[2]}." in note
        # what the two are: steps logged while training, each on its own batch
        said = want.inputs.replace(f"{demo}/", "")  # (the paths as typed in demo/)
        assert f"inputs: {said};" in note and "GateLoggingHook logged while training" in note
        origins = page.locator("#compare-origins li").all_inner_texts()
        assert origins == [
            f"{side}, cell {want.gates['cell'][0]}: fetched: the runtime's own gate tensors: the "
            "graph's gate ops, fetched"
            for side in "AB"
        ]
        assert not page.locator("#compare-notes").is_visible()  # not replays
        top = int(want.examples["example"].iloc[0])
        page.locator("#compare-examples a.open").first.click()
        page.wait_for_function(
            f"window.gatetrace.heatmap && window.gatetrace.heatmap.example === {top}"
        )
        for folder in shots_folder(tmp_path):
            page.locator("#compare-panel").screenshot(path=str(folder / "view-compare.png"))
    with urllib.request.urlopen(f"http://127.0.0.1:{plain_port}/api/overview", timeout=10) as r:
        assert json.loads(r.read())["compare"] is None
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{plain_port}/api/compare", timeout=10)
        raise AssertionError("answered without a comparison")
    except urllib.error.HTTPError as err:
        assert err.code == 400 and "serve with gatetrace view RUN --compare" in err.read().decode()


def test_a_comparison_that_does_not_line_up_is_one_line_before_serving(demo_served):
    """--compare with a recording of other examples (or a summary) is refused in one line, exit
    2, before the port is taken."""
    demo, _ = demo_served
    done = subprocess.run(
        [sys.executable, "-m", "tracer.cli", "view", str(demo / "recording"), "--compare", str(demo / "summary"),
         "--port", str(free_port())],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "is a summary recording (--summary)" in done.stderr


def test_colour_scales_come_from_the_nonlinearity_or_the_first_sequences(demo_served):
    """A heatmap's colour scale: a gate's activation spans its nonlinearity's range (sigmoid
    [0, 1], tanh [-1, 1]) without a value read; a preactivation or a state, symmetric to the
    largest magnitude of the first sequences (the demo's 512 are all read: the whole array's)."""
    from recorders.view import data

    demo, _ = demo_served
    rec = Recording(demo / "recording")
    (cell,) = rec.cells
    assert data.scale(rec, cell, "f") == {"lo": 0.0, "hi": 1.0, "signed": False}
    assert data.scale(rec, cell, "j") == {"lo": -1.0, "hi": 1.0, "signed": True}
    for kind, label, column, values in (
        ("gate", "f", "preactivation", rec.gate_array(cell, "f", "preactivation")),
        ("state", "c", "activation", rec.state_array(cell, "c")),
    ):
        lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
        top = float(np.float32(max(-lo, hi)))
        want = (
            {"lo": -1.0, "hi": 1.0, "signed": True}
            if -1 <= lo and hi <= 1
            else {"lo": -top, "hi": top, "signed": True}
        )
        assert lo < 0 and data.scale(rec, cell, label, kind, column) == want


def _shares(rec: Recording, cell: str, gate: str) -> tuple[np.ndarray, np.ndarray]:
    """Each unit's share of activations below and above the ends of the gate's nonlinearity
    (sigmoid: 0.1 and 0.9; a BasicLSTMCell's j, tanh: -0.9 and 0.9), in numpy over its values."""
    a = rec.gate_array(cell, gate)
    low = -0.9 if gate == "j" else 0.1
    return (a < low).mean(axis=(0, 1)), (a > 0.9).mean(axis=(0, 1))


def test_units_that_share_a_saturation_point_are_said_and_every_point_is_whole(
    served, browser, tmp_path
):
    """The planted recording: most units of most gates never saturate, so they share the point
    (0, 0). Each plot says how many units overlap where (the largest three groups, as numpy
    groups the units' shares), every marker stands clear of its plot's edges (a point at 0 sat
    on the axes, half hidden), and the x-axis titles stand clear of the titles of the row
    below (they touched)."""
    rec_path, port, _ = served
    rec = Recording(rec_path)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"http://127.0.0.1:{port}/")
    page.wait_for_selector("body[data-ready='1']", timeout=30000)
    layouts = page.evaluate(
        "[...document.querySelectorAll('#saturation > div')].map((d) => d.layout)"
    )
    for gate, layout in zip(rec.gates(CELL), layouts, strict=True):
        left, right = _shares(rec, CELL, gate)
        groups: dict[tuple[float, float], int] = {}
        for x, y in zip(np.round(left, 4), np.round(right, 4), strict=True):
            groups[float(x), float(y)] = groups.get((float(x), float(y)), 0) + 1
        shared = sorted((n for n in groups.items() if n[1] > 1), key=lambda g: -g[1])[:3]
        want = {f"{n} units overlap at ({x:g}, {y:g})" for (x, y), n in shared}
        assert {a["text"] for a in layout.get("annotations", [])} == want, gate
    i = dict(zip(rec.gates(CELL), layouts, strict=True))["i"]  # every unit of i at (0, 0)
    assert [a["text"] for a in i["annotations"]] == [f"{UNITS} units overlap at (0, 0)"]
    # a marker at 0 or 1 stands clear of the plot's edges (its axes, their labels) by its width
    for plot in page.locator("#saturation > div").all():
        area = plot.locator(".nsewdrag").first.bounding_box()
        for point in plot.locator(".scatterlayer .point").all():
            box = point.bounding_box()
            clear = min(
                box["x"] - area["x"],
                area["x"] + area["width"] - box["x"] - box["width"],
                box["y"] - area["y"],
                area["y"] + area["height"] - box["y"] - box["height"],
            )
            assert clear >= box["width"], (box, area)
    lowest = max(
        b["y"] + b["height"]
        for b in (t.bounding_box() for t in page.locator("#saturation .g-xtitle text").all())
    )
    below = min(t.bounding_box()["y"] for t in page.locator("#bands .gtitle").all())
    assert below - lowest >= 8, (lowest, below)
    page.locator("#overview").screenshot(path=str(tmp_path / "saturation.png"))
    page.close()


def test_before_a_click_the_unit_and_parts_panels_say_what_to_click(served, browser, tmp_path):
    """Before a click on the heatmap the unit panel and the parts panel hold what to click, not
    a table of bare headers and a blank box; after it, the parts chart's y-axis is titled."""
    _, port, _ = served
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"http://127.0.0.1:{port}/")
    page.wait_for_selector("body[data-ready='1']", timeout=30000)
    assert page.locator("#unit-hint").is_visible() and not page.locator("#top").is_visible()
    assert not page.locator("#parts").is_visible()
    note = page.inner_text("#parts-note")
    assert note.startswith("Click a unit at a step on the heatmap of a gate"), note
    page.locator("#unit-panel").screenshot(path=str(tmp_path / "unit-before.png"))
    page.locator("#parts-panel").screenshot(path=str(tmp_path / "parts-before.png"))
    page.locator("#heatmap").scroll_into_view_if_needed()
    page.evaluate("Plotly.relayout('heatmap', {dragmode: 'zoom'})")
    box = page.locator("#heatmap .nsewdrag").first.bounding_box()
    page.mouse.click(
        box["x"] + box["width"] * (3.5 / UNITS), box["y"] + box["height"] * (6.5 / STEPS)
    )
    page.wait_for_function("window.gatetrace.unit !== null && window.gatetrace.parts !== null")
    assert page.locator("#top").is_visible() and page.locator("#parts").is_visible()
    layout = page.evaluate("document.getElementById('parts').layout")
    assert layout["yaxis"]["title"]["text"] == "preactivation and its parts"
    page.locator("#parts-panel").screenshot(path=str(tmp_path / "parts-after.png"))
    page.close()


def _written_pair(root: Path) -> tuple[Path, Path]:
    """Two recordings written through `RecordingWriter`, each of two cells (a, b) of 3 units
    over 5 steps, described as replays of the same weights: B's activations are A's plus
    1e-8 x step (cell a) and 3e-8 x step (cell b), in float32."""
    import pandas as pd

    from recorders.write.writer import RecordingWriter

    out = []
    for name, shift in (("a", 0.0), ("b", 1e-8)):
        cells = [
            {"name": c, "kind": "lstm", "gates": ["i", "f", "j", "o"], "states": [], "units": 3,
             "steps": 5, "path": "replay"}
            for c in ("a", "b")
        ]  # fmt: skip
        rng = np.random.RandomState(0)
        with RecordingWriter(root / name, {"cells": cells}, examples=(0, 4)) as writer:
            writer.write_weights(
                {
                    "cell": pd.Categorical(["a"] * 3 + ["b"] * 3),
                    "gate": pd.Categorical(["i"] * 6),
                    "source": pd.Categorical(["bias"] * 6),
                    "row": np.zeros(6, np.int32),
                    "unit": np.array([0, 1, 2] * 2, np.int32),
                    "value": np.arange(6, dtype=np.float32),
                }
            )
            writer.begin(0, 4)
            for cell, scale in (("a", 1), ("b", 3)):
                for gate in ("i", "f", "j", "o"):
                    v = 0.001 + 0.001 * rng.rand(4, 5, 3)
                    v = (v + shift * scale * np.arange(5)[None, :, None]).astype(np.float32)
                    writer.write_gate(cell, gate, np.arange(4), np.arange(5), v, v)
            writer.commit()
        out.append(root / name)
    return out[0], out[1]


def _sig3(v: float) -> str:
    """JavaScript's `v.toPrecision(3)`, its trailing zeros dropped, with Plotly's minus sign
    (U+2212): how Plotly writes a tick of format ".3~g"."""
    if v == 0:
        return "0"
    mantissa, exponent = f"{v:.2e}".split("e")
    e = int(exponent)
    if e < -6 or e >= 3:
        text = f"{mantissa.rstrip('0').rstrip('.')}e{'+' if e >= 0 else '-'}{abs(e)}"
    else:
        text = f"{v:.{2 - e}f}"
        text = text.rstrip("0").rstrip(".") if "." in text else text
    return text.replace("-", "\u2212")


def test_the_comparison_has_its_own_cell_and_one_notation(browser, tmp_path):
    """Two recordings that differ by 1e-8 to 1.2e-7: the comparison's table and its plot's axis
    write numbers alike (3 significant digits, 4e−8; the axis read "40n"), the plot has its
    own cell list (it followed the overview's, far above it), and the panel says where each
    side's values came from and what a 0 between replays of equal weights proves."""
    import pandas as pd

    a, b = _written_pair(tmp_path)
    with serving(a, "--compare", str(b)) as port:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector("body[data-ready='1']", timeout=30000)
        # the table: numpy's largest difference of cell a's gate i, in the notation of the axis
        x, y = (pd.read_parquet(r / "gates").astype({"cell": str, "gate": str}) for r in (a, b))
        keys = ["cell", "gate", "example", "step", "unit"]
        x, y = (t.sort_values(keys).reset_index(drop=True) for t in (x, y))
        x["abs"] = np.abs(
            y["activation"].to_numpy(np.float64) - x["activation"].to_numpy(np.float64)
        )
        largest = x.groupby(["cell", "gate"])["abs"].max()
        rows = [r.split("\t") for r in page.locator("#compare-gates tbody tr").all_inner_texts()]
        assert [r[:4] for r in rows][0] == ["a", "i", "replayed", "replayed"]
        for r in rows:
            assert r[4] == _sig3(largest[r[0], r[1]]), r
        assert rows[0][4] == "4e\u22128"
        layout = page.evaluate("document.getElementById('compare-steps').layout")
        assert layout["yaxis"]["tickformat"] == ".3~g"
        ticks = page.eval_on_selector_all(
            "#compare-steps .ytick text", "els => els.map(e => e.textContent)"
        )
        assert ticks and all(t == "0" or re.fullmatch(r"\de\u2212\d", t) for t in ticks), ticks
        # its own cell list: the cells compared; the overview's list leaves it as it is
        assert page.eval_on_selector_all("#compare-cell option", "o => o.map(e => e.value)") == [
            "a",
            "b",
        ]
        title = "document.getElementById('compare-steps').layout.title.text"
        assert page.evaluate(title) == "a: mean |B - A| along the steps"
        page.select_option("#overview-cell", "b")
        assert page.evaluate(title) == "a: mean |B - A| along the steps"
        page.select_option("#compare-cell", "b")
        page.wait_for_function(f"{title} === 'b: mean |B - A| along the steps'")
        drawn = page.evaluate("document.getElementById('compare-steps').data[0].y")
        assert drawn == page.evaluate("window.gatetrace.compare.steps.b.i.mean_abs")
        # where the values came from, and what a 0 proves here
        origins = page.locator("#compare-origins li").all_inner_texts()
        assert origins[0].startswith("A, cell a: replayed: gatetrace's replay of the cell")
        assert len(origins) == 4
        notes = page.inner_text("#compare-notes")
        assert page.locator("#compare-notes").is_visible()
        assert "a difference of 0 proves only that the weights are equal" in notes
        page.select_option("#compare-cell", "a")
        page.wait_for_function(f"{title} === 'a: mean |B - A| along the steps'")
        page.locator("#compare-panel").screenshot(path=str(tmp_path / "compare-small.png"))
        page.close()


def test_a_held_recording_says_so_in_the_browser(demo_served, browser, tmp_path):
    """A recording made with --hold, compared with the model's own: the overview's source line
    says what was held, the comparison's notes say B was held, and the outputs both recorded
    (--outputs) are compared in their own table."""
    from tests.conftest import run_cli

    demo, _ = demo_served
    common = ["--feed", f"inputs={demo / 'inputs.npy'}", "--quiet", "--outputs", "logits"]
    for name, extra in (("base", []), ("held", ["--hold", "rnn/basic_lstm_cell:h:0-3=0"])):
        done = run_cli(
            "record",
            str(demo / "model" / "model.ckpt"),
            *common,
            "--out",
            str(tmp_path / name),
            *extra,
        )
        assert done.returncode == 0, done.stderr
    with serving(tmp_path / "held", "--compare", str(tmp_path / "base")) as port:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector("body[data-ready='1']", timeout=60000)
        held = "values held inside the model (rnn/basic_lstm_cell:h:0-3=0.0)"
        assert held in page.inner_text("#source")
        assert page.locator("#compare-notes").is_visible()
        assert f"A was recorded with {held}" in page.inner_text("#compare-notes")
        assert page.locator("#compare-outputs").is_visible()
        rows = [r.split("\t") for r in page.locator("#compare-outputs tbody tr").all_inner_texts()]
        assert [r[0] for r in rows] == ["logits:0"] and int(rows[0][1]) == 512
        page.close()
