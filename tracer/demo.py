"""`gatetrace demo`: the main job on an embedded default, for a first look.

It trains a small BasicLSTMCell on a memory task (report at the last step the sign of
a marker shown at step 0, with noise in between), so that its forget gates have
something to do; saves it as a TF1 checkpoint; records its gates on a fresh set of
sequences, in full and as a summary recording (statistics only); and summarises both. Its
training logs the gates of every 100th training batch (`GateLoggingHook`) into `training/`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recorders.errors import OutputExistsError, listing, option
from recorders.write import local_path, publish, refuse_non_folder, remove, temp_sibling
from recorders.write.files import kind_at, refuse_inside_written, remove_left_partials
from recorders.write.folder import Folder
from recorders.write.totals import Bins
from tracer._tf import tf, v1
from tracer.load.model import load_model
from tracer.run.hook import GateLoggingHook, run_with
from tracer.run.recording import record

__all__ = ["make_task", "build_and_train", "run_demo", "check_demo_out"]

STEPS, FEATURES, UNITS = 20, 2, 16


def make_task(n: int, rng: np.random.RandomState) -> tuple[np.ndarray, np.ndarray]:
    """Sequences [n, STEPS, 2]: channel 0 noise, channel 1 a +-1 marker at step 0 only.

    The label is 1 when the marker was +1: the network must carry it across all steps.
    """
    x = np.zeros((n, STEPS, FEATURES), np.float32)
    x[:, :, 0] = rng.randn(n, STEPS)
    sign = rng.randint(0, 2, size=n)
    x[:, 0, 1] = 2.0 * sign - 1.0
    return x, sign.astype(np.float32)


@contextlib.contextmanager
def _tf1_notices_off():
    """TensorFlow's notices that TF1's cells and layers are deprecated (warnings, and lines its
    logger writes), off while the demo builds its model with them; as they were after."""
    logger = logging.getLogger("tensorflow")
    level = logger.level
    logger.setLevel(max(level, logging.ERROR))
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message="`tf.(nn.rnn_cell|layers)", category=UserWarning
            )
            yield
    finally:
        logger.setLevel(level)


def build_and_train(
    prefix: str,
    iterations: int = 300,
    seed: int = 0,
    log: str | os.PathLike | None = None,
    log_every: int = 100,
) -> float:
    """Build the demo LSTM under `static_rnn`, train it, save a checkpoint at `prefix`; with
    `log`, its gates are logged on the training batches every `log_every` steps into that
    folder (`tracer.run.hook.GateLoggingHook`).

    Returns the accuracy on held-out sequences.
    """
    rng = np.random.RandomState(seed)
    # Keras' initializers given no seed draw one from Python's and numpy's generators (not the graph's)
    random.seed(seed)
    np.random.seed(seed)
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(seed)
        inputs = v1.placeholder(tf.float32, [None, STEPS, FEATURES], name="inputs")
        labels = v1.placeholder(tf.float32, [None], name="labels")
        with _tf1_notices_off():  # TF1's layers, deprecated, are what the demo is about
            cell = v1.nn.rnn_cell.BasicLSTMCell(UNITS)
            outputs, _ = v1.nn.static_rnn(cell, tf.unstack(inputs, axis=1), dtype=tf.float32)
            readout = v1.layers.dense(outputs[-1], 1, name="readout")
        logits = tf.squeeze(readout, axis=1, name="logits")
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        train = v1.train.AdamOptimizer(0.01).minimize(
            loss, global_step=v1.train.get_or_create_global_step()
        )
        hook = GateLoggingHook(log, every_n_steps=log_every) if log is not None else None
        if hook is not None:
            hook.begin()
        correct = tf.reduce_mean(
            tf.cast(tf.equal(tf.cast(logits > 0, tf.float32), labels), tf.float32)
        )
        saver = v1.train.Saver(save_relative_paths=True)
        # One thread: sums in the same order on every run, so that the demo's numbers are the same each time.
        one_thread = v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
        with v1.Session(graph=graph, config=one_thread) as session:
            session.run(v1.global_variables_initializer())
            for _ in range(iterations):
                x, y = make_task(64, rng)
                if hook is not None:  # the gates of this training batch, every log_every-th step
                    run_with(hook, session, train, {inputs: x, labels: y})
                else:
                    session.run(train, {inputs: x, labels: y})
            x, y = make_task(1000, rng)
            accuracy = float(session.run(correct, {inputs: x, labels: y}))
            saver.save(session, prefix)
    return accuracy


def summarise(recording: Path) -> str:
    """A short pandas summary of the recorded forget gates and states."""
    f = pd.read_parquet(
        recording / "gates",
        filters=[("gate", "==", "f")],
        columns=["example", "step", "unit", "activation"],
    )
    per_step = f.groupby("step")["activation"].mean()
    saturated = (
        f.assign(high=f["activation"] > 0.9)
        .groupby("unit")["high"]
        .mean()
        .sort_values(ascending=False)
    )
    lines = ["mean forget-gate activation per step:"]
    lines.append("  " + " ".join(f"{s:>5d}" for s in per_step.index))
    lines.append("  " + " ".join(f"{v:5.2f}" for v in per_step.values))
    lines.append("units whose forget gate is most often above 0.9:")
    for unit, share in saturated.head(3).items():
        lines.append(f"  unit {unit:2d}: {share:6.1%} of (example, step) positions")
    return "\n".join(lines)


def summarise_statistics(summary: Path) -> str:
    """The forget gates' saturation from a summary recording: the numbers `summarise` prints."""
    from recorders import Recording
    from recorders.read.analysis import saturation

    f = saturation(Recording(summary), gates=["f"])
    top = f.set_index("unit")["right"].sort_values(ascending=False).head(3)  # as `summarise` sorts
    size = sum(p.stat().st_size for p in summary.rglob("*") if p.is_file())
    lines = [f"the same, from the summary recording ({size / 1024:.0f} KB, statistics only):"]
    for unit, share in top.items():
        lines.append(f"  unit {unit:2d}: {share:6.1%} of (example, step) positions")
    return "\n".join(lines)


def summarise_training(logged: Path) -> str:
    """The forget gates' saturation on the training batches, at each global step logged."""
    from recorders import Series
    from recorders.read.analysis import saturation_across

    sat = saturation_across(Series(logged), gates=["f"])
    shares = sat.groupby("global_step")["right"].mean()
    steps = ", ".join(f"step {step}: {share:.1%}" for step, share in shares.items())
    return f"forget gates above 0.9 while training (logged every 100 steps): {steps}"


def summarise_units(recording: Path, labels: Path) -> str:
    """Which units tell the marker's two values apart at the last step (`gatetrace units`)."""
    from recorders import Recording
    from recorders.read.units import findings, unit_scores

    scores = unit_scores(Recording(recording), labels)
    found = findings(scores)
    top = found.iloc[0]
    perfect = int((found["score"] == 1.0).sum())
    return (
        f"units that tell 'the marker was +1' at the last step: {perfect} of {len(found)} at AUC 1.000, e.g. "
        f"{top['table']} {top['name']} {top['column']} unit {top['unit']}; shuffled labels score "
        f"{top['chance']:.3f} on average, {scores.attrs['chance_best']:.3f} at best (gatetrace units)"
    )


# What the demo wrote, beside its output: every file's size and SHA-256, and every folder. An
# earlier demo is recognised by it (not by where it was written), and only what it lists is replaced.
MARK = ".gatetrace-demo.json"


def _tree(folder: Path) -> tuple[dict[str, list], list[str], list[str]]:
    """Below `folder`, never following a link: each regular file (relative path: [size, SHA-256]),
    each folder, and each other entry (a link, a FIFO, a socket, a device)."""
    with Folder(folder) as f:
        found, odd = f.tree("")
        files = {}
        for rel, size in found:
            digest = hashlib.sha256()
            with f.open_read(rel) as opened:  # (hashlib.file_digest: Python 3.11 on)
                for block in iter(lambda: opened.read(1 << 20), b""):
                    digest.update(block)
            files[rel] = [size, digest.hexdigest()]
    folders = []
    for top, dirs, _ in os.walk(folder, followlinks=False):
        folders += [
            os.path.relpath(Path(top) / d, folder) for d in dirs if not (Path(top) / d).is_symlink()
        ]
    return files, sorted(folders), odd


def _mark(tmp: Path) -> None:
    """Write the demo's mark into its finished output `tmp`: what it wrote there."""
    files, folders, _ = _tree(tmp)
    (tmp / MARK).write_text(json.dumps({"gatetrace": "demo", "files": files, "folders": folders}))


def _marked(out: Path) -> dict[str, Any] | None:
    """The mark an earlier demo left in `out` (None if there is none, or it is not one)."""
    try:
        with Folder(out) as f:
            found = json.loads(f.read_bytes(MARK, 64 << 20))
    except (OSError, ValueError):
        return None
    if not (
        isinstance(found, dict)
        and found.get("gatetrace") == "demo"
        and isinstance(found.get("files"), dict)
        and isinstance(found.get("folders"), list)
    ):
        return None
    return found


def check_demo_out(out: Path, overwrite: bool) -> None:
    """Refuse (OutputExistsError), before anything is written, an `out` the demo may not replace:
    a link, anything but a folder, a folder inside a recording or series, a folder holding
    anything its mark does not list (an earlier demo's output is replaced; nothing else ever
    is), or, without `overwrite`, one whose listed files were changed since."""
    shown = option("out", out)
    if out.is_symlink():
        raise OutputExistsError(
            f"{shown} is a symbolic link to {os.readlink(out)}; the demo writes a folder of its own, never through a "
            "link: give a folder path"
        )
    refuse_non_folder(out)
    refuse_inside_written(out)
    if not out.is_dir() or not any(out.iterdir()):
        return
    mark = _marked(out)
    if mark is None:
        raise OutputExistsError(
            f"{shown} exists and is not empty, and holds no earlier demo's output (no {MARK}); choose another path, "
            "or move what it holds away first"
        )
    files, folders, odd = _tree(out)
    files.pop(MARK, None)
    extra = [f"{rel} ({kind_at(out / rel)})" for rel in odd]
    extra += [d for d in folders if d not in mark["folders"]]
    extra += [rel for rel in files if rel not in mark["files"]]
    if extra:
        raise OutputExistsError(
            f"{shown} holds what the demo did not write ({listing(sorted(extra), 3)}); the demo replaces only its own "
            "earlier output: choose another path, or move those away first"
        )
    changed = sorted(rel for rel, seen in files.items() if seen != mark["files"][rel])
    if changed and not overwrite:
        raise OutputExistsError(
            f"{shown} holds an earlier demo's output, changed since ({listing(changed, 3)}); pass "
            f"{option('overwrite')} to replace it, or choose another path"
        )


def run_demo(
    out: str | os.PathLike = "gatetrace-demo", overwrite: bool = False, sequences: int = 512
) -> Path:
    """Train, save, record and summarise into the folder `out` (model/ and recording/); an
    earlier demo's output there is replaced, changed since only with `overwrite`; nothing
    else ever is (`check_demo_out`)."""
    out = local_path(out)
    check_demo_out(out, overwrite)
    remove_left_partials(out)  # what a killed demo left
    tmp = temp_sibling(out)
    start = time.perf_counter()
    try:
        (tmp / "model").mkdir(parents=True)
        prefix = str(tmp / "model" / "model.ckpt")
        print(
            f"training a BasicLSTMCell({UNITS}) over {STEPS} steps to remember a marker from step 0 ..."
        )
        accuracy = build_and_train(prefix, log=tmp / "training")
        print(f"  held-out accuracy {accuracy:.1%}")
        x, marker = make_task(sequences, np.random.RandomState(1))
        np.save(tmp / "inputs.npy", x)
        np.save(tmp / "labels.npy", marker == 1)  # "the marker was +1", one label a sequence
        with load_model(prefix) as model:
            model.source = str(out / "model" / "model.ckpt")  # where it will be once published
            # every value column, the preactivations' parts included (what drives each gate)
            manifest = record(
                model,
                {"inputs": x},
                tmp / "recording",
                values=("preactivation", "activation", "contributions"),
            )
            # the same sequences as statistics only (`--summary`): kilobytes, not megabytes
            record(model, {"inputs": x}, tmp / "summary", summary=Bins())
        _mark(tmp)
        check_demo_out(out, overwrite)  # as it is now, after the minutes the demo took
        publish(tmp, out)
    except BaseException:
        remove(tmp)
        raise
    rows = manifest["rows"]
    print(
        f"trained, then recorded {sequences} sequences, in {time.perf_counter() - start:.1f} s: {rows['gates']:,} gate rows, {rows['states']:,} state rows"
    )
    print(f"  model:     {out / 'model' / 'model.ckpt'}  (inputs: {out / 'inputs.npy'})")
    print(f"  gates:     {out / 'recording' / 'gates'}")
    print(f"  states:    {out / 'recording' / 'states'}")
    print(f"  weights:   {out / 'recording' / 'weights.parquet'}")
    print(f"  manifest:  {out / 'recording' / 'manifest.json'}")
    print(f"  summary:   {out / 'summary'}  (gatetrace record --summary)")
    print(f"  training:  {out / 'training'}  (the gates while it trained: recorders.Series)")
    print(f"  labels:    {out / 'labels.npy'}  (the marker was +1, per sequence: gatetrace units)")
    print()
    print(summarise(out / "recording"))
    print(summarise_statistics(out / "summary"))
    print(summarise_training(out / "training"))
    print(summarise_units(out / "recording", out / "labels.npy"))
    print()
    print(
        f"next: pandas.read_parquet({str(out / 'recording' / 'gates')!r}, filters=[('gate', '==', 'f')])"
    )
    return out
