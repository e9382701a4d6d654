"""The runtime that runs `.tflite` files, and the flatbuffer schema that reads them.

Two packages ship TensorFlow Lite's kernels, its Python interpreter and the schema's
generated reader (`schema_py_generated`, the flatbuffers object API):

    litert       LiteRT (`ai_edge_litert`, the `lite` extra): the runtime TensorFlow now points
                 to; it loads in a fraction of a second, without TensorFlow
    tensorflow   `tf.lite`, part of TensorFlow, which TensorFlow 2.21 marks as deprecated

`runtime()` is LiteRT where it is installed, TensorFlow's otherwise; the environment variable
GATETRACE_LITE_RUNTIME (`litert` or `tensorflow`) picks one. Either is used the same way
(`LiteRuntime`): `schema()` parses files, `interpreter(content)` runs one with builtin kernels
only (no default delegate: the file's ops were checked to be builtins) and every tensor kept
after a run, so that what each op read and returned can be read back.
"""

from __future__ import annotations

import functools
import importlib
import os
import warnings
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from typing import Any

from recorders.errors import ModelFormatError, install_hint

__all__ = ["LiteRuntime", "RUNTIMES", "ENVIRONMENT", "runtime"]

ENVIRONMENT = "GATETRACE_LITE_RUNTIME"


@dataclass(frozen=True)
class LiteRuntime:
    """A package that runs `.tflite` files: `name` as GATETRACE_LITE_RUNTIME says it, its
    distribution on the package index, the module holding `Interpreter` and `OpResolverType`,
    the schema's generated reader, and what is imported before them (TensorFlow, quiet)."""

    name: str
    package: str
    module: str
    schema_module: str
    first: tuple[str, ...] = ()

    def schema(self) -> Any:
        """This runtime's `schema_py_generated`."""
        return importlib.import_module(self.schema_module)

    def interpreter(self, content: bytes) -> Any:
        """An interpreter of the file `content`, its tensors not yet allocated: builtin
        kernels only, every tensor kept after a run."""
        for name in self.first:
            importlib.import_module(name)
        runtime = importlib.import_module(self.module)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TensorFlow's notice that LiteRT succeeds it
            return runtime.Interpreter(
                model_content=content,
                experimental_preserve_all_tensors=True,
                experimental_op_resolver_type=runtime.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
            )

    def describe(self) -> str:
        """The package and its version (`ai-edge-litert 2.3.0`), as `inspect` and a
        recording's manifest say it."""
        try:
            return f"{self.package} {version(self.package)}"
        except PackageNotFoundError:  # built from source, not installed as a distribution
            return self.package

    def installed(self) -> bool:
        """Whether its package can be imported (found without importing it)."""
        return find_spec(self.module.partition(".")[0]) is not None


RUNTIMES = {
    "litert": LiteRuntime(
        "litert",
        "ai-edge-litert",
        "ai_edge_litert.interpreter",
        "ai_edge_litert.schema_py_generated",
    ),
    "tensorflow": LiteRuntime(
        "tensorflow",
        "tensorflow",
        "tensorflow.lite.python.interpreter",
        "tensorflow.lite.python.schema_py_generated",
        first=("tracer._tf",),  # TensorFlow imported once, its start-up lines quiet
    ),
}


@functools.cache
def _chosen(asked: str | None) -> LiteRuntime:
    if asked is None:
        return RUNTIMES["litert"] if RUNTIMES["litert"].installed() else RUNTIMES["tensorflow"]
    if asked not in RUNTIMES:
        raise ModelFormatError(
            f"{ENVIRONMENT}={asked!r}: expected one of {', '.join(RUNTIMES)}; unset it to use "
            "LiteRT where it is installed"
        )
    chosen = RUNTIMES[asked]
    if not chosen.installed():  # TensorFlow always is: gatetrace needs it
        raise ModelFormatError(
            f"{ENVIRONMENT}={asked}, but {chosen.package} is not installed: {install_hint('lite')} "
            f"adds it; or unset {ENVIRONMENT} to use TensorFlow's"
        )
    return chosen


def runtime() -> LiteRuntime:
    """The runtime `.tflite` files are read and run with (see the module docstring)."""
    return _chosen(os.environ.get(ENVIRONMENT) or None)
