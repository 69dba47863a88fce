"""``python -m pcgeom.bench``: the entry the memory and scaling probes start their fresh processes with."""

import sys

from pcgeom.bench import main

sys.exit(main())
