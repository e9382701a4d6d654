"""The statistics a gate's part file carries in its footer (`recorders.write.partstats`), which the
view's overview reads instead of the values: checked against numpy over the values as pyarrow
reads them from the files, against a property over random values, and against footers that lie."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recorders import Recording
from recorders.errors import RecordingError
from recorders.read.analysis import gate_summaries
from recorders.view.data import overview
from recorders.write.layout import partition_dir
from recorders.write.partstats import (
    BINS,
    FILE_BINS,
    FOOTER_KEY,
    MERGED,
    PartStats,
    Tally,
    read,
)
from recorders.write.writer import RecordingWriter
from tests.conftest import record_with_cli
from tests.test_keras import masked_model, sequences

# Where each gate of `masked_model` saturates, from Keras' documentation of its layers: the
# LSTM's i, f, o through hard_sigmoid and the GRUs' r, u through sigmoid, in [0, 1] (a tenth
# from each end, as Karpathy et al. count it); j and c through tanh, in [-1, 1]; the
# SimpleRNN's h through relu, which does not saturate.
THRESHOLDS = {"i": (0.1, 0.9), "f": (0.1, 0.9), "o": (0.1, 0.9), "r": (0.1, 0.9), "u": (0.1, 0.9)}
THRESHOLDS |= {"j": (-0.9, 0.9), "c": (-0.9, 0.9)}


@pytest.fixture(scope="module")
def masked(tmp_path_factory) -> Path:
    """`masked_model` (LSTM, bidirectional GRU, backward GRU, relu SimpleRNN behind a Masking
    layer), saved by tf-keras as HDF5 and recorded by the command line on 40 sequences with
    padding at either end and holes (rows a mask leaves out are not written)."""
    root = tmp_path_factory.mktemp("masked")
    model = masked_model("tf-keras")
    model.save(root / "model.h5")
    x = np.concatenate([sequences(20, seed=1), sequences(20, seed=2)])
    record_with_cli(root / "model.h5", {"x": x}, root / "run")
    return root / "run"


def values_of(run: Path, cell: str, gate: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The step, unit and activation columns of a gate's rows, as pyarrow reads its files."""
    files = sorted((run / "gates" / partition_dir(cell=cell, gate=gate)).glob("*.parquet"))
    table = pa.concat_tables(
        pq.read_table(f, columns=["step", "unit", "activation"]) for f in files
    )
    return (
        table.column("step").to_numpy(),
        table.column("unit").to_numpy(),
        table.column("activation").to_numpy(),
    )


def test_the_overview_s_statistics_are_numpy_s_over_the_values(masked):
    """Every gate of four cell kinds: the overview's counts of values beyond the thresholds per
    unit equal numpy's over the rows written; each step's mean numpy's; each quantile within its
    bin (at most 2 / 256 of the step's range) of numpy's inverted-CDF quantile, and all of it
    from the footers (every gate file carries statistics)."""
    rec = Recording(masked)
    fast = gate_summaries(rec, quantiles=(0.1, 0.5, 0.9), exact=False)
    kinds = set()
    for (cell, gate), s in fast.items():
        assert rec.activation_statistics(cell, gate) is not None
        steps, units, v = values_of(masked, cell, gate)
        v = v.astype(np.float64)
        kinds.add(gate)
        width = rec.units(cell)
        low, high = THRESHOLDS.get(gate, (np.nan, np.nan))
        assert np.array_equal(s.n, np.bincount(units, minlength=width))
        if np.isnan(low):
            assert np.isnan(s.low) and not s.left.any() and not s.right.any()
        else:
            assert (s.low, s.high) == (low, high)
            assert np.array_equal(s.left, np.bincount(units[v < low], minlength=width))
            assert np.array_equal(s.right, np.bincount(units[v > high], minlength=width))
        assert s.steps.tolist() == sorted(set(steps.tolist()))
        for k, step in enumerate(s.steps):
            at = v[steps == step]
            assert s.mean[k] == pytest.approx(at.mean(), rel=1e-12, abs=1e-12)
            bound = max(2 * (at.max() - at.min()) / BINS, 2.0**-40)
            assert s.within[k] <= bound
            for q, got in zip((0.1, 0.5, 0.9), s.quantiles, strict=True):
                exact = np.quantile(at, q, method="inverted_cdf")
                assert abs(got[k] - exact) <= s.within[k], (cell, gate, step, q)
    assert kinds == {"i", "j", "f", "o", "r", "u", "c", "h"}
    # the view's overview answers from them
    shown = overview(Recording(masked))
    gates = [g for c in shown["cells"] for g in c["gate_stats"]]
    assert all(0 < g["within"] <= 2 / BINS * 2 for g in gates)


def without_merged(run: Path) -> None:
    """The recording as an older gatetrace wrote it, or with its merged statistics files removed
    (`recorders.write.merged`): its statistics are read from the footers."""
    import shutil

    shutil.rmtree(run / "_statistics")


def test_files_without_statistics_are_read_as_before(masked, tmp_path):
    """A file of an older recording (no statistics in its footer, no merged statistics file):
    that gate's overview is read from the values, exactly, and says so; the others' still from
    the footers."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(masked, run)
    without_merged(run)
    rec = Recording(run)
    cell = rec.cells[0]
    target = next((run / "gates" / partition_dir(cell=cell, gate="f")).glob("*.parquet"))
    rewrite_footer(target, None)
    rec = Recording(run)
    assert rec.activation_statistics(cell, "f") is None
    assert rec.activation_statistics(cell, "i") is not None
    fast = gate_summaries(rec, [cell], ["f"], exact=False)[(cell, "f")]
    exact = gate_summaries(rec, [cell], ["f"])[(cell, "f")]
    assert fast.within == 0 and fast.read_in_full
    assert not gate_summaries(rec, [cell], ["i"], exact=False)[(cell, "i")].read_in_full
    for a, b in zip(fast.quantiles, exact.quantiles, strict=True):
        assert np.array_equal(a, b)


def rewrite_footer(path: Path, statistics: bytes | None) -> None:
    """The part file at `path` with its rows and row groups as they are, its statistics
    replaced (None: left out)."""
    file = pq.ParquetFile(path)
    metadata = dict(file.metadata.metadata)
    metadata.pop(FOOTER_KEY)
    if statistics is not None:
        metadata[FOOTER_KEY] = statistics
    table = file.read()
    groups = [file.metadata.row_group(k).num_rows for k in range(file.num_row_groups)]
    path.unlink()
    # with page checksums, as gatetrace writes its files (one without them is named first)
    with pq.ParquetWriter(
        path, table.schema.with_metadata(metadata), write_page_checksum=True
    ) as writer:
        start = 0
        for n in groups:
            writer.write_table(table.slice(start, n), row_group_size=n)
            start += n


def _said(path: Path) -> dict:
    return json.loads(pq.read_metadata(path).metadata[FOOTER_KEY])


def _packed(said: dict, data: bytes) -> bytes:
    return json.dumps({**said, "arrays": base64.b64encode(data).decode()}).encode()


LIES = {
    "not JSON": (lambda said, raw: b"{not json", "its statistics are not JSON"),
    "another format": (
        lambda said, raw: json.dumps({**said, "format": 2}).encode(),
        "its statistics are not of format 1 for the activation",
    ),
    "units a text": (
        lambda said, raw: json.dumps({**said, "units": "3"}).encode(),
        "its statistics' units, rows, steps, bins or thresholds are malformed",
    ),
    "more rows than the file": (
        lambda said, raw: json.dumps({**said, "rows": said["rows"] + 1}).encode(),
        "rows, the file holds",
    ),
    # declared sizes: a billion bins would be allocated if believed
    "a billion bins": (
        lambda said, raw: json.dumps({**said, "bins": 10**9}).encode(),
        "more than 67,108,864",
    ),
    "longer arrays than said": (
        lambda said, raw: _packed(said, raw + bytes(12)),
        "its statistics' arrays are not the base64 of",
    ),
    "not base64": (
        lambda said, raw: json.dumps({**said, "arrays": "%" * len(said["arrays"])}).encode(),
        "its statistics' arrays are not the base64 of",
    ),
    "a count changed": (
        lambda said, raw: _packed(said, _bumped(said, raw)),
        "have bins that do not add up to their counts",
    ),
}


# The arrays of a footer's statistics, one after the other (the module docstring of
# `recorders.write.partstats`): below and above (a unit each, where there are thresholds), then
# count, total, lo, hi, exponent, first and size (a step each), then every bin's count.
_ARRAYS = ("below", "above", "count", "total", "lo", "hi", "exponent", "first", "size", "counts")


def _decoded(said: dict, raw: bytes) -> dict[str, np.ndarray]:
    sizes = [said["units"]] * 2 + [len(said["steps"])] * 7 + [said["bins"]]
    types = ["<i8", "<i8", "<i8", "<f8", "<f8", "<f8", "<i8", "<i8", "<i8", "<u4"]
    names, at, out = _ARRAYS, 0, {}
    if said["low"] is None:
        names, sizes, types = names[2:], sizes[2:], types[2:]
    for name, n, t in zip(names, sizes, types, strict=True):
        out[name] = np.frombuffer(raw, t, n, at).copy()
        at += n * np.dtype(t).itemsize
    return out


def _edited(said: dict, raw: bytes, edit) -> bytes:
    """The statistics with `edit` applied to their arrays (a dict of them, edited in place)."""
    arrays = _decoded(said, raw)
    edit(arrays)
    return _packed(said, b"".join(a.tobytes() for a in arrays.values()))


def _scaled(a: dict) -> None:
    """Every value 1024 times larger, the bins' lattice with it: all adds up but the range."""
    for name in ("total", "lo", "hi"):
        a[name] *= 1024
    a["exponent"] += 10


def _first_set(a: dict, name: str, value: float) -> None:
    a[name][np.argmax(a["count"] > 0)] = value


LIES |= {
    # a sigmoid gate's mean shown as 150 to 170
    "a sum a thousand times larger": (
        lambda said, raw: _edited(said, raw, lambda a: a["total"].__imul__(1000)),
        "(its sum over its count), outside its least and largest value",
    ),
    "a sum of +inf": (
        lambda said, raw: _edited(said, raw, lambda a: _first_set(a, "total", np.inf)),
        "a mean of inf (its sum over its count)",
    ),
    "values beyond the gate's range": (
        lambda said, raw: _edited(said, raw, _scaled),
        "outside the gate's range, 0 to 1",
    ),
    "a largest value of +inf": (
        lambda said, raw: _edited(said, raw, lambda a: _first_set(a, "hi", np.inf)),
        "have a step whose least value is above its largest",
    ),
    "bins far from the values": (
        lambda said, raw: _edited(said, raw, lambda a: a["first"].__iadd__(2**40)),
        "not where its least and largest value",
    ),
}


def _bumped(said: dict, raw: bytes) -> bytes:
    """The arrays with the last bin's count one higher."""
    data = bytearray(raw)
    last = int.from_bytes(data[-4:], "little") + 1
    data[-4:] = last.to_bytes(4, "little")
    return bytes(data)


@pytest.mark.parametrize("lie", list(LIES))
def test_a_footer_whose_statistics_lie_is_named_in_one_line(masked, tmp_path, lie):
    """Statistics that are malformed, claim sizes to allocate, hold more than they say, or do
    not add up are refused before a number is used: one line naming the file, from
    `Recording.check` (which reads every footer, though a merged statistics file covers it), and
    where the footer is read in place of a merged file, from the library and from the view's
    overview."""
    import shutil

    from starlette.testclient import TestClient

    from recorders.view.server import make_app

    run = tmp_path / "run"
    shutil.copytree(masked, run)
    cell = Recording(run).cells[0]
    target = next((run / "gates" / partition_dir(cell=cell, gate="f")).glob("*.parquet"))
    said = _said(target)
    raw = base64.b64decode(said["arrays"])
    make, message = LIES[lie]
    rewrite_footer(target, make(said, raw))
    with pytest.raises(RecordingError) as checked:
        Recording(run).check()
    without_merged(run)
    with pytest.raises(RecordingError) as caught:
        Recording(run).activation_statistics(cell, "f")
    line = str(caught.value)
    assert str(checked.value) == line
    assert line.startswith(f"{target} is not a part file gatetrace wrote (") and "\n" not in line
    assert message in line and line.endswith("or record the model again")
    answer = TestClient(make_app(Recording(run)), base_url="http://127.0.0.1").get("/api/overview")
    assert answer.status_code == 422 and strict_json(answer.text)["error"] == line


def strict_json(text: str):
    """JSON as the standard has it: a NaN or Infinity token is an error, not a number."""

    def refused(token: str):
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refused)


@pytest.fixture(scope="module")
def two_files(tmp_path_factory) -> Path:
    """One sigmoid gate of 3 units over 64 steps, written as two part files: the first's
    activations near 0, the second's near 1 (so their histograms lie far apart)."""
    run = tmp_path_factory.mktemp("two") / "run"
    description = {"cells": [{"name": "a", "gates": ["f"], "states": [], "units": 3, "steps": 64}]}
    rng = np.random.RandomState(0)
    with RecordingWriter(run, description, examples=(0, 8)) as writer:
        for start, centre in ((0, 0.001), (4, 0.999)):
            values = (centre + rng.uniform(-5e-4, 5e-4, (4, 64, 3))).astype(np.float32)
            writer.begin(start, start + 4)
            writer.write_gate("a", "f", np.arange(start, start + 4), np.arange(64), None, values)
            writer.commit()
    return run


def test_bins_far_apart_in_one_file_are_named_before_anything_is_allocated(two_files, tmp_path):
    """The second file's bins moved 2^40 bins away (its least and largest value left as they
    are): merging it with the first would have allocated 2^40 bins a step, whatever the memory
    budget; it is refused in one line naming the file, from the library and the view."""
    import shutil

    from starlette.testclient import TestClient

    from recorders.view.server import make_app

    run = tmp_path / "run"
    shutil.copytree(two_files, run)
    without_merged(run)
    target = sorted((run / "gates").glob("*/*/*.parquet"))[1]
    said = _said(target)
    raw = base64.b64decode(said["arrays"])
    rewrite_footer(target, _edited(said, raw, lambda a: a["first"].__iadd__(2**40)))
    with pytest.raises(RecordingError) as caught:
        Recording(run, memory=256 << 20).activation_statistics("a", "f")
    line = str(caught.value)
    assert line.startswith(f"{target} is not a part file gatetrace wrote (") and "\n" not in line
    assert "not where its least and largest value" in line
    app = make_app(Recording(run, memory=256 << 20))
    answer = TestClient(app, base_url="http://127.0.0.1").get("/api/overview")
    assert answer.status_code == 422 and strict_json(answer.text)["error"] == line


def test_statistics_are_merged_within_the_memory_budget(two_files):
    """Files whose values lie far apart need thousands of bins a step merged: under a budget of
    1 MB they are merged on coarser bins, in no more than the budget, each quantile still within
    its (wider) bin of numpy's over the values."""
    memory = 1 << 20
    stats = Recording(two_files, memory=memory).activation_statistics("a", "f")
    finest = Recording(two_files).activation_statistics("a", "f")
    assert stats is not None and finest is not None
    assert len(finest.counts) * 24 > memory >= len(stats.counts) * 24
    steps, _, v = values_of(two_files, "a", "f")
    v = v.astype(np.float64)
    assert np.array_equal(stats.count, finest.count) and np.array_equal(stats.total, finest.total)
    for k, step in enumerate(stats.steps):
        at = v[steps == step]
        width = np.ldexp(1.0, stats.exponent[k])
        for q in (0.1, 0.5, 0.9):
            exact = np.quantile(at, q, method="inverted_cdf")
            assert abs(stats.quantile(q)[k] - exact) <= width, (step, q)


def test_a_file_with_a_nan_or_an_infinite_activation_carries_none(tmp_path):
    """Such a file's bins would have no width: it carries no statistics, its gate's overview is
    read from the values; a file of the same gate without one still carries them."""
    description = {"cells": [{"name": "a", "gates": ["f"], "states": [], "units": 2}]}
    with RecordingWriter(tmp_path / "run", description, examples=(0, 6)) as writer:
        for start, bad in ((0, np.nan), (2, np.inf), (4, None)):
            values = np.random.RandomState(start).rand(2, 3, 2).astype(np.float32)
            if bad is not None:
                values[1, 2, 0] = bad
            writer.begin(start, start + 2)
            writer.write_gate("a", "f", np.arange(start, start + 2), np.arange(3), None, values)
            writer.commit()
    files = sorted((tmp_path / "run" / "gates").glob("*/*/*.parquet"))
    assert [FOOTER_KEY in pq.read_metadata(f).metadata for f in files] == [False, False, True]
    assert Recording(tmp_path / "run").activation_statistics("a", "f") is None


def _float32(*bits: int) -> np.ndarray:
    return np.array(bits, np.uint32).view(np.float32)


@pytest.mark.parametrize(
    "values",
    [
        # the least subnormal beside 2^60: bins 2^52 wide, where v x 2^-52 underflows in float32
        np.array([-(2.0**-149), 2.0**60], np.float32),
        np.array([-0.0, 0.0, 2.0**-149, -(2.0**-149)], np.float32),
        np.array([1.0, np.nextafter(np.float32(1), np.float32(0)), -1.0, 3e38, -3e38], np.float32),
        # the float32 neighbours of the thresholds 0.1 and 0.9
        _float32(*(0x3DCCCCCC + k for k in range(-2, 3)), *(0x3F666666 + k for k in range(-2, 3))),
    ],
)
def test_each_value_is_counted_in_its_own_bin_and_against_the_thresholds_exactly(values):
    """A value v lies in bin floor(v / 2^e) of the lattice its step's statistics name, counted
    with exact rational arithmetic here (not with the floats the loop uses), and below 0.1 or
    above 0.9 as float64 says, for values where float32 arithmetic would err."""
    from fractions import Fraction

    x = values.reshape(1, 1, -1)
    tally = Tally([0], 0.1, 0.9)
    tally.add(x, np.ones((1, 1), bool))
    stats = read(tally.footer()[FOOTER_KEY], values.size)
    e = int(stats.exponent[0])
    numbers = [int(np.floor(Fraction(float(v)) / Fraction(2) ** e)) for v in values]
    expected = np.bincount(np.array(numbers) - min(numbers))
    assert int(stats.first[0]) == min(numbers)
    assert stats.counts.tolist() == expected.tolist()
    wide = values.astype(np.float64)
    assert stats.below.tolist() == (wide < 0.1).astype(int).tolist()
    assert stats.above.tolist() == (wide > 0.9).astype(int).tolist()
    assert (stats.lo[0], stats.hi[0]) == (wide.min(), wide.max())


def test_a_bin_too_full_for_its_32_bits_leaves_the_file_without_statistics():
    """A footer stores each bin's count in 32 bits: a file with a fuller bin (over 4 billion
    values of one step, which no test can hold, so the count is raised by hand) carries none,
    rather than a count wrapped around that every reader would refuse."""
    tally = Tally([0], 0.1, 0.9)
    tally.add(np.full((2, 1, 3), 0.5, np.float32), np.ones((2, 1), bool))
    assert FOOTER_KEY in tally.footer()
    tally._state[-1][0, tally._state[-1][0].argmax()] += 2**32  # type: ignore[index]
    assert tally.footer() == {}


@st.composite
def batches(draw):
    """Random float32 activations [examples, steps, units] of a scale and offset of their own
    (a constant, a sliver around a large number, a wide spread), which rows are written, how
    they are cut into row groups and how the row groups into files."""
    examples, steps, units = (draw(st.integers(1, n)) for n in (9, 5, 4))
    scale = draw(st.sampled_from([0.0, 1e-7, 1e-3, 1.0, 1e3, 1e30]))
    offset = draw(st.sampled_from([0.0, 0.5, -3.0, 1e6, -1e-20]))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    v = (offset + scale * rng.standard_normal((examples, steps, units))).astype(np.float32)
    valid = rng.random((examples, steps)) < draw(st.sampled_from([0.3, 0.8, 1.0]))
    cuts = (
        sorted(set(draw(st.lists(st.integers(1, examples - 1), max_size=3))))
        if examples > 1
        else []
    )
    files = draw(st.integers(1, 3))
    low, high = draw(st.sampled_from([(None, None), (0.1, 0.9), (-0.5, 1e6)]))
    return v, valid, cuts, files, low, high


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_statistics_merged_from_any_row_groups_and_files_are_numpy_s(case):
    """Whatever the values and however they are cut into row groups and files, the merged
    statistics count what numpy counts, and each quantile lies within its bin, at most twice
    the widest row group's range of that step over 256 wide (or 2 / 1024 of its range in one
    file, 2 / 4096 of its whole range, or 2^-50 of the values' size), of numpy's inverted-CDF
    quantile. Written and read back through the footer's encoding."""
    v, valid, cuts, files, low, high = case
    groups = np.split(np.arange(len(v)), cuts)
    tallies = [Tally(range(v.shape[1]), low, high) for _ in range(files)]
    for k, rows in enumerate(groups):
        tallies[k % files].add(v[rows], valid[rows])
    read_back = []
    for k, t in enumerate(tallies):
        footer = t.footer()
        written = sum(int(valid[rows].sum()) for rows in groups[k::files]) * v.shape[2]
        if footer:
            read_back.append(read(footer[FOOTER_KEY], written))
    merged = PartStats.merge(read_back)
    x = v.astype(np.float64)
    kept = np.broadcast_to(valid[:, :, None], v.shape)
    assert merged.rows == valid.sum()
    if low is not None:
        assert np.array_equal(merged.below, ((x < low) & kept).sum(axis=(0, 1)))
        assert np.array_equal(merged.above, ((x > high) & kept).sum(axis=(0, 1)))
    assert merged.steps.tolist() == list(range(v.shape[1]))
    assert np.flatnonzero(merged.count).tolist() == np.flatnonzero(valid.any(axis=0)).tolist()
    for k in np.flatnonzero(merged.count):
        step = merged.steps[k]
        at = x[valid[:, step], step].ravel()
        assert merged.count[k] == at.size
        assert merged.mean[k] == pytest.approx(at.mean(), rel=1e-9, abs=1e-300)
        spans = [
            np.ptp(x[rows][valid[rows, step], step]) for rows in groups if valid[rows, step].any()
        ]
        in_files = [
            np.ptp(np.concatenate([x[r][valid[r, step], step].ravel() for r in groups[f::files]]))
            for f in range(files)
            if any(valid[r, step].any() for r in groups[f::files])
        ]
        bound = max(
            2 * max(spans) / BINS,
            2 * max(in_files) / FILE_BINS,
            2 * np.ptp(at) / MERGED,
            2.0 ** max(np.frexp(np.abs(at).max())[1] - 50, -100),
        )
        width = np.ldexp(1.0, merged.exponent[k])
        assert width <= bound
        for q in (0.0, 0.1, 0.5, 0.9, 1.0):
            exact = np.quantile(at, q, method="inverted_cdf")
            assert abs(merged.quantile(q)[k] - exact) <= width, (q, step)


@pytest.mark.parametrize("compression", ["fast", "lz4", "zstd", "snappy", "none"])
def test_every_layout_s_files_carry_the_same_statistics(tmp_path, compression):
    """Written by gatetrace's own encoder (the default layout) or by pyarrow's (the others), a
    gate file's footer carries the same statistics of the same values, across two row groups
    and a padded example (rows not written are not counted)."""
    from recorders.write import rowgroups

    description = {"cells": [{"name": "a", "gates": ["f"], "states": [], "units": 3}]}
    values = np.random.RandomState(0).rand(6, 4, 3).astype(np.float32)
    lengths = np.array([4, 4, 2, 4, 1, 4])
    out = tmp_path / "run"
    old = rowgroups.ROW_GROUP_ROWS
    rowgroups.ROW_GROUP_ROWS = 36  # three examples a row group
    try:
        with RecordingWriter(out, description, examples=(0, 6), compression=compression) as w:
            w.begin(0, 6)
            w.write_gate("a", "f", np.arange(6), np.arange(4), values, values, lengths)
            w.commit()
    finally:
        rowgroups.ROW_GROUP_ROWS = old
    (path,) = (out / "gates").glob("*/*/*.parquet")
    assert pq.read_metadata(path).num_row_groups == 2
    stats = Recording(out).activation_statistics("a", "f")
    kept = np.arange(4)[None, :] < lengths[:, None]
    x = values.astype(np.float64)
    assert stats is not None and stats.rows == kept.sum()
    assert np.array_equal(stats.below, ((x < 0.1) & kept[:, :, None]).sum(axis=(0, 1)))
    assert np.array_equal(stats.count, kept.sum(axis=0) * 3)
    for k in range(4):
        at = x[kept[:, k], k].ravel()
        assert stats.mean[k] == pytest.approx(at.mean(), rel=1e-12)
        assert (
            abs(stats.quantile(0.5)[k] - np.quantile(at, 0.5, method="inverted_cdf"))
            <= 2 * np.ptp(at) / BINS
        )


def test_values_beyond_a_guessed_range_are_a_writer_s_own(tmp_path):
    """A description written through `RecordingWriter` lists no nonlinearities: a gate `f` with
    values up to 5 is the writer's own (its sigmoid is only a guess from the name), read from
    its footer, each step's mean numpy's; where the description lists sigmoid, the same footer
    is refused as edited."""
    cell = {"name": "a", "gates": ["f"], "states": [], "units": 2, "steps": 3}
    values = np.random.RandomState(0).uniform(0, 5, (4, 3, 2)).astype(np.float32)
    for listed, run in ((None, tmp_path / "own"), ({"f": "sigmoid"}, tmp_path / "listed")):
        described = {**cell, "nonlinearities": listed} if listed else cell
        with RecordingWriter(run, {"cells": [described]}, examples=(0, 4)) as writer:
            writer.begin(0, 4)
            writer.write_gate("a", "f", np.arange(4), np.arange(3), None, values)
            writer.commit()
    stats = Recording(tmp_path / "own").activation_statistics("a", "f")
    assert stats is not None
    np.testing.assert_allclose(stats.mean, values.astype(np.float64).mean(axis=(0, 2)), rtol=1e-12)
    with pytest.raises(RecordingError, match="outside the gate's range, 0 to 1"):
        Recording(tmp_path / "listed").activation_statistics("a", "f")
