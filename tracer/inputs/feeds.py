"""Feeds: what the user gives the model's placeholders, checked before anything runs.

`parse_feed_args` reads the CLI's `NAME=FILE.npy` and `NAME=VALUE` arguments;
`resolve_feeds` maps feed names (with or without `:0`, or a SavedModel signature's input
names) to the graph's tensors and checks every shape and dtype, and that every placeholder
the fetches need is fed. Any tensor TensorFlow can feed (`Graph.is_feedable`) may be fed, not
only a placeholder: models that read their data through a queue (`QueueDequeue*`, the TF1
input producers) or a `tf.data` iterator (`IteratorGetNext`) are fed the tensor the pipeline
produces, and what lies only upstream of a fed tensor never runs. `pipeline_entries` finds
those tensors (the first of rank 2 or more on the way from the pipeline to the fetches), and
`resolve_feeds` refuses, naming them, a fetch that would dequeue or iterate: without a
queue runner that would wait forever.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import numpy as np

from recorders.errors import FeedError
from tracer._tf import tf
from tracer.inputs.files import (
    crossed_name,
    feed_index,
    input_name,
    is_input_spec,
    not_a_file,
    open_input,
    split_feeds,
)

__all__ = [
    "load_array",
    "parse_feed_args",
    "resolve_feeds",
    "input_name",
    "fed_names",
    "pipeline_entries",
    "describe_entry",
    "unfed_placeholders",
    "count_sequences",
    "fixed_size",
    "cast_notes",
    "batches",
]

_PLACEHOLDERS = ("Placeholder", "PlaceholderWithDefault")
# Ops that hand out the next batch of an input pipeline: a queue's dequeues (TF1 input
# producers, `tf.train.batch`), a tf.data iterator's next element, a TF1 reader's next record.
_PIPELINE_PREFIXES = ("QueueDequeue", "IteratorGetNext", "ReaderRead")


def _parse_scalar(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return np.bool_(low == "true")
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return None


def load_array(path: str, what: str) -> np.ndarray:
    """A whole (small) array from a .npy, .npz or Parquet file (see `tracer.inputs.files`)."""
    return np.asarray(open_input(path, what))


def parse_feed_args(items: Iterable[str]) -> dict[str, Any]:
    """`["x=inputs.npy", "keep_prob=1.0"]` -> `{"x": array, "keep_prob": 1.0}`.

    Files are opened to be read batch by batch (see `tracer.inputs.files`), not loaded.
    """
    feeds: dict[str, Any] = {}
    for name, value in split_feeds(items):
        if is_input_spec(value):
            feeds[name] = open_input(value, f"feed {name}")
        else:
            scalar = _parse_scalar(value)
            if scalar is None and os.path.exists(value) and not Path(value).is_file():
                raise FeedError(f"feed {name}: {not_a_file(value)}")  # a FIFO, /dev/stdin
            if scalar is None:
                raise FeedError(
                    f"feed {name}={value}: {value!r} is neither a .npy/.npz/.parquet file nor a number or true/false"
                )
            feeds[name] = scalar
    return feeds


def _placeholders(graph: tf.Graph) -> str:
    """The graph's placeholders, leaving out the string ones a Saver adds for its file name."""
    names = [
        op.name
        for op in graph.get_operations()
        if op.type in _PLACEHOLDERS and op.outputs[0].dtype != tf.string
    ]
    return ", ".join(names[:10]) if names else "(none)"


def _shape(shape: tf.TensorShape) -> str:
    if shape.rank is None:
        return "any shape"
    return "[" + ", ".join("None" if d is None else str(d) for d in shape.as_list()) + "]"


def _one_output(name: str) -> str:
    return f"feed it as {name} (or {name}:0)"


def _placeholder(graph: tf.Graph, name: str, aliases: Mapping[str, str]) -> tf.Tensor:
    """The tensor a feed name names: a placeholder, or any tensor TensorFlow can feed. `NAME`
    is output 0 of op NAME (or the tensor the signature's input NAME names), `NAME:K` output K,
    which the op must have."""
    crossed = crossed_name(name, aliases, lambda t: _has_tensor(graph, t))
    if crossed is not None:
        raise FeedError(crossed)
    base, index = (name, None) if name in aliases else feed_index(name)
    if base in aliases:
        if index:
            raise FeedError(
                f"feed {name!r}: the signature's input {base} is one tensor, {aliases[base]}: {_one_output(base)}"
            )
        tensor_name = aliases[base]
    else:
        tensor_name = f"{base}:{index or 0}"
        try:
            op = graph.get_operation_by_name(base)
        except (KeyError, ValueError):  # no such op: refused below, naming the placeholders
            op = None
        count = 0 if op is None else len(op.outputs)
        if op is not None and (index or 0) >= count:
            spelling = (
                _one_output(base)
                if count == 1
                else f"its outputs are {base}:0 to {base}:{count - 1}"
                if count
                else "it has none to feed"
            )
            raise FeedError(
                f"feed {name!r}: {op.type} op {base} has {count} output{'s' if count != 1 else ''}, no output {index}: {spelling}"
            )
    try:
        tensor = graph.get_tensor_by_name(tensor_name)
    except (KeyError, ValueError):
        raise FeedError(
            f"unknown feed {name!r}: the graph has no tensor {tensor_name}; its placeholders are {_placeholders(graph)}"
        ) from None
    if not graph.is_feedable(tensor):
        raise FeedError(
            f"feed {name!r}: {tensor_name} is the output of a {tensor.op.type} op, which TensorFlow cannot feed; "
            f"its placeholders are {_placeholders(graph)}"
        )
    if tensor.dtype in (tf.resource, tf.variant):  # no values: a variable's handle, a list's
        raise FeedError(
            f"feed {name!r}: {tensor_name} is the {tensor.dtype.name} output of a {tensor.op.type} op (a "
            f"{'variable' if tensor.dtype == tf.resource else 'tensor list or dataset'}), not values, which a feed gives; "
            f"its placeholders are {_placeholders(graph)}"
        )
    return tensor


def _has_tensor(graph: tf.Graph, name: str) -> bool:
    try:
        graph.get_tensor_by_name(name)
    except (KeyError, ValueError):
        return False
    return True


def fed_names(
    graph: tf.Graph, feeds: Mapping[str, Any], aliases: Mapping[str, str] | None = None
) -> set[str]:
    """The names of the tensors `feeds` feed (names that name none are left to `resolve_feeds`)."""
    found = set()
    for name in feeds:
        try:
            found.add(_placeholder(graph, name, aliases or {}).name)
        except FeedError:
            pass
    return found


def _fanin(fetches: Iterable[tf.Tensor], fed: AbstractSet[str]) -> dict[str, tf.Operation]:
    """The ops running `fetches` runs when the tensors named in `fed` are fed."""
    queue, seen = deque(t.op for t in fetches), {}
    while queue:
        op = queue.popleft()
        if op.name not in seen:
            seen[op.name] = op
            queue.extend(t.op for t in op.inputs if t.name not in fed)
            queue.extend(op.control_inputs)
    return seen


def pipeline_entries(
    fetches: Iterable[tf.Tensor], fed: AbstractSet[str] = frozenset()
) -> list[tuple[tf.Tensor, tf.Operation]]:
    """(tensor to feed, pipeline op) for each input pipeline op that running `fetches` would
    run: the first tensors of rank 2 or more (a batch of sequences) on the way from the op to
    the fetches, or the op's own outputs if none is."""
    fanin = _fanin(list(fetches), fed)
    found = []
    for op in fanin.values():
        if not op.type.startswith(_PIPELINE_PREFIXES):
            continue
        todo, seen, entries = list(op.outputs), set(), []
        while todo:
            t = todo.pop(0)
            if t.name in seen:
                continue
            seen.add(t.name)
            if t.shape.rank is not None and t.shape.rank >= 2:
                entries.append(t)
                continue
            todo += [o for c in t.consumers() if c.name in fanin for o in c.outputs]
        found += [
            (t, op)
            for t in (
                entries or [o for o in op.outputs if any(c.name in fanin for c in o.consumers())]
            )
        ]
    return sorted(found, key=lambda e: e[0].name)


def _pipeline_kind(op: tf.Operation) -> str:
    return (
        "a tf.data iterator"
        if op.type.startswith("IteratorGetNext")
        else "a queue"
        if op.type.startswith("QueueDequeue")
        else "a reader"
    )


def describe_entry(tensor: tf.Tensor, op: tf.Operation) -> str:
    """`NAME (dtype [shape]) produced by a queue (OP)`: what to feed instead of a pipeline."""
    return f"{tensor.name} ({tensor.dtype.name} {_shape(tensor.shape)}) produced by {_pipeline_kind(op)} ({op.name}, {op.type})"


def convert_feed(name: str, tensor: tf.Tensor, value: Any, what: str = "placeholder") -> Any:
    """Check `value` against the placeholder (or Keras input: `what`); arrays stay on disk
    (cast batch by batch in `batches`)."""
    on_disk = hasattr(value, "shape") and hasattr(value, "dtype") and len(value.shape) > 0
    # TFRecord rows stored flat take the placeholder's shape
    if hasattr(value, "fit") and tensor.shape.rank:
        value.fit(tuple(tensor.shape.as_list()[1:]))
    array = value if on_disk else np.asarray(value)
    want = tensor.dtype.as_numpy_dtype
    if array.dtype != want and not np.can_cast(array.dtype, want, casting="same_kind"):
        raise FeedError(
            f"feed {name}: {what} {tensor.name} expects {tensor.dtype.name}, given {array.dtype}; "
            f"convert the array to {tensor.dtype.name}"
        )
    # The first dimension counts sequences and is fed in batches, so a placeholder with a
    # fixed batch size (say 1) takes any number of sequences.
    shape = tensor.shape
    if shape.rank and array.ndim == shape.rank and shape[0] is not None:
        shape = tf.TensorShape([None]).concatenate(shape[1:])
    if not shape.is_compatible_with(array.shape):
        raise FeedError(
            f"feed {name}: {what} {tensor.name} expects shape {_shape(tensor.shape)}, "
            f"given {list(array.shape)}"
        )
    return array if on_disk or array.dtype == want else array.astype(want)


def unfed_placeholders(fetches: Iterable[tf.Tensor], fed: set[str]) -> list[tf.Operation]:
    """Placeholders without a default that the fetches depend on and that are not fed."""
    return [
        op
        for op in _fanin(fetches, fed).values()
        if op.type == "Placeholder" and op.outputs[0].name not in fed
    ]


def resolve_feeds(
    graph: tf.Graph,
    feeds: Mapping[str, Any],
    fetches: Iterable[tf.Tensor] = (),
    aliases: Mapping[str, str] | None = None,
) -> dict[tf.Tensor, np.ndarray]:
    """A checked feed dict for `Session.run`; raises FeedError naming what does not fit.
    `aliases` maps other feed names (a SavedModel signature's input names) to tensor names."""
    feed_dict: dict[tf.Tensor, np.ndarray] = {}
    given: dict[tf.Tensor, str] = {}
    for name, value in feeds.items():
        tensor = _placeholder(graph, name, aliases or {})
        if tensor in feed_dict:
            raise FeedError(
                f"placeholder {tensor.name} is fed twice (as {given[tensor]} and {name}); feed it once"
            )
        what = (
            "placeholder"
            if tensor.op.type in _PLACEHOLDERS
            else f"tensor ({tensor.op.type} output)"
        )
        feed_dict[tensor], given[tensor] = convert_feed(name, tensor, value, what), name
    fetches = list(fetches)
    pipelines = pipeline_entries(fetches, {t.name for t in feed_dict})
    if pipelines:
        tensor, op = pipelines[0]
        raise FeedError(
            f"the cells read their inputs from {describe_entry(tensor, op)}; running it would dequeue, and nothing fills "
            f"the pipeline here: feed that tensor instead, e.g. --feed {tensor.name.removesuffix(':0')}=FILE.npy"
        )
    missing = unfed_placeholders(fetches, {t.name for t in feed_dict})
    if missing:
        op = missing[0]
        t = op.outputs[0]
        raise FeedError(
            f"placeholder {op.name} ({t.dtype.name}, shape {_shape(t.shape)}) must be fed: "
            f"add --feed {op.name}=FILE.npy"
        )
    return feed_dict


def count_sequences(feed_dict: Mapping[tf.Tensor, np.ndarray]) -> int | None:
    """The number of sequences in the feeds: the first dimension shared by the array feeds."""
    sizes = {t.name: v.shape[0] for t, v in feed_dict.items() if np.ndim(v) > 0}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{n} has {s}" for n, s in sizes.items())
        raise FeedError(f"feeds disagree on the number of sequences (first dimension): {listed}")
    return next(iter(sizes.values()), None)


def _exactly(part: np.ndarray, tensor: tf.Tensor, start: int) -> np.ndarray:
    """`part` in the placeholder's dtype; FeedError for integers the float type cannot hold
    exactly (beyond 2^24 for float32): a cast must not change what the model is fed."""
    want = np.dtype(tensor.dtype.as_numpy_dtype)
    if part.dtype.kind in "iu" and want.kind == "f" and part.size:
        limit = 2 ** (np.finfo(want).nmant + 1)
        largest = int(np.abs(part.astype(np.int64)).max())
        if largest > limit:
            row = start + int(
                np.flatnonzero(
                    (np.abs(part.astype(np.int64)) > limit).reshape(len(part), -1).any(1)
                )[0]
            )
            raise FeedError(
                f"feed {tensor.name}: row {row:,} holds the integer {largest:,}, which {want.name} (the placeholder's type) cannot "
                f"hold exactly (beyond {limit:,}): convert the input to the values the model expects"
            )
    return part.astype(want, copy=False)


def cast_notes(feed_dict: Mapping[tf.Tensor, Any]) -> list[str]:
    """A line for each array feed whose values are cast to the placeholder's type."""
    notes = []
    for t, v in feed_dict.items():
        # an input file's rows stay unread
        given = np.dtype(v.dtype if hasattr(v, "dtype") else np.asarray(v).dtype)
        want = np.dtype(t.dtype.as_numpy_dtype)
        if np.ndim(v) > 0 and given != want:
            how = (
                "exactly (a value it cannot hold exactly is refused)"
                if given.kind in "iub"
                else "rounding each value"
            )
            notes.append(
                f"feed {t.name}: the input is {given.name}, the placeholder {want.name}: values are cast, {how}"
            )
    return notes


def fixed_size(feed_dict: Mapping[tf.Tensor, np.ndarray]) -> set[int]:
    """The batch sizes the fed placeholders fix (their static first dimension), if any."""
    return {
        t.shape[0]
        for t, v in feed_dict.items()
        if np.ndim(v) > 0 and t.shape.rank and t.shape[0] is not None
    }


def batches(
    feed_dict: Mapping[tf.Tensor, np.ndarray],
    size: int,
    ranges: Iterable[tuple[int, int]] | None = None,
) -> Iterator[tuple[int, int | None, dict[tf.Tensor, np.ndarray]]]:
    """Yield `(start, stop, feed_dict)` for consecutive batches of at most `size` sequences.

    `ranges` lists the [start, stop) ranges of sequences to feed (default: all); no batch
    crosses a range's end. Array feeds are sliced along their first dimension
    (input files are read one batch at a time); scalars are fed as they are.
    Where a placeholder fixes the batch size, batches take that size and the last one is
    padded by repeating its last sequence: rows past `stop - start` are padding to drop.
    Without array feeds there is one batch of whatever size the graph makes, and `stop`
    is None.
    """
    n = count_sequences(feed_dict)
    if n is None:
        yield 0, None, dict(feed_dict)
        return
    fixed = fixed_size(feed_dict)
    if len(fixed) > 1:
        raise FeedError(f"placeholders fix different batch sizes: {sorted(fixed)}")
    size = fixed.pop() if fixed else max(1, size)
    if n == 0 and fixed_size(feed_dict):
        empty = next(t.name for t, v in feed_dict.items() if np.ndim(v) > 0)
        raise FeedError(
            f"feed {empty}: the input holds no sequences, and the graph's placeholders take batches of exactly {size}: "
            "feed at least one sequence"
        )
    for first, last in [(0, n)] if ranges is None else ranges:
        # an empty range: one empty batch
        for start in range(first, last, size) if last > first else [first]:
            stop = min(start + size, last)
            batch = {}
            for t, v in feed_dict.items():
                if np.ndim(v) == 0:
                    batch[t] = v
                    continue
                part = _exactly(np.asarray(v[start:stop]), t, start)
                if t.shape.rank and t.shape[0] is not None and 0 < len(part) < size:
                    part = np.concatenate([part, np.repeat(part[-1:], size - len(part), axis=0)])
                batch[t] = part
            yield start, stop, batch
