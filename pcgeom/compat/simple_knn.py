"""Stand-in for 3D Gaussian Splatting's ``simple_knn`` extension (``from simple_knn._C import distCUDA2``).

``scene/gaussian_model.py`` of 3DGS and the many repositories derived from it
set each Gaussian's initial scale from ``distCUDA2(points)``: per point, the
mean squared distance to its three nearest other points.  Served by pcgeom's
opt-in (``pcgeom compat enable``) as both ``simple_knn`` and
``simple_knn._C`` wherever the real extension is not installed, this module
needs no build, runs on CPU and CUDA tensors, and is exact (the original
searches approximately within Morton-ordered boxes).

Written from the documented semantics only; simple-knn's own code (whose
licence allows non-commercial use only) was not consulted.
"""

from __future__ import annotations

import torch

from pcgeom.outliers import mean_neighbor_dist2

__all__ = ["distCUDA2"]

_FLT_MAX = torch.finfo(torch.float32).max


def distCUDA2(points: torch.Tensor) -> torch.Tensor:  # noqa: N802  (the original's name)
    """Mean squared distance from each point to its 3 nearest other points, as simple-knn returns it.

    Args:
        points: ``(P, 3)`` float32 tensor on CPU or CUDA (3DGS passes the
            initial point cloud, ``torch.from_numpy(pcd.points).float().cuda()``).

    Returns:
        ``(P,)`` float32 tensor on the device of ``points``: the three smallest
        squared distances to other points (the point itself excluded by index,
        so a duplicate contributes 0), summed smallest first in float32 and
        divided by 3.  Missing neighbours count as ``FLT_MAX``, as in the
        original: with ``P = 3`` every value is ``(d1 + d2 + FLT_MAX) / 3``
        (``FLT_MAX / 3`` for any ordinary cloud), with ``P <= 2`` it is
        ``inf``.  No gradient flows (the original has no backward).

    Example:
        >>> import torch
        >>> from pcgeom.compat.simple_knn import distCUDA2
        >>> pts = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 2, 0], [0, 0, 3]])
        >>> distCUDA2(pts).tolist()
        [4.666666507720947, 5.333333492279053, 7.333333492279053, 10.666666984558105]
    """
    fn = "distCUDA2"
    if not isinstance(points, torch.Tensor):
        raise TypeError(f"{fn}: points must be a torch.Tensor of shape (P, 3), got {type(points).__name__}")
    if points.dim() != 2 or points.shape[1] != 3:
        raise ValueError(f"{fn}: points must have shape (P, 3), got {tuple(points.shape)}")
    if points.dtype != torch.float32:
        raise TypeError(f"{fn}: points must be float32 (call .float() first, as 3DGS does), got {points.dtype}")
    with torch.no_grad():
        P = points.shape[0]
        if P >= 4:
            return mean_neighbor_dist2(points, k=3)
        # Tiny clouds: the missing neighbours are FLT_MAX, summed in float32 like the original.
        d2 = ((points[:, None, :] - points[None, :, :]) ** 2).sum(-1)
        d2 = d2.masked_fill(torch.eye(P, dtype=torch.bool, device=points.device), float("inf"))
        near = torch.sort(d2, dim=1).values[:, : P - 1]
        fill = torch.full((P, 3 - near.shape[1]), _FLT_MAX, dtype=torch.float32, device=points.device)
        d = torch.cat([near, fill], 1)
        return (d[:, 0] + d[:, 1] + d[:, 2]) / 3.0
