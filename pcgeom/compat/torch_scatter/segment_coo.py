"""``torch_scatter.segment_coo``: ``segment_coo``, ``segment_<reduce>_coo`` and ``gather_coo`` (torch_scatter 2.1.2 ``segment_coo.py``)."""

from typing import Optional, Tuple

import torch
from torch import Tensor

from pcgeom.compat.torch_scatter._plan import (
    check_index,
    check_out,
    check_src,
    finish,
    Plan,
    plan_for,
    range_check,
    SEG_REDUCE,
    with_arg,
    zeros_from,
)

__all__ = ["segment_sum_coo", "segment_add_coo", "segment_mean_coo", "segment_min_coo", "segment_max_coo", "segment_coo", "gather_coo"]


def _coo_index(fn: str, index, src: Tensor) -> Tuple[Tensor, int]:
    check_index(fn, "index", index, src)
    dim = index.dim() - 1
    try:
        idx = index.expand(list(src.shape[: index.dim()]))
    except RuntimeError:
        raise ValueError(f"{fn}: index of shape {tuple(index.shape)} cannot be broadcast to "
                         f"{tuple(src.shape[: index.dim()])} (src's leading dimensions)") from None
    nd = src.dim()
    full = idx.view(list(idx.shape) + [1] * (nd - dim - 1)).expand(list(src.shape))
    return full, dim


@torch.jit.ignore
def _segment_coo(src: Tensor, index: Tensor, out: Optional[Tensor], dim_size: Optional[int],
                 reduce: str) -> Tuple[Tensor, Tensor]:
    fn = "segment_coo" if reduce not in SEG_REDUCE else f"segment_{reduce}_coo"
    check_src(fn, src)
    if reduce not in SEG_REDUCE:
        raise ValueError(f"segment_coo: reduce must be one of {SEG_REDUCE}, got {reduce!r}")
    full, dim = _coo_index(fn, index, src)
    plan = plan_for(fn, full, dim, index, src, out, dim_size)
    return with_arg(finish(fn, plan, src, "sum" if reduce == "add" else reduce, out, "trunc"))


def segment_sum_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tensor:
    """Sum per sorted index (see :func:`segment_coo`)."""
    return _segment_coo(src, index, out, dim_size, "sum")[0]


def segment_add_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tensor:
    """Alias of :func:`segment_sum_coo`."""
    return _segment_coo(src, index, out, dim_size, "sum")[0]


def segment_mean_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                     dim_size: Optional[int] = None) -> Tensor:
    """Mean per sorted index (empty slots 0; integers: truncating division)."""
    return _segment_coo(src, index, out, dim_size, "mean")[0]


def segment_min_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """Minimum per sorted index and its position along the index dim (``src.size(dim)`` if empty)."""
    return _segment_coo(src, index, out, dim_size, "min")


def segment_max_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """Maximum per sorted index and its position along the index dim (``src.size(dim)`` if empty)."""
    return _segment_coo(src, index, out, dim_size, "max")


def segment_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None, dim_size: Optional[int] = None,
                reduce: str = "sum") -> Tensor:
    """Reduces ``src`` by the sorted ``index`` along dim ``index.dim() - 1``.

    torch_scatter's ``segment_coo``: ``index`` of shape ``(x_0, ..., x_m)``
    (leading dimensions broadcast to ``src``'s) names the output slot of each
    element along dim ``m``; the output is ``src``'s shape with ``N`` there
    (``out.size(m)``, else ``dim_size``, else ``index.max() + 1``).

    Args:
        src: the source tensor (floating or integer).
        index: integer slot ids, sorted along the last dimension (an unsorted
            index is reduced per id all the same).
        out: optional destination; the reduction includes its values as in
            :func:`scatter`, slots no index names are left unchanged.
        dim_size: output size along the index dim when ``out`` is not given.
        reduce: ``"sum"`` / ``"add"``, ``"mean"``, ``"min"`` or ``"max"``.

    Returns:
        The reduced tensor; slots no index names are 0 when ``out`` is not given.

    Raises:
        TypeError: wrong types.
        ValueError: unknown ``reduce``, ``index`` out of range or not
            broadcastable, ``out`` of the wrong shape.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import segment_coo
        >>> segment_coo(torch.tensor([1.0, 2, 3, 4]), torch.tensor([0, 0, 2, 2]), reduce="max").tolist()
        [2.0, 0.0, 4.0]
    """
    if reduce == "sum" or reduce == "add":
        return _segment_coo(src, index, out, dim_size, "sum")[0]
    if reduce == "mean":
        return _segment_coo(src, index, out, dim_size, "mean")[0]
    if reduce == "min":
        return _segment_coo(src, index, out, dim_size, "min")[0]
    if reduce == "max":
        return _segment_coo(src, index, out, dim_size, "max")[0]
    raise ValueError("segment_coo: reduce must be one of 'sum', 'add', 'mean', 'min', 'max', got " + str(reduce))


@torch.jit.ignore
def _gather_coo(src: Tensor, index: Tensor, out: Optional[Tensor]) -> Tensor:
    fn = "gather_coo"
    check_src(fn, src)
    check_index(fn, "index", index, src)
    dim = index.dim() - 1
    lead = list(src.shape[:dim])
    try:
        idx = index.expand(lead + [index.shape[-1]])
    except RuntimeError:
        raise ValueError(f"{fn}: index of shape {tuple(index.shape)} cannot be broadcast to src's leading "
                         f"dimensions {tuple(lead)}") from None
    E = idx.shape[-1]
    oshape = list(src.shape)
    oshape[dim] = E
    if out is not None:
        check_out(fn, out, src, dim, E)
    if src.numel() == 0:
        return zeros_from(src, oshape) if out is None else out
    N = src.shape[dim]
    range_check(fn, "index", index, N)
    full = idx.view(list(idx.shape) + [1] * (src.dim() - dim - 1)).expand(oshape)
    g = Plan(full, dim, N).gather(src)
    if out is None:
        return g
    return out.copy_(g)


def gather_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Reads ``src`` back at ``index``: the inverse of :func:`segment_coo`.

    ``out[..., e, ...] = src[..., index[..., e], ...]`` along dim ``index.dim() - 1``.

    Args:
        src: ``(x_0, ..., x_{m-1}, N, ...)`` tensor.
        index: ``(x_0, ..., x_{m-1}, E)`` integer indices in ``[0, N)``
            (leading dimensions broadcast).
        out: optional destination ``(..., E, ...)``, overwritten and returned.

    Returns:
        ``(..., E, ...)`` tensor; the gradient w.r.t. ``src`` is a deterministic sum.

    Raises:
        TypeError: wrong types.
        ValueError: ``index`` out of range or not broadcastable, ``out`` of
            the wrong shape.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import gather_coo
        >>> gather_coo(torch.tensor([1.0, 2, 3]), torch.tensor([0, 0, 2])).tolist()
        [1.0, 1.0, 3.0]
    """
    return _gather_coo(src, index, out)
