"""How far one round wanders (issue #32, item 6): the round path is `RoundLoop.run_round` and
every `RoundLoop` method it reaches. Counted statically, from round_loop.py's source:

* **modules**: the other modules the round path uses directly, by the names round_loop.py
  imports from them and the collaborators `__init__` builds (`self.state`, `self.clock`, ...);
* **hops**: the calls in the round path that leave the loop (to a collaborator, an imported
  function or class, or a method of an object the round holds) and so come back to it;
  calls to the loop's own methods, builtins, `log` and `time` are not hops.

The bounds below are today's counts: the test fails if the round path grows back. Run this
file as a script to print the counts and the modules (`python tests/unit/test_round_path_shape.py`).
"""

from __future__ import annotations

import ast
import builtins
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROUND_LOOP = ROOT / "services" / "aggregator" / "round_loop.py"
#: the counts after #32 item 6. Before it: 19 modules and 44 hops when the issue was filed
#: (commit 519a2fe), 19 and 52 once the clock objects' wall phases were stamped (83ae448)
MAX_MODULES = 15
MAX_HOPS = 41
CONSTANT = "<constant>"
NOT_HOPS = {"log", "time", CONSTANT, *dir(builtins)}
#: only the project's own modules count (numpy, time and typing are not the round's path)
PROJECT = ("services.", "powertrip.")


def _imports(tree: ast.Module) -> dict[str, str]:
    """Imported name -> its module."""
    names = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name] = alias.name
    return names


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    if isinstance(node, ast.Constant):
        return CONSTANT  # ", ".join(...): a method of a literal
    return node.id if isinstance(node, ast.Name) else None


def _self_attr(node: ast.expr) -> str | None:
    """'state' for self.state.x.y(...); None when the chain does not start at self."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        inner = node.func if isinstance(node, ast.Call) else node.value
        if isinstance(node, ast.Attribute) and isinstance(inner, ast.Name) and inner.id == "self":
            return node.attr
        node = inner
    return None


def _body_nodes(method: ast.FunctionDef):
    """Every node of the method's statements, annotations left out (a name used only as a
    type is not a module the round passes through)."""
    for statement in method.body:
        for node in ast.walk(statement):
            if isinstance(node, ast.AnnAssign):
                yield from ast.walk(node.target)
                if node.value is not None:
                    yield from ast.walk(node.value)
                continue
            yield node


def _collaborators(init: ast.FunctionDef, imports: dict[str, str]) -> dict[str, str]:
    """self.<attr> -> the module of what __init__ puts there (a call to an imported name,
    or a parameter annotated with one)."""
    annotations = {
        a.arg: a.annotation.id for a in init.args.args if isinstance(a.annotation, ast.Name)
    }
    found = {}
    for node in ast.walk(init):
        if isinstance(node, ast.AnnAssign):  # self.recorder: RunRecorder | None = None
            target = node.target
            names = [n.id for n in ast.walk(node.annotation) if isinstance(n, ast.Name)]
            name = next((n for n in names if n in imports), None)
            if isinstance(target, ast.Attribute) and _root_name(target) == "self" and name:
                found[target.attr] = imports[name]
            continue
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = node.targets[0]
        if not (isinstance(target, ast.Attribute) and _root_name(target) == "self"):
            continue
        value = node.value
        name = None
        if isinstance(value, ast.Call):
            name = _root_name(value.func)
        elif isinstance(value, ast.IfExp) and isinstance(value.body, ast.Call):
            name = _root_name(value.body.func)
        elif isinstance(value, ast.Name):
            name = annotations.get(value.id)
        if name in imports:
            found[target.attr] = imports[name]
    return found


def round_path_shape(source: str) -> tuple[set[str], int, Counter]:
    """(modules, hops, hops per module) of RoundLoop.run_round's path in `source`."""
    tree = ast.parse(source)
    imports = _imports(tree)
    loop = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RoundLoop")
    methods = {n.name: n for n in loop.body if isinstance(n, ast.FunctionDef)}
    collaborators = _collaborators(methods["__init__"], imports)
    local = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    path, todo = set(), ["run_round"]
    while todo:
        name = todo.pop()
        if name in path:
            continue
        path.add(name)
        for node in ast.walk(methods[name]):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
                and node.attr in methods
            ):
                todo.append(node.attr)
    modules: set[str] = set()
    per_module: Counter = Counter()
    hops = 0
    for name in sorted(path):
        for node in _body_nodes(methods[name]):
            if isinstance(node, ast.Name) and node.id in imports:
                modules.add(imports[node.id])
            if isinstance(node, ast.Attribute) and _self_attr(node) in collaborators:
                modules.add(collaborators[_self_attr(node)])
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            root = _root_name(func)
            attr = _self_attr(func)
            if root in NOT_HOPS or root in local or (root == "self" and attr in methods):
                continue  # builtins, log, time, or the loop's own code
            if root == "self":
                module = collaborators.get(attr or "", f"<self.{attr}>")
            else:
                module = imports.get(root or "", f"<held object {root}>")
            hops += 1
            per_module[module] += 1
    return {m for m in modules if m.startswith(PROJECT)}, hops, per_module


def test_the_round_path_does_not_grow_back():
    modules, hops, _ = round_path_shape(ROUND_LOOP.read_text())
    assert len(modules) <= MAX_MODULES, sorted(modules)
    assert hops <= MAX_HOPS


def test_the_count_sees_a_new_module_and_a_new_hop():
    source = ROUND_LOOP.read_text()
    modules, hops, _ = round_path_shape(source)
    planted = source.replace(
        "    def run_round(self, round_no: int) -> bool:\n",
        "    def run_round(self, round_no: int) -> bool:\n        planted_helper(round_no)\n",
    ).replace(
        "import logging\n",
        "import logging\nfrom services.aggregator.planted import planted_helper\n",
    )
    more_modules, more_hops, _ = round_path_shape(planted)
    assert more_modules == modules | {"services.aggregator.planted"} and more_hops == hops + 1


if __name__ == "__main__":
    modules, hops, per_module = round_path_shape(ROUND_LOOP.read_text())
    print(f"{len(modules)} modules, {hops} hops")
    for module, n in per_module.most_common():
        print(f"  {n:3d}  {module}")
    print("modules:", ", ".join(sorted(modules)))
    sys.exit(0)
