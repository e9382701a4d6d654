"""`record --outputs`: the model's own outputs recorded beside the gates, checked against the
model run by TensorFlow itself (the builder's session), plain and with a unit held."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import tracer
from recorders import Recording
from recorders.errors import RecordingError, SelectionError
from tests.conftest import build, record_x, run_cli, save
from tracer._tf import tf, v1

UNITS, FEATURES, STEPS, VOCAB = 3, 4, 5, 6


def _language_model(x):
    """A TF1 script's next-token model: static_rnn, a dense layer at every step."""
    cell = v1.nn.rnn_cell.BasicLSTMCell(UNITS)
    outputs, _ = v1.nn.static_rnn(cell, tf.unstack(x, axis=1), dtype=tf.float32)
    dense = v1.layers.Dense(VOCAB, name="softmax")
    logits = tf.stack([dense(o) for o in outputs], axis=1, name="logits")
    final = tf.identity(logits[:, -1], name="final")
    tf.argmax(final, axis=1, name="predicted")
    tf.ones([7, 2], name="not_batched")
    tf.reshape(logits, [-1, VOCAB], name="flat")  # [batch x steps, vocab]: rows not examples
    tf.constant("text", name="text")
    tf.add(tf.argmax(final, axis=1), 2**40 + 1, name="big")  # past float32's exact integers
    tf.multiply(tf.cast(final, tf.float64), 1e300, name="wide")  # past float32's range
    tf.stack([outputs[-1], outputs[-1]], axis=1, name="pair")  # [batch, 2, units]: not time
    # [batch, batch, vocab]: both dimensions are the examples'
    tf.tile(final[None], tf.stack([tf.shape(final)[0], 1, 1]), name="square")
    # past float32's range only where the input is: in a later batch
    tf.multiply(tf.cast(x[:, 0, :1], tf.float64), 1e30, name="scaled")
    return [final, logits]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    built = build(_language_model, steps=STEPS, features=FEATURES, seed=7)
    return save(built, "checkpoint", tmp_path_factory.mktemp("outputs")), built


def _own(built, name, x):
    return built.session.run(built.graph.get_tensor_by_name(name), {built.inputs: x})


def test_outputs_are_the_models_own(model, inputs, tmp_path):
    path, built = model
    done = record_x(
        path, inputs, tmp_path / "run", "--outputs", "logits,final,predicted", "--batch-size", "4"
    )
    assert done.returncode == 0, done.stderr
    rec = Recording(tmp_path / "run")
    assert rec.outputs == ["logits:0", "final:0", "predicted:0"]
    logits = rec.output_frame("logits:0").sort_values(["example", "step", "unit"])
    assert list(logits.columns) == ["example", "step", "unit", "value"]
    expected = _own(built, "logits:0", inputs)
    # (batches of 4 against the oracle's one of 6: the kernels may round the last bit otherwise)
    np.testing.assert_allclose(
        logits["value"].to_numpy().reshape(expected.shape), expected, atol=1e-6
    )
    final = rec.output_frame("final:0").sort_values(["example", "unit"])
    assert "step" not in final.columns
    np.testing.assert_allclose(
        final["value"].to_numpy().reshape(len(inputs), VOCAB),
        _own(built, "final:0", inputs),
        atol=1e-6,
    )
    predicted = rec.output_frame("predicted:0", examples=(2, 5)).sort_values("example")
    assert predicted["example"].tolist() == [2, 3, 4]
    assert predicted["value"].tolist() == _own(built, "predicted:0", inputs)[2:5].tolist()
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["outputs"] == [
        {"name": "logits:0", "units": VOCAB, "sequence": True, "dtype": "float32", "steps": STEPS},
        {"name": "final:0", "units": VOCAB, "sequence": False, "dtype": "float32"},
        {"name": "predicted:0", "units": 1, "sequence": False, "dtype": "int64"},
    ]
    assert manifest["rows"]["outputs"] == len(inputs) * (STEPS * VOCAB + VOCAB + 1)
    assert rec.summary()["rows"]["outputs"] == manifest["rows"]["outputs"]


def test_a_held_recordings_outputs_are_those_of_the_model_whose_weights_no_longer_read_the_unit(
    model, inputs, tmp_path
):
    """h unit 1 ablated: the oracle is the model with that unit's rows of the recurrent kernel
    and of the softmax layer zeroed, run by TensorFlow."""
    path, built = model
    with tracer.load_model(path) as m:
        tracer.record(
            m,
            {"x": inputs},
            tmp_path / "held",
            outputs=("logits",),
            holds=(tracer_hold("basic_lstm_cell:h:1=0"),),
        )
    with built.graph.as_default():
        variables = {v.op.name: v for v in v1.global_variables()}
        kernel, softmax = variables["rnn/basic_lstm_cell/kernel"], variables["softmax/kernel"]
        k, s = built.session.run([kernel, softmax])
        try:
            kernel.load(np.where(np.arange(len(k))[:, None] == FEATURES + 1, 0, k), built.session)
            softmax.load(np.where(np.arange(len(s))[:, None] == 1, 0, s), built.session)
            expected = _own(built, "logits:0", inputs)
        finally:
            kernel.load(k, built.session)
            softmax.load(s, built.session)
    got = (
        Recording(tmp_path / "held")
        .output_frame("logits:0")
        .sort_values(["example", "step", "unit"])
    )
    np.testing.assert_allclose(got["value"].to_numpy().reshape(expected.shape), expected, atol=1e-6)
    assert np.abs(expected - _own(built, "logits:0", inputs)).max() > 1e-3  # the hold matters


def tracer_hold(spec):
    from tracer.cells.holds import parse_hold

    return parse_hold(spec)


@pytest.mark.parametrize(
    ("names", "said"),
    [
        ("nothing_here", "has no op or tensor of this name"),
        ("text", "expected numbers [batch], [batch, units] or [batch, steps, units]"),
        ("not_batched", "its first dimension is 7, which is no input's batch"),
        ("flat", "its first dimension is not the number of examples (its shape is [10, 6] for 2"),
        ("square", "both its first and its second dimension are the number of examples"),
        ("big", "which the recording's float32 value column would round"),
        (
            "wide",
            "past float32's range, which the recording's float32 value column would make infinite",
        ),
        ("", "--outputs names no tensor"),
        ("logits,logits:0", "logits:0 is named twice"),
    ],
)
def test_outputs_that_do_not_fit_are_one_line(model, inputs, tmp_path, names, said):
    path, _ = model
    done = record_x(path, inputs, tmp_path / "run", "--outputs", names)
    assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, (
        done.stderr
    )
    assert not (tmp_path / "run").exists()


def test_outputs_with_a_summary_or_of_a_name_the_keras_model_lacks_are_one_line(tmp_path):
    """(A Keras model's outputs by name: tests/test_outputs_returned.py.)"""
    with pytest.raises(SelectionError, match="--outputs with --summary"):
        tracer.RecordOptions(outputs=("y",), summary=tracer_bins())
    keras = tf.keras.Sequential([tf.keras.Input((5, 4)), tf.keras.layers.LSTM(3, name="lstm")])
    with pytest.raises(SelectionError, match="no output of this name; its outputs are lstm$"):
        tracer.record(keras, np.zeros((2, 5, 4), np.float32), tmp_path / "k", outputs=("y",))
    assert not (tmp_path / "k").exists()


def tracer_bins():
    from recorders import Bins

    return Bins()


def _edit_outputs(run, edit, progress: bool = True) -> None:
    """`edit` each output's entry in the manifest (and, with `progress`, in the description
    each progress file keeps: an edit made everywhere the outputs are said)."""
    files = [run / "manifest.json"] + (
        sorted((run / "_progress").glob("*.json")) if progress else []
    )
    for file in files:
        said = json.loads(file.read_text())
        for entry in (said if file.name == "manifest.json" else said["description"])["outputs"]:
            edit(entry)
        file.write_text(json.dumps(said))


def test_an_output_file_that_claims_other_units_is_refused(model, inputs, tmp_path):
    path, _ = model
    with tracer.load_model(path) as m:
        tracer.record(m, {"x": inputs}, tmp_path / "run", outputs=("final",))
    _edit_outputs(tmp_path / "run", lambda o: o.update(units=2))  # fewer than its files hold
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    with pytest.raises(RecordingError, match="not a part file gatetrace wrote"):
        Recording(tmp_path / "run").output_frame("final:0")
    manifest["outputs"][0]["units"] = "six"
    (tmp_path / "run" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RecordingError, match=r"outputs\[0\]"):
        Recording(tmp_path / "run")


def test_compare_says_where_a_hold_moved_the_outputs(model, inputs, tmp_path):
    """A unit of h held from step 2: the logits of steps 0 and 1 are the model's own in both
    recordings (no difference), from step 2 on they move; compare's lines, --json, --out and
    the view's comparison say so."""
    import pandas as pd

    from recorders.read.compare import compare
    from recorders.view.data import compared

    path, _ = model
    np.save(tmp_path / "x.npy", inputs)
    feed = ["--feed", f"x={tmp_path / 'x.npy'}", "--quiet", "--outputs", "logits,final"]
    for name, extra in (("base", []), ("held", ["--hold", "basic_lstm_cell:h:0,1=0@2:"])):
        assert run_cli("record", path, *feed, "--out", str(tmp_path / name), *extra).returncode == 0
    found = compare(Recording(tmp_path / "base"), Recording(tmp_path / "held"))
    rows = found.outputs.set_index("output")
    assert rows.loc["logits:0", "first_step_beyond"] == 2 and rows.loc["logits:0", "beyond"] > 0
    assert (
        pd.isna(rows.loc["final:0", "first_step_beyond"]) and rows.loc["final:0", "max_abs"] > 1e-3
    )
    base = Recording(tmp_path / "base").output_frame("logits:0")
    held = Recording(tmp_path / "held").output_frame("logits:0")
    early = ["example", "step", "unit"]
    same = base[base.step < 2].sort_values(early)["value"].to_numpy()
    assert np.array_equal(same, held[held.step < 2].sort_values(early)["value"].to_numpy())
    said = run_cli(
        "compare",
        str(tmp_path / "base"),
        str(tmp_path / "held"),
        "--out",
        str(tmp_path / "d.parquet"),
    )
    assert (
        "the model's outputs (recorded with --outputs), B - A:" in said.stdout
        and "logits:0" in said.stdout
    )
    table = pd.read_parquet(tmp_path / "d.parquet")
    assert set(table.loc[table.level == "outputs", "output"]) == {"logits:0", "final:0"}
    as_json = json.loads(
        run_cli("compare", str(tmp_path / "base"), str(tmp_path / "held"), "--json").stdout
    )
    assert {o["output"] for o in as_json["outputs"]} == {"logits:0", "final:0"}
    assert {o["output"] for o in compared(found)["outputs"]} == {"logits:0", "final:0"}


def test_an_outputs_dtype_edited_in_the_manifest_or_everywhere_is_one_line(model, inputs, tmp_path):
    """float32 edited to int32: in the manifest alone, it is not what the progress files say
    (was: believed, --round-bits' check skipping the output); everywhere, the values the
    part file holds are not whole numbers (was: read as they are, under int32)."""
    path, built = model
    run = tmp_path / "run"
    with tracer.load_model(path) as m:
        tracer.record(m, {"x": inputs}, run, outputs=("final", "predicted"))
    Recording(run).check()  # predicted:0, int64, holds whole numbers
    int32 = lambda o: o.update(dtype="int32") if o["name"] == "final:0" else None  # noqa: E731
    _edit_outputs(run, int32, progress=False)
    with pytest.raises(RecordingError) as refused:
        Recording(run)
    assert str(refused.value) == (
        f"{run}/manifest.json says output final:0's dtype is 'int32', but "
        "_progress/shard-0-of-1.json, written as its batches were, says 'float32': it was "
        "edited or damaged; ask for the recording again, or record the model again"
    )
    done = run_cli("inspect", str(run), "--check")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "says output final:0's dtype is 'int32'" in done.stderr, done.stderr

    _edit_outputs(run, int32)  # the progress files too
    part = sorted((run / "outputs" / "output=final%3A0").iterdir())[0]
    said = (
        f"{run}/outputs/output=final%3A0/{part.name} holds {len(inputs) * VOCAB} values of output "
        "final:0 that are not whole numbers, but the recording's description says it is int32"
    )
    with pytest.raises(RecordingError, match=re.escape(said)):
        Recording(run).output_frame("final:0")
    with pytest.raises(RecordingError, match=re.escape(said)):
        Recording(run).check()
    np.testing.assert_array_equal(
        Recording(run).output_frame("predicted:0").sort_values("example")["value"],
        _own(built, "predicted:0", inputs),
    )


def test_inspect_and_record_count_the_output_rows(model, inputs, tmp_path):
    path, _ = model
    done = record_x(path, inputs, tmp_path / "run", "--outputs", "final")
    assert f"{len(inputs) * VOCAB} output rows ->" in done.stdout, done.stdout
    said = run_cli("inspect", str(tmp_path / "run")).stdout
    assert f"{len(inputs) * VOCAB} output rows (final:0)" in said, said


def test_an_outputs_files_that_lose_or_repeat_rows_are_refused(model, inputs, tmp_path):
    """A part file deleted, copied in twice, or another output's moved in: one line naming the
    output, never a frame short of rows or with rows twice (nor a comparison of them)."""
    import shutil

    from recorders.read.compare import compare

    path, _ = model
    with tracer.load_model(path) as m:
        for name in ("a", "b"):
            tracer.record(
                m, {"x": inputs}, tmp_path / name, outputs=("final", "predicted"), batch_size=2
            )
    folder = tmp_path / "b" / "outputs"
    final = sorted((folder / "output=final%3A0").iterdir())
    final[1].unlink()  # examples 2 and 3 gone
    with pytest.raises(RecordingError, match="output final:0 holds 0 rows of example 2"):
        Recording(tmp_path / "b").output_frame("final:0")
    with pytest.raises(RecordingError, match="output final:0 holds 0 rows of example 2"):
        compare(Recording(tmp_path / "a"), Recording(tmp_path / "b"))
    shutil.copy(final[0], final[0].with_name("part-0000000100.parquet"))  # examples 0 and 1 twice
    shutil.copy(final[2], final[1])  # and 4 and 5, in the file named for 2 and 3
    with pytest.raises(
        RecordingError,
        match=r"part-0000000002.parquet is not a part file gatetrace wrote \(row group 0 holds "
        r"examples 4 to 5; its name and the next file's leave it examples 2 to 3\)",
    ):
        Recording(tmp_path / "b").output_frame("final:0")
    final[0].with_name("part-0000000100.parquet").unlink()
    final[1].unlink()
    moved = sorted((folder / "output=predicted%3A0").iterdir())[0]
    shutil.copy(moved, final[0])  # one row an example, where final has 6
    with pytest.raises(RecordingError, match="holds 1 rows of example 0, not 6 a step"):
        Recording(tmp_path / "b").output_frame("final:0")


def test_lengths_cut_an_output_only_along_the_cells_steps(model, inputs, tmp_path):
    """[batch, 2, units] is not a sequence of the cells' 5 steps: a length of 1 cuts the
    logits, not its second row."""
    path, built = model
    lengths = np.array([1, 5, 5, 2, 5, 5])
    np.save(tmp_path / "lengths.npy", lengths)
    done = record_x(
        path,
        inputs,
        tmp_path / "run",
        "--outputs",
        "pair,logits",
        "--lengths",
        str(tmp_path / "lengths.npy"),
    )
    assert done.returncode == 0, done.stderr
    rec = Recording(tmp_path / "run")
    assert (rec.output_frame("pair:0").groupby("example").size() == 2 * UNITS).all()
    assert (
        rec.output_frame("logits:0").groupby("example").size().tolist()
        == (lengths * VOCAB).tolist()
    )


def test_outputs_of_other_shapes_are_not_compared(model, inputs, tmp_path):
    from recorders.read.compare import compare

    path, _ = model
    with tracer.load_model(path) as m:
        tracer.record(m, {"x": inputs}, tmp_path / "a", outputs=("final",))
        tracer.record(m, {"x": inputs}, tmp_path / "b", outputs=("final",))
    _edit_outputs(tmp_path / "b", lambda o: o.update(units=7))
    with pytest.raises(SelectionError, match="output final:0 is 6 units in .* and 7 units in"):
        compare(Recording(tmp_path / "a"), Recording(tmp_path / "b"))


def _time_major(x):
    """Time-major outputs, [steps, batch, units]: static_rnn's outputs stacked on their first
    dimension (their steps fixed, [5, None, units]) and dynamic_rnn's transposed (their steps
    left open, [None, None, units])."""
    fixed = tf.reshape(x, [-1, STEPS, FEATURES])
    with v1.variable_scope("unrolled"):
        outputs, _ = v1.nn.static_rnn(
            v1.nn.rnn_cell.BasicLSTMCell(UNITS), tf.unstack(fixed, axis=1), dtype=tf.float32
        )
    tf.stack(outputs, axis=0, name="unrolled_steps")
    with v1.variable_scope("looped"):
        looped, _ = v1.nn.dynamic_rnn(v1.nn.rnn_cell.GRUCell(UNITS), x, dtype=tf.float32)
    tf.transpose(looped, [1, 0, 2], name="looped_steps")
    return [outputs[-1]]


@pytest.fixture(scope="module")
def time_major(tmp_path_factory):
    built = build(_time_major, steps=None, features=FEATURES, seed=11)
    return save(built, "checkpoint", tmp_path_factory.mktemp("time_major")), built


@pytest.mark.parametrize("examples", [STEPS, STEPS + 2])
@pytest.mark.parametrize("name", ["unrolled_steps:0", "looped_steps:0"])
def test_a_time_major_output_is_recorded_by_example_even_with_as_many_steps_as_examples(
    time_major, tmp_path, name, examples
):
    """[steps, batch, units] with 5 steps and batches of 5 (then 2): its second dimension
    holds the examples, told by running it on other batch sizes; the recording's rows are
    TensorFlow's own values, example by example."""
    path, built = time_major
    x = np.random.RandomState(3).randn(examples, STEPS, FEATURES).astype(np.float32)
    done = record_x(path, x, tmp_path / "run", "--outputs", name, "--batch-size", str(STEPS))
    assert done.returncode == 0, done.stderr
    got = Recording(tmp_path / "run").output_frame(name).sort_values(["example", "step", "unit"])
    own = _own(built, name, x)  # [steps, examples, units]
    assert own.shape == (STEPS, len(x), UNITS)
    np.testing.assert_allclose(
        got["value"].to_numpy().reshape(len(x), STEPS, UNITS), own.transpose(1, 0, 2), atol=1e-6
    )
    described = json.loads((tmp_path / "run" / "manifest.json").read_text())["outputs"][0]
    assert described["sequence"] and described.get("steps") == (
        STEPS if name.startswith("unrolled") else None
    )


def test_a_time_major_output_of_a_fixed_batch_as_long_as_its_steps_is_one_line(tmp_path):
    """A placeholder of [5, 5, 4]: the batch is 5 and so are the steps; no other batch size
    can be fed to tell the two dimensions apart, so the output is refused, nothing written."""

    def body(x):
        outputs, _ = v1.nn.static_rnn(
            v1.nn.rnn_cell.BasicLSTMCell(UNITS), tf.unstack(x, axis=1), dtype=tf.float32
        )
        tf.stack(outputs, axis=0, name="by_step")
        return [outputs[-1]]

    path = save(build(body, steps=STEPS, features=FEATURES, batch=STEPS), "checkpoint", tmp_path)
    x = np.random.RandomState(4).randn(7, STEPS, FEATURES).astype(np.float32)
    done = record_x(path, x, tmp_path / "run", "--outputs", "by_step")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert (
        "--outputs by_step:0: its first two dimensions are both 5, the batch size the model's "
        "placeholders fix, so which of them holds the examples cannot be told" in done.stderr
    )
    assert not (tmp_path / "run").exists()


def test_outputs_of_a_model_fed_no_rows_are_one_line(tmp_path):
    """Only a scalar fed (the examples are the default of an input left unfed): no batch size
    can be varied to tell which dimension of an output holds the examples, so --outputs is
    refused, nothing written."""
    from tests.conftest import Built

    graph = tf.Graph()
    with graph.as_default():
        scale = v1.placeholder(tf.float32, [], name="scale")
        examples = np.random.RandomState(5).randn(STEPS, STEPS, FEATURES).astype(np.float32)
        x = v1.placeholder_with_default(examples, [None, STEPS, FEATURES], name="x")
        outputs, _ = v1.nn.static_rnn(
            v1.nn.rnn_cell.BasicLSTMCell(UNITS), tf.unstack(x * scale, axis=1), dtype=tf.float32
        )
        tf.stack(outputs, axis=1, name="by_example")
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
    path = save(Built(graph, session, scale, [], {}), "checkpoint", tmp_path)
    with tracer.load_model(path) as m, pytest.raises(SelectionError) as refused:
        tracer.record(m, {"scale": np.float32(2)}, tmp_path / "run", outputs=("by_example",))
    assert str(refused.value).startswith(
        "--outputs by_example:0: nothing fed holds rows of examples (only scalars)"
    )
    assert not (tmp_path / "run").exists()


def test_an_output_refused_at_a_later_batch_says_what_works(model, inputs, tmp_path):
    """The fifth sequence makes the output past float32's range: the batches before it are
    recorded, the refusal says so and that --resume would stop there again, and what it
    says to do works."""
    path, _ = model
    x = inputs.copy()
    x[4:] *= 1e10
    flags = ("--batch-size", "2")
    said = (
        "; the 4 sequences recorded before are kept: record again without --outputs scaled:0, "
        "into a new folder or with --overwrite (--resume would stop at this batch again)"
    )
    for resume in ((), ("--resume",)):
        done = record_x(path, x, tmp_path / "run", "--outputs", "scaled", *flags, *resume)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "past float32's range" in done.stderr and said in done.stderr, done.stderr
    done = record_x(path, x, tmp_path / "run", "--outputs", "final", *flags, "--overwrite")
    assert done.returncode == 0, done.stderr
    assert Recording(tmp_path / "run").outputs == ["final:0"]


def test_steps_cut_an_output_along_the_cells_steps(model, inputs, tmp_path):
    """--steps 1:3 keeps steps 1 and 2 of the cells and of the logits (5 steps, as the cells),
    TensorFlow's own; [batch, 2, units] is not a sequence of the cells' steps and keeps both."""
    path, built = model
    done = record_x(path, inputs, tmp_path / "run", "--outputs", "logits,pair", "--steps", "1:3")
    assert done.returncode == 0, done.stderr
    rec = Recording(tmp_path / "run")
    logits = rec.output_frame("logits:0").sort_values(["example", "step", "unit"])
    assert sorted(set(logits["step"])) == [1, 2]
    assert sorted(set(rec.gate_frame()["step"])) == [1, 2]
    np.testing.assert_allclose(
        logits["value"].to_numpy().reshape(len(inputs), 2, VOCAB),
        _own(built, "logits:0", inputs)[:, 1:3],
        atol=1e-6,
    )
    assert sorted(set(rec.output_frame("pair:0")["step"])) == [0, 1]


def test_an_output_of_one_example_of_one_step_where_the_placeholder_fixes_one_is_recorded(
    tmp_path,
):
    """A placeholder of [1, 1, 4]: the output [1, 1, units] is one example of one step, the
    same read either way, so it is recorded (was: refused as a square output of the fixed
    batch), each example's the model's own."""

    def body(x):
        outputs, _ = v1.nn.static_rnn(
            v1.nn.rnn_cell.BasicLSTMCell(UNITS), tf.unstack(x, axis=1), dtype=tf.float32
        )
        tf.stack(outputs, axis=0, name="by_step")
        return [outputs[-1]]

    built = build(body, steps=1, features=FEATURES, batch=1)
    path = save(built, "checkpoint", tmp_path)
    x = np.random.RandomState(6).randn(3, 1, FEATURES).astype(np.float32)
    done = record_x(path, x, tmp_path / "run", "--outputs", "by_step")
    assert done.returncode == 0, done.stderr
    got = Recording(tmp_path / "run").output_frame("by_step:0").sort_values(["example", "unit"])
    own = np.concatenate([_own(built, "by_step:0", row[None]) for row in x], axis=1)
    np.testing.assert_allclose(got["value"].to_numpy().reshape(3, 1, UNITS), own.transpose(1, 0, 2))
