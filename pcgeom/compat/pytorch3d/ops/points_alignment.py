"""pytorch3d's ``iterative_closest_point`` and ``corresponding_points_alignment`` (Umeyama).

pytorch3d v0.7.9's semantics and return types (``SimilarityTransform``,
``ICPSolution``), with the nearest-neighbour search of ICP on
:func:`pcgeom.knn`.  Transforms act on row vectors: ``Y = s * X @ R + T``.
Every float dtype works (float64 at float64 accuracy, which upstream's CPU
KNN rejects), and gradients flow through the SVD as upstream's do.

Two upstream behaviours are kept on purpose, because code written against
pytorch3d gets them there:

* weights enter the centroids once but the cross-covariance (and the scale's
  variance) squared: ``sum w^2 x y^T / sum w``;
* ICP masks padded points of ``X`` only when the two batches' lengths differ
  somewhere; with equal ragged lengths the padded rows of ``X`` take part,
  matched to ``Y``'s first point (pytorch3d's KNN pads with index 0).
"""

from __future__ import annotations

import warnings
from typing import List, NamedTuple, Optional, Union

import torch

import pcgeom
from pcgeom.compat.pytorch3d.ops.utils import convert_pointclouds_to_tensor, eyes, is_pointclouds, wmean

__all__ = ["ICPSolution", "SimilarityTransform", "corresponding_points_alignment", "iterative_closest_point"]

# Singular values of the cross-covariance at or below this mean an ambiguous rotation (pytorch3d's threshold).
AMBIGUOUS_ROT_SINGULAR_THR = 1e-15


class SimilarityTransform(NamedTuple):
    """``R (B, d, d)``, ``T (B, d)``, ``s (B,)``: ``Y = s[:, None, None] * X @ R + T[:, None]``."""

    R: torch.Tensor
    T: torch.Tensor
    s: torch.Tensor


class ICPSolution(NamedTuple):
    """Result of :func:`iterative_closest_point`."""

    converged: bool
    rmse: Union[torch.Tensor, None]
    Xt: torch.Tensor
    RTs: SimilarityTransform
    t_history: List[SimilarityTransform]


def _apply(X: torch.Tensor, R: torch.Tensor, T: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return s[:, None, None] * torch.bmm(X, R) + T[:, None, :]


def _pad_weights(weights: List[torch.Tensor]) -> torch.Tensor:
    n = max((int(w.shape[0]) for w in weights), default=0)
    out = weights[0].new_zeros((len(weights), n))
    for i, w in enumerate(weights):
        out[i, : w.shape[0]] = w
    return out


def corresponding_points_alignment(X, Y, weights: Union[torch.Tensor, List[torch.Tensor], None] = None,
                                   estimate_scale: bool = False, allow_reflection: bool = False,
                                   eps: float = 1e-9) -> SimilarityTransform:
    """The similarity transform taking corresponding points ``X`` onto ``Y`` in least squares (Umeyama 1991).

    Finds ``R, T, s`` with ``s[i] * X[i] @ R[i] + T[i] ~ Y[i]``: the weighted
    centroids ``mx, my`` (``wmean``), the cross-covariance
    ``C = sum_j w_j^2 (x_j - mx)^T (y_j - my) / W`` (``W`` the total weight,
    or the number of points without weights; the squared weight is
    pytorch3d's), its SVD ``C = U S V^T``, ``R = U E V^T`` with ``E`` the
    identity whose last entry is ``det(U V^T)`` unless ``allow_reflection``,
    ``s = tr(E S) / (sum_j w_j^2 |x_j - mx|^2 / W)`` when ``estimate_scale``
    (else 1), and ``T = my - s * mx @ R``.  Padded points of ``Pointclouds``
    get weight 0.

    Args:
        X: ``(B, P, d)`` float tensor or a ``Pointclouds``.
        Y: the same shape and number of points per cloud as ``X``.
        weights: optional non-negative ``(B, P)`` tensor, or a list of ``B``
            1-D tensors with one weight per point of each cloud.
        estimate_scale: also estimate ``s``.
        allow_reflection: allow ``det(R) = -1``.
        eps: lower clamp of the total weight and the variance of ``X``.

    Returns:
        ``SimilarityTransform(R (B, d, d), T (B, d), s (B,))`` in the dtype of
        ``X``; differentiable w.r.t. ``X``, ``Y`` and ``weights`` where the
        singular values are distinct.

    Warns:
        UserWarning: a cloud with ``<= d`` points, or a singular value ``<= 1e-15``
            (the rotation is not unique), as upstream.

    Raises:
        ValueError: ``X`` and ``Y`` of different shapes or point counts, or
            weights of the wrong shape or count.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.ops.points_alignment import corresponding_points_alignment
        >>> X = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 2, 0], [0, 0, 3]]], dtype=torch.float64)
        >>> R = torch.tensor([[[0.0, 1, 0], [-1, 0, 0], [0, 0, 1]]], dtype=torch.float64)
        >>> R_est, T_est, s_est = corresponding_points_alignment(X, X @ R + 1.0)
        >>> bool(torch.allclose(R_est, R)), bool(torch.allclose(T_est, torch.ones(1, 3, dtype=torch.float64)))
        (True, True)
    """
    Xt, num_points = convert_pointclouds_to_tensor(X)
    Yt, num_points_Y = convert_pointclouds_to_tensor(Y)
    if Xt.shape != Yt.shape or bool((num_points != num_points_Y.to(num_points.device)).any()):
        raise ValueError(f"Point sets X and Y have to have the same number of batches, points and dimensions: "
                         f"got X {tuple(Xt.shape)} with {num_points.tolist()} points and "
                         f"Y {tuple(Yt.shape)} with {num_points_Y.tolist()} points")
    if Xt.dim() != 3 or not Xt.is_floating_point():
        raise ValueError(f"corresponding_points_alignment: X must be a floating (B, P, d) tensor, "
                         f"got {tuple(Xt.shape)} {Xt.dtype}")
    if weights is not None:
        if isinstance(weights, (list, tuple)):
            if len(weights) != len(num_points) or any(int(n) != w.shape[0] for n, w in zip(num_points, weights)):
                raise ValueError(f"number of weights should equal to the number of points in the point cloud: "
                                 f"got {[int(w.shape[0]) for w in weights]} for {num_points.tolist()} points")
            weights = _pad_weights(list(weights))
        if not isinstance(weights, torch.Tensor) or Xt.shape[:2] != weights.shape:
            got = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
            raise ValueError(f"weights should have the same first two dimensions as X: expected "
                             f"{tuple(Xt.shape[:2])}, got {got}")
    b, n, dim = Xt.shape
    if bool((num_points < n).any()):
        mask = (torch.arange(n, device=Xt.device)[None] < num_points[:, None]).to(Xt.dtype)
        weights = mask if weights is None else mask * weights.to(Xt.dtype)
    Xmu = wmean(Xt, weight=weights, eps=eps)
    Ymu = wmean(Yt, weight=weights, eps=eps)
    Xc = Xt - Xmu
    Yc = Yt - Ymu
    total_weight = torch.clamp(num_points, 1)
    if weights is not None:
        Xc = Xc * weights[:, :, None]
        Yc = Yc * weights[:, :, None]
        total_weight = torch.clamp(weights.sum(1), eps)
    if bool((num_points < dim + 1).any()):
        warnings.warn("The size of one of the point clouds is <= dim+1. "
                      "corresponding_points_alignment cannot return a unique rotation.", stacklevel=2)
    XYcov = torch.bmm(Xc.transpose(2, 1), Yc) / total_weight[:, None, None]
    U, S, Vh = torch.linalg.svd(XYcov)
    if bool((S.abs() <= AMBIGUOUS_ROT_SINGULAR_THR).any()) and not bool((num_points < dim + 1).any()):
        warnings.warn("Excessively low rank of cross-correlation between aligned point clouds. "
                      "corresponding_points_alignment cannot return a unique rotation.", stacklevel=2)
    E = torch.eye(dim, dtype=XYcov.dtype, device=XYcov.device)[None].repeat(b, 1, 1)
    if not allow_reflection:
        # The nearest proper rotation: flip the direction of the smallest singular value if U V^T reflects.
        E[:, -1, -1] = torch.det(torch.bmm(U, Vh))
    R = torch.bmm(torch.bmm(U, E), Vh)
    if estimate_scale:
        trace_ES = (torch.diagonal(E, dim1=1, dim2=2) * S).sum(1)
        Xcov = (Xc * Xc).sum((1, 2)) / total_weight
        s = trace_ES / torch.clamp(Xcov, eps)
        T = Ymu[:, 0, :] - s[:, None] * torch.bmm(Xmu, R)[:, 0, :]
    else:
        T = Ymu[:, 0, :] - torch.bmm(Xmu, R)[:, 0, :]
        s = T.new_ones(b)
    return SimilarityTransform(R, T, s)


def _nearest(Xt: torch.Tensor, Yt: torch.Tensor, nx: torch.Tensor, ny: torch.Tensor) -> torch.Tensor:
    """Each point's nearest point of ``Y`` gathered ``(B, P, d)``; padded rows get ``Y[b, 0]`` (pytorch3d's padding)."""
    idx = pcgeom.knn(Xt.detach(), Yt.detach(), 1, query_lengths=nx, points_lengths=ny).idx
    idx = idx.clamp_min(0)  # a padded row: index 0, as pytorch3d's KNN returns it
    return torch.gather(Yt, 1, idx.expand(-1, -1, Yt.shape[2]))


def iterative_closest_point(X, Y, init_transform: Optional[SimilarityTransform] = None, max_iterations: int = 100,
                            relative_rmse_thr: float = 1e-6, estimate_scale: bool = False,
                            allow_reflection: bool = False, verbose: bool = False) -> ICPSolution:
    """Iterative closest point (Besl & McKay 1992) between point sets of any sizes, as pytorch3d runs it.

    Each iteration matches every point of the current ``X`` to its nearest
    point of ``Y`` (:func:`pcgeom.knn`, ties to the lower index) and solves
    :func:`corresponding_points_alignment` from the *initial* ``X`` to those
    matches.  It stops after ``max_iterations`` or once every cloud's
    relative RMSE decrease ``(rmse_prev - rmse) / rmse_prev`` is
    ``<= relative_rmse_thr`` (``converged=True``).  A local optimum.

    Args:
        X: ``(B, P1, d)`` float tensor or a ``Pointclouds``.
        Y: ``(B, P2, d)`` float tensor or a ``Pointclouds`` (same ``B`` and ``d``).
        init_transform: optional ``SimilarityTransform`` ``(R (B, d, d), T (B, d), s (B,))``
            applied to ``X`` first.
        max_iterations: the most iterations.
        relative_rmse_thr: the convergence threshold.
        estimate_scale: also estimate a scale (else ``s = 1``).
        allow_reflection: allow ``det(R) = -1``.
        verbose: print the RMSE of each iteration.

    Returns:
        ``ICPSolution(converged, rmse (B,), Xt, RTs, t_history)``: ``Xt`` is
        ``X`` transformed (a ``Pointclouds`` for a ``Pointclouds`` input),
        ``RTs`` the final ``SimilarityTransform``, ``t_history`` one per
        iteration.  See the module docstring for how padded points count.

    Raises:
        ValueError: different batch sizes or dimensions, or a malformed ``init_transform``.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.ops.points_alignment import iterative_closest_point
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.randn(1, 100, 3, generator=g, dtype=torch.float64)
        >>> sol = iterative_closest_point(X, X + 0.05)
        >>> sol.converged, torch.allclose(sol.RTs.T, torch.full((1, 3), 0.05, dtype=torch.float64))
        (True, True)
    """
    Xt, num_points_X = convert_pointclouds_to_tensor(X)
    Yt, num_points_Y = convert_pointclouds_to_tensor(Y)
    if Xt.dim() != 3 or Yt.dim() != 3 or Xt.shape[2] != Yt.shape[2] or Xt.shape[0] != Yt.shape[0]:
        raise ValueError(f"Point sets X and Y have to have the same number of batches and data dimensions: "
                         f"got X {tuple(Xt.shape)} and Y {tuple(Yt.shape)}")
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) or max_iterations < 0:
        raise ValueError(f"iterative_closest_point: max_iterations must be an int >= 0, got {max_iterations!r}")
    b, size_X, dim = Xt.shape
    num_points_Y = num_points_Y.to(num_points_X.device)
    ragged = bool((num_points_Y < Yt.shape[1]).any()) or bool((num_points_X < Xt.shape[1]).any())
    if ragged and bool((num_points_Y != num_points_X).any()):
        mask_X = (torch.arange(size_X, device=Xt.device)[None] < num_points_X[:, None]).to(Xt.dtype)
    else:
        mask_X = Xt.new_ones(b, size_X)
    Xt_init = Xt.clone()
    if init_transform is not None:
        try:
            R, T, s = init_transform
            ok = (R.shape == (b, dim, dim) and T.shape == (b, dim) and s.shape == (b,))
        except Exception:
            ok = False
        if not ok:
            raise ValueError("The initial transformation init_transform has to be a named tuple "
                             "SimilarityTransform with elements (R, T, s). R are dim x dim orthonormal matrices "
                             f"of shape (minibatch, dim, dim) = ({b}, {dim}, {dim}), T is a batch of "
                             "dim-dimensional translations of shape (minibatch, dim) and s is a batch of scalars "
                             "of shape (minibatch,).")
        Xt = _apply(Xt, R, T, s)
    else:
        R = eyes(dim, b, device=Xt.device, dtype=Xt.dtype)
        T = Xt.new_zeros((b, dim))
        s = Xt.new_ones(b)
    prev_rmse = None
    rmse = None
    iteration = -1
    converged = False
    t_history = []
    for iteration in range(max_iterations):
        Xt_nn_points = _nearest(Xt, Yt, num_points_X, num_points_Y)
        R, T, s = corresponding_points_alignment(Xt_init, Xt_nn_points, weights=mask_X,
                                                 estimate_scale=estimate_scale, allow_reflection=allow_reflection)
        Xt = _apply(Xt_init, R, T, s)
        t_history.append(SimilarityTransform(R, T, s))
        sq = torch.square(Xt - Xt_nn_points).sum(2)
        rmse = wmean(sq[:, :, None], mask_X).sqrt()[:, 0, 0]
        relative_rmse = rmse.new_ones(b) if prev_rmse is None else (prev_rmse - rmse) / prev_rmse
        if verbose:
            print(f"ICP iteration {iteration}: mean/max rmse = {rmse.mean():1.2e}/{rmse.max():1.2e} "
                  f"; mean relative rmse = {relative_rmse.mean():1.2e}")
        if bool((relative_rmse <= relative_rmse_thr).all()):
            converged = True
            break
        prev_rmse = rmse
    if verbose:
        if converged:
            print(f"ICP has converged in {iteration + 1} iterations.")
        else:
            print(f"ICP has not converged in {max_iterations} iterations.")
    if is_pointclouds(X):
        Xt = X.update_padded(Xt)
    return ICPSolution(converged, rmse, Xt, SimilarityTransform(R, T, s), t_history)
