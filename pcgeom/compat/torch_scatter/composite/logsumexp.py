"""``torch_scatter.composite.logsumexp``: ``scatter_logsumexp`` (torch_scatter 2.1.2 ``composite/logsumexp.py``)."""

from typing import Optional

import torch
from torch import Tensor

from pcgeom import _validation as V

from pcgeom.compat.torch_scatter._plan import (
    check_floating,
    finish,
    reduce_plan,
    scatter_plan,
)

__all__ = ["scatter_logsumexp"]


@torch.jit.ignore
def _logsumexp(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
               eps: float) -> Tensor:
    fn = "scatter_logsumexp"
    check_floating(fn, src)
    eps = V.check_float(fn, "eps", eps)
    plan = scatter_plan(fn, src, index, dim, out, dim_size)
    shape = plan.out_shape()
    mx = torch.full(shape, float("-inf"), dtype=src.dtype, device=src.device)
    mx, _ = finish(fn, plan, src, "max", mx, "floor")
    shifted = src - plan.gather(mx)
    shifted = shifted.masked_fill(torch.isnan(shifted), float("-inf"))
    sums, _, _ = reduce_plan(fn, plan, shifted.exp(), "sum", False)
    # A group holding a NaN gives NaN (torch.logsumexp's rule), whatever the max/shift arithmetic made of it.
    has_nan, _, _ = reduce_plan(fn, plan, torch.isnan(src).to(src.dtype), "max", False)
    nan = has_nan > 0
    if out is None:
        res = sums.add(eps).log().add(mx)
        return res.masked_fill(res == float("-inf"), 0.0).masked_fill(nan, float("nan"))  # empty groups are 0
    old = out.clone()
    res = (out - mx).exp().add(sums).add(eps).log().add(mx)
    res = torch.where(torch.isfinite(res), res, old)
    return out.copy_(res.masked_fill(nan | torch.isnan(old), float("nan")))


def scatter_logsumexp(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                      dim_size: Optional[int] = None, eps: float = 1e-12) -> Tensor:
    """``log(sum exp(src))`` per group, computed stably around the group maximum.

    torch_scatter's formula: ``log(sum_g exp(src - max_g) + eps) + max_g``;
    empty groups are 0.  NaN propagates: a group holding a NaN (or an ``out``
    slot that is NaN) gives NaN, as ``torch.logsumexp`` does (torch_scatter's
    ``nan_to_num`` turned it into 0, and ``+inf`` into the dtype's max: pcgeom
    returns ``+inf``).  With ``out``, ``exp(out - max_g)`` joins the sum and
    other slots whose result is not finite keep ``out``'s old value; ``out`` is
    modified in place and returned.

    Args:
        src: floating tensor.
        index: group ids, broadcast as in :func:`scatter`.
        dim: the axis (default -1).
        out: optional destination (see above).
        dim_size: number of groups when ``out`` is not given.
        eps: added inside the log (default 1e-12).

    Returns:
        Tensor of ``src``'s shape with ``N`` along ``dim``.

    Raises:
        ValueError: ``src`` not floating, bad ``index`` / ``out``.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import scatter_logsumexp
        >>> round(scatter_logsumexp(torch.tensor([0.0, 0.0]), torch.tensor([0, 0]))[0].item(), 4)
        0.6931
    """
    return _logsumexp(src, index, dim, out, dim_size, eps)
