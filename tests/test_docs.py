"""Every example the README and the pages under docs/ show is run, as a reader would run it.

Each page runs in a folder of its own holding what its examples name: the demo's output
(`gatetrace demo`, run once for all pages), its checkpoint as `model.ckpt`, its inputs as
`x.npy` and `inputs.npy`, a small Keras model as `model.keras` and, for the pages under docs/,
a recording `run1/` of the demo model with its preactivations' parts. In a page, top to bottom:

- a `python` block runs in one namespace per page (a later block may use an earlier one's names);
  a `print(...)` whose line ends in a comment that starts with a value (`# [1, 2, 3]`, `# 0.52`,
  `# True`, up to a colon) must print that value;
- an `sql` block runs in DuckDB;
- in any other block, each line that starts with `gatetrace ` runs as that command and must
  exit 0, except `gatetrace view` (it serves until stopped: tests/test_view.py runs it) and a
  usage synopsis (a line with MODEL, RUN or `[`) or a line of shell variables (`$`).

A block that cannot run here (a Slurm cluster) is preceded by `<!-- not run: why -->`.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(<!-- not run: [^>]*-->\s*)?^```(\w*)\n(.*?)^```", re.S | re.M)

pytestmark = pytest.mark.e2e


def blocks(markdown: str) -> list[tuple[str, str, bool]]:
    """(language, text, run) of each fenced block of a page's text, in order."""
    return [(lang, text, not skip) for skip, lang, text in BLOCK.findall(markdown)]


def commands(text: str) -> list[list[str]]:
    """The `gatetrace` command lines of a block that run here (see the module docstring)."""
    found = []
    for line in text.splitlines():
        line = line.split("  #", 1)[0].strip()
        if not line.startswith("gatetrace ") or line.startswith("gatetrace view") or "$" in line:
            continue
        if re.search(r"\bMODEL\b|\bRUN\b|\[", line):
            continue
        found.append(shlex.split(line)[1:])
    return found


def gatetrace(args: list[str], cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tracer.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (
        f"gatetrace {' '.join(args)} exited {done.returncode}: {done.stderr}"
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """What the examples name, made once: see the module docstring."""
    root = tmp_path_factory.mktemp("world")
    gatetrace(["demo", "--out", "gatetrace-demo"], root)
    for part in (root / "gatetrace-demo" / "model").glob("model.ckpt*"):
        shutil.copy(part, root / part.name)
    shutil.copy(root / "gatetrace-demo" / "inputs.npy", root / "x.npy")
    shutil.copy(root / "gatetrace-demo" / "inputs.npy", root / "inputs.npy")
    x = np.load(root / "x.npy")
    keras_model = (
        "import keras, numpy as np\n"
        f"inputs = keras.Input(shape=(None, {x.shape[2]}))\n"
        "model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.LSTM(4)(inputs)))\n"
        "model.save('model.keras')\n"
    )
    subprocess.run(
        [sys.executable, "-c", keras_model], cwd=root, check=True, capture_output=True, timeout=600
    )
    gatetrace(
        [
            "record",
            "model.ckpt",
            "--feed",
            "inputs=x.npy",
            "--out",
            "docs-run1",
            "--quiet",
            "--values",
            "preactivation,activation,contributions",
        ],
        root,
    )
    return root


@pytest.mark.parametrize("page", PAGES)
def test_every_example_of_the_page_runs(page, world, tmp_path, monkeypatch):
    here = tmp_path / "page"
    if page == "README.md":  # the README runs the demo and records run1 itself
        shutil.copytree(world, here, ignore=shutil.ignore_patterns("docs-run1", "gatetrace-demo"))
    else:  # the reference pages read the demo and a recording with the preactivations' parts
        shutil.copytree(world, here, ignore=shutil.ignore_patterns("docs-run1"))
        shutil.copytree(world / "docs-run1", here / "run1")
    monkeypatch.chdir(here)
    namespace: dict = {"__name__": "__docs__"}
    for lang, text, run in blocks((ROOT / page).read_text()):
        if not run:
            continue
        if lang == "python":
            printed = _printing(namespace, f"{page} python block")
            exec(compile(text, f"{page} python block", "exec"), namespace)
            for line, shown in shown_values(text).items():
                assert printed.get(line) == shown, (
                    f"{page}: the page shows `{shown}` after line {line} of a python block; it printed "
                    f"{printed.get(line)!r}"
                )
        elif lang == "sql":
            import duckdb

            assert len(duckdb.sql(text).df()) > 0, f"{page}: the query returned no rows"
        else:
            for args in commands(text):
                gatetrace(args, here)
    from tracer._tf import tf

    # the pages run in the tests' own process: one that switched eager execution off would
    # leave every test after it in graph mode (and a reader's notebook too)
    assert tf.executing_eagerly(), (
        f"{page}: an example turns eager execution off; build graphs in tf.Graph() instead"
    )


# a comment that shows what the print on its line prints: it starts with a value
_SHOWN = re.compile(
    r"^\s*print\(.*\)\s*#\s*((?:\[|\{|\(|-?\d|'|\"|True\b|False\b|None\b).*?)(?::\s.*)?$"
)


def shown_values(text: str) -> dict[int, str]:
    """The value each `print(...)  # VALUE` line of a block shows, by line number from 1."""
    return {
        k: m.group(1).strip()
        for k, line in enumerate(text.splitlines(), 1)
        if (m := _SHOWN.match(line))
    }


def _printing(namespace: dict, filename: str) -> dict[int, str]:
    """Make `print` in `namespace` also keep what each line of code `filename` printed (the
    first print of a line), by line number; the returned dict fills as the block runs."""
    import builtins
    import io

    printed: dict[int, str] = {}

    def print_(*args, **kwargs) -> None:
        builtins.print(*args, **kwargs)
        frame = sys._getframe(1)
        if frame.f_code.co_filename == filename and frame.f_lineno not in printed:
            out = io.StringIO()
            builtins.print(*args, **{**kwargs, "file": out})
            printed[frame.f_lineno] = out.getvalue().strip()

    namespace["print"] = print_
    return printed


def test_the_units_page_shows_what_the_command_prints(world, tmp_path):
    """docs/units.md shows `gatetrace units` on the demo's recording: the lines it prints."""
    page = (ROOT / "docs" / "units.md").read_text()
    command = "gatetrace units gatetrace-demo/recording --labels gatetrace-demo/labels.npy --top 5"
    shown = page.split(command, 1)[1].split("```", 3)[2].strip("\n").splitlines()
    done = subprocess.run(
        [sys.executable, "-m", "tracer.cli", *shlex.split(command)[1:]],
        cwd=world,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert len(printed) == len(shown), done.stdout
    for got, want in zip(printed, shown, strict=True):
        assert _same_but_last_digits(got, want), f"printed: {got}\npage:    {want}"


def _same_but_last_digits(got: str, want: str) -> bool:
    """The same words, and numbers within a unit of the fourth decimal: the demo trains its model
    on the processor it runs on, and the float rounding of another processor's kernels moves
    a score by a pair of examples (1/65,536 of an AUC) now and then."""
    a, b = got.split(), want.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x == y:
            continue
        try:
            if abs(float(x) - float(y)) > 1.5e-4:
                return False
        except ValueError:
            return False
    return True


def test_the_rules_find_the_shown_values():
    text = "print(x)   # [4, 8]: batches trained\nprint(y)  # the mean\nprint(z) # 0.52\nprint(w)  # 'a'"
    assert shown_values(text) == {1: "[4, 8]", 3: "0.52", 4: "'a'"}


def test_the_rules_find_the_examples():
    """The parser itself: a synopsis, a shell variable and a view are left out; a marker skips a block."""
    text = "gatetrace inspect MODEL [--json]\ngatetrace record m --feed x=$X\ngatetrace view run1\ngatetrace weights m --out w.parquet  # w\n"
    assert commands(text) == [["weights", "m", "--out", "w.parquet"]]
    page = "<!-- not run: no cluster -->\n```python\nboom()\n```\n\n```python\nok = 1\n```\n"
    assert blocks(page) == [("python", "boom()\n", False), ("python", "ok = 1\n", True)]
