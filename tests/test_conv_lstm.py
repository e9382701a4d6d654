"""Keras' ConvLSTM1D, ConvLSTM2D and ConvLSTM3D layers (tf-keras and Keras 3): every gate and
state at every step, position and filter, checked against a float64 numpy recomputation that
convolves by definition (a sum over the kernel's taps at each position, no patches), and the
recording read back by position and filter with pandas and DuckDB, as docs/recordings.md shows.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

import tracer
from recorders import Recording
from tests.conftest import run_cli
from tests.test_keras import FRAMEWORKS, keras_module, randomise

T = 4
ROOT = Path(__file__).resolve().parent.parent

# name: (layer class, its arguments, the input's shape after the steps)
CASES = {
    "2d-same": ("ConvLSTM2D", {"filters": 3, "kernel_size": (3, 3), "padding": "same"}, (5, 6, 2)),
    "1d-valid-stride-backward-last": (
        "ConvLSTM1D",
        {
            "filters": 2,
            "kernel_size": 3,
            "strides": 2,
            "padding": "valid",
            "go_backwards": True,
            "return_sequences": False,
        },
        (9, 3),
    ),
    "2d-channels-first-dilated": (
        "ConvLSTM2D",
        {
            "filters": 2,
            "kernel_size": (2, 2),
            "dilation_rate": 2,
            "padding": "same",
            "data_format": "channels_first",
            "recurrent_activation": "hard_sigmoid",
        },
        (2, 5, 4),
    ),
    "3d-same": (
        "ConvLSTM3D",
        {"filters": 2, "kernel_size": (2, 2, 2), "padding": "same"},
        (3, 4, 3, 1),
    ),
}


def conv_model(framework: str, case: str):
    keras = keras_module(framework)
    kind, kwargs, shape = CASES[case]
    x = keras.Input((T, *shape), name="frames")
    kwargs = {"return_sequences": True, **kwargs}
    y = getattr(keras.layers, kind)(name="conv_lstm", **kwargs)(x)
    model = keras.Model(x, y)
    randomise(model, seed=3)
    return model


def conv(x: np.ndarray, w: np.ndarray, strides, padding: str, dilation) -> np.ndarray:
    """x [n, *spatial, channels] (*) w [*taps, channels, out], float64, by definition: at each
    output position, the sum over the kernel's taps of the input there (zero outside), with
    TensorFlow's "same" padding (the odd pixel at the end)."""
    rank = x.ndim - 2
    size, taps = x.shape[1:-1], w.shape[:rank]
    if padding == "same":
        out = [-(-s // st) for s, st in zip(size, strides, strict=True)]
        before = [
            max((o - 1) * st + (k - 1) * d + 1 - s, 0) // 2
            for o, st, k, d, s in zip(out, strides, taps, dilation, size, strict=True)
        ]
    else:
        out = [
            -(-(s - (k - 1) * d) // st)
            for s, k, d, st in zip(size, taps, dilation, strides, strict=True)
        ]
        before = [0] * rank
    y = np.zeros((x.shape[0], *out, w.shape[-1]))
    for pos in itertools.product(*map(range, out)):
        for tap in itertools.product(*map(range, taps)):
            at = [
                p * st - b + t * d
                for p, st, b, t, d in zip(pos, strides, before, tap, dilation, strict=True)
            ]
            if all(0 <= a < s for a, s in zip(at, size, strict=True)):
                y[(slice(None), *pos)] += x[(slice(None), *at)] @ w[tap]
    return y


def reference(layer, x: np.ndarray, framework: str):
    """The layer's gates (i, f, j, o: preactivation, activation) and states, [n, steps, *positions,
    filters] each, in float64, by input position."""
    cell = layer.cell
    rank = int(cell.rank)
    x = x.astype(np.float64)
    if cell.data_format == "channels_first":
        x = np.moveaxis(x, 2, -1)
    if layer.go_backwards:
        x = x[:, ::-1]
    k, r, b = (np.asarray(v, np.float64) for v in (cell.kernel, cell.recurrent_kernel, cell.bias))
    ones = (1,) * rank

    def gate_act(v):
        if cell.recurrent_activation.__name__ == "hard_sigmoid":
            return (
                np.clip(0.2 * v + 0.5, 0, 1)
                if framework == "tf-keras"
                else np.clip(v + 3, 0, 6) / 6
            )
        return 1 / (1 + np.exp(-v))

    h = c = None
    gates, states = {g: ([], []) for g in "ifjo"}, {"h": [], "c": []}
    for t in range(x.shape[1]):
        z = conv(x[:, t], k, tuple(cell.strides), cell.padding, tuple(cell.dilation_rate)) + b
        if h is None:
            h = c = np.zeros(z.shape[:-1] + (int(cell.filters),))
        z = z + conv(h, r, ones, "same", ones)
        # Keras' blocks i, f, c, o: c is gatetrace's j (new input)
        zi, zf, zj, zo = np.split(z, 4, axis=-1)
        ai, af, aj, ao = gate_act(zi), gate_act(zf), np.tanh(zj), gate_act(zo)
        c = af * c + ai * aj
        h = ao * np.tanh(c)
        for g, pre, post in (("i", zi, ai), ("f", zf, af), ("j", zj, aj), ("o", zo, ao)):
            gates[g][0].append(pre)
            gates[g][1].append(post)
        states["h"].append(h)
        states["c"].append(c)
    order = slice(None, None, -1) if layer.go_backwards else slice(None)
    gates = {g: tuple(np.stack(v, 1)[:, order] for v in pair) for g, pair in gates.items()}
    return gates, {s: np.stack(v, 1)[:, order] for s, v in states.items()}


def frames(model, n: int = 3) -> np.ndarray:
    shape = tuple(model.inputs[0].shape[1:])
    return np.random.RandomState(7).uniform(-1, 1, (n, *shape)).astype(np.float32)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_conv_lstm_gates_and_states_equal_a_float64_recomputation(framework, case):
    model = conv_model(framework, case)
    x = frames(model)
    got = tracer.trace(model, x)["conv_lstm"]
    layer = model.get_layer("conv_lstm")
    gates, states = reference(layer, x, framework)
    positions, filters = states["h"].shape[2:-1], states["h"].shape[-1]
    assert got.cell.kind == "ConvLSTM" and got.cell.gates == ("i", "f", "j", "o")
    assert got.cell.units == int(np.prod(positions)) * filters
    described = got.cell.describe()["conv"]
    assert described["positions"] == list(positions) and described["filters"] == filters
    for k, g in enumerate(got.cell.gates):
        for column, want in zip(("preactivation", "activation"), gates[g], strict=True):
            mine = getattr(got, column)[:, :, k].reshape(want.shape)
            np.testing.assert_allclose(mine, want, atol=2e-5, err_msg=f"{g} {column}")
    for s, want in states.items():
        np.testing.assert_allclose(got.states[s].reshape(want.shape), want, atol=2e-5)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_recorded_conv_lstm_is_read_by_position_and_filter(framework, tmp_path):
    import duckdb
    import pandas as pd

    model = conv_model(framework, "2d-same")
    path = tmp_path / ("model.keras" if framework == "keras3" else "model.h5")
    model.save(path)
    x = frames(model, n=5)
    np.save(tmp_path / "frames.npy", x)
    done = run_cli(
        "record",
        str(path),
        "--feed",
        f"frames={tmp_path / 'frames.npy'}",
        "--out",
        str(tmp_path / "rec"),
    )
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "rec" / "manifest.json").read_text())
    (cell,) = manifest["cells"]
    assert cell["conv"]["positions"] == [5, 6] and cell["conv"]["filters"] == 3
    gates, states = reference(model.get_layer("conv_lstm"), x, framework)
    # the forget gate of filter 2 at row 3, column 1, by docs/recordings.md's own query
    page = (ROOT / "docs" / "recordings.md").read_text()
    query = page[page.index("**ConvLSTM layers**") :].split("```sql\n", 1)[1].split("```", 1)[0]
    query = query.replace("'run1/", f"'{tmp_path / 'rec'}/")
    got = duckdb.sql(query + " ORDER BY example, step").df()
    row, col, f = 3, 1, 2
    filters = cell["conv"]["filters"]
    want = gates["f"][1][:, :, row, col, f]
    assert len(got) == want.size
    np.testing.assert_allclose(got.activation.to_numpy().reshape(want.shape), want, atol=2e-5)
    rec = Recording(tmp_path / "rec")
    h = rec.state_array("conv_lstm", "h")
    np.testing.assert_allclose(h.reshape(states["h"].shape), states["h"], atol=2e-5)
    # weights: W of gate j (Keras' c) at filter f is the kernel's block 2, its rows the taps
    # (row-major) times the input channels
    w = pd.read_parquet(tmp_path / "rec" / "weights.parquet")
    kernel = np.asarray(model.get_layer("conv_lstm").cell.kernel)
    j_in = (
        w[(w.gate == "j") & (w.source == "input")]
        .pivot(index="row", columns="unit", values="value")
        .to_numpy()
    )
    np.testing.assert_array_equal(j_in, kernel[..., 2 * filters : 3 * filters].reshape(-1, filters))


def test_a_conv_lstm_of_unfixed_size_and_its_contributions_are_refused_in_one_line(tmp_path):
    keras = keras_module("tf-keras")  # Keras 3 refuses to build such a layer itself
    x = keras.Input((None, None, None, 2), name="frames")
    model = keras.Model(x, keras.layers.ConvLSTM2D(2, 3, padding="same", name="conv_lstm")(x))
    model.save(tmp_path / "free.h5")
    done = run_cli("inspect", str(tmp_path / "free.h5"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "conv_lstm" in done.stderr and "fixed input shape" in done.stderr
    fixed = conv_model("keras3", "2d-same")
    fixed.save(tmp_path / "fixed.keras")
    np.save(tmp_path / "frames.npy", frames(fixed))
    done = run_cli(
        "record",
        str(tmp_path / "fixed.keras"),
        "--feed",
        f"frames={tmp_path / 'frames.npy'}",
        "--values",
        "preactivation,contributions",
        "--out",
        str(tmp_path / "rec"),
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "contributions" in done.stderr and "conv_lstm" in done.stderr
    assert not (tmp_path / "rec").exists()
