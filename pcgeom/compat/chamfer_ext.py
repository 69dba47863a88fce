"""Stand-in for the compiled ``chamfer`` module of ``extensions/chamfer_dist``.

Point-MAE, PoinTr, Point-BERT and their relatives ship
``extensions/chamfer_dist/__init__.py``, whose ``ChamferFunction`` calls a
CUDA extension imported as ``chamfer``.  Once the shims are on, this module is
served under that name, so the repositories' own ``ChamferDistanceL1/L2`` run
unchanged, on CPU and GPU:

* ``forward(xyz1 (B,N,3), xyz2 (B,M,3))`` -> ``dist1 (B,N), dist2 (B,M), idx1
  (B,N) int32, idx2 (B,M) int32``: squared distance to, and index of, the
  nearest point of the other cloud (ties to the lower index, like the kernel);
* ``backward(xyz1, xyz2, idx1, idx2, grad_dist1, grad_dist2)`` ->
  ``grad_xyz1, grad_xyz2``: the gradients of ``sum(grad_dist1 * dist1) +
  sum(grad_dist2 * dist2)`` with the nearest indices held fixed.

The search is :func:`pcgeom.knn` with k=1 (native kernels, exact, no N x M
matrix); the gradients are accumulated in the inputs' precision.

Example:
    >>> import torch
    >>> from pcgeom.compat import chamfer_ext as chamfer
    >>> a = torch.tensor([[[0.0, 0, 0], [2, 0, 0]]])
    >>> b = torch.tensor([[[0.0, 1, 0]]])
    >>> d1, d2, i1, i2 = chamfer.forward(a, b)
    >>> d1.tolist(), d2.tolist(), i1.tolist(), i2.tolist()
    ([[1.0, 5.0]], [[1.0]], [[0, 0]], [[0]])
"""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom.ops import knn

__all__ = ["backward", "forward"]


def _check(fn, xyz1, xyz2):
    V.check_points(fn, "xyz1", xyz1, "(B, N, 3)")
    V.check_points(fn, "xyz2", xyz2, "(B, M, 3)")
    V.check_pair(fn, "xyz1", xyz1, "xyz2", xyz2)


def forward(xyz1: torch.Tensor, xyz2: torch.Tensor):
    """``(dist1, dist2, idx1, idx2)``: nearest squared distances and int32 indices, both ways."""
    fn = "chamfer.forward"
    _check(fn, xyz1, xyz2)
    if xyz1.shape[1] == 0 or xyz2.shape[1] == 0:
        raise ValueError(f"{fn}: both clouds need at least one point, got {V._shape(xyz1)} and {V._shape(xyz2)}")
    with torch.no_grad():
        a, b = xyz1.detach(), xyz2.detach()
        d1, i1 = knn(a, b, 1)
        d2, i2 = knn(b, a, 1)
    return d1[..., 0], d2[..., 0], i1[..., 0].to(torch.int32), i2[..., 0].to(torch.int32)


def _grad(xa, xb, idx, g):
    i = idx.long()
    diff = xa - xb.gather(1, i.unsqueeze(-1).expand(-1, -1, xb.shape[2]))
    ga = (2 * g).unsqueeze(-1) * diff
    gb = torch.zeros_like(xb).scatter_add_(1, i.unsqueeze(-1).expand(-1, -1, xb.shape[2]), -ga)
    return ga, gb


def backward(xyz1, xyz2, idx1, idx2, grad_dist1, grad_dist2):
    """``(grad_xyz1, grad_xyz2)`` of ``sum(grad_dist1 * dist1) + sum(grad_dist2 * dist2)``."""
    fn = "chamfer.backward"
    _check(fn, xyz1, xyz2)
    B, N, M = xyz1.shape[0], xyz1.shape[1], xyz2.shape[1]
    for name, t, n in (("idx1", idx1, N), ("idx2", idx2, M)):
        V.check_tensor(fn, name, t, 2, f"(B, {'N' if n == N else 'M'})")
        if t.shape != (B, n):
            raise ValueError(f"{fn}: {name} must have shape ({B}, {n}), got {V._shape(t)}")
    with torch.no_grad():
        g1a, g1b = _grad(xyz1, xyz2, idx1, grad_dist1.to(xyz1.dtype))
        g2b, g2a = _grad(xyz2, xyz1, idx2, grad_dist2.to(xyz1.dtype))
    return g1a + g2a, g1b + g2b
