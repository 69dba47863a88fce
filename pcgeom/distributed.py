"""``pcgeom.distributed``: exact KNN over a gallery sharded across the ranks of
a ``torch.distributed`` process group.

The global gallery is the rank-ordered concatenation of the shards: row ``i`` of
rank ``r``'s shard has global index ``sum(N_0 .. N_{r-1}) + i``.  Each rank
searches only its own shard with :func:`pcgeom.knn` (the native kernel), the
per-shard top-k lists are exchanged with one ``all_gather`` and merged exactly on
``(distance, global index)``, so every rank returns what one :func:`pcgeom.knn`
over the whole gallery returns, bit for bit.  Memory per rank: the shard plus
``O(M k world_size)``; the gallery is never assembled anywhere.

Every function here is **collective**: all ranks of the group call it, in the
same order.  Arguments are checked on every rank and a small metadata vector is
exchanged before any search, so a bad argument on one rank (or ranks that
disagree on D, dtype, k, the number of queries or the queries themselves) raises
on *every* rank instead of leaving the others blocked in a collective.

:class:`pcgeom.nn.KNNClassifier` builds on this (``process_group=``); the
``pcgeom group`` command splits its input files across the ranks of a
``torchrun`` launch.
"""

from __future__ import annotations

from pcgeom import _collectives as C
from pcgeom import _validation as V
from pcgeom._sharded_knn import sharded_knn
from pcgeom.ops.knn import KNNResult

__all__ = ["knn", "shard_bounds"]

#: Each rank searches its shard in slices of at most this many bytes (counted in
#: the accumulation dtype), so whatever working copies the search kernel makes
#: (float32 copies of float16 rows, normalised rows for ``metric="cosine"``) are
#: bounded by the slice, not by the shard.
SEARCH_CHUNK_BYTES = 32 * 2**20


def shard_bounds(n: int, *, group=None) -> tuple[int, int]:
    """Rows ``[start, stop)`` of an ``n``-row gallery that this rank holds when
    the gallery is split as evenly as possible, in order, across the group.

    The first ``n % world_size`` ranks get one row more (the split of
    ``torch.tensor_split``), so concatenating the ranks' rows in rank order gives
    the gallery back.  Not a collective: it only reads the rank and world size.

    Args:
        n: number of rows, an int >= 0.
        group: the process group (default: the default group).

    Returns:
        ``(start, stop)`` Python ints.

    Raises:
        ValueError: ``n`` is negative, or this process is not a member of ``group``.
        TypeError: ``n`` is not an int.
        RuntimeError: no process group is initialised (``torch.distributed.init_process_group`` first), or this
            torch has no torch.distributed.

    Example:
        >>> import torch.distributed as dist
        >>> from pcgeom.distributed import shard_bounds
        >>> # on rank 1 of 3: shard_bounds(10) == (4, 7); ranks 0 and 2 hold (0, 4) and (7, 10)
    """
    n = V.check_int("shard_bounds", "n", n, minimum=0)
    g = C.resolve("shard_bounds", group)
    return C.bounds(n, g.rank, g.world)


def knn(query, shard, k, *, group=None, metric: str = "l2") -> KNNResult:
    """Exact k nearest neighbours in a gallery sharded across a process group.

    **Collective**: every rank of ``group`` calls it with the **same queries**
    and its own shard.  The global gallery is the rank-ordered concatenation of
    the shards, so row ``i`` of rank ``r``'s shard has global index
    ``sum(N_0 .. N_{r-1}) + i``.  Every rank returns the same result, equal bit
    for bit to ``pcgeom.knn(query[None], gallery[None], k)[.][0]`` over the
    whole gallery: squared Euclidean distances ascending, **ties to the lower
    global index**, NaN distances after +inf, slots beyond the gallery
    (``k > sum(N_r)``) padded with ``idx = -1``, ``dist2 = +inf``.

    Each rank searches its shard with :func:`pcgeom.knn`, in slices of
    :data:`SEARCH_CHUNK_BYTES`; the per-shard top-k lists (float32 distance bits
    and int32 local indices: ``8 k`` bytes per query and rank, ``16 k`` for
    float64 or shards of 2**31 rows or more) are exchanged with one
    ``all_gather`` and merged on (distance, global index).  Memory per rank: its
    shard plus ``O(M k world_size)``.  No autograd graph: the results are
    detached.

    Before the search the ranks exchange a small metadata vector, so they all
    raise the same clear error when they disagree on D, dtype, k, M, the device
    type or the query values (a checksum), or when one rank's arguments are bad.

    Args:
        query: ``(M, D)`` float16/bfloat16/float32/float64 queries, identical on
            every rank, on the device of ``shard``.
        shard: ``(N_r, D)`` this rank's part of the gallery, same dtype; ``N_r = 0``
            is allowed.
        k: number of neighbours, an int >= 1, the same on every rank; larger than
            a shard or the whole gallery is allowed (padded).
        group: the process group (default: the default group).  With the gloo
            backend the exchange goes through the CPU, with nccl through this
            rank's GPU (call ``torch.cuda.set_device(local_rank)`` first).
        metric: ``"l2"`` (default) or ``"cosine"``: queries and gallery rows are
            L2-normalised first (as :class:`pcgeom.nn.KNNClassifier` does: in
            float32/float64, rounded back to the input dtype; zero rows stay zero),
            and ``dist2 = |a - b|^2 = 2 - 2 cos(a, b)`` of the normalised rows.

    Returns:
        ``KNNResult(dist2 (M, k), idx (M, k))`` on the query's device: ``dist2``
        in the input dtype (float16 distances are ranked in float32 and rounded
        at the end, as in :func:`pcgeom.knn`), ``idx`` int64 global indices.

    Raises:
        RuntimeError: the process group is not initialised, or another rank
            rejected its arguments.
        ValueError / TypeError: bad arguments, or ranks that disagree.

    Example (each of 2 ranks, e.g. under ``torchrun --nproc-per-node 2``)::

        import torch, torch.distributed as dist, pcgeom, pcgeom.distributed
        dist.init_process_group("gloo")
        gallery = torch.rand(1000, 64, generator=torch.Generator().manual_seed(0))
        lo, hi = pcgeom.distributed.shard_bounds(len(gallery))
        query = gallery[:5] + 0.01
        d, i = pcgeom.distributed.knn(query, gallery[lo:hi], k=3)
        d0, i0 = pcgeom.knn(query[None], gallery[None], 3)
        assert torch.equal(i, i0[0]) and torch.equal(d, d0[0])   # on every rank
    """
    fn = "pcgeom.distributed.knn"
    g = C.resolve(fn, group)

    def prepare():
        V.check_tensor(fn, "query", query, 2, "(M, D)")
        V.check_tensor(fn, "shard", shard, 2, "(N_r, D)")
        for name, t in (("query", query), ("shard", shard)):
            if t.dtype not in V.FLOAT_DTYPES:
                raise TypeError(f"{fn}: {name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
        if query.shape[1] < 1:
            raise ValueError(f"{fn}: query must have at least one feature (D >= 1), got shape {V.shape_str(query)}")
        if shard.shape[1] != query.shape[1]:
            raise ValueError(f"{fn}: shard must have shape (N_r, {query.shape[1]}) with the D of query, "
                             f"got {V.shape_str(shard)}")
        if shard.dtype != query.dtype:
            raise TypeError(f"{fn}: query and shard must have the same dtype, got {query.dtype} and {shard.dtype}")
        if shard.device != query.device:
            raise ValueError(f"{fn}: shard must be on the device of query ({query.device}), got {shard.device}")
        return query, shard, V.check_int(fn, "k", k, minimum=1)

    d, i, _, q = sharded_knn(fn, g, prepare, metric=metric, chunk_bytes=SEARCH_CHUNK_BYTES)
    return KNNResult(d.to(q.dtype), i)
