"""``pyg_lib.ops`` served by pcgeom: the point-cloud and clustering ops PyG 2.8 calls.

Each function has pyg-lib 0.8.0's Python signature (its own argument order,
e.g. ``knn(x, y, k, ptr_x, ptr_y, ...)``) and calls the ``torch.ops.pyg.*``
operator of the same name, as pyg-lib does.  PyG 2.8 probes this module with
``hasattr``; only what is served here is present:
``fps``, ``knn``, ``radius``, ``nearest``, ``grid_cluster``, ``graclus_cluster``.

Deliberately absent (PyG then takes its own fallback): ``softmax_csr``,
``index_sort``, ``segment_matmul``, ``grouped_matmul``, ``sampled_*``,
``spline_*``, the ``scatter_*`` / ``segment_*`` family.  Serving
``softmax_csr`` / ``index_sort`` was measured against PyG 2.8.1's own tests: it
makes one more test fail (PyG's ``torch.jit.script`` of ``softmax`` reaches
``pyg_lib.ops.softmax_csr``, which a Python stand-in cannot be scripted
through) and fixes none; :data:`SERVED_OPTIONAL` records that decision.
"""

from typing import Optional

import torch
from torch import Tensor

from pcgeom.compat.pyg_lib import _ops  # noqa: F401  (the operators these functions call)

__all__ = ["fps", "knn", "radius", "nearest", "grid_cluster", "graclus_cluster"]

# pyg-lib ops that could also be served on pcgeom's segment core but are not (see the module docstring).
SERVED_OPTIONAL = ()


def fps(src: Tensor, ptr: Tensor, ratio: float = 0.5, random_start: bool = True) -> Tensor:
    """Farthest point sampling of ``ceil(ratio * n_b)`` points of every cloud.

    Args:
        src: ``(N, F)`` float points (more dimensions are flattened).
        ptr: int ``(B + 1,)`` CSR cloud boundaries ``[0, ..., N]``.
        ratio: in ``(0, 1]``.
        random_start: start each cloud at ``trunc(u * n_b)`` with ``u =
            torch.rand(B)`` in ``src``'s dtype (seed with ``torch.manual_seed``);
            else at its first point.

    Returns:
        int64 global indices, cloud after cloud, in selection order (the next
        point is the farthest, ties to the lowest index, never one twice).

    Example:
        >>> import torch
        >>> from pcgeom.compat.pyg_lib.ops import fps
        >>> fps(torch.tensor([[0.0], [1.0], [5.0], [2.0]]), torch.tensor([0, 4]), 0.5, False).tolist()
        [0, 2]
    """
    return torch.ops.pyg.fps(src, ptr, ratio, random_start)


def knn(x: Tensor, y: Tensor, k: int = 1, ptr_x: Optional[Tensor] = None, ptr_y: Optional[Tensor] = None,
        cosine: bool = False, num_workers: int = 1) -> Tensor:
    """For each row of ``y`` its ``k`` nearest rows of ``x`` in the same cloud.

    Args:
        x: ``(N, F)`` float points searched.
        y: ``(M, F)`` float queries.
        k: neighbours per query (>= 1; fewer when a cloud of ``x`` is smaller).
        ptr_x: optional int ``(B + 1,)`` CSR cloud boundaries of ``x`` (one cloud when None).
        ptr_y: optional int ``(B + 1,)`` CSR cloud boundaries of ``y``.
        cosine: rank by cosine distance (every device).
        num_workers: ignored.

    Returns:
        ``(2, E)`` int64 ``[y index, x index]``, grouped by ``y`` ascending,
        nearest first, ties to the lower index.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pyg_lib.ops import knn
        >>> x = torch.tensor([[-1.0, -1], [-1, 1], [1, -1], [1, 1]])
        >>> knn(x, torch.tensor([[-1.0, 0], [1, 0]]), 2).tolist()
        [[0, 0, 1, 1], [0, 1, 2, 3]]
    """
    return torch.ops.pyg.knn(x, y, ptr_x, ptr_y, k, cosine, num_workers)


def radius(x: Tensor, y: Tensor, r: float = 1.0, ptr_x: Optional[Tensor] = None, ptr_y: Optional[Tensor] = None,
           max_num_neighbors: int = 32, num_workers: int = 1, ignore_same_index: bool = False) -> Tensor:
    """For each row of ``y`` the rows of ``x`` of the same cloud with ``|x_j - y_i|**2 < r*r``.

    Args:
        x: ``(N, F)`` float points searched.
        y: ``(M, F)`` float queries.
        r: radius (> 0; open ball, ``r*r`` rounded to the input dtype).
        ptr_x: optional int ``(B + 1,)`` CSR cloud boundaries of ``x``.
        ptr_y: optional int ``(B + 1,)`` CSR cloud boundaries of ``y``.
        max_num_neighbors: at most this many per query (>= 1): the first ones
            in index order, as pyg-lib's CUDA kernel keeps them.
        num_workers: ignored.
        ignore_same_index: skip ``x_i`` for ``y_i``.

    Returns:
        ``(2, E)`` int64 ``[y index, x index]`` grouped by ``y``, increasing ``x`` index.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pyg_lib.ops import radius
        >>> x = torch.tensor([[0.0], [0.9], [0.3], [0.5]])
        >>> radius(x, x[:1], 1.0, max_num_neighbors=2).tolist()
        [[0, 0], [0, 1]]
    """
    return torch.ops.pyg.radius(x, y, ptr_x, ptr_y, r, max_num_neighbors, num_workers, ignore_same_index)


def nearest(x: Tensor, y: Tensor, ptr_x: Optional[Tensor] = None, ptr_y: Optional[Tensor] = None) -> Tensor:
    """For each row of ``x`` the index of its nearest row of ``y`` in the same cloud.

    Args:
        x: ``(N, F)`` float queries.
        y: ``(M, F)`` float candidates; every non-empty cloud of ``x`` needs points here (ValueError otherwise).
        ptr_x: optional int ``(B + 1,)`` CSR cloud boundaries of ``x``.
        ptr_y: optional int ``(B + 1,)`` CSR cloud boundaries of ``y``.

    Returns:
        ``(N,)`` int64 indices into ``y``, ties to the lower index.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pyg_lib.ops import nearest
        >>> nearest(torch.tensor([[0.1], [0.9]]), torch.tensor([[1.0], [0.0]])).tolist()
        [1, 0]
    """
    return torch.ops.pyg.nearest(x, y, ptr_x, ptr_y)


def grid_cluster(pos: Tensor, size: Tensor, start: Optional[Tensor] = None, end: Optional[Tensor] = None) -> Tensor:
    """Voxel id of every point: ``trunc((pos - start) / size)`` per axis, first axis fastest.

    Args:
        pos: ``(N, D)`` positions.
        size: ``(D,)`` positive cell size per axis.
        start: optional ``(D,)`` grid origin (default ``pos.min(0)``).
        end: optional ``(D,)`` grid end (default ``pos.max(0)``).

    Returns:
        ``(N,)`` int64 voxel ids.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pyg_lib.ops import grid_cluster
        >>> grid_cluster(torch.tensor([[0.0, 0.0], [1.5, 0.0], [0.0, 1.5]]), torch.tensor([1.0, 1.0])).tolist()
        [0, 1, 2]
    """
    return torch.ops.pyg.grid_cluster(pos, size, start, end)


def graclus_cluster(rowptr: Tensor, col: Tensor, weight: Optional[Tensor] = None) -> Tensor:
    """Greedy (heavy-edge) matching in a ``torch.randperm`` node order; a pair's id is ``min(u, v)``.

    Args:
        rowptr: int64 ``(N + 1,)`` CSR row pointer.
        col: int64 ``(E,)`` column indices.
        weight: optional ``(E,)`` edge weights.

    Returns:
        ``(N,)`` cluster ids (pyg-lib's CPU algorithm, the same ``torch.randperm`` draw, on every device).

    Example:
        >>> import torch
        >>> from pcgeom.compat.pyg_lib.ops import graclus_cluster
        >>> graclus_cluster(torch.tensor([0, 1, 2]), torch.tensor([1, 0])).tolist()
        [0, 0]
    """
    return torch.ops.pyg.graclus_cluster(rowptr, col, weight)
