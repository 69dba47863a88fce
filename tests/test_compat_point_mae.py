"""Drop-ins: pcgeom.compat.point_mae (Group, fps, Chamfer modules) and pcgeom.compat.knn_cuda.KNN.

Point-MAE's Group is re-implemented here in float64 from its definition
(pointnet2 FPS kernel, simulated thread by thread, + brute-force sorted KNN
with ties to the lower index) and compared on the ShapeNet (1024/64/32),
ModelNet-8k (8192/512/32) and ScanObjectNN (2048/128/32) configurations.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pcgeom
from conftest import random_cloud, surface_cloud
from pcgeom.compat.knn_cuda import KNN
from pcgeom.compat.point_mae import ChamferDistanceL1, ChamferDistanceL2, Group, fps
from test_grouping import _np64, assert_knn_rows_equivalent, brute_knn, pointnet2_kernel_sim


def pc_norm(p: torch.Tensor) -> torch.Tensor:
    """Point-MAE's dataset normalisation: centroid to the origin, unit sphere."""
    p = p - p.mean(dim=-2, keepdim=True)
    return p / p.norm(dim=-1).amax(dim=-1, keepdim=True)[..., None]


def point_mae_group_f64(xyz: torch.Tensor, num_group: int, group_size: int):
    """Float64 Point-MAE Group: (neighborhood, center, center_idx, idx) per its definition."""
    out = []
    for b in range(xyz.shape[0]):
        p = _np64(xyz[b])
        c_idx = pointnet2_kernel_sim(p, num_group, dtype=np.float64)
        _, idx = brute_knn(p[c_idx], p, group_size)
        out.append((p[idx] - p[c_idx][:, None], p[c_idx], c_idx, idx))
    return [np.stack(t) for t in zip(*out)]


def _configs():
    # (N, G, M, B): ShapeNet pretrain / ModelNet-1k, ModelNet-8k, ScanObjectNN
    return [(1024, 64, 32, 2), (8192, 512, 32, 1), (2048, 128, 32, 2)]


@pytest.mark.parametrize("n,g,m,b", _configs())
@pytest.mark.parametrize("cloud", ["random", "surface"])
def test_group_parity_with_point_mae(device, n, g, m, b, cloud):
    maker = random_cloud if cloud == "random" else surface_cloud
    xyz = pc_norm(maker(b, n, device=device, seed=n + g).double()).float()
    if cloud == "random":  # a few points inside pointnet2's near-origin hole
        xyz[:, 5:25] *= 0.01
    nbhd, center, flat = Group(g, m, return_idx=True)(xyz)
    assert nbhd.shape == (b, g, m, 3) and center.shape == (b, g, 3)
    assert nbhd.dtype == center.dtype == torch.float32
    idx = (flat.view(b, g, m) - torch.arange(b, device=device).view(-1, 1, 1) * n).cpu().numpy()
    ref_nb, ref_c, ref_cidx, ref_idx = point_mae_group_f64(xyz, g, m)
    # centres: exact copies of the same points
    np.testing.assert_array_equal(_np64(center), ref_c)
    for bb in range(b):
        assert_knn_rows_equivalent(idx[bb], ref_idx[bb], ref_c[bb], _np64(xyz[bb]))
    same = idx == ref_idx
    np.testing.assert_allclose(_np64(nbhd)[same], ref_nb[same], rtol=0, atol=1e-7)
    # the neighbourhood is exactly (float32) the gathered points minus the centre
    gathered = torch.stack([xyz[bb][torch.as_tensor(idx[bb], device=device)] for bb in range(b)])
    assert torch.equal(nbhd, gathered - center[:, :, None])


@pytest.mark.parametrize("name,n,g", [("bunny", 1024, 64), ("kitten", 2048, 128)])
def test_group_parity_on_scans(name, n, g):
    pts = pcgeom.data.load(name, n_points=n, seed=3)  # bundled scans: a load error fails, never skips
    xyz = pc_norm(pts[None].double()).float()
    nbhd, center = Group(g, 32)(xyz)
    ref_nb, ref_c, _, ref_idx = point_mae_group_f64(xyz, g, 32)
    np.testing.assert_array_equal(_np64(center), ref_c)
    np.testing.assert_allclose(_np64(nbhd), ref_nb, rtol=0, atol=1e-6)


def test_group_as_point_mae_wrote_it(device):
    """Point-MAE's Group.forward, transcribed with the drop-in KNN and fps: same numbers as Group."""
    xyz = pc_norm(surface_cloud(3, 1024, device=device, seed=4))
    knn = KNN(k=32, transpose_mode=True)
    batch_size, num_points, _ = xyz.shape
    center = fps(xyz, 64)
    _, idx = knn(xyz, center)
    idx = (idx + torch.arange(0, batch_size, device=device).view(-1, 1, 1) * num_points).view(-1)
    neighborhood = xyz.view(batch_size * num_points, -1)[idx, :].view(batch_size, 64, 32, 3)
    neighborhood = neighborhood - center.unsqueeze(2)
    nbhd, ctr = Group(64, 32)(xyz)
    assert torch.equal(ctr, center) and torch.equal(nbhd, neighborhood)


def test_group_exact_mode_and_gradients(device):
    xyz = random_cloud(2, 256, device=device, seed=5)
    nb_exact, ctr_exact = Group(32, 16, fps="exact")(xyz)
    nb, ctr = pcgeom.group_patches(xyz, 32, 16)
    assert torch.equal(nb_exact, nb) and torch.equal(ctr_exact, ctr)
    x = xyz.clone().double().requires_grad_()
    nbhd, center = Group(8, 4)(x)
    (nbhd.square().sum() + center.sum()).backward()
    assert x.grad is not None and bool(x.grad.abs().sum() > 0)


def test_group_keeps_knn_cuda_tie_order_with_duplicates():
    base = torch.rand(1, 20, 3, generator=torch.Generator().manual_seed(0)) + 0.5
    xyz = torch.cat([base, base], dim=1)  # 20 distinct points, twice; Group must repeat some
    _, _, flat = Group(30, 4, return_idx=True)(xyz)
    idx = flat.view(1, 30, 4)
    _, ref_c, ref_cidx, ref_idx = point_mae_group_f64(xyz, 30, 4)
    assert np.array_equal(idx[0].numpy(), ref_idx[0])  # lower duplicate first, like KNN_CUDA


def test_point_mae_fps_function(device):
    xyz = pc_norm(random_cloud(2, 500, device=device, seed=6))
    out = fps(xyz, 40)
    for b in range(2):
        ref = pointnet2_kernel_sim(xyz[b].cpu().numpy(), 40)
        assert torch.equal(out[b], xyz[b][torch.as_tensor(ref, device=device)])
    with pytest.raises(ValueError, match=r"number=501 exceeds the number of points N=500"):
        fps(xyz, 501)


def test_group_errors():
    with pytest.raises(ValueError, match=r"Group: num_group=65 exceeds the number of points N=64 \(xyz of shape \(2, 64, 3\), num_group=65, group_size=8, fps='pointnet2'\)"):
        Group(65, 8)(torch.rand(2, 64, 3))
    with pytest.raises(ValueError, match=r"Group: group_size=70 exceeds the number of points N=64"):
        Group(8, 70)(torch.rand(2, 64, 3))
    with pytest.raises(ValueError, match=r"xyz must have shape \(B, N, 3\), got \(2, 64, 2\)"):
        Group(8, 4)(torch.rand(2, 64, 2))
    with pytest.raises(ValueError, match="fps must be one of"):
        Group(8, 4, fps="cuda")
    with pytest.raises(TypeError, match="num_group must be an int"):
        Group(8.0, 4)
    assert "num_group=8, group_size=4, fps='pointnet2'" in repr(Group(8, 4))


# ----------------------------------------------------------------------------
# KNN_CUDA drop-in


@pytest.mark.parametrize("transpose_mode", [False, True])
def test_knn_cuda_layouts_and_euclidean_distances(device, transpose_mode):
    ref = random_cloud(2, 300, dtype=torch.float64, device=device, seed=7)
    query = random_cloud(2, 50, dtype=torch.float64, device=device, seed=8)
    k = 9
    if transpose_mode:
        dist, idx = KNN(k, transpose_mode=True)(ref, query)
        assert dist.shape == idx.shape == (2, 50, k)
        d, i = dist, idx
    else:
        dist, idx = KNN(k)(ref.transpose(1, 2), query.transpose(1, 2))
        assert dist.shape == idx.shape == (2, k, 50)
        d, i = dist.transpose(1, 2), idx.transpose(1, 2)
    assert dist.dtype == torch.float32 and idx.dtype == torch.int64  # KNN_CUDA casts to float
    for b in range(2):
        ref_d, ref_i = brute_knn(_np64(query[b]), _np64(ref[b]), k)
        # inputs are rounded to float32 first, so compare like float32 results
        assert_knn_rows_equivalent(i[b].cpu().numpy(), ref_i, _np64(query[b]), _np64(ref[b]), rtol=1e-5)
        np.testing.assert_allclose(_np64(d[b]), np.sqrt(ref_d), rtol=1e-6, atol=1e-7)


def test_knn_cuda_no_gradients_and_ties():
    ref = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [-1, 0, 0], [0, 1, 0]]], requires_grad=True)
    dist, idx = KNN(4, transpose_mode=True)(ref, ref[:, :1])
    assert not dist.requires_grad
    assert idx[0, 0].tolist() == [0, 1, 2, 3]  # three ties at distance 1 -> index order
    assert dist[0, 0].tolist() == [0.0, 1.0, 1.0, 1.0]


def test_knn_cuda_errors():
    knn = KNN(5, transpose_mode=True)
    with pytest.raises(ValueError, match=r"KNN: k=5 exceeds the number of ref points Nr=4 \(ref shape \(1, 4, 3\), layout \(B, Nr, D\) with transpose_mode=True\)"):
        knn(torch.rand(1, 4, 3), torch.rand(1, 2, 3))
    with pytest.raises(ValueError, match=r"KNN: k=5 exceeds the number of ref points Nr=4 \(ref shape \(1, 3, 4\)"):
        KNN(5)(torch.rand(1, 3, 4), torch.rand(1, 3, 2))
    with pytest.raises(ValueError, match="must share B and D"):
        knn(torch.rand(1, 10, 3), torch.rand(1, 2, 2))
    with pytest.raises(ValueError, match=r"ref must have shape \(B, D, Nr\), got \(10, 3\)"):
        KNN(2)(torch.rand(10, 3), torch.rand(3, 2))
    with pytest.raises(ValueError, match="k must be >= 1"):
        KNN(0)


# ----------------------------------------------------------------------------
# Chamfer modules


def test_chamfer_modules(device):
    x = random_cloud(4, 32, device=device, seed=9)
    y = random_cloud(4, 40, device=device, seed=10)
    assert torch.equal(ChamferDistanceL2()(x, y), pcgeom.chamfer_distance(x, y, kind="l2"))
    assert torch.equal(ChamferDistanceL1()(x, y), pcgeom.chamfer_distance(x, y, kind="l1"))


def test_chamfer_ignore_zeros(device):
    x = random_cloud(1, 20, device=device, seed=11) + 0.1
    y = random_cloud(1, 30, device=device, seed=12) + 0.1
    xz = torch.cat([x, torch.zeros(1, 5, 3, device=device)], 1)
    yz = torch.cat([torch.zeros(1, 3, 3, device=device), y], 1)
    torch.testing.assert_close(ChamferDistanceL2(ignore_zeros=True)(xz, yz), pcgeom.chamfer_distance(x, y))
    torch.testing.assert_close(ChamferDistanceL1(ignore_zeros=True)(xz, yz), pcgeom.chamfer_distance(x, y, kind="l1"))
    # without the flag (or for B > 1) the zero points count, as in the original
    assert not torch.allclose(ChamferDistanceL2()(xz, yz), pcgeom.chamfer_distance(x, y))
