"""The main job: from a loaded model and its feeds to a finished recording folder.

`trace` fetches every gate of every cell for one batch and returns numpy arrays;
`record` does the same and writes the gates, states and weights tables with a
manifest (see `recorders.parquet` for the layout).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping, Sequence

import numpy as np

from recorders import RecordingWriter, __version__
from recorders.errors import FeedError
from tracer.feeds import batches, count_sequences, resolve_feeds
from tracer.fetch import FetchPlan, Trace
from tracer.graph import Cell, find_cells
from tracer.model import Model
from tracer.select import Selection
from tracer.weights import read_weights, weights_columns

__all__ = ["trace", "record", "describe", "DEFAULT_BATCH_SIZE"]

DEFAULT_BATCH_SIZE = 256


def _prepare(model: Model, feeds: Mapping[str, Any], cells: Sequence[Cell] | None):
    cells = list(cells) if cells is not None else find_cells(model.graph, model.source)
    plan = FetchPlan(model.graph, cells)
    feed_dict = resolve_feeds(model.graph, feeds, plan.tensors)
    return cells, plan, feed_dict


def trace(model: Model, feeds: Mapping[str, Any], cells: Sequence[Cell] | None = None) -> Trace:
    """Every gate, activation and state of `cells` (default: all found) for one batch.

    feeds maps placeholder names (with or without `:0`) to arrays or scalars.
    """
    _, plan, feed_dict = _prepare(model, feeds, cells)
    return plan.run(model.session, feed_dict)


def describe(model: Model, cells: Sequence[Cell], feed_shapes: Mapping[str, Sequence[int]] | None = None) -> dict:
    """The recording's description: source model, cells, feeds, gatetrace version."""
    return {
        "gatetrace_version": __version__,
        "source": {"path": os.fspath(model.source), "format": model.format},
        "cells": [c.describe() for c in cells],
        "feeds": {k: list(v) for k, v in (feed_shapes or {}).items()},
    }


def record(
    model: Model,
    feeds: Mapping[str, Any],
    out: str | os.PathLike,
    *,
    overwrite: bool = False,
    cells: Sequence[Cell] | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    selection: Selection | None = None,
    progress: bool = False,
    lengths: np.ndarray | None = None,
) -> dict:
    """Record `cells` (default: all found) on `feeds` into the folder `out`; returns the manifest.

    Sequences are fed `batch_size` at a time (or in the batch size a placeholder fixes);
    all gates of all cells at all steps of a batch come from one `Session.run`, and each
    batch is written as it finishes. `selection` narrows what is fetched and written;
    `progress` shows a bar on stderr (sequences per second, rows written). With
    `lengths` (one per sequence) no rows are written at or past a sequence's length.
    """
    selection = selection or Selection()
    if cells is None:
        cells = find_cells(model.graph, model.source)
    cells, plan, feed_dict = _prepare(model, feeds, selection.apply(cells))
    n = count_sequences(feed_dict)
    first, total = 0, None
    lengths = _check_lengths(lengths, n)
    if n is not None:
        # Keep only the selected examples; their ids stay their row numbers in the input.
        first, last, _ = slice(*selection.examples).indices(n)
        total = max(0, last - first)
        feed_dict = {t: v[first:last] if np.ndim(v) else v for t, v in feed_dict.items()}
        lengths = None if lengths is None else lengths[first:last]
    description = describe(model, cells, {t.name: v.shape for t, v in feed_dict.items()})
    description["selection"] = selection.describe()
    pre_on, act_on = (c in selection.values for c in ("preactivation", "activation"))
    examples = 0
    bar = _progress_bar(total, progress)
    with bar, RecordingWriter(out, description, overwrite=overwrite) as writer:
        writer.write_weights(weights_columns(cells, read_weights(model.session, cells)))
        for start, stop, batch in batches(feed_dict, batch_size):
            result = plan.run(model.session, batch)
            stop = start + len(result.examples) if stop is None else stop
            ids, keep = np.arange(first + start, first + stop, dtype=np.int64), stop - start  # rows past keep are padding
            lens = None if lengths is None else lengths[start:stop]
            for ct in result:
                steps = ct.steps
                for g, gate in enumerate(ct.cell.gates):
                    if selection.keeps_gate(gate):
                        pre = ct.preactivation[:keep, :, g] if pre_on else None
                        act = ct.activation[:keep, :, g] if act_on else None
                        writer.write_gate(ct.cell.name, gate, ids, steps, pre, act, lens)
                for state, values in ct.states.items():
                    writer.write_state(ct.cell.name, state, ids, steps, values[:keep], lens)
            examples += stop - start
            bar.update(stop - start)
            bar.set_postfix_str(f"{writer.rows['gates'] + writer.rows['states']:,} rows", refresh=False)
        return writer.close(examples=examples)


def _check_lengths(lengths: np.ndarray | None, n: int | None) -> np.ndarray | None:
    if lengths is None:
        return None
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or lengths.shape[0] != n or not np.issubdtype(lengths.dtype, np.integer) or (lengths < 0).any():
        raise FeedError(
            f"lengths: expected {n} non-negative integers, one per sequence; "
            f"given shape {list(lengths.shape)} of {lengths.dtype}"
        )
    return lengths


def _progress_bar(total: int | None, show: bool):
    """A tqdm bar on stderr counting sequences, or a silent stand-in."""
    from tqdm import tqdm

    return tqdm(total=total, unit="seq", file=sys.stderr, disable=not show, dynamic_ncols=True, desc="recording")
