"""The outputs of a Keras model or a TensorFlow Lite file (`--outputs`): what its own call
or its interpreter returned, beside the gates.

A Keras model's outputs are named as Keras lists them (`model.output_names`, else the
layers that return them) or, for a model returning a dict, by its keys; their values are
what the one call that captures the layers (`tracer.values.keras.KerasPlan`) returned:
with `--hold`, the held model's, whose layers after a held one read its replay. A
TensorFlow Lite file's outputs are its main subgraph's output tensors, named by its
signature or by the tensors' own names; their values are what its interpreter
(`tracer.values.lite.LitePlan`) left in them, a quantised one dequantised by its scale and
zero point (`(code - zero point) * scale`, as the manifest's `dtype` says).

Either is [batch], [batch, units], or a sequence, [batch, steps, units] or time-major [steps,
batch, units], told apart as a graph's are (`tracer.values.outputs.tell`) before anything is
recorded: a Keras model's by its call on the first fed sequence twice and three times over
(`keras_told`, which `tracer.values.keras.KerasPlan.tell_outputs` calls; once where its
inputs fix the batch size), a TensorFlow Lite file's by the shapes its interpreter allocates
for the batch it runs, the only one gatetrace runs it at (`lite_outputs`: an output whose
first two dimensions are both that batch, past one, is refused). `tracer.values.outputs.Output`
then gives a batch's values as the recording stores them, example by example.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from recorders.errors import GraphPatternError, SelectionError
from recorders.write.schema import MAX_UNITS
from tracer._tf import tf
from tracer.load.keras import KerasModel, to_numpy
from tracer.load.tflite import LiteModel, tensor_name
from tracer.values.outputs import Fixing, Output, Seen, tell

__all__ = ["Returned", "keras_outputs", "keras_told", "lite_outputs", "keras_values"]


@dataclass(frozen=True)
class Returned:
    """One output `--outputs` named: the name given, where the model returns it (`index`:
    its place among a Keras model's flattened outputs, or a TensorFlow Lite tensor's
    number), what the recording stores (`output`: None until which dimension holds the
    examples is told, `keras_told`), and a quantised tensor's `scale` and `zero_point`
    (None: not quantised)."""

    name: str
    index: int
    output: Output | None = None
    scale: float | None = None
    zero_point: int = 0

    @property
    def told(self) -> Output:
        """`output`, told; RuntimeError where it was not."""
        if self.output is None:
            raise RuntimeError(
                f"output {self.name}: which dimension holds the examples was not told"
            )
        return self.output

    def take(self, value: Any) -> np.ndarray:
        """What the model returned, as numbers: a quantised tensor's codes dequantised, in
        float32 as TensorFlow Lite dequantises them, (code - zero point) * scale."""
        value = np.asarray(value)
        if self.scale is None:
            return value
        return (value.astype(np.int32) - self.zero_point).astype(np.float32) * np.float32(
            self.scale
        )


def keras_outputs(model: KerasModel, names: Sequence[str]) -> list[Returned]:
    """The outputs of a Keras model `names` names (each as Keras lists it, or a key of the
    dict the model returns), checked: numbers, [batch], [batch, units] or a sequence of
    units, the units known; which dimension holds the examples told later (`keras_told`).
    SelectionError, one line, naming the outputs it has otherwise."""
    tensors = list(model.model.outputs or [])
    listed = getattr(model.model, "output_names", None)
    own = (
        [str(n) for n in listed]
        if isinstance(listed, (list, tuple)) and len(listed) == len(tensors)
        else [_layer_of(t, k) for k, t in enumerate(tensors)]
    )
    keys = _dict_keys(model.model, len(tensors))
    by_name: dict[str, set[int]] = {}
    for k, name in [*enumerate(own), *enumerate(keys)]:
        by_name.setdefault(name, set()).add(k)
    shown = ", ".join(dict.fromkeys(own))
    if keys:
        shown += f" (as Keras lists them), or the keys of the dict it returns: {', '.join(keys)}"
    found: list[Returned] = []
    for name in names:
        where = by_name.get(name)
        if not where:
            raise SelectionError(
                f"--outputs {name}: {model.source} has no output of this name; its outputs are {shown}"
            )
        if len(where) > 1:
            raise SelectionError(
                f"--outputs {name}: Keras lists {len(where)} of the outputs of {model.source} by this name "
                f"(its outputs {' and '.join(str(k) for k in sorted(where))} of {shown}), so which one is "
                "meant cannot be told: give each output a name of its own (return a dict of them), or name "
                "another"
            )
        k = next(iter(where))
        tensor = tensors[k]
        shape = tf.TensorShape(tensor.shape)
        dtype = tf.as_dtype(tensor.dtype)
        _check(name, model.source, shape.as_list() if shape.rank is not None else None, dtype.name)
        # the dimensions that may hold the examples: the first, or a sequence's first two
        lead = shape.as_list()[: 2 if shape.rank == 3 else 1]
        fixed = {i.shape[0] for i in model.inputs if i.shape.rank}
        if not any(d is None or d in fixed for d in lead):
            said = "first dimension is" if len(lead) == 1 else "first two dimensions are"
            raise SelectionError(
                f"--outputs {name}: its {said} {' and '.join(str(d) for d in lead)}, which is no "
                "input's batch: name an output whose rows are the examples"
            )
        found.append(Returned(name, k))
    _once(found)
    return found


def keras_told(
    model: KerasModel, outputs: Sequence[Returned], seen: Sequence[Seen], stateful: bool
) -> list[Returned]:
    """`outputs` of a Keras model, each with which of its dimensions holds the examples told
    from the shapes `seen` of its call on other batch sizes (`tracer.values.outputs.watch`,
    `tell`). SelectionError, one line, where that cannot be told; a model with `stateful`
    layers, whose batch they fix, is not told to leave its batch size open."""
    reopen = (
        None
        if stateful
        else "build the model with its inputs' batch size open (keras.Input without batch_size), "
        "which gatetrace feeds two batch sizes to tell them apart"
    )
    fixing = Fixing("the model's inputs fix", reopen)
    told = []
    for k, r in enumerate(outputs):
        tensor = model.model.outputs[r.index]
        shape = tf.TensorShape(tensor.shape).as_list()
        output = tell(r.name, shape, tf.as_dtype(tensor.dtype).name, seen, k, fixing)
        told.append(replace(r, output=output))
    return told


def keras_values(model: KerasModel, returned: Any, outputs: Sequence[Returned]) -> list[Any]:
    """What the model's call `returned`, for each of `outputs`, as numpy arrays."""
    if not outputs:
        return []
    flat = tf.nest.flatten(returned)
    if len(flat) != len(model.model.outputs):
        raise GraphPatternError(
            f"{model.source} returned {len(flat)} tensors when called, not the {len(model.model.outputs)} "
            "outputs Keras lists for it; its outputs cannot be told apart: leave --outputs out"
        )
    return [to_numpy(flat[o.index]) for o in outputs]


def lite_outputs(model: LiteModel, names: Sequence[str]) -> list[Returned]:
    """The output tensors of a TensorFlow Lite file's main subgraph `names` names (each by
    its signature's name or its tensor's own name), checked: numbers, [batch], [batch,
    units] or a sequence of units, quantised (if at all) by one scale; which dimension holds
    the examples told from the shapes the file allocates for the batch its interpreter runs
    (`LiteModel.batch`, the only one gatetrace runs it at): the one of that size (a
    sequence's first two both that batch, past one: refused). SelectionError, one line,
    naming the outputs it has otherwise."""
    main = model.main
    indices = [int(t) for t in (main.outputs if main.outputs is not None else [])]
    signed: dict[int, str] = {}
    for signature in model.parsed.signatureDefs or []:
        if signature.subgraphIndex == 0:
            signed = {
                int(t.tensorIndex): t.name.decode(errors="replace") for t in signature.outputs or []
            }
            break
    by_name: dict[str, set[int]] = {}
    for i in indices:
        for name in (signed.get(i), tensor_name(main.tensors[i])):
            if name:
                by_name.setdefault(name, set()).add(i)
    shown = ", ".join(
        f"{signed[i]} ({tensor_name(main.tensors[i])})"
        if i in signed
        else tensor_name(main.tensors[i])
        for i in indices
    )
    types = {v: k.lower() for k, v in vars(model.schema.TensorType).items() if k[0] != "_"}
    found: list[Returned] = []
    for name in names:
        where = by_name.get(name)
        if not where:
            raise SelectionError(
                f"--outputs {name}: {model.source} has no output of this name; its outputs are "
                f"{shown or 'none'} (by its signature's name, or its tensor's)"
            )
        if len(where) > 1:
            raise SelectionError(
                f"--outputs {name}: {len(where)} outputs of {model.source} go by this name: name one by "
                f"the other name it has: {shown}"
            )
        i = next(iter(where))
        t = main.tensors[i]
        shape = [int(d) for d in t.shape] if t.shape is not None else []
        dtype = types.get(t.type, str(t.type))
        _check(name, model.source, shape, dtype)
        scales, zero = _quantisation(t)
        if len(scales) > 1:
            raise SelectionError(
                f"--outputs {name}: {dtype} quantised by {len(scales)} scales, one along dimension "
                f"{t.quantization.quantizedDimension}; gatetrace dequantises outputs of one scale: "
                "name another output, or convert the model with float outputs"
            )
        described = (
            f"float32 dequantised from {dtype} (scale {scales[0]!r}, zero point {zero[0]})"
            if scales
            else dtype
        )
        # the shape the interpreter gives a batch of the file's: told as a graph's of one fixed batch
        allocated = [Seen(model.batch, (tuple(shape),))]
        out = tell(name, shape, described, allocated, 0, _LITE)
        found.append(
            Returned(name, i, out, scales[0], zero[0]) if scales else Returned(name, i, out)
        )
    _once(found)
    return found


# a TensorFlow Lite file's batch, which gatetrace never resizes: its interpreter's
_LITE = Fixing(
    "the file fixes for its interpreter",
    "convert the model with a batch of 1, which its interpreter then runs a sequence at a time",
)


def _quantisation(t: Any) -> tuple[list[float], list[int]]:
    """A tensor's scales and zero points (none where it is not quantised)."""
    q = t.quantization
    scales = [] if q is None or q.scale is None else [float(s) for s in q.scale]
    zero = [] if q is None or q.zeroPoint is None else [int(z) for z in q.zeroPoint]
    return scales, (zero or [0] * len(scales))


def _check(name: str, source: str, shape: Sequence[int | None] | None, dtype: str) -> None:
    """Refuse an output that is not numbers of [batch], [batch, units] or [batch, steps,
    units], its units known and within what a recording holds."""
    numbers = dtype.startswith(("float", "int", "uint", "bool"))
    if not numbers or shape is None or len(shape) not in (1, 2, 3):
        raise SelectionError(
            f"--outputs {name}: expected numbers [batch], [batch, units] or [batch, steps, units]; "
            f"the output of {source} is {dtype} of shape {shape}"
        )
    units = shape[-1]
    if len(shape) > 1 and units is None:
        raise SelectionError(
            f"--outputs {name}: its units (its last dimension) are not known before it runs"
        )
    if len(shape) > 1 and units is not None and units > MAX_UNITS:
        raise SelectionError(
            f"--outputs {name}: it has {units:,} units; a recording holds at most {MAX_UNITS:,} an output"
        )


def _once(found: Sequence[Returned]) -> None:
    """Refuse an output named twice (by one name, or by both of its names)."""
    seen: dict[int, str] = {}
    for r in found:
        if r.index in seen:
            if seen[r.index] == r.name:
                raise SelectionError(f"--outputs: {r.name} is named twice")
            raise SelectionError(
                f"--outputs: {seen[r.index]} and {r.name} name the same output; name it once"
            )
        seen[r.index] = r.name


def _layer_of(tensor: Any, k: int) -> str:
    """The name of the layer that returns a Keras output (`output_k` where Keras keeps none)."""
    history = getattr(tensor, "_keras_history", None)
    layer = history[0] if history else None
    return str(getattr(layer, "name", None) or f"output_{k}")


def _dict_keys(model: Any, n: int) -> list[str]:
    """The keys of the dict a Keras model returns, in the order of its flattened outputs
    (none where it returns no dict)."""
    try:
        structure = model.output
    except (AttributeError, ValueError):
        return []
    if not isinstance(structure, dict) or len(structure) != n:
        return []
    keys = list(tf.nest.flatten({k: str(k) for k in structure}))
    return [str(k) for k in keys]
