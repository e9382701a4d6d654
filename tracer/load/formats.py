"""The model formats `load_model` reads, as the help and the errors name them. Imports nothing
heavy: the command line's help is made from it before TensorFlow loads.
"""

from __future__ import annotations

__all__ = ["FORMATS"]

FORMATS = (
    "a checkpoint prefix P with P.meta beside it, a folder holding a 'checkpoint' file, "
    "a SavedModel folder (saved_model.pb), a frozen GraphDef .pb, or a Keras .keras/.h5 file "
    "(or tf-keras SavedModel folder)"
)
