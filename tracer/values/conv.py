"""ConvLSTM: replaying Keras' ConvLSTM1D, ConvLSTM2D and ConvLSTM3D cells in numpy.

Keras' `ConvLSTMCell` (tf-keras and Keras 3) computes, at each step, with a kernel
[*kernel_size, channels, 4 * filters] and a recurrent kernel [*kernel_size, filters,
4 * filters] whose last axis holds the gates' blocks i, f, c, o (Keras' order; c is our j):

    z = conv(x_t, kernel, strides, padding, dilation) + bias + conv(h_prev, recurrent_kernel)
    i, f, j, o = split(z, 4, last axis)
    c = gate_act(f) * c_prev + gate_act(i) * act(j);   h = gate_act(o) * act(c)

the recurrent convolution always at stride 1 with "same" padding. A convolution is a
matrix product of the input's patches ([positions, taps * channels], TensorFlow's padding
rule for "same": the odd pixel at the end) with the kernel flattened to [taps * channels,
4 * filters], as `tracer.find.keras` stores it. The gates and states come out with their
units flattened, one filter at one position: unit = position * filters + filter, positions
in row-major order (`tracer.cells.found.Conv`). `replay_conv` returns a
`tracer.values.replay.Replayed` that `check` compares with the layer's own outputs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from recorders.errors import GraphPatternError
from tracer.cells.found import Conv
from tracer.cells.kinds import KERAS_CONV_LSTM
from tracer.values.replay import Holding, Replayed, activation_of

__all__ = ["replay_conv", "patches", "channels_last"]

_GATES = KERAS_CONV_LSTM.gates  # i, f, j, o: the blocks of z, in Keras' order


def channels_last(a: np.ndarray, conv: Conv) -> np.ndarray:
    """[examples, steps, channels, *spatial] as [examples, steps, *spatial, channels] where the
    layer's data_format is channels_first; as it is otherwise."""
    return np.moveaxis(a, 2, -1) if conv.channels_first else a


def patches(
    x: np.ndarray,
    kernel_size: tuple[int, ...],
    strides: tuple[int, ...],
    padding: str,
    dilation: tuple[int, ...],
) -> np.ndarray:
    """[rows, *spatial, channels] -> [rows, positions, taps * channels]: what the kernel reads
    at each output position, taps in row-major order of `kernel_size`, channels innermost."""
    rank = len(kernel_size)
    spatial = x.shape[1:-1]
    reach = [(k - 1) * d + 1 for k, d in zip(kernel_size, dilation, strict=True)]
    if padding == "same":  # TensorFlow's rule: as many outputs as ceil(size / stride)
        pads = []
        for size, r, s in zip(spatial, reach, strides, strict=True):
            total = max((-(-size // s) - 1) * s + r - size, 0)
            pads.append((total // 2, total - total // 2))
        x = np.pad(x, [(0, 0), *pads, (0, 0)])
    elif padding != "valid":
        raise GraphPatternError(
            f"ConvLSTM padding {padding!r}: expected 'same' or 'valid', the paddings Keras' ConvLSTM layers take"
        )
    windows = sliding_window_view(x, reach, axis=tuple(range(1, rank + 1)))
    # [rows, *outputs, channels, *reach]: every stride-th position, every dilation-th tap
    windows = windows[
        (slice(None),)
        + tuple(slice(None, None, s) for s in strides)
        + (slice(None),)
        + tuple(slice(None, None, d) for d in dilation)
    ]
    windows = np.moveaxis(windows, rank + 1, -1)  # channels after the taps
    return windows.reshape(x.shape[0], -1, int(np.prod(windows.shape[rank + 1 :])))


def replay_conv(
    conv: Conv,
    weights: Mapping[str, np.ndarray],
    inputs: np.ndarray,
    initial: Mapping[str, np.ndarray] | None = None,
    *,
    mask: np.ndarray | None = None,
    activation="tanh",
    recurrent_activation="sigmoid",
    hold: Holding | None = None,
) -> Replayed:
    """Run a ConvLSTM cell over `inputs` [examples, steps, *spatial, channels] (channels last;
    see the module docstring). `weights` are `kernel` (the input kernel's rows stacked on the
    recurrent kernel's, each flattened) and `bias`; `initial` states h and c are
    [examples, positions * filters]. Where `mask` [examples, steps] is False the step is
    skipped: the states are carried through and the output repeats the previous one (Keras).
    `hold` changes each step's gates (as [rows, positions * filters]) inside the step and its
    new states before the next step reads them (`--hold`: `tracer.values.keras`)."""
    f32 = np.float32
    x = np.asarray(inputs, dtype=f32)
    n, steps = x.shape[:2]
    act, gate_act = activation_of(activation), activation_of(recurrent_activation)
    kernel, bias = np.asarray(weights["kernel"], f32), np.asarray(weights["bias"], f32)
    taps, filters = int(np.prod(conv.kernel_size)), conv.filters
    positions = int(np.prod(conv.positions))
    width = positions * filters
    split = taps * x.shape[-1]
    if kernel.shape != (split + taps * filters, 4 * filters):
        raise GraphPatternError(
            f"ConvLSTM: kernel of shape {list(kernel.shape)} does not fit a kernel of {conv.kernel_size} taps "
            f"over inputs of {x.shape[-1]} channels and {filters} filters"
        )
    w_in, w_rec = kernel[:split], kernel[split:]
    init = dict(initial or {})
    h = np.asarray(init.get("h", np.zeros((n, width))), f32).reshape(n, width)
    c = np.asarray(init.get("c", np.zeros((n, width))), f32).reshape(n, width)
    h0, c0 = h, c
    alive = None if mask is None else np.asarray(mask, dtype=bool).reshape(n, steps)
    pre = np.empty((n, steps, 4, width), f32)
    post = np.empty_like(pre)
    states = {"h": np.empty((n, steps, width), f32), "c": np.empty((n, steps, width), f32)}
    outputs = states["h"] if alive is None else np.empty((n, steps, width), f32)
    ones = (1,) * conv.rank
    for t in range(steps):
        from_x = patches(x[:, t], conv.kernel_size, conv.strides, conv.padding, conv.dilation)
        if from_x.shape[1] != positions:
            raise GraphPatternError(
                f"ConvLSTM: the input convolution gives {from_x.shape[1]} positions, the layer's output "
                f"{positions} ({list(conv.positions)})"
            )
        h_grid = h.reshape(n, *conv.positions, filters)
        z = from_x @ w_in + bias  # [n, positions, 4 * filters]
        z += patches(h_grid, conv.kernel_size, ones, "same", ones) @ w_rec
        # i = input gate, f = forget gate, j = new input (Keras' c), o = output gate
        z = z.reshape(n, positions, 4, filters).transpose(0, 2, 1, 3).reshape(n, 4, width)
        held = None if hold is None else hold.gates(t)
        if held is not None:
            for k, g in enumerate(_GATES):
                held(g, True, z[:, k])
        i, f, j, o = z[:, 0], z[:, 1], z[:, 2], z[:, 3]
        a = np.stack([gate_act(i), gate_act(f), act(j), gate_act(o)], axis=1).astype(f32)
        if held is not None:
            for k, g in enumerate(_GATES):
                held(g, False, a[:, k])
        c_new = a[:, 1] * c + a[:, 0] * a[:, 2]
        h_new = a[:, 3] * act(c_new)
        if hold is not None:
            h_new, held_c = hold.states(t, h_new, c_new, a.reshape(n, 4 * width))
            c_new = c_new if held_c is None else held_c
        pre[:, t], post[:, t] = z, a
        if alive is not None:
            keep = alive[:, t : t + 1]
            outputs[:, t] = np.where(keep, h_new, 0 if t == 0 else outputs[:, t - 1])
            h_new, c_new = np.where(keep, h_new, h), np.where(keep, c_new, c)
        states["h"][:, t], states["c"][:, t] = h_new, c_new
        h, c = h_new, c_new
    return Replayed(
        pre,
        post,
        states,
        outputs,
        {"h": h.copy(), "c": c.copy()},
        inputs=None,
        initial={"h": h0, "c": c0},
    )
