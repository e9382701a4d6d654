"""The `gatetrace` command: a thin shell over the library, one module a command (`tracer.commands`).

    gatetrace inspect MODEL [--json]
    gatetrace record MODEL --feed NAME=FILE.npy ... --out DIR [--resume] [--shard K/N]
    gatetrace weights MODEL --out FILE.parquet
    gatetrace view RUN
    gatetrace units RUN --labels FILE [--probe]
    gatetrace demo [--out DIR]

This module assembles the parser from the commands' own arguments and runs the one asked;
user errors print one line on stderr and exit with code 2.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from tracer.commands import compare, demo, inspect, record, units, view, weights
from tracer.commands.common import Parser, model_arguments

__all__ = ["main"]

# In the order `gatetrace --help` lists them.
COMMANDS = {c.NAME: c for c in (inspect, view, units, compare, record, weights, demo)}


def _quiet_tensorflow() -> None:
    """Keep TensorFlow's own log lines and deprecation notices off the user's terminal."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    warnings.filterwarnings("ignore")
    # gatetrace says what went wrong itself
    logging.getLogger("tensorflow").setLevel(logging.CRITICAL)
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


def _parser() -> Parser:
    from recorders import __version__

    p = Parser(
        prog="gatetrace",
        description="Record every gate of every TensorFlow RNN cell, at every step, on your data.",
        epilog="example, after `gatetrace demo`: gatetrace units gatetrace-demo/recording --labels gatetrace-demo/labels.npy",
    )
    p.add_argument("--version", action="version", version=f"gatetrace {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS.values():
        c = sub.add_parser(
            command.NAME,
            help=command.HELP,
            description=command.HELP,
            epilog=f"example: {command.EXAMPLE}",
        )
        if command.READS_MODEL:
            model_arguments(c, runs_model=command.RUNS_MODEL)
        command.arguments(c)
    return p


_INTERRUPTED = "gatetrace: interrupted; finished batches are kept (record: rerun with --resume)"


def _os_error(err: OSError) -> str:
    """The one line of an OSError: the path and what the system said; where the path is a
    symbolic link gatetrace refused to follow (opened with O_NOFOLLOW, it reads "Not a
    directory" or "Too many levels of symbolic links"), that it is one, and what to do."""
    name = err.filename
    if name and os.path.islink(name):
        return (
            f"{name} is a symbolic link (to {os.readlink(name)}): gatetrace never follows links inside the folders it "
            "reads and writes; replace it by the folder itself, or record into a new --out"
        )
    return f"{name}: {err.strerror or err}" if name else str(err.strerror or err)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = _parser()
        Parser.argv = list(sys.argv[1:] if argv is None else argv)
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, or a usage error already printed in one line
        return int(stop.code or 0)
    from recorders.errors import GatetraceError, Interrupted, options_as

    command = COMMANDS[args.command]
    # `view` and `units` read Parquet only; `inspect` of a .tflite file reads it with LiteRT
    needs = getattr(command, "needs_tensorflow", None)
    tensorflow = needs(args) if needs else getattr(command, "TENSORFLOW", True)
    # what a command checks (or answers) before TensorFlow loads: a user error in well under a second
    early = getattr(command, "early", None)
    try:
        with options_as("command line"):  # messages name options as the user gave them: flags
            return _run(command, args, early, tensorflow)
    except Interrupted as err:
        print(f"gatetrace: {err}", file=sys.stderr)
        return 130
    except GatetraceError as err:
        print(f"gatetrace: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and cut short
        return 0
    except OSError as err:
        print(f"gatetrace: error: {_os_error(err)}", file=sys.stderr)
        return 2
    except MemoryError:
        # what needs less memory, in the command's own options (its OUT_OF_MEMORY)
        advice = getattr(command, "OUT_OF_MEMORY", "close other programs and run it again")
        print(f"gatetrace: error: out of memory: {advice}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(_INTERRUPTED, file=sys.stderr)
        from tracer.values import interrupts

        # TensorFlow or an interpreter may still be busy with the cancelled run: do not wait for it
        if interrupts.interrupted_run_pending():
            sys.stderr.flush()
            os._exit(interrupts.INTERRUPT_EXIT)
        return 130
    except Exception as err:  # a TensorFlow error while running the model, or a bug
        if os.environ.get("GATETRACE_DEBUG"):
            raise
        if tensorflow:
            from tracer.load.loaded import error_line

            line = error_line(err)
        else:  # `view`, `units`, `inspect` of a .tflite never import TensorFlow, not even to say what failed
            line = next((t.strip() for t in str(err).splitlines() if t.strip()), "")
        print(
            f"gatetrace: error: {type(err).__name__}: {line} (set GATETRACE_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 2
    return 0


def _run(command: Any, args: Any, early: Any, tensorflow: bool) -> int:
    """Run `command` on `args` (what `main` catches, it turns into one line and an exit code)."""
    if early is not None and early(args):
        return 0
    from tracer.values import interrupts

    interrupts.end_process_after_interrupt(4.0, _INTERRUPTED)
    if not tensorflow:
        command.run(args)
        return 0
    _quiet_tensorflow()
    from tracer.run.budget import tune_allocators

    tune_allocators()
    with _native_logs_silenced():
        import tracer._tf  # noqa: F401  (TensorFlow, its start-up lines silenced)

        command.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
