"""No import circle among powertrip modules (issue #17), counting every import in a file:
module level, inside functions and under TYPE_CHECKING alike, and package __init__
re-exports. A function-body import hides a circle from the interpreter, not from a reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_files(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package __init__) for every .py under root/package."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, is_package)
    return found


def _known(name: str, modules: dict[str, tuple[Path, bool]]) -> str | None:
    """The longest prefix of a dotted name that is one of our modules (a.b.func -> a.b)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(root: Path, package: str = "powertrip") -> dict[str, set[str]]:
    """module -> the modules of `package` it imports anywhere in its file.

    `from P import n` depends on P.n when that is a module, else on P (n is a name P's
    __init__ defines). Importing a module also runs its parent packages' __init__, so those
    count too, except the importer's own parents: they are already imported before it runs.
    """
    modules = module_files(root, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        here = name if is_package else name.rpartition(".")[0]
        targets: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join([*parts, *([base] if base else [])])
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in modules else base)
        own_parents = set(_ancestors(name))
        for target in targets:
            resolved = _known(target, modules)
            if resolved is None or resolved == name:
                continue
            graph[name].add(resolved)
            graph[name].update(
                parent
                for parent in _ancestors(resolved)
                if parent in modules and parent not in own_parents and parent != name
            )
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One concrete circle (a -> b -> ... -> a) per strongly connected group of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan; the graph is small, recursion is fine
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_circle(graph, group) for group in groups]


def _circle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """The shortest path from the group's first module back to itself, within the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & group):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no circle through {start} in {sorted(group)}")


def test_no_import_cycles_in_powertrip():
    cycles = find_cycles(import_graph(ROOT))
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_check_sees_a_function_body_circle(tmp_path: Path):
    """The check can fail: a circle closed only inside a function is still reported."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg.a import f\n")
    (pkg / "a.py").write_text("from pkg import b\n\ndef f():\n    return b.g()\n")
    (pkg / "b.py").write_text("def g():\n    from pkg.a import f\n    return f\n")
    (pkg / "c.py").write_text("from pkg.a import f\n")
    assert find_cycles(import_graph(tmp_path, "pkg")) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_the_check_sees_a_circle_through_a_package_init(tmp_path: Path):
    """A submodule reading a name its package's __init__ defines, which imports it back."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg.a import f\nNAME = 1\n")
    (pkg / "a.py").write_text("def f():\n    from pkg import NAME\n    return NAME\n")
    assert find_cycles(import_graph(tmp_path, "pkg")) == [["pkg", "pkg.a", "pkg"]]
