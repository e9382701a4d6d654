"""`gatetrace view`: look at a recording in the browser (the optional `view` extra).

`serve` checks the recording, the tokens and the port, then serves the page of
`recorders.view.server` on 127.0.0.1 (or `host`, then with a secret token in its URL) until
Ctrl-C. The data it shows comes from
`recorders.view.data`, which reads through `recorders.Recording`; no TensorFlow.
"""

from __future__ import annotations

import errno
import io
import os
import secrets
import socket
import sys
import threading
import webbrowser
from pathlib import Path

import numpy as np

from recorders.errors import GatetraceError, SelectionError, install_hint
from recorders.read.compare import compare
from recorders.read.labels import read_labels
from recorders.read.reader import Recording
from recorders.read.series import SERIES_FILE, Series
from recorders.view.data import Labels
from recorders.write.folder import Folder
from recorders.write.schema import MAX_JSON_BYTES, parse_json

__all__ = ["serve", "load_labels", "check_installed", "ViewSetupError"]


class ViewSetupError(SelectionError):
    """The view cannot start: its extra is not installed, or the port is taken."""


def check_installed() -> None:
    """Refuse, in one line, when the view's libraries are missing."""
    missing = []
    for module in ("starlette", "uvicorn", "plotly"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ViewSetupError(f"gatetrace view needs {', '.join(missing)}: {install_hint('view')}")


def load_labels(path: str | os.PathLike) -> Labels:
    """Step labels from a file: `.npy` or `.json` holding one label per example and step
    ([examples, steps]: tokens as strings, or ids)."""
    path = Path(path)
    if path.suffix not in (".npy", ".json"):
        raise SelectionError(
            f"--tokens {path}: expected a .npy or .json file of [examples, steps] labels"
        )
    try:
        # a regular file only: a FIFO would block, a device act
        with Folder(path.resolve().parent) as folder:
            data = folder.read_bytes(path.resolve().name, MAX_JSON_BYTES)
        if path.suffix == ".npy":
            table = np.load(io.BytesIO(data), allow_pickle=False)
        else:
            table = np.asarray(parse_json(data, path.name), dtype=object)
    except (OSError, ValueError, GatetraceError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise SelectionError(
            f"--tokens {path}: cannot read it ({why}); give a .npy or .json file of [examples, steps] labels"
        ) from None
    return Labels(table)


def _check_port(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as err:
            if err.errno in (errno.EADDRINUSE, errno.EACCES):
                raise ViewSetupError(
                    f"port {port} on {host} is in use (or not allowed): choose another with --port, e.g. --port {port + 1}"
                ) from None
            raise


def serve(
    run: str | os.PathLike,
    port: int = 8050,
    tokens: str | os.PathLike | None = None,
    open_browser: bool = False,
    host: str = "127.0.0.1",
    labels_file: str | os.PathLike | None = None,
    compare_with: str | os.PathLike | None = None,
    tolerance: float = 1e-3,
) -> None:
    """Serve the view of the recording `run` at http://host:port/ until interrupted. On an address
    other than 127.0.0.1 the page asks for a secret token, which the printed URL carries. A
    series (`recorders.Series`: a recording per epoch or checkpoint) is shown one value at a
    time (the last complete one first), with the gates' saturation across them. With `labels_file`
    (a file `gatetrace units` takes), the units ranked against them and the label beside each
    sequence. With `compare_with` (another recording of the same network on the same inputs),
    a panel of where the two differ (`recorders.read.compare`, beyond `tolerance`)."""
    check_installed()
    series = Series(run) if (Path(run) / SERIES_FILE).is_file() else None
    if series is not None and not series.complete:
        raise SelectionError(f"{run} is a series with no complete recording yet: nothing to show")
    rec = series.recording(series.complete[-1]) if series is not None else Recording(run)
    # every footer: the start stays fast; each page's checksum is verified when a panel reads it
    rec.check(pages=False)
    labels = load_labels(tokens) if tokens is not None else None
    unit_labels = read_labels(labels_file, rec.memory) if labels_file is not None else None
    comparison = None
    if compare_with is not None:
        if series is not None:
            raise SelectionError(
                f"--compare compares one recording with another; {run} is a series: view one of its "
                "recordings, e.g. the folder of its last checkpoint"
            )
        comparison = compare(rec, Recording(compare_with), tolerance=tolerance)
    _check_port(host, port)
    import uvicorn

    from recorders.view.server import make_app

    if host == "127.0.0.1":
        app, url = (
            make_app(rec, labels, series=series, unit_labels=unit_labels, comparison=comparison),
            f"http://{host}:{port}/",
        )
    else:
        token = secrets.token_urlsafe(24)
        app, url = (
            make_app(
                rec,
                labels,
                hosts=("*",),
                token=token,
                series=series,
                unit_labels=unit_labels,
                comparison=comparison,
            ),
            f"http://{host}:{port}/?token={token}",
        )
    print(f"gatetrace view: {rec.path} at {url} (Ctrl-C to stop)", file=sys.stderr)
    if open_browser:
        threading.Timer(1.0, lambda: webbrowser.open(url)).start()
    uvicorn.run(app, host=host, port=port, log_level="warning")
