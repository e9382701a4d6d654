"""`gatetrace inspect MODEL | RUN`: the cells of a model (what each command would run), or what a recording holds.

Runs nothing: a model is loaded without restoring its weights; a recording's files are read
for their metadata only (`recorders.Recording.summary`), or with `--check` whole, every page's
checksum verified (`recorders.Recording.check`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tracer.commands.common import check_model_path

NAME = "inspect"
HELP = (
    "list the RNN cells in a model, their per-step gate ops, and any unsafe ops (runs nothing); "
    "given a recording folder, what it holds"
)
EXAMPLE = "gatetrace inspect gatetrace-demo/model/model.ckpt --json"
READS_MODEL, RUNS_MODEL = True, False


def needs_tensorflow(args: argparse.Namespace) -> bool:
    """A `.tflite` file is read and tried with its runtime alone (a recording is read in
    `early`, before this is asked): `tracer.load.formats.without_tensorflow`. TensorFlow's
    own interpreter is part of TensorFlow: with it the command loads TensorFlow as the others
    do, its start-up lines quiet (`tracer.cli`)."""
    from tracer.load.formats import without_tensorflow
    from tracer.load.lite_runtime import imports_tensorflow

    return not without_tensorflow(args.model) or imports_tensorflow()


def arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    c.add_argument(
        "--check",
        action="store_true",
        help="given a recording folder: first read every page of every file and verify its checksum "
        "(reads the whole recording; one line naming the first damaged file)",
    )
    c.add_argument(
        "--gate-ops",
        metavar="PATTERN",
        help="show the cell of your own this pattern names (as record --gate-ops records it)",
    )
    c.add_argument("--state-ops", metavar="PATTERN", help="with --gate-ops: its states' tensors")


def _proposals(args, model, own) -> None:
    """A graph without a cell TensorFlow or Keras ships, but with what looks like cells of
    your own (`tracer.find.named.propose`): each with the pattern that records it."""
    if args.json:
        print(
            json.dumps(
                {
                    "source": args.model,
                    "format": model.format,
                    "cells": [],
                    "proposals": [p.describe() for p in own],
                }
            )
        )
        return
    print(
        f"no cell TensorFlow or Keras ships was found in {args.model}; these look like cells of your own "
        "(nonlinearities after a matrix product, one more input step read each step):\n"
    )
    for p in own:
        print(
            f"{p.cell}: {p.steps} steps of {len(p.gates)} gates ({', '.join(p.gates)}), "
            f"{p.first} ... {p.last}\n  gatetrace record {args.model} --gate-ops '{p.pattern}' ..."
        )


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
    per = f"about {describe_size(choice.per_sequence)} per sequence, inputs not counted; --memory changes the budget"
    if "tensorflow" not in sys.modules:  # a .tflite file, read without it: record loads it too
        return (
            f"batch size: {DEFAULT_BATCH_SIZE} by default, {why} the memory budget ({describe_size(choice.budget - choice.used)} "
            f"beyond what record holds when it starts: the model, its interpreter and TensorFlow; {per})"
        )
    return (
        f"batch size: {DEFAULT_BATCH_SIZE} by default, {why} the memory budget of {describe_size(choice.budget)} "
        f"(TensorFlow and the model hold {describe_size(choice.used)}; {per})"
    )


def _signature_input(graph, name: str, tensor: str) -> dict:
    """A SavedModel signature's input, as `inspect` lists it."""
    t = graph.get_tensor_by_name(tensor)
    shape = None if t.shape.rank is None else t.shape.as_list()
    return {"name": name, "tensor": tensor, "dtype": t.dtype.name, "shape": shape}


def early(args) -> bool:
    """A recording or a series is inspected before TensorFlow loads (it needs none); a model
    that is not there is refused then (`common.check_model_path`)."""
    if _is_recording(args.model):
        _inspect_recording(args)
        return True
    series = (Path(args.model) / "series.json").is_file()
    if args.check:
        from recorders.errors import SelectionError

        raise SelectionError(
            f"--check reads the files of one recording folder; {args.model} is "
            + (
                "a series of them: give one of its recordings' folders (gatetrace inspect "
                f"{args.model} lists them)"
                if series
                else "not one: give the --out folder a recording was written to"
            )
        )
    if series:
        _inspect_series(args)
        return True
    check_model_path(args.model)
    return False


def run(args) -> None:
    if early(args):
        return None
    import tracer
    from tracer.commands.common import model_options
    from tracer.load.tflite import LiteModel

    model = tracer.load_model(args.model, restore=False, **model_options(args))
    if isinstance(model, LiteModel):
        return _inspect_lite(args, model)
    from tracer.load.keras import KerasModel
    from tracer.load.safety import unsafe_ops
    from tracer.run.prepare import graph_from_loops, record_tensors, unsafe_by_command

    if isinstance(model, KerasModel):
        from tracer.find.keras import find_layers, hidden_layers

        inputs = [
            {"name": i.name, "dtype": i.dtype.name, "shape": i.shape.as_list()}
            for i in model.inputs
        ]
        return _inspect_layers(args, model, find_layers(model), hidden_layers(model), inputs)
    from recorders.errors import NoCellFoundError
    from tracer.cells.found import Cell
    from tracer.find.proposals import propose
    from tracer.inputs.feeds import describe_entry, pipeline_entries
    from tracer.inputs.files import feed_arg
    from tracer.run.prepare import cells_of, find_all

    try:
        found = cells_of(model, find_all(model, args.gate_ops, args.state_ops), Cell)
    except NoCellFoundError:
        own = propose(model.graph, model.source)
        if not own:
            model.close()
            raise
        with model:
            return _proposals(args, model, own)
    with (
        model,
        graph_from_loops(model, found, progress=False, restore=False) as (model, cells),
    ):
        plan = tracer.FetchPlan(model.graph, cells)
        # fed instead of their queue or iterator
        pipelines = [] if model.inputs else pipeline_entries(plan.tensors)
        fed = {t.name for t, _ in pipelines}
        # What each command would run beyond the allowlist, and which cells record alone
        # safely (walked only when record would be refused for what it fetches, not loading)
        refused = unsafe_by_command(model, plan, cells, fed)
        loading = model.load_plan.problems(model.graph) if model.load_plan else []
        safe_cells = (
            []
            if loading or not refused["record"]
            else [
                c.name
                for c in cells
                if not unsafe_ops(
                    model.graph,
                    record_tensors(tracer.FetchPlan(model.graph, [c], context=cells), [c]),
                )
            ]
        )
        unsafe = sorted(set(refused["weights"] + refused["record"]))
        inputs = [
            _signature_input(model.graph, name, tensor) for name, tensor in model.inputs.items()
        ]
        if not inputs:  # a checkpoint or frozen graph: the placeholders the gates need
            from tracer.inputs.feeds import unfed_placeholders

            needed = sorted(op.name for op in unfed_placeholders(plan.tensors, fed))
            inputs = [_signature_input(model.graph, name, f"{name}:0") for name in needed]
            inputs += [
                {
                    **_signature_input(model.graph, t.name.removesuffix(":0"), t.name),
                    "from": describe_entry(t, op),
                }
                for t, op in pipelines
            ]
    if args.json:
        described = {
            "source": args.model,
            "format": model.format,
            "cells": [c.describe() for c in cells],
            "unsafe_ops": unsafe,
            "refused_without_allow_unsafe_ops": {k: v for k, v in refused.items() if v},
            **({"notes": list(model.notes)} if model.notes else {}),
        }
        print(json.dumps({**described, "inputs": inputs} if inputs else described))
        return
    print(f"{args.model} ({model.format}): {len(cells)} RNN cell{'s' if len(cells) != 1 else ''}")
    for note in model.notes:
        print(f"note: {note}")
    for i in inputs:
        if "from" in i:
            print(
                f"the cells read their inputs from {i['from']}: record with --feed {feed_arg(i['name'])}"
            )
            continue
        print(
            f"feed {i['name']} ({i['dtype']} {i['shape']}, tensor {i['tensor']}): --feed {feed_arg(i['name'])}"
        )
    rows = [("cell", "kind", "units", "input", "steps", "gates", "direction", "path")]
    for c in cells:
        steps = (
            f"{c.loop.length or '?'} (loop)"
            if c.loop
            else f"{c.fused.length or '?'}"
            if c.fused
            else str(len(c.steps))
        )
        rows.append(
            (
                c.name,
                c.kind,
                str(c.units),
                str(c.input_size),
                steps,
                ",".join(c.gates),
                "backward" if c.backward else "forward",
                c.path,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    print()
    for c in cells:
        extras = [f"forget_bias={c.forget_bias}"] if c.forget_bias is not None else []
        extras += [f"activation={c.activation}"]
        extras += [
            f"{k}={v}"
            for k, v in (
                ("num_proj", c.num_proj),
                ("cell_clip", c.cell_clip),
                ("proj_clip", c.proj_clip),
            )
            if v is not None
        ]
        if "w_i_diag" in c.weights:
            extras.append("peepholes")
        if c.path == "fetch":
            first, last = c.steps[0].gate_op, c.steps[-1].gate_op
            span = first if len(c.steps) == 1 else f"{first} ... {last}"
            within = f"; nothing past each example's length ({c.lengths})" if c.lengths else ""
            if c.reverse_lengths:
                within += f"; its input reversed within each example's length ({c.reverse_lengths})"
            print(
                f"{c.name}: fetched from gate ops {span} (by input position{within}); "
                f"{', '.join(extras)}"
            )
        else:
            how = {"replay": "replayed", "loop": "from its loop", "fused": "fused"}[c.path]
            print(f"{c.name}: {how}, {', '.join(extras)}: {c.describe()['why']}")
    print(f"\n{_batch_note(cells)}")
    if unsafe:
        print(
            f"\nunsafe ops that loading or recording would run ({len(unsafe)}): {', '.join(unsafe)}"
        )
        for command, ops in refused.items():
            if ops:
                print(
                    f"  {command}: refused unless --allow-unsafe-ops (it would run {', '.join(ops)})"
                )
            else:
                print(f"  {command}: runs only allowlisted ops")
        if safe_cells:
            print(f"  record --cells {','.join(safe_cells)}: runs only allowlisted ops")
    else:
        print("\nunsafe ops: none (loading and recording run only allowlisted ops)")


def _is_recording(path: str) -> bool:
    """Whether `path` is a folder `gatetrace record` wrote (finished, or partial)."""
    p = Path(path)
    return any((p / name).is_dir() for name in ("gates", "summary", "_summary")) and (
        (p / "manifest.json").is_file() or (p / "_progress").is_dir()
    )


def _inspect_series(args) -> None:
    """What a series of recordings holds (`recorders.Series`): its key, values, which are complete."""
    from recorders import Series

    s = Series(args.model)
    if args.json:
        print(
            json.dumps(
                {"key": s.key, "values": s.values, "complete": s.complete, "source": s.source}
            )
        )
        return
    print(
        f"{args.model}: a gatetrace series of {len(s.values)} recordings, by {s.key}, of {s.source}"
    )
    print(
        f"{s.key}: {', '.join(map(str, s.values))}; complete: {', '.join(map(str, s.complete)) or 'none'}"
    )
    if s.complete:
        print(
            f"one of them: gatetrace inspect {os.path.join(args.model, f'{s.key}={s.complete[-1]}')}"
        )


def _inspect_recording(args) -> None:
    """What a recording folder holds (`recorders.Recording.summary`); reads no values."""
    from recorders import Recording
    from recorders.read.wording import held, means_from, origin, rounding
    from tracer.run.budget import describe_size  # imports no TensorFlow

    rec = Recording(args.model)
    if args.check:  # before anything is printed: a damaged file is the one line said
        rec.check()
    summary = rec.summary()
    if args.json:
        print(json.dumps(summary))
        return
    source, examples = summary["source"], summary["examples"]
    state = (
        "complete"
        if summary["complete"]
        else "partial: run the same record command with --resume to finish it"
    )
    kind = "summary recording (--summary: statistics per unit and per step, no values)"
    print(
        f"{args.model}: a gatetrace {kind if summary['kind'] == 'summary' else 'recording'} ({state}) of "
        f"{source.get('path', 'a model it does not name')} "
        f"({source.get('format', 'format not given')}), gatetrace {summary['gatetrace_version']}"
    )
    if held(rec.description):
        print(f"held: {held(rec.description)}")
    if means_from(rec.description):
        print(f"means: {means_from(rec.description)}")
    if rounding(rec.description):
        print(f"rounded: {rounding(rec.description)}")
    ranges = ", ".join(f"{a}:{b}" for a, b in examples["complete"]) or "none"
    print(f"examples: {examples['count']:,} ({ranges})")
    rows = [("cell", "kind", "units", "gates", "states", "steps", "values from")]
    rows += [
        (
            c["name"],
            c["kind"] or "",
            str(c["units"]),
            ",".join(c["gates"]),
            ",".join(c["states"]),
            str(c["steps"]),
            origin(rec.cell(c["name"])).label,  # as compare and the view say it
        )
        for c in summary["cells"]
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    n, shards = summary["rows"], summary["shards"]
    counted = (
        f"values summarised: {n['gates']:,} gate values, {n['states']:,} state values"
        if summary["kind"] == "summary"
        else f"rows: {n['gates']:,} gate rows, {n['states']:,} state rows"
        + (
            f", {n['outputs']:,} output rows ({', '.join(summary['outputs'])})"
            if "outputs" in n
            else ""
        )
    )
    print(
        f"{counted}, {n['weights']:,} weight rows; "
        f"shards finished: {shards['finished']} of {shards['of']}"
        + (f" (not finished: {', '.join(shards['unfinished'])})" if shards["unfinished"] else "")
        + f"; {describe_size(summary['bytes'])} on disk"
    )
    if args.check:
        print("checked: every file's footer and pages are as gatetrace wrote them")
    table = (
        os.path.join(args.model, "summary", "units.parquet")
        if summary["kind"] == "summary"
        else os.path.join(args.model, "gates")
    )
    print(f"read it with: pandas.read_parquet({table!r}) or recorders.Recording({args.model!r})")


def _inspect_lite(args, model) -> None:
    """A TensorFlow Lite file's recurrent ops: read, checked and tried without TensorFlow."""
    from tracer.find.lite import find_ops
    from tracer.values import interrupts
    from tracer.values.lite import LitePlan

    # (finding its loops runs the file once) recordable only where a recording's code runs
    # (stoppable by Ctrl-C, as record is)
    cells = interrupts.stoppable(lambda: find_ops(model), None, f"{args.model}'s interpreter")
    interrupts.stoppable(LitePlan(model, cells).tried, None, f"{args.model}'s interpreter")
    # each input's shape as the file declares it (a batch it fixes at 1 is 1)
    inputs = [
        {"name": i.name, "dtype": i.dtype, "shape": list(i.declared)} for i in model.input_specs
    ]
    _inspect_layers(args, model, cells, [], inputs)


def _inspect_layers(args, model, cells, hidden, inputs: list[dict]) -> None:
    """A Keras model's RNN layers (`hidden`: those not recorded) or a TensorFlow Lite file's
    recurrent ops, with the inputs they are fed by: every cell is replayed in numpy."""
    from tracer.inputs.files import feed_arg

    if args.json:
        # The file passed the Keras file check before loading (tracer.load.keras_files), or a
        # TensorFlow Lite file its own (tracer.load.tflite_check): nothing in it runs unchecked.
        described = [c.describe() for c in cells]
        print(
            json.dumps(
                {
                    "source": args.model,
                    "format": model.format,
                    "inputs": inputs,
                    "cells": described,
                    "unsafe_ops": [],
                    "not_recorded": hidden,
                    **({"notes": list(model.notes)} if model.notes else {}),
                }
            )
        )
        return
    what = "RNN layer" if model.format != "tflite" else "recurrent op"
    print(f"{args.model} ({model.format}): {len(cells)} {what}{'s' if len(cells) != 1 else ''}")
    for note in model.notes:
        print(f"note: {note}")
    rows = [("cell", "kind", "units", "input", "steps", "gates", "direction", "path")]
    for c in cells:
        steps = c.describe()["steps"]
        rows.append(
            (
                c.name,
                c.kind,
                str(c.units),
                str(c.input_size),
                "?" if steps is None else str(steps),
                ",".join(c.gates),
                "backward" if c.backward else "forward",
                c.path,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    print()
    for c in cells:
        d = c.describe()
        extras = [f"activation={c.activation}", f"recurrent_activation={c.recurrent_activation}"]
        extras += [f"reset_after={c.reset_after}"] if c.reset_after is not None else []
        extras += [k for k in ("return_sequences", "return_state", "stateful") if d.get(k)]
        extras += [f"{k}={d[k]:g}" for k in ("cell_clip", "proj_clip") if d.get(k)]
        extras += [f"weights {d['numbers']}"] if d.get("numbers", "float32") != "float32" else []
        if d.get("scales"):
            extras.append("scales " + " ".join(f"{k}={v:.4g}" for k, v in d["scales"].items()))
        if d.get("quantisation"):  # value = scale x (code - zero point)
            extras.append(
                "codes "
                + " ".join(
                    f"{k}={q['type']} x {q['scale']:.4g}"
                    + (f" from {q['zero_point']}" if q["zero_point"] else "")
                    for k, q in d["quantisation"].items()
                )
            )
        if getattr(c, "conv", None) is not None:
            grid, taps = ("x".join(map(str, a)) for a in (c.conv.positions, c.conv.kernel_size))
            extras.append(
                f"units = {grid} positions x {c.conv.filters} filters (unit = position * "
                f"{c.conv.filters} + filter), input = {taps} taps x channels"
            )
        print(f"{c.name}: replayed, {', '.join(extras)}: {d['why']}")
    for h in hidden:
        print(f"not recorded: {h}; its inner layer runs on reshaped rows")
    listed = ", ".join(f"{i['name']} ({i['dtype']}, {i['shape']})" for i in inputs)
    print(f"\ninputs: {listed}; record with --feed {feed_arg(inputs[0]['name'])}")
    print(_batch_note(cells))
    if model.format == "tflite":  # what the file takes at a time
        print(model.batch_note())
