"""Tiny real graphs for the tests, built in fresh tf.Graphs and saved in every model format.

Each config builds one cell class with known parameters; after initialisation every
variable is overwritten with random values (biases included), so that a mix-up of
gates, rows or biases cannot go unnoticed. The reference weights are read from the
builder's own session by variable name, independently of gatetrace's walker.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tracer._tf import tf, v1  # noqa: E402

R = v1.nn.rnn_cell


@dataclass(frozen=True)
class CellConfig:
    """How to build one cell, and the parameters the numpy reference needs."""

    kind: str
    make: Callable[[], object]
    scope_name: str  # the variable scope TensorFlow gives the cell
    params: dict = field(default_factory=dict)


CONFIGS = {
    "BasicLSTMCell": CellConfig(
        "BasicLSTMCell",
        lambda: R.BasicLSTMCell(3, forget_bias=0.7),
        "basic_lstm_cell",
        {"forget_bias": 0.7},
    ),
    "LSTMCell": CellConfig("LSTMCell", lambda: R.LSTMCell(3), "lstm_cell", {"forget_bias": 1.0}),
    "LSTMCell-peepholes-proj-clip": CellConfig(
        "LSTMCell",
        lambda: R.LSTMCell(
            4, use_peepholes=True, num_proj=2, cell_clip=0.4, proj_clip=0.25, forget_bias=0.5
        ),
        "lstm_cell",
        {"forget_bias": 0.5, "cell_clip": 0.4, "proj_clip": 0.25},
    ),
    "GRUCell": CellConfig("GRUCell", lambda: R.GRUCell(3), "gru_cell"),
    "GRUCell-relu": CellConfig(
        "GRUCell", lambda: R.GRUCell(3, activation=tf.nn.relu), "gru_cell", {"activation": "relu"}
    ),
    "BasicRNNCell": CellConfig("BasicRNNCell", lambda: R.BasicRNNCell(3), "basic_rnn_cell"),
}

# Variable name (below the cell's scope) -> role in gatetrace's weights dict.
ROLES = {
    "kernel": "kernel",
    "bias": "bias",
    "gates/kernel": "kernel",
    "gates/bias": "bias",
    "candidate/kernel": "candidate_kernel",
    "candidate/bias": "candidate_bias",
    "w_i_diag": "w_i_diag",
    "w_f_diag": "w_f_diag",
    "w_o_diag": "w_o_diag",
    "projection/kernel": "projection",
}


@dataclass
class Built:
    """A graph with initialised random weights, ready to save or to use live."""

    graph: tf.Graph
    session: v1.Session
    inputs: tf.Tensor
    outputs: list
    weights: dict[str, dict[str, np.ndarray]]  # cell scope -> role -> value

    def output_ops(self) -> list[str]:
        return sorted({t.op.name for t in self.outputs})


def randomise(
    session: v1.Session, graph: tf.Graph, seed: int = 0
) -> dict[str, dict[str, np.ndarray]]:
    """Give every variable random values; return them by cell scope and role."""
    rng = np.random.RandomState(seed)
    weights: dict[str, dict[str, np.ndarray]] = {}
    with graph.as_default():
        for var in v1.global_variables():
            value = rng.uniform(-1.0, 1.0, var.shape.as_list()).astype(np.float32)
            var.load(value, session)
            name = var.op.name
            for suffix, role in sorted(ROLES.items(), key=lambda kv: -len(kv[0])):
                if name.endswith("/" + suffix):
                    weights.setdefault(name[: -len(suffix) - 1], {})[role] = value
                    break
    return weights


def build(
    body: Callable[[tf.Tensor], list],
    steps: int = 5,
    features: int = 4,
    batch: int | None = None,
    seed: int = 0,
) -> Built:
    """Build `body(inputs)` (which returns the tensors to keep) on a [batch, steps, features] placeholder."""
    graph = tf.Graph()
    with graph.as_default():
        inputs = v1.placeholder(tf.float32, [batch, steps, features], name="x")
        outputs = body(inputs)
        session = v1.Session(graph=graph)
        session.run(v1.global_variables_initializer())
    weights = randomise(session, graph, seed)
    return Built(graph, session, inputs, outputs, weights)


def static_body(config: CellConfig, scope: str | None = None) -> Callable[[tf.Tensor], list]:
    def body(x):
        outputs, state = v1.nn.static_rnn(
            config.make(), tf.unstack(x, axis=1), dtype=tf.float32, scope=scope
        )
        return [outputs[-1], *tf.nest.flatten(state)]

    return body


def save(built: Built, fmt: str, root: Path) -> str:
    """Save `built` as a checkpoint, SavedModel or frozen GraphDef; return the MODEL path."""
    with built.graph.as_default():
        if fmt == "checkpoint":
            prefix = root / "ckpt" / "model.ckpt"
            v1.train.Saver().save(built.session, str(prefix))
            return str(prefix)
        if fmt == "checkpoint-dir":
            v1.train.Saver().save(built.session, str(root / "ckptdir" / "model.ckpt"))
            return str(root / "ckptdir")
        if fmt == "savedmodel":
            path = root / "savedmodel"
            v1.saved_model.simple_save(
                built.session,
                str(path),
                inputs={"x": built.inputs},
                outputs={"y": built.outputs[0]},
            )
            return str(path)
        if fmt == "frozen":
            frozen = v1.graph_util.convert_variables_to_constants(
                built.session, built.graph.as_graph_def(), built.output_ops()
            )
            path = root / "frozen.pb"
            path.write_bytes(frozen.SerializeToString())
            return str(path)
    raise ValueError(fmt)


@pytest.fixture
def inputs() -> np.ndarray:
    return np.random.RandomState(42).randn(6, 5, 4).astype(np.float32)


def read_gates(out: Path, cell: str, gates: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """A recording's gates of one cell as [examples, steps, gates, units] arrays."""
    import pandas as pd

    df = pd.read_parquet(out / "gates", filters=[("cell", "==", cell)])
    df["gate"] = pd.Categorical(df["gate"].astype(str), categories=list(gates))
    df = df.sort_values(["example", "step", "gate", "unit"])
    shape = (df["example"].nunique(), df["step"].nunique(), len(gates), df["unit"].nunique())
    assert len(df) == np.prod(shape), (
        "the recording is not a full example x step x gate x unit grid"
    )
    return df["preactivation"].to_numpy().reshape(shape), df["activation"].to_numpy().reshape(shape)


def read_state(out: Path, cell: str, state: str) -> np.ndarray:
    """A recording's state of one cell as an [examples, steps, units] array."""
    import pandas as pd

    df = pd.read_parquet(out / "states", filters=[("cell", "==", cell), ("state", "==", state)])
    df = df.sort_values(["example", "step", "unit"])
    shape = (df["example"].nunique(), df["step"].nunique(), df["unit"].nunique())
    return df["value"].to_numpy().reshape(shape)


def session_model(
    body: Callable[[], object],
    root: Path,
    fmt: str = "checkpoint",
    output: str | None = None,
    control_flow: str = "v2",
):
    """Build `body()` in a fresh graph and session as a TF1 script would, give every variable
    random values, and save a checkpoint (`root/model.ckpt`) or freeze the graph down to the
    op `output` (`root/frozen.pb`); returns (model path, variable values by name)."""
    if control_flow == "v1":
        v1.disable_control_flow_v2()
    try:
        graph = tf.Graph()
        with graph.as_default():
            body()
            session = v1.Session(graph=graph)
            session.run(v1.global_variables_initializer())
        randomise(session, graph)
        with graph.as_default():
            values = {v.op.name: session.run(v) for v in v1.global_variables()}
            if fmt == "checkpoint":
                v1.train.Saver().save(session, str(root / "model.ckpt"))
                return str(root / "model.ckpt"), values
            frozen = v1.graph_util.convert_variables_to_constants(
                session, graph.as_graph_def(), [output]
            )
            (root / "frozen.pb").write_bytes(frozen.SerializeToString())
            return str(root / "frozen.pb"), values
    finally:
        v1.enable_control_flow_v2()


def as_a_shell_starts_it() -> None:
    """For `subprocess.Popen(preexec_fn=...)` of a process a test sends Ctrl-C: SIGINT's
    default action, unblocked, as a terminal's shell starts a command (a child inherits its
    parent's, and a test run's worker process may ignore it: Python then keeps ignoring it)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """`gatetrace ARGS` run in this process, its stdout and stderr captured (TensorFlow is
    imported once for all the tests; tests of what a fresh process prints run it as one)."""
    import contextlib
    import io

    from tracer.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def record_x(
    model: str | Path, x: np.ndarray, out: Path, *flags: str
) -> subprocess.CompletedProcess:
    """`gatetrace record MODEL --feed x=X.npy --out OUT --quiet FLAGS...`, `x` saved beside `out`."""
    saved = out.parent / f"{out.name}-x.npy"
    np.save(saved, x)
    return run_cli(
        "record", str(model), "--feed", f"x={saved}", "--out", str(out), "--quiet", *flags
    )


def record_with_cli(model: str | Path, feeds: dict[str, np.ndarray], out: Path):
    """`gatetrace record MODEL --feed NAME=FILE.npy ... --out OUT --quiet`, each feed saved
    beside `out`; the Recording it wrote (the command's stderr if it failed)."""
    from recorders import Recording

    args = []
    for name, value in feeds.items():
        np.save(out.parent / f"{out.name}-{name}.npy", value)
        args += ["--feed", f"{name}={out.parent / f'{out.name}-{name}.npy'}"]
    done = run_cli("record", str(model), *args, "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    return Recording(out)
