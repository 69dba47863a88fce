"""Deterministic segment reductions: :func:`segment_reduce`, :func:`group_reduce`, :func:`group_gather`.

Reductions of the rows of a tensor by group -- contiguous segments given by
cumulative end offsets (pcgeom's packed convention), or an arbitrary group id
per row -- with one answer on every device and every run:

* floating sums, means and products: the rows are brought together by a
  **stable sort of the group ids** (skipped when the ids are already
  sorted), then each output element is accumulated **in row order** by
  ``torch.segment_reduce`` -- one sequential pass per element, never atomic
  adds, so the result does not depend on the thread schedule (and is the
  sequential sum torch_scatter's CPU kernel computes);
* integer sums / products are exact (wrapping) in any order;
* ``min`` / ``max`` values do not depend on the order of comparisons
  (NaN propagates);
* ``min`` / ``max`` pick the **lowest row** among tied extremes
  (``return_arg=True``), and their gradient flows to that row only;
* the backward of :func:`group_gather` is :func:`group_reduce` ``"sum"``
  (a plain ``index_select`` would scatter its gradient with atomics on CUDA).

float16 / bfloat16 are accumulated in float32 and rounded once; float32,
float64 and integers in their own dtype (integer sums wrap like torch's).

These are the reductions behind :mod:`pcgeom.compat.torch_scatter` and the
``"mean"`` / ``"nearest_to_center"`` reductions of :func:`pcgeom.grid_subsample`.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import torch

from pcgeom import _validation as V

REDUCTIONS = ("sum", "mean", "prod", "min", "max")

HALF_ACC = {torch.float16: torch.float32, torch.bfloat16: torch.float32}

__all__ = ["REDUCTIONS", "group_gather", "group_reduce", "segment_reduce"]


def _check_src(fn: str, src) -> None:
    if not isinstance(src, torch.Tensor):
        raise TypeError(f"{fn}: src must be a torch.Tensor, got {type(src).__name__}")
    if src.dtype not in V.FLOAT_DTYPES and src.dtype not in V.INT_DTYPES:
        raise TypeError(f"{fn}: src must be a floating or integer tensor (float16/bfloat16/float32/float64, "
                        f"int8/16/32/64, uint8), got {src.dtype}")


def _check_reduce(fn: str, reduce) -> None:
    if reduce not in REDUCTIONS:
        raise ValueError(f"{fn}: reduce must be one of {REDUCTIONS}, got {reduce!r}")


def _check_dim(fn: str, dim, ndim: int) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{fn}: dim must be an int, got {type(dim).__name__}")
    if ndim == 0 or not -ndim <= dim < ndim:
        raise ValueError(f"{fn}: dim must be in [{-max(ndim, 1)}, {max(ndim, 1) - 1}] for a {ndim}-d src, got {dim}")
    return dim % ndim


def grouped_rows(fn: str, x: torch.Tensor, key: torch.Tensor, S: int, reduce: str, want_arg: bool,
             is_sorted: Optional[bool] = None):
    """Core: rows of ``x`` (M, C) by ``key`` (M,) int64 in [0, S) -> ((S, C) in x.dtype, arg (S, C) or None, counts (S,)).

    Empty groups: 0 (``prod``: 1); ``arg`` is ``M`` there.  Callers have
    validated ``key``.
    """
    M, C = x.shape
    dev = x.device
    counts = torch.bincount(key, minlength=S) if M else torch.zeros(S, dtype=torch.int64, device=dev)
    if reduce in ("min", "max"):
        with torch.no_grad():
            arg = _extreme(x, key, S, reduce)
        # The values are the chosen rows themselves (so -0.0 / +0.0 is the
        # element's own), and the gradient goes to the lowest tied row only.
        if M == 0:
            out = torch.zeros((S, C), dtype=x.dtype, device=dev)
            out = out + x.sum() * 0 if x.requires_grad else out
        else:
            empty = arg == M
            out = torch.gather(x, 0, arg.clamp(max=M - 1)).masked_fill(empty, 0)
        return out, (arg if want_arg else None), counts
    fill = 1 if reduce == "prod" else 0
    if M == 0 or S == 0:
        out = torch.full((S, C), fill, dtype=x.dtype, device=dev)
        return (out + x.sum() * 0 if x.requires_grad else out), None, counts
    if not x.is_floating_point():
        # Integer sums and products are exact (wrapping) whatever the order.
        if reduce == "prod":
            out = torch.ones((S, C), dtype=x.dtype, device=dev).scatter_reduce_(0, key[:, None].expand(M, C), x, "prod")
        else:
            out = torch.zeros((S, C), dtype=x.dtype, device=dev).index_add_(0, key, x)
            if reduce == "mean":
                out = torch.div(out, counts.clamp(min=1)[:, None].to(x.dtype), rounding_mode="floor")
        return out, None, counts
    acc = HALF_ACC.get(x.dtype, x.dtype)
    if x.device.type == "cpu" and reduce != "prod":
        # CPU index_add adds the rows one after the other in row order: the
        # same sequence of roundings as the sorted pass below, without a sort
        # (tests/test_segment.py checks the two agree bit for bit).
        out = torch.zeros((S, C), dtype=acc, device=dev).index_add(0, key, x.to(acc))
    else:
        out = _sorted_pass(x.to(acc), key, counts, reduce, fill, is_sorted)
    if reduce == "mean":
        out = out / counts.clamp(min=1)[:, None].to(acc)
    return out.to(x.dtype), None, counts


def _sorted_pass(x, key, counts, reduce, fill, is_sorted=None):
    """Sum / product per group, one sequential pass per output element in row order.

    A stable sort brings each group's rows together (skipped when ``key`` is
    sorted); ``torch.segment_reduce`` on the 2-d layout then accumulates each
    element from ``fill`` in row order (one thread per element on CUDA), with
    no atomics.
    """
    M = x.shape[0]
    if is_sorted is None:
        is_sorted = bool((key[1:] >= key[:-1]).all()) if M > 1 else True
    xs = x if is_sorted else x.index_select(0, torch.sort(key, stable=True)[1])
    if reduce != "prod":
        return ordered_segment_sum(xs, counts, 0)
    if xs.requires_grad and torch.is_grad_enabled():
        return _SegmentProd.apply(xs, counts)
    return torch.segment_reduce(xs, "prod", lengths=counts, axis=0, unsafe=True, initial=fill)


class _SegmentProd(torch.autograd.Function):
    """The segment product with torch's first-order gradient and a named refusal of the second.

    torch's backward of ``segment_reduce(..., "prod")`` (zeros included) has no derivative;
    under ``create_graph=True`` the gradient is returned through :class:`_NoSecondOrder`, so
    differentiating it raises an error naming the function instead of torch's internal op.
    """

    @staticmethod
    def forward(ctx, x, counts):
        out = torch.segment_reduce(x, "prod", lengths=counts, axis=0, unsafe=True, initial=1)
        ctx.save_for_backward(x, counts, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, counts, out = ctx.saved_tensors
        with torch.no_grad():
            g = torch.ops.aten._segment_reduce_backward(grad, out, x, "prod", lengths=counts, axis=0, initial=1)
        if torch.is_grad_enabled():
            g = _NoSecondOrder.apply(g, grad, x)
        return g, None


class _NoSecondOrder(torch.autograd.Function):
    """Identity on a first-order gradient ``g`` (of ``grad`` and ``x``) whose own backward raises."""

    @staticmethod
    def forward(ctx, g, grad, x):
        return g.clone()

    @staticmethod
    def backward(ctx, gg):
        raise RuntimeError(
            "reduce='prod' (pcgeom.group_reduce / segment_reduce, torch_scatter's scatter_mul): a floating product "
            "has no second-order gradient (torch.segment_reduce's product backward has no derivative); reduce "
            "logarithms with 'sum' instead, or keep the product out of the differentiated gradient")


class _SegmentSum(torch.autograd.Function):
    """``torch.segment_reduce(x, "sum")`` whose backward is a differentiable row gather.

    torch's own backward of ``segment_reduce`` has no derivative (a second order raises
    ``derivative for aten::_segment_reduce_backward is not implemented``); a segment sum is
    linear, its adjoint is the gather of each segment's gradient to its rows, and the
    gather's adjoint is this sum again, so every order exists.
    """

    @staticmethod
    def forward(ctx, x, lengths, axis):
        ctx.save_for_backward(lengths)
        ctx.axis = axis
        return _segment_sum_values(x, lengths, axis)

    @staticmethod
    def backward(ctx, grad):
        (lengths,) = ctx.saved_tensors
        seg = torch.repeat_interleave(torch.arange(lengths.shape[0], device=lengths.device), lengths)
        return grad.index_select(ctx.axis, seg), None, None


def _segment_sum_values(x, lengths, axis):
    lens = lengths.expand(list(x.shape[:axis]) + [lengths.shape[0]]).contiguous() if axis else lengths
    return torch.segment_reduce(x, "sum", lengths=lens, axis=axis, unsafe=True, initial=0)


def ordered_segment_sum(x: torch.Tensor, lengths: torch.Tensor, axis: int) -> torch.Tensor:
    """Sums of the consecutive runs of ``lengths`` (1-d int64, summing to ``x.shape[axis]``) along ``axis``.

    One sequential pass per output element in row order (``torch.segment_reduce``: the same
    answer on every run and device); differentiable to any order.
    """
    if x.requires_grad and torch.is_grad_enabled():
        return _SegmentSum.apply(x, lengths, axis)
    return _segment_sum_values(x, lengths, axis)


def extreme_values(x, key, S, reduce):
    """min/max values only (S, C), empty groups 0: one scatter-reduce (the values do not depend on
    the order of comparisons; which zero, -0.0 or +0.0, a tie of the two gives is unspecified)."""
    M, C = x.shape
    out = torch.zeros((S, C), dtype=x.dtype, device=x.device)
    if M:
        out.scatter_reduce_(0, key[:, None].expand(M, C), x, "amin" if reduce == "min" else "amax", include_self=False)
    return out


def _extreme(x, key, S, reduce):
    """The lowest row attaining each group's min/max (S, C); empty groups M.

    Extremes do not depend on the order of comparisons (NaN propagates), so
    a scatter-reduce gives the same values on every device; ``arg`` is the
    integer minimum over the rows equal to the extreme.
    """
    M, C = x.shape
    dev = x.device
    arg = torch.full((S, C), M, dtype=torch.int64, device=dev)
    if M == 0:
        return arg
    out = torch.zeros((S, C), dtype=x.dtype, device=dev)
    kx = key[:, None].expand(M, C)
    out.scatter_reduce_(0, kx, x, "amin" if reduce == "min" else "amax", include_self=False)
    at = out.index_select(0, key)
    hit = x == at
    if x.is_floating_point() and bool(torch.isnan(out).any()):
        hit |= torch.isnan(x) & torch.isnan(at)
    # Positions as int32 when they fit: half the memory of the (M, C) candidates.
    it = torch.int32 if M < 2**31 - 1 else torch.int64
    rows = torch.arange(M, device=dev, dtype=it)[:, None]
    cand = torch.where(hit, rows, torch.tensor(M, dtype=it, device=dev))
    best = torch.full((S, C), M, dtype=it, device=dev).scatter_reduce_(0, kx, cand, "amin")
    return best.to(torch.int64)


def _to_rows(src: torch.Tensor, dim: int) -> torch.Tensor:
    C = 1
    for i, s in enumerate(src.shape):
        if i != dim:
            C *= s
    return src.movedim(dim, 0).reshape(src.shape[dim], C)


def _from_rows(rows: torch.Tensor, src_shape, dim: int) -> torch.Tensor:
    shape = list(src_shape)
    shape.pop(dim)
    return rows.reshape([rows.shape[0]] + shape).movedim(0, dim)


def group_reduce(src: torch.Tensor, index: torch.Tensor, num_groups: Optional[int] = None, reduce: str = "sum", *,
                 dim: int = 0, return_arg: bool = False) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Reduces the slices of ``src`` along ``dim`` by group id, deterministically.

    ``out[..., g, ...] = reduce(src[..., i, ...] for i with index[i] == g)``
    (``g`` at position ``dim``), computed by a stable sort of ``index`` and a
    sequential pass per output element in row order (see
    :mod:`pcgeom.segment`): the same bits on every run, no atomics.

    Args:
        src: ``(..., N, ...)`` float16/bfloat16/float32/float64 or integer
            tensor; ``N`` is ``src.shape[dim]``.
        index: ``(N,)`` integer group id of every slice, in ``[0, num_groups)``
            (any order).
        num_groups: number of groups ``G``; default ``index.max() + 1``
            (0 for empty ``index``).
        reduce: ``"sum"``, ``"mean"``, ``"prod"``, ``"min"`` or ``"max"``.
        dim: the dimension to reduce (default 0).
        return_arg: with ``"min"`` / ``"max"``, also return the position along
            ``dim`` of the chosen slice element.

    Returns:
        ``(..., G, ...)`` tensor in ``src``'s dtype.  Empty groups are 0
        (``"prod"``: 1).  ``"mean"`` divides by the group size (integers:
        floor division).  float16/bfloat16 accumulate in float32, rounded once.
        With ``return_arg``: ``(values, arg)``, ``arg`` int64 of the same shape,
        the **lowest** position attaining the extreme (NaN counts as equal to
        NaN), ``N`` for empty groups.  Differentiable w.r.t. ``src`` (floating);
        ``"min"`` / ``"max"`` route the gradient to ``arg`` only.  Second-order
        gradients (``create_graph=True``) exist for every reduction but floating
        ``"prod"``, whose second order raises a RuntimeError naming it.

    Raises:
        TypeError: ``src`` / ``index`` of the wrong type or dtype.
        ValueError: unknown ``reduce``, bad ``dim``, ``index`` of the wrong
            shape or device, or values outside ``[0, num_groups)``.

    Example:
        >>> import torch, pcgeom
        >>> x = torch.tensor([[1.0, 2], [3, 4], [5, 6]])
        >>> pcgeom.group_reduce(x, torch.tensor([1, 0, 1]), 3, "sum").tolist()
        [[3.0, 4.0], [6.0, 8.0], [0.0, 0.0]]
        >>> v, a = pcgeom.group_reduce(x, torch.tensor([1, 0, 1]), reduce="max", return_arg=True)
        >>> v.tolist(), a.tolist()
        ([[3.0, 4.0], [5.0, 6.0]], [[1, 1], [2, 2]])
    """
    fn = "group_reduce"
    _check_src(fn, src)
    _check_reduce(fn, reduce)
    d = _check_dim(fn, dim, src.dim())
    N = src.shape[d]
    if not isinstance(index, torch.Tensor) or index.dtype not in V.INT_DTYPES:
        raise TypeError(f"{fn}: index must be an integer tensor of shape ({N},), got "
                        f"{index.dtype if isinstance(index, torch.Tensor) else type(index).__name__}")
    if index.shape != (N,):
        raise ValueError(f"{fn}: index must have shape ({N},) (src.shape[{dim}]), got {tuple(index.shape)}")
    if index.device != src.device:
        raise ValueError(f"{fn}: index must be on {src.device} like src, got {index.device}")
    key = index.to(torch.int64)
    lo, hi = (torch.stack([key.min(), key.max()]).tolist() if N else (0, -1))
    if num_groups is None:
        G = hi + 1
    else:
        G = V.check_int(fn, "num_groups", num_groups, 0)
    if N and (lo < 0 or hi >= G):
        raise ValueError(f"{fn}: index values must be in [0, {G}), got min {lo}, max {hi}")
    rows = _to_rows(src, d)
    out, arg, _ = grouped_rows(fn, rows, key, G, reduce, return_arg and reduce in ("min", "max"))
    out = _from_rows(out, src.shape, d)
    if return_arg and reduce in ("min", "max"):
        return out, _from_rows(arg, src.shape, d)
    return out


def segment_reduce(src: torch.Tensor, offsets, reduce: str = "sum", *, dim: int = 0,
                   return_arg: bool = False) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Reduces contiguous segments of ``src`` along ``dim``, deterministically.

    Segment ``b`` is ``src[offsets[b-1]:offsets[b]]`` along ``dim``
    (``offsets[-1] = 0``): pcgeom's packed convention (Pointcept's
    ``offset``).  The same reduction as :func:`group_reduce`, without a sort.

    Args:
        src: ``(..., N, ...)`` float16/bfloat16/float32/float64 or integer tensor.
        offsets: ``(B,)`` integer cumulative end offsets, non-decreasing,
            ``offsets[-1] == N``; a segment may be empty.
        reduce: ``"sum"``, ``"mean"``, ``"prod"``, ``"min"`` or ``"max"``.
        dim: the dimension to reduce (default 0).
        return_arg: with ``"min"`` / ``"max"``, also return the absolute position
            along ``dim`` of the chosen element.

    Returns:
        ``(..., B, ...)`` tensor in ``src``'s dtype (empty segments 0,
        ``"prod"``: 1), or ``(values, arg)`` as in :func:`group_reduce`
        (``arg`` is ``N`` for empty segments).

    Raises:
        TypeError: wrong types or dtypes.
        ValueError: unknown ``reduce``, bad ``dim``, offsets not non-decreasing
            or not ending at ``N``.

    Example:
        >>> import torch, pcgeom
        >>> x = torch.tensor([1.0, 2, 3, 4, 5])
        >>> pcgeom.segment_reduce(x, torch.tensor([2, 2, 5]), "mean").tolist()
        [1.5, 0.0, 4.0]
    """
    from pcgeom.ops.packed import offsets_arg

    fn = "segment_reduce"
    _check_src(fn, src)
    _check_reduce(fn, reduce)
    d = _check_dim(fn, dim, src.dim())
    N = src.shape[d]
    off = offsets_arg(fn, "offsets", offsets, N, src.device)
    B = off.shape[0]
    key = torch.searchsorted(off, torch.arange(N, device=src.device), right=True)
    rows = _to_rows(src, d)
    want = return_arg and reduce in ("min", "max")
    out, arg, _ = grouped_rows(fn, rows, key, B, reduce, want, is_sorted=True)
    out = _from_rows(out, src.shape, d)
    if want:
        return out, _from_rows(arg, src.shape, d)
    return out


class _GatherRows(torch.autograd.Function):
    """``x.index_select(0, idx)`` whose backward is the deterministic group sum."""

    @staticmethod
    def forward(ctx, x, idx):
        ctx.save_for_backward(idx)
        ctx.n = x.shape[0]
        return x.index_select(0, idx)

    @staticmethod
    def backward(ctx, grad):
        (idx,) = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None
        g, _, _ = grouped_rows("group_gather", grad.contiguous(), idx, ctx.n, "sum", False)
        return g, None


def gather_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``x (S, C)`` rows at ``idx (M,)`` int64 (validated by the caller), deterministic backward."""
    if x.requires_grad and torch.is_grad_enabled():
        return _GatherRows.apply(x, idx)
    return x.index_select(0, idx)


def group_gather(src: torch.Tensor, index: torch.Tensor, *, dim: int = 0) -> torch.Tensor:
    """Broadcasts per-group values back to the rows: ``src.index_select(dim, index)``, deterministic backward.

    The inverse companion of :func:`group_reduce`: ``out[..., i, ...] =
    src[..., index[i], ...]``.  The forward is an ``index_select``; the
    backward sums the gradients of the rows of each group with
    :func:`group_reduce` (``"sum"``) instead of atomic adds, so gradients are
    identical run to run on CUDA too.

    Args:
        src: ``(..., G, ...)`` tensor (any dtype; gradients for floating).
        index: ``(M,)`` integer group ids in ``[0, G)``.
        dim: the dimension of ``src`` indexed (default 0).

    Returns:
        ``(..., M, ...)`` tensor in ``src``'s dtype.

    Raises:
        TypeError: ``index`` not an integer tensor.
        ValueError: bad ``dim``, ``index`` not 1-D or on another device, or
            values outside ``[0, G)``.

    Example:
        >>> import torch, pcgeom
        >>> pcgeom.group_gather(torch.tensor([10.0, 20.0]), torch.tensor([1, 0, 1])).tolist()
        [20.0, 10.0, 20.0]
    """
    fn = "group_gather"
    if not isinstance(src, torch.Tensor):
        raise TypeError(f"{fn}: src must be a torch.Tensor, got {type(src).__name__}")
    d = _check_dim(fn, dim, src.dim())
    G = src.shape[d]
    if not isinstance(index, torch.Tensor) or index.dtype not in V.INT_DTYPES:
        raise TypeError(f"{fn}: index must be an integer tensor of shape (M,), got "
                        f"{index.dtype if isinstance(index, torch.Tensor) else type(index).__name__}")
    if index.dim() != 1:
        raise ValueError(f"{fn}: index must have shape (M,), got {tuple(index.shape)}")
    if index.device != src.device:
        raise ValueError(f"{fn}: index must be on {src.device} like src, got {index.device}")
    key = index.to(torch.int64)
    if key.numel():
        lo, hi = torch.stack([key.min(), key.max()]).tolist()
        if lo < 0 or hi >= G:
            raise ValueError(f"{fn}: index values must be in [0, {G}), got min {lo}, max {hi}")
    rows = _to_rows(src, d)
    return _from_rows(gather_rows(rows, key), src.shape, d)
