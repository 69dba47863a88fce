"""Out-of-core exact KNN and ball query: answers streamed block by block, equal to the in-memory calls.

:func:`knn_streamed` / :func:`ball_query_streamed` write into outputs the caller
provides -- which may be memory-mapped (``torch.from_file(..., shared=True)``, a
numpy memmap through ``torch.from_numpy``) -- and :func:`knn_blocks` /
:func:`ball_query_blocks` yield the same answers as :class:`StreamedBlock`
``(rows, dist2, idx)`` blocks.  Either way no output larger than one block is
ever held in memory, and the answer is the one :func:`pcgeom.knn` /
:func:`pcgeom.ball_query` give for the whole cloud, bit for bit: the same
indices, the same distances, ties to the lower index, ``-1`` / ``+inf`` padding.

The engine (shared with the streamed preprocessing and grouping that build on
it): :class:`SpatialTiles` cuts the points into axis-aligned tiles of at most
``block_points`` points (median splits of the longest axis, each tile's indices
ascending), and the queries likewise.  A query block is searched against the
points of every tile whose box comes within a halo ``h`` of the block's box.
That search is exact for a query when it is provable:

* a point outside the candidate tiles differs from every query of the block by
  at least ``h`` along some axis, and because subtraction, squaring and adding
  non-negative terms are monotone under rounding, its computed squared
  distance is at least ``fl(h * h)`` in the accumulation dtype -- the kernel's
  own arithmetic, not a real-number bound;
* so a KNN row whose k-th computed distance is strictly below ``fl(h * h)``
  cannot gain or lose a neighbour, nor a tie, from those points.  Rows that
  are not provably exact are searched again with a halo just above their k-th
  distance (which bounds their true k-th distance from above), so the second
  search always proves them; a row that found fewer than k points doubles its
  halo until it does or the halo covers every tile.
* a ball query needs no second search: its halo is the smallest ``h`` with
  ``fl(h * h) > radius**2``, so every point the ball can hold is a candidate.

The candidates of a search are gathered in ascending global index order, so
the kernel's "ties to the lower index" rule picks the same point as on the
whole cloud.  A search whose candidates exceed ``8 * block_points`` points (a
huge k or radius, an isolated query) is split spatially, and at 64 queries or
fewer searched slice by slice and merged exactly, so memory stays bounded by
the block size in every case.  Non-finite coordinates are refused (a tile has
no box for them).
"""

from __future__ import annotations

import os
import sys
from typing import Iterator, NamedTuple

import numpy as np
import torch

from pcgeom import _validation as V
from pcgeom.ops.ball_query import ball_query
from pcgeom.ops.knn import KNNResult, knn

#: The default tile size, in points (and query rows per search).
DEFAULT_BLOCK_POINTS = 1 << 18
#: Point tiles are this many times smaller than a query block.
TILES_PER_BLOCK = 16
#: A search holds at most this many blocks of candidates at once.
CANDIDATE_BLOCKS = 8
#: A query group over the candidate budget is split spatially down to this many rows, then searched in slices.
MIN_SPLIT_ROWS = 64
#: Queries sampled per tile to guess the first halo of a KNN search.
HALO_SAMPLES = 64
#: The first halo is this quantile (a fraction) of the sampled queries' k-th distances.
HALO_QUANTILE_NUM, HALO_QUANTILE_DEN = 9, 10
#: Output entries (rows x k) per search: query blocks shrink for large k.
_ENTRIES_PER_BLOCK_ROW = 16

_ORDERS = ("distance", "index")
_INDEX_DTYPES = (torch.int32, torch.int64)


class StreamedBlock(NamedTuple):
    """One block of a streamed answer.

    Attributes:
        rows: ``(n,)`` int64, ascending: the query rows this block answers.
        dist2: ``(n, k)`` squared distances in the input's dtype (row ``j`` is
            query ``rows[j]``), as :func:`pcgeom.knn` / :func:`pcgeom.ball_query`
            return them; ``+inf`` in padded slots.
        idx: ``(n, k)`` indices into ``points`` in the requested index dtype;
            ``-1`` in padded slots.
    """

    rows: torch.Tensor
    dist2: torch.Tensor
    idx: torch.Tensor


def _split(x: torch.Tensor, seg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``seg`` (rows of ``x``, ascending) in two non-empty ascending halves: at the median of
    its widest axis (``<=`` goes left; ``<`` when the median is the maximum), or by position
    when all its points coincide."""
    best, best_ext = -1, 0.0
    for a in range(x.shape[1]):
        c = x[:, a].index_select(0, seg)
        ext = float(c.max()) - float(c.min())
        if ext > best_ext:
            best, best_ext = a, ext
    if best < 0:
        half = seg.numel() // 2
        return seg[:half], seg[half:]
    c = x[:, best].index_select(0, seg)
    v = torch.kthvalue(c, (c.numel() + 1) // 2).values
    left = c <= v
    if bool(left.all()):  # the median is the maximum: the minimum < it goes left
        left = c < v
    return seg[left], seg[~left]


def _np_split(c: list[np.ndarray], idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_split` on a segment carried with its coordinates: ``c`` ``D`` contiguous ``(n,)``
    arrays (one per axis), ``idx`` ``(n,)`` ascending -> ``(left mask, or None to cut by position)``,
    the same decision as :func:`_split` (widest axis first in axis order, the lower median, ``<=``;
    ``<`` when the median is the maximum)."""
    best, best_ext = -1, 0.0
    lo, hi = [col.min() for col in c], [col.max() for col in c]
    for a in range(len(c)):
        ext = float(hi[a]) - float(lo[a])  # in double, as _split subtracts Python floats
        if ext > best_ext:
            best, best_ext = a, ext
    if best < 0:
        return None, None
    col = c[best]
    kth = (col.size + 1) // 2 - 1
    v = np.partition(col, kth)[kth]  # kthvalue's value: the (n+1)//2-th smallest
    left = col <= v
    if v == hi[best]:  # the median is the maximum: every point would go left, so the minimum < it does
        left = col < v
    return left, best


def _perm_dtype(n: int):
    """The tile permutation's numpy dtype: :func:`pcgeom._validation.row_dtype`'s."""
    return np.int32 if V.row_dtype(n) == torch.int32 else np.int64


def _tiles_numpy(x: torch.Tensor, block: int, acc: torch.dtype):
    """:class:`SpatialTiles`' tiles of a CPU tensor, built with numpy: each segment carries its own
    coordinates (``D`` contiguous arrays, one per axis) and indices, so a split is a few linear
    passes over contiguous memory instead of gathers from the strided input.  A split moves one
    axis at a time into its two halves and drops the parent's copy of it at once, so the first
    split holds ``N * (D * itemsize + 4)`` bytes plus one axis and a mask more, not twice that.
    Returns ``(perm (N,) int32 or int64, counts [T], lo (T, D), hi (T, D), paths [T])``, the tiles
    :func:`_split` makes."""
    n, d = x.shape
    work_dt = np.float64 if x.dtype == torch.float64 else np.float32  # exact for every input dtype
    ind_dt = _perm_dtype(n)
    perm = np.empty(n, dtype=ind_dt)
    counts, los, his, paths = [], [], [], []
    if n == 0:
        return perm, counts, np.empty((0, d), work_dt), np.empty((0, d), work_dt), paths
    # The coordinates one axis at a time: never a (N, D) copy of a strided or memory-mapped input at once.
    c = []
    for a in range(d):
        col = x[:, a]
        c.append(np.ascontiguousarray((col.float() if col.dtype == torch.bfloat16 else col).numpy(),
                                      dtype=work_dt))  # numpy has no bfloat16
    work = [(c, np.arange(n, dtype=ind_dt), "")]
    at = 0
    while work:
        c, idx, path = work.pop()
        m = idx.size
        if m <= block:
            perm[at:at + m] = idx
            at += m
            counts.append(m)
            los.append([col.min() for col in c])
            his.append([col.max() for col in c])
            paths.append(path)
            continue
        left, _ = _np_split(c, idx)
        if left is None:  # every point coincides: cut by position, as _split does
            half = m // 2
            parts = (([col[:half] for col in c], idx[:half], path + "0"),
                     ([col[half:] for col in c], idx[half:], path + "1"))
        else:
            right = ~left
            lc, rc = [], []
            for a in range(d):  # one axis at a time, the parent's copy of it freed at once
                lc.append(np.compress(left, c[a]))
                rc.append(np.compress(right, c[a]))
                c[a] = None
            parts = ((lc, idx[left], path + "0"), (rc, idx[right], path + "1"))
            del lc, rc, right
        del c, idx, left
        work.append(parts[1])  # depth first, left before right: neighbouring tiles stay close in order
        work.append(parts[0])
        del parts
    return (perm, counts, np.asarray(los, dtype=work_dt).reshape(-1, d),
            np.asarray(his, dtype=work_dt).reshape(-1, d), paths)


class SpatialTiles:
    """Rows of an ``(N, D)`` tensor cut into axis-aligned tiles of at most ``block`` rows.

    Attributes:
        perm: ``(N,)`` int32 (int64 when ``N > 2**31``): the rows, tile after tile, ascending
            within each tile.
        starts: ``(T + 1,)`` int64: tile ``t`` is ``perm[starts[t]:starts[t + 1]]``.
        counts: ``(T,)`` int64 rows per tile (no tile is empty).
        lo, hi: ``(T, D)`` each tile's tight bounding box, in ``acc`` (exact copies of coordinates).
        paths: ``T`` strings of ``0``/``1``: each tile's way down the split tree (``0`` = the
            lower side); the tiles of one subtree share a prefix and are consecutive.

    The tiles are those of recursive :func:`_split` calls (median splits of the
    widest axis), depth first.  On CPU they are built by :func:`_tiles_numpy`,
    linear passes over a per-axis copy of the coordinates per tree level (about
    ``N * (D * itemsize + 4)`` bytes, plus one axis and a mask at the first
    split); elsewhere by :func:`_split` on index segments.  Coordinates must be
    finite (checked by the callers).
    """

    def __init__(self, x: torch.Tensor, block: int, acc: torch.dtype):
        if x.device.type == "cpu":
            perm, counts, lo, hi, self.paths = _tiles_numpy(x, block, acc)
            self.perm = torch.from_numpy(perm)
            self.counts = torch.tensor(counts, dtype=torch.int64)
            self.lo = torch.from_numpy(lo).to(acc)
            self.hi = torch.from_numpy(hi).to(acc)
        else:
            self._build_by_index(x, block, acc)
        self.starts = torch.zeros(self.counts.numel() + 1, dtype=torch.int64)
        self.starts[1:] = self.counts.cumsum(0)

    def _build_by_index(self, x: torch.Tensor, block: int, acc: torch.dtype) -> None:
        """The tiles by :func:`_split` on index segments, on any device (the specification of :func:`_tiles_numpy`)."""
        n = x.shape[0]
        leaves, self.paths = [], []
        ind = V.row_dtype(n)
        work = [(torch.arange(n, dtype=ind, device=x.device), "")] if n else []
        while work:
            seg, path = work.pop()
            if seg.numel() <= block:
                leaves.append(seg)
                self.paths.append(path)
                continue
            left, right = _split(x, seg)
            work.append((right, path + "1"))  # depth first, left before right: neighbouring tiles stay close
            work.append((left, path + "0"))
        self.perm = torch.cat(leaves) if leaves else torch.empty(0, dtype=ind, device=x.device)
        self.counts = torch.tensor([s.numel() for s in leaves], dtype=torch.int64)
        d = x.shape[1]
        self.lo = torch.empty((len(leaves), d), dtype=acc, device=x.device)
        self.hi = torch.empty((len(leaves), d), dtype=acc, device=x.device)
        for t, seg in enumerate(leaves):
            pts = x.index_select(0, seg).to(acc)
            self.lo[t] = pts.amin(0)
            self.hi[t] = pts.amax(0)

    def __len__(self) -> int:
        return self.counts.numel()

    def tile(self, t: int) -> torch.Tensor:
        """Tile ``t``'s rows, ascending."""
        return self.perm[int(self.starts[t]):int(self.starts[t + 1])]

    def near(self, qlo: torch.Tensor, qhi: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """``(T,)`` bool: the tiles not provably at least ``h`` away from the box ``[qlo, qhi]``.

        A tile is left out when, along some axis, ``fl(tile.lo - qhi) >= h`` or
        ``fl(qlo - tile.hi) >= h``, computed in the accumulation dtype: then
        for each of its points p and each query q in the box the kernel's
        ``fl(p_a - q_a)`` is at least ``h`` in magnitude (rounding is monotone).
        ``h = +inf`` selects every tile.
        """
        if bool(torch.isinf(h)):
            return torch.ones(len(self), dtype=torch.bool)
        gap = torch.maximum(self.lo - qhi, qlo - self.hi)
        return ~(gap >= h).any(1).cpu()


def ascending(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows sorted, the order)`` of a concatenation of ascending runs (tiles): numpy's stable
    sort is a timsort that merges the runs, several times faster than a full sort; torch's off CPU."""
    if rows.device.type != "cpu":
        return torch.sort(rows, stable=True)
    order = torch.from_numpy(np.argsort(rows.numpy(), kind="stable"))
    return rows.index_select(0, order), order


def _where(mask: torch.Tensor) -> torch.Tensor:
    """``mask.nonzero()`` flattened: numpy's on CPU (several times faster than torch's there)."""
    if mask.device.type == "cpu":
        return torch.from_numpy(np.flatnonzero(mask.numpy()))
    return mask.nonzero().flatten()


def _take(mask: torch.Tensor, *ts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``t[mask]`` for each ``t``: one index, then row gathers."""
    at = _where(mask)
    return tuple(t.index_select(0, at) for t in ts)


def subtree_runs(paths: list[str], counts: list[int], limit: int) -> list[tuple[int, int]]:
    """``[(first tile, end tile)]``: the tiles cut into the largest subtrees of the split tree
    (tiles sharing a path prefix) of at most ``limit`` rows; a single tile may exceed it."""
    out, work = [], [(0, len(paths), 0)] if paths else []
    while work:
        lo, hi, depth = work.pop()
        if hi - lo == 1 or sum(counts[lo:hi]) <= limit:
            out.append((lo, hi))
            continue
        mid = next(t for t in range(lo, hi) if paths[t][depth] == "1")  # the left subtree's "0" tiles come first
        work.append((mid, hi, depth + 1))
        work.append((lo, mid, depth + 1))
    return out


def halo_above(d2: torch.Tensor) -> torch.Tensor:
    """The smallest-ish ``h >= 0`` (elementwise, in ``d2``'s dtype) with ``fl(h * h) > d2``;
    ``+inf`` where no finite one exists."""
    tiny = torch.finfo(d2.dtype).tiny
    h = torch.sqrt(d2).clamp_min(tiny ** 0.5)
    for _ in range(64):  # sqrt is correctly rounded: one or two steps up suffice
        low = h * h <= d2
        if not bool(low.any()):
            return h
        h = torch.where(low, torch.nextafter(h, torch.full_like(h, float("inf"))), h)
    return torch.where(h * h <= d2, torch.full_like(h, float("inf")), h)


class _Search:
    """The state of one streamed search: the point tiles, the query blocks, the op, the budgets."""

    def __init__(self, fn, query, points, k, radius, order, block, index_dtype):
        self.fn, self.k, self.order, self.index_dtype = fn, k, order, index_dtype
        self.acc = acc = V.acc_dtype(points.dtype)
        self.query, self.points = query, points
        self.cap = CANDIDATE_BLOCKS * block
        self.is_knn = radius is None
        self.radius = radius
        # Point tiles much finer than a query block: the tiles near a block's box then hug its halo.
        self.ptiles = SpatialTiles(points, max(1, block // TILES_PER_BLOCK), acc)
        self.q_block = max(1, min(block, (block * _ENTRIES_PER_BLOCK_ROW) // k))
        self.self_query = query is points or (query.data_ptr() == points.data_ptr() and query.shape == points.shape
                                              and query.stride() == points.stride())
        self.qtiles = None if self.self_query else SpatialTiles(query, self.q_block, acc)
        if len(self.ptiles):
            ext = float((self.ptiles.hi.amax(0) - self.ptiles.lo.amin(0)).max())
        else:
            ext = 0.0
        self.base = torch.tensor(ext / 1024 if ext > 0 else 1.0, dtype=acc)
        if radius is not None:
            r2 = torch.tensor(radius * radius, dtype=torch.float64).to(acc)  # rounded once, as ball_query does
            self.ball_halo = halo_above(r2) if bool(torch.isfinite(r2)) else torch.tensor(float("inf"), dtype=acc)

    # -- one search of queries against the points near them -------------------------------------
    def _op(self, q: torch.Tensor, c: torch.Tensor):
        # The batched (1, n, D) form: the same kernel call as the packed 2-D form, without its pad/unpad copies.
        if self.is_knn:
            d, i = knn(q[None], c[None], self.k)
        else:
            d, i = ball_query(q[None], c[None], self.radius, self.k, order=self.order)
        return d[0], i[0]

    def _merge(self, run, new):
        """Two partial answers (disjoint candidates) -> the answer over both: ordered by (distance,
        index) -- by index alone for ``order="index"`` -- with padding last, even behind real +inf
        distances (overflowed squares), as the kernel orders them."""
        d = torch.cat([run[0], new[0]], 1)
        i = torch.cat([run[1], new[1]], 1)
        pad = i < 0
        order = torch.sort(torch.where(pad, torch.iinfo(torch.int64).max, i), dim=1, stable=True).indices
        if self.is_knn or self.order == "distance":
            order = order.gather(1, torch.sort(d.gather(1, order), dim=1, stable=True).indices)
        order = order.gather(1, torch.sort(pad.gather(1, order).to(torch.uint8), dim=1, stable=True).indices)
        order = order[:, :self.k]
        return d.gather(1, order), i.gather(1, order)

    def search(self, q: torch.Tensor, sel: torch.Tensor, h: torch.Tensor, box=None):
        """``(dist2 (n, k) acc, idx (n, k) int64 global, whether every point was searched)``.

        ``q``: queries in the accumulation dtype.  The candidates are the points
        of the selected tiles not provably ``h`` or more away from ``box``
        (default: the queries' box), by :meth:`SpatialTiles.near`'s test point
        by point; they are searched in slices of at most ``cap`` points, merged exactly.
        """
        qlo, qhi = box if box is not None else (q.amin(0), q.amax(0))
        finite = not bool(torch.isinf(h))
        tiles = sel.nonzero().flatten().tolist()
        chunks, held = [[]], 0  # whole tiles, at most cap points a chunk (a tile has at most cap / 128)
        for t in tiles:
            c = int(self.ptiles.counts[t])
            if held + c > self.cap and held:
                chunks.append([])
                held = 0
            chunks[-1].append(t)
            held += c
        run, searched = None, 0
        if finite:
            # Tiles whose whole box passes the point test below pass it point by point (rounding is
            # monotone): only the others are filtered.
            inside = ((self.ptiles.hi - qhi < h) & (qlo - self.ptiles.lo < h)).all(1).cpu().tolist()
        for chunk in chunks:
            if finite:
                whole = [t for t in chunk if inside[t]]
                edge = [t for t in chunk if not inside[t]]
            else:
                whole, edge = chunk, []
            # Coordinates are gathered only where the point test needs them (edge tiles), and then once
            # for all candidates in ascending row order (a forward sweep through the points).
            parts = []
            if whole:
                parts.append(torch.cat([self.ptiles.tile(t) for t in whole]))
            if edge:
                r = torch.cat([self.ptiles.tile(t) for t in edge])
                p = self.points.index_select(0, r).to(self.acc)
                parts.append(_take(((p - qhi < h) & (qlo - p < h)).all(1), r)[0])
                del p
            rows = (torch.cat(parts) if len(parts) > 1 else parts[0]) if parts else self.ptiles.perm[:0]
            searched += rows.numel()
            # Ascending global order: the kernel's "lower index wins a tie" is then pcgeom.knn's on the whole cloud.
            rows = torch.from_numpy(np.sort(rows.numpy(), kind="stable")) if rows.device.type == "cpu" \
                else ascending(rows)[0]
            d, i = self._op(q, self.points.index_select(0, rows).to(self.acc))
            i = torch.where(i >= 0, rows[i.clamp_min(0)] if rows.numel() else i, i)
            run = (d, i) if run is None else self._merge(run, (d, i))
        return run[0], run[1], searched == self.points.shape[0]

    # -- the blocks ---------------------------------------------------------------------------
    def query_blocks(self) -> Iterator[torch.Tensor]:
        """Rows of each query block, ascending, int64 (the tiles' may be int32): for self-KNN the
        point tiles of the largest subtrees of the split tree that hold at most ``q_block`` rows (one
        box of the tree, so compact; a run across two subtrees could span a far wider box), else the
        query tiles."""
        if self.qtiles is not None:
            for t in range(len(self.qtiles)):
                yield self.qtiles.tile(t).long()
            return
        for lo, hi in subtree_runs(self.ptiles.paths, self.ptiles.counts.tolist(), self.q_block):
            yield ascending(torch.cat([self.ptiles.tile(t) for t in range(lo, hi)]))[0].long()

    def first_halo(self, qc: torch.Tensor, qlo, qhi) -> torch.Tensor:
        """A guess of the halo a KNN query block needs: the k-th distance of a few sampled
        queries among the points inside the block's box (an upper bound for those queries)."""
        tiny = torch.tensor(torch.finfo(self.acc).tiny, dtype=self.acc)
        sel = self.ptiles.near(qlo, qhi, tiny)
        if int(self.ptiles.counts[sel].sum()) > self.cap:
            return torch.zeros((), dtype=self.acc)
        n = qc.shape[0]
        pick = torch.linspace(0, n - 1, min(n, HALO_SAMPLES), dtype=torch.float64).round().long()
        d, _, _ = self.search(qc[pick], sel, tiny, (qlo, qhi))
        dk = d[:, self.k - 1]
        dk = dk[torch.isfinite(dk)]
        if not dk.numel():
            return self.base
        # A high quantile, not the maximum: one isolated sample (an outlier in the air) would widen the
        # whole block's halo; the rows above it are redone with their own halos.
        dk = dk.sort().values
        return halo_above(dk[(dk.numel() * HALO_QUANTILE_NUM + HALO_QUANTILE_DEN - 1) // HALO_QUANTILE_DEN - 1])

    def blocks(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        for rows in self.query_blocks():
            qc = self.query.index_select(0, rows).to(self.acc)
            if self.is_knn:
                h = self.first_halo(qc, qc.amin(0), qc.amax(0))
            else:
                h = self.ball_halo
            yield from self.solve(rows, qc, h.expand(rows.numel()))

    def solve(self, rows, qc, halos):
        """Answers ``rows`` (coordinates ``qc``, per-row halos): yields proven rows, redoes the rest."""
        work = [(rows, qc, halos)]
        while work:
            rows, qc, halos = work.pop()
            h = halos.max()
            if rows.numel() > MIN_SPLIT_ROWS:
                # Rows of very different halos (a block's edge rows and its isolated points) apart: the
                # search of all of them with the largest halo would gather far more candidates.
                mid = halos.median()
                wide = halos > 2 * mid
                if bool(wide.any()) and not bool(wide.all()):
                    r, c, hh = _take(wide, rows, qc, halos)
                    work.append((r, c, hh))
                    r, c, hh = _take(~wide, rows, qc, halos)
                    work.append((r, c, hh))
                    continue
            qlo, qhi = qc.amin(0), qc.amax(0)
            sel = self.ptiles.near(qlo, qhi, h)
            n_cand = int(self.ptiles.counts[sel].sum())
            if n_cand > self.cap and rows.numel() > MIN_SPLIT_ROWS:
                left, right = _split(qc, torch.arange(rows.numel(), device=qc.device))
                work.append((rows[right], qc[right], halos[right]))
                work.append((rows[left], qc[left], halos[left]))
                continue
            d, i, everything = self.search(qc, sel, h, (qlo, qhi))
            if not self.is_knn or everything:
                yield rows, d, i
                continue
            dk = d[:, self.k - 1]
            ok = dk < h * h
            if bool(ok.all()):
                yield rows, d, i
                continue
            if bool(ok.any()):
                yield _take(ok, rows, d, i)
            bad = ~ok
            rows, qc, dk = _take(bad, rows, qc, dk)
            grow = torch.maximum(h, self.base) * 2
            # A finite k-th distance over a subset bounds the true one: a halo just above it proves the row.
            new = torch.where(torch.isfinite(dk), halo_above(torch.where(torch.isfinite(dk), dk, 0)), grow)
            work.append((rows, qc, new))


def _progress(fn: str, total: int, progress):
    """A tqdm bar over the query rows, or None: ``progress=None`` shows it for >= 2^22 queries on a
    terminal; without tqdm installed there is never one."""
    if progress is None:
        progress = total >= (1 << 22) and sys.stderr.isatty()
    if not progress:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=fn, unit="query", unit_scale=True, file=sys.stderr)


def _check(fn, query, points, k, index_dtype, block_points, radius=None, order="distance"):
    if order not in _ORDERS:
        raise ValueError(f"{fn}: order must be one of {_ORDERS}, got {order!r}")
    for name, t, layout in (("query", query, "(M, D)"), ("points", points, "(N, D)")):
        V.check_tensor(fn, name, t, 2, layout)
        if t.dtype not in V.FLOAT_DTYPES:
            raise TypeError(f"{fn}: {name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if query.shape[1] != points.shape[1] or query.shape[1] < 1:
        raise ValueError(f"{fn}: query and points must have shapes (M, D) and (N, D) with the same D >= 1, "
                         f"got {V.shape_str(query)} and {V.shape_str(points)}")
    if query.dtype != points.dtype:
        raise TypeError(f"{fn}: query and points must have the same dtype, got {query.dtype} and {points.dtype}")
    if query.device != points.device:
        raise ValueError(f"{fn}: query and points must be on the same device, got {query.device} and {points.device}")
    k = V.check_int(fn, "k", k, minimum=1)
    block_points = V.check_int(fn, "block_points", block_points, minimum=1)
    if radius is not None:
        radius = V.check_float(fn, "radius", radius, minimum=0.0)
    if index_dtype not in _INDEX_DTYPES:
        raise TypeError(f"{fn}: index_dtype must be torch.int32 or torch.int64, got {index_dtype!r}")
    n = points.shape[0]
    if index_dtype == torch.int32 and n - 1 > torch.iinfo(torch.int32).max:
        raise ValueError(f"{fn}: index_dtype=torch.int32 holds indices of at most 2**31 points, "
                         f"got points with N={n}; use torch.int64")
    for name, t in (("query", query), ("points", points)):
        # Column by column: a boolean copy of one column at a time, not of the whole cloud.
        for a in range(t.shape[1]):
            if not bool(torch.isfinite(t[:, a]).all()):
                err = V.non_finite_points(fn, name, t, "a spatial tile has no box for them: drop them first "
                                          "(pcgeom.knn ranks them after every finite point)")
                raise err
    return k, block_points, radius


def _blocks(fn, query, points, k, radius, order, index_dtype, block_points, progress):
    query, points = query.detach(), points.detach()
    if query.shape[0] == 0:
        return
    s = _Search(fn, query, points, k, radius, order, block_points, index_dtype)
    bar = _progress(fn, query.shape[0], progress)
    try:
        for rows, d, i in s.blocks():
            if bar is not None:
                bar.update(rows.numel())
            yield StreamedBlock(rows, d.to(points.dtype), i.to(index_dtype))
    finally:
        if bar is not None:
            bar.close()


# --- writing blocks into memory-mapped outputs ------------------------------------------------------

#: Outputs that are shared file mappings and together at least this many bytes are written through
#: staging files (:class:`_Staged`) rather than row by row into the mapping; ``None``: the kernel's
#: background writeback threshold (:func:`stage_min_bytes`).
STAGE_MIN_BYTES = None
#: The threshold where the kernel's cannot be read (not Linux).
STAGE_FALLBACK_BYTES = 1 << 28
#: Bytes of output rows per staging bucket: one bucket and its row-ordered copy are in memory at once.
STAGE_BUCKET_BYTES = 1 << 28
#: The most staging buckets (three open files each); larger outputs get larger buckets.
STAGE_MAX_BUCKETS = 128
_MADV_DONTNEED = 4


def stage_min_bytes() -> int:
    """The output size from which memory-mapped outputs are staged: :data:`STAGE_MIN_BYTES` when set,
    else the dirty bytes at which Linux starts writing back (``vm.dirty_background_bytes``, or
    ``vm.dirty_background_ratio`` percent of the available memory -- 10 %, about 2 GB on a 24 GB
    machine).  Below it the scattered rows stay in the page cache until written once; above it pages
    go back to disk while later blocks still dirty them."""
    if STAGE_MIN_BYTES is not None:
        return STAGE_MIN_BYTES
    try:
        with open("/proc/sys/vm/dirty_background_bytes") as f:
            fixed = int(f.read())
        if fixed > 0:
            return fixed
        with open("/proc/sys/vm/dirty_background_ratio") as f:
            ratio = int(f.read())
        with open("/proc/meminfo") as f:
            avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
        return max(STAGE_FALLBACK_BYTES, avail * ratio // 100)
    except (OSError, ValueError, StopIteration):
        return STAGE_FALLBACK_BYTES


def _extent(t: torch.Tensor) -> int:
    """Bytes from ``t``'s first element to just past its last (non-negative strides)."""
    return (1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))) * t.element_size()


def shared_file_mapping(t: torch.Tensor) -> str | None:
    """The path of the file that ``t``'s memory maps with ``MAP_SHARED`` -- ``torch.from_file(...,
    shared=True)``, a numpy memmap opened ``r+`` or ``w+`` -- or ``None``: any other memory, a private
    (copy-on-write) map, a tensor not wholly inside one file's mapping, no ``/proc/self/maps``."""
    if t.device.type != "cpu" or t.numel() == 0 or any(st < 0 for st in t.stride()):
        return None
    lo = t.data_ptr()
    hi = lo + _extent(t)
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    path, end = None, None
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 6:
            if path is not None:
                break
            continue
        start, stop = (int(v, 16) for v in parts[0].split("-"))
        name = parts[5].strip()
        if path is None:
            if not start <= lo < stop:
                continue
            if parts[1][3] != "s" or parts[4] == "0" or not name.startswith("/") or name.endswith(" (deleted)"):
                return None
            path, end = name, stop
        elif start == end and name == path and parts[1][3] == "s":  # the same map, split in entries
            end = stop
        else:
            break
        if end >= hi:
            return path
    return None


def _drop_pages(t: torch.Tensor) -> None:
    """``madvise(MADV_DONTNEED)`` over the whole pages inside a contiguous slice of a shared file
    mapping: the written pages leave the process's resident set; the data stays in the page cache and
    the file (only ever called on shared file mappings: on private memory it would zero it)."""
    import ctypes
    import mmap

    page = mmap.PAGESIZE
    lo = -(-t.data_ptr() // page) * page
    hi = (t.data_ptr() + t.numel() * t.element_size()) // page * page
    if hi <= lo:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), ctypes.c_int(_MADV_DONTNEED))
    except (OSError, AttributeError):  # no madvise: the pages stay resident, nothing else changes
        pass


class _Staged:
    """Blocks into row-ordered outputs that are memory-mapped files, in two sequential passes.

    Spatial blocks scatter their rows over the whole output: written in place, every block dirties
    pages all over the file, and once the dirty pages pass the kernel's threshold each page is written
    back and dirtied again by later blocks -- many times the output's size in disk writes.  Instead
    each block's rows are appended to the staging files of their row range (bucket), next to the
    output file; then each bucket is read back, put into row order in memory and copied into its
    slice of the outputs (one sequential write), whose pages then leave the resident set
    (:func:`_drop_pages`).  The staging directory ``.pcgeom-stage-*`` is removed at the end, on an
    error and on Ctrl-C (only a killed process leaves it behind).
    """

    def __init__(self, fn, outs, mapped, M, where):
        import tempfile

        self.fn, self.outs, self.mapped, self.M = fn, outs, mapped, M
        row_bytes = sum(o.shape[1] * o.element_size() for o in outs)
        per = max(1, STAGE_BUCKET_BYTES // max(1, row_bytes))
        self.rows_per = max(per, -(-M // STAGE_MAX_BUCKETS))
        self.n_buckets = -(-M // self.rows_per)
        self.at_dtype = _perm_dtype(self.rows_per)  # row numbers within a bucket
        self.dir = tempfile.mkdtemp(prefix=".pcgeom-stage-", dir=where)
        self.files = {}
        self.counts = np.zeros(self.n_buckets, dtype=np.int64)

    def _file(self, b, j):
        f = self.files.get((b, j))
        if f is None:
            f = self.files[(b, j)] = open(os.path.join(self.dir, f"{b}.{j}"), "wb")
        return f

    def add(self, rows: torch.Tensor, parts) -> None:
        r = rows.cpu().numpy()
        if not r.size:
            return
        data = [p.cpu().contiguous().view(torch.uint8).numpy().reshape(r.size, -1) for p in parts]
        if r.size > 1 and not bool((r[1:] >= r[:-1]).all()):  # blocks come ascending; anything else is sorted
            order = np.argsort(r, kind="stable")
            r, data = r[order], [d[order] for d in data]
        cuts = np.searchsorted(r, np.arange(r[0] // self.rows_per + 1, r[-1] // self.rows_per + 1) * self.rows_per)
        lo = 0
        for hi in [*cuts.tolist(), r.size]:
            if hi > lo:
                b = int(r[lo] // self.rows_per)
                self._file(b, 0).write((r[lo:hi] - b * self.rows_per).astype(self.at_dtype).tobytes())
                for j, d in enumerate(data):
                    self._file(b, j + 1).write(d[lo:hi].tobytes())
                self.counts[b] += hi - lo
            lo = hi

    def finish(self) -> None:
        for f in self.files.values():
            f.close()
        for b in range(self.n_buckets):
            r0 = b * self.rows_per
            n = min(self.M, r0 + self.rows_per) - r0
            if int(self.counts[b]) != n:  # every row is in exactly one block: never reached
                raise RuntimeError(f"{self.fn}: bucket {b} staged {int(self.counts[b])} rows of {n}")
            at = np.fromfile(os.path.join(self.dir, f"{b}.0"), dtype=self.at_dtype)
            for j, o in enumerate(self.outs):
                width = o.shape[1] * o.element_size()
                src = np.fromfile(os.path.join(self.dir, f"{b}.{j + 1}"), dtype=np.uint8).reshape(n, width)
                buf = np.empty((n, width), dtype=np.uint8)
                buf[at] = src
                del src
                o[r0:r0 + n].copy_(torch.from_numpy(buf).view(o.dtype).view(n, o.shape[1]))
                del buf
                if self.mapped[j] and o.is_contiguous():
                    _drop_pages(o[r0:r0 + n])
            for j in range(len(self.outs) + 1):
                os.unlink(os.path.join(self.dir, f"{b}.{j}"))

    def close(self) -> None:
        import shutil

        for f in self.files.values():
            f.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _write(fn, blocks, M, k, dtype, index_dtype, device, out_dist2, out_idx):
    for name, out, dt in (("out_dist2", out_dist2, dtype), ("out_idx", out_idx, index_dtype)):
        if out is None:
            continue
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor of shape ({M}, {k}), got {type(out).__name__}")
        if tuple(out.shape) != (M, k):
            raise ValueError(f"{fn}: {name} must have shape ({M}, {k}), got {V.shape_str(out)}")
        if out.dtype != dt:
            raise TypeError(f"{fn}: {name} must have dtype {dt}, got {out.dtype}")
    if out_dist2 is None:
        out_dist2 = V.alloc_named(fn, "k", k, "dist2", (M, k), torch.finfo(dtype).bits // 8,
                                  lambda: torch.empty((M, k), dtype=dtype, device=device))
    if out_idx is None:
        out_idx = V.alloc_named(fn, "k", k, "idx", (M, k), torch.iinfo(index_dtype).bits // 8,
                                lambda: torch.empty((M, k), dtype=index_dtype, device=device))
    outs = (out_dist2, out_idx)
    mapped = [shared_file_mapping(o) for o in outs]
    staged = None
    if any(mapped) and sum(o.numel() * o.element_size() for o in outs) >= stage_min_bytes():
        for where in (os.path.dirname(next(m for m in mapped if m)), None):  # beside the output, else the temp dir
            try:
                staged = _Staged(fn, outs, [m is not None for m in mapped], M, where)
                break
            except OSError:  # a folder we cannot write to: the next, or in place
                continue
    try:
        for b in blocks:
            if staged is None:
                # index_copy_: the same rows written as out[rows] = ..., without index_put's general machinery.
                out_dist2.index_copy_(0, b.rows.to(out_dist2.device), b.dist2.to(out_dist2.device))
                out_idx.index_copy_(0, b.rows.to(out_idx.device), b.idx.to(out_idx.device))
                continue
            try:
                staged.add(b.rows, (b.dist2, b.idx))
            except OSError as e:
                raise OSError(e.errno, f"{fn}: staging the memory-mapped output in {staged.dir} failed ({e.strerror}); "
                              f"it needs about as much free disk as the outputs themselves") from e
        if staged is not None:
            staged.finish()
    finally:
        if staged is not None:
            staged.close()
    return KNNResult(out_dist2, out_idx)


def knn_blocks(query, points, k, *, index_dtype=torch.int64, block_points=DEFAULT_BLOCK_POINTS,
               progress=None) -> Iterator[StreamedBlock]:
    """:func:`pcgeom.knn` of one cloud, yielded block by block in bounded memory.

    Yields :class:`StreamedBlock` ``(rows, dist2, idx)``: every query row
    appears in exactly one block, and the blocks together are exactly
    ``pcgeom.knn(query, points, k)`` -- bit for bit, ties to the lower index,
    ``-1`` / ``+inf`` padding where ``k > N`` (see the module docstring for why
    the spatial tiles cannot change the answer).  Blocks come in spatial order,
    rows ascending within a block; no block holds more than ``block_points``
    rows (fewer for large ``k``).

    Args:
        query: ``(M, D)`` float16/bfloat16/float32/float64 tensor, finite.
        points: ``(N, D)`` tensor of the same dtype and device, finite;
            ``query`` may be ``points`` itself (self-KNN, its tiles are reused).
            Either may be memory-mapped.
        k: neighbours per query, an int >= 1; ``k > N`` pads.
        index_dtype: ``torch.int64`` (default) or ``torch.int32`` (needs ``N <= 2**31``).
        block_points: points per spatial tile and query rows per search; peak
            memory grows with it (about ``8 * block_points`` candidate points
            and ``block_points * 16`` output entries per search).
        progress: a tqdm bar on stderr (``True``), none (``False``), or ``None``:
            a bar for 2^22 queries or more when stderr is a terminal.  Silent
            when tqdm is not installed.

    Yields:
        ``StreamedBlock(rows (n,) int64, dist2 (n, k) input dtype, idx (n, k) index_dtype)``.
        No autograd: the inputs are detached.

    Memory: besides one block, an ``(N,)`` int32 permutation of the points
    (int64 past 2^31 points; one of the queries too unless ``query is
    points``); building it (on CPU) holds a per-axis copy of the coordinates
    with int32 row numbers, plus one more axis, a mask and the halves' row
    numbers while a split runs -- about ``N * (4 D + 17)`` bytes for float32,
    2.9 GB at 10^8 points in 3-D -- and frees them before the search; never
    an ``M x N`` matrix or the ``(M, k)`` output.

    Raises:
        TypeError, ValueError: bad shapes or dtypes, ``k < 1``, non-finite
            coordinates, ``index_dtype=torch.int32`` with ``N > 2**31``.

    Example:
        >>> import torch, pcgeom
        >>> pts = torch.rand(1000, 3, generator=torch.Generator().manual_seed(0))
        >>> ref = pcgeom.knn(pts, pts, 8)
        >>> got = torch.empty(1000, 8, dtype=torch.int64)
        >>> for b in pcgeom.knn_blocks(pts, pts, 8, block_points=100):
        ...     got[b.rows] = b.idx
        >>> torch.equal(got, ref.idx)
        True
    """
    fn = "knn_blocks"
    k, block_points, _ = _check(fn, query, points, k, index_dtype, block_points)
    return _blocks(fn, query, points, k, None, "distance", index_dtype, block_points, progress)


def knn_streamed(query, points, k, *, out_dist2=None, out_idx=None, index_dtype=torch.int64,
                 block_points=DEFAULT_BLOCK_POINTS, progress=None) -> KNNResult:
    """:func:`pcgeom.knn` of one cloud, written block by block into ``out_dist2`` / ``out_idx``.

    The same answer as ``pcgeom.knn(query, points, k)``, bit for bit (ties to
    the lower index, ``-1`` / ``+inf`` padding), computed over spatial tiles
    with halos (:func:`knn_blocks`) so that only one block of it is in memory
    at a time.  Pass memory-mapped outputs to stream a result larger than
    memory to disk: ``torch.from_file(path, shared=True, size=M * k,
    dtype=...).view(M, k)`` or ``torch.from_numpy(np.lib.format.open_memmap(...))``.
    Outputs that are shared file mappings larger (together) than the
    kernel's background writeback threshold (about 10 % of the available
    memory, :func:`stage_min_bytes`) are written through staging files of row ranges next to the output file (as
    much disk again while the call runs; removed at its end, on an error and on
    Ctrl-C), then range by range in row order: the spatial blocks' scattered
    rows would otherwise make the kernel write every page of the file back many
    times.  Written ranges leave the process's resident set.

    Args:
        query: ``(M, D)`` floating tensor, finite; may be ``points`` (self-KNN).
        points: ``(N, D)`` tensor of the same dtype and device, finite.
        k: neighbours per query, an int >= 1; ``k > N`` pads.
        out_dist2: ``(M, k)`` tensor of the input's dtype to fill, or ``None``
            (allocated in memory).
        out_idx: ``(M, k)`` tensor of ``index_dtype`` to fill, or ``None`` (allocated).
        index_dtype: ``torch.int64`` (default) or ``torch.int32`` (needs ``N <= 2**31``).
        block_points: points per tile, as in :func:`knn_blocks`.
        progress: the tqdm bar, as in :func:`knn_blocks`.

    Returns:
        ``KNNResult(dist2, idx)``: ``out_dist2`` and ``out_idx`` (or the
        allocated tensors), every row written.  No autograd.

    Raises:
        TypeError, ValueError: as :func:`knn_blocks`, and outputs of the wrong
            shape or dtype (naming ``out_dist2`` / ``out_idx``).

    Example:
        >>> import os, tempfile, torch, pcgeom
        >>> pts = torch.rand(2000, 3, generator=torch.Generator().manual_seed(0))
        >>> path = os.path.join(tempfile.mkdtemp(), "idx.bin")
        >>> idx = torch.from_file(path, shared=True, size=2000 * 16, dtype=torch.int32).view(2000, 16)
        >>> d, i = pcgeom.knn_streamed(pts, pts, 16, out_idx=idx, index_dtype=torch.int32, block_points=256)
        >>> torch.equal(i.long(), pcgeom.knn(pts, pts, 16).idx)
        True
    """
    fn = "knn_streamed"
    k, block_points, _ = _check(fn, query, points, k, index_dtype, block_points)
    blocks = _blocks(fn, query, points, k, None, "distance", index_dtype, block_points, progress)
    return _write(fn, blocks, query.shape[0], k, points.dtype, index_dtype, points.device, out_dist2, out_idx)


def ball_query_blocks(query, points, radius, k, *, order="distance", index_dtype=torch.int64,
                      block_points=DEFAULT_BLOCK_POINTS, progress=None) -> Iterator[StreamedBlock]:
    """:func:`pcgeom.ball_query` of one cloud, yielded block by block in bounded memory.

    The blocks together are exactly ``pcgeom.ball_query(query, points, radius,
    k, order=order)``, bit for bit: the inclusive ball ``dist2 <= radius**2``
    (``radius**2`` rounded once to the accumulation dtype), nearest first
    (``order="distance"``, ties to the lower index) or the first k in index
    order (``order="index"``), ``-1`` / ``+inf`` in empty slots.  Each query
    block is searched against the tiles within a halo just above ``radius``,
    so no block is searched twice.

    Args:
        query: ``(M, D)`` floating tensor, finite; may be ``points``.
        points: ``(N, D)`` tensor of the same dtype and device, finite.
        radius: float >= 0.
        k: int >= 1, the most neighbours per query.
        order: ``"distance"`` or ``"index"``, as in :func:`pcgeom.ball_query`.
        index_dtype: ``torch.int64`` (default) or ``torch.int32`` (needs ``N <= 2**31``).
        block_points: points per tile, as in :func:`knn_blocks`.
        progress: the tqdm bar, as in :func:`knn_blocks`.

    Yields:
        ``StreamedBlock(rows (n,) int64, dist2 (n, k), idx (n, k) index_dtype)``; no autograd.

    Raises:
        TypeError, ValueError: as :func:`knn_blocks`, ``radius < 0``, an unknown ``order``.

    Example:
        >>> import torch, pcgeom
        >>> pts = torch.rand(500, 3, generator=torch.Generator().manual_seed(0))
        >>> blocks = list(pcgeom.ball_query_blocks(pts, pts, 0.1, 4, block_points=64))
        >>> sum(b.rows.numel() for b in blocks)
        500
    """
    fn = "ball_query_blocks"
    k, block_points, radius = _check(fn, query, points, k, index_dtype, block_points, radius, order)
    return _blocks(fn, query, points, k, radius, order, index_dtype, block_points, progress)


def ball_query_streamed(query, points, radius, k, *, order="distance", out_dist2=None, out_idx=None,
                        index_dtype=torch.int64, block_points=DEFAULT_BLOCK_POINTS, progress=None) -> KNNResult:
    """:func:`pcgeom.ball_query` of one cloud, written block by block into ``out_dist2`` / ``out_idx``.

    The same answer as ``pcgeom.ball_query(query, points, radius, k,
    order=order)``, bit for bit, from :func:`ball_query_blocks`; outputs as
    in :func:`knn_streamed` (memory-mapped ones stream the result to disk,
    large ones through staging files).

    Args:
        query: ``(M, D)`` floating tensor, finite; may be ``points``.
        points: ``(N, D)`` tensor of the same dtype and device, finite.
        radius: float >= 0.
        k: int >= 1.
        order: ``"distance"`` or ``"index"``.
        out_dist2: ``(M, k)`` tensor of the input's dtype, or ``None`` (allocated).
        out_idx: ``(M, k)`` tensor of ``index_dtype``, or ``None`` (allocated).
        index_dtype: ``torch.int64`` (default) or ``torch.int32`` (needs ``N <= 2**31``).
        block_points: points per tile, as in :func:`knn_blocks`.
        progress: the tqdm bar, as in :func:`knn_blocks`.

    Returns:
        ``KNNResult(dist2, idx)``, the outputs, every row written; no autograd.

    Raises:
        TypeError, ValueError: as :func:`ball_query_blocks`, and outputs of
            the wrong shape or dtype.

    Example:
        >>> import torch, pcgeom
        >>> pts = torch.rand(500, 3, generator=torch.Generator().manual_seed(0))
        >>> got = pcgeom.ball_query_streamed(pts, pts, 0.1, 4, order="index", block_points=64)
        >>> torch.equal(got.idx, pcgeom.ball_query(pts, pts, 0.1, 4, order="index").idx)
        True
    """
    fn = "ball_query_streamed"
    k, block_points, radius = _check(fn, query, points, k, index_dtype, block_points, radius, order)
    blocks = _blocks(fn, query, points, k, radius, order, index_dtype, block_points, progress)
    return _write(fn, blocks, query.shape[0], k, points.dtype, index_dtype, points.device, out_dist2, out_idx)
