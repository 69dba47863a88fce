"""The collective exact KNN over a gallery sharded across a process group.

Each rank searches only its own shard (:func:`shard_topk`, through the one
chunk-and-merge :func:`pcgeom._chunked_knn.chunked_knn`), the per-shard top-k
lists are exchanged with one all-gather and merged exactly on ``(distance,
global index)``, so every rank returns what one :func:`pcgeom.knn` over the
rank-ordered concatenation of the shards returns, bit for bit.  Before any
search the ranks agree on the arguments (:func:`pcgeom._collectives.agree`).

Internal: the engine of :func:`pcgeom.distributed.knn` and of the sharded
:class:`pcgeom.nn.KNNClassifier`; each validates its own arguments and calls
:func:`sharded_knn`.
"""

from __future__ import annotations

from typing import Callable

import torch

from pcgeom import _collectives as C
from pcgeom import _validation as V
from pcgeom._chunked_knn import METRICS, chunked_knn, normalize_rows


def shard_topk(q: torch.Tensor, shard: torch.Tensor, k: int, metric: str, chunk_bytes: int):
    """The shard's top-k of every query: ``(dist (M, k) acc dtype, idx (M, k) int64 local)``,
    ascending in (distance, index), padded with (+inf, -1) where the shard has fewer than k rows.

    Distances are pcgeom.knn's in the accumulation dtype: float16/bfloat16 rows are
    searched as exact float32 copies, which is what the kernel does internally, so
    the ranking is the one a float16 search of the whole gallery makes before it
    rounds the distances.  The shard is searched with :func:`chunked_knn` in
    slices of ``chunk_bytes``; each slice is normalised (cosine) and converted
    there, so those copies are bounded by the slice.
    """
    M = q.shape[0]
    n = shard.shape[0]
    acc = V.acc_dtype(q.dtype)
    out_d = torch.full((M, k), float("inf"), dtype=acc, device=q.device)
    out_i = torch.full((M, k), -1, dtype=torch.int64, device=q.device)
    if M == 0 or n == 0:
        return out_d, out_i
    if metric == "cosine":
        q = normalize_rows(q)

    def prepare(part: torch.Tensor) -> torch.Tensor:
        return (normalize_rows(part) if metric == "cosine" else part).to(acc)

    d, i = chunked_knn(q.detach().to(acc), shard.detach(), k, chunk_bytes, prepare=prepare)
    kk = d.shape[1]
    out_d[:, :kk] = d
    out_i[:, :kk] = i
    return out_d, out_i


def _merge(dist_w: torch.Tensor, idx_w: torch.Tensor, k: int) -> torch.Tensor:
    """Column order ``(M, k)`` into the rank-major ``(M, world * k)`` candidate lists.

    The key is (padding last, distance with NaN after +inf, global index): two
    stable sorts, least significant first.  The candidates are laid out rank by
    rank, each rank's list in (distance, index) order, so equal distances are
    already in global-index order and stability keeps it.  Padding (+inf, -1)
    must sort after real +inf and NaN distances, hence the second sort.
    """
    order = torch.sort(dist_w, dim=1, stable=True).indices
    pad = (idx_w.gather(1, order) < 0).to(torch.uint8)
    order = order.gather(1, torch.sort(pad, dim=1, stable=True).indices)
    return order[:, :k]


def sharded_knn(fn: str, g: C.Group, prepare: Callable[[], tuple[torch.Tensor, torch.Tensor, int]], *,
                chunk_bytes: int, op: str = "pcgeom.distributed.knn", metric: str = "l2",
                k_within_gallery: str | None = None):
    """The collective search behind :func:`pcgeom.distributed.knn` and the sharded KNNClassifier.

    ``prepare()`` validates this rank's arguments and returns ``(query (M, D),
    shard (N_r, D), k)``.  With ``k_within_gallery`` set (a message suffix), k
    larger than the whole gallery is an error instead of padding.

    Returns ``(dist (M, k) acc dtype, idx (M, k) int64 global, sizes, query)`` on
    the query's device; ``sizes`` are the shard sizes of every rank.
    """
    def local():
        if not isinstance(metric, str) or metric not in METRICS:
            raise ValueError(f"{fn}: metric must be one of {METRICS}, got {metric!r}")
        q, shard, k = prepare()
        facts = [q.shape[1], C.dtype_code(q.dtype), k, q.shape[0], shard.shape[0], C.device_code(q.device),
                 METRICS.index(metric), C.checksum(q)]
        return (q, shard, k), facts

    (q, shard, k), facts = C.agree(fn, g, op, local)
    D, dt, ks, Ms, Ns, devs, mets, sums = (facts[:, j].tolist() for j in range(8))
    C.same(fn, "metric", [METRICS[c] for c in mets])
    C.same(fn, "number of features D (query.shape[1] == shard.shape[1])", D)
    C.same(fn, "dtype", [C.dtype_name(c) for c in dt], TypeError)
    C.same(fn, "k", ks)
    C.same(fn, "number of queries M (query.shape[0])", Ms)
    C.same(fn, "device type", [C.device_name(c) for c in devs])
    if len(set(sums)) > 1:
        groups = {}
        for r, s in enumerate(sums):
            groups.setdefault(s, []).append(r)
        which = "; ".join("ranks " + ", ".join(map(str, rs)) for rs in groups.values())
        raise ValueError(
            f"{fn}: every rank must pass the same queries, but their values differ between ranks ({which} "
            "agree among themselves); if each rank has its own queries, all_gather them first and search them all"
        )
    sizes = [int(n) for n in Ns]
    total = sum(sizes)
    if k_within_gallery is not None and k > total:
        raise ValueError(f"{fn}: k={k} is larger than the gallery ({total} items{k_within_gallery}); "
                         "add items with add() or lower k")
    M = q.shape[0]
    acc = V.acc_dtype(q.dtype)
    if M == 0:
        return (torch.empty((0, k), dtype=acc, device=q.device),
                torch.empty((0, k), dtype=torch.int64, device=q.device), sizes, q)
    d_loc, i_loc = shard_topk(q, shard, k, metric, chunk_bytes)
    small = max(sizes) < 2**31 - 1
    d_w, i_w = C.all_gather_columns(g, [d_loc, i_loc.to(torch.int32) if small else i_loc])
    offsets = torch.tensor([0] + sizes[:-1], dtype=torch.int64, device=i_w.device).cumsum(0)
    i_w = i_w.to(torch.int64)
    i_w = torch.where(i_w >= 0, i_w + offsets[:, None, None], i_w)
    W = d_w.shape[0]
    d_w = d_w.permute(1, 0, 2).reshape(M, W * k)
    i_w = i_w.permute(1, 0, 2).reshape(M, W * k)
    order = _merge(d_w, i_w, k)
    return d_w.gather(1, order).to(q.device), i_w.gather(1, order).to(q.device), sizes, q
