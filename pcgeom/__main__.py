import sys

from pcgeom.cli import main

sys.exit(main())
