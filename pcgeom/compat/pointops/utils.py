"""``pointops.utils``: the query-and-group helpers and offset conversions (Pointcept ``libs/pointops/functions/utils.py``)."""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom.compat.pointops._common import check_feat, check_idx, check_nsample, check_xyz, same_device
from pcgeom.compat.pointops.grouping import grouping
from pcgeom.compat.pointops.query import ball_query, knn_query
from pcgeom.ops.packed import offsets_arg
from pcgeom.packed_features import batch_to_offsets, offsets_to_batch

__all__ = ["knn_query_and_group", "ball_query_and_group", "query_and_group", "offset2batch", "batch2offset"]


def knn_query_and_group(feat, xyz, offset=None, new_xyz=None, new_offset=None, idx=None, nsample=None,
                        with_xyz=False):
    """:func:`knn_query` (unless ``idx`` is given) followed by :func:`grouping`.

    Args:
        feat: ``(n, c)`` features.
        xyz: ``(n, 3)`` coordinates.
        offset: int ``(b,)`` cumulative end offsets of ``xyz`` (``None``: one cloud).
        new_xyz: ``(m, 3)`` query coordinates (default: ``xyz`` itself).
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``
            (default: self-query).
        idx: precomputed ``(m, nsample)`` indices, or ``None``.
        nsample: neighbours to query (required without ``idx``).
        with_xyz: prepend the relative coordinates.

    Returns:
        ``(grouped (m, nsample, [3 +] c), idx (m, nsample) int32)``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [1, 0, 0]])
        >>> g, idx = pointops.knn_query_and_group(torch.tensor([[1.0], [2.0]]), xyz, torch.tensor([2]), nsample=2)
        >>> g[:, :, 0].tolist(), idx.tolist()
        ([[1.0, 2.0], [2.0, 1.0]], [[0, 1], [1, 0]])
    """
    if idx is None:
        if nsample is None:
            raise ValueError("knn_query_and_group: nsample is required when idx is None")
        idx, _ = knn_query(nsample, xyz, offset, new_xyz, new_offset)
    return grouping(idx, feat, xyz, new_xyz, with_xyz), idx


def ball_query_and_group(feat, xyz, offset=None, new_xyz=None, new_offset=None, idx=None, max_radio=None,
                         min_radio=0, nsample=None, with_xyz=False):
    """:func:`ball_query` (unless ``idx`` is given) followed by :func:`grouping`.

    Args:
        feat: ``(n, c)`` features, as in :func:`knn_query_and_group`.
        xyz: ``(n, 3)`` coordinates, as in :func:`knn_query_and_group`.
        offset: int ``(b,)`` cumulative end offsets of ``xyz`` (required
            without ``idx``).
        new_xyz: ``(m, 3)`` query coordinates (default: ``xyz`` itself), as in
            :func:`knn_query_and_group`.
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``
            (default: self-query), as in :func:`knn_query_and_group`.
        idx: precomputed ``(m, nsample)`` indices, or ``None``, as in
            :func:`knn_query_and_group`.
        max_radio: the ball's outer radius, ``max_radius`` of :func:`ball_query`
            (the original's spelling; required without ``idx``).
        min_radio: the ball's inner radius, ``min_radius`` of :func:`ball_query`
            (the original's spelling; default 0).
        nsample: neighbours to keep (required without ``idx``).
        with_xyz: prepend the relative coordinates, as in
            :func:`knn_query_and_group`.

    Returns:
        ``(grouped (m, nsample, [3 +] c), idx (m, nsample) int32)``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [1, 0, 0], [5, 0, 0]])
        >>> _, idx = pointops.ball_query_and_group(torch.ones(3, 1), xyz, torch.tensor([3]), max_radio=2.0, nsample=2)
        >>> idx.tolist()
        [[0, 1], [1, 0], [2, -1]]
    """
    fn = "ball_query_and_group"
    if idx is None:
        if nsample is None or offset is None or max_radio is None or min_radio is None:
            raise ValueError(f"{fn}: nsample, offset, max_radio and min_radio are required when idx is None")
        idx, _ = ball_query(nsample, max_radio, min_radio, xyz, offset, new_xyz, new_offset)
    return grouping(idx, feat, xyz, new_xyz, with_xyz), idx


def query_and_group(nsample, xyz, new_xyz, feat, idx, offset, new_offset, dilation=0, with_feat=True,
                    with_xyz=True):
    """The original's dilated KNN grouping (``functions/utils.py``), without its loop over clouds.

    Without ``idx``, queries ``1 + (nsample - 1) * (dilation + 1)`` neighbours
    and keeps every ``(dilation + 1)``-th; a cloud with fewer points spreads
    its ``nsample`` picks with the original's "soft dilation"
    ``(n_b - 1) / (nsample - 1) - 1`` (column ``int((soft + 1) * i)``).  The
    gathers are the original's plain indexing: an ``idx = -1`` slot reads the
    **last** row of ``xyz`` / ``feat`` (Python's negative index).

    Args:
        nsample: int >= 1.
        xyz: ``(n, 3)`` coordinates.
        new_xyz: ``(m, 3)`` query coordinates, or ``None`` (= ``xyz``).
        feat: ``(n, c)`` features (may be ``None`` with ``with_feat=False``).
        idx: precomputed ``(m, nsample)`` indices, or ``None``.
        offset: int ``(b,)`` cumulative end offsets of ``xyz``.
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``.
        dilation: int >= 0.
        with_feat: ``False`` returns only ``idx``.
        with_xyz: prepend ``xyz[idx] - new_xyz``.

    Returns:
        ``idx`` (with ``with_feat=False``), else ``(grouped (m, nsample, [3 +] c), idx)``;
        differentiable w.r.t. ``xyz``, ``new_xyz`` and ``feat``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.arange(6.0)[:, None] * torch.tensor([[1.0, 0, 0]])
        >>> off = torch.tensor([6])
        >>> pointops.query_and_group(2, xyz, xyz, None, None, off, off, dilation=1, with_feat=False).tolist()[0]
        [0, 2]
    """
    fn = "query_and_group"
    nsample = check_nsample(fn, nsample)
    if new_xyz is None:
        new_xyz = xyz
    dilation = V.check_int(fn, "dilation", dilation, minimum=0)
    if idx is None:
        total = 1 + (nsample - 1) * (dilation + 1)
        idx_nd, _ = knn_query(total, xyz, offset, new_xyz, new_offset)
        with torch.no_grad():
            off = offsets_arg(fn, "offset", offset, xyz.shape[0], xyz.device)
            new_off = offsets_arg(fn, "new_offset", new_offset, new_xyz.shape[0], xyz.device)
            nb = torch.diff(off, prepend=off.new_zeros(1))[offsets_to_batch(new_off, new_xyz.shape[0])]
            i = torch.arange(nsample, device=xyz.device, dtype=torch.float64)
            if nsample == 1:
                cols = torch.zeros((new_xyz.shape[0], 1), dtype=torch.int64, device=xyz.device)
            else:
                soft = (nb.to(torch.float64) - 1) / (nsample - 1) - 1
                step = torch.where(nb < total, soft + 1, torch.full_like(soft, float(dilation + 1)))
                cols = torch.trunc(step[:, None] * i[None, :]).long()
            idx = torch.gather(idx_nd, 1, cols)
    else:
        check_idx(fn, "idx", idx, new_xyz.shape[0], xyz.shape[0], xyz.device)
    if not with_feat:
        return idx
    check_xyz(fn, "xyz", xyz)
    check_xyz(fn, "new_xyz", new_xyz)
    check_feat(fn, "feat", feat, xyz.shape[0])
    same_device(fn, "xyz", xyz, new_xyz=new_xyz, feat=feat)
    li = idx.long()
    li = torch.where(li < 0, li + xyz.shape[0], li)  # Python's negative index, as the original
    m = new_xyz.shape[0]
    grouped_xyz = xyz.index_select(0, li.reshape(-1)).view(m, nsample, 3) - new_xyz.unsqueeze(1)
    grouped_feat = feat.index_select(0, li.reshape(-1)).view(m, nsample, feat.shape[1])
    if with_xyz:
        return torch.cat((grouped_xyz, grouped_feat), -1), idx
    return grouped_feat, idx


def offset2batch(offset):
    """Cumulative end offsets ``(b,)`` -> per-row cloud ids ``(n,)`` int64 (:func:`pcgeom.offsets_to_batch`).

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> pointops.offset2batch(torch.tensor([2, 3], dtype=torch.int32)).tolist()
        [0, 0, 1]
    """
    return offsets_to_batch(offset)


def batch2offset(batch):
    """Per-row cloud ids ``(n,)`` -> cumulative end offsets ``(b,)`` **int32**, as the original.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> pointops.batch2offset(torch.tensor([0, 0, 1])).tolist()
        [2, 3]
    """
    return batch_to_offsets(batch).int()
