"""`gatetrace compare A B`: two recordings of the same network compared gate by gate (`recorders.read.compare`; no TensorFlow).

Prints where each side's values came from, per cell (the runtime's own tensors, or gatetrace's
replay: `recorders.read.wording.origin`, and what a difference of 0 proves where both are
replays of equal weights); then, per cell and gate, the largest and mean absolute difference,
the RMSE, the share of units beyond the tolerance, the first step beyond it and where the two
disagree on saturation; how the difference grows along the steps, the units and the examples
that differ most, and the gate whose difference passes the tolerance first. `--out` writes all
of it as one Parquet table (`Comparison.table`). "none" is the one word for nothing there.
"""

from __future__ import annotations

import argparse
import json

from tracer.commands.common import positive, split, tolerance

NAME = "compare"
HELP = (
    "compare two recordings of the same network on the same inputs gate by gate (a Keras model and its "
    ".tflite, a float file and its quantised one, two checkpoints): where their gates differ and how it grows"
)
EXAMPLE = (
    "gatetrace compare gatetrace-demo/training/global_step=100 gatetrace-demo/training/global_step=200 "
    "--top 3"
)
READS_MODEL, RUNS_MODEL, TENSORFLOW = False, False, False
# what `gatetrace` says after a MemoryError (compare reads each gate whole, within half the memory
# available: no option of its own needs less)
OUT_OF_MEMORY = (
    "compare reads each gate of both recordings whole; close other programs and run it again"
)


def _pairs(text: str) -> dict[str, str]:
    pairs = {}
    for part in split(text):
        a, sep, b = part.partition("=")
        if not (sep and a.strip() and b.strip()):
            raise argparse.ArgumentTypeError(
                f"expected CELL_A=CELL_B[,CELL_A=CELL_B...], given {text!r}"
            )
        pairs[a.strip()] = b.strip()
    return pairs


def arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument(
        "a", metavar="A", help="a recording folder (the reference, e.g. the Keras model's)"
    )
    c.add_argument(
        "b", metavar="B", help="a recording folder of the same inputs (e.g. the .tflite file's)"
    )
    c.add_argument(
        "--cells",
        type=_pairs,
        metavar="A=B",
        help="pair cells by name, e.g. lstm=functional_1/lstm_1 (default: by name where both "
        "recordings hold the same names, else in order)",
    )
    c.add_argument(
        "--column",
        choices=("activation", "preactivation"),
        default="activation",
        help="the value compared (default: activation)",
    )
    c.add_argument(
        "--tolerance",
        type=tolerance,
        default=1e-3,
        metavar="X",
        help="a difference above X counts as beyond (default: 0.001)",
    )
    c.add_argument(
        "--top",
        type=positive,
        default=5,
        metavar="N",
        help="list the N units and examples that differ most (default: 5)",
    )
    c.add_argument(
        "--out",
        metavar="FILE",
        help="write every figure as one Parquet table, e.g. differences.parquet",
    )
    c.add_argument(
        "--overwrite", action="store_true", help="replace --out where gatetrace wrote it"
    )
    c.add_argument("--json", action="store_true", help="print JSON instead of tables")


def early(args: argparse.Namespace) -> bool:
    """Before anything is read: --out may be written (`check_file_out`)."""
    if args.out is not None:
        from recorders.write.weights_file import check_file_out

        check_file_out(
            args.out, args.overwrite, (args.a, args.b), "differences.parquet", "comparison"
        )
    return False


def run(args: argparse.Namespace) -> None:
    from recorders import Recording
    from recorders.read.compare import compare

    a, b = Recording(args.a), Recording(args.b)
    found = compare(a, b, args.cells, args.column, args.tolerance, args.top)
    # what was compared, and where each side's values came from: in --out's metadata and --json
    described = {
        "a": found.a,
        "b": found.b,
        "column": found.column,
        "tolerance": found.tolerance,
        "inputs": found.inputs,
        "origins": [o.described() for o in found.origins],
        "notes": found.notes(),
    }
    if args.out is not None:
        from recorders.write.weights_file import write_table

        write_table(
            args.out,
            {k: v.to_numpy() for k, v in found.table().items()},
            {"comparison": described},
            overwrite=args.overwrite,
            example="differences.parquet",
            inputs=(args.a, args.b),
            kind="comparison",
        )
    first = found.first_beyond()
    if args.json:
        from recorders.view.data import json_ready

        print(
            json.dumps(
                json_ready(
                    {
                        **described,
                        "first_beyond": None
                        if first is None
                        else {"cell": first[0], "gate": first[1], "step": first[2]},
                        **{
                            level: found.records(level)
                            for level in ("gates", "steps", "units", "examples", "outputs")
                        },
                        "not_compared": [n._asdict() for n in found.not_compared],
                    }
                ),
                allow_nan=False,
            )
        )
        return
    _print(found, first, a, b, args)


def _print(found, first, a, b, args) -> None:
    from recorders.read.wording import ranges

    def source(rec) -> str:
        s = rec.description.get("source", {})
        return ", ".join(str(s[k]) for k in ("path", "format", "runtime") if s.get(k)) or "?"

    print(f"A: {found.a} ({source(a)})\nB: {found.b} ({source(b)})\ninputs: {found.inputs}")
    print("where the values come from:")
    for o in found.origins:
        for side, cell, came in (("A", o.cell, o.a), ("B", o.cell_b, o.b)):
            print(f"  {side}, cell {cell}: {came.label}: {came.words}")
    for note in found.notes():
        print(f"note: {note}")
    print(
        f"\n{found.column}, B - A over examples {ranges(a.examples)}; beyond: a difference above "
        f"{found.tolerance:g}\n"
    )
    same = (found.gates["cell"] == found.gates["cell_b"]).all()  # B's names shown where they differ

    def table(frame) -> str:
        return _text(frame.drop(columns=["cell_b"]) if same else frame)

    print(table(found.gates))
    for n in found.not_compared:
        held = f"recorded in {n.only_in} only" if n.only_in else "recorded in neither"
        print(f"not compared: gate {n.gate} of cell {n.cell} ({held})")
    print("\nmean absolute difference along the steps:")
    wide = found.steps.pivot_table(
        index="step", columns=["cell", "gate"], values="mean_abs", sort=False, dropna=False
    )
    every = max(1, len(wide) // 10)  # about ten steps shown, the last always
    rows = sorted({*range(0, len(wide), every), len(wide) - 1}) if len(wide) else []
    print(_text(wide.iloc[rows], index=True))
    for level in ("units", "examples"):
        print(f"\nthe {level} that differ most:")
        print(table(getattr(found, level)))
    if len(found.outputs):
        print("\nthe model's outputs (recorded with --outputs), B - A:")
        print(_text(found.outputs))
    if first is None:
        print(f"\nno gate differs by more than {found.tolerance:g} at any step")
    else:
        print(
            f"\nfirst beyond {found.tolerance:g}: gate {first[1]} of cell {first[0]}, at step {first[2]}"
        )
    if args.out:
        print(
            f"written: {args.out} (pandas.read_parquet; its `level` column says gates, steps, units or examples)"
        )


def _text(frame, index: bool = False) -> str:
    """A frame as text: numbers to 3 significant digits, whole numbers whole, and every missing
    value (None, NaN: nothing to compare, no step beyond) as "none"."""
    import pandas as pd

    from recorders.read.wording import NONE

    def shown(v) -> str:
        if v is None or (not isinstance(v, str) and pd.isna(v)):
            return NONE
        if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
            return str(int(v))
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    # (each value's type as it is: a column of whole numbers and NaN is float in pandas)
    return frame.astype(object).map(shown).to_string(index=index)
