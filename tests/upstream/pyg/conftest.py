"""PyG's own point-cloud tests through pcgeom's torch_cluster stand-in.

This folder runs only when ``tests/test_pyg.py`` drives it, in a fresh
interpreter per PyG version with that version first on ``sys.path`` and
``PCGEOM_PYG_DRIVE=<version>`` set; a plain ``pytest`` over the suite skips it
(there is no PyG in pcgeom's environment itself).  When driven, the shims are
enabled before PyG is imported, exactly as ``pcgeom compat enable`` would.
"""

import os

if os.environ.get("PCGEOM_PYG_DRIVE"):
    import pcgeom.compat

    pcgeom.compat.enable_shims()
    collect_ignore_glob: list = []
else:
    collect_ignore_glob = ["*"]
