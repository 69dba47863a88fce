"""``torch_scatter.scatter``: ``scatter`` and ``scatter_<reduce>`` (torch_scatter 2.1.2 ``scatter.py``)."""

from typing import Optional, Tuple

import torch
from torch import Tensor

from pcgeom.compat.torch_scatter._plan import (
    check_src,
    finish,
    REDUCE,
    scatter_plan,
    with_arg,
)

__all__ = ["scatter_sum", "scatter_add", "scatter_mul", "scatter_mean", "scatter_min", "scatter_max", "scatter"]


@torch.jit.ignore
def _scatter(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
             reduce: str) -> Tuple[Tensor, Tensor]:
    fn = "scatter" if reduce not in REDUCE else f"scatter_{reduce}"
    check_src(fn, src)
    if reduce not in REDUCE:
        raise ValueError(f"scatter: reduce must be one of {REDUCE}, got {reduce!r}")
    plan = scatter_plan(fn, src, index, dim, out, dim_size)
    return with_arg(finish(fn, plan, src, reduce, out, "floor"))


def scatter_sum(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
    """Sums ``src`` into the slots named by ``index`` along ``dim`` (see :func:`scatter`)."""
    return _scatter(src, index, dim, out, dim_size, "sum")[0]


def scatter_add(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
    """Alias of :func:`scatter_sum`."""
    return _scatter(src, index, dim, out, dim_size, "sum")[0]


def scatter_mul(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
    """Multiplies ``src`` into the slots named by ``index`` (empty slots: 1, as torch_scatter)."""
    return _scatter(src, index, dim, out, dim_size, "mul")[0]


def scatter_mean(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                 dim_size: Optional[int] = None) -> Tensor:
    """Mean per slot (count clamped to 1, so empty slots are 0; integers: floor division).

    With ``out``, the sums are added to ``out`` and the result divided by the
    count, as torch_scatter does.
    """
    return _scatter(src, index, dim, out, dim_size, "mean")[0]


def scatter_min(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """Minimum per slot and its position along ``dim`` (``src.size(dim)`` for empty slots; ties: lowest)."""
    return _scatter(src, index, dim, out, dim_size, "min")


def scatter_max(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """Maximum per slot and its position along ``dim`` (``src.size(dim)`` for empty slots; ties: lowest)."""
    return _scatter(src, index, dim, out, dim_size, "max")


def scatter(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
            dim_size: Optional[int] = None, reduce: str = "sum") -> Tensor:
    """Reduces ``src`` into ``out`` at the positions ``index`` names along ``dim``.

    ``out[..., index[..., j, ...], ...] = reduce(src[..., j, ...])`` -- torch_scatter's
    ``scatter`` with its broadcasting (a 1-d ``index`` runs along ``dim``;
    missing trailing dimensions are broadcast) and output size
    (``out.size(dim)``, else ``dim_size``, else ``index.max() + 1``).
    Deterministic (no atomics; see the module docstring).

    Args:
        src: the source tensor (floating or integer).
        index: int64 (any integer dtype) indices into ``out`` along ``dim``,
            broadcastable to ``src`` as above; values in ``[0, out.size(dim))``.
        dim: the axis along which to index (default -1).
        out: optional destination, ``src``'s shape except along ``dim``;
            the reduction includes its values (``sum``: each slot's
            pass starts from ``out``'s value, ``((out + s_1) + s_2) + ...`` in
            the elements' order along ``dim``; ``mul`` likewise; ``mean``: that
            sum divided by the count of ``src`` elements; ``min`` / ``max``:
            compared) and it is modified in place and returned.
        dim_size: size of ``out`` along ``dim`` when ``out`` is not given.
        reduce: ``"sum"`` / ``"add"``, ``"mul"``, ``"mean"``, ``"min"`` or ``"max"``.

    Returns:
        The reduced tensor.  Slots no index names are 0 (``mul``: 1) when
        ``out`` is not given.

    Raises:
        TypeError: wrong argument types or dtypes.
        ValueError: unknown ``reduce``, ``index`` not broadcastable or out of
            range, ``out`` of the wrong shape / dtype / device.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import scatter
        >>> src = torch.tensor([[1.0, 2], [3, 4], [5, 6]])
        >>> scatter(src, torch.tensor([0, 1, 0]), dim=0, reduce="mean").tolist()
        [[3.0, 4.0], [3.0, 4.0]]
    """
    if reduce == "sum" or reduce == "add":
        return _scatter(src, index, dim, out, dim_size, "sum")[0]
    if reduce == "mul":
        return _scatter(src, index, dim, out, dim_size, "mul")[0]
    if reduce == "mean":
        return _scatter(src, index, dim, out, dim_size, "mean")[0]
    if reduce == "min":
        return _scatter(src, index, dim, out, dim_size, "min")[0]
    if reduce == "max":
        return _scatter(src, index, dim, out, dim_size, "max")[0]
    raise ValueError("scatter: reduce must be one of 'sum', 'add', 'mul', 'mean', 'min', 'max', got " + str(reduce))
