"""`gatetrace view RUN`: serve a recording's page in the browser until Ctrl-C (`recorders.view`; no TensorFlow)."""

from __future__ import annotations

import argparse

from recorders.errors import install_hint
from tracer.commands.common import tolerance

NAME = "view"
HELP = (
    "look at a recording in the browser: overview, one sequence's heatmap, units over the dataset, select and "
    f"match, what drives a gate (needs {install_hint('view')}; serves 127.0.0.1 by default, read-only)"
)
EXAMPLE = "gatetrace view gatetrace-demo/recording --port 8050"
READS_MODEL, RUNS_MODEL, TENSORFLOW = False, False, False


def arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument(
        "run", metavar="RUN", help="a recording folder, as `gatetrace record --out` wrote it"
    )
    c.add_argument(
        "--port", type=int, default=8050, help="the local port to serve on (default: 8050)"
    )
    c.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="ADDRESS",
        help="the address to serve on (default: 127.0.0.1, this machine only); any other needs the secret token the printed URL carries",
    )
    c.add_argument(
        "--tokens",
        metavar="FILE",
        help="labels for the steps: a .npy or .json of [examples, steps] (e.g. the tokens read)",
    )
    c.add_argument(
        "--labels",
        metavar="FILE",
        help="labels to rank units against, as gatetrace units takes them: adds their track beside each sequence "
        "and a panel of the units that track them",
    )
    c.add_argument(
        "--compare",
        metavar="OTHER_RUN",
        help="another recording of the same network on the same inputs (e.g. its .tflite file's): adds a panel "
        "of where their gates differ, as gatetrace compare RUN OTHER_RUN prints it",
    )
    c.add_argument(
        "--tolerance",
        type=tolerance,
        default=1e-3,
        metavar="X",
        help="with --compare: a difference above X counts as beyond (default: 0.001)",
    )
    c.add_argument("--open", action="store_true", help="open the page in the default browser")


def run(args: argparse.Namespace) -> None:
    from recorders.view import serve

    try:
        serve(
            args.run,
            port=args.port,
            tokens=args.tokens,
            open_browser=args.open,
            host=args.host,
            labels_file=args.labels,
            compare_with=args.compare,
            tolerance=args.tolerance,
        )
    except KeyboardInterrupt:
        pass
