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
from tests.fuzz.strategies import clouds, fuzz, make_points, packed_clouds  # noqa: E402
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
            with np.errstate(invalid="ignore"):
                # Euclidean = sqrt of the exact float32 dist2, within one float32 ulp (not promised correctly rounded)
                np.testing.assert_allclose(dist[b].numpy(), np.sqrt(od), rtol=2.5e-7, atol=0, equal_nan=True)


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
