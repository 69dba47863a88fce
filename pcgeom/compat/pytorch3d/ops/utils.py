"""pytorch3d's ``pytorch3d.ops.utils`` helpers, served by pcgeom's stand-in.

``masked_gather``, ``wmean``, ``eyes``, ``convert_pointclouds_to_tensor``,
``is_pointclouds`` and ``get_point_covariances`` with pytorch3d v0.7.9's
semantics (what the normals, alignment and users' code rely on), the
neighbour search running on :func:`pcgeom.knn`.  Written from the documented
behaviour; every float dtype works, float64 at float64 accuracy.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import torch

import pcgeom

__all__ = [
    "convert_pointclouds_to_tensor",
    "eyes",
    "get_point_covariances",
    "is_pointclouds",
    "masked_gather",
    "wmean",
]


def masked_gather(points: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Gathers ``points[n, idx[n, ...]]`` where ``idx == -1`` marks padding (gathered as 0).

    Args:
        points: ``(N, P, D)`` float tensor.
        idx: ``(N, K)`` (e.g. farthest point sampling) or ``(N, P', K)`` (KNN,
            ball query) int64 indices in ``[-1, P)``.

    Returns:
        ``(N, K, D)`` or ``(N, P', K, D)`` in the dtype of ``points``; padded
        slots hold 0.  Differentiable w.r.t. ``points`` (padded slots get no gradient).

    Raises:
        ValueError: ``idx`` of another batch size or rank than 2 or 3.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.ops.utils import masked_gather
        >>> pts = torch.arange(6.0).reshape(1, 3, 2)
        >>> masked_gather(pts, torch.tensor([[2, -1]])).tolist()
        [[[4.0, 5.0], [0.0, 0.0]]]
    """
    if not isinstance(points, torch.Tensor) or points.dim() != 3:
        raise ValueError(f"masked_gather: points must be a (N, P, D) tensor, got "
                         f"{tuple(points.shape) if isinstance(points, torch.Tensor) else type(points).__name__}")
    if not isinstance(idx, torch.Tensor):
        raise ValueError(f"masked_gather: idx must be an int64 tensor, got {type(idx).__name__}")
    if len(idx) != len(points):
        raise ValueError(f"masked_gather: points and idx must have the same batch dimension, "
                         f"got {len(points)} and {len(idx)}")
    if idx.dim() not in (2, 3):
        raise ValueError(f"masked_gather: idx must have shape (N, K) or (N, P', K), got {tuple(idx.shape)}")
    squeeze = idx.dim() == 2
    idx3 = idx[:, None, :] if squeeze else idx
    out = pcgeom.knn_gather(points, idx3.long())
    return out[:, 0] if squeeze else out


def wmean(x: torch.Tensor, weight: Optional[torch.Tensor] = None, dim: Union[int, Tuple[int, ...]] = -2,
          keepdim: bool = True, eps: float = 1e-9) -> torch.Tensor:
    """Mean of ``x`` over ``dim``, weighted by ``weight`` when one is given.

    Args:
        x: ``(*, D)`` tensor, the last dimension spatial.
        weight: optional non-negative ``(*,)`` tensor broadcastable to
            ``x.shape[:-1]`` (one weight for all ``D`` coordinates of a row).
        dim: dimension(s) of ``x`` to average over (default ``-2``: the points).
        keepdim: keep the reduced dimensions as size 1.
        eps: the weighted denominator is clamped to at least ``eps``.

    Returns:
        ``x.mean(dim)`` without weights, else ``sum(x * w, dim) / max(sum(w, dim), eps)``.

    Raises:
        ValueError: weights whose trailing shape does not broadcast against ``x.shape[:-1]``.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.ops.utils import wmean
        >>> x = torch.tensor([[[0.0, 0.0], [2.0, 4.0]]])
        >>> wmean(x, torch.tensor([[1.0, 3.0]])).tolist()
        [[[1.5, 3.0]]]
    """
    if weight is None:
        return x.mean(dim=dim, keepdim=keepdim)
    # pytorch3d's rule: sizes compared from the right (x without its last dimension); 1 broadcasts.
    if any(xd != wd and xd != 1 and wd != 1 for xd, wd in zip(x.shape[-2::-1], weight.shape[::-1])):
        raise ValueError(f"wmean: weights are not compatible with the tensor: weight {tuple(weight.shape)} "
                         f"must broadcast to x.shape[:-1] = {tuple(x.shape[:-1])}")
    w = weight[..., None]
    return (x * w).sum(dim=dim, keepdim=keepdim) / w.sum(dim=dim, keepdim=keepdim).clamp(eps)


def eyes(dim: int, N: int, device: Optional[torch.device] = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A batch of ``N`` identity matrices, ``(N, dim, dim)``.

    Example:
        >>> from pcgeom.compat.pytorch3d.ops.utils import eyes
        >>> eyes(2, 3).shape
        torch.Size([3, 2, 2])
    """
    return torch.eye(dim, device=device, dtype=dtype)[None].repeat(N, 1, 1)


def is_pointclouds(pcl) -> bool:
    """True when ``pcl`` has ``points_padded`` and ``num_points_per_cloud`` (duck-typed, as upstream)."""
    return hasattr(pcl, "points_padded") and hasattr(pcl, "num_points_per_cloud")


def convert_pointclouds_to_tensor(pcl):
    """``(points_padded, num_points)`` of a ``Pointclouds`` or a ``(B, P, D)`` tensor.

    A tensor counts ``P`` points in every cloud.  ``num_points`` is int64 ``(B,)``.

    Raises:
        ValueError: neither a ``Pointclouds``-like object nor a tensor.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.ops.utils import convert_pointclouds_to_tensor
        >>> X, n = convert_pointclouds_to_tensor(torch.zeros(2, 5, 3))
        >>> n.tolist()
        [5, 5]
    """
    if is_pointclouds(pcl):
        return pcl.points_padded(), pcl.num_points_per_cloud()
    if torch.is_tensor(pcl):
        if pcl.dim() < 2:
            raise ValueError(f"The inputs X, Y should be either Pointclouds objects or (B, P, D) tensors, "
                             f"got a tensor of shape {tuple(pcl.shape)}")
        return pcl, torch.full((pcl.shape[0],), pcl.shape[1], device=pcl.device, dtype=torch.int64)
    raise ValueError(f"The inputs X, Y should be either Pointclouds objects or tensors, got {type(pcl).__name__}")


def knn_gathered(points: torch.Tensor, lengths: torch.Tensor, K: int) -> torch.Tensor:
    """``knn_points(points, points, lengths, lengths, K=K, return_nn=True).knn`` as pytorch3d returns it.

    The ``K`` nearest points of each point of its own cloud (itself included,
    ties to the lower index), gathered ``(B, P, K, D)``.  Slots ``k >= lengths[b]``
    hold 0; a padded row ``p >= lengths[b]`` holds ``points[b, 0]`` in its
    first ``lengths[b]`` slots (pytorch3d's index 0 padding, gathered).
    Differentiable w.r.t. ``points`` (the selection itself is not).
    """
    B, P, _ = points.shape
    idx = pcgeom.knn(points.detach(), points.detach(), K, query_lengths=lengths, points_lengths=lengths).idx
    kk = idx.shape[2]
    slot = torch.arange(kk, device=points.device)
    row = torch.arange(P, device=points.device)
    padded_row = (row[None, :] >= lengths[:, None])[:, :, None]  # (B, P, 1)
    idx = torch.where(padded_row & (slot[None, None, :] < lengths[:, None, None]), 0, idx)
    return pcgeom.knn_gather(points, idx)


def get_point_covariances(points_padded: torch.Tensor, num_points_per_cloud: torch.Tensor,
                          neighborhood_size: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Covariance of each point's ``neighborhood_size`` nearest neighbours, as pytorch3d computes it.

    The neighbourhood includes the point itself (ties to the lower index);
    the covariance is the biased mean ``(1/K) sum_k (q_k - m)(q_k - m)^T``
    about the neighbourhood mean ``m``.  As upstream, a cloud with fewer than
    ``K`` points fills the missing slots with zero vectors (they enter mean
    and covariance), and padded rows see ``points[b, 0]`` (see
    :func:`knn_gathered`).

    Args:
        points_padded: ``(B, P, D)`` float tensor.
        num_points_per_cloud: int ``(B,)`` points per cloud.
        neighborhood_size: ``K >= 1``.

    Returns:
        ``(covariances (B, P, D, D), k_nearest_neighbors (B, P, K, D))`` in the
        dtype of ``points_padded``; differentiable w.r.t. it.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.ops.utils import get_point_covariances
        >>> pts = torch.tensor([[[0.0, 0, 0], [2, 0, 0], [0, 4, 0]]])
        >>> cov, knns = get_point_covariances(pts, torch.tensor([3]), 2)
        >>> cov[0, 0].diagonal().tolist()
        [1.0, 0.0, 0.0]
    """
    fn = "get_point_covariances"
    if not isinstance(points_padded, torch.Tensor) or points_padded.dim() != 3 or not points_padded.is_floating_point():
        raise ValueError(f"{fn}: points_padded must be a floating (B, P, D) tensor, got "
                         f"{tuple(points_padded.shape) if isinstance(points_padded, torch.Tensor) else type(points_padded).__name__}")
    if isinstance(neighborhood_size, bool) or not isinstance(neighborhood_size, int) or neighborhood_size < 1:
        raise ValueError(f"{fn}: neighborhood_size must be an int >= 1, got {neighborhood_size!r}")
    lengths = torch.as_tensor(num_points_per_cloud, device=points_padded.device).long()
    knns = knn_gathered(points_padded, lengths, neighborhood_size)
    centred = knns - knns.mean(2, keepdim=True)
    B, P, K, D = centred.shape
    flat = centred.reshape(B * P, K, D)
    cov = torch.bmm(flat.transpose(1, 2), flat).reshape(B, P, D, D) / K
    return cov, knns
