"""static_rnn and static_bidirectional_rnn given sequence_length, the way TF 1.x scripts feed
sequences of different lengths: TensorFlow runs each step inside two conditionals
(`_rnn_step`: `t >= max(lengths) ? copy the state through : cell, then t < min(lengths) ? new :
select(t >= lengths, state, new)`), with control flow v1 (`Switch`/`Merge`) or v2 (`If`).
gatetrace draws those conditionals straight when it loads the model (`tracer.load.conds`), and
finds and fetches the steps as unrolled ones.

The oracle is TensorFlow's own run of the original graph, never the rewritten one (in a
session made as gatetrace makes its own, Grappler's remapper off: it fuses ops, which changes
the last bits of a GRU's state, `tracer.load.loaded.FETCHING`): the gate ops (each step's
`Split`, and a GRU's `Sigmoid` and candidate `Tanh`, in the order TensorFlow made them)
fetched from the original control-flow-v1 graph (for a v2 model, its twin: the same cells and
weights drawn with control flow v1, where they can be fetched, whose outputs are checked to be
the v2 model's bit for bit), and the model's outputs at every position and its final states,
fetched from the original model itself.

Past a sequence's length the cell still runs in TensorFlow at every step below the batch's
longest length (on the state copied through, its result thrown away) and not at all past
that; the model's output there is zeros, and the state the graph's next step reads is the
state at the sequence's last step, copied through (its final state). The recording holds no
row past a length (NaN in a recording's array), as for dynamic_rnn, and each state it holds
at a sequence's last step is the model's final state.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from recorders import Recording
from tests.conftest import R, build, run_cli, save
from tests.test_replay import control_flow
from tracer._tf import tf, v1
from tracer.load.loaded import FETCHING

T, FEATURES, U = 5, 4, 3
# two batches (--batch-size 6): the longest of the first runs every step, the second's
# longest (3) leaves the last two steps to the conditional that copies everything through
LENGTHS = np.array([5, 3, 0, 1, 5, 2, 2, 3, 0, 1, 1, 2], np.int32)
X = np.random.RandomState(7).randn(len(LENGTHS), T, FEATURES).astype(np.float32)
BATCH = 6

# each cell kind: its layers (the scope of each, below the RNN's, its states) and forget biases
CELLS = {
    "BasicLSTMCell": (
        lambda: R.BasicLSTMCell(U, forget_bias=0.7),
        [("basic_lstm_cell", ("c", "h"), 0.7)],
    ),
    "LSTMCell": (lambda: R.LSTMCell(U), [("lstm_cell", ("c", "h"), 1.0)]),
    "GRUCell": (lambda: R.GRUCell(U), [("gru_cell", ("h",), None)]),
    "MultiRNNCell": (
        lambda: R.MultiRNNCell([R.LSTMCell(U), R.GRUCell(U)]),
        [
            ("multi_rnn_cell/cell_0/lstm_cell", ("c", "h"), 1.0),
            ("multi_rnn_cell/cell_1/gru_cell", ("h",), None),
        ],
    ),
}


def _model(cf: str, kind: str, bidirectional: bool, train: bool = False):
    """The model (`build`: seed 0, so the same weights whatever its control flow): outputs at
    every position, then each direction's final states, layer by layer; with `train`, Adam's
    training ops too (their gradients read the conditionals' intermediates)."""
    make = CELLS[kind][0]

    def body(x):
        lengths = v1.placeholder(tf.int32, [None], name="len")
        steps = tf.unstack(x, axis=1)
        if bidirectional:
            outputs, fw, bw = v1.nn.static_bidirectional_rnn(
                make(), make(), steps, sequence_length=lengths, dtype=tf.float32
            )
            states = [*tf.nest.flatten(fw), *tf.nest.flatten(bw)]
        else:
            outputs, state = v1.nn.static_rnn(
                make(), steps, sequence_length=lengths, dtype=tf.float32
            )
            states = tf.nest.flatten(state)
        if train:
            v1.train.AdamOptimizer(0.01).minimize(tf.reduce_sum(outputs[-1]))
        return [*outputs, *states]

    with control_flow(cf):
        return build(body, steps=T, features=FEATURES)


def _original_v1(built) -> tuple[tf.Graph, v1.Session]:
    """The control-flow-v1 graph as TensorFlow drew it, frozen and imported as it is (inside
    TensorFlow's own session its conditionals' ops are not fetchable)."""
    frozen = v1.graph_util.convert_variables_to_constants(
        built.session, built.graph.as_graph_def(), built.output_ops()
    )
    graph = tf.Graph()
    with graph.as_default():
        tf.import_graph_def(frozen, name="")
    return graph, v1.Session(graph=graph, config=FETCHING)


def _own(built, batches: list[slice]) -> list[list[np.ndarray]]:
    """The model's outputs and final states for each batch of examples, from its own graph."""
    session = v1.Session(graph=built.graph, config=FETCHING)
    with built.graph.as_default():
        for variable in v1.global_variables():
            variable.load(built.session.run(variable), session)
    names = [t.name for t in built.outputs]
    with session:
        return [session.run(names, {built.inputs: X[b], "len:0": LENGTHS[b]}) for b in batches]


def _ops(graph: tf.Graph, prefix: str, layer: str, op_type: str) -> list[tf.Operation]:
    """A layer's ops of one type, in the order TensorFlow made them: one a step."""
    return [
        op
        for op in graph.get_operations()
        if op.type == op_type and op.name.startswith(prefix) and f"/{layer}/" in op.name
    ]


def _by_position(steps: list[np.ndarray], rows: slice, backward: bool, out: np.ndarray) -> None:
    """Put each step's [examples, units] values of the examples `rows` at the input position it
    read (step k of an example of length n: position k, or n - 1 - k reading backward), for
    the steps within each example's length."""
    for k, value in enumerate(steps):
        for e, n in enumerate(LENGTHS[rows]):
            if k < n:
                out[rows.start + e, n - 1 - k if backward else k] = value[e]


def _oracle_gates(graph, session, prefix: str, layer: str, backward: bool) -> dict[str, list]:
    """Per gate, TensorFlow's [preactivation, activation] [examples, positions, units] (NaN past
    each length; an LSTM's activation None), from the gate ops of the steps that ran in each
    batch (below its longest length: TensorFlow has no value past it): an LSTM's Split(4) (i,
    j, f, o); a GRU's Split(2) of its gates' Sigmoid (r, u) and that Sigmoid's input, its
    candidate's Tanh (c)."""
    gru = "gru" in layer
    grids = {g: [np.full(X.shape[:2] + (U,), np.nan) for _ in range(2)] for g in "ruc"}
    gates = grids if gru else {g: [np.full(X.shape[:2] + (U,), np.nan), None] for g in "ijfo"}
    for rows in (slice(0, BATCH), slice(BATCH, 2 * BATCH)):
        feeds = {"x:0": X[rows], "len:0": LENGTHS[rows]}
        ran = int(LENGTHS[rows].max())
        splits = [op.outputs for op in _ops(graph, prefix, layer, "Split")[:ran]]
        if not gru:
            for g, values in zip(
                "ijfo", zip(*session.run(splits, feeds), strict=True), strict=True
            ):
                _by_position(values, rows, backward, gates[g][0])
            continue
        sigmoid, tanh = (_ops(graph, prefix, layer, t)[:ran] for t in ("Sigmoid", "Tanh"))
        r_u, gates_in, c_in, c_out = session.run(
            [
                splits,
                [op.inputs[0] for op in sigmoid],
                [op.inputs[0] for op in tanh],
                [op.outputs[0] for op in tanh],
            ],
            feeds,
        )
        for k, g in enumerate("ru"):
            _by_position([v[:, k * U : (k + 1) * U] for v in gates_in], rows, backward, gates[g][0])
            _by_position([v[k] for v in r_u], rows, backward, gates[g][1])
        _by_position(c_in, rows, backward, gates["c"][0])
        _by_position(c_out, rows, backward, gates["c"][1])
    return gates


def _lstm_activation(gate: str, pre: np.ndarray, forget_bias: float) -> np.ndarray:
    """LSTMCell's and BasicLSTMCell's gates, as TensorFlow documents them."""
    x = pre.astype(np.float64) + (forget_bias if gate == "f" else 0.0)
    return np.tanh(x) if gate == "j" else 1 / (1 + np.exp(-x))


CASES = [
    (cf, kind, bidirectional, "checkpoint")
    for cf in ("v1", "v2")
    for kind in CELLS
    for bidirectional in (False, True)
]
CASES += [(cf, "MultiRNNCell", True, "frozen") for cf in ("v1", "v2")]


@pytest.mark.parametrize("cf, kind, bidirectional, fmt", CASES)
def test_static_rnn_with_sequence_length_records_what_tensorflow_computes(
    cf, kind, bidirectional, fmt, tmp_path
):
    built = _model(cf, kind, bidirectional)
    twin = built if cf == "v1" else _model("v1", kind, bidirectional)
    graph, session = _original_v1(twin)
    batches = [slice(0, BATCH), slice(BATCH, 2 * BATCH)]
    own = _own(built, batches)  # the model's outputs and final states, batch by batch
    if twin is not built:  # the twin is the same model
        for values, same in zip(own, _own(twin, batches), strict=True):
            assert all(np.array_equal(p, q) for p, q in zip(values, same, strict=True))
    (tmp_path / "model").mkdir()
    path = save(built, fmt, tmp_path / "model")
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "len.npy", LENGTHS)
    feeds = ["--feed", f"x={tmp_path / 'x.npy'}", "--feed", f"len={tmp_path / 'len.npy'}"]
    out = ["--out", str(tmp_path / "rec"), "--quiet", "--batch-size", str(BATCH)]
    done = run_cli("record", path, *feeds, *out)
    assert done.returncode == 0, done.stderr
    rec = Recording(tmp_path / "rec")
    layers = CELLS[kind][1]
    directions = ("fw", "bw") if bidirectional else ("fw",)
    prefixes = {d: f"bidirectional_rnn/{d}/" if bidirectional else "rnn/" for d in directions}
    names = [prefixes[d] + layer for d in directions for layer, _, _ in layers]
    assert sorted(rec.cells) == sorted(names)
    assert {c["name"]: c["path"] for c in rec.manifest["cells"]} == dict.fromkeys(names, "fetch")
    final = T  # where each direction's final states start among the model's outputs
    for d in directions:
        backward = d == "bw"
        for depth, (layer, states, forget_bias) in enumerate(layers):
            cell = prefixes[d] + layer
            # every gate at every position within each length is TensorFlow's; none past it
            oracle = _oracle_gates(graph, session, prefixes[d], layer, backward)
            assert sorted(rec.gates(cell)) == sorted(oracle)
            for gate, (pre, act) in oracle.items():
                np.testing.assert_array_equal(rec.gate_array(cell, gate, "preactivation"), pre)
                got = rec.gate_array(cell, gate, "activation")
                if act is None:
                    want = _lstm_activation(gate, pre, forget_bias)
                    np.testing.assert_allclose(got, want, atol=1e-6, rtol=0, equal_nan=True)
                else:
                    np.testing.assert_array_equal(got, act)
            # every state at a sequence's last step is the model's final state, which it copies
            # through past the length; the top layer's h at each position its output there
            for state in states:
                got = rec.state_array(cell, state)
                assert np.isnan(got[np.arange(T)[None, :] >= LENGTHS[:, None]]).all()
                for rows, values in zip(batches, own, strict=True):
                    for e, n in enumerate(LENGTHS[rows]):
                        want = values[final][e]
                        if n == 0:  # the zero state, copied through
                            assert not want.any()
                            continue
                        last = 0 if backward else n - 1
                        np.testing.assert_array_equal(got[rows.start + e, last], want)
                        if state == "h" and depth == len(layers) - 1:
                            at = slice(U, None) if backward else slice(0, U)
                            output = np.stack([values[p][e, at] for p in range(n)])
                            np.testing.assert_array_equal(got[rows.start + e, :n], output)
                final += 1


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("cf", ["v1", "v2"])
def test_the_model_loaded_computes_what_the_original_computes_bit_for_bit(cf, train, tmp_path):
    """The conditionals drawn straight: every output and final state the same bit for bit,
    for a batch whose longest sequence runs every step and one whose longest leaves steps
    to the conditional that copies everything through, in a training graph too (control flow
    v2 keeps an If op for the intermediates its gradient reads); inspect says what was done."""
    from tracer.load.model import load_model

    built = _model(cf, "MultiRNNCell", True, train)
    (tmp_path / "model").mkdir()
    path = save(built, "checkpoint", tmp_path / "model")
    names = [t.name for t in built.outputs]
    batches = [slice(0, BATCH), slice(BATCH, 2 * BATCH)]
    with load_model(path) as model:
        assert any("drawn straight" in note for note in model.notes)
        behind, todo = set(), [model.graph.get_tensor_by_name(n).op for n in names]
        while todo:  # every op the outputs are computed from: no conditional left
            op = todo.pop()
            if op.name not in behind:
                behind.add(op.name)
                todo += [t.op for t in op.inputs] + list(op.control_inputs)
        types = {model.graph.get_operation_by_name(n).type for n in behind}
        assert "SelectV2" in types and not types & {"If", "StatelessIf", "Switch", "Merge"}
        for rows, theirs in zip(batches, _own(built, batches), strict=True):
            ours = model.session.run(names, {"x:0": X[rows], "len:0": LENGTHS[rows]})
            assert all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))
    done = run_cli("inspect", path, "--json")
    assert done.returncode == 0, done.stderr
    cells = {c["name"]: c for c in json.loads(done.stdout)["cells"]}
    fw, bw = (cells[f"bidirectional_rnn/{d}/multi_rnn_cell/cell_0/lstm_cell"] for d in ("fw", "bw"))
    assert fw["lengths"] == bw["lengths"] == "len:0" and fw["path"] == "fetch"
    assert "reverse_lengths" not in fw and bw["reverse_lengths"] == "len:0"
    assert (fw["direction"], bw["direction"]) == ("forward", "backward")


@pytest.mark.parametrize("cf", ["v1", "v2"])
def test_conditionals_whose_branches_draw_random_numbers_are_left_and_refused_in_one_line(
    cf, tmp_path
):
    """A dropout inside the step draws random numbers: computing the branch not taken would
    draw others, so the conditionals stay, and the model is refused saying why."""

    def body(x):
        lengths = v1.placeholder(tf.int32, [None], name="len")
        cell = R.DropoutWrapper(R.LSTMCell(U), output_keep_prob=0.5)
        outputs, _ = v1.nn.static_rnn(
            cell, tf.unstack(x, axis=1), sequence_length=lengths, dtype=tf.float32
        )
        return [outputs[-1]]

    with control_flow(cf):
        built = build(body, steps=T, features=FEATURES)
    (tmp_path / "model").mkdir()
    done = run_cli("inspect", save(built, "checkpoint", tmp_path / "model"))
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr.startswith("gatetrace: error: no RNN cell found")
    assert "inside conditionals" in done.stderr and "stateful op" in done.stderr


@pytest.mark.parametrize("cf", ["v1", "v2"])
def test_a_conditional_of_another_kind_is_left_as_it_is(cf):
    from tracer.load.conds import straighten

    with control_flow(cf):
        graph = tf.Graph()
        with graph.as_default():
            x = v1.placeholder(tf.float32, [None, 4], name="x")
            tf.identity(tf.cond(tf.reduce_sum(x) > 0, lambda: x * 2, lambda: x - 1), name="y")
    graph_def = graph.as_graph_def()
    drawn, count = straighten(graph_def)
    assert count == 0 and drawn == graph_def


def test_steps_keep_the_same_input_positions_of_either_half(tmp_path):
    """--steps 1:4 keeps input positions 1 to 3 of both halves: the backward half's steps are
    put in input order (each example's own) before the window is cut, as the whole recording
    has them. A hold at some steps of the backward half is refused in one line: a step is not
    one input position for every example."""
    built = _model("v2", "GRUCell", True)
    (tmp_path / "model").mkdir()
    path = save(built, "checkpoint", tmp_path / "model")
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "len.npy", LENGTHS)
    feeds = ["--feed", f"x={tmp_path / 'x.npy'}", "--feed", f"len={tmp_path / 'len.npy'}"]
    for name, flags in (("whole", []), ("window", ["--steps", "1:4"])):
        out = ["--out", str(tmp_path / name), "--quiet", "--batch-size", str(BATCH)]
        done = run_cli("record", path, *feeds, *out, *flags)
        assert done.returncode == 0, done.stderr
    whole, window = Recording(tmp_path / "whole"), Recording(tmp_path / "window")
    for cell in whole.cells:
        frame = window.state_frame([cell], ["h"])
        assert sorted(frame["step"].unique()) == [1, 2, 3]
        for gate in whole.gates(cell):
            a, b = (r.gate_array(cell, gate, "preactivation") for r in (whole, window))
            np.testing.assert_array_equal(b, a[:, 1:4])
        np.testing.assert_array_equal(
            window.state_array(cell, "h"), whole.state_array(cell, "h")[:, 1:4]
        )
    held = "bidirectional_rnn/bw/gru_cell:h:0=0@1:3"
    out = ["--out", str(tmp_path / "held"), "--quiet"]
    done = run_cli("record", path, *feeds, *out, "--hold", held)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "reads its input reversed within each sequence's length" in done.stderr
