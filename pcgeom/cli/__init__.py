"""The ``pcgeom`` command line (also ``python -m pcgeom``): one module per subcommand.

Each subcommand module ``pcgeom.cli.<name>`` has ``HELP`` (and optionally ``DESCRIPTION``, ``ADD_HELP``),
``add_arguments(parser)`` and ``run(args)``;
:mod:`pcgeom.cli.common` holds what they share.  ``build_parser()`` is what the docs' CLI reference is
generated from.
"""

from __future__ import annotations

import argparse
import sys

from pcgeom.cli import bench, compat, demo, doctor, group, preprocess

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pcgeom", description="pcgeom: exact KNN and FPS for point clouds.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (doctor, compat, bench, demo, group, preprocess):  # the order of --help
        name = command.__name__.rsplit(".", 1)[1]
        extra = {k.lower(): getattr(command, k) for k in ("DESCRIPTION", "ADD_HELP") if hasattr(command, k)}
        p = sub.add_parser(name, help=command.HELP, **extra)
        command.add_arguments(p)
        p.set_defaults(func=command.run)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        # argparse's REMAINDER cannot pass a leading option such as --help through,
        # so the benchmark's own parser gets its arguments untouched.
        from pcgeom import bench

        return bench.main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
