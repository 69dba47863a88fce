"""``torch_cluster.sampler``: ``neighbor_sampler`` (torch_cluster 1.6.3 ``sampler.py``)."""

import torch
from torch import Tensor

from pcgeom.compat.torch_cluster._common import check_index

__all__ = ["neighbor_sampler"]


def neighbor_sampler_op(start: Tensor, rowptr: Tensor, count: int, factor: float) -> Tensor:
    """``torch_cluster::neighbor_sampler``: sampled edge positions, node after node."""
    fn = "neighbor_sampler"
    check_index(fn, "rowptr", rowptr)
    check_index(fn, "start", start, rowptr.device)
    n = rowptr.numel() - 1
    if start.numel() and (n < 1 or int(start.min()) < 0 or int(start.max()) >= n):
        raise ValueError(f"{fn}: start values must be in [0, {n}) (rowptr.numel() - 1)")
    dev = start.device
    lo, hi = rowptr[start], rowptr[start + 1]
    deg = hi - lo
    if int(count) < 1:
        size = torch.ceil(float(factor) * deg.to(torch.float64)).to(torch.int64)
    else:
        size = torch.full_like(deg, int(count))
    size = torch.minimum(size, deg)
    total = int(deg.sum())
    seg = torch.repeat_interleave(torch.arange(start.numel(), device=dev), deg, output_size=total)
    first = torch.cumsum(deg, 0) - deg
    local = torch.arange(total, device=dev) - first[seg]
    # A uniform random order inside each node's edges: random keys, sorted
    # within the node (stable sort by node after a sort by key).
    order = torch.argsort(torch.rand(total, dtype=torch.float64, device=dev))
    order = order[torch.sort(seg[order], stable=True).indices]
    # order[j] lies in the node of position j (seg is sorted) as the
    # local[j]-th of its random order: keep the first size[node] of each.
    pick = order[local < size[seg]]
    return lo[seg[pick]] + local[pick]


@torch.jit.ignore
def _neighbor_sampler_impl(start: Tensor, rowptr: Tensor, size: float) -> Tensor:
    factor, count = -1.0, -1
    if size <= 1:
        factor = float(size)
        if not factor > 0:
            raise ValueError(f"neighbor_sampler: size must be > 0 (a fraction <= 1 or a count > 1), got {size}")
    else:
        count = int(size)
    return neighbor_sampler_op(start, rowptr, count, factor)


def neighbor_sampler(start: Tensor, rowptr: Tensor, size: float) -> Tensor:
    """Samples neighbours of ``start`` without replacement (GraphSAGE-style).

    Args:
        start: ``(S,)`` int64 nodes.
        rowptr: ``(num_nodes + 1,)`` int64 CSR boundaries of their out-edges.
        size: ``<= 1``: the fraction ``ceil(size * deg)`` of each node's edges;
            ``> 1``: ``int(size)`` edges per node (all of them when fewer).

    Returns:
        int64 edge positions (indices into the CSR's ``col``), node after node
        in ``start`` order, each node's in random order; uniform without
        replacement, from torch's generator, on every device.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_cluster import neighbor_sampler
        >>> sorted(neighbor_sampler(torch.tensor([1]), torch.tensor([0, 3, 7]), 1.0).tolist())
        [3, 4, 5, 6]
    """
    return _neighbor_sampler_impl(start, rowptr, size)
