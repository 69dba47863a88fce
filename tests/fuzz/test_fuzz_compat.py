"""Differential fuzz of the compat stand-ins (knn_cuda, pointnet2_ops, torch_cluster, torch_scatter, pointops,
chamfer_ext, simple_knn, densefusion) against the numpy oracles: only their public names are imported."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hypothesis")
import torch  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pcgeom.compat import chamfer_ext, densefusion, knn_cuda, pointnet2_ops, pointops, simple_knn  # noqa: E402
from pcgeom.compat import torch_cluster, torch_scatter  # noqa: E402
from tests.fuzz.strategies import clouds, dist_oracle, fuzz, make_points, packed_clouds, round_to_dtype  # noqa: E402
from tests.oracle import acc_np_dtype, knn_oracle_acc, rank_order, segment_reduce_oracle, sq_dist_acc  # noqa: E402

EXACT_KINDS = ["lattice", "repeated", "few_distinct", "collinear", "planar", "nonfinite", "extreme"]


@fuzz(c=clouds(n_min=1, n_max=12, kinds=EXACT_KINDS), k=st.integers(1, 14), M=st.integers(1, 5),
      transpose=st.booleans())
def test_knn_cuda(c, k, M, transpose):
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    B, N, D = x.shape
    q = torch.from_numpy(make_points(c["kind"], B * M, D, c["dtype"], c["seed"] + 1).reshape(B, M, D)).to(c["dtype"])
    knn = knn_cuda.KNN(k, transpose_mode=transpose)
    try:
        dist, idx = knn(x, q) if transpose else knn(x.transpose(1, 2), q.transpose(1, 2))
    except ValueError as exc:
        assert k > N and "k" in str(exc), exc
        return
    assert k <= N
    if not transpose:
        dist, idx = dist.transpose(1, 2), idx.transpose(1, 2)
    for b in range(B):
        qq, pp = q[b].float().double().numpy().astype(np.float32), x[b].float().double().numpy().astype(np.float32)
        od, oi = knn_oracle_acc(qq, pp, k)
        if c["exact"]:
            np.testing.assert_array_equal(idx[b].numpy(), oi)
            # Euclidean = the correctly rounded root of the exact float32 dist2
            np.testing.assert_array_equal(dist[b].double().numpy(), dist_oracle(od, torch.float32))


@fuzz(c=clouds(n_min=1, n_max=12, d_choices=(3,), kinds=EXACT_KINDS), n=st.integers(1, 4))
def test_pointnet2_three_nn_and_gather(c, n):
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    B, N, _ = x.shape
    q = torch.from_numpy(make_points(c["kind"], B * n, 3, c["dtype"], c["seed"] + 1).reshape(B, n, 3)).to(c["dtype"])
    dist, idx = pointnet2_ops.three_nn(q, x)
    acc = acc_np_dtype(c["dtype"])
    for b in range(B):
        od, oi = knn_oracle_acc(q[b].double().numpy().astype(acc), x[b].double().numpy().astype(acc), 3)
        if c["exact"]:
            np.testing.assert_array_equal(idx[b].numpy(), np.where(oi < 0, 0, oi))
            # the exact root of the float32 (float64) squared distance, rounded once (inf where < 3 points)
            np.testing.assert_array_equal(dist[b].double().numpy(), dist_oracle(od, c["dtype"]))
    f = torch.from_numpy(np.arange(B * 2 * N, dtype=float).reshape(B, 2, N)).to(c["dtype"])
    i32 = idx.int()
    g = pointnet2_ops.gather_operation(f, i32[:, :, 0].contiguous())
    np.testing.assert_array_equal(g.double().numpy(), np.take_along_axis(f.double().numpy(), i32[:, None, :, 0].long().expand(B, 2, n).numpy(), 2))
    gg = pointnet2_ops.grouping_operation(f, i32)
    want = np.stack([f[b].double().numpy()[:, i32[b].long().numpy()] for b in range(B)])
    np.testing.assert_array_equal(gg.double().numpy(), want)
    bad = i32.clone()
    bad[..., 0] = N
    with pytest.raises(ValueError, match="idx"):
        pointnet2_ops.grouping_operation(f, bad)


@fuzz(c=clouds(n_min=1, n_max=12, d_choices=(3,), kinds=EXACT_KINDS), S=st.integers(1, 4), ns=st.integers(1, 8),
      radius=st.sampled_from([0.0, 1.0, 1.5, 2.5]))
def test_pointnet2_ball_query(c, S, ns, radius):
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    B = x.shape[0]
    q = torch.from_numpy(make_points(c["kind"], B * S, 3, c["dtype"], c["seed"] + 1).reshape(B, S, 3)).to(c["dtype"])
    idx = pointnet2_ops.ball_query(radius, ns, x, q)
    assert idx.dtype == torch.int32 and idx.shape == (B, S, ns)
    if not c["exact"]:
        return
    for b in range(B):
        pp, qq = x[b].double().numpy().astype(np.float32), q[b].double().numpy().astype(np.float32)
        for s in range(S):
            with np.errstate(invalid="ignore"):
                hits = np.flatnonzero(sq_dist_acc(pp, qq[s]) < np.float32(radius * radius))[:ns]
            want = np.zeros(ns, np.int64) if len(hits) == 0 else np.concatenate([hits, np.full(ns - len(hits), hits[0])])
            np.testing.assert_array_equal(idx[b, s].numpy(), want)


@fuzz(c=clouds(n_min=1, n_max=16, d_choices=(3,)), n=st.integers(1, 20))
def test_pointnet2_furthest_point_sample(c, n):
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    N = x.shape[1]
    try:
        idx = pointnet2_ops.furthest_point_sample(x, n)
    except ValueError as exc:
        assert n > N and "npoint" in str(exc), exc
        return
    assert n <= N and idx.dtype == torch.int32 and idx.shape == (x.shape[0], n)
    assert ((idx >= 0) & (idx < N)).all() and (idx[:, 0] == 0).all()


@fuzz(c=packed_clouds(kinds=EXACT_KINDS), k=st.integers(1, 6), r=st.sampled_from([0.5, 1.0, 2.0, 3.0]),
      max_nb=st.integers(1, 6))
def test_torch_cluster_search(c, k, r, max_nb):
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    batch_np = np.repeat(np.arange(len(c["lens"])), c["lens"])
    batch = torch.from_numpy(batch_np)
    acc = acc_np_dtype(c["dtype"])
    xa = c["x"].astype(acc)
    ei = torch_cluster.knn(x, x, k, batch, batch).numpy()
    rad = torch_cluster.radius(x, x, r, batch, batch, max_num_neighbors=max_nb).numpy()
    kg = torch_cluster.knn_graph(x, k, batch).numpy()
    if not c["exact"]:
        return
    want_k, want_r, want_g = [], [], []
    for i in range(x.shape[0]):
        cand = np.flatnonzero(batch_np == batch_np[i])
        d = sq_dist_acc(xa[cand], xa[i])
        want_k += [(i, int(j)) for j in cand[rank_order(d, cand)[:k]]]
        with np.errstate(invalid="ignore"):
            inside = cand[d < acc(r) * acc(r)][:max_nb]  # open ball, r*r in the input dtype, first in index order
        want_r += [(i, int(j)) for j in inside]
        other = cand != i
        want_g += [(int(j), i) for j in cand[other][rank_order(d[other], cand[other])[:k]]]
    np.testing.assert_array_equal(ei, np.array(want_k, np.int64).reshape(-1, 2).T)
    np.testing.assert_array_equal(rad, np.array(want_r, np.int64).reshape(-1, 2).T)
    np.testing.assert_array_equal(kg, np.array(want_g, np.int64).reshape(-1, 2).T)
    if len(c["lens"]) == 1 and x.shape[0]:
        near = torch_cluster.nearest(x, x).numpy()
        np.testing.assert_array_equal(near, [int(rank_order(sq_dist_acc(xa, xa[i]), np.arange(len(xa)))[0]) for i in range(len(xa))])


@fuzz(c=packed_clouds(kinds=EXACT_KINDS, min_len=1), ratio=st.sampled_from([0.1, 0.5, 1.0]))
def test_torch_cluster_fps(c, ratio):
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    batch = torch.from_numpy(np.repeat(np.arange(len(c["lens"])), c["lens"]))
    idx = torch_cluster.fps(x, batch, ratio=ratio, random_start=False).numpy()
    want_n = sum(int(np.ceil(ratio * n)) for n in c["lens"])
    assert len(idx) == want_n and len(np.unique(idx)) == want_n
    lo = 0
    pos = 0
    for n, hi in zip(c["lens"], c["offsets"]):
        m = int(np.ceil(ratio * n))
        seg = idx[pos:pos + m]
        assert ((seg >= lo) & (seg < hi)).all() and seg[0] == lo
        pos += m
        lo = hi


@fuzz(N=st.integers(0, 12), G=st.integers(1, 5), C=st.integers(1, 3), reduce=st.sampled_from(["sum", "mean", "min", "max", "mul"]),
      dtype=st.sampled_from([torch.float32, torch.float64, torch.int64]), seed=st.integers(0, 2**31))
def test_torch_scatter(N, G, C, reduce, dtype, seed):
    rng = np.random.default_rng(seed)
    src_np = rng.integers(-3, 4, (N, C)).astype(float)
    index_np = rng.integers(0, G, N)
    src, index = torch.from_numpy(src_np).to(dtype), torch.from_numpy(index_np)
    got = torch_scatter.scatter(src, index, dim=0, dim_size=G, reduce=reduce)
    groups = [np.flatnonzero(index_np == g) for g in range(G)]
    want = segment_reduce_oracle(src_np, groups, {"mul": "prod"}.get(reduce, reduce))
    if reduce == "mean" and not dtype.is_floating_point:
        want = np.stack([src_np[g].sum(0) // len(g) if len(g) else np.zeros(C) for g in groups])
    if reduce in ("min", "max"):
        want[[len(g) == 0 for g in groups]] = 0  # torch_scatter: empty groups are 0
    np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-6)
    order = np.argsort(index_np, kind="stable")
    indptr = torch.from_numpy(np.concatenate([[0], np.cumsum([len(g) for g in groups])]))
    seg = torch_scatter.segment_csr(src[torch.from_numpy(order)], indptr, reduce=reduce if reduce != "mul" else "sum")
    want_seg = segment_reduce_oracle(src_np[order], [np.arange(int(indptr[g]), int(indptr[g + 1])) for g in range(G)],
                                     reduce if reduce != "mul" else "sum")
    if reduce == "mean" and not dtype.is_floating_point:
        # segment_csr divides integers truncating (torch_scatter's C++ kernel); scatter floors
        want_seg = np.stack([np.trunc(src_np[g].sum(0) / len(g)) if len(g) else np.zeros(C) for g in groups])
    if reduce in ("min", "max"):
        want_seg[[len(g) == 0 for g in groups]] = 0
    np.testing.assert_allclose(seg.double().numpy(), want_seg, rtol=1e-6)
    back = torch_scatter.gather_csr(seg, indptr)
    np.testing.assert_array_equal(back.numpy(), seg.numpy()[np.repeat(np.arange(G), [len(g) for g in groups])])
    if dtype.is_floating_point and N:
        sm = torch_scatter.scatter_softmax(src.t(), index, dim=1).t().double().numpy()
        for g in groups:
            if len(g):
                e = np.exp(src_np[g] - src_np[g].max(0))
                np.testing.assert_allclose(sm[g], e / e.sum(0), rtol=1e-5)


@fuzz(c=packed_clouds(kinds=EXACT_KINDS, d_choices=(3,), min_len=1), ns=st.integers(1, 8))
def test_pointops(c, ns):
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    off = torch.tensor(c["offsets"], dtype=torch.int32)
    np.testing.assert_array_equal(pointops.offset2batch(off).numpy(), np.repeat(np.arange(len(c["lens"])), c["lens"]))
    np.testing.assert_array_equal(pointops.batch2offset(pointops.offset2batch(off)).numpy(), c["offsets"])
    idx, dist = pointops.knn_query(ns, x, off)
    acc = acc_np_dtype(c["dtype"])
    lo = 0
    for hi in c["offsets"]:
        seg = c["x"][lo:hi].astype(acc)
        od, oi = knn_oracle_acc(seg, seg, ns)
        if c["exact"]:
            np.testing.assert_array_equal(np.where(idx[lo:hi].numpy() >= 0, idx[lo:hi].numpy() - lo, -1), oi)
            # the exact root of the float32 (float64) squared distance, rounded once; 1e5 where idx = -1
            np.testing.assert_array_equal(dist[lo:hi].double().numpy(), np.where(oi >= 0, dist_oracle(od, c["dtype"]), round_to_dtype(1e5, c["dtype"])))
        lo = hi
    new_off = torch.tensor(np.cumsum([max(1, n // 2) for n in c["lens"]]), dtype=torch.int32)
    s = pointops.farthest_point_sampling(x, off, new_off).numpy()
    starts = np.concatenate([[0], c["offsets"][:-1]])
    firsts = np.concatenate([[0], new_off.numpy()[:-1]])
    np.testing.assert_array_equal(s[firsts], starts)  # each cloud starts at its first point


@fuzz(c=clouds(n_min=1, n_max=12, d_choices=(3,), kinds=EXACT_KINDS), M=st.integers(1, 6))
def test_chamfer_ext_and_densefusion(c, M):
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    B = x.shape[0]
    y = torch.from_numpy(make_points(c["kind"], B * M, 3, c["dtype"], c["seed"] + 1).reshape(B, M, 3)).to(c["dtype"])
    d1, d2, i1, i2 = chamfer_ext.forward(x, y)
    assert i1.dtype == torch.int32 and i2.dtype == torch.int32
    nn = densefusion.KNearestNeighbor(1)(x.transpose(1, 2).float(), y.transpose(1, 2).float())
    acc = acc_np_dtype(c["dtype"])
    if not c["exact"]:
        return
    for b in range(B):
        xa, ya = x[b].double().numpy().astype(acc), y[b].double().numpy().astype(acc)
        od1, oi1 = knn_oracle_acc(xa, ya, 1)
        od2, oi2 = knn_oracle_acc(ya, xa, 1)
        np.testing.assert_array_equal(i1[b].numpy(), oi1[:, 0])
        np.testing.assert_array_equal(i2[b].numpy(), oi2[:, 0])
        np.testing.assert_array_equal(nn[b, 0].numpy() - 1, knn_oracle_acc(ya.astype(np.float32), xa.astype(np.float32), 1)[1][:, 0])


@fuzz(c=packed_clouds(kinds=EXACT_KINDS, d_choices=(3,), dtypes=[torch.float32], b_max=1))
def test_simple_knn_distCUDA2(c):
    x = torch.from_numpy(c["x"]).float()
    got = simple_knn.distCUDA2(x).double().numpy()
    xa = c["x"].astype(np.float32)
    fmax = np.float32(np.finfo(np.float32).max)
    for i in range(len(xa)):
        d = np.delete(sq_dist_acc(xa, xa[i]), i)
        # a NaN distance never beats the running best in simple-knn's kernel (d < best is false), so such a
        # neighbour is missing: it counts as FLT_MAX like the absent ones
        d = d[~np.isnan(d)]
        o = rank_order(d, np.arange(len(d)))[:3]
        vals = list(d[o]) + [fmax] * (3 - len(o))
        s = np.float32(0)
        with np.errstate(over="ignore", invalid="ignore"):
            for v in vals:
                s = np.float32(s + v)
            want = np.float32(s / np.float32(3))
        if len(xa) <= 2:
            want = np.float32(np.inf)  # documented: P <= 2 gives inf
        if not np.isfinite(xa).all():
            # undocumented and not one rule: NaN distances (NaN, or inf - inf) are sometimes skipped (inf), sometimes NaN;
            # reported for the docstring, only the finite clouds are compared
            assert got.shape == (len(xa),)
            continue
        if c["exact"]:
            assert got[i] == want or (np.isnan(got[i]) and np.isnan(want)), (i, got[i], want)


def _groups_values(seed, N, G, C, special):
    rng = np.random.default_rng(seed)
    src = rng.normal(0, 3, (N, C))
    if special and N:  # NaN / +-inf in a few places: NaN must propagate, inf stay inf
        mask = rng.random((N, C))
        src[mask < 0.08] = np.nan
        src[(mask >= 0.08) & (mask < 0.14)] = np.inf
        src[(mask >= 0.14) & (mask < 0.18)] = -np.inf
    index = rng.integers(0, G, N)
    return src, index, [np.flatnonzero(index == g) for g in range(G)]


@fuzz(N=st.integers(0, 14), G=st.integers(1, 5), C=st.integers(1, 3), special=st.booleans(), seed=st.integers(0, 2**31))
def test_torch_scatter_composites_and_args(N, G, C, special, seed):
    src_np, index_np, groups = _groups_values(seed, N, G, C, special)
    src, index = torch.from_numpy(src_np), torch.from_numpy(index_np)
    with np.errstate(all="ignore"):
        # logsumexp: NaN in a group -> NaN, +inf -> inf, empty or all -inf -> 0
        got = torch_scatter.scatter_logsumexp(src, index, dim=0, dim_size=G).numpy()
        for g, rows in enumerate(groups):
            x = src_np[rows]
            if len(rows) == 0:
                np.testing.assert_array_equal(got[g], 0.0)
                continue
            for c in range(C):
                col = x[:, c]
                if np.isnan(col).any():
                    assert np.isnan(got[g, c]), (g, c, got[g, c])
                elif np.isposinf(col).any():
                    assert got[g, c] == np.inf
                elif np.isneginf(col).all():
                    assert got[g, c] == 0.0  # -inf, mapped to 0 like an empty group (torch_scatter's rule)
                else:
                    m = col[np.isfinite(col)].max()
                    want = np.log(np.exp(col - m).sum() + 1e-12) + m
                    np.testing.assert_allclose(got[g, c], want, rtol=1e-12, atol=1e-12)
        if special:
            return
        # std (unbiased, as torch_scatter: count - 1 clamped at 1, plus 1e-6), log_softmax per group
        std = torch_scatter.scatter_std(src, index, dim=0, dim_size=G).numpy()
        lsm = torch_scatter.scatter_log_softmax(src, index, dim=0).numpy()
        for g, rows in enumerate(groups):
            x = src_np[rows]
            if len(rows) == 0:
                np.testing.assert_array_equal(std[g], 0.0)
                continue
            var = ((x - x.mean(0)) ** 2).sum(0) / (max(len(rows) - 1, 1) + 1e-6)  # torch_scatter adds 1e-6
            np.testing.assert_allclose(std[g], np.sqrt(var), rtol=1e-9, atol=1e-12)
            z = x - x.max(0)
            np.testing.assert_allclose(lsm[rows], z - np.log(np.exp(z).sum(0) + 1e-12), rtol=1e-9, atol=1e-12)  # eps as upstream
        # min / max with their arg: the lowest position among ties; empty slots -> value 0, arg N
        for reduce in ("min", "max"):
            val, arg = getattr(torch_scatter, f"scatter_{reduce}")(src, index, dim=0, dim_size=G)
            for g, rows in enumerate(groups):
                if len(rows) == 0:
                    assert (arg[g] == N).all() and (val[g] == 0).all()
                    continue
                x = src_np[rows]
                best = x.min(0) if reduce == "min" else x.max(0)
                np.testing.assert_array_equal(val[g].numpy(), best)
                first = np.array([rows[np.flatnonzero(x[:, c] == best[c])[0]] for c in range(C)])
                np.testing.assert_array_equal(arg[g].numpy(), first)
        # the *_coo functions on the sorted index equal scatter's per-group answers
        order = np.argsort(index_np, kind="stable")
        s_sorted, i_sorted = src[torch.from_numpy(order)], index[torch.from_numpy(order)]
        for reduce in ("sum", "mean", "min", "max"):
            coo = torch_scatter.segment_coo(s_sorted, i_sorted, dim_size=G, reduce=reduce)
            sc = torch_scatter.scatter(src, index, dim=0, dim_size=G, reduce=reduce)
            np.testing.assert_allclose(coo.numpy(), sc.numpy(), rtol=1e-12, atol=1e-12)


@fuzz(c=clouds(n_min=1, n_max=16, d_choices=(2, 3), kinds=["uniform", "lattice", "repeated", "few_distinct"],
               dtypes=[torch.float32, torch.float64]), size=st.sampled_from([0.25, 0.5, 1.0, 3.0]))
def test_torch_cluster_grid_cluster(c, size):
    pos = torch.from_numpy(c["x"][0]).to(c["dtype"])
    if not torch.isfinite(pos).all():
        return
    sz = torch.full((pos.shape[1],), size, dtype=c["dtype"])
    got = torch_cluster.grid_cluster(pos, sz).numpy()
    p, s = pos.double().numpy(), sz.double().numpy()
    start, end = p.min(0), p.max(0)
    cells = np.trunc((end - start) / s).astype(np.int64) + 1
    mult = np.concatenate([[1], np.cumprod(cells)[:-1]])
    vox = np.trunc((p - start) / s).astype(np.int64)
    # The stand-in divides in the input dtype, as torch_cluster: compare where float64 agrees on the cell.
    same = (np.trunc((pos - pos.min(0).values) / sz).double().numpy() == vox).all(1)
    np.testing.assert_array_equal(got[same], (vox * mult).sum(1)[same])
    # points in the same voxel share an id, different voxels never do
    ids = {}
    for v, gid in zip(map(tuple, vox[same]), got[same]):
        assert ids.setdefault(v, gid) == gid


@fuzz(c=clouds(n_min=1, n_max=14, d_choices=(2, 3), kinds=["lattice", "repeated", "few_distinct"],
               dtypes=[torch.float32, torch.float64], b_max=1),
      r=st.sampled_from([0.5, 1.0, 1.5, 2.0]), loop=st.booleans())
def test_torch_cluster_radius_graph(c, r, loop):
    x = torch.from_numpy(c["x"][0]).to(c["dtype"])
    if not torch.isfinite(x).all():
        return
    n = x.shape[0]
    ei = torch_cluster.radius_graph(x, r, loop=loop, max_num_neighbors=n + 1).numpy()
    got = set(map(tuple, ei.T))
    xd = x.double().numpy()
    d2 = sq_dist_acc(xd[:, None, :], xd[None, :, :])
    want = {(j, i) for i in range(n) for j in range(n) if d2[i, j] < r * r and (loop or i != j)}  # open ball, as torch_cluster
    assert got == want


@fuzz(B=st.integers(1, 2), m=st.integers(1, 6), n=st.integers(1, 5), C=st.integers(1, 3),
      dtype=st.sampled_from([torch.float32, torch.float64]), seed=st.integers(0, 2**31))
def test_pointnet2_three_interpolate_and_groupers(B, m, n, C, dtype, seed):
    rng = np.random.default_rng(seed)
    f = torch.from_numpy(rng.normal(size=(B, C, m))).to(dtype)
    idx = torch.from_numpy(rng.integers(0, m, (B, n, 3))).int()
    w = torch.from_numpy(rng.random((B, n, 3))).to(dtype)
    got = pointnet2_ops.three_interpolate(f, idx, w)
    want = np.stack([sum(w[b, :, j].double().numpy()[None, :] * f[b].double().numpy()[:, idx[b, :, j].long().numpy()]
                         for j in range(3)) for b in range(B)])
    np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-6)
    # GroupAll: coordinates (channel-first) then features, one group of every point
    xyz = torch.from_numpy(rng.integers(-2, 3, (B, m, 3)).astype(float)).to(dtype)
    ga = pointnet2_ops.GroupAll(use_xyz=True)(xyz, None, f)  # forward(xyz, new_xyz, features), as upstream
    assert torch.equal(ga, torch.cat([xyz.transpose(1, 2), f], 1)[:, :, None, :])
    # QueryAndGroup: the ball query's indices, coordinates relative to the centre, then the features
    new_xyz = xyz[:, : min(n, m)].contiguous()
    ns = 1 + seed % 4
    qg = pointnet2_ops.QueryAndGroup(1.5, ns, use_xyz=True)(xyz, new_xyz, f)
    bq = pointnet2_ops.ball_query(1.5, ns, xyz, new_xyz).long()
    for b in range(B):
        g = bq[b]
        rel = (xyz[b][g] - new_xyz[b][:, None, :]).permute(2, 0, 1)
        assert torch.equal(qg[b, :3], rel)
        assert torch.equal(qg[b, 3:], f[b][:, g])


@fuzz(c=packed_clouds(kinds=["lattice", "repeated", "few_distinct"], d_choices=(3,), min_len=1,
                      dtypes=[torch.float64]), C=st.integers(1, 3), seed=st.integers(0, 2**31))
def test_pointops_interpolation(c, C, seed):
    # Pointcept's interpolation: weights 1 / (d + 1e-8) over the 3 nearest points of the same cloud, normalised.
    x = torch.from_numpy(c["x"])
    off = torch.tensor(c["offsets"], dtype=torch.int32)
    rng = np.random.default_rng(seed)
    feat_np = rng.normal(size=(x.shape[0], C))
    q_np = make_points(c["kind"], x.shape[0], 3, torch.float64, c["seed"] + 3)
    got = pointops.interpolation(x, torch.from_numpy(q_np), torch.from_numpy(feat_np), off, off).numpy()
    lo = 0
    for hi in c["offsets"]:
        d2, oi = knn_oracle_acc(q_np[lo:hi], c["x"][lo:hi], 3)
        for r in range(hi - lo):
            # A cloud with fewer than 3 points: the original's padding slot (idx -1, distance 1e5) reads
            # Python's feat[-1], the last row of the packed features -- documented, kept.
            ok = oi[r] >= 0
            d = np.where(ok, np.sqrt(np.where(ok, d2[r], 0.0)), 1e5)
            rows = np.where(ok, lo + oi[r], feat_np.shape[0] - 1)
            w = 1.0 / (d + 1e-8)
            w = w / w.sum()
            np.testing.assert_allclose(got[lo + r], (w[:, None] * feat_np[rows]).sum(0), rtol=1e-9, atol=1e-12)
        lo = hi
