"""Which server and plotting library for `gatetrace view`: three candidates on one recording.

    pip install dash panel        # the two candidates the view does not use
    python bench/view_libraries.py [--sequences 1000] [--rounds 9]

On bench/read.py's recording (`--sequences 1000`: 102.4M gate rows), each candidate answers the
same two interactions, computed by the same `recorders.view.data` functions, so that only the
library's own part differs:

- heatmap: steps x units of one gate of one sequence (50 x 256 values);
- unit: one unit's time course and its top positions over the recording.

Candidates, each measured in process without a browser (medians of `--rounds`):
- starlette+plotly.js (what the view uses): a Starlette route returns the data as JSON; the
  page's own script draws it with Plotly.js (through Starlette's test client);
- dash: a Dash callback returns a `plotly.graph_objects.Figure` for a `dcc.Graph` (a POST to
  `/_dash-update-component` through Flask's test client, as the browser sends it);
- panel+bokeh: a Bokeh figure (an `image` glyph for the heatmap, a line for the unit)
  serialized as Bokeh sends it to the page (`bokeh.embed.json_item`; a Panel server sends
  such documents and their patches over a websocket).

Also written: the bytes of each answer, and the JavaScript the page must load (what each
library ships for its browser side). Prints a table with the processor and writes
bench/view_libraries_results.json.
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
EXAMPLE, UNIT, GATE = 7, 3, "f"


def starlette_plotly(rec, cell):
    from starlette.testclient import TestClient

    from recorders.view.server import make_app

    client = TestClient(make_app(rec), base_url="http://127.0.0.1")  # a host the view serves

    def ask(kind):
        params = (
            {"cell": cell, "label": GATE, "example": EXAMPLE}
            if kind == "heatmap"
            else {"cell": cell, "gate": GATE, "unit": UNIT, "example": EXAMPLE}
        )
        response = client.get(f"/api/{kind}", params=params)
        assert response.status_code == 200, response.text
        return len(response.content)

    return ask


def dash(rec, cell):
    import plotly.graph_objects as go
    from dash import Dash, Input, Output, dcc, html

    from recorders.view import data

    app = Dash(__name__)
    app.layout = html.Div(
        [
            dcc.Input(id="example", type="number", value=EXAMPLE),
            dcc.Graph(id="heatmap"),
            dcc.Graph(id="unit"),
        ]
    )

    @app.callback(Output("heatmap", "figure"), Input("example", "value"))
    def heatmap(example):
        d = data.heatmap(rec, cell, GATE, int(example))
        return go.Figure(go.Heatmap(z=d["values"], x=d["units"], y=d["steps"]))

    @app.callback(Output("unit", "figure"), Input("example", "value"))
    def unit(example):
        d = data.unit(rec, cell, GATE, UNIT, int(example))
        return go.Figure(
            [
                go.Scatter(x=d["steps"], y=d["values"]),
                go.Scatter(
                    x=[
                        f"{e}:{t}"
                        for e, t in zip(d["top"]["example"], d["top"]["step"], strict=True)
                    ],
                    y=d["top"]["value"],
                ),
            ]
        )

    client = app.server.test_client()
    client.get("/")  # builds the layout and the callback map

    def ask(kind):
        body = {
            "output": f"{kind}.figure",
            "outputs": {"id": kind, "property": "figure"},
            "inputs": [{"id": "example", "property": "value", "value": EXAMPLE}],
            "changedPropIds": ["example.value"],
        }
        response = client.post("/_dash-update-component", json=body)
        assert response.status_code == 200, response.data[:200]
        return len(response.data)

    ask.client = client
    return ask


def panel_bokeh(rec, cell):
    import numpy as np
    from bokeh.embed import json_item
    from bokeh.plotting import figure

    from recorders.view import data

    def ask(kind):
        if kind == "heatmap":
            d = data.heatmap(rec, cell, GATE, EXAMPLE)
            z = np.array(
                [[np.nan if v is None else v for v in row] for row in d["values"]], dtype=np.float32
            )
            fig = figure(tooltips=[("step", "$y"), ("unit", "$x"), ("value", "@image")])
            fig.image(image=[z], x=0, y=0, dw=z.shape[1], dh=z.shape[0], palette="Viridis256")
        else:
            d = data.unit(rec, cell, GATE, UNIT, EXAMPLE)
            fig = figure()
            fig.line(d["steps"], d["values"])
            fig.scatter(d["top"]["step"], d["top"]["value"])
        return len(json.dumps(json_item(fig)))

    return ask


def javascript_bytes(dash_client) -> dict[str, int]:
    """The JavaScript each candidate's page loads: ours and Plotly.js from the installed
    packages; Dash's, every script its page names (fetched through its own server) and the
    chunks `dcc.Graph` loads with Plotly.js; Panel's, the Bokeh and Panel bundles of a page
    with widgets."""
    import re

    import bokeh
    import panel
    import plotly

    plotly_js = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").stat().st_size
    ours = sum(
        p.stat().st_size
        for p in (Path(__file__).resolve().parents[1] / "recorders" / "view" / "static").glob(
            "*.js"
        )
    )
    page = dash_client.get("/").get_data(as_text=True)
    scripts = re.findall(r'<script src="([^"]+)"', page)
    dash_js = sum(len(dash_client.get(src).data) for src in scripts)
    graph = [p for p in (Path(__import__("dash").__file__).parent / "dcc").glob("async-graph*.js")]
    bokeh_js = Path(bokeh.__file__).parent / "server" / "static" / "js"
    return {
        "starlette+plotly.js": plotly_js + ours,
        "dash": dash_js + sum(p.stat().st_size for p in graph) + plotly_js,
        "panel+bokeh": sum(
            (bokeh_js / f"{n}.min.js").stat().st_size
            for n in ("bokeh", "bokeh-widgets", "bokeh-tables")
        )
        + (Path(panel.__file__).parent / "dist" / "panel.min.js").stat().st_size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    from recorders import Recording

    candidates = {"starlette+plotly.js": starlette_plotly, "dash": dash, "panel+bokeh": panel_bokeh}
    with tempfile.TemporaryDirectory() as tmp:
        out, manifest = make_recording(Path(tmp), args.sequences)
        rec = Recording(out)
        cell = rec.cells[0]
        asks = {name: make(rec, cell) for name, make in candidates.items()}
        times = {(name, kind): [] for name in asks for kind in ("heatmap", "unit")}
        sizes = {}
        for _ in range(args.rounds):  # interleaved: every candidate once per round
            for name, ask in asks.items():
                for kind in ("heatmap", "unit"):
                    start = time.perf_counter()
                    sizes[(name, kind)] = ask(kind)
                    times[(name, kind)].append(time.perf_counter() - start)
    results = {
        "processor": _cpu_name(),
        "cpus": os.cpu_count(),
        "gate_rows": manifest["rows"]["gates"],
        "median_seconds": {
            f"{n}/{k}": round(statistics.median(v), 4) for (n, k), v in times.items()
        },
        "answer_bytes": {f"{n}/{k}": b for (n, k), b in sizes.items()},
        "javascript_bytes": javascript_bytes(asks["dash"].client),
    }
    (HERE / "view_libraries_results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
