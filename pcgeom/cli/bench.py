"""``pcgeom bench``: hands its arguments to :mod:`pcgeom.bench`, which parses them itself."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="run the benchmark workloads against the installed peers", add_help=False)
    p.add_argument("bench_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)


def run(args) -> int:
    # The benchmark lives in pcgeom.bench and parses its own options.
    from pcgeom import bench

    return bench.main(args.bench_args)
