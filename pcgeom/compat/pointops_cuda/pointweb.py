"""PointWeb's batched ``pointops_cuda`` (hszhao/PointWeb ``lib/pointops``), served by :mod:`pcgeom.compat.pointops_cuda`.

PointWeb ships its own raw extension under the module name ``pointops_cuda``:
padded ``(B, N, 3)`` batches, channel-first ``(B, C, N)`` features, sizes
passed as ints and **preallocated outputs** that the kernels fill.  These
functions fill the caller's tensors as the bound kernels (``*_fast`` where
``pointops_api.cpp`` binds the fast variant) do: ``=`` where the kernel
writes, ``+=`` where it accumulates (``atomicAdd``), untouched where it does
not write.  The numbers come from pcgeom's native ops
(:func:`pcgeom.knn`, :func:`pcgeom.ball_query`,
:func:`pcgeom.farthest_point_sample`) and pointnet2's stand-in
(:mod:`pcgeom.compat.pointnet2_ops`: ``gather_operation``,
``grouping_operation``, ``three_interpolate``), whose kernels PointWeb's
largely are; this file holds only PointWeb's differences.

Every size is checked against the tensors, every index against its range,
every output's shape, dtype and device (the kernels read and write out of
bounds instead); errors name the argument.  Float32 as in the original;
other float dtypes work when inputs and outputs agree.
"""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom._pointnet2_kernel import kernel_fps_steps, priority, strict_radius
from pcgeom.compat.pointops_cuda._raw import feat_arg, idx_arg, int_arg, out_arg, write
from pcgeom.compat.pointnet2_ops import gather_operation, grouping_operation, three_interpolate
from pcgeom.features import fill_missing
from pcgeom.ops import ball_query as _pc_ball_query
from pcgeom.ops import farthest_point_sample as _pc_fps
from pcgeom.ops import knn as _pc_knn

__all__ = [
    "ballquery_cuda",
    "featuredistribute_cuda",
    "featuregather_backward_cuda",
    "featuregather_forward_cuda",
    "furthestsampling_cuda",
    "gathering_backward_cuda",
    "gathering_forward_cuda",
    "grouping_backward_cuda",
    "grouping_forward_cuda",
    "grouping_int_forward_cuda",
    "interpolation_backward_cuda",
    "interpolation_forward_cuda",
    "knnquery_cuda",
    "labelstat_and_ballquery_cuda",
    "labelstat_ballrange_cuda",
    "labelstat_idx_cuda",
    "nearestneighbor_cuda",
]

# --------------------------------------------------------------------------- PointWeb's own checks


def _like(fn, name, t, ref_name, ref):
    """Same device and dtype as ``ref``."""
    if t.device != ref.device:
        raise ValueError(f"{fn}: {name} must be on {ref.device} like {ref_name}, got {t.device}")
    if t.dtype != ref.dtype:
        raise TypeError(f"{fn}: {name} must have the dtype of {ref_name} ({ref.dtype}), got {t.dtype}")


def _ints(fn, **kw):
    return [int_arg(fn, k, v, 1 if k == "nsample" else 0) for k, v in kw.items()]


def _labels(fn, name, t, shape, device=None):
    V.check_tensor(fn, name, t, len(shape), "(" + ", ".join(str(s) for s in shape) + ")")
    if t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{fn}: {name} must be an int32 tensor (per-point label counts), got {t.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{fn}: {name} must have shape {tuple(shape)}, got {V.shape_str(t)}")
    if device is not None and t.device != device:
        raise ValueError(f"{fn}: {name} must be on {device}, got {t.device}")


def _radius(fn, radius):
    return V.check_float(fn, "radius", radius, minimum=0.0)


def _first_rows(dst, value):
    """Writes ``value`` (k elements) into the first k elements of ``dst`` in row-major order."""
    k = value.numel()
    with torch.no_grad():
        if dst.is_contiguous():
            dst.view(-1)[:k].copy_(value.reshape(-1))
        else:
            full = dst.clone()
            full.view(-1)[:k] = value.reshape(-1).to(full.dtype)
            dst.copy_(full)


def _knn_kernel(query, points, k):
    """PointWeb's insertion-sort KNN: squared distances ascending, ties to the lower index; slots it never
    fills (fewer than ``k`` points, NaN distances, which fail every ``<``) keep ``(1e40 -> inf, 0)``."""
    with torch.no_grad():
        d, i = _pc_knn(query.detach(), points.detach(), k)
        bad = (i < 0) | torch.isnan(d)
        d = torch.where(bad, torch.full((), float("inf"), dtype=d.dtype, device=d.device), d)
        return d, torch.where(bad, 0, i)


def _ball(radius, nsample, new_xyz, xyz):
    """The first ``nsample`` points with ``d2 < radius**2`` (strict, float32) in index order, int64, ``-1`` in
    the empty slots; None when no distance can qualify (or nothing to search)."""
    r = strict_radius(radius, xyz.dtype)
    if r is None or new_xyz.numel() == 0:
        return None
    with torch.no_grad():
        return _pc_ball_query(new_xyz.detach(), xyz.detach(), r, nsample, order="index").idx


def _write_balls(out, raw):
    """ball query's ``idx``: empty slots repeat the first hit, empty balls keep what the caller's tensor holds."""
    filled = fill_missing(raw)
    hit = filled[..., :1] >= 0
    write(out, torch.where(hit, filled, out.reshape(filled.shape).long()).to(torch.int32))


def _label_sum(label_stat, idx, valid=None):
    """``sum_k label_stat[b, idx[b, q, k]]`` over the ``valid`` slots, exact in int64, as int32 like the kernel."""
    B, Q, K = idx.shape
    C = label_stat.shape[2]
    lab = label_stat.long()
    i = idx.clamp_min(0).reshape(B, Q * K, 1).expand(B, Q * K, C)
    g = lab.gather(1, i).view(B, Q, K, C)
    if valid is not None:
        g = g * valid.unsqueeze(-1)
    return g.sum(2).to(torch.int32)


# --------------------------------------------------------------------------- query / sampling


def ballquery_cuda(b, n, m, radius, nsample, new_xyz, xyz, idx):
    """Ball query: writes the first ``nsample`` points with ``d2 < radius**2`` into ``idx (b, m, nsample)``.

    As ``ballquery_cuda_fast``: points in index order, the strict test in
    float32 (``radius`` squared in float32), slots beyond the hits filled with
    the **first hit**; a ball with no point at all is **left untouched**
    (PointWeb's ``pointops.py`` zero-fills ``idx`` first, so it reads 0).

    Args:
        b: batch size.
        n: points per cloud.
        m: centres per cloud.
        radius: float >= 0.
        nsample: int >= 1.
        new_xyz: ``(b, m, 3)`` centres; xyz: ``(b, n, 3)`` points (same dtype and device).
        idx: ``(b, m, nsample)`` int32 output.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> xyz = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [3, 0, 0]]])
        >>> idx = torch.full((1, 2, 3), 7, dtype=torch.int32)
        >>> pointops_cuda.ballquery_cuda(1, 3, 2, 1.0, 3, xyz[:, [1, 2]] + 0.5, xyz, idx)
        >>> idx.tolist()   # ball 0 holds point 1 only; ball 1 (around 3.5) holds point 2
        [[[1, 1, 1], [2, 2, 2]]]
    """
    fn = "ballquery_cuda"
    b, n, m, nsample = _ints(fn, b=b, n=n, m=m, nsample=nsample)
    radius = _radius(fn, radius)
    feat_arg(fn, "new_xyz", new_xyz, (b, m, 3))
    feat_arg(fn, "xyz", xyz, (b, n, 3))
    _like(fn, "xyz", xyz, "new_xyz", new_xyz)
    out = out_arg(fn, "idx", idx, (b, m, nsample), xyz.device, torch.int32)
    raw = _ball(radius, nsample, new_xyz, xyz)
    if raw is not None:
        _write_balls(out, raw)


def knnquery_cuda(b, n, m, nsample, xyz, new_xyz, idx, dist2):
    """PointWeb's KNN: writes the ``nsample`` nearest points of each centre into ``idx (b, m, nsample)``.

    As ``knnquery_cuda_kernel``: squared distances ascending, **ties to the
    lower index** (the insertion sort keeps the first of equal distances),
    slots beyond the ``n`` points (or with NaN distances) hold index 0.  No
    ``nsample <= 200`` cap (the kernel's stack arrays overflow there).

    ``dist2``: the kernel never advances its ``dist2`` pointer past the
    batch/centre offset, so every thread writes the **first** ``nsample``
    entries and the rest stay as the caller left them (PointWeb's
    ``pointops.py`` zero-fills and ignores ``dist2``).  Which thread writes
    last is a race; pcgeom writes the distances of the first centre (batch 0,
    centre 0), ``inf`` in its empty slots.

    Args:
        b: batch size.
        n: points per cloud.
        m: centres per cloud.
        nsample: int >= 1.
        xyz: ``(b, n, 3)`` points; new_xyz: ``(b, m, 3)`` centres (same dtype and device).
        idx: ``(b, m, nsample)`` int32 output.
        dist2: ``(b, m, nsample)`` float output (only its first ``nsample`` entries are written).

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> xyz = torch.tensor([[[0.0, 0, 0], [2, 0, 0]]])
        >>> idx = torch.zeros(1, 2, 3, dtype=torch.int32); d2 = torch.zeros(1, 2, 3)
        >>> pointops_cuda.knnquery_cuda(1, 2, 2, 3, xyz, xyz, idx, d2)
        >>> idx.tolist(), d2.tolist()
        ([[[0, 1, 0], [1, 0, 0]]], [[[0.0, 4.0, inf], [0.0, 0.0, 0.0]]])
    """
    fn = "knnquery_cuda (PointWeb)"
    b, n, m, nsample = _ints(fn, b=b, n=n, m=m, nsample=nsample)
    feat_arg(fn, "xyz", xyz, (b, n, 3))
    feat_arg(fn, "new_xyz", new_xyz, (b, m, 3))
    _like(fn, "new_xyz", new_xyz, "xyz", xyz)
    i_out = out_arg(fn, "idx", idx, (b, m, nsample), xyz.device, torch.int32)
    d_out = out_arg(fn, "dist2", dist2, (b, m, nsample), xyz.device)
    if b * m == 0:
        return
    d, i = _knn_kernel(new_xyz, xyz, nsample)
    write(i_out, i)
    _first_rows(d_out, d[0, 0].to(d_out.dtype))


def _fps_native(pts, temp, m, perm):
    """The same choices on pcgeom's exact FPS kernel, or None where the two could differ.

    In priority order (index 0 first) exact FPS from position 0 with ties to
    the lower position makes the kernel's choices while every step's farthest
    distance is positive and ``temp`` never caps a distance: that is, no two
    chosen points at distance 0 (the kernel then repeats points, pcgeom never
    does), ``m <= n``, finite coordinates within 1e4 (distances below 1.3e9)
    and ``temp >= 1.3e9`` everywhere (``pointops.py`` fills it with 1e10).
    """
    B, N, _ = pts.shape
    if m > N or V.compiling() or not bool(pts.abs().amax() <= 1e4) or not bool(temp.amin() >= 1.3e9):
        return None
    q = pts[:, perm]
    sel = _pc_fps(q, m, start_index=0)
    if m > 1:
        chosen = q.gather(1, sel.unsqueeze(-1).expand(B, m, 3))
        if bool((_pc_knn(chosen, chosen, 2).dist2[..., 1] == 0).any()):
            return None
    return sel


def furthestsampling_cuda(b, n, m, points, temp, idx):
    """PointWeb's farthest point sampling: writes ``idx (b, m)`` int32 and updates ``temp (b, n)``.

    As ``furthestsampling_cuda_kernel``: starts at index 0, **no near-origin
    skip** (pointnet2's ``|p|^2 <= 1e-3`` test is commented out in PointWeb),
    running distances ``fmin(d2, temp)`` in float32 starting from the
    caller's ``temp``, equal maxima resolved like the kernel's block reduction
    (up to 1024 threads; not simply the lowest index), and once every
    remaining distance is 0 (``m`` above the number of distinct points) it
    repeats points by the same rule, as the kernel does.  ``temp`` is read and
    written like the kernel's: afterwards it holds each point's running
    distance to the first ``m - 1`` samples.  ``m = 0`` writes nothing.

    Args:
        b: batch size.
        n: points per cloud (>= 1 when ``m >= 1``).
        m: samples per cloud.
        points: ``(b, n, 3)`` floating coordinates (decisions in float32, like the kernel).
        temp: ``(b, n)`` floating running distances, >= 0 (``pointops.py`` fills it with 1e10).
        idx: ``(b, m)`` int32 output.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> pts = torch.tensor([[[0.0, 0, 0], [0.01, 0, 0], [1, 0, 0], [0, 2, 0]]])
        >>> idx, temp = torch.zeros(1, 3, dtype=torch.int32), torch.full((1, 4), 1e10)
        >>> pointops_cuda.furthestsampling_cuda(1, 4, 3, pts, temp, idx)
        >>> idx.tolist()   # no near-origin skip: point 1 could be chosen
        [[0, 3, 2]]
    """
    fn = "furthestsampling_cuda (PointWeb)"
    b, n, m = _ints(fn, b=b, n=n, m=m)
    feat_arg(fn, "points", points, (b, n, 3))
    feat_arg(fn, "temp", temp, (b, n))
    if temp.device != points.device:
        raise ValueError(f"{fn}: temp must be on {points.device} like points, got {temp.device}")
    out = out_arg(fn, "idx", idx, (b, m), points.device, torch.int32)
    if m == 0 or b == 0:
        return
    if n == 0:
        raise ValueError(f"{fn}: m={m} samples from clouds of n=0 points (the kernel reads out of bounds)")
    with torch.no_grad():
        t0 = temp.detach().to(torch.float32)
        if not bool(t0.amin() >= 0):
            raise ValueError(f"{fn}: temp must hold running distances >= 0 (pointops.py fills it with 1e10), "
                             f"got min {float(temp.amin())}")
        pts = points.detach().to(torch.float32)
        perm = priority(n, points.device, max_threads=1024)  # pointnet2's kernel: 512
        sel = _fps_native(pts, t0, m, perm)
        if sel is None:
            planes = pts[:, perm].permute(2, 0, 1).contiguous()
            sel, t_perm = kernel_fps_steps(planes, t0[:, perm], m)
            t_new = torch.empty_like(t_perm)
            t_new[:, perm] = t_perm
        elif m > 1:
            first = perm[sel[:, : m - 1]]
            picked = pts.gather(1, first.unsqueeze(-1).expand(b, m - 1, 3))
            t_new = torch.fmin(_pc_knn(pts, picked, 1).dist2[..., 0], t0)
        else:
            t_new = None
        write(out, perm[sel])
        if t_new is not None:
            write(temp, t_new.to(temp.dtype))


def nearestneighbor_cuda(b, n, m, unknown, known, dist2, idx):
    """The 3 nearest ``known`` points of each ``unknown`` point: writes ``dist2 (b, n, 3)`` and ``idx (b, n, 3)``.

    As ``nearestneighbor_cuda_kernel_fast``: **squared** distances (PointWeb's
    ``pointops.py`` takes the square root), ascending, ties to the lower index;
    with fewer than 3 known points (or NaN distances) the unused slots hold
    ``dist2 = inf`` (the kernel's ``1e40`` in float32) and index 0.

    Args:
        b: batch size.
        n: unknown points per cloud.
        m: known points per cloud.
        unknown: ``(b, n, 3)``; known: ``(b, m, 3)`` (same dtype and device).
        dist2: ``(b, n, 3)`` float output; idx: ``(b, n, 3)`` int32 output.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> known = torch.tensor([[[0.0, 0, 0], [2, 0, 0]]])
        >>> d2, idx = torch.zeros(1, 1, 3), torch.zeros(1, 1, 3, dtype=torch.int32)
        >>> pointops_cuda.nearestneighbor_cuda(1, 1, 2, torch.tensor([[[3.0, 0, 0]]]), known, d2, idx)
        >>> d2.tolist(), idx.tolist()
        ([[[1.0, 9.0, inf]]], [[[1, 0, 0]]])
    """
    fn = "nearestneighbor_cuda"
    b, n, m = _ints(fn, b=b, n=n, m=m)
    feat_arg(fn, "unknown", unknown, (b, n, 3))
    feat_arg(fn, "known", known, (b, m, 3))
    _like(fn, "known", known, "unknown", unknown)
    d_out = out_arg(fn, "dist2", dist2, (b, n, 3), unknown.device)
    i_out = out_arg(fn, "idx", idx, (b, n, 3), unknown.device, torch.int32)
    if b * n == 0:
        return
    d, i = _knn_kernel(unknown, known, 3)
    write(d_out, d.to(d_out.dtype))
    write(i_out, i)


def featuredistribute_cuda(b, n, m, max_xyz, xyz, distribute_idx):
    """Nearest ``max_xyz`` point of each ``xyz`` point: writes ``distribute_idx (b, m)`` int32.

    As ``featuredistribute_cuda_kernel``: the first point with the smallest
    ``d2`` (ties to the lower index), but only among ``d2 < 100000`` (the
    kernel's initial best): a point farther than ``sqrt(1e5) ~ 316`` from every
    ``max_xyz`` point, or with NaN distances, gets **-1**.

    Args:
        b: batch size.
        n: ``max_xyz`` points per cloud.
        m: ``xyz`` points per cloud.
        max_xyz: ``(b, n, 3)``; xyz: ``(b, m, 3)`` (same dtype and device).
        distribute_idx: ``(b, m)`` int32 output.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> max_xyz = torch.tensor([[[0.0, 0, 0], [1, 0, 0]]])
        >>> out = torch.zeros(1, 2, dtype=torch.int32)
        >>> pointops_cuda.featuredistribute_cuda(1, 2, 2, max_xyz, torch.tensor([[[0.9, 0, 0], [400, 0, 0]]]), out)
        >>> out.tolist()
        [[1, -1]]
    """
    fn = "featuredistribute_cuda"
    b, n, m = _ints(fn, b=b, n=n, m=m)
    feat_arg(fn, "max_xyz", max_xyz, (b, n, 3))
    feat_arg(fn, "xyz", xyz, (b, m, 3))
    _like(fn, "xyz", xyz, "max_xyz", max_xyz)
    out = out_arg(fn, "distribute_idx", distribute_idx, (b, m), xyz.device, torch.int32)
    if b * m == 0:
        return
    with torch.no_grad():
        d, i = _pc_knn(xyz.detach(), max_xyz.detach(), 1)
        write(out, torch.where(d < 100000.0, i, -1).to(torch.int32))


# --------------------------------------------------------------------------- feature ops (channel first)


def grouping_forward_cuda(b, c, n, m, nsample, points, idx, out):
    """Writes ``out[b, c, i, j] = points[b, c, idx[b, i, j]]`` ``(b, c, m, nsample)``; ``idx`` in ``[0, n)``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> out = torch.zeros(1, 1, 1, 2)
        >>> pointops_cuda.grouping_forward_cuda(1, 1, 2, 1, 2, torch.tensor([[[3.0, 4.0]]]),
        ...                                     torch.tensor([[[1, 0]]], dtype=torch.int32), out)
        >>> out.flatten().tolist()
        [4.0, 3.0]
    """
    fn = "grouping_forward_cuda (PointWeb)"
    b, c, n, m, nsample = _ints(fn, b=b, c=c, n=n, m=m, nsample=nsample)
    feat_arg(fn, "points", points, (b, c, n))
    i = idx_arg(fn, "idx", idx, (b, m, nsample), n, points.device)
    o = out_arg(fn, "out", out, (b, c, m, nsample), points.device)
    with torch.no_grad():
        write(o, grouping_operation(points.detach(), i))


def grouping_backward_cuda(b, c, n, m, nsample, grad_out, idx, grad_points):
    """Adds the gradient of :func:`grouping_forward_cuda` into ``grad_points (b, c, n)`` (the kernel's atomicAdd).

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> g = torch.zeros(1, 1, 2)
        >>> pointops_cuda.grouping_backward_cuda(1, 1, 2, 1, 2, torch.ones(1, 1, 1, 2),
        ...                                      torch.tensor([[[1, 1]]], dtype=torch.int32), g)
        >>> g.flatten().tolist()
        [0.0, 2.0]
    """
    fn = "grouping_backward_cuda (PointWeb)"
    b, c, n, m, nsample = _ints(fn, b=b, c=c, n=n, m=m, nsample=nsample)
    feat_arg(fn, "grad_out", grad_out, (b, c, m, nsample))
    i = idx_arg(fn, "idx", idx, (b, m, nsample), n, grad_out.device)
    g = out_arg(fn, "grad_points", grad_points, (b, c, n), grad_out.device)
    _accumulate(g, i.view(b, m * nsample), grad_out.reshape(b, c, m * nsample))


def grouping_int_forward_cuda(b, c, n, m, nsample, points, idx, out):
    """Integer grouping: writes ``out[b, c, i, j] = points[b, c, idx[b, i, j]]`` for int64 ``points`` / ``out``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> out = torch.zeros(1, 1, 1, 2, dtype=torch.long)
        >>> pointops_cuda.grouping_int_forward_cuda(1, 1, 2, 1, 2, torch.tensor([[[7, 9]]]),
        ...                                         torch.tensor([[[1, 1]]], dtype=torch.int32), out)
        >>> out.flatten().tolist()
        [9, 9]
    """
    fn = "grouping_int_forward_cuda"
    b, c, n, m, nsample = _ints(fn, b=b, c=c, n=n, m=m, nsample=nsample)
    V.check_tensor(fn, "points", points, 3, "(b, c, n)")
    if points.dtype != torch.int64:
        raise TypeError(f"{fn}: points must be int64 (the kernel reads long), got {points.dtype}")
    if tuple(points.shape) != (b, c, n):
        raise ValueError(f"{fn}: points must have shape {(b, c, n)}, got {V.shape_str(points)}")
    i = idx_arg(fn, "idx", idx, (b, m, nsample), n, points.device)
    o = out_arg(fn, "out", out, (b, c, m, nsample), points.device, torch.int64)
    k = m * nsample
    write(o, points.gather(2, i.view(b, 1, k).expand(b, c, k)))


def _gather(fn, b, c, n, m, points, idx, out, pname, iname, oname):
    feat_arg(fn, pname, points, (b, c, n))
    i = idx_arg(fn, iname, idx, (b, m), n, points.device)
    o = out_arg(fn, oname, out, (b, c, m), points.device)
    with torch.no_grad():
        write(o, gather_operation(points.detach(), i))


def _scatter(fn, b, c, n, m, grad, idx, grad_points, gname, iname, oname):
    feat_arg(fn, gname, grad, (b, c, m))
    i = idx_arg(fn, iname, idx, (b, m), n, grad.device)
    g = out_arg(fn, oname, grad_points, (b, c, n), grad.device)
    _accumulate(g, i, grad)


def _accumulate(g, i, vals):
    """``g[b, c, i[b, k]] += vals[b, c, k]`` (the kernels' atomicAdd; deterministic on CPU)."""
    B, C, N = g.shape
    with torch.no_grad():
        add = torch.zeros(B, C, N, dtype=g.dtype, device=g.device)
        add.scatter_add_(2, i.unsqueeze(1).expand(B, C, i.shape[1]), vals.to(g.dtype))
        write(g, add, accumulate=True)


def gathering_forward_cuda(b, c, n, m, points, idx, out):
    """Writes ``out[b, c, j] = points[b, c, idx[b, j]]`` ``(b, c, m)``; ``idx (b, m)`` in ``[0, n)``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> out = torch.zeros(1, 2, 2)
        >>> pointops_cuda.gathering_forward_cuda(1, 2, 3, 2, torch.arange(6.0).view(1, 2, 3),
        ...                                      torch.tensor([[2, 0]], dtype=torch.int32), out)
        >>> out.tolist()
        [[[2.0, 0.0], [5.0, 3.0]]]
    """
    fn = "gathering_forward_cuda"
    b, c, n, m = _ints(fn, b=b, c=c, n=n, m=m)
    _gather(fn, b, c, n, m, points, idx, out, "points", "idx", "out")


def gathering_backward_cuda(b, c, n, m, grad_out, idx, grad_points):
    """Adds the gradient of :func:`gathering_forward_cuda` into ``grad_points (b, c, n)`` (the kernel's atomicAdd).

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> g = torch.ones(1, 1, 3)
        >>> pointops_cuda.gathering_backward_cuda(1, 1, 3, 2, torch.tensor([[[5.0, 6.0]]]),
        ...                                       torch.tensor([[2, 2]], dtype=torch.int32), g)
        >>> g.tolist()
        [[[1.0, 1.0, 12.0]]]
    """
    fn = "gathering_backward_cuda"
    b, c, n, m = _ints(fn, b=b, c=c, n=n, m=m)
    _scatter(fn, b, c, n, m, grad_out, idx, grad_points, "grad_out", "idx", "grad_points")


def featuregather_forward_cuda(b, n, m, c, max_feature, distribute_idx, distribute_feature):
    """Writes ``distribute_feature[b, c, j] = max_feature[b, c, distribute_idx[b, j]]`` ``(b, c, m)``.

    Note the argument order ``(b, n, m, c)``.  ``distribute_idx`` must lie in
    ``[0, n)``: the ``-1`` that :func:`featuredistribute_cuda` writes for far
    points makes the kernel read the previous channel's last value; here it
    raises.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> out = torch.zeros(1, 1, 2)
        >>> pointops_cuda.featuregather_forward_cuda(1, 2, 2, 1, torch.tensor([[[3.0, 4.0]]]),
        ...                                          torch.tensor([[1, 1]], dtype=torch.int32), out)
        >>> out.tolist()
        [[[4.0, 4.0]]]
    """
    fn = "featuregather_forward_cuda"
    b, n, m, c = _ints(fn, b=b, n=n, m=m, c=c)
    _gather(fn, b, c, n, m, max_feature, distribute_idx, distribute_feature,
            "max_feature", "distribute_idx", "distribute_feature")


def featuregather_backward_cuda(b, n, m, c, grad_distribute_feature, distribute_idx, grad_max_feature):
    """Adds the gradient of :func:`featuregather_forward_cuda` into ``grad_max_feature (b, c, n)``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> g = torch.zeros(1, 1, 2)
        >>> pointops_cuda.featuregather_backward_cuda(1, 2, 2, 1, torch.tensor([[[3.0, 4.0]]]),
        ...                                           torch.tensor([[1, 1]], dtype=torch.int32), g)
        >>> g.tolist()
        [[[0.0, 7.0]]]
    """
    fn = "featuregather_backward_cuda"
    b, n, m, c = _ints(fn, b=b, n=n, m=m, c=c)
    _scatter(fn, b, c, n, m, grad_distribute_feature, distribute_idx, grad_max_feature,
             "grad_distribute_feature", "distribute_idx", "grad_max_feature")


def interpolation_forward_cuda(b, c, m, n, points, idx, weight, out):
    """Writes ``out[b, c, i] = sum_j weight[b, i, j] * points[b, c, idx[b, i, j]]`` ``(b, c, n)``, 3 slots.

    As ``interpolation_forward_cuda_kernel_fast``: written (not accumulated),
    the three products added in slot order.  ``points (b, c, m)`` holds the
    known features, ``idx`` / ``weight`` are ``(b, n, 3)``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> out = torch.ones(1, 1, 1)
        >>> pointops_cuda.interpolation_forward_cuda(1, 1, 3, 1, torch.tensor([[[1.0, 2.0, 4.0]]]),
        ...     torch.tensor([[[0, 1, 2]]], dtype=torch.int32), torch.tensor([[[0.5, 0.25, 0.25]]]), out)
        >>> out.item()
        2.0
    """
    fn = "interpolation_forward_cuda (PointWeb)"
    b, c, m, n = _ints(fn, b=b, c=c, m=m, n=n)
    feat_arg(fn, "points", points, (b, c, m))
    i = idx_arg(fn, "idx", idx, (b, n, 3), m, points.device)
    feat_arg(fn, "weight", weight, (b, n, 3))
    if weight.device != points.device:
        raise ValueError(f"{fn}: weight must be on {points.device} like points, got {weight.device}")
    o = out_arg(fn, "out", out, (b, c, n), points.device)
    with torch.no_grad():
        write(o, three_interpolate(points.detach(), i, weight.detach()))


def interpolation_backward_cuda(b, c, n, m, grad_out, idx, weight, grad_points):
    """Adds the gradient of :func:`interpolation_forward_cuda` into ``grad_points (b, c, m)``.

    Note the argument order ``(b, c, n, m)`` (the forward's is ``(b, c, m, n)``):
    ``grad_out`` is ``(b, c, n)``, ``idx`` / ``weight`` ``(b, n, 3)``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> g = torch.zeros(1, 1, 2)
        >>> pointops_cuda.interpolation_backward_cuda(1, 1, 1, 2, torch.ones(1, 1, 1),
        ...     torch.tensor([[[0, 1, 1]]], dtype=torch.int32), torch.tensor([[[0.5, 0.25, 0.25]]]), g)
        >>> g.tolist()
        [[[0.5, 0.5]]]
    """
    fn = "interpolation_backward_cuda (PointWeb)"
    b, c, n, m = _ints(fn, b=b, c=c, n=n, m=m)
    feat_arg(fn, "grad_out", grad_out, (b, c, n))
    i = idx_arg(fn, "idx", idx, (b, n, 3), m, grad_out.device)
    feat_arg(fn, "weight", weight, (b, n, 3))
    if weight.device != grad_out.device:
        raise ValueError(f"{fn}: weight must be on {grad_out.device} like grad_out, got {weight.device}")
    g = out_arg(fn, "grad_points", grad_points, (b, c, m), grad_out.device)
    with torch.no_grad():
        contrib = grad_out.unsqueeze(-1) * weight.to(grad_out.dtype).unsqueeze(1)  # (b, c, n, 3)
    _accumulate(g, i.view(b, n * 3), contrib.reshape(b, c, n * 3))


# --------------------------------------------------------------------------- label statistics


def labelstat_idx_cuda(b, n, m, nsample, nclass, label_stat, idx, new_label_stat):
    """Writes ``new_label_stat[b, i] = sum_j label_stat[b, idx[b, i, j]]`` ``(b, m, nclass)`` int32.

    Every slot counts, repeated indices (ball-query padding) included, as in the kernel.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> lab = torch.tensor([[[1, 0], [0, 1]]], dtype=torch.int32)
        >>> out = torch.full((1, 1, 2), 9, dtype=torch.int32)
        >>> pointops_cuda.labelstat_idx_cuda(1, 2, 1, 3, 2, lab, torch.tensor([[[1, 0, 1]]], dtype=torch.int32), out)
        >>> out.tolist()
        [[[1, 2]]]
    """
    fn = "labelstat_idx_cuda"
    b, n, m, nsample, nclass = _ints(fn, b=b, n=n, m=m, nsample=nsample, nclass=nclass)
    _labels(fn, "label_stat", label_stat, (b, n, nclass))
    i = idx_arg(fn, "idx", idx, (b, m, nsample), n, label_stat.device)
    out = out_arg(fn, "new_label_stat", new_label_stat, (b, m, nclass), label_stat.device, torch.int32)
    write(out, _label_sum(label_stat, i))


def labelstat_ballrange_cuda(b, n, m, radius, nclass, new_xyz, xyz, label_stat, new_label_stat):
    """Writes the label counts of **all** points with ``d2 < radius**2`` (strict, float32) around each centre.

    ``new_label_stat (b, m, nclass)`` int32.  The ball is searched in blocks
    of centres, so memory stays bounded whatever ``n``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> xyz = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [3, 0, 0]]])
        >>> lab = torch.tensor([[[1, 0], [0, 1], [0, 1]]], dtype=torch.int32)
        >>> out = torch.zeros(1, 1, 2, dtype=torch.int32)
        >>> pointops_cuda.labelstat_ballrange_cuda(1, 3, 1, 1.5, 2, xyz[:, :1], xyz, lab, out)
        >>> out.tolist()
        [[[1, 1]]]
    """
    fn = "labelstat_ballrange_cuda"
    b, n, m, nclass = _ints(fn, b=b, n=n, m=m, nclass=nclass)
    radius = _radius(fn, radius)
    feat_arg(fn, "new_xyz", new_xyz, (b, m, 3))
    feat_arg(fn, "xyz", xyz, (b, n, 3))
    _like(fn, "xyz", xyz, "new_xyz", new_xyz)
    _labels(fn, "label_stat", label_stat, (b, n, nclass), xyz.device)
    out = out_arg(fn, "new_label_stat", new_label_stat, (b, m, nclass), xyz.device, torch.int32)
    res = torch.zeros(b, m, nclass, dtype=torch.int32, device=xyz.device)
    if n > 0 and b * m * nclass > 0:
        step = max(1, (1 << 22) // max(1, b * n * nclass))
        for s in range(0, m, step):  # blocks of centres: memory bounded, no loop over points
            hits = _ball(radius, n, new_xyz[:, s:s + step], xyz)
            if hits is not None:
                res[:, s:s + step] = _label_sum(label_stat, hits, hits >= 0)
    write(out, res)


def labelstat_and_ballquery_cuda(b, n, m, radius, nsample, nclass, new_xyz, xyz, label_stat, idx, new_label_stat):
    """:func:`ballquery_cuda` plus the label counts of the points it found.

    ``idx (b, m, nsample)`` as :func:`ballquery_cuda` (first hit padding, empty
    balls untouched); ``new_label_stat (b, m, nclass)`` int32 is written with
    the counts of the (at most ``nsample``) distinct points found, each once,
    as the kernel sums them before it stops at ``nsample``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops_cuda
        >>> xyz = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [3, 0, 0]]])
        >>> lab = torch.tensor([[[1, 0], [0, 1], [0, 1]]], dtype=torch.int32)
        >>> idx, out = torch.zeros(1, 1, 3, dtype=torch.int32), torch.zeros(1, 1, 2, dtype=torch.int32)
        >>> pointops_cuda.labelstat_and_ballquery_cuda(1, 3, 1, 1.5, 3, 2, xyz[:, :1], xyz, lab, idx, out)
        >>> idx.tolist(), out.tolist()
        ([[[0, 1, 0]]], [[[1, 1]]])
    """
    fn = "labelstat_and_ballquery_cuda"
    b, n, m, nsample, nclass = _ints(fn, b=b, n=n, m=m, nsample=nsample, nclass=nclass)
    radius = _radius(fn, radius)
    feat_arg(fn, "new_xyz", new_xyz, (b, m, 3))
    feat_arg(fn, "xyz", xyz, (b, n, 3))
    _like(fn, "xyz", xyz, "new_xyz", new_xyz)
    _labels(fn, "label_stat", label_stat, (b, n, nclass), xyz.device)
    i_out = out_arg(fn, "idx", idx, (b, m, nsample), xyz.device, torch.int32)
    l_out = out_arg(fn, "new_label_stat", new_label_stat, (b, m, nclass), xyz.device, torch.int32)
    raw = _ball(radius, nsample, new_xyz, xyz)
    if raw is None:
        write(l_out, torch.zeros(b, m, nclass, dtype=torch.int32, device=xyz.device))
        return
    write(l_out, _label_sum(label_stat, raw, raw >= 0))
    _write_balls(i_out, raw)
