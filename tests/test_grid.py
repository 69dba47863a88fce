"""pcgeom.grid_subsample against a float64 numpy dictionary oracle."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pcgeom
import pcgeom.grid as G

pytestmark = pytest.mark.ops


def grid_oracle(points, offsets, size, reduce, start=None):
    p = points.double().numpy()
    size = np.broadcast_to(np.asarray(size, dtype=np.float64), (p.shape[1],))
    kept, cluster, index, counts = [], np.zeros(len(p), dtype=np.int64), [], []
    s = 0
    for b, e in enumerate(offsets):
        pc = p[s:e]
        if len(pc):
            st = pc.min(0) if start is None else np.broadcast_to(np.asarray(start, np.float64), (p.shape[1],))
            vox = np.floor((pc - st) / size).astype(np.int64)
            groups = {}
            for i, v in enumerate(map(tuple, vox)):
                groups.setdefault(v, []).append(i)
            for v, members in sorted(groups.items(), key=lambda kv: kv[1][0]):
                vid = len(index)
                cluster[s + np.array(members)] = vid
                if reduce == "first":
                    pick = members[0]
                    kept.append(pc[pick])
                elif reduce == "mean":
                    pick = members[0]
                    kept.append(pc[members].mean(0))
                else:
                    centre = st + (np.array(v) + 0.5) * size
                    d = ((pc[members] - centre) ** 2).sum(1)
                    pick = members[int(np.argmin(d))]  # argmin: first minimum = lowest index
                    kept.append(pc[pick])
                index.append(s + pick)
        counts.append(len(index))
        s = e
    return np.array(kept).reshape(-1, p.shape[1]), cluster, np.array(index, dtype=np.int64), np.array(counts)


def scene(lengths, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(sum(lengths), 3, generator=g, dtype=torch.float64) * 2 - 0.5).to(dtype)
    return x, torch.tensor(np.cumsum(lengths))


@pytest.mark.parametrize("reduce", ["first", "mean", "nearest_to_center"])
@pytest.mark.parametrize("dense", [True, False])
def test_grid_subsample_matches_oracle(reduce, dense, monkeypatch):
    if not dense:
        monkeypatch.setattr(G, "_DENSE_MAX", 0)  # force the sort path
    x, off = scene([0, 1, 300, 0, 57], seed=1)
    feats = torch.randn(x.shape[0], 2, dtype=torch.float64)
    r = pcgeom.grid_subsample(x, 0.3, offsets=off, reduce=reduce, features=feats)
    kept, cluster, index, counts = grid_oracle(x, off.tolist(), 0.3, reduce)
    np.testing.assert_array_equal(r.cluster.numpy(), cluster)
    np.testing.assert_array_equal(r.index.numpy(), index)
    np.testing.assert_array_equal(r.offsets.numpy(), counts)
    assert r.points.dtype == x.dtype
    if reduce == "mean":
        np.testing.assert_allclose(r.points.double().numpy(), kept, rtol=1e-6)
        want_f = np.stack([feats.numpy()[cluster == v].mean(0) for v in range(len(index))])
        np.testing.assert_allclose(r.features.numpy(), want_f, rtol=1e-12)
    else:
        assert torch.equal(r.points, x[r.index])
        assert torch.equal(r.features, feats[r.index])


def test_grid_subsample_start_and_per_axis_size():
    x, off = scene([200, 40], seed=2, dtype=torch.float64)
    r = pcgeom.grid_subsample(x, [0.25, 0.5, 1.0], offsets=off, start=0.0, reduce="nearest_to_center")
    kept, cluster, index, counts = grid_oracle(x, off.tolist(), [0.25, 0.5, 1.0], "nearest", start=0.0)
    np.testing.assert_array_equal(r.cluster.numpy(), cluster)
    np.testing.assert_array_equal(r.index.numpy(), index)
    per_cloud = pcgeom.grid_subsample(x, 0.4, offsets=off, start=torch.tensor([[0.0, 0, 0], [-0.5, -0.5, -0.5]]))
    a = pcgeom.grid_subsample(x[:200], 0.4, start=0.0)
    b = pcgeom.grid_subsample(x[200:], 0.4, start=-0.5)
    assert torch.equal(per_cloud.index, torch.cat([a.index, b.index + 200]))


def test_first_keeps_a_subsequence_and_one_point_per_voxel():
    x, _ = scene([1000], seed=3)
    r = pcgeom.grid_subsample(x, 0.1)
    assert (torch.diff(r.index) > 0).all()  # kept points in input order
    assert torch.equal(r.cluster[r.index], torch.arange(r.index.shape[0]))
    vox = torch.floor((x.double() - x.double().min(0).values) / 0.1).long()
    assert torch.unique(vox, dim=0).shape[0] == r.points.shape[0]


def test_float16_and_empty_input():
    x, off = scene([50, 0], seed=4, dtype=torch.float16)
    r = pcgeom.grid_subsample(x, 0.5, offsets=off, reduce="mean")
    assert r.points.dtype == torch.float16 and r.offsets[-1] == r.points.shape[0]
    e = pcgeom.grid_subsample(torch.zeros(0, 3), 0.1, offsets=torch.tensor([0, 0]))
    assert e.points.shape == (0, 3) and e.offsets.tolist() == [0, 0]


def test_mean_gradient_flows_to_points():
    x, _ = scene([30], seed=5, dtype=torch.float64)
    x.requires_grad_(True)
    r = pcgeom.grid_subsample(x, 0.7, reduce="mean")
    r.points.sum().backward()
    counts = torch.bincount(r.cluster).double()
    torch.testing.assert_close(x.grad, (1.0 / counts[r.cluster])[:, None].expand(-1, 3))


def test_grid_subsample_errors():
    x = torch.rand(10, 3)
    with pytest.raises(ValueError, match="voxel_size must be finite and > 0"):
        pcgeom.grid_subsample(x, 0.0)
    with pytest.raises(ValueError, match="reduce must be one of"):
        pcgeom.grid_subsample(x, 0.1, reduce="max")
    with pytest.raises(ValueError, match="points must be finite"):
        pcgeom.grid_subsample(torch.tensor([[0.0, float("nan"), 0]]), 0.1)
    with pytest.raises(ValueError, match=r"offsets\[-1\] must equal the number of packed rows 10"):
        pcgeom.grid_subsample(x, 0.1, offsets=torch.tensor([4, 9]))
    with pytest.raises(TypeError, match="reduce='mean' needs floating features"):
        pcgeom.grid_subsample(x, 0.1, reduce="mean", features=torch.zeros(10, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"voxel_size must be a float or have shape \(3,\)"):
        pcgeom.grid_subsample(x, [0.1, 0.2])


def test_nearest_to_center_ties_go_to_the_lower_index():
    # Both points are 0.25 from the centre 0.5 of voxel [0, 1): the lower index wins.
    x = torch.tensor([[0.75], [0.25], [0.9]], dtype=torch.float64)
    r = pcgeom.grid_subsample(x, 1.0, start=0.0, reduce="nearest_to_center")
    assert r.index.tolist() == [0]
    r = pcgeom.grid_subsample(x[[1, 0, 2]], 1.0, start=0.0, reduce="nearest_to_center")
    assert r.index.tolist() == [0]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_points_are_refused(bad):
    # The message names the points (how many, the first index), not a voxel or cell count.
    x = torch.rand(6, 3)
    x[3, 1] = bad
    x[5, 0] = bad
    want = r"grid_subsample: points must be finite, got 2 of 6 points with NaN or inf coordinates \(the first: points\[3\]"
    with pytest.raises(ValueError, match=want):
        pcgeom.grid_subsample(x, 0.1)
    with pytest.raises(ValueError, match=want):
        pcgeom.grid_subsample(x, 0.1, offsets=torch.tensor([2, 6]))
    with pytest.raises(ValueError, match=want):
        pcgeom.grid_subsample(x, 0.1, start=0.0)


def _voxel_oracle(points, size, start):
    """Cluster ids by first appearance, voxels from float64 floors held as exact Python ints."""
    ids, cluster = {}, []
    for row in points.double().tolist():
        v = tuple(int(np.floor((c - start) / size)) for c in row)
        cluster.append(ids.setdefault(v, len(ids)))
    return cluster


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_voxel_indices_beyond_int64_stay_distinct(dtype):
    """Voxel coordinates past 2**63 (finite points, start=0) used to be cast to
    int64 (undefined: distinct voxels merged); they are ranked as the exact
    integral float64 values they are."""
    g = torch.Generator().manual_seed(4)
    x = torch.tensor([[1e30, 0.0], [1e30, 1.0], [3e30, 0.0], [1e30, 0.5], [-2e30, 7.0], [3e30, 0.25]], dtype=dtype)
    x = torch.cat([x, (torch.randint(-3, 4, (40, 2), generator=g) * 2.0**70).to(dtype)])
    r = pcgeom.grid_subsample(x, 1.0, start=0.0)
    assert r.cluster.tolist() == _voxel_oracle(x, 1.0, 0.0)
    assert r.cluster.tolist()[:6] == [0, 1, 2, 0, 3, 2]
    r2 = pcgeom.grid_subsample(x, 1.0, start=0.0, offsets=torch.tensor([3, 46]))
    want = _voxel_oracle(x[:3], 1.0, 0.0) + [3 + c for c in _voxel_oracle(x[3:], 1.0, 0.0)]
    assert r2.cluster.tolist() == want


@pytest.mark.parametrize("case", ["difference", "tiny_voxel", "tiny_voxel_float32"])
def test_voxel_coordinates_overflowing_float64_are_named(case):
    """Finite points whose voxel coordinate (points - start) / voxel_size is past
    float64's range: not 'points must be finite', but what overflowed and why."""
    if case == "difference":
        x, size = torch.tensor([[1.7e308, 0.0], [-1.7e308, 0.0]], dtype=torch.float64), 1.0
    elif case == "tiny_voxel":
        x, size = torch.tensor([[0.0, 0.0], [1e10, 0.0]], dtype=torch.float64), 1e-300
    else:
        x, size = torch.tensor([[0.0, 0.0], [3e38, 0.0]]), 1e-300
    with pytest.raises(ValueError, match=r"grid_subsample: the voxel coordinates \(points - start\) / voxel_size "
                                         r"of finite points overflow float64 \(cloud 0, axis 0: point \d at "):
        pcgeom.grid_subsample(x, size)
    with pytest.raises(ValueError, match=r"overflow float64 \(cloud 1, axis 0: point \d at .*use a larger voxel_size"):
        pcgeom.grid_subsample(torch.cat([torch.zeros(3, 2, dtype=x.dtype), x]), size, offsets=torch.tensor([3, 5]))
