"""The house rules of docs/development.md, checked on the source: they hold because a test fails otherwise.

* A leading underscore means "used in this file only": no module of pcgeom imports another module's
  underscore name (an internal *module* such as ``pcgeom._validation`` may be imported; its shared
  names are plain).
* No import cycle between pcgeom's modules (module-level imports; a package's ``__init__`` importing its
  own children is how packages work and is not a cycle).
* Every module opens with a docstring that says what it holds.
"""

from __future__ import annotations

import ast
import importlib.util
import pathlib

import pytest

# The package that `import pcgeom` finds, located without importing it: the source tree in a
# checkout, site-packages when scripts/ci_wheels_job.sh runs the tests against an installed wheel.
PKG = pathlib.Path(importlib.util.find_spec("pcgeom").origin).parent
ROOT = PKG.parent


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        if p.name == "__main__.py":
            continue
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        out[name] = p
    return out


MODULES = _modules()


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _resolve(module: str, current: str, is_pkg: bool, level: int) -> str:
    if level == 0:
        return module
    base = current.split(".") if is_pkg else current.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _imports(name: str, path: pathlib.Path, top_level_only: bool):
    """(target module, imported name or None, node) for each pcgeom import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    if top_level_only:  # also imports inside top-level if/try blocks, not inside functions
        extra = []
        for n in tree.body:
            if isinstance(n, (ast.If, ast.Try)):
                extra += [m for m in ast.walk(n) if isinstance(m, (ast.Import, ast.ImportFrom))]
        nodes = nodes + extra
    is_pkg = path.name == "__init__.py"
    for n in nodes:
        if isinstance(n, ast.ImportFrom):
            mod = _resolve(n.module or "", name, is_pkg, n.level)
            if mod.split(".")[0] == "pcgeom":
                for a in n.names:
                    yield mod, a.name, n
        elif isinstance(n, ast.Import):
            for a in n.names:
                if a.name.split(".")[0] == "pcgeom":
                    yield a.name, None, n


def test_no_module_imports_another_module_s_private_name():
    bad = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {}  # local alias -> module it names
        for mod, imported, node in _imports(name, path, top_level_only=False):
            if imported is None:
                alias = next(a for a in node.names if a.name == mod)
                aliases[alias.asname or mod.split(".")[0]] = mod if alias.asname else "pcgeom"
                continue
            full = f"{mod}.{imported}"
            if full in MODULES:  # a submodule: internal modules may be imported by name
                aliases[next(a.asname or a.name for a in node.names if a.name == imported)] = full
            elif _is_private(imported) and mod != name:
                bad.append(f"{name}: from {mod} import {imported}")
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and _is_private(n.attr) and isinstance(n.value, ast.Name):
                target = aliases.get(n.value.id)
                if target and target != name and f"{target}.{n.attr}" not in MODULES:
                    bad.append(f"{name}: {n.value.id}.{n.attr} ({target})")
    assert not bad, "private names used across modules (give them a plain name in an internal module):\n" + "\n".join(sorted(set(bad)))


def test_no_import_cycles():
    graph = {}
    for name, path in MODULES.items():
        edges = set()
        for mod, imported, _ in _imports(name, path, top_level_only=True):
            target = f"{mod}.{imported}" if imported and f"{mod}.{imported}" in MODULES else mod
            while target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            # Importing a package runs its __init__; a package importing its own children is not a cycle.
            if target in MODULES and target != name and not name.startswith(target + ".") and target != "pcgeom":
                edges.add(target)
        graph[name] = edges

    index, low, stack, on, sccs = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    import sys

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    assert not sccs, f"import cycles: {sccs}"


# Every file, the ``__main__.py`` entry points included (they are no importable module, but a file a
# newcomer opens all the same).
FILES = {str(p.relative_to(ROOT)): p for p in sorted(PKG.rglob("*.py"))}


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_module_opens_with_a_docstring(name):
    tree = ast.parse(FILES[name].read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree)
    assert doc and len(doc.split()) >= 3, f"{name} has no opening docstring saying what it holds"
