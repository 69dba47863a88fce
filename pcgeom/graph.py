"""Neighbourhood graphs in PyG's ``edge_index`` form, on pcgeom's exact ops.

* :func:`knn_graph` / :func:`radius_graph` -- like ``torch_cluster.knn_graph``
  / ``radius_graph``: ``edge_index (2, E)`` int64, nodes grouped by a sorted
  per-point ``batch`` vector;
* :func:`edge_features` -- DGCNN's EdgeConv input ``[x_j - x_i, x_i]`` over the
  k nearest neighbours in feature space.

Edge order (deterministic, the same on every device): edges are grouped by the
*centre* node ``i`` in increasing order, and within a centre its neighbours
come nearest first, ties to the lower index.  ``flow="source_to_target"``
(PyG's default) gives ``edge_index = [[j...], [i...]]`` (messages flow from the
neighbour ``j`` to the centre ``i``); ``"target_to_source"`` gives
``[[i...], [j...]]``.
"""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom.ops import ball_query, knn

_FLOWS = ("source_to_target", "target_to_source")


def _check_x(fn: str, name: str, x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor of shape (N, D), got {type(x).__name__}")
    if x.dim() == 1:
        x = x[:, None]
    V.check_tensor(fn, name, x, 2, "(N, D)")
    if x.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be float16, bfloat16, float32 or float64, got {x.dtype}")
    return x


def batch_arg_offsets(fn: str, name: str, batch, n: int, device, n_clouds: int | None = None) -> torch.Tensor:
    """The ``batch`` *argument* of a graph op (sorted per-point cloud ids ``(n,)``) -> cumulative end offsets ``(B,)``.

    Unlike the public :func:`pcgeom.batch_to_offsets`, it checks the ids as an
    argument of the calling function ``fn`` (named ``name`` in its messages) and
    requires them sorted, as PyG's ``batch`` vectors are.

    ``B`` is ``batch.max() + 1`` unless ``n_clouds`` is given; ids that do not
    occur are empty clouds.  ``None`` is one cloud.  One host sync.
    """
    if batch is None:
        return torch.full((1 if n_clouds is None else n_clouds,), n, dtype=torch.int64, device=device)
    if not isinstance(batch, torch.Tensor) or batch.dtype not in V.INT_DTYPES:
        raise TypeError(f"{fn}: {name} must be an integer tensor of shape ({n},), got "
                        f"{batch.dtype if isinstance(batch, torch.Tensor) else type(batch).__name__}")
    if batch.dim() != 1 or batch.shape[0] != n:
        raise ValueError(f"{fn}: {name} must have shape ({n},) (one cloud id per point), got {tuple(batch.shape)}")
    batch = batch.to(device=device, dtype=torch.int64)
    if n == 0:
        return torch.zeros((1 if n_clouds is None else max(n_clouds, 1),), dtype=torch.int64, device=device)
    unsorted, lo, hi = torch.stack([(batch[1:] < batch[:-1]).any().long(), batch.min(), batch.max()]).tolist()
    if unsorted:
        raise ValueError(f"{fn}: {name} must be sorted (non-decreasing cloud ids)")
    if lo < 0:
        raise ValueError(f"{fn}: {name} values must be >= 0, got {lo}")
    B = hi + 1 if n_clouds is None else n_clouds
    if hi >= B:
        raise ValueError(f"{fn}: {name} values must be < {B}, got {hi}")
    return torch.searchsorted(batch, torch.arange(B, device=device), right=True)


def _flow(fn, flow):
    if flow not in _FLOWS:
        raise ValueError(f"{fn}: flow must be 'source_to_target' or 'target_to_source', got {flow!r}")


def _edges(idx: torch.Tensor, keep: torch.Tensor, flow: str) -> torch.Tensor:
    centre = torch.arange(idx.shape[0], device=idx.device)[:, None].expand_as(idx)
    i, j = centre[keep], idx[keep]
    return torch.stack([j, i] if flow == "source_to_target" else [i, j], 0)


def _drop_self(idx: torch.Tensor, cap: int) -> torch.Tensor:
    """Mask of the valid non-self neighbours of each row, at most ``cap`` per row."""
    self_ = torch.arange(idx.shape[0], device=idx.device)[:, None]
    keep = (idx >= 0) & (idx != self_)
    # A row without itself among the candidates (more than `cap` exact
    # duplicates of it at lower indices) drops its farthest candidate instead.
    return keep & (torch.cumsum(keep, 1) <= cap)


def knn_graph(x, k, *, batch=None, loop=False, flow="source_to_target") -> torch.Tensor:
    """Edges from every node to its ``k`` nearest nodes of the same cloud.

    Args:
        x: ``(N, D)`` float16/bfloat16/float32/float64 node positions or
            features (a 1-D tensor is read as ``(N, 1)``).
        k: int >= 1, neighbours per node.
        batch: optional sorted int ``(N,)`` cloud id of each node (PyG style);
            ``None`` is one cloud.
        loop: if False (default) a node is not its own neighbour: each node gets
            exactly ``min(k, n_b - 1)`` other nodes of its cloud.  If True the
            node itself is included (it is its own nearest, distance 0, unless
            exact duplicates at lower indices tie with it).
        flow: ``"source_to_target"`` (default): ``edge_index = [neighbour,
            centre]``; ``"target_to_source"``: ``[centre, neighbour]``.

    Returns:
        ``edge_index (2, E)`` int64, grouped by centre node ascending, nearest
        neighbour first, ties to the lower index (see the module docstring).

    Raises:
        ValueError: ``k < 1``; a ``batch`` of the wrong shape, unsorted or negative; unknown ``flow``.
        TypeError: ``x`` not a floating tensor, ``batch`` not an integer tensor.

    Example:
        >>> import torch, pcgeom
        >>> x = torch.tensor([[0.0], [1.0], [3.0]])
        >>> pcgeom.knn_graph(x, 1).tolist()
        [[1, 0, 1], [0, 1, 2]]
    """
    fn = "knn_graph"
    x = _check_x(fn, "x", x)
    k = V.check_int(fn, "k", k, minimum=1)
    _flow(fn, flow)
    off = batch_arg_offsets(fn, "batch", batch, x.shape[0], x.device)
    _, idx = knn(x, x, k if loop else k + 1, query_offsets=off, points_offsets=off)
    keep = (idx >= 0) if loop else _drop_self(idx, k)
    return _edges(idx, keep, flow)


def radius_graph(x, r, *, batch=None, max_num_neighbors=32, loop=False, flow="source_to_target") -> torch.Tensor:
    """Edges from every node to the nodes of its cloud within distance ``r``.

    Args:
        x: ``(N, D)`` floating node positions.
        r: float >= 0; a node ``j`` is a neighbour of ``i`` when
            ``|x_j - x_i|**2 <= r**2`` (inclusive, as :func:`pcgeom.ball_query`).
        batch: optional sorted int ``(N,)`` cloud ids.
        max_num_neighbors: int >= 1, at most this many neighbours per node:
            the **nearest** ones, ties to the lower index (torch_cluster's CUDA
            kernel keeps the first ones in index order, as
            ``pcgeom.compat.torch_cluster.radius_graph`` does by default).
        loop: include the node itself (default False).
        flow: as in :func:`knn_graph`.

    Returns:
        ``edge_index (2, E)`` int64, grouped by centre node, nearest first.

    Raises:
        ValueError: ``r`` not finite and >= 0, ``max_num_neighbors < 1``; a bad ``batch``; unknown ``flow``.
        TypeError: ``x`` not a floating tensor, ``batch`` not an integer tensor.

    Example:
        >>> import torch, pcgeom
        >>> x = torch.tensor([[0.0], [1.0], [3.0]])
        >>> pcgeom.radius_graph(x, 1.5).tolist()
        [[1, 0], [0, 1]]
    """
    fn = "radius_graph"
    x = _check_x(fn, "x", x)
    r = V.check_float(fn, "r", r, minimum=0.0)
    cap = V.check_int(fn, "max_num_neighbors", max_num_neighbors, minimum=1)
    _flow(fn, flow)
    off = batch_arg_offsets(fn, "batch", batch, x.shape[0], x.device)
    _, idx = ball_query(x, x, r, cap if loop else cap + 1, query_offsets=off, points_offsets=off)
    keep = (idx >= 0) if loop else _drop_self(idx, cap)
    return _edges(idx, keep, flow)


def edge_features(x, k, *, batch=None) -> torch.Tensor:
    """DGCNN's edge features ``[x_j - x_i, x_i]`` over the k nearest in feature space.

    The neighbours of ``x_i`` are its ``k`` nearest rows by squared Euclidean
    distance in feature space, **itself included** (as DGCNN's ``knn``),
    nearest first, ties to the lower index.

    Args:
        x: ``(B, N, C)`` padded batch (every cloud has N points), or ``(N, C)``
            packed nodes with an optional sorted ``batch (N,)`` vector.
        k: int >= 1.
        batch: cloud ids for the packed form only.

    Returns:
        ``(B, N, k, 2C)`` (padded input) or ``(N, k, 2C)`` (packed input), in
        ``x``'s dtype, differentiable w.r.t. ``x`` (the neighbour choice is
        not).  Slots beyond a cloud's size (``k > n_b``) are all zeros.
        DGCNN's channels-first ``(B, 2C, N, k)`` is
        ``edge_features(x.transpose(1, 2), k).permute(0, 3, 1, 2)``.

    Raises:
        ValueError: ``x`` not ``(B, N, C)`` or ``(N, C)``; ``batch=`` with ``(B, N, C)`` input; ``k < 1``; a bad
            ``batch``.
        TypeError: ``x`` not a floating tensor.

    Example:
        >>> import torch, pcgeom
        >>> x = torch.tensor([[[0.0], [1.0], [3.0]]])
        >>> pcgeom.edge_features(x, 2)[0, 2].tolist()
        [[0.0, 3.0], [-2.0, 3.0]]
    """
    fn = "edge_features"
    if not isinstance(x, torch.Tensor) or x.dim() not in (2, 3):
        raise ValueError(f"{fn}: x must be a (B, N, C) or (N, C) tensor, got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    k = V.check_int(fn, "k", k, minimum=1)
    if x.dim() == 3:
        if batch is not None:
            raise ValueError(f"{fn}: batch= is for packed (N, C) input; (B, N, C) input has no batch vector")
        _, idx = knn(x, x, k)
        valid = idx >= 0
        nb = torch.gather(x[:, None].expand(-1, x.shape[1], -1, -1), 2,
                          idx.clamp_min(0)[..., None].expand(-1, -1, -1, x.shape[2]))
        centre = x[:, :, None, :].expand_as(nb)
    else:
        x = _check_x(fn, "x", x)
        off = batch_arg_offsets(fn, "batch", batch, x.shape[0], x.device)
        _, idx = knn(x, x, k, query_offsets=off, points_offsets=off)
        valid = idx >= 0
        nb = x[idx.clamp_min(0)] if x.shape[0] else x.new_zeros(idx.shape + (x.shape[1],))
        centre = x[:, None, :].expand_as(nb)
    out = torch.cat([nb - centre, centre], -1)
    return torch.where(valid[..., None], out, torch.zeros((), dtype=out.dtype, device=out.device))
