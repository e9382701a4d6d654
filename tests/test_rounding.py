"""`gatetrace record --round-bits N`: every value stored rounded to N mantissa bits, within the
bound the manifest states, checked against TensorFlow's own values (the builder's session run
on the same inputs); fewer bytes a value; the statistics, summaries and checks describe the
values stored; the flag refused where it cannot hold, in one line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from recorders import Recording
from recorders.errors import RecordingError, SelectionError
from recorders.write.rounding import Rounding
from tests.conftest import R, build, record_x, run_cli, save
from tracer._tf import tf, v1

UNITS, FEATURES, STEPS = 3, 4, 5
CELL = "rnn/basic_lstm_cell"


def _lstm(units: int = UNITS):
    def body(x):
        outputs, _ = v1.nn.static_rnn(
            R.BasicLSTMCell(units, forget_bias=0.7), tf.unstack(x, axis=1), dtype=tf.float32
        )
        return [outputs[-1]]

    return body


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    built = build(_lstm(), steps=STEPS, features=FEATURES, seed=11)
    return save(built, "checkpoint", tmp_path_factory.mktemp("rounding")), built


def _op(name: str, k: int) -> str:
    """The k-th op of this name TensorFlow made under the cell's scope (static_rnn's steps)."""
    return f"{CELL}/{name}{'' if k == 0 else f'_{k}'}"


def _own(built, x: np.ndarray) -> dict[tuple[str, str], np.ndarray]:
    """TensorFlow's own values, [examples, steps, units] by (gate or state, column), fetched
    from the builder's session by the names TensorFlow gave a BasicLSTMCell's ops under
    static_rnn: at step t, split_t's four blocks (i, j, f, o: the preactivations, f's before
    its forget bias is added), the gates' Sigmoid_{3t+1}, Tanh_{2t}, Sigmoid_{3t} and
    Sigmoid_{3t+2}, the state c Add_{2t+1} and h Mul_{3t+2}."""
    names: dict[tuple[str, str], list[str]] = {}
    for t in range(STEPS):
        split = _op("split", t)
        for key, name in {
            ("i", "preactivation"): f"{split}:0",
            ("j", "preactivation"): f"{split}:1",
            ("f", "preactivation"): f"{split}:2",
            ("o", "preactivation"): f"{split}:3",
            ("i", "activation"): f"{_op('Sigmoid', 3 * t + 1)}:0",
            ("j", "activation"): f"{_op('Tanh', 2 * t)}:0",
            ("f", "activation"): f"{_op('Sigmoid', 3 * t)}:0",
            ("o", "activation"): f"{_op('Sigmoid', 3 * t + 2)}:0",
            ("c", "value"): f"{_op('Add', 2 * t + 1)}:0",
            ("h", "value"): f"{_op('Mul', 3 * t + 2)}:0",
        }.items():
            names.setdefault(key, []).append(name)
    fetched = built.session.run(
        {k: [built.graph.get_tensor_by_name(n) for n in v] for k, v in names.items()},
        {built.inputs: x},
    )
    return {k: np.stack(v, axis=1) for k, v in fetched.items()}


def _recorded(rec: Recording) -> dict[tuple[str, str], np.ndarray]:
    out = {}
    for gate in ("i", "j", "f", "o"):
        for column in ("preactivation", "activation"):
            out[gate, column] = rec.gate_array(CELL, gate, column)
    for state in ("c", "h"):
        out[state, "value"] = rec.state_array(CELL, state)
    return out


@pytest.mark.parametrize("bits", [7, 10])
def test_every_value_is_within_the_bound_of_tensorflows_own_and_the_bound_is_tight(
    model, inputs, tmp_path, bits
):
    path, built = model
    own = _own(built, inputs)
    batch = ("--batch-size", str(len(inputs)))  # one run, as the oracle's
    done = record_x(path, inputs, tmp_path / "exact", *batch)
    assert done.returncode == 0, done.stderr
    done = record_x(path, inputs, tmp_path / "rounded", *batch, "--round-bits", str(bits))
    assert done.returncode == 0, done.stderr
    exact, rounded = (
        _recorded(Recording(tmp_path / "exact")),
        _recorded(Recording(tmp_path / "rounded")),
    )
    bound = 2.0 ** -(bits + 1)
    worst = 0.0
    for key, tf_values in own.items():
        # the oracle's names are right: the exact recording holds TensorFlow's values, bit for bit
        np.testing.assert_array_equal(exact[key], tf_values, err_msg=str(key))
        x, y = tf_values.astype(np.float64), rounded[key].astype(np.float64)
        assert np.all(np.abs(y - x) <= bound * np.abs(x)), key
        assert not np.any(rounded[key].view(np.uint32) & ((1 << (23 - bits)) - 1)), key
        worst = max(worst, float(np.max(np.abs(y - x) / np.abs(x))))
    assert worst > bound / 2, worst  # the bound is the rounding's, not a loose one
    manifest = json.loads((tmp_path / "rounded" / "manifest.json").read_text())
    assert manifest["rounding"] == {
        "mantissa_bits": bits,
        "relative_error": bound,
        "subnormal_error": 2.0 ** -(bits + 127),
    }
    # the weights are stored exactly
    w = Recording(tmp_path / "rounded").weights_frame(CELL)
    v = Recording(tmp_path / "exact").weights_frame(CELL)
    np.testing.assert_array_equal(w["value"].to_numpy(), v["value"].to_numpy())


def _float64_rounding(x: np.ndarray, bits: int) -> np.ndarray:
    """Round-to-nearest-even to `bits` mantissa bits in float64 arithmetic (numpy's rint),
    for finite float32 `x`: the step of the bits kept is 2^(e - bits) at exponent e (2^-126
    below the normal range); past the largest finite value of `bits` bits, that value."""
    a = np.abs(x.astype(np.float64))
    e = np.where(a >= 2.0**-126, np.floor(np.log2(np.where(a > 0, a, 1.0))), -126.0)
    step = 2.0 ** (e - bits)
    r = np.rint(x.astype(np.float64) / step) * step
    largest = (2 - 2.0**-bits) * 2.0**127
    return np.where(np.abs(r) > largest, np.sign(r) * largest, r)


@pytest.mark.parametrize("bits", [1, 7, 10, 22])
def test_the_rounding_is_to_nearest_even_as_float64_arithmetic_rounds(bits):
    rng = np.random.default_rng(bits)
    patterns = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    edges = [0x7F7F_FFFF, 0xFF7F_FFFF, 0x0000_0001, 0x007F_FFFF, 0x8000_0000, 0, 0x3FC0_0000]
    ties = [0x3F80_0000 | (1 << (22 - bits)), 0x3F80_0000 | (3 << (22 - bits))]  # 1 + half a step
    x = np.concatenate([patterns, np.array(edges + ties, np.uint32)]).view(np.float32)
    r = Rounding(bits)
    x = x[: len(x) // 7 * 7]
    got = r.apply(x.reshape(-1, 7)).reshape(-1)  # any shape
    finite = np.isfinite(x)
    np.testing.assert_array_equal(
        got[finite].astype(np.float64), _float64_rounding(x[finite], bits)
    )
    assert np.isfinite(got[finite]).all()  # a finite value never becomes an infinity
    normal = finite & (np.abs(x) >= 2.0**-126)
    err = np.abs(got[normal].astype(np.float64) - x[normal]) / np.abs(x[normal].astype(np.float64))
    assert err.max() <= r.relative_error
    sub = finite & (np.abs(x) < 2.0**-126)
    assert np.abs(got[sub].astype(np.float64) - x[sub]).max() <= r.subnormal_error
    inf, nan = np.isinf(x), np.isnan(x)
    np.testing.assert_array_equal(got[inf], x[inf])
    assert np.isnan(got[nan]).all()
    assert np.array_equal(np.signbit(got[nan]), np.signbit(x[nan]))
    assert r.stray(got) == 0
    # the values given are left as they were
    assert r.apply(x[:10]).base is None


def _sizes(out) -> int:
    return sum(p.stat().st_size for t in ("gates", "states") for p in (out / t).rglob("*.parquet"))


def test_rounded_files_are_smaller(tmp_path):
    """An LSTM(32) over 20 steps of 64 sequences: 409,600 values."""
    built = build(_lstm(32), steps=20, features=FEATURES, seed=3)
    path = save(built, "checkpoint", tmp_path)
    x = np.random.RandomState(0).randn(64, 20, FEATURES).astype(np.float32)
    sizes = {}
    for name, flags in {
        "exact": (),
        "exact zstd": ("--compression", "zstd"),
        "10": ("--round-bits", "10"),
        "7": ("--round-bits", "7"),
        "7 lz4": ("--round-bits", "7", "--compression", "lz4"),
    }.items():
        done = record_x(path, x, tmp_path / name.replace(" ", "-"), *flags)
        assert done.returncode == 0, done.stderr
        sizes[name] = _sizes(tmp_path / name.replace(" ", "-"))
    assert sizes["7"] < sizes["10"] < min(sizes["exact"], sizes["exact zstd"]), sizes
    assert sizes["7"] < 0.5 * sizes["exact"], sizes
    assert sizes["7 lz4"] < 0.6 * sizes["exact"], sizes


def test_the_statistics_describe_the_values_stored(model, inputs, tmp_path):
    """The statistics each gate file carries in its footer, merged, are those of the rounded
    values (their least and largest per step, and sums), not of the values fetched."""
    path, built = model
    done = record_x(path, inputs, tmp_path / "run", "--round-bits", "3", "--batch-size", "4")
    assert done.returncode == 0, done.stderr
    rec = Recording(tmp_path / "run")
    for gate in ("i", "f"):
        stored = rec.gate_array(CELL, gate).astype(np.float64)
        stats = rec.activation_statistics(CELL, gate)
        assert stats is not None
        np.testing.assert_array_equal(stats.lo, stored.min(axis=(0, 2)))
        np.testing.assert_array_equal(stats.hi, stored.max(axis=(0, 2)))
        np.testing.assert_allclose(stats.total, stored.sum(axis=(0, 2)), rtol=1e-12)
        fetched = _own(built, inputs)[gate, "activation"].astype(np.float64)
        assert not np.array_equal(stats.hi, fetched.max(axis=(0, 2)))  # what rounding changed


def test_recording_check_names_a_file_with_bits_below_the_rounding(model, inputs, tmp_path):
    path, _ = model
    done = record_x(
        path,
        inputs,
        tmp_path / "run",
        "--round-bits",
        "7",
        "--values",
        "preactivation,activation,contributions",
    )
    assert done.returncode == 0, done.stderr
    Recording(tmp_path / "run").check()  # every value of every column, parts too
    # the first part file (the memory budget chooses how many batches there are)
    part = sorted((tmp_path / "run" / "states").glob("cell=*/state=h/part-*.parquet"))[0]
    table = pq.read_table(part, partitioning=None)
    values = table.column("value").to_numpy().copy()
    values.view(np.uint32)[2] |= 1  # one bit below the 7 kept
    table = table.set_column(table.schema.get_field_index("value"), "value", [values])
    # with page checksums, as gatetrace writes its files (one without them is named first)
    pq.write_table(table, part, compression="zstd", write_page_checksum=True)
    with pytest.raises(RecordingError) as err:
        Recording(tmp_path / "run").check()
    assert part.name in str(err.value) and "state=h" in str(err.value)
    assert "1 value with bits below the 7 mantissa bits" in str(err.value)
    assert "\n" not in str(err.value)


def _flags_refused(tmp_path, *flags: str) -> str:
    x = np.zeros((2, STEPS, FEATURES), np.float32)
    np.save(tmp_path / "x.npy", x)
    done = run_cli(
        "record", str(tmp_path / "missing.ckpt"), "--feed", f"x={tmp_path / 'x.npy'}",
        "--out", str(tmp_path / "out"), *flags,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("gatetrace: error: "), (
        done.stderr
    )
    assert not (tmp_path / "out").exists()
    return done.stderr


@pytest.mark.parametrize("given", ["0", "23", "-1", "7.5", "x"])
def test_round_bits_out_of_range_is_one_line(tmp_path, given):
    said = _flags_refused(tmp_path, "--round-bits", given)
    assert (
        f"argument --round-bits: expected a whole number of float32 mantissa bits from 1 to 22, given '{given}'"
        in said
    )


def test_round_bits_with_summary_is_one_line_before_the_model_is_read(tmp_path):
    # (the model is not there: refused before it is looked for)
    said = _flags_refused(tmp_path, "--round-bits", "7", "--summary")
    assert "--round-bits with --summary" in said


def test_round_bits_out_of_range_in_python_is_refused():
    from tracer.run.options import RecordOptions

    for bits in (0, 23, True, 7.0):
        with pytest.raises(SelectionError, match="--round-bits"):
            RecordOptions(round_bits=bits)


@pytest.mark.parametrize(
    "rounding, said",
    [
        (
            {"mantissa_bits": 30},
            "rounding.mantissa_bits is 30, expected a whole number from 1 to 22",
        ),
        ({"mantissa_bits": "7"}, 'rounding.mantissa_bits is "7"'),
        ({"mantissa_bits": True}, "rounding.mantissa_bits is true"),
        ({"mantissa_bits": 7.0}, "rounding.mantissa_bits is 7.0"),
        ({}, "rounding.mantissa_bits is missing"),
        ("7", 'rounding is "7", expected an object'),
        (None, "rounding is null, expected an object"),
        (
            {"mantissa_bits": 7, "relative_error": 0.5, "subnormal_error": 0},
            "the errors 7 mantissa bits allow",
        ),
        (
            {"mantissa_bits": 1, "relative_error": 0.5, "subnormal_error": 0},
            "the errors 1 mantissa bit allow)",
        ),
    ],
)
def test_a_manifest_that_says_another_rounding_is_one_line(model, inputs, tmp_path, rounding, said):
    path, _ = model
    run = tmp_path / "run"
    done = record_x(path, inputs, run, "--round-bits", "7")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["rounding"] = rounding
    (run / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RecordingError, match="is not a manifest gatetrace wrote") as err:
        Recording(run)
    assert said in str(err.value) and "\n" not in str(err.value)
    done = run_cli("inspect", str(run))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and said in done.stderr


def test_resume_and_shards_with_other_rounding_are_refused_naming_the_flag(model, inputs, tmp_path):
    path, _ = model
    run = tmp_path / "run"
    done = record_x(path, inputs, run, "--round-bits", "7")
    assert done.returncode == 0, done.stderr
    for flags, said in (
        (
            ("--round-bits", "10"),
            "it was recorded with --round-bits 7, this run gives --round-bits 10: give --round-bits 7",
        ),
        (
            (),
            "it was recorded with --round-bits 7, this run gives no --round-bits: give --round-bits 7",
        ),
    ):
        done = record_x(path, inputs, run, "--resume", *flags)
        assert done.returncode == 2 and said in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1
    shards = tmp_path / "shards"
    done = record_x(path, inputs, shards, "--shard", "0/2", "--round-bits", "7")
    assert done.returncode == 0, done.stderr
    done = record_x(path, inputs, shards, "--shard", "1/2")
    assert done.returncode == 2, done.stderr
    assert (
        "it was recorded with --round-bits 7, this run gives no --round-bits: give --round-bits 7"
        in done.stderr
    )
    done = record_x(path, inputs, shards, "--shard", "1/2", "--round-bits", "7")
    assert done.returncode == 0, done.stderr
    assert Recording(shards).complete


def test_inspect_compare_and_the_view_say_a_recording_is_rounded(model, inputs, tmp_path):
    from recorders.read.compare import compare
    from recorders.view.data import overview

    path, _ = model
    for name, flags in (("exact", ()), ("rounded", ("--round-bits", "7"))):
        done = record_x(path, inputs, tmp_path / name, *flags)
        assert done.returncode == 0, done.stderr
    words = "values rounded to 7 mantissa bits (--round-bits 7): each within 2^-8 = 0.00391 of its own magnitude"
    done = run_cli("inspect", str(tmp_path / "rounded"))
    assert done.returncode == 0 and f"rounded: {words}" in done.stdout, done
    assert "rounded:" not in run_cli("inspect", str(tmp_path / "exact")).stdout
    summary = json.loads(run_cli("inspect", str(tmp_path / "rounded"), "--json").stdout)
    assert summary["rounding"]["mantissa_bits"] == 7
    exact, rounded = Recording(tmp_path / "exact"), Recording(tmp_path / "rounded")
    assert overview(rounded)["rounding"].startswith(words)
    assert overview(exact)["rounding"] is None
    found = compare(exact, rounded, tolerance=0.0)
    assert [n for n in found.notes() if n.startswith(f"B was recorded with {words}")], found.notes()
    assert not any(n.startswith("A was recorded") for n in found.notes())
    assert (found.gates["max_abs"] > 0).any()  # the rounding's differences, within the bound
    assert (found.gates["max_abs"] <= 2.0**-8).all()
    done = run_cli("compare", str(tmp_path / "exact"), str(tmp_path / "rounded"))
    assert done.returncode == 0 and f"B was recorded with {words}" in done.stdout, done


def test_outputs_of_floats_are_rounded_and_of_integers_not(tmp_path):
    def body(x):
        cell = v1.nn.rnn_cell.BasicLSTMCell(UNITS)
        outputs, _ = v1.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32)
        logits = tf.identity(outputs[-1] * 3.0, name="logits")
        tf.add(tf.argmax(logits, axis=1), 1001, name="ids")  # 1001 to 1003: 10 bits, not 2
        return [logits]

    built = build(body, steps=STEPS, features=FEATURES, seed=5)
    path = save(built, "checkpoint", tmp_path)
    x = np.random.RandomState(2).randn(8, STEPS, FEATURES).astype(np.float32)
    done = record_x(path, x, tmp_path / "run", "--round-bits", "1", "--outputs", "logits,ids")
    assert done.returncode == 0, done.stderr
    rec = Recording(tmp_path / "run")
    rec.check()
    ids = rec.output_frame("ids:0").sort_values("example")["value"].to_numpy()
    logits = rec.output_frame("logits:0").sort_values(["example", "unit"])["value"].to_numpy()
    own_ids, own_logits = built.session.run(["ids:0", "logits:0"], {built.inputs: x})
    np.testing.assert_array_equal(ids, own_ids)  # exact: 1001 with 1 bit would be 1024
    own = own_logits.reshape(-1).astype(np.float64)
    assert np.all(np.abs(logits - own) <= 0.25 * np.abs(own))
    assert not np.any(logits.astype(np.float32).view(np.uint32) & ((1 << 22) - 1))
    assert not np.array_equal(logits, own)


@pytest.mark.e2e
def test_the_memory_budget_bounds_a_rounded_recording(tmp_path):
    """As tests/test_memory.py's budget test, with --round-bits 7 (zstd, through pyarrow)."""
    from tests.test_memory import (
        BUDGET_FEATURES,
        BUDGET_STEPS,
        BUDGET_UNITS,
        budget_input,
        budget_peaks,
    )

    built = build(_lstm(BUDGET_UNITS), steps=BUDGET_STEPS, features=BUDGET_FEATURES)
    path = save(built, "checkpoint", tmp_path)
    x = budget_input(tmp_path)
    flags = ("--round-bits", "7")
    # room for the reserve, with pyarrow's encoder's and the rounded columns' (about 370 MB)
    base, budget, whole, budgeted = budget_peaks(path, x, tmp_path, 400, *flags)
    assert whole > budget, (base, whole)
    assert budgeted <= budget, (base, budgeted)
    shutil.rmtree(tmp_path / "whole")


@pytest.mark.e2e
def test_workers_round_as_one_process_does_and_their_job_keeps_its_rounding(model, tmp_path):
    """`--workers 2`: each task's writer rounds as one process's does (the same recording, bit
    for bit); the job resumed with another --round-bits is refused naming the flag."""
    from tests.test_resume import assert_same_recording

    path, _ = model
    x = np.random.RandomState(4).randn(40, STEPS, FEATURES).astype(np.float32)
    flags = ("--batch-size", "10", "--round-bits", "7")
    done = record_x(path, x, tmp_path / "one", *flags)
    assert done.returncode == 0, done.stderr
    done = record_x(path, x, tmp_path / "job", *flags, "--workers", "2", "--task-size", "1")
    assert done.returncode == 0, done.stderr
    assert_same_recording(tmp_path / "job", tmp_path / "one", sequences=40)
    Recording(tmp_path / "job").check()
    done = record_x(
        path, x, tmp_path / "job", "--batch-size", "10", "--round-bits", "8", "--resume",
        "--workers", "2", "--task-size", "1",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "it was recorded with --round-bits 7, this run gives --round-bits 8" in done.stderr


@pytest.mark.parametrize(("bits", "kept"), [(1, "1 mantissa bit ("), (2, "2 mantissa bits (")])
def test_the_bits_kept_are_said_in_the_singular_for_one(bits, kept):
    """As every command says a rounding: "1 mantissa bit", never "1 mantissa bits"."""
    from recorders.write.rounding import Rounding

    assert f"values rounded to {kept}--round-bits {bits})" in Rounding(bits).words()
