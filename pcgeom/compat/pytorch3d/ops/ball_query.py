"""``pytorch3d.ops.ball_query`` served by pcgeom.

pytorch3d v0.7.9's rule (``ball_query_cpu.cpp``): for each ``p1`` point, the
**first K points of** ``p2`` **in index order** with ``dist2 < radius**2``
(strict, ``radius**2`` formed in float32), not the K nearest.  Padding is
``idx = -1`` and ``dists = 0``; ``knn`` (``return_nn``) is 0 there.  It runs on
:func:`pcgeom.ball_query` in its index order, whose inclusive ball is given the
largest threshold below upstream's float32 ``radius**2``.
"""

from __future__ import annotations

import math

import torch

from pcgeom import _validation as V
from pcgeom.compat.pytorch3d.ops.knn import KNN
from pcgeom.ops import ball_query as _pc_ball_query
from pcgeom.ops import knn_gather as _pc_knn_gather

__all__ = ["ball_query"]


def _inclusive_radius(radius: float, dtype: torch.dtype) -> float | None:
    """A radius whose inclusive ball in pcgeom (``d2 <= r*r``) is upstream's ``d2 < float32(radius)**2``.

    Upstream squares the float32 radius in float32 and compares strictly in the
    input's dtype.  The inclusive threshold is the largest accumulation-dtype value
    below that square; for float32 (and half) inputs its square root in double
    rounds back to it exactly, for float64 the root is stepped down until its
    double square does not exceed it.  None: the ball is empty (radius 0).
    """
    r32 = torch.tensor(radius, dtype=torch.float32)
    r2 = (r32 * r32).to(V.acc_dtype(dtype))
    if not bool(r2 > 0):
        return None
    below = float(torch.nextafter(r2, torch.zeros_like(r2)))
    r = math.sqrt(below)
    if dtype == torch.float64:
        while r * r > below:
            r = math.nextafter(r, 0.0)
    return r


def ball_query(p1, p2, lengths1=None, lengths2=None, K: int = 500, radius: float = 0.2, return_nn: bool = True,
               skip_points_outside_cube: bool = False) -> KNN:
    """The first K points of ``p2`` (in index order) within ``radius`` of each ``p1`` point, pytorch3d's ``ball_query``.

    Args:
        p1: ``(N, P1, D)`` floating tensor, the ball centres.
        p2: ``(N, P2, D)`` tensor of the same dtype and device.
        lengths1: optional int ``(N,)`` in ``[0, P1]``; rows ``i >= lengths1[n]`` are padding.
        lengths2: optional int ``(N,)`` in ``[0, P2]``; only ``p2[n, :lengths2[n]]`` is searched.
        K: the most neighbours returned, an int >= 1.
        radius: float >= 0.  A point is inside when ``dist2 < radius**2``, strictly,
            with ``radius**2`` formed in float32 as upstream does.
        return_nn: also return the neighbours' coordinates (0 in padded slots).
        skip_points_outside_cube: accepted; upstream's speed-up, it never changes the answer.

    Returns:
        ``KNN(dists, idx, knn)``:

        * ``dists (N, P1, K)``: squared distances in the dtype of ``p1``, 0 in padded slots;
          differentiable w.r.t. ``p1`` and ``p2``.
        * ``idx (N, P1, K)`` int64, ascending along K (index order), ``-1`` in padded slots
          and rows.
        * ``knn (N, P1, K, D)`` or ``None`` unless ``return_nn``.

        For float64 input the threshold is the largest double square at or below the
        largest double under ``float32(radius)**2``: a distance within about one ulp below
        that square can be left out.

    Raises:
        ValueError: upstream's ``"pts1 and pts2 must have the same batch dimension."`` /
            ``"... point dimension."``; ``K < 1``, a negative or NaN ``radius`` (upstream squares
            a negative radius silently), lengths out of range.
        TypeError: non-floating points, mixed dtypes.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.ops import ball_query
        >>> pts = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 2, 0]]])
        >>> out = ball_query(pts[:, :1], pts, K=3, radius=1.5)
        >>> out.idx.tolist(), out.dists.tolist()
        ([[[0, 1, -1]]], [[[0.0, 1.0, 0.0]]])
        >>> ball_query(pts[:, :1], pts, K=3, radius=1.0).idx.tolist()  # strict: the point at 1.0 is outside
        [[[0, -1, -1]]]
    """
    fn = "ball_query"
    V.check_points(fn, "p1", p1, "(N, P1, D)")
    V.check_points(fn, "p2", p2, "(N, P2, D)")
    if p1.shape[0] != p2.shape[0]:
        raise ValueError("pts1 and pts2 must have the same batch dimension.")
    if p1.shape[2] != p2.shape[2]:
        raise ValueError("pts1 and pts2 must have the same point dimension.")
    V.check_pair(fn, "p1", p1, "p2", p2)
    K = V.check_int(fn, "K", K, minimum=1)
    radius = V.check_float(fn, "radius", radius, minimum=0.0)
    N, P1, _ = p1.shape
    P2 = p2.shape[1]
    l1 = V.lengths_arg(fn, "lengths1", lengths1, N, P1, p1.device)
    l2 = V.lengths_arg(fn, "lengths2", lengths2, N, P2, p1.device)
    r = _inclusive_radius(radius, p1.dtype)
    if r is None:  # radius 0: no distance is below 0
        idx = torch.full((N, P1, K), -1, dtype=torch.int64, device=p1.device)
        # zeros that stay in p1's graph (a zero gradient, as upstream's), never NaN from 0 * inf
        dists = torch.where(idx < 0, torch.zeros((), dtype=p1.dtype, device=p1.device), p1[:, :, :1].expand(N, P1, K))
    else:
        d, idx = _pc_ball_query(p1, p2, r, K, query_lengths=l1, points_lengths=l2, order="index")
        dists = torch.where(idx < 0, torch.zeros((), dtype=d.dtype, device=d.device), d)
    nn = _pc_knn_gather(p2, idx) if return_nn else None
    return KNN(dists=dists, idx=idx, knn=nn)
