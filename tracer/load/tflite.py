"""TensorFlow Lite files (`.tflite`): the format's `read` hook and the model it gives.

`read` checks the file as data (`tracer.load.tflite_check`) and gives a `LiteModel`: the
file's bytes, its parsed flatbuffer (`schema_py_generated.ModelT`) and its inputs. Its
`interpreter` is its runtime's (`tracer.load.lite_runtime`: LiteRT's where it is installed,
else TensorFlow's), made with builtin kernels only (no delegate, no custom op) and with every
tensor kept after a run, so that what each recurrent op read and returned can be read back
(`tracer.values.lite`). Nothing here imports TensorFlow but `inputs`, whose shapes and dtypes
are TensorFlow's (what `record` checks feeds against); `inspect` reads `input_specs`. `describe` says in one line what a file
holds: its inputs and its recurrent ops (the fused sequence ops with their units, input
size, weight type, activation, clipping, peepholes and projection; `WHILE` loops with the
nonlinearities their bodies apply). Finding the ops' cells is `tracer.find.lite`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recorders.errors import ModelFormatError
from tracer.load.formats import LITE_SUFFIX, KerasInput, LoadRequest
from tracer.load.lite_runtime import LiteRuntime, runtime
from tracer.load.tflite_check import RECURRENT, checked, op_name, subgraph_fields

__all__ = ["read", "LiteModel", "LiteInput", "describe"]

_NONLINEAR = {"LOGISTIC": "sigmoid", "TANH": "tanh", "RELU": "relu", "HARD_SWISH": "hard_swish"}
# a fused op's `fusedActivationFunction`, by its number in the schema
ACTIVATIONS = {
    0: "none",
    1: "relu",
    2: "relu_n1_to_1",
    3: "relu6",
    4: "tanh",
    5: "sign_bit",
    6: "sigmoid",
}


def read(path: Path, source: str, request: LoadRequest) -> LiteModel | None:
    """A `.tflite` file, checked (`tracer.load.tflite_check`); None for any other path."""
    if path.suffix != LITE_SUFFIX:
        return None
    data, parsed = checked(path, source)
    chosen = runtime()
    model = LiteModel(
        data, parsed, source, chosen, notes=(f"run by {chosen.describe()}'s interpreter",)
    )
    if not model.input_tensors:
        raise ModelFormatError(
            f"{source}: its main subgraph takes no input; gatetrace records a model fed its sequences: "
            "convert a model with inputs"
        )
    return model


@dataclass(frozen=True)
class LiteInput:
    """One input of the file's main subgraph: the name it is fed by (its signature's, where
    the file has one), its shape as the interpreter allocates it (the batch first), its type's
    numpy name, its shape as the file declares it (its shape signature where the file gives
    one, None where that says -1: a dimension left free; else its shape), and its tensor's own
    name where that differs from `name`."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    declared: tuple[int | None, ...]
    tensor: str | None = None


@dataclass
class LiteModel:
    """A checked TensorFlow Lite file: its bytes, its parsed flatbuffer, where it came from.

    `inputs` are the main subgraph's, named by the file's first signature where it has one
    (`seq`, not `serving_default_seq:0`); their first dimension is the batch, fed to the
    interpreter `batch` rows at a time.
    """

    data: bytes = field(repr=False)
    parsed: Any = field(repr=False)
    source: str
    runtime: LiteRuntime = field(default_factory=runtime)
    format: str = "tflite"
    notes: tuple[str, ...] = ()

    @property
    def main(self) -> Any:
        return self.parsed.subgraphs[0]

    @property
    def input_tensors(self) -> list[int]:
        """The main subgraph's input tensors, in order."""
        return [int(i) for i in (self.main.inputs if self.main.inputs is not None else [])]

    @property
    def input_specs(self) -> list[LiteInput]:
        """The main subgraph's inputs (see `LiteInput`), read from the flatbuffer alone."""
        types = {v: k.lower() for k, v in vars(self.schema.TensorType).items() if k[0] != "_"}
        names = {}
        for signature in self.parsed.signatureDefs or []:
            if signature.subgraphIndex == 0:
                names = {int(t.tensorIndex): self._name(t.name) for t in signature.inputs or []}
                break
        out = []
        for i in self.input_tensors:
            t = self.main.tensors[i]
            own = tensor_name(t).split(":")[0]  # as the interpreter lists it
            name = names.get(i) or own
            shape = tuple(int(d) for d in t.shape)
            given = t.shapeSignature
            declared = (
                shape
                if given is None or len(given) != len(shape)
                else tuple(None if int(d) < 0 else int(d) for d in given)
            )
            out.append(
                LiteInput(
                    name,
                    shape,
                    types.get(t.type, "float32"),
                    declared,
                    own if own != name else None,
                )
            )
        return out

    def _name(self, name: bytes) -> str:
        """A signature input's name; ModelFormatError for one that is not UTF-8."""
        try:
            return name.decode()
        except UnicodeDecodeError:
            raise ModelFormatError(
                f"{self.source}: its signature names an input {name!r}, not text in UTF-8 as the names --feed takes "
                "are; convert the model again"
            ) from None

    @property
    def inputs(self) -> list[KerasInput]:
        """`input_specs` as record checks feeds against them: TensorFlow's shapes (the batch
        left open: it is fed `batch` rows at a time) and dtypes; imports TensorFlow."""
        from tracer._tf import tf

        return [
            KerasInput(
                i.name,
                tf.TensorShape([None, *i.shape[1:]]),
                tf.as_dtype(i.dtype),
                (i.tensor,) if i.tensor else (),
            )
            for i in self.input_specs
        ]

    @property
    def schema(self) -> Any:
        """The schema's generated reader of the runtime the file was read with."""
        return self.runtime.schema()

    @property
    def batch(self) -> int:
        """How many rows the interpreter takes at a time: the inputs' first dimension as the
        file allocates it (1 for most converted models, and where the file lets it vary)."""
        return max(
            [
                int(self.main.tensors[i].shape[0])
                for i in self.input_tensors
                if len(self.main.tensors[i].shape)
            ]
            or [1]
        )

    def batch_note(self) -> str:
        """How many sequences the interpreter runs at a time, as `inspect` and `record` say it:
        the file's batch (`batch`), and each input's shape as the file declares it."""
        specs = self.input_specs
        shown = ", ".join(f"{i.name} {list(i.declared)}" for i in specs)
        n = self.batch
        fixed = all(i.declared[:1] != (None,) for i in specs)
        how = f"fixes its batch at {n}" if fixed else f"leaves its batch free, allocated as {n}"
        runs = "one sequence" if n == 1 else f"{n} sequences"
        return f"{self.source} {how} ({shown}): its interpreter runs {runs} at a time"

    def interpreter(self, main: int = 0, shapes: Sequence[Sequence[int]] | None = None) -> Any:
        """The runtime's interpreter of the file, its tensors allocated: builtin kernels
        only (no default delegate; the file's ops were checked to be builtins), every tensor
        kept after a run. With `main`, of the file with that subgraph as its main one (a
        WHILE loop's cond or body, run an iteration at a time), its tensors numbered as in
        the file; with `shapes`, its inputs resized to them before it allocates anything (what
        a loop carries, where the subgraph declares other shapes, as the WHILE kernel resizes
        them). ModelFormatError where the interpreter refuses the file."""
        try:
            it = self.runtime.interpreter(self.data if main == 0 else self._with_main(main))
            if shapes is not None:
                for t, shape in zip(self.parsed.subgraphs[main].inputs, shapes, strict=True):
                    it.resize_tensor_input(int(t), [int(d) for d in shape], strict=False)
            it.allocate_tensors()
        except (ValueError, RuntimeError) as err:
            raise self.refused(err) from None
        return it

    def invoke(self, it: Any) -> None:
        """Run interpreter `it` once; ModelFormatError (one line) where it fails."""
        try:
            it.invoke()
        except (ValueError, RuntimeError) as err:
            raise self.refused(err) from None

    def refused(self, err: Exception) -> ModelFormatError:
        """The interpreter's error `err`, as one line naming the file."""
        why = " ".join(str(err).split()) or type(err).__name__
        return ModelFormatError(
            f"{self.source}: the TensorFlow Lite interpreter ({self.runtime.describe()}) refuses it: {why}; "
            "convert the model again"
        )

    def _with_main(self, index: int) -> bytes:
        """The file with subgraph `index` first (the one an interpreter runs), every op's
        subgraph numbers changed to match, no signatures."""
        import flatbuffers

        model = self.runtime.parse(
            self.data
        )  # (absent options renumbered as the runtime reads them)
        order = [index] + [g for g in range(len(model.subgraphs)) if g != index]
        moved = {old: new for new, old in enumerate(order)}
        model.subgraphs = [model.subgraphs[g] for g in order]
        for subgraph in model.subgraphs:
            for op in subgraph.operators or []:
                for attr, number in subgraph_fields(op):
                    setattr(op.builtinOptions, attr, moved[number])
        model.signatureDefs = None
        builder = flatbuffers.Builder(len(self.data) + 1024)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())

    def op_kind(self, op: Any) -> str:
        """An op's builtin name (`UNIDIRECTIONAL_SEQUENCE_LSTM`)."""
        return op_name(self.parsed.operatorCodes[op.opcodeIndex], self.schema)

    def describe(self) -> str:
        return describe(self.parsed, self.schema)

    def close(self) -> None:
        """Nothing to release (the interpreters are made per use); for symmetry with `Model`."""

    def __enter__(self) -> LiteModel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def tensor_name(t: Any) -> str:
    """A tensor's or subgraph's name in the file ("?" where it has none)."""
    return t.name.decode(errors="replace") if t.name else "?"


def describe(model: Any, fb: Any) -> str:
    """What a checked model holds (read with schema `fb`), in one line: its inputs and its
    recurrent ops."""
    types = {v: k.lower() for k, v in vars(fb.TensorType).items() if not k.startswith("_")}
    main = model.subgraphs[0]
    inputs = [
        f"{tensor_name(main.tensors[i])} {[int(d) for d in main.tensors[i].shape]} {types.get(main.tensors[i].type)}"
        for i in (main.inputs if main.inputs is not None else [])
    ]
    found = []
    for subgraph in model.subgraphs or []:
        for op in subgraph.operators or []:
            kind = op_name(model.operatorCodes[op.opcodeIndex], fb)
            if kind in RECURRENT:
                found.append(_recurrent(kind, op, subgraph, types))
            elif kind == "WHILE":
                body = model.subgraphs[op.builtinOptions.bodySubgraphIndex]
                applied = Counter(
                    _NONLINEAR[k]
                    for k in (
                        op_name(model.operatorCodes[o.opcodeIndex], fb)
                        for o in body.operators or []
                    )
                    if k in _NONLINEAR
                )
                shown = (
                    ", ".join(f"{n} {name}" for name, n in sorted(applied.items()))
                    or "no nonlinearity"
                )
                found.append(
                    f"a WHILE loop whose body ({tensor_name(body)}) applies {shown} an iteration"
                )
    recurrent = "; ".join(found) or "no recurrent op"
    return f"inputs {', '.join(inputs) or 'none'}; {recurrent}"


def _recurrent(kind: str, op: Any, subgraph: Any, types: dict[int, str]) -> str:
    """One fused recurrent op: its units, input size, weights' type, activation, clipping."""
    inputs = list(op.inputs)
    # the input-to-forget-gate weights of an LSTM (input 2), the input weights of an RNN (1)
    k = inputs[2] if "LSTM" in kind else inputs[1]
    weights = subgraph.tensors[k]
    units, features = ([int(d) for d in weights.shape] + [0, 0])[:2]
    options = op.builtinOptions
    extras = [f"{types.get(weights.type)} weights"]
    activation = getattr(options, "fusedActivationFunction", None)
    if activation is not None:
        extras.append(f"activation {ACTIVATIONS.get(activation, activation)}")
    for attr, shown in (("cellClip", "cell clip"), ("projClip", "projection clip")):
        if getattr(options, attr, 0):
            extras.append(f"{shown} {getattr(options, attr):g}")
    if "LSTM" in kind and len(inputs) > 9 and inputs[9] >= 0:
        extras.append("peepholes")
    if "LSTM" in kind and len(inputs) > 16 and inputs[16] >= 0:
        extras.append("projection")
    return f"{kind} ({units} units, {features} inputs, {', '.join(extras)})"
