"""The notebooks: stored without outputs, and run top to bottom computing the right values.

Each notebook runs in a fresh kernel in a temporary folder; a probe cell appended after
its last cell reports what the notebook computed, and the test checks those values and
the files the notebook wrote against its own numpy recomputation.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = [
    "01_quickstart.ipynb",
    "02_gate_analysis.ipynb",
    "03_training.ipynb",
    "04_holding_a_unit.ipynb",
]


@pytest.mark.parametrize("name", NAMES)
def test_notebooks_are_stored_without_outputs(name):
    book = json.loads((NOTEBOOKS / name).read_text())
    code = [c for c in book["cells"] if c["cell_type"] == "code"]
    assert code, name
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code), (
        f"{name}: strip its outputs"
    )
    # nbformat 4.5 cells carry ids (nbformat warns of each one missing, and will refuse them)
    ids = [c.get("id") for c in book["cells"]]
    assert book["nbformat_minor"] >= 5 and all(ids) and len(set(ids)) == len(ids), name


def run_notebook(name: str, folder: Path, monkeypatch, probe: str) -> dict:
    """Run notebook `name` with `folder` as working directory; return the probe cell's JSON,
    with `"images"`: for each code cell that calls `plots.`, whether it displayed a PNG."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    # A kernel of this very interpreter, whatever kernels the machine has installed.
    spec = folder / "jupyter" / "kernels" / "gatetrace-tests"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "gatetrace tests",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(folder / "jupyter"))
    # the kernel runs with what a user's has: the notebooks' own settings, not the tests'
    for name_ in ("TF_CPP_MIN_LOG_LEVEL", "TF_USE_LEGACY_KERAS", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name_, raising=False)
    book = nbformat.read(NOTEBOOKS / name, as_version=4)
    book.cells.append(nbformat.v4.new_code_cell("import json\nprint(json.dumps(" + probe + "))"))
    client = nbclient.NotebookClient(
        book,
        timeout=600,
        kernel_name="gatetrace-tests",
        resources={"metadata": {"path": str(folder)}},
    )
    client.execute()
    out = "".join(o.get("text", "") for o in book.cells[-1].outputs if o.get("name") == "stdout")
    # what a reader would see in the saved outputs besides the notebook's own: TensorFlow's
    # start-up lines, a GPU probe's error, deprecation notices
    noise = [
        o["text"]
        for c in book.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.get("name") == "stderr" or "WARNING:tensorflow" in o.get("text", "")
    ]
    assert not noise, f"{name} writes to stderr, or TensorFlow's notices: {noise}"
    images = [
        "image/png" in o.get("data", {})
        for c in book.cells
        if c.cell_type == "code" and "plots." in c.source
        for o in [next((o for o in c.outputs if "image/png" in o.get("data", {})), {})]
    ]
    return {**json.loads(out), "images": images}


@pytest.mark.e2e
def test_quickstart_recomputes_the_recorded_gates(tmp_path, monkeypatch):
    got = run_notebook(
        "01_quickstart.ipynb",
        tmp_path,
        monkeypatch,
        """{
        "by_hand": float(by_hand), "by_hand_pre": float(by_hand_pre), "recorded": float(recorded),
        "hand_error": float(hand_error), "reference_error": reference_error, "record_error": record_error,
        "gates": list(lstm.gates), "weight_rows": len(weights),
    }""",
    )
    import tracer
    from recorders import Recording

    folder = tmp_path / "quickstart"
    x = np.load(folder / "inputs.npy")
    with tracer.load_model(folder / "model.ckpt") as model:
        (cell,) = tracer.find_cells(model.graph)
        values = tracer.read_weights(model.session, [cell])[cell.name]
    ref = tracer.run_cell("BasicLSTMCell", values, x, forget_bias=1.0)
    f = cell.gates.index("f")
    assert got["gates"] == ["i", "j", "f", "o"]
    # The hand computation of the notebook is the reference's value (example 0, step 3, unit 2).
    assert got["by_hand_pre"] == pytest.approx(ref["preactivation"][0, 3, f, 2], abs=1e-5)
    assert got["by_hand"] == pytest.approx(ref["activation"][0, 3, f, 2], abs=1e-5)
    assert got["recorded"] == pytest.approx(ref["activation"][0, 3, f, 2], abs=1e-5)
    assert got["hand_error"] < 1e-5 and got["reference_error"] < 1e-5 and got["record_error"] == 0.0
    # The recording it wrote holds every gate and state of the 5 sequences.
    rec = Recording(folder / "recording")
    assert rec.examples == [[0, 5]]
    for k, gate in enumerate(cell.gates):
        np.testing.assert_allclose(
            rec.gate_array(cell.name, gate), ref["activation"][:, :, k], atol=1e-5
        )
        np.testing.assert_allclose(
            rec.gate_array(cell.name, gate, "preactivation"),
            ref["preactivation"][:, :, k],
            atol=1e-5,
        )
    np.testing.assert_allclose(rec.state_array(cell.name, "c"), ref["states"]["c"], atol=1e-5)
    # weights: W (3 rows) + U (4 rows) + b (1 row) per gate, 4 units each
    assert got["weight_rows"] == 4 * (3 + 4 + 1) * 4


@pytest.mark.e2e
def test_gate_analysis_computes_what_numpy_computes(tmp_path, monkeypatch):
    got = run_notebook(
        "02_gate_analysis.ipynb",
        tmp_path,
        monkeypatch,
        """{
        "sequences": SEQUENCES,
        "saturation": sat.sort_values(["gate", "unit"])[["gate", "unit", "left", "right", "n"]].astype({"gate": str}).values.tolist(),
        "forget_mean": forget["mean"].tolist(), "forget_q90": forget["q90"].tolist(),
        "duckdb_mean": per_step["mean"].tolist(), "duckdb_error": duckdb_error,
        "memory": memory["corr_c_last_with_marker"].tolist(), "keeper": keeper,
        "courses": courses[["example", "step", "value", "c"]].values.tolist(), "pos": pos, "neg": neg,
        "scores": scores.sort_values("unit")[["score", "direction", "metric"]].values.tolist(), "writer": writer,
        "ranked": ranked.head(20)[["table", "name", "column", "unit", "score"]].values.tolist(),
        "chance_best": ranked.attrs["chance_best"],
        "lowest": lowest[["example", "step", "value"]].values.tolist(),
        "parts": parts[["input", "recurrent", "bias"]].values.tolist(), "parts_error": parts_error,
        "drivers": drivers[["part", "mean_abs", "dominant"]].values.tolist(),
    }""",
    )
    from recorders import Recording

    assert got["images"] == [True, True, True, True], "each plot cell shows its figure"
    rec = Recording(tmp_path / "gate-analysis" / "recording")
    cell = "rnn/basic_lstm_cell"
    x = np.load(tmp_path / "gate-analysis" / "inputs.npy")
    assert got["sequences"] == 8192 and rec.examples == [[0, 8192]] and x.shape == (8192, 20, 2)
    gates = {g: rec.gate_array(cell, g) for g in rec.gates(cell)}  # [examples, steps, units]

    expected = []
    for g in sorted(gates):
        a = gates[g].reshape(-1, 16)
        low = -0.9 if g == "j" else 0.1  # j through tanh, i, f, o through sigmoid
        expected += [
            [g, u, (a[:, u] < low).mean(), (a[:, u] > 0.9).mean(), 8192 * 20] for u in range(16)
        ]
    assert [r[:2] for r in got["saturation"]] == [r[:2] for r in expected]
    np.testing.assert_allclose(
        [r[2:] for r in got["saturation"]], [r[2:] for r in expected], atol=1e-12
    )

    f = gates["f"].astype(np.float64)
    np.testing.assert_allclose(got["forget_mean"], f.mean(axis=(0, 2)), atol=1e-6)
    np.testing.assert_allclose(
        got["forget_q90"], np.quantile(f.transpose(1, 0, 2).reshape(20, -1), 0.9, axis=1), atol=1e-6
    )
    np.testing.assert_allclose(got["duckdb_mean"], f.mean(axis=(0, 2)), atol=1e-6)
    assert got["duckdb_error"] < 1e-6

    c = rec.state_array(cell, "c")
    memory = [np.corrcoef(c[:, -1, u], x[:, 0, 1])[0, 1] for u in range(16)]
    np.testing.assert_allclose(got["memory"], memory, atol=1e-9)
    assert max(abs(r) for r in memory) > 0.9  # the trained model carries the marker to the end
    assert got["keeper"] == int(np.argmax(f.mean(axis=(0, 1))))
    e = np.array([r[0] for r in got["courses"]], int)
    s = np.array([r[1] for r in got["courses"]], int)
    assert sorted(set(e)) == sorted({got["pos"], got["neg"]}) and len(e) == 40
    np.testing.assert_allclose(
        [r[2] for r in got["courses"]], gates["f"][e, s, got["keeper"]], atol=0
    )
    np.testing.assert_allclose([r[3] for r in got["courses"]], c[e, s, got["keeper"]], atol=0)

    j = gates["j"].astype(np.float64).reshape(-1, 16)
    label = x[:, :, 1].reshape(-1)
    correlation = [np.corrcoef(j[:, u], label)[0, 1] for u in range(16)]
    assert {m for _, _, m in got["scores"]} == {"pearson"}
    signed = [score if sign == "+" else -score for score, sign, _ in got["scores"]]
    np.testing.assert_allclose(signed, correlation, atol=1e-9)
    assert got["writer"] == int(np.argmax(np.abs(correlation)))
    # every unit against the marker's sign at the last step: AUC as scikit-learn computes it
    from sklearn.metrics import roc_auc_score

    for table, name, column, unit, score in got["ranked"]:
        values = (
            rec.state_array(cell, name)
            if table == "states"
            else gates[name]
            if column == "activation"
            else rec.gate_array(cell, name, column)
        )[:, -1, unit]
        auc = roc_auc_score(x[:, 0, 1] > 0, values)
        assert score == pytest.approx(max(auc, 1 - auc), rel=1e-12)
    assert got["ranked"][0][4] > got["chance_best"] + 0.3
    column = gates["j"][:, :, got["writer"]]
    np.testing.assert_allclose(
        [r[2] for r in got["lowest"]], np.sort(column, axis=None)[:10], atol=0
    )
    for example, step, value in got["lowest"]:
        assert column[int(example), int(step)] == value

    # The parts of the forget gate of the keeper unit over steps 0-5 of the +1 example, recomputed in
    # float64 from the checkpoint's own weights and the inputs (BasicLSTMCell: i, j, f, o blocks).
    from tracer._tf import tf

    reader = tf.train.load_checkpoint(str(tmp_path / "gate-analysis" / "model" / "model.ckpt"))
    kernel, bias = (
        reader.get_tensor(f"rnn/basic_lstm_cell/{n}").astype(np.float64) for n in ("kernel", "bias")
    )
    u, pos, units = got["keeper"], got["pos"], 16
    h, cs, want = np.zeros(units), np.zeros(units), []
    for t in range(6):
        xt = x[pos, t].astype(np.float64)
        z = np.concatenate([xt, h]) @ kernel + bias
        i, jj, ff, o = np.split(z, 4)
        col = 2 * units + u
        want.append([xt @ kernel[:2, col], h @ kernel[2:, col], bias[col]])
        cs = cs / (1 + np.exp(-(ff + 1.0))) + np.tanh(jj) / (1 + np.exp(-i))
        h = np.tanh(cs) / (1 + np.exp(-o))
    np.testing.assert_allclose(got["parts"], want, atol=1e-5)
    assert got["parts_error"] < 1e-5
    assert sum(r[2] for r in got["drivers"]) == 1 and {r[0] for r in got["drivers"]} == {
        "input",
        "recurrent",
        "bias",
    }


@pytest.mark.e2e
def test_training_notebook_computes_what_numpy_computes(tmp_path, monkeypatch):
    got = run_notebook(
        "03_training.ipynb",
        tmp_path,
        monkeypatch,
        """{
        "steps": curve.index.tolist(), "right": curve["right"].tolist(), "left": curve["left"].tolist(),
        "accuracy": accuracy, "moved": moved.index.tolist()[:3],
    }""",
    )
    from recorders import Series

    series = Series(tmp_path / "training" / "log")
    assert got["steps"] == series.complete == list(range(0, 300, 25))
    assert got["accuracy"] > 0.75
    for k, step in enumerate(got["steps"]):
        f = series.recording(step).gate_array("rnn/basic_lstm_cell", "f")  # [batch, steps, units]
        assert got["right"][k] == pytest.approx((f > 0.9).mean(axis=(0, 1)).mean(), abs=1e-12)
        assert got["left"][k] == pytest.approx((f < 0.1).mean(axis=(0, 1)).mean(), abs=1e-12)
    assert got["right"][-1] > got["right"][0]  # training opened the forget gates


@pytest.mark.e2e
def test_holding_notebook_agrees_with_the_model_whose_weights_no_longer_read_the_unit(
    tmp_path, monkeypatch
):
    """Every column of the notebook's table, recomputed by TensorFlow running the checkpoint
    the notebook trained: as it is, and with the ablated unit's rows zeroed in every matrix
    that reads its output (its own recurrent rows, and the layer above's input rows or the
    softmax's), which is what holding its h at 0 at every step computes; and the lower layer's
    unit held at its mean, against the network written in numpy from TensorFlow's documented
    equations with the hold in them (the zeroed rows are no oracle there: the first step reads
    the initial state, 0, not the mean)."""
    got = run_notebook(
        "04_holding_a_unit.ipynb",
        tmp_path,
        monkeypatch,
        """{
        "results": {k: {m: float(v) for m, v in r.items()} for k, r in results.items()},
        "held": {k: [c, int(u)] for k, (c, u) in held.items()},
        "inputs": inputs.tolist(), "number": number.tolist(), "attractor": attractor.tolist(),
        "note": found.notes()[0],
        "at_mean": [lower, lower_unit, Recording("holding/at-mean").description["held"]],
    }""",
    )
    from tracer._tf import tf, v1

    inputs, number = np.array(got["inputs"]), np.array(got["number"])
    attractor = np.array(got["attractor"], bool)
    graph = tf.Graph()
    with graph.as_default(), v1.Session(graph=graph) as session:
        v1.train.import_meta_graph(str(tmp_path / "holding" / "lm.ckpt.meta")).restore(
            session, str(tmp_path / "holding" / "lm.ckpt")
        )
        variables = {v.op.name: v for v in v1.global_variables()}
        kernels = [variables[f"rnn/multi_rnn_cell/cell_{k}/basic_lstm_cell/kernel"] for k in (0, 1)]
        biases = [variables[f"rnn/multi_rnn_cell/cell_{k}/basic_lstm_cell/bias"] for k in (0, 1)]
        softmax = variables["softmax/kernel"]
        edited = [*kernels, *biases, softmax]
        saved = session.run(edited)
        embedding = session.run(variables["embedding"])

        def agreement(edits):
            for variable, value in zip(edited, saved, strict=True):
                variable.load(value, session)
            for variable, row in edits:
                value = session.run(variable)
                value[row] = 0
                variable.load(value, session)
            logits = session.run("logits:0", {"tokens:0": inputs})[:, -1]
            m = (logits[:, 12] - logits[:, 13]) * np.where(number == 0, 1, -1)
            return {
                "accuracy": (m > 0).mean(),
                "with an attractor": (m[attractor] > 0).mean(),
                "without": (m[~attractor] > 0).mean(),
                "median margin": np.median(m),
            }

        expected = {"model": agreement([])}
        for name, (cell, unit) in got["held"].items():
            layer = int(cell.split("/")[-2][-1])
            below = 8 if layer == 0 else 12  # the layer's input: the embedding, or layer 0's h
            above = (kernels[1], unit) if layer == 0 else (softmax, unit)
            expected[name + " ablated"] = agreement([(kernels[layer], below + unit), above])
        # the lower layer's unit at its mean: the network in numpy, BasicLSTMCell as TensorFlow
        # documents it ([i, j, f, o] = [x, h] @ kernel + bias; forget_bias 1), the softmax layer
        # at the last step; m the unit's mean over every sentence and step of the plain model
        lower, unit, held = got["at_mean"]
        softmax_bias = session.run(variables["softmax/bias"])

        def sigmoid(v):
            return 1 / (1 + np.exp(-v))

        def network(hold=None):
            """Layer 0's h at every step, and the last step's logits; `hold`: unit's h set to it."""
            below = embedding[inputs]
            for k in (0, 1):
                kernel, bias = saved[k], saved[2 + k]
                h = c = np.zeros((len(inputs), kernel.shape[1] // 4))
                hs = []
                for t in range(inputs.shape[1]):
                    z = np.concatenate([below[:, t], h], axis=1) @ kernel + bias
                    i, j, f, o = np.split(z, 4, axis=1)
                    c = c * sigmoid(f + 1.0) + sigmoid(i) * np.tanh(j)
                    h = np.tanh(c) * sigmoid(o)
                    if k == 0 and hold is not None:
                        h[:, unit] = hold
                    hs.append(h)
                below = np.stack(hs, axis=1)
                if k == 0:
                    lower_h = below
            return lower_h, below[:, -1] @ saved[4] + softmax_bias

        mean = float(network()[0][..., unit].mean())
        value = float(held[0].rpartition("=")[2])
        assert held == [f"{lower}:h:{unit}={value!r}"] and value == pytest.approx(mean, abs=1e-6)
        logits = network(hold=value)[1]
        m = (logits[:, 12] - logits[:, 13]) * np.where(number == 0, 1, -1)
        expected[f"cell_0 unit {unit} at its mean"] = {
            "accuracy": (m > 0).mean(),
            "with an attractor": (m[attractor] > 0).mean(),
            "without": (m[~attractor] > 0).mean(),
            "median margin": np.median(m),
        }
    assert set(got["results"]) == set(expected) and len(expected) == 5
    for name, columns in expected.items():
        for metric, value in columns.items():
            assert got["results"][name][metric] == pytest.approx(value, abs=2e-3), (name, metric)
    assert "held inside the model (rnn/multi_rnn_cell/cell_0/basic_lstm_cell:h:" in got["note"]


def test_the_study_page_is_the_holding_notebook_cell_for_cell():
    """docs/study.md shows notebook 04's code, which the test above runs: each of its python
    blocks is the notebook's code cell in the same place, so the page runs as the notebook does."""
    import re

    page = (NOTEBOOKS.parent / "docs" / "study.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)\n^```", page, re.S | re.M)
    book = json.loads((NOTEBOOKS / "04_holding_a_unit.ipynb").read_text())
    cells = [
        "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        for c in book["cells"]
        if c["cell_type"] == "code"
    ]
    assert blocks == cells
