"""``pcgeom.ball_query``: up to k neighbours within a radius, nearest first or in index order."""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom.ops.knn import KNNResult
from pcgeom.ops.packed import packed_ball_query


_ORDERS = ("distance", "index")


def ball_query(query, points, radius, k, *, query_lengths=None, points_lengths=None, order="distance",
               query_offsets=None, points_offsets=None) -> KNNResult:
    """Up to ``k`` neighbours with ``dist2 <= radius**2``.

    With ``order="distance"`` (default) the same contract as :func:`pcgeom.knn`
    -- the k nearest, ascending squared distances, ties to the lower index,
    0-based int64 indices -- restricted to points within ``radius``.  With
    ``order="index"`` the **first** k points inside the ball in index order
    (PointNet++'s ball query: ``idx`` ascending along the k axis, each slot
    with its own ``dist2``; on a full ball these are not the nearest).

    The ball is inclusive, ``dist2 <= radius**2``; ``radius**2`` is formed in
    double precision and rounded once to the accumulation dtype (float32 for
    float16/bfloat16/float32, float64 for float64).  Slots with no point
    inside the ball are ``idx = -1``, ``dist2 = +inf``, in both orders; unlike
    pointnet2's ball query there is no padding with the first hit (see
    :func:`pcgeom.fill_missing` for that padding).

    Args:
        query: ``(B, M, D)`` floating tensor.
        points: ``(B, N, D)`` tensor of the same dtype and device.
        radius: float >= 0.
        k: int >= 1, the maximum number of neighbours returned.
        query_lengths: optional int ``(B,)``; rows ``m >= query_lengths[b]`` are padding.
        points_lengths: optional int ``(B,)``; only ``points[b, :points_lengths[b]]`` are searched.
        order: ``"distance"`` (nearest first) or ``"index"`` (first in index order).
        query_offsets: packed layout (2-D inputs), as in
            :func:`pcgeom.knn`; outputs ``(M_total, k)``, indices global.
        points_offsets: the packed points' cumulative end offsets, as in :func:`pcgeom.knn`.

    Returns:
        ``KNNResult(dist2 (B, M, k), idx (B, M, k) int64)``; differentiable
        w.r.t. ``query`` and ``points`` through ``dist2``, to any order (the
        backward is :func:`pcgeom.knn`'s).

    Raises:
        TypeError, ValueError: bad shapes, dtypes, devices, ``radius < 0``,
            ``k < 1``, lengths out of range.
        RuntimeError: outputs that cannot be allocated (a huge ``k``), naming
            ``k`` and the bytes needed (docs/guides/limits.md).

    Example:
        >>> import torch, pcgeom
        >>> pts = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 2, 0]]])
        >>> pcgeom.ball_query(pts[:, :1], pts, radius=1.5, k=3).idx.tolist()
        [[[0, 1, -1]]]
        >>> pcgeom.ball_query(pts[:, 1:2], pts, radius=1.5, k=2, order="index").idx.tolist()
        [[[0, 1]]]
    """
    fn = "ball_query"
    if order not in _ORDERS:
        raise ValueError(f"{fn}: order must be one of {_ORDERS}, got {order!r}")
    if isinstance(query, torch.Tensor) and isinstance(points, torch.Tensor) and query.dim() == 2 == points.dim():
        return KNNResult(*packed_ball_query(query, points, radius, k, query_offsets, points_offsets,
                                            query_lengths is not None or points_lengths is not None,
                                            index_order=order == "index"))
    V.check_offsets_unused(fn, query_offsets, points_offsets)
    V.check_points(fn, "query", query, "(B, M, D)")
    V.check_points(fn, "points", points, "(B, N, D)")
    V.check_pair(fn, "query", query, "points", points)
    radius = V.check_float(fn, "radius", radius, minimum=0.0)
    k = V.check_int(fn, "k", k, minimum=1)
    B, M, _ = query.shape
    N = points.shape[1]
    ql = V.lengths_arg(fn, "query_lengths", query_lengths, B, M, query.device)
    pl = V.lengths_arg(fn, "points_lengths", points_lengths, B, N, query.device)
    dist2, idx = torch.ops.pcgeom.ball_query(query, points, radius, k, ql, pl, order == "index")
    return KNNResult(dist2, idx)


@torch.library.register_fake("pcgeom::ball_query")
def _ball_query_fake(query, points, radius, k, query_lengths, points_lengths, index_order=False):
    B, M, _ = query.shape
    return query.new_empty((B, M, k)), query.new_empty((B, M, k), dtype=torch.int64)
