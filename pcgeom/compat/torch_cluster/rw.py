"""``torch_cluster.rw``: ``random_walk`` (torch_cluster 1.6.3 ``rw.py``)."""

from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from pcgeom.compat.torch_cluster._common import check_index, check_rowptr_col, check_walk_size

__all__ = ["random_walk"]


def _uniform_pick(u: Tensor, deg: Tensor) -> Tensor:
    """``trunc(u * deg)`` in float32 (the original's arithmetic), kept below ``deg``."""
    return torch.minimum((u * deg.to(torch.float32)).to(torch.int64), (deg - 1).clamp_min(0))


def random_walk_op(rowptr: Tensor, col: Tensor, start: Tensor, walk_length: int, p: float,
                    q: float, step_major: bool = False) -> Tuple[Tensor, Tensor]:
    """``torch_cluster::random_walk``: ``(node_seq (S, L + 1), edge_seq (S, L))`` int64.

    ``edge_seq`` holds positions into ``col`` (-1 where the walk stood still at
    a node without out-edges).  ``step_major=True`` reads the uniform walk's
    draws as ``torch.rand(L, S)`` on every device (pyg-lib's CUDA kernel);
    otherwise as torch_cluster does (``(S, L)`` on CPU, ``(L, S)`` on CUDA).
    """
    fn = "random_walk"
    n = check_rowptr_col(fn, rowptr, col)
    check_index(fn, "start", start, rowptr.device)
    walk_length = int(walk_length)
    if walk_length < 0:
        raise ValueError(f"{fn}: walk_length must be >= 0, got {walk_length}")
    p, q = float(p), float(q)
    if not (p > 0 and q > 0):
        raise ValueError(f"{fn}: p and q must be > 0, got p={p}, q={q}")
    S = start.numel()
    check_walk_size(fn, S, walk_length, start.device)
    if S and (int(start.min()) < 0 or int(start.max()) >= n):
        raise ValueError(f"{fn}: start values must be in [0, {n}) (num_nodes), got "
                         f"[{int(start.min())}, {int(start.max())}]")
    dev = start.device
    n_out = torch.empty((S, walk_length + 1), dtype=torch.int64, device=dev)
    e_out = torch.empty((S, walk_length), dtype=torch.int64, device=dev)
    n_out[:, 0] = start
    if S == 0 or walk_length == 0:
        return n_out, e_out
    deg_all = torch.diff(rowptr)

    def step(cur: Tensor, pick: Tensor):
        if col.numel() == 0:
            return cur, torch.full_like(cur, -1)
        d = deg_all[cur]
        e = torch.where(d > 0, rowptr[cur] + pick, -1)
        nxt = torch.where(d > 0, col[e.clamp_min(0)], cur)
        return nxt, e

    if p == 1.0 and q == 1.0:
        # The original's draws: torch.rand(S, L), read row-major on CPU and as
        # (L, S) on CUDA -- the same walks for the same seed on either device.
        u = torch.rand(S, walk_length, dtype=torch.float32, device=dev)
        u = u.view(walk_length, S) if (dev.type == "cuda" or step_major) else u.t()
        cur = start
        for l in range(walk_length):
            cur, e = step(cur, _uniform_pick(u[l], deg_all[cur]))
            n_out[:, l + 1] = cur
            e_out[:, l] = e
        return n_out, e_out

    # node2vec (Grover & Leskovec 2016) by rejection sampling: propose a
    # uniform out-edge (t -> v -> x); accept with 1/p if x == t, 1 if x is a
    # neighbour of t, 1/q otherwise, each divided by the largest of the three.
    top = max(1.0 / p, 1.0, 1.0 / q)
    acc_back, acc_near, acc_far = 1.0 / p / top, 1.0 / top, 1.0 / q / top
    if n and n > 3037000499:  # n * n must fit in int64 for the edge keys
        raise ValueError(f"{fn}: node2vec walks (p, q != 1) support at most 3037000499 nodes, got {n}")
    src = torch.repeat_interleave(torch.arange(n, device=dev), deg_all, output_size=col.numel())
    keys = torch.sort(src * n + col).values

    def is_edge(a: Tensor, b: Tensor) -> Tensor:
        k = a * n + b
        at = torch.searchsorted(keys, k).clamp_max(keys.numel() - 1)
        return keys[at] == k

    def uniform_int(d: Tensor) -> Tensor:
        return torch.minimum((torch.rand(d.shape, dtype=torch.float64, device=dev) * d).to(torch.int64),
                             (d - 1).clamp_min(0))

    t = start
    v, e = step(t, uniform_int(deg_all[t]))
    n_out[:, 1] = v
    e_out[:, 0] = e
    for l in range(1, walk_length):
        d = deg_all[v]
        pick = torch.zeros_like(v)
        todo = torch.nonzero(d > 1).flatten()
        while todo.numel():
            dt = d[todo]
            cand = uniform_int(dt)
            x = col[rowptr[v[todo]] + cand]
            r = torch.rand(todo.shape, dtype=torch.float64, device=dev)
            tt = t[todo]
            bound = torch.where(x == tt, acc_back, torch.where(is_edge(x, tt), acc_near, acc_far))
            ok = r < bound
            pick[todo[ok]] = cand[ok]
            todo = todo[~ok]
        x, e = step(v, pick)
        n_out[:, l + 1] = x
        e_out[:, l] = e
        t, v = v, x
    return n_out, e_out


@torch.jit.ignore
def _random_walk_impl(row: Tensor, col: Tensor, start: Tensor, walk_length: int, p: float, q: float,
                      coalesced: bool, num_nodes: Optional[int]) -> Tuple[Tensor, Tensor]:
    fn = "random_walk"
    check_index(fn, "row", row)
    check_index(fn, "col", col, row.device)
    check_index(fn, "start", start, row.device)
    if row.numel() != col.numel():
        raise ValueError(f"{fn}: row and col must have the same length, got {row.numel()} and {col.numel()}")
    if num_nodes is None:
        parts = [int(t.max()) for t in (row, col, start) if t.numel()]
        num_nodes = max(parts) + 1 if parts else 0
    if row.numel() and (min(int(row.min()), int(col.min())) < 0 or max(int(row.max()), int(col.max())) >= num_nodes):
        raise ValueError(f"{fn}: row and col values must be in [0, num_nodes={num_nodes})")
    if coalesced:
        perm = torch.argsort(row * num_nodes + col)
        row, col = row[perm], col[perm]
    elif row.numel() > 1 and bool((row[1:] < row[:-1]).any()):
        raise ValueError(f"{fn}: row must be sorted when coalesced=False")
    deg = row.new_zeros(num_nodes)
    deg.scatter_add_(0, row, torch.ones_like(row))
    rowptr = row.new_zeros(num_nodes + 1)
    torch.cumsum(deg, 0, out=rowptr[1:])
    return random_walk_op(rowptr, col, start, walk_length, p, q)


def random_walk(row: Tensor, col: Tensor, start: Tensor, walk_length: int, p: float = 1, q: float = 1,
                coalesced: bool = True, num_nodes: Optional[int] = None,
                return_edge_indices: bool = False) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Random walks of ``walk_length`` steps from every node of ``start``
    (node2vec, Grover and Leskovec, KDD 2016).

    ``p == q == 1`` is the uniform walk with the original's ``torch.rand``
    draws (the same walks as torch_cluster for the same seed); otherwise
    node2vec's second-order walk by rejection sampling from torch's generator.
    A walk at a node without out-edges stays there (edge index -1).

    Args:
        row: ``(E,)`` int64 source node of each edge ``row -> col``.
        col: ``(E,)`` int64 target node of each edge.
        start: ``(S,)`` int64 start nodes.
        walk_length: steps per walk (>= 0).
        p: return parameter (a step back to the previous node weighs ``1/p``).
        q: in-out parameter (a step away from the previous node's
            neighbourhood weighs ``1/q``).
        coalesced: sort the edges by ``(row, col)`` first; when False they
            must already be sorted by ``row``.
        num_nodes: the number of nodes (default ``max(row, col, start) + 1``).
        return_edge_indices: also return the edges taken.

    Returns:
        ``node_seq (S, walk_length + 1)`` int64 (column 0 is ``start``), and
        with ``return_edge_indices`` also ``edge_seq (S, walk_length)`` int64:
        positions in the edge list as sorted by ``coalesced`` (-1 for a step
        that stood still), as torch_cluster returns them.

    Raises:
        RuntimeError: walks that cannot fit in the device's memory (16 bytes
            a step: the int64 nodes and edge ids), before anything is
            allocated, naming ``walk_length``, the largest that fits and the
            value given.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_cluster import random_walk
        >>> random_walk(torch.tensor([0, 1]), torch.tensor([1, 0]), torch.tensor([0, 2]), 3, num_nodes=3).tolist()
        [[0, 1, 0, 1], [2, 2, 2, 2]]
    """
    node_seq, edge_seq = _random_walk_impl(row, col, start, walk_length, p, q, coalesced, num_nodes)
    if return_edge_indices:
        return node_seq, edge_seq
    return node_seq
