"""Keras 2's `CuDNNLSTM` and `CuDNNGRU` layers as the `LSTM` and `GRU` they compute, to run on a CPU.

Keras 2.0.9-2.3 (`keras.layers.CuDNNLSTM`) and `tf.compat.v1.keras.layers` ship these layers;
they call cuDNN's fused op, which has no CPU kernel, so a model holding one cannot be called
here as it is. Their weights have the shapes of Keras' matrices, with cuDNN's second bias beside
the first:

    CuDNNLSTM  kernel [input, 4u], recurrent_kernel [u, 4u] in Keras' (and cuDNN's) gate order
               i, f, c, o; bias [8u]: the input biases i, f, c, o, then the recurrent ones
    CuDNNGRU   kernel [input, 3u], recurrent_kernel [u, 3u] in Keras' order z, r, h (the layer
               hands cuDNN r, z, h); bias [6u]: input biases z, r, h, then recurrent ones

Each gate's block of either kernel is not the matrix cuDNN multiplies by: the layer hands
cuDNN every block flattened as it is stored (`canonical_to_params` without transposing), and
cuDNN reads that vector as its own `[units, rows]` matrix, row-major. For a block of `rows`
rows (the input size, or the units), the matrix Keras' `LSTM` or `GRU` would multiply by is

    block.reshape(-1).reshape(units, rows).T          (a transpose where rows == units)

cuDNN's LSTM is Keras' LSTM with sigmoid gates and tanh, its two biases added where both are
(`x W + b_W + h R + b_R`): an `LSTM` whose bias is their sum. cuDNN's GRU applies the reset gate
after the recurrent matrix, its recurrent bias inside (`tanh(x W_h + b_Wh + r * (h R_h + b_Rh))`):
Keras' `GRU(reset_after=True)`, whose bias [2, 3u] is exactly these two rows.

`on_cpu(model)` rebuilds a model holding such layers from its configuration with each replaced
by that equivalent (same name and options, inside `Bidirectional` and nested models too) and
gives it the original's weights as Keras' own legacy HDF5 loader converts them when a cuDNN
layer's file is loaded into an `LSTM` or `GRU` (`preprocess_weights_for_loading`, whose
`_convert_rnn_weights` does the above): the values recorded are then checked against Keras
running its own conversion of the file, not a reading of the layout written here. Other models
are returned as they are.
"""

from __future__ import annotations

import json
from typing import Any

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


def _holds_cudnn(layer: Any) -> bool:
    """Whether `layer` is a cuDNN layer or wraps or nests one."""
    if type(layer).__name__ in CUDNN_LAYERS:
        return True
    inner = [getattr(layer, a, None) for a in ("forward_layer", "backward_layer", "layer")]
    inner += list(getattr(layer, "layers", None) or [])
    return any(i is not None and _holds_cudnn(i) for i in inner)


def on_cpu(model: Any) -> Any:
    """`model` with its cuDNN layers replaced by their equivalents, their weights converted by
    Keras' own loader (see the module docstring)."""
    config, count = _replaced(model.get_config())
    if not count:
        return model
    import tf_keras
    from tf_keras.src.saving.legacy.hdf5_format import preprocess_weights_for_loading

    twin = tf_keras.models.model_from_json(
        json.dumps({"class_name": type(model).__name__, "config": config})
    )
    if len(model.layers) != len(twin.layers):
        raise ModelFormatError(
            f"the model's {len(model.layers)} layers do not match the {len(twin.layers)} of its rebuilt "
            "configuration without cuDNN"
        )
    for old, new in zip(model.layers, twin.layers, strict=True):
        weights = old.get_weights()
        try:
            if _holds_cudnn(old):  # Keras' own conversion, as when such a file is loaded into new
                weights = preprocess_weights_for_loading(new, weights)
            new.set_weights(weights)
        except ValueError as err:
            raise ModelFormatError(
                f"layer {old.name}: Keras cannot convert its cuDNN weights to {type(new).__name__}'s: "
                f"{str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__}"
            ) from None
    return twin
