"""``torch_scatter.composite.std``: ``scatter_std`` (torch_scatter 2.1.2 ``composite/std.py``)."""

from typing import Optional

import torch
from torch import Tensor

from pcgeom.compat.torch_scatter._plan import (
    check_src,
    counts_like,
    reduce_plan,
    scatter_plan,
)

__all__ = ["scatter_std"]


@torch.jit.ignore
def _std(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
         unbiased: bool) -> Tensor:
    fn = "scatter_std"
    check_src(fn, src)
    plan = scatter_plan(fn, src, index, dim, out, dim_size)
    tot, _, counts = reduce_plan(fn, plan, src, "sum", False)
    count = counts_like(plan, counts, tot).to(src.dtype).clamp(min=1)
    mean = tot / count
    diff = src - plan.gather(mean)
    var, _, _ = reduce_plan(fn, plan, diff * diff, "sum", False)
    if out is not None:
        var = out.add_(var)
    if unbiased:
        count = (count - 1).clamp(min=1)
    return (var / (count + 1e-6)).sqrt()


def scatter_std(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None, unbiased: bool = True) -> Tensor:
    """Standard deviation per group: ``sqrt(sum_g (src - mean_g)^2 / (n_g - 1 + 1e-6))``.

    torch_scatter's formula: counts are clamped to 1 (and, with ``unbiased``,
    ``n - 1`` clamped to 1), ``1e-6`` is added to the divisor; empty groups
    and single-element groups are 0.  With ``out``, the squared deviations
    are added to ``out`` in place and the standard deviation is returned as a
    new tensor (as the original).

    Args:
        src: floating tensor.
        index: group ids, broadcast as in :func:`scatter`.
        dim: the axis (default -1).
        out: optional accumulator (see above).
        dim_size: number of groups when ``out`` is not given.
        unbiased: divide by ``n - 1`` (default) instead of ``n``.

    Returns:
        Tensor of ``src``'s shape with ``N`` along ``dim``.

    Raises:
        TypeError / ValueError: wrong types or bad ``index`` / ``out``.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import scatter_std
        >>> round(scatter_std(torch.tensor([1.0, 3.0]), torch.tensor([0, 0]))[0].item(), 4)
        1.4142
    """
    return _std(src, index, dim, out, dim_size, unbiased)
