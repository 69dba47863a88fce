"""``pytorch3d.loss.chamfer_distance`` served by pcgeom, with upstream's (v0.7.9) reductions, weights and normals term.

Each direction is one nearest-neighbour search (:func:`knn_points` with
``K=1``, so pcgeom's kernel for ``norm=2``; memory stays linear in the points),
then upstream's arithmetic: padded points contribute 0, ``weights`` scale each
cloud, ``"mean"`` divides by ``max(lengths, 1)``, the normals term is
``1 - |cos|`` (``1 - cos`` with ``abs_cosine=False``) between a point's normal and
its nearest neighbour's, by ``torch.nn.functional.cosine_similarity(eps=1e-6)``.
Gradients flow to the points through the distances and to the normals through
the cosine term.  All-zero ``weights`` give upstream's zero result that still
requires grad (an ``(N, N)`` tensor of zeros without batch reduction).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pcgeom.compat.pytorch3d.ops.knn import knn_gather, knn_points
from pcgeom.compat.pytorch3d.structures.pointclouds import Pointclouds

__all__ = ["chamfer_distance"]


def _check_reductions(batch_reduction, point_reduction) -> None:
    if batch_reduction is not None and batch_reduction not in ("mean", "sum"):
        raise ValueError('batch_reduction must be one of ["mean", "sum"] or None')
    if point_reduction is not None and point_reduction not in ("mean", "sum", "max"):
        raise ValueError('point_reduction must be one of ["mean", "sum", "max"] or None')
    if point_reduction is None and batch_reduction is not None:
        raise ValueError("Batch reduction must be None if point_reduction is None")


def _as_padded(points, lengths, normals):
    """``(padded points, int64 lengths, padded normals or None)`` from a tensor or a ``Pointclouds``."""
    if isinstance(points, Pointclouds):
        return points.points_padded(), points.num_points_per_cloud(), points.normals_padded()
    if not torch.is_tensor(points):
        raise ValueError("The input pointclouds should be either Pointclouds objects or torch.Tensor of shape "
                         "(minibatch, num_points, 3).")
    if points.ndim != 3:
        raise ValueError("Expected points to be of shape (N, P, D)")
    N, P = points.shape[0], points.shape[1]
    if lengths is None:
        lengths = torch.full((N,), P, dtype=torch.int64, device=points.device)
    elif lengths.ndim != 1 or lengths.shape[0] != N:
        raise ValueError("Expected lengths to be of shape (N,)")
    elif N and int(lengths.max()) > P:
        raise ValueError("A length value was too long")
    if normals is not None and normals.ndim != 3:
        raise ValueError("Expected normals to be of shape (N, P, 3")
    return points, lengths, normals


def _one_direction(x, y, x_lengths, y_lengths, x_normals, y_normals, weights, point_reduction, norm, abs_cosine):
    """Per-cloud (or per-point, without reduction) distances from ``x`` to ``y``, and the normals term or None."""
    N, P1, D = x.shape
    if y.shape[0] != N or y.shape[2] != D:
        raise ValueError("y does not have the correct shape.")
    if weights is not None:
        if weights.size(0) != N:
            raise ValueError("weights must be of shape (N,).")
        if not bool((weights >= 0).all()):
            raise ValueError("weights cannot be negative.")
        if float(weights.sum()) == 0.0:
            zero = (x.sum((1, 2)) * weights.view(N, 1)) * 0.0  # upstream's (N, N) zeros, still in the graph
            return zero, zero
    with_normals = x_normals is not None and y_normals is not None
    padded_row = torch.arange(P1, device=x.device)[None] >= x_lengths[:, None]  # (N, P1)
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    nn = knn_points(x, y, lengths1=x_lengths, lengths2=y_lengths, norm=norm, K=1)
    dist = torch.where(padded_row, zero, nn.dists[..., 0])
    if weights is not None:
        dist = dist * weights.view(N, 1)
    cos_term = None
    if with_normals:
        near = knn_gather(y_normals, nn.idx, y_lengths)[..., 0, :]
        cos = F.cosine_similarity(x_normals, near, dim=2, eps=1e-6)
        cos_term = torch.where(padded_row, torch.zeros((), dtype=cos.dtype, device=cos.device),
                               1 - (cos.abs() if abs_cosine else cos))
        if weights is not None:
            cos_term = cos_term * weights.view(N, 1)
    if point_reduction == "max":
        return dist.max(1).values, None
    if point_reduction is not None:
        dist = dist.sum(1)
        cos_term = None if cos_term is None else cos_term.sum(1)
        if point_reduction == "mean":
            count = x_lengths.clamp(min=1)
            dist = dist / count
            cos_term = None if cos_term is None else cos_term / count
    return dist, cos_term


def chamfer_distance(x, y, x_lengths=None, y_lengths=None, x_normals=None, y_normals=None, weights=None,
                     batch_reduction="mean", point_reduction="mean", norm: int = 2,
                     single_directional: bool = False, abs_cosine: bool = True):
    """Chamfer distance between two batches of clouds, pytorch3d's ``chamfer_distance``.

    Args:
        x: ``(N, P1, D)`` tensor or a ``Pointclouds`` (then its lengths and normals are used).
        y: ``(N, P2, D)`` tensor or a ``Pointclouds``.
        x_lengths: optional int ``(N,)``: points of ``x`` past ``x_lengths[n]`` are padding.
        y_lengths: optional int ``(N,)`` for ``y``.
        x_normals: optional ``(N, P1, 3)`` normals of ``x`` (with ``y_normals``: the normals term).
        y_normals: optional ``(N, P2, 3)`` normals of ``y``.
        weights: optional non-negative ``(N,)`` per-cloud weights.
        batch_reduction: ``"mean"`` (weighted by ``weights`` when given), ``"sum"`` or None.
        point_reduction: ``"mean"``, ``"sum"``, ``"max"`` (Hausdorff; no normals) or None.
        norm: 2 (squared Euclidean distances) or 1 (L1 distances).
        single_directional: only ``x -> y``.
        abs_cosine: the normals term ignores orientation (``1 - |cos|``); False: ``1 - cos``.

    Returns:
        ``(loss, loss_normals)``, always two values.  ``loss`` is a scalar with a batch
        reduction, ``(N,)`` without; with ``point_reduction=None`` it is the pair of
        per-point terms ``((N, P1), (N, P2))`` (or the ``(N, P1)`` tensor when
        ``single_directional``).  ``loss_normals`` has the same form, or None without
        both normals.  Differentiable w.r.t. points and normals.

    Raises:
        ValueError: upstream's messages: reductions (``'point_reduction must be one of
            ["mean", "sum", "max"] or None'``, ...), ``"Support for 1 or 2 norm."``,
            shapes (``"Expected points to be of shape (N, P, D)"``, ...), weights.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.loss import chamfer_distance
        >>> x = torch.tensor([[[0.0, 0, 0], [1, 0, 0]]])
        >>> y = torch.tensor([[[0.0, 0, 0], [0, 0, 3]]])
        >>> loss, loss_normals = chamfer_distance(x, y)
        >>> loss.item(), loss_normals            # (0 + 1) / 2 + (0 + 9) / 2
        (5.0, None)
        >>> chamfer_distance(x, y, point_reduction="max")[0].item()
        9.0
    """
    _check_reductions(batch_reduction, point_reduction)
    if not (norm == 1 or norm == 2):
        raise ValueError("Support for 1 or 2 norm.")
    if point_reduction == "max" and (x_normals is not None or y_normals is not None):
        raise ValueError('Normals must be None if point_reduction is "max"')
    x, x_lengths, x_normals = _as_padded(x, x_lengths, x_normals)
    y, y_lengths, y_normals = _as_padded(y, y_lengths, y_normals)
    common = (weights, point_reduction, norm, abs_cosine)
    loss, loss_n = _one_direction(x, y, x_lengths, y_lengths, x_normals, y_normals, *common)
    if not single_directional:
        back, back_n = _one_direction(y, x, y_lengths, x_lengths, y_normals, x_normals, *common)
        if point_reduction == "max":
            loss, loss_n = torch.maximum(loss, back), None
        elif point_reduction is not None:
            loss = loss + back
            loss_n = None if loss_n is None else loss_n + back_n
        else:
            loss = (loss, back)
            loss_n = None if loss_n is None else (loss_n, back_n)
    if batch_reduction is None:
        return loss, loss_n
    N = loss.shape[0]
    loss = loss.sum()
    loss_n = None if loss_n is None else loss_n.sum()
    if batch_reduction == "mean":
        if weights is None:
            div = max(N, 1)
        elif float(weights.sum()) == 0.0:
            div = 1
        else:
            div = weights.sum()
        loss = loss / div
        loss_n = None if loss_n is None else loss_n / div
    return loss, loss_n
