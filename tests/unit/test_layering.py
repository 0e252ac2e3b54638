# SPDX-License-Identifier: BSD-3-Clause
"""The package's layering: every module imports, the hetmem-internal import
graph has no cycle, and imports sit at module top. The only imports inside
functions are the lazy third-party ones (scipy, matplotlib), each after a
`# lazy: ...` comment in its function saying why; numpy is lazy through hetmem._numpy."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import hetmem

PACKAGE = Path(hetmem.__file__).resolve().parent
LAZY_ALLOWED = {"scipy", "matplotlib"}


def _modules(root: Path, top: str) -> dict[str, Path]:
    """Dotted name -> file of every module under root (a package named top)."""
    mods = {}
    for path in sorted(root.rglob("*.py")):
        parts = (top, *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _targets(node: ast.Import | ast.ImportFrom, mods: dict[str, Path]) -> list[str]:
    """The package's modules an import statement loads."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in mods]
    if node.level or node.module is None:
        raise AssertionError(f"relative import at line {node.lineno}: use absolute imports")
    out = []
    for a in node.names:
        sub = f"{node.module}.{a.name}"
        if sub in mods:
            out.append(sub)
        elif node.module in mods:
            out.append(node.module)
    return out


def _imports(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, int]]:
    """Every import statement with the first line of the function it sits in
    (0 at module level)."""
    found: list[tuple[ast.Import | ast.ImportFrom, int]] = []

    def visit(node: ast.AST, function: int) -> None:
        for child in ast.iter_child_nodes(node):
            inner = function
            if not function and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = child.lineno
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.append((child, inner))
            visit(child, inner)

    visit(tree, 0)
    return found


def graph_and_problems(root: Path, top: str) -> tuple[dict[str, set[str]], list[str]]:
    """The internal import graph of a package, and its imports in functions
    that are not allowed (internal, or third-party without a lazy comment)."""
    mods = _modules(root, top)
    graph: dict[str, set[str]] = {name: set() for name in mods}
    problems = []
    for name, path in mods.items():
        text = path.read_text()
        lines = text.splitlines()
        for node, function in _imports(ast.parse(text)):
            targets = _targets(node, mods)
            graph[name].update(t for t in targets if t != name)
            if not function:
                continue
            where = f"{path.relative_to(root.parent)}:{node.lineno}"
            first = (node.names[0].name if isinstance(node, ast.Import) else node.module) or ""
            if targets or first.split(".")[0] not in LAZY_ALLOWED:
                problems.append(f"{where}: import inside a function: {ast.unparse(node)}")
            elif not any(x.strip().startswith("# lazy:") for x in lines[function : node.lineno]):
                problems.append(f"{where}: lazy import without a '# lazy: why' comment above it")
    return graph, problems


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_every_module_imports():
    for info in pkgutil.walk_packages(hetmem.__path__, "hetmem."):
        if info.name != "hetmem.__main__":  # runs the CLI
            importlib.import_module(info.name)


def test_no_import_cycle():
    graph, _ = graph_and_problems(PACKAGE, "hetmem")
    assert find_cycle(graph) is None


def test_imports_at_module_top():
    _, problems = graph_and_problems(PACKAGE, "hetmem")
    assert problems == []


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_a_planted_cycle_is_found(tmp_path):
    root = _plant(
        tmp_path,
        {
            "a.py": "from pkg import b\n",
            "b.py": "from pkg.sub import c\n",
            "sub/__init__.py": "",
            "sub/c.py": "import pkg.a\n",
        },
    )
    graph, _ = graph_and_problems(root, "pkg")
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]


@pytest.mark.parametrize(
    "body, problem",
    [
        ("def f():\n    from pkg import a\n", "import inside a function"),
        ("def f():\n    import json\n", "import inside a function"),
        ("def f():\n    import scipy\n", "without a '# lazy: why' comment"),
    ],
)
def test_a_planted_local_import_is_found(tmp_path, body, problem):
    root = _plant(tmp_path, {"a.py": "", "b.py": body})
    _, problems = graph_and_problems(root, "pkg")
    assert len(problems) == 1 and problem in problems[0]


def test_a_commented_lazy_import_passes(tmp_path):
    body = "def f():\n    # lazy: start-up time\n    import scipy\n"
    root = _plant(tmp_path, {"b.py": body})
    assert graph_and_problems(root, "pkg")[1] == []
