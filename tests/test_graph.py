"""knn_graph / radius_graph / edge_features against float64 numpy brute force."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pcgeom
from oracle import sq_dist_seq

pytestmark = pytest.mark.ops


def batched(sizes, D=3, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(sum(sizes), D, generator=g, dtype=torch.float64).to(dtype)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return x, batch


def oracle_edges(x, batch, k=None, r=None, loop=False, cap=None):
    """(centre, neighbour) pairs: same cloud, nearest first, ties to the lower index."""
    p = x.double().numpy()
    b = batch.numpy()
    out = []
    for i in range(len(p)):
        cand = np.nonzero(b == b[i])[0]
        if not loop:
            cand = cand[cand != i]
        d = sq_dist_seq(p[cand], p[i])
        if r is not None:
            keep = d <= r * r
            cand, d = cand[keep], d[keep]
        order = np.lexsort((cand, d))
        take = cand[order][: (k if k is not None else cap)]
        out += [(i, int(j)) for j in take]
    return out


@pytest.mark.parametrize("loop", [False, True])
@pytest.mark.parametrize("flow", ["source_to_target", "target_to_source"])
def test_knn_graph_matches_oracle(loop, flow):
    x, batch = batched([5, 1, 0, 12, 3], seed=1)
    batch = torch.where(batch >= 2, batch + 1, batch)  # a skipped cloud id too
    ei = pcgeom.knn_graph(x, 3, batch=batch, loop=loop, flow=flow)
    assert ei.dtype == torch.int64 and ei.shape[0] == 2
    pairs = oracle_edges(x, batch, k=3, loop=loop)
    centre, nb = (ei[1], ei[0]) if flow == "source_to_target" else (ei[0], ei[1])
    assert list(zip(centre.tolist(), nb.tolist())) == pairs  # also the edge order


def test_knn_graph_more_duplicates_than_k_keeps_k_others():
    x = torch.zeros(6, 2)
    ei = pcgeom.knn_graph(x, 2, flow="target_to_source")
    assert torch.bincount(ei[0]).tolist() == [2] * 6
    assert (ei[0] != ei[1]).all()
    assert ei[1].tolist() == [1, 2, 0, 2, 0, 1, 0, 1, 0, 1, 0, 1]


@pytest.mark.parametrize("loop", [False, True])
def test_radius_graph_matches_oracle(loop):
    x, batch = batched([9, 0, 1, 20], D=2, seed=2)
    ei = pcgeom.radius_graph(x, 0.35, batch=batch, loop=loop, max_num_neighbors=4)
    pairs = oracle_edges(x, batch, r=0.35, loop=loop, cap=4)
    assert list(zip(ei[1].tolist(), ei[0].tolist())) == pairs
    assert len(pairs) > 10


def test_radius_graph_boundary_is_inclusive():
    x = torch.tensor([[0.0], [0.5], [2.0]])
    assert pcgeom.radius_graph(x, 0.5).tolist() == [[1, 0], [0, 1]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_edge_features_padded_and_packed(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 7, 4, generator=g, dtype=torch.float64).to(dtype)
    x.requires_grad_(True)
    f = pcgeom.edge_features(x, 3)
    assert f.shape == (2, 7, 3, 8) and f.dtype == dtype
    xn = x.detach().double().numpy()
    for b in range(2):
        for i in range(7):
            d = sq_dist_seq(xn[b], xn[b, i])
            nb = np.lexsort((np.arange(7), d))[:3]
            want = np.concatenate([xn[b, nb] - xn[b, i], np.repeat(xn[b, i][None], 3, 0)], 1)
            np.testing.assert_allclose(f[b, i].detach().double().numpy(), want, rtol=1e-6, atol=1e-6)
    f.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    # the packed form with a batch vector gives the same features
    fp = pcgeom.edge_features(x.detach().reshape(14, 4), 3, batch=torch.arange(2).repeat_interleave(7))
    assert torch.equal(fp, f.detach().reshape(14, 3, 8))


def test_edge_features_small_cloud_pads_with_zeros():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    f = pcgeom.edge_features(x, 3, batch=torch.tensor([0, 0, 1]))
    assert f.shape == (3, 3, 4)
    assert f[2, 0].tolist() == [0.0, 0.0, 5.0, 6.0]
    assert (f[2, 1:] == 0).all() and (f[0, 2] == 0).all()


def test_graph_errors():
    x = torch.rand(4, 3)
    with pytest.raises(ValueError, match="batch must be sorted"):
        pcgeom.knn_graph(x, 2, batch=torch.tensor([0, 1, 0, 1]))
    with pytest.raises(ValueError, match=r"batch must have shape \(4,\)"):
        pcgeom.knn_graph(x, 2, batch=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="flow must be"):
        pcgeom.radius_graph(x, 0.1, flow="both")
    with pytest.raises(ValueError, match="max_num_neighbors must be >= 1"):
        pcgeom.radius_graph(x, 0.1, max_num_neighbors=0)
    with pytest.raises(TypeError, match="x must be float16"):
        pcgeom.knn_graph(x.long(), 2)
