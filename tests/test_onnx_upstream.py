"""Unchanged upstream models export through pcgeom's shims and give the same answers in onnxruntime.

Pointnet2_PyTorch's SSG classifier, Point-MAE's ``Group`` + ``Encoder`` and
PyG's DGCNN example (for one cloud per call; PyG 2.5.3 from the ``test``
extra, through the torch_cluster stand-in, and PyG 2.8.1, installed like
tests/test_pyg.py does, through the pyg_lib stand-in) (vendored in
tests/upstream, see its README) are exported with
:func:`pcgeom.onnx.export` after ``pcgeom.compat.enable_shims()``, checked
with ``onnx.checker.check_model(full_check=True)``, and run in onnxruntime on
shapes other than the export's: Point-MAE's centres and neighbourhoods equal
eager PyTorch exactly, tokens and logits to float32 rounding.  The cases live
in tests/upstream/drive_onnx.py; each runs in a fresh interpreter from the
vendored repository's root, as the repositories' own commands do.
"""

import os
import subprocess
import sys

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

pytestmark = pytest.mark.slow  # two model exports and onnxruntime runs at 1024-2048 points, ~10 s each

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "upstream")

CASES = {"point_mae": "point_mae", "pointnet2_cls": "pointnet2_pytorch", "pyg_dgcnn": "pyg/examples",
         "pyg28_dgcnn": "pyg28/examples"}
PYG28 = "2.8.1"


def _pyg28_target() -> str:
    """PyG 2.8.1 (what ``pip install torch_geometric`` gives; its DGCNN calls ``torch.ops.pyg.knn``), installed
    ``--no-deps --target`` into the folder tests/test_pyg.py uses, once; ``PCGEOM_TEST_PYG28`` names another."""
    target = os.environ.get("PCGEOM_TEST_PYG28") or os.path.join(sys.prefix, "pcgeom-test-pyg", PYG28)
    if os.path.isdir(os.path.join(target, f"torch_geometric-{PYG28}.dist-info")):
        return target
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--disable-pip-version-check",
         "--target", target, f"torch_geometric=={PYG28}"],
        capture_output=True, text=True, timeout=300,
    )
    if proc.returncode != 0:
        msg = f"cannot install torch_geometric=={PYG28} into {target}: {proc.stderr[-800:]}"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return target


@pytest.mark.parametrize("case", sorted(CASES))
def test_upstream_model_exports_and_matches_in_onnxruntime(case, tmp_path):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.setdefault("MPLBACKEND", "Agg")  # Point-MAE's utils/misc.py imports pyplot
    root = os.path.dirname(HERE)
    env["PYTHONPATH"] = os.path.dirname(root)  # this checkout's pcgeom, not an installed one
    if case == "pyg28_dgcnn":  # PyG 2.8.1 first, before the test extra's PyG 2.5.3
        env["PYTHONPATH"] = _pyg28_target() + os.pathsep + env["PYTHONPATH"]
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "drive_onnx.py"), case, str(tmp_path / f"{case}.onnx")],
        cwd=os.path.join(HERE, CASES[case]), env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, f"{case} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert f"OK {case}" in proc.stdout
    assert (tmp_path / f"{case}.onnx").exists()
