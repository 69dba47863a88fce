"""The import finder behind pcgeom's shims -- deliberately tiny and standalone.

``pcgeom compat enable`` copies this file into site-packages (as
``_pcgeom_shim_hook.py``) next to a ``pcgeom-shims.pth`` whose one line calls
:func:`install` at interpreter start-up.  So it must not import torch or
pcgeom: it only puts a finder at the end of ``sys.meta_path``.  The finder
answers for the shimmed module names only, and only when no other finder can
find them (a real installed extension always wins); then, and only then,
``pcgeom.compat.shims`` is imported to build the module.

``pcgeom.compat.enable_shims()`` installs the same finder in the current process.
Set ``PCGEOM_DISABLE_SHIMS=1`` to switch the start-up hook off for one process:
the ``.pth`` line checks it before even importing this file.

Start-up cost: this module imports only ``os`` and ``sys``, which every
interpreter has loaded before ``.pth`` files run, so an interpreter that never
imports a shimmed name loads exactly one extra module (this one), and none
with ``PCGEOM_DISABLE_SHIMS=1``.  Everything else (``importlib.util``,
pcgeom, torch) is imported inside :meth:`ShimFinder.find_spec`, and only for
a shimmed name.
"""

import os
import sys

OFF_VALUES = ("1", "true", "yes", "on")

_MARK = "_pcgeom_shim_finder"


class ShimFinder:
    """A meta-path finder serving ``names`` from pcgeom when nothing else can."""

    _pcgeom_shim_finder = True

    def __init__(self, names, origin):
        self.names = frozenset(names)
        self.origin = origin  # "process" (enable_shims) or "environment" (the .pth hook)
        self._busy = set()

    def __repr__(self):
        return f"<pcgeom ShimFinder ({self.origin}): {', '.join(sorted(self.names))}>"

    def real_spec(self, fullname, path=None):
        """The spec another finder on sys.meta_path gives ``fullname``, or None."""
        if fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            for finder in list(sys.meta_path):
                if getattr(finder, _MARK, False):
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                try:
                    spec = find(fullname, path)
                except (ImportError, AttributeError, ValueError):
                    spec = None
                if spec is not None:
                    return spec
            return None
        finally:
            self._busy.discard(fullname)

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.names or fullname in self._busy:
            return None
        parent = fullname.rpartition(".")[0]
        if parent and getattr(sys.modules.get(parent), "__pcgeom_shim__", None) is None:
            return None  # a submodule is served only inside a served package, never grafted onto a real one
        if self.real_spec(fullname, path) is not None:
            return None  # a real extension is installed: let it load
        if "pcgeom" not in sys.modules:
            import importlib.util  # deferred: only a shimmed name's lookup pays for it

            if importlib.util.find_spec("pcgeom") is None:
                return None  # pcgeom was uninstalled but the hook stayed behind
        from pcgeom.compat import shims

        return shims.shim_spec(fullname, self)


def installed_finders():
    return [f for f in sys.meta_path if getattr(f, _MARK, False)]


def disabled_by_env() -> bool:
    """True when ``PCGEOM_DISABLE_SHIMS`` is set to 1/true/yes/on (any case)."""
    return os.environ.get("PCGEOM_DISABLE_SHIMS", "").strip().lower() in OFF_VALUES


def install(names, origin="environment"):
    """Appends a :class:`ShimFinder` for ``names`` to ``sys.meta_path`` (idempotent per origin).

    Args:
        names: the module names to serve (``pcgeom.compat.shims.SHIMS``' keys,
            frozen into the ``.pth`` line when the hook is written).
        origin: ``"environment"`` (the ``.pth`` start-up hook, which
            ``PCGEOM_DISABLE_SHIMS=1`` switches off) or ``"process"``
            (:func:`pcgeom.compat.enable_shims`).

    Returns:
        The finder, or None when the environment hook is disabled by the variable.

    Example:
        >>> from pcgeom.compat import _shim_hook
        >>> f = _shim_hook.install(["knn_cuda"], origin="doctest")
        >>> "knn_cuda" in f.names, _shim_hook.uninstall("doctest")
        (True, 1)
    """
    if origin == "environment" and disabled_by_env():
        return None
    for f in installed_finders():
        if f.origin == origin:
            f.names = frozenset(names)
            return f
    finder = ShimFinder(names, origin)
    sys.meta_path.append(finder)
    return finder


def uninstall(origin):
    """Removes the finders of one origin; returns how many were removed."""
    gone = [f for f in installed_finders() if f.origin == origin]
    for f in gone:
        sys.meta_path.remove(f)
    return len(gone)
