"""The `gatetrace` command: a thin shell over the library.

    gatetrace inspect MODEL [--json]
    gatetrace record MODEL --feed NAME=FILE.npy ... --out DIR [--resume] [--shard K/N]
    gatetrace weights MODEL --out FILE.parquet
    gatetrace demo [--out DIR]

User errors print one line on stderr and exit with code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
from pathlib import Path
import re
import sys
import warnings
from typing import Sequence

__all__ = ["main"]

_MODEL_HELP = (
    "a checkpoint prefix P with P.meta beside it, a folder holding a 'checkpoint' file, "
    "a SavedModel folder, a frozen GraphDef .pb, or a Keras .keras/.h5 file (or tf-keras SavedModel folder)"
)


def _quiet_tensorflow() -> None:
    """Keep TensorFlow's own log lines and deprecation notices off the user's terminal."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    warnings.filterwarnings("ignore")
    logging.getLogger("tensorflow").setLevel(logging.CRITICAL)  # gatetrace says what went wrong itself
    try:
        import absl.logging

        absl.logging.set_verbosity(absl.logging.ERROR)
    except ImportError:
        pass


@contextlib.contextmanager
def _native_logs_silenced():
    """Send what TensorFlow's C++ runtime writes to file descriptor 2 to /dev/null.

    Its CUDA probe logs at session creation whatever TF_CPP_MIN_LOG_LEVEL says. Python's
    `sys.stderr` is moved to a copy of the real stderr, so gatetrace's own messages
    still reach the user. GATETRACE_DEBUG=1 leaves everything as it is.
    """
    if os.environ.get("GATETRACE_DEBUG"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    original, sys.stderr = sys.stderr, os.fdopen(os.dup(saved), "w", buffering=1)
    try:
        yield
    finally:
        sys.stderr.flush()
        sys.stderr.close()
        sys.stderr = original
        os.dup2(saved, 2)
        os.close(saved)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, given {text!r}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, given {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse, with errors in one line (the usage block stays behind --help), flags taken
    only when spelled in full (`--gate` is not `--gates`), and the nearest flag suggested for
    one it does not know."""

    known: set[str] = set()  # every flag of every command

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def add_argument(self, *args, **kwargs):
        _Parser.known.update(a for a in args if a.startswith("--"))
        return super().add_argument(*args, **kwargs)

    def error(self, message: str):
        import difflib

        unknown = re.findall(r"(--[\w-]+)", message) if message.startswith("unrecognized arguments") else []
        near = [m for flag in unknown for m in difflib.get_close_matches(flag.split("=")[0], sorted(_Parser.known), n=1, cutoff=0.6)]
        hint = f" (did you mean {near[0]}?)" if near else ""
        argv = getattr(self, "argv", [])
        for k in range(len(argv) - 2):  # `--feed x a/x.npy`: the file became an argument of its own
            if argv[k] == "--feed" and "=" not in argv[k + 1] and not argv[k + 2].startswith("-"):
                hint = f" (--feed takes NAME=FILE as one word: --feed {argv[k + 1]}={argv[k + 2]})"
        self.exit(2, f"{self.prog}: error: {message}{hint}; see {self.prog} --help\n")


def _parser() -> argparse.ArgumentParser:
    from recorders import __version__
    from recorders.parquet import COMPRESSIONS, DEFAULT_COMPRESSION
    from tracer.run.budget import DEFAULT_ROOM  # no TensorFlow

    p = _Parser(
        prog="gatetrace",
        description="Record every gate of every TensorFlow RNN cell, at every step, on your data.",
        epilog="example: gatetrace record model.ckpt --feed inputs=x.npy --out run1/",
    )
    p.add_argument("--version", action="version", version=f"gatetrace {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    def command(name: str, help: str, example: str, reads_model: bool = True, runs_model: bool = True) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help, description=help, epilog=f"example: {example}")
        if reads_model:
            c.add_argument("model", metavar="MODEL", help=_MODEL_HELP)
            c.add_argument("--tag", default="serve", help="the SavedModel meta graph's exact tag set, comma-separated (default: serve)")
            c.add_argument(
                "--signature",
                default="serving_default",
                help="the SavedModel signature to record, whose input names --feed takes: --signature serve (default: serving_default)",
            )
        if reads_model and runs_model:
            c.add_argument(
                "--timeout",
                type=_seconds,
                metavar="SECONDS",
                help="stop a run of the model (one batch) that takes longer than this: --timeout 600 (default: no limit)",
            )
        if reads_model:
            c.add_argument(
                "--allow-unsafe-ops",
                action="store_true",
                help="run the model even if it holds ops outside the allowlist of pure math, array, variable and "
                "control-flow ops (file access, Python, printing): only for models you trust" if runs_model else
                "read the model even if importing its graph could run ops that do more than compute (file access), "
                "or loading its Keras file would build objects gatetrace does not check: only for models you trust",
            )
        return c

    c = command(
        "inspect",
        "list the RNN cells in a model, their per-step gate ops, and any unsafe ops (runs nothing); "
        "given a recording folder, what it holds",
        "gatetrace inspect model.ckpt --json",
        runs_model=False,
    )
    c.add_argument("--json", action="store_true", help="print one JSON object instead of a table")

    c = command(
        "view",
        "look at a recording in the browser: overview, one sequence's heatmap, units over the dataset, select and "
        'match, what drives a gate (needs pip install "gatetrace[view]"; serves 127.0.0.1 by default, read-only)',
        "gatetrace view gatetrace-demo/recording --port 8050",
        reads_model=False,
    )
    c.add_argument("run", metavar="RUN", help="a recording folder, as `gatetrace record --out` wrote it")
    c.add_argument("--port", type=int, default=8050, help="the local port to serve on (default: 8050)")
    c.add_argument("--host", default="127.0.0.1", metavar="ADDRESS",
                   help="the address to serve on (default: 127.0.0.1, this machine only); any other needs the secret token the printed URL carries")
    c.add_argument("--tokens", metavar="FILE", help="labels for the steps: a .npy or .json of [examples, steps] (e.g. the tokens read)")
    c.add_argument("--open", action="store_true", help="open the page in the default browser")

    c = command(
        "record",
        "record every gate, state and weight of every cell to Parquet",
        "gatetrace record model.ckpt --feed inputs=x.npy --feed keep_prob=1.0 --out run1/",
    )
    c.add_argument(
        "--feed",
        action="append",
        default=[],
        metavar="NAME=FILE.npy|NAME=VALUE",
        help="feed a placeholder, or a Keras model's input (repeatable); NAME with or without ':0': --feed x=inputs.npy",
    )
    c.add_argument(
        "--out", required=True, metavar="DIR",
        help="output folder (must be new or empty), or a prefix in object storage: --out s3://bucket/run1",
    )
    c.add_argument(
        "--batch-size",
        type=_positive,
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
    c.add_argument("--lengths", metavar="FILE.npy", help="sequence lengths, one per input row: no rows at or past them")
    c.add_argument("--cells", metavar="PATTERN", help="record only cells whose names match these globs, comma-separated: 'rnn/*/cell_1/*'")
    c.add_argument("--gates", metavar="LABELS", help="record only these gates, comma-separated: i,f")
    c.add_argument("--steps", metavar="START:STOP", help="record only these input positions: 0:10")
    c.add_argument(
        "--values", metavar="COLUMNS", default="preactivation,activation",
        help="gate value columns, comma-separated: preactivation, activation, contributions (the preactivation's parts: "
        "input, recurrent, bias, peephole, recurrent_bias); default: preactivation,activation. "
        "E.g. --values preactivation,activation,contributions",
    )
    c.add_argument("--examples", metavar="START:STOP", help="record only these sequences (rows of the inputs): 0:1000")
    c.add_argument(
        "--memory",
        metavar="SIZE",
        help="the peak memory (RSS) the process may reach; the batch size is lowered to stay within it (default: what "
        f"TensorFlow and the model hold, plus {DEFAULT_ROOM >> 20} MB or a tenth of the available memory if less): --memory 2G",
    )
    c.add_argument(
        "--workers",
        type=_positive,
        default=1,
        metavar="N",
        help="record in N processes on this machine, each running tasks of --task-size batches: --workers 4 (default: 1, "
        "one process)",
    )
    c.add_argument(
        "--engine",
        choices=("processes", "dask"),
        default="processes",
        help="what runs the tasks: a process pool of --workers (default), or Dask (pip install \"gatetrace[dask]\"): "
        "a local cluster of --workers processes, or the cluster at --scheduler: --engine dask --scheduler tcp://head:8786",
    )
    c.add_argument("--scheduler", metavar="ADDRESS", help="with --engine dask: the address of an existing Dask scheduler")
    c.add_argument("--scheduler-file", metavar="FILE", help="with --engine dask: a Dask scheduler file (dask-jobqueue, dask-mpi)")
    c.add_argument(
        "--task-size",
        type=_positive,
        default=8,
        metavar="BATCHES",
        help="batches per task with --workers or --engine (default: 8); tasks are shards of the data cut at batch "
        "boundaries, and a stopped job resumes with any number of workers: --task-size 4",
    )
    c.add_argument(
        "--max-attempts",
        type=_positive,
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
        "--verify",
        action="store_true",
        help="also recompute the gates of cells taken from while loops in numpy (the replay) and stop if they differ "
        "from what the loop computed by more than 1e-4",
    )

    c = command("weights", "write every cell's per-gate W, U, b to one Parquet file", "gatetrace weights model.ckpt --out weights.parquet")
    c.add_argument("--out", required=True, metavar="FILE", help="output Parquet file")
    c.add_argument("--overwrite", action="store_true", help="replace --out if it is a weights table gatetrace wrote")

    c = command(
        "demo",
        "train a small LSTM on a memory task, record its gates and summarise them",
        "gatetrace demo --out gatetrace-demo",
        reads_model=False,
    )
    c.add_argument("--out", default="gatetrace-demo", metavar="DIR", help="output folder (default: ./gatetrace-demo)")
    c.add_argument("--overwrite", action="store_true", help="replace --out if it holds something")
    return p


def _batch_note(cells) -> str:
    """What the default memory budget makes of the default batch size, as `inspect` says it."""
    from tracer.run.budget import (
        DEFAULT_BATCH_SIZE,
        bytes_per_sequence,
        choose_batch,
        describe_size,
    )

    choice = choose_batch(DEFAULT_BATCH_SIZE, bytes_per_sequence(cells, {}))
    why = "fits" if choice.size == DEFAULT_BATCH_SIZE else f"lowered to {choice.size} to fit"
    return (
        f"batch size: {DEFAULT_BATCH_SIZE} by default, {why} the memory budget of {describe_size(choice.budget)} "
        f"(TensorFlow and the model hold {describe_size(choice.used)}; about {describe_size(choice.per_sequence)} per "
        "sequence, inputs not counted; --memory changes the budget)"
    )


def _signature_input(graph, name: str, tensor: str) -> dict:
    """A SavedModel signature's input, as `inspect` lists it."""
    t = graph.get_tensor_by_name(tensor)
    shape = None if t.shape.rank is None else t.shape.as_list()
    return {"name": name, "tensor": tensor, "dtype": t.dtype.name, "shape": shape}


def _inspect(args) -> None:
    if _is_recording(args.model):
        return _inspect_recording(args)
    import tracer
    from tracer.load.keras import KerasModel
    from tracer.load.safety import unsafe_ops
    from tracer.run.recording import from_loops

    model = tracer.load_model(args.model, tag=args.tag, signature=args.signature, restore=False, allow_unsafe_ops=args.allow_unsafe_ops)
    if isinstance(model, KerasModel):
        return _inspect_keras(args, model)
    from tracer.inputs.feeds import describe_entry, pipeline_entries

    with model, from_loops(model, tracer.find_cells(model.graph, model.source), progress=False, restore=False) as (model, cells):
        plan = tracer.FetchPlan(model.graph, cells)
        weights = [t for c in cells for t in c.weights.values()]
        loading = model.load_plan.problems(model.graph) if model.load_plan else []
        pipelines = [] if model.inputs else pipeline_entries(plan.tensors)  # fed instead of their queue or iterator
        fed = {t.name for t, _ in pipelines}
        # What each command would run beyond the allowlist: loading, then the weights (weights)
        # or the gates and weights of every cell (record, with the pipeline's tensors fed); and
        # which cells record alone safely.
        refused = {
            "weights": sorted(set(loading + unsafe_ops(model.graph, weights))),
            "record": sorted(set(loading + unsafe_ops(model.graph, [*plan.tensors, *weights], fed=fed))),
        }
        safe_cells = [] if loading or not refused["record"] else [  # walked only when record would be refused
            c.name for c in cells if not unsafe_ops(model.graph, [*tracer.FetchPlan(model.graph, [c], context=cells).tensors, *c.weights.values()])
        ]
        unsafe = sorted(set(refused["weights"] + refused["record"]))
        inputs = [_signature_input(model.graph, name, tensor) for name, tensor in model.inputs.items()]
        if not inputs:  # a checkpoint or frozen graph: the placeholders the gates need
            from tracer.inputs.feeds import unfed_placeholders

            needed = sorted(op.name for op in unfed_placeholders(plan.tensors, fed))
            inputs = [_signature_input(model.graph, name, f"{name}:0") for name in needed]
            inputs += [{**_signature_input(model.graph, t.name.removesuffix(":0"), t.name), "from": describe_entry(t, op)} for t, op in pipelines]
    if args.json:
        described = {"source": args.model, "format": model.format, "cells": [c.describe() for c in cells], "unsafe_ops": unsafe,
                     "refused_without_allow_unsafe_ops": {k: v for k, v in refused.items() if v}, **({"notes": list(model.notes)} if model.notes else {})}
        print(json.dumps({**described, "inputs": inputs} if inputs else described))
        return
    print(f"{args.model} ({model.format}): {len(cells)} RNN cell{'s' if len(cells) != 1 else ''}")
    for note in model.notes:
        print(f"note: {note}")
    for i in inputs:
        if "from" in i:
            print(f"the cells read their inputs from {i['from']}: record with --feed {i['name']}=FILE.npy")
            continue
        print(f"feed {i['name']} ({i['dtype']} {i['shape']}, tensor {i['tensor']}): --feed {i['name']}=FILE.npy")
    rows = [("cell", "kind", "units", "input", "steps", "gates", "direction", "path")]
    for c in cells:
        steps = f"{c.loop.length or '?'} (loop)" if c.loop else f"{c.fused.length or '?'}" if c.fused else str(len(c.steps))
        rows.append((c.name, c.kind, str(c.units), str(c.input_size), steps, ",".join(c.gates), "backward" if c.backward else "forward", c.path))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    print()
    for c in cells:
        extras = [f"forget_bias={c.forget_bias}"] if c.forget_bias is not None else []
        extras += [f"activation={c.activation}"]
        extras += [f"{k}={v}" for k, v in (("num_proj", c.num_proj), ("cell_clip", c.cell_clip), ("proj_clip", c.proj_clip)) if v is not None]
        if "w_i_diag" in c.weights:
            extras.append("peepholes")
        if c.path == "fetch":
            first, last = c.steps[0].gate_op, c.steps[-1].gate_op
            span = first if len(c.steps) == 1 else f"{first} ... {last}"
            print(f"{c.name}: fetched from gate ops {span} (by input position); {', '.join(extras)}")
        else:
            how = {"replay": "replayed", "loop": "from its loop", "fused": "fused"}[c.path]
            print(f"{c.name}: {how}, {', '.join(extras)}: {c.describe()['why']}")
    print(f"\n{_batch_note(cells)}")
    if unsafe:
        print(f"\nunsafe ops that loading or recording would run ({len(unsafe)}): {', '.join(unsafe)}")
        for command, ops in refused.items():
            if ops:
                print(f"  {command}: refused unless --allow-unsafe-ops (it would run {', '.join(ops)})")
            else:
                print(f"  {command}: runs only allowlisted ops")
        if safe_cells:
            print(f"  record --cells {','.join(safe_cells)}: runs only allowlisted ops")
    else:
        print("\nunsafe ops: none (loading and recording run only allowlisted ops)")


def _is_recording(path: str) -> bool:
    """Whether `path` is a folder `gatetrace record` wrote (finished, or partial)."""
    p = Path(path)
    return (p / "gates").is_dir() and ((p / "manifest.json").is_file() or (p / "_progress").is_dir())


def _inspect_recording(args) -> None:
    """What a recording folder holds (`recorders.Recording.summary`); reads no values."""
    from recorders import Recording
    from tracer.run.budget import describe_size  # imports no TensorFlow

    summary = Recording(args.model).summary()
    if args.json:
        print(json.dumps(summary))
        return
    source, examples = summary["source"], summary["examples"]
    state = "complete" if summary["complete"] else "partial: run the same record command with --resume to finish it"
    print(f"{args.model}: a gatetrace recording ({state}) of {source.get('path', 'a model it does not name')} "
          f"({source.get('format', 'format not given')}), gatetrace {summary['gatetrace_version']}")
    ranges = ", ".join(f"{a}:{b}" for a, b in examples["complete"]) or "none"
    print(f"examples: {examples['count']:,} ({ranges})")
    rows = [("cell", "kind", "units", "gates", "states", "steps", "path")]
    rows += [(c["name"], c["kind"] or "", str(c["units"]), ",".join(c["gates"]), ",".join(c["states"]), str(c["steps"]), c["path"] or "")
             for c in summary["cells"]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    n, shards = summary["rows"], summary["shards"]
    print(f"rows: {n['gates']:,} gate rows, {n['states']:,} state rows, {n['weights']:,} weight rows; "
          f"shards finished: {shards['finished']} of {shards['of']}; {describe_size(summary['bytes'])} on disk")
    print(f"read it with: pandas.read_parquet({os.path.join(args.model, 'gates')!r}) or recorders.Recording({args.model!r})")


def _inspect_keras(args, model) -> None:
    from tracer.find.keras import find_layers, hidden_layers

    cells = find_layers(model)
    hidden = hidden_layers(model)
    inputs = [{"name": i.name, "dtype": i.dtype.name, "shape": i.shape.as_list()} for i in model.inputs]
    if args.json:
        # The file passed the Keras file check before loading (tracer.load.keras_files): nothing in it runs unchecked.
        described = [c.describe() for c in cells]
        print(json.dumps({"source": args.model, "format": model.format, "inputs": inputs, "cells": described, "unsafe_ops": [], "not_recorded": hidden}))
        return
    print(f"{args.model} ({model.format}): {len(cells)} RNN layer{'s' if len(cells) != 1 else ''}")
    rows = [("cell", "kind", "units", "input", "steps", "gates", "direction", "path")]
    for c in cells:
        steps = c.describe()["steps"]
        rows.append(
            (c.name, c.kind, str(c.units), str(c.input_size), "?" if steps is None else str(steps), ",".join(c.gates),
             "backward" if c.backward else "forward", c.path)
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    print()
    for c in cells:
        d = c.describe()
        extras = [f"activation={c.activation}", f"recurrent_activation={c.recurrent_activation}"]
        extras += [f"reset_after={c.reset_after}"] if c.reset_after is not None else []
        extras += [k for k in ("return_sequences", "return_state", "stateful") if d[k]]
        print(f"{c.name}: replayed, {', '.join(extras)}: {d['why']}")
    for h in hidden:
        print(f"not recorded: {h}; its inner layer runs on reshaped rows")
    listed = ", ".join(f"{i['name']} ({i['dtype']}, {i['shape']})" for i in inputs)
    print(f"\ninputs: {listed}; record with --feed {inputs[0]['name']}=FILE.npy")
    print(_batch_note(cells))


def _split(text: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip()) if text else ()


def _feed_path(item: str) -> str | None:
    """The file a `--feed NAME=FILE[:MEMBER]` reads, None for a value."""
    from tracer.inputs.files import is_input_spec

    value = item.partition("=")[2]
    if not value or not is_input_spec(value):
        return None
    head, _, tail = value.rpartition(":")
    return head if head and "/" not in tail and not Path(value).exists() else value


def _record(args) -> None:
    from recorders import Shard
    from recorders.progress import recorded_layout
    from tracer.run.budget import parse_size
    from tracer.run.select import Selection, parse_range

    selection = Selection(
        cells=_split(args.cells),
        gates=_split(args.gates),
        steps=parse_range(args.steps, "steps") if args.steps else (None, None),
        values=_split(args.values),
        examples=parse_range(args.examples, "examples") if args.examples else (None, None),
    )
    shard = Shard.parse(args.shard) if args.shard else Shard()
    memory = parse_size(args.memory) if args.memory else None
    layout = recorded_layout(args.out) if args.resume else None
    if layout is not None and layout.unit > 1 and not args.shard:  # a --workers recording: resumed by tasks
        return _record_parallel(args, selection, memory)
    if layout is not None and layout.count == shard.count:  # a task resumed by hand: cut as the job cut it
        shard = Shard(shard.index, shard.count, layout.unit)
    if args.workers > 1 or args.engine != "processes" or args.scheduler or args.scheduler_file:
        return _record_parallel(args, selection, memory)  # the driver imports no TensorFlow
    import tracer
    from tracer.inputs.feeds import load_array, parse_feed_args

    feeds = parse_feed_args(args.feed)
    lengths = load_array(args.lengths, "--lengths") if args.lengths else None
    with tracer.load_model(args.model, tag=args.tag, signature=args.signature, allow_unsafe_ops=args.allow_unsafe_ops) as model:
        summary = tracer.record(
            model,
            feeds,
            args.out,
            overwrite=args.overwrite,
            resume=args.resume,
            shard=shard,
            batch_size=args.batch_size,
            selection=selection,
            progress=not args.quiet,
            lengths=lengths,
            compression=args.compression,
            timeout=args.timeout,
            carry_state=args.carry_state,
            reads=[args.lengths, *(_feed_path(item) for item in args.feed)],
            memory=memory,
            verify=args.verify,
        )
    _report(args, summary, f" (shard {shard})" if shard.count > 1 else "")


def _record_parallel(args, selection, memory) -> None:
    from recorders.errors import SelectionError
    from recorders.files import is_uri, local_path
    from tracer.run.parallel import Job, dask_executor, record_parallel

    for flag, given in (("--shard", args.shard), ("--carry-state", args.carry_state), ("--overwrite", args.overwrite)):
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
        feeds={n: (os.path.abspath(v) if os.path.exists(v.split(":")[0]) else v) for n, v in feeds.items()},
        out=args.out if is_uri(args.out) else str(local_path(args.out).resolve()),
        tag=args.tag,
        signature=args.signature,
        allow_unsafe_ops=args.allow_unsafe_ops,
        lengths=os.path.abspath(args.lengths) if args.lengths else None,
        options={
            "batch_size": args.batch_size,
            "selection": selection,
            "compression": args.compression,
            "timeout": args.timeout,
            "memory": memory,
            "verify": args.verify,
        },
    )
    bar = None

    def progress(n: int, total: int) -> None:
        nonlocal bar
        if bar is None and not args.quiet:  # once the folder is ready: nothing shows for a job refused before
            from tracer.run.bar import progress_bar  # imports no TensorFlow

            bar = progress_bar(total, True, "recording, in tasks")
        if bar is not None:
            bar.update(n)

    options = {"task_size": args.task_size, "max_attempts": args.max_attempts, "resume": args.resume, "progress": progress}
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
    print(
        f"recorded {len(cells)} cell{'s' if len(cells) != 1 else ''} on {summary['examples']:,} sequences{part}: "
        f"{rows['gates']:,} gate rows, {rows['states']:,} state rows, {rows['weights']:,} weight rows -> {args.out}"
    )
    if summary["examples"] == 0 and summary.get("complete", True):
        feeds = ", ".join(f"{name} {shape}" for name, shape in summary.get("feeds", {}).items() if shape and shape[0] == 0)
        print(f"the inputs hold no sequences ({feeds or 'no rows'}): the recording is empty, its tables have no rows")
    if "why" in summary.get("batch", {}):
        print(summary["batch"]["why"])
    for hidden in summary.get("not_recorded", []):
        print(f"not recorded: {hidden}; its inner layer runs on reshaped rows")
    for skipped in summary.get("skipped", []):
        print(f"skipped cell {skipped['cell']}: it needs placeholder {skipped['needs']}, which was not fed (--feed {skipped['needs']}=... records it)")
    if summary["complete"]:
        print(f"read it with: pandas.read_parquet({os.path.join(args.out, 'gates')!r})")
    else:
        print(f"the other shards are not finished yet; {os.path.join(args.out, 'manifest.json')} appears when they are")


def _weights(args) -> None:
    import tracer
    from recorders import write_weights
    from tracer.load.keras import KerasModel
    from tracer.load.safety import check_model
    from tracer.run.recording import describe, find_all, weight_values

    with tracer.load_model(args.model, tag=args.tag, signature=args.signature, allow_unsafe_ops=args.allow_unsafe_ops) as model:
        cells = find_all(model)
        if not isinstance(model, KerasModel):  # a Keras layer's weights are arrays already: nothing runs
            check_model(model, [t for c in cells for t in c.weights.values()], "reading the weights")
        columns = tracer.weights_columns(cells, weight_values(model, cells, args.timeout))
        rows = write_weights(args.out, columns, describe(model, cells), overwrite=args.overwrite)
    print(f"wrote {rows:,} weight rows of {len(cells)} cell{'s' if len(cells) != 1 else ''} -> {args.out}")


def _demo(args) -> None:
    from tracer.demo import run_demo

    run_demo(args.out, overwrite=args.overwrite)


_INTERRUPTED = "gatetrace: interrupted; finished batches are kept (record: rerun with --resume)"


def _view(args: argparse.Namespace) -> int:
    """`gatetrace view RUN`: serve the recording's page until Ctrl-C (`recorders.view`)."""
    from recorders.errors import GatetraceError
    from recorders.view import serve

    try:
        serve(args.run, port=args.port, tokens=args.tokens, open_browser=args.open, host=args.host)
    except GatetraceError as err:
        print(f"gatetrace: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = _parser()
        parser.argv = list(sys.argv[1:] if argv is None else argv)
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, or a usage error already printed in one line
        return int(stop.code or 0)
    from recorders.errors import GatetraceError, Interrupted

    if args.command == "view":  # reads Parquet only: no TensorFlow
        return _view(args)
    _quiet_tensorflow()
    from tracer.run.budget import tune_allocators

    tune_allocators()

    run = {"inspect": _inspect, "record": _record, "weights": _weights, "demo": _demo}[args.command]
    try:
        with _native_logs_silenced():
            from tracer.values import running  # (imports TensorFlow)

            running.end_process_after_interrupt(4.0, _INTERRUPTED)
            run(args)
    except Interrupted as err:
        print(f"gatetrace: {err}", file=sys.stderr)
        return 130
    except GatetraceError as err:
        print(f"gatetrace: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and cut short
        return 0
    except OSError as err:
        where = f"{err.filename}: " if err.filename else ""
        print(f"gatetrace: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(_INTERRUPTED, file=sys.stderr)
        from tracer.values import running

        if running.interrupted_run_pending():  # TensorFlow may still be busy with the cancelled step: do not wait for it
            sys.stderr.flush()
            os._exit(running.INTERRUPT_EXIT)
        return 130
    except Exception as err:  # a TensorFlow error while running the model, or a bug
        if os.environ.get("GATETRACE_DEBUG"):
            raise
        from tracer.load.model import error_line

        print(f"gatetrace: error: {type(err).__name__}: {error_line(err)} (set GATETRACE_DEBUG=1 for the traceback)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
