"""``torch_cluster`` served by pcgeom: ``knn``, ``knn_graph``, ``radius``,
``radius_graph``, ``fps``, ``grid_cluster`` and ``nearest`` with torch_cluster
1.6's signatures and outputs, so PyG / DGCNN code that does ``import
torch_cluster`` runs unmodified and without a compiled extension.

The functions are TorchScript-scriptable like the originals
(``torch.jit.script(knn)`` works; the search itself runs in Python through
``torch.jit.ignore``, so scripted code calling them cannot be saved).

Where torch_cluster is non-deterministic or differs between its CPU and CUDA
builds, pcgeom returns one deterministic answer on every device:

* ``knn`` / ``knn_graph``: torch_cluster's CPU path (nanoflann KD-tree) breaks
  distance ties arbitrarily and its CUDA path by scan order; pcgeom returns,
  per query in increasing order, the exact k nearest **nearest first, ties to
  the lower index**.  ``knn_graph(loop=False)`` gives every node exactly
  ``min(k, n_b - 1)`` other nodes (torch_cluster can return ``k + 1`` when more
  than ``k`` exact duplicates hide the node itself).  ``cosine=True`` ranks by
  cosine distance (both devices; torch_cluster supports it on CUDA only).
* ``radius`` / ``radius_graph``: neighbours are the points with distance
  **strictly below** ``r`` (as torch_cluster); when more than
  ``max_num_neighbors`` qualify, torch_cluster keeps an unspecified subset
  (KD-tree visit order on CPU, index order on CUDA) -- pcgeom keeps the
  **nearest** ``max_num_neighbors``, ties to the lower index, edges grouped by
  query in increasing order.
* ``fps``: ``random_start=True`` draws each cloud's start from torch's global
  generator (``torch.randint``; seed it with ``torch.manual_seed``) instead of
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

Usage::

    import sys, pcgeom.compat.torch_cluster as tc
    sys.modules["torch_cluster"] = tc       # before PyG / your model imports it
"""


import math
from typing import List, Optional, Union

import torch
from torch import Tensor

from pcgeom.graph import batch_to_offsets, knn_graph as _pc_knn_graph
from pcgeom.ops import ball_query as _ball_query, farthest_point_sample as _fps, knn as _knn

__version__ = "1.6.3"

__all__ = ["knn", "knn_graph", "radius", "radius_graph", "fps", "grid_cluster", "nearest", "__version__"]


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
    return batch_to_offsets(fn, name, batch, n, device, n_clouds=B)


def _float(x: Tensor) -> Tensor:
    return x if x.is_floating_point() else x.to(torch.get_default_dtype())


def _normalise(x: Tensor) -> Tensor:
    return x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)


@torch.jit.ignore
def _knn_impl(x: Tensor, y: Tensor, k: int, batch_x: Optional[Tensor], batch_y: Optional[Tensor],
              cosine: bool, batch_size: Optional[int]) -> Tensor:
    if x.numel() == 0 or y.numel() == 0:
        return torch.empty(2, 0, dtype=torch.long, device=x.device)
    x, y = _float(_as_2d(x)), _float(_as_2d(y))
    if y.dtype != x.dtype:
        y = y.to(x.dtype)
    if cosine:
        x, y = _normalise(x), _normalise(y)
    B = _n_clouds(batch_x, batch_y, batch_size)
    xo = _offsets("knn", "batch_x", batch_x, x.shape[0], x.device, B)
    yo = _offsets("knn", "batch_y", batch_y, y.shape[0], x.device, B)
    _, idx = _knn(y.contiguous(), x.contiguous(), k, query_offsets=yo, points_offsets=xo)
    keep = idx >= 0
    row = torch.arange(idx.shape[0], device=idx.device)[:, None].expand_as(idx)
    return torch.stack([row[keep], idx[keep]], 0)


def knn(x: Tensor, y: Tensor, k: int, batch_x: Optional[Tensor] = None, batch_y: Optional[Tensor] = None,
        cosine: bool = False, num_workers: int = 1, batch_size: Optional[int] = None) -> Tensor:
    """For each row of ``y`` its ``k`` nearest rows of ``x`` (same cloud):
    ``edge_index (2, E)`` = ``[y index, x index]``, grouped by ``y`` ascending,
    nearest first, ties to the lower index.  ``num_workers`` is ignored
    (pcgeom's kernels use torch's thread pool)."""
    return _knn_impl(x, y, k, batch_x, batch_y, cosine, batch_size)


@torch.jit.ignore
def _knn_graph_impl(x: Tensor, k: int, batch: Optional[Tensor], loop: bool, flow: str, cosine: bool,
                    batch_size: Optional[int]) -> Tensor:
    if flow not in ("source_to_target", "target_to_source"):
        raise ValueError(f"knn_graph: flow must be 'source_to_target' or 'target_to_source', got {flow!r}")
    x = _float(_as_2d(x))
    if x.numel() == 0:
        return torch.empty(2, 0, dtype=torch.long, device=x.device)
    if cosine:
        x = _normalise(x)
    return _pc_knn_graph(x, k, batch=batch, loop=loop, flow=flow)


def knn_graph(x: Tensor, k: int, batch: Optional[Tensor] = None, loop: bool = False,
              flow: str = "source_to_target", cosine: bool = False, num_workers: int = 1,
              batch_size: Optional[int] = None) -> Tensor:
    """Edges to the ``k`` nearest nodes of the same cloud (:func:`pcgeom.knn_graph`)."""
    return _knn_graph_impl(x, k, batch, loop, flow, cosine, batch_size)


@torch.jit.ignore
def _radius_impl(x: Tensor, y: Tensor, r: float, batch_x: Optional[Tensor], batch_y: Optional[Tensor],
                 max_num_neighbors: int, batch_size: Optional[int], ignore_same_index: bool) -> Tensor:
    if x.numel() == 0 or y.numel() == 0:
        return torch.empty(2, 0, dtype=torch.long, device=x.device)
    x, y = _float(_as_2d(x)), _float(_as_2d(y))
    if y.dtype != x.dtype:
        y = y.to(x.dtype)
    B = _n_clouds(batch_x, batch_y, batch_size)
    xo = _offsets("radius", "batch_x", batch_x, x.shape[0], x.device, B)
    yo = _offsets("radius", "batch_y", batch_y, y.shape[0], x.device, B)
    cap = int(max_num_neighbors)
    d2, idx = _ball_query(y.contiguous(), x.contiguous(), float(r), cap + int(ignore_same_index),
                          query_offsets=yo, points_offsets=xo)
    row = torch.arange(idx.shape[0], device=idx.device)[:, None].expand_as(idx)
    # torch_cluster's ball is open: dist < r.  Boundary points sort last, so
    # dropping them never hides a point strictly inside.
    keep = (idx >= 0) & (d2 < float(r) * float(r))
    if ignore_same_index:
        keep &= idx != row
    keep &= torch.cumsum(keep, 1) <= cap
    return torch.stack([row[keep], idx[keep]], 0)


def radius(x: Tensor, y: Tensor, r: float, batch_x: Optional[Tensor] = None, batch_y: Optional[Tensor] = None,
           max_num_neighbors: int = 32, num_workers: int = 1, batch_size: Optional[int] = None,
           ignore_same_index: bool = False) -> Tensor:
    """For each row of ``y`` the rows of ``x`` (same cloud) closer than ``r``:
    ``edge_index (2, E)`` = ``[y index, x index]``; at most
    ``max_num_neighbors`` per ``y``, the nearest ones."""
    return _radius_impl(x, y, r, batch_x, batch_y, max_num_neighbors, batch_size, ignore_same_index)


@torch.jit.ignore
def _radius_graph_impl(x: Tensor, r: float, batch: Optional[Tensor], loop: bool, max_num_neighbors: int,
                       flow: str, batch_size: Optional[int]) -> Tensor:
    if flow not in ("source_to_target", "target_to_source"):
        raise ValueError(f"radius_graph: flow must be 'source_to_target' or 'target_to_source', got {flow!r}")
    ei = _radius_impl(x, x, r, batch, batch, max_num_neighbors, batch_size, not loop)
    return ei.flip(0) if flow == "source_to_target" else ei


def radius_graph(x: Tensor, r: float, batch: Optional[Tensor] = None, loop: bool = False,
                 max_num_neighbors: int = 32, flow: str = "source_to_target", num_workers: int = 1,
                 batch_size: Optional[int] = None) -> Tensor:
    """Edges to the nodes of the same cloud closer than ``r``."""
    return _radius_graph_impl(x, r, batch, loop, max_num_neighbors, flow, batch_size)


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
    """Farthest point sampling of ``ceil(ratio * n_b)`` points per cloud
    (default ratio 0.5); global indices, cloud after cloud, in selection order."""
    return _fps_impl(src, batch, ratio, random_start, batch_size, ptr)


def grid_cluster(pos: Tensor, size: Tensor, start: Optional[Tensor] = None, end: Optional[Tensor] = None) -> Tensor:
    """Voxel id of every point for a grid of cell ``size`` from ``start``
    (default ``pos.min(0)``) to ``end`` (default ``pos.max(0)``), first axis
    fastest: torch_cluster's formula, any dtype."""
    pos = pos.view(pos.size(0), -1)
    if size.numel() != pos.size(1):
        raise ValueError("grid_cluster: size must have one entry per axis of pos")
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


@torch.jit.ignore
def _nearest_impl(x: Tensor, y: Tensor, batch_x: Optional[Tensor], batch_y: Optional[Tensor]) -> Tensor:
    x, y = _float(_as_2d(x)), _float(_as_2d(y))
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"nearest: x and y must have the same number of columns, got {x.shape[1]} and {y.shape[1]}")
    if y.dtype != x.dtype:
        y = y.to(x.dtype)
    for name, bt in (("batch_x", batch_x), ("batch_y", batch_y)):
        if bt is not None and bt.numel() > 1 and bool((bt[1:] < bt[:-1]).any()):
            raise ValueError(f"'{name}' is not sorted")
    B = _n_clouds(batch_x, batch_y, None)
    xo = _offsets("nearest", "batch_x", batch_x, x.shape[0], x.device, B)
    yo = _offsets("nearest", "batch_y", batch_y, y.shape[0], x.device, B)
    nx = torch.diff(xo, prepend=xo.new_zeros(1))
    ny = torch.diff(yo, prepend=yo.new_zeros(1))
    if bool(((nx > 0) & (ny == 0)).any()):
        raise ValueError("Some batch indices occur in 'batch_x' that do not occur in 'batch_y'")
    _, idx = _knn(x.contiguous(), y.contiguous(), 1, query_offsets=xo, points_offsets=yo)
    return idx[:, 0]


def nearest(x: Tensor, y: Tensor, batch_x: Optional[Tensor] = None, batch_y: Optional[Tensor] = None) -> Tensor:
    """For each row of ``x`` the index of its nearest row of ``y`` in the same cloud."""
    return _nearest_impl(x, y, batch_x, batch_y)
