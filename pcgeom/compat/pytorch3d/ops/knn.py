"""``pytorch3d.ops.knn`` served by pcgeom: ``knn_points``, ``knn_gather`` and the ``_KNN`` tuple.

pytorch3d v0.7.9's semantics (its CPU kernel ``knn_cpu.cpp`` and its Python
wrapper), on pcgeom's kernels:

* ``norm=2`` runs :func:`pcgeom.knn` (squared distances ``sum_d (p1_d - p2_d)**2``
  summed in coordinate order, as upstream's loop); ``norm=1`` (the L1 metric
  ``sum_d |p1_d - p2_d|``, which pcgeom's kernel has no mode for) runs a pure-torch
  search in row chunks of bounded size, never a ``P1 x P2`` matrix of the whole cloud.
* Neighbours come sorted by distance, **ties to the lower index** (upstream's CPU
  heap keeps the first of equal distances too); ``return_sorted=False`` returns the
  same sorted answer, which upstream's CPU kernel does as well.
* Padding is **0 in both** ``dists`` and ``idx``: slots ``k >= lengths2[n]`` and rows
  ``i >= lengths1[n]``.
* ``dists`` is differentiable w.r.t. ``p1`` and ``p2`` with upstream's gradients
  (L1: sign ``+1`` where ``p1_d > p2_d``, else ``-1``, also at equality).

Beyond upstream: float64 (and float16/bfloat16) inputs are searched in their own
precision instead of being rejected, ``K < 1`` raises a ``ValueError`` naming ``K``,
and lengths outside ``[0, P]`` raise instead of reading out of bounds.
"""

from __future__ import annotations

from collections import namedtuple

import torch

from pcgeom import _validation as V
from pcgeom.ops import knn as _pc_knn
from pcgeom.ops import knn_gather as _pc_knn_gather

__all__ = ["_KNN", "knn_gather", "knn_points"]

KNN = namedtuple("KNN", "dists idx knn")
# upstream's name for it: its ball_query and its tests import the underscored one
_KNN = KNN

# Elements of one (B, rows, P2) block of the L1 search: 4M floats, 16 MB in float32.
_L1_BLOCK = 1 << 22


def _l1_sum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``sum_d |a_d - b_d|`` over the last axis, accumulated in coordinate order (upstream's loop).

    ``where(a > b, a - b, b - a)`` rather than ``abs``: its gradient is upstream's
    ``sign = a > b ? 1 : -1``, which is -1 (not 0) where the coordinates are equal.
    """
    out = None
    for d in range(a.shape[-1]):
        ad, bd = a[..., d], b[..., d]
        term = torch.where(ad > bd, ad - bd, bd - ad)
        out = term if out is None else out + term
    return out


def _l1_search(p1, p2, lengths1, lengths2, K):
    """Indices of the K L1-nearest points, ``(N, P1, K)`` int64, -1 where there are none; no gradient."""
    N, P1, D = p1.shape
    P2 = p2.shape[1]
    acc = V.acc_dtype(p1.dtype)
    idx = torch.full((N, P1, K), -1, dtype=torch.int64, device=p1.device)
    if N == 0 or P1 == 0 or P2 == 0:
        return idx
    a, b = p1.detach().to(acc), p2.detach().to(acc)
    invalid = torch.arange(P2, device=p1.device)[None, None, :] >= lengths2[:, None, None]  # (N, 1, P2)
    kk = min(K, P2)
    rows = max(1, _L1_BLOCK // max(1, N * P2))
    for s in range(0, P1, rows):
        e = min(P1, s + rows)
        d = _l1_sum(a[:, s:e, None, :], b[:, None, :, :])  # (N, rows, P2)
        d = d.masked_fill(invalid, float("inf"))
        # a stable sort puts equal distances in index order: ties go to the lower index
        order = torch.sort(d, dim=2, stable=True).indices[..., :kk]
        idx[:, s:e, :kk] = order
    slot = torch.arange(K, device=p1.device)
    pad = (slot[None, None, :] >= lengths2[:, None, None]) | (
        torch.arange(P1, device=p1.device)[None, :, None] >= lengths1[:, None, None])
    return idx.masked_fill(pad, -1)


def knn_points(p1, p2, lengths1=None, lengths2=None, norm: int = 2, K: int = 1, version: int = -1,
               return_nn: bool = False, return_sorted: bool = True) -> _KNN:
    """K nearest neighbours in ``p2`` of every point of ``p1``, pytorch3d's ``knn_points``.

    Args:
        p1: ``(N, P1, D)`` floating tensor, N clouds of up to P1 points.
        p2: ``(N, P2, D)`` tensor of the same dtype and device.
        lengths1: optional int ``(N,)`` in ``[0, P1]``; rows ``i >= lengths1[n]`` are padding.
        lengths2: optional int ``(N,)`` in ``[0, P2]``; only ``p2[n, :lengths2[n]]`` is searched.
        norm: 2 (squared Euclidean distances) or 1 (L1 distances ``sum |dx|``).
        K: number of neighbours, an int >= 1 (``K > P2`` is allowed: padded).
        version: accepted and ignored (upstream picks a CUDA kernel variant with it).
        return_nn: also return the neighbours' coordinates, ``knn_gather(p2, idx, lengths2)``.
        return_sorted: accepted; the answer is always sorted (as upstream's CPU kernel's).

    Returns:
        ``KNN(dists, idx, knn)``, a namedtuple that unpacks into three values:

        * ``dists (N, P1, K)`` in the dtype of ``p1``: squared distances (``norm=2``)
          or L1 distances (``norm=1``), ascending; 0 in padded slots and rows.
        * ``idx (N, P1, K)`` int64 into ``p2[n]``, ties to the lower index; 0 in
          padded slots and rows.
        * ``knn (N, P1, K, D)``, or ``None`` unless ``return_nn``.

    Raises:
        ValueError: ``"pts1 and pts2 must have the same batch dimension."`` /
            ``"... point dimension."`` and ``"Support for 1 or 2 norm."`` (upstream's
            messages); ``K < 1`` or lengths out of range (naming the argument).
        TypeError: non-floating points, mixed dtypes.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.ops import knn_points
        >>> pts = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 2, 0]]])
        >>> dists, idx, nn = knn_points(pts, pts, K=2)
        >>> idx[0].tolist(), dists[0, :, 1].tolist(), nn is None
        ([[0, 1], [1, 0], [2, 0]], [1.0, 1.0, 4.0], True)
        >>> knn_points(pts, pts[:, :1], K=2).idx[0].tolist()  # one point in p2: slot 1 is padding
        [[0, 0], [0, 0], [0, 0]]
    """
    fn = "knn_points"
    V.check_points(fn, "p1", p1, "(N, P1, D)")
    V.check_points(fn, "p2", p2, "(N, P2, D)")
    if p1.shape[0] != p2.shape[0]:
        raise ValueError("pts1 and pts2 must have the same batch dimension.")
    if p1.shape[2] != p2.shape[2]:
        raise ValueError("pts1 and pts2 must have the same point dimension.")
    V.check_pair(fn, "p1", p1, "p2", p2)
    if not (norm == 1 or norm == 2):
        raise ValueError("Support for 1 or 2 norm.")
    K = V.check_int(fn, "K", K, minimum=1)
    N, P1, _ = p1.shape
    P2 = p2.shape[1]
    l1 = V.lengths_arg(fn, "lengths1", lengths1, N, P1, p1.device)
    l2 = V.lengths_arg(fn, "lengths2", lengths2, N, P2, p1.device)
    if norm == 2:
        d, i = _pc_knn(p1, p2, K, query_lengths=l1, points_lengths=l2)
        pad = i < 0
        dists = torch.where(pad, torch.zeros((), dtype=d.dtype, device=d.device), d)
    else:
        i = _l1_search(p1, p2, l1, l2, K)
        pad = i < 0
        acc = V.acc_dtype(p1.dtype)
        nn_pts = _pc_knn_gather(p2.to(acc), i)  # (N, P1, K, D), zeros at padding
        d = _l1_sum(p1.to(acc)[:, :, None, :], nn_pts).to(p1.dtype)
        dists = torch.where(pad, torch.zeros((), dtype=d.dtype, device=d.device), d)
    idx = i.masked_fill(pad, 0)
    nn = knn_gather(p2, idx, l2) if return_nn else None
    return _KNN(dists=dists, idx=idx, knn=nn)


def knn_gather(x, idx, lengths=None):
    """Gathers ``x[n, idx[n, l, k]]`` into ``(N, L, K, U)``, pytorch3d's ``knn_gather``.

    Args:
        x: ``(N, M, U)`` tensor (points or per-point features).
        idx: ``(N, L, K)`` int64 indices into ``x[n]``, e.g. ``knn_points(...).idx``.
        lengths: optional int ``(N,)`` in ``[0, M]``: slots ``k >= lengths[n]`` are padding.

    Returns:
        ``(N, L, K, U)`` tensor in the dtype of ``x``, with ``out[n, l, k] = x[n, idx[n, l, k]]``
        and **0 in every slot** ``k >= lengths[n]`` (whatever ``idx`` holds there);
        differentiable w.r.t. floating ``x``.

    Raises:
        ValueError: ``"x and idx must have same batch dimension."`` (upstream's message),
            other shapes, or an index outside ``[0, M)`` in a slot that is not padding.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.ops import knn_gather
        >>> x = torch.arange(6.0).reshape(1, 3, 2)
        >>> knn_gather(x, torch.tensor([[[2, 0]]]), lengths=torch.tensor([1])).tolist()
        [[[[4.0, 5.0], [0.0, 0.0]]]]
    """
    fn = "knn_gather"
    V.check_tensor(fn, "x", x, 3, "(N, M, U)")
    V.check_index_tensor(fn, "idx", idx, 3, "(N, L, K)")
    N, M, _ = x.shape
    K = idx.shape[2]
    if idx.shape[0] != N:
        raise ValueError("x and idx must have same batch dimension.")
    if idx.device != x.device:
        raise ValueError(f"{fn}: x and idx must be on the same device, got {x.device} and {idx.device}")
    lengths = V.lengths_arg(fn, "lengths", lengths, N, M, x.device)
    pad = torch.arange(K, device=x.device)[None, None, :] >= lengths[:, None, None]  # (N, 1, K)
    # padded slots may hold anything (upstream fills them with 0 after gathering), so they read row -1: zeros
    safe = idx.masked_fill(pad, -1)
    if not V.compiling() and safe.numel():
        lo, hi = int(safe.min()), int(safe.max())
        if lo < -1 or hi >= M:
            bad = lo if lo < -1 else hi
            raise ValueError(f"{fn}: idx values must be in [0, {M}) in the slots k < lengths[n], got {bad}")
    if x.dtype in V.FLOAT_DTYPES:
        return _pc_knn_gather(x, safe)
    g = x[:, :, None].expand(-1, -1, K, -1).gather(1, safe.clamp_min(0)[..., None].expand(-1, -1, -1, x.shape[2]))
    return g.masked_fill((safe < 0)[..., None], 0)
