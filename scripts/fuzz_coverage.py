"""Which fuzz test covers each public function of pcgeom and of each stand-in (issue #30: every one must be).

    python scripts/fuzz_coverage.py          # the table; exit status 1 when a name is covered by no test

A public name is one in ``pcgeom.__all__`` or a stand-in module's ``__all__`` (classes
included, result types and version strings left out).  A fuzz test (a ``test_*`` function in
``tests/fuzz/test_fuzz_*.py``) covers ``module.name`` when its body reads ``name`` from an alias
bound to ``module`` (``pointops.ball_query``, ``from ... import ball_query``) or holds the
string ``"name"`` next to a read of that module (``getattr(torch_scatter, f"scatter_{r}")``
is listed through ``REDIRECTS``).  It is a static read: it says a test calls the function,
not that the test checks its answer; the tests themselves compare with float64 oracles.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
FUZZ = ROOT / "tests" / "fuzz"

MODULES = [
    "pcgeom",
    "pcgeom.compat.chamfer_ext", "pcgeom.compat.densefusion", "pcgeom.compat.knn_cuda",
    "pcgeom.compat.point_mae", "pcgeom.compat.pointnet2_modules", "pcgeom.compat.pointnet2_ops",
    "pcgeom.compat.pointops", "pcgeom.compat.pointops_cuda", "pcgeom.compat.simple_knn",
    "pcgeom.compat.torch_cluster", "pcgeom.compat.torch_scatter",
    "pcgeom.compat.pyg_lib.ops", "pcgeom.compat.pyg_lib.sampler",
    "pcgeom.compat.pytorch3d.ops", "pcgeom.compat.pytorch3d.loss", "pcgeom.compat.pytorch3d.structures",
    "pcgeom.compat.pytorch3d.transforms",
]
# Not functions: result containers and the names a test reads off a result, version strings, an exception type.
SKIP = {"GridSubsampleResult", "GroupLevel", "KNNResult", "NormalsResult", "SerializedOrder",
        "__version__", "cuda_version", "PointWebArgumentError", "ICPSolution", "SimilarityTransform"}
# Names a test reaches by a computed attribute: (module, name) -> the string the test spells.
REDIRECTS = {
    ("pcgeom.compat.torch_scatter", n): "scatter_" for n in ("scatter_sum", "scatter_add", "scatter_mul",
                                                             "scatter_mean", "scatter_min", "scatter_max")
}
REDIRECTS.update({("pcgeom.compat.torch_scatter", f"segment_{r}_{k}"): f"segment_{{}}_{k}"
                  for r in ("sum", "add", "mean", "min", "max") for k in ("csr", "coo")})


def public_names(modname: str) -> list[str]:
    mod = importlib.import_module(modname)
    return [n for n in getattr(mod, "__all__", []) if n not in SKIP]


def _aliases(tree: ast.Module) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """alias -> module for module imports; alias -> (module, name) for names imported from a module."""
    mods, names = {}, {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                mods[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in MODULES or full.startswith("pcgeom.compat."):
                    mods[a.asname or a.name] = full
                names[a.asname or a.name] = (node.module, a.name)
    return mods, names


def _dotted(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def covering_tests() -> dict[tuple[str, str], set[str]]:
    found: dict[tuple[str, str], set[str]] = {}
    for path in sorted(FUZZ.glob("test_fuzz_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        mods, names = _aliases(tree)
        helpers = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("test_")}
        for fn in tree.body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_")):
                continue
            test = f"{path.name}::{fn.name}"
            # a test's module-level helpers (called by name) count as its body
            bodies, seen, todo = [], set(), [fn]
            while todo:
                f = todo.pop()
                if f.name in seen:
                    continue
                seen.add(f.name)
                bodies.append(f)
                todo += [helpers[n.id] for n in ast.walk(f) if isinstance(n, ast.Name) and n.id in helpers]
            strings = {n.value for f in bodies for n in ast.walk(f) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            strings |= {v.value for f in bodies for n in ast.walk(f) if isinstance(n, ast.JoinedStr)
                        for v in n.values if isinstance(v, ast.Constant)}
            used_mods = set()
            for f in bodies:
                for n in ast.walk(f):
                    d = _dotted(n) if isinstance(n, ast.Attribute) else None
                    if d:
                        head, _, rest = d.partition(".")
                        if head in mods:
                            full = f"{mods[head]}.{rest}"
                            mod, _, name = full.rpartition(".")
                            found.setdefault((mod, name), set()).add(test)
                            # a dotted read such as pcgeom.compat.pointops.knn_query also counts
                            found.setdefault((full.rpartition(".")[0], full.rpartition(".")[2]), set()).add(test)
                    if isinstance(n, ast.Name):
                        if n.id in mods:
                            used_mods.add(mods[n.id])
                        if n.id in names:
                            found.setdefault(names[n.id], set()).add(test)
            for mod in used_mods:
                for s in strings:
                    found.setdefault((mod, s), set()).add(test)
                for (rmod, name), spelled in REDIRECTS.items():
                    if rmod == mod and any(spelled.split("{}")[0] in s for s in strings):
                        found.setdefault((rmod, name), set()).add(test)
    return found


def coverage(found: dict[tuple[str, str], set[str]]) -> list[tuple[str, str, list[str]]]:
    """``(module, name, tests)`` for every public name, ``tests`` empty where none calls it."""
    rows = []
    for mod in MODULES:
        for name in public_names(mod):
            tests = sorted(found.get((mod, name), ()))
            # pcgeom's top-level names are re-exports: a read through one of its own submodules counts too
            if not tests and mod == "pcgeom":
                tests = sorted({t for (m, n), ts in found.items()
                                if n == name and m.startswith("pcgeom.") and not m.startswith("pcgeom.compat") for t in ts})
            rows.append((mod, name, tests))
    return rows


def main() -> int:
    sys.path.insert(0, str(ROOT))
    rows = coverage(covering_tests())
    for mod, name, tests in rows:
        print(f"{mod}.{name}: {', '.join(tests) if tests else 'NOT FUZZED'}")
    missing = sum(not tests for _, _, tests in rows)
    print(f"{missing} public names without a fuzz test")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
