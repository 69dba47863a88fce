"""Normal estimation on the native KNN: :func:`estimate_normals`.

PCA of each point's k nearest neighbours (itself included), on padded or
packed batches, every float dtype, CPU and CUDA, differentiable -- what
Open3D's ``estimate_normals`` + ``orient_normals_*`` and pytorch3d's
``estimate_pointcloud_normals`` compute, without their limits (one cloud at a
time / no autograd / hard to install).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from pcgeom import _validation as V
from pcgeom.ops import pca_normals
from pcgeom.outliers import check_cloud, self_knn

__all__ = ["NormalsResult", "estimate_normals"]


class NormalsResult(NamedTuple):
    """Result of :func:`estimate_normals`: ``normals (..., 3)`` and ``curvature (...)``."""

    normals: torch.Tensor
    curvature: torch.Tensor


def _reference_points(fn, name, v, n_clouds, dtype, device):
    """A point/direction given once ``(3,)`` or per cloud ``(B, 3)`` -> ``(B, 3)`` tensor."""
    try:
        t = torch.as_tensor(v.detach() if isinstance(v, torch.Tensor) else v, dtype=torch.float64)
    except Exception as exc:
        raise TypeError(f"{fn}: {name} must be 3 floats or a ({n_clouds}, 3) tensor (one per cloud), "
                        f"got {type(v).__name__}") from exc
    if t.shape == (3,):
        t = t.expand(n_clouds, 3)
    if t.shape != (n_clouds, 3):
        raise ValueError(f"{fn}: {name} must have shape (3,) or ({n_clouds}, 3) (one per cloud), got {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{fn}: {name} must be finite, got {t.tolist()}")
    return t.to(device=device, dtype=dtype)


def estimate_normals(points, k=30, *, lengths=None, offsets=None, viewpoint=None, direction=None) -> NormalsResult:
    """Unit normal and surface variation of every point from its k nearest neighbours.

    Per point: its ``k`` nearest points of the same cloud (:func:`pcgeom.knn`,
    the point itself included -- Open3D's and pytorch3d's convention), their
    covariance about their mean, and the unit eigenvector of its smallest
    eigenvalue (a 3x3 Jacobi solver in the native kernels, see
    :func:`pcgeom.ops.pca_normals`).  float16/bfloat16 accumulate in float32.

    **Scale.**  Every scale the dtype holds gives the answer it gives at scale
    1: the search runs on each cloud multiplied by a power of two that brings
    its largest coordinate to ``[0.5, 1)`` (exact, so at ordinary scales the
    neighbours are bit for bit the same), and the covariance is scaled per
    neighbourhood the same way.  A float32 cloud at 1e30, near 3e38, at
    1e-25 or in the subnormal range gets the neighbours and normals of a
    float64 brute force on the same coordinates (where squared distances
    would overflow to inf or underflow to 0 and tie, picking neighbours by
    index); float16/bfloat16 are searched in float32, float64 in float64.
    Orientation dot products are taken in float64.

    **Sign.**  Without ``viewpoint``/``direction`` the sign is deterministic:
    each normal's component of largest magnitude is positive (the lowest axis
    wins on equal magnitudes, judged on the returned float16/bfloat16/...
    values, after rounding).  ``viewpoint=`` flips normals with
    ``dot(n, viewpoint - p) < 0`` (Open3D's
    ``orient_normals_towards_camera_location``); ``direction=`` flips normals
    with ``dot(n, direction) < 0`` (``orient_normals_to_align_with_direction``);
    a zero dot product keeps the default sign.  Give at most one of the two.

    **Degenerate neighbourhoods** have finite answers, never NaN: fewer than
    ``k`` points in the cloud uses them all; all neighbours at one position
    (a lone point, duplicates only: exactly equal coordinates) gives
    ``(0, 0, 1)`` and curvature 0;
    collinear neighbours give a unit vector perpendicular to the line (see
    :func:`pcgeom.ops.pca_normals` for which).  Neighbours with NaN/inf
    coordinates are left out of a finite point's neighbourhood; a point whose
    own coordinates are not finite gets NaN normal and curvature.

    Args:
        points: padded ``(B, N, 3)`` or packed ``(N_total, 3)`` float tensor.
        k: neighbours per point, an int >= 1 (itself included; 30 is Open3D's
            common choice).
        lengths: optional int ``(B,)`` for padded input.
        offsets: optional int ``(B,)`` cumulative end offsets for packed input.
        viewpoint: optional camera/scanner position, 3 floats or ``(B, 3)``
            (one per cloud).
        direction: optional direction to align with, 3 floats or ``(B, 3)``.

    Returns:
        ``NormalsResult(normals, curvature)``: ``(B, N, 3)`` / ``(B, N)`` for
        padded input (padding rows hold zeros), ``(N_total, 3)`` /
        ``(N_total,)`` for packed input, in the dtype of ``points``.
        ``curvature = lambda_0 / (lambda_0 + lambda_1 + lambda_2)`` in
        ``[0, 1/3]``.  Differentiable w.r.t. ``points`` where the smallest
        eigenvalue is simple (the neighbour selection itself is not).

    Example:
        >>> import torch, pcgeom
        >>> g = torch.Generator().manual_seed(0)
        >>> xy = torch.rand(500, 2, generator=g)
        >>> plane = torch.cat([xy, 0.5 * xy[:, :1]], 1)          # z = x / 2
        >>> n, c = pcgeom.estimate_normals(plane, k=10, viewpoint=[0.0, 0.0, 10.0])
        >>> torch.allclose(n, torch.tensor([-1.0, 0.0, 2.0]) / 5 ** 0.5, atol=1e-5), float(c.max()) < 1e-6
        (True, True)
    """
    fn = "estimate_normals"
    check_cloud(fn, points, lengths, offsets, dims=3)
    k = V.check_int(fn, "k", k, minimum=1)
    if viewpoint is not None and direction is not None:
        raise ValueError(f"{fn}: give viewpoint= or direction=, not both")
    # The search runs on each cloud rescaled by a power of two (exact): float32
    # squared distances of coordinates near 1e+-20 and beyond would overflow to
    # inf or underflow to 0 and tie, picking neighbours by index instead.
    rows = self_knn(fn, points.detach(), k, lengths, offsets, rescaled=True)
    k = rows.idx.shape[1]  # capped at the cloud's slots (beyond them every neighbour is padding)
    if points.dim() == 3:
        B, N, _ = points.shape
        normals, curvature = pca_normals(points, rows.idx.reshape(B, N, k))
    else:
        normals, curvature = pca_normals(points[None], rows.idx[None])
        normals, curvature = normals[0], curvature[0]
    normals = normals.reshape(-1, 3)
    curvature = curvature.reshape(-1)
    # Orientation in float64 for every dtype: viewpoint - p and the dot product
    # overflow float32 for coordinates near its largest values.
    acc = torch.float64
    ref = None
    if viewpoint is not None:
        vp = _reference_points(fn, "viewpoint", viewpoint, rows.n_clouds, acc, points.device)
        ref = vp[rows.cloud] - points.detach().reshape(-1, 3).to(acc)
    elif direction is not None:
        ref = _reference_points(fn, "direction", direction, rows.n_clouds, acc, points.device)[rows.cloud]
    if ref is not None:
        dot = (normals.detach().to(acc) * ref).sum(1)
        normals = torch.where((dot < 0)[:, None], -normals, normals)
    finite = torch.isfinite(points.detach().reshape(-1, 3)).all(1)
    nan = torch.full((), float("nan"), dtype=points.dtype, device=points.device)
    normals = torch.where(finite[:, None], normals, nan)
    curvature = torch.where(finite, curvature, nan)
    normals = torch.where(rows.real[:, None], normals, 0)
    curvature = torch.where(rows.real, curvature, 0)
    return NormalsResult(normals.reshape(rows.shape + (3,)), curvature.reshape(rows.shape))
