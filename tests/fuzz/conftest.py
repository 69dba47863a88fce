"""The fuzz suite's case count (the ``fuzz`` marker is registered in pyproject.toml): a summary of the examples run per test at the end of the
session, also written as JSON to ``$PCGEOM_FUZZ_REPORT`` when set (docs/guides/robustness.md)."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

HERE = pathlib.Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    # Every test in this folder is a fuzz test, and fuzz tests are slow (pyproject's marker text):
    # the fast lane (-m "not slow") leaves them all out, whichever decorator a file uses.
    for item in items:
        if HERE in pathlib.Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.fuzz)


def pytest_terminal_summary(terminalreporter):
    try:
        from tests.fuzz.strategies import COUNTS, LONG
    except ImportError:  # hypothesis missing: the fuzz modules were skipped
        return
    if not COUNTS:
        return
    total = sum(COUNTS.values())
    terminalreporter.write_sep("-", f"pcgeom fuzz: {total} cases ({'long' if LONG else 'short'} run)")
    for name, n in sorted(COUNTS.items()):
        terminalreporter.write_line(f"{n:8d}  {name}")
    path = os.environ.get("PCGEOM_FUZZ_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"long": LONG, "total": total, "per_test": dict(sorted(COUNTS.items()))}, f, indent=1)
