"""``pointops.grouping``: ``grouping``, ``grouping2`` (Pointcept ``libs/pointops/functions/grouping.py``)."""

from __future__ import annotations

from pcgeom.compat.pointops._common import check_feat, check_idx, check_xyz, same_device
from pcgeom.packed_features import group_packed

__all__ = ["grouping", "grouping2"]


def grouping(idx, feat, xyz, new_xyz=None, with_xyz=False):
    """Gathers the neighbours' features (and relative coordinates): the original's pure-torch helper.

    Args:
        idx: ``(m, nsample)`` int32/int64 rows of ``feat`` / ``xyz`` in ``[-1, n)``.
        feat: ``(n, c)`` floating features.
        xyz: ``(n, 3)`` coordinates.
        new_xyz: ``(m, 3)`` centres (default ``xyz``).
        with_xyz: prepend ``xyz[idx] - new_xyz`` (zeros at ``-1``).

    Returns:
        ``(m, nsample, c)`` or ``(m, nsample, 3 + c)``, zeros at ``idx = -1``;
        differentiable w.r.t. ``feat``, ``xyz`` and ``new_xyz``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [1, 0, 0]])
        >>> feat = torch.tensor([[5.0], [7.0]])
        >>> pointops.grouping(torch.tensor([[1, -1]], dtype=torch.int32), feat, xyz, xyz[:1], with_xyz=True).tolist()
        [[[1.0, 0.0, 0.0, 7.0], [0.0, 0.0, 0.0, 0.0]]]
    """
    fn = "grouping"
    if new_xyz is None:
        new_xyz = xyz
    check_xyz(fn, "xyz", xyz)
    check_feat(fn, "feat", feat, xyz.shape[0])
    same_device(fn, "feat", feat, xyz=xyz)
    if with_xyz:
        check_xyz(fn, "new_xyz", new_xyz)
        same_device(fn, "feat", feat, new_xyz=new_xyz)
    idx = check_idx(fn, "idx", idx, new_xyz.shape[0] if with_xyz else None, feat.shape[0], feat.device)
    if with_xyz:
        return group_packed(feat, idx, points=xyz, centers=new_xyz)
    return group_packed(feat, idx)


def grouping2(input, idx):
    """The autograd-Function form: ``input[idx]`` ``(m, nsample, c)``, zeros at ``idx = -1``.

    Args:
        input: ``(n, c)`` floating features.
        idx: ``(m, nsample)`` int32/int64 rows in ``[-1, n)``.

    Returns:
        ``(m, nsample, c)``, differentiable w.r.t. ``input``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> pointops.grouping2(torch.tensor([[1.0], [2.0]]), torch.tensor([[1, 0]], dtype=torch.int32)).tolist()
        [[[2.0], [1.0]]]
    """
    fn = "grouping2"
    check_feat(fn, "input", input)
    idx = check_idx(fn, "idx", idx, None, input.shape[0], input.device)
    return group_packed(input, idx)
