"""`gatetrace units RUN --labels FILE`: every unit ranked against the user's labels (`recorders.read.units`; no TensorFlow).

With `--probe`, one L1-regularised model over all units of a table instead (`recorders.read.probe`).
"""

from __future__ import annotations

import argparse
import json

from recorders.errors import install_hint
from tracer.commands.common import positive, split

NAME = "units"
HELP = (
    "rank every unit of every recorded cell against labels (AUC for binary labels, Pearson's r for numbers), "
    "beside what shuffled labels score; --probe fits one L1-regularised model over all units instead"
)
EXAMPLE = "gatetrace units gatetrace-demo/recording --labels gatetrace-demo/labels.npy --top 5"
READS_MODEL, RUNS_MODEL, TENSORFLOW = False, False, False


def arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument(
        "run", metavar="RUN", help="a recording folder, as `gatetrace record --out` wrote it"
    )
    c.add_argument(
        "--labels",
        required=True,
        metavar="FILE",
        help=".npy of [examples] (one label per sequence, scored at the last step each cell computed) or [examples, steps] "
        "(one per input position, NaN for none); or a .parquet/.csv table with example, label and optional step",
    )
    c.add_argument("--step", type=int, metavar="K", help="score at input position K only")
    c.add_argument("--cells", type=split, metavar="A,B", help="only these cells (default: all)")
    c.add_argument(
        "--gates",
        type=split,
        metavar="NAMES",
        help="only these gates and states, e.g. f,c (default: all)",
    )
    c.add_argument(
        "--top", type=positive, default=20, metavar="N", help="print the N best units (default: 20)"
    )
    c.add_argument(
        "--shuffles",
        type=int,
        default=20,
        metavar="N",
        help="score each unit against N shuffles of the labels too, for chance (default: 20; 0: none)",
    )
    c.add_argument(
        "--probe",
        action="store_true",
        help="fit an L1-regularised logistic (binary labels) or linear model on all units of --table, with a "
        f"held-out split by example (needs {install_hint('probe')})",
    )
    c.add_argument(
        "--table",
        choices=("states", "gates"),
        default="states",
        help="what --probe fits on: the states (default) or the gates' activations",
    )
    c.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> None:
    from recorders import Recording
    from recorders.read.labels import read_labels
    from recorders.read.wording import held

    rec = Recording(args.run)
    labels = read_labels(args.labels, rec.memory)
    if held(rec.description) and not args.json:  # the units scored are not the model's own
        print(f"note: {args.run} was recorded with {held(rec.description)}")
    if args.probe:
        return _probe(rec, labels, args)
    from recorders.read.units import findings, unit_scores

    scores = unit_scores(
        rec,
        labels,
        cells=args.cells or None,
        names=args.gates or None,
        step=args.step,
        shuffles=args.shuffles,
    )
    found = findings(scores)
    top = found.head(args.top)
    if args.json:
        print(json.dumps(json.loads(top.to_json(orient="records")), indent=1))  # NaN as null
        return
    metric = "AUC, as max(AUC, 1 - AUC)" if labels.binary else "|Pearson r|"
    print(
        f"{len(scores):,} unit columns scored against {labels.source} by {metric}"
        + (f" (positive label: {labels.positive:g})" if labels.binary else "")
        + f"; {len(found):,} findings, an activation standing for its preactivation where they score the same"
    )
    best = top["score"].iloc[0] if len(top) else float("nan")
    tied = int((found["score"] == best).sum())
    ties = f"; {tied:,} score {best:.4f}" if tied > 1 else ""
    if ties and labels.binary:
        ties += ", ordered by separation (how many standard deviations apart the unit's means on the two labels are)"
    print(f"the best {len(top):,} of {len(found):,}{ties}:")
    print(top.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    if args.shuffles:
        chance = scores.attrs["chance_best"]
        print(
            f"chance: with the labels shuffled ({args.shuffles} times), the best of all units scored "
            f"{chance:.4f}"
            + (
                f"; no unit scores above that ({best:.4f} at best): nothing here beats chance"
                if best <= chance
                else ""
            )
        )


def _probe(rec, labels, args: argparse.Namespace) -> None:
    from recorders.read.probe import probe

    result = probe(
        rec,
        labels,
        table=args.table,
        cells=args.cells or None,
        names=args.gates or None,
        step=args.step,
    )
    if args.json:
        print(
            json.dumps(
                {
                    "metric": result.metric,
                    "score": result.score,
                    "baseline": result.baseline,
                    "features": result.features,
                    "strength": result.strength,
                    "converged": result.converged,
                    "train": {"positions": result.train[0], "examples": result.train[1]},
                    "held_out": {"positions": result.held_out[0], "examples": result.held_out[1]},
                    "units": json.loads(result.units.to_json(orient="records")),
                },
                indent=1,
            )
        )
        return
    name = "accuracy" if result.metric == "accuracy" else "R^2"
    print(
        f"probe over {result.features} units of the {args.table}: held-out {name} {result.score:.4f} "
        f"(baseline {result.baseline:.4f}) on {result.held_out[1]:,} examples; trained on {result.train[1]:,}"
    )
    print(
        f"{len(result.units)} units with non-zero weight (regularisation {result.strength:g}"
        + ("" if result.converged else "; the solver stopped at its iteration limit")
        + "):"
    )
    print(result.units.head(args.top).to_string(index=False, float_format=lambda v: f"{v:.4f}"))
