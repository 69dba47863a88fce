"""PointNet++'s feature ops: grouping features around centres, and interpolating them back.

The two halves of a PointNet++ layer (Qi et al., NeurIPS 2017) on pcgeom's ops,
in pcgeom's channels-last layouts and padding rules:

* :func:`group_features` -- the set-abstraction step ("QueryAndGroup"):
  gather the neighbours of each centre (from :func:`pcgeom.ball_query` or
  :func:`pcgeom.knn`) as coordinates relative to the centre, followed by their
  features;
* :func:`fill_missing` -- PointNet++'s padding of a partly empty ball: empty
  slots repeat the first neighbour, so max/avg pooling see no fake point;
* :func:`interpolate_features` -- the feature-propagation step ("three_nn +
  three_interpolate"): inverse-distance weighted features of the k nearest
  known points.

Everything is differentiable with respect to coordinates and features, runs on
the native kernels where pcgeom has them, and captures under
``torch.compile(fullgraph=True)``.
"""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom.ops import knn, knn_gather

__all__ = ["fill_missing", "group_features", "interpolate_features"]


def fill_missing(idx: torch.Tensor) -> torch.Tensor:
    """Replaces the ``-1`` slots of each neighbour row by the row's first neighbour.

    PointNet++'s ball query pads a ball holding fewer than k points with its
    first hit; pcgeom's ops pad with ``-1``.  Rows with no neighbour at all
    stay all ``-1`` (pointnet2 writes index 0 there; see
    :mod:`pcgeom.compat.pointnet2_ops`).  Only trailing padding is expected
    (what :func:`pcgeom.ball_query` and :func:`pcgeom.knn` return), but any
    ``-1`` slot is filled.

    Args:
        idx: ``(..., k)`` int64 indices, ``-1`` for missing neighbours.

    Returns:
        A new tensor of the shape and dtype of ``idx``.

    Raises:
        TypeError: ``idx`` is not an int64 tensor.
        ValueError: ``idx`` has no last dimension of size >= 1.

    Example:
        >>> import torch, pcgeom
        >>> pcgeom.fill_missing(torch.tensor([[4, 7, -1, -1], [-1, -1, -1, -1]])).tolist()
        [[4, 7, 4, 4], [-1, -1, -1, -1]]
    """
    fn = "fill_missing"
    if not isinstance(idx, torch.Tensor):
        raise TypeError(f"{fn}: idx must be a torch.Tensor of shape (..., k), got {type(idx).__name__}")
    if idx.dtype != torch.int64:
        raise TypeError(f"{fn}: idx must be int64, got {idx.dtype}")
    if idx.dim() < 1 or idx.shape[-1] < 1:
        raise ValueError(f"{fn}: idx must have shape (..., k) with k >= 1, got {V.shape_str(idx)}")
    return torch.where(idx < 0, idx[..., :1], idx)


def group_features(points, centers, idx, features=None, *, use_points=True) -> torch.Tensor:
    """Neighbourhoods of each centre: relative coordinates, then features.

    ``out[b, s, j] = concat(points[b, idx[b, s, j]] - centers[b, s],
    features[b, idx[b, s, j]])`` -- what PointNet++'s ``QueryAndGroup`` feeds
    its shared MLP, channels last.  Slots with ``idx = -1`` are all zeros
    (coordinates and features), pcgeom's padding; call :func:`fill_missing`
    first for PointNet++'s repeat-the-first-hit padding.

    Args:
        points: ``(B, N, D)`` floating tensor, the coordinates ``idx`` refers to.
        centers: ``(B, S, D)`` tensor of the same dtype and device.
        idx: ``(B, S, k)`` int64 indices into ``points[b]`` in ``[-1, N)``, e.g.
            ``pcgeom.ball_query(centers, points, r, k, order="index").idx``.
        features: optional ``(B, N, C)`` tensor of per-point features (same
            dtype and device).
        use_points: include the relative coordinates (the first D channels).
            With ``False``, ``features`` is required.

    Returns:
        ``(B, S, k, D + C)`` (or ``(B, S, k, D)`` / ``(B, S, k, C)``) tensor in
        the dtype of ``points``; differentiable w.r.t. ``points``, ``centers``
        and ``features``, to any order.

    Raises:
        ValueError: shapes that do not fit ``(B, N, D)`` / ``(B, S, D)`` / ``(B, S, k)`` / ``(B, N, C)``;
            ``use_points=False`` without ``features``.
        TypeError: tensors of different dtypes or devices, or a non-int64 ``idx``.

    Example:
        >>> import torch, pcgeom
        >>> pts = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [5, 0, 0]]])
        >>> ctr = pts[:, :1]
        >>> res = pcgeom.ball_query(ctr, pts, radius=2.0, k=3, order="index")
        >>> feats = torch.tensor([[[10.0], [20.0], [30.0]]])
        >>> pcgeom.group_features(pts, ctr, res.idx, feats)[0, 0].tolist()
        [[0.0, 0.0, 0.0, 10.0], [1.0, 0.0, 0.0, 20.0], [0.0, 0.0, 0.0, 0.0]]
    """
    fn = "group_features"
    V.check_points(fn, "points", points, "(B, N, D)")
    V.check_points(fn, "centers", centers, "(B, S, D)")
    V.check_pair(fn, "points", points, "centers", centers)
    V.check_index_tensor(fn, "idx", idx, 3, "(B, S, k)")
    B, S = centers.shape[0], centers.shape[1]
    if idx.shape[0] != B or idx.shape[1] != S:
        raise ValueError(f"{fn}: idx must have shape (B, S, k) = ({B}, {S}, k) like centers, got {V.shape_str(idx)}")
    if features is not None:
        _check_features_like_points(fn, features, points)
    elif not use_points:
        raise ValueError(f"{fn}: use_points=False needs features (nothing would be grouped)")
    parts = []
    if use_points:
        # knn_gather zeroes -1 slots; the centre must not be subtracted there.
        rel = knn_gather(points, idx) - centers.unsqueeze(2)
        parts.append(torch.where((idx >= 0).unsqueeze(-1), rel, rel.new_zeros(())))
    if features is not None:
        parts.append(knn_gather(features, idx))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def _check_features_like_points(fn: str, features, points) -> None:
    # Both ops read one C-vector per point: (B, N, C) with points' B, N, dtype and device (points already checked).
    V.check_tensor(fn, "features", features, 3, "(B, N, C)")
    if features.shape[0] != points.shape[0] or features.shape[1] != points.shape[1]:
        raise ValueError(
            f"{fn}: features must have shape (B, N, C) = ({points.shape[0]}, {points.shape[1]}, C) like points, "
            f"got {V.shape_str(features)}"
        )
    if features.dtype != points.dtype or features.device != points.device:
        raise TypeError(
            f"{fn}: features must have the dtype and device of points ({points.dtype}, {points.device}), "
            f"got {features.dtype}, {features.device}"
        )


def interpolate_features(query, points, features, k=3, *, eps=1e-8, points_lengths=None) -> torch.Tensor:
    """Inverse-distance weighted features of the ``k`` nearest ``points`` of each query.

    PointNet++'s feature propagation (``three_nn`` + ``three_interpolate``):
    with ``d_j`` the Euclidean distance from a query to its j-th nearest point
    (:func:`pcgeom.knn`: ascending, ties to the lower index),
    ``w_j = (1 / (d_j + eps)) / sum_i 1 / (d_i + eps)`` and
    ``out = sum_j w_j * features[idx_j]``.  A query on top of a point takes
    (almost exactly) that point's features.

    Args:
        query: ``(B, M, D)`` floating tensor, where features are wanted.
        points: ``(B, N, D)`` tensor of the same dtype and device, where they are known.
        features: ``(B, N, C)`` tensor of the same dtype and device.
        k: neighbours to blend, an int >= 1 (PointNet++ uses 3).  Clouds with
            fewer than k points (``N`` or ``points_lengths[b]``) blend the
            points they have: missing neighbours get weight 0.
        eps: float > 0 added to each distance (PointNet++ uses 1e-8).
        points_lengths: optional int ``(B,)`` ragged lengths of ``points``;
            a cloud of length 0 gives zeros.

    Returns:
        ``(B, M, C)`` tensor in the dtype of ``features``, differentiable
        w.r.t. ``features``, ``query`` and ``points`` (through the weights; an
        exact hit has gradient 0 there, not NaN); second and higher orders too.

    Raises:
        ValueError: shapes that do not fit, ``k < 1``, ``eps <= 0``, or bad ``points_lengths``.
        TypeError: tensors of different dtypes or devices.

    Example:
        >>> import torch, pcgeom
        >>> pts = torch.tensor([[[0.0, 0, 0], [2, 0, 0]]])
        >>> f = torch.tensor([[[0.0], [10.0]]])
        >>> q = torch.tensor([[[0.5, 0, 0]]])
        >>> round(pcgeom.interpolate_features(q, pts, f, k=2)[0, 0, 0].item(), 4)
        2.5
    """
    fn = "interpolate_features"
    V.check_points(fn, "query", query, "(B, M, D)")
    V.check_points(fn, "points", points, "(B, N, D)")
    V.check_pair(fn, "query", query, "points", points)
    _check_features_like_points(fn, features, points)
    k = V.check_int(fn, "k", k, minimum=1)
    eps = V.check_float(fn, "eps", eps)
    if not eps > 0:
        raise ValueError(f"{fn}: eps must be > 0, got {eps}")
    res = knn(query, points, k, points_lengths=points_lengths)
    # Missing neighbours have dist2 = +inf, hence weight 0, and gather zeros.
    recip = 1.0 / (V.safe_sqrt(res.dist2) + eps)
    # The floor as a tensor, not a Python float: an exported graph would hold the float as a float32 constant,
    # where float64's tiny is 0, and an empty cloud's weights would be 0 / 0 = NaN instead of 0.
    weight = recip / recip.sum(dim=-1, keepdim=True).clamp_min(recip.new_tensor(torch.finfo(recip.dtype).tiny))
    return (knn_gather(features, res.idx) * weight.unsqueeze(-1)).sum(dim=2)
