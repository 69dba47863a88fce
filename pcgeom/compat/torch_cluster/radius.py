"""``torch_cluster.radius``: ``radius`` and ``radius_graph`` (torch_cluster 1.6.3 ``radius.py``)."""

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from pcgeom.compat.torch_cluster._common import ORDERS, as_2d, as_float, cloud_offsets, count_clouds, empty_edges
from pcgeom.ops import ball_query as _ball_query

__all__ = ["radius", "radius_graph"]


def _query_offsets(rows: Tensor, yo: Tensor) -> Tensor:
    """End offsets of the sub-queries ``rows`` (ascending global query rows) per cloud."""
    cloud = torch.searchsorted(yo, rows, right=True)
    return torch.cumsum(torch.bincount(cloud, minlength=yo.shape[0]), 0)


def radius_offsets(x: Tensor, y: Tensor, r: float, xo: Tensor, yo: Tensor, cap: int,
                    ignore_same_index: bool, order: str) -> Tensor:
    """The edges ``[y index, x index]`` of torch_cluster's radius, on cumulative end offsets."""
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
    # point strictly inside.  In index order they can: a query whose k slots
    # are all filled but keeps fewer than ``cap`` edges is asked again with a
    # doubled k until it keeps ``cap`` or has seen its whole cloud.
    # Index order starts with the (much faster) nearest-first kernel too: a
    # query whose last slot stays empty got its whole ball, and its index-order
    # answer is that ball sorted by index; only full balls need the scan.
    k = min(cap + int(ignore_same_index), longest)
    rows: Optional[Tensor] = None  # None = every query
    mode = "distance"
    parts: List[Tuple[Tensor, Tensor]] = []
    while True:
        q = y if rows is None else y.index_select(0, rows)
        qo = yo if rows is None else _query_offsets(rows, yo)
        d2, idx = _ball_query(q, x, r, k, query_offsets=qo, points_offsets=xo, order=mode)
        row = (torch.arange(idx.shape[0], device=idx.device) if rows is None else rows)[:, None].expand_as(idx)
        filled = idx[:, -1] >= 0
        if order == "index" and mode == "distance":
            big = x.shape[0]
            key, perm = torch.where(idx >= 0, idx, big).sort(dim=1)
            idx, d2 = torch.where(key < big, key, -1), d2.gather(1, perm)
        keep = (idx >= 0) & (d2 < r2)
        if ignore_same_index:
            keep &= idx != row
        keep &= torch.cumsum(keep, 1) <= cap
        if order == "distance" or k >= longest:
            again = torch.zeros_like(filled)
        elif mode == "distance":
            again = filled  # a full ball: scan it in index order
        else:
            again = filled & (keep.sum(1) < cap)
        done = ~again
        parts.append((row[done][keep[done]], idx[done][keep[done]]))
        if not bool(again.any()):
            break
        rows = row[again, 0]
        if mode == "index":
            k = min(2 * k, longest)
        mode = "index"
    if len(parts) == 1:
        return torch.stack(parts[0], 0)
    rr = torch.cat([p[0] for p in parts])
    cc = torch.cat([p[1] for p in parts])
    perm = torch.sort(rr, stable=True).indices
    return torch.stack([rr[perm], cc[perm]], 0)


@torch.jit.ignore
def _radius_impl(x: Tensor, y: Tensor, r: float, batch_x: Optional[Tensor], batch_y: Optional[Tensor],
                 max_num_neighbors: int, batch_size: Optional[int], ignore_same_index: bool, order: str) -> Tensor:
    if order not in ORDERS:
        raise ValueError(f"radius: order must be one of {ORDERS}, got {order!r}")
    if x.numel() == 0 or y.numel() == 0:
        return empty_edges(x.device)
    x2, y2 = as_2d(x), as_2d(y)
    B = count_clouds(batch_x, batch_y, batch_size)
    xo = cloud_offsets("radius", "batch_x", batch_x, x2.shape[0], x.device, B)
    yo = cloud_offsets("radius", "batch_y", batch_y, y2.shape[0], x.device, B)
    return radius_offsets(x2, x2 if y is x else y2, r, xo, yo, int(max_num_neighbors), ignore_same_index, order)


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
    return _radius_impl(x, y, r, batch_x, batch_y, max_num_neighbors, batch_size, ignore_same_index, order)


@torch.jit.ignore
def _radius_graph_impl(x: Tensor, r: float, batch: Optional[Tensor], loop: bool, max_num_neighbors: int,
                       flow: str, batch_size: Optional[int], order: str) -> Tensor:
    if flow not in ("source_to_target", "target_to_source"):
        raise ValueError(f"radius_graph: flow must be 'source_to_target' or 'target_to_source', got {flow!r}")
    ei = _radius_impl(x, x, r, batch, batch, max_num_neighbors, batch_size, not loop, order)
    return ei.flip(0) if flow == "source_to_target" else ei


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
