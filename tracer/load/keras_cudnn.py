"""Keras 2's `CuDNNLSTM` and `CuDNNGRU` layers as the `LSTM` and `GRU` they compute, to run on a CPU.

Keras 2.0.9-2.3 (`keras.layers.CuDNNLSTM`) and `tf.compat.v1.keras.layers` ship these layers;
they call cuDNN's fused op, which has no CPU kernel, so a model holding one cannot be called
here as it is. Their weights are Keras' own matrices with cuDNN's second bias beside the first:

    CuDNNLSTM  kernel [input, 4u], recurrent_kernel [u, 4u] in Keras' (and cuDNN's) gate order
               i, f, c, o; bias [8u]: the input biases i, f, c, o, then the recurrent ones
    CuDNNGRU   kernel [input, 3u], recurrent_kernel [u, 3u] in Keras' order z, r, h (the layer
               hands cuDNN r, z, h); bias [6u]: input biases z, r, h, then recurrent ones

cuDNN's LSTM is Keras' LSTM with sigmoid gates and tanh, its two biases added where both are
(`x W + b_W + h R + b_R`): an `LSTM` whose bias is their sum. cuDNN's GRU applies the reset gate
after the recurrent matrix, its recurrent bias inside (`tanh(x W_h + b_Wh + r * (h R_h + b_Rh))`):
Keras' `GRU(reset_after=True)`, whose bias [2, 3u] is exactly these two rows.

`on_cpu(model)` rebuilds a model holding such layers from its configuration with each replaced
by that equivalent (same name and options, inside `Bidirectional` and nested models too) and
gives it the original's weights, the biases as above; other models are returned as they are.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from recorders.errors import ModelFormatError

__all__ = ["CUDNN_LAYERS", "cudnn_layers", "on_cpu"]

# the cuDNN layer -> the layer it equals on a CPU, and the options that make it so
CUDNN_LAYERS: dict[str, tuple[str, dict[str, Any]]] = {
    "CuDNNLSTM": ("LSTM", {"activation": "tanh", "recurrent_activation": "sigmoid"}),
    "CuDNNGRU": (
        "GRU",
        {"activation": "tanh", "recurrent_activation": "sigmoid", "reset_after": True},
    ),
}
_NOT_FOR = {"GRU": ("unit_forget_bias",)}  # options of a cuDNN layer its equivalent has not


def _replaced(config: Any) -> tuple[Any, int]:
    """`config` with every cuDNN layer's entry replaced by its equivalent's, and how many."""
    if isinstance(config, list):
        pairs = [_replaced(c) for c in config]
        return [c for c, _ in pairs], sum(n for _, n in pairs)
    if not isinstance(config, dict):
        return config, 0
    if config.get("class_name") in CUDNN_LAYERS and isinstance(config.get("config"), dict):
        name, options = CUDNN_LAYERS[config["class_name"]]
        inner = {k: v for k, v in config["config"].items() if k not in _NOT_FOR.get(name, ())}
        return {**config, "class_name": name, "config": {**inner, **options}}, 1
    out, count = {}, 0
    for k, v in config.items():
        out[k], n = _replaced(v)
        count += n
    return out, count


def _bias(old: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A cuDNN layer's bias as its equivalent's `shape`: LSTM [8u] -> [4u], the two halves
    added; GRU [6u] -> [2, 3u], the input and recurrent rows."""
    if old.shape == (2 * shape[0],) and len(shape) == 1:
        half = shape[0]
        return old[:half] + old[half:]
    if len(shape) == 2 and shape[0] == 2 and old.shape == (2 * shape[1],):
        return old.reshape(2, shape[1])
    raise ModelFormatError(
        f"a cuDNN layer's weight of shape {list(old.shape)} does not fit its equivalent's {list(shape)}"
    )


def cudnn_layers(model: Any) -> list[str]:
    """`name (Class)` of each cuDNN layer of `model`, inside wrappers and nested models too."""
    found, todo = [], list(model.layers)
    while todo:
        layer = todo.pop(0)
        if type(layer).__name__ in CUDNN_LAYERS:
            found.append(f"{layer.name} ({type(layer).__name__})")
        if hasattr(layer, "forward_layer"):  # Bidirectional: its two halves
            todo += [layer.forward_layer, layer.backward_layer]
        elif hasattr(layer, "layer"):  # another wrapper
            todo.append(layer.layer)
        todo += list(getattr(layer, "layers", None) or [])
    return found


def on_cpu(model: Any) -> Any:
    """`model` with its cuDNN layers replaced by their equivalents (see the module docstring)."""
    config, count = _replaced(model.get_config())
    if not count:
        return model
    import tf_keras

    twin = tf_keras.models.model_from_json(
        json.dumps({"class_name": type(model).__name__, "config": config})
    )
    old, new = model.get_weights(), twin.weights
    if len(old) != len(new):
        raise ModelFormatError(
            f"the model's {len(old)} weights do not match the {len(new)} of its layers without cuDNN"
        )
    twin.set_weights(
        [
            w if w.shape == tuple(v.shape) else _bias(w, tuple(v.shape))
            for w, v in zip(old, new, strict=True)
        ]
    )
    return twin
