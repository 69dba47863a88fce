"""CPU benchmark of pcgeom against the installed peers, from a checkout.

The same as ``pcgeom bench`` (see :mod:`pcgeom.bench` for the method: the
workloads, interleaved median timing, peak memory in fresh processes, the
correctness check of every method, the scaling report).  Writes
``benchmarks/RESULTS.md`` when run from the repository root.

Usage::

    python benchmarks/bm_cpu.py                  # everything
    python benchmarks/bm_cpu.py --quick          # a few minutes
    python benchmarks/bm_cpu.py --workloads knn-self-8k,fps-scene --repeats 9
"""

import sys

from pcgeom.bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
