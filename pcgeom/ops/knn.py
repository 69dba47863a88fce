"""``pcgeom.knn``: exact k-nearest neighbours over batched, ragged point sets."""

from __future__ import annotations

from typing import NamedTuple

import torch

from pcgeom import _validation as V
from pcgeom.ops.knn_gather import call_first_order
from pcgeom.ops.packed import packed_knn


class KNNResult(NamedTuple):
    """Result of :func:`pcgeom.knn` and :func:`pcgeom.ball_query`."""

    dist2: torch.Tensor
    idx: torch.Tensor


def knn(query, points, k, *, query_lengths=None, points_lengths=None,
        query_offsets=None, points_offsets=None) -> KNNResult:
    """K nearest neighbours of each query point among ``points``, exactly.

    Args:
        query: ``(B, M, D)`` float16/bfloat16/float32/float64 tensor, any D >= 1.
        points: ``(B, N, D)`` tensor of the same dtype and device.
        k: number of neighbours, an int >= 1.  ``k > N`` is allowed (padded).
        query_lengths: optional int ``(B,)``; rows ``m >= query_lengths[b]`` are padding.
        points_lengths: optional int ``(B,)``; only ``points[b, :points_lengths[b]]``
            are searched.
        query_offsets: the **packed** layout instead: 2-D
            ``query (M_total, D)`` / ``points (N_total, D)`` with int ``(B,)``
            cumulative end offsets (Pointcept's ``offset``; ``None`` = one
            cloud).  Then ``dist2`` / ``idx`` are ``(M_total, k)`` and ``idx``
            is global into the packed ``points``; see :mod:`pcgeom.ops.packed`.
        points_offsets: the packed points' int ``(B,)`` cumulative end offsets, as ``query_offsets``.

    Returns:
        ``KNNResult(dist2, idx)``:

        * ``dist2 (B, M, k)``: **squared** Euclidean distances, ascending, in the
            dtype of the input.  They are computed as ``sum_d (q_d - p_d)**2``
            (never the ``|a|^2+|b|^2-2ab`` expansion), accumulated in float32
            (float64 for float64 input), so a point's distance to itself is exactly 0.
        * ``idx (B, M, k)`` int64, 0-based indices into ``points[b]``.

        **Ties go to the lower index.**  NaN distances (NaN coordinates) rank
        after ``+inf`` ones and never produce an index outside ``[-1, N)``.
        Slots beyond the available points (``k > points_lengths[b]``) and rows
        beyond ``query_lengths[b]`` hold ``idx = -1``, ``dist2 = +inf``.

    Differentiable with respect to ``query`` and ``points`` through ``dist2``;
    padded slots get zero gradient.  Differentiable to any order: the backward
    op has autograd of its own, so gradient penalties and Hessian-vector
    products (``create_graph=True``) reach every input.  Memory is bounded: no ``M x N`` distance
    matrix is ever allocated.

    Raises:
        TypeError, ValueError: bad shapes, dtypes, devices, ``k < 1`` or lengths
            out of range, naming the argument, the expected and the actual value.
        RuntimeError: outputs ``(B, M, k)`` that cannot be allocated (a huge
            ``k``): the message names ``k`` and the bytes needed.  Any size that
            fits in memory works; see docs/guides/limits.md.  The raw op
            ``torch.ops.pcgeom.knn`` checks the same things itself.

    Example:
        >>> import torch, pcgeom
        >>> pts = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 2, 0]]])
        >>> d, i = pcgeom.knn(pts, pts, k=2)
        >>> i[0].tolist()
        [[0, 1], [1, 0], [2, 0]]
        >>> d[0, :, 1].tolist()
        [1.0, 1.0, 4.0]
    """
    fn = "knn"
    if isinstance(query, torch.Tensor) and isinstance(points, torch.Tensor) and query.dim() == 2 == points.dim():
        return KNNResult(*packed_knn(query, points, k, query_offsets, points_offsets,
                                     query_lengths is not None or points_lengths is not None))
    V.check_offsets_unused(fn, query_offsets, points_offsets)
    V.check_points(fn, "query", query, "(B, M, D)")
    V.check_points(fn, "points", points, "(B, N, D)")
    V.check_pair(fn, "query", query, "points", points)
    k = V.check_int(fn, "k", k, minimum=1)
    B, M, _ = query.shape
    N = points.shape[1]
    ql = V.lengths_arg(fn, "query_lengths", query_lengths, B, M, query.device)
    pl = V.lengths_arg(fn, "points_lengths", points_lengths, B, N, query.device)
    dist2, idx = torch.ops.pcgeom.knn(query, points, k, ql, pl)
    return KNNResult(dist2, idx)


@torch.library.register_fake("pcgeom::knn")
def _knn_fake(query, points, k, query_lengths, points_lengths):
    B, M, _ = query.shape
    return query.new_empty((B, M, k)), query.new_empty((B, M, k), dtype=torch.int64)


@torch.library.register_fake("pcgeom::knn_backward")
def _knn_backward_fake(grad_dist2, query, points, idx):
    return torch.empty_like(query), torch.empty_like(points)


def _knn_setup_context(ctx, inputs, output):
    query, points = inputs[0], inputs[1]
    ctx.save_for_backward(query, points, output[1])


def _knn_backward(ctx, grad_dist2, grad_idx):
    query, points, idx = ctx.saved_tensors
    n_extra = len(ctx.needs_input_grad) - 2
    if grad_dist2 is None:
        return (None, None) + (None,) * n_extra
    gq, gp = call_first_order(torch.ops.pcgeom.knn_backward.default, grad_dist2.contiguous(), query, points, idx)
    return (
        gq if ctx.needs_input_grad[0] else None,
        gp if ctx.needs_input_grad[1] else None,
    ) + (None,) * n_extra


def _knn_backward_setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)  # grad_dist2, query, points, idx


def _knn_backward_backward(ctx, grad_gq, grad_gp):
    """Double backward: ``knn_backward`` is bilinear in ``grad_dist2`` and the differences.

    With ``g = grad_dist2`` and ``(a, b)`` the incoming gradients of ``(gq, gp)``, the
    scalar the chain rule differentiates is
    ``L = sum_{m,j valid} 2 g[m,j] (q[m] - p[idx]) . (a[m] - b[idx])``, so
    ``dL/dq, dL/dp = knn_backward(g, a, b, idx)`` (the same form with ``(a, b)`` in
    place of the points) and ``dL/dg = 2 (q[m] - p[idx]) . (a[m] - b[idx])``.  Both
    are written with pcgeom ops that have autograd themselves (``knn_backward``,
    ``knn_gather``), so every higher order works too.
    """
    grad_dist2, query, points, idx = ctx.saved_tensors
    if grad_gq is None and grad_gp is None:
        return None, None, None, None
    a = torch.zeros_like(query) if grad_gq is None else grad_gq.contiguous()
    b = torch.zeros_like(points) if grad_gp is None else grad_gp.contiguous()
    dg = dq = dp = None
    if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
        dq, dp = torch.ops.pcgeom.knn_backward(grad_dist2, a, b, idx)
    if ctx.needs_input_grad[0]:
        acc = V.acc_dtype(query.dtype)
        diff = query.to(acc).unsqueeze(2) - torch.ops.pcgeom.knn_gather(points.to(acc), idx)
        dir_ = a.to(acc).unsqueeze(2) - torch.ops.pcgeom.knn_gather(b.to(acc), idx)
        dg = torch.where(idx >= 0, 2 * (diff * dir_).sum(-1), 0).to(grad_dist2.dtype)
    return (dg, dq if ctx.needs_input_grad[1] else None, dp if ctx.needs_input_grad[2] else None, None)


# ball_query shares the backward: its dist2 has the same definition.
torch.library.register_autograd("pcgeom::knn", _knn_backward, setup_context=_knn_setup_context)
torch.library.register_autograd("pcgeom::ball_query", _knn_backward, setup_context=_knn_setup_context)
# The backward op has autograd of its own, so gradients of gradients (gradient penalties,
# Hessian-vector products) flow instead of being dropped with a warning.
torch.library.register_autograd("pcgeom::knn_backward", _knn_backward_backward,
                                setup_context=_knn_backward_setup_context)
