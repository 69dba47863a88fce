"""Stand-in for ``pointnet2_ops.pointnet2_modules`` (erikwijmans/Pointnet2_PyTorch).

Served under that module name once the shims are on.  ``PointnetSAModule``,
``PointnetSAModuleMSG`` and ``PointnetFPModule`` take the original arguments
and keep the original submodule names and parameter shapes (``mlps.0.0.weight``,
``groupers``, ``mlp.0.weight`` ...), so published checkpoints load with
``load_state_dict`` unchanged; the ops underneath are
:mod:`pcgeom.compat.pointnet2_ops`.  As in the original, ``mlps[i][0]`` of the
argument list is increased by 3 in place when ``use_xyz`` is set.
"""

from __future__ import annotations

from typing import List

import torch
import torch.nn.functional as F
from torch import nn

from pcgeom.compat import pointnet2_ops as _ops

__all__ = ["PointnetFPModule", "PointnetSAModule", "PointnetSAModuleMSG", "build_shared_mlp"]


def build_shared_mlp(mlp_spec: List[int], bn: bool = True) -> nn.Sequential:
    """1x1 ``Conv2d`` (+ ``BatchNorm2d``) + ``ReLU`` per layer, as the original lays them out.

    Args:
        mlp_spec: channel counts ``[c_in, c_1, ..., c_out]``.
        bn: batch norm after each convolution (the convolutions then have no bias).

    Returns:
        ``nn.Sequential`` of ``len(mlp_spec) - 1`` blocks, with the original's submodule numbering
        (``0`` conv, ``1`` batch norm, ``2`` ReLU, ``3`` conv, ...), so checkpoints load.

    Example:
        >>> from pcgeom.compat.pointnet2_modules import build_shared_mlp
        >>> [type(m).__name__ for m in build_shared_mlp([3, 8])]
        ['Conv2d', 'BatchNorm2d', 'ReLU']
    """
    layers = []
    for c_in, c_out in zip(mlp_spec[:-1], mlp_spec[1:]):
        layers.append(nn.Conv2d(c_in, c_out, kernel_size=1, bias=not bn))
        if bn:
            layers.append(nn.BatchNorm2d(c_out))
        layers.append(nn.ReLU(True))
    return nn.Sequential(*layers)


class _PointnetSAModuleBase(nn.Module):
    def __init__(self):
        super().__init__()
        self.npoint = None
        self.groupers = None
        self.mlps = None

    def forward(self, xyz: torch.Tensor, features=None):
        """``xyz (B, N, 3)``, ``features (B, C, N)`` or None -> ``(new_xyz (B, npoint, 3), (B, sum C_out, npoint))``."""
        new_xyz = None
        if self.npoint is not None:
            idx = _ops.furthest_point_sample(xyz, self.npoint)
            new_xyz = _ops.gather_operation(xyz.transpose(1, 2), idx).transpose(1, 2).contiguous()
        outs = []
        for grouper, mlp in zip(self.groupers, self.mlps):
            f = mlp(grouper(xyz, new_xyz, features))  # (B, C_out, npoint, nsample)
            outs.append(F.max_pool2d(f, kernel_size=[1, f.size(3)]).squeeze(-1))
        return new_xyz, torch.cat(outs, dim=1)


class PointnetSAModuleMSG(_PointnetSAModuleBase):
    """Set abstraction with multi-scale grouping: FPS centres, one ball query + MLP + max-pool per radius.

    ``forward(xyz (B, N, 3), features (B, C, N) or None)`` returns ``(new_xyz (B, npoint, 3), new_features (B,
    sum of mlps[i][-1], npoint))``, centres chosen by pointnet2's FPS
    (:func:`pcgeom.compat.pointnet2_ops.furthest_point_sample`).

    Args:
        npoint: number of centres, or None to group everything (``GroupAll``).
        radii: per scale, the ball radius.
        nsamples: per scale, the points per ball.
        mlps: per scale, the MLP channel list (``mlps[i][0]`` = input feature channels; increased by 3 in place when
            ``use_xyz``, as the original does).
        bn: batch norm in the MLPs.
        use_xyz: feed the relative coordinates to the MLPs too.

    Raises:
        ValueError: ``radii``, ``nsamples`` and ``mlps`` of different lengths, or (from ``forward``) the errors of
            the ops underneath.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pointnet2_modules import PointnetSAModuleMSG
        >>> sa = PointnetSAModuleMSG(npoint=16, radii=[0.2, 0.4], nsamples=[8, 16], mlps=[[0, 16], [0, 32]])
        >>> new_xyz, feats = sa(torch.rand(2, 128, 3))
        >>> new_xyz.shape, feats.shape
        (torch.Size([2, 16, 3]), torch.Size([2, 48, 16]))
    """

    def __init__(self, npoint, radii, nsamples, mlps, bn=True, use_xyz=True):
        super().__init__()
        if not len(radii) == len(nsamples) == len(mlps):
            raise ValueError(
                f"PointnetSAModuleMSG: radii, nsamples and mlps must have equal lengths, got "
                f"{len(radii)}, {len(nsamples)} and {len(mlps)}"
            )
        self.npoint = npoint
        self.groupers = nn.ModuleList()
        self.mlps = nn.ModuleList()
        for radius, nsample, spec in zip(radii, nsamples, mlps):
            self.groupers.append(
                _ops.QueryAndGroup(radius, nsample, use_xyz=use_xyz) if npoint is not None else _ops.GroupAll(use_xyz)
            )
            if use_xyz:
                spec[0] += 3  # the original's in-place update, kept: configs rely on it
            self.mlps.append(build_shared_mlp(spec, bn))


class PointnetSAModule(PointnetSAModuleMSG):
    """Single-scale set abstraction: :class:`PointnetSAModuleMSG` with one radius.

    Args:
        mlp: the MLP channel list (``mlp[0]`` = input feature channels; +3 in place when ``use_xyz``).
        npoint: number of centres, or None to group everything into one ball.
        radius: the ball radius.
        nsample: points per ball.
        bn: batch norm in the MLP.
        use_xyz: feed the relative coordinates to the MLP too.

    Raises:
        ValueError: (from ``forward``) the errors of the ops underneath.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pointnet2_modules import PointnetSAModule
        >>> sa = PointnetSAModule(mlp=[3, 32], npoint=16, radius=0.3, nsample=8)
        >>> new_xyz, feats = sa(torch.rand(2, 128, 3), torch.rand(2, 3, 128))
        >>> feats.shape
        torch.Size([2, 32, 16])
    """

    def __init__(self, mlp, npoint=None, radius=None, nsample=None, bn=True, use_xyz=True):
        super().__init__(mlps=[mlp], npoint=npoint, radii=[radius], nsamples=[nsample], bn=bn, use_xyz=use_xyz)


class PointnetFPModule(nn.Module):
    """Feature propagation: inverse-distance interpolation from the 3 nearest known points, then an MLP.

    ``forward(unknown (B,n,3), known (B,m,3) or None, unknow_feats (B,C1,n) or None,
    known_feats (B,C2,m))`` -> ``(B, mlp[-1], n)``.  Weights are
    ``1 / (dist + 1e-8)`` normalised, from :func:`pcgeom.compat.pointnet2_ops.three_nn`
    (no gradient through the weights, as in the original).  With ``known=None`` the known features are broadcast
    to every unknown point.

    Args:
        mlp: the MLP channel list; ``mlp[0]`` must be ``C1 + C2``.
        bn: batch norm in the MLP.

    Raises:
        ValueError: (from ``forward``) the errors of :func:`pcgeom.compat.pointnet2_ops.three_nn` and
            :func:`pcgeom.compat.pointnet2_ops.three_interpolate`.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pointnet2_modules import PointnetFPModule
        >>> fp = PointnetFPModule(mlp=[16 + 8, 32])
        >>> out = fp(torch.rand(2, 64, 3), torch.rand(2, 16, 3), torch.rand(2, 8, 64), torch.rand(2, 16, 16))
        >>> out.shape
        torch.Size([2, 32, 64])
    """

    def __init__(self, mlp, bn=True):
        super().__init__()
        self.mlp = build_shared_mlp(mlp, bn=bn)

    def forward(self, unknown, known, unknow_feats, known_feats):
        if known is not None:
            dist, idx = _ops.three_nn(unknown, known)
            recip = 1.0 / (dist + 1e-8)
            weight = recip / torch.sum(recip, dim=2, keepdim=True)
            interpolated = _ops.three_interpolate(known_feats, idx, weight)
        else:
            interpolated = known_feats.expand(*(list(known_feats.size()[0:2]) + [unknown.size(1)]))
        new = torch.cat([interpolated, unknow_feats], dim=1) if unknow_feats is not None else interpolated
        return self.mlp(new.unsqueeze(-1)).squeeze(-1)
