"""``torch_cluster`` 1.6.3 served by pcgeom: every public name of the original
(``graclus_cluster``, ``grid_cluster``, ``fps``, ``nearest``, ``knn``,
``knn_graph``, ``radius``, ``radius_graph``, ``random_walk``,
``neighbor_sampler``, ``__version__``) with its signature and outputs, and the
``torch.ops.torch_cluster.*`` operators the original registers (PyG calls
``torch.ops.torch_cluster.random_walk`` directly), so PyG / DGCNN code that
does ``import torch_cluster`` runs unmodified and without a compiled extension.

The Python functions are TorchScript-scriptable like the originals
(``torch.jit.script(knn)`` works; the work itself runs in Python through
``torch.jit.ignore``, so scripted code calling them cannot be saved).

**Operators.**  Importing this module (the shim does it when a program imports
``torch_cluster``) registers ``torch.ops.torch_cluster.{fps, graclus, grid,
knn, nearest, radius, random_walk, neighbor_sampler, cuda_version}`` with the
original schemas -- but only when no real torch_cluster is installed and the
operator does not exist yet, so it never collides with the real extension.
``cuda_version()`` returns -1 (no compiled CUDA code).

Where torch_cluster is non-deterministic or differs between its CPU and CUDA
builds, pcgeom returns one answer on every device:

* ``radius`` / ``radius_graph``: neighbours are the points with distance
  **strictly below** ``r`` (``dist2 < r*r``, ``r*r`` rounded to the input
  dtype, as torch_cluster).  When more than ``max_num_neighbors`` qualify, the
  default ``order="index"`` keeps the **first ones in index order** -- what
  torch_cluster's CUDA kernel keeps, so models trained on GPU see the same
  neighbourhoods -- in increasing index order.  torch_cluster's CPU build keeps
  the first ones in nanoflann KD-tree visit order (neither nearest nor index
  order, and dependent on the tree).  ``order="distance"`` keeps pcgeom's
  **nearest** ones instead, ties to the lower index.  Float16 / bfloat16 inputs
  are searched in float32.
* ``knn`` / ``knn_graph``: torch_cluster's CPU path (nanoflann KD-tree) breaks
  distance ties arbitrarily and its CUDA path by scan order; pcgeom returns,
  per query in increasing order, the exact k nearest **nearest first, ties to
  the lower index**.  ``knn_graph(loop=False)`` gives every node exactly
  ``min(k, n_b - 1)`` other nodes (torch_cluster can return ``k + 1`` when more
  than ``k`` exact duplicates hide the node itself).  ``cosine=True`` ranks by
  cosine distance (both devices; torch_cluster supports it on CUDA only).
* ``fps``: ``random_start=True`` draws each cloud's start from torch's global
  generator (``torch.rand``; seed it with ``torch.manual_seed``) instead of
  C ``rand()``; the next samples follow pcgeom's rule (farthest, ties to the
  lowest index, never a point twice -- torch_cluster may repeat a point when a
  cloud has duplicates).  Sample count per cloud is ``ceil(ratio * n_b)`` as in
  torch_cluster.
* ``grid_cluster``: torch_cluster's formula exactly (voxel ``trunc((pos -
  start) / size)``, ids linearised with the first axis fastest over the box
  ``start..end``).
* ``nearest``: for each ``x`` the nearest ``y`` of the same cloud, ties to the
  lower index (torch_cluster's CPU path uses SciPy's ``vq`` on rescaled
  coordinates).
* ``graclus_cluster``: torch_cluster's CPU algorithm on every device (greedy
  heavy-edge matching over a random node order, the same ``torch.randperm``
  calls, so a seeded CPU run gives the original's clusters); torch_cluster's
  CUDA build runs a different, parallel proposal matching.
* ``random_walk``: with ``p == q == 1`` the original's uniform walk with the
  same ``torch.rand`` draws (a seeded run gives the original's walks on CPU and
  on CUDA); otherwise node2vec's rejection sampling with torch's generator (the
  original uses C ``rand()`` / time-seeded curand, and its chained acceptance
  test accepts any candidate with the ``1/q`` bound too, so for ``q < min(1,
  p)`` its walks are uniform; pcgeom accepts a return with ``1/p``, a neighbour
  of the previous node with ``1`` and any other node with ``1/q``, relative to
  their maximum, as the node2vec paper).
* ``neighbor_sampler``: ``size`` distinct neighbours per node, uniformly, from
  torch's generator, on every device (the original: CPU only, C ``rand()``).

Usage::

    import sys, pcgeom.compat.torch_cluster as tc
    sys.modules["torch_cluster"] = tc       # before PyG / your model imports it

or ``pcgeom compat enable`` / :func:`pcgeom.compat.enable_shims`.
"""


import importlib.machinery
import math
import os
from typing import List, Optional, Tuple, Union

import torch
from torch import Tensor

from pcgeom.graph import batch_to_offsets, knn_graph as _pc_knn_graph
from pcgeom.ops import ball_query as _ball_query, farthest_point_sample as _fps, knn as _knn

__version__ = "1.6.3"

__all__ = [
    "graclus_cluster", "grid_cluster", "fps", "nearest", "knn", "knn_graph", "radius", "radius_graph",
    "random_walk", "neighbor_sampler", "__version__",
]

_ORDERS = ("index", "distance")
_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _as_2d(x: Tensor) -> Tensor:
    return x.view(-1, 1) if x.dim() == 1 else x


def _n_clouds(batch_x, batch_y, batch_size):
    if batch_size is not None:
        return int(batch_size)
    b = 1
    for bt in (batch_x, batch_y):
        if bt is not None and bt.numel():
            b = max(b, int(bt.max()) + 1)
    return b


def _offsets(fn, name, batch, n, device, B):
    if isinstance(batch, torch.Tensor):
        batch = batch.contiguous()
    return batch_to_offsets(fn, name, batch, n, device, n_clouds=B)


def _ptr_offsets(fn: str, name: str, ptr: Optional[Tensor], n: int, device) -> Tensor:
    """torch_cluster's CSR ``ptr (B + 1,)`` -> pcgeom's cumulative end offsets ``(B,)``."""
    if ptr is None:
        return torch.full((1,), n, dtype=torch.int64, device=device)
    if not isinstance(ptr, torch.Tensor) or ptr.dtype not in _INT_DTYPES or ptr.dim() != 1 or ptr.shape[0] < 2:
        raise ValueError(f"{fn}: {name} must be an integer tensor of CSR boundaries [0, ..., {n}] with at least "
                         f"2 entries, got {ptr.dtype if isinstance(ptr, torch.Tensor) else type(ptr).__name__} "
                         f"of shape {tuple(ptr.shape) if isinstance(ptr, torch.Tensor) else '?'}")
    ptr = ptr.to(device=device, dtype=torch.int64)
    if int(ptr[0]) != 0:
        raise ValueError(f"{fn}: {name} must start at 0 (CSR boundaries), got {name}[0]={int(ptr[0])}")
    return ptr[1:]


def _float(x: Tensor) -> Tensor:
    return x if x.is_floating_point() else x.to(torch.get_default_dtype())


def _normalise(x: Tensor) -> Tensor:
    return x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)


def _empty_edges(device) -> Tensor:
    return torch.empty(2, 0, dtype=torch.long, device=device)


# ---------------------------------------------------------------------------
# knn / knn_graph


def _knn_offsets(x: Tensor, y: Tensor, k: int, xo: Tensor, yo: Tensor, cosine: bool) -> Tensor:
    if x.numel() == 0 or y.numel() == 0:
        return _empty_edges(x.device)
    x, y = _float(_as_2d(x)), _float(_as_2d(y))
    if y.dtype != x.dtype:
        y = y.to(x.dtype)
    if cosine:
        x, y = _normalise(x), _normalise(y)
    _, idx = _knn(y.contiguous(), x.contiguous(), k, query_offsets=yo, points_offsets=xo)
    keep = idx >= 0
    row = torch.arange(idx.shape[0], device=idx.device)[:, None].expand_as(idx)
    return torch.stack([row[keep], idx[keep]], 0)


@torch.jit.ignore
def _knn_impl(x: Tensor, y: Tensor, k: int, batch_x: Optional[Tensor], batch_y: Optional[Tensor],
              cosine: bool, batch_size: Optional[int]) -> Tensor:
    if x.numel() == 0 or y.numel() == 0:
        return _empty_edges(x.device)
    x, y = _as_2d(x), _as_2d(y)
    B = _n_clouds(batch_x, batch_y, batch_size)
    xo = _offsets("knn", "batch_x", batch_x, x.shape[0], x.device, B)
    yo = _offsets("knn", "batch_y", batch_y, y.shape[0], x.device, B)
    return _knn_offsets(x, y, k, xo, yo, cosine)


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
    x = _float(_as_2d(x))
    if x.numel() == 0:
        return _empty_edges(x.device)
    if cosine:
        x = _normalise(x)
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


# ---------------------------------------------------------------------------
# radius / radius_graph


def _query_offsets(rows: Tensor, yo: Tensor) -> Tensor:
    """End offsets of the sub-queries ``rows`` (ascending global query rows) per cloud."""
    cloud = torch.searchsorted(yo, rows, right=True)
    return torch.cumsum(torch.bincount(cloud, minlength=yo.shape[0]), 0)


def _radius_offsets(x: Tensor, y: Tensor, r: float, xo: Tensor, yo: Tensor, cap: int,
                    ignore_same_index: bool, order: str) -> Tensor:
    """The edges ``[y index, x index]`` of torch_cluster's radius, on cumulative end offsets."""
    if order not in _ORDERS:
        raise ValueError(f"radius: order must be one of {_ORDERS}, got {order!r}")
    if x.numel() == 0 or y.numel() == 0 or cap <= 0:
        return _empty_edges(x.device)
    same = y is x
    x = _float(_as_2d(x))
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    x = x.contiguous()
    y = x if same else _float(_as_2d(y)).to(x.dtype).contiguous()
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"radius: x and y must have the same number of columns, got {x.shape[1]} and {y.shape[1]}")
    r = float(r)
    if not r >= 0:
        raise ValueError(f"radius: r must be >= 0, got {r}")
    r2 = r * r
    n_x = torch.diff(xo, prepend=xo.new_zeros(1))
    longest = int(n_x.max())
    if longest == 0:
        return _empty_edges(x.device)
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
    if order not in _ORDERS:
        raise ValueError(f"radius: order must be one of {_ORDERS}, got {order!r}")
    if x.numel() == 0 or y.numel() == 0:
        return _empty_edges(x.device)
    x2, y2 = _as_2d(x), _as_2d(y)
    B = _n_clouds(batch_x, batch_y, batch_size)
    xo = _offsets("radius", "batch_x", batch_x, x2.shape[0], x.device, B)
    yo = _offsets("radius", "batch_y", batch_y, y2.shape[0], x.device, B)
    return _radius_offsets(x2, x2 if y is x else y2, r, xo, yo, int(max_num_neighbors), ignore_same_index, order)


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


# ---------------------------------------------------------------------------
# fps / grid_cluster / nearest


@torch.jit.ignore
def _fps_impl(src: Tensor, batch: Optional[Tensor], ratio: Optional[Union[Tensor, float]], random_start: bool,
              batch_size: Optional[int], ptr: Optional[Union[Tensor, List[int]]]) -> Tensor:
    src = _float(_as_2d(src))
    n = src.shape[0]
    if ptr is not None:
        ptr_t = torch.as_tensor(ptr, dtype=torch.int64, device=src.device)
        if ptr_t.dim() != 1 or ptr_t.shape[0] < 2 or int(ptr_t[0]) != 0:
            raise ValueError(f"fps: ptr must be CSR boundaries [0, ..., {n}], got {ptr_t.tolist()}")
        off = ptr_t[1:]
    elif batch is not None:
        off = batch_to_offsets("fps", "batch", batch, n, src.device,
                               n_clouds=None if batch_size is None else int(batch_size))
    else:
        off = torch.full((1,), n, dtype=torch.int64, device=src.device)
    if ratio is None:
        ratio_t = torch.tensor(0.5, dtype=torch.float32, device=src.device)
    else:
        ratio_t = torch.as_tensor(ratio, device=src.device).to(torch.float32)
    if bool(((ratio_t <= 0) | (ratio_t > 1)).any()):
        raise ValueError(f"fps: ratio must be in (0, 1], got {ratio_t.tolist()}")
    deg = torch.diff(off, prepend=off.new_zeros(1))
    # float32 product then ceil: the count torch_cluster computes.
    counts = torch.ceil(deg.to(torch.float32) * ratio_t).to(torch.int64)
    if random_start:
        start = (torch.rand(deg.shape[0]) * deg.clamp_min(1).cpu()).long().clamp_max(deg.clamp_min(1).cpu() - 1)
        start = start.to(src.device)
    else:
        start = torch.zeros_like(deg)
    if n == 0:
        return torch.empty(0, dtype=torch.long, device=src.device)
    return _fps(src.contiguous(), counts, offsets=off, start_index=start)


def fps(src: Tensor, batch: Optional[Tensor] = None, ratio: Optional[Union[Tensor, float]] = None,
        random_start: bool = True, batch_size: Optional[int] = None,
        ptr: Optional[Union[Tensor, List[int]]] = None) -> Tensor:
    """Farthest point sampling of ``ceil(ratio * n_b)`` points per cloud.

    Args:
        src: ``(N, F)`` points.
        batch: optional sorted int ``(N,)`` cloud ids.
        ratio: float or ``(B,)`` tensor in ``(0, 1]`` (default 0.5).
        random_start: start each cloud at a point drawn with ``torch.rand``
            (else at its first point).
        batch_size: the number of clouds; computed when None.
        ptr: CSR cloud boundaries ``[0, ..., N]`` instead of ``batch``.

    Returns:
        int64 global indices, cloud after cloud, in selection order.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_cluster import fps
        >>> fps(torch.tensor([[0.0], [1.0], [5.0], [2.0]]), ratio=0.5, random_start=False).tolist()
        [0, 2]
    """
    return _fps_impl(src, batch, ratio, random_start, batch_size, ptr)


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
    pos = pos - s.unsqueeze(0)
    num_voxels = torch.true_divide(e - s, size).to(torch.long) + 1
    num_voxels = num_voxels.cumprod(0)
    num_voxels = torch.cat([torch.ones(1, dtype=num_voxels.dtype, device=num_voxels.device), num_voxels], 0)
    num_voxels = num_voxels.narrow(0, 0, size.size(0))
    out = torch.true_divide(pos, size.view(1, -1)).to(torch.long)
    out = out * num_voxels.view(1, -1)
    return out.sum(1)


def _nearest_offsets(x: Tensor, y: Tensor, xo: Tensor, yo: Tensor) -> Tensor:
    x, y = _float(_as_2d(x)), _float(_as_2d(y))
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"nearest: x and y must have the same number of columns, got {x.shape[1]} and {y.shape[1]}")
    if y.dtype != x.dtype:
        y = y.to(x.dtype)
    nx = torch.diff(xo, prepend=xo.new_zeros(1))
    ny = torch.diff(yo, prepend=yo.new_zeros(1))
    if bool(((nx > 0) & (ny == 0)).any()):
        raise ValueError("Some batch indices occur in 'batch_x' that do not occur in 'batch_y'")
    _, idx = _knn(x.contiguous(), y.contiguous(), 1, query_offsets=xo, points_offsets=yo)
    return idx[:, 0]


@torch.jit.ignore
def _nearest_impl(x: Tensor, y: Tensor, batch_x: Optional[Tensor], batch_y: Optional[Tensor]) -> Tensor:
    for name, bt in (("batch_x", batch_x), ("batch_y", batch_y)):
        if bt is not None and bt.numel() > 1 and bool((bt[1:] < bt[:-1]).any()):
            raise ValueError(f"'{name}' is not sorted")
    x2, y2 = _as_2d(x), _as_2d(y)
    B = _n_clouds(batch_x, batch_y, None)
    xo = _offsets("nearest", "batch_x", batch_x, x2.shape[0], x.device, B)
    yo = _offsets("nearest", "batch_y", batch_y, y2.shape[0], x.device, B)
    return _nearest_offsets(x2, y2, xo, yo)


def nearest(x: Tensor, y: Tensor, batch_x: Optional[Tensor] = None, batch_y: Optional[Tensor] = None) -> Tensor:
    """For each row of ``x`` the index of its nearest row of ``y`` in the same cloud.

    Args:
        x: ``(N, F)`` queries.
        y: ``(M, F)`` candidates.
        batch_x: optional sorted int cloud id of each row of ``x``; every
            cloud of ``x`` must have points in ``y`` (ValueError otherwise).
        batch_y: optional sorted int cloud id of each row of ``y``.

    Returns:
        ``(N,)`` int64 indices into ``y``, ties to the lower index.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_cluster import nearest
        >>> nearest(torch.tensor([[0.1], [0.9]]), torch.tensor([[1.0], [0.0]])).tolist()
        [1, 0]
    """
    return _nearest_impl(x, y, batch_x, batch_y)


# ---------------------------------------------------------------------------
# graclus_cluster


def _check_index(fn: str, name: str, t, device=None) -> Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a 1-D int64 tensor, got {type(t).__name__}")
    if t.dtype != torch.int64 or t.dim() != 1:
        raise ValueError(f"{fn}: {name} must be a 1-D int64 tensor, got {t.dtype} of shape {tuple(t.shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{fn}: {name} must be on {device}, got {t.device}")
    return t


def _check_rowptr_col(fn: str, rowptr: Tensor, col: Tensor) -> int:
    _check_index(fn, "rowptr", rowptr)
    _check_index(fn, "col", col, rowptr.device)
    if rowptr.numel() < 1:
        raise ValueError(f"{fn}: rowptr must have num_nodes + 1 >= 1 entries, got 0")
    n = rowptr.numel() - 1
    checks = [int(rowptr[0]), int(rowptr[-1]), int((torch.diff(rowptr) < 0).sum())]
    if checks[0] != 0 or checks[1] != col.numel() or checks[2]:
        raise ValueError(f"{fn}: rowptr must be non-decreasing CSR boundaries from 0 to col.numel()={col.numel()}, "
                         f"got rowptr[0]={checks[0]}, rowptr[-1]={checks[1]}")
    if col.numel() and (int(col.min()) < 0 or int(col.max()) >= n):
        raise ValueError(f"{fn}: col values must be in [0, {n}) (num_nodes = rowptr.numel() - 1), "
                         f"got [{int(col.min())}, {int(col.max())}]")
    return n


def _graclus_op(rowptr: Tensor, col: Tensor, weight: Optional[Tensor]) -> Tensor:
    """``torch_cluster::graclus``: greedy matching, pcgeom's parallel form of the CPU loop.

    The original visits the nodes in ``torch.randperm(num_nodes)`` order; an
    unmatched node ``u`` takes, among its neighbours not yet visited or
    matched, the first in CSR order (no weights) or the one of largest weight
    ``>= 0``, ties to the later edge (weights), and stays alone when there is
    none.  That is the greedy matching of the edges ``u -> v`` with ``rank(u) <
    rank(v)`` in the priority order ``(rank(u), CSR order)`` /
    ``(rank(u), -weight, -position)``, which rounds of "an edge is taken when
    it has the smallest priority among the remaining edges at both its ends"
    reproduce exactly (Blelloch, Fineman and Shun, SPAA 2012: few rounds for
    random orders -- 27 on a random graph of 10^5 nodes and 10^6 edges -- each
    a few vectorised passes over the remaining edges).
    """
    fn = "graclus"
    n = _check_rowptr_col(fn, rowptr, col)
    dev = rowptr.device
    if weight is not None:
        if not isinstance(weight, torch.Tensor) or weight.dim() != 1 or weight.numel() != col.numel():
            raise ValueError(f"{fn}: weight must be a 1-D tensor with one entry per edge ({col.numel()}), got "
                             f"{tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__}")
        if weight.dtype == torch.bool or weight.is_complex():
            raise TypeError(f"{fn}: weight must be a real floating or integer tensor, got {weight.dtype}")
        if weight.device != dev:
            raise ValueError(f"{fn}: weight must be on {dev}, got {weight.device}")
    node_perm = torch.randperm(n, dtype=torch.int64, device=dev)  # the original's one draw
    rank = torch.empty(n, dtype=torch.int64, device=dev)
    rank[node_perm] = torch.arange(n, device=dev)
    E = col.numel()
    src = torch.repeat_interleave(torch.arange(n, device=dev), torch.diff(rowptr), output_size=E)
    pos = torch.arange(E, device=dev)
    if weight is None:
        cand = rank[src] < rank[col]
        order = pos[cand]  # already (rank(src), position)-sortable: sort by rank only, stably
    else:
        # A self-loop is a candidate too: taking it leaves u alone, as in the original.
        cand = ((rank[src] < rank[col]) | (src == col)) & (weight >= 0)
        order = pos[cand].flip(0)  # later edge first among equal weights
        order = order[torch.sort(weight[order], descending=True, stable=True).indices]
    order = order[torch.sort(rank[src[order]], stable=True).indices]
    a, b = src[order], col[order]
    prio = torch.arange(order.numel(), device=dev)
    mate = torch.arange(n, device=dev)  # alone: its own cluster
    big = order.numel()
    while a.numel():
        first = torch.full((n,), big, dtype=torch.int64, device=dev)
        first.scatter_reduce_(0, a, prio, "amin")
        first.scatter_reduce_(0, b, prio, "amin")
        take = (first[a] == prio) & (first[b] == prio)
        ta, tb = a[take], b[take]
        mate[ta] = tb
        mate[tb] = ta
        matched = torch.zeros(n, dtype=torch.bool, device=dev)
        matched[ta] = True
        matched[tb] = True
        alive = ~(matched[a] | matched[b])
        a, b, prio = a[alive], b[alive], prio[alive]
    return torch.minimum(mate, torch.arange(n, device=dev))


@torch.jit.ignore
def _graclus_impl(row: Tensor, col: Tensor, weight: Optional[Tensor], num_nodes: Optional[int]) -> Tensor:
    fn = "graclus_cluster"
    _check_index(fn, "row", row)
    _check_index(fn, "col", col, row.device)
    if row.numel() != col.numel():
        raise ValueError(f"{fn}: row and col must have the same length, got {row.numel()} and {col.numel()}")
    if weight is not None and (not isinstance(weight, torch.Tensor) or weight.numel() != row.numel()):
        raise ValueError(f"{fn}: weight must have one entry per edge ({row.numel()}), got "
                         f"{tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__}")
    if num_nodes is None:
        if row.numel() == 0:
            raise ValueError(f"{fn}: num_nodes is needed for a graph without edges")
        num_nodes = max(int(row.max()), int(col.max())) + 1
    if row.numel() and (min(int(row.min()), int(col.min())) < 0 or max(int(row.max()), int(col.max())) >= num_nodes):
        raise ValueError(f"{fn}: row and col values must be in [0, num_nodes={num_nodes})")
    # The original's Python wrapper, step by step (the same random draws).
    mask = row != col
    row, col = row[mask], col[mask]
    if weight is not None:
        weight = weight[mask]
    if weight is None:
        perm = torch.randperm(row.size(0), dtype=torch.long, device=row.device)
        row, col = row[perm], col[perm]
    perm = torch.argsort(row)
    row, col = row[perm], col[perm]
    if weight is not None:
        weight = weight[perm]
    deg = row.new_zeros(num_nodes)
    deg.scatter_add_(0, row, torch.ones_like(row))
    rowptr = row.new_zeros(num_nodes + 1)
    torch.cumsum(deg, 0, out=rowptr[1:])
    return _graclus_op(rowptr, col, weight)


def graclus_cluster(row: Tensor, col: Tensor, weight: Optional[Tensor] = None,
                    num_nodes: Optional[int] = None) -> Tensor:
    """Graclus: pick an unmatched node (random order) and match it with the
    unmatched neighbour of largest edge weight (Dhillon et al., TPAMI 2007).

    torch_cluster's CPU algorithm on every device, with the same
    ``torch.randperm`` draws: without weights the edges are shuffled and a node
    takes its first free neighbour; with weights the free neighbour of largest
    weight ``>= 0``, ties to the later edge.  Self-loops are ignored.

    Args:
        row: ``(E,)`` int64 source nodes.
        col: ``(E,)`` int64 target nodes.
        weight: optional ``(E,)`` real edge weights.
        num_nodes: the number of nodes (default ``max(row, col) + 1``).

    Returns:
        ``(num_nodes,)`` int64 cluster ids: a matched pair shares the smaller
        of its two node ids; an unmatched node keeps its own.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_cluster import graclus_cluster
        >>> graclus_cluster(torch.tensor([0, 1]), torch.tensor([1, 0])).tolist()
        [0, 0]
    """
    return _graclus_impl(row, col, weight, num_nodes)


# ---------------------------------------------------------------------------
# random_walk / neighbor_sampler


def _uniform_pick(u: Tensor, deg: Tensor) -> Tensor:
    """``trunc(u * deg)`` in float32 (the original's arithmetic), kept below ``deg``."""
    return torch.minimum((u * deg.to(torch.float32)).to(torch.int64), (deg - 1).clamp_min(0))


def _random_walk_op(rowptr: Tensor, col: Tensor, start: Tensor, walk_length: int, p: float,
                    q: float) -> Tuple[Tensor, Tensor]:
    """``torch_cluster::random_walk``: ``(node_seq (S, L + 1), edge_seq (S, L))`` int64.

    ``edge_seq`` holds positions into ``col`` (-1 where the walk stood still at
    a node without out-edges).
    """
    fn = "random_walk"
    n = _check_rowptr_col(fn, rowptr, col)
    _check_index(fn, "start", start, rowptr.device)
    walk_length = int(walk_length)
    if walk_length < 0:
        raise ValueError(f"{fn}: walk_length must be >= 0, got {walk_length}")
    p, q = float(p), float(q)
    if not (p > 0 and q > 0):
        raise ValueError(f"{fn}: p and q must be > 0, got p={p}, q={q}")
    S = start.numel()
    if S and (int(start.min()) < 0 or int(start.max()) >= n):
        raise ValueError(f"{fn}: start values must be in [0, {n}) (num_nodes), got "
                         f"[{int(start.min())}, {int(start.max())}]")
    dev = start.device
    n_out = torch.empty((S, walk_length + 1), dtype=torch.int64, device=dev)
    e_out = torch.empty((S, walk_length), dtype=torch.int64, device=dev)
    n_out[:, 0] = start
    if S == 0 or walk_length == 0:
        return n_out, e_out
    deg_all = torch.diff(rowptr)

    def step(cur: Tensor, pick: Tensor):
        if col.numel() == 0:
            return cur, torch.full_like(cur, -1)
        d = deg_all[cur]
        e = torch.where(d > 0, rowptr[cur] + pick, -1)
        nxt = torch.where(d > 0, col[e.clamp_min(0)], cur)
        return nxt, e

    if p == 1.0 and q == 1.0:
        # The original's draws: torch.rand(S, L), read row-major on CPU and as
        # (L, S) on CUDA -- the same walks for the same seed on either device.
        u = torch.rand(S, walk_length, dtype=torch.float32, device=dev)
        u = u.view(walk_length, S) if dev.type == "cuda" else u.t()
        cur = start
        for l in range(walk_length):
            cur, e = step(cur, _uniform_pick(u[l], deg_all[cur]))
            n_out[:, l + 1] = cur
            e_out[:, l] = e
        return n_out, e_out

    # node2vec (Grover & Leskovec 2016) by rejection sampling: propose a
    # uniform out-edge (t -> v -> x); accept with 1/p if x == t, 1 if x is a
    # neighbour of t, 1/q otherwise, each divided by the largest of the three.
    top = max(1.0 / p, 1.0, 1.0 / q)
    acc_back, acc_near, acc_far = 1.0 / p / top, 1.0 / top, 1.0 / q / top
    if n and n > 3037000499:  # n * n must fit in int64 for the edge keys
        raise ValueError(f"{fn}: node2vec walks (p, q != 1) support at most 3037000499 nodes, got {n}")
    src = torch.repeat_interleave(torch.arange(n, device=dev), deg_all, output_size=col.numel())
    keys = torch.sort(src * n + col).values

    def is_edge(a: Tensor, b: Tensor) -> Tensor:
        k = a * n + b
        at = torch.searchsorted(keys, k).clamp_max(keys.numel() - 1)
        return keys[at] == k

    def uniform_int(d: Tensor) -> Tensor:
        return torch.minimum((torch.rand(d.shape, dtype=torch.float64, device=dev) * d).to(torch.int64),
                             (d - 1).clamp_min(0))

    t = start
    v, e = step(t, uniform_int(deg_all[t]))
    n_out[:, 1] = v
    e_out[:, 0] = e
    for l in range(1, walk_length):
        d = deg_all[v]
        pick = torch.zeros_like(v)
        todo = torch.nonzero(d > 1).flatten()
        while todo.numel():
            dt = d[todo]
            cand = uniform_int(dt)
            x = col[rowptr[v[todo]] + cand]
            r = torch.rand(todo.shape, dtype=torch.float64, device=dev)
            tt = t[todo]
            bound = torch.where(x == tt, acc_back, torch.where(is_edge(x, tt), acc_near, acc_far))
            ok = r < bound
            pick[todo[ok]] = cand[ok]
            todo = todo[~ok]
        x, e = step(v, pick)
        n_out[:, l + 1] = x
        e_out[:, l] = e
        t, v = v, x
    return n_out, e_out


@torch.jit.ignore
def _random_walk_impl(row: Tensor, col: Tensor, start: Tensor, walk_length: int, p: float, q: float,
                      coalesced: bool, num_nodes: Optional[int]) -> Tuple[Tensor, Tensor]:
    fn = "random_walk"
    _check_index(fn, "row", row)
    _check_index(fn, "col", col, row.device)
    _check_index(fn, "start", start, row.device)
    if row.numel() != col.numel():
        raise ValueError(f"{fn}: row and col must have the same length, got {row.numel()} and {col.numel()}")
    if num_nodes is None:
        parts = [int(t.max()) for t in (row, col, start) if t.numel()]
        num_nodes = max(parts) + 1 if parts else 0
    if row.numel() and (min(int(row.min()), int(col.min())) < 0 or max(int(row.max()), int(col.max())) >= num_nodes):
        raise ValueError(f"{fn}: row and col values must be in [0, num_nodes={num_nodes})")
    if coalesced:
        perm = torch.argsort(row * num_nodes + col)
        row, col = row[perm], col[perm]
    elif row.numel() > 1 and bool((row[1:] < row[:-1]).any()):
        raise ValueError(f"{fn}: row must be sorted when coalesced=False")
    deg = row.new_zeros(num_nodes)
    deg.scatter_add_(0, row, torch.ones_like(row))
    rowptr = row.new_zeros(num_nodes + 1)
    torch.cumsum(deg, 0, out=rowptr[1:])
    return _random_walk_op(rowptr, col, start, walk_length, p, q)


def random_walk(row: Tensor, col: Tensor, start: Tensor, walk_length: int, p: float = 1, q: float = 1,
                coalesced: bool = True, num_nodes: Optional[int] = None,
                return_edge_indices: bool = False) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Random walks of ``walk_length`` steps from every node of ``start``
    (node2vec, Grover and Leskovec, KDD 2016).

    ``p == q == 1`` is the uniform walk with the original's ``torch.rand``
    draws (the same walks as torch_cluster for the same seed); otherwise
    node2vec's second-order walk by rejection sampling from torch's generator.
    A walk at a node without out-edges stays there (edge index -1).

    Args:
        row: ``(E,)`` int64 source node of each edge ``row -> col``.
        col: ``(E,)`` int64 target node of each edge.
        start: ``(S,)`` int64 start nodes.
        walk_length: steps per walk (>= 0).
        p: return parameter (a step back to the previous node weighs ``1/p``).
        q: in-out parameter (a step away from the previous node's
            neighbourhood weighs ``1/q``).
        coalesced: sort the edges by ``(row, col)`` first; when False they
            must already be sorted by ``row``.
        num_nodes: the number of nodes (default ``max(row, col, start) + 1``).
        return_edge_indices: also return the edges taken.

    Returns:
        ``node_seq (S, walk_length + 1)`` int64 (column 0 is ``start``), and
        with ``return_edge_indices`` also ``edge_seq (S, walk_length)`` int64:
        positions in the edge list as sorted by ``coalesced`` (-1 for a step
        that stood still), as torch_cluster returns them.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_cluster import random_walk
        >>> random_walk(torch.tensor([0, 1]), torch.tensor([1, 0]), torch.tensor([0, 2]), 3, num_nodes=3).tolist()
        [[0, 1, 0, 1], [2, 2, 2, 2]]
    """
    node_seq, edge_seq = _random_walk_impl(row, col, start, walk_length, p, q, coalesced, num_nodes)
    if return_edge_indices:
        return node_seq, edge_seq
    return node_seq


def _neighbor_sampler_op(start: Tensor, rowptr: Tensor, count: int, factor: float) -> Tensor:
    """``torch_cluster::neighbor_sampler``: sampled edge positions, node after node."""
    fn = "neighbor_sampler"
    _check_index(fn, "rowptr", rowptr)
    _check_index(fn, "start", start, rowptr.device)
    n = rowptr.numel() - 1
    if start.numel() and (n < 1 or int(start.min()) < 0 or int(start.max()) >= n):
        raise ValueError(f"{fn}: start values must be in [0, {n}) (rowptr.numel() - 1)")
    dev = start.device
    lo, hi = rowptr[start], rowptr[start + 1]
    deg = hi - lo
    if int(count) < 1:
        size = torch.ceil(float(factor) * deg.to(torch.float64)).to(torch.int64)
    else:
        size = torch.full_like(deg, int(count))
    size = torch.minimum(size, deg)
    total = int(deg.sum())
    seg = torch.repeat_interleave(torch.arange(start.numel(), device=dev), deg, output_size=total)
    first = torch.cumsum(deg, 0) - deg
    local = torch.arange(total, device=dev) - first[seg]
    # A uniform random order inside each node's edges: random keys, sorted
    # within the node (stable sort by node after a sort by key).
    order = torch.argsort(torch.rand(total, dtype=torch.float64, device=dev))
    order = order[torch.sort(seg[order], stable=True).indices]
    # order[j] lies in the node of position j (seg is sorted) as the
    # local[j]-th of its random order: keep the first size[node] of each.
    pick = order[local < size[seg]]
    return lo[seg[pick]] + local[pick]


@torch.jit.ignore
def _neighbor_sampler_impl(start: Tensor, rowptr: Tensor, size: float) -> Tensor:
    factor, count = -1.0, -1
    if size <= 1:
        factor = float(size)
        if not factor > 0:
            raise ValueError(f"neighbor_sampler: size must be > 0 (a fraction <= 1 or a count > 1), got {size}")
    else:
        count = int(size)
    return _neighbor_sampler_op(start, rowptr, count, factor)


def neighbor_sampler(start: Tensor, rowptr: Tensor, size: float) -> Tensor:
    """Samples neighbours of ``start`` without replacement (GraphSAGE-style).

    Args:
        start: ``(S,)`` int64 nodes.
        rowptr: ``(num_nodes + 1,)`` int64 CSR boundaries of their out-edges.
        size: ``<= 1``: the fraction ``ceil(size * deg)`` of each node's edges;
            ``> 1``: ``int(size)`` edges per node (all of them when fewer).

    Returns:
        int64 edge positions (indices into the CSR's ``col``), node after node
        in ``start`` order, each node's in random order; uniform without
        replacement, from torch's generator, on every device.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_cluster import neighbor_sampler
        >>> sorted(neighbor_sampler(torch.tensor([1]), torch.tensor([0, 3, 7]), 1.0).tolist())
        [3, 4, 5, 6]
    """
    return _neighbor_sampler_impl(start, rowptr, size)


# ---------------------------------------------------------------------------
# torch.ops.torch_cluster.*: the original's operators, when it is not installed


def _op_fps(src: Tensor, ptr: Tensor, ratio: Tensor, random_start: bool) -> Tensor:
    return _fps_impl(src, None, ratio, random_start, None, ptr)


def _op_grid(pos: Tensor, size: Tensor, start: Optional[Tensor], end: Optional[Tensor]) -> Tensor:
    return grid_cluster(pos, size, start, end)


def _op_knn(x: Tensor, y: Tensor, ptr_x: Optional[Tensor], ptr_y: Optional[Tensor], k: int, cosine: bool,
            num_workers: int) -> Tensor:
    x, y = _as_2d(x), _as_2d(y)
    return _knn_offsets(x, y, k, _ptr_offsets("knn", "ptr_x", ptr_x, x.shape[0], x.device),
                        _ptr_offsets("knn", "ptr_y", ptr_y, y.shape[0], x.device), cosine)


def _op_nearest(x: Tensor, y: Tensor, ptr_x: Tensor, ptr_y: Tensor) -> Tensor:
    x, y = _as_2d(x), _as_2d(y)
    return _nearest_offsets(x, y, _ptr_offsets("nearest", "ptr_x", ptr_x, x.shape[0], x.device),
                            _ptr_offsets("nearest", "ptr_y", ptr_y, y.shape[0], x.device))


def _op_radius(x: Tensor, y: Tensor, ptr_x: Optional[Tensor], ptr_y: Optional[Tensor], r: float,
               max_num_neighbors: int, num_workers: int, ignore_same_index: bool) -> Tensor:
    x, y = _as_2d(x), _as_2d(y)
    return _radius_offsets(x, y, r, _ptr_offsets("radius", "ptr_x", ptr_x, x.shape[0], x.device),
                           _ptr_offsets("radius", "ptr_y", ptr_y, y.shape[0], x.device),
                           int(max_num_neighbors), ignore_same_index, "index")


def _op_cuda_version() -> int:
    return -1


_OPS = {
    "fps": ("fps(Tensor src, Tensor ptr, Tensor ratio, bool random_start) -> Tensor", _op_fps),
    "graclus": ("graclus(Tensor rowptr, Tensor col, Tensor? weight) -> Tensor", _graclus_op),
    "grid": ("grid(Tensor pos, Tensor size, Tensor? start, Tensor? end) -> Tensor", _op_grid),
    "knn": ("knn(Tensor x, Tensor y, Tensor? ptr_x, Tensor? ptr_y, int k, bool cosine, int num_workers) -> Tensor",
            _op_knn),
    "nearest": ("nearest(Tensor x, Tensor y, Tensor ptr_x, Tensor ptr_y) -> Tensor", _op_nearest),
    "radius": ("radius(Tensor x, Tensor y, Tensor? ptr_x, Tensor? ptr_y, float r, int max_num_neighbors, "
               "int num_workers, bool ignore_same_index) -> Tensor", _op_radius),
    "random_walk": ("random_walk(Tensor rowptr, Tensor col, Tensor start, int walk_length, float p, float q) "
                    "-> (Tensor, Tensor)", _random_walk_op),
    "neighbor_sampler": ("neighbor_sampler(Tensor start, Tensor rowptr, int count, float factor) -> Tensor",
                         _neighbor_sampler_op),
    "cuda_version": ("cuda_version() -> int", _op_cuda_version),
}

_LIB: Optional[torch.library.Library] = None  # kept alive: dropping it would unregister the ops


def _has_op(name: str) -> bool:
    try:
        getattr(torch.ops.torch_cluster, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def _real_torch_cluster_installed() -> bool:
    """Whether a compiled torch_cluster package is on ``sys.path``.

    A real install ships its native libraries (``_version_cpu.so``, ...) beside its
    ``__init__.py``; a folder that merely has the name (the vendored upstream tests
    in pcgeom's own tree, a source checkout) does not, and must not stop the
    stand-in from defining the operators.
    """
    spec = importlib.machinery.PathFinder.find_spec("torch_cluster")
    if spec is None or not spec.submodule_search_locations:
        return False
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for folder in spec.submodule_search_locations:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        if any(n.startswith("_version") and n.endswith(suffixes) for n in names):
            return True
    return False


def _register_ops() -> List[str]:
    """Defines the missing ``torch.ops.torch_cluster.*`` operators; returns their names.

    Nothing is defined when a real torch_cluster is installed (found on
    ``sys.path``): its library defines them when it is imported.
    """
    global _LIB
    if _real_torch_cluster_installed():
        return []
    missing = [name for name in _OPS if not _has_op(name)]
    if not missing:
        return []
    if _LIB is None:
        _LIB = torch.library.Library("torch_cluster", "FRAGMENT")
    for name in missing:
        schema, fn = _OPS[name]
        _LIB.define(schema)
        _LIB.impl(name, fn, "CompositeExplicitAutograd")
    return missing


_register_ops()
