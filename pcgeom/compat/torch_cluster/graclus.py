"""``torch_cluster.graclus``: ``graclus_cluster`` (torch_cluster 1.6.3 ``graclus.py``)."""

from typing import Optional

import torch
from torch import Tensor

from pcgeom.compat.torch_cluster._common import check_index, check_rowptr_col

__all__ = ["graclus_cluster"]


def graclus_op(rowptr: Tensor, col: Tensor, weight: Optional[Tensor]) -> Tensor:
    """``torch_cluster::graclus``: greedy matching, pcgeom's parallel form of the CPU loop.

    The original visits the nodes in ``torch.randperm(num_nodes)`` order; an
    unmatched node ``u`` takes, among its neighbours not yet visited or
    matched, the first in CSR order (no weights) or the one of largest weight
    ``>= 0``, ties to the later edge (weights), and stays alone when there is
    none.  That is the greedy matching of the edges ``u -> v`` with ``rank(u) <
    rank(v)`` in the priority order ``(rank(u), CSR order)`` /
    ``(rank(u), -weight, -position)``, which rounds of "an edge is taken when
    it has the smallest priority among the remaining edges at both its ends"
    reproduce exactly (Blelloch, Fineman and Shun, SPAA 2012: few rounds for
    random orders -- 27 on a random graph of 10^5 nodes and 10^6 edges -- each
    a few vectorised passes over the remaining edges).
    """
    fn = "graclus"
    n = check_rowptr_col(fn, rowptr, col)
    dev = rowptr.device
    if weight is not None:
        if not isinstance(weight, torch.Tensor) or weight.dim() != 1 or weight.numel() != col.numel():
            raise ValueError(f"{fn}: weight must be a 1-D tensor with one entry per edge ({col.numel()}), got "
                             f"{tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__}")
        if weight.dtype == torch.bool or weight.is_complex():
            raise TypeError(f"{fn}: weight must be a real floating or integer tensor, got {weight.dtype}")
        if weight.device != dev:
            raise ValueError(f"{fn}: weight must be on {dev}, got {weight.device}")
    node_perm = torch.randperm(n, dtype=torch.int64, device=dev)  # the original's one draw
    rank = torch.empty(n, dtype=torch.int64, device=dev)
    rank[node_perm] = torch.arange(n, device=dev)
    E = col.numel()
    src = torch.repeat_interleave(torch.arange(n, device=dev), torch.diff(rowptr), output_size=E)
    pos = torch.arange(E, device=dev)
    if weight is None:
        cand = rank[src] < rank[col]
        order = pos[cand]  # already (rank(src), position)-sortable: sort by rank only, stably
    else:
        # A self-loop is a candidate too: taking it leaves u alone, as in the original.
        cand = ((rank[src] < rank[col]) | (src == col)) & (weight >= 0)
        order = pos[cand].flip(0)  # later edge first among equal weights
        order = order[torch.sort(weight[order], descending=True, stable=True).indices]
    order = order[torch.sort(rank[src[order]], stable=True).indices]
    a, b = src[order], col[order]
    prio = torch.arange(order.numel(), device=dev)
    mate = torch.arange(n, device=dev)  # alone: its own cluster
    big = order.numel()
    while a.numel():
        first = torch.full((n,), big, dtype=torch.int64, device=dev)
        first.scatter_reduce_(0, a, prio, "amin")
        first.scatter_reduce_(0, b, prio, "amin")
        take = (first[a] == prio) & (first[b] == prio)
        ta, tb = a[take], b[take]
        mate[ta] = tb
        mate[tb] = ta
        matched = torch.zeros(n, dtype=torch.bool, device=dev)
        matched[ta] = True
        matched[tb] = True
        alive = ~(matched[a] | matched[b])
        a, b, prio = a[alive], b[alive], prio[alive]
    return torch.minimum(mate, torch.arange(n, device=dev))


@torch.jit.ignore
def _graclus_impl(row: Tensor, col: Tensor, weight: Optional[Tensor], num_nodes: Optional[int]) -> Tensor:
    fn = "graclus_cluster"
    check_index(fn, "row", row)
    check_index(fn, "col", col, row.device)
    if row.numel() != col.numel():
        raise ValueError(f"{fn}: row and col must have the same length, got {row.numel()} and {col.numel()}")
    if weight is not None and (not isinstance(weight, torch.Tensor) or weight.numel() != row.numel()):
        raise ValueError(f"{fn}: weight must have one entry per edge ({row.numel()}), got "
                         f"{tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__}")
    if num_nodes is None:
        if row.numel() == 0:
            raise ValueError(f"{fn}: num_nodes is needed for a graph without edges")
        num_nodes = max(int(row.max()), int(col.max())) + 1
    if row.numel() and (min(int(row.min()), int(col.min())) < 0 or max(int(row.max()), int(col.max())) >= num_nodes):
        raise ValueError(f"{fn}: row and col values must be in [0, num_nodes={num_nodes})")
    # The original's Python wrapper, step by step (the same random draws).
    mask = row != col
    row, col = row[mask], col[mask]
    if weight is not None:
        weight = weight[mask]
    if weight is None:
        perm = torch.randperm(row.size(0), dtype=torch.long, device=row.device)
        row, col = row[perm], col[perm]
    perm = torch.argsort(row)
    row, col = row[perm], col[perm]
    if weight is not None:
        weight = weight[perm]
    deg = row.new_zeros(num_nodes)
    deg.scatter_add_(0, row, torch.ones_like(row))
    rowptr = row.new_zeros(num_nodes + 1)
    torch.cumsum(deg, 0, out=rowptr[1:])
    return graclus_op(rowptr, col, weight)


def graclus_cluster(row: Tensor, col: Tensor, weight: Optional[Tensor] = None,
                    num_nodes: Optional[int] = None) -> Tensor:
    """Graclus: pick an unmatched node (random order) and match it with the
    unmatched neighbour of largest edge weight (Dhillon et al., TPAMI 2007).

    torch_cluster's CPU algorithm on every device, with the same
    ``torch.randperm`` draws: without weights the edges are shuffled and a node
    takes its first free neighbour; with weights the free neighbour of largest
    weight ``>= 0``, ties to the later edge.  Self-loops are ignored.

    Args:
        row: ``(E,)`` int64 source nodes.
        col: ``(E,)`` int64 target nodes.
        weight: optional ``(E,)`` real edge weights.
        num_nodes: the number of nodes (default ``max(row, col) + 1``).

    Returns:
        ``(num_nodes,)`` int64 cluster ids: a matched pair shares the smaller
        of its two node ids; an unmatched node keeps its own.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_cluster import graclus_cluster
        >>> graclus_cluster(torch.tensor([0, 1]), torch.tensor([1, 0])).tolist()
        [0, 0]
    """
    return _graclus_impl(row, col, weight, num_nodes)
