"""Independent float64 (numpy) transcriptions of the original CUDA kernels.

Written from the kernels' source (pointnet2_ops_lib/_ext-src/src/*.cu,
extensions/chamfer_dist/chamfer.cu, KNN_CUDA's knn.cu), loop structure and
comparison operators included, but in float64 and without any pcgeom code:
the oracle of the end-to-end tests in this folder.
"""

from __future__ import annotations

import numpy as np


def _np(t):
    return t.detach().cpu().double().numpy()


def fps(xyz, npoint):
    """furthest_point_sampling_kernel: per-thread strided scan + shared-memory tree reduction."""
    x = _np(xyz)
    B, n, _ = x.shape
    bs = 1
    while bs * 2 <= n and bs < 512:
        bs *= 2
    out = np.zeros((B, npoint), dtype=np.int64)
    for b in range(B):
        pts = x[b]
        mag = (pts * pts).sum(1)
        eligible = mag > 1e-3
        temp = np.full(n, 1e10)
        old = 0
        for j in range(1, npoint):
            d = ((pts - pts[old]) ** 2).sum(1)
            temp = np.where(eligible, np.minimum(d, temp), temp)
            best = np.full(bs, -1.0)
            besti = np.zeros(bs, dtype=np.int64)
            for k0 in range(0, n, bs):  # thread tid visits k = tid, tid + bs, ...
                ks = np.arange(k0, min(n, k0 + bs))
                tid = ks - k0
                v = np.where(eligible[ks], temp[ks], -np.inf)
                better = v > best[tid]
                besti[tid] = np.where(better, ks, besti[tid])
                best[tid] = np.where(better, v, best[tid])
            stride = bs // 2
            while stride >= 1:  # __update(tid, tid + stride): the right one only if strictly larger
                v1, v2 = best[:stride].copy(), best[stride : 2 * stride]
                i1, i2 = besti[:stride].copy(), besti[stride : 2 * stride]
                best[:stride] = np.maximum(v1, v2)
                besti[:stride] = np.where(v2 > v1, i2, i1)
                stride //= 2
            old = int(besti[0])
            out[b, j] = old
    return out


def ball_query(radius, nsample, xyz, new_xyz):
    """query_ball_point_kernel: first nsample hits with d2 < r2 in index order, padded with the first."""
    x, q = _np(xyz), _np(new_xyz)
    B, S = q.shape[0], q.shape[1]
    r2 = radius * radius
    out = np.zeros((B, S, nsample), dtype=np.int64)
    for b in range(B):
        d2 = ((q[b][:, None, :] - x[b][None, :, :]) ** 2).sum(-1)
        for s in range(S):
            hits = np.nonzero(d2[s] < r2)[0][:nsample]
            if len(hits):
                out[b, s, :] = hits[0]
                out[b, s, : len(hits)] = hits
    return out


def three_nn(unknown, known):
    """three_nn_kernel: best three with strict < updates; returns (Euclidean dist, idx)."""
    u, k = _np(unknown), _np(known)
    B, n = u.shape[0], u.shape[1]
    dist = np.zeros((B, n, 3))
    idx = np.zeros((B, n, 3), dtype=np.int64)
    for b in range(B):
        d2 = ((u[b][:, None, :] - k[b][None, :, :]) ** 2).sum(-1)
        order = np.argsort(d2, axis=1, kind="stable")[:, :3]  # stable: ties to the lower index
        idx[b] = order
        dist[b] = np.sqrt(np.take_along_axis(d2, order, 1))
    return dist, idx


def three_interpolate(features, idx, weight):
    f, w = _np(features), _np(weight)
    B, C, _ = f.shape
    i = np.asarray(idx)
    out = np.zeros((B, C, i.shape[1]))
    for b in range(B):
        out[b] = (f[b][:, i[b]] * w[b][None]).sum(-1)
    return out


def knn(ref, query, k):
    """KNN_CUDA (transpose mode): k nearest ref points of each query, ascending, ties to the lower index."""
    r, q = _np(ref), _np(query)
    B = r.shape[0]
    out = np.zeros((B, q.shape[1], k), dtype=np.int64)
    for b in range(B):
        d2 = ((q[b][:, None, :] - r[b][None, :, :]) ** 2).sum(-1)
        out[b] = np.argsort(d2, axis=1, kind="stable")[:, :k]
    return out


def chamfer_nearest(xyz1, xyz2):
    """chamfer_dist_kernel: for each xyz1 point the first xyz2 point with the smallest d2."""
    a, c = _np(xyz1), _np(xyz2)
    out = np.zeros(a.shape[:2], dtype=np.int64)
    for b in range(a.shape[0]):
        d2 = ((a[b][:, None, :] - c[b][None, :, :]) ** 2).sum(-1)
        out[b] = np.argmin(d2, axis=1)  # first minimum
    return out
