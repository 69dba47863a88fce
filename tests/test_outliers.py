"""Outlier keep-masks against Open3D, and mean_neighbor_dist2 against a float64 brute force."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pcgeom
import pcgeom.data

pytestmark = pytest.mark.ops


def _noisy_scan(name, n, n_noise, seed):
    """A bundled scan subset with uniform noise in its (enlarged) bounding box and a few duplicates."""
    p = pcgeom.data.load(name, n_points=n, seed=seed).double()
    g = torch.Generator().manual_seed(seed)
    lo, hi = p.min(0).values, p.max(0).values
    noise = lo - 0.2 + (hi - lo + 0.4) * torch.rand(n_noise, 3, generator=g, dtype=torch.float64)
    out = torch.cat([p, noise])
    out[-5:] = out[:5]  # exact duplicates
    return out


def _o3d_cloud(o3d, p):
    return o3d.geometry.PointCloud(o3d.utility.Vector3dVector(p.numpy()))


def _mask(n, kept):
    m = np.zeros(n, dtype=bool)
    m[np.asarray(kept, dtype=np.int64)] = True
    return m


@pytest.mark.parametrize("name,k,std", [("bunny", 20, 2.0), ("kitten", 8, 1.0), ("armadillo", 1, 0.5)])
def test_statistical_mask_equals_open3d(name, k, std):
    o3d = pytest.importorskip("open3d")
    p = _noisy_scan(name, 1500, 80, seed=k)
    _, kept = _o3d_cloud(o3d, p).remove_statistical_outlier(nb_neighbors=k, std_ratio=std)
    ours = pcgeom.remove_statistical_outliers(p, k, std)
    assert ours.dtype == torch.bool and ours.shape == (len(p),)
    want = _mask(len(p), kept)
    assert (ours.numpy() == want).all(), f"{int((ours.numpy() != want).sum())} points differ"
    assert 0 < want.sum() < len(p) or k == 1  # k=1: every avg is 0, Open3D keeps nothing


@pytest.mark.parametrize("name,factor,nmin", [("bunny", 2.0, 4), ("chinese_dragon", 1.5, 1), ("kitten", 4.0, 12)])
def test_radius_mask_equals_open3d(name, factor, nmin):
    o3d = pytest.importorskip("open3d")
    p = _noisy_scan(name, 1500, 80, seed=nmin)
    spacing = float(pcgeom.mean_neighbor_dist2(p, 1).sqrt().median())
    radius = factor * spacing  # each scan in its own units
    _, kept = _o3d_cloud(o3d, p).remove_radius_outlier(nb_points=nmin, radius=radius)
    ours = pcgeom.remove_radius_outliers(p, radius, nmin)
    want = _mask(len(p), kept)
    assert (ours.numpy() == want).all(), f"{int((ours.numpy() != want).sum())} points differ"
    assert 0 < want.sum() < len(p)


def test_radius_boundary_is_strict_like_open3d():
    o3d = pytest.importorskip("open3d")
    p = torch.tensor([[0.0, 0, 0], [0.5, 0, 0], [3.0, 0, 0], [3.25, 0, 0]], dtype=torch.float64)
    _, kept = _o3d_cloud(o3d, p).remove_radius_outlier(nb_points=1, radius=0.5)
    ours = pcgeom.remove_radius_outliers(p, 0.5, 1)
    assert ours.tolist() == _mask(4, kept).tolist() == [False, False, True, True]


def test_batches_padded_ragged_and_packed_equal_per_cloud():
    clouds = [_noisy_scan("bunny", 800, 40, 1), _noisy_scan("bunny", 500, 30, 2), torch.rand(3, 3).double()]
    lengths = torch.tensor([len(c) for c in clouds])
    padded = torch.full((3, 840, 3), 7.0, dtype=torch.float64)
    for b, c in enumerate(clouds):
        padded[b, : len(c)] = c
    packed = torch.cat(clouds)
    offsets = torch.cumsum(lengths, 0)
    for fn, args in ((pcgeom.remove_statistical_outliers, (10, 1.5)), (pcgeom.remove_radius_outliers, (0.03, 3))):
        single = [fn(c, *args) for c in clouds]
        pad = fn(padded, *args, lengths=lengths)
        pk = fn(packed, *args, offsets=offsets)
        assert pad.shape == (3, 840) and pk.shape == (len(packed),)
        for b, s in enumerate(single):
            assert torch.equal(pad[b, : len(s)], s) and not pad[b, len(s):].any()
        assert torch.equal(pk, torch.cat(single))


def test_float32_and_nonfinite_points():
    p = _noisy_scan("bunny", 1000, 60, 3)
    want = pcgeom.remove_statistical_outliers(p, 12, 2.0)
    got = pcgeom.remove_statistical_outliers(p.float(), 12, 2.0)
    assert (got != want).sum() <= 2  # float32 distances: at most rounding-level disagreements at the threshold
    bad = p.clone()
    bad[3] = float("nan")
    bad[4, 0] = float("inf")
    for mask in (pcgeom.remove_statistical_outliers(bad, 12, 2.0), pcgeom.remove_radius_outliers(bad, 0.02, 2)):
        assert not mask[3] and not mask[4]


def _brute_mean_dist2(p, k):
    p = np.asarray(p, dtype=np.float64)
    d = ((p[:, None, :] - p[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)  # the point itself, by index
    d.sort(1)
    m = min(k, len(p) - 1)
    return d[:, :m].mean(1) if m > 0 else np.full(len(p), np.inf)


def test_mean_neighbor_dist2_brute_force_duplicates_and_small_clouds():
    p = _noisy_scan("armadillo", 600, 20, 4)
    p[100:104] = p[99]  # five copies of one point: their nearest others are at 0
    for k in (1, 3, 7):
        got = pcgeom.mean_neighbor_dist2(p, k)
        np.testing.assert_allclose(got.numpy(), _brute_mean_dist2(p.numpy(), k), rtol=1e-12, atol=0)
    assert (pcgeom.mean_neighbor_dist2(p, 4)[99:104] == 0).all()
    small = torch.rand(3, 3, dtype=torch.float64)
    np.testing.assert_allclose(pcgeom.mean_neighbor_dist2(small, 5).numpy(), _brute_mean_dist2(small.numpy(), 5))
    assert pcgeom.mean_neighbor_dist2(torch.zeros(1, 3)).tolist() == [float("inf")]
    # ragged padded batch: padding rows hold 0
    pad = torch.zeros(2, 5, 3, dtype=torch.float64)
    pad[0, :4] = torch.rand(4, 3, dtype=torch.float64)
    pad[1, :2] = small[:2]
    out = pcgeom.mean_neighbor_dist2(pad, 3, lengths=torch.tensor([4, 2]))
    np.testing.assert_allclose(out[0, :4].numpy(), _brute_mean_dist2(pad[0, :4].numpy(), 3))
    np.testing.assert_allclose(out[1, :2].numpy(), _brute_mean_dist2(small[:2].numpy(), 3))
    assert out[0, 4] == 0 and (out[1, 2:] == 0).all()


def test_bad_inputs_are_named():
    p = torch.rand(50, 3)
    with pytest.raises(ValueError, match="k must be >= 1"):
        pcgeom.remove_statistical_outliers(p, 0, 2.0)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="std_ratio must be a float > 0"):
            pcgeom.remove_statistical_outliers(p, 5, bad)
    with pytest.raises(ValueError, match="min_neighbors must be >= 1"):
        pcgeom.remove_radius_outliers(p, 0.1, 0)
    for bad in (0.0, -0.5, float("nan")):
        with pytest.raises(ValueError, match="radius must be a float > 0"):
            pcgeom.remove_radius_outliers(p, bad, 3)
    with pytest.raises(TypeError, match="radius must be a float"):
        pcgeom.remove_radius_outliers(p, "0.1", 3)
    with pytest.raises(ValueError, match="k must be >= 1"):
        pcgeom.mean_neighbor_dist2(p, 0)
    with pytest.raises(TypeError, match="points must be float16, bfloat16, float32 or float64"):
        pcgeom.mean_neighbor_dist2(torch.ones(5, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"points must have shape \(B, N, D\) or \(N_total, D\)"):
        pcgeom.remove_radius_outliers(torch.rand(5), 0.1, 1)
    with pytest.raises(ValueError, match="take offsets=, not lengths="):
        pcgeom.remove_statistical_outliers(p, 5, 1.0, lengths=torch.tensor([50]))
    with pytest.raises(ValueError, match=r"offsets\[-1\] must equal"):
        pcgeom.remove_statistical_outliers(p, 5, 1.0, offsets=torch.tensor([10, 40]))
