"""One answer to "is a real, compiled install of this extension importable?", shared by the stand-ins.

A stand-in defines its ``torch.ops.<namespace>.*`` operators only when the real
extension is absent: the real one defines them itself when it is imported, and
defining them twice would fail (or worse, shadow the real kernels).  A real
install ships its native library beside its ``__init__.py`` (torch_cluster:
``_version_cpu.so``, ...; pyg-lib: ``libpyg.so``); a folder that merely has the
name (pcgeom's vendored upstream tests, a source checkout) does not, and must
not stop the stand-in.
"""

from __future__ import annotations

import importlib.machinery
import os

__all__ = ["real_package_installed"]

# Every suffix a native library can have: Python extension suffixes (``.cpython-311-x86_64-linux-gnu.so``,
# ``.abi3.so``, ``.pyd``) and the plain shared-library names torch.ops.load_library takes.
_NATIVE_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES) + (".so", ".dylib", ".dll", ".pyd")


def real_package_installed(name: str, library_prefix: str) -> bool:
    """Whether package ``name`` on ``sys.path`` ships a native library named ``library_prefix*``.

    Only ``sys.path`` is searched (``PathFinder``), never pcgeom's own shim
    finder, so a served stand-in never counts as an install.

    Args:
        name: the top-level package name (``"torch_cluster"``, ``"pyg_lib"``).
        library_prefix: how its native library's file name starts
            (``"_version"``, ``"libpyg"``).

    Returns:
        True when some folder of the package holds such a file.

    Example:
        >>> from pcgeom.compat._installed import real_package_installed
        >>> real_package_installed("surely_not_a_package_name", "lib")
        False
    """
    spec = importlib.machinery.PathFinder.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return False
    for folder in spec.submodule_search_locations:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        if any(n.startswith(library_prefix) and n.endswith(_NATIVE_SUFFIXES) for n in names):
            return True
    return False
