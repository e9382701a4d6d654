"""TensorFlow's graph files read as data, without TensorFlow: the protocol buffer wire format
(varints and length-delimited fields), and the few fields of a SavedModel, a MetaGraphDef and a
GraphDef that name a graph's ops and a signature's inputs.

Importing any of TensorFlow's generated message modules imports all of TensorFlow; this reads
the bytes instead (`graph_names`), for what `gatetrace record` checks before TensorFlow loads
(`tracer.load.feed_names`). Every field is found by its number, as TensorFlow's `.proto`
files give them:

    SavedModel     meta_graphs 2
    MetaGraphDef   graph_def 2, signature_def 5 (a map: key 1, value 2)
    SignatureDef   inputs 1 (a map: key 1, value 2, a TensorInfo, whose name is 1)
    GraphDef       node 1
    NodeDef        name 1, op 2, attr 5 (a map: key 1, value 2, an AttrValue, whose type is 6)

What protocol buffers do with a field given more than once (a message's occurrences merged,
the last of a single value or a map key kept) is read generously here: every occurrence's
names are kept, so that no name TensorFlow's parse gives is missed. The bytes are held to the
wire format's rules: a varint of at most 10 bytes, a length within the message that holds it,
wire types 0, 1, 2 and 5 only (groups are refused), names in UTF-8; anything else is a
ModelFormatError in one line. Nothing is allocated from a length the file claims before that
length is checked against the bytes there are, and the messages read nest only as deep as the
schema above (five levels), whatever the file holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from recorders.errors import ModelFormatError

__all__ = ["GraphNames", "graph_names", "fields", "KINDS"]

# field numbers, as TensorFlow's .proto files give them (tests check them against its own)
SAVED_MODEL_META_GRAPHS = 2
META_GRAPH_GRAPH_DEF = 2
META_GRAPH_SIGNATURE_DEF = 5
SIGNATURE_INPUTS = 1
TENSOR_INFO_NAME = 1
GRAPH_NODE = 1
NODE_NAME, NODE_OP, NODE_ATTR = 1, 2, 5
ATTR_VALUE_TYPE = 6
MAP_KEY, MAP_VALUE = 1, 2  # every map's entries

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
_MOST_VARINT_BYTES = 10

# what each kind of file holds at its top: `graph_names(data, kind)`
KINDS = ("saved_model", "meta_graph", "graph_def")


def _damaged(source: str, pos: int, why: str) -> ModelFormatError:
    return ModelFormatError(f"{source}: cannot read it as a protocol buffer: {why} at byte {pos:,}")


def _varint(data: bytes, pos: int, end: int, source: str) -> tuple[int, int]:
    """The varint at `pos` and where it ends."""
    value = shift = 0
    start = pos
    while pos < end:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if pos - start >= _MOST_VARINT_BYTES:
            raise _damaged(source, start, "a varint longer than 10 bytes")
    raise _damaged(source, start, "a varint cut short by the end of its message")


def fields(data: bytes, start: int, end: int, source: str) -> Iterator[tuple[int, int, int, int]]:
    """The fields of the message `data[start:end]`, in order, as (number, wire type, a, b): a
    varint's value in `a`; a length-delimited or fixed-size field's bytes as the span `a:b`.
    ModelFormatError for bytes that break the wire format's rules."""
    pos = start
    while pos < end:
        at = pos
        tag = data[pos]  # a tag or a length of one byte, the most common, read at once
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _varint(data, pos, end, source)
        number, kind = tag >> 3, tag & 7
        if number == 0:
            raise _damaged(source, at, "a field numbered 0")
        if kind == _LEN:
            if pos < end and data[pos] < 0x80:
                size = data[pos]
                pos += 1
            else:
                size, pos = _varint(data, pos, end, source)
        elif kind == _VARINT:
            value, pos = _varint(data, pos, end, source)
            yield number, kind, value, 0
            continue
        elif kind == _FIXED64:
            size = 8
        elif kind == _FIXED32:
            size = 4
        else:
            raise _damaged(source, at, f"wire type {kind} (a group, or none there is)")
        if size > end - pos:
            raise _damaged(source, at, f"a field of {size:,} bytes past the end of its message")
        yield number, kind, pos, pos + size
        pos += size


def _text(data: bytes, a: int, b: int, source: str) -> str:
    try:
        return data[a:b].decode("utf-8")
    except UnicodeDecodeError:
        raise _damaged(source, a, "a name that is not UTF-8") from None


def _entry(data: bytes, a: int, b: int, source: str) -> tuple[str, list[tuple[int, int]]]:
    """A map entry's key and the spans of its value (a value given twice is merged: both)."""
    key, values = "", []
    for number, kind, x, y in fields(data, a, b, source):
        if number == MAP_KEY and kind == _LEN:
            key = _text(data, x, y, source)
        elif number == MAP_VALUE and kind == _LEN:
            values.append((x, y))
    return key, values


@dataclass
class GraphNames:
    """What a graph file names: its nodes' names with their ops, the placeholders' dtypes
    (TensorFlow's DataType numbers), and each signature's inputs (key, tensor name), in the
    order the file gives them."""

    ops: dict[str, set[str]] = field(default_factory=dict)
    dtypes: dict[str, set[int]] = field(default_factory=dict)
    signatures: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def nodes_of(self, *ops: str) -> list[str]:
        """The names of the nodes of these ops, in the file's order."""
        return [name for name, found in self.ops.items() if not found.isdisjoint(ops)]


_PLACEHOLDERS = frozenset({"Placeholder", "PlaceholderWithDefault"})


def _node(data: bytes, a: int, b: int, out: GraphNames, source: str) -> None:
    names, ops, attrs = [], [], []
    for number, kind, x, y in fields(data, a, b, source):
        if kind == _LEN:
            if number == NODE_NAME:
                names.append((x, y))
            elif number == NODE_OP:
                ops.append((x, y))
            elif number == NODE_ATTR:
                attrs.append((x, y))
    found = {_text(data, x, y, source) for x, y in ops}
    dtypes = set()
    if not _PLACEHOLDERS.isdisjoint(found):
        for x, y in attrs:
            key, values = _entry(data, x, y, source)
            for v, w in values if key == "dtype" else []:
                for number, kind, value, _ in fields(data, v, w, source):
                    if number == ATTR_VALUE_TYPE and kind == _VARINT:
                        dtypes.add(value)
    for x, y in names or [(a, a)]:
        name = _text(data, x, y, source)
        known = out.ops.get(name)
        if known is None:
            out.ops[name] = set(found) if len(names) > 1 else found
        else:
            known |= found
        if dtypes:
            out.dtypes.setdefault(name, set()).update(dtypes)


def _graph_def(data: bytes, a: int, b: int, out: GraphNames, source: str) -> None:
    for number, kind, x, y in fields(data, a, b, source):
        if number == GRAPH_NODE and kind == _LEN:
            _node(data, x, y, out, source)


def _signature(data: bytes, a: int, b: int, source: str) -> list[tuple[str, str]]:
    inputs = []
    for number, kind, x, y in fields(data, a, b, source):
        if number != SIGNATURE_INPUTS or kind != _LEN:
            continue
        key, values = _entry(data, x, y, source)
        tensors = [
            _text(data, p, q, source)
            for v, w in values
            for n, k, p, q in fields(data, v, w, source)
            if n == TENSOR_INFO_NAME and k == _LEN
        ]
        inputs += [(key, t) for t in tensors or [""]]
    return inputs


def _meta_graph(data: bytes, a: int, b: int, out: GraphNames, source: str) -> None:
    for number, kind, x, y in fields(data, a, b, source):
        if kind != _LEN:
            continue
        if number == META_GRAPH_GRAPH_DEF:
            _graph_def(data, x, y, out, source)
        elif number == META_GRAPH_SIGNATURE_DEF:
            key, values = _entry(data, x, y, source)
            listed = out.signatures.setdefault(key, [])
            for v, w in values:
                listed += _signature(data, v, w, source)


def graph_names(data: bytes, kind: str, source: str) -> GraphNames:
    """What the serialized `kind` (one of KINDS: a SavedModel, a MetaGraphDef, a GraphDef)
    names, read from its bytes; ModelFormatError where they break the wire format."""
    out = GraphNames()
    if kind == "graph_def":
        _graph_def(data, 0, len(data), out, source)
    elif kind == "meta_graph":
        _meta_graph(data, 0, len(data), out, source)
    elif kind == "saved_model":
        for number, wire, x, y in fields(data, 0, len(data), source):
            if number == SAVED_MODEL_META_GRAPHS and wire == _LEN:
                _meta_graph(data, x, y, out, source)
    else:
        raise ValueError(f"kind {kind!r}: expected one of {', '.join(KINDS)}")
    return out
