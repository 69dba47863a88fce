"""pcgeom's own checks of PyG's point-cloud entry points through the torch_cluster stand-in.

Not upstream code: run by ``tests/test_pyg.py`` next to PyG's vendored tests,
inside each PyG version.  Every index set is compared with a float64 numpy
brute force; capped radius queries with torch_cluster's CUDA rule (the first
``max_num_neighbors`` inside the open ball, in index order).
"""

import os

import numpy as np
import torch


def _cloud(n, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, d, generator=g, dtype=torch.float64)


def _d2(a, b):
    diff = a[None, :, :] - b[:, None, :]  # (len(b), len(a))
    out = np.zeros(diff.shape[:2])
    for c in range(diff.shape[2]):
        out = out + diff[..., c] * diff[..., c]
    return out


def _knn_oracle(x, y, k, bx, by, loop=True):
    d = _d2(x.numpy(), y.numpy())
    d[by.numpy()[:, None] != bx.numpy()[None, :]] = np.inf
    if not loop:
        np.fill_diagonal(d, np.inf)
    rows, cols = [], []
    for i in range(len(y)):
        order = np.lexsort((np.arange(len(x)), d[i]))
        order = order[np.isfinite(d[i][order])][:k]
        rows += [i] * len(order)
        cols += order.tolist()
    return rows, cols


def _radius_oracle(x, y, r, cap, bx, by, ignore_same_index=False):
    d = _d2(x.numpy(), y.numpy())
    ok = (d < r * r) & (by.numpy()[:, None] == bx.numpy()[None, :])
    if ignore_same_index:
        np.fill_diagonal(ok, False)
    rows, cols = [], []
    for i in range(len(y)):
        c = np.nonzero(ok[i])[0][:cap]  # index order, as torch_cluster's CUDA kernel
        rows += [i] * len(c)
        cols += c.tolist()
    return rows, cols


def test_import_goes_through_the_shim():
    import torch_cluster
    import torch_geometric
    import torch_geometric.typing as t
    from torch_geometric.nn import DynamicEdgeConv, graclus, knn_interpolate, voxel_grid  # noqa: F401

    assert torch_geometric.__version__ == os.environ["PCGEOM_PYG_DRIVE"]
    assert torch_cluster.__pcgeom_shim__ == "pcgeom.compat.torch_cluster"
    assert t.WITH_TORCH_CLUSTER and t.WITH_TORCH_CLUSTER_BATCH_SIZE  # the latter: from knn.__doc__


def test_dynamic_edge_conv_is_edge_conv_over_the_exact_knn():
    from torch_geometric.nn import DynamicEdgeConv, knn

    x = _cloud(150)
    batch = torch.tensor([0] * 90 + [1] * 60)
    assert list(map(list, knn(x, x, 6, batch, batch).tolist())) == list(map(list, _knn_oracle(x, x, 6, batch, batch)))
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(6, 16, dtype=torch.float64), torch.nn.ReLU(),
                              torch.nn.Linear(16, 8, dtype=torch.float64))
    out = DynamicEdgeConv(mlp, k=6, aggr="max")(x, batch)
    rows, cols = _knn_oracle(x, x, 6, batch, batch)
    rows, cols = torch.tensor(rows), torch.tensor(cols)
    msg = mlp(torch.cat([x[rows], x[cols] - x[rows]], 1))
    want = torch.full((150, 8), -torch.inf, dtype=torch.float64).scatter_reduce(0, rows[:, None].expand_as(msg), msg, "amax")
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


def test_knn_interpolate_weights_the_exact_k_nearest():
    from torch_geometric.nn import knn_interpolate

    pos_x, pos_y = _cloud(200, seed=1), _cloud(70, seed=2)
    bx = torch.tensor([0] * 120 + [1] * 80)
    by = torch.tensor([0] * 30 + [1] * 40)
    feat = torch.randn(200, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    out = knn_interpolate(feat, pos_x, pos_y, bx, by, k=3)
    rows, cols = _knn_oracle(pos_x, pos_y, 3, bx, by)
    d = _d2(pos_x.numpy(), pos_y.numpy())
    want = np.zeros((70, 4))
    for i in range(70):
        nb = [c for r, c in zip(rows, cols) if r == i]
        w = 1.0 / np.maximum(d[i, nb], 1e-16)
        want[i] = (w[:, None] * feat.numpy()[nb]).sum(0) / w.sum()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-10)


def test_voxel_grid_is_torch_clusters_grid_formula():
    from torch_geometric.nn import voxel_grid

    pos = _cloud(300, seed=4) * 10
    batch = torch.tensor([0] * 200 + [1] * 100)
    size = [1.5, 2.0, 3.0]
    got = voxel_grid(pos, size, batch).numpy()
    p = np.concatenate([pos.numpy(), batch.numpy()[:, None]], 1)
    s = np.array(size + [1.0])
    lo, hi = p.min(0), p.max(0)
    n = np.floor((hi - lo) / s).astype(np.int64) + 1
    v = np.floor((p - lo) / s).astype(np.int64)
    want = v[:, 0] + n[0] * (v[:, 1] + n[1] * (v[:, 2] + n[2] * v[:, 3]))
    np.testing.assert_array_equal(got, want)


def test_capped_radius_queries_keep_torch_cluster_cudas_neighbourhoods():
    from torch_geometric.data import Data
    from torch_geometric.nn import radius, radius_graph
    from torch_geometric.transforms import RadiusGraph

    # PointNet++-like density: most balls hold more than max_num_neighbors points
    x = _cloud(400, seed=5)
    batch = torch.tensor([0] * 250 + [1] * 150)
    rows, cols = _radius_oracle(x, x, 0.3, 8, batch, batch, ignore_same_index=True)
    assert np.mean(np.bincount(rows, minlength=400) == 8) > 0.5  # the cap is hit
    ei = radius_graph(x, 0.3, batch, max_num_neighbors=8)
    assert ei.tolist() == [cols, rows]  # [neighbour, centre]
    data = RadiusGraph(0.3, max_num_neighbors=8)(Data(pos=x, batch=batch))
    assert data.edge_index.tolist() == [cols, rows]
    idx = torch.arange(0, 400, 9)
    ei = radius(x, x[idx], 0.25, batch, batch[idx], max_num_neighbors=16)
    assert ei.tolist() == list(map(list, _radius_oracle(x, x[idx], 0.25, 16, batch, batch[idx])))


def test_fps_and_knn_graph_are_exact():
    from torch_geometric.nn import fps, knn_graph

    x = _cloud(160, seed=6)
    batch = torch.tensor([0] * 100 + [1] * 60)
    got = fps(x, batch, ratio=0.25, random_start=False).tolist()
    want = []
    for lo, hi, m in ((0, 100, 25), (100, 160, 15)):
        p = x[lo:hi].numpy()
        sel, dmin = [0], _d2(p, p[:1])[0]
        for _ in range(m - 1):
            sel.append(int(np.argmax(dmin)))
            dmin = np.minimum(dmin, _d2(p, p[sel[-1]:sel[-1] + 1])[0])
        want += [lo + s for s in sel]
    assert got == want
    rows, cols = _knn_oracle(x, x, 5, batch, batch, loop=False)
    assert knn_graph(x, 5, batch).tolist() == [cols, rows]


def test_node2vec_samples_walks_along_edges_through_torch_ops():
    import torch_geometric.typing as t
    from torch_geometric.nn import Node2Vec

    g = torch.Generator().manual_seed(7)
    n = 30
    a = torch.randint(0, n, (80,), generator=g)
    b = (a + torch.randint(1, n, (80,), generator=g)) % n
    ring = torch.arange(n)
    row = torch.cat([a, b, ring, (ring + 1) % n])
    col = torch.cat([b, a, (ring + 1) % n, ring])
    edges = set(zip(row.tolist(), col.tolist()))
    for q in (1.0, 0.5):
        model = Node2Vec(torch.stack([row, col]), embedding_dim=8, walk_length=6, context_size=3,
                         walks_per_node=2, p=1.0, q=q)
        if not t.WITH_PYG_LIB or q != 1.0:
            assert model.random_walk_fn is torch.ops.torch_cluster.random_walk
        pos_rw, neg_rw = model.sample(torch.arange(n))
        assert pos_rw.shape == (n * 2 * 4, 3)
        assert all((int(u), int(v)) in edges for w in pos_rw for u, v in zip(w[:-1], w[1:]))
        assert torch.isfinite(model.loss(pos_rw, neg_rw))
