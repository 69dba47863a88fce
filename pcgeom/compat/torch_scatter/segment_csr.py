"""``torch_scatter.segment_csr``: ``segment_csr``, ``segment_<reduce>_csr`` and ``gather_csr`` (torch_scatter 2.1.2 ``segment_csr.py``)."""

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from pcgeom import _validation as V
from pcgeom import segment as _seg

from pcgeom.compat.torch_scatter._plan import (
    check_index,
    check_out,
    check_src,
    finish,
    Plan,
    SEG_REDUCE,
    with_arg,
    zeros_from,
)

__all__ = ["segment_sum_csr", "segment_add_csr", "segment_mean_csr", "segment_min_csr", "segment_max_csr", "segment_csr", "gather_csr"]


def _indptr(fn: str, indptr, src: Tensor) -> Tuple[Tensor, int]:
    check_index(fn, "indptr", indptr, src)
    if indptr.shape[-1] < 1 and src.numel() > 0:  # an empty src takes an empty indptr (0 segments)
        raise ValueError(f"{fn}: indptr must have at least one entry along its last dimension "
                         f"(S + 1 for S segments), got shape {tuple(indptr.shape)}")
    dim = indptr.dim() - 1
    lead = list(src.shape[:dim])
    try:
        ptr = indptr.expand(lead + [indptr.shape[-1]])
    except RuntimeError:
        raise ValueError(f"{fn}: indptr of shape {tuple(indptr.shape)} cannot be broadcast to "
                         f"{tuple(lead) + (indptr.shape[-1],)} (src's leading dimensions)") from None
    return ptr.to(torch.int64), dim


def _check_ptr(fn: str, ptr: Tensor, E: int, what: str) -> None:
    if ptr.numel() == 0:
        return
    steps = ptr[..., 1:] - ptr[..., :-1]
    bad, lo, hi = torch.stack([(steps < 0).any().long() if steps.numel() else ptr.new_zeros(()),
                               ptr.min(), ptr.max()]).tolist()
    if bad:
        raise ValueError(f"{fn}: indptr must be non-decreasing along its last dimension")
    if lo < 0 or hi > E:
        raise ValueError(f"{fn}: indptr values must be in [0, {E}] ({what}), got min {lo}, max {hi}")


def _csr_index(ptr: Tensor, E: int) -> Tensor:
    """Per-position segment slot for rows 0..E-1 of every leading row: 0 before ptr[0], s + 1 inside
    segment s, S + 1 after ptr[S] (sorted, so no sort is needed)."""
    flat = ptr.reshape(-1, ptr.shape[-1])
    e = torch.arange(E, device=ptr.device).expand(flat.shape[0], E).contiguous()
    s = torch.searchsorted(flat.contiguous(), e, right=True)  # 0 before ptr[0], S+1 from ptr[S] on
    return s.reshape(list(ptr.shape[:-1]) + [E])


def _csr_plan(idx: Tensor, shape: List[int], dim: int, N: int, binv: bool) -> Plan:
    nd = len(shape)
    if binv:
        row = idx.reshape(-1, idx.shape[-1])[0]
        full = row.view([1] * dim + [-1] + [1] * (nd - dim - 1)).expand(shape)
    else:
        full = idx.view(list(idx.shape) + [1] * (nd - dim - 1)).expand(shape)
    return Plan(full, dim, N)


@torch.jit.ignore
def _segment_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor], reduce: str,
                 want_arg: bool) -> Tuple[Tensor, Tensor]:
    fn = "segment_csr" if reduce not in SEG_REDUCE else f"segment_{reduce}_csr"
    check_src(fn, src)
    if reduce not in SEG_REDUCE:
        raise ValueError(f"segment_csr: reduce must be one of {SEG_REDUCE}, got {reduce!r}")
    ptr, dim = _indptr(fn, indptr, src)
    S = max(ptr.shape[-1] - 1, 0)
    E = src.shape[dim]
    shape = list(src.shape)
    oshape = list(shape)
    oshape[dim] = S
    if out is not None:
        check_out(fn, out, src, dim, S)
    if src.numel() == 0:
        res = zeros_from(src, oshape) if out is None else out
        arg = torch.full(oshape, E, dtype=torch.int64, device=src.device)
        return res, arg
    _check_ptr(fn, ptr, E, f"src.size({dim})")
    binv = all(ptr.stride(i) == 0 or ptr.shape[i] == 1 for i in range(dim))
    if binv and reduce in ("sum", "add", "mean") and src.is_floating_point():
        # One pointer row shared by all leading rows (PTv2's pooling): a
        # sequential pass per output element along dim, no sort, no copy.
        p = ptr[(0,) * dim]
        lo, hi = p[0], p[-1]
        lengths = p[1:] - p[:-1]
        acc = _seg.HALF_ACC.get(src.dtype, src.dtype)
        body = src.narrow(dim, int(lo), int(hi - lo)) if (int(lo), int(hi)) != (0, E) else src
        vals = _seg.ordered_segment_sum(body.to(acc), lengths, dim)
        if reduce == "mean":
            shape1 = [1] * src.dim()
            shape1[dim] = S
            vals = vals / lengths.clamp(min=1).to(acc).view(shape1)
        vals = vals.to(src.dtype)
        empty_arg = torch.empty(0, dtype=torch.int64, device=src.device)
        if out is not None:
            return out.copy_(vals), empty_arg
        return vals, empty_arg
    if binv and reduce in ("min", "max") and src.is_floating_point():
        vals, arg = _csr_extreme(src, ptr[(0,) * dim], dim, E, S, reduce, want_arg)
        if out is not None:
            return out.copy_(vals), arg
        return vals, arg
    slot = _csr_index(ptr[(0,) * dim] if binv and dim else ptr, E)
    plan = _csr_plan(slot, shape, dim, S + 2, binv)
    vals, arg = with_arg(finish(fn, plan, src, "sum" if reduce == "add" else reduce, None, "trunc"))
    vals = vals.narrow(dim, 1, S)
    if arg.numel() or reduce in ("min", "max"):
        arg = arg.narrow(dim, 1, S)
    if out is not None:
        out.copy_(vals)
        return out, arg
    return vals, arg


def _csr_extreme(src: Tensor, p: Tensor, dim: int, E: int, S: int, reduce: str, want_arg: bool) -> Tuple[Tensor, Tensor]:
    """min / max over the segments of one shared 1-d ``indptr`` ``p`` along ``dim`` (PTv2 / PTv3 grid pooling).

    Values by one sequential ``segment_reduce`` pass; where an ``arg`` is
    wanted, or a gradient (which goes to the ``arg`` element only, as
    torch_scatter's), the lowest position equal to the extreme.
    """
    lo, hi = int(p[0]), int(p[-1])
    lengths = p[1:] - p[:-1]
    lens = lengths.expand(list(src.shape[:dim]) + [S]).contiguous() if dim else lengths
    body = src.narrow(dim, lo, hi - lo) if (lo, hi) != (0, E) else src
    shape1 = [1] * src.dim()
    shape1[dim] = S
    empty = (lengths == 0).view(shape1)
    with torch.no_grad():
        vals = torch.segment_reduce(body.detach(), reduce, lengths=lens, axis=dim, unsafe=True)
        vals = vals.masked_fill(empty, 0)
    need = want_arg or (src.requires_grad and torch.is_grad_enabled())
    if not need:
        return vals, torch.empty(0, dtype=torch.int64, device=src.device)
    with torch.no_grad():
        seg = torch.searchsorted(p, torch.arange(lo, hi, device=src.device), right=True) - 1
        at = vals.index_select(dim, seg)
        hit = body.detach() == at
        if bool(torch.isnan(vals).any()):
            hit |= torch.isnan(body.detach()) & torch.isnan(at)
        pos_shape = [1] * src.dim()
        pos_shape[dim] = hi - lo
        # Positions relative to lo, as float32 while exact (< 2**24 rows), else float64.
        pdt = torch.float32 if hi - lo < 2**24 else torch.float64
        pos = torch.arange(0, hi - lo, device=src.device, dtype=pdt).view(pos_shape)
        cand = torch.where(hit, pos, torch.tensor(float(hi - lo), dtype=pdt, device=src.device))
        arg = torch.segment_reduce(cand, "min", lengths=lens, axis=dim, unsafe=True).to(torch.int64) + lo
        arg = arg.masked_fill(empty, E)
    if src.requires_grad and torch.is_grad_enabled():
        vals = torch.gather(src, dim, arg.clamp(max=max(E - 1, 0))).masked_fill(empty, 0)
    return vals, arg


def segment_sum_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Sum over each CSR segment (see :func:`segment_csr`)."""
    return _segment_csr(src, indptr, out, "sum", True)[0]


def segment_add_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Alias of :func:`segment_sum_csr`."""
    return _segment_csr(src, indptr, out, "sum", True)[0]


def segment_mean_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Mean over each CSR segment (empty segments 0; integers: truncating division, as torch_scatter)."""
    return _segment_csr(src, indptr, out, "mean", True)[0]


def segment_min_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Minimum over each CSR segment and its absolute position along the segment dim (``src.size(dim)`` if empty)."""
    return _segment_csr(src, indptr, out, "min", True)


def segment_max_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Maximum over each CSR segment and its absolute position along the segment dim (``src.size(dim)`` if empty)."""
    return _segment_csr(src, indptr, out, "max", True)


def segment_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None, reduce: str = "sum") -> Tensor:
    """Reduces ``src`` over the ranges ``[indptr[i], indptr[i+1])`` along dim ``indptr.dim() - 1``.

    torch_scatter's ``segment_csr``: with ``src`` of shape ``(x_0, ..., x_{m-1},
    x_m, ...)`` and ``indptr`` of shape ``(x_0, ..., x_{m-2}, S + 1)`` (leading
    dimensions broadcast), the output is ``(x_0, ..., x_{m-2}, S, x_m, ...)``.
    Elements outside ``[indptr[0], indptr[-1])`` are ignored.

    Args:
        src: the source tensor (floating or integer).
        indptr: integer index pointers, non-decreasing along the last
            dimension, values in ``[0, src.size(dim)]``.
        out: optional destination of the output shape; it is **overwritten**
            (as torch_scatter's ``segment_csr`` does) and returned.
        reduce: ``"sum"`` / ``"add"``, ``"mean"``, ``"min"`` or ``"max"``.

    Returns:
        The reduced tensor; empty segments are 0.

    Raises:
        TypeError: wrong argument types or dtypes.
        ValueError: unknown ``reduce``; ``indptr`` unsorted, out of range or
            not broadcastable; ``out`` of the wrong shape.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import segment_csr
        >>> segment_csr(torch.tensor([1.0, 2, 3, 4, 5, 6]), torch.tensor([0, 2, 5, 5, 6])).tolist()
        [3.0, 12.0, 0.0, 6.0]
    """
    if reduce == "sum" or reduce == "add":
        return _segment_csr(src, indptr, out, "sum", True)[0]
    if reduce == "mean":
        return _segment_csr(src, indptr, out, "mean", True)[0]
    if reduce == "min":
        return _segment_csr(src, indptr, out, "min", False)[0]
    if reduce == "max":
        return _segment_csr(src, indptr, out, "max", False)[0]
    raise ValueError("segment_csr: reduce must be one of 'sum', 'add', 'mean', 'min', 'max', got " + str(reduce))


@torch.jit.ignore
def _gather_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor]) -> Tensor:
    fn = "gather_csr"
    check_src(fn, src)
    ptr, dim = _indptr(fn, indptr, src)
    S = max(ptr.shape[-1] - 1, 0)
    if src.shape[dim] != S and src.shape[dim] != 0:
        raise ValueError(f"{fn}: src.size({dim}) must be indptr.size(-1) - 1 = {S}, got {src.shape[dim]}")
    shape = list(src.shape)
    if out is not None:
        if not isinstance(out, torch.Tensor) or out.dim() != src.dim():
            raise ValueError(f"{fn}: out must be a tensor with {src.dim()} dimensions like src, got "
                             f"{tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}")
        E = out.shape[dim]
        check_out(fn, out, src, dim, E)
    else:
        E = int(ptr.reshape(-1)[-1]) if src.numel() > 0 and ptr.numel() else 0
    oshape = list(shape)
    oshape[dim] = E
    if out is None:
        V.check_fits(fn, "indptr[..., -1]", E, "the output", oshape, src.element_size(), src.device)
    if src.numel() == 0:
        return zeros_from(src, oshape) if out is None else out
    _check_ptr(fn, ptr, E, f"the output size {E} along dim {dim}")
    if E == 0:  # every range empty: nothing to gather
        return zeros_from(src, oshape) if out is None else out
    binv = all(ptr.stride(i) == 0 or ptr.shape[i] == 1 for i in range(dim))
    slot = _csr_index(ptr[(0,) * dim] if binv and dim else ptr, E)
    tshape = list(oshape)
    plan = _csr_plan(slot, tshape, dim, S + 2, binv)
    z = torch.zeros_like(src.narrow(dim, 0, 1))
    g = plan.gather(torch.cat([z, src, z], dim))  # slot 0 / S + 1: outside every range -> 0
    if out is None:
        return g
    return out.copy_(torch.where(_inside(slot, tshape, dim, binv, S), g, out))


def _inside(slot: Tensor, shape: List[int], dim: int, binv: bool, S: int) -> Tensor:
    m = (slot > 0) & (slot <= S)
    nd = len(shape)
    if binv:
        m = m.reshape(-1, m.shape[-1])[0].view([1] * dim + [-1] + [1] * (nd - dim - 1))
    else:
        m = m.view(list(m.shape) + [1] * (nd - dim - 1))
    return m.expand(shape)


def gather_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Repeats segment values back over their ranges: the inverse of :func:`segment_csr`.

    ``out[..., e, ...] = src[..., i, ...]`` for ``indptr[i] <= e < indptr[i+1]``.

    Args:
        src: ``(x_0, ..., x_{m-2}, S, ...)`` tensor, one value per segment.
        indptr: ``(x_0, ..., x_{m-2}, S + 1)`` integer index pointers
            (non-decreasing; leading dimensions broadcast).
        out: optional destination ``(..., E, ...)``; only rows inside
            ``indptr``'s ranges are written.

    Returns:
        ``(..., E, ...)`` with ``E = out.size(dim)`` or ``indptr[..., -1]``
        (last row); rows outside the ranges are 0 when ``out`` is not given.
        The gradient w.r.t. ``src`` is a deterministic segment sum.

    Raises:
        TypeError: as :func:`segment_csr`.
        ValueError: as :func:`segment_csr`; ``src.size(dim)`` must be
            ``indptr.size(-1) - 1``.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import gather_csr
        >>> gather_csr(torch.tensor([1.0, 2, 3]), torch.tensor([0, 2, 2, 3])).tolist()
        [1.0, 1.0, 3.0]
    """
    return _gather_csr(src, indptr, out)
