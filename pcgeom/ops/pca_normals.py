"""``pcgeom.ops.pca_normals``: the PCA normal and surface variation of given neighbourhoods."""

from __future__ import annotations

from typing import NamedTuple

import torch

from pcgeom import _validation as V
from pcgeom._scaling import times_power_of_two
from pcgeom.ops.reference import pca_neighbourhoods


class PCANormalsResult(NamedTuple):
    """Result of :func:`pca_normals` (and of :func:`pcgeom.estimate_normals`)."""

    normals: torch.Tensor
    curvature: torch.Tensor


def pca_normals(points, idx) -> PCANormalsResult:
    """Unit normal and surface variation of each neighbourhood ``points[b, idx[b, m]]``.

    Per row ``(b, m)``: the neighbours ``idx[b, m, :]`` that are not ``-1``
    and whose coordinates are finite; their covariance about their mean; its
    eigen-decomposition by a 3x3 Jacobi solver in the native kernels (CPU and
    CUDA), accumulated in float32 for float16/bfloat16/float32 and float64 for
    float64.  Duplicate indices count as often as they appear.  Any scale the
    dtype holds (coordinates near its largest value, or subnormal): each
    neighbourhood is multiplied by exact powers of two before its mean and
    again before its covariance, so nothing overflows or underflows, and a
    power-of-two scale of the input gives the same normals and curvature bit
    for bit (the gradient scales by its inverse).

    * ``normals[b, m]`` is the unit eigenvector of the smallest eigenvalue,
      with the **sign rule**: its component of largest magnitude is positive
      (lowest axis on equal magnitudes), judged on the returned values --
      float16/bfloat16 rounding can make two magnitudes equal, and then the
      lower axis is the positive one.
    * ``curvature[b, m] = lambda_0 / (lambda_0 + lambda_1 + lambda_2)``
      (surface variation, in ``[0, 1/3]``), eigenvalues ascending.
    * Degenerate rows are finite, never NaN: no valid neighbour or all valid
      neighbours at one position (exactly equal coordinates, tested as such:
      the rounded mean of equal copies is no guide) give normal ``(0, 0, 1)``
      and curvature 0;
      collinear neighbours (``lambda_1 <= 64 * eps * lambda_2``) give the unit
      vector ``normalize(cross(l, e_a))``, ``l`` the line's direction and
      ``e_a`` the axis least aligned with it (lowest on ties), then the sign
      rule.

    Args:
        points: ``(B, N, 3)`` float16/bfloat16/float32/float64 tensor.
        idx: ``(B, M, k)`` int64 indices in ``[-1, N)`` (``-1`` = no
            neighbour), e.g. ``pcgeom.knn(points, points, k).idx``.

    Returns:
        ``PCANormalsResult(normals (B, M, 3), curvature (B, M))`` in the dtype
        of ``points``.  Differentiable w.r.t. ``points`` where the smallest
        eigenvalue is simple (degenerate rows get zero gradient); the backward
        gathers the ``(B, M, k, 3)`` neighbourhoods in torch.

    Example:
        >>> import torch
        >>> from pcgeom.ops import pca_normals
        >>> pts = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]]])
        >>> n, c = pca_normals(pts, torch.tensor([[[0, 1, 2, 3]]]))
        >>> n.tolist(), c.tolist()
        ([[[0.0, 0.0, 1.0]]], [[0.0]])
    """
    fn = "pca_normals"
    V.check_points(fn, "points", points, "(B, N, 3)")
    if points.shape[2] != 3:
        raise ValueError(f"{fn}: points must have shape (B, N, 3), got {V.shape_str(points)}")
    V.check_index_tensor(fn, "idx", idx, 3, "(B, M, k)")
    if idx.shape[0] != points.shape[0]:
        raise ValueError(f"{fn}: idx must have shape (B, M, k) with B={points.shape[0]} of points, got {V.shape_str(idx)}")
    if idx.device != points.device:
        raise ValueError(f"{fn}: points and idx must be on the same device, got {points.device} and {idx.device}")
    if not V.compiling() and idx.numel() > 0:
        lo, hi = torch.stack([idx.min(), idx.max()]).tolist()
        if lo < -1 or hi >= points.shape[1]:
            raise ValueError(f"{fn}: idx values must be in [-1, {points.shape[1]}), got min {lo}, max {hi}")
    return PCANormalsResult(*torch.ops.pcgeom.pca_normals(points, idx))


@torch.library.register_fake("pcgeom::pca_normals")
def _pca_normals_fake(points, idx):
    B, M, _ = idx.shape
    return points.new_empty((B, M, 3)), points.new_empty((B, M))


def _setup_context(ctx, inputs, output):
    points, idx = inputs
    ctx.save_for_backward(points, idx, output[0])


def _backward(ctx, grad_normals, grad_curvature):
    """Gradient of the smallest eigenpair of the neighbourhood covariance.

    With ``C = (1/c) sum_i d_i d_i^T`` (``d_i`` the centred valid neighbours)
    and eigenpairs ``(lambda_j, v_j)``, ``n = v_0``:
    ``dn = sum_{j>0} v_j v_j^T dC n / (lambda_0 - lambda_j)`` and
    ``d curvature = (n^T dC n) / T - lambda_0 tr(dC) / T^2`` (``T = tr C``);
    the symmetric ``G = dL/dC`` maps back as ``dL/dp_i = (2/c) G d_i``
    (the mean's term vanishes because the ``d_i`` sum to zero).
    """
    points, idx, normals = ctx.saved_tensors
    if not ctx.needs_input_grad[0] or (grad_normals is None and grad_curvature is None):
        return None, None
    B, N, _ = points.shape
    M, K = idx.shape[1], idx.shape[2]
    acc = V.acc_dtype(points.dtype)
    # The neighbourhoods come as d_i = 2**e * d_i^s per row (exact; nothing
    # overflows or underflows at any scale the dtype holds), so C = 4**e C_s.
    # The outputs do not depend on C's scale, so G = dL/dC = 4**-e G_s, and
    # dL/dp_i = (2/c) G d_i = 2**-e (2/c) G_s d_i^s.
    centred, valid, count, e = pca_neighbourhoods(points, idx, acc)
    cnt = count.clamp_min(1).to(acc)
    cov = torch.einsum("rki,rkj->rij", centred, centred) / cnt[:, None, None]
    finite = torch.isfinite(cov).all(dim=(1, 2))
    cov = torch.where(finite[:, None, None], cov, 0)
    lam, vec = torch.linalg.eigh(cov)
    n = normals.reshape(B * M, 3).to(acc)
    G = torch.zeros((B * M, 3, 3), dtype=acc, device=points.device)
    if grad_normals is not None:
        gn = grad_normals.reshape(B * M, 3).to(acc)
        for j in (1, 2):
            vj = vec[:, :, j]
            gap = lam[:, 0] - lam[:, j]
            coef = torch.where(gap != 0, (vj * gn).sum(1) / torch.where(gap != 0, gap, 1), 0)
            G = G + coef[:, None, None] * vj[:, :, None] * n[:, None, :]
    if grad_curvature is not None:
        gc = grad_curvature.reshape(B * M).to(acc)
        T = lam.sum(1)
        Ts = torch.where(T > 0, T, 1)
        eye = torch.eye(3, dtype=acc, device=points.device)
        G = G + (gc / Ts)[:, None, None] * n[:, :, None] * n[:, None, :]
        G = G - (gc * lam[:, 0] / (Ts * Ts))[:, None, None] * eye
    G = 0.5 * (G + G.transpose(1, 2))
    eps = torch.finfo(acc).eps
    simple = finite & (count >= 3) & (lam[:, 1] > 64 * eps * lam[:, 2].clamp_min(0)) & (lam[:, 2] > 0)
    G = torch.where(simple[:, None, None], G, 0)
    gd = (2.0 / cnt)[:, None, None] * torch.einsum("rij,rkj->rki", G, centred)
    gd = times_power_of_two(gd, -e[:, None, None])
    gd = torch.where(valid[..., None], gd, 0).reshape(B, M * K, 3)
    grad = torch.zeros((B, N, 3), dtype=acc, device=points.device)
    grad.scatter_add_(1, idx.clamp_min(0).reshape(B, M * K, 1).expand(-1, -1, 3), gd)
    return grad.to(points.dtype), None


torch.library.register_autograd("pcgeom::pca_normals", _backward, setup_context=_setup_context)
