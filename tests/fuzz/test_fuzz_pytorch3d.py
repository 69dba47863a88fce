"""Fuzz: the pytorch3d stand-in (``pcgeom.compat.pytorch3d``) against float64 brute forces written here.

Ragged batches (``lengths``), exact ties on integer lattices, K larger than the clouds, one-point clouds,
norm 1 and 2, float32 and float64; every check asserts pytorch3d 0.7.9's documented semantics
(docs/guides/pytorch3d.md): KNN padding 0 in dists and idx, ball_query's first K in index order with a
strict ``d2 < float32(radius)**2`` and -1 / 0 padding, FPS -1 / 0 padding, chamfer's reductions.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hypothesis")
import torch  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pcgeom.compat.pytorch3d import loss, ops, structures, transforms  # noqa: E402
from pcgeom.compat.pytorch3d.ops.sample_farthest_points import sample_farthest_points_naive  # noqa: E402
from tests.fuzz.strategies import clouds, fuzz  # noqa: E402

TIES = ["lattice", "repeated", "few_distinct", "collinear", "planar"]  # small integers: exact distances, ties
DT = [torch.float32, torch.float64]


def _split(c, n_half):
    """Two batches (p1, p2) of the same B and D from one drawn cloud, with their lengths."""
    x = c["x"]
    B, N, _ = x.shape
    return x[:, :n_half], x[:, n_half:], [min(n, n_half) for n in c["lengths"]], \
        [max(0, n - n_half) for n in c["lengths"]]


def _dist(a, b, norm):
    diff = a[:, None, :] - b[None, :, :]
    return (diff * diff).sum(-1) if norm == 2 else np.abs(diff).sum(-1)


def _knn_oracle(p1, p2, l1, l2, K, norm):
    """pytorch3d's knn_points in float64: K nearest in (distance, index) order, 0 in dists and idx at padding."""
    B, P1 = p1.shape[:2]
    dists, idx = np.zeros((B, P1, K)), np.zeros((B, P1, K), dtype=np.int64)
    for b in range(B):
        if l1[b] == 0 or l2[b] == 0:
            continue
        d = _dist(p1[b, :l1[b]], p2[b, :l2[b]], norm)
        order = np.argsort(d, axis=1, kind="stable")[:, :K]  # stable: ties to the lower index
        k = order.shape[1]
        idx[b, :l1[b], :k] = order
        dists[b, :l1[b], :k] = np.take_along_axis(d, order, 1)
    return dists, idx


@fuzz(c=clouds(n_min=1, n_max=16, d_choices=(1, 2, 3, 5), kinds=TIES, dtypes=DT), half=st.integers(1, 8),
      K=st.integers(1, 10), norm=st.sampled_from([1, 2]), return_nn=st.booleans())
def test_p3d_knn_points_and_gather(c, half, K, norm, return_nn):
    N = c["x"].shape[1]
    half = min(half, N - 1) if N > 1 else 1
    p1, p2, l1, l2 = _split(c, half)
    if p2.shape[1] == 0:  # N = 1: the second cloud is the first
        p2, l2 = p1, l1
    t1, t2 = (torch.from_numpy(np.ascontiguousarray(a)).to(c["dtype"]) for a in (p1, p2))
    L1, L2 = torch.tensor(l1), torch.tensor(l2)
    got = ops.knn_points(t1, t2, L1, L2, norm=norm, K=K, return_nn=return_nn)
    want_d, want_i = _knn_oracle(p1, p2, l1, l2, K, norm)
    assert got.dists.dtype == c["dtype"] and got.idx.dtype == torch.int64
    # small integers: every distance is exact in float32 too, so values and tie order are bit for bit
    np.testing.assert_array_equal(got.idx.numpy(), want_i)
    np.testing.assert_array_equal(got.dists.double().numpy(), want_d)
    # knn_gather: slot k >= lengths2[b] is 0 (padded p1 rows gather p2[b, 0] from their index-0 padding)
    want_nn = np.zeros(want_i.shape + (p2.shape[2],))
    for b in range(p1.shape[0]):
        want_nn[b, :, :min(K, l2[b])] = p2[b][want_i[b, :, :min(K, l2[b])]]
    gathered = ops.knn_gather(t2, got.idx, L2)
    np.testing.assert_array_equal(gathered.double().numpy(), want_nn)
    if return_nn:
        np.testing.assert_array_equal(got.knn.double().numpy(), want_nn)
    else:
        assert got.knn is None


@fuzz(c=clouds(n_min=1, n_max=16, d_choices=(1, 2, 3), kinds=TIES, dtypes=DT), half=st.integers(1, 8),
      K=st.integers(1, 10), radius=st.sampled_from([0.0, 0.5, 1.0, 2 ** 0.5, 1.5, 2.0, 3 ** 0.5, 3.0, 5.0]),
      return_nn=st.booleans())
def test_p3d_ball_query(c, half, K, radius, return_nn):
    N = c["x"].shape[1]
    half = min(half, N - 1) if N > 1 else 1
    p1, p2, l1, l2 = _split(c, half)
    if p2.shape[1] == 0:
        p2, l2 = p1, l1
    t1, t2 = (torch.from_numpy(np.ascontiguousarray(a)).to(c["dtype"]) for a in (p1, p2))
    got = ops.ball_query(t1, t2, torch.tensor(l1), torch.tensor(l2), K=K, radius=radius, return_nn=return_nn)
    r32 = np.float32(radius)
    r2 = float(np.float32(r32 * r32))  # upstream squares the float32 radius in float32, for float64 input too
    B, P1 = p1.shape[:2]
    want_i, want_d = -np.ones((B, P1, K), dtype=np.int64), np.zeros((B, P1, K))
    want_nn = np.zeros((B, P1, K, p2.shape[2]))
    for b in range(B):
        for i in range(l1[b]):
            d = _dist(p1[b, i:i + 1], p2[b, :l2[b]], 2)[0]
            hits = np.flatnonzero(d < r2)[:K]  # strict, first K in index order
            want_i[b, i, :len(hits)], want_d[b, i, :len(hits)] = hits, d[hits]
            want_nn[b, i, :len(hits)] = p2[b, hits]
    np.testing.assert_array_equal(got.idx.numpy(), want_i)
    np.testing.assert_array_equal(got.dists.double().numpy(), want_d)
    if return_nn:
        np.testing.assert_array_equal(got.knn.double().numpy(), want_nn)
    # ops.utils.masked_gather is how upstream users gather ball_query's -1-padded idx: 0 at padding
    np.testing.assert_array_equal(ops.masked_gather(t2, got.idx).double().numpy(), want_nn)


def _fps_oracle(x, K):
    """FPS from index 0 in float64: farthest by min distance, ties to the lower index, no point twice."""
    n = len(x)
    out = [0] if n else []
    closest = np.full(n, np.inf)
    while len(out) < min(n, K):
        closest = np.minimum(closest, ((x - x[out[-1]]) ** 2).sum(-1))
        masked = np.where(np.isin(np.arange(n), out), -1.0, closest)
        out.append(int(np.argmax(masked)))
    return out


@fuzz(weight=0.5, c=clouds(n_min=0, n_max=14, d_choices=(1, 2, 3), kinds=TIES + ["uniform"], dtypes=DT),
      k=st.integers(1, 18), k_form=st.sampled_from(["int", "list", "tensor"]), naive=st.booleans())
def test_p3d_sample_farthest_points(c, k, k_form, naive):
    x, lengths = c["x"], c["lengths"]
    B = x.shape[0]
    ks = [k] * B if k_form == "int" else [max(0, k - 3 * b) if b else k for b in range(B)]  # per-cloud counts, 0 allowed
    K = k if k_form == "int" else (ks if k_form == "list" else torch.tensor(ks))
    t = torch.from_numpy(x).to(c["dtype"])
    fn = sample_farthest_points_naive if naive else ops.sample_farthest_points
    pts, idx = fn(t, torch.tensor(lengths), K=K)
    width = max(ks)
    assert idx.shape == (B, width) and pts.shape == (B, width, x.shape[2]) and pts.dtype == c["dtype"]
    want_i, want_p = -np.ones((B, width), dtype=np.int64), np.zeros((B, width, x.shape[2]))
    for b in range(B):
        # exact in both dtypes on the lattices; uniform float32 points are compared in float32 (no near ties there)
        xb = x[b, :lengths[b]].astype(np.float32 if c["dtype"] == torch.float32 else np.float64)
        sel = _fps_oracle(xb, ks[b])
        want_i[b, :len(sel)], want_p[b, :len(sel)] = sel, x[b, sel] if sel else 0
    if c["kind"] == "uniform" and c["dtype"] == torch.float32:
        # float32 minimum distances may round differently from numpy's: compare the selected sets' sizes,
        # padding and gathered points only
        assert ((idx.numpy() == -1) == (want_i == -1)).all()
        for b in range(B):
            sel = idx[b][idx[b] >= 0]
            np.testing.assert_array_equal(pts[b, :len(sel)].double().numpy(), x[b, sel.numpy()])
        return
    np.testing.assert_array_equal(idx.numpy(), want_i)
    np.testing.assert_array_equal(pts.double().numpy(), want_p)


def _cov_oracle(x, n, K):
    """pytorch3d's neighbourhood covariance of each of a cloud's first n points (self included, missing slots 0)."""
    d = _dist(x[:n], x[:n], 2)
    order = np.argsort(d, axis=1, kind="stable")[:, :K]
    nb = np.zeros((n, K, x.shape[1]))
    nb[:, :order.shape[1]] = x[:n][order]
    cen = nb - nb.mean(1, keepdims=True)
    return np.einsum("pki,pkj->pij", cen, cen) / K, nb


@fuzz(weight=0.5, c=clouds(n_min=2, n_max=14, d_choices=(3,), kinds=["uniform"], dtypes=[torch.float64], b_max=3),
      K=st.integers(1, 8), disambiguate=st.booleans())
def test_p3d_normals_frames_covariances(c, K, disambiguate):
    x = c["x"]
    lengths = [max(n, K + 1) for n in c["lengths"]]  # pytorch3d requires more points than neighbours
    if max(lengths) > x.shape[1]:
        return
    t = torch.from_numpy(x)
    L = torch.tensor(lengths)
    cov, knns = ops.get_point_covariances(t, L, K)
    pcl = structures.Pointclouds([t[b, :lengths[b]] for b in range(len(lengths))])
    normals = ops.estimate_pointcloud_normals(pcl, neighborhood_size=K, disambiguate_directions=disambiguate)
    curv, frames = ops.estimate_pointcloud_local_coord_frames(pcl, neighborhood_size=K,
                                                              disambiguate_directions=disambiguate)
    for b, n in enumerate(lengths):
        want_cov, want_nb = _cov_oracle(x[b], n, K)
        np.testing.assert_allclose(cov[b, :n].numpy(), want_cov, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(knns[b, :n].numpy(), want_nb)
        lam, vec = np.linalg.eigh(want_cov)
        np.testing.assert_allclose(curv[b, :n].numpy(), lam, rtol=1e-9, atol=1e-12)
        np.testing.assert_array_equal(normals[b, :n].numpy(), frames[b, :n, :, 0].numpy())
        for i in range(n):
            f = frames[b, i].numpy()
            np.testing.assert_allclose(f.T @ f, np.eye(3), atol=1e-10)
            gaps = np.diff(lam[i])
            for j in range(3):  # a direction is defined up to sign where its eigenvalue is simple
                if (j == 0 or gaps[j - 1] > 1e-6) and (j == 2 or gaps[j] > 1e-6):
                    assert abs(abs(float(f[:, j] @ vec[i, :, j])) - 1.0) < 1e-7, (b, i, j)
            if disambiguate and K > 1 and gaps[0] > 1e-6:
                # SHOT flips the normal when fewer than K/2 offsets project positively: afterwards at least
                # as many project positively as negatively (asserted where no offset but the point's own
                # lies within rounding of the tangent plane, e.g. not for 3 coplanar neighbours)
                off = want_nb[i] - x[b, i]
                proj = off @ f[:, 0]
                others = np.abs(off).sum(1) > 0
                if np.all(np.abs(proj[others]) > 1e-9 * np.abs(off).max()):
                    assert (proj > 0).sum() >= (proj < 0).sum(), (b, i, proj)


def _umeyama(X, Y, w, scale, reflect):
    """float64 Umeyama with pytorch3d's weighting (centroids by w, covariances by w**2 / sum w)."""
    W = max(w.sum(), 1e-9)
    mx, my = (w[:, None] * X).sum(0) / W, (w[:, None] * Y).sum(0) / W
    Xc, Yc = X - mx, Y - my
    C = (w[:, None] ** 2 * Xc).T @ Yc / W
    U, S, Vt = np.linalg.svd(C)
    E = np.eye(X.shape[1])
    if not reflect:
        E[-1, -1] = np.sign(np.linalg.det(U @ Vt))
    R = U @ E @ Vt
    s = np.trace(E @ np.diag(S)) / max((w ** 2 * (Xc ** 2).sum(1)).sum() / W, 1e-9) if scale else 1.0
    return R, my - s * mx @ R, s


@fuzz(weight=0.5, B=st.integers(1, 3), P=st.integers(6, 20), d=st.sampled_from([2, 3]), seed=st.integers(0, 2**31),
      weighted=st.booleans(), scale=st.booleans(), reflect=st.booleans(), iters=st.integers(1, 3))
def test_p3d_alignment_and_icp(B, P, d, seed, weighted, scale, reflect, iters):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((B, P, d))
    R0 = transforms.random_rotations(B, dtype=torch.float64).numpy()[:, :d, :d] if d == 3 else \
        np.stack([np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]) for a in rng.uniform(0, 6.28, B)])
    Y = 1.7 * X @ R0 + rng.standard_normal((B, 1, d)) + 0.05 * rng.standard_normal((B, P, d))
    w = rng.uniform(0.1, 2.0, (B, P)) if weighted else np.ones((B, P))
    got = ops.corresponding_points_alignment(torch.from_numpy(X), torch.from_numpy(Y),
                                             torch.from_numpy(w) if weighted else None, estimate_scale=scale,
                                             allow_reflection=reflect)
    for b in range(B):
        R, T, s = _umeyama(X[b], Y[b], w[b], scale, reflect)
        np.testing.assert_allclose(got.R[b].numpy(), R, atol=1e-9)
        np.testing.assert_allclose(got.T[b].numpy(), T, atol=1e-9)
        np.testing.assert_allclose(float(got.s[b]), s, rtol=1e-9)
    # ops.utils helpers the alignment rests on
    np.testing.assert_allclose(ops.wmean(torch.from_numpy(X), torch.from_numpy(w)).numpy(),
                               (w[..., None] * X).sum(1, keepdims=True) / w.sum(1)[:, None, None], rtol=1e-12)
    np.testing.assert_array_equal(ops.eyes(d, B, dtype=torch.float64).numpy(), np.broadcast_to(np.eye(d), (B, d, d)))
    Xp, n = ops.convert_pointclouds_to_tensor(torch.from_numpy(X))
    assert Xp.shape == X.shape and n.tolist() == [P] * B and not ops.is_pointclouds(Xp)
    # ICP for a fixed number of iterations (never converging early) against the same loop in float64
    # a slightly moved copy, in another order and one point short: correspondences must be found
    a = rng.uniform(-0.2, 0.2)
    Rz = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])[:d, :d]
    Z = (X @ Rz + rng.uniform(-0.1, 0.1, (B, 1, d)))[:, rng.permutation(P)][:, : P - 1]
    sol = ops.iterative_closest_point(torch.from_numpy(X), torch.from_numpy(Z), max_iterations=iters,
                                      relative_rmse_thr=float("-inf"), estimate_scale=scale, allow_reflection=reflect)
    assert not sol.converged and len(sol.t_history) == iters
    for b in range(B):
        Xt = X[b]
        for _ in range(iters):
            match = Z[b][np.argmin(_dist(Xt, Z[b], 2), axis=1)]
            R, T, s = _umeyama(X[b], match, np.ones(P), scale, reflect)
            Xt = s * X[b] @ R + T
            sv = np.linalg.svd((X[b] - X[b].mean(0)).T @ (match - match.mean(0)), compute_uv=False)
            if sv[-1] < 1e-6 * sv[0] or np.diff(sv).max() > -1e-6 * sv[0]:
                return  # the rotation is not unique (repeated or vanishing singular values): no single answer
        np.testing.assert_allclose(sol.Xt[b].numpy(), Xt, atol=1e-8)
        np.testing.assert_allclose(float(sol.rmse[b]), np.sqrt(((Xt - match) ** 2).sum(1).mean()), rtol=1e-8)


@fuzz(c=clouds(n_min=1, n_max=12, d_choices=(3,), kinds=TIES, dtypes=DT), half=st.integers(1, 6),
      norm=st.sampled_from([1, 2]), point_red=st.sampled_from(["mean", "sum", "max", None]),
      batch_red=st.sampled_from(["mean", "sum", None]), single=st.booleans(), weighted=st.booleans(),
      with_normals=st.booleans(), abs_cos=st.booleans(), as_pcl=st.booleans())
def test_p3d_chamfer_distance(c, half, norm, point_red, batch_red, single, weighted, with_normals, abs_cos, as_pcl):
    if point_red is None:
        batch_red = None
    if point_red == "max":
        with_normals = False
    N = c["x"].shape[1]
    half = min(half, N - 1) if N > 1 else 1
    x, y, lx, ly = _split(c, half)
    if y.shape[1] == 0:
        y, ly = x, lx
    B = x.shape[0]
    rng = np.random.default_rng(c["seed"])
    nx, ny = rng.integers(-2, 3, x.shape).astype(float), rng.integers(-2, 3, y.shape).astype(float)
    w = rng.integers(0, 3, B).astype(float) if weighted else None
    dt = c["dtype"]
    T = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(dt)  # noqa: E731
    if as_pcl:
        X = structures.Pointclouds([T(x[b, :lx[b]]) for b in range(B)],
                                   normals=[T(nx[b, :lx[b]]) for b in range(B)] if with_normals else None)
        Y = structures.Pointclouds([T(y[b, :ly[b]]) for b in range(B)],
                                   normals=[T(ny[b, :ly[b]]) for b in range(B)] if with_normals else None)
        args = dict()
        x, y = X.points_padded().double().numpy(), Y.points_padded().double().numpy()
        if with_normals:
            nx, ny = X.normals_padded().double().numpy(), Y.normals_padded().double().numpy()
    else:
        X, Y = T(x), T(y)
        args = dict(x_lengths=torch.tensor(lx), y_lengths=torch.tensor(ly))
        if with_normals:
            args.update(x_normals=T(nx), y_normals=T(ny))
    if point_red == "max" and (x.shape[1] == 0 or y.shape[1] == 0):
        return  # a max over no points at all (all clouds of a Pointclouds empty): upstream's max(1) raises too
    got, got_n = loss.chamfer_distance(X, Y, weights=None if w is None else torch.from_numpy(w).to(dt),
                                       batch_reduction=batch_red, point_reduction=point_red, norm=norm,
                                       single_directional=single, abs_cosine=abs_cos, **args)

    def one_way(a, b, la, lb, na, nb):
        d, cs = np.zeros((B, a.shape[1])), np.zeros((B, a.shape[1]))
        for i in range(B):
            if la[i] == 0:
                continue
            if lb[i] == 0:  # pytorch3d's knn pads with distance 0 and index 0
                j, d[i, :la[i]] = np.zeros(la[i], dtype=int), 0.0
            else:
                dd = _dist(a[i, :la[i]], b[i, :lb[i]], norm)
                j = np.argmin(dd, axis=1)  # the first minimum: ties to the lower index
                d[i, :la[i]] = dd[np.arange(la[i]), j]
            if with_normals:
                cos = np.zeros(la[i])  # knn_gather zeros the slots past lengths: cosine 0 against no neighbour
                if lb[i]:
                    u, v = na[i, :la[i]], nb[i, j]
                    cos = (u * v).sum(1) / np.maximum(np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1), 1e-6)
                cs[i, :la[i]] = 1 - (np.abs(cos) if abs_cos else cos)
        if w is not None:
            d, cs = d * w[:, None], cs * w[:, None]
        if point_red == "max":
            return d.max(1), None
        if point_red is None:
            return d, cs
        cnt = np.maximum(np.array(la), 1)
        div = cnt if point_red == "mean" else 1
        return d.sum(1) / div, cs.sum(1) / div

    if w is not None and w.sum() == 0:
        # upstream returns zeros that still require grad for both values, loss_normals included
        # (a zero tensor even without normals), shaped (N, N) per direction without batch reduction
        assert (got_n is None) == (point_red == "max" and not single)
        for v in (got, got_n) if got_n is not None else (got,):
            for t in (v if isinstance(v, tuple) else (v,)):
                assert torch.is_tensor(t) and float(t.abs().sum()) == 0.0
        return
    else:
        a, an = one_way(x, y, lx, ly, nx, ny)
        if single:
            want, want_n = a, an
        else:
            bk, bn = one_way(y, x, ly, lx, ny, nx)
            if point_red == "max":
                want, want_n = np.maximum(a, bk), None
            elif point_red is None:
                want, want_n = (a, bk), (an, bn)
            else:
                want, want_n = a + bk, an + bn
    if not with_normals:
        want_n = None
    if batch_red is not None:
        div = {"sum": 1, "mean": B if w is None else (w.sum() or 1)}[batch_red]
        want = want.sum() / div
        want_n = None if want_n is None else want_n.sum() / div
    tol = dict(rtol=1e-12, atol=0) if dt == torch.float64 else dict(rtol=2e-6, atol=1e-6)
    if isinstance(want, tuple):
        for g, e in zip(got, want):
            np.testing.assert_allclose(g.double().numpy(), e, **tol)
    else:
        np.testing.assert_allclose(got.double().detach().numpy(), want, **tol)
    if want_n is None:
        assert got_n is None
    elif isinstance(want_n, tuple):
        for g, e in zip(got_n, want_n):
            np.testing.assert_allclose(g.double().numpy(), e, **tol)
    else:
        np.testing.assert_allclose(got_n.double().detach().numpy(), want_n, **tol)


@fuzz(lens=st.lists(st.integers(0, 7), min_size=1, max_size=4), d_feat=st.integers(1, 3), seed=st.integers(0, 2**31),
      dtype=st.sampled_from(DT))
def test_p3d_pointclouds_and_joins(lens, d_feat, seed, dtype):
    rng = np.random.default_rng(seed)
    pts = [rng.integers(-5, 6, (n, 3)).astype(float) for n in lens]
    fts = [rng.standard_normal((n, d_feat)) for n in lens]
    pc = structures.Pointclouds([torch.from_numpy(p).to(dtype) for p in pts],
                                features=[torch.from_numpy(f).to(dtype) for f in fts])
    P = max(lens)
    padded = np.zeros((len(lens), P, 3))
    for b, p in enumerate(pts):
        padded[b, :len(p)] = p
    assert pc.num_points_per_cloud().tolist() == lens and len(pc) == len(lens)
    np.testing.assert_array_equal(pc.points_padded().double().numpy(), padded)
    np.testing.assert_array_equal(pc.points_packed().double().numpy(), np.concatenate(pts))
    assert pc.packed_to_cloud_idx().tolist() == [b for b, n in enumerate(lens) for _ in range(n)]
    assert pc.cloud_to_packed_first_idx().tolist() == np.concatenate([[0], np.cumsum(lens)[:-1]]).tolist()
    assert ops.is_pointclouds(pc)
    X, n = ops.convert_pointclouds_to_tensor(pc)
    assert n.tolist() == lens and np.array_equal(X.double().numpy(), padded)
    both = structures.join_pointclouds_as_batch([pc, pc])
    assert both.num_points_per_cloud().tolist() == lens + lens
    np.testing.assert_array_equal(both.features_packed().double().numpy(),
                                  np.concatenate([f.astype(np.float32 if dtype == torch.float32 else float)
                                                  for f in fts + fts]).astype(float))
    scene = structures.join_pointclouds_as_scene(pc)
    np.testing.assert_array_equal(scene.points_packed().double().numpy(), np.concatenate(pts))
    assert scene.num_points_per_cloud().tolist() == ([sum(lens)] if len(lens) > 1 else lens)


def _quat_matrix(q):
    r, i, j, k = q / np.linalg.norm(q)
    return np.array([[1 - 2 * (j * j + k * k), 2 * (i * j - k * r), 2 * (i * k + j * r)],
                     [2 * (i * j + k * r), 1 - 2 * (i * i + k * k), 2 * (j * k - i * r)],
                     [2 * (i * k - j * r), 2 * (j * k + i * r), 1 - 2 * (i * i + j * j)]])


@fuzz(n=st.integers(1, 6), seed=st.integers(0, 2**31), dtype=st.sampled_from(DT))
def test_p3d_rotations(n, seed, dtype):
    torch.manual_seed(seed)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    q = transforms.random_quaternions(n, dtype=dtype)
    assert q.shape == (n, 4) and q.dtype == dtype and bool((q[:, 0] >= 0).all())
    np.testing.assert_allclose(q.double().norm(dim=1).numpy(), 1.0, atol=tol)
    flipped = torch.where(torch.arange(n)[:, None] % 2 == 0, -q, q)
    np.testing.assert_array_equal(transforms.standardize_quaternion(flipped).numpy(), q.numpy())
    M = transforms.quaternion_to_matrix(q)
    M2 = transforms.rotation_conversions.quaternion_to_matrix(q)
    assert torch.equal(M, M2)
    for a in range(n):
        np.testing.assert_allclose(M[a].double().numpy(), _quat_matrix(q[a].double().numpy()), atol=tol * 10)
    for R in list(transforms.random_rotations(n, dtype=dtype)) + [transforms.random_rotation(dtype=dtype)]:
        R = R.double().numpy()
        assert R.shape == (3, 3)
        np.testing.assert_allclose(R @ R.T, np.eye(3), atol=tol * 10)
        assert abs(np.linalg.det(R) - 1.0) < tol * 10
