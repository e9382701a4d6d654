"""Recording in several processes: tasks that are shards, run by any executor.

A job is cut into tasks by the data alone: task k of N records part k of N of the
examples, cut at multiples of the batch size, where N = ceil(examples / (task_size x
batch_size)). A task is an ordinary resumable shard (`tracer.record(..., shard=Shard(k,
N, unit=batch_size), resume=True)`), so a task that was killed is simply run again and
continues after its last committed batch, and a job stopped midway resumes with any
number of workers, on a process pool or a Dask cluster alike.

`record_task(job, k, n)` runs task k of n in the calling process, loading the model once per
process; it is what Ray, Spark or Beam users call from their own jobs. `record_parallel`
runs all of a job's tasks on an executor: a `concurrent.futures.ProcessPoolExecutor` of
`workers` processes by default (the standard library, nothing to install), or any
`concurrent.futures.Executor` given, such as a Dask client's (`client.get_executor()`).
The driver creates the folder before submitting anything, so that no two tasks race to
create it, and resubmits a failed task up to `max_attempts` times (a task that fails
with a GatetraceError, a problem of the data or the model, is not retried).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import (
    FIRST_COMPLETED,
    Executor,
    Future,
    ProcessPoolExecutor,
    wait,
)
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from recorders import Intervals, Shard
from recorders.errors import (
    FeedError,
    GatetraceError,
    Interrupted,
    OutputExistsError,
    RecordingError,
    SelectionError,
    install_hint,
    option,
    options_as,
)
from recorders.write import create_folder, place_of
from recorders.write.progress import read_progress, recorded_layout
from recorders.write.schema import RecordingSummary
from tracer.inputs.files import is_input_spec, open_input
from tracer.run.budget import tune_allocators
from tracer.run.options import RecordOptions

__all__ = [
    "Job",
    "record_task",
    "record_parallel",
    "task_count",
    "task_shard",
    "dask_executor",
    "DEFAULT_TASK_SIZE",
]

DEFAULT_TASK_SIZE = 8  # batches per task


@dataclass(frozen=True)
class Job:
    """What every task of a recording needs, in a form that pickles: paths and options.

    feeds are as the command line takes them (`{"x": "inputs.npy", "keep_prob": "1.0"}`);
    lengths is a path to a `.npy` file or None; options are `tracer.record`'s, a
    `RecordOptions` or its fields by name (batch_size, selection, compression, timeout,
    memory, ...).
    """

    model: str
    feeds: Mapping[str, str]
    out: str
    tag: str = "serve"
    signature: str = "serving_default"
    allow_unsafe_ops: bool = False
    custom_objects: str | None = (
        None  # the Python file of your own Keras classes (tracer.load.custom)
    )
    lengths: str | None = None
    options: RecordOptions | Mapping[str, Any] = field(default_factory=dict)
    # TFRecord files' record counts, found by the driver
    input_counts: Mapping[tuple, int] = field(default_factory=dict)
    # how the tasks' messages name options: "python" (out=...) or "command line" (--out ...)
    options_as: str = "python"

    @property
    def record_options(self) -> RecordOptions:
        """`options` as a `RecordOptions`."""
        given = self.options
        return given if isinstance(given, RecordOptions) else RecordOptions.of(**given)


# model per process: (path, tag, signature, allow_unsafe_ops, custom_objects) -> Model
_loaded: dict[tuple, Any] = {}


def _model(job: Job):
    from tracer.load.model import load_model  # imports TensorFlow: in the tasks, not in the driver

    key = (job.model, job.tag, job.signature, job.allow_unsafe_ops, job.custom_objects)
    if key not in _loaded:
        _loaded[key] = load_model(
            job.model,
            tag=job.tag,
            signature=job.signature,
            allow_unsafe_ops=job.allow_unsafe_ops,
            custom_objects=job.custom_objects,
        )
    return _loaded[key]


def _feeds(job: Job) -> dict:
    from tracer.inputs.feeds import parse_feed_args

    return parse_feed_args(f"{name}={value}" for name, value in job.feeds.items())


def task_count(examples: int, batch_size: int, task_size: int = DEFAULT_TASK_SIZE) -> int:
    """The number of tasks a job of `examples` sequences is cut into (at least one)."""
    if task_size < 1:
        raise SelectionError(f"--task-size {task_size}: expected a number of batches, 1 or more")
    return max(1, math.ceil(examples / (batch_size * task_size)))


def task_shard(job: Job, index: int, count: int) -> Shard:
    """Task `index` of `count`: a shard cut at multiples of the batch size, so that its
    batches hold the same rows as one process's (and give the same values to the bit)."""
    return Shard(index, count, unit=job.record_options.batch_size)


def record_task(job: Job, index: int, count: int) -> RecordingSummary:
    """Record task `index` of `count` of `job` in this process (resuming what a killed run
    of it committed) and return its summary (`tracer.record`'s)."""
    import numpy as np

    from tracer.run.recording import record

    lengths = np.load(job.lengths) if job.lengths else None
    if job.input_counts:  # the task indexes only the TFRecord files its rows are in
        from tracer.inputs.tfrecords import know_counts

        know_counts(dict(job.input_counts))
    with options_as(job.options_as):
        return record(
            _model(job),
            _feeds(job),
            job.out,
            shard=task_shard(job, index, count),
            resume=True,
            lengths=lengths,
            options=job.record_options,
        )


def _prepare(job: Job, resume: bool) -> tuple[int, bool]:
    """Count the examples from the input files (the driver loads no model and imports no
    TensorFlow: each task checks the feeds against the model and fails in one line if they
    do not fit) and create the folder; returns (examples to record, whether the driver
    created the folder)."""
    sizes = {
        name: len(open_input(spec, f"feed {name}"))
        for name, spec in job.feeds.items()
        if is_input_spec(spec)
    }
    if not sizes:
        raise SelectionError(
            "--workers: a recording in several processes needs at least one input file to split into sequences"
        )
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{name} has {n}" for name, n in sizes.items())
        raise FeedError(f"feeds disagree on the number of sequences (first dimension): {listed}")
    n = next(iter(sizes.values()))
    selection = job.record_options.selection
    if selection is not None and selection.examples != (None, None):
        first, last, _ = slice(*selection.examples).indices(n)
        n = max(0, last - first)
    if not resume and read_progress(place_of(job.out)):
        raise OutputExistsError(
            f"{option('out', job.out)} already holds a recording; pass {option('resume')} to continue it, or choose another folder"
        )
    return n, create_folder(job.out)


def _pool(workers: int) -> ProcessPoolExecutor:
    # TensorFlow cannot run in a forked child of a process that imported it: spawn.
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_worker,
        initargs=(os.getpid(),),
    )


def _start_worker(parent: int) -> None:
    """A pool's process, as it starts: its allocators tuned, and bound to end with `parent`."""
    tune_allocators()
    _exit_with(parent)


def _exit_with(parent: int) -> None:
    """End this process when `parent`, the process that started it, ends (a driver killed
    with SIGKILL runs no cleanup, and its pool's processes would go on recording, then wait
    for tasks forever): on Linux the kernel sends SIGKILL when it ends (PR_SET_PDEATHSIG,
    prctl(2)); elsewhere a thread checks every second that this process is still its child.
    A task killed so is resumed as any killed task is."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) == 0:
            if os.getppid() != parent:  # it ended before the call
                os._exit(1)
            return
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="gatetrace-exit-with-parent", daemon=True).start()


def record_parallel(
    job: Job,
    *,
    executor: Executor | None = None,
    workers: int | None = None,
    task_size: int = DEFAULT_TASK_SIZE,
    max_attempts: int = 3,
    resume: bool = False,
    progress: Callable[[int, int], None] | None = None,
    poll: float = 1.0,
) -> dict:
    """Record `job` in tasks run by `executor`, or by a process pool of `workers`
    processes (default: the number of CPUs); returns a summary like `tracer.record`'s.

    `progress(n, total)` is called once the folder is ready with n = 0, then every `poll`
    seconds that sequences were committed, with their number (read from the tasks'
    progress files: batch by batch, whatever the engine); total is the number of
    sequences to record.
    Without `resume`, a folder that holds a recording already is refused; with it, the
    job keeps the tasks it was cut into.
    Ctrl-C cancels the tasks not started; running ones stop after their batch in flight
    (they receive the signal too), and the folder is left to resume.
    """
    examples, created = _prepare(job, resume)
    # the driver counted TFRecord inputs: hand the counts on
    if "tracer.inputs.tfrecords" in sys.modules:
        job = replace(
            job,
            input_counts={
                **job.input_counts,
                **sys.modules["tracer.inputs.tfrecords"].record_counts(),
            },
        )
    batch_size = job.record_options.batch_size
    count = task_count(examples, batch_size, task_size)
    layout = recorded_layout(job.out) if resume else None
    if layout is not None and layout.unit == batch_size:
        count = layout.count  # a resumed job keeps its tasks, whatever --task-size says now
    counted = _committed(job.out)  # what earlier runs recorded is not reported
    if progress is not None:
        progress(0, examples)

    def report() -> None:
        nonlocal counted
        now = _committed(job.out, counted)
        if progress is not None and now > counted:
            progress(now - counted, examples)
        counted = now

    own = executor is None
    pool: Executor = _pool(workers or os.cpu_count() or 1) if executor is None else executor
    attempts = {k: 0 for k in range(count)}
    summaries: dict[int, dict] = {}
    running: dict[Future, int] = {}

    def submit(k: int) -> None:
        attempts[k] += 1
        running[pool.submit(record_task, job, k, count)] = k

    try:
        for k in range(count):
            submit(k)
        while running:
            done, _ = wait(list(running), timeout=poll, return_when=FIRST_COMPLETED)
            report()
            for future in done:
                task = running.pop(future, None)
                if task is None:  # resubmitted already, with the others of a broken pool
                    continue
                k = task
                try:
                    summaries[k] = future.result()
                except GatetraceError:
                    raise
                # a worker died (killed, out of memory): a new pool
                except BrokenProcessPool as err:
                    if not own or attempts[k] >= max_attempts:
                        raise RecordingError(
                            f"task {k}/{count} failed {attempts[k]} times: {err}"
                        ) from None
                    pool.shutdown(wait=True, cancel_futures=True)
                    pool = _pool(workers or os.cpu_count() or 1)
                    lost = [k, *running.values()]
                    running.clear()
                    for j in lost:
                        submit(j)
                    continue
                except Exception as err:
                    if attempts[k] >= max_attempts:
                        raise RecordingError(
                            f"task {k}/{count} failed {attempts[k]} times, the last with: {err}"
                        ) from None
                    submit(k)
                    continue
        report()
    except KeyboardInterrupt:
        for future in running:
            future.cancel()
        raise Interrupted(
            f"interrupted: the tasks finished so far are recorded in {job.out}; run the same command with --resume to continue"
        ) from None
    except BaseException:
        for future in running:
            future.cancel()
        if created and not summaries:
            _remove_if_empty(Path(job.out))
        raise
    finally:
        if own:
            pool.shutdown(wait=True, cancel_futures=True)
    return _summary(summaries, count, task_size)


def _committed(out: str, otherwise: int = 0) -> int:
    """Sequences the progress files of the recording in `out` count as complete
    (`otherwise` while they cannot be read, e.g. the folder is not made yet)."""
    try:
        return sum(Intervals(p["complete"]).total() for p in read_progress(place_of(out)).values())
    except (GatetraceError, OSError):
        return otherwise


def _remove_if_empty(out: Path) -> None:
    """Remove a folder the driver created if no task left anything in it but progress."""
    progress = out / "_progress"
    if progress.is_dir() and not any(p.suffix == ".json" for p in progress.iterdir()):
        shutil.rmtree(progress, ignore_errors=True)
    try:
        out.rmdir()
    except OSError:
        pass


def _summary(summaries: Mapping[int, dict], count: int, task_size: int) -> dict:
    last = (
        next(s for s in summaries.values() if s.get("complete"))
        if any(s.get("complete") for s in summaries.values())
        else None
    )
    first = summaries[min(summaries)]
    rows = {
        "gates": sum(s["rows"]["gates"] for s in summaries.values()),
        "states": sum(s["rows"]["states"] for s in summaries.values()),
        "weights": first["rows"]["weights"],
        **(
            {"outputs": sum(s["rows"].get("outputs", 0) for s in summaries.values())}
            if "outputs" in first["rows"]
            else {}
        ),
    }
    return {
        **{
            k: v
            for k, v in first.items()
            if k not in ("examples", "examples_this_run", "rows", "shard", "complete")
        },
        "examples": sum(s["examples"] for s in summaries.values()),
        "examples_this_run": sum(s["examples_this_run"] for s in summaries.values()),
        "rows": rows,
        "tasks": {"count": count, "task_size": task_size},
        "complete": last is not None,
    }


def local_cluster(workers: int) -> Any:
    """A Dask LocalCluster of `workers` single-threaded processes that only this process can use:
    every port on loopback, and every connection mutual TLS with credentials made for this
    cluster alone (`Security.temporary()`), so that another local user's client, which has
    no certificate signed by them, is refused before it can submit anything to the workers."""
    from distributed import LocalCluster
    from distributed.security import Security

    return LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        host="127.0.0.1",
        protocol="tls://",
        security=Security.temporary(),
    )


@contextmanager
def dask_executor(
    workers: int, scheduler: str | None = None, scheduler_file: str | None = None
) -> Iterator[Executor]:
    """A Dask client's executor: on the cluster at `scheduler` (or named by `scheduler_file`),
    or on a local cluster of `workers` single-threaded processes, closed afterwards."""
    try:
        from distributed import Client
    except ImportError:
        raise SelectionError(
            f"--engine dask needs Dask, which is not installed: {install_hint('dask')}"
        ) from None
    cluster = None
    try:
        if scheduler or scheduler_file:
            client = Client(address=scheduler, scheduler_file=scheduler_file, timeout="30s")
        else:
            cluster = local_cluster(workers)
            client = Client(cluster)
    except (OSError, TimeoutError) as err:
        raise RecordingError(
            f"cannot reach the Dask scheduler {scheduler or scheduler_file}: {err}"
        ) from None
    try:
        yield client.get_executor()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
