"""Pause ``pcgeom group`` at a known point, so that a test's signal lands mid-run by construction, not by timing.

``pause_env`` writes a ``sitecustomize.py`` that wraps ``pcgeom.cli.group._group_one``: after the
process (or one torchrun rank) has finished and published ``after`` files, it creates ``marker`` and
sleeps until a signal ends it.  A test waits for the marker, then signals: the run is then always
between two files, with the rest still to do (waiting for the first output and signalling raced the
run: on a fast or a loaded machine the signal could land before the first file or after the last).
"""

from __future__ import annotations

import os
from pathlib import Path

_HOOK = '''
import os
if os.environ.get("PCGEOM_TEST_PAUSE_AFTER"):
    import time
    import pcgeom.cli.group as _g

    _orig, _done = _g._group_one, [0]

    def _group_one(*args, **kwargs):
        res = _orig(*args, **kwargs)
        _done[0] += 1
        rank = os.environ.get("PCGEOM_TEST_PAUSE_RANK")
        if _done[0] == int(os.environ["PCGEOM_TEST_PAUSE_AFTER"]) and rank in (None, os.environ.get("RANK", "0")):
            open(os.environ["PCGEOM_TEST_PAUSE_MARK"], "w").close()
            while True:  # until the test's signal
                time.sleep(3600)
        return res

    _g._group_one = _group_one
'''


def pause_env(tmp_path: Path, root: Path, *, after: int = 1, rank: int | None = None) -> tuple[dict, Path]:
    """``(env, marker)`` for a ``pcgeom group`` subprocess that pauses after ``after`` files (on ``rank`` only)."""
    hook = tmp_path / "pause-hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(_HOOK, encoding="utf-8")
    marker = tmp_path / "paused"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), str(root)]),
           "PCGEOM_TEST_PAUSE_AFTER": str(after), "PCGEOM_TEST_PAUSE_MARK": str(marker)}
    if rank is not None:
        env["PCGEOM_TEST_PAUSE_RANK"] = str(rank)
    return env, marker


def wait_for(marker: Path, proc, seconds: float = 300) -> None:
    """Until ``marker`` exists; fails with the process's output if it ended first."""
    import time

    deadline = time.monotonic() + seconds
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"no pause within {seconds} s"
        time.sleep(0.01)
