"""Input files read batch by batch: .npy, .npz (stored and compressed) and Parquet."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recorders.errors import FeedError
from tests.conftest import CONFIGS, build, save, static_body
from tracer.cli import main
from tracer.inputs.files import ParquetColumn, RawRows, open_input

DATA = np.random.RandomState(3).randn(11, 5, 4).astype(np.float32)


def write_inputs(root):
    """The same 11 sequences in every supported form; returns {form: --feed value}."""
    np.save(root / "x.npy", DATA)
    np.savez(root / "stored.npz", x=DATA, other=np.zeros(3))
    np.savez_compressed(root / "packed.npz", DATA)
    table = pa.table(
        {
            "id": np.arange(11),
            "x": pa.array([row.tolist() for row in DATA], type=pa.list_(pa.list_(pa.float32()))),
        }
    )
    pq.write_table(table, root / "x.parquet", row_group_size=4)
    pq.write_table(table.select(["x"]), root / "only.parquet", row_group_size=3)
    flat = pa.FixedSizeListArray.from_arrays(pa.array(DATA.reshape(-1)), 20)
    pq.write_table(
        pa.table({"x": pa.FixedSizeListArray.from_arrays(flat.flatten(), 20)}),
        root / "fixed.parquet",
    )
    # a folder of Parquet files, one partition folder, a file to leave out
    dataset = root / "dataset"
    for k, (a, b) in enumerate([(0, 2), (2, 7), (7, 11)]):
        (dataset / f"part={k}").mkdir(parents=True)
        pq.write_table(
            table.slice(a, b - a), dataset / f"part={k}" / "data.parquet", row_group_size=2
        )
    pq.write_table(table.slice(0, 1), dataset / "_summary.parquet")
    return {
        "parquet-dataset": f"{dataset}:x",
        "npy": f"{root}/x.npy",
        "npz-stored": f"{root}/stored.npz:x",
        "npz-compressed": f"{root}/packed.npz",
        "parquet": f"{root}/x.parquet:x",
        "parquet-one-column": f"{root}/only.parquet",
    }


@pytest.mark.parametrize(
    "form", ["npz-stored", "npz-compressed", "parquet", "parquet-one-column", "parquet-dataset"]
)
def test_readers_slice_like_the_array(tmp_path, form):
    array = open_input(write_inputs(tmp_path)[form], "feed x")
    assert (
        array.shape == DATA.shape
        and array.dtype == DATA.dtype
        and len(array) == 11
        and array.ndim == 3
    )
    # forward batches across row-group / buffer boundaries, then a jump back (a resume)
    for start, stop in [(0, 3), (3, 7), (7, 11), (2, 9), (10, 11), (5, 5)]:
        np.testing.assert_array_equal(array[start:stop], DATA[start:stop])
    if form == "npz-stored":
        assert isinstance(array._stored, RawRows)  # read in place, not decompressed


def test_fixed_size_list_columns(tmp_path):
    flat = pa.array(DATA.reshape(-1))
    column = pa.FixedSizeListArray.from_arrays(pa.FixedSizeListArray.from_arrays(flat, 4), 5)
    pq.write_table(pa.table({"x": column}), tmp_path / "f.parquet")
    np.testing.assert_array_equal(ParquetColumn(str(tmp_path / "f.parquet"), None)[2:6], DATA[2:6])


@pytest.mark.parametrize(
    "make, spec, expected",
    [
        (
            lambda p: np.savez(p / "two.npz", a=DATA, b=DATA),
            "two.npz",
            "two.npz holds 2 arrays (a, b); name one: {p}/two.npz:a",
        ),
        (
            lambda p: np.savez(p / "two.npz", a=DATA),
            "two.npz:c",
            "two.npz has no array 'c'; it holds a",
        ),
        (
            lambda p: np.savez(p / "f.npz", a=np.asfortranarray(DATA)),
            "f.npz",
            "f.npz:a is stored in Fortran order",
        ),
        (
            lambda p: pq.write_table(pa.table({"a": [1], "b": [2]}), p / "t.parquet"),
            "t.parquet",
            "t.parquet holds 2 columns (a, b); name one: {p}/t.parquet:a",
        ),
        (
            lambda p: pq.write_table(pa.table({"a": [1]}), p / "t.parquet"),
            "t.parquet:z",
            "t.parquet has no column 'z'; it holds a",
        ),
        (
            lambda p: (p / "x.csv").write_text("1"),
            "x.csv",
            "feed x: '{p}/x.csv' is not a .npy, .npz, .parquet or .tfrecord file, nor a folder of Parquet files",
        ),
        (
            lambda p: (p / "bad.npz").write_text("no zip"),
            "bad.npz",
            "feed x: cannot read {p}/bad.npz as a .npz file",
        ),
    ],
)
def test_bad_input_files(tmp_path, make, spec, expected):
    make(tmp_path)
    with pytest.raises(FeedError) as err:
        open_input(f"{tmp_path}/{spec}", "feed x")
    assert expected.format(p=tmp_path) in str(err.value)


def test_ragged_parquet_rows_are_refused_when_read(tmp_path):
    pq.write_table(pa.table({"a": [[1.0, 2.0], [3.0, 4.0], [5.0]]}), tmp_path / "t.parquet")
    column = open_input(f"{tmp_path}/t.parquet:a", "feed x")
    assert column.shape == (3, 2)
    with pytest.raises(
        FeedError, match=r"t.parquet:a: rows differ in length \(1 to 2\); pad them to one shape"
    ):
        column[0:3]


def test_every_input_form_records_the_same_rows(tmp_path, capsys):
    path = save(build(static_body(CONFIGS["GRUCell"])), "checkpoint", tmp_path)
    forms = write_inputs(tmp_path)
    frames = {}
    for form, spec in forms.items():
        out = tmp_path / f"out-{form}"
        assert (
            main(
                [
                    "record",
                    path,
                    "--feed",
                    f"x={spec}",
                    "--out",
                    str(out),
                    "--batch-size",
                    "3",
                    "--quiet",
                ]
            )
            == 0
        )
        df = pd.read_parquet(out / "gates")
        frames[form] = df.sort_values(["gate", "example", "step", "unit"], ignore_index=True)
    for form, df in frames.items():
        pd.testing.assert_frame_equal(df, frames["npy"], check_exact=True, obj=form)
    assert len(frames["npy"]) == 11 * 5 * 3 * 3


def test_float64_inputs_are_cast_batch_by_batch(tmp_path):
    np.save(tmp_path / "x64.npy", DATA.astype(np.float64))
    from tracer.inputs.feeds import batches, parse_feed_args, resolve_feeds

    built = build(static_body(CONFIGS["BasicRNNCell"]))
    feeds = parse_feed_args([f"x={tmp_path / 'x64.npy'}"])
    feed_dict = resolve_feeds(built.graph, feeds)
    (value,) = feed_dict.values()
    assert isinstance(value, RawRows)  # not loaded or copied whole
    (_, _, first), *_ = batches(feed_dict, 4)
    (batch,) = first.values()
    assert batch.dtype == np.float32 and batch.shape == (4, 5, 4)
    np.testing.assert_array_equal(batch, DATA[:4])


def test_every_feed_the_inputs_digests_leave_out_has_a_digest(tmp_path):
    """Scalars (from the command line or a 0-d .npy) and text, which `inputs` leaves out, get a
    digest in `digests` that follows their values, not how they were stored; sequences of
    numbers stay in `inputs` alone."""
    from tracer.inputs.digest import input_digests, other_digests
    from tracer.inputs.feeds import parse_feed_args

    np.save(tmp_path / "half.npy", np.float32(0.5))
    words = np.array([["ab", "c"], ["", "déf"]])

    def digests(**feeds):
        return other_digests(feeds, (0, 2), None, {})["feeds"]

    (half,) = parse_feed_args([f"s={tmp_path / 'half.npy'}"]).values()
    assert digests(s=half) == digests(s=0.5) != digests(s=1.0)
    assert digests(s=1) == digests(s=np.int64(1)) != digests(s=2)
    assert digests(w=words) == digests(w=words.astype("U9")) != digests(w=words[::-1])
    assert digests(x=DATA) == {} and set(input_digests({"x": DATA, "s": 0.5}, (0, 2))) == {"x"}
    lengths = other_digests({}, (0, 2), np.array([5, 3, 1]), {})["lengths"]
    assert lengths == other_digests({}, (0, 2), np.array([5, 3, 2]), {})["lengths"]
    assert lengths != other_digests({}, (0, 2), np.array([5, 2, 1]), {})["lengths"]
    assert other_digests({}, (0, 2), None, {})["lengths"] is None
    kernel = np.arange(6, dtype=np.float32).reshape(2, 3)
    weights = [
        other_digests({}, None, None, {"rnn": {"kernel": k}})["weights"]
        for k in (kernel, kernel + 1)
    ]
    assert weights[0] != weights[1]
