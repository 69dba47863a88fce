"""Feature ops on packed point clouds: what Point Transformer layers are built from.

Pointcept / Point Transformer batch clouds by concatenation: rows ``(N_total,
*)`` plus int cumulative **end** offsets ``(B,)`` (see :mod:`pcgeom.ops.packed`).
On that layout, with pcgeom's padding rule (``-1`` = no neighbour) and on
pcgeom's native kernels (:func:`pcgeom.knn`, :func:`pcgeom.knn_gather`):

* :func:`offsets_to_batch` / :func:`batch_to_offsets` -- per-row cloud ids
  and back (Pointcept's ``offset2batch`` / ``batch2offset``);
* :func:`group_packed` -- the neighbourhood of each row: relative
  coordinates, then features (Pointcept's ``pointops.grouping``);
* :func:`interpolate_packed` -- inverse-distance weighted features of the k
  nearest points of the same cloud (``pointops.interpolation``; PointNet++'s
  feature propagation);
* :func:`aggregate_neighbors` -- Point Transformer v1's vector-attention
  aggregation ``sum_j (f[idx_j] + pos_j) * w_j`` with channel-shared weights
  (``pointops.aggregation``).

Everything here is differentiable where it makes sense (features, coordinates,
weights), deterministic on CPU, and never reads outside its inputs: ``-1``
neighbours contribute zeros.  The upstream quirks (int32 indices, ``1e5``
padding distances, Python's "``-1`` is the last row") live in
:mod:`pcgeom.compat.pointops`, on top of these.
"""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom.ops import knn, knn_gather
from pcgeom.ops.packed import offsets_arg

__all__ = ["aggregate_neighbors", "batch_to_offsets", "group_packed", "interpolate_packed", "offsets_to_batch"]



def offsets_to_batch(offsets, n_total: int | None = None) -> torch.Tensor:
    """Cumulative end offsets ``(B,)`` -> per-row cloud ids ``(N_total,)`` int64.

    Args:
        offsets: int ``(B,)`` tensor, non-decreasing, ``offsets[-1] == N_total``
            (empty clouds allowed).
        n_total: the number of rows, when known (checked against
            ``offsets[-1]``); ``None`` takes ``offsets[-1]``.

    Returns:
        ``batch (N_total,)`` int64 on the device of ``offsets``: ``batch[i] = b``
        for the rows of cloud ``b``.  No gradient.

    Raises:
        TypeError: offsets that are not an integer tensor.
        ValueError: offsets that are not of shape ``(B,)`` with ``B >= 1``,
            decrease, or do not end at ``n_total``.

    Example:
        >>> import torch, pcgeom
        >>> pcgeom.offsets_to_batch(torch.tensor([2, 2, 5])).tolist()
        [0, 0, 2, 2, 2]
    """
    fn = "offsets_to_batch"
    if not isinstance(offsets, torch.Tensor) or offsets.dtype not in V.INT_DTYPES:
        raise TypeError(f"{fn}: offsets must be an integer tensor of shape (B,), got "
                        f"{offsets.dtype if isinstance(offsets, torch.Tensor) else type(offsets).__name__}")
    if offsets.dim() != 1 or offsets.shape[0] < 1:
        raise ValueError(f"{fn}: offsets must have shape (B,) with B >= 1, got {V.shape_str(offsets)}")
    V.check_host_readable(fn, "offsets", offsets, offsets.device)
    if n_total is None:
        n_total = int(offsets[-1])
    n_total = V.check_int(fn, "n_total", n_total, minimum=0)
    V.check_fits(fn, "offsets[-1]", n_total, "the batch ids", (n_total,), 8, offsets.device)
    off = offsets_arg(fn, "offsets", offsets, n_total, offsets.device)
    counts = torch.diff(off, prepend=off.new_zeros(1))
    return torch.repeat_interleave(torch.arange(off.shape[0], device=off.device), counts, output_size=n_total)


def batch_to_offsets(batch, n_clouds: int | None = None) -> torch.Tensor:
    """Per-row cloud ids ``(N,)`` -> cumulative end offsets ``(B,)`` int64.

    ``offsets[b]`` is the number of rows with id ``<= b``, so the rows of a
    **sorted** ``batch`` are cloud after cloud as :func:`offsets_to_batch`
    gives them back.  Ids that never occur are empty clouds.

    Args:
        batch: integer ``(N,)`` tensor of ids ``>= 0``.
        n_clouds: number of clouds ``B``; ``None`` takes ``batch.max() + 1``
            (ids ``>= n_clouds`` are an error).

    Returns:
        ``offsets (B,)`` int64 on the device of ``batch``.

    Example:
        >>> import torch, pcgeom
        >>> pcgeom.batch_to_offsets(torch.tensor([0, 0, 2, 2, 2])).tolist()
        [2, 2, 5]
    """
    fn = "batch_to_offsets"
    if not isinstance(batch, torch.Tensor) or batch.dtype not in V.INT_DTYPES:
        raise TypeError(f"{fn}: batch must be an integer tensor of shape (N,), got "
                        f"{batch.dtype if isinstance(batch, torch.Tensor) else type(batch).__name__}")
    if batch.dim() != 1:
        raise ValueError(f"{fn}: batch must have shape (N,), got {V.shape_str(batch)}")
    V.check_host_readable(fn, "batch", batch, batch.device)
    batch = batch.long()
    if batch.numel() == 0:
        B = 1 if n_clouds is None else V.check_int(fn, "n_clouds", n_clouds, minimum=1)
        return torch.zeros(B, dtype=torch.int64, device=batch.device)
    lo, hi = torch.stack([batch.min(), batch.max()]).tolist()
    if lo < 0:
        raise ValueError(f"{fn}: batch values must be >= 0, got {lo}")
    B = hi + 1 if n_clouds is None else V.check_int(fn, "n_clouds", n_clouds, minimum=1)
    if hi >= B:
        raise ValueError(f"{fn}: batch values must be < n_clouds={B}, got {hi}")
    V.check_fits(fn, "n_clouds" if n_clouds is not None else "batch.max() + 1", B, "offsets", (B,), 16, batch.device)
    return torch.cumsum(torch.bincount(batch, minlength=B), 0)


def _check_idx(fn: str, idx, n: int, device) -> torch.Tensor:
    if not isinstance(idx, torch.Tensor) or idx.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{fn}: idx must be an int32 or int64 tensor of shape (M, k), got "
                        f"{idx.dtype if isinstance(idx, torch.Tensor) else type(idx).__name__}")
    if idx.dim() != 2:
        raise ValueError(f"{fn}: idx must have shape (M, k), got {V.shape_str(idx)}")
    if idx.device != device:
        raise ValueError(f"{fn}: idx must be on {device} like the features, got {idx.device}")
    return idx.long()


def _check_rows(fn: str, name: str, t, n: int | None = None, cols: int | None = None, layout: str = "(N, C)"):
    V.check_tensor(fn, name, t, 2, layout)
    if t.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if n is not None and t.shape[0] != n:
        raise ValueError(f"{fn}: {name} must have shape {layout} with {n} rows, got {V.shape_str(t)}")
    if cols is not None and t.shape[1] != cols:
        raise ValueError(f"{fn}: {name} must have shape {layout} with {cols} columns, got {V.shape_str(t)}")


def group_packed(features, idx, *, points=None, centers=None) -> torch.Tensor:
    """Gathers each row's neighbours: relative coordinates first, then features.

    ``out[m, j] = concat(points[idx[m, j]] - centers[m], features[idx[m, j]])``
    with zeros (coordinates and features) where ``idx[m, j] == -1``.  Indices
    are global rows of the packed tensors, as :func:`pcgeom.knn` returns them
    with ``query_offsets=`` / ``points_offsets=``.

    Args:
        features: ``(N, C)`` floating tensor (any C >= 0), or ``None`` with
            ``points`` given (coordinates only).
        idx: ``(M, k)`` int32/int64 indices in ``[-1, N)``.
        points: optional ``(N, D)`` coordinates ``idx`` refers to; with
            ``centers``, the relative coordinates are prepended.
        centers: ``(M, D)`` coordinates of the rows of ``idx`` (needed with
            ``points``).

    Returns:
        ``(M, k, D + C)`` (or ``(M, k, C)`` without ``points``), in torch's
        promoted dtype of ``points`` and ``features`` (as ``torch.cat``); differentiable w.r.t. ``features``, ``points`` and
        ``centers`` (``-1`` slots get no gradient).

    Raises:
        ValueError: ``idx`` outside ``[-1, N)``, mismatched shapes or devices.

    Example:
        >>> import torch, pcgeom
        >>> pts = torch.tensor([[0.0, 0, 0], [1, 0, 0], [3, 0, 0]])
        >>> f = torch.tensor([[10.0], [20.0], [30.0]])
        >>> idx = torch.tensor([[0, 1], [2, -1]])
        >>> pcgeom.group_packed(f, idx, points=pts, centers=pts[:2])[1].tolist()
        [[2.0, 0.0, 0.0, 30.0], [0.0, 0.0, 0.0, 0.0]]
    """
    fn = "group_packed"
    if features is None and points is None:
        raise ValueError(f"{fn}: features=None needs points= (nothing would be grouped)")
    ref = features if features is not None else points
    if features is not None:
        _check_rows(fn, "features", features)
    n = ref.shape[0]
    idx = _check_idx(fn, idx, n, ref.device)
    if (points is None) != (centers is None):
        raise ValueError(f"{fn}: points= and centers= go together (relative coordinates need both)")
    if points is not None:
        _check_rows(fn, "points", points, n=n, layout="(N, D)")
        _check_rows(fn, "centers", centers, n=idx.shape[0], cols=points.shape[1], layout="(M, D)")
        for name, t in (("points", points), ("centers", centers)):
            if t.device != ref.device:
                raise ValueError(f"{fn}: {name} must be on {ref.device}, got {t.device}")
    parts = []
    if points is not None:
        rel = knn_gather(points[None], idx[None])[0] - centers.unsqueeze(1)
        parts.append(torch.where((idx >= 0).unsqueeze(-1), rel, rel.new_zeros(())))
    if features is not None:
        if features.shape[1] == 0:
            parts.append(features.new_zeros(idx.shape + (0,)))
        else:
            parts.append(knn_gather(features[None], idx[None])[0])
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)




def interpolate_packed(query, points, features, k: int = 3, *, query_offsets=None, points_offsets=None,
                       eps: float = 1e-8) -> torch.Tensor:
    """Inverse-distance weighted features of the ``k`` nearest points of the same cloud.

    With ``d_j`` the Euclidean distance from a query row to its j-th nearest
    point of its cloud (:func:`pcgeom.knn`: ascending, ties to the lower
    index), ``w_j = (1 / (d_j + eps)) / sum_i 1 / (d_i + eps)`` and
    ``out = sum_j w_j * features[idx_j]`` -- Point Transformer's / PointNet++'s
    up-sampling.  A cloud with fewer than ``k`` points blends the points it
    has (missing neighbours get weight 0); an empty cloud gives zeros.

    Args:
        query: ``(M, D)`` floating tensor, where features are wanted.
        points: ``(N, D)`` tensor of the same dtype and device, where they are known.
        features: ``(N, C)`` floating tensor on the same device.
        k: neighbours to blend, an int >= 1 (Point Transformer uses 3).
        query_offsets: int ``(B,)`` cumulative end offsets of the clouds of
            ``query`` (``None``: one cloud).
        points_offsets: int ``(B,)`` cumulative end offsets of the clouds of
            ``points`` (``None``: one cloud).
        eps: float > 0 added to each distance.

    Returns:
        ``(M, C)`` tensor in the dtype of ``features``, differentiable w.r.t.
        ``features`` (the weights are treated as constants of the geometry,
        as in Point Transformer).

    Example:
        >>> import torch, pcgeom
        >>> pts = torch.tensor([[0.0, 0, 0], [2, 0, 0], [9, 9, 9]])
        >>> f = torch.tensor([[0.0], [10.0], [7.0]])
        >>> q = torch.tensor([[0.5, 0, 0], [9, 9, 9]])
        >>> out = pcgeom.interpolate_packed(q, pts, f, k=2, query_offsets=torch.tensor([1, 2]),
        ...                                 points_offsets=torch.tensor([2, 3]))
        >>> [round(v, 4) for v in out[:, 0].tolist()]
        [2.5, 7.0]
    """
    fn = "interpolate_packed"
    _check_rows(fn, "query", query, layout="(M, D)")
    _check_rows(fn, "points", points, cols=query.shape[1], layout="(N, D)")
    _check_rows(fn, "features", features, n=points.shape[0])
    if features.device != points.device:
        raise ValueError(f"{fn}: features must be on {points.device} like points, got {features.device}")
    k = V.check_int(fn, "k", k, minimum=1)
    eps = V.check_float(fn, "eps", eps)
    if not eps > 0:
        raise ValueError(f"{fn}: eps must be > 0, got {eps}")
    with torch.no_grad():
        dist2, idx = knn(query, points, k, query_offsets=query_offsets, points_offsets=points_offsets)
        recip = 1.0 / (V.safe_sqrt(dist2.to(torch.float64 if features.dtype == torch.float64 else torch.float32)) + eps)
        weight = recip / recip.sum(dim=1, keepdim=True).clamp_min(torch.finfo(recip.dtype).tiny)
    if features.shape[1] == 0:
        return features.new_zeros((query.shape[0], 0))
    g = knn_gather(features[None], idx[None])[0]
    return (g * weight.to(features.dtype).unsqueeze(-1)).sum(dim=1)


def aggregate_neighbors(features, idx, weight, position=None) -> torch.Tensor:
    """Point Transformer's vector-attention aggregation with channel-shared weights.

    ``out[m, c] = sum_j (features[idx[m, j], c] + position[m, j, c]) * weight[m, j, c % W]``
    -- the ``W`` weight channels are shared by the channels ``c`` with the same
    ``c mod W`` (Point Transformer v1's ``share_planes``).  Slots with
    ``idx = -1`` contribute nothing.

    Args:
        features: ``(N, C)`` floating tensor (the values).
        idx: ``(M, k)`` int32/int64 neighbour rows in ``[-1, N)``.
        weight: ``(M, k, W)`` attention weights, ``W`` >= 1.
        position: optional ``(M, k, C)`` positional encodings added to the values.

    Returns:
        ``(M, C)`` tensor, differentiable w.r.t. ``features``, ``weight`` and
        ``position``.

    Example:
        >>> import torch, pcgeom
        >>> f = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> w = torch.tensor([[[0.5], [0.5]]])
        >>> pcgeom.aggregate_neighbors(f, torch.tensor([[0, 1]]), w).tolist()
        [[2.0, 3.0]]
    """
    fn = "aggregate_neighbors"
    _check_rows(fn, "features", features)
    idx = _check_idx(fn, idx, features.shape[0], features.device)
    M, K = idx.shape
    C = features.shape[1]
    V.check_tensor(fn, "weight", weight, 3, "(M, k, W)")
    if weight.shape[0] != M or weight.shape[1] != K or weight.shape[2] < 1:
        raise ValueError(f"{fn}: weight must have shape (M, k, W) = ({M}, {K}, W >= 1) like idx, got {V.shape_str(weight)}")
    if weight.dtype not in V.FLOAT_DTYPES or weight.device != features.device:
        raise TypeError(f"{fn}: weight must be a floating tensor on {features.device}, got {weight.dtype} on {weight.device}")
    values = knn_gather(features[None], idx[None])[0]  # zeros at -1
    if position is not None:
        V.check_tensor(fn, "position", position, 3, "(M, k, C)")
        if tuple(position.shape) != (M, K, C):
            raise ValueError(f"{fn}: position must have shape (M, k, C) = ({M}, {K}, {C}), got {V.shape_str(position)}")
        if position.device != features.device:
            raise ValueError(f"{fn}: position must be on {features.device}, got {position.device}")
        values = values + torch.where((idx >= 0).unsqueeze(-1), position, position.new_zeros(()))
    W = weight.shape[2]
    reps = -(-C // W)
    w = weight.repeat(1, 1, reps)[..., :C] if reps > 1 or W != C else weight
    return (values * w).sum(dim=1)
