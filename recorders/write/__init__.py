"""Writing a recording: what it is on disk, and the writer that makes it.

The format, which readers import too: `layout` (folders, file names, column encodings),
`columns` and `keys` (long-format columns), `schema` (what its JSON files hold), `progress`
(which examples are complete), `folder` (a folder reached only through its handle), `stats`
(summary statistics that merge exactly), `series` (a series folder: one recording per key).
The writer's own parts: `writer` (`RecordingWriter`: a recording's lifecycle, batch by
batch), `opening` (what `--out` holds, checked before anything is written), `manifest`
(written when every shard is finished), `weights_file` (`write_weights`: the weights table
as a file of its own), `summary` (`SummaryWriter`), `rowgroups` (a part file cut into row groups),
`plain` (the default layout's part files written from numpy, with `thrift` for their
metadata), `direct` (new files written past the page cache), `swap` (locks and the
`--overwrite` swap), `place` (local folder or object storage), `files` (the output
location). What `tracer` takes from the writer's parts is this package's `__all__` (imported
from here: `from recorders.write import place_of`); the format's modules are imported by
name. Imports only `recorders.errors` and this package.
"""

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers and editors see: the same names, from the same modules
    from recorders.write.direct import BUFFER as DIRECT_BUFFER
    from recorders.write.files import (
        check_out,
        foreign_entries,
        is_uri,
        local_path,
        publish,
        refuse_non_folder,
        remove,
        temp_sibling,
    )
    from recorders.write.place import LocalPlace, place_of
    from recorders.write.summary import SummaryWriter
    from recorders.write.swap import create_folder
    from recorders.write.weights_file import write_weights
    from recorders.write.writer import WRITE_THREADS, RecordingWriter

# Loaded on first use: reading a recording's format (`recorders.write.layout`, ...) does not
# import the writer, nor pandas with it.
_LAZY = {
    "RecordingWriter": ("recorders.write.writer", "RecordingWriter"),
    "WRITE_THREADS": ("recorders.write.writer", "WRITE_THREADS"),
    "SummaryWriter": ("recorders.write.summary", "SummaryWriter"),
    "write_weights": ("recorders.write.weights_file", "write_weights"),
    "DIRECT_BUFFER": ("recorders.write.direct", "BUFFER"),
    "place_of": ("recorders.write.place", "place_of"),
    "LocalPlace": ("recorders.write.place", "LocalPlace"),
    "create_folder": ("recorders.write.swap", "create_folder"),
    **{
        name: ("recorders.write.files", name)
        for name in (
            "check_out",
            "foreign_entries",
            "is_uri",
            "local_path",
            "publish",
            "refuse_non_folder",
            "remove",
            "temp_sibling",
        )
    },
}


def __getattr__(name: str):
    if name in _LAZY:
        module, attribute = _LAZY[name]
        value = getattr(import_module(module), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'recorders.write' has no attribute {name!r}")


__all__ = [
    "RecordingWriter",
    "SummaryWriter",
    "write_weights",
    "WRITE_THREADS",
    "DIRECT_BUFFER",
    "place_of",
    "LocalPlace",
    "is_uri",
    "local_path",
    "check_out",
    "foreign_entries",
    "publish",
    "refuse_non_folder",
    "remove",
    "temp_sibling",
    "create_folder",
]
