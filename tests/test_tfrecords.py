"""TFRecord inputs: tf.train.Example rows (flat, reshaped to the placeholder) and
SequenceExample rows (one feature per step), across shard files, equal the same rows
given as .npy, value for value; damaged or unsuitable files are refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import CONFIGS, build, run_cli, save, static_body
from tests.test_resume import tables
from tracer._tf import tf
from tracer.inputs.files import open_input

STEPS, FEATURES = 5, 4


def write_examples(path, rows: np.ndarray, sequence: bool = False) -> None:
    with tf.io.TFRecordWriter(str(path)) as w:
        for row in rows:
            if sequence:
                steps = [
                    tf.train.Feature(float_list=tf.train.FloatList(value=step)) for step in row
                ]
                record = tf.train.SequenceExample(
                    context=tf.train.Features(
                        feature={
                            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[1]))
                        }
                    ),
                    feature_lists=tf.train.FeatureLists(
                        feature_list={"x": tf.train.FeatureList(feature=steps)}
                    ),
                )
            else:
                record = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "x": tf.train.Feature(
                                float_list=tf.train.FloatList(value=row.reshape(-1))
                            ),
                            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[1])),
                        }
                    )
                )
            w.write(record.SerializeToString())


@pytest.fixture(scope="module")
def rows():
    return np.random.RandomState(7).randn(23, STEPS, FEATURES).astype(np.float32)


def test_rows_are_read_by_slices_in_file_order(rows, tmp_path):
    for k, part in enumerate(np.array_split(rows, 3)):
        write_examples(tmp_path / f"data-{k:05d}-of-00003.tfrecord", part)
    feed = open_input(str(tmp_path / "data-*.tfrecord:x"), "feed x")
    assert feed.shape == (23, STEPS * FEATURES) and feed.dtype == np.float32
    feed.fit((STEPS, FEATURES))
    assert feed.shape == (23, STEPS, FEATURES)
    np.testing.assert_array_equal(feed[6:17], rows[6:17])
    np.testing.assert_array_equal(feed[:], rows)
    write_examples(tmp_path / "seq.tfrecord", rows, sequence=True)
    np.testing.assert_array_equal(
        open_input(str(tmp_path / "seq.tfrecord:x"), "feed x")[20:23], rows[20:23]
    )


@pytest.mark.e2e
@pytest.mark.parametrize("sequence", [False, True], ids=["Example", "SequenceExample"])
def test_a_tfrecord_recording_equals_the_npy_one(rows, sequence, tmp_path):
    model = save(
        build(static_body(CONFIGS["GRUCell"]), steps=STEPS, features=FEATURES),
        "checkpoint",
        tmp_path,
    )
    np.save(tmp_path / "x.npy", rows)
    for k, part in enumerate(np.array_split(rows, 2)):
        write_examples(tmp_path / f"train-{k}.tfrecord", part, sequence)
    for name, feed, extra in (
        ("npy", "x.npy", ()),
        ("tfrecord", "train-*.tfrecord:x", ()),
        ("tasks", "train-*.tfrecord:x", ("--workers", "2", "--task-size", "1")),
    ):
        done = run_cli(
            "record",
            model,
            "--feed",
            f"x={tmp_path / feed}",
            "--out",
            str(tmp_path / name),
            "--batch-size",
            "8",
            "--quiet",
            *extra,
        )
        assert done.returncode == 0, done.stderr
    want = tables(tmp_path / "npy")
    for name in ("tfrecord", "tasks"):
        got = tables(tmp_path / name)
        for table in want:
            assert len(got[table]) == len(want[table]) > 0
            assert got[table].equals(want[table]), (name, table)


def test_unreadable_tfrecords_are_refused_in_one_line(rows, tmp_path):
    import gzip

    write_examples(tmp_path / "ok.tfrecord", rows[:3])
    data = (tmp_path / "ok.tfrecord").read_bytes()
    (tmp_path / "cut.tfrecord").write_bytes(data[:-7])
    (tmp_path / "zipped.tfrecord").write_bytes(gzip.compress(data))
    cases = {
        "cut.tfrecord:x": "is truncated",
        "zipped.tfrecord:x": "is GZIP-compressed; decompress it",
        "ok.tfrecord:y": "record 0 has no feature 'y'; it has label, x",
        "ok.tfrecord:label": None,  # an int64 feature reads (as int64)
        "none-*.tfrecord:x": "no file matches",
    }
    for spec, why in cases.items():
        if why is None:
            assert open_input(str(tmp_path / spec), "feed x").dtype == np.int64
            continue
        with pytest.raises(Exception) as err:
            open_input(str(tmp_path / spec), "feed x")
        assert (
            why in str(err.value)
            and "\n" not in str(err.value)
            and str(err.value).startswith("feed x: ")
        )


def test_a_file_is_indexed_once_per_process_until_it_changes(rows, tmp_path, monkeypatch):
    """The tasks of a parallel job that run in one worker reuse the index of each file; a
    file rewritten since is indexed again."""
    import tracer.inputs.tfrecords

    scans = []
    records = tracer.inputs.tfrecords._records
    monkeypatch.setattr(
        tracer.inputs.tfrecords, "_records", lambda f, path: scans.append(path) or records(f, path)
    )
    path = tmp_path / "data.tfrecord"
    write_examples(path, rows[:5])
    for _ in range(3):
        assert open_input(f"{path}:x", "feed x").shape[0] == 5
    assert len(scans) == 1
    write_examples(path, rows[:9])
    feed = open_input(f"{path}:x", "feed x")
    assert feed.shape[0] == 9 and len(scans) == 2
    feed.fit((STEPS, FEATURES))
    np.testing.assert_array_equal(feed[:], rows[:9])


def test_with_the_counts_a_driver_found_a_task_indexes_only_its_files(rows, tmp_path, monkeypatch):
    import tracer.inputs.tfrecords

    for k, part in enumerate(np.array_split(rows, 3)):  # 8, 8 and 7 records
        write_examples(tmp_path / f"part-{k}.tfrecord", part)
    spec = str(tmp_path / "part-*.tfrecord:x")
    monkeypatch.setattr(tracer.inputs.tfrecords, "_INDEXES", {})
    monkeypatch.setattr(tracer.inputs.tfrecords, "_COUNTS", {})
    assert open_input(spec, "feed x").shape[0] == 23  # the driver indexes every file
    counts = tracer.inputs.tfrecords.record_counts()
    assert sorted(counts.values()) == [7, 8, 8]
    # a fresh worker process, told the counts
    monkeypatch.setattr(tracer.inputs.tfrecords, "_INDEXES", {})
    monkeypatch.setattr(tracer.inputs.tfrecords, "_COUNTS", {})
    tracer.inputs.tfrecords.know_counts(counts)
    scans = []
    records = tracer.inputs.tfrecords._records
    monkeypatch.setattr(
        tracer.inputs.tfrecords, "_records", lambda f, path: scans.append(path) or records(f, path)
    )
    feed = open_input(spec, "feed x")
    feed.fit((STEPS, FEATURES))
    assert feed.shape == (23, STEPS, FEATURES) and scans == []
    np.testing.assert_array_equal(feed[17:21], rows[17:21])
    assert scans == [str(tmp_path / "part-2.tfrecord")]


@pytest.mark.parametrize("damage", ["data", "length"])
def test_a_record_failing_its_crc_is_refused_in_one_line(rows, tmp_path, damage):
    """A record whose data (or length field) no longer matches its CRC32C: TensorFlow's reader
    refuses it, and so does gatetrace, naming the file and the record, where it used to
    record the changed values."""
    import struct

    model = save(
        build(static_body(CONFIGS["GRUCell"]), steps=STEPS, features=FEATURES),
        "checkpoint",
        tmp_path,
    )
    path = tmp_path / "train.tfrecord"
    write_examples(path, rows[:4])
    data = bytearray(path.read_bytes())
    (length,) = struct.unpack("<Q", data[:8])
    second = 12 + length + 4  # where record 1 starts
    if damage == "data":
        # one bit of a float inside record 1: it still parses
        data[second + 12 + length // 2] ^= 0x01
    else:
        data[second + 8] ^= 0x01  # the CRC of record 1's length field
    path.write_bytes(bytes(data))
    with pytest.raises(tf.errors.DataLossError):
        list(tf.data.TFRecordDataset(str(path)))
    done = run_cli(
        "record", model, "--feed", f"x={path}:x", "--out", str(tmp_path / "out"), "--quiet"
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert (
        f"{path}: record 1 fails the CRC32C check of its {damage}; the file is damaged"
        in done.stderr
    )
    assert not (tmp_path / "out").exists()
