"""Keras .h5 files read as data, never as code: their structure (every dataset and link, no
value read, no link followed), what would be read from outside the file, what declares far
more bytes than it stores, and the model config they hold. `tracer.load.keras_files` checks a
Keras file with these before anything loads it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from recorders.errors import ModelFormatError
from recorders.read.reader import default_memory

__all__ = ["h5_problems", "h5_oversized", "h5_config", "config_json", "WEIGHTS_RATIO"]

# the most an uncompressed weights file may exceed its compressed size by, beyond 64 MiB
WEIGHTS_RATIO = 50


def _h5_datasets(source: str, file) -> Iterator[tuple[str, Any]]:
    """(path, what) for every object of an HDF5 file (a path or a binary file object): a dataset,
    or an `h5py.ExternalLink`. Only the file's structure is read, never a dataset's values, and
    no link is followed; an object linked twice is given once."""
    import h5py

    seen = set()
    try:
        with h5py.File(file, "r") as f:
            stack = [f]
            while stack:
                group = stack.pop()
                for name in group:
                    path = f"{group.name.rstrip('/')}/{name}"
                    link = group.get(name, getlink=True)
                    if isinstance(link, h5py.ExternalLink):
                        yield path, link
                        continue
                    # a name for an object of this file, visited by its own
                    if isinstance(link, h5py.SoftLink):
                        continue
                    obj = group[name]
                    address = h5py.h5o.get_info(obj.id).addr
                    if address in seen:
                        continue
                    seen.add(address)
                    if isinstance(obj, h5py.Group):
                        stack.append(obj)
                    elif isinstance(obj, h5py.Dataset):
                        yield path, obj
    except (OSError, ValueError, KeyError) as err:
        raise ModelFormatError(f"{source}: cannot read it as an HDF5 file: {err}") from None


def h5_problems(source: str, file) -> list[str]:
    """`path (why)` for every object of an HDF5 file (a path or a binary file object) whose
    data would be read from outside it: external raw storage, external links, virtual
    datasets. Only the file's structure is read, never a dataset's values, and no link is followed."""
    import h5py

    problems = []
    for path, obj in _h5_datasets(source, file):
        if isinstance(obj, h5py.ExternalLink):
            problems.append(f"{path} (a link to {obj.filename}, another file)")
            continue
        plist = obj.id.get_create_plist()
        if plist.get_external_count():
            problems.append(
                f"{path} (stored in {plist.get_external(0)[0].decode(errors='replace')}, another file)"
            )
        elif plist.get_layout() == h5py.h5d.VIRTUAL:
            problems.append(f"{path} (a virtual dataset, mapping other files in)")
    return sorted(problems)


def h5_oversized(source: str, file) -> list[str]:
    """`path (why)` for every dataset that declares far more bytes than the file stores for it
    (a chunked dataset whose chunks were never written reads back as its fill value: a few
    bytes on disk can declare terabytes): more than 64 MiB and `WEIGHTS_RATIO` times its stored
    bytes. Keras writes its weights uncompressed, so what it saved declares what it stores.
    Then the datasets together, which loading allocates, against the memory budget (a file
    whose holes store a dataset in full passes the first check)."""
    import h5py

    found, total = [], 0
    for path, obj in _h5_datasets(source, file):
        if isinstance(obj, h5py.Dataset):
            declared, stored = int(obj.size) * obj.dtype.itemsize, obj.id.get_storage_size()
            total += declared
            if declared > max(64 << 20, WEIGHTS_RATIO * stored):
                found.append(
                    f"{path} (declares {declared:,} bytes of {list(obj.shape)}, stores {stored:,})"
                )
    budget = default_memory()
    if not found and total > budget:  # stored in full (a sparse file stores holes as bytes)
        found.append(
            f"all its datasets (declare {total:,} bytes together, more than the memory budget of {budget:,}, half "
            "the memory available)"
        )
    return sorted(found)


def config_json(text: str | bytes, source: str) -> Any:
    """A Keras file's configuration text as data; ModelFormatError where it nests deeper than
    Python's JSON reader goes (no model Keras saves comes near: see MAX_NESTING in
    `tracer.load.keras_files`)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ModelFormatError(
            f"{source}: its configuration nests its objects deeper than Python's JSON reader goes, deeper than any "
            "model Keras saves; nothing was loaded"
        ) from None


def h5_config(p: Path, source: str) -> dict:
    """The model config a Keras .h5 file holds (its `model_config` attribute), as data."""
    import h5py

    try:
        with h5py.File(p, "r") as f:
            text = f.attrs.get("model_config")
            if text is None:
                what = "layer_names" in f.attrs or "model_weights" not in f
                raise ModelFormatError(
                    f"{source}: the file holds {'weights only' if what else 'no model'} (saved with save_weights?) and no "
                    "architecture: save the model with model.save, or build it in Python and pass it to tracer.record"
                )
            return config_json(text.decode() if isinstance(text, bytes) else text, source)
    except (OSError, ValueError) as err:
        raise ModelFormatError(f"{source}: cannot read it as a Keras .h5 file: {err}") from None
