"""POSTECH-CVLab/point-transformer's unchanged ``pointops.py`` and model through pcgeom's
``pointops_cuda`` stand-in (see README.md).

That repository has no licence file, so it is not vendored: the test runs a checkout named by
``PCGEOM_POSTECH_POINT_TRANSFORMER`` and is skipped without one.
"""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # an upstream model end to end, in a subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = "PCGEOM_POSTECH_POINT_TRANSFORMER"


def test_postech_point_transformer_through_pointops_cuda():
    root = os.environ.get(ENV)
    if not root:
        pytest.skip(f"set {ENV} to a checkout of POSTECH-CVLab/point-transformer (not vendored: no licence)")
    for rel in ("lib/pointops/functions/pointops.py", "model/pointtransformer/pointtransformer_seg.py"):
        assert os.path.isfile(os.path.join(root, rel)), f"{ENV}={root} has no {rel}"
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "drive_postech.py")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert "OK postech" in proc.stdout
