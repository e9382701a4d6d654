"""`--hold` in Keras models (tf-keras and Keras 3): a held layer returns its cell's replay with
the hold in it, which the layers after it read. Oracle: the same model with the held unit's rows
zeroed in every matrix that reads its output (its own recurrent kernel, the next layer's kernel),
run by Keras itself."""

from __future__ import annotations

import numpy as np
import pytest

import tracer
from recorders import Recording
from recorders.errors import SelectionError
from tests.test_keras import FRAMEWORKS, keras_module

T, FEATURES = 6, 3


def _model(framework: str, kind: str, backwards: bool = False):
    keras = keras_module(framework)
    layer = getattr(keras.layers, kind)
    x = keras.Input((T, FEATURES))
    lower = layer(4, return_sequences=True, go_backwards=backwards, name="lower")(x)
    upper = layer(3, return_sequences=True, name="upper")(lower)
    model = keras.Model(x, [lower, upper])
    rng = np.random.RandomState(3)
    model.set_weights([rng.uniform(-1, 1, w.shape).astype(np.float32) for w in model.get_weights()])
    return model


def _edited(model, unit: int):
    """The model whose lower layer's output unit `unit` reaches nothing: its row of the lower
    layer's recurrent kernel and of the upper layer's kernel zeroed."""
    lower, upper = model.get_layer("lower"), model.get_layer("upper")
    k, r, b = lower.get_weights()[:3]
    r = r.copy()
    r[unit] = 0
    lower.set_weights([k, r, b])
    k, r, b = upper.get_weights()[:3]
    k = k.copy()
    k[unit] = 0
    upper.set_weights([k, r, b])
    return model


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize(
    ("kind", "backwards"), [("LSTM", False), ("GRU", False), ("SimpleRNN", False), ("LSTM", True)]
)
def test_a_keras_layers_h_ablated_is_the_model_whose_weights_no_longer_read_it(
    framework, kind, backwards, tmp_path
):
    x = np.random.RandomState(1).uniform(-1, 1, (5, T, FEATURES)).astype(np.float32)
    model = _model(framework, kind, backwards)
    tracer.record(model, x, tmp_path / "held", holds=(tracer.parse_hold("lower:h:1=0"),))
    tracer.record(model, x, tmp_path / "plain")
    _, upper = _edited(model, 1)(x, training=False)
    rec = Recording(tmp_path / "held")
    np.testing.assert_allclose(rec.state_array("upper", "h"), np.asarray(upper), atol=2e-6)
    assert (rec.state_array("lower", "h")[..., 1] == 0).all()
    # the held layer's values are the replay it returned, not checked against what it returned
    from recorders.read.wording import origin

    assert origin(rec.cell("lower")).label == "replayed with holds"
    assert "returned in place of what it computed" in origin(rec.cell("lower")).words
    assert origin(rec.cell("upper")).label == "replayed"  # checked against its outputs, as ever
    assert origin(Recording(tmp_path / "plain").cell("lower")).label == "replayed"
    plain = Recording(tmp_path / "plain").state_array("upper", "h")
    assert np.abs(plain - np.asarray(upper)).max() > 1e-3  # the hold matters


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_keras_lstms_c_held_reaches_its_h_through_the_output_gate(framework, tmp_path):
    """Oracle: Keras' LSTM equations written in numpy from its documentation, with c of unit 2
    halved from step 3 on: i, f, c~, o = sigmoid, sigmoid, tanh, sigmoid of x W + h U + b;
    c = f c + i c~; h = o tanh(c)."""
    x = np.random.RandomState(2).uniform(-1, 1, (4, T, FEATURES)).astype(np.float32)
    model = _model(framework, "LSTM")
    tracer.record(model, x, tmp_path / "held", holds=(tracer.parse_hold("lower:c:2=x0.5@3:"),))
    kernel, recurrent, bias = (
        np.asarray(w, np.float64) for w in model.get_layer("lower").get_weights()
    )
    h = c = np.zeros((len(x), 4))
    hs = []
    for t in range(T):
        z = x[:, t] @ kernel + h @ recurrent + bias
        i, f, g, o = np.split(z, 4, axis=1)
        sig = 1 / (1 + np.exp(-np.stack([i, f, o])))
        c = sig[1] * c + sig[0] * np.tanh(g)
        if t >= 3:
            c[:, 2] *= 0.5
        h = sig[2] * np.tanh(c)
        hs.append(h)
    rec = Recording(tmp_path / "held")
    np.testing.assert_allclose(rec.state_array("lower", "h"), np.stack(hs, axis=1), atol=2e-6)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_keras_hold_of_nothing_records_the_plain_recording(framework, tmp_path):
    """The held layer's values are its replay's, as a plain recording's are; the layers above
    read that replay instead of Keras' own output, equal to it within float32 rounding."""
    x = np.random.RandomState(1).uniform(-1, 1, (5, T, FEATURES)).astype(np.float32)
    model = _model(framework, "LSTM")
    tracer.record(model, x, tmp_path / "plain")
    tracer.record(model, x, tmp_path / "same", holds=(tracer.parse_hold("lower:h:all=x1"),))
    a, b = Recording(tmp_path / "plain"), Recording(tmp_path / "same")
    for cell, exact in (("lower", True), ("upper", False)):
        arrays = [(a.gate_array(cell, g), b.gate_array(cell, g)) for g in a.gates(cell)]
        arrays.append((a.state_array(cell, "h"), b.state_array(cell, "h")))
        for p, q in arrays:
            if exact:
                assert np.array_equal(p, q)
            else:
                np.testing.assert_allclose(p, q, atol=1e-6)


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("lower:h:4=0", "has 4 units (0 to 3); found unit 4"),
        ("lower:h:0=0@6:", "holds no step of lower, whose steps are 0 to 5"),
    ],
)
def test_what_a_keras_layer_cannot_hold_is_one_line(spec, said, tmp_path):
    model = _model("tf-keras", "LSTM")
    x = np.zeros((2, T, FEATURES), np.float32)
    with pytest.raises(SelectionError, match=said.replace("(", r"\(").replace(")", r"\)")):
        tracer.record(model, x, tmp_path / "run", holds=(tracer.parse_hold(spec),))
    assert not (tmp_path / "run").exists()
