"""Keras RNN layers: finding every LSTM, GRU, SimpleRNN and ConvLSTM layer of a Keras model.

A Keras `LSTM`, `GRU`, `SimpleRNN` or `ConvLSTM1D/2D/3D` layer (tf-keras or Keras 3) runs
its cell inside a loop whose gates nobody can fetch. `find_layers(model)` lists these
layers, inside `Bidirectional` wrappers and nested models too, and each cell of an `RNN`
layer over `StackedRNNCells` (or a list of cells: `RNN([LSTMCell(4), GRUCell(3)])`), named
`LAYER/CELL`, as `tracer.cells.found.KerasCell`s, with their weights in gatetrace's block
order: LSTM i, f, c, o -> i, f, j, o; GRU z, r, h ->
u, r, c; SimpleRNN -> h (Keras keeps its own order; the spec's gate labels name it); a
ConvLSTM's as the LSTM's, each kernel flattened to [taps * channels, 4 * filters], with its
convolution and positions in `tracer.cells.found.Conv`.
`hidden_layers` names the RNN layers inside wrappers that are not recorded through.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from recorders.errors import GraphPatternError
from tracer.cells.activations import ACTIVATIONS
from tracer.cells.found import Conv, KerasCell
from tracer.cells.kinds import KERAS_CONV_LSTM, KERAS_GRU, KERAS_LSTM, KERAS_SIMPLE_RNN
from tracer.find.keras_own import own_cell
from tracer.load.keras import KerasModel, framework_of, to_numpy, variable_name

__all__ = ["find_layers", "hidden_layers", "walk_layers"]

# Keras cell class -> spec. The states a layer carries, in Keras' order: LSTM [h, c], others [h].
# ConvLSTMCell: the cell of ConvLSTM1D, ConvLSTM2D and ConvLSTM3D (tf-keras and Keras 3).
_SPECS = {
    "LSTMCell": KERAS_LSTM,
    "GRUCell": KERAS_GRU,
    "SimpleRNNCell": KERAS_SIMPLE_RNN,
    "ConvLSTMCell": KERAS_CONV_LSTM,
}


def _keras_own(cell: Any) -> bool:
    """Whether a cell's class is one of Keras' own (of Keras 3, tf-keras or Keras 2), which
    gatetrace records by its spec or refuses, never traces as a cell of your own."""
    module = type(cell).__module__
    return module.split(".")[0] in ("keras", "tf_keras") or module.startswith(
        ("tensorflow.python.keras", "tensorflow.keras")
    )


def _hard_sigmoid_tf_keras(x: np.ndarray) -> np.ndarray:
    return np.clip(x * np.float32(0.2) + np.float32(0.5), 0, 1)


def _hard_sigmoid_keras3(x: np.ndarray) -> np.ndarray:
    return np.clip(x + np.float32(3), 0, 6) / np.float32(6)


def _activation(fn: Any, framework: str) -> tuple[str, Any]:
    """(name, what replay computes it with): numpy for the usual ones, else Keras' own function."""
    name = getattr(fn, "__name__", type(fn).__name__)
    if name == "hard_sigmoid":  # tf-keras: clip(0.2 x + 0.5); Keras 3: relu6(x + 3) / 6
        return name, _hard_sigmoid_tf_keras if framework == "tf-keras" else _hard_sigmoid_keras3
    if name in ACTIVATIONS:
        return name, name
    return name, lambda x: np.asarray(fn(x), dtype=np.float32)


def walk_layers(
    layers: Sequence[Any], prefix: str, hidden: list[str] | None = None
) -> Iterator[tuple[str, Any]]:
    """(path, layer) for every RNN layer, inside Bidirectional wrappers and nested models.
    RNN layers inside any other wrapper (TimeDistributed, ...) are appended to `hidden`."""
    for layer in layers:
        path = prefix + layer.name
        if hasattr(layer, "forward_layer") and hasattr(layer, "backward_layer"):  # Bidirectional
            yield from walk_layers([layer.forward_layer, layer.backward_layer], path + "/", hidden)
        elif hasattr(layer, "cell") and hasattr(layer, "go_backwards"):  # an RNN layer
            yield path, layer
        elif hasattr(layer, "layers") and layer.layers:  # a nested model
            yield from walk_layers(layer.layers, path + "/", hidden)
        elif hasattr(layer, "layer") and hidden is not None:  # another wrapper: say what it hides
            inner = [
                f"{p} (a {type(inner).__name__} inside {type(layer).__name__})"
                for p, inner in walk_layers([layer.layer], path + "/", hidden)
            ]
            hidden.extend(inner)


def hidden_layers(model: KerasModel) -> list[str]:
    """RNN layers inside wrappers gatetrace does not record through (TimeDistributed and
    others, whose inner layer runs on reshaped rows), as `path (what)`."""
    hidden: list[str] = []
    list(walk_layers(model.model.layers, "", hidden))
    return hidden


def _static_shape(layer: Any) -> tuple | None:
    """The shape of the layer's own input (None where it was never called on one tensor)."""
    try:
        if hasattr(layer, "input_shape"):  # tf-keras
            shape = layer.input_shape
        else:  # Keras 3: a layer called with a mask or states takes a list, the sequence first
            given = layer.input
            shape = (given[0] if isinstance(given, (list, tuple)) else given).shape
    # a layer called on several inputs, or never called
    except (AttributeError, ValueError, RuntimeError):
        return None
    if isinstance(shape, list):
        shape = shape[0]
    return tuple(shape) if shape is not None else None


def _conv(name: str, cell: Any, shape: tuple | None) -> Conv:
    """A ConvLSTM cell's convolution, its output positions worked out from its input's
    shape ([examples, steps, *spatial, channels], or channels first), which must be fixed."""
    rank = int(cell.rank)
    first = cell.data_format == "channels_first"
    spatial = None if shape is None else (shape[3:] if first else shape[2:-1])
    if spatial is None or len(spatial) != rank or any(s is None for s in spatial):
        raise GraphPatternError(
            f"{name}: a ConvLSTM{rank}D layer whose input's spatial shape is not fixed ({shape}); gatetrace "
            "records a ConvLSTM's gates at every position, so it needs the positions when the model is built: "
            "build the model with a fixed input shape"
        )
    kernel_size, strides = tuple(cell.kernel_size), tuple(cell.strides)
    dilation, padding = tuple(cell.dilation_rate), str(cell.padding).lower()
    positions = tuple(
        -(-(size if padding == "same" else size - (k - 1) * d) // s)
        for size, k, s, d in zip(spatial, kernel_size, strides, dilation, strict=True)
    )
    return Conv(rank, kernel_size, strides, padding, dilation, first, positions, int(cell.filters))


def _wrappers(layers: Sequence[Any]) -> dict[int, Any]:
    """The Bidirectional wrapper of each of its halves (by id): the halves are never called
    on the model's tensors themselves, so their input's shape is the wrapper's."""
    found: dict[int, Any] = {}
    for layer in layers:
        if hasattr(layer, "forward_layer") and hasattr(layer, "backward_layer"):
            found |= {id(layer.forward_layer): layer, id(layer.backward_layer): layer}
        elif hasattr(layer, "layers") and layer.layers:
            found |= _wrappers(layer.layers)
    return found


def _cell(
    name: str,
    spec: Any,
    layer: Any,
    cell: Any,
    framework: str,
    shape: tuple | None,
    stack: tuple[int, int],
) -> KerasCell:
    """The KerasCell of one Keras cell (the layer's, or number `stack[0]` of its stack of
    `stack[1]`), its weights in gatetrace's block order; `shape` is the layer's input's."""
    kernel, recurrent = to_numpy(cell.kernel), to_numpy(cell.recurrent_kernel)
    units = recurrent.shape[0]
    conv = _conv(name, cell, shape) if spec is KERAS_CONV_LSTM else None
    if conv is not None:  # [*kernel_size, channels, 4 * filters] -> [taps * channels, 4 * filters]
        kernel, recurrent = (
            kernel.reshape(-1, kernel.shape[-1]),
            recurrent.reshape(-1, kernel.shape[-1]),
        )
        units = int(np.prod(conv.positions)) * conv.filters
    bias = (
        to_numpy(cell.bias) if getattr(cell, "use_bias", True) and cell.bias is not None else None
    )
    reset_after = bool(cell.reset_after) if spec is KERAS_GRU else None
    weights = {
        "kernel": np.concatenate([kernel, recurrent]),
        "bias": np.zeros(kernel.shape[1], np.float32),
    }
    # GRU with reset_after: [input bias, recurrent bias]
    if bias is not None and bias.ndim == 2:
        weights["bias"], weights["recurrent_bias"] = bias[0], bias[1]
    elif bias is not None:
        weights["bias"] = bias
    elif reset_after:
        weights["recurrent_bias"] = np.zeros(kernel.shape[1], np.float32)
    variables = {
        "kernel": variable_name(cell.kernel),
        "recurrent_kernel": variable_name(cell.recurrent_kernel),
    }
    if bias is not None:
        variables["bias"] = variable_name(cell.bias)
    act_name, act = _activation(cell.activation, framework)
    gate_name, gate_act = _activation(
        getattr(cell, "recurrent_activation", None) or (lambda x: x), framework
    )
    return KerasCell(
        name=name,
        spec=spec,
        units=units,
        input_size=kernel.shape[0],
        activation=act_name,
        recurrent_activation=gate_name if spec is not KERAS_SIMPLE_RNN else "-",
        arrays=weights,
        variables=variables,
        backward=bool(layer.go_backwards),
        reset_after=reset_after,
        layer=layer,
        framework=framework,
        act=act,
        gate_act=gate_act,
        length=None if shape is None or len(shape) < 2 or shape[1] is None else int(shape[1]),
        stack=stack,
        conv=conv,
    )


def find_layers(
    model: KerasModel, gate_names: Mapping[str, Sequence[str]] | None = None
) -> list[KerasCell]:
    """Every LSTM, GRU, SimpleRNN and ConvLSTM layer of `model`, and every RNN layer over a
    cell of your own (`tracer.find.keras_own`: its gates named by `gate_names`, by layer
    path, where given), in the order of its layers."""
    cells, others = [], []
    framework = framework_of(model.model)
    others += [
        f"{h}: wrapped layers run on reshaped rows and are not recorded"
        for h in hidden_layers(model)
    ]
    wrappers = _wrappers(model.model.layers)
    for path, layer in walk_layers(model.model.layers, ""):
        shape = _static_shape(layer) or (
            _static_shape(wrappers[id(layer)]) if id(layer) in wrappers else None
        )
        # RNN(StackedRNNCells([...])) or RNN([cells]): each cell of the stack, named after it
        stack = list(getattr(layer.cell, "cells", None) or [layer.cell])
        names = [getattr(c, "name", "") or f"cell_{k}" for k, c in enumerate(stack)]
        if len(set(names)) < len(names):
            names = [f"cell_{k}" for k in range(len(stack))]
        specs = [_SPECS.get(type(c).__name__) for c in stack]
        odd = next(
            (
                k
                for k, c in enumerate(stack)
                if specs[k] is None or getattr(c, "kernel", None) is None
            ),
            None,
        )
        if odd is not None and len(stack) == 1 and not _keras_own(stack[0]):
            names_given = (gate_names or {}).get(path)
            cells.append(own_cell(path, layer, stack[0], framework, shape, names_given))
            continue
        if odd is not None:  # a stack is recorded whole or not at all: its cells read each other
            what = type(stack[odd]).__name__ + (" in a stack" if len(stack) > 1 else "")
            others.append(f"{path} ({type(layer).__name__} of {what})")
            continue
        for k, cell in enumerate(stack):
            named = path if len(stack) == 1 else f"{path}/{names[k]}"
            cells.append(_cell(named, specs[k], layer, cell, framework, shape, (k, len(stack))))
    unknown = sorted(set(gate_names or {}) - {c.name for c in cells if c.step is not None})
    if unknown:
        raise GraphPatternError(
            f"gate_names names {', '.join(unknown)}, not a layer over a cell of your own in {model.source}; "
            f"those are {', '.join(c.name for c in cells if c.step is not None) or 'none'}"
        )
    if not cells:
        found = f"; RNN layers of other cells: {', '.join(others)}" if others else ""
        raise GraphPatternError(
            f"no RNN layer found in {model.source}: looked for Keras LSTM, GRU, SimpleRNN and ConvLSTM layers "
            f"(also inside Bidirectional and nested models){found}"
        )
    return cells
