"""`gatetrace record MODEL --feed NAME=FILE --out DIR`: every gate, state and weight of every cell to Parquet.

In this process (`tracer.record`), or, with --workers or --engine, in tasks of other
processes or a Dask cluster (`tracer.run.parallel`; this process then imports no TensorFlow).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tracer.commands.common import positive, split

if TYPE_CHECKING:
    from tracer.run.options import RecordOptions

NAME = "record"
HELP = "record every gate, state and weight of every cell to Parquet"
EXAMPLE = "gatetrace record model.ckpt --feed inputs=x.npy --feed keep_prob=1.0 --out run1/"
READS_MODEL, RUNS_MODEL = True, True


def arguments(c: argparse.ArgumentParser) -> None:
    from recorders.write.layout import COMPRESSIONS, DEFAULT_COMPRESSION
    from tracer.run.budget import DEFAULT_ROOM  # no TensorFlow

    c.add_argument(
        "--feed",
        action="append",
        default=[],
        metavar="NAME=FILE.npy|NAME=VALUE",
        help="feed a placeholder, or a Keras model's input (repeatable); NAME with or without ':0': --feed x=inputs.npy",
    )
    c.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="output folder (must be new or empty), or a prefix in object storage: --out s3://bucket/run1",
    )
    c.add_argument(
        "--batch-size",
        type=positive,
        default=256,
        metavar="N",
        help="sequences per Session.run (default: 256; a placeholder's fixed batch size wins)",
    )
    c.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the gatetrace recording in --out, once the new one is complete (other files are never deleted)",
    )
    c.add_argument(
        "--resume",
        action="store_true",
        help="continue a recording that was killed or interrupted, keeping its finished batches (same arguments as the first run)",
    )
    c.add_argument(
        "--shard",
        metavar="K/N",
        help="record part K (0-based) of N disjoint parts of the sequences, into the same --out as the other parts: --shard 3/8",
    )
    c.add_argument(
        "--compression",
        choices=COMPRESSIONS,
        default=DEFAULT_COMPRESSION,
        help="Parquet compression. fast (default): lz4 on the key columns only, float values uncompressed; lz4, zstd, "
        "snappy: every column (lz4: files about 9%% smaller, records 10%% to 20%% slower; zstd: 13%% smaller, about "
        "50%% slower); none: nothing: --compression zstd",
    )
    c.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    c.add_argument(
        "--lengths",
        metavar="FILE.npy",
        help="sequence lengths, one per input row: no rows at or past them",
    )
    c.add_argument(
        "--cells",
        metavar="PATTERN",
        help="record only cells whose names match these globs, comma-separated: 'rnn/*/cell_1/*'",
    )
    c.add_argument(
        "--gates", metavar="LABELS", help="record only these gates, comma-separated: i,f"
    )
    c.add_argument("--steps", metavar="START:STOP", help="record only these input positions: 0:10")
    c.add_argument(
        "--values",
        metavar="COLUMNS",
        default="preactivation,activation",
        help="gate value columns, comma-separated: preactivation, activation, contributions (the preactivation's parts: "
        "input, recurrent, bias, peephole, recurrent_bias); default: preactivation,activation. "
        "E.g. --values preactivation,activation,contributions",
    )
    c.add_argument(
        "--examples",
        metavar="START:STOP",
        help="record only these sequences (rows of the inputs): 0:1000",
    )
    c.add_argument(
        "--memory",
        metavar="SIZE",
        help="the peak memory (RSS) the process may reach; the batch size is lowered to stay within it (default: what "
        f"TensorFlow and the model hold, plus {DEFAULT_ROOM >> 20} MB or a tenth of the available memory if less): --memory 2G",
    )
    c.add_argument(
        "--workers",
        type=positive,
        default=1,
        metavar="N",
        help="record in N processes on this machine, each running tasks of --task-size batches: --workers 4 (default: 1, "
        "one process)",
    )
    c.add_argument(
        "--engine",
        choices=("processes", "dask"),
        default="processes",
        help='what runs the tasks: a process pool of --workers (default), or Dask (pip install "gatetrace[dask]"): '
        "a local cluster of --workers processes, or the cluster at --scheduler: --engine dask --scheduler tcp://head:8786",
    )
    c.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="with --engine dask: the address of an existing Dask scheduler",
    )
    c.add_argument(
        "--scheduler-file",
        metavar="FILE",
        help="with --engine dask: a Dask scheduler file (dask-jobqueue, dask-mpi)",
    )
    c.add_argument(
        "--task-size",
        type=positive,
        default=8,
        metavar="BATCHES",
        help="batches per task with --workers or --engine (default: 8); tasks are shards of the data cut at batch "
        "boundaries, and a stopped job resumes with any number of workers: --task-size 4",
    )
    c.add_argument(
        "--max-attempts",
        type=positive,
        default=3,
        metavar="N",
        help="with --workers or --engine: run a failed task at most N times in all (default: 3)",
    )
    c.add_argument(
        "--carry-state",
        action="store_true",
        help="Keras stateful layers carry their state from batch to batch (row k continues row k of the batch before); "
        "by default they are reset before each batch, so that every row starts from zero state",
    )

    c.add_argument(
        "--checkpoints",
        metavar="all|last|every-N|LIST",
        help="MODEL is a folder of a training run's checkpoints (a TF1 'checkpoint' file's list, or Keras files "
        "saved per epoch): record each one chosen into OUT/checkpoint=STEP/ (or OUT/epoch=N/), read together by "
        "recorders.Series: --checkpoints every-2",
    )
    c.add_argument(
        "--names",
        metavar="FILEPATH",
        help="with --checkpoints: the filepath Keras' ModelCheckpoint saved the files with, whose {epoch} field is "
        "each file's epoch, where their names alone do not say it: --names 'model-{epoch:02d}-{val_loss:.2f}.keras'",
    )
    c.add_argument(
        "--tensorboard",
        metavar="DIR",
        help="with --checkpoints: also write each checkpoint's gate saturation and activation histograms as "
        "TensorBoard summaries into DIR, at its step: --tensorboard logs/gates",
    )
    c.add_argument(
        "--summary",
        action="store_true",
        help="write statistics instead of every value: per unit and per step of each gate and state, count, mean, "
        "variance, min, max, saturation counts and a histogram, computed beside the gates (a few megabytes, "
        "whatever the number of sequences): --summary",
    )
    c.add_argument(
        "--saturation",
        metavar="LOW,HIGH",
        default="0.1,0.9",
        help="with --summary: the thresholds below and above which values are counted (default: 0.1,0.9): "
        "--saturation 0.05,0.95",
    )
    c.add_argument(
        "--bins",
        metavar="LO,HI,N",
        default="-10,10,40",
        help="with --summary: the histogram bins of values without a bounded range (preactivations, states; sigmoid "
        "and tanh activations are binned over their range in 20): N bins from LO to HI (default: -10,10,40): "
        "--bins -5,5,50",
    )
    c.add_argument(
        "--verify",
        action="store_true",
        help="also recompute the gates of cells taken from while loops in numpy (the replay) and stop if they differ "
        "from what the loop computed by more than 1e-4",
    )


def _feed_path(item: str) -> str | None:
    """The file a `--feed NAME=FILE[:MEMBER]` reads, None for a value."""
    from tracer.inputs.files import is_input_spec

    value = item.partition("=")[2]
    if not value or not is_input_spec(value):
        return None
    head, _, tail = value.rpartition(":")
    return head if head and "/" not in tail and not Path(value).exists() else value


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
    bins = _bins(args)
    memory = parse_size(args.memory) if args.memory else None
    if args.checkpoints:
        return _record_series(args, selection, bins, memory)
    for flag, given in (("--tensorboard", args.tensorboard), ("--names", args.names)):
        if given:
            raise SelectionError(
                f"{flag} is for --checkpoints series: add --checkpoints, or leave it out"
            )
    layout = recorded_layout(args.out) if args.resume else None
    # a --workers recording: resumed by tasks
    if layout is not None and layout.unit > 1 and not args.shard:
        return _record_parallel(args, selection, memory)
    # a task resumed by hand: cut as the job cut it
    if layout is not None and layout.count == shard.count:
        shard = Shard(shard.index, shard.count, layout.unit)
    if args.workers > 1 or args.engine != "processes" or args.scheduler or args.scheduler_file:
        return _record_parallel(args, selection, memory)  # the driver imports no TensorFlow
    import tracer
    from tracer.inputs.feeds import load_array, parse_feed_args

    feeds = parse_feed_args(args.feed)
    lengths = load_array(args.lengths, "--lengths") if args.lengths else None
    with tracer.load_model(
        args.model, tag=args.tag, signature=args.signature, allow_unsafe_ops=args.allow_unsafe_ops
    ) as model:
        summary = tracer.record(
            model,
            feeds,
            args.out,
            options=replace(
                _options(args, selection, bins, memory, lengths),
                overwrite=args.overwrite,
                resume=args.resume,
                shard=shard,
                progress=not args.quiet,
                carry_state=args.carry_state,
            ),
        )
    _report(args, summary, f" (shard {shard})" if shard.count > 1 else "")


def _options(args, selection, bins, memory, lengths) -> RecordOptions:
    """`tracer.record`'s options that one recording and a series take alike."""
    from tracer.run.options import RecordOptions

    return RecordOptions(
        batch_size=args.batch_size,
        selection=selection,
        lengths=lengths,
        compression=args.compression,
        timeout=args.timeout,
        reads=(args.lengths, *(_feed_path(item) for item in args.feed)),
        memory=memory,
        verify=args.verify,
        summary=bins,
    )


def _record_series(args, selection, bins, memory) -> None:
    """`--checkpoints`: each checkpoint of the training run in MODEL (a folder) into OUT/KEY=VALUE/."""
    from recorders.errors import SelectionError

    for flag, given in (
        ("--shard", args.shard),
        ("--workers", args.workers > 1),
        ("--engine", args.engine != "processes"),
        ("--overwrite", args.overwrite),
        ("--carry-state", args.carry_state),
    ):
        if given:
            raise SelectionError(
                f"--checkpoints with {flag}: a series is recorded one checkpoint after another, in this process, "
                "into a new folder (remove an old series first)"
            )
    import tracer
    from tracer.inputs.feeds import load_array, parse_feed_args

    done = tracer.record_series(
        args.model,
        parse_feed_args(args.feed),
        args.out,
        args.checkpoints,
        names=args.names,
        resume=args.resume,
        progress=not args.quiet,
        allow_unsafe_ops=args.allow_unsafe_ops,
        tensorboard=args.tensorboard,
        options=_options(
            args,
            selection,
            bins,
            memory,
            load_array(args.lengths, "--lengths") if args.lengths else None,
        ),
    )
    key, values, recorded = done["key"], done["values"], done["recorded"]
    print(
        f"recorded {len(recorded)} of {len(values)} checkpoints ({key} {', '.join(map(str, values))}) -> {args.out}"
    )
    print(
        f"read it with: recorders.Series({args.out!r}).gate_frame(...), or one: {args.out}/{key}={values[-1]}"
    )


def _bins(args):
    """The summary's `recorders.Bins` from --saturation and --bins (None without --summary)."""
    from recorders.errors import SelectionError
    from recorders.write.totals import Bins

    if not args.summary:
        for flag, given, default in (
            ("--saturation", args.saturation, "0.1,0.9"),
            ("--bins", args.bins, "-10,10,40"),
        ):
            if given != default:
                raise SelectionError(
                    f"{flag} is for --summary recordings: add --summary, or leave {flag} out"
                )
        return None

    def numbers(flag: str, text: str, count: int, example: str) -> list[float]:
        try:
            got = [float(v) for v in text.split(",")]
        except ValueError:
            got = []
        if len(got) != count:
            raise SelectionError(
                f"{flag} {text}: expected {count} numbers separated by commas, e.g. {flag} {example}"
            )
        return got

    low, high = numbers("--saturation", args.saturation, 2, "0.1,0.9")
    lo, hi, n = numbers("--bins", args.bins, 3, "-10,10,40")
    if not n.is_integer():
        raise SelectionError(
            f"--bins {args.bins}: the number of bins must be a whole number, e.g. --bins -10,10,40"
        )
    return Bins(low, high, lo, hi, int(n))


def _record_parallel(args, selection, memory) -> None:
    from recorders.errors import SelectionError
    from recorders.write.files import is_uri, local_path
    from tracer.run.options import RecordOptions
    from tracer.run.parallel import Job, dask_executor, record_parallel

    for flag, given in (
        ("--shard", args.shard),
        ("--carry-state", args.carry_state),
        ("--overwrite", args.overwrite),
    ):
        if given:
            why = {
                "--shard": "the tasks are shards already",
                "--carry-state": "a carried state is one stream, recorded in one process",
                "--overwrite": "remove the old recording first, then record into the empty folder",
            }[flag]
            raise SelectionError(f"{flag} with --workers or --engine: {why}")
    if args.engine != "dask" and (args.scheduler or args.scheduler_file):
        raise SelectionError("--scheduler and --scheduler-file are for --engine dask")
    feeds = {}
    for item in args.feed:
        name, sep, value = item.partition("=")
        feeds[name] = value
    job = Job(
        model=os.path.abspath(args.model),
        feeds={
            n: (os.path.abspath(v) if os.path.exists(v.split(":")[0]) else v)
            for n, v in feeds.items()
        },
        out=args.out if is_uri(args.out) else str(local_path(args.out).resolve()),
        tag=args.tag,
        signature=args.signature,
        allow_unsafe_ops=args.allow_unsafe_ops,
        lengths=os.path.abspath(args.lengths) if args.lengths else None,
        options=RecordOptions(
            batch_size=args.batch_size,
            selection=selection,
            compression=args.compression,
            timeout=args.timeout,
            memory=memory,
            verify=args.verify,
            summary=_bins(args),
        ),
    )
    bar = None

    def progress(n: int, total: int) -> None:
        nonlocal bar
        # once the folder is ready: nothing shows for a job refused before
        if bar is None and not args.quiet:
            from tracer.run.bar import progress_bar  # imports no TensorFlow

            bar = progress_bar(total, True, "recording, in tasks")
        if bar is not None:
            bar.update(n)

    options = {
        "task_size": args.task_size,
        "max_attempts": args.max_attempts,
        "resume": args.resume,
        "progress": progress,
    }
    try:
        if args.engine == "dask":
            with dask_executor(args.workers, args.scheduler, args.scheduler_file) as executor:
                summary = record_parallel(job, executor=executor, **options)
        else:
            summary = record_parallel(job, workers=args.workers, **options)
    finally:
        if bar is not None:
            bar.close()
    tasks = summary["tasks"]
    _report(args, summary, f" in {tasks['count']} task{'s' if tasks['count'] != 1 else ''}")


def _report(args, summary: dict, part: str) -> None:
    """The lines `record` prints when it is done."""
    cells = summary["cells"]
    rows = summary["rows"]
    if summary["examples_this_run"] != summary["examples"]:
        part += f" ({summary['examples_this_run']:,} in this run)"
    if summary.get("kind") == "summary":
        print(
            f"summarised {len(cells)} cell{'s' if len(cells) != 1 else ''} on {summary['examples']:,} sequences{part}: "
            f"{rows['gates']:,} gate values, {rows['states']:,} state values -> {args.out}"
        )
    else:
        print(
            f"recorded {len(cells)} cell{'s' if len(cells) != 1 else ''} on {summary['examples']:,} sequences{part}: "
            f"{rows['gates']:,} gate rows, {rows['states']:,} state rows, {rows['weights']:,} weight rows -> {args.out}"
        )
    if summary["examples"] == 0 and summary.get("complete", True):
        feeds = ", ".join(
            f"{name} {shape}"
            for name, shape in summary.get("feeds", {}).items()
            if shape and shape[0] == 0
        )
        print(
            f"the inputs hold no sequences ({feeds or 'no rows'}): the recording is empty, its tables have no rows"
        )
    if "why" in summary.get("batch", {}):
        print(summary["batch"]["why"])
    for hidden in summary.get("not_recorded", []):
        print(f"not recorded: {hidden}; its inner layer runs on reshaped rows")
    for skipped in summary.get("skipped", []):
        print(
            f"skipped cell {skipped['cell']}: it needs placeholder {skipped['needs']}, which was not fed (--feed {skipped['needs']}=... records it)"
        )
    if summary["complete"] and summary.get("kind") == "summary":
        print(
            f"read it with: pandas.read_parquet({os.path.join(args.out, 'summary', 'units.parquet')!r})"
        )
    elif summary["complete"]:
        print(f"read it with: pandas.read_parquet({os.path.join(args.out, 'gates')!r})")
    else:
        print(
            f"the other shards are not finished yet; {os.path.join(args.out, 'manifest.json')} appears when they are"
        )
