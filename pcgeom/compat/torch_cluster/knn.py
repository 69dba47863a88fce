"""``torch_cluster.knn``: ``knn`` and ``knn_graph`` (torch_cluster 1.6.3 ``knn.py``)."""

from typing import Optional

import torch
from torch import Tensor

from pcgeom.compat.torch_cluster._common import (as_2d, as_float, cloud_offsets, count_clouds, empty_edges, normalise,
                                                 padded_clouds)
from pcgeom.graph import knn_graph as _pc_knn_graph
from pcgeom.ops import knn as _knn
from pcgeom.ops.packed import starts_lengths, unpad, unpad_rows, offsets_arg

__all__ = ["knn", "knn_graph"]


def _search_inputs(x: Tensor, y: Tensor, cosine: bool):
    """torch_cluster's coercions: 2-D rows, a floating dtype, ``y`` in ``x``'s dtype, unit rows for cosine."""
    x, y = as_float(as_2d(x)), as_float(as_2d(y))
    if y.dtype != x.dtype:
        y = y.to(x.dtype)
    if cosine:
        x, y = normalise(x), normalise(y)
    return x, y


def knn_offsets(x: Tensor, y: Tensor, k: int, xo: Tensor, yo: Tensor, cosine: bool) -> Tensor:
    if x.numel() == 0 or y.numel() == 0:
        return empty_edges(x.device)
    x, y = _search_inputs(x, y, cosine)
    if not (torch.jit.is_tracing() or torch.compiler.is_compiling()):
        return _knn_offsets_eager(x.contiguous(), y.contiguous(), k, xo, yo, y is x)
    _, idx = _knn(y.contiguous(), x.contiguous(), k, query_offsets=yo, points_offsets=xo)
    keep = idx >= 0
    row = torch.arange(idx.shape[0], device=idx.device)[:, None].expand_as(idx)
    return torch.stack([row[keep], idx[keep]], 0)


def _knn_offsets_eager(x: Tensor, y: Tensor, k: int, xo: Tensor, yo: Tensor, same: bool) -> Tensor:
    """``knn_offsets`` in eager mode: the padded kernel, and the edge list written once.

    The packed form (``pcgeom.knn`` with offsets) pads, unpads dist2 and idx
    and masks the ``-1`` slots: about as much time as the search itself on
    PyG's batches (8 x 50k points).  Here equal-sized clouds pad as a view,
    dist2 is never copied, and when every cloud of ``x`` holds ``k`` points no
    slot is ``-1`` (NaN points keep their indices, ranked last), so the edges
    are the index matrix read row by row, shifted to global rows -- no mask.
    """
    # The checks the packed form makes (torch_cluster's ptr_offsets leaves the values to them); a few
    # microseconds on B offsets.
    xo = offsets_arg("knn", "points_offsets", xo, x.shape[0], x.device)
    yo = offsets_arg("knn", "query_offsets", yo, y.shape[0], x.device)
    if xo.shape[0] != yo.shape[0]:
        raise ValueError(f"knn: query_offsets and points_offsets must list the same number of clouds, got "
                         f"{yo.shape[0]} and {xo.shape[0]}")
    B = xo.shape[0]
    xs, nx = starts_lengths(xo)
    ys, ny = starts_lengths(yo)
    # the padded shapes and the no-mask test, in one host sync
    longest, ny_max, fewest = torch.stack([nx.max(), ny.max(), nx.min()]).tolist()
    xp, x_tiles = padded_clouds(x, xs, nx, longest)
    if same and torch.equal(xo, yo):
        yp, y_tiles = xp, x_tiles  # one tensor: the kernel's self-query grouping
    else:
        yp, y_tiles = padded_clouds(y, ys, ny, ny_max)
    _, idx = _knn(yp, xp, k, query_lengths=ny, points_lengths=nx)
    kk = idx.shape[2]
    M = y.shape[0]
    if fewest < kk:  # some slots are -1: the masked form
        rows = idx.view(B * ny_max, kk) if y_tiles else unpad(idx, yo, M)
        rows = rows.view(M, kk)
        keep = rows >= 0
        b = torch.searchsorted(yo, torch.arange(M, device=x.device), right=True)
        glob = rows + xs.index_select(0, b)[:, None]
        row = torch.arange(M, device=x.device)[:, None].expand_as(rows)
        return torch.stack([row[keep], glob[keep]], 0)
    out = torch.empty(2, M * kk, dtype=torch.long, device=x.device)
    out[0].view(M, kk).copy_(torch.arange(M, device=x.device)[:, None].expand(M, kk))
    if y_tiles:  # padded row = global y row
        torch.add(idx, xs.view(B, 1, 1), out=out[1].view(B, ny_max, kk))
    else:
        b, prow = unpad_rows(yo, M, ny_max)
        torch.index_select(idx.view(B * ny_max, kk), 0, prow, out=out[1].view(M, kk))
        out[1].view(M, kk).add_(xs.index_select(0, b)[:, None])
    return out


def one_cloud_knn(x: Tensor, y: Tensor, k: int, cosine: bool) -> Tensor:
    """``knn_offsets`` for one cloud: every one of the first ``min(k, N)`` slots holds a point.

    The padded op leaves no ``-1`` in one cloud of ``N >= min(k, N)`` points
    (NaN points keep their indices, ranked last), so the edge list is the index
    matrix read row by row -- the same edges as the masked packed form, with a
    size known from the shapes alone, which is what lets a traced or exported
    model (PyG's ``DynamicEdgeConv`` on one cloud) carry on with static shapes.
    """
    x, y = _search_inputs(x, y, cosine)
    _, idx = _knn(y.contiguous()[None], x.contiguous()[None], k)
    # sym_min, not min: traced, the point count is symbolic and a Python min would fix the example's value
    idx = idx[0, :, : torch.sym_min(k, x.shape[0])]
    row = torch.arange(idx.shape[0], device=idx.device)[:, None].expand_as(idx)
    return torch.stack([row.reshape(-1), idx.reshape(-1)], 0)


@torch.jit.ignore
def _knn_impl(x: Tensor, y: Tensor, k: int, batch_x: Optional[Tensor], batch_y: Optional[Tensor],
              cosine: bool, batch_size: Optional[int]) -> Tensor:
    if x.numel() == 0 or y.numel() == 0:
        return empty_edges(x.device)
    if batch_x is None and batch_y is None and batch_size in (None, 1):
        return one_cloud_knn(x, y, k, cosine)
    x, y = as_2d(x), as_2d(y)
    B = count_clouds(batch_x, batch_y, batch_size)
    xo = cloud_offsets("knn", "batch_x", batch_x, x.shape[0], x.device, B)
    yo = cloud_offsets("knn", "batch_y", batch_y, y.shape[0], x.device, B)
    return knn_offsets(x, y, k, xo, yo, cosine)


def knn(x: Tensor, y: Tensor, k: int, batch_x: Optional[Tensor] = None, batch_y: Optional[Tensor] = None,
        cosine: bool = False, num_workers: int = 1, batch_size: Optional[int] = None) -> Tensor:
    """For each row of ``y`` its ``k`` nearest rows of ``x`` in the same cloud.

    Args:
        x: ``(N, F)`` (or ``(N,)``) points searched.
        y: ``(M, F)`` (or ``(M,)``) queries.
        k: neighbours per query (fewer when a cloud of ``x`` is smaller).
        batch_x: optional sorted int ``(N,)`` cloud ids of ``x``.
        batch_y: optional sorted int ``(M,)`` cloud ids of ``y``.
        cosine: rank by cosine distance instead of Euclidean (every device).
        num_workers: ignored (pcgeom's kernels use torch's thread pool).
        batch_size: the number of clouds ``B``; computed from ``batch_x`` /
            ``batch_y`` when None.

    Returns:
        ``edge_index (2, E)`` int64 ``[y index, x index]``, grouped by ``y``
        ascending, nearest first, ties to the lower index.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_cluster import knn
        >>> x = torch.tensor([[-1.0, -1], [-1, 1], [1, -1], [1, 1]])
        >>> knn(x, torch.tensor([[-1.0, 0], [1, 0]]), 2).tolist()
        [[0, 0, 1, 1], [0, 1, 2, 3]]
    """
    return _knn_impl(x, y, k, batch_x, batch_y, cosine, batch_size)


@torch.jit.ignore
def _knn_graph_impl(x: Tensor, k: int, batch: Optional[Tensor], loop: bool, flow: str, cosine: bool,
                    batch_size: Optional[int]) -> Tensor:
    if flow not in ("source_to_target", "target_to_source"):
        raise ValueError(f"knn_graph: flow must be 'source_to_target' or 'target_to_source', got {flow!r}")
    x = as_float(as_2d(x))
    if x.numel() == 0:
        return empty_edges(x.device)
    if cosine:
        x = normalise(x)
    return _pc_knn_graph(x, k, batch=batch, loop=loop, flow=flow)


def knn_graph(x: Tensor, k: int, batch: Optional[Tensor] = None, loop: bool = False,
              flow: str = "source_to_target", cosine: bool = False, num_workers: int = 1,
              batch_size: Optional[int] = None) -> Tensor:
    """Edges to the ``k`` nearest nodes of the same cloud (:func:`pcgeom.knn_graph`).

    Args:
        x: ``(N, F)`` node positions / features.
        k: neighbours per node.
        batch: optional sorted int ``(N,)`` cloud ids.
        loop: include the node itself (default False).
        flow: ``"source_to_target"`` (``[neighbour, centre]``) or ``"target_to_source"``.
        cosine: rank by cosine distance.
        num_workers: ignored.
        batch_size: ignored (the clouds come from ``batch``).

    Returns:
        ``edge_index (2, E)`` int64 grouped by centre, nearest first, ties to the lower index.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_cluster import knn_graph
        >>> knn_graph(torch.tensor([[0.0], [1.0], [3.0]]), 1).tolist()
        [[1, 0, 1], [0, 1, 2]]
    """
    return _knn_graph_impl(x, k, batch, loop, flow, cosine, batch_size)
