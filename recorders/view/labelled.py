"""What `gatetrace view RUN --labels FILE` adds, as plain data: every unit ranked against the
labels (`recorders.read.units`, as `gatetrace units` ranks them), the label along one example's
steps, and one unit beside it. Each answer carries `python`, the code that reproduces it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from recorders.read.labels import Labels as UnitLabels
from recorders.read.reader import Recording
from recorders.view.data import check_column, column_block, no_rows, rounded

__all__ = ["ranked", "label_range", "label_track", "labelled_course"]


def ranked(
    rec: Recording, labels: UnitLabels, k: int = 20, scores: pd.DataFrame | None = None
) -> dict[str, Any]:
    """The `k` best units of the whole recording against `labels` (`analysis.unit_scores`:
    AUC or Pearson's r, beside chance, or `scores` where they were computed already), as rows
    of the table `gatetrace units` prints."""
    from recorders.read.units import findings, unit_scores

    if scores is None:
        scores = unit_scores(rec, labels)
    top = findings(scores).head(k)
    return {
        "labels": labels.source,
        "metric": "auc" if labels.binary else "pearson",
        "positive": labels.positive,
        "per_sequence": labels.per_sequence,
        "label_range": label_range(labels),
        "scored": len(scores),
        "chance_best": round(float(scores.attrs["chance_best"]), 6),
        "rows": [
            {
                **{c: str(row[c]) for c in ("cell", "table", "name", "column", "direction")},
                "unit": int(row["unit"]),
                "score": rounded([row["score"]], 6)[0],
                "chance": rounded([row["chance"]], 6)[0],
                "separation": rounded([row["separation"]], 6)[0],
                "n": int(row["n"]),
            }
            for _, row in top.iterrows()
        ],
        "python": "from recorders import Recording, analysis\nfrom recorders.read.units import findings\n"
        f"rec = Recording({str(rec.path)!r})\nfindings(analysis.unit_scores(rec, {labels.source!r})).head({k})",
    }


def label_range(labels: UnitLabels) -> list[float]:
    """The labels' smallest and largest value: a label track's fixed colour range."""
    return [float(np.nanmin(labels.values)), float(np.nanmax(labels.values))]


def label_track(labels: UnitLabels, example: int, steps: Sequence[int]) -> list[float | None]:
    """The label at each of `steps` of `example` (null where none): a label per sequence is the
    same at every step."""
    values = labels.values
    if example >= values.shape[0]:
        return [None] * len(steps)
    if labels.per_sequence:
        return rounded(np.full(len(steps), values[example]), 6)
    row = values[example]
    return rounded(np.array([row[s] if s < len(row) else np.nan for s in steps]), 6)


def labelled_course(
    rec: Recording,
    labels: UnitLabels,
    cell: str,
    table: str,
    name: str,
    column: str,
    unit_: int,
    example: int,
) -> dict[str, Any]:
    """One unit of a gate column (or state) along the steps of `example`, and the label at each."""
    kind = "gate" if table == "gates" else "state"
    check_column(rec, cell, name, kind, column if kind == "gate" else None, unit_)
    block = column_block(rec, cell, name, kind, column, (example, example + 1), None, [unit_])
    a = block.values
    if a.size == 0:
        raise no_rows(rec, cell, name, kind, example, column=column)
    steps = block.steps.tolist()  # the steps of its rows, first to last
    read = (
        f"rec.gate_frame([{cell!r}], [{name!r}], examples=({example}, {example + 1}), units=[{unit_}], columns=[{column!r}])"
        if kind == "gate"
        else f"rec.state_frame([{cell!r}], [{name!r}], examples=({example}, {example + 1}), units=[{unit_}])"
    )
    return {
        "cell": cell,
        "table": table,
        "name": name,
        "column": column,
        "unit": unit_,
        "example": example,
        "steps": steps,
        "values": rounded(a[0, :, 0], 6),
        "label": label_track(labels, example, steps),
        "python": f"from recorders import Recording\nrec = Recording({str(rec.path)!r})\n{read}",
    }
