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
    """1x1 ``Conv2d`` (+ ``BatchNorm2d``) + ``ReLU`` per layer, as the original lays them out."""
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

    Args:
        npoint: number of centres, or None to group everything (``GroupAll``).
        radii, nsamples, mlps: per scale, the ball radius, the points per ball
            and the MLP channel list (``mlps[i][0]`` = input feature channels).
        bn: batch norm in the MLPs.  use_xyz: feed the relative coordinates too.
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
    """Single-scale set abstraction: ``PointnetSAModule(mlp, npoint=None, radius=None, nsample=None, bn=True, use_xyz=True)``."""

    def __init__(self, mlp, npoint=None, radius=None, nsample=None, bn=True, use_xyz=True):
        super().__init__(mlps=[mlp], npoint=npoint, radii=[radius], nsamples=[nsample], bn=bn, use_xyz=use_xyz)


class PointnetFPModule(nn.Module):
    """Feature propagation: inverse-distance interpolation from the 3 nearest known points, then an MLP.

    ``forward(unknown (B,n,3), known (B,m,3) or None, unknow_feats (B,C1,n) or None,
    known_feats (B,C2,m))`` -> ``(B, mlp[-1], n)``.  Weights are
    ``1 / (dist + 1e-8)`` normalised, from :func:`pcgeom.compat.pointnet2_ops.three_nn`
    (no gradient through the weights, as in the original).
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
