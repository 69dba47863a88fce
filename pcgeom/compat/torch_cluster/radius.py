"""``torch_cluster.radius``: ``radius`` and ``radius_graph`` (torch_cluster 1.6.3 ``radius.py``)."""

from typing import Optional

import torch
from torch import Tensor

from pcgeom.compat.torch_cluster._common import (ORDERS, as_2d, as_float, cloud_offsets, count_clouds, empty_edges,
                                                 padded_clouds)
from pcgeom.ops import ball_query as _ball_query

__all__ = ["radius", "radius_graph"]


def _query_offsets(rows: Tensor, yo: Tensor) -> Tensor:
    """End offsets of the sub-queries ``rows`` (ascending global query rows) per cloud."""
    cloud = torch.searchsorted(yo, rows, right=True)
    return torch.cumsum(torch.bincount(cloud, minlength=yo.shape[0]), 0)


def _index_order_rows(x: Tensor, y: Tensor, r: float, r2: float, xo: Tensor, yo: Tensor, rows: Tensor, k: int,
                      cap: int, longest: int, ignore_same_index: bool) -> Tensor:
    """The first ``cap`` points strictly inside the ball of each query ``rows``, in index order: ``(R, cap)``, -1 padded.

    The kernel's ball is inclusive (dist2 <= r2), torch_cluster's is open:
    a query whose k slots are all filled but keeps fewer than ``cap`` is asked
    again with a doubled k until it keeps ``cap`` or has seen its whole cloud.
    The first ask uses ``k``.
    """
    out = torch.full((rows.shape[0], cap), -1, dtype=torch.long, device=x.device)
    at = torch.arange(rows.shape[0], device=x.device)  # rows still asked, as positions in ``out``
    while True:
        sub = rows.index_select(0, at)
        d2, idx = _ball_query(y.index_select(0, sub), x, r, k, query_offsets=_query_offsets(sub, yo),
                              points_offsets=xo, order="index")
        keep = d2 < r2
        if ignore_same_index:
            keep &= idx != sub[:, None]
        pos = torch.cumsum(keep, 1) - 1
        keep &= pos < cap
        out.index_put_((at[:, None].expand_as(idx)[keep], pos[keep]), idx[keep])
        again = (idx[:, -1] >= 0) & (keep.sum(1) < cap) if k < longest else torch.zeros_like(keep[:, 0])
        if not bool(again.any()):
            return out
        at = at[again]
        k = min(2 * k, longest)


def radius_offsets(x: Tensor, y: Tensor, r: float, xo: Tensor, yo: Tensor, cap: int,
                   ignore_same_index: bool, order: str, flip: bool = False) -> Tensor:
    """The edges ``[y index, x index]`` of torch_cluster's radius, on cumulative end offsets.

    ``flip``: return ``[x index, y index]`` instead (radius_graph's
    source-to-target flow, without a copy of the edges).
    """
    if order not in ORDERS:
        raise ValueError(f"radius: order must be one of {ORDERS}, got {order!r}")
    if x.numel() == 0 or y.numel() == 0 or cap <= 0:
        return empty_edges(x.device)
    same = y is x
    x = as_float(as_2d(x))
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    x = x.contiguous()
    y = x if same else as_float(as_2d(y)).to(x.dtype).contiguous()
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"radius: x and y must have the same number of columns, got {x.shape[1]} and {y.shape[1]}")
    r = float(r)
    if not r >= 0:
        raise ValueError(f"radius: r must be >= 0, got {r}")
    r2 = r * r
    n_x = torch.diff(xo, prepend=xo.new_zeros(1))
    longest = int(n_x.max())
    if longest == 0:
        return empty_edges(x.device)
    # The kernel's ball is inclusive (dist2 <= r2); torch_cluster's is open.
    # Nearest first, boundary points sort last, so dropping them never hides a
    # point strictly inside; in index order they can (see _index_order_rows).
    # On the CPU pcgeom's index-order kernel runs on the KD-tree and is the
    # fast path.  Elsewhere index order starts with the (much faster there)
    # nearest-first kernel: a query whose last slot stays empty got its whole
    # ball, and its index-order answer is that ball sorted by index; only full
    # balls are asked again in index order.
    k = min(cap + int(ignore_same_index), longest)
    mode = "index" if order == "index" and x.device.type == "cpu" else "distance"
    # The padded (B, max cloud, F) form of the kernel: its local indices are
    # shifted to global ones on the kept edges only, and equal-sized clouds in
    # order pad as a view (no copy in, and none of the packed form's copies out).
    xs, ys = xo - n_x, yo - torch.diff(yo, prepend=yo.new_zeros(1))
    xp, x_tiles = padded_clouds(x, xs, n_x, longest)
    if same and torch.equal(xo, yo):
        yp, ny, ny_max, y_tiles = xp, n_x, longest, x_tiles  # one tensor: the kernel's self-query grouping
    else:
        ny = yo - ys
        ny_max = int(ny.max())
        yp, y_tiles = padded_clouds(y, ys, ny, ny_max)
    B = xo.shape[0]
    d2, idx = _ball_query(yp, xp, r, k, query_lengths=ny, points_lengths=n_x, order=mode)
    d2, idx = d2.view(B * ny_max, k), idx.view(B * ny_max, k)
    slot = torch.arange(ny_max, device=x.device)
    row_of = (ys[:, None] + slot).view(-1)  # global y row of each padded row (past a cloud's end: unused)
    shift = xs.repeat_interleave(ny_max)  # its cloud's first x row
    if order == "index" and mode == "distance":
        big = longest
        key, perm = torch.where(idx >= 0, idx, big).sort(dim=1)
        idx, d2 = torch.where(key < big, key, -1), d2.gather(1, perm)
    keep = d2 < r2  # padding slots hold +inf
    if ignore_same_index:
        keep &= idx != (row_of - shift)[:, None]
    # Only a full row can keep more than ``cap`` (k = cap + 1 when the query
    # itself is skipped) or, in index order, fewer than its ball holds.
    full = (idx[:, -1] >= 0).nonzero().squeeze(1)
    if full.numel():
        kf = keep.index_select(0, full)
        if k > cap:
            kf &= torch.cumsum(kf, 1) <= cap
            keep.index_copy_(0, full, kf)
        if order == "index" and k < longest:
            # in index order: a full row that kept fewer than ``cap``
            # (distance pass: any full row, first with the same k) is asked again
            redo = full if mode == "distance" else full[kf.sum(1) < cap]
            if redo.numel():
                k2 = k if mode == "distance" else min(2 * k, longest)
                got = _index_order_rows(x, y, r, r2, xo, yo, row_of[redo], k2, cap, longest, ignore_same_index)
                got = torch.where(got >= 0, got - shift[redo][:, None], -1)  # to local
                idx.index_copy_(0, redo, torch.cat([got, got.new_full((got.shape[0], k - cap), -1)], 1)
                                if k > cap else got)
                keep.index_copy_(0, redo, idx.index_select(0, redo) >= 0)
    flat = keep.view(-1).nonzero().squeeze(1)
    out = torch.empty(2, flat.shape[0], dtype=torch.long, device=x.device)
    r_at, c_at = (1, 0) if flip else (0, 1)
    if y_tiles:  # padded row = global y row
        prow = torch.div(flat, k, rounding_mode="floor", out=out[r_at])
    else:
        prow = torch.div(flat, k, rounding_mode="floor")
        torch.index_select(row_of, 0, prow, out=out[r_at])
    torch.index_select(idx.view(-1), 0, flat, out=out[c_at])
    out[c_at] += shift.index_select(0, prow)
    return out



@torch.jit.ignore
def _radius_impl(x: Tensor, y: Tensor, r: float, batch_x: Optional[Tensor], batch_y: Optional[Tensor],
                 max_num_neighbors: int, batch_size: Optional[int], ignore_same_index: bool, order: str,
                 flip: bool = False) -> Tensor:
    if order not in ORDERS:
        raise ValueError(f"radius: order must be one of {ORDERS}, got {order!r}")
    if x.numel() == 0 or y.numel() == 0:
        return empty_edges(x.device)
    x2, y2 = as_2d(x), as_2d(y)
    B = count_clouds(batch_x, batch_y, batch_size)
    xo = cloud_offsets("radius", "batch_x", batch_x, x2.shape[0], x.device, B)
    yo = cloud_offsets("radius", "batch_y", batch_y, y2.shape[0], x.device, B)
    return radius_offsets(x2, x2 if y is x else y2, r, xo, yo, int(max_num_neighbors), ignore_same_index, order,
                          flip)


def radius(x: Tensor, y: Tensor, r: float, batch_x: Optional[Tensor] = None, batch_y: Optional[Tensor] = None,
           max_num_neighbors: int = 32, num_workers: int = 1, batch_size: Optional[int] = None,
           ignore_same_index: bool = False, order: str = "index") -> Tensor:
    """For each row of ``y`` the rows of ``x`` of the same cloud closer than ``r``.

    Args:
        x: ``(N, F)`` (or ``(N,)``) points searched.
        y: ``(M, F)`` (or ``(M,)``) queries.
        r: radius; ``x_j`` is a neighbour of ``y_i`` when ``|x_j - y_i|**2 < r*r``
            (open ball, ``r*r`` rounded to the input dtype, as torch_cluster).
        batch_x: optional sorted int cloud id of each row of ``x``.
        batch_y: optional sorted int cloud id of each row of ``y``.
        max_num_neighbors: at most this many neighbours per query.
        num_workers: ignored.
        batch_size: the number of clouds; computed when None.
        ignore_same_index: skip ``x_i`` for ``y_i`` (same row index).
        order: which neighbours a full ball keeps: ``"index"`` (default) the
            first ``max_num_neighbors`` in index order, as torch_cluster's CUDA
            kernel; ``"distance"`` the nearest ones, ties to the lower index
            (pcgeom's rule).  torch_cluster's CPU build keeps KD-tree visit order.

    Returns:
        ``edge_index (2, E)`` int64 ``[y index, x index]``, grouped by ``y``
        ascending; within a query in increasing index (``"index"``) or nearest
        first (``"distance"``).

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_cluster import radius
        >>> x = torch.tensor([[0.0], [0.9], [0.3], [0.5]])
        >>> radius(x, x[:1], 1.0, max_num_neighbors=2).tolist()
        [[0, 0], [0, 1]]
        >>> radius(x, x[:1], 1.0, max_num_neighbors=2, order="distance").tolist()
        [[0, 0], [0, 2]]
    """
    return _radius_impl(x, y, r, batch_x, batch_y, max_num_neighbors, batch_size, ignore_same_index, order, False)


@torch.jit.ignore
def _radius_graph_impl(x: Tensor, r: float, batch: Optional[Tensor], loop: bool, max_num_neighbors: int,
                       flow: str, batch_size: Optional[int], order: str) -> Tensor:
    if flow not in ("source_to_target", "target_to_source"):
        raise ValueError(f"radius_graph: flow must be 'source_to_target' or 'target_to_source', got {flow!r}")
    return _radius_impl(x, x, r, batch, batch, max_num_neighbors, batch_size, not loop, order,
                        flow == "source_to_target")


def radius_graph(x: Tensor, r: float, batch: Optional[Tensor] = None, loop: bool = False,
                 max_num_neighbors: int = 32, flow: str = "source_to_target", num_workers: int = 1,
                 batch_size: Optional[int] = None, order: str = "index") -> Tensor:
    """Edges to the nodes of the same cloud closer than ``r`` (see :func:`radius`).

    Args:
        x: ``(N, F)`` node positions.
        r: radius (open ball, ``dist2 < r*r``).
        batch: optional sorted int ``(N,)`` cloud ids.
        loop: include the node itself (default False).
        max_num_neighbors: at most this many neighbours per node (the node
            itself not counted when ``loop=False``).
        flow: ``"source_to_target"`` (``[neighbour, centre]``) or ``"target_to_source"``.
        num_workers: ignored.
        batch_size: the number of clouds; computed when None.
        order: ``"index"`` (torch_cluster CUDA: first in index order) or
            ``"distance"`` (nearest first).

    Returns:
        ``edge_index (2, E)`` int64 grouped by centre node ascending.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_cluster import radius_graph
        >>> radius_graph(torch.tensor([[0.0], [1.0], [3.0]]), 1.5).tolist()
        [[1, 0], [0, 1]]
    """
    return _radius_graph_impl(x, r, batch, loop, max_num_neighbors, flow, batch_size, order)
