"""numpy transcriptions of PointWeb's ``pointops_cuda`` kernels (hszhao/PointWeb f31fe05, ``lib/pointops/src``).

Written for pcgeom's tests from reading the ``.cu`` files, with no pcgeom
code: each function has the signature that ``pointops_api.cpp`` binds
(the ``*_fast`` kernel where it binds that one), takes torch tensors, and
fills the caller's preallocated outputs as the kernel does -- ``=`` where it
writes, ``+=`` where it ``atomicAdd``s, and nothing where it writes nothing.
So the module can stand in for the extension itself (the end-to-end driver
swaps it in for ``pointops_cuda``).

Arithmetic: the squared distances that decide an index are formed in
float32 exactly as the kernels write them, ``(a-b)*(a-b) + (c-d)*(c-d) +
(e-f)*(e-f)`` rounded after every operation (nvcc may fuse these into FMAs;
not modelled); everything else -- interpolation sums, gradients -- in
float64.  Given float64 coordinates (the end-to-end driver's float64 run,
where the outputs are float64 too) the ball query, KNN, nearest-neighbour and
feature-distribute kernels form the same expression in float64 instead, as
pcgeom's stand-in does for float64: a float64 run is then float64 throughout.
Farthest point sampling stays in float32 for every dtype (the stand-in
decides in float32 whatever the dtype, like the kernel).  Each thread's loop is kept as written and vectorised across
threads (the loop over the points stays a loop).

The one race: ``knnquery_cuda_kernel`` never offsets ``dist2``, so every
thread writes ``dist2[0:nsample]``; which one lands last is undefined.  This
transcription lets the thread of batch 0, centre 0 win (the answer pcgeom
documents).
"""

import math

import numpy as np
import torch

F32 = np.float32


def _np(t, dtype=None):
    a = t.detach().cpu().numpy()
    return a.astype(dtype) if dtype is not None else a


def _store(out, arr, add=False):
    """Writes (or adds) ``arr`` into the caller's tensor, in the tensor's dtype (float64 -> float32 rounds once)."""
    with torch.no_grad():
        src = torch.from_numpy(np.ascontiguousarray(arr)).reshape(out.shape)
        if add:
            out.copy_((out.double() + src.double()).to(out.dtype) if out.is_floating_point() else out + src)
        else:
            out.copy_(src.to(out.dtype))


def _ft(t):
    """The dtype the kernel's distances are formed in: float64 for float64 coordinates, else float32."""
    return np.float64 if t.dtype == torch.float64 else F32


def _d2(ax, ay, az, bx, by, bz, ft=F32):
    """``(ax-bx)*(ax-bx) + (ay-by)*(ay-by) + (az-bz)*(az-bz)`` in ``ft`` (float32: the kernel's), left to right."""
    dx, dy, dz = ft(ax) - ft(bx), ft(ay) - ft(by), ft(az) - ft(bz)
    return (dx * dx + dy * dy) + dz * dz


def _unfilled(best, ft):
    """The kernels' running bests start at double 1e40, stored into a float (inf); a float64 output keeps inf too."""
    with np.errstate(over="ignore"):
        return np.where(best >= 1e40, np.inf, best).astype(ft) if ft is not F32 else best.astype(F32)


def opt_n_threads(work_size):
    pow_2 = int(math.log(float(work_size)) / math.log(2.0))
    return max(min(1 << pow_2, 1024), 1)


# --------------------------------------------------------------------------- ballquery / labelstat


def _ball_scan(b, n, m, radius, nsample, new_xyz, xyz, label_stat=None, idx=None, stop=True):
    """``ballquery_cuda_kernel_fast`` (and the labelstat kernels): one thread per centre, vectorised."""
    ft = _ft(xyz)
    r2 = ft(radius) * ft(radius)
    c = _np(new_xyz, ft).reshape(b, m, 3)
    p = _np(xyz, ft).reshape(b, n, 3)
    out = None if idx is None else idx.copy()
    nclass = 0 if label_stat is None else label_stat.shape[-1]
    stat = np.zeros((b, m, nclass), dtype=np.int64)
    for bi in range(b):
        cnt = np.zeros(m, dtype=np.int64)
        done = np.zeros(m, dtype=bool)
        for k in range(n):
            d2 = _d2(c[bi, :, 0], c[bi, :, 1], c[bi, :, 2], p[bi, k, 0], p[bi, k, 1], p[bi, k, 2], ft)
            hit = (d2 < r2) & ~done
            if label_stat is not None:
                stat[bi, hit] += label_stat[bi, k]
            if out is not None:
                first = hit & (cnt == 0)
                out[bi, first, :] = k
                rows = np.nonzero(hit)[0]
                out[bi, rows, cnt[rows]] = k
            cnt[hit] += 1
            if stop:
                done |= cnt >= nsample
    return out, stat


def ballquery_cuda(b, n, m, radius, nsample, new_xyz, xyz, idx):
    cur = _np(idx).reshape(b, m, nsample).astype(np.int64)
    out, _ = _ball_scan(b, n, m, radius, nsample, new_xyz, xyz, idx=cur)
    _store(idx, out)


def labelstat_and_ballquery_cuda(b, n, m, radius, nsample, nclass, new_xyz, xyz, label_stat, idx, new_label_stat):
    cur = _np(idx).reshape(b, m, nsample).astype(np.int64)
    lab = _np(label_stat).reshape(b, n, nclass).astype(np.int64)
    out, stat = _ball_scan(b, n, m, radius, nsample, new_xyz, xyz, label_stat=lab, idx=cur)
    _store(idx, out)
    _store(new_label_stat, stat)  # zeroed by the kernel first, then summed


def labelstat_ballrange_cuda(b, n, m, radius, nclass, new_xyz, xyz, label_stat, new_label_stat):
    lab = _np(label_stat).reshape(b, n, nclass).astype(np.int64)
    _, stat = _ball_scan(b, n, m, radius, 1, new_xyz, xyz, label_stat=lab, stop=False)
    _store(new_label_stat, stat)


def labelstat_idx_cuda(b, n, m, nsample, nclass, label_stat, idx, new_label_stat):
    lab = _np(label_stat).reshape(b, n, nclass).astype(np.int64)
    i = _np(idx).reshape(b, m, nsample).astype(np.int64)
    stat = np.zeros((b, m, nclass), dtype=np.int64)
    for k in range(nsample):
        stat += lab[np.arange(b)[:, None], i[:, :, k]]
    _store(new_label_stat, stat)


# --------------------------------------------------------------------------- knn / nearest neighbours


def knnquery_cuda(b, n, m, nsample, xyz, new_xyz, idx, dist2):
    """``knnquery_cuda_kernel``: insertion into ``best[nsample]`` (double, 1e40) at the first ``d2 < best[j]``."""
    ft = _ft(xyz)
    p = _np(xyz, ft).reshape(b, n, 3)
    c = _np(new_xyz, ft).reshape(b, m, 3)
    out_i = np.zeros((b, m, nsample), dtype=np.int64)
    first_row = None
    col = np.arange(nsample)
    for bi in range(b):
        best = np.full((m, nsample), 1e40)
        besti = np.zeros((m, nsample), dtype=np.int64)
        for k in range(n):
            d2 = _d2(c[bi, :, 0], c[bi, :, 1], c[bi, :, 2], p[bi, k, 0], p[bi, k, 1], p[bi, k, 2], ft)
            d2 = d2.astype(np.float64)
            lt = d2[:, None] < best
            ins = lt.any(1)
            j = np.argmax(lt, 1)[:, None]
            shifted = np.concatenate([best[:, :1], best[:, :-1]], 1)
            shifted_i = np.concatenate([besti[:, :1], besti[:, :-1]], 1)
            nb = np.where(col < j, best, np.where(col == j, d2[:, None], shifted))
            ni = np.where(col < j, besti, np.where(col == j, k, shifted_i))
            best = np.where(ins[:, None], nb, best)
            besti = np.where(ins[:, None], ni, besti)
        out_i[bi] = besti
        if bi == 0 and m > 0:
            first_row = _unfilled(best[0], ft)  # float(1e40) = inf
    _store(idx, out_i)
    if first_row is not None:
        d = _np(dist2).reshape(-1).copy()
        d[:nsample] = first_row
        _store(dist2, d)


def nearestneighbor_cuda(b, n, m, unknown, known, dist2, idx):
    """``nearestneighbor_cuda_kernel_fast``: three running bests (double, 1e40), strict ``<`` cascade."""
    ft = _ft(unknown)
    u = _np(unknown, ft).reshape(b, n, 3)
    kn = _np(known, ft).reshape(b, m, 3)
    D = np.zeros((b, n, 3))
    I = np.zeros((b, n, 3), dtype=np.int64)
    for bi in range(b):
        b1 = np.full(n, 1e40); b2 = np.full(n, 1e40); b3 = np.full(n, 1e40)
        i1 = np.zeros(n, np.int64); i2 = np.zeros(n, np.int64); i3 = np.zeros(n, np.int64)
        for k in range(m):
            d = _d2(u[bi, :, 0], u[bi, :, 1], u[bi, :, 2], kn[bi, k, 0], kn[bi, k, 1], kn[bi, k, 2], ft)
            d = d.astype(np.float64)
            c1 = d < b1
            c2 = ~c1 & (d < b2)
            c3 = ~c1 & ~c2 & (d < b3)
            b3 = np.where(c1 | c2, b2, np.where(c3, d, b3)); i3 = np.where(c1 | c2, i2, np.where(c3, k, i3))
            b2 = np.where(c1, b1, np.where(c2, d, b2)); i2 = np.where(c1, i1, np.where(c2, k, i2))
            b1 = np.where(c1, d, b1); i1 = np.where(c1, k, i1)
        D[bi] = _unfilled(np.stack([b1, b2, b3], -1), ft)  # float(1e40) = inf
        I[bi] = np.stack([i1, i2, i3], -1)
    _store(dist2, D)
    _store(idx, I)


def featuredistribute_cuda(b, n, m, max_xyz, xyz, distribute_idx):
    """``featuredistribute_cuda_kernel``: ``min_dist2 = 100000`` (float), ``min_dist_idx = -1``, strict ``<``."""
    ft = _ft(xyz)
    mx = _np(max_xyz, ft).reshape(b, n, 3)
    p = _np(xyz, ft).reshape(b, m, 3)
    out = np.zeros((b, m), dtype=np.int64)
    for bi in range(b):
        best = np.full(m, ft(100000))
        bi_ = np.full(m, -1, dtype=np.int64)
        for k in range(n):
            d2 = _d2(mx[bi, k, 0], mx[bi, k, 1], mx[bi, k, 2], p[bi, :, 0], p[bi, :, 1], p[bi, :, 2], ft)
            upd = d2 < best
            best = np.where(upd, d2, best)
            bi_ = np.where(upd, k, bi_)
        out[bi] = bi_
    _store(distribute_idx, out)


# --------------------------------------------------------------------------- sampling


def furthestsampling_cuda(b, n, m, points, temp, idx):
    """``furthestsampling_cuda_kernel<block_size>``: one block per cloud, ``opt_n_threads(n)`` threads."""
    if m <= 0:
        return
    pts = _np(points, F32).reshape(b, n, 3)  # float32 whatever the dtype (see the module docstring)
    tmp = _np(temp, F32).reshape(b, n).copy()
    out = np.zeros((b, m), dtype=np.int64)
    bs = opt_n_threads(n)
    rounds = -(-n // bs)
    for bi in range(b):
        old = 0
        out[bi, 0] = old
        for j in range(1, m):
            x1, y1, z1 = pts[bi, old]
            d = _d2(pts[bi, :, 0], pts[bi, :, 1], pts[bi, :, 2], x1, y1, z1)
            d2 = np.fmin(d, tmp[bi])  # CUDA min() on floats is fminf
            tmp[bi] = d2
            # thread tid scans k = tid, tid + bs, ...: besti = d2 > best ? k : besti, from best = -1
            grid = np.full(rounds * bs, F32(-2))
            grid[:n] = d2
            grid = grid.reshape(rounds, bs)
            best = np.full(bs, F32(-1))
            besti = np.zeros(bs, dtype=np.int64)
            for r in range(rounds):
                k = r * bs + np.arange(bs)
                take = (grid[r] > best) & (k < n)
                besti = np.where(take, k, besti)
                best = np.where(take, grid[r], best)
            # __update(tid, tid + s) for s = bs/2 .. 1: dists_i[tid] = v2 > v1 ? i2 : i1
            s = bs // 2
            while s >= 1:
                v1, v2 = best[:s], best[s:2 * s]
                better = v2 > v1
                best[:s] = np.where(better, v2, v1)
                besti[:s] = np.where(better, besti[s:2 * s], besti[:s])
                s //= 2
            old = int(besti[0])
            out[bi, j] = old
    _store(idx, out)
    _store(temp, tmp)


# --------------------------------------------------------------------------- feature ops (channel first)


def grouping_forward_cuda(b, c, n, m, nsample, points, idx, out):
    p = _np(points, np.float64).reshape(b, c, n)
    i = _np(idx).reshape(b, m, nsample).astype(np.int64)
    _store(out, p[np.arange(b)[:, None, None, None], np.arange(c)[None, :, None, None], i[:, None]])


def grouping_backward_cuda(b, c, n, m, nsample, grad_out, idx, grad_points):
    g = _np(grad_out, np.float64).reshape(b, c, m, nsample)
    i = _np(idx).reshape(b, m, nsample).astype(np.int64)
    acc = np.zeros((b, c, n))
    np.add.at(acc, (np.arange(b)[:, None, None, None], np.arange(c)[None, :, None, None], i[:, None]), g)
    _store(grad_points, acc, add=True)


def grouping_int_forward_cuda(b, c, n, m, nsample, points, idx, out):
    p = _np(points).reshape(b, c, n).astype(np.int64)
    i = _np(idx).reshape(b, m, nsample).astype(np.int64)
    _store(out, p[np.arange(b)[:, None, None, None], np.arange(c)[None, :, None, None], i[:, None]])


def gathering_forward_cuda(b, c, n, m, points, idx, out):
    p = _np(points, np.float64).reshape(b, c, n)
    i = _np(idx).reshape(b, m).astype(np.int64)
    _store(out, p[np.arange(b)[:, None, None], np.arange(c)[None, :, None], i[:, None]])


def gathering_backward_cuda(b, c, n, m, grad_out, idx, grad_points):
    g = _np(grad_out, np.float64).reshape(b, c, m)
    i = _np(idx).reshape(b, m).astype(np.int64)
    acc = np.zeros((b, c, n))
    np.add.at(acc, (np.arange(b)[:, None, None], np.arange(c)[None, :, None], i[:, None]), g)
    _store(grad_points, acc, add=True)


def featuregather_forward_cuda(b, n, m, c, max_feature, distribute_idx, distribute_feature):
    gathering_forward_cuda(b, c, n, m, max_feature, distribute_idx, distribute_feature)


def featuregather_backward_cuda(b, n, m, c, grad_distribute_feature, distribute_idx, grad_max_feature):
    gathering_backward_cuda(b, c, n, m, grad_distribute_feature, distribute_idx, grad_max_feature)


def interpolation_forward_cuda(b, c, m, n, points, idx, weight, out):
    """``interpolation_forward_cuda_kernel_fast``: ``out = w0*p[i0] + w1*p[i1] + w2*p[i2]`` (written)."""
    p = _np(points, np.float64).reshape(b, c, m)
    i = _np(idx).reshape(b, n, 3).astype(np.int64)
    w = _np(weight, np.float64).reshape(b, n, 3)
    bb, cc = np.arange(b)[:, None, None], np.arange(c)[None, :, None]
    res = w[:, None, :, 0] * p[bb, cc, i[:, None, :, 0]] + w[:, None, :, 1] * p[bb, cc, i[:, None, :, 1]] \
        + w[:, None, :, 2] * p[bb, cc, i[:, None, :, 2]]
    _store(out, res)


def interpolation_backward_cuda(b, c, n, m, grad_out, idx, weight, grad_points):
    g = _np(grad_out, np.float64).reshape(b, c, n)
    i = _np(idx).reshape(b, n, 3).astype(np.int64)
    w = _np(weight, np.float64).reshape(b, n, 3)
    acc = np.zeros((b, c, m))
    bb, cc = np.arange(b)[:, None, None], np.arange(c)[None, :, None]
    for j in range(3):
        np.add.at(acc, (bb, cc, i[:, None, :, j]), g * w[:, None, :, j])
    _store(grad_points, acc, add=True)
