"""`gatetrace weights MODEL --out FILE.parquet`: every cell's per-gate W, U and b, in one Parquet file."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "weights"
HELP = "write every cell's per-gate W, U, b to one Parquet file"
EXAMPLE = "gatetrace weights gatetrace-demo/model/model.ckpt --out weights.parquet"
READS_MODEL, RUNS_MODEL = True, True


def arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("--out", required=True, metavar="FILE", help="output Parquet file")
    c.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --out if it is a weights table gatetrace wrote",
    )


def early(args) -> bool:
    """Before TensorFlow loads: the model is there, and --out may be written (`check_file_out`)."""
    from recorders.write.weights_file import check_file_out
    from tracer.commands.common import check_model_path

    check_model_path(args.model)
    check_file_out(args.out, args.overwrite, model_files(args.model), "weights.parquet", "weights")
    refuse_checkpoint_names(args.model, args.out)
    return False


def refuse_checkpoint_names(model: str, out: str) -> None:
    """OutputExistsError for an --out in the folder of the TF1 checkpoint `model` (a prefix P,
    or P.meta) named as TensorFlow names that checkpoint's files (P, P.index, P.meta, P.data-*)
    or the folder's `checkpoint` file: written there, it would be taken for one of them."""
    from recorders.errors import OutputExistsError
    from recorders.write import is_uri

    if is_uri(model) or is_uri(out) or not out:
        return
    prefix = Path(model[: -len(".meta")] if model.endswith(".meta") else model)
    if not (Path(f"{prefix}.meta").exists() or Path(f"{prefix}.index").exists()):
        return  # not a TF1 checkpoint
    target = Path(out).parent.resolve() / Path(out).name
    if target.parent != prefix.parent.resolve():
        return
    name = target.name
    named = ("checkpoint", prefix.name, f"{prefix.name}.index", f"{prefix.name}.meta")
    if name in named or name.startswith(f"{prefix.name}.data-"):
        raise OutputExistsError(
            f"--out {out} would be taken for a file of the checkpoint {prefix} (TensorFlow reads {name} in its "
            f"folder); give another name, e.g. {prefix.parent / 'weights.parquet'}"
        )


def model_files(model: str) -> list[str]:
    """What reading the weights of `model` reads: the path itself (a file, or a folder and
    everything in it) and, where it names a TF1 checkpoint (a prefix, or its .meta), the
    checkpoint's files."""
    from recorders.write import is_uri
    from tracer.load.paths import checkpoint_files

    if is_uri(model):
        return [model]
    prefix = model[: -len(".meta")] if model.endswith(".meta") else model
    return [model, *map(str, checkpoint_files(Path(prefix)))]


def run(args) -> None:
    import tracer
    from recorders import write_weights
    from tracer.cells.found import Cell
    from tracer.commands.common import model_options
    from tracer.load.loaded import Model
    from tracer.load.safety import check_model
    from tracer.run.prepare import cells_of, weight_tensors
    from tracer.run.recording import describe, find_all, weight_values

    with tracer.load_model(args.model, **model_options(args)) as model:
        cells = find_all(model)
        # a Keras layer's or a TensorFlow Lite op's weights are arrays already: nothing runs
        if isinstance(model, Model):
            check_model(model, weight_tensors(cells_of(model, cells, Cell)), "reading the weights")
        columns = tracer.weights_columns(cells, weight_values(model, cells, args.timeout))
        rows = write_weights(
            args.out,
            columns,
            describe(model, cells),
            overwrite=args.overwrite,
            inputs=model_files(args.model),
        )
    print(
        f"wrote {rows:,} weight rows of {len(cells)} cell{'s' if len(cells) != 1 else ''} -> {args.out}"
    )
