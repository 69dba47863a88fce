"""Outlier removal and neighbour spacing on the native KNN: Open3D's two keep-masks, batched.

* :func:`remove_statistical_outliers` and :func:`remove_radius_outliers` return
  boolean keep-masks that select exactly the points Open3D's
  ``remove_statistical_outlier`` / ``remove_radius_outlier`` keep, per cloud
  of a padded or packed batch;
* :func:`mean_neighbor_dist2` is the mean squared distance to the k nearest
  *other* points (3D Gaussian Splatting's initial scale; see
  :mod:`pcgeom.compat.simple_knn`).

Every function here is one call of :func:`pcgeom.knn` plus a few vectorised
torch reductions, so it runs on every device pcgeom's KNN runs on.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import torch

from pcgeom import _validation as V
from pcgeom._rounding import exact_sqrt
from pcgeom._scaling import rescale_clouds
from pcgeom.ops import knn
from pcgeom.ops.packed import offsets_arg

__all__ = ["mean_neighbor_dist2", "remove_radius_outliers", "remove_statistical_outliers"]


class _Rows(NamedTuple):
    """A self-KNN flattened to rows: one row per point slot of the batch."""

    dist2: torch.Tensor  # (R, k), ascending, +inf / -1 padding (knn's contract)
    idx: torch.Tensor  # (R, k), in the index space of `points` (local padded, global packed)
    self_index: torch.Tensor  # (R,), each row's own index in that space
    cloud: torch.Tensor  # (R,) int64 cloud of each row
    real: torch.Tensor  # (R,) bool: False for padding rows (m >= lengths[b])
    n_clouds: int
    shape: tuple  # per-point output shape: (B, N) or (N_total,)


def check_cloud(fn: str, points, lengths, offsets, dims: int | None = None) -> None:
    """``points`` is padded ``(B, N, D)`` (with optional ``lengths``) or packed ``(N_total, D)`` (with ``offsets``)."""
    want = "(B, N, 3) or (N_total, 3)" if dims == 3 else "(B, N, D) or (N_total, D)"
    if not isinstance(points, torch.Tensor):
        raise TypeError(f"{fn}: points must be a torch.Tensor of shape {want}, got {type(points).__name__}")
    if points.dim() not in (2, 3):
        raise ValueError(f"{fn}: points must have shape {want}, got {V.shape_str(points)}")
    if points.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: points must be float16, bfloat16, float32 or float64, got {points.dtype}")
    if points.shape[-1] < 1 or (dims is not None and points.shape[-1] != dims):
        raise ValueError(f"{fn}: points must have shape {want}, got {V.shape_str(points)}")
    if points.dim() == 2 and lengths is not None:
        raise ValueError(f"{fn}: packed (N_total, D) points take offsets=, not lengths=")
    if points.dim() == 3 and offsets is not None:
        raise ValueError(f"{fn}: offsets= is for packed (N_total, D) points; padded (B, N, D) points take lengths=")


def self_knn(fn: str, points, k: int, lengths, offsets, *, arg: str = "k", value=None,
             exact_dist2: bool = False, rescaled: bool = False) -> _Rows:
    """Every point's k nearest points of its own cloud (itself included), as rows.

    ``k`` is capped at the number of point slots (at least 2, so a caller that
    drops the self slot keeps one): beyond it every row is padding, so the
    rows are the same and no (N, k) table of padding is allocated.  A table
    that still does not fit is an error naming ``fn``, its argument ``arg``
    and ``value`` (the caller's number, default ``k``), not knn's own ``k``.

    ``rescaled``: the search runs on the cloud rescaled by a power of two
    (one per cloud: its largest finite coordinate magnitude to ``[0.5, 1)``,
    see :func:`pcgeom._scaling.rescale_clouds`), so that coordinates near
    1e+-20 and beyond in float32 (1e+-160 in float64) do not overflow or
    underflow their squares.  A power-of-two scale is exact and commutes with
    rounding, so at ordinary scales the neighbours and distances are bit for
    bit the unscaled ones.  float16/bfloat16 are widened to float32 for the
    search (exact; their distances are then not rounded to the half type, so
    fewer ties).  ``dist2`` stays in the rescaled units (for callers that
    want ``idx``).

    ``exact_dist2``: ``dist2`` comes back as float64 holding the float32
    squared distances of the rescaled search (float16/bfloat16/float32
    points) in the caller's units; float64 points are searched as they are,
    as Open3D searches them.
    """
    dev = points.device
    value = k if value is None else value
    if points.dim() == 3:
        B, N, _ = points.shape
        L = V.lengths_arg(fn, "lengths", lengths, B, N, dev)
        ar = torch.arange(N, device=dev)
        slots, n_clouds, shape = N, B, (B, N)
        self_index, cloud = ar.repeat(B), torch.arange(B, device=dev).repeat_interleave(N)
        real = (ar[None, :] < L[:, None]).reshape(-1)
        knn_args = dict(query_lengths=L, points_lengths=L)
    else:
        n = points.shape[0]
        off = offsets_arg(fn, "offsets", offsets, n, dev)
        ar = torch.arange(n, device=dev)
        slots, n_clouds, shape = n, off.shape[0], (n,)
        self_index, cloud = ar, torch.searchsorted(off, ar, right=True)
        real = torch.ones(n, dtype=torch.bool, device=dev)
        knn_args = dict(query_offsets=off, points_offsets=off)
    k = min(k, max(slots, 2))
    rescale = rescaled or (exact_dist2 and points.dtype != torch.float64)
    item = max(4, points.dtype.itemsize) if rescale else points.dtype.itemsize
    V.check_fits(fn, arg, value, "the neighbour table", (self_index.shape[0], k), item + 8, dev)
    if rescale:
        points, expo = rescale_clouds(points, real, cloud, n_clouds)
    dist2, idx = knn(points, points, k, **knn_args)
    dist2, idx = dist2.reshape(-1, k), idx.reshape(-1, k)
    if exact_dist2:
        dist2 = dist2.to(torch.float64)
        if rescale:
            # Back to the caller's units: times 2**(2e), exact in float64 for
            # every float32 distance (|2e| <= 300 binades).
            dist2 = dist2 * torch.pow(2.0, 2.0 * expo.to(torch.float64))[cloud][:, None]
    return _Rows(dist2, idx, self_index, cloud, real, n_clouds, shape)


def _positive_float(fn: str, name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{fn}: {name} must be a float > 0, got {type(v).__name__} {v!r}")
    v = float(v)
    if math.isnan(v) or v <= 0:
        raise ValueError(f"{fn}: {name} must be a float > 0, got {v}")
    return v


def mean_neighbor_dist2(points, k=3, *, lengths=None, offsets=None) -> torch.Tensor:
    """Per point, the mean squared distance to its k nearest **other** points.

    The point itself is excluded by index, not by distance: a duplicate of it
    (another index at the same position) is a neighbour at distance 0.  The k
    squared distances (:func:`pcgeom.knn`'s exact ``dist2``) are summed
    nearest first in the accumulation dtype (float32 for
    float16/bfloat16/float32, float64 for float64) and divided by their count.

    Args:
        points: padded ``(B, N, D)`` or packed ``(N_total, D)`` floating tensor.
        k: number of other points averaged, an int >= 1.
        lengths: optional int ``(B,)`` for padded input (rows ``>= lengths[b]``
            are padding).
        offsets: optional int ``(B,)`` cumulative end offsets for packed input.

    Returns:
        ``(B, N)`` or ``(N_total,)`` tensor in the dtype of ``points``.  A point
        whose cloud has fewer than ``k`` other points averages the ones there
        are; a point alone in its cloud gets ``+inf``; padding rows hold 0.
        Non-finite coordinates give non-finite values (NaN distances rank last).
        Differentiable w.r.t. ``points``.

    Example:
        >>> import torch, pcgeom
        >>> pts = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 2, 0], [0, 2, 0]])
        >>> pcgeom.mean_neighbor_dist2(pts, k=2).tolist()
        [2.5, 3.0, 2.0, 2.0]
    """
    fn = "mean_neighbor_dist2"
    check_cloud(fn, points, lengths, offsets)
    k = V.check_int(fn, "k", k, minimum=1)
    rows = self_knn(fn, points, k + 1, lengths, offsets, value=k)
    # k beyond the cloud: self_knn's table is capped at the cloud's slots (the
    # other slots would all be padding), so count the columns it gave.
    k = rows.idx.shape[1] - 1
    # Drop the row's own slot; when it is not among the k + 1 (more than k
    # duplicates of lower index), drop the last slot instead.
    is_self = rows.idx == rows.self_index[:, None]
    first_self = torch.where(is_self.any(1), is_self.to(torch.int8).argmax(1), k)
    slot = torch.arange(k + 1, device=points.device)[None, :]
    take = slot + (slot >= first_self[:, None]).to(slot.dtype)
    take = take[:, :k]
    d = rows.dist2.gather(1, take)
    present = rows.idx.gather(1, take) >= 0
    acc = torch.float64 if points.dtype == torch.float64 else torch.float32
    d = torch.where(present, d.to(acc), 0)
    total = d[:, 0]
    for j in range(1, k):  # nearest first, one addition at a time
        total = total + d[:, j]
    count = present.sum(1)
    out = torch.where(count > 0, total / count.clamp_min(1).to(acc), float("inf"))
    out = torch.where(rows.real, out, 0)
    return out.to(points.dtype).reshape(rows.shape)


def remove_statistical_outliers(points, k, std_ratio, *, lengths=None, offsets=None) -> torch.Tensor:
    """Keep-mask of Open3D's ``remove_statistical_outlier(nb_neighbors=k, std_ratio=std_ratio)``, per cloud.

    Open3D's definition, reproduced exactly:

    * each point's ``k`` nearest points **including itself** (at distance 0),
      fewer when the cloud is smaller; their mean **Euclidean** distance
      ``avg`` (square roots of the squared distances, summed nearest first in
      float64);
    * over the cloud, ``mean`` = the sum of the positive ``avg`` divided by the
      number of points that have any neighbour, and the **sample** standard
      deviation (Bessel's ``n - 1``) of the positive ``avg`` about it, with the
      same count;
    * a point is kept iff ``0 < avg < mean + std_ratio * std`` (strict; so
      a point whose k nearest all coincide with it is dropped, as in Open3D,
      and a cloud with a single point keeps nothing).

    Neighbours at non-finite distance (points with NaN/inf coordinates) do
    not count; such points are never kept.  Open3D works in float64: with
    float64 points the masks are identical; with float32 points the distances
    are float32, so a point within rounding of the threshold may differ.  The
    float32 distances are taken on each cloud rescaled by a power of two
    (exact), so clouds at any float32 scale (1e-30, 1e30) get the masks they
    get at scale 1 instead of overflowing or underflowing squares;
    float16/bfloat16 points are searched in float32 the same way.  A ``k``
    larger than the cloud uses all its points.

    Args:
        points: padded ``(B, N, D)`` or packed ``(N_total, D)`` floating tensor.
        k: ``nb_neighbors``, an int >= 1 (the point itself is one of them).
        std_ratio: float > 0.
        lengths: optional int ``(B,)`` valid-row counts for ragged padded
            ``(B, N, D)`` input, as in :func:`pcgeom.knn`.
        offsets: optional int ``(B,)`` cumulative end offsets for ragged packed
            ``(N_total, D)`` input, as in :func:`pcgeom.knn`.

    Returns:
        bool ``(B, N)`` or ``(N_total,)`` keep-mask; padding rows are False.

    Example:
        >>> import torch, pcgeom
        >>> pts = torch.cat([torch.rand(200, 3, generator=torch.Generator().manual_seed(0)),
        ...                  torch.tensor([[9.0, 9, 9]])])
        >>> keep = pcgeom.remove_statistical_outliers(pts, k=8, std_ratio=2.0)
        >>> bool(keep[-1]), int(keep.sum()) > 180
        (False, True)
    """
    fn = "remove_statistical_outliers"
    check_cloud(fn, points, lengths, offsets)
    k = V.check_int(fn, "k", k, minimum=1)
    std_ratio = _positive_float(fn, "std_ratio", std_ratio)
    rows = self_knn(fn, points, k, lengths, offsets, exact_dist2=True)
    d2 = rows.dist2
    ok = torch.isfinite(d2) & (rows.idx >= 0)
    d = exact_sqrt(torch.where(ok, d2, 0))  # Open3D's std::sqrt: correctly rounded (torch's CPU sqrt is not)
    total = d[:, 0]
    for j in range(1, d.shape[1]):  # k capped at the cloud's slots: the rest would be padding
        total = total + d[:, j]
    count = ok.sum(1)
    has = (count > 0) & rows.real
    avg = torch.where(has, total / count.clamp_min(1).to(torch.float64), -1.0)
    B = rows.n_clouds
    pos = avg > 0
    zeros = torch.zeros(B, dtype=torch.float64, device=points.device)
    n_valid = zeros.index_add(0, rows.cloud, has.to(torch.float64))
    mean = zeros.index_add(0, rows.cloud, torch.where(pos, avg, 0)) / n_valid
    dev = torch.where(pos, avg - mean[rows.cloud], 0)
    std = exact_sqrt(zeros.index_add(0, rows.cloud, dev * dev) / (n_valid - 1))
    threshold = mean + std_ratio * std
    keep = pos & (avg < threshold[rows.cloud])
    return keep.reshape(rows.shape)


def remove_radius_outliers(points, radius, min_neighbors, *, lengths=None, offsets=None) -> torch.Tensor:
    """Keep-mask of Open3D's ``remove_radius_outlier(nb_points=min_neighbors, radius=radius)``, per cloud.

    Open3D's definition: a point is kept iff the number of points of its
    cloud at squared distance ``< radius**2`` (strict, ``radius**2`` formed in
    float64), **itself included**, is greater than ``min_neighbors`` -- that
    is, at least ``min_neighbors`` other points lie strictly inside the ball.
    Points with NaN/inf coordinates are never kept and never count.  As with
    :func:`remove_statistical_outliers`, float64 points give Open3D's masks
    exactly; float32 distances (taken on each cloud rescaled by a power of
    two, so any float32 scale works; float16/bfloat16 searched in float32)
    may differ within rounding at the radius.  ``min_neighbors`` at or above
    a cloud's size keeps none of its points.

    Args:
        points: padded ``(B, N, D)`` or packed ``(N_total, D)`` floating tensor.
        radius: float > 0 (not NaN).
        min_neighbors: ``nb_points``, an int >= 1.
        lengths: optional int ``(B,)`` valid-row counts for ragged padded
            ``(B, N, D)`` input, as in :func:`pcgeom.knn`.
        offsets: optional int ``(B,)`` cumulative end offsets for ragged packed
            ``(N_total, D)`` input, as in :func:`pcgeom.knn`.

    Returns:
        bool ``(B, N)`` or ``(N_total,)`` keep-mask; padding rows are False.

    Example:
        >>> import torch, pcgeom
        >>> pts = torch.tensor([[0.0, 0, 0], [0.1, 0, 0], [0, 0.1, 0], [5, 5, 5]])
        >>> pcgeom.remove_radius_outliers(pts, radius=0.2, min_neighbors=2).tolist()
        [True, True, True, False]
    """
    fn = "remove_radius_outliers"
    check_cloud(fn, points, lengths, offsets)
    radius = _positive_float(fn, "radius", radius)
    if math.isinf(radius):
        raise ValueError(f"{fn}: radius must be finite, got {radius}")
    min_neighbors = V.check_int(fn, "min_neighbors", min_neighbors, minimum=1)
    need = min_neighbors + 1
    if need > points.shape[-2]:
        # No cloud holds that many points: nothing is kept (the arguments are still checked).
        if points.dim() == 3:
            V.lengths_arg(fn, "lengths", lengths, points.shape[0], points.shape[1], points.device)
        else:
            offsets_arg(fn, "offsets", offsets, points.shape[0], points.device)
        return torch.zeros(points.shape[:-1], dtype=torch.bool, device=points.device)
    rows = self_knn(fn, points, need, lengths, offsets, arg="min_neighbors", value=min_neighbors, exact_dist2=True)
    # The (min_neighbors + 1)-th nearest, itself included, must be strictly inside.
    last = rows.dist2[:, -1]
    keep = (last < radius * radius) & rows.real & (rows.idx[:, -1] >= 0)
    return keep.reshape(rows.shape)
