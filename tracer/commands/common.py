"""What the commands share: the one-line argument parser, argument types, the model's arguments.

`Parser` is argparse with errors in one line, flags only in full and the nearest flag
suggested; `model_arguments` adds MODEL and the flags every command that reads a model takes.
"""

from __future__ import annotations

import argparse
import glob
import re
from collections.abc import Sequence
from typing import Any

from tracer.load.formats import FORMATS

__all__ = [
    "Parser",
    "MODEL_HELP",
    "seconds",
    "positive",
    "split",
    "model_arguments",
    "model_options",
]

MODEL_HELP = FORMATS


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, given {text!r}")
    return value


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, given {text!r}")
    return value


def tolerance(text: str) -> float:
    """A finite number >= 0 (a difference that counts as beyond: `compare`, `view --compare`)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, given {text!r}")
    return value


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every `--flag` of `parser` and of its subcommands' parsers."""
    out: set[str] = set()
    for action in parser._actions:
        out.update(a for a in action.option_strings if a.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out |= _flags(sub)
    return out


class _Formatter(argparse.HelpFormatter):
    """argparse's help, its paragraphs wrapped without breaking a word at a hyphen or inside
    it (an example command stays one that can be copied: `gatetrace-demo/labels.npy`)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        return textwrap.fill(
            " ".join(text.split()),
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
            break_long_words=False,
        )

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(
            " ".join(text.split()), width, break_on_hyphens=False, break_long_words=False
        )


class Parser(argparse.ArgumentParser):
    """argparse, with errors in one line (the usage block stays behind --help), flags taken
    only when spelled in full (`--gate` is not `--gates`), and the nearest flag suggested for
    one it does not know."""

    known: set[str] = set()  # every flag of every command, in groups or not
    argv: Sequence[str] = ()  # the command line being parsed, for the hints of its errors

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def parse_args(self, *args, **kwargs):
        Parser.known.update(_flags(self))
        return super().parse_args(*args, **kwargs)

    def error(self, message: str):
        import difflib

        argv = self.argv
        stray = [a for a in argv if a.startswith("--") and a.split("=")[0] not in Parser.known]
        if stray and not message.startswith("unrecognized arguments"):
            # a misspelt flag first (`--otu x1`), not what its absence made "required"
            message = f"unrecognized arguments: {' '.join(stray)}"
        unknown = (
            re.findall(r"(--[\w-]+)", message)
            if message.startswith("unrecognized arguments")
            else []
        )
        near = [
            m
            for flag in unknown
            for m in difflib.get_close_matches(
                flag.split("=")[0], sorted(Parser.known), n=1, cutoff=0.6
            )
        ]
        hint = f" (did you mean {near[0]}?)" if near else ""
        for k in range(len(argv) - 2):  # `--feed x a/x.npy`: the file became an argument of its own
            if argv[k] == "--feed" and "=" not in argv[k + 1] and not argv[k + 2].startswith("-"):
                hint = f" (--feed takes NAME=FILE as one word: --feed {argv[k + 1]}={argv[k + 2]})"
        helped = self.prog  # the help that answers: a command's, where extras reached the top
        commands = [a.choices for a in self._actions if isinstance(a, argparse._SubParsersAction)]
        if argv and any(argv[0] in c for c in commands):
            helped = f"{self.prog} {argv[0]}"
        self.exit(2, f"{self.prog.split()[0]}: error: {message}{hint}; see {helped} --help\n")


def split(text: str | None) -> tuple[str, ...]:
    """`"a, b,"` -> ("a", "b"): a comma-separated flag's values."""
    return tuple(part.strip() for part in text.split(",") if part.strip()) if text else ()


def check_model_path(path: str) -> None:
    """Refuse, before TensorFlow loads, a model path where nothing is: no file or folder of that
    name and none starting with it (a checkpoint prefix's `P.meta`, `P.index`, ...), as
    `tracer.load_model` would say it (a URI is left to it)."""
    from recorders.errors import ModelFormatError
    from recorders.write import is_uri

    if is_uri(path) or glob.glob(glob.escape(path) + "*"):
        return
    raise ModelFormatError(
        f"model not found: {path} does not exist (and neither does {path}.meta); expected {FORMATS}"
    )


def check_input_files(feeds: Sequence[str], lengths: str | None = None) -> None:
    """Open, before TensorFlow loads, each `--feed NAME=FILE` (.npy, .npz, Parquet; local or in
    object storage) and the `--lengths` file, as recording will: a file that is missing, of
    another kind or damaged in its header is refused in one line (`tracer.inputs.files`).
    TFRecord files are left to the recording (their reader imports TensorFlow)."""
    from tracer.inputs.files import is_input_spec, open_input, split_feed

    specs = [(f"feed {name}", value) for name, value in map(split_feed, feeds)]
    specs += [("--lengths", lengths)] if lengths else []
    for what, value in specs:
        if is_input_spec(value) and ".tfrecord" not in value:
            open_input(value, what)


def model_arguments(c: argparse.ArgumentParser, runs_model: bool = True) -> None:
    """MODEL, --tag, --signature, --timeout (if the command runs the model) and --allow-unsafe-ops."""
    loading = c.add_argument_group("loading the model")
    loading.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    loading.add_argument(
        "--tag",
        default="serve",
        help="the SavedModel meta graph's exact tag set, comma-separated (default: serve)",
    )
    loading.add_argument(
        "--signature",
        default="serving_default",
        help="the SavedModel signature to record, whose input names --feed takes: --signature serve (default: serving_default)",
    )
    if runs_model:
        loading.add_argument(
            "--timeout",
            type=seconds,
            metavar="SECONDS",
            help="stop a run of the model (one batch) that takes longer than this: --timeout 600 (default: no limit)",
        )
    loading.add_argument(
        "--allow-unsafe-ops",
        action="store_true",
        help="run the model even if it holds ops outside the allowlist of pure math, array, variable and "
        "control-flow ops (file access, Python, printing): only for models you trust"
        if runs_model
        else "read the model even if importing its graph could run ops that do more than compute (file access), "
        "or loading its Keras file would build objects gatetrace does not check: only for models you trust",
    )
    loading.add_argument(
        "--custom-objects",
        metavar="FILE.py",
        help="a Keras file built from classes of your own (a cell of your own): the Python file defining them, "
        "imported (which runs its code) so that Keras can build them; nothing else it names is accepted",
    )


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    """What `tracer.load_model` takes from a command's model arguments (`model_arguments`)."""
    return {
        "tag": args.tag,
        "signature": args.signature,
        "allow_unsafe_ops": args.allow_unsafe_ops,
        "custom_objects": args.custom_objects,
    }
