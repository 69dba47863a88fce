"""``pcgeom preprocess`` for files larger than memory: the in-memory command's output file, byte for byte.

:func:`preprocess_streamed` runs the command's steps -- ``voxel`` (:func:`pcgeom.grid_subsample`, the
first point per voxel), ``statistical`` and ``radius`` outlier removal
(:func:`pcgeom.remove_statistical_outliers`, :func:`pcgeom.remove_radius_outliers`) and ``normals``
(:func:`pcgeom.estimate_normals`, optionally towards a ``viewpoint``) -- over spatial tiles, and writes
the same file the in-memory command writes: the same points kept in the same order, the same normals,
every vertex property in its own PLY type.  :func:`plan_preprocess` decides from a file's header and a
memory budget whether a file needs it (``pcgeom preprocess --memory GB`` calls both).

Why the answers are the in-memory ones:

* every per-point quantity comes from the point's neighbour row, and :func:`pcgeom.knn_blocks` yields
  :func:`pcgeom.knn`'s rows bit for bit (tiles with halos, see :mod:`pcgeom.ops.streamed`), on the same
  power-of-two rescaled coordinates and with the same ``k`` cap the in-memory functions use; the
  per-row arithmetic (square roots, the nearest-first sums, the PCA of
  :func:`pcgeom.ops.pca_normals`, the orientation) is elementwise, so a row's value does not depend
  on the block it is computed in;
* the statistical filter's global mean and standard deviation are computed by the very expressions
  :func:`pcgeom.remove_statistical_outliers` uses, over the whole ``(N,)`` vector of per-point means,
  which is kept in memory;
* voxels are grouped in slabs of whole voxel columns along the axis with the most voxels, each slab
  subsampled by :func:`pcgeom.grid_subsample` with the global grid origin (the cloud's minimum), so a
  voxel never straddles two slabs and its first point is the one the whole-cloud call keeps.  (A
  voxel column is never split, so a cloud packed into one column holds its slab whole: the voxel
  step's memory is then the in-memory call's.)

**Memory model.**  Per input point, at the busiest moment of the run and for a step that keeps
every point (each step after the first holds only the points kept so far): the coordinates in the
computing precision (12 bytes; searched in place, rescaled by a power of two and back, when that is
exact), the kept rows (int32 while they fit: 4), the step's own arrays -- the statistical filter's
float64 mean distances and flags (9), or the new normals (12) -- and the tiles of
:mod:`pcgeom.ops.streamed` while they are cut (a per-axis copy of the coordinates, the int32
permutation and split masks: 26).  The largest sum, the normals step's 54 bytes, rounded up, is
:data:`STREAMED_BYTES_PER_POINT` (56); with ``float64=True`` the coordinates, normals and tile
copies double: :data:`STREAMED_BYTES_PER_POINT_FLOAT64` (96).  The voxel step holds less (the
coordinates, an int16 slab number, their int32 order by slab and a keep-mask: 19, then the
coordinates of the kept points beside them: 28).  Measured: 42
bytes per point of peak RSS growth from 10^6 to 10^7 points (statistical ``k=20`` and normals
``k=30``, no voxel step, 2^16-point tiles; 70 with ``float64=True``, 2^14-point tiles).  Per tile: ``block_points`` times
:data:`TILE_BYTES_PER_POINT` (a search's candidates, its answer and the float64 distances formed
from it; about 1,000 measured) plus a read chunk of ``chunk_points`` rows (the decoded record and
its tensors).  Never held: an ``(N, k)`` neighbour table, an ``(N,)`` int64 array, or the file's
full vertex record -- the other columns are read again chunk by chunk while the output is written.
:func:`streamed_bytes` is this model and :func:`in_memory_bytes` the one of the in-memory command;
both exclude the interpreter with torch (about 0.3 GiB).

Example:
    >>> import os, tempfile, torch
    >>> from pcgeom.io import read_ply, write_ply
    >>> from pcgeom.streaming import preprocess_streamed
    >>> d = tempfile.mkdtemp()
    >>> pts = torch.rand(3000, 3, generator=torch.Generator().manual_seed(0))
    >>> _ = write_ply(os.path.join(d, "in.ply"), pts)
    >>> r = preprocess_streamed(os.path.join(d, "in.ply"), os.path.join(d, "out.ply"), voxel=0.05,
    ...                         statistical=(8, 2.0), normals=10, block_points=256)
    >>> r.points_read, r.points_written == len(read_ply(os.path.join(d, "out.ply")).points)
    (3000, True)
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from pcgeom import _validation as V
from pcgeom._rounding import exact_sqrt
from pcgeom._scaling import binary_exponent, times_power_of_two
from pcgeom.grid import grid_subsample
from pcgeom.io import PlyWriter, iter_ply, ply_info, read_ply_types
from pcgeom.io.ply import DEFAULT_CHUNK_POINTS
from pcgeom.ops import pca_normals
from pcgeom.ops.streamed import DEFAULT_BLOCK_POINTS, knn_blocks

__all__ = ["PreprocessPlan", "StreamedPreprocessResult", "in_memory_bytes", "mean_distances", "plan_preprocess",
           "statistical_keep",
           "preprocess_streamed", "streamed_bytes", "STREAMED_BYTES_PER_POINT", "STREAMED_BYTES_PER_POINT_FLOAT64",
           "TILE_BYTES_PER_POINT", "MIN_BLOCK_POINTS"]

#: Resident bytes per input point of the streamed run at its peak, float32 computation (see the
#: module docstring: 54 counted, 42 measured).
STREAMED_BYTES_PER_POINT = 56
#: The same with ``float64=True`` (coordinates, normals and the tiles' coordinate copy twice as wide: 94).
STREAMED_BYTES_PER_POINT_FLOAT64 = 96
#: Bytes per point of ``block_points`` that one tile's search holds (candidates, answer, kernel work).
TILE_BYTES_PER_POINT = 1536
#: The smallest tile :func:`plan_preprocess` chooses; a budget that cannot hold it is refused.
MIN_BLOCK_POINTS = 1024

_XYZ = ("x", "y", "z")
_NORMALS = ("nx", "ny", "nz")
_PLY_SIZE = {"char": 1, "uchar": 1, "short": 2, "ushort": 2, "int": 4, "uint": 4, "float": 4, "double": 8}


class StreamedPreprocessResult(NamedTuple):
    """What :func:`preprocess_streamed` did: ``points_read`` input rows, ``points_written`` output rows."""

    points_read: int
    points_written: int


class PreprocessPlan(NamedTuple):
    """How ``pcgeom preprocess`` runs one file (:func:`plan_preprocess`).

    Attributes:
        streamed: whether the file goes through :func:`preprocess_streamed`.
        block_points: the tile size of the streamed run (``None`` in memory).
        in_memory_bytes: :func:`in_memory_bytes` of the file.
        streamed_bytes: :func:`streamed_bytes` at ``block_points`` (``None`` in memory).
        budget_bytes: the budget it was planned for.
    """

    streamed: bool
    block_points: int | None
    in_memory_bytes: int
    streamed_bytes: int | None
    budget_bytes: int


def _read_dtype(types: dict) -> torch.dtype:
    # pcgeom preprocess's rule (pcgeom.cli.common.read_typed): float64 when a stored coordinate or
    # normal is double, int or uint, so every stored value is held exactly.
    wide = any(types.get(c) in ("double", "int", "uint") for c in _XYZ + _NORMALS)
    return torch.float64 if wide else torch.float32


def _row_bytes(info) -> int:
    """Bytes of one decoded vertex row (scalar properties; a list counts its length field)."""
    total = 0
    for kind in info.properties.get("vertex", {}).values():
        parts = kind.split()
        total += _PLY_SIZE[parts[1] if parts[0] == "list" else parts[0]]
    return total


def _largest_k(statistical, radius, normals) -> int:
    ks = [1]
    if statistical is not None:
        ks.append(int(statistical[0]))
    if radius is not None:
        ks.append(int(radius[1]) + 1)
    if normals is not None:
        ks.append(int(normals))
    return max(ks)


def in_memory_bytes(n_points: int, row_bytes: int, *, statistical=None, radius=None, normals=None,
                    float64: bool = False) -> int:
    """The memory the in-memory ``pcgeom preprocess`` needs for one file, estimated from its header.

    ``n_points * (3 * row_bytes + 6 * c + k * (c + 40))`` with ``c`` the computing precision's size
    (4, or 8 with ``float64``) and ``k`` the largest neighbourhood asked for (``statistical[0]``,
    ``radius[1] + 1``, ``normals``; 1 for ``voxel`` alone): the vertex record and its tensors (read,
    then gathered for the kept rows), the coordinates and a rescaled copy, and an ``(N, k)``
    neighbour table with its float64 distances and their temporaries.  A deliberate overestimate,
    used to decide which files stream: at 10^6 points with ``voxel``, ``statistical=(20, 2)`` and
    ``normals=30`` it says 1.4 GB where the measured peak was 0.79 GB above the interpreter.

    Args:
        n_points: the header's vertex count.
        row_bytes: bytes of one vertex row as stored.
        statistical: ``(k, std_ratio)`` or ``None``, as :func:`preprocess_streamed` takes it.
        radius: ``(radius, min_neighbors)`` or ``None``, likewise.
        normals: K of the normals step, or ``None``.
        float64: whether the run computes in float64.

    Returns:
        Bytes, an int.
    """
    c = 8 if float64 else 4
    k = _largest_k(statistical, radius, normals)
    return int(n_points) * (3 * int(row_bytes) + 6 * c + k * (c + 40))


def streamed_bytes(n_points: int, row_bytes: int, block_points: int, *, chunk_points: int | None = None,
                   float64: bool = False) -> int:
    """The memory :func:`preprocess_streamed` needs for one file (the module docstring's model).

    ``n_points * STREAMED_BYTES_PER_POINT`` (``..._FLOAT64`` with ``float64``) for the resident
    per-point arrays, ``block_points * TILE_BYTES_PER_POINT`` for one tile's search, and
    ``chunk_points * (2 * row_bytes + 64)`` for one read chunk (``chunk_points`` defaults to
    :func:`preprocess_streamed`'s: ``min(block_points, 2**20)``).

    Returns:
        Bytes, an int.
    """
    per_point = STREAMED_BYTES_PER_POINT_FLOAT64 if float64 else STREAMED_BYTES_PER_POINT
    chunk = _chunk(block_points, chunk_points)
    return int(n_points) * per_point + int(block_points) * TILE_BYTES_PER_POINT + chunk * (2 * int(row_bytes) + 64)


def _chunk(block_points, chunk_points):
    return min(int(block_points), DEFAULT_CHUNK_POINTS) if chunk_points is None else int(chunk_points)


def _gb(b) -> str:
    return f"{b / 1e9:.3g} GB"


def plan_preprocess(src, budget_bytes: int, *, statistical=None, radius=None, normals=None, float64: bool = False,
                    block_points: int | None = None) -> PreprocessPlan:
    """In memory or streamed, and with which tile size, for one file under a memory budget.

    A file whose :func:`in_memory_bytes` fits ``budget_bytes`` runs in memory (as ``pcgeom
    preprocess`` always did); a larger one streams, with the largest tile (at most
    :data:`pcgeom.ops.streamed.DEFAULT_BLOCK_POINTS`, at least :data:`MIN_BLOCK_POINTS`) whose
    :func:`streamed_bytes` fits the budget.  ``block_points`` given streams the file whatever its
    size, with that tile size (for tests and tuning); the budget must still hold it.

    Args:
        src: the PLY file (only its header is read, :func:`pcgeom.io.ply_info`).
        budget_bytes: the memory budget, bytes > 0.
        statistical: ``(k, std_ratio)`` or ``None``, as :func:`preprocess_streamed` takes it.
        radius: ``(radius, min_neighbors)`` or ``None``, likewise.
        normals: K of the normals step, or ``None``.
        float64: whether the run computes in float64.
        block_points: an int >= 1 to force the streamed path with this tile size, or ``None``.

    Returns:
        :class:`PreprocessPlan`.

    Raises:
        ValueError: the budget cannot hold the streamed run's resident arrays and one tile (the
            message names the memory needed and the memory given); a bad ``block_points``.
        PlyFormatError: a header :func:`pcgeom.io.read_ply` would refuse.
    """
    fn = "plan_preprocess"
    if block_points is not None and (isinstance(block_points, bool) or not isinstance(block_points, int)
                                     or block_points < 1):
        raise ValueError(f"{fn}: block_points must be None or an int >= 1, got {block_points!r}")
    info = ply_info(src)
    n, row = info.vertex_count, _row_bytes(info)
    mem = in_memory_bytes(n, row, statistical=statistical, radius=radius, normals=normals, float64=float64)
    if block_points is None and mem <= budget_bytes:
        return PreprocessPlan(False, None, mem, None, int(budget_bytes))
    if block_points is None:
        block = DEFAULT_BLOCK_POINTS
        while block > MIN_BLOCK_POINTS and streamed_bytes(n, row, block, float64=float64) > budget_bytes:
            block //= 2
    else:
        block = block_points
    need = streamed_bytes(n, row, block, float64=float64)
    if need > budget_bytes:
        per_point = STREAMED_BYTES_PER_POINT_FLOAT64 if float64 else STREAMED_BYTES_PER_POINT
        raise ValueError(
            f"the memory budget ({_gb(budget_bytes)}, --memory) is too small for this file even streamed: "
            f"{n:,} points need about {_gb(need)} ({per_point} bytes per point resident, and one tile of "
            f"{block:,} points at {TILE_BYTES_PER_POINT} bytes each); give --memory {math.ceil(need / 1e8) / 10:g} "
            f"or more (in memory it would need about {_gb(mem)})")
    return PreprocessPlan(True, block, mem, need, int(budget_bytes))


# -- the steps ------------------------------------------------------------------------------------------


def _rescaled(p: torch.Tensor, chunk: int):
    """``(copy of p times 2**-e, e)``: :func:`pcgeom._scaling.rescale_clouds` of one all-real cloud,
    taken chunk by chunk (the maximum is exact in any order; the scaling is elementwise)."""
    q = p.to(torch.float64 if p.dtype == torch.float64 else torch.float32)
    expo = _exponent(q, chunk)
    out = torch.empty_like(q)
    for a in range(0, len(q), chunk):
        out[a:a + chunk] = times_power_of_two(q[a:a + chunk], -expo[:, None])
    return out, expo


def _exponent(q: torch.Tensor, chunk: int) -> torch.Tensor:
    """``rescale_clouds``' ``e`` of one all-real cloud: the binary exponent of its largest magnitude."""
    mag = torch.zeros(1, dtype=q.dtype, device=q.device)
    for a in range(0, len(q), chunk):
        mag = torch.maximum(mag, q[a:a + chunk].abs().amax().reshape(1))
    return binary_exponent(mag)


@contextmanager
def _scaled(p: torch.Tensor, chunk: int, in_place: bool):
    """``(p times 2**-e, e)`` as :func:`_rescaled`, for the duration of a ``with`` block.

    With ``in_place`` (float32 or float64 ``p``) and when the scaling is exact both ways -- no
    coordinate rounded in the subnormal range, checked by scaling every value there and back --
    ``p`` itself is scaled for the block and scaled back after it (exactly, so it ends bit for bit
    as it began; also after an exception): the step then holds one ``(N, 3)`` coordinate array,
    not two.  Otherwise a copy, as :func:`_rescaled`.
    """
    if not (in_place and p.dtype in (torch.float32, torch.float64)):
        yield _rescaled(p, chunk)
        return
    expo = _exponent(p, chunk)
    down, up = -expo[:, None], expo[:, None]
    for a in range(0, len(p), chunk):
        q = p[a:a + chunk]
        if not torch.equal(times_power_of_two(times_power_of_two(q, down), up), q):
            yield _rescaled(p, chunk)
            return
    for a in range(0, len(p), chunk):
        p[a:a + chunk] = times_power_of_two(p[a:a + chunk], down)
    try:
        yield p, expo
    finally:
        for a in range(0, len(p), chunk):
            p[a:a + chunk] = times_power_of_two(p[a:a + chunk], up)


def _rows_of(mask: torch.Tensor, dtype: torch.dtype, chunk: int) -> torch.Tensor:
    """``mask.nonzero()`` flattened, in ``dtype``, found chunk by chunk: never an int64 array of
    every kept row beside the result."""
    out = torch.empty(int(mask.sum()), dtype=dtype, device=mask.device)
    at = 0
    for a in range(0, len(mask), chunk):
        r = mask[a:a + chunk].nonzero().flatten()
        out[at:at + len(r)] = r + a
        at += len(r)
    return out


def _counting_order(slab: np.ndarray, counts: np.ndarray, chunk: int, dtype: torch.dtype) -> np.ndarray:
    """``np.argsort(slab, kind="stable")`` in ``dtype`` (int32 or int64), by a counting sort taken
    ``chunk`` rows at a time: every row goes to the next free place of its slab, so the rows of a
    slab stay ascending -- without the int64 order and the radix sort's int64 buffer over all rows."""
    order = np.empty(len(slab), dtype=np.int32 if dtype == torch.int32 else np.int64)
    free = np.cumsum(counts) - counts  # the next free place of each slab
    for a in range(0, len(slab), chunk):
        s = slab[a:a + chunk]
        o = np.argsort(s, kind="stable")
        ss = s[o]
        c = np.bincount(s, minlength=len(counts))
        first = np.cumsum(c) - c  # where each slab's run starts within this sorted chunk
        order[free[ss] + (np.arange(len(s)) - first[ss])] = o + a
        free += c
    return order


def _even_rows(n: int, m: int, device=None) -> torch.Tensor:
    """``min(n, m)`` int64 rows of ``range(n)`` spread evenly from the first to the last.  In float64:
    torch's default float32 ``linspace`` rounds ``n - 1`` up past the last row from ``n > 2**24``."""
    return torch.linspace(0, n - 1, min(n, m), dtype=torch.float64, device=device).long()


def _voxel(p: torch.Tensor, size: float, block: int) -> torch.Tensor:
    """The rows :func:`pcgeom.grid_subsample` ``(p, size).index`` keeps, ascending, slab by slab
    (int32 while the row numbers fit, :func:`pcgeom._validation.row_dtype`)."""
    n = len(p)
    if n <= block:
        return grid_subsample(p, size).index.to(V.row_dtype(n))
    st = p.min(0, keepdim=True).values.to(torch.float64)  # grid_subsample's origin for start=None
    top = p.max(0).values.to(torch.float64)
    axis = int(torch.argmax(torch.floor((top - st[0]) / size)))
    origin = st[0, axis]

    def column(a, b):  # grid_subsample's voxel coordinate along `axis`: (p - start) / size, floored, in float64
        return torch.floor((p[a:b, axis].to(torch.float64) - origin) / size)

    # Slab bounds: quantiles of a sample of voxel columns; a column is never split.
    n_slabs = -(-n // block)
    pick = _even_rows(n, 64 * n_slabs, p.device)
    sample = torch.sort(torch.floor((p[pick, axis].to(torch.float64) - origin) / size)).values
    bounds = torch.unique(sample[(torch.arange(1, n_slabs, device=p.device) * len(sample)) // n_slabs])
    slab_type = np.int16 if len(bounds) < 2**15 else np.int32  # int16: numpy's stable sort is a radix sort
    slab = np.empty(n, dtype=slab_type)
    for a in range(0, n, block):
        b = min(n, a + block)
        slab[a:b] = torch.searchsorted(bounds, column(a, b), right=True).cpu().numpy()
    counts = np.bincount(slab, minlength=len(bounds) + 1)
    ends = np.cumsum(counts)
    order = torch.from_numpy(_counting_order(slab, counts, block, V.row_dtype(n))).to(p.device)
    del slab
    # The kept rows as a mask (1 byte a point), read out in order at the end: no list of int64 rows
    # and no sort of them.
    kept, start = torch.zeros(n, dtype=torch.bool, device=p.device), 0
    for end in ends.tolist():
        if end > start:
            rows = order[start:end]
            kept[rows[grid_subsample(p.index_select(0, rows), size, start=st[0]).index]] = True
        start = end
    del order
    return _rows_of(kept, V.row_dtype(n), block)


def _statistical(p, k, std_ratio, block, chunk, progress):
    """:func:`pcgeom.remove_statistical_outliers` ``(p, k, std_ratio)``, rows from :func:`knn_blocks`."""
    return statistical_keep(*mean_distances(p, k, block, chunk, progress, in_place=True), std_ratio, chunk)


def mean_distances(p, k, block, chunk=DEFAULT_CHUNK_POINTS, progress=None, *, in_place=False):
    """``(avg, has)``: each point's mean Euclidean distance to its ``k`` nearest (itself included;
    float64 ``(N,)``, -1 where no neighbour counts) and whether any counts (bool ``(N,)``), as
    :func:`pcgeom.remove_statistical_outliers` forms them, from :func:`knn_blocks` rows.

    ``in_place=True`` lets a float32 ``p`` be rescaled in place for the search and restored after
    it, bit for bit (:func:`_scaled`), instead of copied."""
    n = len(p)
    k = min(k, max(n, 2))  # self_knn's cap
    rescale = p.dtype != torch.float64
    with (_scaled(p, chunk, in_place) if rescale else nullcontext((p, None))) as (x, expo):
        scale = torch.pow(2.0, 2.0 * expo.to(torch.float64))[:, None] if rescale else None
        return _mean_distances(x, scale, k, block, progress)


def _mean_distances(x, scale, k, block, progress):
    """:func:`mean_distances` on the searched coordinates ``x`` (``scale``: ``(1, 1)`` float64 factor
    back to the caller's squared units, or ``None``)."""
    n = len(x)
    rescale = scale is not None
    avg = torch.empty(n, dtype=torch.float64, device=x.device)
    has = torch.empty(n, dtype=torch.bool, device=x.device)
    for b in knn_blocks(x, x, k, block_points=block, progress=progress):
        d2 = b.dist2.to(torch.float64)
        if rescale:
            d2 = d2 * scale  # the caller's units, exact: as self_knn(exact_dist2=True)
        ok = torch.isfinite(d2) & (b.idx >= 0)
        d = exact_sqrt(torch.where(ok, d2, 0))
        # Nearest first, one addition after another, as the in-memory loop adds them: cumsum along a
        # row is that sequential sum (float64 accumulates in float64), in one op instead of k - 1.
        total = torch.cumsum(d, 1)[:, -1]
        count = ok.sum(1)
        h = count > 0
        has[b.rows] = h
        avg[b.rows] = torch.where(h, total / count.clamp_min(1).to(torch.float64), -1.0)
    return avg, has


def _index_add_sum(n: int, term, chunk: int, device) -> torch.Tensor:
    """``zeros(1).index_add(0, zeros(n), v)`` for ``v = term(a, b)`` taken chunk by chunk.

    On one cloud, :func:`pcgeom.remove_statistical_outliers` sums with ``index_add`` into one slot,
    which adds the terms one after another in row order; continuing that sum chunk after chunk
    adds the same terms in the same order, so the float64 result is the same bits -- without
    ``(N,)`` int64 cloud numbers or ``(N,)`` float64 temporaries."""
    acc = torch.zeros(1, dtype=torch.float64, device=device)
    slot = torch.zeros(min(n, chunk), dtype=torch.int64, device=device)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        acc = acc.index_add(0, slot[:b - a], term(a, b))
    return acc


def statistical_keep(avg, has, std_ratio, chunk: int = DEFAULT_CHUNK_POINTS):
    """The keep-mask of :func:`pcgeom.remove_statistical_outliers` from :func:`mean_distances`.

    The global mean and deviation are that function's expressions over the whole ``(N,)`` vector,
    their ``index_add`` sums taken ``chunk`` rows at a time (:func:`_index_add_sum`: the same
    bits)."""
    n, dev = len(avg), avg.device
    n_valid = _index_add_sum(n, lambda a, b: has[a:b].to(torch.float64), chunk, dev)
    mean = _index_add_sum(n, lambda a, b: torch.where(avg[a:b] > 0, avg[a:b], 0), chunk, dev) / n_valid

    def square(a, b):
        d = torch.where(avg[a:b] > 0, avg[a:b] - mean, 0)
        return d * d

    std = exact_sqrt(_index_add_sum(n, square, chunk, dev) / (n_valid - 1))
    threshold = mean + std_ratio * std
    return (avg > 0) & (avg < threshold)


def _radius(p, radius, min_neighbors, block, chunk, progress):
    """:func:`pcgeom.remove_radius_outliers` ``(p, radius, min_neighbors)`` from :func:`knn_blocks`."""
    n = len(p)
    need = min_neighbors + 1
    if need > n:
        return torch.zeros(n, dtype=torch.bool, device=p.device)
    rescale = p.dtype != torch.float64
    keep = torch.empty(n, dtype=torch.bool, device=p.device)
    r2 = radius * radius  # a Python float: formed in float64, as the in-memory filter forms it
    with (_scaled(p, chunk, True) if rescale else nullcontext((p, None))) as (x, expo):
        scale = torch.pow(2.0, 2.0 * expo.to(torch.float64))[:, None] if rescale else None
        for b in knn_blocks(x, x, need, block_points=block, progress=progress):
            d2 = b.dist2.to(torch.float64)
            if rescale:
                d2 = d2 * scale
            keep[b.rows] = (d2[:, -1] < r2) & (b.idx[:, -1] >= 0)
    return keep


def _normals(p, k, viewpoint, block, chunk, progress):
    """:func:`pcgeom.estimate_normals` ``(p, k, viewpoint=viewpoint).normals`` from :func:`knn_blocks`.

    ``p`` is rescaled in place for the search (:func:`_scaled`; estimate_normals searches the
    rescaled cloud) and restored after it.  When that scaling is exact, the PCA runs on the scaled
    coordinates too: :func:`pcgeom.ops.pca_normals` gives a power-of-two scale of its input the same
    normals bit for bit, so ``p`` need not be held beside them."""
    n = len(p)
    k = min(k, max(n, 2))
    vp = None if viewpoint is None else torch.as_tensor(viewpoint, dtype=torch.float64).reshape(1, 3).to(p.device)
    out = torch.empty((n, 3), dtype=p.dtype, device=p.device)
    with _scaled(p, chunk, True) as (x, expo):
        same = x is p  # scaled in place: the caller's coordinates are x times 2**expo meanwhile
        up = expo[:, None]
        for b in knn_blocks(x, x, k, block_points=block, progress=progress):
            nrm = pca_normals(x[None] if same else p[None], b.idx[None]).normals[0]
            if vp is not None:
                own = times_power_of_two(x.index_select(0, b.rows), up) if same else p.index_select(0, b.rows)
                dot = (nrm.to(torch.float64) * (vp - own.to(torch.float64))).sum(1)
                nrm = torch.where((dot < 0)[:, None], -nrm, nrm)
            out[b.rows] = nrm
    return out


def _positive(fn, name, v, kind=float):
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and math.isfinite(v)
    if not ok or (kind is int and not isinstance(v, int)):
        raise ValueError(f"{fn}: {name} must be a{'n int' if kind is int else ' finite number'} > 0, got {v!r}")
    return v


def _check_steps(fn, voxel, statistical, radius, normals, viewpoint, block_points, chunk_points):
    if voxel is not None:
        _positive(fn, "voxel", voxel)
    if statistical is not None:
        if not isinstance(statistical, (tuple, list)) or len(statistical) != 2:
            raise ValueError(f"{fn}: statistical must be a pair (k, std_ratio), got {statistical!r}")
        _positive(fn, "statistical[0] (k)", statistical[0], int)
        _positive(fn, "statistical[1] (std_ratio)", statistical[1])
    if radius is not None:
        if not isinstance(radius, (tuple, list)) or len(radius) != 2:
            raise ValueError(f"{fn}: radius must be a pair (radius, min_neighbors), got {radius!r}")
        _positive(fn, "radius[0] (radius)", radius[0])
        _positive(fn, "radius[1] (min_neighbors)", radius[1], int)
    if normals is not None:
        _positive(fn, "normals", normals, int)
    if viewpoint is not None:
        if normals is None:
            raise ValueError(f"{fn}: viewpoint orients the normals; give normals= too")
        vp = list(viewpoint)
        if len(vp) != 3 or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in vp):
            raise ValueError(f"{fn}: viewpoint must be 3 finite numbers, got {viewpoint!r}")
    if voxel is None and statistical is None and radius is None and normals is None:
        raise ValueError(f"{fn}: nothing to do: give at least one of voxel, statistical, radius, normals")
    _positive(fn, "block_points", block_points, int)
    if chunk_points is not None:
        _positive(fn, "chunk_points", chunk_points, int)


def _signature(src) -> tuple:
    st = os.stat(src)
    return st.st_size, st.st_mtime_ns, st.st_ino


def preprocess_streamed(src, target, *, voxel=None, statistical=None, radius=None, normals=None, viewpoint=None,
                        float64: bool = False, block_points: int = DEFAULT_BLOCK_POINTS,
                        chunk_points: int | None = None, device="cpu", overwrite: bool = False,
                        progress=None, report: dict | None = None) -> StreamedPreprocessResult:
    """``pcgeom preprocess`` of one PLY file in bounded memory: the in-memory command's output, byte for byte.

    The steps run in the command's order, each on the points the previous one kept: ``voxel``
    (the first point per voxel of :func:`pcgeom.grid_subsample`, grid origin the cloud's minimum),
    ``statistical`` (Open3D's statistical filter, :func:`pcgeom.remove_statistical_outliers`),
    ``radius`` (:func:`pcgeom.remove_radius_outliers`) and ``normals``
    (:func:`pcgeom.estimate_normals`, oriented towards ``viewpoint`` when given), computed in
    float32, or float64 with ``float64=True``.  The output holds the kept rows in input order with
    every column of the input in its own PLY type and exact value (``nx, ny, nz`` replaced by the
    new normals, at the computing precision), binary little-endian, as ``write_ply`` writes it.
    See the module docstring for why each step equals the in-memory one and for the memory model.

    The input is read twice with :func:`pcgeom.io.iter_ply` (the coordinates, then every column
    while writing); a file changed in between is an error.  The output is written by
    :class:`pcgeom.io.PlyWriter` under a hidden temporary name and moved into place when complete,
    so an exception, SIGINT or SIGKILL never leaves a partial file under ``target``.

    Args:
        src: the input PLY file (ASCII or binary, either byte order).
        target: the output file; its folder is created.
        voxel: voxel size, a float > 0, or ``None``.
        statistical: ``(k, std_ratio)`` (int >= 1, float > 0), or ``None``.
        radius: ``(radius, min_neighbors)`` (float > 0, int >= 1), or ``None``.
        normals: ``k`` neighbours for the normals, int >= 1, or ``None``.
        viewpoint: 3 floats to orient the normals towards, or ``None``.
        float64: compute in float64 (the stored values are kept either way).
        block_points: tile size of the searches and voxel slabs (:func:`pcgeom.knn_blocks`).
        chunk_points: rows per read chunk (default ``min(block_points, 2**20)``).
        device: where the coordinates and the searches live.
        overwrite: replace an existing ``target``.
        progress: the searches' tqdm bars, as in :func:`pcgeom.knn_blocks`.
        report: an optional dict; ``report["points_read"]`` is set once the coordinates are read
            (so a caller can count them when a later step fails).

    Returns:
        :class:`StreamedPreprocessResult` ``(points_read, points_written)``.

    Raises:
        PlyFormatError: a malformed file (one that ends early, a count the data does not match), as
            :func:`pcgeom.io.read_ply` reports it.
        ValueError: NaN or infinite coordinates, a file without points, no points left for
            ``normals``, bad arguments (the message names them), the file changed while read.
        FileExistsError: ``target`` exists and ``overwrite`` is False.

    Example:
        >>> import os, tempfile, torch
        >>> from pcgeom.io import read_ply, write_ply
        >>> from pcgeom.streaming import preprocess_streamed
        >>> d = tempfile.mkdtemp()
        >>> pts = torch.rand(2000, 3, generator=torch.Generator().manual_seed(1))
        >>> _ = write_ply(os.path.join(d, "a.ply"), pts, properties={"i": torch.arange(2000, dtype=torch.int32)})
        >>> preprocess_streamed(os.path.join(d, "a.ply"), os.path.join(d, "b.ply"), radius=(0.05, 2),
        ...                     block_points=128).points_read
        2000
    """
    fn = "preprocess_streamed"
    _check_steps(fn, voxel, statistical, radius, normals, viewpoint, block_points, chunk_points)
    chunk = _chunk(block_points, chunk_points)
    device = torch.device(device)
    target = Path(target)
    if target.exists() and not overwrite:
        raise FileExistsError(f"{fn}: {target} already exists; pass overwrite=True to replace it")
    signature = _signature(src)
    types = read_ply_types(src)
    read_dtype = _read_dtype(types)
    compute = torch.float64 if float64 else torch.float32
    n = ply_info(src).vertex_count

    # Pass 1: the coordinates, in the computing precision (what the in-memory command computes on).
    p = torch.empty((n, 3), dtype=compute, device=device)
    at = bad = 0
    for c in iter_ply(src, chunk_points=chunk, columns=[], dtype=read_dtype):
        q = c.points.to(compute)
        bad += int((~torch.isfinite(q).all(1)).sum())
        p[at:at + len(q)] = q.to(device)
        at += len(q)
    if at != n:  # iter_ply's own checks make this unreachable; a guard, not a silent short file
        raise ValueError(f"{fn}: {src}: read {at} vertex rows, its header declares {n}")
    if report is not None:
        report["points_read"] = n
    if bad:
        raise ValueError(f"{bad} points have NaN or infinite coordinates")
    if n == 0:
        raise ValueError("the file holds no points")

    # The kept input rows, ascending, int32 while they fit; None while every row is kept (no (N,)
    # arange), and sized by the kept points once a step drops some.
    ind = V.row_dtype(n)
    keep = None
    if voxel is not None:
        keep = _voxel(p, float(voxel), block_points)
        p = p.index_select(0, keep)

    def narrow(keep, p, m):
        rows = _rows_of(m, ind, chunk)
        return (rows if keep is None else keep.index_select(0, rows)), p.index_select(0, rows)

    if statistical is not None:
        keep, p = narrow(keep, p, _statistical(p, int(statistical[0]), float(statistical[1]), block_points,
                                               chunk, progress))
    if radius is not None:
        keep, p = narrow(keep, p, _radius(p, float(radius[0]), int(radius[1]), block_points, chunk, progress))
    new_normals = None
    if normals is not None:
        if len(p) == 0:
            raise ValueError("no points left for --normals after outlier removal")
        new_normals = _normals(p, int(normals), viewpoint, block_points, chunk, progress).cpu()
    del p
    keep = torch.arange(n, dtype=ind) if keep is None else keep.cpu()

    # Pass 2: every column again, chunk by chunk, the kept rows written in order.
    out_types = dict(types)
    if new_normals is not None:
        for c in _NORMALS:  # replaced by the new normals, written at the computation's precision
            out_types.pop(c, None)
    if _signature(src) != signature:
        raise ValueError(f"{fn}: {src} changed while it was being preprocessed; run again")
    target.parent.mkdir(parents=True, exist_ok=True)
    with PlyWriter(target, count=len(keep), types=out_types, overwrite=overwrite) as w:
        for c in iter_ply(src, chunk_points=chunk, dtype=read_dtype):
            a, b = torch.searchsorted(keep, torch.tensor([c.offset, c.offset + len(c.points)],
                                                         dtype=keep.dtype)).tolist()
            rows = keep[a:b].long() - c.offset
            props = {name: v[rows] for name, v in c.properties.items()}
            nrm = None if c.normals is None else c.normals[rows]
            if new_normals is not None:
                nrm = new_normals[a:b]
                for name in _NORMALS:
                    props.pop(name, None)
            w.write(c.points[rows], colors=None if c.colors is None else c.colors[rows], normals=nrm,
                    properties=props)
    return StreamedPreprocessResult(n, len(keep))
