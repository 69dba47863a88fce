"""Differential fuzz of the capabilities (segment / group reductions, packed-batch helpers, graphs, grid
subsampling, outliers, normals, grouping, features, serialization) against numpy oracles."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("hypothesis")
import torch  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import pcgeom  # noqa: E402
from tests.fuzz.strategies import LAYOUTS, as_layout, clouds, fuzz, lengths_tensor, make_points, packed_clouds  # noqa: E402
from tests.oracle import acc_np_dtype, knn_oracle_acc, rank_order, round_to, segment_reduce_oracle, sq_dist_acc  # noqa: E402

REDUCES = ["sum", "mean", "prod", "min", "max"]
RED_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32]


def _reduce_check(got, src_np, groups, reduce, dtype, got_arg=None, n_rows=None):
    want = segment_reduce_oracle(src_np, groups, reduce)
    if dtype.is_floating_point:
        want = round_to(want, dtype)
        tol = 0 if reduce != "mean" or dtype in (torch.float32, torch.float64) else 1e-2
        np.testing.assert_allclose(got.double().numpy(), want, rtol=tol, atol=0)
    else:
        if reduce == "mean":  # integers: floor division
            want = np.stack([src_np[g].sum(0) // len(g) if len(g) else np.zeros(src_np.shape[1:]) for g in groups]) \
                if groups else want
        np.testing.assert_array_equal(got.numpy(), want.astype(np.int64))
    if got_arg is not None:
        for gi, rows in enumerate(groups):
            a = got_arg[gi].numpy()
            if len(rows) == 0:
                assert (a == n_rows).all()
                continue
            x = src_np[rows]
            best = x.min(0) if reduce == "min" else x.max(0)
            first = np.array([rows[np.flatnonzero(x[:, c] == best[c])[0]] for c in range(x.shape[1])])
            np.testing.assert_array_equal(a, first)


@fuzz(lens=st.lists(st.integers(0, 6), min_size=1, max_size=5), C=st.integers(1, 3),
      reduce=st.sampled_from(REDUCES), dtype=st.sampled_from(RED_DTYPES), seed=st.integers(0, 2**31),
      return_arg=st.booleans())
def test_segment_reduce(lens, C, reduce, dtype, seed, return_arg):
    rng = np.random.default_rng(seed)
    N = sum(lens)
    src_np = rng.integers(-3, 4, (N, C)).astype(float)
    src = torch.from_numpy(src_np).to(dtype)
    offsets = torch.tensor(np.cumsum(lens))
    return_arg = return_arg and reduce in ("min", "max")
    out = pcgeom.segment_reduce(src, offsets, reduce, return_arg=return_arg)
    got, arg = out if return_arg else (out, None)
    groups = [np.arange(e - n, e) for n, e in zip(lens, np.cumsum(lens))]
    assert got.shape == (len(lens), C) and got.dtype == dtype
    _reduce_check(got, src_np, groups, reduce, dtype, arg, N)


@fuzz(N=st.integers(0, 12), G=st.integers(0, 5), C=st.integers(1, 3), reduce=st.sampled_from(REDUCES),
      dtype=st.sampled_from(RED_DTYPES), seed=st.integers(0, 2**31), return_arg=st.booleans(),
      index_dtype=st.sampled_from([torch.int64, torch.int32]))
def test_group_reduce_and_gather(N, G, C, reduce, dtype, seed, return_arg, index_dtype):
    rng = np.random.default_rng(seed)
    if G == 0:
        N = 0
    src_np = rng.integers(-3, 4, (N, C)).astype(float)
    index_np = rng.integers(0, max(G, 1), N)
    src, index = torch.from_numpy(src_np).to(dtype), torch.from_numpy(index_np).to(index_dtype)
    return_arg = return_arg and reduce in ("min", "max")
    out = pcgeom.group_reduce(src, index, G, reduce, return_arg=return_arg)
    got, arg = out if return_arg else (out, None)
    groups = [np.flatnonzero(index_np == g) for g in range(G)]
    assert got.shape == (G, C)
    _reduce_check(got, src_np, groups, reduce, dtype, arg, N)
    if G:
        back = pcgeom.group_gather(got, index)
        wide = (lambda t: t.double().numpy() if t.is_floating_point() else t.numpy())
        np.testing.assert_array_equal(wide(back), wide(got)[index_np])
        bad = index.clone()
        if N:
            bad[0] = G  # out of range: a named refusal, not an IndexError from index_select
            with pytest.raises(ValueError, match="index"):
                pcgeom.group_reduce(src, bad, G, reduce)
            with pytest.raises(ValueError, match="index"):
                pcgeom.group_gather(got, bad)


@fuzz(lens=st.lists(st.integers(0, 5), min_size=1, max_size=6), extra=st.integers(0, 2))
def test_offsets_and_batch(lens, extra):
    off = torch.tensor(np.cumsum(lens))
    batch = pcgeom.offsets_to_batch(off)
    np.testing.assert_array_equal(batch.numpy(), np.repeat(np.arange(len(lens)), lens))
    back = pcgeom.batch_to_offsets(batch, len(lens) + extra)
    np.testing.assert_array_equal(back.numpy(), np.concatenate([np.cumsum(lens), np.full(extra, sum(lens))]))
    if sum(lens) and len(lens) > 1 and lens[0]:
        dec = off.flip(0)
        if not torch.equal(dec, off):
            with pytest.raises(ValueError, match="offsets"):
                pcgeom.offsets_to_batch(dec)


@fuzz(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), seed=st.integers(0, 2**31))
def test_fill_missing(shape, seed):
    rng = np.random.default_rng(seed)
    idx_np = np.where(rng.random(shape) < 0.4, -1, rng.integers(0, 9, shape))
    got = pcgeom.fill_missing(torch.from_numpy(idx_np)).numpy()
    first = idx_np[..., :1]
    want = np.where(idx_np == -1, first, idx_np)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(TypeError):
        pcgeom.fill_missing(torch.from_numpy(idx_np).int())


def _others_oracle(p, k):
    """Per point: the k nearest other points' (distances, indices) in p's dtype (self excluded by index)."""
    out = []
    for i in range(p.shape[0]):
        d = sq_dist_acc(p, p[i])
        cand = np.delete(np.arange(p.shape[0]), i)
        d = np.delete(d, i)
        o = rank_order(d, cand)[:k]
        out.append((d[o], cand[o]))
    return out


@fuzz(c=packed_clouds(), k=st.integers(1, 6))
def test_mean_neighbor_dist2(c, k):
    dtype = c["dtype"]
    x = torch.from_numpy(c["x"]).to(dtype)
    got = pcgeom.mean_neighbor_dist2(x, k, offsets=torch.tensor(c["offsets"])).double().numpy()
    acc = acc_np_dtype(dtype)
    lo = 0
    for hi in c["offsets"]:
        seg = c["x"][lo:hi].astype(acc)
        for i, (d, _) in enumerate(_others_oracle(seg, k)):
            if len(d) == 0:
                want = np.inf
            else:
                s = acc(0)
                # documented: knn's dist2 -- already rounded to the input dtype (float16 squares of 1e-4
                # underflow to 0 there) -- summed nearest first in the accumulation dtype
                with np.errstate(all="ignore"):
                    for v in round_to(d, dtype).astype(acc):
                        s = acc(s + v)
                    want = acc(s / acc(len(d)))
            w = round_to(np.array([want]), dtype)[0]
            if c["exact"]:
                assert (got[lo + i] == w) or (np.isnan(got[lo + i]) and np.isnan(w)), (got[lo + i], w)
            else:
                np.testing.assert_allclose(got[lo + i], w, rtol=2e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-5,
                                           equal_nan=True)
        lo = hi


def _graph_oracle(x, batch, k=None, r2=None, loop=False, max_nb=None):
    edges = []
    for i in range(x.shape[0]):
        cand = np.flatnonzero(batch == batch[i])
        if not loop:
            cand = cand[cand != i]
        d = sq_dist_acc(x[cand], x[i]) if len(cand) else np.zeros(0, x.dtype)
        if r2 is not None:
            with np.errstate(invalid="ignore"):
                keep = d <= r2
            d, cand = d[keep], cand[keep]
        o = rank_order(d, cand)[: (k if k is not None else max_nb)]
        edges += [(int(j), i) for j in cand[o]]
    return np.array(edges, dtype=np.int64).reshape(-1, 2).T


@fuzz(c=packed_clouds(kinds=["lattice", "repeated", "few_distinct", "collinear", "planar", "nonfinite", "extreme"]),
      k=st.integers(1, 8), loop=st.booleans(), flow=st.sampled_from(["source_to_target", "target_to_source"]))
def test_knn_graph(c, k, loop, flow):
    dtype = c["dtype"]
    x = torch.from_numpy(c["x"]).to(dtype)
    batch = np.repeat(np.arange(len(c["lens"])), c["lens"])
    ei = pcgeom.knn_graph(x, k, batch=torch.from_numpy(batch), loop=loop, flow=flow).numpy()
    want = _graph_oracle(c["x"].astype(acc_np_dtype(dtype)), batch, k=k, loop=loop)
    if not c["exact"]:
        assert ei.shape == want.shape
        return
    np.testing.assert_array_equal(ei, want if flow == "source_to_target" else want[::-1])


@fuzz(c=packed_clouds(kinds=["lattice", "repeated", "few_distinct", "collinear", "planar", "nonfinite"]),
      r=st.sampled_from([0.0, 1.0, 1.5, 2.0, 3.0]), loop=st.booleans(), max_nb=st.integers(1, 6))
def test_radius_graph(c, r, loop, max_nb):
    dtype = c["dtype"]
    x = torch.from_numpy(c["x"]).to(dtype)
    batch = np.repeat(np.arange(len(c["lens"])), c["lens"])
    ei = pcgeom.radius_graph(x, r, batch=torch.from_numpy(batch), loop=loop, max_num_neighbors=max_nb).numpy()
    acc = acc_np_dtype(dtype)
    want = _graph_oracle(c["x"].astype(acc), batch, r2=acc(r * r), loop=loop, max_nb=max_nb)
    np.testing.assert_array_equal(ei, want)


@fuzz(c=packed_clouds(kinds=["uniform", "lattice", "repeated", "few_distinct", "collinear", "planar", "nonfinite"],
                      dtypes=[torch.float32, torch.float64]),
      vs=st.sampled_from([0.5, 1.0, 2.0, 3.0]), reduce=st.sampled_from(["first", "mean"]))
def test_grid_subsample(c, vs, reduce):
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    off = torch.tensor(c["offsets"])
    if not np.isfinite(c["x"]).all():
        with pytest.raises(ValueError, match="finite"):
            pcgeom.grid_subsample(x, vs, offsets=off, reduce=reduce)
        return
    res = pcgeom.grid_subsample(x, vs, offsets=off, reduce=reduce)
    pts, clusters, index, offs = [], [], [], []
    lo = 0
    for hi in c["offsets"]:
        seg = c["x"][lo:hi]
        if hi > lo:
            vox = np.floor((seg - seg.min(0)) / vs)
            _, first, inv = np.unique(vox, axis=0, return_index=True, return_inverse=True)
            inv = inv.reshape(-1)
            rank = np.argsort(np.argsort(first))  # voxels in the order of their first point
            base = len(index)
            for v in np.argsort(first):
                rows = np.flatnonzero(inv == v)
                index.append(lo + rows[0])
                pts.append(seg[rows[0]] if reduce == "first" else seg[rows].sum(0) / len(rows))
            clusters += list(base + rank[inv])
        offs.append(len(index))
        lo = hi
    np.testing.assert_array_equal(res.offsets.numpy(), offs)
    np.testing.assert_array_equal(res.index.numpy(), index)
    np.testing.assert_array_equal(res.cluster.numpy(), clusters)
    want = round_to(np.array(pts).reshape(-1, x.shape[1]), c["dtype"])
    np.testing.assert_allclose(res.points.double().numpy(), want, rtol=0 if reduce == "first" else 1e-6)


def _statistical_oracle(p, k, std_ratio):
    n = p.shape[0]
    avg = np.zeros(n)
    finite = np.isfinite(p).all(1)
    for i in range(n):
        if not finite[i]:
            continue
        d = sq_dist_acc(p[finite], p[i])
        cand = np.flatnonzero(finite)
        o = rank_order(d, cand)[:k]
        s = 0.0
        for v in np.sqrt(d[o]):
            s += v
        avg[i] = s / len(o)
    pos = avg[avg > 0]
    cnt = int(finite.sum())
    if cnt == 0:
        return np.zeros(n, bool)
    # Open3D's std::accumulate and std::inner_product: sums in point order (numpy's pairwise sum rounds
    # differently: eight copies of 1.4 have the sequential mean 1.4000000000000001, and that decides
    # whether a cloud whose points all have the same average distance is kept)
    total = 0.0
    for v in pos:
        total += v
    mean = total / cnt
    sq = 0.0
    for v in pos:
        sq += (v - mean) * (v - mean)
    std = math.sqrt(sq / (cnt - 1)) if cnt > 1 else 0.0
    return finite & (avg > 0) & (avg < mean + std_ratio * std)


@fuzz(c=packed_clouds(kinds=["uniform", "lattice", "few_distinct", "collinear", "planar", "nonfinite"],
                      dtypes=[torch.float64]),
      k=st.integers(1, 6), std_ratio=st.sampled_from([0.5, 1.0, 2.0]),
      radius=st.sampled_from([0.5, 1.0, 1.5, 2.0, 10.0]), min_nb=st.integers(1, 4))
def test_outliers(c, k, std_ratio, radius, min_nb):
    x = torch.from_numpy(c["x"])
    off = torch.tensor(c["offsets"])
    stat = pcgeom.remove_statistical_outliers(x, k, std_ratio, offsets=off).numpy()
    rad = pcgeom.remove_radius_outliers(x, radius, min_nb, offsets=off).numpy()
    lo = 0
    for hi in c["offsets"]:
        seg = c["x"][lo:hi]
        np.testing.assert_array_equal(stat[lo:hi], _statistical_oracle(seg, k, std_ratio))
        finite = np.isfinite(seg).all(1)
        want = np.array([finite[i] and int((sq_dist_acc(seg[finite], seg[i]) < radius * radius).sum()) > min_nb
                         for i in range(hi - lo)], dtype=bool)
        np.testing.assert_array_equal(rad[lo:hi], want)
        lo = hi


@fuzz(weight=0.5, c=clouds(n_min=1, n_max=16, d_choices=(3,), dtypes=[torch.float32, torch.float64],
                           kinds=["uniform", "lattice", "collinear", "planar", "nonfinite"]),
      k=st.integers(1, 10), layout=st.sampled_from(LAYOUTS))
def test_estimate_normals(c, k, layout):
    p = as_layout(c["x"], c["dtype"], layout)
    res = pcgeom.estimate_normals(p, k, lengths=lengths_tensor(c["lengths"]))
    n, cv = res.normals.double().numpy(), res.curvature.double().numpy()
    for b in range(p.shape[0]):
        L = c["lengths"][b]
        pts = c["x"][b, :L]
        assert (n[b, L:] == 0).all() and (cv[b, L:] == 0).all()
        finite = np.isfinite(pts).all(1)
        assert np.isnan(n[b, :L][~finite]).all() and np.isnan(cv[b, :L][~finite]).all()
        fp = pts[finite]
        for i in np.flatnonzero(finite):
            nb = knn_oracle_acc(pts[i:i + 1], fp, k)[1][0]
            nb = fp[nb[nb >= 0]]
            if len(np.unique(nb, axis=0)) <= 1:
                continue  # known, fixed elsewhere: a neighbourhood of one repeated position
            assert abs(np.linalg.norm(n[b, i]) - 1) < 1e-4, n[b, i]
            assert -1e-6 <= cv[b, i] <= 1 / 3 + 1e-6
            w, v = np.linalg.eigh(np.cov(nb.T, bias=True))
            if w[1] - w[0] > 1e-3 * max(w[2], 1e-12):  # a clear smallest eigenvalue: the normal is its vector
                assert abs(abs(np.dot(v[:, 0], n[b, i])) - 1) < 1e-3, (n[b, i], v[:, 0])
                j = int(np.argmax(np.abs(n[b, i]) + 1e-9 * np.arange(3)[::-1]))
                assert n[b, i, j] > 0 or abs(abs(n[b, i]).max() - abs(n[b, i])[j]) < 1e-6


@fuzz(c=clouds(n_min=1, n_max=16, d_choices=(3,)), G=st.integers(1, 16), k=st.integers(1, 16))
def test_group_patches(c, G, k):
    dtype = c["dtype"]
    p = torch.from_numpy(c["x"]).to(dtype)
    N = p.shape[1]
    try:
        nbh, centers, cidx, idx = pcgeom.group_patches(p, G, k, return_index=True)
    except ValueError as exc:
        assert (G > N and "n_centers" in str(exc)) or (k > N and "k" in str(exc)), exc
        return
    assert G <= N and k <= N
    acc = acc_np_dtype(dtype)
    for b in range(p.shape[0]):
        pts = c["x"][b].astype(acc)
        np.testing.assert_array_equal(centers[b].double().numpy(), c["x"][b][cidx[b].numpy()])
        if c["exact"] and np.isfinite(pts).all():
            from tests.oracle import fps_oracle_acc
            np.testing.assert_array_equal(cidx[b].numpy(), fps_oracle_acc(pts, G, 0))
            # the centre itself at slot 0 (documented), even where a lower-index duplicate ties with it;
            # the other slots have the oracle's sorted distances
            od = knn_oracle_acc(pts[cidx[b].numpy()], pts, k)[0]
            np.testing.assert_array_equal(idx[b, :, 0].numpy(), cidx[b].numpy())
            got_d = np.stack([sq_dist_acc(pts[idx[b, g].numpy()], pts[cidx[b, g]]) for g in range(G)])
            np.testing.assert_array_equal(got_d, od)
        want = torch.from_numpy(c["x"][b][idx[b].numpy()] - c["x"][b][cidx[b].numpy()][:, None]).to(dtype)
        if np.isfinite(c["x"]).all():
            np.testing.assert_allclose(nbh[b].double().numpy(), want.double().numpy(), rtol=1e-2, atol=1e-2 * np.abs(c["x"]).max())


@fuzz(c=clouds(n_min=0, n_max=12), S=st.integers(0, 4), k=st.integers(1, 5), C=st.integers(0, 3),
      layout=st.sampled_from(LAYOUTS))
def test_group_features(c, S, k, C, layout):
    dtype = c["dtype"]
    B, N, D = c["x"].shape
    rng = np.random.default_rng(c["seed"])
    points = as_layout(c["x"], dtype, layout)
    centers = torch.from_numpy(make_points(c["kind"], B * S, D, dtype, c["seed"] + 5).reshape(B, S, D)).to(dtype)
    idx_np = rng.integers(-1, max(N, 0), (B, S, k)) if N else np.full((B, S, k), -1)
    feats_np = rng.integers(-3, 4, (B, N, C)).astype(float)
    feats = torch.from_numpy(feats_np).to(dtype) if C else None
    out = pcgeom.group_features(points, centers, torch.from_numpy(idx_np), feats).double().numpy()
    safe = np.maximum(idx_np, 0)
    bi = np.arange(B)[:, None, None]
    with np.errstate(invalid="ignore", over="ignore"):
        rel = (torch.from_numpy(c["x"][bi, safe] if N else np.zeros((B, S, k, D))).to(dtype)
               - centers[:, :, None]).double().numpy()
    want = np.concatenate([rel] + ([feats_np[bi, safe]] if C and N else [np.zeros((B, S, k, C))] if C else []), -1)
    want[idx_np == -1] = 0
    np.testing.assert_array_equal(out, want)


@fuzz(c=clouds(n_min=0, n_max=10, kinds=["uniform", "lattice", "few_distinct", "repeated"],
               dtypes=[torch.float32, torch.float64]), M=st.integers(1, 5), k=st.integers(1, 4))
def test_interpolate_features(c, M, k):
    dtype = c["dtype"]
    B, N, D = c["x"].shape
    p = torch.from_numpy(c["x"]).to(dtype)
    q = torch.from_numpy(make_points(c["kind"], B * M, D, dtype, c["seed"] + 7).reshape(B, M, D)).to(dtype)
    feats_np = np.random.default_rng(c["seed"]).integers(-3, 4, (B, N, 2)).astype(float)
    out = pcgeom.interpolate_features(q, p, torch.from_numpy(feats_np).to(dtype), k,
                                      points_lengths=lengths_tensor(c["lengths"])).double().numpy()
    for b in range(B):
        L = c["lengths"][b]
        d2, idx = knn_oracle_acc(q[b].double().numpy(), c["x"][b, :L], k)
        for m in range(M):
            ok = idx[m] >= 0
            if not ok.any():
                np.testing.assert_array_equal(out[b, m], 0)
                continue
            w = 1 / (np.sqrt(d2[m][ok]) + 1e-8)
            want = (w[:, None] * feats_np[b, idx[m][ok]]).sum(0) / w.sum()
            np.testing.assert_allclose(out[b, m], want, rtol=1e-4, atol=1e-4)


@fuzz(c=packed_clouds(kinds=["lattice", "repeated", "few_distinct", "collinear", "uniform"], min_len=0),
      k=st.integers(1, 6))
def test_edge_features(c, k):
    dtype = c["dtype"]
    x = torch.from_numpy(c["x"]).to(dtype)
    batch = np.repeat(np.arange(len(c["lens"])), c["lens"])
    out = pcgeom.edge_features(x, k, batch=torch.from_numpy(batch)).double().numpy()
    assert out.shape == (x.shape[0], k, 2 * x.shape[1])
    acc = acc_np_dtype(dtype)
    for i in range(x.shape[0]):
        cand = np.flatnonzero(batch == batch[i])
        o = rank_order(sq_dist_acc(c["x"][cand].astype(acc), c["x"][i].astype(acc)), cand)[:k]
        nb = cand[o]
        if c["exact"]:
            want = np.zeros((k, 2 * x.shape[1]))
            want[: len(nb), : x.shape[1]] = round_to(c["x"][nb] - c["x"][i], dtype)
            want[: len(nb), x.shape[1]:] = c["x"][i]
            np.testing.assert_array_equal(out[i], want)
        else:
            assert (out[i, len(nb):] == 0).all()
            np.testing.assert_allclose(out[i, : len(nb), x.shape[1]:], np.broadcast_to(c["x"][i], (len(nb), x.shape[1])))


@fuzz(c=packed_clouds(kinds=["uniform", "lattice", "repeated", "few_distinct", "nonfinite", "extreme"],
                      d_choices=(3,), dtypes=[torch.float32, torch.float64]),
      vs=st.sampled_from([0.5, 1.0, 3.0]), order=st.sampled_from(["z", "z-trans", "hilbert", "hilbert-trans"]))
def test_serialize(c, vs, order):
    x = torch.from_numpy(c["x"]).to(c["dtype"])
    off = torch.tensor(c["offsets"])
    try:
        res = pcgeom.serialize(x, vs, offsets=off, order=order)
    except ValueError as exc:
        # documented refusals: non-finite points, or a grid needing more than 21 bits / 63-bit codes
        assert not np.isfinite(c["x"]).all() or c["kind"] == "extreme", exc
        assert any(w in str(exc) for w in ("points", "depth", "bits", "finite")), exc
        assert "grid_coord" not in str(exc), exc  # the caller gave points, not grid_coord
        return
    n = x.shape[0]
    if n == 0:
        assert res.order.numel() == 0
        return
    perm = res.order.reshape(-1, n)[0].numpy()
    inv = res.inverse.reshape(-1, n)[0].numpy()
    code = res.code.reshape(-1, n)[0].numpy()
    np.testing.assert_array_equal(np.sort(perm), np.arange(n))
    np.testing.assert_array_equal(perm[inv], np.arange(n))
    np.testing.assert_array_equal(perm, np.argsort(code, kind="stable"))
    batch = np.repeat(np.arange(len(c["lens"])), c["lens"])
    assert (np.diff(batch[perm]) >= 0).all()  # never mixes clouds


@fuzz(c=packed_clouds(n_max=10, d_choices=(2, 3), min_len=0), C=st.integers(0, 3), k=st.integers(1, 5),
      seed=st.integers(0, 2**31), layout=st.sampled_from(LAYOUTS))
def test_group_packed(c, C, k, seed, layout):
    # A gather: exact for every input, NaN and inf included; -1 slots are zeros.
    N = c["x"].shape[0]
    rng = np.random.default_rng(seed)
    pts = as_layout(c["x"], c["dtype"], layout)
    feats = torch.from_numpy(rng.normal(size=(N, C))).to(c["dtype"])
    M = max(N, 1)
    idx_np = rng.integers(-1, N, (M, k)) if N else np.full((M, k), -1)
    centers = torch.from_numpy(make_points(c["kind"], M, pts.shape[1], c["dtype"], c["seed"] + 1)).to(c["dtype"])
    got = pcgeom.group_packed(feats, torch.from_numpy(idx_np), points=pts, centers=centers)
    assert got.shape == (M, k, pts.shape[1] + C)
    for m in range(M):
        for j in range(k):
            i = idx_np[m, j]
            row = got[m, j]
            if i < 0:
                assert (row == 0).all()
                continue
            rel = (pts[i] - centers[m]).to(row.dtype)  # the subtraction in the input dtype, as documented
            D = pts.shape[1]
            assert torch.equal(row[:D].nan_to_num(), rel.nan_to_num()) and torch.equal(row[:D].isnan(), rel.isnan())
            assert torch.equal(row[D:], feats[i].to(row.dtype))


@fuzz(c=packed_clouds(n_max=9, d_choices=(2, 3), kinds=["lattice", "repeated", "few_distinct"],
                      dtypes=[torch.float64], min_len=0), k=st.integers(1, 4), C=st.integers(1, 3), seed=st.integers(0, 2**31))
def test_interpolate_packed(c, k, C, seed):
    # Exact kinds (ties resolved like the oracle): inverse-distance weights of the k nearest of the same cloud.
    x = torch.from_numpy(c["x"])
    off = torch.tensor(c["offsets"])
    rng = np.random.default_rng(seed)
    feats_np = rng.normal(size=(x.shape[0], C))
    q_np = make_points(c["kind"], x.shape[0], x.shape[1], torch.float64, c["seed"] + 7)
    got = pcgeom.interpolate_packed(torch.from_numpy(q_np), x, torch.from_numpy(feats_np), k,
                                    query_offsets=off, points_offsets=off).numpy()
    lo = 0
    for hi in c["offsets"]:
        if hi == lo:
            continue
        d2, oi = knn_oracle_acc(q_np[lo:hi], c["x"][lo:hi], k)
        for m in range(hi - lo):
            valid = oi[m] >= 0
            w = 1.0 / (np.sqrt(d2[m, valid]) + 1e-8)
            want = (w[:, None] * feats_np[lo + oi[m, valid]]).sum(0) / w.sum()
            np.testing.assert_allclose(got[lo + m], want, rtol=1e-9, atol=1e-9)
        lo = hi
