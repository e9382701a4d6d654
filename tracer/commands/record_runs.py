"""How `gatetrace record` runs beyond one recording in this process: a series of a training
run's checkpoints (`--checkpoints`), a job over worker processes or a Dask cluster
(`--workers`, `--engine dask`); the options both share with one recording, and the lines
printed when it is done.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracer.commands.common import split

if TYPE_CHECKING:
    from tracer.cells.holds import Hold
    from tracer.run.options import RecordOptions


__all__ = [
    "feed_path",
    "holds",
    "outputs",
    "shared_options",
    "record_series",
    "summary_bins",
    "record_parallel",
    "report",
]


def feed_path(item: str) -> str | None:
    """The file a `--feed NAME=FILE[:MEMBER]` reads, None for a value."""
    from tracer.inputs.files import is_input_spec, split_feed

    value = split_feed(item)[1]
    if not is_input_spec(value):
        return None
    head, _, tail = value.rpartition(":")
    return head if head and "/" not in tail and not Path(value).exists() else value


def holds(args) -> tuple[Hold, ...]:
    """The `--hold` values, parsed (`tracer.cells.holds`: a malformed one is one line), each
    `mean` one resolved to numbers from `--means-from` (read once, kept on `args`)."""
    if "resolved_holds" in vars(args):
        return args.resolved_holds
    from recorders import Recording
    from recorders.errors import RecordingError, SelectionError
    from tracer.cells.holds import holds_at_means, parse_hold

    parsed = tuple(parse_hold(spec) for spec in args.hold)
    asked = [h.describe() for h in parsed if h.mean]
    means_from = getattr(args, "means_from", None)
    if asked and means_from is None:
        raise SelectionError(
            f"--hold '{asked[0]}': expected --means-from RUN, the recording of this model made without --hold "
            "that each unit's mean is taken from, found none; record the model without --hold "
            "(gatetrace record MODEL --feed ... --out base) and add --means-from base"
        )
    if means_from is not None and not asked:
        found = ", ".join(f"'{h.describe()}'" for h in parsed) or "no --hold"
        raise SelectionError(
            f"--means-from {means_from}: expected a --hold that asks for a mean (CELL:WHAT:UNITS=mean), "
            f"found {found}; end a hold in =mean, or leave --means-from out"
        )
    if means_from is None:
        args.resolved_holds = parsed
        return parsed
    if getattr(args, "checkpoints", None):
        raise SelectionError(
            "--means-from with --checkpoints: each checkpoint's units have means of their own, and one "
            "recording's would hold every checkpoint at them; hold at a number, or record each checkpoint "
            "on its own with the means of its own plain recording"
        )
    from recorders.read.series import SERIES_FILE
    from tracer.run.budget import parse_size

    if (Path(means_from) / SERIES_FILE).is_file():
        raise SelectionError(
            f"--means-from {means_from}: expected one recording of the model, found a series of recordings "
            f"(record --checkpoints: one a checkpoint); give the one of the checkpoint this records, "
            f"{_one_of_series(means_from)}"
        )
    try:  # read within --memory, as every read of the run
        base = Recording(means_from, parse_size(args.memory) if args.memory else None)
    except RecordingError as err:
        raise RecordingError(f"--means-from: {err}") from None
    args.resolved_holds = holds_at_means(parsed, base)
    return args.resolved_holds


def _one_of_series(path: str) -> str:
    """How to name one recording of the series at `path`: its first, or the pattern."""
    from recorders import Series
    from recorders.errors import RecordingError

    try:
        series = Series(path)
        if series.values:
            return f"e.g. --means-from {Path(path) / f'{series.key}={series.values[0]}'}"
    except RecordingError:
        pass
    return f"--means-from {Path(path) / 'KEY=VALUE'} as `gatetrace inspect {path}` lists them"


def outputs(args) -> tuple[str, ...]:
    """The `--outputs` names; given but naming none (`--outputs ''`) is one line."""
    from recorders.errors import SelectionError

    names = split(args.outputs)
    if args.outputs is not None and not names:
        raise SelectionError(
            "--outputs names no tensor; name each op or OP:K, comma-separated, or leave it out"
        )
    return names


def shared_options(args, selection, bins, memory, lengths) -> RecordOptions:
    """`tracer.record`'s options that one recording and a series take alike."""
    from tracer.run.options import RecordOptions

    return RecordOptions(
        batch_size=args.batch_size,
        selection=selection,
        lengths=lengths,
        compression=args.compression,
        timeout=args.timeout,
        # what the run reads, which --overwrite never replaces: the inputs, and the means' recording
        reads=(
            args.lengths,
            getattr(args, "means_from", None),
            *(feed_path(item) for item in args.feed),
        ),
        memory=memory,
        verify=args.verify,
        summary=bins,
        gate_ops=args.gate_ops,
        state_ops=args.state_ops,
        holds=holds(args),
        outputs=outputs(args),
        round_bits=args.round_bits,
        means_from=getattr(args, "means_from", None),
    )


def record_series(args, selection, bins, memory) -> None:
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
        custom_objects=args.custom_objects,
        tensorboard=args.tensorboard,
        options=shared_options(
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
        f"read it with: recorders.Series({args.out!r}).gate_frame(...), or one: "
        f"{os.path.join(args.out, f'{key}={values[-1]}')}"
    )


def summary_bins(args):
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


def record_parallel(args, selection, memory) -> None:
    from recorders.errors import SelectionError
    from recorders.write import is_uri, local_path
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
    from tracer.inputs.files import split_feed

    feeds = dict(split_feed(item) for item in args.feed)
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
        custom_objects=os.path.abspath(args.custom_objects) if args.custom_objects else None,
        lengths=os.path.abspath(args.lengths) if args.lengths else None,
        options_as="command line",
        options=RecordOptions(
            batch_size=args.batch_size,
            selection=selection,
            compression=args.compression,
            timeout=args.timeout,
            memory=memory,
            verify=args.verify,
            summary=summary_bins(args),
            gate_ops=args.gate_ops,
            state_ops=args.state_ops,
            holds=holds(args),
            outputs=outputs(args),
            round_bits=args.round_bits,
        ),
    )
    bar = None

    def progress(n: int, total: int) -> None:
        nonlocal bar
        # once sequences are recorded: nothing shows for a job its tasks refuse as they start
        # (a file, a model), whose one line is the error
        if bar is None and not args.quiet and n > 0:
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
    report(args, summary, f" in {tasks['count']} task{'s' if tasks['count'] != 1 else ''}")


def _span(summary: Mapping[str, Any]) -> tuple[int, int] | None:
    """The examples [start, stop) a recording's shards share among them (None: not said)."""
    for entry in summary.get("inputs", {}).values():
        start, stop = entry["rows"]
        return start, stop
    return None


def _empty_shard(shard: list[int], span: tuple[int, int], complete: bool) -> str:
    """What it means that shard K/N (`shard`: [K, N] or [K, N, unit]) got none of the
    sequences `span`: a part the cut leaves empty, done with nothing to record."""
    from recorders.write.progress import Shard

    count, total = shard[1], span[1] - span[0]
    empty = sum(a == b for a, b in (Shard(k, *shard[1:]).part(*span) for k in range(count)))
    units = -(-total // (shard[2] if len(shard) > 2 else 1))
    return (
        f"shard {shard[0]}/{count} holds none of the {total:,} sequences: cut into {count} parts, they leave "
        f"{empty} part{'s' if empty != 1 else ''} empty. It is done, with nothing to record; the other shards "
        f"{'recorded' if complete else 'record'} every sequence (with N at most {units:,}, every part holds sequences)"
    )


def report(args, summary: Mapping[str, Any], part: str) -> None:
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
            f"{rows['gates']:,} gate rows, {rows['states']:,} state rows, {rows['weights']:,} weight rows"
            + (f", {rows['outputs']:,} output rows" if "outputs" in rows else "")
            + f" -> {args.out}"
        )
    shard, span = summary.get("shard") or [0, 1], _span(summary)
    if summary["examples"] == 0 and shard[1] > 1 and span is not None and span[1] > span[0]:
        print(_empty_shard(shard, span, summary["complete"]))
    elif summary["examples"] == 0 and summary.get("complete", True):
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
