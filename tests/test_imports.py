"""The package's import graph has no cycle: data flows one way (suite → engine → record →
compare → report), counting imports under TYPE_CHECKING and inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "servediff"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """Every servediff module this file imports, wherever the import statement sits."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from servediff.report import render` imports the submodule render
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        found.update(n for n in names if n in modules and n != me)
    return found


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imports(path, set(files)) for name, path in files.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (cycle := visit(m)):
                return cycle
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state and (cycle := visit(n)):
            return cycle
    return None


def test_the_walker_sees_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_the_package() -> None:
    edges = graph()
    assert len(edges) > 40 and edges["servediff.cli"]  # the walker found the package's imports
    assert find_cycle(edges) is None


# The package's layers, lowest first: a module imports only from its own layer or one below
# (data flows one way: suite → engine → record → compare → report; the commands on top). A name
# is a package or a module; a module goes by the longest name that holds it.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "servediff",
        "servediff.types",
        "servediff.hashing",
        "servediff.textfile",
        "servediff.redaction",
        "servediff.machine",
        "servediff.filename",
        "servediff.argtypes",
        "servediff.option_rules",
        "servediff.memory",
        "servediff.models",
        "servediff.commands.grammar",
    ),
    ("servediff.suites",),
    ("servediff.records",),
    ("servediff.engines", "servediff.runner", "servediff.scoring"),
    ("servediff.compare",),
    ("servediff.probe", "servediff.export", "servediff.importers", "servediff.gate"),
    ("servediff.report",),
    ("servediff.experiment",),
    ("servediff.audit", "servediff.shadow", "servediff.verify"),
    ("servediff.commands",),
    ("servediff.cli", "servediff.__main__"),
)


def layer(module: str) -> int:
    names = {name: k for k, names in enumerate(LAYERS) for name in names}
    holders = [n for n in names if module == n or module.startswith(n + ".")]
    return names[max(holders, key=len)]


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    edges = graph()
    upward = sorted(f"{a} → {b}" for a, bs in edges.items() for b in bs if layer(b) > layer(a))
    assert upward == []
    # The walker sees an upward import where there is one, and every module has its layer.
    assert layer("servediff.records.reader") < layer("servediff.compare.loader") < layer("servediff.cli")
    assert {layer(m) for m in edges} <= set(range(len(LAYERS)))


def test_the_statistics_are_pure() -> None:
    """compare/stats/ is pure statistics over numbers: it reads no record and no study."""
    edges = graph()
    stats = [m for m in edges if m == "servediff.compare.stats" or m.startswith("servediff.compare.stats.")]
    assert len(stats) >= 5
    allowed = {"servediff.compare.vocabulary", *stats}
    assert {m: sorted(edges[m] - allowed) for m in stats} == {m: [] for m in stats}
