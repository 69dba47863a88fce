"""``pointops.query``: ``knn_query``, ``ball_query``, ``random_ball_query`` (Pointcept ``libs/pointops/functions/query.py``)."""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom._rounding import acc_sq_dist
from pcgeom.compat.pointops._common import check_nsample, dist_out, PAD_DIST, query_args
from pcgeom.ops import ball_query as _pc_ball_query, knn as _pc_knn
from pcgeom.packed_features import offsets_to_batch

__all__ = ["knn_query", "ball_query", "random_ball_query"]

_HALF = (torch.float16, torch.bfloat16)


def knn_query(nsample, xyz, offset, new_xyz=None, new_offset=None):
    """The ``nsample`` nearest points of each query row within its cloud.

    Args:
        nsample: int >= 1 (no upper cap).
        xyz: ``(n, 3)`` floating coordinates, clouds packed by ``offset``.
        offset: int ``(b,)`` cumulative end offsets of ``xyz`` (``offset[-1] == n``).
        new_xyz: ``(m, 3)`` query coordinates; ``None`` (or ``new_offset=None``)
            queries ``xyz`` itself.
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``.

    Returns:
        ``(idx, dist)``: ``idx (m, nsample)`` int32 global rows of ``xyz``,
        nearest first, ties to the lower index, ``-1`` where the cloud has
        fewer than ``nsample`` points; ``dist (m, nsample)`` Euclidean
        distances in the dtype of ``xyz``, ``1e5`` at ``-1``: the exact root of
        the float32 (float64) squared distance rounded once to that dtype.
        No gradient.

    Raises:
        ValueError: offsets not non-decreasing or not ending at the row count,
            ``nsample < 1``, mixed devices.
        TypeError: non-float coordinates.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [2, 0, 0], [5, 0, 0]])
        >>> idx, dist = pointops.knn_query(2, xyz, torch.tensor([3], dtype=torch.int32))
        >>> idx.tolist(), dist.tolist()
        ([[0, 1], [1, 0], [2, 1]], [[0.0, 2.0], [0.0, 2.0], [0.0, 3.0]])
    """
    fn = "knn_query"
    nsample = check_nsample(fn, nsample)
    xyz, off, new_xyz, new_off = query_args(fn, xyz, offset, new_xyz, new_offset)
    with torch.no_grad():
        dist2, idx = _pc_knn(new_xyz, xyz, nsample, query_offsets=new_off, points_offsets=off)
        if xyz.dtype in _HALF:
            dist2 = acc_sq_dist(new_xyz, xyz, idx)
        return idx.int(), dist_out(dist2, idx, xyz.dtype)


def _ball_candidates(fn, xyz, off, new_xyz, new_off, nsample, min_radius, max_radius, index_order):
    """Every point of the query's cloud inside the pointops ball, compacted to the left.

    Returns ``(dist2 (m, K), idx (m, K) int64, cnt (m,))``: candidates nearest
    first (``index_order=False``, ties to the lower index) or in row order of
    ``xyz``; slots ``>= cnt`` are ``idx = -1``.  The search asks pcgeom's ball
    query for a superset radius and grows its ``k`` until no row is full.
    ``dist2`` is in the accumulation dtype (float32 for half-precision input):
    the shell test, the order and the returned distance all use the unrounded value.
    """
    acc = torch.float64 if xyz.dtype == torch.float64 else torch.float32
    max2 = torch.tensor(max_radius, dtype=acc) ** 2
    min2 = torch.tensor(min_radius, dtype=acc) ** 2
    r2 = max(float(max2), float(torch.tensor(1e-5, dtype=acc)))
    radius = (r2 ** 0.5) * (1 + 1e-6)  # a superset ball; the exact test follows
    lengths = torch.diff(off, prepend=off.new_zeros(1))
    n_max = int(lengths.max()) if lengths.numel() else 0
    k = max(1, min(max(nsample, 32), n_max))
    order = "index" if index_order else "distance"
    while True:
        dist2, idx = _pc_ball_query(new_xyz, xyz, radius, k, order=order, query_offsets=new_off, points_offsets=off)
        if k >= n_max or idx.shape[0] == 0 or not bool((idx[:, -1] >= 0).any()):
            break
        k = min(4 * k, n_max)
    d = dist2.to(acc)
    if xyz.dtype in _HALF:
        # pcgeom rounds dist2 to the input dtype; the shell test and the order need the float32 value
        d = torch.where(idx >= 0, acc_sq_dist(new_xyz, xyz, idx), float("inf"))
        if not index_order:
            d, perm = torch.sort(d, dim=1, stable=True)
            idx = torch.gather(idx, 1, perm)
    keep = (idx >= 0) & ((d.double() <= 1e-5) | ((d >= min2.to(d.device)) & (d < max2.to(d.device))))
    perm = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)
    return torch.gather(d, 1, perm), torch.where(torch.gather(keep, 1, perm), torch.gather(idx, 1, perm), -1), keep.sum(1)


def _ball_args(fn, nsample, max_radius, min_radius):
    nsample = check_nsample(fn, nsample)
    max_radius = V.check_float(fn, "max_radius", max_radius, minimum=0.0)
    min_radius = V.check_float(fn, "min_radius", min_radius, minimum=0.0)
    if not min_radius < max_radius:
        raise ValueError(f"{fn}: min_radius must be < max_radius, got min_radius={min_radius}, max_radius={max_radius}")
    return nsample, max_radius, min_radius


def _take(dist2, idx, cols, valid, dtype):
    d = torch.gather(dist2, 1, cols)
    i = torch.where(valid, torch.gather(idx, 1, cols), -1)
    return i.int(), dist_out(d, i, dtype)


def ball_query(nsample, max_radius, min_radius, xyz, offset, new_xyz=None, new_offset=None):
    """Up to ``nsample`` points of the query's cloud in the shell ``[min_radius, max_radius)``.

    A point is a candidate when ``d2 <= 1e-5`` (always) or ``min_radius**2 <=
    d2 < max_radius**2`` (squared radii in float32, as the kernel).
    Candidates are ordered nearest first (ties to the lower index); with at
    most ``nsample`` of them all are returned, padded with ``-1`` / ``1e5``;
    with ``cnt > nsample`` the kernel's stride picks candidate
    ``int(float32(cnt) / nsample * i)`` for slot ``i``.

    Args:
        nsample: int >= 1 (no cap on the candidates).
        max_radius: float, the shell's outer radius (exclusive),
            ``max_radius > min_radius``.
        min_radius: float, the shell's inner radius (inclusive),
            ``0 <= min_radius < max_radius``.
        xyz: ``(n, 3)`` floating coordinates, clouds packed by ``offset``.
        offset: int ``(b,)`` cumulative end offsets of ``xyz`` (``offset[-1] == n``).
        new_xyz: ``(m, 3)`` query coordinates; ``None`` (or ``new_offset=None``)
            queries ``xyz`` itself.
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``.

    Returns:
        ``(idx (m, nsample) int32, dist (m, nsample))``, true Euclidean
        distances (the kernel writes ``sqrt(index)`` on its subsample path),
        rounded once as in :func:`knn_query`.  The shell test and the order
        use the float32 squared distance also for float16/bfloat16 input.
        No gradient.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [0.5, 0, 0], [1, 0, 0], [3, 0, 0]])
        >>> pointops.ball_query(4, 1.5, 0.75, xyz, torch.tensor([4]))[0][0].tolist()
        [0, 2, -1, -1]
    """
    fn = "ball_query"
    nsample, max_radius, min_radius = _ball_args(fn, nsample, max_radius, min_radius)
    xyz, off, new_xyz, new_off = query_args(fn, xyz, offset, new_xyz, new_offset)
    V.check_fits(fn, "nsample", nsample, "idx and dist", (new_xyz.shape[0], nsample), 16, xyz.device)
    with torch.no_grad():
        dist2, idx, cnt = _ball_candidates(fn, xyz, off, new_xyz, new_off, nsample, min_radius, max_radius, False)
        ar = torch.arange(nsample, device=xyz.device)
        sep = cnt.to(torch.float32) / torch.tensor(float(nsample), dtype=torch.float32)
        strided = (sep[:, None] * ar.to(torch.float32)[None, :]).long()
        over = (cnt > nsample)[:, None]
        cols = torch.where(over, strided, ar[None, :]).clamp_(max=max(dist2.shape[1] - 1, 0))
        valid = over | (ar[None, :] < cnt[:, None])
        if dist2.shape[1] == 0:
            m = new_xyz.shape[0]
            return (torch.full((m, nsample), -1, dtype=torch.int32, device=xyz.device),
                    torch.full((m, nsample), PAD_DIST, dtype=xyz.dtype, device=xyz.device))
        return _take(dist2, idx, cols, valid, xyz.dtype)


def random_ball_query(nsample, max_radius, min_radius, xyz, offset, new_xyz=None, new_offset=None):
    """Like :func:`ball_query`, but the first ``nsample`` candidates of a random scan of each cloud.

    Each cloud's points are visited in a random order (one permutation per
    call, drawn from torch's global generator: seed with
    ``torch.manual_seed``); a query keeps the first ``nsample`` candidates it
    meets, in that order, padded with ``-1`` / ``1e5``.

    Args:
        nsample: int >= 1, the candidates kept per query, as in :func:`ball_query`.
        max_radius: float, the shell's outer radius (exclusive), as in
            :func:`ball_query`.
        min_radius: float, the shell's inner radius (inclusive),
            ``0 <= min_radius < max_radius``, as in :func:`ball_query`.
        xyz: ``(n, 3)`` floating coordinates, clouds packed by ``offset``.
        offset: int ``(b,)`` cumulative end offsets of ``xyz`` (``offset[-1] == n``).
        new_xyz: ``(m, 3)`` query coordinates; ``None`` (or ``new_offset=None``)
            queries ``xyz`` itself.
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``.

    Returns:
        ``(idx (m, nsample) int32, dist (m, nsample))``.  No gradient.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [0.5, 0, 0], [3, 0, 0]])
        >>> idx, _ = pointops.random_ball_query(3, 1.0, 0.0, xyz, torch.tensor([3]))
        >>> sorted(idx[0].tolist())
        [-1, 0, 1]
    """
    fn = "random_ball_query"
    nsample, max_radius, min_radius = _ball_args(fn, nsample, max_radius, min_radius)
    xyz, off, new_xyz, new_off = query_args(fn, xyz, offset, new_xyz, new_offset)
    V.check_fits(fn, "nsample", nsample, "idx and dist", (new_xyz.shape[0], nsample), 16, xyz.device)
    with torch.no_grad():
        batch = offsets_to_batch(off, xyz.shape[0])
        keys = batch.to(torch.float64) + torch.rand(xyz.shape[0], dtype=torch.float64, device=xyz.device)
        order = torch.argsort(keys, stable=True)
        shuffled = xyz.index_select(0, order)
        dist2, pos, cnt = _ball_candidates(fn, shuffled, off, new_xyz, new_off, nsample, min_radius, max_radius, True)
        m = new_xyz.shape[0]
        if dist2.shape[1] < nsample:
            pad = nsample - dist2.shape[1]
            dist2 = torch.cat([dist2, dist2.new_full((m, pad), float("inf"))], 1)
            pos = torch.cat([pos, pos.new_full((m, pad), -1)], 1)
        dist2, pos = dist2[:, :nsample], pos[:, :nsample]
        idx = torch.where(pos >= 0, order[pos.clamp(min=0)], -1)
        return idx.int(), dist_out(dist2, idx, xyz.dtype)
