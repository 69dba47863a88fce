"""``torch_cluster.nearest``: ``nearest`` (torch_cluster 1.6.3 ``nearest.py``)."""

from typing import Optional

import torch
from torch import Tensor

from pcgeom.compat.torch_cluster._common import as_2d, as_float, cloud_offsets, count_clouds
from pcgeom.ops import knn as _knn

__all__ = ["nearest"]


def nearest_offsets(x: Tensor, y: Tensor, xo: Tensor, yo: Tensor) -> Tensor:
    x, y = as_float(as_2d(x)), as_float(as_2d(y))
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"nearest: x and y must have the same number of columns, got {x.shape[1]} and {y.shape[1]}")
    if y.dtype != x.dtype:
        y = y.to(x.dtype)
    nx = torch.diff(xo, prepend=xo.new_zeros(1))
    ny = torch.diff(yo, prepend=yo.new_zeros(1))
    if bool(((nx > 0) & (ny == 0)).any()):
        raise ValueError("Some batch indices occur in 'batch_x' that do not occur in 'batch_y'")
    _, idx = _knn(x.contiguous(), y.contiguous(), 1, query_offsets=xo, points_offsets=yo)
    return idx[:, 0]


@torch.jit.ignore
def _nearest_impl(x: Tensor, y: Tensor, batch_x: Optional[Tensor], batch_y: Optional[Tensor]) -> Tensor:
    for name, bt in (("batch_x", batch_x), ("batch_y", batch_y)):
        if bt is not None and bt.numel() > 1 and bool((bt[1:] < bt[:-1]).any()):
            raise ValueError(f"'{name}' is not sorted")
    x2, y2 = as_2d(x), as_2d(y)
    B = count_clouds(batch_x, batch_y, None)
    xo = cloud_offsets("nearest", "batch_x", batch_x, x2.shape[0], x.device, B)
    yo = cloud_offsets("nearest", "batch_y", batch_y, y2.shape[0], x.device, B)
    return nearest_offsets(x2, y2, xo, yo)


def nearest(x: Tensor, y: Tensor, batch_x: Optional[Tensor] = None, batch_y: Optional[Tensor] = None) -> Tensor:
    """For each row of ``x`` the index of its nearest row of ``y`` in the same cloud.

    Args:
        x: ``(N, F)`` queries.
        y: ``(M, F)`` candidates.
        batch_x: optional sorted int cloud id of each row of ``x``; every
            cloud of ``x`` must have points in ``y`` (ValueError otherwise).
        batch_y: optional sorted int cloud id of each row of ``y``.

    Returns:
        ``(N,)`` int64 indices into ``y``, ties to the lower index.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_cluster import nearest
        >>> nearest(torch.tensor([[0.1], [0.9]]), torch.tensor([[1.0], [0.0]])).tolist()
        [1, 0]
    """
    return _nearest_impl(x, y, batch_x, batch_y)
