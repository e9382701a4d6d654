"""Units ranked against labels (`gatetrace units`, `recorders.read.units`) and the L1 probe
(`recorders.read.probe`): every score against scikit-learn / numpy float64 over the recording's
own rows, a planted unit found first, random labels finding nothing."""

from __future__ import annotations

import json
import os
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import tracer
from recorders import Bins, Recording, SelectionError
from recorders.read import units as units_module
from recorders.read.labels import Gathered, read_labels
from recorders.read.probe import probe
from recorders.read.units import COLUMNS, findings, score_units, unit_scores
from tests.conftest import R, build, run_cli
from tracer._tf import tf, v1

EXAMPLES, STEPS = 40, 6
LENGTHS = np.random.RandomState(3).randint(1, STEPS + 1, EXAMPLES)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A BasicLSTMCell(3) under a GRUCell(1), recorded on 40 sequences with lengths."""

    def body(x):
        outputs, _ = v1.nn.static_rnn(
            R.MultiRNNCell([R.BasicLSTMCell(3), R.GRUCell(1)]),
            tf.unstack(x, axis=1),
            dtype=tf.float32,
        )
        return [outputs[-1]]

    built = build(body, steps=STEPS, features=4)
    x = np.random.RandomState(5).randn(EXAMPLES, STEPS, 4).astype(np.float32)
    out = tmp_path_factory.mktemp("units") / "run"
    model = tracer.from_session(built.session)
    tracer.record(model, {"x": x}, out, batch_size=16, lengths=LENGTHS)
    tracer.record(model, {"x": x}, out.parent / "summary", summary=Bins(), lengths=LENGTHS)
    return Recording(out), x


def _rows(rec: Recording, cell: str, table: str, name: str, column: str) -> pd.DataFrame:
    """example, step, unit, value: the recording's own rows of one gate column or state."""
    if table == "gates":
        df = rec.gate_frame([cell], [name], columns=[column]).rename(columns={column: "value"})
    else:
        df = rec.state_frame([cell], [name])
    return df[["example", "step", "unit", "value"]]


def _expected(rec, labels_at, binary: bool) -> pd.DataFrame:
    """Each unit's score from pandas and scikit-learn / numpy, in float64: `labels_at(rows)`
    gives the label of each row (NaN: none)."""
    out = []
    for cell in rec.cells:
        pairs = [("gates", g, c) for g in rec.gates(cell) for c in ("preactivation", "activation")]
        pairs += [("states", s, "value") for s in rec.states(cell)]
        for table, name, column in pairs:
            df = _rows(rec, cell, table, name, column)
            df = df.assign(label=labels_at(df)).dropna(subset=["label"])
            for unit, g in df.groupby("unit"):
                x, y = g["value"].to_numpy(np.float64), g["label"].to_numpy()
                separation = np.nan
                if binary:
                    auc = roc_auc_score(y == y.max(), x)
                    score, sign = max(auc, 1 - auc), "+" if auc >= 0.5 else "-"
                    on = y == y.max()
                    separation = abs(x[on].mean() - x[~on].mean()) / x.std() if x.std() else 0.0
                else:
                    r = np.corrcoef(x, y)[0, 1]
                    score, sign = abs(r), "+" if r >= 0 else "-"
                out.append((cell, table, name, column, unit, score, sign, separation, len(g)))
    return pd.DataFrame(
        out,
        columns=[
            "cell",
            "table",
            "name",
            "column",
            "unit",
            "score",
            "direction",
            "separation",
            "n",
        ],
    )


def _last_steps(df: pd.DataFrame) -> pd.Series:
    """Whether each row is its example's last recorded step."""
    return df["step"] == df.groupby("example")["step"].transform("max")


LABELS = {
    # name: (labels, binary, label of each row given the labels)
    "binary per position": lambda rng: (rng.randint(0, 2, (EXAMPLES, STEPS)).astype(bool), True),
    "numeric per position": lambda rng: (rng.randn(EXAMPLES, STEPS), False),
    "binary per sequence": lambda rng: (rng.randint(0, 2, EXAMPLES), True),
    "numeric per sequence": lambda rng: (rng.randn(EXAMPLES), False),
}


@pytest.mark.parametrize("kind", list(LABELS))
def test_every_score_equals_scikit_learn_or_numpy_over_the_recorded_rows(recorded, kind):
    rec, _ = recorded
    labels, binary = LABELS[kind](np.random.RandomState(11))
    if labels.ndim == 2:
        labels = labels.astype(np.float64)
        labels[::7, 2] = np.nan  # some positions unlabelled

        def labels_at(df):
            return labels[df["example"], df["step"]]
    else:

        def labels_at(df):
            return np.where(_last_steps(df), labels[df["example"]], np.nan)

    got = unit_scores(rec, labels, shuffles=3)
    assert list(got.columns) == COLUMNS
    assert got["score"].is_monotonic_decreasing
    assert set(got["metric"]) == {"auc" if binary else "pearson"}
    want = _expected(rec, labels_at, binary)
    keys = ["cell", "table", "name", "column", "unit"]
    both = got.merge(want, on=keys, suffixes=("", "_want"), validate="1:1")
    assert len(both) == len(got) == len(want) > 30
    np.testing.assert_allclose(both["score"], both["score_want"], rtol=1e-12, atol=1e-12)
    # ties in order of separation, which is numpy's over the same rows
    np.testing.assert_allclose(both["separation"], both["separation_want"], rtol=1e-9, atol=1e-12)
    for _, tied in got.groupby("score", sort=False):
        assert tied["separation"].is_monotonic_decreasing or tied["separation"].isna().all()
    # one row a finding: a preactivation goes where its activation scores the same, nothing else
    found = findings(got)
    key = ["cell", "name", "unit"]
    gates = got[got["table"] == "gates"].pivot_table(index=key, columns="column", values="score")
    same = int((gates["activation"] == gates["preactivation"]).sum())
    # (a rank's AUC is the same for both; Pearson's r is not: numeric labels keep both rows)
    assert (same > 0) == binary and len(found) == len(got) - same
    assert set(found["column"]) >= {"activation", "value"}
    dropped = got.drop(found.index)
    assert (dropped["column"] == "preactivation").all()
    assert (both["direction"] == both["direction_want"]).all()
    assert (both["n"] == both["n_want"]).all()
    # a memory budget that holds one unit of a gate's two columns at a time in each thread
    # (beside a chunk's ranking and the labels): the same table, a column read once a unit
    positions = int(np.count_nonzero(~np.isnan(np.asarray(labels, np.float64))))
    per_position = units_module._CHUNK * units_module._BYTES_PER_VALUE
    per_position += (1 + 3) * units_module._BYTES_PER_LABEL + 8 + 2 * 4
    per_thread = per_position * positions
    small = Recording(rec.path, memory=(os.cpu_count() or 1) * per_thread)
    cell = rec.cells[0]
    groups = units_module._groups(
        small,
        "gates",
        cell,
        "i",
        ["preactivation", "activation"],
        read_labels(labels),
        3,
        per_thread,
    )
    assert [g[0].units for g in groups] == [1] * rec.width("gates", cell, "i")
    pd.testing.assert_frame_equal(unit_scores(small, labels, shuffles=3), got)


def test_chance_is_the_mean_score_over_the_documented_permutations(recorded):
    rec, _ = recorded
    labels = np.random.RandomState(2).randint(0, 2, (EXAMPLES, STEPS))
    got = unit_scores(rec, labels, tables=("states",), shuffles=4, seed=9)
    cell = rec.cells[0]
    df = _rows(rec, cell, "states", "c", "value").sort_values(["example", "step", "unit"])
    y = labels[df["example"], df["step"]][df["unit"] == 0]
    rng = np.random.default_rng(9)
    permutations = [rng.permutation(len(y)) for _ in range(4)]
    best = -np.inf
    for unit, g in df.groupby("unit"):
        x = g["value"].to_numpy(np.float64)
        scores = [roc_auc_score(y[p], x) for p in permutations]
        scores = [max(a, 1 - a) for a in scores]
        row = got[(got["cell"] == cell) & (got["name"] == "c") & (got["unit"] == unit)]
        np.testing.assert_allclose(row["chance"], np.mean(scores), rtol=1e-12)
        best = max(best, *scores)
    assert got.attrs["chance_best"] >= best


def test_a_label_per_sequence_meets_a_backward_cell_at_its_last_step(tmp_path):
    """Bidirectional: the forward cell is scored at each sequence's last position, the backward
    cell at its first (the last it reads)."""

    def body(x):
        outputs, _, _ = v1.nn.static_bidirectional_rnn(
            R.LSTMCell(3), R.LSTMCell(3), tf.unstack(x, axis=1), dtype=tf.float32
        )
        return [outputs[-1]]

    built = build(body, steps=STEPS, features=4)
    x = np.random.RandomState(6).randn(EXAMPLES, STEPS, 4).astype(np.float32)
    tracer.record(tracer.from_session(built.session), {"x": x}, tmp_path / "bi", lengths=LENGTHS)
    rec = Recording(tmp_path / "bi")
    directions = {c: rec.cell(c)["direction"] for c in rec.cells}
    assert sorted(directions.values()) == ["backward", "forward"]
    labels = np.random.RandomState(12).randint(0, 2, EXAMPLES)
    got = unit_scores(rec, labels, shuffles=0)
    for cell, direction in directions.items():
        pick = "min" if direction == "backward" else "max"

        def labels_at(df, pick=pick):
            end = df["step"] == df.groupby("example")["step"].transform(pick)
            return np.where(end, labels[df["example"]], np.nan)

        want = _expected(rec, labels_at, True)
        want = want[want["cell"] == cell]
        both = got.merge(want, on=["cell", "table", "name", "column", "unit"], validate="1:1")
        assert len(both) == len(want) > 0
        np.testing.assert_allclose(both["score_x"], both["score_y"], rtol=1e-12)


def test_ties_count_as_scikit_learn_counts_them():
    rng = np.random.RandomState(0)
    values = rng.randint(0, 4, (5, 300)).astype(np.float32)  # few distinct values: many ties
    values[1] = 2.0  # one constant unit: AUC 0.5
    values[2, ::2] = np.where(values[2, ::2] == 0, -0.0, values[2, ::2])  # -0.0 ties with 0.0
    labels = (rng.rand(300) < 0.4).astype(np.float64)
    g = Gathered(
        (values.T[:100].copy(), values.T[100:].copy()),
        labels,
        np.arange(300),
        np.zeros(300, np.int64),
    )
    signed, _ = score_units(g, True, 0, 0)
    for unit in range(5):
        auc = roc_auc_score(labels == 1, values[unit])
        assert abs(signed[unit]) == pytest.approx(max(auc, 1 - auc), rel=1e-12)
    assert signed[1] == 0.5


def test_an_activation_ranked_from_its_preactivations_order_scores_as_sorted_alone():
    """`score_columns` ranks a gate's activation starting from the order that sorted its
    preactivation: exact where the activation falls a float step behind that order, saturates
    into ties, holds -0.0 and 0.0, or has nothing to do with it; a chunk that falls as the
    preactivation rises or has nothing to do with it is sorted anew; real and shuffled labels
    against scikit-learn, across chunks of units."""
    rng = np.random.RandomState(7)
    n, units = 400, units_module._CHUNK + 5
    pre = rng.randn(n, units).astype(np.float32)
    pre[::9, 2] = pre[0, 2]  # ties among the preactivations too
    act = (1 / (1 + np.exp(-pre.astype(np.float64)))).astype(np.float32)
    order = np.argsort(pre[:, 0], kind="stable")
    behind = order[10::5]  # each a float step below the value before it in that order
    act[behind, 0] = np.nextafter(act[order[9::5][: len(behind)], 0], np.float32(-1))
    assert (np.diff(act[order, 0]) < 0).sum() == len(behind)
    act[:, 1] = np.minimum(act[:, 1], np.float32(0.6))  # saturated: many ties
    act[:, 3] = rng.permutation(act[:, 3])  # unrelated to its preactivation
    act[:, 4] = np.where(rng.rand(n) < 0.5, np.float32(-0.0), np.float32(0.0))
    act[:, 5] = 0.25  # constant
    act[7, 6] = np.nan
    # the second chunk unrelated to its preactivations, or falling as they rise: sorted anew
    act[:, 16:20] = rng.permutation(act[:, 16:20])
    act[:, 20] = -pre[:, 20]
    labels = (rng.rand(n) < 0.3).astype(np.float64)

    def gathered(values):
        parts = (values[:150].copy(), values[150:].copy())
        return Gathered(parts, labels, np.arange(n), np.zeros(n, np.int64))

    shuffles, seed = 3, 5
    sort = units_module._Ranker._sort
    with mock.patch.object(units_module._Ranker, "_sort", autospec=True, side_effect=sort) as sorts:
        _, (signed, shuffled) = units_module.score_columns(
            [gathered(pre), gathered(act)], True, shuffles, seed
        )
    assert sorts.call_count == 3  # each chunk's preactivations, and the second chunk anew
    draw = np.random.default_rng(seed)
    permuted = [labels[draw.permutation(n)] for _ in range(shuffles)]
    assert np.isnan(signed[6]) and np.isnan(shuffled[:, 6]).all()
    for unit in set(range(units)) - {6}:
        for got, y in [(signed[unit], labels), *zip(shuffled[:, unit], permuted, strict=True)]:
            auc = roc_auc_score(y == 1, act[:, unit].astype(np.float64))
            assert abs(got) == pytest.approx(max(auc, 1 - auc), rel=1e-12, abs=1e-12), unit
            assert (got >= 0) == (auc >= 0.5), unit
    alone, alone_shuffled = score_units(gathered(act), True, shuffles, seed)
    np.testing.assert_array_equal(signed, alone)
    np.testing.assert_array_equal(shuffled, alone_shuffled)


def test_a_table_of_labels_scores_only_the_positions_it_lists(recorded, tmp_path):
    rec, _ = recorded
    rng = np.random.RandomState(4)
    table = pd.DataFrame(
        {"example": np.repeat(np.arange(0, EXAMPLES, 2), 2), "step": np.tile([0, 1], EXAMPLES // 2)}
    )
    table["label"] = rng.randn(len(table))
    table.to_parquet(tmp_path / "labels.parquet")
    table.to_csv(tmp_path / "labels.csv", index=False)
    grid = np.full((EXAMPLES, STEPS), np.nan)
    grid[table["example"], table["step"]] = table["label"]
    want = unit_scores(rec, grid, shuffles=0)
    for path in ("labels.parquet", "labels.csv"):
        got = unit_scores(rec, tmp_path / path, shuffles=0)
        pd.testing.assert_frame_equal(got, want, check_like=False)
        assert got["n"].max() == (LENGTHS[table["example"]] > table["step"]).sum() < len(table)
    # per sequence, from a table without steps, at a chosen step
    per = pd.DataFrame({"example": np.arange(EXAMPLES), "label": rng.randint(0, 2, EXAMPLES)})
    per.to_csv(tmp_path / "per.csv", index=False)
    got = unit_scores(rec, tmp_path / "per.csv", step=0, shuffles=0)
    want = _expected(
        rec,
        lambda df: np.where(df["step"] == 0, per["label"].to_numpy()[df["example"]], np.nan),
        True,
    )
    both = got.merge(want, on=["cell", "table", "name", "column", "unit"], validate="1:1")
    np.testing.assert_allclose(both["score_x"], both["score_y"], rtol=1e-12)
    assert (both["n_x"] == EXAMPLES).all()


def _planted(tmp_path, examples=200, steps=10):
    """A BasicLSTMCell(4) whose unit 2 holds the sign of a marker shown at step 0 in its cell
    state, exactly, while the other units see only noise."""
    units, features = 4, 2

    def body(x):
        outputs, _ = v1.nn.static_rnn(
            R.BasicLSTMCell(units), tf.unstack(x, axis=1), dtype=tf.float32
        )
        return [outputs[-1]]

    built = build(body, steps=steps, features=features)
    rng = np.random.RandomState(0)
    kernel = np.zeros((features + units, 4 * units), np.float32)
    bias = np.zeros(4 * units, np.float32)
    others = [0, 1, 3]
    # gate order of the kernel's column blocks: i, j, f, o (as BasicLSTMCell splits them)
    for block in range(4):
        cols = [block * units + u for u in others]
        kernel[0, cols] = rng.uniform(-1, 1, len(cols))  # the noise channel
        kernel[np.ix_([features + u for u in others], cols)] = rng.uniform(-1, 1, (3, 3))
    i, j, f, o = (block * units + 2 for block in range(4))
    kernel[1, j] = 5.0  # the marker, at step 0 only, into unit 2's candidate
    bias[[i, f, o]] = 10.0  # unit 2: input and output open, nothing forgotten
    with built.graph.as_default():
        for var in v1.global_variables():
            var.load(kernel if var.op.name.endswith("kernel") else bias, built.session)
    x = np.zeros((examples, steps, features), np.float32)
    x[:, :, 0] = rng.randn(examples, steps)
    marker = rng.randint(0, 2, examples)
    x[:, 0, 1] = 2.0 * marker - 1
    tracer.record(tracer.from_session(built.session), {"x": x}, tmp_path / "planted")
    return Recording(tmp_path / "planted"), marker


SEED_OF_NOTHING = 0  # random labels whose best unit does not beat the shuffles' best


def test_a_planted_unit_ranks_first_and_random_labels_find_nothing(tmp_path):
    rec, marker = _planted(tmp_path)
    per_position = np.repeat(marker[:, None], 10, axis=1)  # "the marker was +1", at every step
    scores = unit_scores(rec, per_position)
    top = scores.head(2)
    assert set(zip(top["table"], top["name"], top["unit"], strict=True)) == {
        ("states", "c", 2),
        ("states", "h", 2),
    }
    assert (top["score"] == 1.0).all() and (top["direction"] == "+").all()
    assert (top["chance"] < 0.55).all() and scores.attrs["chance_best"] < 0.6
    assert scores.loc[scores["unit"] != 2, "score"].max() < 0.6
    random = np.random.RandomState(8).randint(0, 2, (len(marker), 10))
    found = unit_scores(rec, random)
    assert found["score"].max() < 0.6
    assert abs(found["score"].max() - found.attrs["chance_best"]) < 0.05
    # per sequence (the last step), on the command line, as JSON
    np.save(tmp_path / "marker.npy", marker)
    done = run_cli(
        "units",
        str(tmp_path / "planted"),
        "--labels",
        str(tmp_path / "marker.npy"),
        "--top",
        "2",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [set(r) for r in rows] == [set(COLUMNS)] * 2
    assert {(r["table"], r["name"], r["unit"], r["score"]) for r in rows} == {
        ("states", "c", 2, 1.0),
        ("states", "h", 2, 1.0),
    }
    shown = run_cli(
        "units", str(tmp_path / "planted"), "--labels", str(tmp_path / "marker.npy"), "--top", "3"
    )
    assert shown.returncode == 0 and "chance: with the labels shuffled (20 times)" in shown.stdout
    assert "nothing here beats chance" not in shown.stdout
    # labels that mean nothing: the best unit at or below the best of the shuffles, and said
    noise = np.random.RandomState(SEED_OF_NOTHING).randint(0, 2, len(marker))
    np.save(tmp_path / "noise.npy", noise)
    found = unit_scores(rec, noise)
    assert found["score"].max() <= found.attrs["chance_best"]
    shown = run_cli("units", str(tmp_path / "planted"), "--labels", str(tmp_path / "noise.npy"))
    assert shown.returncode == 0 and "nothing here beats chance" in shown.stdout, shown.stdout


def test_the_probe_is_scikit_learn_on_the_recorded_units(tmp_path):
    rec, marker = _planted(tmp_path)
    result = probe(rec, marker, table="states", strength=0.1)
    assert (result.metric, result.score, result.features) == ("accuracy", 1.0, 8)
    assert result.train[1] + result.held_out[1] == len(marker) and result.held_out[1] == 50
    top = result.units.iloc[0]
    assert (top["table"], top["unit"]) == ("states", 2) and top["weight"] > 0
    # the same fit from the recording's rows, by hand: the last step of every sequence
    wide = []
    for state in ("c", "h"):
        df = rec.state_frame(states=[state])
        df = df[df["step"] == 9].pivot(index="example", columns="unit", values="value")
        wide.append(df.to_numpy(np.float64))
    features = np.hstack(wide)
    held = np.zeros(len(marker), bool)
    held[np.random.default_rng(0).choice(np.arange(len(marker)), 50, replace=False)] = True
    model = make_pipeline(
        StandardScaler(),
        LogisticRegression(l1_ratio=1.0, C=0.1, solver="liblinear", random_state=0),
    ).fit(features[~held], marker[~held] == 1)
    assert model.score(features[held], marker[held] == 1) == result.score
    weights = model[-1].coef_.ravel()
    kept = result.units.assign(
        k=[
            ("c", "h").index(n) * 4 + u
            for n, u in zip(result.units["name"], result.units["unit"], strict=True)
        ]
    )
    np.testing.assert_allclose(kept["weight"], weights[kept["k"]], rtol=1e-6)
    assert set(kept["k"]) == set(np.flatnonzero(weights))
    # numeric labels: a Lasso; random labels: no better than the baseline
    noise = probe(rec, np.random.RandomState(1).randint(0, 2, len(marker)), table="gates")
    assert noise.score <= noise.baseline + 0.15


def test_bad_labels_get_one_line(recorded, tmp_path):
    rec, _ = recorded
    cases = {
        "does not cover the recording": np.arange((EXAMPLES - 1) * STEPS).reshape(-1, STEPS),
        "does not cover the recording (cell": np.arange(EXAMPLES * (STEPS - 1)).reshape(
            EXAMPLES, -1
        ),
        "expected binary or numeric labels": np.array(["a", "b"] * (EXAMPLES // 2)),
        "only the label 1": np.ones(EXAMPLES),
        "expected an array shaped": np.zeros((EXAMPLES, STEPS, 2)),
        # more labels than sequences fed: another input's (before: scored silently)
        f"{8 * EXAMPLES:,} rows, but the recording was fed {EXAMPLES} sequences": np.arange(
            8 * EXAMPLES
        )
        % 2,
    }
    for said, labels in cases.items():
        with pytest.raises(SelectionError, match=said.replace("(", r"\(")):
            unit_scores(rec, labels)
    os.mkfifo(tmp_path / "fifo.npy")  # a reader would wait on it forever
    with pytest.raises(SelectionError, match="not a regular file"):
        read_labels(tmp_path / "fifo.npy")
    np.save(tmp_path / "short.npy", np.arange(3))
    done = run_cli("units", str(rec.path), "--labels", str(tmp_path / "short.npy"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "does not cover the recording" in done.stderr
    with pytest.raises(SelectionError, match="is a summary recording"):
        unit_scores(Recording(rec.path.parent / "summary"), np.arange(EXAMPLES) % 2)
    gru = rec.cells[1]
    with pytest.raises(SelectionError, match="leaves 1 of 40 examples to train on"):
        probe(rec, np.arange(EXAMPLES) % 2, held_out=0.98)
    with pytest.raises(SelectionError, match="a probe over 1 unit"):
        probe(rec, np.arange(EXAMPLES) % 2, cells=[gru])
    with pytest.raises(SelectionError, match="labelled twice"):
        read_labels(pd.DataFrame({"example": [0, 0], "label": [1, 0]}))
    with pytest.raises(SelectionError, match="no labelled position has a recorded row"):
        unit_scores(rec, pd.DataFrame({"example": [EXAMPLES, EXAMPLES + 1], "label": [1, 0]}))


def test_user_numbers_and_label_files_are_checked_before_they_size_anything(recorded, tmp_path):
    """--step past the recording, a small Parquet file of 50M rows, a sparse .npy declaring
    2 GiB, a CSV past the budget: one line each, before anything is decoded or allocated."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rec, _ = recorded
    labels = np.arange(EXAMPLES) % 2
    for step in (STEPS, 300_000, 20_000_000, -1):
        with pytest.raises(
            SelectionError, match=rf"step {step}: expected an input position .* 0 to {STEPS - 1}"
        ):
            unit_scores(rec, labels, step=step)
        with pytest.raises(SelectionError, match=rf"step {step}: expected"):
            probe(rec, labels, step=step)
    # 50M rows of one repeated value: a few hundred KB on disk
    rows = 50_000_000
    table = pa.table(
        {"example": pa.array(np.zeros(1, np.int64)).take(pa.array(np.zeros(rows, np.int32)))}
    )
    table = table.append_column(
        "label", pa.array(np.ones(1)).take(pa.array(np.zeros(rows, np.int32)))
    )
    pq.write_table(table, tmp_path / "many.parquet", compression="zstd")
    del table
    assert (tmp_path / "many.parquet").stat().st_size < 4 << 20
    with pytest.raises(
        SelectionError, match=r"its 50,000,000 rows would take .* more than the memory budget"
    ):
        read_labels(tmp_path / "many.parquet", memory=1 << 30)
    with open(
        tmp_path / "sparse.npy", "wb"
    ) as f:  # a header declaring 2 GiB of float64, the rest a hole
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f8", "fortran_order": False, "shape": (1 << 28,)}
        )
        f.truncate(f.tell() + (2 << 30))
    with pytest.raises(SelectionError, match=r"its shape \[268435456\] would take"):
        read_labels(tmp_path / "sparse.npy", memory=1 << 30)
    np.save(tmp_path / "short.npy", np.zeros(0))
    with open(tmp_path / "short.npy", "r+b") as f:  # a header claiming more than the file holds
        header = f.read().replace(b"(0,)", b"(9,)")
        f.seek(0)
        f.write(header)
    with pytest.raises(SelectionError, match="shorter than its header"):
        read_labels(tmp_path / "short.npy")
    with open(tmp_path / "big.csv", "w") as f:
        f.write("example,label\n")
        f.truncate(200 << 20)
    with pytest.raises(SelectionError, match=r"bytes of text would take"):
        read_labels(tmp_path / "big.csv", memory=1 << 30)
    np.save(tmp_path / "labels.npy", labels)
    done = run_cli(
        "units", str(rec.path), "--labels", str(tmp_path / "labels.npy"), "--step", "20000000"
    )
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1


def test_a_probe_whose_training_split_holds_one_example_of_a_label_is_refused_before_fitting(
    recorded, capsys
):
    rec, _ = recorded
    labels = np.zeros(EXAMPLES)
    labels[[0, 1]] = 1  # two positives: at most one of them left to train on, or none
    with pytest.raises(
        SelectionError, match=r"hold label 1 in 1 and other labels in 19; a probe needs"
    ):
        probe(rec, labels, held_out=0.5, seed=2)  # example 0 trains, example 1 is held out
    assert capsys.readouterr().err == ""


@pytest.mark.e2e
def test_units_never_imports_tensorflow_even_to_say_what_failed(recorded, tmp_path):
    import subprocess
    import sys

    rec, _ = recorded
    np.save(tmp_path / "labels.npy", np.arange(EXAMPLES) % 2)
    script = (
        "import sys\n"
        "from recorders.read import units\n"
        "def broken(*a, **k): raise RuntimeError('a bug')\n"
        "if sys.argv[1] == 'bug': units.unit_scores = broken\n"
        "from tracer.cli import main\n"
        "code = main(sys.argv[2:])\n"
        "print(code, 'tensorflow' in sys.modules)\n"
    )
    for case, extra in (("step", ["--step", "20000000"]), ("bug", [])):
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                script,
                case,
                "units",
                str(rec.path),
                "--labels",
                str(tmp_path / "labels.npy"),
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.stdout == "2 False\n", (case, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("gatetrace: error: ")
