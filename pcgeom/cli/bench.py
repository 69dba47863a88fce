"""``pcgeom bench``: hands its arguments to :mod:`pcgeom.bench`, which parses them itself."""

from __future__ import annotations

import argparse

HELP = "run the benchmark workloads against the installed peers"
ADD_HELP = False


def add_arguments(p) -> None:
    p.add_argument("bench_args", nargs=argparse.REMAINDER)


def run(args) -> int:
    # The benchmark lives in pcgeom.bench and parses its own options.
    from pcgeom import bench

    return bench.main(args.bench_args)
