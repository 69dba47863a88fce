"""pytorch3d's ``estimate_pointcloud_normals`` and ``estimate_pointcloud_local_coord_frames``.

PCA of each point's ``K`` nearest neighbours (the point itself included,
biased covariance), with pytorch3d v0.7.9's return conventions and its SHOT
sign disambiguation, on :func:`pcgeom.knn` and an exact symmetric
eigensolver (``torch.linalg.eigh``).

pytorch3d's default eigensolver (``use_symeig_workaround=True``) is a
closed-form float32 routine whose eigenvector *signs* follow its own
construction; the signs reach the output whenever the disambiguation cannot
decide (odd ``K`` with as many neighbours on either side) and always with
``disambiguate_directions=False``.  :func:`_symeig3x3_signs` gives the exact
eigenvectors the signs that construction gives them, so outputs match
upstream's while the values are exact (float64 at float64 accuracy, where
upstream's routine carries float32 tolerances into float64).  With
``use_symeig_workaround=False`` upstream calls ``torch.linalg.eigh`` and so
does this module.
"""

from __future__ import annotations

from typing import Tuple

import torch

import pcgeom
from pcgeom.compat.pytorch3d.ops.utils import convert_pointclouds_to_tensor

__all__ = ["estimate_pointcloud_local_coord_frames", "estimate_pointcloud_normals"]

# The regulariser of pytorch3d's closed-form solver: float32's eps whatever the dtype.
_SYMEIG_EPS = torch.finfo(torch.float32).eps


def _sign_without_zero(t: torch.Tensor) -> torch.Tensor:
    return torch.where(t > 0, 1.0, -1.0).to(t.dtype)


def _orient(vec: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``vec`` flipped to point along ``ref`` (a zero dot product keeps ``vec``); the sign carries no gradient."""
    dot = (vec * ref).sum(-1, keepdim=True).detach()
    return torch.where(dot < 0, -vec, vec)


def _symeig3x3_signs(cov: torch.Tensor, lam: torch.Tensor, vecs: torch.Tensor) -> torch.Tensor:
    """The ``(..., 3)`` signs (+-1) that make the exact eigenvectors ``vecs`` those of pytorch3d's ``symeig3x3``.

    ``vecs`` holds them in its columns, their eigenvalues ``lam`` ascending.

    That routine builds the eigenvector of the eigenvalue farther from the
    middle one (``a``: the smallest when ``l1 - l0 > l2 - l1``, else the
    largest) as the longest cross product of two rows of ``cov - l_a I``
    (after adding ``eps * sign`` of the first one's components), the middle
    one by rotating the remaining eigenvector's coordinates in a fixed basis
    ``(u, v)`` of the plane orthogonal to it by 90 degrees, and the third as
    their cross product.  Here each step picks only the sign; the vectors
    stay the exact ones.
    """
    l0, l1, l2 = lam.unbind(-1)
    v0, v1, v2 = vecs.unbind(-1)
    far_low = ((l1 - l0) > (l2 - l1))[..., None]
    la = torch.where(far_low[..., 0], l0, l2)
    lb = torch.where(far_low[..., 0], l2, l0)  # the eigenvalue that is neither a nor the middle one
    va = torch.where(far_low, v0, v2)
    vb = torch.where(far_low, v2, v0)
    eye = torch.eye(3, dtype=cov.dtype, device=cov.device)
    m = cov - la[..., None, None] * eye
    r0, r1, r2 = m.unbind(-2)
    crosses = torch.stack((torch.cross(r0, r1, dim=-1), torch.cross(r1, r2, dim=-1), torch.cross(r0, r2, dim=-1)), -2)
    crosses = crosses + _SYMEIG_EPS * _sign_without_zero(crosses[..., :1, :])
    pick = (crosses * crosses).sum(-1).argmax(-1)  # the first of equal norms, as torch.argmax does
    longest = crosses.gather(-2, pick[..., None, None].expand(*pick.shape, 1, 3))[..., 0, :]
    ea = _orient(va, longest)
    # (u, v): the basis of the plane orthogonal to ea that the routine builds from ea's smallest component.
    axis = ea.abs().argmin(-1, keepdim=True)
    nxt, prv = (axis + 1) % 3, (axis + 2) % 3
    lo, hi = torch.minimum(nxt, prv), torch.maximum(nxt, prv)  # the two other axes, ascending
    u = torch.zeros_like(ea)
    u = u.scatter(-1, lo, -ea.gather(-1, hi)).scatter(-1, hi, ea.gather(-1, lo))
    u = torch.nn.functional.normalize(u, dim=-1)
    v = torch.cross(ea, u, dim=-1)
    # (cov - l1 I) restricted to that plane is (lb - l1) c c^T, c = the coordinates of vb in (u, v).
    c0, c1 = (u * vb).sum(-1), (v * vb).sum(-1)
    acute = _sign_without_zero(c0 * c1)
    scale = (lb - l1) * (c0 + acute * c1)
    row = torch.stack((scale * c0, scale * c1), -1)
    row = row + _SYMEIG_EPS * _sign_without_zero(row[..., :1])
    e1 = _orient(v1, row[..., 1:2] * u - row[..., 0:1] * v)
    e_other = torch.cross(ea, e1, dim=-1)  # right-handed, as the routine's third vector
    first = torch.where(far_low, ea, e_other)
    last = torch.where(far_low, e_other, ea)
    signed = torch.stack((first, e1, last), -1)
    return torch.where((signed * vecs).sum(-2) < 0, -1.0, 1.0).to(vecs.dtype)


def _check_neighborhood(fn: str, neighborhood_size, num_points: torch.Tensor) -> int:
    if isinstance(neighborhood_size, bool) or not isinstance(neighborhood_size, int) or neighborhood_size < 1:
        raise ValueError(f"{fn}: neighborhood_size must be an int >= 1, got {neighborhood_size!r}")
    if num_points.numel() and bool((num_points <= neighborhood_size).any()):
        smallest = int(num_points.min())
        raise ValueError(f"{fn}: every point cloud must have more points than neighborhood_size "
                         f"({neighborhood_size}), as pytorch3d requires; the smallest has {smallest}")
    return neighborhood_size


def _frames(fn: str, pointclouds, neighborhood_size: int, disambiguate_directions: bool,
            use_symeig_workaround: bool, columns: Tuple[int, ...]):
    points, num_points = convert_pointclouds_to_tensor(pointclouds)
    if points.dim() != 3 or points.shape[2] != 3:
        raise ValueError(f"{fn}: The pointclouds argument has to be of shape (minibatch, N, 3), "
                         f"got {tuple(points.shape)}")
    if not points.is_floating_point():
        raise TypeError(f"{fn}: pointclouds must be a floating point tensor, got {points.dtype}")
    num_points = num_points.to(device=points.device, dtype=torch.int64)
    K = _check_neighborhood(fn, neighborhood_size, num_points)
    work = points if points.dtype in (torch.float32, torch.float64) else points.float()
    B, P, _ = work.shape
    # Removing each cloud's mean first keeps float32 covariances of far-off clouds accurate (as upstream).
    mean = work.sum(1) / num_points.clamp_min(1)[:, None].to(work.dtype)
    centred = work - mean[:, None, :]
    real = torch.arange(P, device=work.device)[None, :] < num_points[:, None]
    ragged = not bool(real.all())
    idx = pcgeom.knn(centred.detach(), centred.detach(), K, query_lengths=num_points, points_lengths=num_points).idx
    # Offsets d = q - p from each point to its neighbours, channel-first (3, B*P, K) so that the
    # subtraction and the reductions run along K.  The covariance about the neighbourhood mean is
    # E[d d^T] - E[d] E[d]^T, accurate because |d| is of the neighbourhood's size; the same offsets
    # decide the SHOT signs.  Padded rows gather row 0 (their covariance is replaced below).
    flat_idx = idx.clamp_min(0) if ragged else idx
    if B > 1:
        flat_idx = flat_idx + (torch.arange(B, device=work.device) * P)[:, None, None]
    flat_idx = flat_idx.reshape(-1)
    cols = centred.reshape(B * P, 3).t()
    offsets = torch.index_select(cols, 1, flat_idx).view(3, B * P, K)
    offsets = offsets - cols[:, :, None] if offsets.requires_grad else offsets.sub_(cols[:, :, None])
    rows = offsets.permute(1, 2, 0)  # (B*P, K, 3) view
    mid = offsets.mean(2).t()
    cov = (torch.bmm(rows.transpose(1, 2), rows) / K - mid[:, :, None] * mid[:, None, :]).reshape(B, P, 3, 3)
    if ragged:
        # Padded rows get the identity so that eigh's backward stays finite there.
        cov = torch.where(real[..., None, None], cov, torch.eye(3, dtype=work.dtype, device=work.device))
    lam, vecs = torch.linalg.eigh(cov)
    if disambiguate_directions:
        # SHOT (Tombari et al., ECCV 2010): a direction points to where most of the neighbourhood lies,
        # judged from the point itself; it is flipped when fewer than half of the K offsets project positively.
        wanted = [0, 2] if columns != (0,) else [0]
        proj = torch.bmm(vecs.detach().reshape(B * P, 3, 3)[..., wanted].transpose(1, 2),
                         offsets.detach().permute(1, 0, 2))  # (B*P, len(wanted), K)
        half = 0.5 * K
        pos = (proj > 0).sum(-1).reshape(B, P, len(wanted)) >= half
        neg = (proj < 0).sum(-1).reshape(B, P, len(wanted)) >= half
        # At least one offset is exactly 0 (the point itself or its duplicate), so pos and neg never
        # both hold.  Where neither does (as many on either side, exact zeros), the rule flips whatever
        # sign the solver gave: only there do pytorch3d solver's signs matter, so only there are they
        # worked out.
        signs = torch.where(pos, 1.0, -1.0).to(vecs.dtype)
        undecided = ~(pos | neg)
        if use_symeig_workaround:
            open_rows = undecided.any(-1) & real
            if bool(open_rows.any()):
                solver = _symeig3x3_signs(cov.detach()[open_rows], lam.detach()[open_rows],
                                          vecs.detach()[open_rows])[:, wanted]
                signs = signs.index_put((open_rows,), torch.where(undecided[open_rows], -solver, signs[open_rows]))
        n = vecs[..., 0] * signs[..., 0:1]
        if wanted == [0]:
            vecs = n[..., None]
        else:
            z = vecs[..., 2] * signs[..., 1:2]
            vecs = torch.stack((n, torch.cross(n, z, dim=-1), z), -1)
    else:
        if use_symeig_workaround:
            vecs = vecs * _symeig3x3_signs(cov.detach(), lam.detach(), vecs.detach())[..., None, :]
        vecs = vecs[..., list(columns)]
    if ragged:
        lam = torch.where(real[..., None], lam, 0)
        vecs = torch.where(real[..., None, None], vecs, 0)
    if work.dtype != points.dtype:
        lam, vecs = lam.to(points.dtype), vecs.to(points.dtype)
    return lam, vecs


def estimate_pointcloud_local_coord_frames(pointclouds, neighborhood_size: int = 50,
                                           disambiguate_directions: bool = True, *,
                                           use_symeig_workaround: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
    """Principal curvatures and directions of each point's neighbourhood, as pytorch3d returns them.

    Per point: its ``neighborhood_size`` nearest points of the same cloud
    (itself included, ties to the lower index), their biased covariance
    ``(1/K) sum (q - m)(q - m)^T`` about their mean ``m``, and its
    eigen-decomposition, eigenvalues ascending.  Column 0 of a frame is the
    normal (smallest eigenvalue).

    **Signs.**  With ``disambiguate_directions=True`` (SHOT, Tombari et al.
    ECCV 2010) the normal and the last direction are each flipped when fewer
    than ``K / 2`` of the offsets ``q_k - p`` from the point to its neighbours
    project positively on them, and the middle direction becomes
    ``cross(normal, last)``.  Where that rule leaves the sign to the solver
    (and always without disambiguation), the signs are those of pytorch3d's
    solver: its closed-form ``symeig3x3`` when ``use_symeig_workaround`` (the
    default; see the module docstring), ``torch.linalg.eigh`` otherwise.
    Directions of a repeated eigenvalue are any orthonormal basis of its
    eigenspace.

    Args:
        pointclouds: ``(B, P, 3)`` float tensor or a ``Pointclouds``.
        neighborhood_size: ``K``, an int with ``1 <= K < `` every cloud's size
            (pytorch3d's limit).
        disambiguate_directions: apply the sign rule above.
        use_symeig_workaround: whose solver's signs to follow (keyword only).

    Returns:
        ``(curvatures (B, P, 3), local_coord_frames (B, P, 3, 3))`` in the
        dtype of the points (float16/bfloat16 computed in float32), the
        directions in the columns (``frames[b, p, :, 0]`` is the normal).  For
        a ``Pointclouds`` they are padded; padded rows hold zeros.
        Differentiable w.r.t. the points where the eigenvalues are distinct
        (the neighbour selection and the signs are not).

    Raises:
        ValueError: points not ``(B, P, 3)``, ``neighborhood_size`` not an int
            ``>= 1``, or a cloud with ``<= neighborhood_size`` points.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.ops.points_normals import estimate_pointcloud_local_coord_frames
        >>> g = torch.Generator().manual_seed(0)
        >>> xy = torch.rand(1, 200, 2, generator=g, dtype=torch.float64)
        >>> plane = torch.cat([xy, torch.zeros(1, 200, 1, dtype=torch.float64)], 2)
        >>> curv, frames = estimate_pointcloud_local_coord_frames(plane, neighborhood_size=8)
        >>> bool(frames[..., 2, 0].abs().eq(1).all()), bool(curv[..., 0].abs().max() < 1e-15)
        (True, True)
    """
    return _frames("estimate_pointcloud_local_coord_frames", pointclouds, neighborhood_size,
                   disambiguate_directions, use_symeig_workaround, (0, 1, 2))


def estimate_pointcloud_normals(pointclouds, neighborhood_size: int = 50, disambiguate_directions: bool = True, *,
                                use_symeig_workaround: bool = True) -> torch.Tensor:
    """Unit normals of a batch of point clouds, as pytorch3d estimates them.

    The first column of :func:`estimate_pointcloud_local_coord_frames` (same
    arguments, same neighbourhoods, same sign rule), computed without the
    other two directions.

    Args:
        pointclouds: ``(B, P, 3)`` float tensor or a ``Pointclouds``.
        neighborhood_size: ``K``, an int with ``1 <= K <`` every cloud's size.
        disambiguate_directions: orient each normal towards most of its neighbours (SHOT).
        use_symeig_workaround: whose solver's signs to follow (keyword only).

    Returns:
        ``(B, P, 3)`` normals in the dtype of the points; padded rows of a
        ``Pointclouds`` hold zeros.  Differentiable w.r.t. the points.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.ops.points_normals import estimate_pointcloud_normals
        >>> g = torch.Generator().manual_seed(0)
        >>> xy = torch.rand(1, 300, 2, generator=g)
        >>> plane = torch.cat([xy, 0.5 * xy[..., :1]], 2)          # z = x / 2
        >>> n = estimate_pointcloud_normals(plane, neighborhood_size=10)
        >>> bool(torch.allclose(n.abs(), torch.tensor([1.0, 0.0, 2.0]) / 5 ** 0.5, atol=1e-5))
        True
    """
    fn = "estimate_pointcloud_normals"
    _, vecs = _frames(fn, pointclouds, neighborhood_size, disambiguate_directions, use_symeig_workaround, (0,))
    return vecs[..., 0]
