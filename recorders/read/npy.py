"""The header of a `.npy` file, read alone: its shape, order and type, before any data.

numpy parses the header's text as Python literals, so a damaged header raises whatever that
parser raises (`SyntaxError`, tokenize's `TokenError`, ...), not only `ValueError`: here each
is one `ValueError` whose message is one line.
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

__all__ = ["npy_header"]


def npy_header(f: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran order, dtype) of the `.npy` file open at its start; `f` is left at its
    data. ValueError, in one line, if the header cannot be read or declares no array's shape."""
    try:
        version = np.lib.format.read_magic(f)
        read = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, fortran, dtype = read(f)
    except Exception as err:  # see the module docstring
        line = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(f"its .npy header cannot be read: {line}") from None
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError(f"its header declares the shape {shape}, which no array has")
    return tuple(shape), bool(fortran), dtype
