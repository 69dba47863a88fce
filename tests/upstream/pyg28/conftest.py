"""PyG 2.8.1's own tests, run twice by ``tests/test_pyg.py``: without pcgeom and through the pyg_lib stand-in.

This folder runs only when ``tests/test_pyg.py`` drives it, in a fresh
interpreter with PyG 2.8.1 first on ``sys.path`` and ``PCGEOM_PYG_DRIVE`` set;
``PCGEOM_PYG_STANDIN=1`` enables the shims (``pcgeom compat enable``) before PyG
is imported, ``0`` runs PyG as a user without pyg-lib has it.  A plain
``pytest`` over pcgeom's suite does not collect this folder.
"""

import os

if os.environ.get("PCGEOM_PYG_DRIVE"):
    if os.environ.get("PCGEOM_PYG_STANDIN") == "1":
        import pcgeom.compat

        pcgeom.compat.enable_shims()
    collect_ignore_glob: list = []
else:
    collect_ignore_glob = ["*"]
