"""The import graph of `powertrip/`, `services/`, `bench/` and `reproduction/`: no circle
(issue #17) and
the floors of the library (issue #32), counting every import in a file: module level,
inside functions and under TYPE_CHECKING alike, and package __init__ re-exports. A
function-body import hides a dependency from the interpreter, not from a reader.

The floors, bottom up (`powertrip/__init__.py` says what each holds):

* core (`powertrip.core`): imports only the core, and neither gRPC nor protobuf;
* edge (`powertrip.v1`, `powertrip.rpc`, `powertrip.linkshaping`): core and edge;
* each service (`services.<name>`): core, edge and its own package, never another service;
* application (`powertrip.app`): any floor of the library, never a service (it starts them
  as processes by module name);
* the paper's reproduction (`reproduction`, beside the library, issue #66): any floor of the
  library and itself, never a service; nothing in the library, the services or `bench/`
  imports it (the CLI finds `reproduction.cli` by name, in one place).

Nothing imports the application but the entry point `powertrip.__main__` (and `bench/`, a
harness that drives the product as a user does, and the reproduction, which builds on it).
The bare `powertrip` package (its `__version__`) is below every floor.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


PACKAGES = ("powertrip", "services", "bench", "reproduction")


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package __init__) for every .py under root/package."""
    found: dict[str, tuple[Path, bool]] = {}
    paths = (path for package in packages for path in sorted((root / package).rglob("*.py")))
    for path in paths:
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


def import_graph(root: Path, package: str | tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """module -> the modules of `package`(s) it imports anywhere in its file.

    `from P import n` depends on P.n when that is a module, else on P (n is a name P's
    __init__ defines). Importing a module also runs its parent packages' __init__, so those
    count too, except the importer's own parents: they are already imported before it runs.
    """
    modules = module_files(root, (package,) if isinstance(package, str) else package)
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


def external_imports(path: Path) -> set[str]:
    """The top-level names of every module a file imports (grpc, google, numpy, ...)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


EDGE = ("powertrip.v1", "powertrip.rpc", "powertrip.linkshaping")
#: third-party packages the core must not import: it is the floor without the wire
CORE_FORBIDDEN = {"grpc", "google", "grpc_health", "grpc_reflection"}


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def floor(module: str) -> str:
    """The floor a module belongs to: core, edge, app, service:<name>, bench, reproduction,
    entry, root."""
    if module == "powertrip":
        return "root"
    if module == "powertrip.__main__":
        return "entry"
    if _under(module, ("powertrip.core",)):
        return "core"
    if _under(module, EDGE):
        return "edge"
    if _under(module, ("powertrip.app",)):
        return "app"
    if module == "services":
        return "root"
    if module.startswith("services."):
        return "service:" + module.split(".")[1]
    if _under(module, ("bench",)):
        return "bench"
    if _under(module, ("reproduction",)):
        return "reproduction"
    return "loose"


#: floor -> the floors it may import ("service" = its own service only)
ALLOWED: dict[str, set[str]] = {
    "core": {"root", "core"},
    "edge": {"root", "core", "edge"},
    "app": {"root", "core", "edge", "app"},
    "entry": {"root", "app"},
    "service": {"root", "core", "edge"},
    "bench": {"root", "core", "edge", "app", "bench", "service"},
    "reproduction": {"root", "core", "edge", "app", "reproduction"},
    "root": {"root"},
}


def layer_violations(graph: dict[str, set[str]], files: dict[str, tuple[Path, bool]]) -> list[str]:
    """Every import that goes against the floors, as 'importer -> imported (why)'."""
    found: list[str] = []
    for module, imported in sorted(graph.items()):
        mine = floor(module)
        if mine == "loose":
            found.append(f"{module}: in no floor (move it into core, rpc or app)")
            continue
        kind = "service" if mine.startswith("service:") else mine
        for target in sorted(imported):
            theirs = floor(target)
            if theirs.startswith("service:"):
                if theirs == mine or kind == "bench":
                    continue
                found.append(f"{module} -> {target} (imports a service)")
            elif theirs not in ALLOWED[kind]:
                found.append(f"{module} -> {target} ({mine} may not import {theirs})")
        if mine == "core":
            path = files[module][0]
            for name in sorted(external_imports(path) & CORE_FORBIDDEN):
                found.append(f"{module} -> {name} (the core imports no gRPC or protobuf)")
    return found


def test_no_import_cycles():
    cycles = find_cycles(import_graph(ROOT))
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_library_keeps_its_floors():
    files = module_files(ROOT, PACKAGES)
    found = layer_violations(import_graph(ROOT), files)
    assert not found, "imports against the floors:\n" + "\n".join(found)


def test_nothing_in_the_library_or_the_services_imports_the_reproduction():
    """The reproduction builds on the library, never the reverse: no module of powertrip/,
    services/ or bench/ imports one of reproduction/, anywhere in its file."""
    graph = import_graph(ROOT)
    found = sorted(
        f"{module} -> {target}"
        for module, imported in graph.items()
        if not _under(module, ("reproduction",))
        for target in imported
        if _under(target, ("reproduction",))
    )
    assert not found, "imports of the reproduction:\n" + "\n".join(found)
    assert any(_under(m, ("reproduction",)) for m in graph), "reproduction/ is not in the graph"


def test_the_reproduction_imports_no_service():
    graph = import_graph(ROOT)
    found = sorted(
        f"{module} -> {target}"
        for module, imported in graph.items()
        if _under(module, ("reproduction",))
        for target in imported
        if floor(target).startswith("service:")
    )
    assert not found, "the reproduction imports a service:\n" + "\n".join(found)


def _module_names(path: Path) -> list[str]:
    """String constants in a file that name a module of the reproduction ('reproduction.cli')."""
    return [
        node.value
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"reproduction(\.\w+)*", node.value)
    ]


def test_the_library_names_the_reproduction_only_for_its_command():
    """The one way in from the library: cliparser.py imports `reproduction.cli` by name (for
    `powertrip reproduce`); no other module of powertrip/ or services/ names a module of it."""
    named = {
        str(path.relative_to(ROOT)): names
        for package in ("powertrip", "services")
        for path in sorted((ROOT / package).rglob("*.py"))
        if (names := _module_names(path))
    }
    assert named == {"powertrip/app/cliparser.py": ["reproduction.cli"]}


def test_no_loose_module_at_the_library_root():
    """Every module of powertrip/ is in a floor's folder but the package and its entry."""
    loose = sorted(
        p.name
        for p in (ROOT / "powertrip").glob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    )
    assert not loose, f"modules at powertrip/'s root: {loose}"


def _plant(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_floor_check_fails_on_planted_violations(tmp_path: Path):
    """The check can fail: a core module importing the application, a service importing
    another service, the core importing grpc, an edge module reading a service, the
    application importing the reproduction and the reproduction importing a service."""
    _plant(
        tmp_path,
        {
            "powertrip/__init__.py": "",
            "powertrip/core/__init__.py": "",
            "powertrip/core/math.py": (
                "import grpc\n\ndef f():\n    from powertrip.app import cli\n"
            ),
            "powertrip/rpc/__init__.py": "",
            "powertrip/rpc/wire.py": "from services.policy import servicer\n",
            "powertrip/app/__init__.py": "",
            "powertrip/app/cli.py": "from powertrip.core import math\n",
            "services/__init__.py": "",
            "services/policy/__init__.py": "",
            "services/policy/servicer.py": "from powertrip.core import math\n",
            "services/aggregator/__init__.py": "",
            "services/aggregator/loop.py": "from services.policy.servicer import X\n",
            "bench/__init__.py": "",
            "bench/b.py": "from services.policy import servicer\nfrom powertrip.app import cli\n",
            "powertrip/app/paper.py": "def f():\n    from reproduction import figures\n",
            "reproduction/__init__.py": "",
            "reproduction/figures.py": "from services.policy import servicer\n",
        },
    )
    packages = ("powertrip", "services", "bench", "reproduction")
    graph = import_graph(tmp_path, packages)
    found = layer_violations(graph, module_files(tmp_path, packages))
    assert found == [
        "powertrip.app.paper -> reproduction (app may not import reproduction)",
        "powertrip.app.paper -> reproduction.figures (app may not import reproduction)",
        "powertrip.core.math -> powertrip.app (core may not import app)",
        "powertrip.core.math -> powertrip.app.cli (core may not import app)",
        "powertrip.core.math -> grpc (the core imports no gRPC or protobuf)",
        "powertrip.rpc.wire -> services.policy (imports a service)",
        "powertrip.rpc.wire -> services.policy.servicer (imports a service)",
        "reproduction.figures -> services.policy (imports a service)",
        "reproduction.figures -> services.policy.servicer (imports a service)",
        "services.aggregator.loop -> services.policy (imports a service)",
        "services.aggregator.loop -> services.policy.servicer (imports a service)",
    ]


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
