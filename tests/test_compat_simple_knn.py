"""pcgeom.compat.simple_knn: 3DGS's ``distCUDA2`` through the opt-in, against a float64 brute force."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import pcgeom.data
from pcgeom.compat.simple_knn import distCUDA2

FLT_MAX = float(np.finfo(np.float32).max)


def _brute(p):
    """Mean of the three smallest squared distances to other points, in float64."""
    p = np.asarray(p, dtype=np.float64)
    d = ((p[:, None, :] - p[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    d.sort(1)
    return d[:, :3].mean(1)


@pytest.mark.slow
def test_served_through_the_opt_in_and_called_like_gaussian_model(tmp_path):
    pts = pcgeom.data.load("bunny", n_points=2000, seed=0).double().numpy()
    pts[10] = pts[11]  # a duplicate pair: distance 0 counts
    np.save(tmp_path / "points.npy", pts)
    code = f"""
        import numpy as np, torch, pcgeom.compat
        try:
            import simple_knn
        except ImportError:
            pass
        else:
            raise SystemExit("simple_knn importable before the opt-in")
        pcgeom.compat.enable_shims()
        from simple_knn._C import distCUDA2
        import simple_knn
        assert simple_knn.__pcgeom_shim__ == "pcgeom.compat.simple_knn"
        points = np.load({str(tmp_path / "points.npy")!r})
        # scene/gaussian_model.py's create_from_pcd, on a CPU tensor instead of .cuda():
        dist2 = torch.clamp_min(distCUDA2(torch.from_numpy(np.asarray(points)).float()), 0.0000001)
        assert dist2.dtype == torch.float32 and dist2.shape == (len(points),)
        np.save({str(tmp_path / "dist2.npy")!r}, dist2.numpy())
        pcgeom.compat.disable_shims()
    """
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PCGEOM_DISABLE_SHIMS", None)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = np.load(tmp_path / "dist2.npy")
    want = np.maximum(_brute(pts.astype(np.float32)), 1e-7)
    np.testing.assert_allclose(got, want, rtol=4e-7, atol=0)  # float32 rounding of the float64 value
    assert got[10] == got[11] and got[10] < want.max()


def test_exact_values_and_tiny_clouds():
    p = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 2, 0], [0, 0, 3], [0, 0, 3]])
    got = distCUDA2(p)
    np.testing.assert_allclose(got.numpy(), _brute(p.numpy()).astype(np.float32), rtol=0, atol=0)
    three = distCUDA2(p[:3])
    assert three.tolist() == [np.float32(FLT_MAX) / np.float32(3)] * 3
    assert three[0].item() == pytest.approx(FLT_MAX / 3, rel=1e-7)
    assert distCUDA2(p[:2]).tolist() == [float("inf")] * 2
    assert distCUDA2(p[:1]).tolist() == [float("inf")]
    assert distCUDA2(p[:0]).shape == (0,)


def test_bad_inputs_are_named():
    with pytest.raises(TypeError, match="points must be float32"):
        distCUDA2(torch.zeros(5, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"points must have shape \(P, 3\)"):
        distCUDA2(torch.zeros(5, 2))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        distCUDA2(np.zeros((5, 3), dtype=np.float32))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_equals_cpu():
    p = torch.rand(5000, 3, generator=torch.Generator().manual_seed(1))
    out = distCUDA2(p.cuda())
    assert out.is_cuda
    torch.testing.assert_close(out.cpu(), distCUDA2(p), rtol=0, atol=0)
