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
    """Nearest squared distances and int32 indices, both ways (the compiled ``chamfer.forward``).

    Args:
        xyz1: ``(B, N, 3)`` floating points, N >= 1.
        xyz2: ``(B, M, 3)`` floating points of the same B, dtype and device, M >= 1.

    Returns:
        ``(dist1 (B, N), dist2 (B, M), idx1 (B, N) int32, idx2 (B, M) int32)``: for each point of one cloud the
        squared distance to, and the index of, its nearest point in the other (ties to the lower index); no graph
        (``extensions/chamfer_dist``'s ``ChamferFunction`` calls :func:`backward` itself).

    Raises:
        ValueError: shapes that do not fit, or an empty cloud.
        TypeError: tensors not floating or of different dtypes / devices.

    Example:
        >>> import torch
        >>> from pcgeom.compat import chamfer_ext
        >>> a, b = torch.tensor([[[0.0, 0, 0], [2, 0, 0]]]), torch.tensor([[[0.0, 1, 0]]])
        >>> d1, d2, i1, i2 = chamfer_ext.forward(a, b)
        >>> d1.tolist(), d2.tolist(), i1.tolist(), i2.tolist()
        ([[1.0, 5.0]], [[1.0]], [[0, 0]], [[0]])
    """
    fn = "chamfer.forward"
    _check(fn, xyz1, xyz2)
    if xyz1.shape[1] == 0 or xyz2.shape[1] == 0:
        raise ValueError(f"{fn}: both clouds need at least one point, got {V.shape_str(xyz1)} and {V.shape_str(xyz2)}")
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
    """The gradients of ``sum(grad_dist1 * dist1) + sum(grad_dist2 * dist2)`` (the compiled ``chamfer.backward``).

    Args:
        xyz1: ``(B, N, 3)`` the first cloud, as given to :func:`forward`.
        xyz2: ``(B, M, 3)`` the second cloud.
        idx1: ``(B, N)`` int32/int64 nearest indices from :func:`forward`.
        idx2: ``(B, M)`` int32/int64 nearest indices from :func:`forward`.
        grad_dist1: ``(B, N)`` the incoming gradient of ``dist1``.
        grad_dist2: ``(B, M)`` the incoming gradient of ``dist2``.

    Returns:
        ``(grad_xyz1 (B, N, 3), grad_xyz2 (B, M, 3))`` in the dtype of ``xyz1``, summed deterministically;
        differentiable (in grad mode, e.g. inside a ``create_graph=True`` backward) w.r.t. the points and
        the incoming gradients, the indices held fixed, so second-order gradients flow.

    Raises:
        ValueError: shapes that do not fit, or indices outside their cloud.
        TypeError: tensors not floating / not integer where they must be, or of different devices.

    Example:
        >>> import torch
        >>> from pcgeom.compat import chamfer_ext
        >>> a, b = torch.tensor([[[0.0, 0, 0], [2, 0, 0]]]), torch.tensor([[[0.0, 1, 0]]])
        >>> d1, d2, i1, i2 = chamfer_ext.forward(a, b)
        >>> g1, g2 = chamfer_ext.backward(a, b, i1, i2, torch.ones_like(d1), torch.ones_like(d2))
        >>> g1.tolist(), g2.tolist()
        ([[[0.0, -4.0, 0.0], [4.0, -2.0, 0.0]]], [[[-4.0, 6.0, 0.0]]])
    """
    fn = "chamfer.backward"
    _check(fn, xyz1, xyz2)
    B, N, M = xyz1.shape[0], xyz1.shape[1], xyz2.shape[1]
    for name, t, n in (("idx1", idx1, N), ("idx2", idx2, M)):
        V.check_tensor(fn, name, t, 2, f"(B, {'N' if n == N else 'M'})")
        if t.shape != (B, n):
            raise ValueError(f"{fn}: {name} must have shape ({B}, {n}), got {V.shape_str(t)}")
        if t.dtype not in (torch.int32, torch.int64) or t.device != xyz1.device:
            raise TypeError(f"{fn}: {name} must be an int32/int64 tensor on {xyz1.device}, got {t.dtype} on {t.device}")
    for name, t, n in (("idx1", idx1, M), ("idx2", idx2, N)):
        # gather would raise an unnamed RuntimeError on CPU and read out of bounds on CUDA
        if t.numel() and t.device.type != "meta" and not V.compiling():
            lo, hi = int(t.min()), int(t.max())
            if lo < 0 or hi >= n:
                raise ValueError(f"{fn}: {name} must hold indices in [0, {n}) of the other cloud, got {lo if lo < 0 else hi}")
    for name, t, n in (("grad_dist1", grad_dist1, N), ("grad_dist2", grad_dist2, M)):
        V.check_tensor(fn, name, t, 2, f"(B, {'N' if n == N else 'M'})")
        if t.shape != (B, n):
            raise ValueError(f"{fn}: {name} must have shape ({B}, {n}), got {V.shape_str(t)}")
        if not t.is_floating_point() or t.device != xyz1.device:
            raise TypeError(f"{fn}: {name} must be a floating tensor on {xyz1.device}, got {t.dtype} on {t.device}")
    # No no_grad here: a first-order backward already runs with grad mode off, and under
    # create_graph=True the gradients keep their graph, so a gradient penalty through the
    # repositories' ChamferFunction gets its second order (the compiled kernel's is silently 0).
    g1a, g1b = _grad(xyz1, xyz2, idx1, grad_dist1.to(xyz1.dtype))
    g2b, g2a = _grad(xyz2, xyz1, idx2, grad_dist2.to(xyz1.dtype))
    return g1a + g2a, g1b + g2b
