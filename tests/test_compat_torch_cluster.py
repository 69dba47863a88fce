"""pcgeom.compat.torch_cluster: torch_cluster's API, deterministic answers (see its docstring)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

import pcgeom.compat.torch_cluster as shim
from oracle import sq_dist_seq


@pytest.fixture
def tc(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_cluster", shim)
    import torch_cluster

    return torch_cluster


def test_knn_edges_are_nearest_first_ties_to_lower_index(tc):
    x = torch.tensor([[0.0], [1.0], [-1.0], [2.0], [0.0], [5.0]])
    y = torch.tensor([[0.0], [5.0]])
    ei = tc.knn(x, y, 3, torch.tensor([0, 0, 0, 0, 1, 1]), torch.tensor([0, 1]))
    assert ei.tolist() == [[0, 0, 0, 1, 1], [0, 1, 2, 5, 4]]


def test_radius_keeps_the_nearest_and_excludes_the_boundary(tc):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(200, 2, generator=g, dtype=torch.float64)
    ei = tc.radius(x, x[:10], 0.3, max_num_neighbors=5)
    for q in range(10):
        got = ei[1][ei[0] == q].numpy()
        d = sq_dist_seq(x.numpy(), x[q].numpy())
        cand = np.nonzero(d < 0.09)[0]
        want = cand[np.lexsort((cand, d[cand]))][:5]
        np.testing.assert_array_equal(got, want)
    x = torch.tensor([[0.0], [0.5], [0.25]])
    assert tc.radius(x, x[:1], 0.5).tolist() == [[0, 0], [0, 2]]  # 0.5 away is outside


def test_fps_random_start_follows_torch_seed_and_ratio_count(tc):
    x = torch.randn(101, 3)
    batch = torch.tensor([0] * 50 + [1] * 51)
    torch.manual_seed(3)
    a = tc.fps(x, batch, ratio=0.3)
    torch.manual_seed(3)
    b = tc.fps(x, batch, ratio=0.3)
    # ceil(50 * 0.3) in float32 is 16 (50 * 0.3f = 15.000001), as torch_cluster computes it
    assert torch.equal(a, b) and a.shape == (16 + 16,)
    assert (a[:16] < 50).all() and (a[16:] >= 50).all()
    assert len(set(a.tolist())) == a.numel()


def test_grid_cluster_formula(tc):
    g = torch.Generator().manual_seed(1)
    pos = torch.rand(100, 3, generator=g, dtype=torch.float64) * 10
    size = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    c = tc.grid_cluster(pos, size)
    p = pos.numpy()
    lo, hi = p.min(0), p.max(0)
    nv = np.floor((hi - lo) / size.numpy()).astype(np.int64) + 1
    v = np.floor((p - lo) / size.numpy()).astype(np.int64)
    np.testing.assert_array_equal(c.numpy(), v[:, 0] + nv[0] * (v[:, 1] + nv[1] * v[:, 2]))


def test_nearest_matches_brute_force_and_checks_batches(tc):
    g = torch.Generator().manual_seed(2)
    x = torch.rand(40, 2, generator=g, dtype=torch.float64)
    y = torch.rand(7, 2, generator=g, dtype=torch.float64)
    bx = torch.tensor([0] * 25 + [1] * 15)
    by = torch.tensor([0] * 3 + [1] * 4)
    got = tc.nearest(x, y, bx, by)
    for i in range(40):
        cand = np.nonzero(by.numpy() == bx[i].item())[0]
        d = sq_dist_seq(y.numpy()[cand], x[i].numpy())
        assert got[i].item() == cand[np.argmin(d)]
    with pytest.raises(ValueError, match="do not occur in 'batch_y'"):
        tc.nearest(x, y, bx, torch.zeros(7, dtype=torch.long))
    with pytest.raises(ValueError, match="'batch_x' is not sorted"):
        tc.nearest(x, y, bx.flip(0), by)


def test_shim_errors(tc):
    with pytest.raises(ValueError, match="flow must be"):
        tc.knn_graph(torch.rand(4, 2), 2, flow="up")
    with pytest.raises(ValueError, match=r"ratio must be in \(0, 1\]"):
        tc.fps(torch.rand(4, 2), ratio=1.5)
    with pytest.raises(ValueError, match="batch_x must be sorted"):
        tc.knn(torch.rand(4, 2), torch.rand(2, 2), 1, torch.tensor([1, 0, 0, 1]), torch.tensor([0, 1]))
