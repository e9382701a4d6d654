"""`manifest.json`: what a finished recording holds, written once every shard is finished.

Every shard checks after marking itself finished in its progress file, so the last one to
finish always sees all the others (and two that finish together write the same file). The
manifest is the recording's description (`recorders.write.schema`) with the examples and
rows of all shards added up, and each cell's `steps` as recorded where the model leaves
them open, or where a while loop's condition, not its input, bounds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from recorders.write.layout import partition_dir
from recorders.write.place import Place
from recorders.write.progress import Intervals, Shard, read_progress

__all__ = ["write_manifest"]


def write_manifest(place: Place, description: Mapping[str, Any], shard: Shard) -> bool:
    """Write manifest.json into `place` if all shards of `shard`'s recording are finished;
    say whether they are."""
    found = read_progress(place)
    if len(found) != shard.count or not all(p.get("finished") for p in found.values()):
        return False
    shards = [found[Shard(k, shard.count, shard.unit).tag] for k in range(shard.count)]
    manifest = {
        **description,
        "cells": [_with_recorded_steps(place, c) for c in description.get("cells", [])],
        "examples": sum(Intervals(p["complete"]).total() for p in shards),
        "rows": {
            "gates": sum(p["rows"]["gates"] for p in shards),
            "states": sum(p["rows"]["states"] for p in shards),
            "weights": shards[0]["rows"]["weights"],
            **(
                {"outputs": sum(p["rows"].get("outputs", 0) for p in shards)}
                if "outputs" in description
                else {}
            ),
        },
        "shards": shard.count,
    }
    place.write_json("manifest.json", manifest)
    return True


def _with_recorded_steps(place: Place, cell: Any) -> Any:
    """A cell's description with `steps` as recorded where the model leaves it open (an
    input of [None, None, F]) or the cell is a while loop's (its input's time axis is not
    what bounds it: a loop `while i < tf.shape(x)[2]` runs as many steps as x has features):
    one more than the largest step of its first gate's part files, read from their row-group
    statistics (no values are read)."""
    if not isinstance(cell, Mapping) or not cell.get("gates"):
        return cell
    if cell.get("steps") is not None and not isinstance(cell.get("loop"), Mapping):
        return cell
    folder = "gates/" + partition_dir(cell=cell["name"], gate=cell["gates"][0])
    last = -1
    for rel in place.files(folder):
        meta = place.parquet_metadata(rel)
        column = meta.schema.to_arrow_schema().get_field_index("step")
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(column).statistics
            if stats is not None and stats.has_min_max:
                last = max(last, int(stats.max))
    return {**cell, "steps": last + 1} if last >= 0 else cell
