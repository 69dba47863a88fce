"""``torch_cluster.grid``: ``grid_cluster`` (torch_cluster 1.6.3 ``grid.py``)."""

from typing import Optional

import torch
from torch import Tensor

from pcgeom import _validation as V

__all__ = ["grid_cluster"]


@torch.jit.ignore  # grid_cluster stays scriptable (PyG and torch_cluster's own tests script it)
def _check_grid(pos: Tensor, size: Tensor, s: Tensor, e: Tensor, start_given: bool, end_given: bool) -> None:
    if not bool((torch.isfinite(size) & (size > 0)).all()):
        raise ValueError(f"grid_cluster: size must be positive and finite on every axis, got {size.tolist()}")
    # A NaN or inf point has no voxel (torch_cluster casts it to an arbitrary id);
    # named here, before it turns start/end or the cell count into NaN.
    err = V.non_finite_points("grid_cluster", "pos", pos,
                              "no voxel holds them: drop them first, e.g. pos[torch.isfinite(pos).all(1)] "
                              "(PyG's voxel_grid and GridSampling pass their pos here)")
    if err is not None:
        raise err
    for name, v, given in (("start", s, start_given), ("end", e, end_given)):
        if given and not bool(torch.isfinite(v).all()):
            raise ValueError(f"grid_cluster: {name} must be finite on every axis, got {v.tolist()}")
    # The linear voxel id must fit in int64 (torch_cluster's cast would wrap around silently).
    cells = (torch.true_divide(e - s, size).to(torch.float64).floor() + 1).clamp_min(1)
    if not bool(torch.isfinite(cells).all()) or float(cells.prod()) >= 2.0**63:
        raise ValueError(f"grid_cluster: a grid of size {size.tolist()} over {s.tolist()}..{e.tolist()} has "
                         f"{float(cells.prod()):.3g} cells, more than int64 voxel ids can number; use a larger size")


def grid_cluster(pos: Tensor, size: Tensor, start: Optional[Tensor] = None, end: Optional[Tensor] = None) -> Tensor:
    """Voxel id of every point of a grid of cell ``size`` over ``start..end``.

    torch_cluster's formula, any dtype: voxel ``trunc((pos - start) / size)``
    per axis, linearised with the first axis fastest over
    ``trunc((end - start) / size) + 1`` cells per axis.

    Args:
        pos: ``(N, D)`` (or ``(N,)``) positions.
        size: ``(D,)`` cell size per axis.
        start: optional ``(D,)`` grid origin (default ``pos.min(0)``).
        end: optional ``(D,)`` grid end (default ``pos.max(0)``).

    Returns:
        ``(N,)`` int64 voxel ids.

    Raises:
        ValueError: ``pos`` with NaN or inf coordinates (naming how many
            points and the first one's index; torch_cluster returns an
            arbitrary id for them), a non-finite ``start``/``end``, a
            ``size`` that is not positive and finite, or a grid with more
            cells than int64 ids can number.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_cluster import grid_cluster
        >>> pos = torch.tensor([[0.0, 0.0], [11, 9], [2, 8], [2, 2], [8, 3]])
        >>> grid_cluster(pos, torch.tensor([5.0, 5.0])).tolist()
        [0, 5, 3, 0, 1]
    """
    pos = pos.view(pos.size(0), -1)
    if size.numel() != pos.size(1):
        raise ValueError(f"grid_cluster: size must have one entry per axis of pos ({pos.size(1)}), got {size.numel()}")
    if start is None:
        s = pos.min(0)[0]
    else:
        s = start
    if end is None:
        e = pos.max(0)[0]
    else:
        e = end
    _check_grid(pos, size, s, e, start is not None, end is not None)
    pos = pos - s.unsqueeze(0)
    num_voxels = torch.true_divide(e - s, size).to(torch.long) + 1
    num_voxels = num_voxels.cumprod(0)
    num_voxels = torch.cat([torch.ones(1, dtype=num_voxels.dtype, device=num_voxels.device), num_voxels], 0)
    num_voxels = num_voxels.narrow(0, 0, size.size(0))
    out = torch.true_divide(pos, size.view(1, -1)).to(torch.long)
    out = out * num_voxels.view(1, -1)
    return out.sum(1)
