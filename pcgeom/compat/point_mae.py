"""Point-MAE's grouping, FPS and Chamfer losses as pcgeom classes.

Point-MAE (and Point-BERT, PointGPT, Point-M2AE, PoinTr, which share the code)
needs three compiled extensions: KNN_CUDA, pointnet2_ops and a Chamfer CUDA
extension.  To run those repositories unchanged, turn on the import shims
(``pcgeom compat enable``, or :func:`pcgeom.compat.enable_shims`), which serve
all three under their own module names.  This module is for your own code::

    from pcgeom.compat.point_mae import Group, ChamferDistanceL1, ChamferDistanceL2, fps

(Importing these into Point-MAE's own files is not enough: ``utils/misc.py``
and ``models/Point_MAE.py`` define their own ``fps`` and ``Group``, which
shadow imported names, and its runners import ``pointnet2_ops`` directly.)

The numbers match the originals: :class:`Group` uses the pointnet2-compatible
FPS by default (``fps="pointnet2"``), so pretrained checkpoints see the same
centres; pass ``fps="exact"`` for pcgeom's exact FPS in new work.
"""

from __future__ import annotations

import torch
from torch import nn

from pcgeom import _validation as V
from pcgeom.chamfer import chamfer_distance
from pcgeom._pointnet2_kernel import fps as pointnet2_fps_unchecked
from pcgeom.grouping import FPS_MODES, gather_points, group_patches_impl

__all__ = ["ChamferDistanceL1", "ChamferDistanceL2", "Group", "fps"]


def fps(data: torch.Tensor, number: int) -> torch.Tensor:
    """Point-MAE's ``utils.misc.fps``: the ``number`` pointnet2-FPS points of each cloud.

    Args:
        data: ``(B, N, 3)`` floating tensor.
        number: int in ``[1, N]``.

    Returns:
        ``(B, number, 3)`` points in FPS order (pointnet2_ops rules, see
        :func:`pcgeom.grouping.pointnet2_fps`), in the dtype of ``data`` and
        differentiable with respect to it.

    Raises:
        ValueError: ``data`` not ``(B, N, 3)``, or ``number`` below 1 or larger than N.
        TypeError: ``data`` not a floating tensor, ``number`` not an int.

    Example:
        >>> import torch
        >>> from pcgeom.compat.point_mae import fps
        >>> fps(torch.rand(2, 1024, 3), 64).shape
        torch.Size([2, 64, 3])
    """
    fn = "point_mae.fps"
    V.check_points(fn, "data", data, "(B, N, 3)")
    if data.shape[2] != 3:
        raise ValueError(f"{fn}: data must have shape (B, N, 3), got {V.shape_str(data)}")
    number = V.check_int(fn, "number", number, minimum=1)
    if number > data.shape[1]:
        raise ValueError(f"{fn}: number={number} exceeds the number of points N={data.shape[1]} (data shape {V.shape_str(data)})")
    return gather_points(data, pointnet2_fps_unchecked(data, number))


class Group(nn.Module):
    """Point-MAE's ``Group`` (FPS + KNN): splits clouds into patches.

    ``forward(xyz)`` returns ``(neighborhood (B, G, M, 3), center (B, G, 3))``
    exactly like Point-MAE's module: centres by pointnet2 FPS from index 0, the
    ``group_size`` nearest points of each centre in KNN_CUDA's order
    (ascending distance, ties to the lower index, so the centre itself comes
    first unless an exact duplicate precedes it), minus the centre.  Runs on
    CPU and GPU, keeps the input dtype, and is differentiable w.r.t. ``xyz``.

    Args:
        num_group: number of patches G.
        group_size: points per patch M.
        fps: ``"pointnet2"`` (default) reproduces pointnet2_ops' centres, so
            published checkpoints get the same input; ``"exact"`` uses
            :func:`pcgeom.farthest_point_sample` (recommended for new training:
            no near-origin hole, no repeated centres).
        return_idx: also return Point-M2AE's flat neighbour index
            ``idx + arange(B) * N`` of shape ``(B * G * M,)``, i.e. Point-M2AE's
            ``Group`` (``forward`` then returns ``(neighborhood, center, idx)``).

    Raises:
        ValueError: (from ``forward``) the errors of :func:`pcgeom.group_patches` (``num_group`` or ``group_size``
            larger than N, points not ``(B, N, 3)``), with the shapes and parameters in the message.

    Example:
        >>> import torch
        >>> from pcgeom.compat.point_mae import Group
        >>> nbhd, ctr = Group(num_group=64, group_size=32)(torch.rand(2, 1024, 3))
        >>> nbhd.shape, ctr.shape
        (torch.Size([2, 64, 32, 3]), torch.Size([2, 64, 3]))
    """

    def __init__(self, num_group: int, group_size: int, *, fps: str = "pointnet2", return_idx: bool = False):
        super().__init__()
        V.check_int("Group", "num_group", num_group, minimum=1)
        V.check_int("Group", "group_size", group_size, minimum=1)
        if fps not in FPS_MODES:
            raise ValueError(f"Group: fps must be one of {FPS_MODES}, got {fps!r}")
        self.num_group = int(num_group)
        self.group_size = int(group_size)
        self.fps = fps
        self.return_idx = bool(return_idx)

    def extra_repr(self) -> str:
        return f"num_group={self.num_group}, group_size={self.group_size}, fps={self.fps!r}"

    def forward(self, xyz: torch.Tensor):
        # The plain KNN tie order (center_first=False) is KNN_CUDA's.
        _validate(xyz, self.num_group, self.group_size, self.fps)
        neighborhood, center, _, idx = group_patches_impl(
            xyz, self.num_group, self.group_size, True, self.fps, None, center_first=False
        )
        if self.return_idx:
            B, N = xyz.shape[0], xyz.shape[1]
            flat = (idx + torch.arange(B, device=xyz.device).view(-1, 1, 1) * N).view(-1)
            return neighborhood, center, flat
        return neighborhood, center


def _validate(xyz, num_group, group_size, fps_mode):
    fn = "Group"

    def ctx() -> str:
        return f"xyz of shape {V.shape_str(xyz)}, num_group={num_group}, group_size={group_size}, fps={fps_mode!r}"

    V.check_points(fn, "xyz", xyz, "(B, N, 3)")
    if xyz.shape[2] != 3:
        raise ValueError(f"{fn}: xyz must have shape (B, N, 3), got {V.shape_str(xyz)}")
    N = xyz.shape[1]
    if num_group > N:
        raise ValueError(f"{fn}: num_group={num_group} exceeds the number of points N={N} ({ctx()})")
    if group_size > N:
        raise ValueError(f"{fn}: group_size={group_size} exceeds the number of points N={N} ({ctx()})")


def _drop_zero_points(xyz1, xyz2, ignore_zeros):
    # The originals drop points whose coordinate *sum* is 0, and only for B == 1.
    if ignore_zeros and xyz1.shape[0] == 1:
        xyz1 = xyz1[xyz1.sum(dim=2).ne(0)].unsqueeze(0)
        xyz2 = xyz2[xyz2.sum(dim=2).ne(0)].unsqueeze(0)
    return xyz1, xyz2


class _ChamferDistance(nn.Module):
    # The two originals differ only in the distance they average; ``_kind`` is pcgeom.chamfer_distance's ``kind``.
    _kind: str

    def __init__(self, ignore_zeros: bool = False):
        super().__init__()
        self.ignore_zeros = ignore_zeros

    def forward(self, xyz1: torch.Tensor, xyz2: torch.Tensor) -> torch.Tensor:
        xyz1, xyz2 = _drop_zero_points(xyz1, xyz2, self.ignore_zeros)
        return chamfer_distance(xyz1, xyz2, kind=self._kind)


class ChamferDistanceL2(_ChamferDistance):
    """``extensions.chamfer_dist.ChamferDistanceL2``: ``mean(d1) + mean(d2)`` of squared NN distances.

    ``forward(xyz1 (B, N, 3), xyz2 (B, M, 3))`` returns a 0-dim tensor equal to
    :func:`pcgeom.chamfer_distance` with ``kind="l2"``.  ``ignore_zeros=True``
    drops points whose coordinates sum to 0, for a batch of one, like the
    original.

    Args:
        ignore_zeros: drop the all-zero padding points first (batch of one only, as the original).

    Raises:
        ValueError: (from ``forward``) the errors of :func:`pcgeom.chamfer_distance`.

    Example:
        >>> import torch
        >>> from pcgeom.compat.point_mae import ChamferDistanceL2
        >>> x = torch.zeros(1, 4, 3)
        >>> float(ChamferDistanceL2()(x, x + 1))
        6.0
    """

    _kind = "l2"


class ChamferDistanceL1(_ChamferDistance):
    """``extensions.chamfer_dist.ChamferDistanceL1``: ``(mean(sqrt d1) + mean(sqrt d2)) / 2``.

    Same as :func:`pcgeom.chamfer_distance` with ``kind="l1"``.  Unlike the
    original, a point that coincides with its nearest neighbour gets a zero
    gradient rather than NaN.

    Args and Raises: as :class:`ChamferDistanceL2` (the same module but for the distance).

    Example:
        >>> import torch
        >>> from pcgeom.compat.point_mae import ChamferDistanceL1
        >>> x = torch.zeros(1, 4, 3)
        >>> round(float(ChamferDistanceL1()(x, x + 1)), 4)  # sqrt(3)
        1.7321
    """

    _kind = "l1"
