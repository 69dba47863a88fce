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


@pytest.mark.parametrize("k", [1, 4, 9, 12])
@pytest.mark.parametrize("cosine", [False, True])
def test_knn_one_cloud_equals_brute_force_and_the_batched_form(tc, k, cosine):
    # One cloud takes its own (static-shape) path: it must give the float64 brute force's edges (nearest first,
    # ties to the lower index; k > N keeps the N there are), as the batched form does. Duplicates, lattice ties
    # and a NaN point (ranked last, never dropped) included.
    g = torch.Generator().manual_seed(k)
    x = torch.randint(0, 3, (9, 2), generator=g).double()
    x[4] = x[1]
    x[7] = float("nan")
    y = torch.cat([x[:3], torch.rand(4, 2, generator=g, dtype=torch.float64)])
    got = tc.knn(x, y, k, cosine=cosine)
    batched = tc.knn(x, y, k, torch.zeros(9, dtype=torch.long), torch.zeros(7, dtype=torch.long), cosine=cosine)
    assert got.tolist() == batched.tolist()
    xs, ys = (x / x.norm(dim=1, keepdim=True).clamp_min(1e-12), y / y.norm(dim=1, keepdim=True).clamp_min(1e-12)) \
        if cosine else (x, y)
    rows, cols = [], []
    for i in range(len(ys)):
        d = ((xs - ys[i]) ** 2).sum(1)
        d = torch.where(torch.isnan(d), torch.inf, d)
        order = sorted(range(len(xs)), key=lambda j: (d[j].item(), j))[: min(k, len(xs))]
        rows += [i] * len(order)
        cols += order
    assert got.tolist() == [rows, cols]


def _radius_oracle(x, y, r, cap, order, bx=None, by=None, ignore_same_index=False):
    """float64 (or float32, emulated) brute force of torch_cluster's radius: ``dist2 < r*r`` with ``r*r``
    rounded to the input dtype; ``order="index"``: the first ``cap`` in index order (the CUDA kernel),
    ``"distance"``: the nearest, ties to the lower index."""
    dt = np.float32 if x.dtype == torch.float32 else np.float64
    xn, yn = x.numpy().astype(dt), y.numpy().astype(dt)
    bx = np.zeros(len(xn), int) if bx is None else bx.numpy()
    by = np.zeros(len(yn), int) if by is None else by.numpy()
    r2 = dt(r * r)
    rows, cols = [], []
    for i in range(len(yn)):
        diff = xn - yn[i]
        d = np.zeros(len(xn), dt)
        for c in range(xn.shape[1]):
            d = (d + diff[:, c] * diff[:, c]).astype(dt)
        ok = (d < r2) & (bx == by[i])
        if ignore_same_index:
            ok[i] = False
        cand = np.nonzero(ok)[0]
        if order == "distance":
            cand = cand[np.lexsort((cand, d[cand]))]
        cand = cand[:cap]
        rows += [i] * len(cand)
        cols += cand.tolist()
    return [rows, cols]


@pytest.mark.parametrize("order", ["index", "distance"])
def test_radius_cap_follows_the_chosen_order_and_excludes_the_boundary(tc, order):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(300, 3, generator=g, dtype=torch.float64)
    bx = torch.tensor([0] * 170 + [1] * 130)
    y, by = x[::7], bx[::7]
    ei = tc.radius(x, y, 0.3, bx, by, max_num_neighbors=5, order=order)
    assert ei.tolist() == _radius_oracle(x, y, 0.3, 5, order, bx, by)
    x1 = torch.tensor([[0.0], [0.5], [0.25]])
    assert tc.radius(x1, x1[:1], 0.5, order=order).tolist() == [[0, 0], [0, 2]]  # 0.5 away is outside


def test_radius_default_is_torch_cluster_cuda_index_order(tc):
    # PointNet++-style full balls: the CUDA kernel keeps the first 4 in index order, not the nearest 4.
    x = torch.tensor([[0.0], [0.9], [0.8], [0.1], [0.2], [0.05]])
    assert tc.radius(x, x[:1], 1.0, max_num_neighbors=4).tolist() == [[0, 0, 0, 0], [0, 1, 2, 3]]
    assert tc.radius(x, x[:1], 1.0, max_num_neighbors=4, order="distance").tolist() == [[0, 0, 0, 0], [0, 5, 3, 4]]
    assert tc.radius_graph(x, 1.0, max_num_neighbors=2).tolist()[0][:2] == [1, 2]  # node 0: 1, 2 (not itself)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_radius_index_order_with_many_boundary_points(tc, dtype):
    # A shuffled integer lattice at r = 2: four points of every ball lie exactly on the
    # (excluded) boundary; in index order they sit among the first slots of many queries,
    # which the stand-in must look past to still return max_num_neighbors inside points.
    from conftest import lattice_cloud

    x = lattice_cloud(1, 9, 2, dtype=dtype, seed=3)[0]
    for cap, loop in ((3, False), (6, True), (40, False)):
        got = tc.radius_graph(x, 2.0, loop=loop, max_num_neighbors=cap, flow="target_to_source")
        want = _radius_oracle(x, x, 2.0, cap, "index", ignore_same_index=not loop)
        assert got.tolist() == want
    # the case really occurs: some query's first 3 inclusive-ball points hold a boundary point
    d2 = ((x[:, None] - x[None]) ** 2).sum(-1)
    first = [torch.nonzero((d2[i] <= 4) & (torch.arange(81) != i)).flatten()[:3] for i in range(81)]
    assert any(bool((d2[i, f] == 4).any()) for i, f in enumerate(first))
    # radius_graph(flow="source_to_target") is [neighbour, centre]
    ei = tc.radius_graph(x, 2.0, max_num_neighbors=3)
    assert ei.flip(0).tolist() == _radius_oracle(x, x, 2.0, 3, "index", ignore_same_index=True)


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


# ---------------------------------------------------------------------------
# graclus, random walks, neighbour sampling, torch.ops.torch_cluster


def _graclus_transcription(row, col, weight, num_nodes, seed):
    """torch_cluster 1.6.3's graclus (torch_cluster/graclus.py + csrc/cpu/graclus_cpu.cpp), transcribed
    line by line into a sequential Python loop, with the same torch random draws."""
    torch.manual_seed(seed)
    mask = row != col
    row, col = row[mask], col[mask]
    if weight is not None:
        weight = weight[mask]
    if weight is None:
        perm = torch.randperm(row.size(0), dtype=torch.long)
        row, col = row[perm], col[perm]
    perm = torch.argsort(row)
    row, col = row[perm], col[perm]
    if weight is not None:
        weight = weight[perm]
    rowptr = [0] + torch.cumsum(torch.bincount(row, minlength=num_nodes), 0).tolist()
    col = col.tolist()
    w = None if weight is None else weight.tolist()
    out = [-1] * num_nodes
    for u in torch.randperm(num_nodes, dtype=torch.long).tolist():
        if out[u] >= 0:
            continue
        if w is None:
            out[u] = u
            for e in range(rowptr[u], rowptr[u + 1]):
                v = col[e]
                if out[v] >= 0:
                    continue
                out[u] = out[v] = min(u, v)
                break
        else:
            v_max, w_max = u, 0
            for e in range(rowptr[u], rowptr[u + 1]):
                v = col[e]
                if out[v] >= 0:
                    continue
                if w[e] >= w_max:
                    v_max, w_max = v, w[e]
            out[u] = out[v_max] = min(u, v_max)
    return out


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("symmetric", [True, False])
def test_graclus_is_the_original_greedy_matching_for_the_same_seed(tc, weighted, symmetric):
    g = torch.Generator().manual_seed(7)
    n, e = 300, 1500
    row = torch.randint(0, n - 20, (e,), generator=g)  # the last 20 nodes are isolated
    col = torch.randint(0, n - 20, (e,), generator=g)
    if symmetric:
        row, col = torch.cat([row, col]), torch.cat([col, row])
    # small integer weights: many ties (to the later edge), some negative (never taken), self-loops
    w = (torch.randint(-2, 4, (row.numel(),), generator=g)).to(torch.float64) if weighted else None
    for seed in range(3):
        want = _graclus_transcription(row, col, w, n, seed)
        torch.manual_seed(seed)
        got = tc.graclus_cluster(row, col, w, num_nodes=n)
        assert got.tolist() == want
    # direct op call with a self-loop that outweighs the other edge: the node stays alone, as in C++
    torch.manual_seed(0)
    assert torch.ops.torch_cluster.graclus(torch.tensor([0, 2, 3]), torch.tensor([0, 1, 0]),
                                           torch.tensor([5.0, 1.0, 1.0])).tolist() in ([0, 1], [0, 0])


def test_graclus_errors_name_the_argument(tc):
    with pytest.raises(ValueError, match="col values must be in"):
        torch.ops.torch_cluster.graclus(torch.tensor([0, 1, 2]), torch.tensor([1, 5]), None)
    with pytest.raises(ValueError, match="weight must have one entry per edge"):
        tc.graclus_cluster(torch.tensor([0, 1]), torch.tensor([1, 0]), torch.ones(3))
    with pytest.raises(ValueError, match="row must be a 1-D int64 tensor"):
        tc.graclus_cluster(torch.tensor([0.0, 1.0]), torch.tensor([1, 0]))


def _uniform_walk_transcription(rowptr, col, start, L, u):
    """rw_cpu.cpp's uniform_sampling: idx = int64(float(rand) * deg)."""
    n_out, e_out = [], []
    for s in range(len(start)):
        cur, nodes, edges = int(start[s]), [int(start[s])], []
        for l in range(L):
            lo, hi = rowptr[cur], rowptr[cur + 1]
            if hi == lo:
                e = -1
            else:
                e = lo + int(np.float32(u[s, l]) * np.float32(hi - lo))
                cur = col[e]
            nodes.append(cur)
            edges.append(e)
        n_out.append(nodes)
        e_out.append(edges)
    return n_out, e_out


def test_uniform_random_walk_is_the_originals_for_the_same_seed(tc, device):
    g = torch.Generator().manual_seed(5)
    n = 60
    row = torch.randint(0, n - 5, (400,), generator=g)
    col = torch.randint(0, n, (400,), generator=g)
    start = torch.randint(0, n, (90,), generator=g)
    L = 12
    torch.manual_seed(11)
    nodes, edges = tc.random_walk(row.to(device), col.to(device), start.to(device), L, num_nodes=n,
                                  return_edge_indices=True)
    torch.manual_seed(11)
    u = torch.rand(start.numel(), L, device=device)
    # the CUDA kernel reads the same draws as (L, S)
    u = u.view(L, -1).t() if device.type == "cuda" else u
    perm = torch.argsort(row * n + col)
    scol = col[perm].tolist()
    rowptr = [0] + torch.cumsum(torch.bincount(row, minlength=n), 0).tolist()
    want_n, want_e = _uniform_walk_transcription(rowptr, scol, start.tolist(), L, u.cpu().numpy())
    assert nodes.tolist() == want_n and edges.tolist() == want_e
    assert bool((edges[:, -1] == -1).any())  # some walks reach a node without out-edges and stay


@pytest.mark.parametrize("p,q,want", [(0.5, 2.0, (4 / 7, 2 / 7, 1 / 7)), (1.0, 0.5, (1 / 4, 1 / 4, 1 / 2))])
def test_node2vec_walk_has_the_papers_transition_probabilities(tc, p, q, want):
    # edges 0-1, 0-2, 1-2, 1-3: after 0 -> 1 the walk returns to 0 (weight 1/p), moves to 2,
    # a neighbour of 0 (weight 1), or to 3 (weight 1/q).  torch_cluster's chained test accepts every
    # candidate with probability max(...) when q < 1, i.e. walks uniformly there (1/3 each).
    row = torch.tensor([0, 1, 0, 2, 1, 2, 1, 3])
    col = torch.tensor([1, 0, 2, 0, 2, 1, 3, 1])
    torch.manual_seed(0)
    nodes, edges = tc.random_walk(row, col, torch.zeros(12000, dtype=torch.long), 4, p=p, q=q,
                                  return_edge_indices=True)
    # every step follows an edge of the sorted edge list
    perm = torch.argsort(row * 4 + col)
    srow, scol = row[perm], col[perm]
    assert torch.equal(srow[edges], nodes[:, :-1]) and torch.equal(scol[edges], nodes[:, 1:])
    sel = nodes[:, 1] == 1
    third = nodes[sel, 2]
    n = int(sel.sum())
    for node, pr in zip((0, 2, 3), want):
        freq = float((third == node).sum()) / n
        assert abs(freq - pr) < 4 * (pr * (1 - pr) / n) ** 0.5, (node, freq, pr)


def test_random_walk_op_and_errors(tc):
    rowptr, col = torch.tensor([0, 1, 2, 2]), torch.tensor([1, 0])
    n_id, e_id = torch.ops.torch_cluster.random_walk(rowptr, col, torch.tensor([0, 2]), 3, 1.0, 1.0)
    assert n_id.tolist() == [[0, 1, 0, 1], [2, 2, 2, 2]] and e_id.tolist() == [[0, 1, 0], [-1, -1, -1]]
    with pytest.raises(ValueError, match=r"start values must be in \[0, 3\)"):
        torch.ops.torch_cluster.random_walk(rowptr, col, torch.tensor([3]), 3, 1.0, 1.0)
    with pytest.raises(ValueError, match="p and q must be > 0"):
        tc.random_walk(torch.tensor([0]), torch.tensor([1]), torch.tensor([0]), 2, p=0.0)
    with pytest.raises(ValueError, match="row must be sorted when coalesced=False"):
        tc.random_walk(torch.tensor([1, 0]), torch.tensor([0, 1]), torch.tensor([0]), 2, coalesced=False)


def test_neighbor_sampler_draws_distinct_edges_of_each_node(tc):
    g = torch.Generator().manual_seed(2)
    deg = torch.randint(0, 12, (50,), generator=g)
    rowptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(deg, 0)])
    start = torch.randperm(50, generator=g)[:30]
    for size, count in ((0.5, lambda d: -(-d // 2)), (4, lambda d: min(d, 4)), (1.0, lambda d: d)):
        torch.manual_seed(1)
        e = tc.neighbor_sampler(start, rowptr, size).tolist()
        at = 0
        for s in start.tolist():
            d = int(deg[s])
            mine = e[at:at + count(d)]
            at += count(d)
            assert len(set(mine)) == len(mine) and all(rowptr[s] <= v < rowptr[s + 1] for v in mine)
        assert at == len(e)
    with pytest.raises(ValueError, match="size must be > 0"):
        tc.neighbor_sampler(start, rowptr, 0.0)


def test_every_public_name_and_op_of_torch_cluster_is_served(tc):
    for name in ("graclus_cluster", "grid_cluster", "fps", "nearest", "knn", "knn_graph", "radius",
                 "radius_graph", "random_walk", "neighbor_sampler", "__version__"):
        assert name in tc.__all__ and hasattr(tc, name)
    assert tc.__version__ == "1.6.3"
    # PyG: WITH_TORCH_CLUSTER_BATCH_SIZE = 'batch_size' in torch_cluster.knn.__doc__
    assert "batch_size" in tc.knn.__doc__
    for op in ("fps", "graclus", "grid", "knn", "nearest", "radius", "random_walk", "neighbor_sampler"):
        assert callable(getattr(torch.ops.torch_cluster, op))
    assert torch.ops.torch_cluster.cuda_version() == -1
    x = torch.tensor([[0.0], [0.9], [0.3], [0.5]])
    assert torch.ops.torch_cluster.radius(x, x, None, None, 1.0, 2, 1, True).tolist() == \
        [[0, 0, 1, 1, 2, 2, 3, 3], [1, 2, 0, 2, 0, 1, 0, 1]]
    assert torch.ops.torch_cluster.knn(x, x[:1], torch.tensor([0, 4]), torch.tensor([0, 1]), 2, False, 1).tolist() == \
        [[0, 0], [0, 2]]
    assert torch.ops.torch_cluster.fps(x, torch.tensor([0, 4]), torch.tensor([0.5]), False).tolist() == [0, 1]
    assert torch.ops.torch_cluster.nearest(x, x[1:2], torch.tensor([0, 4]), torch.tensor([0, 1])).tolist() == [0] * 4
    assert torch.ops.torch_cluster.grid(x, torch.tensor([0.5]), None, None).tolist() == [0, 1, 0, 1]


def test_ops_are_not_defined_where_a_real_torch_cluster_is_installed(tmp_path, monkeypatch):
    import importlib.machinery

    from pcgeom.compat.torch_cluster import _ops

    (tmp_path / "torch_cluster").mkdir()
    (tmp_path / "torch_cluster" / "__init__.py").write_text("")
    monkeypatch.setattr(_ops, "_has_op", lambda name: False)  # as in a fresh process
    monkeypatch.syspath_prepend(str(tmp_path))
    # A folder that only has the name (pcgeom's vendored upstream tests are one) is no install.
    assert not _ops._real_torch_cluster_installed()
    # A real install ships its compiled libraries beside __init__.py.
    (tmp_path / "torch_cluster" / ("_version_cpu" + importlib.machinery.EXTENSION_SUFFIXES[0])).write_bytes(b"")
    assert _ops._real_torch_cluster_installed()
    assert _ops.register_ops() == []  # the real one defines them when it is imported
    monkeypatch.undo()
    assert _ops.register_ops() == []  # already defined in this process: defined once


def test_fps_ratio_nan_and_grid_cluster_bad_sizes_are_named_errors():
    from pcgeom.compat.torch_cluster import fps, grid_cluster

    with pytest.raises(ValueError, match=r"fps: ratio must be in \(0, 1\], got nan"):
        fps(torch.rand(10, 3), ratio=float("nan"))
    for size in ([0.0, 0.1, 0.1], [float("nan"), 1.0, 1.0], [-1.0, 1.0, 1.0], [float("inf"), 1.0, 1.0]):
        with pytest.raises(ValueError, match="grid_cluster: size must be positive and finite"):
            grid_cluster(torch.rand(10, 3), torch.tensor(size))
    with pytest.raises(ValueError, match="more than int64 voxel ids can number"):
        grid_cluster(torch.rand(10, 3) * 1e10, torch.full((3,), 1e-9))
    ok = grid_cluster(torch.tensor([[0.0, 0.0], [11, 9], [2, 8]]), torch.tensor([5.0, 5.0]))
    assert ok.tolist() == [0, 5, 3]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_grid_cluster_names_non_finite_points(tc, bad):
    # One NaN/inf point used to read "a grid ... has nan cells ... use a larger size".
    pos = torch.rand(10, 3, generator=torch.Generator().manual_seed(0))
    pos[4, 1] = bad
    want = r"grid_cluster: pos must be finite, got 1 of 10 points with NaN or inf coordinates \(the first: pos\[4\]"
    for start, end in ((None, None), (torch.zeros(3), None), (torch.zeros(3), torch.ones(3))):
        with pytest.raises(ValueError, match=want):
            tc.grid_cluster(pos, torch.full((3,), 0.1), start, end)
    with pytest.raises(ValueError, match=want):
        torch.ops.torch_cluster.grid(pos, torch.full((3,), 0.1), None, None)
    with pytest.raises(ValueError, match=r"grid_cluster: start must be finite on every axis, got \[0.0, nan\]"):
        tc.grid_cluster(torch.rand(4, 2), torch.ones(2), torch.tensor([0.0, float("nan")]))
    with pytest.raises(ValueError, match=r"grid_cluster: end must be finite on every axis"):
        tc.grid_cluster(torch.rand(4, 2), torch.ones(2), None, torch.tensor([float("inf"), 1.0]))


@pytest.mark.parametrize("walk_length", [2**40, 2**62, 2**70])
def test_random_walk_too_long_is_named_before_allocating(tc, walk_length):
    # The (S, walk_length + 1) output is sized up front: the error names walk_length, the bound and the value
    # (it used to be the allocator's "DefaultCPUAllocator: can't allocate memory ..." or a 2**63 overflow).
    want = rf"random_walk: walk_length must be at most \d+ for 2 start node\(s\) .* got {walk_length}$"
    with pytest.raises(RuntimeError, match=want):
        tc.random_walk(torch.tensor([0, 1]), torch.tensor([1, 0]), torch.tensor([0, 1]), walk_length)
    if walk_length < 2**63:  # the op's schema takes an int64
        with pytest.raises(RuntimeError, match=want):
            torch.ops.torch_cluster.random_walk(torch.tensor([0, 1, 2]), torch.tensor([1, 0]), torch.tensor([0, 1]),
                                                walk_length, 1.0, 1.0)


@pytest.mark.slow  # a fresh interpreter: PyG binds torch_cluster when it is first imported
def test_pyg_voxel_grid_and_grid_sampling_name_non_finite_points():
    import os
    import pathlib
    import subprocess
    import textwrap

    pytest.importorskip("torch_geometric")
    code = textwrap.dedent("""
        import torch, pcgeom.compat
        pcgeom.compat.enable_shims()
        from torch_geometric.data import Data
        from torch_geometric.nn import voxel_grid
        from torch_geometric.transforms import GridSampling
        pos = torch.rand(8, 3)
        pos[6, 2] = float('inf')
        for call in (lambda: voxel_grid(pos, 0.2), lambda: voxel_grid(pos, 0.2, torch.zeros(8, dtype=torch.long)),
                     lambda: GridSampling(0.2)(Data(pos=pos))):
            try:
                call()
            except ValueError as exc:
                print(exc)
    """)
    root = str(pathlib.Path(__file__).resolve().parents[1])  # this checkout's pcgeom, not an installed one
    env = dict(os.environ, PYTHONPATH=root)
    env.pop("PCGEOM_DISABLE_SHIMS", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 3, out.stdout + out.stderr
    for line in lines:
        assert line.startswith("grid_cluster: pos must be finite, got 1 of 8 points with NaN or inf coordinates "
                               "(the first: pos[6] = ["), line
