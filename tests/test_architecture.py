"""The package's shape: no import cycles, no function-level imports of autotune modules, no
two public classes of one name. (The layer contracts themselves are import-linter's, in
``pyproject.toml``, run by ``.ci/run``.)"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import grimp

import autotune

PACKAGE = Path(autotune.__file__).parent
#: Optional dependencies may be imported where they are used, so that the core runs without.
OPTIONAL = ("onnx", "matplotlib", "psycopg", "psycopg2")


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_import_graph_has_no_cycle():
    graph = grimp.build_graph("autotune", include_external_packages=False)
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for dep in sorted(edges[module]):
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep) :] + [dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)


def test_no_function_level_imports_of_autotune_modules():
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom):
                    names = [inner.module or ""]
                elif isinstance(inner, ast.Import):
                    names = [alias.name for alias in inner.names]
                else:
                    continue
                for name in names:
                    if not name.startswith(OPTIONAL):
                        found.append(f"{path.relative_to(PACKAGE)}:{inner.lineno} {name}")
    assert not found, found


def test_no_two_public_classes_share_a_name():
    where: dict[str, list[str]] = defaultdict(list)
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].append(str(path.relative_to(PACKAGE)))
    assert {name: files for name, files in where.items() if len(files) > 1} == {}
