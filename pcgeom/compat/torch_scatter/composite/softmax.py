"""``torch_scatter.composite.softmax``: ``scatter_softmax`` and ``scatter_log_softmax`` (torch_scatter 2.1.2 ``composite/softmax.py``)."""

from typing import Optional

import torch
from torch import Tensor

from pcgeom import _validation as V
from pcgeom import segment as _seg

from pcgeom.compat.torch_scatter._plan import (
    check_floating,
    reduce_plan,
    scatter_plan,
)

__all__ = ["scatter_softmax", "scatter_log_softmax"]


@torch.jit.ignore
def _softmax(src: Tensor, index: Tensor, dim: int, dim_size: Optional[int], log: bool, eps: float) -> Tensor:
    fn = "scatter_log_softmax" if log else "scatter_softmax"
    check_floating(fn, src)
    eps = V.check_float(fn, "eps", eps)
    plan = scatter_plan(fn, src, index, dim, None, dim_size)
    # Only the values of the maxima matter here (a shift by -0.0 or +0.0 is the same shift).
    mx = plan.unrows(_seg.extreme_values(plan.rows(src).detach(), plan.key, plan.S, "max"))
    shifted = src - plan.gather(mx)
    ex = shifted.exp()
    tot, _, _ = reduce_plan(fn, plan, ex, "sum", False)
    if log:
        return shifted - plan.gather(tot.add(eps).log())
    return ex / plan.gather(tot)


def scatter_softmax(src: Tensor, index: Tensor, dim: int = -1, dim_size: Optional[int] = None) -> Tensor:
    """Softmax of ``src`` within each group of equal ``index`` along ``dim``.

    ``exp(src - max_g) / sum_g exp(src - max_g)`` per group ``g`` (torch_scatter's
    formula), with deterministic max / sum / gather.

    Args:
        src: floating tensor.
        index: group ids, broadcast as in :func:`scatter`.
        dim: the axis (default -1).
        dim_size: number of groups (default ``index.max() + 1``).

    Returns:
        Tensor of ``src``'s shape.

    Raises:
        ValueError: ``src`` not floating (as torch_scatter), bad ``index``.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import scatter_softmax
        >>> scatter_softmax(torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0, 0, 1])).tolist()
        [0.5, 0.5, 1.0]
    """
    return _softmax(src, index, dim, dim_size, False, 0.0)


def scatter_log_softmax(src: Tensor, index: Tensor, dim: int = -1, eps: float = 1e-12,
                        dim_size: Optional[int] = None) -> Tensor:
    """Log-softmax within each group: ``src - max_g - log(sum_g exp(src - max_g) + eps)``.

    Args:
        src: floating tensor.
        index: group ids, broadcast as in :func:`scatter`.
        dim: the axis (default -1).
        eps: added to the sum before the log (default 1e-12, as torch_scatter).
        dim_size: number of groups (default ``index.max() + 1``).

    Returns:
        Tensor of ``src``'s shape.

    Raises:
        ValueError: ``src`` not floating, bad ``index``.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import scatter_log_softmax
        >>> scatter_log_softmax(torch.tensor([0.0, 0.0]), torch.tensor([0, 0])).exp().tolist()
        [0.5, 0.5]
    """
    return _softmax(src, index, dim, dim_size, True, eps)
