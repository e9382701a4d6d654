"""Your own Keras classes, for a Keras file whose model is built from them (a cell of your own
in a `keras.layers.RNN`, a custom layer).

A Keras file holds the names of its classes, never their code. Where a model needs a class of
yours, gatetrace loads it only when you name the Python file that defines it
(`--custom-objects my_cells.py`, or `load_model(path, custom_objects="my_cells.py")`):
that file is imported as a module, which runs its code, as any import does. The classes it
defines are then accepted by name in the file's check (`tracer.load.keras_files`) and given
to Keras' loader; nothing else about what loading runs changes (a `Lambda`, a function named
in the file, a file it would read are refused as before). A mapping of names to classes
(Keras' own `custom_objects`) is taken as it is.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recorders.errors import ModelFormatError

__all__ = ["custom_objects"]


def custom_objects(given: str | os.PathLike[str] | Mapping[str, Any] | None) -> dict[str, Any]:
    """The classes `given` names: those a Python file defines (importing it, see the module
    docstring), or a mapping's; none for None."""
    if given is None:
        return {}
    if isinstance(given, Mapping):
        return dict(given)
    path = Path(given)
    if path.suffix != ".py" or not path.is_file():
        raise ModelFormatError(
            f"--custom-objects {path}: expected a Python file (.py) defining your Keras classes; "
            f"{'it does not exist' if not path.exists() else 'it is not a .py file'}"
        )
    name = f"gatetrace_custom_objects_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelFormatError(f"--custom-objects {path}: cannot be imported as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (classes pickle and Keras looks them up by module)
    try:
        spec.loader.exec_module(module)
    except SystemExit as err:  # sys.exit() in the file: say which file stopped, exit 2
        del sys.modules[name]
        raise ModelFormatError(
            f"--custom-objects {path}: importing it called sys.exit({err.code!r}), which would end gatetrace; "
            "keep what the file runs on import to defining your classes"
        ) from None
    except Exception as err:
        del sys.modules[name]
        raise ModelFormatError(
            f"--custom-objects {path}: importing it raised {type(err).__name__}: {err}"
        ) from None
    found = {
        k: v
        for k, v in vars(module).items()
        if isinstance(v, type) and v.__module__ == name and not k.startswith("_")
    }
    if not found:
        raise ModelFormatError(f"--custom-objects {path}: it defines no class")
    return found
