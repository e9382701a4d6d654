"""The house rules, read from the source with `ast`: each module of `tracer` imports only
from its own stage and the stages below it; `recorders` goes by direction (writing never
imports reading or the view, reading never the writer's own parts); and no modules import
each other in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The stages of tracer, lowest first (tracer/__init__.py documents them).
STAGES = [
    "tracer._tf",
    "tracer.cells",
    "tracer.inputs",
    "tracer.load",
    "tracer.find",
    "tracer.values",
    "tracer.run",
]
TOP = len(STAGES)  # the command line, the demo, `python -m tracer` and `tracer.keras` stand on top
ON_TOP = ("tracer.cli", "tracer.commands", "tracer.demo", "tracer.__main__", "tracer.keras")


def stage(module: str) -> int | None:
    """The stage of a module of tracer (None for the package's own __init__, the public facade)."""
    if module == "tracer":
        return None
    if any(module == top or module.startswith(top + ".") for top in ON_TOP):
        return TOP
    for k, prefix in enumerate(STAGES):
        if module == prefix or module.startswith(prefix + "."):
            return k
    raise AssertionError(
        f"{module} is in no stage: add it to a stage's folder (and to STAGES if it is a new stage)"
    )


def modules(package: str = "tracer") -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(module: str, path: Path) -> set[str]:
    """Every module of its package (tracer, or recorders) that `module` imports, at its top or inside a function."""
    found = set()
    top = module.split(".")[0]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == top}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1]
                    + ([base] if base else [])
                )
            if base.split(".")[0] != top:
                continue
            known = modules(top)
            for alias in node.names:  # `from tracer.values import running` imports a module
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return found


def test_every_module_imports_only_from_its_stage_and_below():
    wrong = []
    for module, path in modules().items():
        own = stage(module)
        if own is None:
            continue
        for imported in sorted(imports(module, path)):
            theirs = stage(imported)
            # the facade: for the top only
            if (theirs is None and own < TOP) or (theirs is not None and theirs > own):
                wrong.append(
                    f"{module} (stage {own}) imports {imported} (stage {theirs if theirs is not None else 'the public facade'})"
                )
    assert not wrong, "imports from a stage above:\n" + "\n".join(wrong)


# recorders by direction: what each part may import. The format modules of `recorders.write` are
# what readers share with the writer; the writer's own parts (writer, opening, manifest,
# rowgroups, swap, place, files, ...) are imported by nothing outside it.
FORMAT = tuple(
    f"recorders.write.{m}"
    for m in (
        "layout",
        "columns",
        "keys",
        "schema",
        "progress",
        "folder",
        "stats",
        "totals",
        "series",
        "partstats",
        "tops",
        "merged",
        "rounding",
    )
)
DIRECTIONS = {
    "recorders.errors": ("recorders.errors",),
    "recorders.write": ("recorders.errors", "recorders.write"),
    "recorders.read": ("recorders.errors", "recorders.read", *FORMAT),
    "recorders.view": ("recorders.errors", "recorders.read", "recorders.view", *FORMAT),
}


def allowed(module: str) -> tuple[str, ...] | None:
    """What a module of recorders may import (module prefixes); None for the package's facade."""
    for part, may in DIRECTIONS.items():
        if module == part or module.startswith(part + "."):
            return may
    if module == "recorders":
        return None
    raise AssertionError(f"{module} is in none of {', '.join(DIRECTIONS)}: put it in one")


def test_recorders_imports_go_by_direction():
    wrong = []
    for module, path in modules("recorders").items():
        may = allowed(module)
        if may is None:
            continue
        for imported in sorted(imports(module, path)):
            if not any(imported == m or imported.startswith(m + ".") for m in may):
                wrong.append(f"{module} imports {imported}")
    assert not wrong, "imports against the direction:\n" + "\n".join(wrong)


@pytest.mark.parametrize("package", ["tracer", "recorders"])
def test_no_import_circles(package):
    graph = {
        m: {i for i in imports(m, p) if i in modules(package) and i != m}
        for m, p in modules(package).items()
        if m != package
    }
    circles = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(start: str) -> None:
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            module, todo = stack[-1]
            nxt = next(todo, None)
            if nxt is None:
                stack.pop()
                path.pop()
                state[module] = 2
            elif state.get(nxt) == 1:
                circles.append(" -> ".join(path[path.index(nxt) :] + [nxt]))
            elif nxt not in state and nxt in graph:
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(sorted(graph[nxt]))))

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_the_rules_catch_what_they_are_for(tmp_path):
    """The checks themselves: an upward import and a circle, in a made-up package, are found."""
    upward = tmp_path / "up.py"
    upward.write_text("from tracer.run.recording import record\n")
    assert imports("tracer.cells.fake", upward) == {"tracer.run.recording"}
    assert stage("tracer.run.recording") > stage("tracer.cells.fake")
    lazy = tmp_path / "lazy.py"
    lazy.write_text(
        "def f():\n    from tracer.values import running\n    import tracer.find.graph\n"
    )
    assert imports("tracer.run.fake", lazy) == {"tracer.values.running", "tracer.find.graph"}
    backward = tmp_path / "back.py"
    backward.write_text(
        "from recorders.read.reader import Recording\nfrom recorders.write import rowgroups\n"
    )
    assert imports("recorders.write.fake", backward) == {
        "recorders.read.reader",
        "recorders.write.rowgroups",
    }
    assert "recorders.read.reader" not in allowed("recorders.write.fake") and not any(
        "recorders.write.rowgroups".startswith(m) for m in allowed("recorders.read.fake")
    )


def test_the_facade_shows_type_checkers_the_names_it_loads_lazily():
    """tracer/__init__.py loads its public names from their stage on first use (`_LAZY`) and
    imports the same names from the same modules under TYPE_CHECKING, for type checkers and
    editors: the two must agree, and every one be in `__all__`."""
    tree = ast.parse((ROOT / "tracer" / "__init__.py").read_text())
    lazy, checked, public = None, {}, None
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id == "_LAZY":
                lazy = ast.literal_eval(node.value)
            elif node.targets[0].id == "__all__":
                public = {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
        elif isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom), ast.dump(imp)
                checked.update({a.name: imp.module for a in imp.names})
    assert lazy and checked == lazy
    assert public is not None and set(lazy) <= public
