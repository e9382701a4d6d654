"""A series folder and a label file someone handed you: property tests of the kind
`test_stranger_recordings.py` makes of a recording.

Each mutates a real series (two recordings and its `series.json`) or a real label file (`.npy`,
`.parquet`, `.csv`): JSON edits, bytes flipped, files cut, enlarged or replaced by a link, a
FIFO, a sparse file or a folder; and asserts that every outcome is the right data or one clean
error (never a traceback, a hang, a value read from outside, a runaway allocation), and that
what was left undamaged is still read.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracer
from recorders import GatetraceError, Recording, Series
from recorders.read.analysis import saturation_across
from recorders.read.labels import read_labels
from tests.conftest import CONFIGS, build, static_body
from tests.test_stranger_recordings import bounded, damage, json_edits

X = np.random.RandomState(8).randn(5, 5, 4).astype(np.float32)
VALUES = (2, 4)
SETTINGS = settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A series of two recordings (checkpoint 2 and 4: the same cell on other inputs), and
    beside it a recording of inputs a hundred times larger that links may point to."""
    root = tmp_path_factory.mktemp("stranger-series")
    model = tracer.from_session(build(static_body(CONFIGS["BasicLSTMCell"])).session)
    (root / "s").mkdir()
    for k, value in enumerate(VALUES):
        tracer.record(model, {"x": X + k}, root / "s" / f"checkpoint={value}")
    (root / "s" / "series.json").write_text(
        json.dumps({"kind": "series", "key": "checkpoint", "values": list(VALUES), "source": "run"})
    )
    tracer.record(model, {"x": X * 100}, root / "outside")
    return root


def frame_of(rec: Recording) -> pd.DataFrame:
    return rec.gate_frame(columns=["preactivation"]).sort_values(
        ["gate", "example", "step", "unit"]
    )


@st.composite
def series_mutations(draw, pristine: Path):
    where = draw(st.sampled_from(["series.json", "series.json", "special", "key"]))
    if where == "series.json":
        return where, draw(json_edits(json.loads((pristine / "s" / "series.json").read_text())))
    if where == "special":
        return where, draw(st.sampled_from(["fifo", "zero", "sparse", "folder", "link out"]))
    return where, (
        draw(st.sampled_from(VALUES)),
        draw(st.sampled_from(["link", "file", "fifo", "no manifest", "gone"])),
    )


def mutate_series(root: Path, s: Path, where: str, how) -> int | None:
    """Apply a mutation; the key whose folder it changed (None: series.json)."""
    if where == "series.json":
        (s / "series.json").write_bytes(how)
        return None
    if where == "special":
        (s / "series.json").unlink()
        if how == "fifo":
            os.mkfifo(s / "series.json")
        elif how == "zero":
            (s / "series.json").symlink_to("/dev/zero")
        elif how == "sparse":
            with open(s / "series.json", "wb") as f:
                f.truncate(64 << 20)
        elif how == "folder":
            (s / "series.json").mkdir()
        else:
            (root / "other.json").write_text(json.dumps({"key": "checkpoint", "values": [2, 4]}))
            (s / "series.json").symlink_to(root / "other.json")
        return None
    value, kind = how
    folder = s / f"checkpoint={value}"
    if kind == "no manifest":
        (folder / "manifest.json").unlink()
        return value
    shutil.rmtree(folder)
    if kind == "link":
        folder.symlink_to(root / "outside", target_is_directory=True)
    elif kind == "file":
        folder.write_text("{}")
    elif kind == "fifo":
        os.mkfifo(folder)
    return value


def read_series(s: Path) -> dict:
    """What a user reads of a series; a clean error anywhere is an outcome."""
    out: dict = {}
    try:
        series = Series(s)
    except GatetraceError:
        return out
    out["opened"] = series
    for name, read in [
        ("complete", lambda: series.complete),
        ("frame", lambda: series.gate_frame(columns=["preactivation"])),
        ("saturation", lambda: saturation_across(series)),
        *[(v, lambda v=v: frame_of(series.recording(v))) for v in VALUES],
    ]:
        try:
            out[name] = read()
        except GatetraceError:
            pass
    return out


@SETTINGS
@given(data=st.data())
def test_any_damage_to_a_series_gives_the_right_data_or_one_clean_error(pristine, tmp_path, data):
    where, how = data.draw(series_mutations(pristine))
    s = tmp_path / "s"
    shutil.rmtree(s, ignore_errors=True) if not s.is_symlink() else s.unlink()
    shutil.copytree(pristine / "s", s)
    changed = mutate_series(pristine, s, where, how)
    with bounded():
        got = read_series(s)
    outside = frame_of(Recording(pristine / "outside"))["preactivation"].to_numpy()
    for v in VALUES:  # a key read is that key's recording, never another's
        if v in got:
            want = frame_of(Recording(pristine / "s" / f"checkpoint={v}"))
            np.testing.assert_array_equal(got[v]["preactivation"], want["preactivation"])
            assert not np.isin(got[v]["preactivation"], outside).all()
    if "frame" in got:
        assert set(got["frame"]["checkpoint"]) <= set(VALUES)
    # what was left undamaged is read
    if where == "key":
        assert "opened" in got, "series.json is intact: the series opens"
        other = next(v for v in VALUES if v != changed)
        assert other in got, f"checkpoint {other} was not touched and must be read"


def label_files(root: Path) -> dict[str, Path]:
    """The same labels as a .npy array, a Parquet table and a CSV table."""
    labels = np.arange(12) % 3
    np.save(root / "labels.npy", labels)
    table = pd.DataFrame({"example": np.arange(12), "label": labels})
    table.to_parquet(root / "labels.parquet")
    table.to_csv(root / "labels.csv", index=False)
    return {
        "npy": root / "labels.npy",
        "parquet": root / "labels.parquet",
        "csv": root / "labels.csv",
    }


@st.composite
def label_mutations(draw):
    kind = draw(st.sampled_from(["npy", "parquet", "csv"]))
    how = draw(st.sampled_from(["bytes", "cut", "grow", "shape", "fifo", "folder", "sparse"]))
    detail = None
    if how == "bytes":
        detail = draw(
            st.lists(st.tuples(st.integers(0, 10**5), st.integers(0, 255)), min_size=1, max_size=6)
        )
    elif how == "cut":
        detail = draw(st.floats(0, 1, exclude_max=True))
    elif how == "shape":
        detail = draw(st.sampled_from([(1 << 40,), (1 << 28,), (12, 1 << 30), (3, 4), (-1,)]))
    return kind, how, detail


def mutate_label_file(path: Path, how: str, detail) -> None:
    if how in ("bytes", "cut"):
        damage(path, how, detail)
    elif how == "grow":
        with open(path, "ab") as f:
            f.write(b"\0" * 100_000)
    elif how == "shape":  # the header (of a .npy) or the text (of a table) claims another size
        data = path.read_bytes()
        path.write_bytes(data.replace(b"(12,)", repr(tuple(detail)).encode().replace(b" ", b""), 1))
    elif how == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif how == "folder":
        path.unlink()
        path.mkdir()
    else:
        with open(path, "r+b") as f:
            f.truncate(3 << 30)  # a sparse file of 3 GiB


@SETTINGS
@given(data=st.data())
def test_any_damage_to_a_label_file_gives_labels_or_one_clean_error(tmp_path, data):
    kind, how, detail = data.draw(label_mutations())
    for name in os.listdir(tmp_path):
        (tmp_path / name).rmdir() if (tmp_path / name).is_dir() else (tmp_path / name).unlink()
    files = label_files(tmp_path)
    untouched = read_labels(files[kind], memory=256 << 20)  # the same file, undamaged: read
    np.testing.assert_array_equal(untouched.values, np.arange(12) % 3)
    mutate_label_file(files[kind], how, detail)
    with bounded():
        try:
            got = read_labels(files[kind], memory=256 << 20)
        except GatetraceError as err:
            assert "\n" not in str(err)
            return
    assert got.values.dtype == np.float64 and got.values.nbytes <= 256 << 20
    others = [k for k in files if k != kind]
    for other in others:  # the files beside it are read as before
        np.testing.assert_array_equal(read_labels(files[other]).values, untouched.values)
