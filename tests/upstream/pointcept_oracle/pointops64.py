"""Independent float64 (numpy) transcriptions of Pointcept's ``libs/pointops`` kernels (d74c646).

Written from ``libs/pointops/src/*/*_kernel.cu`` and ``functions/*.py`` (and
POSTECH point-transformer's ``knnquery`` kernel), loop structure and
comparison operators included where they decide the answer, in float64 and
without any pcgeom code: the oracle of ``tests/test_compat_pointops.py`` and of
the end-to-end Point Transformer checks in this folder.  Offsets are the
kernels' cumulative end offsets.
"""

from __future__ import annotations

import math

import numpy as np


def _np(t):
    return t.detach().cpu().double().numpy() if hasattr(t, "detach") else np.asarray(t, dtype=np.float64)


def _ranges(offset):
    off = [int(v) for v in (offset.tolist() if hasattr(offset, "tolist") else offset)]
    return [(0 if b == 0 else off[b - 1], off[b]) for b in range(len(off))]


def knn_query(nsample, xyz, offset, new_xyz=None, new_offset=None, pad="minus_one"):
    """knn_query_cuda_kernel: the nsample smallest d2 < 1e10 of the query's cloud, ascending.

    The kernel keeps a max-heap of nsample (d2, idx) initialised to (1e10, -1)
    (POSTECH: (1e10, start)), admits a point when d2 < heap top and heap-sorts
    at the end; on tie-free data that is the ascending order written here.
    Returns ``(idx (m, nsample) int64, dist2 (m, nsample) float64)``.  For float32 input d2
    is formed in float32 as the kernel does (``dx*dx + dy*dy + dz*dz``, left to right), so
    near-coincident points get the kernel's distances, not exact ones.
    """
    if new_xyz is None or new_offset is None:
        new_xyz, new_offset = xyz, offset
    x, q = _np(xyz), _np(new_xyz)
    if getattr(xyz, "dtype", None) is not None and str(xyz.dtype).endswith("float32"):
        x, q = x.astype(np.float32), q.astype(np.float32)
    idx = np.full((q.shape[0], nsample), -1, dtype=np.int64)
    d2 = np.full((q.shape[0], nsample), 1e10)
    for (s, e), (qs, qe) in zip(_ranges(offset), _ranges(new_offset)):
        if qe == qs:
            continue
        if pad == "first":
            idx[qs:qe] = s
        if e == s:
            continue
        diff = q[qs:qe, None, :] - x[None, s:e, :]
        sq = diff * diff
        d = ((sq[..., 0] + sq[..., 1]) + sq[..., 2]).astype(np.float64)
        order = np.argsort(d, axis=1, kind="stable")[:, :nsample]
        dd = np.take_along_axis(d, order, 1)
        ok = dd < 1e10
        kk = order.shape[1]
        idx[qs:qe, :kk] = np.where(ok, order + s, idx[qs:qe, :kk])
        d2[qs:qe, :kk] = np.where(ok, dd, 1e10)
    return idx, d2


def _opt_n_threads(work_size):
    pow_2 = int(math.log(float(work_size)) / math.log(2.0))
    return max(min(1 << pow_2, 1024), 1)


def farthest_point_sampling(xyz, offset, new_offset):
    """farthest_point_sampling_cuda_kernel: one block per cloud, strided scan + tree reduction.

    Block size ``opt_n_threads(n_max)`` for every cloud; ``tmp`` starts at
    1e10; thread ``tid`` visits ``k = start + tid, start + tid + bs, ...`` and
    keeps the first strict maximum; the reduction keeps the left value unless
    the right one is strictly larger.
    """
    x = _np(xyz)
    rng, nrng = _ranges(offset), _ranges(new_offset)
    n_max = max(e - s for s, e in rng)
    bs = _opt_n_threads(n_max)
    out = np.zeros(nrng[-1][1], dtype=np.int64)
    for (s, e), (ms, me) in zip(rng, nrng):
        if me == ms:
            continue
        pts = x[s:e]
        n = e - s
        tmp = np.full(n, 1e10)
        out[ms] = s
        old = 0
        for j in range(ms + 1, me):
            d = ((pts - pts[old]) ** 2).sum(1)
            tmp = np.minimum(d, tmp)
            best = np.full(bs, -1.0)
            besti = np.zeros(bs, dtype=np.int64)  # local; the kernel's initial besti = start_n
            for k0 in range(0, n, bs):
                ks = np.arange(k0, min(n, k0 + bs))
                tid = ks - k0
                v = tmp[ks]
                better = v > best[tid]
                besti[tid] = np.where(better, ks, besti[tid])
                best[tid] = np.where(better, v, best[tid])
            stride = bs // 2
            while stride >= 1:
                v1, v2 = best[:stride].copy(), best[stride:2 * stride]
                i1, i2 = besti[:stride].copy(), besti[stride:2 * stride]
                best[:stride] = np.maximum(v1, v2)
                besti[:stride] = np.where(v2 > v1, i2, i1)
                stride //= 2
            old = int(besti[0])
            out[j] = old + s
    return out


def _reheap(dist, idx, k):
    root, child = 0, 1
    while child < k:
        if child + 1 < k and dist[child + 1] > dist[child]:
            child += 1
        if dist[root] > dist[child]:
            return
        dist[root], dist[child] = dist[child], dist[root]
        idx[root], idx[child] = idx[child], idx[root]
        root, child = child, 2 * child + 1


def _heap_sort(dist, idx, k):
    for i in range(k - 1, 0, -1):
        dist[0], dist[i] = dist[i], dist[0]
        idx[0], idx[i] = idx[i], idx[0]
        _reheap(dist, idx, i)


def ball_query_kernel(nsample, max_radius, min_radius, xyz, offset, new_xyz, new_offset):
    """ball_query_cuda_kernel as written: candidates in index order, heap_sort on a non-heap,
    and ``dist2 = candi_idx`` on the subsample path.  Returns ``(idx, dist2, cnt)``."""
    x, q = _np(xyz), _np(new_xyz)
    max2 = float(np.float32(max_radius) * np.float32(max_radius))
    min2 = float(np.float32(min_radius) * np.float32(min_radius))
    m = q.shape[0]
    idx = np.full((m, nsample), -1, dtype=np.int64)
    d2o = np.full((m, nsample), 1e10)
    cnts = np.zeros(m, dtype=np.int64)
    for (s, e), (qs, qe) in zip(_ranges(offset), _ranges(new_offset)):
        for p in range(qs, qe):
            d = ((x[s:e] - q[p]) ** 2).sum(1)
            sel = np.nonzero((d <= 1e-5) | ((d >= min2) & (d < max2)))[0]
            cd, ci = list(d[sel]), list(sel + s)
            _heap_sort(cd, ci, len(cd))
            cnt = len(cd)
            cnts[p] = cnt
            if cnt <= nsample:
                idx[p, :cnt] = ci
                d2o[p, :cnt] = cd
            else:
                sep = np.float32(cnt) / np.float32(nsample)
                for i in range(nsample):
                    j = int(np.float32(sep * np.float32(i)))
                    idx[p, i] = ci[j]
                    d2o[p, i] = ci[j]
    return idx, d2o, cnts


def ball_query_spec(nsample, max_radius, min_radius, xyz, offset, new_xyz, new_offset):
    """The same ball with pcgeom's documented answer: candidates ascending (d2, index), true d2."""
    x, q = _np(xyz), _np(new_xyz)
    max2 = float(np.float32(max_radius) * np.float32(max_radius))
    min2 = float(np.float32(min_radius) * np.float32(min_radius))
    m = q.shape[0]
    idx = np.full((m, nsample), -1, dtype=np.int64)
    d2o = np.full((m, nsample), 1e10)
    for (s, e), (qs, qe) in zip(_ranges(offset), _ranges(new_offset)):
        for p in range(qs, qe):
            d = ((x[s:e] - q[p]) ** 2).sum(1)
            sel = np.nonzero((d <= 1e-5) | ((d >= min2) & (d < max2)))[0]
            sel = sel[np.lexsort((sel, d[sel]))]
            cnt = len(sel)
            if cnt <= nsample:
                cols = np.arange(cnt)
            else:
                sep = np.float32(cnt) / np.float32(nsample)
                cols = np.array([int(np.float32(sep * np.float32(i))) for i in range(nsample)])
            idx[p, :len(cols)] = sel[cols] + s
            d2o[p, :len(cols)] = d[sel[cols]]
    return idx, d2o


def grouping(idx, feat, xyz, new_xyz=None, with_xyz=False):
    """functions/grouping.py ``grouping``: a zero row appended, so ``-1`` gathers zeros."""
    f, x = _np(feat), _np(xyz)
    q = x if new_xyz is None else _np(new_xyz)
    i = np.asarray(idx, dtype=np.int64)
    fz = np.concatenate([f, np.zeros((1, f.shape[1]))], 0)
    g = fz[i]
    if not with_xyz:
        return g
    xz = np.concatenate([x, np.zeros((1, 3))], 0)
    rel = (xz[i] - q[:, None, :]) * np.sign(i + 1)[..., None]
    return np.concatenate([rel, g], -1)


def interpolation(xyz, new_xyz, feat, offset, new_offset, k=3):
    """functions/interpolation.py ``interpolation``: weights on sqrt(dist2), Python indexing (-1 = last row)."""
    idx, d2 = knn_query(k, xyz, offset, new_xyz, new_offset)
    dist = np.sqrt(d2)
    recip = 1.0 / (dist + 1e-8)
    w = recip / recip.sum(1, keepdims=True)
    f = _np(feat)
    return (f[idx] * w[..., None]).sum(1), idx, w


def offset2batch(offset):
    return np.concatenate([np.full(e - s, b, dtype=np.int64) for b, (s, e) in enumerate(_ranges(offset))])


def aggregation(inp, position, weight, idx):
    """aggregation_forward_cuda_kernel: ``out[n, c] += (input[idx] + position) * weight[c % w_c]``."""
    f, p, w = _np(inp), _np(position), _np(weight)
    i = np.asarray(idx, dtype=np.int64)
    c, wc = f.shape[1], w.shape[2]
    return ((f[i] + p) * w[:, :, np.arange(c) % wc]).sum(1)


def subtraction(input1, input2, idx):
    """subtraction_forward_cuda_kernel."""
    a, b = _np(input1), _np(input2)
    return a[:, None, :] - b[np.asarray(idx, dtype=np.int64)]


def attention_relation_step(query, key, weight, it, ir):
    q, k, w = _np(query), _np(key), _np(weight)
    return (q[np.asarray(it)] * k[np.asarray(ir)] * w).sum(-1)


def attention_fusion_step(weight, value, it, ir):
    w, v = _np(weight), _np(value)
    out = np.zeros_like(v)
    np.add.at(out, np.asarray(it, dtype=np.int64), w[..., None] * v[np.asarray(ir, dtype=np.int64)])
    return out


def segment_csr(src, indptr, reduce):
    """torch_scatter's segment_csr along dim 0, float64; empty segments 0; ``arg`` of min/max
    is the first row reaching the extreme (the kernels update on a strict comparison)."""
    x = _np(src)
    ptr = [int(v) for v in indptr.tolist()]
    out = np.zeros((len(ptr) - 1,) + x.shape[1:])
    arg = np.full((len(ptr) - 1,) + x.shape[1:], x.shape[0], dtype=np.int64)
    for s in range(len(ptr) - 1):
        a, b = ptr[s], ptr[s + 1]
        if b == a:
            continue
        seg = x[a:b]
        if reduce in ("sum", "add"):
            out[s] = seg.sum(0)
        elif reduce == "mean":
            out[s] = seg.sum(0) / (b - a)
        elif reduce in ("min", "max"):
            j = np.argmin(seg, 0) if reduce == "min" else np.argmax(seg, 0)  # first extreme
            out[s] = np.take_along_axis(seg, j[None], 0)[0]
            arg[s] = j + a
    return out, arg


def voxel_grid(pos, size, batch):
    """PyG's voxel_grid(pos, size, batch, start=0) on torch_cluster's grid_cluster formula.

    The batch id is an extra coordinate of voxel size 1; ``end`` is the
    per-axis maximum; voxel ``trunc((p - start) / size)``, ids linearised
    with the first axis fastest over ``floor((end - start) / size) + 1`` voxels per axis.
    """
    p = np.concatenate([_np(pos), np.asarray(batch, dtype=np.float64)[:, None]], 1)
    sz = np.array([float(size)] * (p.shape[1] - 1) + [1.0])
    # torch_cluster computes in the dtype of pos: mirror its rounding (float32 unless pos is float64).
    dt = np.float64 if str(getattr(pos, "dtype", "")).endswith("float64") else np.float32
    p32 = p.astype(dt)
    sz32 = sz.astype(dt)
    end = p32.max(0)
    nv = (np.floor(end / sz32).astype(np.int64) + 1)
    vox = np.trunc(p32 / sz32).astype(np.int64)
    mult = np.concatenate([[1], np.cumprod(nv)[:-1]])
    return (vox * mult).sum(1)
