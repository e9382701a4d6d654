"""Summary recordings (`gatetrace record --summary`): every statistic against numpy float64 over a
full recording of the same model and data (counts, min, max, threshold counts and histograms
exactly; mean and variance to 1e-9 relative), for unrolled TF1 cells, cells in loops (emitted,
and reversed), fused cells and Keras layers, with lengths, masks and a last short batch, each
computed both ways (`place`): from the fetched arrays by the compiled loop (the default on a
CPU), and without numba (in the graph where the values are graph tensors, else by numpy);
shards merge to what one process gives; a resume continues where it stopped; bad options get
one line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracer
from recorders import Bins, Recording, Shard
from recorders.errors import RecordingError, SelectionError
from recorders.read.analysis import saturation, step_stats
from recorders.write.totals import summary_columns
from tests.conftest import CONFIGS, R, build, run_cli, save, static_body
from tests.test_replay import LENGTHS, control_flow, dynamic_body, feeds
from tracer._tf import tf, v1
from tracer.values import compiled
from tracer.values.summaries import in_graph

X = np.random.RandomState(4).randn(6, 5, 4).astype(np.float32)


@pytest.fixture(params=["compiled", "without numba"])
def place(request, monkeypatch) -> str:
    """Where a summary's statistics are computed: from the fetched arrays by the compiled loop
    (the default on a CPU), or as without numba (in the graph, or by numpy)."""
    if request.param == "without numba":
        monkeypatch.setattr(compiled, "available", lambda: False)
    else:
        assert compiled.available(), "the tests need numba (pip install '.[test]')"
    assert in_graph() == (request.param == "without numba")
    return request.param


def both(model, feeds_, tmp_path: Path, name: str, **options) -> tuple[Path, Path]:
    """A full recording and a summary recording of the same model and feeds."""
    full, summary = tmp_path / f"{name}-full", tmp_path / f"{name}-summary"
    tracer.record(model, feeds_, full, **options)
    tracer.record(model, feeds_, summary, summary=Bins(), **options)
    return full, summary


def assert_matches(full: Path, summary: Path) -> int:
    """Every statistic of `summary` against numpy float64 over the values of `full`; returns
    how many (column, unit or step) positions were compared."""
    stats = Recording(summary).statistics
    tables = {
        "gates": pd.read_parquet(full / "gates"),
        "states": pd.read_parquet(full / "states"),
    }
    label = {"gates": "gate", "states": "state"}
    compared = 0
    for key in stats.keys():
        cell, table, name, column = key
        df = tables[table]
        df = df[(df["cell"] == cell) & (df[label[table]] == name)]
        assert len(df), f"{key}: the full recording holds no values"
        for axis in ("unit", "step"):
            positions, s = stats.stats(*key, axis)
            groups = dict(list(df.groupby(axis)[column]))
            held = positions[s.count > 0]
            assert sorted(groups) == held.tolist(), f"{key} {axis}: positions"
            for k, at in enumerate(positions):
                if s.count[k] == 0:
                    continue
                v = groups[at].to_numpy(np.float64)
                where = f"{key} {axis} {at}"
                assert s.count[k] == len(v), where
                assert s.minimum[k] == v.min() and s.maximum[k] == v.max(), where
                assert s.below[k] == (v < stats.low).sum(), where
                assert s.above[k] == (v > stats.high).sum(), where
                edges = s.edges
                inside = np.histogram(v[(v >= edges[0]) & (v <= edges[-1])], edges)[0]
                want = [(v < edges[0]).sum(), *inside, (v > edges[-1]).sum()]
                np.testing.assert_array_equal(s.histogram[k], want, err_msg=where)
                np.testing.assert_allclose(
                    s.mean[k], v.mean(), rtol=1e-9, atol=1e-300, err_msg=where
                )
                np.testing.assert_allclose(
                    s.variance[k], v.var(), rtol=1e-9, atol=1e-15, err_msg=where
                )
                compared += 1
    return compared


@pytest.mark.parametrize("name", list(CONFIGS))
def test_unrolled_cells_match_numpy(name, tmp_path, place):
    """static_rnn of every TF1 cell kind, with lengths (a zero, a full one) and a last short
    batch; a GRUCell with relu has an unbounded candidate, binned as the user's bins say."""
    built = build(static_body(CONFIGS[name]))
    model = tracer.from_session(built.session)
    lengths = np.array([5, 3, 0, 1, 5, 2])
    full, summary = both(model, {"x": X}, tmp_path, "s", batch_size=4, lengths=lengths)
    rec = Recording(summary)
    (cell,) = rec.cells
    assert rec.kind == "summary" and rec.cell(cell)["path"] == "fetch"
    assert assert_matches(full, summary) > 0
    manifest = json.loads((full / "manifest.json").read_text())
    assert rec.summary()["rows"]["gates"] == manifest["rows"]["gates"]


@pytest.mark.parametrize("cf", ["v1", "v2"])
def test_loops_emitted_and_reversed_match_numpy(cf, tmp_path, place):
    """A dynamic_rnn with its own sequence lengths (summarised in the graph from what the loop
    emits) and a bidirectional one (its backward loop reversed: in numpy, by input position)."""
    config = CONFIGS["LSTMCell-peepholes-proj-clip"]
    with control_flow(cf):
        built = build(dynamic_body(config))
    with tracer.load_model(save(built, "checkpoint", tmp_path)) as model:
        full, summary = both(model, feeds(config, X), tmp_path, "loop", batch_size=4)
    assert {c["path"] for c in Recording(summary).manifest["cells"]} == {"loop"}
    assert assert_matches(full, summary) > 0

    def bidirectional(x):
        seq = v1.placeholder(tf.int32, [None], name="len")
        out = v1.nn.bidirectional_dynamic_rnn(
            R.GRUCell(3), R.LSTMCell(4), x, sequence_length=seq, dtype=tf.float32
        )
        return list(tf.nest.flatten(out))

    with control_flow(cf):
        built = build(bidirectional)
    root = tmp_path / "bi"
    root.mkdir()
    with tracer.load_model(save(built, "checkpoint", root)) as model:
        full, summary = both(model, {"x": X, "len": LENGTHS}, root, "bi", batch_size=4)
    assert assert_matches(full, summary) > 0


@pytest.mark.parametrize("kind", ["LSTMBlockCell", "BlockLSTM", "GRUBlockCell"])
def test_fused_cells_match_numpy(kind, tmp_path, place):
    from tests.test_fused import D, T
    from tests.test_fused import build as fused

    graph, session, _ = fused(kind)
    x = np.random.RandomState(2).uniform(-1, 1, (7, T, D)).astype(np.float32)
    full, summary = both(tracer.from_session(session), {"x": x}, tmp_path, kind, batch_size=3)
    assert Recording(summary).manifest["cells"][0]["path"] == "fused"
    assert assert_matches(full, summary) > 0


@pytest.mark.parametrize("framework", ["keras3", "tf-keras"])
def test_keras_layers_with_masks_match_numpy(framework, tmp_path, place):
    """Masking -> LSTM (hard sigmoid gates) -> Bidirectional GRU -> GRU (go_backwards) ->
    SimpleRNN (relu): masked positions are counted nowhere."""
    from tests.test_keras import masked_model, sequences

    full, summary = both(masked_model(framework), sequences(), tmp_path, "k", batch_size=3)
    assert assert_matches(full, summary) > 0
    # hard_sigmoid gates are binned over [0, 1], relu over the user's bins
    edges = {
        (c["cell"], c["name"], c["column"]): c["edges"]
        for c in Recording(summary).manifest["summary"]["columns"]
    }
    assert edges[("lstm", "i", "activation")][::20] == [0.0, 1.0]
    assert edges[("rnn", "h", "activation")][::40] == [-10.0, 10.0]


def test_shards_and_workers_give_what_one_process_gives(tmp_path):
    """Four shards into one folder, and four worker processes, against one process: counts,
    min, max and histograms equal, means and m2 to float64 rounding. (The shards are cut at
    whole batches, as --workers cuts them: a batch of other rows may round the model's own
    float32 values differently.)"""
    built = build(static_body(CONFIGS["GRUCell"]))
    model_path = save(built, "checkpoint", tmp_path)
    x = np.random.RandomState(5).randn(37, 5, 4).astype(np.float32)
    with tracer.load_model(model_path) as model:
        tracer.record(model, {"x": x}, tmp_path / "one", batch_size=4, summary=Bins())
        for k in range(4):
            tracer.record(
                model,
                {"x": x},
                tmp_path / "four",
                batch_size=4,
                summary=Bins(),
                shard=Shard(k, 4, 4),
            )
    np.save(tmp_path / "x.npy", x)
    done = run_cli(
        "record",
        model_path,
        "--feed",
        f"x={tmp_path / 'x.npy'}",
        "--out",
        str(tmp_path / "workers"),
        "--summary",
        "--workers",
        "4",
        "--batch-size",
        "4",
        "--task-size",
        "2",
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    assert "summarised 1 cell on 37 sequences in 5 tasks" in done.stdout
    one = Recording(tmp_path / "one").statistics
    for other in ("four", "workers"):
        got = Recording(tmp_path / other).statistics
        for axis in ("unit", "step"):
            a, b = one.frame(axis), got.frame(axis)
            exact = [
                "cell",
                "table",
                "name",
                "column",
                axis,
                "count",
                "min",
                "max",
                "below",
                "above",
            ]
            pd.testing.assert_frame_equal(a[exact], b[exact])
            assert all(
                np.array_equal(p, q) for p, q in zip(a["histogram"], b["histogram"], strict=True)
            )
            np.testing.assert_allclose(a["mean"], b["mean"], rtol=1e-12)
            np.testing.assert_allclose(a["m2"], b["m2"], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("every", [0.0, 3600.0], ids=["each batch", "on stopping"])
def test_a_resume_continues_the_totals_where_they_stopped(tmp_path, monkeypatch, every):
    """A run stopped after two batches, resumed, gives what one uninterrupted run gives (the
    batches committed are not counted twice), whether the totals were written at each batch
    or only when the writer stopped (`WRITE_EVERY`)."""
    from recorders.write import summary as summary_module  # the writer

    built = build(static_body(CONFIGS["BasicLSTMCell"]))
    model = tracer.from_session(built.session)
    x = np.random.RandomState(6).randn(20, 5, 4).astype(np.float32)
    tracer.record(model, {"x": x}, tmp_path / "whole", batch_size=4, summary=Bins())
    monkeypatch.setattr(summary_module, "WRITE_EVERY", every)
    written = []
    as_bytes = summary_module.totals_bytes
    monkeypatch.setattr(
        summary_module, "totals_bytes", lambda t, c: written.append(c.pairs()) or as_bytes(t, c)
    )
    commit = summary_module.SummaryWriter.commit
    calls = []

    def failing(self):
        calls.append(1)
        if len(calls) == 3:
            raise RecordingError("stopped for the test")
        commit(self)

    monkeypatch.setattr(summary_module.SummaryWriter, "commit", failing)
    with pytest.raises(RecordingError, match="stopped for the test"):
        tracer.record(model, {"x": x}, tmp_path / "resumed", batch_size=4, summary=Bins())
    monkeypatch.setattr(summary_module.SummaryWriter, "commit", commit)
    assert written == ([[[0, 4]], [[0, 8]]] if every == 0 else [[[0, 8]]])
    partial = Recording(tmp_path / "resumed")
    assert not partial.complete and partial.examples == [[0, 8]]
    assert (
        partial.statistics.frame("unit")["count"].max() == 8 * 5
    )  # the totals of what is complete
    tracer.record(model, {"x": x}, tmp_path / "resumed", batch_size=4, summary=Bins(), resume=True)
    a, b = (Recording(tmp_path / n).statistics.frame("step") for n in ("whole", "resumed"))
    pd.testing.assert_frame_equal(a.drop(columns="histogram"), b.drop(columns="histogram"))


def test_saturation_step_stats_and_inspect_from_a_summary(tmp_path):
    """What analysis gives from a summary is what it gives from the full recording (quantiles
    within one bin); inspect says which kind a folder is; value reads are refused in one line."""
    built = build(static_body(CONFIGS["BasicLSTMCell"]))
    model = tracer.from_session(built.session)
    x = np.random.RandomState(7).randn(30, 5, 4).astype(np.float32)
    full, summary = both(model, {"x": x}, tmp_path, "a", batch_size=7)
    s, f = Recording(summary), Recording(full)
    pd.testing.assert_frame_equal(saturation(s), saturation(f))
    a, b = step_stats(s), step_stats(f)
    np.testing.assert_allclose(a["mean"], b["mean"], rtol=1e-9)
    # a quantile from the histogram: the top of the bin holding numpy's inverted-CDF quantile
    gates = pd.read_parquet(full / "gates")
    for _, row in a.iterrows():
        v = gates[(gates["gate"] == row["gate"]) & (gates["step"] == row["step"])]["activation"]
        edges = np.array(
            next(
                c["edges"]
                for c in s.manifest["summary"]["columns"]
                if (c["name"], c["column"]) == (row["gate"], "activation")
            )
        )
        for q in (0.1, 0.5, 0.9):
            exact = np.quantile(v.to_numpy(np.float64), q, method="inverted_cdf")
            top = edges[min(np.searchsorted(edges, exact, side="right"), len(edges) - 1)]
            assert row[f"q{round(q * 100)}"] == top, (row["gate"], row["step"], q)
    with pytest.raises(SelectionError, match="is a summary recording"):
        s.gate_array(s.cells[0], "f")
    with pytest.raises(SelectionError, match="not the values gate_blocks reads"):
        next(s.gate_blocks(s.cells[0], "f"))
    with pytest.raises(SelectionError, match="not the values the states table reads"):
        s.state_frame()
    # thresholds at edges of the bins (0.2, 0.8 of a sigmoid's twenty) are counted from the
    # histogram, as the full recording counts them; others are refused in one line
    sigmoid = ["i", "f", "o"]
    pd.testing.assert_frame_equal(
        saturation(s, gates=sigmoid, low=0.2, high=0.8),
        saturation(f, gates=sigmoid, low=0.2, high=0.8),
    )
    with pytest.raises(SelectionError, match="counted values below 0.1 and above 0.9"):
        saturation(s, low=0.23, high=0.8)
    shown = run_cli("inspect", str(summary)).stdout
    assert "a gatetrace summary recording" in shown and "values summarised: " in shown
    assert "summary/units.parquet" in shown


def test_the_output_does_not_grow_with_the_sequences(tmp_path):
    built = build(static_body(CONFIGS["BasicLSTMCell"]))
    model = tracer.from_session(built.session)
    sizes = []
    for n in (10, 400):
        x = np.random.RandomState(8).randn(n, 5, 4).astype(np.float32)
        out = tmp_path / f"n{n}"
        tracer.record(model, {"x": x}, out, batch_size=10, summary=Bins())
        sizes.append(sum(p.stat().st_size for p in (out / "summary").iterdir()))
    assert sizes[1] <= sizes[0] * 1.2  # the same tables; only their numbers' widths differ


def at_every_cut(edges: np.ndarray, low: float, high: float) -> np.ndarray:
    """float32 values at, just below and just above each edge and threshold, far outside, and -0.0."""
    f32 = np.float32
    cuts = np.r_[edges, low, high].astype(f32)
    return np.r_[
        cuts, np.nextafter(cuts, f32(-np.inf)), np.nextafter(cuts, f32(np.inf)), -100, 100, -0.0
    ].astype(f32)


CUTS = pytest.mark.parametrize(
    "edges, low, high",
    [
        (np.linspace(0, 1, 21), 0.1, 0.9),  # a sigmoid's: the thresholds are edges
        (np.linspace(-10, 10, 41), 0.1, 0.9),  # the user's default: they split two bins
        (np.linspace(-0.3, 1, 8), 0.12, 0.88),  # bins the multiply cannot find: searchsorted
    ],
    ids=["sigmoid", "default", "uneven"],
)


@CUTS
@pytest.mark.parametrize("masked", [False, True])
def test_slots_in_the_graph_count_values_at_every_cut_as_numpy_does(edges, low, high, masked):
    """Every value at, just below and just above each edge and threshold (in float32), far
    outside, and -0.0: the graph's histogram and threshold counts equal numpy's over the same
    values in float64 (a denormal as 0, as the module says), with rows left out or not, in
    XLA's compiled loop (the multiply's bins) and out of it (searchsorted's)."""
    from tracer.values.summaries import _Bins, _reduce

    f32 = np.float32
    values = at_every_cut(edges, low, high)
    bins = _Bins.of(edges, low, high, np.dtype(f32))
    assert (bins.scale is None) == (edges[0] == -0.3)
    keep = np.arange(len(values)) % 3 != 1 if masked else np.ones(len(values), bool)
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [1, len(values), 1])  # [steps, batch, units], fixed
        valid = tf.constant(keep[None, :]) if masked else None
        got = _reduce(x, valid, bins)
        with v1.Session(graph=graph) as session:  # XLA compiles from a cluster's second run
            runs = [session.run(got[5], {x: values[None, :, None]}) for _ in range(3)]
    v = values[keep].astype(np.float64)
    v[np.abs(v) < np.finfo(f32).tiny] = 0.0  # TensorFlow's CPU kernels take denormals as 0
    inside = np.histogram(v[(v >= edges[0]) & (v <= edges[-1])], edges)[0]
    want = [(v < edges[0]).sum(), *inside, (v > edges[-1]).sum()]
    for by_unit in runs:
        histogram, below, above = bins.histogram(by_unit.astype(np.int64))
        np.testing.assert_array_equal(histogram[0], want)
        assert below[0] == (v < low).sum() and above[0] == (v > high).sum()


@CUTS
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_compiled_loop_counts_values_at_every_cut_as_numpy_does(edges, low, high, dtype):
    """The same values, in several rows, steps and units, some rows left out at some steps: the
    compiled loop's histogram, threshold counts, count, min, max, mean and m2 equal numpy's over
    the same values in float64, denormals included (its values are the arrays fetched)."""
    from tracer.values.summaries import _Bins

    v = at_every_cut(edges, low, high).astype(dtype)
    rng = np.random.RandomState(0)
    values = rng.permutation(np.tile(v, 12))[:360].reshape(24, 5, 3)  # rows, steps, units
    valid = rng.rand(24, 5) > 0.3
    valid[:, 2] = False  # a step with no row
    bins = _Bins.of(edges, low, high, np.dtype(dtype))
    if dtype == np.float32:  # (float64 values' products are not checked exact: searchsorted)
        assert (bins.scale is None) == (edges[0] == -0.3)
    n, mean, m2, lo, hi, by_unit, by_step = compiled.reduce(values, valid, bins.compiled)
    x = values.astype(np.float64)
    for axis, counted in ((1, by_unit), (2, by_step)):
        # numpy: per unit over rows and steps, per step over rows and units
        for k in range(counted.shape[0]):
            if axis == 1:
                w = x[:, :, k][valid]
            else:
                w = x[:, k, :][valid[:, k]].ravel()
            histogram, below, above = bins.histogram(counted[k])
            inside = np.histogram(w[(w >= edges[0]) & (w <= edges[-1])], edges)[0]
            want = [(w < edges[0]).sum(), *inside, (w > edges[-1]).sum()]
            np.testing.assert_array_equal(histogram, want)
            assert below == (w < low).sum() and above == (w > high).sum()
    np.testing.assert_array_equal(n, valid.sum(0))
    for t in range(5):
        w = x[valid[:, t], t, :]  # [rows, units]
        if not len(w):
            assert n[t] == 0 and np.all(lo[t] == np.inf) and np.all(hi[t] == -np.inf)
            continue
        np.testing.assert_array_equal(lo[t], w.min(0))
        np.testing.assert_array_equal(hi[t], w.max(0))
        np.testing.assert_allclose(mean[t], w.mean(0), rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(m2[t], ((w - w.mean(0)) ** 2).sum(0), rtol=1e-9, atol=1e-12)


def test_the_compiled_loop_puts_nan_and_infinities_in_range():
    """NaN, +inf and -inf are counted in a slot that exists (the summary then refuses the column
    by its mean): the loop never writes outside its counts."""
    from tracer.values.summaries import _Bins

    for edges in (np.linspace(-10, 10, 41), np.linspace(-0.3, 1, 8)):
        bins = _Bins.of(edges, 0.1, 0.9, np.dtype(np.float32))
        values = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32).reshape(4, 1, 1)
        n, mean, *_, by_unit, by_step = compiled.reduce(values, None, bins.compiled)
        assert n[0] == 4 and by_unit.sum() == 4 and by_step.sum() == 4
        assert np.isnan(mean[0, 0])


def test_nan_values_are_refused_in_one_line(tmp_path, place):
    built = build(static_body(CONFIGS["BasicLSTMCell"]))
    x = X.copy()
    x[2, 3, 0] = np.nan
    with pytest.raises(RecordingError, match=r"is NaN or infinite, which a summary cannot count"):
        tracer.record(tracer.from_session(built.session), {"x": x}, tmp_path / "s", summary=Bins())
    assert not (tmp_path / "s" / "manifest.json").exists()


def test_bad_options_get_one_line(tmp_path):
    built = build(static_body(CONFIGS["BasicLSTMCell"]))
    path = save(built, "checkpoint", tmp_path)
    np.save(tmp_path / "x.npy", X)
    base = ["record", path, "--feed", f"x={tmp_path / 'x.npy'}", "--quiet"]
    cases = {
        ("--summary", "--bins", "1,0,10"): "expected bins that increase",
        ("--summary", "--bins", "0,1"): "expected 3 numbers",
        ("--summary", "--saturation", "0.1,1.5"): "a sigmoid activation lies in [0, 1]",
        ("--summary", "--saturation", "0.9,0.1"): "the low threshold first",
        ("--bins", "0,1,4"): "--bins is for --summary recordings",
        ("--summary", "--values", "contributions"): "--summary with --values contributions",
    }
    for k, (flags, message) in enumerate(cases.items()):
        done = run_cli(*base, "--out", str(tmp_path / f"out{k}"), *flags)
        assert done.returncode == 2, (flags, done.stderr)
        assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert not (tmp_path / f"out{k}").exists()
    with pytest.raises(SelectionError, match="leaves no gate value to summarise"):
        summary_columns(
            [{"name": "c", "gates": ["i"], "states": ["h"]}],
            ["activation"],
            Bins(),
            lambda c, g: False,
        )


def test_a_damaged_summary_is_refused_in_one_line(tmp_path):
    built = build(static_body(CONFIGS["BasicLSTMCell"]))
    out = tmp_path / "s"
    tracer.record(tracer.from_session(built.session), {"x": X}, out, summary=Bins())
    units = pd.read_parquet(out / "summary" / "units.parquet")
    units.loc[0, "histogram"] = np.array([1, 2, 3])
    units.to_parquet(out / "summary" / "units.parquet")
    with pytest.raises(RecordingError, match=r"a histogram of .* does not have \d+ counts"):
        Recording(out).statistics  # noqa: B018


def _tampered(out: Path, name: str, change) -> None:
    """The summary's `name` table rewritten after `change(frame)`, as someone editing it would."""
    table = pd.read_parquet(out / "summary" / f"{name}.parquet")
    change(table)
    table.to_parquet(out / "summary" / f"{name}.parquet")


def _second_bin(table: pd.DataFrame, count: int) -> None:
    """The first row's histogram with `count` in its second bin."""
    histogram = np.array(table.at[0, "histogram"])
    histogram[1] = count
    table.at[0, "histogram"] = histogram


@pytest.mark.parametrize(
    "name,change,said",
    [
        ("units", lambda t: _second_bin(t, -5), "has a negative count"),
        ("units", lambda t: t.__setitem__("count", t["count"] + 2**40), "counts more values"),
        ("steps", lambda t: t.__setitem__("count", t["count"] + 2**62), "counts more values"),
        ("units", lambda t: _second_bin(t, 2**62), "histogram or saturation"),
        ("units", lambda t: t.__setitem__("below", t["count"] + 1), "histogram or saturation"),
        (
            "steps",
            lambda t: t.__setitem__("step", t["step"] + 5),
            r"holds step \d+, outside its cell's 0 to 4",
        ),
        ("units", lambda t: t.__setitem__("unit", t["unit"] + 3), "does not hold units 0 to"),
        (  # fewer units than its cell (before: read as the recording's)
            "units",
            lambda t: t.drop(t.index[t["unit"] == t["unit"].max()], inplace=True),
            r"holds \d+ units where its cell has \d+",
        ),
    ],
)
def test_a_tampered_summary_is_refused_not_shown_as_data(tmp_path, name, change, said):
    built = build(static_body(CONFIGS["BasicLSTMCell"]))
    out = tmp_path / "s"
    tracer.record(tracer.from_session(built.session), {"x": X}, out, summary=Bins())
    Recording(out).statistics  # noqa: B018  (read as written)
    _tampered(out, name, change)
    with pytest.raises(RecordingError, match=said):
        Recording(out).statistics  # noqa: B018


def test_a_small_summary_declaring_millions_of_rows_is_refused_before_it_is_decoded(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    built = build(static_body(CONFIGS["BasicLSTMCell"]))
    out = tmp_path / "s"
    tracer.record(tracer.from_session(built.session), {"x": X}, out, summary=Bins())
    table = pq.read_table(out / "summary" / "units.parquet")
    many = table.take(pa.array(np.zeros(4_000_000, np.int32)))  # one row, 4M times
    pq.write_table(many, out / "summary" / "units.parquet", compression="zstd")
    assert (out / "summary" / "units.parquet").stat().st_size < 2 << 20
    with pytest.raises(
        RecordingError, match=r"declares 4,000,000 rows, more than the \d+ its manifest"
    ):
        Recording(out).statistics  # noqa: B018


def test_a_totals_file_from_a_stranger_is_read_as_data(tmp_path):
    """A shard's running totals whose metadata nests deeper than gatetrace reads, or whose
    histograms are not lists of counts: one line, nothing else happens."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from recorders.write.totals import read_totals

    summary = {
        "low": 0.1,
        "high": 0.9,
        "columns": [
            {
                "cell": "c",
                "table": "gates",
                "name": "i",
                "column": "activation",
                "edges": [0.0, 1.0],
            }
        ],
    }
    deep = pa.table({"axis": ["unit"]}).replace_schema_metadata(
        {b"complete": b"[" * 100_000 + b"]" * 100_000}
    )
    sink = pa.BufferOutputStream()
    pq.write_table(deep, sink)
    with pytest.raises(RecordingError, match="nests 100000 levels deep"):
        read_totals(sink.getvalue().to_pybytes(), summary, "shard.parquet")
    odd = pa.table(
        {
            "cell": ["c"],
            "table": ["gates"],
            "name": ["i"],
            "column": ["activation"],
            "at": [0],
            "count": [1],
            "mean": [0.5],
            "variance": [0.0],
            "m2": [0.0],
            "min": [0.5],
            "max": [0.5],
            "below": [0],
            "above": [0],
            "histogram": [["x", "y", "z"]],
            "axis": ["unit"],
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(odd.replace_schema_metadata({b"complete": b"[[0, 1]]"}), sink)
    with pytest.raises(RecordingError, match="is not a summary gatetrace wrote"):
        read_totals(sink.getvalue().to_pybytes(), summary, "shard.parquet")


PLANT = """
import os, pickle, sys
from numba.core.caching import FunctionCache
from tracer.values.compiled import _loop

class Payload:
    def __reduce__(self):
        return (os.system, ("touch " + sys.argv[1],))

index = FunctionCache(_loop)._cache_file._index_path  # where NUMBA_CACHE_DIR puts _loop's index
os.makedirs(os.path.dirname(index), exist_ok=True)
with open(index, "wb") as f:
    pickle.dump(Payload(), f)
print(index)
"""

RUN = """
import sys
import numpy as np
from tracer.values import compiled
if sys.argv[2] == "plain":  # numba asked as it was before: its cache where NUMBA_CACHE_DIR says
    import numba
    compiled._kernel._made = numba.njit(nogil=True, cache=True)(compiled._loop)
slots = compiled.Slots(None, 0, 2, None, np.zeros(0), np.array([0.0, 1.0]))
compiled.reduce(np.zeros((2, 3, 4), np.float32), None, slots)
print(compiled._kernel()._cache._cache_path if compiled._kernel()._cache else "no cache")
"""


def test_a_cache_index_planted_in_a_shared_folder_never_runs(tmp_path):
    """NUMBA_CACHE_DIR names a folder anyone can write (mode 1777), where another user has
    planted an index for the compiled loop (numba reads it with pickle): the loop compiles
    with its cache in gatetrace's own folder (mode 0700) and the payload never runs. The
    same plant, with numba asked as before, runs it: the test tells the two apart."""
    import subprocess
    import sys

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(shared), "XDG_CACHE_HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir(mode=0o700)
    marker = tmp_path / "ran"

    def python(code: str, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", code, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    index = Path(python(PLANT, str(marker)))
    if os.getuid() == 0:  # another user's
        os.chown(index, 65534, 65534)
    where = python(RUN, str(marker), "gatetrace")
    assert not marker.exists()
    assert Path(where).is_relative_to(tmp_path / "home" / "gatetrace" / "numba"), where
    assert oct(os.stat(tmp_path / "home" / "gatetrace" / "numba").st_mode & 0o777) == "0o700"
    python(RUN, str(marker), "plain")
    assert marker.exists()  # the plant works where numba is asked as before


def test_no_cache_where_gatetrace_s_own_folder_is_not_safe(tmp_path, monkeypatch):
    """A cache folder that someone else can write, or a link, is not used: the loop compiles
    without a cache."""
    from tracer.values.compiled import trusted_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert trusted_cache() == tmp_path / "gatetrace" / "numba"
    os.chmod(tmp_path / "gatetrace" / "numba", 0o777)
    assert trusted_cache() is None
    os.chmod(tmp_path / "gatetrace" / "numba", 0o700)
    (tmp_path / "gatetrace" / "numba").rename(tmp_path / "elsewhere")
    (tmp_path / "gatetrace" / "numba").symlink_to(tmp_path / "elsewhere")
    assert trusted_cache() is None


MAKE_AT_ONCE = """
import os, sys, threading
from tracer.values import compiled
made, start = [], threading.Barrier(16)

def make():
    start.wait()
    made.append(compiled._kernel())

threads = [threading.Thread(target=make) for _ in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len({id(m) for m in made}), compiled._kernel()._cache._cache_path)
"""


def test_writer_threads_making_the_loop_at_once_make_it_once_in_gatetrace_s_folder(tmp_path):
    """Sixteen threads ask for the compiled loop at the same moment (the writer's threads of a
    summary do): it is made once, its cache in gatetrace's own folder, nothing written in the
    current folder (before: two threads could each restore numba's cache setting under the
    other, and the cache went to `values_<hash>/` in the user's current folder)."""
    import subprocess
    import sys

    here = tmp_path / "cwd"
    here.mkdir()
    (tmp_path / "home").mkdir(mode=0o700)
    done = subprocess.run(
        [sys.executable, "-c", MAKE_AT_ONCE],
        cwd=here,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    count, where = done.stdout.split()
    assert count == "1" and Path(where).is_relative_to(tmp_path / "home" / "gatetrace" / "numba")
    assert list(here.iterdir()) == []
