"""``python -m pcgeom``: the same command line as ``pcgeom`` (:mod:`pcgeom.cli`)."""

import sys

from pcgeom.cli import main

sys.exit(main())
