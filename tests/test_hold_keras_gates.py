"""`--hold` of a Keras layer's gates (LSTM, GRU with and without reset_after, SimpleRNN), of a
ConvLSTM2D's channels (every position of each), and of a cell of a stack (StackedRNNCells),
in tf-keras and Keras 3: the state a held gate makes, and every layer after it, read the
held value.

Oracle: the model rebuilt as a `keras.layers.RNN` over a cell written here from Keras'
documented equations, with the holds applied in its `call`, run by Keras itself on the same
weights (the layers above it are Keras' own, their weights copied). Its outputs carry every
gate's preactivation and activation and every state at every step; each step reads its input
position beside its input (a backward layer reads them reversed), so that `@STEPS` are input
positions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import pytest

import tracer
from recorders import Recording
from recorders.errors import SelectionError
from tests.test_keras import FRAMEWORKS, keras_module

T, FEATURES, N = 6, 3, 4
FRAME, FILTERS = (3, 4, 2), 3  # a ConvLSTM2D's frames (rows, columns, channels) and filters


@dataclass(frozen=True)
class Held:
    """One hold as the oracle applies it: `what` (a gate, `gate.pre` or a state) of `units`
    set to `value` (multiplied by it with `scale`) at the input positions [start, stop)."""

    what: str
    units: tuple[int, ...]
    value: float
    scale: bool = False
    steps: tuple[int, int] = (0, T)


def _apply(v, what: str, holds, position):
    """`v` [rows, ..., units] with each hold of `what` in it at the rows whose input position
    (`position` [rows]) it holds; a ConvLSTM's unit is a channel, held at every position."""
    import tensorflow as tf

    for x in holds:
        if x.what != what:
            continue
        columns = np.zeros(v.shape[-1], bool)
        columns[list(x.units)] = True
        now = tf.logical_and(position >= x.steps[0], position < x.steps[1])
        now = tf.reshape(now, [-1] + [1] * (len(v.shape) - 1))
        new = v * x.value if x.scale else tf.fill(tf.shape(v), tf.constant(x.value, v.dtype))
        v = tf.where(tf.logical_and(now, columns), new, v)
    return v


# One cell's step, from Keras' documentation: (x, its states, position) -> (output, new
# states, what is recorded, by label, in `labels`' order)
@dataclass(frozen=True)
class Step:
    run: Callable
    sizes: tuple[int, ...]  # its states' widths, in Keras' order
    labels: tuple[str, ...]  # what it records: `gate.pre`, `gate` and `state NAME`
    width: int  # of each


def _lstm(x, states, position, w, holds):
    """i, f, c~, o = sigmoid, sigmoid, tanh, sigmoid of x W + h U + b (Keras' blocks i, f, c, o:
    gatetrace calls c~ j); c = f c + i c~; h = o tanh(c)."""
    import tensorflow as tf

    kernel, recurrent, bias = w
    h, c = states
    z = tf.split(tf.matmul(x, kernel) + tf.matmul(h, recurrent) + bias, 4, axis=-1)
    pre = {g: _apply(v, g + ".pre", holds, position) for g, v in zip("ifjo", z, strict=True)}
    act = {g: tf.tanh(v) if g == "j" else tf.sigmoid(v) for g, v in pre.items()}
    act = {g: _apply(v, g, holds, position) for g, v in act.items()}
    c = _apply(act["f"] * c + act["i"] * act["j"], "c", holds, position)
    h = _apply(act["o"] * tf.tanh(c), "h", holds, position)
    return h, [h, c], [*pre.values(), *act.values(), h, c]


def _gru(x, states, position, w, holds, reset_after: bool):
    """z, r = sigmoid(x W + b + h U) (Keras' z: gatetrace's u); hh = tanh(x W_h + b_h +
    r * (h U_h + b_rh)) with reset_after, tanh(x W_h + b_h + (r * h) U_h) without (gatetrace's
    c); h = z h_prev + (1 - z) hh."""
    import tensorflow as tf

    kernel, recurrent, bias = w
    (h,) = states
    units = recurrent.shape[0]
    if reset_after:
        xz, xr, xh = tf.split(tf.matmul(x, kernel) + bias[0], 3, axis=-1)
        hz, hr, hh = tf.split(tf.matmul(h, recurrent) + bias[1], 3, axis=-1)
    else:
        xz, xr, xh = tf.split(tf.matmul(x, kernel) + bias, 3, axis=-1)
        hz, hr = tf.split(tf.matmul(h, recurrent[:, : 2 * units]), 2, axis=-1)
    u_pre = _apply(xz + hz, "u.pre", holds, position)
    r_pre = _apply(xr + hr, "r.pre", holds, position)
    u = _apply(tf.sigmoid(u_pre), "u", holds, position)
    r = _apply(tf.sigmoid(r_pre), "r", holds, position)
    if reset_after:
        c_pre = xh + r * hh
    else:
        c_pre = xh + tf.matmul(r * h, recurrent[:, 2 * units :])
    c_pre = _apply(c_pre, "c.pre", holds, position)
    c = _apply(tf.tanh(c_pre), "c", holds, position)
    h = _apply(u * h + (1 - u) * c, "h", holds, position)
    return h, [h], [u_pre, r_pre, c_pre, u, r, c, h]


def _simple(x, states, position, w, holds):
    """h = tanh(x W + h U + b): its one gate, h, is the new state."""
    import tensorflow as tf

    kernel, recurrent, bias = w
    (h,) = states
    pre = _apply(tf.matmul(x, kernel) + tf.matmul(h, recurrent) + bias, "h.pre", holds, position)
    act = tf.tanh(pre)
    h = _apply(act, "h", holds, position)
    return h, [h], [pre, act, h]


def _conv(x, states, position, w, holds):
    """Keras' ConvLSTM2D ("same" padding, stride 1): z = conv(x, W) + b + conv(h, U), then the
    LSTM's step, each gate's channels at every position; flat as [rows, positions * filters]."""
    import tensorflow as tf

    kernel, recurrent, bias = w
    rows, columns, channels = FRAME

    def grid(v, depth):
        return tf.reshape(v, [-1, rows, columns, depth])

    def flat(v):
        return tf.reshape(v, [-1, rows * columns * FILTERS])

    h, c = grid(states[0], FILTERS), grid(states[1], FILTERS)
    z = (
        tf.nn.conv2d(grid(x, channels), kernel, 1, "SAME")
        + bias
        + tf.nn.conv2d(h, recurrent, 1, "SAME")
    )
    pre = {
        g: _apply(v, g + ".pre", holds, position)
        for g, v in zip("ifjo", tf.split(z, 4, axis=-1), strict=True)
    }
    act = {g: tf.tanh(v) if g == "j" else tf.sigmoid(v) for g, v in pre.items()}
    act = {g: _apply(v, g, holds, position) for g, v in act.items()}
    c = _apply(act["f"] * c + act["i"] * act["j"], "c", holds, position)
    h = _apply(act["o"] * tf.tanh(c), "h", holds, position)
    out = [flat(v) for v in (*pre.values(), *act.values(), h, c)]
    return flat(h), [flat(h), flat(c)], out


def _step(kind: str, weights, holds, reset_after: bool = True) -> Step:
    w = [np.asarray(a, np.float32) for a in weights]
    if kind == "ConvLSTM2D":
        width = int(np.prod(FRAME[:2])) * FILTERS
        labels = (*(g + ".pre" for g in "ifjo"), *"ifjo", "state h", "state c")
        return Step(partial(_conv, w=w, holds=holds), (width, width), labels, width)
    units = w[1].shape[0]
    if kind == "LSTM":
        labels = (*(g + ".pre" for g in "ifjo"), *"ifjo", "state h", "state c")
        return Step(partial(_lstm, w=w, holds=holds), (units, units), labels, units)
    if kind == "GRU":
        labels = ("u.pre", "r.pre", "c.pre", "u", "r", "c", "state h")
        run = partial(_gru, w=w, holds=holds, reset_after=reset_after)
        return Step(run, (units,), labels, units)
    return Step(partial(_simple, w=w, holds=holds), (units,), ("h.pre", "h", "state h"), units)


def _oracle_rnn(keras, steps: list[Step], features: int, backwards: bool):
    """`keras.layers.RNN` over one cell running `steps` in turn (a stack: each reads the one
    before's output), its input `features` wide plus the input position; its output the last
    step's, then every step's recorded values."""
    import tensorflow as tf

    class HeldCells(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.state_size = [s for step in steps for s in step.sizes]
            self.output_size = steps[-1].width + sum(len(s.labels) * s.width for s in steps)

        def call(self, inputs, states, training=None):
            x, position = inputs[:, :features], inputs[:, features]
            at, new, kept = 0, [], []
            for step in steps:
                k = len(step.sizes)
                x, mine, recorded = step.run(x, list(states[at : at + k]), position)
                at += k
                new += mine
                kept += recorded
            return tf.concat([x, *kept], axis=-1), new

    return keras.layers.RNN(HeldCells(), return_sequences=True, go_backwards=backwards)


def _model(framework: str, kind: str, backwards=False, masked=False, reset_after=True):
    """x -> (Masking) -> lower (`kind`, 4 units; a ConvLSTM2D of 3 filters; "stack": an RNN
    over an LSTMCell of 4 and a GRUCell of 3) -> upper (LSTM of 3)."""
    keras = keras_module(framework)
    L = keras.layers
    shape = (T, *FRAME) if kind == "ConvLSTM2D" else (T, FEATURES)
    x = keras.Input(shape)
    m = L.Masking(0.0)(x) if masked else x
    if kind == "ConvLSTM2D":
        # (tf-keras' default gate activation is hard_sigmoid; Keras 3's, sigmoid)
        lower = L.ConvLSTM2D(
            FILTERS,
            (3, 3),
            padding="same",
            recurrent_activation="sigmoid",
            return_sequences=True,
            name="lower",
        )
        a = L.Reshape((T, int(np.prod(FRAME[:2])) * FILTERS))(lower(m))
    elif kind == "stack":
        cells = [L.LSTMCell(4, name="first"), L.GRUCell(3, name="second")]
        a = L.RNN(cells, return_sequences=True, go_backwards=backwards, name="lower")(m)
    else:
        extra = {"reset_after": reset_after} if kind == "GRU" else {}
        layer = getattr(L, kind)
        a = layer(4, return_sequences=True, go_backwards=backwards, name="lower", **extra)(m)
    b = L.LSTM(3, return_sequences=True, name="upper")(a)
    model = keras.Model(x, b)
    rng = np.random.RandomState(3)
    model.set_weights([rng.uniform(-1, 1, w.shape).astype(np.float32) for w in model.get_weights()])
    return model


def _inputs(kind: str, masked: bool) -> np.ndarray:
    shape = (N, T, *FRAME) if kind == "ConvLSTM2D" else (N, T, FEATURES)
    x = np.random.RandomState(1).uniform(-1, 1, shape).astype(np.float32)
    if masked:
        x[1, 4:] = 0
        x[2, :2] = 0
        x[3, 3] = 0
    return x


def _oracle(framework, model, kind, holds, backwards=False, masked=False, reset_after=True):
    """The model rebuilt with the oracle's lower layer (`holds` in it: {cell's name: [Held]}); what it
    computes on the inputs, as (each lower cell's {label: [examples, steps, width]} by input
    position, the upper layer's output), NaN where the mask skips a step."""
    keras = keras_module(framework)
    lower = model.get_layer("lower")
    if kind == "stack":
        cells = [
            (c.name, "LSTM" if "LSTM" in type(c).__name__ else "GRU") for c in lower.cell.cells
        ]
        steps = [
            _step(k, c.get_weights(), holds.get(f"lower/{name}", ()))
            for (name, k), c in zip(cells, lower.cell.cells, strict=True)
        ]
        names = [f"lower/{name}" for name, _ in cells]
    else:
        steps = [_step(kind, lower.get_weights(), holds.get("lower", ()), reset_after)]
        names = ["lower"]
    x = _inputs(kind, masked)
    flat = x.reshape(N, T, -1)
    position = np.broadcast_to(np.arange(T, dtype=np.float32)[None, :, None], (N, T, 1))
    mask = np.abs(flat).max(axis=-1) > 0
    given = keras.Input((T, flat.shape[-1] + 1))
    skip = keras.Input((T,), dtype="bool")
    out = _oracle_rnn(keras, steps, flat.shape[-1], backwards)(given, mask=skip)
    upper = keras.layers.LSTM(3, return_sequences=True)
    top = upper(out[..., : steps[-1].width], mask=skip)
    rebuilt = keras.Model([given, skip], [out, top])
    upper.set_weights(model.get_layer("upper").get_weights())
    got, above = (
        np.asarray(a) for a in rebuilt([np.concatenate([flat, position], -1), mask], training=False)
    )
    if backwards:  # the loop's order, as the layer returns it: by input position
        got = got[:, ::-1]
    cells, at = {}, steps[-1].width
    for name, step in zip(names, steps, strict=True):
        cells[name] = {}
        for label in step.labels:
            value = got[..., at : at + step.width].copy()
            value[~mask] = np.nan
            cells[name][label] = value
            at += step.width
    above = above.copy()
    above[~mask] = np.nan
    return cells, above


def _check(rec: Recording, want, above, atol=2e-5) -> None:
    """Every gate (preactivation, activation) and state of the oracle's cells, and the upper
    layer's output, as recorded."""
    for cell, labels in want.items():
        for label, value in labels.items():
            if label.startswith("state "):
                got = rec.state_array(cell, label.removeprefix("state "))
            else:
                gate, _, pre = label.partition(".")
                got = rec.gate_array(cell, gate, "preactivation" if pre else "activation")
            np.testing.assert_allclose(got, value, atol=atol, err_msg=f"{cell} {label}")
    np.testing.assert_allclose(rec.state_array("upper", "h"), above, atol=atol)


# case: (lower layer, its options, the holds as --hold takes them, as the oracle applies them)
CASES = {
    "lstm": (
        "LSTM",
        {},
        ["lower:f:1=1", "lower:i.pre:0,2=x0.5@2:", "lower:j:3=0@:4"],
        {
            "lower": [
                Held("f", (1,), 1.0),
                Held("i.pre", (0, 2), 0.5, True, (2, T)),
                Held("j", (3,), 0.0, steps=(0, 4)),
            ]
        },
    ),
    "lstm-backward-masked": (
        "LSTM",
        {"backwards": True, "masked": True},
        ["lower:o:2=0@3:", "lower:f.pre:0=-2", "lower:c:1=x0.5@1:4"],
        {
            "lower": [
                Held("o", (2,), 0.0, steps=(3, T)),
                Held("f.pre", (0,), -2.0),
                Held("c", (1,), 0.5, True, (1, 4)),
            ]
        },
    ),
    "gru": (
        "GRU",
        {},
        ["lower:r:0,1=0", "lower:u.pre:2=x0.5@2:", "lower:c:3=0.5@1"],
        {
            "lower": [
                Held("r", (0, 1), 0.0),
                Held("u.pre", (2,), 0.5, True, (2, T)),
                Held("c", (3,), 0.5, steps=(1, 2)),
            ]
        },
    ),
    "gru-reset-before": (
        "GRU",
        {"reset_after": False, "backwards": True},
        ["lower:r.pre:1=3", "lower:c.pre:0=x2@:3", "lower:u:3=1@4:"],
        {
            "lower": [
                Held("r.pre", (1,), 3.0),
                Held("c.pre", (0,), 2.0, True, (0, 3)),
                Held("u", (3,), 1.0, steps=(4, T)),
            ]
        },
    ),
    "simple-rnn": (
        "SimpleRNN",
        {},
        ["lower:h.pre:1=0@2:", "lower:h:0=x0.5"],
        {"lower": [Held("h.pre", (1,), 0.0, steps=(2, T)), Held("h", (0,), 0.5, True)]},
    ),
    "conv-lstm-2d": (
        "ConvLSTM2D",
        {},
        ["lower:f:1=1", "lower:i.pre:0=x0.5@1:", "lower:h:2=0@2:", "lower:c:0=x2@:2"],
        {
            "lower": [
                Held("f", (1,), 1.0),
                Held("i.pre", (0,), 0.5, True, (1, T)),
                Held("h", (2,), 0.0, steps=(2, T)),
                Held("c", (0,), 2.0, True, (0, 2)),
            ]
        },
    ),
    "stack": (
        "stack",
        {"masked": True},
        ["lower/first:f:1=1", "lower/second:r.pre:0=x0.5@2:", "lower/first:h:3=0@:3"],
        {
            "lower/first": [Held("f", (1,), 1.0), Held("h", (3,), 0.0, steps=(0, 3))],
            "lower/second": [Held("r.pre", (0,), 0.5, True, (2, T))],
        },
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_held_gate_is_read_by_the_state_it_makes_and_every_layer_after(framework, case, tmp_path):
    kind, options, specs, holds = CASES[case]
    model = _model(framework, kind, **options)
    x = _inputs(kind, options.get("masked", False))
    tracer.record(model, x, tmp_path / "held", holds=tuple(tracer.parse_hold(s) for s in specs))
    want, above = _oracle(framework, model, kind, holds, **options)
    _check(Recording(tmp_path / "held"), want, above)
    plain = np.asarray(model(x, training=False))  # the holds matter
    assert np.nanmax(np.abs(plain - above)) > 1e-3


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "SimpleRNN", "ConvLSTM2D", "stack"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_hold_of_nothing_records_the_plain_recording(framework, kind, tmp_path):
    """Every gate (activation and preactivation) and state of the lower layer's cells
    multiplied by 1: the lower layer recorded exactly as a plain recording records it, the
    layer above within float32 rounding (it reads the replay's outputs, not Keras' own)."""
    model = _model(framework, kind, masked=kind != "ConvLSTM2D")
    x = _inputs(kind, kind != "ConvLSTM2D")
    tracer.record(model, x, tmp_path / "plain")
    a = Recording(tmp_path / "plain")
    lower = [c for c in a.cells if c != "upper"]
    specs = [f"{c}:{g}{pre}:all=x1" for c in lower for g in a.gates(c) for pre in ("", ".pre")]
    specs += [f"{c}:{s}:all=x1" for c in lower for s in a.states(c)]
    tracer.record(model, x, tmp_path / "same", holds=tuple(tracer.parse_hold(s) for s in specs))
    b = Recording(tmp_path / "same")
    for cell in a.cells:
        pairs = [
            (a.gate_array(cell, g, column), b.gate_array(cell, g, column))
            for g in a.gates(cell)
            for column in ("preactivation", "activation")
        ]
        pairs += [(a.state_array(cell, s), b.state_array(cell, s)) for s in a.states(cell)]
        for p, q in pairs:
            if cell == "upper":
                np.testing.assert_allclose(p, q, atol=1e-6)
            else:
                np.testing.assert_array_equal(p, q)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_held_layer_holds_when_only_the_layers_after_it_are_recorded(framework, tmp_path):
    """The held layer runs held whether or not its cells are recorded (`--cells`)."""
    model = _model(framework, "LSTM")
    x = _inputs("LSTM", False)
    tracer.record(
        model,
        x,
        tmp_path / "held",
        holds=(tracer.parse_hold("lower:h:1=0"),),
        selection=tracer.Selection(cells=("upper",)),
    )
    _, above = _oracle(framework, model, "LSTM", {"lower": [Held("h", (1,), 0.0)]})
    rec = Recording(tmp_path / "held")
    assert list(rec.cells) == ["upper"]
    np.testing.assert_allclose(rec.state_array("upper", "h"), above, atol=2e-5)


def test_a_conv_lstm_channel_at_its_mean_is_held_at_its_mean_over_every_position(tmp_path):
    model = _model("keras3", "ConvLSTM2D")
    x = _inputs("ConvLSTM2D", False)
    tracer.record(model, x, tmp_path / "plain")
    base = Recording(tmp_path / "plain")
    (hold,) = tracer.holds_at_means([tracer.parse_hold("lower:f:1=mean")], base)
    # unit = position * filters + filter: channel 1 is every FILTERS-th unit from 1
    want = base.gate_array("lower", "f").astype(np.float64)[..., 1::FILTERS].mean()
    assert (hold.cell, hold.what, hold.units, hold.mean) == ("lower", "f", (1,), False)
    assert abs(hold.value - want) < 1e-6


@pytest.mark.parametrize(
    ("kind", "spec", "said"),
    [
        ("ConvLSTM2D", "lower:h:3=0", "lower's h has 3 channels (0 to 2); found unit 3"),
        ("GRU", "lower:f:0=1", "lower (GRU) has states h and gates u, r, c"),
        ("LSTM", "lower:c.pre:0=1", "lower (LSTM) has states c, h and gates i, f, j, o"),
    ],
)
def test_what_a_keras_layer_does_not_compute_is_one_line(kind, spec, said, tmp_path):
    model = _model("tf-keras", kind)
    with pytest.raises(SelectionError, match=said.replace("(", r"\(").replace(")", r"\)")):
        tracer.record(
            model, _inputs(kind, False), tmp_path / "run", holds=(tracer.parse_hold(spec),)
        )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "case", ["1d-valid-stride-backward-last", "2d-channels-first-dilated", "3d-same"]
)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_held_conv_lstm_of_any_rank_and_layout_returns_what_the_layer_would(
    framework, case, tmp_path
):
    """Channel 0 of h ablated at every position: the layer above, Keras' own LSTM, run here on
    the held layer's recorded h laid out as the layer returns it (channels first or last, every
    step or the last, loop order), reads what the recording says it read."""
    from tests.test_conv_lstm import CASES as CONV

    keras = keras_module(framework)
    kind, kwargs, shape = CONV[case]
    kwargs = {"return_sequences": True, **kwargs}
    x = keras.Input((T, *shape))
    conv = getattr(keras.layers, kind)(name="lower", **kwargs)
    steps = T if kwargs["return_sequences"] else 1
    a = keras.layers.Reshape((steps, -1))(conv(x))
    model = keras.Model(x, keras.layers.LSTM(3, return_sequences=True, name="upper")(a))
    rng = np.random.RandomState(3)
    model.set_weights([rng.uniform(-1, 1, w.shape).astype(np.float32) for w in model.get_weights()])
    frames = np.random.RandomState(7).uniform(-1, 1, (3, T, *shape)).astype(np.float32)
    tracer.record(model, frames, tmp_path / "held", holds=(tracer.parse_hold("lower:h:0=0"),))
    rec = Recording(tmp_path / "held")
    h = rec.state_array("lower", "h")  # [examples, positions, unit = position * filters + filter]
    filters = conv.filters
    assert (h[..., 0::filters] == 0).all() and np.abs(h[..., 1::filters]).max() > 0.01
    positions = rec.cell("lower")["conv"]["positions"]
    h = h.reshape(*h.shape[:2], *positions, filters)
    if kwargs.get("data_format") == "channels_first":
        h = np.moveaxis(h, -1, 2)
    if kwargs.get("go_backwards"):  # the loop's order, as the layer returns it
        h = h[:, ::-1]
    if not kwargs["return_sequences"]:
        h = h[:, -1:]
    given = h.reshape(len(h), steps, -1)
    upper = keras.layers.LSTM(3, return_sequences=True)
    upper(given)  # (built, then given the model's weights)
    upper.set_weights(model.get_layer("upper").get_weights())
    above = np.asarray(upper(given))
    np.testing.assert_allclose(rec.state_array("upper", "h"), above, atol=2e-5)
    plain = np.asarray(model(frames, training=False))
    assert np.abs(plain - above).max() > 1e-3  # the hold matters
