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

from typing import Callable

import torch
import torch.distributed as dist

from pcgeom import _validation as V
from pcgeom.ops.knn import KNNResult
from pcgeom.ops.knn import knn as _knn

__all__ = ["knn", "shard_bounds"]

#: Each rank searches its shard in slices of at most this many bytes (counted in
#: the accumulation dtype), so whatever working copies the search kernel makes
#: (float32 copies of float16 rows, normalised rows for ``metric="cosine"``) are
#: bounded by the slice, not by the shard.
SEARCH_CHUNK_BYTES = 32 * 2**20

_METRICS = ("l2", "cosine")
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_DEVICE_TYPES = ("cpu", "cuda", "xpu", "mps", "meta")
# Which collective a rank is in: a rank that called something else is named in
# the error instead of producing garbage.
_OPS = ("pcgeom.distributed.knn", "KNNClassifier", "KNNClassifier.add", "KNNClassifier.save_sharded",
        "KNNClassifier.load_sharded", "KNNClassifier.load_state_dict", "KNNClassifier search")
_FACTS = 12  # length of the metadata vector every rank contributes
_OK, _REJECTED = 0, 1


# --------------------------------------------------------------------- groups
class _Group:
    """A process group with this process's rank in it (``group=None``: one process)."""

    def __init__(self, handle, rank: int, world: int):
        self.handle, self.rank, self.world = handle, rank, world

    @property
    def single(self) -> bool:
        return self.handle is None


def _resolve(fn: str, group) -> _Group:
    """The default group for ``group=None``; clear errors when there is none."""
    if not dist.is_available():
        raise RuntimeError(f"{fn}: this torch build has no torch.distributed (torch {torch.__version__})")
    if not dist.is_initialized():
        raise RuntimeError(
            f"{fn}: the torch.distributed process group is not initialised; call "
            "torch.distributed.init_process_group(...) first (torchrun sets up the environment for it: "
            "backend='gloo' for CPU tensors, 'nccl' for CUDA tensors)"
        )
    handle = dist.group.WORLD if group is None else group
    rank = dist.get_rank(handle)
    if rank < 0:
        raise ValueError(f"{fn}: this process (global rank {dist.get_rank()}) is not a member of group")
    return _Group(handle, rank, dist.get_world_size(handle))


def _single() -> _Group:
    return _Group(None, 0, 1)


def _comm_device(g: _Group) -> torch.device:
    """Where this group's collectives take their tensors (gloo/mpi: CPU; nccl: this rank's GPU)."""
    if g.single:
        return torch.device("cpu")
    backend = str(dist.get_backend(g.handle)).lower()
    if "gloo" in backend or "mpi" in backend:
        return torch.device("cpu")
    if "nccl" in backend:
        return torch.device("cuda", torch.cuda.current_device())
    if "xccl" in backend:
        return torch.device("xpu", torch.xpu.current_device())
    return torch.device("cpu")


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
    g = _resolve("shard_bounds", group)
    return _bounds(n, g.rank, g.world)


def _bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


# ------------------------------------------------------------------- agreement
def _device_code(device: torch.device) -> int:
    return _DEVICE_TYPES.index(device.type) if device.type in _DEVICE_TYPES else len(_DEVICE_TYPES)


def _device_name(code: int) -> str:
    return _DEVICE_TYPES[code] if 0 <= code < len(_DEVICE_TYPES) else "other"


def _dtype_code(dtype: torch.dtype) -> int:
    return _DTYPES.index(dtype) if dtype in _DTYPES else -1


def _checksum(t: torch.Tensor) -> int:
    """An order-sensitive checksum of a tensor's bits, the same on every rank and
    thread count (integer arithmetic only).  Used to check that ranks pass the
    same queries; not cryptographic."""
    if t.numel() == 0:
        return 0
    flat = t.detach().contiguous().reshape(-1)
    if flat.element_size() >= 4:
        words = flat.view(torch.int32)
    elif flat.element_size() == 2:
        words = flat.view(torch.int16)
    else:
        words = flat.view(torch.int8)
    p = 2_147_483_647
    total, step = 0, 1 << 20
    for s in range(0, words.numel(), step):
        w = words[s:s + step].to(torch.int64)
        pos = torch.arange(s, s + w.numel(), dtype=torch.int64, device=w.device) % 65_521 + 1
        total = (total + int(torch.remainder(w * pos, p).sum())) % (1 << 62)
    return total


def _agree(fn: str, g: _Group, op: str, local: Callable[[], tuple[object, list[int]]]):
    """Runs this rank's checks (``local()`` -> (value, facts)) and exchanges the facts.

    Returns ``(value, facts)`` with ``facts`` a ``(world, _FACTS - 2)`` int64 tensor
    of every rank's facts.  If ``local()`` raised on any rank, every rank raises:
    the rejecting ranks their own exception, the others a RuntimeError naming them.
    """
    err, value, facts = None, None, []
    try:
        value, facts = local()
    except Exception as exc:  # re-raised below, after the other ranks have heard of it
        err = exc
    row = [_OPS.index(op), _REJECTED if err is not None else _OK] + [int(f) for f in facts]
    row += [0] * (_FACTS - len(row))
    mine = torch.tensor(row, dtype=torch.int64)
    if g.single:
        table = mine[None]
    else:
        dev = _comm_device(g)
        parts = [torch.empty(_FACTS, dtype=torch.int64, device=dev) for _ in range(g.world)]
        dist.all_gather(parts, mine.to(dev), group=g.handle)
        table = torch.stack(parts).cpu()
    ops = table[:, 0].tolist()
    if len(set(ops)) > 1:
        where = ", ".join(f"rank {r} in {_OPS[o] if 0 <= o < len(_OPS) else o}" for r, o in enumerate(ops))
        raise RuntimeError(f"{fn}: the ranks are in different pcgeom collectives ({where}); every rank must "
                           "make the same calls in the same order")
    if err is not None:
        raise err
    bad = [r for r, s in enumerate(table[:, 1].tolist()) if s != _OK]
    if bad:
        raise RuntimeError(
            f"{fn}: rank{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))} of {g.world} rejected "
            "their arguments (see the error raised there); nothing was done on any rank"
        )
    return value, table[:, 2:]


def _same(fn: str, what: str, values: list, exc=ValueError) -> None:
    if len(set(values)) > 1:
        per_rank = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
        raise exc(f"{fn}: every rank must pass the same {what}, got {per_rank}")


# ------------------------------------------------------------------- exchange
def _to_words(t: torch.Tensor, word: torch.dtype) -> torch.Tensor:
    if t.dtype == torch.float32:
        t = t.view(torch.int32)
    elif t.dtype == torch.float64:
        t = t.view(torch.int64)
    return t.to(word)


def _from_words(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.float32:
        return w.to(torch.int32).view(torch.float32)
    if dtype == torch.float64:
        return w.to(torch.int64).view(torch.float64)
    return w.to(dtype)


def _all_gather_columns(g: _Group, cols: list[torch.Tensor]) -> list[torch.Tensor]:
    """All-gathers same-shaped ``(M, k)`` columns as one packed tensor.

    float32 / int32 columns travel as 32-bit words (float bits unchanged), so a
    float32 search exchanges 8 bytes per candidate; any 64-bit column makes every
    word 64-bit.  Returns each column as ``(world, M, k)``.
    """
    wide = any(c.dtype in (torch.float64, torch.int64) for c in cols)
    word = torch.int64 if wide else torch.int32
    packed = torch.stack([_to_words(c, word) for c in cols], -1)
    if g.single:
        out = packed[None]
    else:
        dev = _comm_device(g)
        packed = packed.to(dev)
        parts = [torch.empty_like(packed) for _ in range(g.world)]
        dist.all_gather(parts, packed, group=g.handle)
        out = torch.stack(parts)
    return [_from_words(out[..., j], c.dtype) for j, c in enumerate(cols)]


def _all_reduce_sum(g: _Group, t: torch.Tensor) -> torch.Tensor:
    if g.single:
        return t
    dev = _comm_device(g)
    buf = t.to(dev, copy=True)
    dist.all_reduce(buf, group=g.handle)
    return buf.to(t.device)


# --------------------------------------------------------------------- search


def _normalize_rows(x: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit L2 norm in the accumulation dtype, then rounded back to
    ``x.dtype``; rows of zeros stay zero.  The normalisation of
    ``KNNClassifier(metric="cosine")`` (which calls this function)."""
    acc = V.acc_dtype(x.dtype)
    xa = x.to(acc)
    # Divide by max(|x|, tiny) so zero rows stay zero (no NaN, no gradient blow-up).
    norm = torch.linalg.vector_norm(xa, dim=-1, keepdim=True).clamp_min(torch.finfo(acc).tiny)
    return (xa / norm).to(x.dtype)


def _local_topk(q: torch.Tensor, shard: torch.Tensor, k: int, metric: str, chunk_bytes: int):
    """The shard's top-k of every query: ``(dist (M, k) acc dtype, idx (M, k) int64 local)``,
    ascending in (distance, index), padded with (+inf, -1) where the shard has fewer than k rows.

    Distances are pcgeom.knn's in the accumulation dtype: float16/bfloat16 rows are
    searched as exact float32 copies, which is what the kernel does internally, so
    the ranking is the one a float16 search of the whole gallery makes before it
    rounds the distances.  The shard is searched in slices (bounded copies); each
    slice's list is in (distance, index) order and the slices are in index order,
    so a stable sort of their concatenation by distance is one search's answer.
    """
    M = q.shape[0]
    n, D = shard.shape
    acc = V.acc_dtype(q.dtype)
    out_d = torch.full((M, k), float("inf"), dtype=acc, device=q.device)
    out_i = torch.full((M, k), -1, dtype=torch.int64, device=q.device)
    if M == 0 or n == 0:
        return out_d, out_i
    if metric == "cosine":
        q = _normalize_rows(q)
    qa = q.detach().to(acc)[None]
    rows = max(k, chunk_bytes // (D * torch.finfo(acc).bits // 8))
    ds, ids = [], []
    for s in range(0, n, rows):
        e = min(n, s + rows)
        part = shard[s:e].detach()
        if metric == "cosine":
            part = _normalize_rows(part)
        d, i = _knn(qa, part.to(acc)[None], min(k, e - s))
        ds.append(d[0])
        ids.append(i[0] + s)
    d, i = torch.cat(ds, 1), torch.cat(ids, 1)
    if len(ds) > 1:
        order = torch.sort(d, dim=1, stable=True).indices[:, :k]  # NaN sorts last, as in pcgeom.knn
        d, i = d.gather(1, order), i.gather(1, order)
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


def _sharded_search(fn: str, g: _Group, prepare: Callable[[], tuple[torch.Tensor, torch.Tensor, int]], *,
                    op: str = "pcgeom.distributed.knn", metric: str = "l2",
                    chunk_bytes: int = SEARCH_CHUNK_BYTES, k_within_gallery: str | None = None):
    """The collective search behind :func:`knn` and the sharded KNNClassifier.

    ``prepare()`` validates this rank's arguments and returns ``(query (M, D),
    shard (N_r, D), k)``.  With ``k_within_gallery`` set (a message suffix), k
    larger than the whole gallery is an error instead of padding.

    Returns ``(dist (M, k) acc dtype, idx (M, k) int64 global, sizes, query)`` on
    the query's device; ``sizes`` are the shard sizes of every rank.
    """
    def local():
        if not isinstance(metric, str) or metric not in _METRICS:
            raise ValueError(f"{fn}: metric must be one of {_METRICS}, got {metric!r}")
        q, shard, k = prepare()
        facts = [q.shape[1], _dtype_code(q.dtype), k, q.shape[0], shard.shape[0], _device_code(q.device),
                 _METRICS.index(metric), _checksum(q)]
        return (q, shard, k), facts

    (q, shard, k), facts = _agree(fn, g, op, local)
    D, dt, ks, Ms, Ns, devs, mets, sums = (facts[:, j].tolist() for j in range(8))
    _same(fn, "metric", [_METRICS[c] for c in mets])
    _same(fn, "number of features D (query.shape[1] == shard.shape[1])", D)
    _same(fn, "dtype", [str(_DTYPES[c]) for c in dt], TypeError)
    _same(fn, "k", ks)
    _same(fn, "number of queries M (query.shape[0])", Ms)
    _same(fn, "device type", [_device_name(c) for c in devs])
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
    d_loc, i_loc = _local_topk(q, shard, k, metric, chunk_bytes)
    small = max(sizes) < 2**31 - 1
    d_w, i_w = _all_gather_columns(g, [d_loc, i_loc.to(torch.int32) if small else i_loc])
    offsets = torch.tensor([0] + sizes[:-1], dtype=torch.int64, device=i_w.device).cumsum(0)
    i_w = i_w.to(torch.int64)
    i_w = torch.where(i_w >= 0, i_w + offsets[:, None, None], i_w)
    W = d_w.shape[0]
    d_w = d_w.permute(1, 0, 2).reshape(M, W * k)
    i_w = i_w.permute(1, 0, 2).reshape(M, W * k)
    order = _merge(d_w, i_w, k)
    return d_w.gather(1, order).to(q.device), i_w.gather(1, order).to(q.device), sizes, q


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
    g = _resolve(fn, group)

    def prepare():
        V.check_tensor(fn, "query", query, 2, "(M, D)")
        V.check_tensor(fn, "shard", shard, 2, "(N_r, D)")
        for name, t in (("query", query), ("shard", shard)):
            if t.dtype not in _DTYPES:
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

    d, i, _, q = _sharded_search(fn, g, prepare, metric=metric, chunk_bytes=SEARCH_CHUNK_BYTES)
    return KNNResult(d.to(q.dtype), i)
