"""``pointops.interpolation``: ``interpolation``, ``interpolation2`` (Pointcept ``libs/pointops/functions/interpolation.py``)."""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom.compat.pointops._common import check_feat, check_xyz, same_device
from pcgeom.compat.pointops.query import knn_query
from pcgeom.ops import knn_gather as _knn_gather

__all__ = ["interpolation", "interpolation2"]


def _interp_weights(k, xyz, new_xyz, offset, new_offset, fn):
    k = V.check_int(fn, "k", k, minimum=1)
    idx, dist = knn_query(k, xyz, offset, new_xyz, new_offset)
    recip = 1.0 / (dist + 1e-8)
    return idx.long(), recip / torch.sum(recip, dim=1, keepdim=True)


def _check_interp(fn, xyz, new_xyz, feat, name):
    check_xyz(fn, "xyz", xyz)
    check_xyz(fn, "new_xyz", new_xyz)
    check_feat(fn, name, feat, xyz.shape[0], "(n, c) with the rows of xyz")
    same_device(fn, "xyz", xyz, new_xyz=new_xyz, **{name: feat})


def interpolation(xyz, new_xyz, feat, offset, new_offset, k=3):
    """Features at ``new_xyz`` from the ``k`` nearest ``xyz`` rows of the same cloud.

    ``w_j = (1/(d_j + 1e-8)) / sum_i 1/(d_i + 1e-8)`` on :func:`knn_query`'s
    Euclidean distances, ``out = sum_j w_j feat[idx_j]`` -- the original's
    pure-torch code, including its reading of Python's ``feat[-1]`` (the last
    row) for an ``idx = -1`` slot, weighted by the ``1e5`` padding distance.

    Args:
        xyz: ``(n, 3)`` coordinates where ``feat`` is known, packed by ``offset``.
        new_xyz: ``(m, 3)`` coordinates where features are wanted, packed by ``new_offset``.
        feat: ``(n, c)`` floating features.
        offset: int ``(b,)`` cumulative end offsets of ``xyz``.
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``.
        k: neighbours to blend (default 3).

    Returns:
        ``(m, c)`` (float32 for float16/bfloat16/float32 features), differentiable
        w.r.t. ``feat``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [2, 0, 0]])
        >>> feat = torch.tensor([[0.0], [10.0]])
        >>> out = pointops.interpolation(xyz, torch.tensor([[0.5, 0, 0]]), feat,
        ...                              torch.tensor([2]), torch.tensor([1]), k=2)
        >>> round(out.item(), 4)
        2.5
    """
    fn = "interpolation"
    _check_interp(fn, xyz, new_xyz, feat, "feat")
    with torch.no_grad():
        idx, weight = _interp_weights(k, xyz, new_xyz, offset, new_offset, fn)
        idx = torch.where(idx < 0, idx + feat.shape[0], idx)  # Python's feat[-1]
    if feat.shape[1] == 0 or new_xyz.shape[0] == 0:
        return feat.new_zeros((new_xyz.shape[0], feat.shape[1]), dtype=torch.promote_types(feat.dtype, torch.float32))
    g = _knn_gather(feat[None], idx[None])[0]
    return (g * weight.unsqueeze(-1)).sum(dim=1)


def interpolation2(xyz, new_xyz, input, offset, new_offset, k=3):
    """The autograd-Function form of :func:`interpolation`; ``idx = -1`` slots contribute 0.

    Args:
        xyz: ``(n, 3)`` coordinates where ``input`` is known, packed by ``offset``.
        new_xyz: ``(m, 3)`` coordinates where features are wanted, packed by ``new_offset``.
        input: ``(n, c)`` floating features.
        offset: int ``(b,)`` cumulative end offsets of ``xyz``.
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``.
        k: neighbours to blend (default 3).

    Returns:
        ``(m, c)``, differentiable w.r.t. ``input`` only (as the original).

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [2, 0, 0]])
        >>> out = pointops.interpolation2(xyz, xyz[:1], torch.tensor([[1.0], [3.0]]),
        ...                               torch.tensor([2]), torch.tensor([1]), 3)
        >>> round(out.item(), 4)   # the third neighbour is missing
        1.0
    """
    fn = "interpolation2"
    _check_interp(fn, xyz, new_xyz, input, "input")
    with torch.no_grad():
        idx, weight = _interp_weights(k, xyz, new_xyz, offset, new_offset, fn)
    if input.shape[1] == 0 or new_xyz.shape[0] == 0:
        return input.new_zeros((new_xyz.shape[0], input.shape[1]), dtype=torch.promote_types(input.dtype, torch.float32))
    g = _knn_gather(input[None], idx[None])[0]
    return (g * weight.unsqueeze(-1)).sum(dim=1)
