"""The README's test command runs both halves (native kernels, then the op suite on the pure-torch
path), reports each and fails if either failed: scripts/run_halves.sh, driven with a stand-in
interpreter that records each call and exits with a chosen status."""

import os
import pathlib
import stat
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "run_halves.sh"


def _fake_python(tmp_path, native_rc, pure_rc):
    """A 'python' that logs its arguments and PCGEOM_DISABLE_EXT, and exits like pytest would."""
    log = tmp_path / "calls.log"
    py = tmp_path / "python"
    py.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "DISABLE=${{PCGEOM_DISABLE_EXT:-}} $*" >> {log}\n'
        f'if [ "${{PCGEOM_DISABLE_EXT:-}}" = 1 ]; then exit {pure_rc}; else exit {native_rc}; fi\n'
    )
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    return py, log


def _run(tmp_path, native_rc, pure_rc, mark="", *extra):
    py, log = _fake_python(tmp_path, native_rc, pure_rc)
    env = {k: v for k, v in os.environ.items() if k != "PCGEOM_DISABLE_EXT"}
    r = subprocess.run(["bash", str(SCRIPT), str(py), mark, *extra], capture_output=True, text=True,
                       env=env, timeout=60)
    return r, log.read_text().splitlines()


@pytest.mark.parametrize("native_rc,pure_rc,expect", [(0, 0, 0), (1, 0, 1), (0, 1, 1), (1, 1, 1), (2, 0, 1),
                                                      (5, 0, 0), (0, 5, 0), (5, 5, 5)])
def test_both_halves_always_run_and_either_failure_fails(tmp_path, native_rc, pure_rc, expect):
    r, calls = _run(tmp_path, native_rc, pure_rc)
    assert len(calls) == 2, calls  # the pure-torch half runs even after the native half failed
    assert calls[0].startswith("DISABLE= -m pytest -q")
    assert calls[1].startswith("DISABLE=1 -m pytest -q -m ops")
    assert r.returncode == expect, r.stdout + r.stderr
    summary = r.stdout[r.stdout.index("== summary"):]
    for rc, label in ((native_rc, "native kernels:"), (pure_rc, "pure-torch path:")):
        line = next(ln for ln in summary.splitlines() if label in ln)
        assert ("passed" if rc == 0 else "no test selected" if rc == 5 else f"FAILED (pytest exit {rc})") in line


def test_marker_and_options_reach_both_halves(tmp_path):
    r, calls = _run(tmp_path, 0, 0, "(not slow)", "-x", "-k", "knn and not cuda")
    assert r.returncode == 0
    assert calls[0] == "DISABLE= -m pytest -q -m (not slow) -x -k knn and not cuda"
    assert calls[1] == "DISABLE=1 -m pytest -q -m ops and (not slow) -x -k knn and not cuda"
