"""`gatetrace record MODEL --feed NAME=FILE --out DIR`: every gate, state and weight of every cell to Parquet.

In this process (`tracer.record`), or, with --workers or --engine, in tasks of other
processes or a Dask cluster (`tracer.run.parallel`; this process then imports no TensorFlow).
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from recorders.errors import install_hint
from tracer.commands.common import (
    check_input_files,
    check_model_path,
    model_options,
    positive,
    split,
)
from tracer.commands.record_runs import (
    holds,
    record_parallel,
    record_series,
    report,
    shared_options,
    summary_bins,
)

NAME = "record"
HELP = "record every gate, state and weight of every cell to Parquet"
EXAMPLE = "gatetrace record gatetrace-demo/model/model.ckpt --feed inputs=gatetrace-demo/inputs.npy --out run1/"
OUT_OF_MEMORY = "select fewer examples, steps or cells, or give a smaller --batch-size"
READS_MODEL, RUNS_MODEL = True, True


def early(args: argparse.Namespace) -> bool:
    """Before TensorFlow loads: the model is there, no input is fed twice, the input files
    open, and each feed names something the model's file names (`tracer.load.feed_names`;
    a series' checkpoints are left to their loader): a user error in well under a second;
    then the recording runs (False)."""
    from tracer.inputs.files import split_feeds
    from tracer.load.feed_names import check_feed_names

    if args.round_bits is not None:
        from tracer.run.options import check_round_bits  # no TensorFlow

        check_round_bits(args.round_bits, args.summary)
    check_model_path(args.model)
    holds(args)
    fed = split_feeds(args.feed)
    check_input_files(args.feed, args.lengths)
    if not args.checkpoints:
        check_feed_names(args.model, [name for name, _ in fed], args.signature)
    return False


def round_bits(text: str) -> int:
    """`--round-bits N`: a count of float32 mantissa bits to keep (`recorders.write.rounding`)."""
    from recorders.write.rounding import MAX_BITS, MIN_BITS

    try:
        value = int(text)
    except ValueError:
        value = -1
    if not MIN_BITS <= value <= MAX_BITS:
        raise argparse.ArgumentTypeError(
            f"expected a whole number of float32 mantissa bits from {MIN_BITS} to {MAX_BITS}, given {text!r} "
            "(float32 keeps 23; leave --round-bits out to store values exactly)"
        )
    return value


def arguments(c: argparse.ArgumentParser) -> None:
    from recorders.write.layout import COMPRESSIONS
    from recorders.write.rounding import COMPRESSION as ROUNDED_COMPRESSION
    from recorders.write.rounding import MAX_BITS, MIN_BITS
    from tracer.run.budget import DEFAULT_ROOM  # no TensorFlow

    # the flags in groups, in the order a user meets them
    inputs = c.add_argument_group("the sequences to record")
    what = c.add_argument_group("what to record")
    out = c.add_argument_group("where and how it is written")
    workers = c.add_argument_group("in other processes or on a Dask cluster")
    series = c.add_argument_group("a training run's checkpoints, one recording each")
    summary = c.add_argument_group("a summary recording: statistics instead of every value")

    inputs.add_argument(
        "--feed",
        action="append",
        default=[],
        metavar="NAME=FILE.npy|NAME=VALUE",
        help="feed a placeholder, or a Keras model's input (repeatable); NAME with or without ':0', an '=' in it "
        "written '\\=': --feed x=inputs.npy --feed 'se\\=q=inputs.npy' (the input se=q)",
    )
    out.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="output folder (must be new or empty), or a prefix in object storage: --out s3://bucket/run1",
    )
    out.add_argument(
        "--batch-size",
        type=positive,
        default=256,
        metavar="N",
        help="sequences per Session.run (default: 256; a placeholder's fixed batch size wins)",
    )
    out.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the gatetrace recording in --out, once the new one is complete (other files are never deleted)",
    )
    out.add_argument(
        "--resume",
        action="store_true",
        help="continue a recording that was killed or interrupted, keeping its finished batches (same arguments as the first run)",
    )
    out.add_argument(
        "--shard",
        metavar="K/N",
        help="record part K (0-based) of N disjoint parts of the sequences, into the same --out as the other parts: --shard 3/8",
    )
    out.add_argument(
        "--compression",
        choices=COMPRESSIONS,
        default=None,
        help=f"Parquet compression. fast (default; {ROUNDED_COMPRESSION} with --round-bits): lz4 on the key columns "
        "only, float values uncompressed; lz4, zstd, snappy: every column (lz4: files about 9%% smaller, records 10%% "
        "to 20%% slower; zstd: 13%% smaller, about 50%% slower); none: nothing: --compression zstd",
    )
    out.add_argument(
        "--round-bits",
        type=round_bits,
        metavar="N",
        help=f"store every value rounded to N of float32's 23 mantissa bits ({MIN_BITS} to {MAX_BITS}; not the "
        "weights), each within 2^-(N+1) of its own magnitude, for fewer bytes a value (the manifest says so; "
        f"compressed with {ROUNDED_COMPRESSION} unless --compression says otherwise): --round-bits 10",
    )
    out.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    inputs.add_argument(
        "--lengths",
        metavar="FILE.npy",
        help="sequence lengths, one per input row: no rows at or past them",
    )
    what.add_argument(
        "--cells",
        metavar="PATTERN",
        help="record only cells whose names match these globs, comma-separated: 'rnn/*/cell_1/*'",
    )
    what.add_argument(
        "--gates", metavar="LABELS", help="record only these gates, comma-separated: i,f"
    )
    what.add_argument(
        "--gate-ops",
        metavar="PATTERN",
        help="a cell of your own: a regular expression naming its gates' ops (each a nonlinearity), with groups "
        "cell, gate and step, e.g. '(?P<cell>my_lstm)/(?P<gate>\\w+)_gate_(?P<step>\\d+)'; without a step "
        "group, steps are found by walking the graph (see docs/how-cells-are-found.md)",
    )
    what.add_argument(
        "--state-ops",
        metavar="PATTERN",
        help="with --gate-ops: a regular expression naming its states' tensors, groups cell, state and step",
    )
    what.add_argument(
        "--steps", metavar="START:STOP", help="record only these input positions: 0:10"
    )
    what.add_argument(
        "--values",
        metavar="COLUMNS",
        default="preactivation,activation",
        help="gate value columns, comma-separated: preactivation, activation, contributions (the preactivation's parts: "
        "input, recurrent, bias, peephole, recurrent_bias); default: preactivation,activation. "
        "E.g. --values preactivation,activation,contributions",
    )
    inputs.add_argument(
        "--examples",
        metavar="START:STOP",
        help="record only these sequences (rows of the inputs): 0:1000",
    )
    out.add_argument(
        "--memory",
        metavar="SIZE",
        help="the peak memory (RSS) the process may reach; the batch size is lowered to stay within it (default: what "
        f"TensorFlow and the model hold, plus {DEFAULT_ROOM >> 20} MB or a tenth of the available memory if less): --memory 2G",
    )
    workers.add_argument(
        "--workers",
        type=positive,
        default=1,
        metavar="N",
        help="record in N processes on this machine, each running tasks of --task-size batches: --workers 4 (default: 1, "
        "one process)",
    )
    workers.add_argument(
        "--engine",
        choices=("processes", "dask"),
        default="processes",
        help="what runs the tasks: a process pool of --workers (default), or Dask "
        f"({install_hint('dask')}): "
        "a local cluster of --workers processes, or the cluster at --scheduler: --engine dask --scheduler tcp://head:8786",
    )
    workers.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="with --engine dask: the address of an existing Dask scheduler",
    )
    workers.add_argument(
        "--scheduler-file",
        metavar="FILE",
        help="with --engine dask: a Dask scheduler file (dask-jobqueue, dask-mpi)",
    )
    workers.add_argument(
        "--task-size",
        type=positive,
        default=8,
        metavar="BATCHES",
        help="batches per task with --workers or --engine (default: 8); tasks are shards of the data cut at batch "
        "boundaries, and a stopped job resumes with any number of workers: --task-size 4",
    )
    workers.add_argument(
        "--max-attempts",
        type=positive,
        default=3,
        metavar="N",
        help="with --workers or --engine: run a failed task at most N times in all (default: 3)",
    )
    what.add_argument(
        "--carry-state",
        action="store_true",
        help="Keras stateful layers carry their state from batch to batch (row k continues row k of the batch before); "
        "by default they are reset before each batch, so that every row starts from zero state",
    )

    series.add_argument(
        "--checkpoints",
        metavar="all|last|every-N|LIST",
        help="MODEL is a folder of a training run's checkpoints (a TF1 'checkpoint' file's list, or Keras files "
        "saved per epoch): record each one chosen into OUT/checkpoint=STEP/ (or OUT/epoch=N/), read together by "
        "recorders.Series: --checkpoints every-2",
    )
    series.add_argument(
        "--names",
        metavar="FILEPATH",
        help="with --checkpoints: the filepath Keras' ModelCheckpoint saved the files with, whose {epoch} field is "
        "each file's epoch, where their names alone do not say it: --names 'model-{epoch:02d}-{val_loss:.2f}.keras'",
    )
    series.add_argument(
        "--tensorboard",
        metavar="DIR",
        help="with --checkpoints: also write each checkpoint's gate saturation and activation histograms as "
        "TensorBoard summaries into DIR, at its step: --tensorboard logs/gates",
    )
    summary.add_argument(
        "--summary",
        action="store_true",
        help="write statistics instead of every value: per unit and per step of each gate and state, count, mean, "
        "variance, min, max, saturation counts and a histogram, computed as the batches run (a few megabytes, "
        "whatever the number of sequences): --summary",
    )
    summary.add_argument(
        "--saturation",
        metavar="LOW,HIGH",
        default="0.1,0.9",
        help="with --summary: the thresholds below and above which values are counted (default: 0.1,0.9): "
        "--saturation 0.05,0.95",
    )
    summary.add_argument(
        "--bins",
        metavar="LO,HI,N",
        default="-10,10,40",
        help="with --summary: the histogram bins of values without a bounded range (preactivations, states; sigmoid "
        "and tanh activations are binned over their range in 20): N bins from LO to HI (default: -10,10,40): "
        "--bins -5,5,50",
    )
    what.add_argument(
        "--outputs",
        metavar="NAMES",
        help="also record these outputs of the model's own (its predictions, comma-separated: a graph's op names "
        "or OP:K, [batch], [batch, units], [batch, steps, units] or [steps, batch, units] (told apart by running "
        "them on two other batch sizes first); a Keras model's output names; a .tflite file's signature output "
        "names or tensor names, a quantised one dequantised), into OUT/outputs/; --steps and --lengths cut a sequence "
        "as long as the cells' steps as they cut the cells: --outputs logits",
    )
    what.add_argument(
        "--hold",
        action="append",
        default=[],
        metavar="CELL:WHAT:UNITS=VALUE[@STEPS]",
        help="run the model with units of a cell's state (c, h), gate (i, f, ...) or preactivation (f.pre) held at "
        "VALUE (or multiplied: xF; or each unit's mean over --means-from RUN: mean) at every step or at STEPS, so that "
        "later steps and layers compute from it, and record what changes (repeatable): "
        "--hold 'rnn/basic_lstm_cell:h:3,7=0' --hold 'basic_lstm_cell:f:2=1@5:'",
    )
    what.add_argument(
        "--means-from",
        metavar="RUN",
        help="with --hold ...=mean: the recording of the model (made without --hold) whose mean of each held unit, "
        "over every example and step, the unit is held at: --hold 'basic_lstm_cell:h:3=mean' --means-from base",
    )
    what.add_argument(
        "--verify",
        action="store_true",
        help="also recompute the gates of cells taken from while loops in numpy (the replay) and stop if they differ "
        "from what the loop computed by more than 1e-4",
    )


def run(args) -> None:
    from recorders import Shard
    from recorders.errors import SelectionError
    from recorders.write.progress import recorded_layout
    from tracer.run.budget import parse_size
    from tracer.run.select import Selection, parse_range

    selection = Selection(
        cells=split(args.cells),
        gates=split(args.gates),
        steps=parse_range(args.steps, "steps") if args.steps else (None, None),
        values=split(args.values),
        examples=parse_range(args.examples, "examples") if args.examples else (None, None),
    )
    shard = Shard.parse(args.shard) if args.shard else Shard()
    bins = summary_bins(args)
    memory = parse_size(args.memory) if args.memory else None
    if args.checkpoints:
        return record_series(args, selection, bins, memory)
    for flag, given in (("--tensorboard", args.tensorboard), ("--names", args.names)):
        if given:
            raise SelectionError(
                f"{flag} is for --checkpoints series: add --checkpoints, or leave it out"
            )
    layout = recorded_layout(args.out) if args.resume else None
    # a --workers recording: resumed by tasks
    if layout is not None and layout.unit > 1 and not args.shard:
        return record_parallel(args, selection, memory)
    # a task resumed by hand: cut as the job cut it
    if layout is not None and layout.count == shard.count:
        shard = Shard(shard.index, shard.count, layout.unit)
    if args.workers > 1 or args.engine != "processes" or args.scheduler or args.scheduler_file:
        return record_parallel(args, selection, memory)  # the driver imports no TensorFlow
    import tracer
    from tracer.inputs.feeds import load_array, parse_feed_args

    feeds = parse_feed_args(args.feed)
    lengths = load_array(args.lengths, "--lengths") if args.lengths else None
    with tracer.load_model(args.model, **model_options(args)) as model:
        summary = tracer.record(
            model,
            feeds,
            args.out,
            options=replace(
                shared_options(args, selection, bins, memory, lengths),
                overwrite=args.overwrite,
                resume=args.resume,
                shard=shard,
                progress=not args.quiet,
                carry_state=args.carry_state,
            ),
        )
    report(args, summary, f" (shard {shard})" if shard.count > 1 else "")
