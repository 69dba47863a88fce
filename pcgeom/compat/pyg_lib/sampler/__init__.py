"""``pyg_lib.sampler`` served by pcgeom: ``random_walk``, and ``neighbor_sample`` / ``hetero_neighbor_sample``
with pyg-lib 0.8.0's signatures.

PyG 2.8 routes its neighbour loaders to pyg-lib as soon as ``pyg_lib`` imports
(and reads ``inspect.signature(neighbor_sample)``), all or nothing.  Sampling
graphs is not pcgeom's job, so the two samplers hand the call to torch_sparse
where it is installed -- the call PyG makes without pyg-lib, so the loader
gives the same subgraphs -- and otherwise raise the ImportError PyG raises
without either ("requires either 'pyg-lib' or 'torch-sparse'"), naming what to
install.  Disjoint, temporal and weighted sampling need the real pyg-lib.
"""

from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from pcgeom.compat.pyg_lib import _ops

__all__ = ["neighbor_sample", "hetero_neighbor_sample", "random_walk"]

NodeType = str
EdgeType = Tuple[str, str, str]


def neighbor_sample(rowptr: Tensor, col: Tensor, seed: Tensor, num_neighbors: List[int],
                    node_time: Optional[Tensor] = None, edge_time: Optional[Tensor] = None,
                    seed_time: Optional[Tensor] = None, edge_weight: Optional[Tensor] = None, csc: bool = False,
                    replace: bool = False, directed: bool = True, disjoint: bool = False,
                    temporal_strategy: str = "uniform", return_edge_id: bool = True):
    """Multi-hop neighbour sampling, by torch_sparse (see the module docstring).

    Args:
        rowptr: int64 ``(N + 1,)`` CSR (``csc=True``: CSC) pointer.
        col: int64 ``(E,)`` neighbours.
        seed: ``(S,)`` seed nodes.
        num_neighbors: neighbours per hop (-1: all).
        node_time: temporal sampling: needs the real pyg-lib (ImportError).
        edge_time: likewise.
        seed_time: likewise.
        edge_weight: weighted sampling: needs the real pyg-lib (ImportError).
        csc: the graph is given as ``(colptr, row)``.
        replace: sample with replacement.
        directed: keep only the sampled edges (else the induced subgraph).
        disjoint: needs the real pyg-lib (ImportError).
        temporal_strategy: ignored (temporal sampling needs pyg-lib).
        return_edge_id: also return the sampled edges' ids.

    Returns:
        ``(row, col, node, edge_id)`` -- pyg-lib's first four outputs; the
        per-hop counts are not returned (torch_sparse has none).

    Raises:
        ImportError: torch_sparse is not installed, or a feature only pyg-lib has was asked for.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pyg_lib.sampler import neighbor_sample
        >>> try:
        ...     out = neighbor_sample(torch.tensor([0, 1, 2]), torch.tensor([1, 0]), torch.tensor([0]), [1])
        ... except ImportError as e:
        ...     out = str(e)
    """
    return torch.ops.pyg.neighbor_sample(rowptr, col, seed, num_neighbors, node_time, edge_time, seed_time,
                                         edge_weight, csc, replace, directed, disjoint, temporal_strategy,
                                         return_edge_id)


def hetero_neighbor_sample(rowptr_dict: Dict[EdgeType, Tensor], col_dict: Dict[EdgeType, Tensor],
                           seed_dict: Dict[NodeType, Tensor], num_neighbors_dict: Dict[EdgeType, List[int]],
                           node_time_dict: Optional[Dict[NodeType, Tensor]] = None,
                           edge_time_dict: Optional[Dict[EdgeType, Tensor]] = None,
                           seed_time_dict: Optional[Dict[NodeType, Tensor]] = None,
                           edge_weight_dict: Optional[Dict[EdgeType, Tensor]] = None, csc: bool = False,
                           replace: bool = False, directed: bool = True, disjoint: bool = False,
                           temporal_strategy: str = "uniform", return_edge_id: bool = True):
    """Heterogeneous multi-hop neighbour sampling, by torch_sparse (see :func:`neighbor_sample`).

    Args:
        rowptr_dict: per edge type ``(src, rel, dst)`` the CSR pointer.
        col_dict: per edge type the neighbours.
        seed_dict: per node type the seed nodes.
        num_neighbors_dict: per edge type the neighbours per hop.
        node_time_dict: needs the real pyg-lib (ImportError).
        edge_time_dict: needs the real pyg-lib (ImportError).
        seed_time_dict: needs the real pyg-lib (ImportError).
        edge_weight_dict: needs the real pyg-lib (ImportError).
        csc: as in :func:`neighbor_sample`.
        replace: as in :func:`neighbor_sample`.
        directed: as in :func:`neighbor_sample`.
        disjoint: needs the real pyg-lib (ImportError).
        temporal_strategy: ignored.
        return_edge_id: as in :func:`neighbor_sample`.

    Returns:
        ``(row_dict, col_dict, node_dict, edge_id_dict)`` keyed by edge / node type.

    Example:
        >>> from pcgeom.compat.pyg_lib.sampler import hetero_neighbor_sample
        >>> callable(hetero_neighbor_sample)
        True
    """
    _ops.torch_sparse_sampling("hetero_neighbor_sample")
    edge_types = list(rowptr_dict.keys())
    node_types = sorted({k[0] for k in edge_types} | {k[-1] for k in edge_types})
    rel = {k: "__".join(k) for k in edge_types}
    back = {v: k for k, v in rel.items()}
    out = torch.ops.pyg.hetero_neighbor_sample(
        node_types, edge_types, {rel[k]: v for k, v in rowptr_dict.items()},
        {rel[k]: v for k, v in col_dict.items()}, seed_dict,
        {rel[k]: v for k, v in num_neighbors_dict.items()},
        node_time_dict, None if edge_time_dict is None else {rel[k]: v for k, v in edge_time_dict.items()},
        seed_time_dict, None if edge_weight_dict is None else {rel[k]: v for k, v in edge_weight_dict.items()},
        csc, replace, directed, disjoint, temporal_strategy, return_edge_id)
    row, col, node, edge = out
    return ({back[k]: v for k, v in row.items()}, {back[k]: v for k, v in col.items()}, node,
            None if edge is None else {back[k]: v for k, v in edge.items()})


def random_walk(rowptr: Tensor, col: Tensor, seed: Tensor, walk_length: int, p: float = 1.0,
                q: float = 1.0) -> Tensor:
    """Random walks of ``walk_length`` steps from every node of ``seed``.

    ``p == q == 1`` follows pyg-lib's kernel of the device, draw for draw from
    torch's generator.  On CPU, pyg-lib's CPU walk: seed after seed, a step
    from a node of out-degree ``d`` takes ``chunk % d`` of the 128-word blocks
    its random engine prefetches with ``torch.randint`` (pyg-lib's one-thread
    order; pyg-lib splits many seeds across racing threads, which no run
    reproduces).  On other devices, pyg-lib's CUDA walk: ``u =
    torch.rand(walk_length, S)`` (float32, on ``seed``'s device), step ``j`` of
    walk ``i`` takes out-edge ``trunc(u[j, i] * deg)``.  A node without
    out-edges repeats itself (and draws nothing).  ``p`` or ``q != 1``:
    node2vec's biased walk (return weight ``1/p``, in-out weight ``1/q``) by
    rejection sampling from torch's generator on every device; pyg-lib 0.8
    refuses it.

    Args:
        rowptr: int32/int64 ``(N + 1,)`` CSR row pointer.
        col: ``(E,)`` neighbours, same dtype.
        seed: ``(S,)`` start nodes, same dtype.
        walk_length: steps (>= 0).
        p: return parameter.
        q: in-out parameter.

    Returns:
        ``(S, walk_length + 1)`` node sequences (column 0 is ``seed``), ``rowptr``'s dtype.

    Raises:
        RuntimeError: walks that cannot fit in the device's memory (16 bytes
            a step: the nodes and the draws or edge ids), before anything is
            allocated, naming ``walk_length``, the largest that fits and the
            value given.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pyg_lib.sampler import random_walk
        >>> random_walk(torch.tensor([0, 1, 2, 2]), torch.tensor([1, 0]), torch.tensor([0, 2]), 3).tolist()
        [[0, 1, 0, 1], [2, 2, 2, 2]]
    """
    return torch.ops.pyg.random_walk(rowptr, col, seed, walk_length, p, q)
