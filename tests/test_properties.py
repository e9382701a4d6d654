"""Property test: for random cells, sizes, steps, batch sizes and scopes, the recording equals numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracer
from tests.conftest import R, build, read_gates, read_state
from tracer._tf import tf, v1

TOL = 1e-5


@st.composite
def setups(draw):
    """A cell (kind, constructor arguments, the reference's parameters) and the data to run it on."""
    kind = draw(st.sampled_from(["BasicLSTMCell", "LSTMCell", "GRUCell", "BasicRNNCell"]))
    units = draw(st.integers(1, 5))
    params: dict = {}
    if kind == "BasicLSTMCell":
        params["forget_bias"] = draw(st.floats(-1, 2, allow_nan=False).map(lambda f: round(f, 2)))

        def make():
            return R.BasicLSTMCell(units, forget_bias=params["forget_bias"])
    elif kind == "LSTMCell":
        peep = draw(st.booleans())
        # num_proj == units is not recognised
        proj = draw(st.sampled_from([None] + [p for p in range(1, 4) if p != units]))
        clip = draw(st.sampled_from([None, 0.5]))
        params.update(forget_bias=1.0, cell_clip=clip, proj_clip=0.3 if proj else None)

        def make():
            return R.LSTMCell(
                units,
                use_peepholes=peep,
                num_proj=proj,
                cell_clip=clip,
                proj_clip=params["proj_clip"],
            )
    else:
        params["activation"] = draw(st.sampled_from(["tanh", "relu"]))
        cls = R.GRUCell if kind == "GRUCell" else R.BasicRNNCell

        def make():
            return cls(units, activation=getattr(tf.nn, params["activation"]))

    scope = draw(st.sampled_from([None, "enc", "model/encoder_1"]))
    steps, features = draw(st.integers(1, 6)), draw(st.integers(1, 4))
    sequences, batch_size = draw(st.integers(1, 9)), draw(st.integers(1, 7))
    seed = draw(st.integers(0, 2**16))
    return kind, make, params, scope, steps, features, sequences, batch_size, seed


@pytest.mark.e2e
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(setup=setups())
def test_random_cells_record_what_numpy_computes(setup, tmp_path_factory):
    kind, make, params, scope, steps, features, sequences, batch_size, seed = setup

    def body(x):
        outputs, _ = v1.nn.static_rnn(make(), tf.unstack(x, axis=1), dtype=tf.float32, scope=scope)
        return [outputs[-1]]

    built = build(body, steps=steps, features=features, seed=seed)
    ((cell_scope, weights),) = built.weights.items()
    x = np.random.RandomState(seed).randn(sequences, steps, features).astype(np.float32)
    out = tmp_path_factory.mktemp("prop") / "out"
    summary = tracer.record(
        tracer.from_session(built.session), {"x": x}, out, batch_size=batch_size
    )
    (cell,) = summary["cells"]
    assert (cell["name"], cell["kind"], cell["steps"], summary["examples"]) == (
        cell_scope,
        kind,
        steps,
        sequences,
    )
    expected = tracer.run_cell(kind, weights, x, **params)
    pre, act = read_gates(out, cell_scope, tuple(cell["gates"]))
    np.testing.assert_allclose(pre, expected["preactivation"], atol=TOL, rtol=0)
    np.testing.assert_allclose(act, expected["activation"], atol=TOL, rtol=0)
    for state in cell["states"]:
        np.testing.assert_allclose(
            read_state(out, cell_scope, state), expected["states"][state], atol=TOL, rtol=0
        )
