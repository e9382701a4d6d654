"""`gatetrace demo`: train a small LSTM on a memory task, record it, and summarise what its gates did (`tracer.demo`)."""

from __future__ import annotations

import argparse

NAME = "demo"
HELP = "train a small LSTM on a memory task, record its gates and summarise them"
EXAMPLE = "gatetrace demo --out gatetrace-demo"
READS_MODEL, RUNS_MODEL = False, False


def arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument(
        "--out",
        default="gatetrace-demo",
        metavar="DIR",
        help="output folder (default: ./gatetrace-demo)",
    )
    c.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier demo's output in --out also where its files were changed since (unchanged, it is "
        "replaced without it; nothing the demo did not write is ever replaced)",
    )


def run(args) -> None:
    from tracer.demo import run_demo

    run_demo(args.out, overwrite=args.overwrite)
