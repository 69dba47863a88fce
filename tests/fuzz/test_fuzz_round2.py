"""Differential fuzz, round 2: the public functions the first suite left out -- pcgeom's aggregate_neighbors
and group_hierarchical; chamfer_ext's backward; a float32 transcription of pointnet2's FPS kernel; torch_cluster's
graclus_cluster, random_walk and neighbor_sampler; pointops' grouping family, ball_query / random_ball_query,
aggregation, subtraction and the attention steps.  Each is checked against an oracle written here in numpy
(float64, or the kernel's float32 where the documented answer is the kernel's), or, for the random samplers,
against every property their docstrings promise."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("hypothesis")
import torch  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import pcgeom  # noqa: E402
from pcgeom.compat import chamfer_ext, pointnet2_ops, pointops, torch_cluster  # noqa: E402
from tests.fuzz.strategies import FLOATS, LAYOUTS, as_layout, clouds, dist_oracle, fuzz, packed_clouds, round_to_dtype  # noqa: E402
from tests.oracle import acc_np_dtype, fps_oracle_acc, knn_oracle_acc, sq_dist_acc  # noqa: E402

EXACT_KINDS = ["lattice", "repeated", "few_distinct", "collinear", "planar"]
# Small integers: every product and sum below is exact in each floating dtype (bfloat16 holds integers to 256).
SMALL = 3


def _ints(rng, shape, lo=-SMALL, hi=SMALL):
    return rng.integers(lo, hi + 1, shape).astype(np.float64)


def _idx(rng, M, K, N, dtype):
    """``(M, K)`` rows in ``[-1, N)`` (``-1`` only when ``N == 0``, or at random)."""
    i = rng.integers(-1, max(N, 0), (M, K))
    return torch.from_numpy(i).to(dtype)


# ---------------------------------------------------------------- aggregate_neighbors / pointops.aggregation


def _aggregation_oracle(f, idx, w, pos):
    M, K = idx.shape
    C, W = f.shape[1], w.shape[2]
    out = np.zeros((M, C))
    for m in range(M):
        for j in range(K):
            if idx[m, j] < 0:
                continue
            for c in range(C):
                out[m, c] += (f[idx[m, j], c] + pos[m, j, c]) * w[m, j, c % W]
    return out


@fuzz(N=st.integers(0, 7), M=st.integers(0, 5), K=st.integers(1, 5), C=st.integers(1, 5), W=st.integers(1, 4),
      dtype=st.sampled_from(FLOATS), idx_dtype=st.sampled_from([torch.int32, torch.int64]),
      with_pos=st.booleans(), layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**31))
def test_aggregate_neighbors_and_pointops_aggregation(N, M, K, C, W, dtype, idx_dtype, with_pos, layout, seed):
    rng = np.random.default_rng(seed)
    f, w = _ints(rng, (N, C)), _ints(rng, (M, K, W))
    pos = _ints(rng, (M, K, C)) if with_pos else np.zeros((M, K, C))
    idx = _idx(rng, M, K, N, idx_dtype)
    if N == 0:
        idx = torch.full((M, K), -1, dtype=idx_dtype)
    want = _aggregation_oracle(f, idx.numpy(), w, pos)
    ft, wt = as_layout(f, dtype, layout), as_layout(w, dtype, layout)
    pt = as_layout(pos, dtype, layout) if with_pos else None
    got = pcgeom.aggregate_neighbors(ft, idx, wt, pt)
    assert got.shape == (M, C) and got.dtype == dtype
    np.testing.assert_array_equal(got.double().numpy(), want)
    if N >= 1:  # pointops' form: n rows in and out, position required
        idx_sq = _idx(rng, N, K, N, idx_dtype)
        w_sq, pos_sq = _ints(rng, (N, K, W)), _ints(rng, (N, K, C))
        got2 = pointops.aggregation(ft, as_layout(pos_sq, dtype, layout), as_layout(w_sq, dtype, layout), idx_sq)
        np.testing.assert_array_equal(got2.double().numpy(), _aggregation_oracle(f, idx_sq.numpy(), w_sq, pos_sq))
    if dtype == torch.float64 and M and N:
        # gradients of sum(out * g): d features, d weight, d position (zero at -1 slots: they contribute nothing)
        g = _ints(rng, (M, C))
        ft2, wt2 = torch.tensor(f, requires_grad=True), torch.tensor(w, requires_grad=True)
        pt2 = torch.tensor(pos, requires_grad=True)
        (pcgeom.aggregate_neighbors(ft2, idx, wt2, pt2) * torch.from_numpy(g)).sum().backward()
        gf, gw, gp = np.zeros_like(f), np.zeros_like(w), np.zeros_like(pos)
        ii = idx.numpy()
        for m in range(M):
            for j in range(K):
                if ii[m, j] < 0:
                    continue
                for c in range(C):
                    gf[ii[m, j], c] += g[m, c] * w[m, j, c % W]
                    gw[m, j, c % W] += g[m, c] * (f[ii[m, j], c] + pos[m, j, c])
                    gp[m, j, c] = g[m, c] * w[m, j, c % W]
        np.testing.assert_array_equal(ft2.grad.numpy(), gf)
        np.testing.assert_array_equal(wt2.grad.numpy(), gw)
        np.testing.assert_array_equal(pt2.grad.numpy(), gp)


# ---------------------------------------------------------------- pointops: subtraction, grouping, attention


@fuzz(n=st.integers(1, 7), n2=st.integers(1, 7), K=st.integers(1, 4), C=st.integers(1, 4),
      dtype=st.sampled_from(FLOATS), idx_dtype=st.sampled_from([torch.int32, torch.int64]),
      layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**31))
def test_pointops_subtraction_and_grouping(n, n2, K, C, dtype, idx_dtype, layout, seed):
    rng = np.random.default_rng(seed)
    a, b = _ints(rng, (n, C)), _ints(rng, (n2, C))
    idx = _idx(rng, n, K, n2, idx_dtype)
    ii = idx.numpy()
    sub = pointops.subtraction(as_layout(a, dtype, layout), as_layout(b, dtype, layout), idx)
    want = np.where(ii[..., None] >= 0, a[:, None, :] - b[np.maximum(ii, 0)], 0.0)
    np.testing.assert_array_equal(sub.double().numpy(), want)
    # grouping (feat / relative xyz, zeros at -1) and grouping2 (the autograd form)
    xyz, new_xyz = _ints(rng, (n2, 3)), _ints(rng, (n, 3))
    gathered = np.where(ii[..., None] >= 0, b[np.maximum(ii, 0)], 0.0)
    rel = np.where(ii[..., None] >= 0, xyz[np.maximum(ii, 0)] - new_xyz[:, None], 0.0)
    g = pointops.grouping(idx, as_layout(b, dtype, layout), as_layout(xyz, dtype, layout),
                          as_layout(new_xyz, dtype, layout), with_xyz=True)
    np.testing.assert_array_equal(g.double().numpy(), np.concatenate([rel, gathered], -1))
    g = pointops.grouping(idx, as_layout(b, dtype, layout), as_layout(xyz, dtype, layout))
    np.testing.assert_array_equal(g.double().numpy(), gathered)
    np.testing.assert_array_equal(pointops.grouping2(as_layout(b, dtype, layout), idx).double().numpy(), gathered)
    if dtype == torch.float64:
        bt = torch.tensor(b, requires_grad=True)
        gout = _ints(rng, (n, K, C))
        (pointops.grouping2(bt, idx) * torch.from_numpy(gout)).sum().backward()
        want_g = np.zeros_like(b)
        for m in range(n):
            for j in range(K):
                if ii[m, j] >= 0:
                    want_g[ii[m, j]] += gout[m, j]
        np.testing.assert_array_equal(bt.grad.numpy(), want_g)


@fuzz(n=st.integers(1, 6), n2=st.integers(1, 6), m=st.integers(0, 10), G=st.integers(1, 3), C=st.integers(1, 4),
      dtype=st.sampled_from(FLOATS), idx_dtype=st.sampled_from([torch.int32, torch.int64]), seed=st.integers(0, 2**31))
def test_pointops_attention_steps(n, n2, m, G, C, dtype, idx_dtype, seed):
    rng = np.random.default_rng(seed)
    q, k, wc = _ints(rng, (n, G, C), -2, 2), _ints(rng, (n2, G, C), -2, 2), _ints(rng, (C,), -2, 2)
    it = torch.from_numpy(rng.integers(0, n, m)).to(idx_dtype)
    ir = torch.from_numpy(rng.integers(0, n2, m)).to(idx_dtype)
    rel = pointops.attention_relation_step(torch.from_numpy(q).to(dtype), torch.from_numpy(k).to(dtype),
                                           torch.from_numpy(wc).to(dtype), it, ir)
    want = np.einsum("rgc,rgc,c->rg", q[it.numpy()], k[ir.numpy()], wc) if m else np.zeros((0, G))
    np.testing.assert_array_equal(rel.double().numpy(), want)
    w = _ints(rng, (m, G), -2, 2)
    v = _ints(rng, (n, G, C), -2, 2)
    it2 = torch.from_numpy(rng.integers(0, n, m)).to(idx_dtype)
    ir2 = torch.from_numpy(rng.integers(0, n, m)).to(idx_dtype)
    fus = pointops.attention_fusion_step(torch.from_numpy(w).to(dtype), torch.from_numpy(v).to(dtype), it2, ir2)
    want = np.zeros((n, G, C))
    for r in range(m):
        want[it2[r]] += w[r][:, None] * v[ir2[r]]
    assert fus.shape == (n, G, C)
    np.testing.assert_array_equal(fus.double().numpy(), want)


# ---------------------------------------------------------------- pointops ball_query and the *_and_group helpers


def _ball_oracle(q, p, nsample, rmax, rmin, acc):
    d2 = sq_dist_acc(p.astype(acc), q.astype(acc))
    lo2, hi2 = np.float32(rmin) ** 2, np.float32(rmax) ** 2
    with np.errstate(invalid="ignore"):
        cand = np.flatnonzero((d2 <= 1e-5) | ((d2 >= lo2) & (d2 < hi2)))
    cand = cand[np.lexsort((cand, d2[cand]))]
    cnt = len(cand)
    if cnt <= nsample:
        return np.concatenate([cand, np.full(nsample - cnt, -1)]), cand
    pick = [cand[int(np.float32(cnt) / np.float32(nsample) * np.float32(i))] for i in range(nsample)]
    return np.array(pick), cand


@fuzz(c=packed_clouds(kinds=EXACT_KINDS, d_choices=(3,), min_len=1, n_max=10),
      nsample=st.integers(1, 8), rmax=st.sampled_from([0.5, 1.0, 2.0, 3.5, 100.0]), rmin=st.sampled_from([0.0, 0.5, 1.0]),
      C=st.integers(1, 3), seed=st.integers(0, 2**31))
def test_pointops_ball_query_and_groups(c, nsample, rmax, rmin, C, seed):
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    off = torch.tensor(c["offsets"], dtype=torch.int32)
    acc = acc_np_dtype(c["dtype"])
    if rmin >= rmax:
        with pytest.raises(ValueError, match="min_radius must be < max_radius"):
            pointops.ball_query(nsample, rmax, rmin, x, off)
        return
    idx, dist = pointops.ball_query(nsample, rmax, rmin, x, off)
    assert idx.dtype == torch.int32 and idx.shape == (len(x), nsample)
    ridx, _ = pointops.random_ball_query(nsample, rmax, rmin, x, off)
    feat = torch.from_numpy(np.random.default_rng(seed).integers(-3, 4, (len(x), C)).astype(float)).to(c["dtype"])
    lo = 0
    for hi in c["offsets"]:
        seg = c["x"][lo:hi]
        for i in range(lo, hi):
            want, cand = _ball_oracle(c["x"][i], seg, nsample, rmax, rmin, acc)
            got = idx[i].numpy()
            np.testing.assert_array_equal(np.where(got >= 0, got - lo, -1), want)
            ok = got >= 0
            # the exact root of the float32 (float64) squared distance, rounded once to the output dtype
            d_want = dist_oracle(sq_dist_acc(seg[got[ok] - lo].astype(acc), c["x"][i].astype(acc)), c["dtype"])
            np.testing.assert_array_equal(dist[i].double().numpy()[ok], d_want)
            np.testing.assert_array_equal(dist[i].double().numpy()[~ok], round_to_dtype(1e5, c["dtype"]))  # inf in float16
            # random_ball_query: distinct candidates of the same shell, as many as fit
            r = ridx[i].numpy()
            r = r[r >= 0] - lo
            assert len(r) == min(len(cand), nsample) and len(set(r.tolist())) == len(r)
            assert set(r.tolist()) <= set(cand.tolist())
        lo = hi
    # ball_query_and_group / knn_query_and_group: the query followed by grouping (zeros at -1)
    g, gi = pointops.ball_query_and_group(feat, x, off, max_radio=rmax, min_radio=rmin, nsample=nsample, with_xyz=True)
    np.testing.assert_array_equal(gi.numpy(), idx.numpy())
    ii = idx.long().numpy()
    rel = np.where(ii[..., None] >= 0, c["x"][np.maximum(ii, 0)] - c["x"][:, None], 0.0)
    fe = np.where(ii[..., None] >= 0, feat.double().numpy()[np.maximum(ii, 0)], 0.0)
    want = torch.from_numpy(np.concatenate([rel, fe], -1)).to(c["dtype"]).double().numpy()
    np.testing.assert_array_equal(g.double().numpy(), want)
    kk = min(nsample, min(c["lens"]))
    g, gi = pointops.knn_query_and_group(feat, x, off, nsample=kk)
    lo = 0
    for hi in c["offsets"]:
        seg = c["x"][lo:hi].astype(acc)
        np.testing.assert_array_equal(gi[lo:hi].numpy() - lo, knn_oracle_acc(seg, seg, kk)[1])
        lo = hi
    np.testing.assert_array_equal(g.double().numpy(), feat.double().numpy()[gi.long().numpy()])


# ---------------------------------------------------------------- chamfer_ext.backward


@fuzz(B=st.integers(1, 2), N=st.integers(1, 6), M=st.integers(1, 6), dtype=st.sampled_from(FLOATS),
      from_forward=st.booleans(), idx_dtype=st.sampled_from([torch.int32, torch.int64]), seed=st.integers(0, 2**31))
def test_chamfer_ext_backward(B, N, M, dtype, from_forward, idx_dtype, seed):
    rng = np.random.default_rng(seed)
    a, b = _ints(rng, (B, N, 3), -2, 2), _ints(rng, (B, M, 3), -2, 2)
    g1, g2 = _ints(rng, (B, N), -2, 2), _ints(rng, (B, M), -2, 2)
    at, bt = torch.from_numpy(a).to(dtype), torch.from_numpy(b).to(dtype)
    if from_forward:
        d1, d2, i1, i2 = chamfer_ext.forward(at, bt)
        for bb in range(B):  # the forward's nearest squared distances and indices (ties to the lower index)
            od, oi = knn_oracle_acc(a[bb], b[bb], 1)
            np.testing.assert_array_equal(i1[bb].numpy(), oi[:, 0])
            np.testing.assert_array_equal(d1[bb].double().numpy(), od[:, 0])
        i1, i2 = i1.to(idx_dtype), i2.to(idx_dtype)
    else:  # any valid indices: backward is the gradient of the distances to those points
        i1 = torch.from_numpy(rng.integers(0, M, (B, N))).to(idx_dtype)
        i2 = torch.from_numpy(rng.integers(0, N, (B, M))).to(idx_dtype)
    ga, gb = chamfer_ext.backward(at, bt, i1, i2, torch.from_numpy(g1).to(dtype), torch.from_numpy(g2).to(dtype))
    wa, wb = np.zeros_like(a), np.zeros_like(b)
    for bb in range(B):
        for i in range(N):
            j = int(i1[bb, i])
            d = 2 * g1[bb, i] * (a[bb, i] - b[bb, j])
            wa[bb, i] += d
            wb[bb, j] -= d
        for j in range(M):
            i = int(i2[bb, j])
            d = 2 * g2[bb, j] * (b[bb, j] - a[bb, i])
            wb[bb, j] += d
            wa[bb, i] -= d
    assert ga.dtype == dtype and gb.dtype == dtype
    np.testing.assert_array_equal(ga.double().numpy(), torch.from_numpy(wa).to(dtype).double().numpy())
    np.testing.assert_array_equal(gb.double().numpy(), torch.from_numpy(wb).to(dtype).double().numpy())
    bad = i1.clone()
    bad[0, 0] = M
    with pytest.raises(ValueError):
        chamfer_ext.backward(at, bt, bad, i2, torch.from_numpy(g1).to(dtype), torch.from_numpy(g2).to(dtype))


# ---------------------------------------------------------------- pointnet2 FPS: the CUDA kernel replayed in float32


def _pointnet2_fps_kernel(p: np.ndarray, m: int) -> np.ndarray:
    """pointnet2_ops' furthest_point_sampling_kernel, one block, transcribed from its CUDA source in float32:
    each thread strides over the points, keeps its first largest min-distance (points with |p|^2 <= 1e-3 skipped),
    then the shared-memory tree reduction takes the second operand only when strictly larger."""
    n = len(p)
    p = p.astype(np.float32)
    threads = max(min(1 << int(math.log(n) / math.log(2.0)), 512), 1)
    temp = np.full(n, np.float32(1e10), dtype=np.float32)
    mag = (p * p).sum(1, dtype=np.float32)
    out = np.zeros(m, dtype=np.int64)
    old = 0
    for j in range(1, m):
        best = np.full(threads, np.float32(-1), dtype=np.float32)
        besti = np.zeros(threads, dtype=np.int64)
        diff = p - p[old]
        d_all = diff[:, 0] * diff[:, 0] + diff[:, 1] * diff[:, 1] + diff[:, 2] * diff[:, 2]
        for tid in range(threads):
            for k in range(tid, n, threads):
                if mag[k] <= np.float32(1e-3):
                    continue
                d2 = min(d_all[k], temp[k])
                temp[k] = d2
                if d2 > best[tid]:
                    best[tid], besti[tid] = d2, k
        half = threads // 2
        while half >= 1:
            for t in range(half):
                v1, v2 = best[t], best[t + half]
                best[t] = max(v1, v2)
                besti[t] = besti[t + half] if v2 > v1 else besti[t]
            half //= 2
        old = int(besti[0])
        out[j] = old
    return out


@fuzz(c=clouds(n_min=1, n_max=40, d_choices=(3,), kinds=EXACT_KINDS + ["uniform"], b_max=2), n=st.integers(1, 40))
def test_pointnet2_furthest_point_sample_replays_the_kernel(c, n):
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    N = x.shape[1]
    n = min(n, N)
    idx = pointnet2_ops.furthest_point_sample(x, n)
    for b in range(x.shape[0]):
        np.testing.assert_array_equal(idx[b].numpy(), _pointnet2_fps_kernel(x[b].float().numpy(), n))


# ---------------------------------------------------------------- group_hierarchical


@fuzz(c=clouds(n_min=1, n_max=24, d_choices=(3,), kinds=EXACT_KINDS + ["uniform", "nonfinite"], b_max=2),
      levels=st.lists(st.tuples(st.integers(1, 12), st.integers(1, 6)), min_size=1, max_size=3))
def test_group_hierarchical(c, levels):
    dtype = c["dtype"]
    p = torch.from_numpy(c["x"]).to(dtype)
    n_centers, ks = [g for g, _ in levels], [k for _, k in levels]
    sizes = [p.shape[1]] + n_centers[:-1]
    try:
        out = pcgeom.group_hierarchical(p, n_centers, ks)
    except ValueError as exc:
        assert any(g > s or k > s for g, k, s in zip(n_centers, ks, sizes)), exc
        assert "level" in str(exc) or "n_centers" in str(exc) or "k" in str(exc), exc
        return
    assert all(g <= s and k <= s for g, k, s in zip(n_centers, ks, sizes))
    assert len(out) == len(levels)
    acc = acc_np_dtype(dtype)
    inp = c["x"]
    for lvl, (G, k) in zip(out, levels):
        B = inp.shape[0]
        assert lvl.centers.shape == (B, G, 3) and lvl.idx.shape == (B, G, k) and lvl.neighborhoods.shape == (B, G, k, 3)
        for b in range(B):
            pts = inp[b].astype(acc)
            cidx, idx = lvl.center_idx[b].numpy(), lvl.idx[b].numpy()
            np.testing.assert_array_equal(lvl.centers[b].double().numpy(), inp[b][cidx])
            assert (idx[:, 0] == cidx).all()  # the centre itself first
            if c["exact"] and np.isfinite(pts).all():
                np.testing.assert_array_equal(cidx, fps_oracle_acc(pts, G, 0))
                od = knn_oracle_acc(pts[cidx], pts, k)[0]
                got_d = np.stack([sq_dist_acc(pts[idx[g]], pts[cidx[g]]) for g in range(G)])
                np.testing.assert_array_equal(got_d, od)
            if np.isfinite(inp[b]).all():
                want = torch.from_numpy(inp[b][idx] - inp[b][cidx][:, None]).to(dtype).double().numpy()
                np.testing.assert_array_equal(lvl.neighborhoods[b].double().numpy(), want)
        inp = lvl.centers.double().numpy()


# ---------------------------------------------------------------- torch_cluster graph samplers


@st.composite
def graphs(draw, n_max=9, e_max=24):
    n = draw(st.integers(1, n_max))
    E = draw(st.integers(0, e_max))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    row, col = rng.integers(0, n, E), rng.integers(0, n, E)
    return n, row, col, rng


@fuzz(g=graphs(), weighted=st.booleans(), symmetric=st.booleans(), seed=st.integers(0, 2**31))
def test_torch_cluster_graclus(g, weighted, symmetric, seed):
    n, row, col, rng = g
    w = rng.integers(-2, 5, len(row)).astype(float) if weighted else None
    if symmetric:  # both directions with the same weight
        row, col = np.concatenate([row, col]), np.concatenate([col, row])
        w = None if w is None else np.concatenate([w, w])
    torch.manual_seed(seed)
    cl = torch_cluster.graclus_cluster(torch.from_numpy(row), torch.from_numpy(col),
                                       None if w is None else torch.from_numpy(w), n).numpy()
    assert cl.shape == (n,) and cl.dtype == np.int64
    usable = {(int(a), int(b)) for k, (a, b) in enumerate(zip(row, col)) if a != b and (w is None or w[k] >= 0)}
    matched = np.zeros(n, dtype=bool)
    for i in range(n):
        if cl[i] == i:
            continue
        j = int(cl[i])  # a pair shares the smaller id: j < i, j is its own cluster and has exactly one partner
        assert j < i and cl[j] == j and (cl == j).sum() == 2
        assert (i, j) in usable or (j, i) in usable, (i, j)
        matched[i] = matched[j] = True
    if symmetric:
        # greedy on an undirected graph: no usable edge joins two nodes left unmatched (a node visited
        # earlier saw the other one free).  Directed edges give no such promise: a node visited while its
        # only out-neighbour is already visited stays alone.
        for a, b in usable:
            assert matched[a] or matched[b], (a, b, cl)
    torch.manual_seed(seed)  # the same draws give the same clustering
    again = torch_cluster.graclus_cluster(torch.from_numpy(row), torch.from_numpy(col),
                                          None if w is None else torch.from_numpy(w), n).numpy()
    np.testing.assert_array_equal(again, cl)


@fuzz(g=graphs(), S=st.integers(0, 6), L=st.integers(0, 6), pq=st.sampled_from([(1, 1), (0.5, 2.0), (4.0, 0.25)]),
      seed=st.integers(0, 2**31))
def test_torch_cluster_random_walk(g, S, L, pq, seed):
    n, row, col, rng = g
    start = rng.integers(0, n, S)
    torch.manual_seed(seed)
    nodes, edges = torch_cluster.random_walk(torch.from_numpy(row), torch.from_numpy(col), torch.from_numpy(start), L,
                                             p=pq[0], q=pq[1], num_nodes=n, return_edge_indices=True)
    nodes, edges = nodes.numpy(), edges.numpy()
    assert nodes.shape == (S, L + 1) and edges.shape == (S, L)
    np.testing.assert_array_equal(nodes[:, 0], start)
    order = np.lexsort((col, row))  # coalesced: edges sorted by (row, col)
    srow, scol = row[order], col[order]
    deg = np.bincount(row, minlength=n)
    for s in range(S):
        for t in range(L):
            a, b, e = nodes[s, t], nodes[s, t + 1], edges[s, t]
            if deg[a] == 0:
                assert b == a and e == -1
            else:
                assert 0 <= e < len(row) and srow[e] == a and scol[e] == b, (a, b, e)
    torch.manual_seed(seed)
    again = torch_cluster.random_walk(torch.from_numpy(row), torch.from_numpy(col), torch.from_numpy(start), L,
                                      p=pq[0], q=pq[1], num_nodes=n)
    np.testing.assert_array_equal(again.numpy(), nodes)


@fuzz(degs=st.lists(st.integers(0, 8), min_size=1, max_size=6), size=st.sampled_from([0.0, 0.3, 0.5, 1.0, 2.0, 3.5, 10.0]),
      seed=st.integers(0, 2**31))
def test_torch_cluster_neighbor_sampler(degs, size, seed):
    rng = np.random.default_rng(seed)
    rowptr = np.concatenate([[0], np.cumsum(degs)])
    start = rng.integers(0, len(degs), int(rng.integers(0, 6)))
    torch.manual_seed(seed)
    if size <= 0:
        with pytest.raises(ValueError, match="neighbor_sampler: size must be > 0"):
            torch_cluster.neighbor_sampler(torch.from_numpy(start), torch.from_numpy(rowptr), size)
        return
    got = torch_cluster.neighbor_sampler(torch.from_numpy(start), torch.from_numpy(rowptr), size).numpy()
    at = 0
    for s in start:
        deg = degs[s]
        want = math.ceil(size * deg) if size <= 1 else min(int(size), deg)
        part = got[at:at + want]
        assert len(part) == want and len(set(part.tolist())) == want
        assert ((part >= rowptr[s]) & (part < rowptr[s + 1])).all(), (part, s, rowptr)
        at += want
    assert at == len(got)


# ---------------------------------------------------------------- torch_scatter's named functions


def _groups_oracle(src, groups, reduce):
    C = src.shape[1]
    out = []
    for rows in groups:
        x = src[rows]
        if len(rows) == 0:
            out.append(np.ones(C) if reduce == "mul" else np.zeros(C))
        elif reduce in ("sum", "add"):
            out.append(x.sum(0))
        elif reduce == "mul":
            out.append(x.prod(0))
        elif reduce == "mean":
            out.append(x.sum(0) / len(rows))
        elif reduce == "min":
            out.append(x.min(0))
        else:
            out.append(x.max(0))
    return np.array(out).reshape(len(groups), C)


@fuzz(lens=st.lists(st.integers(0, 5), min_size=1, max_size=6), C=st.integers(1, 3),
      dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.float16]), seed=st.integers(0, 2**31))
def test_torch_scatter_named_functions(lens, C, dtype, seed):
    """scatter_sum/add/mul/mean/min/max, segment_*_csr, segment_*_coo and gather_coo against per-group numpy sums."""
    from pcgeom.compat import torch_scatter as ts

    rng = np.random.default_rng(seed)
    G, N = len(lens), sum(lens)
    sorted_index = np.repeat(np.arange(G), lens)
    src = _ints(rng, (N, C), -2, 2)
    perm = rng.permutation(N)
    groups_sorted = [list(range(a, a + n)) for a, n in zip(np.cumsum([0] + lens[:-1]), lens)]
    half = dtype in (torch.float16, torch.bfloat16)
    reduces = ["sum", "add", "min", "max"] + ([] if half else ["mean", "mul"])
    s_t = torch.from_numpy(src).to(dtype)
    for r in reduces:
        want = torch.from_numpy(_groups_oracle(src, groups_sorted, r)).to(dtype).double().numpy()
        # scatter_* on a shuffled copy: the same groups in any order
        sc = getattr(ts, f"scatter_{r}")(s_t[torch.from_numpy(perm)], torch.from_numpy(sorted_index[perm]), dim=0, dim_size=G)
        sc = sc[0] if isinstance(sc, tuple) else sc
        np.testing.assert_array_equal(sc.double().numpy(), want, err_msg=f"scatter_{r}")
        if r == "mul":
            continue
        indptr = torch.from_numpy(np.concatenate([[0], np.cumsum(lens)]))
        csr = getattr(ts, f"segment_{r}_csr")(s_t, indptr)
        csr = csr[0] if isinstance(csr, tuple) else csr
        np.testing.assert_array_equal(csr.double().numpy(), want, err_msg=f"segment_{r}_csr")
        coo = getattr(ts, f"segment_{r}_coo")(s_t, torch.from_numpy(sorted_index), dim_size=G)
        coo = coo[0] if isinstance(coo, tuple) else coo
        np.testing.assert_array_equal(coo.double().numpy(), want, err_msg=f"segment_{r}_coo")
    g = ts.gather_coo(s_t[:G] if N >= G else torch.zeros(G, C, dtype=dtype), torch.from_numpy(sorted_index))
    base = src[:G] if N >= G else np.zeros((G, C))
    np.testing.assert_array_equal(g.double().numpy(), torch.from_numpy(base[sorted_index]).to(dtype).double().numpy())


# ---------------------------------------------------------------- point_mae Group / Chamfer modules, pointops query_and_group


@fuzz(c=clouds(n_min=1, n_max=20, d_choices=(3,), kinds=EXACT_KINDS, b_max=2), G=st.integers(1, 8), M=st.integers(1, 8),
      fps=st.sampled_from(["pointnet2", "exact"]))
def test_point_mae_group(c, G, M, fps):
    from pcgeom.compat import point_mae

    x = torch.from_numpy(c["x"]).to(c["dtype"])
    N = x.shape[1]
    try:
        nbh, center = point_mae.Group(G, M, fps=fps)(x)
    except ValueError as exc:
        assert G > N or M > N, exc
        return
    assert G <= N and M <= N
    acc = acc_np_dtype(c["dtype"])
    for b in range(x.shape[0]):
        pts = c["x"][b]
        cidx = _pointnet2_fps_kernel(x[b].float().numpy(), G) if fps == "pointnet2" else fps_oracle_acc(pts.astype(acc), G, 0)
        np.testing.assert_array_equal(center[b].double().numpy(), pts[cidx])
        _, oi = knn_oracle_acc(pts[cidx].astype(acc), pts.astype(acc), M)  # KNN_CUDA's order: ties to the lower index
        want = torch.from_numpy(pts[oi] - pts[cidx][:, None]).to(c["dtype"]).double().numpy()
        np.testing.assert_array_equal(nbh[b].double().numpy(), want)


@fuzz(c=clouds(n_min=1, n_max=12, d_choices=(3,), kinds=EXACT_KINDS + ["uniform"], dtypes=[torch.float32, torch.float64]),
      M=st.integers(1, 10))
def test_point_mae_chamfer_modules(c, M):
    from pcgeom.compat import point_mae

    x = torch.from_numpy(c["x"]).to(c["dtype"])
    B = x.shape[0]
    y = torch.from_numpy(np.random.default_rng(c["seed"]).integers(-3, 4, (B, M, 3)).astype(float)).to(c["dtype"])
    d1 = np.stack([knn_oracle_acc(c["x"][b], y[b].double().numpy(), 1)[0][:, 0] for b in range(B)])
    d2 = np.stack([knn_oracle_acc(y[b].double().numpy(), c["x"][b], 1)[0][:, 0] for b in range(B)])
    l2 = float(point_mae.ChamferDistanceL2()(x, y))
    l1 = float(point_mae.ChamferDistanceL1()(x, y))
    tol = 1e-5 if c["dtype"] == torch.float32 else 1e-12
    np.testing.assert_allclose(l2, d1.mean() + d2.mean(), rtol=tol, atol=tol)
    np.testing.assert_allclose(l1, (np.sqrt(d1).mean() + np.sqrt(d2).mean()) / 2, rtol=tol, atol=tol)


@fuzz(c=packed_clouds(kinds=EXACT_KINDS, d_choices=(3,), min_len=1, n_max=8), K=st.integers(1, 4), C=st.integers(1, 3),
      seed=st.integers(0, 2**31))
def test_pointops_query_and_group_given_idx(c, K, C, seed):
    """With ``idx`` given: the original's plain indexing, an ``idx = -1`` slot reading the last row."""
    rng = np.random.default_rng(seed)
    n = len(c["x"])
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    feat = _ints(rng, (n, C))
    idx = torch.from_numpy(rng.integers(-1, n, (n, K))).int()
    off = torch.tensor(c["offsets"], dtype=torch.int32)
    g = pointops.query_and_group(K, x, x, torch.from_numpy(feat).to(c["dtype"]), idx, off, off, with_xyz=True)
    g = g[0] if isinstance(g, tuple) else g
    ii = idx.long().numpy()
    want = np.concatenate([c["x"][ii] - c["x"][:, None], feat[ii]], -1)
    np.testing.assert_array_equal(g.double().numpy(), torch.from_numpy(want).to(c["dtype"]).double().numpy())


# ---------------------------------------------------------------- pointops_cuda: the compiled module's entry points


@fuzz(c=clouds(n_min=1, n_max=10, d_choices=(3,), kinds=EXACT_KINDS + ["nonfinite"], dtypes=[torch.float32], b_max=2),
      m=st.integers(1, 5), radius=st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5]), nsample=st.integers(1, 6),
      nclass=st.integers(1, 3))
def test_pointops_cuda_pointweb_searches(c, m, radius, nsample, nclass):
    from pcgeom.compat import pointops_cuda as P
    from tests.fuzz.strategies import make_points

    xyz_np = c["x"].astype(np.float32)
    b, n, _ = xyz_np.shape
    new_np = make_points(c["kind"], b * m, 3, torch.float32, c["seed"] + 1).reshape(b, m, 3).astype(np.float32)
    xyz, new_xyz = torch.from_numpy(xyz_np), torch.from_numpy(new_np)
    rng = np.random.default_rng(c["seed"])
    labels = torch.from_numpy(rng.integers(0, 3, (b, n, nclass)).astype(np.int32))
    r2 = np.float32(radius) * np.float32(radius)
    idx = torch.full((b, m, nsample), 7777, dtype=torch.int32)
    P.ballquery_cuda(b, n, m, radius, nsample, new_xyz, xyz, idx)
    stat = torch.full((b, m, nclass), -5, dtype=torch.int32)
    P.labelstat_ballrange_cuda(b, n, m, radius, nclass, new_xyz, xyz, labels, stat)
    d2n = torch.zeros(b, m, 3)
    i3 = torch.full((b, m, 3), -9, dtype=torch.int32)
    P.nearestneighbor_cuda(b, m, n, new_xyz, xyz, d2n, i3)
    dist_idx = torch.full((b, m), 99, dtype=torch.int32)
    P.featuredistribute_cuda(b, n, m, xyz, new_xyz, dist_idx)
    for bb in range(b):
        for i in range(m):
            d2 = sq_dist_acc(xyz_np[bb], new_np[bb, i])
            with np.errstate(invalid="ignore"):
                hits = np.flatnonzero(d2 < r2)
            want = np.full(nsample, 7777) if len(hits) == 0 else np.concatenate(
                [hits[:nsample], np.full(max(0, nsample - len(hits)), hits[0])])
            np.testing.assert_array_equal(idx[bb, i].numpy(), want)
            np.testing.assert_array_equal(stat[bb, i].numpy(), labels[bb].numpy()[hits].sum(0))
            # 3 nearest among the non-NaN distances, ascending, ties to the lower index; unused: inf / 0
            cand = np.flatnonzero(~np.isnan(d2))
            cand = cand[np.lexsort((cand, d2[cand]))][:3]
            np.testing.assert_array_equal(i3[bb, i].numpy(), np.concatenate([cand, np.zeros(3 - len(cand), int)]))
            np.testing.assert_array_equal(d2n[bb, i].numpy(), np.concatenate([d2[cand], np.full(3 - len(cand), np.inf)]))
            with np.errstate(invalid="ignore"):
                ok = np.flatnonzero(d2 < 100000)
            near = -1 if len(ok) == 0 else int(ok[np.flatnonzero(d2[ok] == d2[ok].min())[0]])
            assert int(dist_idx[bb, i]) == near, (dist_idx[bb, i], near, d2)
    lab_idx = torch.from_numpy(rng.integers(0, n, (b, m, nsample)).astype(np.int32))
    out = torch.full((b, m, nclass), -5, dtype=torch.int32)
    P.labelstat_idx_cuda(b, n, m, nsample, nclass, labels, lab_idx, out)
    want = np.stack([labels[bb].numpy()[lab_idx[bb].numpy()].sum(1) for bb in range(b)])
    np.testing.assert_array_equal(out.numpy(), want)


@fuzz(b=st.integers(1, 2), n=st.integers(1, 6), m=st.integers(1, 6), c=st.integers(1, 3), nsample=st.integers(1, 4),
      w_c=st.integers(1, 3), dtype=st.sampled_from([torch.float32, torch.float64]), seed=st.integers(0, 2**31))
def test_pointops_cuda_gathers_and_their_gradients(b, n, m, c, nsample, w_c, dtype, seed):
    """Forward outputs start at zero; backward ones start at a random base, which they must add to."""
    from pcgeom.compat import pointops_cuda as P

    rng = np.random.default_rng(seed)
    T = lambda a: torch.tensor(a, dtype=dtype)  # a copy: the backward kernels add into their output in place  # noqa: E731
    I = lambda a: torch.from_numpy(np.ascontiguousarray(a)).int()  # noqa: E731
    # gathering (b, c, n) at idx (b, m)
    pts, idx = _ints(rng, (b, c, n)), rng.integers(0, n, (b, m))
    out = torch.zeros(b, c, m, dtype=dtype)
    P.gathering_forward_cuda(b, c, n, m, T(pts), I(idx), out)
    np.testing.assert_array_equal(out.double().numpy(), np.take_along_axis(pts, idx[:, None, :].repeat(c, 1), 2))
    go, base = _ints(rng, (b, c, m)), _ints(rng, (b, c, n))
    gp = T(base)
    P.gathering_backward_cuda(b, c, n, m, T(go), I(idx), gp)
    want = base.copy()
    for bb in range(b):
        for j in range(m):
            want[bb, :, idx[bb, j]] += go[bb, :, j]
    np.testing.assert_array_equal(gp.double().numpy(), want)
    # featuregather: the same read through distribute_idx
    out = torch.zeros(b, c, m, dtype=dtype)
    P.featuregather_forward_cuda(b, n, m, c, T(pts), I(idx), out)
    np.testing.assert_array_equal(out.double().numpy(), np.take_along_axis(pts, idx[:, None, :].repeat(c, 1), 2))
    gp = T(base)
    P.featuregather_backward_cuda(b, n, m, c, T(go), I(idx), gp)
    np.testing.assert_array_equal(gp.double().numpy(), want)
    # integer grouping (b, c, n) at (b, m, nsample)
    gidx = rng.integers(0, n, (b, m, nsample))
    ipts = rng.integers(-9, 10, (b, c, n))
    iout = torch.zeros(b, c, m, nsample, dtype=torch.int64)
    P.grouping_int_forward_cuda(b, c, n, m, nsample, torch.from_numpy(ipts), I(gidx), iout)
    np.testing.assert_array_equal(iout.numpy(), np.stack([ipts[bb][:, gidx[bb]] for bb in range(b)]))
    # POSTECH packed forms: subtraction, aggregation, grouping, interpolation (n rows, nsample neighbours)
    a1, a2, sidx = _ints(rng, (n, c)), _ints(rng, (n, c)), rng.integers(0, n, (n, nsample))
    sub = torch.zeros(n, nsample, c, dtype=dtype)
    P.subtraction_forward_cuda(n, nsample, c, T(a1), T(a2), I(sidx), sub)
    np.testing.assert_array_equal(sub.double().numpy(), a1[:, None] - a2[sidx])
    gout, b1, b2 = _ints(rng, (n, nsample, c)), _ints(rng, (n, c)), _ints(rng, (n, c))
    g1, g2 = T(b1), T(b2)
    P.subtraction_backward_cuda(n, nsample, c, I(sidx), T(gout), g1, g2)
    w1, w2 = b1 + gout.sum(1), b2.copy()
    np.subtract.at(w2, sidx.reshape(-1), gout.reshape(-1, c))
    np.testing.assert_array_equal(g1.double().numpy(), w1)
    np.testing.assert_array_equal(g2.double().numpy(), w2)
    pos, wt = _ints(rng, (n, nsample, c)), _ints(rng, (n, nsample, w_c))
    agg = torch.zeros(n, c, dtype=dtype)
    P.aggregation_forward_cuda(n, nsample, c, w_c, T(a1), T(pos), T(wt), I(sidx), agg)
    np.testing.assert_array_equal(agg.double().numpy(), _aggregation_oracle(a1, sidx, wt, pos))
    g_out = _ints(rng, (n, c))
    gi_base, gw_base = _ints(rng, (n, c)), _ints(rng, (n, nsample, w_c))
    gi, gw, gpos = T(gi_base), T(gw_base), torch.full((n, nsample, c), 1234.0, dtype=dtype)
    P.aggregation_backward_cuda(n, nsample, c, w_c, T(a1), T(pos), T(wt), I(sidx), T(g_out), gi, gpos, gw)
    wi, ww, wp = gi_base.copy(), gw_base.copy(), np.zeros((n, nsample, c))
    for i in range(n):
        for j in range(nsample):
            for cc in range(c):
                wi[sidx[i, j], cc] += g_out[i, cc] * wt[i, j, cc % w_c]
                ww[i, j, cc % w_c] += g_out[i, cc] * (a1[sidx[i, j], cc] + pos[i, j, cc])
                wp[i, j, cc] = g_out[i, cc] * wt[i, j, cc % w_c]
    np.testing.assert_array_equal(gi.double().numpy(), wi)
    np.testing.assert_array_equal(gw.double().numpy(), ww)
    np.testing.assert_array_equal(gpos.double().numpy(), wp)
    grp = torch.zeros(n, nsample, c, dtype=dtype)
    P.grouping_forward_cuda(n, nsample, c, T(a1), I(sidx), grp)
    np.testing.assert_array_equal(grp.double().numpy(), a1[sidx])
    iw = _ints(rng, (n, nsample))
    interp = torch.zeros(n, c, dtype=dtype)
    P.interpolation_forward_cuda(n, c, nsample, T(a1), I(sidx), T(iw), interp)
    np.testing.assert_array_equal(interp.double().numpy(), (iw[..., None] * a1[sidx]).sum(1))
