"""Stand-in for ``pointnet2_ops.pointnet2_utils`` (erikwijmans/Pointnet2_PyTorch).

Served under the module names ``pointnet2_ops`` and
``pointnet2_ops.pointnet2_utils`` once the shims are on (``pcgeom compat
enable`` or :func:`pcgeom.compat.enable_shims`), so repositories that import
the compiled extension run unchanged, on CPU and GPU.  Same names, layouts and
numbers as the original kernels:

* ``furthest_point_sample(xyz (B,N,3), npoint)`` -> ``(B, npoint)`` **int32**,
  starting at index 0, skipping points with ``|p|^2 <= 1e-3`` and breaking
  ties like the CUDA kernel (:func:`pcgeom.grouping.pointnet2_fps`); no gradient;
* ``gather_operation(features (B,C,N), idx (B,S))`` -> ``(B, C, S)``,
  differentiable w.r.t. ``features``;
* ``ball_query(radius, nsample, xyz (B,N,3), new_xyz (B,S,3))`` ->
  ``(B, S, nsample)`` int32: the first ``nsample`` points in index order with
  ``d2 < radius**2`` (strict, in float32 like the kernel), empty slots filled
  with the first hit, index 0 when the ball is empty; no gradient;
* ``grouping_operation(features (B,C,N), idx (B,S,K))`` -> ``(B, C, S, K)``,
  differentiable w.r.t. ``features``;
* ``three_nn(unknown (B,n,3), known (B,m,3))`` -> ``(dist (B,n,3), idx (B,n,3)
  int32)``, **Euclidean** distances ascending, ties to the lower index; no
  gradient (the original marks both non-differentiable);
* ``three_interpolate(features (B,C,m), idx (B,n,3), weight (B,n,3))`` ->
  ``(B, C, n)``, differentiable w.r.t. ``features`` only (like the original,
  ``weight`` gets no gradient);
* ``QueryAndGroup(radius, nsample, use_xyz=True)`` and ``GroupAll(use_xyz=True)``.

Unlike the original the inputs need not be contiguous, float16/bfloat16/float64
work too (computed as pcgeom computes them), and bad input raises an error
naming the argument instead of ``exit(-1)``.  The search runs on pcgeom's
native kernels (:func:`pcgeom.ball_query` with ``order="index"``,
:func:`pcgeom.knn`, :func:`pcgeom.farthest_point_sample`).

Example:
    >>> import torch
    >>> from pcgeom.compat import pointnet2_ops as pointnet2_utils
    >>> xyz = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 3, 0], [5, 5, 0]]])
    >>> pointnet2_utils.furthest_point_sample(xyz, 2).tolist()
    [[0, 3]]
    >>> pointnet2_utils.ball_query(1.5, 3, xyz, xyz[:, :1]).tolist()   # first hit 0 repeated
    [[[0, 1, 0]]]
    >>> dist, idx = pointnet2_utils.three_nn(xyz[:, :1], xyz)
    >>> dist.tolist(), idx.tolist()
    ([[[0.0, 1.0, 3.0]]], [[[0, 1, 2]]])
"""

from __future__ import annotations


import math

import torch
from torch import nn
from torch.fx.experimental.symbolic_shapes import guard_or_false

from pcgeom import _validation as V
from pcgeom._export_guard import exporting, require
from pcgeom._pointnet2_kernel import NEAR_ORIGIN, priority, strict_radius
from pcgeom._pointnet2_kernel import fps as pointnet2_fps_unchecked
from pcgeom.ops import ball_query as _pc_ball_query
from pcgeom.ops import farthest_point_sample, knn
from pcgeom._rounding import acc_sq_dist, sqrt_once

__version__ = "3.0.0"

__all__ = [
    "GroupAll",
    "QueryAndGroup",
    "ball_query",
    "furthest_point_sample",
    "gather_operation",
    "grouping_operation",
    "three_interpolate",
    "three_nn",
]

_INDEX_DTYPES = (torch.int32, torch.int64)


def _check_xyz(fn: str, name: str, t, layout: str) -> None:
    V.check_points(fn, name, t, layout)
    if t.shape[2] != 3:
        raise ValueError(f"{fn}: {name} must have shape {layout}, got {V.shape_str(t)}")


def _check_features(fn: str, name: str, t, layout: str) -> None:
    V.check_tensor(fn, name, t, 3, layout)
    if t.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be float16, bfloat16, float32 or float64, got {t.dtype}")


def _check_idx(fn: str, name: str, idx, ndim: int, layout: str, B: int, n: int, device) -> torch.Tensor:
    V.check_tensor(fn, name, idx, ndim, layout)
    if idx.dtype not in _INDEX_DTYPES:
        raise TypeError(f"{fn}: {name} must be int32 or int64, got {idx.dtype}")
    if idx.shape[0] != B:
        raise ValueError(f"{fn}: {name} must have shape {layout} with B={B}, got {V.shape_str(idx)}")
    if idx.device != device:
        raise ValueError(f"{fn}: {name} must be on {device} like the features, got {idx.device}")
    if not V.compiling() and idx.numel() > 0:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= n:
            raise ValueError(f"{fn}: {name} values must be in [0, {n}), got min {lo}, max {hi}")
    return idx.long()


def furthest_point_sample(xyz: torch.Tensor, npoint: int) -> torch.Tensor:
    """pointnet2's farthest point sampling, with the CUDA kernel's choices.

    Starts at index 0, then repeatedly takes the point farthest from the chosen ones, skipping points with
    ``|p|^2 <= 1e-3`` (the kernel's near-origin test) and breaking ties as the kernel's thread-block reduction
    does; when fewer points are eligible than requested it repeats points, as the kernel does.

    Args:
        xyz: ``(B, N, 3)`` float16/bfloat16/float32/float64 coordinates (need not be contiguous).
        npoint: int, ``1 <= npoint <= N``, the number of samples per cloud.

    Returns:
        ``(B, npoint)`` int32 indices into ``xyz``; no gradient (like the original).

    Raises:
        ValueError: ``xyz`` not ``(B, N, 3)``, or ``npoint`` outside ``[1, N]``.
        TypeError: ``xyz`` not a floating tensor, ``npoint`` not an int.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointnet2_ops
        >>> xyz = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 3, 0], [5, 5, 0]]])
        >>> pointnet2_ops.furthest_point_sample(xyz, 3).tolist()
        [[0, 3, 2]]
    """
    fn = "furthest_point_sample"
    _check_xyz(fn, "xyz", xyz, "(B, N, 3)")
    npoint = V.check_int(fn, "npoint", npoint, minimum=1)
    # guard_or_false: eager sizes are plain ints (the check is exact); torch 2.10's export traces a
    # slice such as x[:, :12] to an unbacked size it cannot compare, and must not stop there.
    if guard_or_false(npoint > xyz.shape[1]):
        raise ValueError(f"{fn}: npoint={npoint} exceeds the number of points N={xyz.shape[1]} (xyz shape {V.shape_str(xyz)})")
    if exporting():  # the check above, kept in an exported graph for every later N
        xyz = require(xyz, torch.scalar_tensor(xyz.shape[1], dtype=torch.int64) >= npoint,
                      f"{fn}: npoint={npoint} exceeds the number of points N (xyz must have N >= {npoint})")
    idx = _pointnet2_fps_native(xyz, npoint)
    if idx is None:
        idx = pointnet2_fps_unchecked(xyz, npoint)
    return idx.to(torch.int32)


def _pointnet2_fps_native(xyz: torch.Tensor, npoint: int):
    """pointnet2's FPS on pcgeom's native exact FPS kernel, or None where the two could differ.

    With the points in the kernel's tie priority order (pcgeom._pointnet2_kernel's
    ``priority``), index 0 first and the points the kernel skips
    (``|p|^2 <= 1e-3``) moved past ``lengths``, exact FPS from index 0 (ties
    to the lower position) makes the kernel's choices -- as long as every
    step has a positive farthest distance.  The kernel differs only when it
    starts repeating points (all remaining distances 0, which shows as two
    chosen points with equal coordinates, or more samples than eligible
    points), and for NaN/inf or huge coordinates (its 1e10 distance cap):
    those take the sequential transcription instead.
    """
    if V.compiling() or xyz.shape[0] == 0:
        return None
    B, N, _ = xyz.shape
    with torch.no_grad():
        pts = xyz.detach().to(torch.float32)
        if not bool(pts.abs().amax() <= 1e4):  # also False for NaN; inf is > 1e4
            return None
        perm = priority(N, xyz.device)
        p = pts[:, perm]
        x, y, z = p.unbind(-1)
        eligible = (x * x + y * y + z * z) > NEAR_ORIGIN
        rank = torch.where(eligible, 1, 2)
        rank[:, 0] = 0  # original index 0 (priority position 0) is always the start
        order = torch.sort(rank, dim=1, stable=True).indices
        lengths = 1 + eligible[:, 1:].sum(dim=1)
        if npoint > int(lengths.min()):
            return None
        q = p.gather(1, order.unsqueeze(-1).expand(B, N, 3))
        sel = farthest_point_sample(q, npoint, lengths=lengths, start_index=0)
        chosen = q.gather(1, sel.unsqueeze(-1).expand(B, npoint, 3))
        # Equal coordinates among the chosen points: lexicographic order by three
        # stable sorts (z, then y, then x), then compare neighbours.
        for c in (2, 1, 0):
            chosen = chosen.gather(1, torch.sort(chosen[..., c], dim=1, stable=True).indices.unsqueeze(-1).expand(B, npoint, 3))
        if npoint > 1 and bool((chosen[:, 1:] == chosen[:, :-1]).all(dim=-1).any()):
            return None
        return perm[order.gather(1, sel)]


def gather_operation(features: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Gathers feature columns: ``out[b, c, s] = features[b, c, idx[b, s]]``.

    Args:
        features: ``(B, C, N)`` floating tensor (channels first, as pointnet2).
        idx: ``(B, S)`` int32 or int64 indices in ``[0, N)`` (e.g. from :func:`furthest_point_sample`).

    Returns:
        ``(B, C, S)`` in the dtype of ``features``; differentiable w.r.t. ``features``.

    Raises:
        ValueError: shapes that do not fit, or an index outside ``[0, N)``.
        TypeError: ``features`` not floating, ``idx`` not int32/int64, or on another device.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointnet2_ops
        >>> f = torch.arange(6.0).view(1, 2, 3)
        >>> pointnet2_ops.gather_operation(f, torch.tensor([[2, 0]], dtype=torch.int32)).tolist()
        [[[2.0, 0.0], [5.0, 3.0]]]
    """
    return _gather_columns("gather_operation", features, idx, "(B, S)")


def grouping_operation(features: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Groups feature columns: ``out[b, c, s, j] = features[b, c, idx[b, s, j]]``.

    Args:
        features: ``(B, C, N)`` floating tensor (channels first).
        idx: ``(B, S, K)`` int32 or int64 indices in ``[0, N)`` (e.g. from :func:`ball_query`).

    Returns:
        ``(B, C, S, K)`` in the dtype of ``features``; differentiable w.r.t. ``features``.

    Raises: as :func:`gather_operation` (the same checks).

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointnet2_ops
        >>> f = torch.arange(3.0).view(1, 1, 3)
        >>> pointnet2_ops.grouping_operation(f, torch.tensor([[[2, 1], [0, 0]]])).tolist()
        [[[[2.0, 1.0], [0.0, 0.0]]]]
    """
    return _gather_columns("grouping_operation", features, idx, "(B, S, K)")


def _gather_columns(fn: str, features, idx, idx_layout: str) -> torch.Tensor:
    # gather_operation and grouping_operation are one gather of channel-first columns; only idx's rank differs.
    _check_features(fn, "features", features, "(B, C, N)")
    B, C, N = features.shape
    i = _check_idx(fn, "idx", idx, idx_layout.count(",") + 1, idx_layout, B, N, features.device)
    m = math.prod(i.shape[1:])  # not -1: a reshape cannot infer it when B == 0
    return features.gather(2, i.reshape(B, 1, m).expand(B, C, m)).view(B, C, *i.shape[1:])



def _ball_query_long(radius, nsample, xyz, new_xyz, fn="ball_query") -> torch.Tensor:
    _check_xyz(fn, "xyz", xyz, "(B, N, 3)")
    _check_xyz(fn, "new_xyz", new_xyz, "(B, S, 3)")
    V.check_pair(fn, "new_xyz", new_xyz, "xyz", xyz)
    radius = V.check_float(fn, "radius", radius, minimum=0.0)
    nsample = V.check_int(fn, "nsample", nsample, minimum=1)
    B, S = new_xyz.shape[0], new_xyz.shape[1]
    r = strict_radius(radius, xyz.dtype)
    if r is None:
        return torch.zeros((B, S, nsample), dtype=torch.int64, device=xyz.device)
    with torch.no_grad():
        idx = _pc_ball_query(new_xyz.detach(), xyz.detach(), r, nsample, order="index").idx
    # pointnet2 fills the empty slots with the first hit, and writes 0 where
    # the ball holds no point at all.
    first = idx[..., :1]
    return torch.where(idx < 0, first.clamp_min(0), idx)


def ball_query(radius: float, nsample: int, xyz: torch.Tensor, new_xyz: torch.Tensor) -> torch.Tensor:
    """pointnet2's ball query: the first ``nsample`` points in index order inside each ball.

    A point is inside when ``d2 < radius**2`` (strict, squared in float32 like the kernel). Slots beyond the points
    found repeat the first hit; a ball with no point at all gets index 0 in every slot, as the kernel writes.

    Args:
        radius: float >= 0.
        nsample: int >= 1, slots per ball.
        xyz: ``(B, N, 3)`` floating coordinates searched.
        new_xyz: ``(B, S, 3)`` ball centres, same dtype and device.

    Returns:
        ``(B, S, nsample)`` int32 indices into ``xyz``; no gradient.

    Raises:
        ValueError: shapes that do not fit, a negative ``radius``, ``nsample < 1``.
        TypeError: tensors not floating or of different dtypes / devices.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointnet2_ops
        >>> xyz = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 3, 0]]])
        >>> pointnet2_ops.ball_query(1.5, 3, xyz, xyz[:, :1]).tolist()   # first hit 0 repeated
        [[[0, 1, 0]]]
    """
    return _ball_query_long(radius, nsample, xyz, new_xyz).to(torch.int32)


def three_nn(unknown: torch.Tensor, known: torch.Tensor):
    """The 3 nearest ``known`` points of each ``unknown`` point.

    ``dist`` is Euclidean (the original returns ``sqrt`` of the kernel's
    squared distances): the exact root of the float32 (float64) squared
    distance, rounded once to the input dtype.  With fewer than 3 known points the unused slots hold
    ``dist = inf`` and ``idx = 0``.

    Args:
        unknown: ``(B, n, 3)`` floating query points.
        known: ``(B, m, 3)`` points searched, same dtype and device.

    Returns:
        ``(dist (B, n, 3), idx (B, n, 3) int32)``: distances ascending, exact ties to the lower index; no gradient
        (the original marks both non-differentiable).

    Raises:
        ValueError: shapes that do not fit.
        TypeError: tensors not floating or of different dtypes / devices.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointnet2_ops
        >>> xyz = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 3, 0], [5, 5, 0]]])
        >>> dist, idx = pointnet2_ops.three_nn(xyz[:, :1], xyz)
        >>> dist.tolist(), idx.tolist()
        ([[[0.0, 1.0, 3.0]]], [[[0, 1, 2]]])
    """
    fn = "three_nn"
    _check_xyz(fn, "unknown", unknown, "(B, n, 3)")
    _check_xyz(fn, "known", known, "(B, m, 3)")
    V.check_pair(fn, "unknown", unknown, "known", known)
    with torch.no_grad():
        dist2, idx = knn(unknown.detach(), known.detach(), 3)
        if unknown.dtype in (torch.float16, torch.bfloat16):
            # knn rounds dist2 to half precision; the root of that would be rounded twice
            B, n, k = idx.shape
            flat = (idx.clamp_min(0) + torch.arange(B, device=idx.device)[:, None, None] * known.shape[1]).reshape(B * n, k)
            d2 = acc_sq_dist(unknown.detach().reshape(B * n, 3), known.detach().reshape(-1, 3), flat).reshape(B, n, k)
            dist2 = torch.where(idx >= 0, d2, float("inf"))
        return sqrt_once(dist2, unknown.dtype), idx.clamp_min(0).to(torch.int32)


def three_interpolate(features: torch.Tensor, idx: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Weighted sum of 3 feature columns: ``out[b, c, n] = sum_j weight[b, n, j] * features[b, c, idx[b, n, j]]``.

    The products are added in slot order, as the kernel adds them.

    Args:
        features: ``(B, C, m)`` floating tensor (channels first).
        idx: ``(B, n, 3)`` int32/int64 indices in ``[0, m)`` (from :func:`three_nn`).
        weight: ``(B, n, 3)`` weights (pointnet2 uses normalised inverse distances).

    Returns:
        ``(B, C, n)`` in the dtype of ``features``; differentiable w.r.t. ``features``, while ``weight`` gets no
        gradient, like the original.

    Raises:
        ValueError: shapes that do not fit (``weight`` must have the shape of ``idx``), or an index outside
            ``[0, m)``.
        TypeError: ``features`` not floating, ``idx`` not int32/int64, or tensors on different devices.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointnet2_ops
        >>> f = torch.tensor([[[1.0, 2.0, 4.0]]])                        # (B=1, C=1, m=3)
        >>> idx = torch.tensor([[[0, 1, 2]]], dtype=torch.int32)
        >>> pointnet2_ops.three_interpolate(f, idx, torch.tensor([[[0.5, 0.25, 0.25]]])).tolist()
        [[[2.0]]]
    """
    fn = "three_interpolate"
    _check_features(fn, "features", features, "(B, C, m)")
    B, C, m = features.shape
    i = _check_idx(fn, "idx", idx, 3, "(B, n, 3)", B, m, features.device)
    V.check_tensor(fn, "weight", weight, 3, "(B, n, 3)")
    if weight.shape != i.shape:
        raise ValueError(f"{fn}: weight must have the shape of idx {V.shape_str(i)}, got {V.shape_str(weight)}")
    n, k = i.shape[1], i.shape[2]
    g = features.gather(2, i.reshape(B, 1, n * k).expand(B, C, n * k)).view(B, C, n, k)
    # The kernel adds the k products in slot order.
    w = weight.detach().to(features.dtype).unsqueeze(1)
    out = g[..., 0] * w[..., 0]
    for j in range(1, k):
        out = out + g[..., j] * w[..., j]
    return out


class QueryAndGroup(nn.Module):
    """Ball query + grouping: ``forward(xyz (B,N,3), new_xyz (B,S,3), features (B,C,N)=None)``.

    Returns ``(B, 3 + C, S, nsample)`` (relative coordinates first) or, with
    ``use_xyz=False``, ``(B, C, S, nsample)``.  Differentiable w.r.t. ``xyz``,
    ``new_xyz`` and ``features``, like the original.

    Args:
        radius: ball radius, as :func:`ball_query` (strict ``d2 < radius**2``).
        nsample: slots per ball.
        use_xyz: put the relative coordinates in front of the features (default True).

    Raises:
        ValueError: (from ``forward``) ``use_xyz=False`` without ``features``, or the errors of
            :func:`ball_query` and :func:`grouping_operation`.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointnet2_ops
        >>> xyz = torch.rand(2, 64, 3)
        >>> grouper = pointnet2_ops.QueryAndGroup(0.3, 8)
        >>> grouper(xyz, xyz[:, :4], torch.rand(2, 5, 64)).shape
        torch.Size([2, 8, 4, 8])
    """

    def __init__(self, radius, nsample, use_xyz=True):
        super().__init__()
        self.radius, self.nsample, self.use_xyz = radius, nsample, use_xyz

    def forward(self, xyz, new_xyz, features=None):
        fn = "QueryAndGroup"
        if features is None and not self.use_xyz:
            raise ValueError(f"{fn}: use_xyz=False needs features (nothing would be grouped)")
        idx = _ball_query_long(self.radius, self.nsample, xyz, new_xyz, fn=fn)
        grouped_xyz = grouping_operation(xyz.transpose(1, 2), idx) - new_xyz.transpose(1, 2).unsqueeze(-1)
        if features is None:
            return grouped_xyz
        grouped = grouping_operation(features, idx)
        return torch.cat([grouped_xyz, grouped], dim=1) if self.use_xyz else grouped


class GroupAll(nn.Module):
    """Groups every point into one ball: ``forward(xyz (B,N,3), new_xyz=None, features (B,C,N)=None)``.

    Returns ``(B, 3 + C, 1, N)`` (the coordinates themselves, not relative, then the features), or ``(B, C, 1, N)``
    with ``use_xyz=False``, or ``(B, 3, 1, N)`` without features; ``new_xyz`` is ignored, as in the original.

    Args:
        use_xyz: put the coordinates in front of the features (default True).

    Raises:
        ValueError: (from ``forward``) ``xyz`` not ``(B, N, 3)``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointnet2_ops
        >>> pointnet2_ops.GroupAll()(torch.rand(2, 64, 3), None, torch.rand(2, 5, 64)).shape
        torch.Size([2, 8, 1, 64])
    """

    def __init__(self, use_xyz=True):
        super().__init__()
        self.use_xyz = use_xyz

    def forward(self, xyz, new_xyz=None, features=None):
        _check_xyz("GroupAll", "xyz", xyz, "(B, N, 3)")
        grouped_xyz = xyz.transpose(1, 2).unsqueeze(2)
        if features is None:
            return grouped_xyz
        grouped = features.unsqueeze(2)
        return torch.cat([grouped_xyz, grouped], dim=1) if self.use_xyz else grouped
