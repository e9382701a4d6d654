"""Keras RNN layers: finding them, capturing what enters and leaves each in one call, replaying them.

A Keras `LSTM`, `GRU` or `SimpleRNN` layer (tf-keras or Keras 3) runs its cell inside a
loop whose gates nobody can fetch. `find_layers(model)` lists these layers, inside
`Bidirectional` wrappers and nested models too, as `KerasCell`s. A `KerasPlan` calls the
model once per batch with a hook on each layer's `call` that keeps what enters the layer
(its input sequence, mask and initial state) and what it returns; then it replays each
cell in numpy (`tracer.replay`) and checks the replay against the layer's own outputs
(and final states, where the layer returns them).

Keras' gate order is mapped onto gatetrace's labels and kept in Keras' block order:
LSTM i, f, c, o -> i, f, j, o; GRU z, r, h -> u, r, c; SimpleRNN -> h. A backward layer
(`go_backwards`, the backward half of `Bidirectional`) reads the whole sequence reversed;
its rows are indexed by input position. No rows are written where the mask is False.

`load_keras` reads `.keras` and `.h5` files (tf-keras or Keras 3, told from the file) and
tf-keras SavedModel folders (those holding keras_metadata.pb), in Keras' safe mode, after
`tracer.keras_files` has checked them; Keras 2.0/2.1 files are read as those versions meant
them (`keras2_fixes`).
"""

from __future__ import annotations

import inspect
import json
import os
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from recorders.errors import FeedError, GatetraceError, GraphPatternError, ModelFormatError, UnsafeGraphError
from tracer._tf import tf
from tracer.cells import KERAS_GRU, KERAS_LSTM, KERAS_SIMPLE_RNN, CellSpec, HasSpec
from tracer.feeds import convert_feed
from tracer.keras_files import check_keras_file, keras2_fixes, keras_config
from tracer.reference import ACTIVATIONS
from tracer.replay import Replayed, check, replay

__all__ = [
    "KerasModel", "KerasInput", "KerasCell", "KerasPlan", "is_keras", "is_keras_file", "load_keras", "find_layers", "hidden_layers",
    "resolve_inputs",
]

# Keras cell class -> spec. The states a layer carries, in Keras' order: LSTM [h, c], others [h].
_SPECS = {"LSTMCell": KERAS_LSTM, "GRUCell": KERAS_GRU, "SimpleRNNCell": KERAS_SIMPLE_RNN}


@dataclass(frozen=True)
class KerasInput:
    """One input of a Keras model, standing where a placeholder stands in a graph's feeds."""

    name: str
    shape: tf.TensorShape
    dtype: tf.DType


@dataclass
class KerasModel:
    """A Keras model (tf-keras or Keras 3) and where it came from.

    format says which Keras and which file: `keras3 .keras`, `tf-keras savedmodel`,
    `keras3 model` (an object handed to `wrap`) and so on.
    """

    model: Any
    source: str
    format: str

    @property
    def inputs(self) -> list[KerasInput]:
        names = getattr(self.model, "input_names", None) or [t.name for t in self.model.inputs]
        return [KerasInput(n.split(":")[0], tf.TensorShape(t.shape), tf.as_dtype(t.dtype)) for n, t in zip(names, self.model.inputs)]

    def close(self) -> None:
        """Nothing to release (the model is an ordinary Python object); for symmetry with `Model`."""

    def __enter__(self) -> "KerasModel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def is_keras(obj: Any) -> bool:
    """Whether `obj` is a Keras model object (tf-keras or Keras 3)."""
    return any(c.__module__.startswith(("keras.", "tf_keras.")) and c.__name__ in ("Model", "Functional", "Sequential") for c in type(obj).__mro__)


def _framework(obj: Any) -> str:
    return "tf-keras" if type(obj).__module__.startswith("tf_keras") else "keras3"


def wrap(model: Any, source: str = "Keras model") -> KerasModel:
    """A live Keras model object as a KerasModel (nothing is copied)."""
    return KerasModel(model, source, f"{_framework(model)} model")


def is_keras_file(path: str | os.PathLike) -> bool:
    p = Path(path)
    return (p.is_file() and p.suffix in (".keras", ".h5", ".hdf5")) or (p.is_dir() and (p / "keras_metadata.pb").is_file())


def _saved_by(p: Path) -> str:
    """`keras3` or `tf-keras`: which Keras wrote the file."""
    if p.is_dir():
        return "tf-keras"  # Keras 3 cannot save a SavedModel it can load again (only `export`)
    try:
        if p.suffix == ".keras":
            with zipfile.ZipFile(p) as z:
                version = json.loads(z.read("metadata.json")).get("keras_version", "")
        else:
            import h5py

            with h5py.File(p, "r") as f:
                version = f.attrs.get("keras_version", "")
                version = version.decode() if isinstance(version, bytes) else str(version)
    except Exception as err:
        raise ModelFormatError(f"{p}: cannot read it as a Keras {p.suffix} file: {err}") from None
    return "keras3" if version.startswith("3.") else "tf-keras"


def load_keras(path: str | os.PathLike, *, allow_unsafe_ops: bool = False) -> KerasModel:
    """Load a Keras model file (see the module docstring), without compiling it.

    Unless `allow_unsafe_ops`, the file is checked first (`tracer.keras_files`): anything
    beyond Keras' own layers is refused before Keras reads it, and a tf-keras SavedModel
    is built from its checked configuration, its weights read from its checkpoint, so
    that none of the functions stored in it run. Whatever Keras unpacks goes to a
    temporary folder that is removed afterwards.
    """
    p, source = Path(path), str(path)
    framework = _saved_by(p)
    kind = "savedmodel" if p.is_dir() else p.suffix
    if not allow_unsafe_ops:
        check_keras_file(p)
    try:
        with _private_tempdir():
            if framework == "keras3":
                import keras

                model = keras.saving.load_model(source, compile=False, safe_mode=not allow_unsafe_ops)
            elif p.is_dir() and not allow_unsafe_ops:
                model = _tf_keras_from_saved_model(p, source)
            elif p.suffix in (".h5", ".hdf5") and keras2_fixes(keras_config(p)) is not None:
                model = _tf_keras_from_h5(p, keras2_fixes(keras_config(p)), allow_unsafe_ops)
            else:
                import tf_keras
                from tf_keras.src.saving.serialization_lib import SafeModeScope

                with SafeModeScope(not allow_unsafe_ops):
                    model = tf_keras.models.load_model(source, compile=False, safe_mode=not allow_unsafe_ops)
    except GatetraceError:
        raise
    except Exception as err:
        text = (str(err).strip().splitlines() or [type(err).__name__])[0]
        if "safe_mode" in str(err) or "arbitrary code" in str(err):
            raise UnsafeGraphError(
                f"{source}: loading it would run Python code stored in the file ({text[:160]}); "
                "if you trust its source, rerun with --allow-unsafe-ops"
            ) from None
        raise ModelFormatError(f"{source}: cannot load it with {framework}: {text}") from None
    return KerasModel(model, source, f"{framework} {kind}")


def _tf_keras_from_saved_model(p: Path, source: str) -> Any:
    """A tf-keras model built from a SavedModel's checked configuration, with the weights of
    its variables checkpoint; every weight of the model must be found there."""
    from tf_keras.src.saving.legacy import model_config
    from tf_keras.src.saving.legacy.saved_model import json_utils

    config = json_utils.decode(json.dumps(keras_config(p)))
    model = model_config.model_from_config(config)
    status = model.load_weights(str(p / "variables" / "variables"))
    try:
        status.assert_existing_objects_matched()
    except AssertionError as err:
        raise ModelFormatError(f"{source}: its variables do not match the model its keras_metadata.pb describes: {str(err)[:200]}") from None
    status.expect_partial()
    return model


def _tf_keras_from_h5(p: Path, config: dict, allow_unsafe_ops: bool) -> Any:
    """A tf-keras model built from a Keras 2 `.h5` file's configuration as fixed by
    `keras2_fixes`, with the file's weights."""
    import tf_keras
    from tf_keras.src.saving.serialization_lib import SafeModeScope

    with SafeModeScope(not allow_unsafe_ops):
        model = tf_keras.models.model_from_json(json.dumps(config))
    model.load_weights(str(p))
    return model


@contextmanager
def _private_tempdir() -> Iterator[None]:
    """Point Python's temporary files at a folder of our own while Keras reads a file, then remove it."""
    import tempfile

    previous = tempfile.tempdir
    with tempfile.TemporaryDirectory(prefix="gatetrace-keras-") as folder:
        tempfile.tempdir = folder
        try:
            yield
        finally:
            tempfile.tempdir = previous


@dataclass(frozen=True, eq=False)
class KerasCell(HasSpec):
    """One Keras RNN layer's cell, as gatetrace records it.

    name is the layer's path in the model (`bidirectional/backward_gru`). `weights` holds
    numpy arrays by role: `kernel` (the layer's kernel stacked on its recurrent kernel:
    input rows first), `bias`, and for a GRU with reset_after `recurrent_bias`.
    `backward` is the layer's `go_backwards`.
    """

    name: str
    spec: CellSpec
    units: int
    input_size: int
    activation: str
    recurrent_activation: str
    weights: Mapping[str, np.ndarray]
    variables: Mapping[str, str]
    backward: bool
    reset_after: bool | None
    layer: Any = field(repr=False)
    framework: str = "keras3"
    act: Any = field(default=None, repr=False)  # the numpy activation: a name in ACTIVATIONS or a callable
    gate_act: Any = field(default=None, repr=False)
    forget_bias: None = None
    cell_clip: None = None
    proj_clip: None = None
    num_proj: None = None
    loop: None = None

    path = "replay"

    def __repr__(self) -> str:
        return f"KerasCell({self.name!r}, {self.kind}, units={self.units}, input_size={self.input_size}, {self.framework})"

    @property
    def output_size(self) -> int:
        return self.units

    def describe(self) -> dict:
        """A JSON-ready description, as `inspect --json` and the manifest show it."""
        layer = self.layer
        return {
            "name": self.name,
            "kind": self.kind,
            "framework": self.framework,
            "units": self.units,
            "input_size": self.input_size,
            "output_size": self.output_size,
            "steps": _static_steps(layer),
            "gates": list(self.gates),
            "states": list(self.spec.states),
            "activation": self.activation,
            "recurrent_activation": self.recurrent_activation,
            "reset_after": self.reset_after,
            "direction": "backward" if self.backward else "forward",
            "return_sequences": bool(layer.return_sequences),
            "return_state": bool(layer.return_state),
            "stateful": bool(layer.stateful),
            "variables": dict(self.variables),
            "path": self.path,
            "why": (
                f"a Keras {type(layer).__name__} layer runs its cell inside its own loop: its gates are recomputed in numpy "
                "from the layer's input, mask, initial state and weights, and checked against what the layer returns"
            ),
        }


def _numpy(v: Any) -> np.ndarray:
    return np.asarray(v.numpy() if hasattr(v, "numpy") else v)


def _static_steps(layer: Any) -> int | None:
    """The number of steps of the layer's own input, where its shape fixes it (None otherwise)."""
    try:
        shape = layer.input_shape if hasattr(layer, "input_shape") else layer.input.shape
    except (AttributeError, ValueError, RuntimeError):  # a layer called on several inputs, or never called
        return None
    if isinstance(shape, list):
        shape = shape[0]
    shape = tuple(shape) if shape is not None else ()
    return int(shape[1]) if len(shape) > 1 and shape[1] is not None else None


def _variable_name(v: Any) -> str:
    return str(getattr(v, "path", None) or v.name).removesuffix(":0")


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


def _walk(layers: Sequence[Any], prefix: str, hidden: list[str] | None = None) -> Iterator[tuple[str, Any]]:
    """(path, layer) for every RNN layer, inside Bidirectional wrappers and nested models.
    RNN layers inside any other wrapper (TimeDistributed, ...) are appended to `hidden`."""
    for layer in layers:
        path = prefix + layer.name
        if hasattr(layer, "forward_layer") and hasattr(layer, "backward_layer"):  # Bidirectional
            yield from _walk([layer.forward_layer, layer.backward_layer], path + "/", hidden)
        elif hasattr(layer, "cell") and hasattr(layer, "go_backwards"):  # an RNN layer
            yield path, layer
        elif hasattr(layer, "layers") and layer.layers:  # a nested model
            yield from _walk(layer.layers, path + "/", hidden)
        elif hasattr(layer, "layer") and hidden is not None:  # another wrapper: say what it hides
            inner = [f"{p} (a {type(l).__name__} inside {type(layer).__name__})" for p, l in _walk([layer.layer], path + "/", hidden)]
            hidden.extend(inner)


def hidden_layers(model: KerasModel) -> list[str]:
    """RNN layers inside wrappers gatetrace does not record through (TimeDistributed and
    others, whose inner layer runs on reshaped rows), as `path (what)`."""
    hidden: list[str] = []
    list(_walk(model.model.layers, "", hidden))
    return hidden


def find_layers(model: KerasModel) -> list[KerasCell]:
    """Every LSTM, GRU and SimpleRNN layer of `model`, in the order of its layers."""
    cells, others = [], []
    framework = _framework(model.model)
    others += [f"{h}: wrapped layers run on reshaped rows and are not recorded" for h in hidden_layers(model)]
    for path, layer in _walk(model.model.layers, ""):
        cell = layer.cell
        spec = _SPECS.get(type(cell).__name__)
        if spec is None or getattr(cell, "kernel", None) is None:
            others.append(f"{path} ({type(layer).__name__} of {type(cell).__name__})")
            continue
        kernel, recurrent = _numpy(cell.kernel), _numpy(cell.recurrent_kernel)
        units = recurrent.shape[0]
        bias = _numpy(cell.bias) if getattr(cell, "use_bias", True) and cell.bias is not None else None
        reset_after = bool(cell.reset_after) if spec is KERAS_GRU else None
        weights = {"kernel": np.concatenate([kernel, recurrent]), "bias": np.zeros(kernel.shape[1], np.float32)}
        if bias is not None and bias.ndim == 2:  # GRU with reset_after: [input bias, recurrent bias]
            weights["bias"], weights["recurrent_bias"] = bias[0], bias[1]
        elif bias is not None:
            weights["bias"] = bias
        elif reset_after:
            weights["recurrent_bias"] = np.zeros(kernel.shape[1], np.float32)
        variables = {"kernel": _variable_name(cell.kernel), "recurrent_kernel": _variable_name(cell.recurrent_kernel)}
        if bias is not None:
            variables["bias"] = _variable_name(cell.bias)
        act_name, act = _activation(cell.activation, framework)
        gate_name, gate_act = _activation(getattr(cell, "recurrent_activation", None) or (lambda x: x), framework)
        cells.append(
            KerasCell(
                name=path,
                spec=spec,
                units=units,
                input_size=kernel.shape[0],
                activation=act_name,
                recurrent_activation=gate_name if spec is not KERAS_SIMPLE_RNN else "-",
                weights=weights,
                variables=variables,
                backward=bool(layer.go_backwards),
                reset_after=reset_after,
                layer=layer,
                framework=framework,
                act=act,
                gate_act=gate_act,
            )
        )
    if not cells:
        found = f"; RNN layers of other cells: {', '.join(others)}" if others else ""
        raise GraphPatternError(
            f"no RNN layer found in {model.source}: looked for Keras LSTM, GRU and SimpleRNN layers "
            f"(also inside Bidirectional and nested models){found}"
        )
    return cells


def resolve_inputs(model: KerasModel, feeds: Any) -> dict[KerasInput, Any]:
    """Feeds for the model's inputs, checked: a mapping by input name, a list in input order,
    or (for a model with one input) one array under any name or none."""
    inputs = model.inputs
    listing = ", ".join(f"{i.name} ({i.dtype.name}, shape {i.shape})" for i in inputs)
    if isinstance(feeds, Mapping):
        given = {str(k).split(":")[0]: v for k, v in feeds.items()}
        if len(inputs) == 1 and len(given) == 1:
            given = {inputs[0].name: next(iter(given.values()))}
    elif isinstance(feeds, (list, tuple)):
        if len(feeds) != len(inputs):
            raise FeedError(f"{len(feeds)} input arrays given; the model takes {len(inputs)}: {listing}")
        given = {i.name: v for i, v in zip(inputs, feeds)}
    else:
        given = {inputs[0].name: feeds} if len(inputs) == 1 else {}
    names = {i.name for i in inputs}
    unknown = [k for k in given if k not in names]
    missing = [i.name for i in inputs if i.name not in given]
    if unknown or missing:
        what = f"unknown input {', '.join(unknown)}" if unknown else f"input {', '.join(missing)} not fed"
        raise FeedError(f"{what}: the model's inputs are {listing}; feed each, e.g. --feed {inputs[0].name}=FILE.npy")
    out = {}
    for i in inputs:
        value = given[i.name]
        if np.ndim(value) == 0:
            raise FeedError(f"feed {i.name}: expected an array of shape {i.shape}, given a scalar")
        out[i] = convert_feed(i.name, i, value, "input")
    return out


@dataclass
class _Seen:
    """What one layer received and returned in one call, as numpy arrays."""

    inputs: np.ndarray
    mask: np.ndarray | None
    initial: list[np.ndarray] | None
    outputs: np.ndarray
    states: list[np.ndarray]


@contextmanager
def _capture(cells: Sequence[KerasCell]) -> Iterator[dict[str, _Seen]]:
    """While active, each cell's layer records what enters and leaves its `call`."""
    seen: dict[str, _Seen] = {}

    def hook(cell: KerasCell, original):
        signature = inspect.signature(original)
        first = next(iter(signature.parameters))

        def call(*args, **kwargs):
            bound = signature.bind(*args, **kwargs).arguments
            initial = bound.get("initial_state")
            layer = cell.layer
            if initial is None and layer.stateful and layer.states is not None and layer.states[0] is not None:
                initial = list(layer.states)
            if initial is not None:
                initial = [_numpy(s) for s in (initial if isinstance(initial, (list, tuple)) else [initial])]
            out = original(*args, **kwargs)
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            mask = bound.get("mask")
            if cell.name in seen:
                raise GraphPatternError(f"layer {cell.name} ran twice in one call of the model: shared RNN layers are not supported")
            seen[cell.name] = _Seen(
                _numpy(bound[first]), None if mask is None else _numpy(mask).astype(bool), initial, _numpy(outs[0]), [_numpy(s) for s in outs[1:]]
            )
            return out

        return call

    hooked = []  # (layer, its own instance attribute `call` if it had one)
    try:
        for cell in cells:
            layer = cell.layer
            hooked.append((layer, layer.__dict__.get("call")))
            layer.call = hook(cell, layer.call)
        yield seen
    finally:
        for layer, own in hooked:
            if own is None:
                del layer.call  # the class's own method again
            else:
                layer.call = own


@dataclass
class _Result:
    """One cell replayed over one batch; `mask` [examples, steps] in input position order, or None."""

    replayed: Replayed
    mask: np.ndarray | None


class KerasPlan:
    """How a batch becomes gate values for `cells`: one call of the model with every layer
    hooked, then one replay per cell (the counterpart of `tracer.fetch.FetchPlan`).
    `steps` keeps a [start, stop) window of input positions.

    Stateful layers (`stateful=True`) are reset before each batch, so that every row is an
    independent sequence from zero state and a row's gates never depend on which rows were
    fed before it. With `carry_state`, they keep the state the previous batch left: row k
    of a batch continues row k of the batch before (Keras' stateful semantics).
    """

    def __init__(
        self, model: KerasModel, cells: Sequence[KerasCell], steps: tuple[int | None, int | None] = (None, None), carry_state: bool = False
    ):
        self.model = model
        self.cells = list(cells)
        self._steps = slice(*steps)
        self.carry_state = carry_state
        self.stateful = [layer for _, layer in _walk(model.model.layers, "") if getattr(layer, "stateful", False)]

    def batch_of(self, values: Sequence[_Result]) -> int:
        """How many examples the replayed `values` hold."""
        return values[0].replayed.preactivation.shape[0]

    def fetch(self, batch: Mapping[KerasInput, np.ndarray]) -> list[_Result]:
        """Call the model once on `batch` and replay every cell; one `_Result` per cell."""
        arrays = [np.asarray(batch[i]) for i in self.model.inputs]
        if not self.carry_state:
            for layer in self.stateful:
                layer.reset_states()
        with _capture(self.cells) as seen:
            self.model.model(arrays[0] if len(arrays) == 1 else arrays, training=False)
        missing = [c.name for c in self.cells if c.name not in seen]
        if missing:
            raise GraphPatternError(f"layers {', '.join(missing)} did not run when the model was called on its inputs")
        return [self._replay(c, seen[c.name]) for c in self.cells]

    @staticmethod
    def _replay(cell: KerasCell, seen: _Seen) -> _Result:
        x, mask = seen.inputs, seen.mask
        if cell.backward:  # Keras reverses the whole sequence (and mask) along time
            x, mask = x[:, ::-1], None if mask is None else mask[:, ::-1]
        layer = cell.layer
        order = ("h", "c") if cell.spec.is_lstm else ("h",)  # Keras' state order
        got = replay(
            cell.kind,
            cell.weights,
            x,
            None if seen.initial is None else dict(zip(order, seen.initial)),
            mask=mask,
            carry_outputs=not layer.zero_output_for_mask,
            activation=cell.act,
            recurrent_activation=cell.gate_act,
        )
        final = dict(zip(order, seen.states)) if layer.return_state else {}
        check(cell.name, got, seen.outputs, final)
        return _Result(got, seen.mask)

    def _by_position(self, cell: KerasCell, a: np.ndarray) -> np.ndarray:
        """[examples, loop steps, ...] as input positions, in the step window (a backward
        layer's step t read position steps - 1 - t)."""
        if cell.backward:
            a = a[:, ::-1]
        return np.ascontiguousarray(a[:, self._steps])

    def steps(self, values: Sequence[_Result], cell: int) -> np.ndarray:
        n = values[cell].replayed.preactivation.shape[1]
        return np.arange(n, dtype=np.int32)[self._steps]

    def lengths(self, values: Sequence[_Result], cell: int, keep: int | None, given: np.ndarray | None) -> np.ndarray | None:
        """Which rows to write: the layer's mask ([examples, steps] booleans) where it had
        one, and the `given` lengths (rows at or past them are left out)."""
        mask = values[cell].mask
        if mask is None:
            return given
        mask = mask[:keep, self._steps]
        if given is not None:
            mask = mask & (self.steps(values, cell)[None, :] < np.asarray(given)[:, None])
        return mask

    def gate(self, values: Sequence[_Result], cell: int, gate: int, column: str, rows: slice = slice(None)) -> np.ndarray:
        """One gate's `preactivation` or `activation` of the examples `rows`: a new [examples, steps, units] array."""
        return self._by_position(self.cells[cell], getattr(values[cell].replayed, column)[rows, :, gate])

    def state(self, values: Sequence[_Result], cell: int, state: str, rows: slice = slice(None)) -> np.ndarray:
        """One state (`c` or `h`) of the examples `rows`: a new [examples, steps, width] array."""
        return self._by_position(self.cells[cell], values[cell].replayed.states[state][rows])
