"""Stand-in for Pointcept's ``pointops`` (``libs/pointops``, Pointcept d74c646).

Served under the module name ``pointops`` once the shims are on (``pcgeom
compat enable`` or :func:`pcgeom.compat.enable_shims`), so Pointcept's Point
Transformer v1/v2, its evaluator hook and the Sonata / Concerto / MSC models
import and run unchanged, on CPU and GPU, with no compiled extension.  The
names, argument orders and layouts are the original's: packed ``(n, 3)``
coordinates, int cumulative **end** offsets ``(b,)`` (int32 as the wrappers
pass them; int64 accepted), **int32 global** indices.

What each function returns (where the original kernel is well defined, the
same numbers; the differences are listed below):

* ``knn_query(nsample, xyz, offset, new_xyz=None, new_offset=None)`` ->
  ``(idx (m, nsample) int32, dist (m, nsample))``: the ``nsample`` nearest
  points of the query's cloud, **Euclidean** distances ascending, ``idx = -1``
  and ``dist = 1e5`` (the kernel's ``sqrt(1e10)``) where the cloud has fewer
  points.  ``new_xyz`` *or* ``new_offset`` None means a self-query (both are
  replaced, as the original does).  No gradient.
* ``ball_query(nsample, max_radius, min_radius, xyz, offset, new_xyz=None,
  new_offset=None)``: the points with ``d2 <= 1e-5`` or ``min_radius**2 <= d2
  < max_radius**2`` (float32 like the kernel), nearest first; more than
  ``nsample`` such points are subsampled with the kernel's stride
  (``int(float(cnt) / nsample * i)``); ``-1`` / ``1e5`` padding.
* ``random_ball_query(...)``: the same ball, scanning each cloud in a random
  order (``torch``'s global generator) and keeping the first ``nsample`` hits.
* ``farthest_point_sampling(xyz, offset, new_offset)`` -> ``idx (m,)`` int32:
  per cloud ``new_offset[b] - new_offset[b-1]`` samples, starting at the
  cloud's first point; once every remaining point is at distance 0 from the
  samples (all taken, or duplicates) it repeats the cloud's first point, as
  the kernel does.
* ``grouping(idx, feat, xyz, new_xyz=None, with_xyz=False)`` ->
  ``(m, nsample, [3 +] c)``: gathered features, zeros at ``idx = -1``; with
  ``with_xyz`` the coordinates relative to ``new_xyz`` first (zeros at -1).
  Differentiable w.r.t. ``feat``, ``xyz`` and ``new_xyz`` (pure torch in the
  original too).  ``grouping2(feat, idx)`` is the autograd-Function form.
* ``interpolation(xyz, new_xyz, feat, offset, new_offset, k=3)``: weights
  ``1/(d + 1e-8)`` normalised over the k nearest; exactly the original's pure
  torch code, so an ``idx = -1`` slot (a cloud with fewer than k points) reads
  Python's ``feat[-1]`` with the ``1e5`` distance's weight.
  ``interpolation2`` (the CUDA Function) gives such slots weight x 0 instead
  (the kernel reads out of bounds there).  Gradient w.r.t. the features only.
* ``subtraction(input1, input2, idx)``, ``aggregation(input, position,
  weight, idx)``, ``attention_relation_step(query, key, weight, index_target,
  index_refer)``, ``attention_fusion_step(weight, value, index_target,
  index_refer)``: the kernels' formulas, gradients where the original's
  backward gives them (``attention_relation_step`` gives none to ``weight``).
* ``query_and_group``, ``knn_query_and_group``, ``ball_query_and_group``,
  ``offset2batch`` (int64), ``batch2offset`` (int32): the original helpers,
  ``query_and_group``'s dilation included, without its Python loop over clouds.

Differences from the original, on purpose (the original is unstable or
broken there):

* ties (equal distances) go to the **lower index** in ``knn_query``,
  ``ball_query`` and ``farthest_point_sampling`` (the CUDA kernels break them
  by heap or reduction order);
* no caps: the kernels' fixed ``best_dist[128]`` (knn) and
  ``candi_dist[2048]`` (ball query) arrays overflow silently; pcgeom takes any
  ``nsample`` and any number of ball candidates (memory grows with them);
* ``knn_query`` has no ``1e10`` squared-distance cut-off (points farther than
  1e5 are found too);
* ``ball_query`` returns true distances on its subsample path (the kernel
  writes ``sqrt(index)`` there) and orders candidates by distance (the kernel
  heap-sorts an array that was never made a heap, a scrambled order);
* ``-1`` indices passed to ``grouping2`` / ``interpolation2`` /
  ``subtraction`` / ``aggregation`` contribute zeros (the kernels read out of
  bounds); indices outside ``[-1, n)`` and malformed offsets raise errors that
  name the argument instead of crashing;
* every op also takes float16/bfloat16/float64 (computed as pcgeom computes
  them), non-contiguous tensors, and CPU tensors; results are deterministic
  on CPU.

Example:
    >>> import torch
    >>> from pcgeom.compat import pointops
    >>> xyz = torch.tensor([[0.0, 0, 0], [1, 0, 0], [3, 0, 0], [0, 0, 0], [0, 2, 0]])
    >>> offset = torch.tensor([3, 5], dtype=torch.int32)
    >>> idx, dist = pointops.knn_query(3, xyz, offset)
    >>> idx.tolist()[3], dist.tolist()[3]
    ([3, 4, -1], [0.0, 2.0, 100000.0])
    >>> pointops.farthest_point_sampling(xyz, offset, torch.tensor([2, 3], dtype=torch.int32)).tolist()
    [0, 2, 3]
"""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom.ops import ball_query as _pc_ball_query
from pcgeom.ops import farthest_point_sample as _pc_fps
from pcgeom.ops import knn as _pc_knn
from pcgeom.ops import knn_gather as _knn_gather
from pcgeom.ops.packed import offsets_arg
from pcgeom.segment import group_reduce
from pcgeom.packed_features import aggregate_neighbors, batch_to_offsets, group_packed, offsets_to_batch

__version__ = "1.0"

__all__ = [
    "aggregation",
    "attention_fusion_step",
    "attention_relation_step",
    "ball_query",
    "ball_query_and_group",
    "batch2offset",
    "farthest_point_sampling",
    "grouping",
    "grouping2",
    "interpolation",
    "interpolation2",
    "knn_query",
    "knn_query_and_group",
    "offset2batch",
    "query_and_group",
    "random_ball_query",
    "subtraction",
]

PAD_DIST = 1e5  # sqrt of the kernels' 1e10 sentinel, exactly representable in float32
_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


# --------------------------------------------------------------------------- checks


def _check_xyz(fn: str, name: str, t) -> None:
    V.check_tensor(fn, name, t, 2, "(n, 3)")
    if t.shape[1] != 3:
        raise ValueError(f"{fn}: {name} must have shape (n, 3), got {V._shape(t)}")
    if t.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be float16, bfloat16, float32 or float64, got {t.dtype}")


def _check_feat(fn: str, name: str, t, n: int | None = None, layout: str = "(n, c)") -> None:
    V.check_tensor(fn, name, t, 2, layout)
    if t.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if n is not None and t.shape[0] != n:
        raise ValueError(f"{fn}: {name} must have shape {layout} with {n} rows, got {V._shape(t)}")


def _same_device(fn: str, ref_name: str, ref, **others) -> None:
    for name, t in others.items():
        if t is not None and t.device != ref.device:
            raise ValueError(f"{fn}: {name} must be on {ref.device} like {ref_name}, got {t.device}")


def _check_idx(fn: str, name: str, idx, rows: int | None, n: int, device, ndim: int = 2,
               layout: str = "(m, nsample)", allow_missing: bool = True) -> torch.Tensor:
    """int32/int64 indices in [-1, n) (or [0, n)); one host sync for the range check."""
    V.check_tensor(fn, name, idx, ndim, layout)
    if idx.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{fn}: {name} must be int32 or int64, got {idx.dtype}")
    if rows is not None and idx.shape[0] != rows:
        raise ValueError(f"{fn}: {name} must have shape {layout} with {rows} rows, got {V._shape(idx)}")
    if idx.device != device:
        raise ValueError(f"{fn}: {name} must be on {device}, got {idx.device}")
    if not V.compiling() and idx.numel() > 0:
        lo, hi = torch.stack([idx.min(), idx.max()]).tolist()
        low = -1 if allow_missing else 0
        if lo < low or hi >= n:
            raise ValueError(f"{fn}: {name} values must be in [{low}, {n}), got min {lo}, max {hi}")
    return idx.long()


def _nsample(fn: str, nsample) -> int:
    return V.check_int(fn, "nsample", nsample, minimum=1)


def _query_args(fn, xyz, offset, new_xyz, new_offset):
    """The original's defaults (either query argument None -> self-query) and the offsets checks."""
    if new_xyz is None or new_offset is None:
        new_xyz, new_offset = xyz, offset
    _check_xyz(fn, "xyz", xyz)
    _check_xyz(fn, "new_xyz", new_xyz)
    _same_device(fn, "xyz", xyz, new_xyz=new_xyz)
    if new_xyz.dtype != xyz.dtype:
        raise TypeError(f"{fn}: xyz and new_xyz must have the same dtype, got {xyz.dtype} and {new_xyz.dtype}")
    same = new_xyz is xyz and new_offset is offset
    off = offsets_arg(fn, "offset", offset, xyz.shape[0], xyz.device)
    new_off = off if same else offsets_arg(fn, "new_offset", new_offset, new_xyz.shape[0], xyz.device)
    if new_off.shape[0] != off.shape[0]:
        raise ValueError(f"{fn}: offset and new_offset must list the same number of clouds, "
                         f"got {off.shape[0]} and {new_off.shape[0]}")
    return xyz, off, (xyz if same else new_xyz), new_off


def _dist_out(dist2: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return torch.where(idx < 0, torch.full((), PAD_DIST, dtype=dist2.dtype, device=dist2.device),
                       dist2.clamp_min(0).sqrt())


# --------------------------------------------------------------------------- queries


def knn_query(nsample, xyz, offset, new_xyz=None, new_offset=None):
    """The ``nsample`` nearest points of each query row within its cloud.

    Args:
        nsample: int >= 1 (no upper cap).
        xyz: ``(n, 3)`` floating coordinates, clouds packed by ``offset``.
        offset: int ``(b,)`` cumulative end offsets of ``xyz`` (``offset[-1] == n``).
        new_xyz: ``(m, 3)`` query coordinates; ``None`` (or ``new_offset=None``)
            queries ``xyz`` itself.
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``.

    Returns:
        ``(idx, dist)``: ``idx (m, nsample)`` int32 global rows of ``xyz``,
        nearest first, ties to the lower index, ``-1`` where the cloud has
        fewer than ``nsample`` points; ``dist (m, nsample)`` Euclidean
        distances in the dtype of ``xyz``, ``1e5`` at ``-1``.  No gradient.

    Raises:
        ValueError: offsets not non-decreasing or not ending at the row count,
            ``nsample < 1``, mixed devices.
        TypeError: non-float coordinates.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [2, 0, 0], [5, 0, 0]])
        >>> idx, dist = pointops.knn_query(2, xyz, torch.tensor([3], dtype=torch.int32))
        >>> idx.tolist(), dist.tolist()
        ([[0, 1], [1, 0], [2, 1]], [[0.0, 2.0], [0.0, 2.0], [0.0, 3.0]])
    """
    fn = "knn_query"
    nsample = _nsample(fn, nsample)
    xyz, off, new_xyz, new_off = _query_args(fn, xyz, offset, new_xyz, new_offset)
    with torch.no_grad():
        dist2, idx = _pc_knn(new_xyz, xyz, nsample, query_offsets=new_off, points_offsets=off)
        return idx.int(), _dist_out(dist2, idx)


def _ball_candidates(fn, xyz, off, new_xyz, new_off, nsample, min_radius, max_radius, index_order):
    """Every point of the query's cloud inside the pointops ball, compacted to the left.

    Returns ``(dist2 (m, K), idx (m, K) int64, cnt (m,))``: candidates nearest
    first (``index_order=False``, ties to the lower index) or in row order of
    ``xyz``; slots ``>= cnt`` are ``idx = -1``.  The search asks pcgeom's ball
    query for a superset radius and grows its ``k`` until no row is full.
    """
    acc = torch.float64 if xyz.dtype == torch.float64 else torch.float32
    max2 = torch.tensor(max_radius, dtype=acc) ** 2
    min2 = torch.tensor(min_radius, dtype=acc) ** 2
    r2 = max(float(max2), float(torch.tensor(1e-5, dtype=acc)))
    radius = (r2 ** 0.5) * (1 + 1e-6)  # a superset ball; the exact test follows
    lengths = torch.diff(off, prepend=off.new_zeros(1))
    n_max = int(lengths.max()) if lengths.numel() else 0
    k = max(1, min(max(nsample, 32), n_max))
    order = "index" if index_order else "distance"
    while True:
        dist2, idx = _pc_ball_query(new_xyz, xyz, radius, k, order=order, query_offsets=new_off, points_offsets=off)
        if k >= n_max or idx.shape[0] == 0 or not bool((idx[:, -1] >= 0).any()):
            break
        k = min(4 * k, n_max)
    d = dist2.to(acc)
    keep = (idx >= 0) & ((d.double() <= 1e-5) | ((d >= min2.to(d.device)) & (d < max2.to(d.device))))
    perm = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)
    return torch.gather(dist2, 1, perm), torch.where(torch.gather(keep, 1, perm), torch.gather(idx, 1, perm), -1), keep.sum(1)


def _ball_args(fn, nsample, max_radius, min_radius):
    nsample = _nsample(fn, nsample)
    max_radius = V.check_float(fn, "max_radius", max_radius, minimum=0.0)
    min_radius = V.check_float(fn, "min_radius", min_radius, minimum=0.0)
    if not min_radius < max_radius:
        raise ValueError(f"{fn}: min_radius must be < max_radius, got min_radius={min_radius}, max_radius={max_radius}")
    return nsample, max_radius, min_radius


def _take(dist2, idx, cols, valid):
    d = torch.gather(dist2, 1, cols)
    i = torch.where(valid, torch.gather(idx, 1, cols), -1)
    return i.int(), _dist_out(d, i)


def ball_query(nsample, max_radius, min_radius, xyz, offset, new_xyz=None, new_offset=None):
    """Up to ``nsample`` points of the query's cloud in the shell ``[min_radius, max_radius)``.

    A point is a candidate when ``d2 <= 1e-5`` (always) or ``min_radius**2 <=
    d2 < max_radius**2`` (squared radii in float32, as the kernel).
    Candidates are ordered nearest first (ties to the lower index); with at
    most ``nsample`` of them all are returned, padded with ``-1`` / ``1e5``;
    with ``cnt > nsample`` the kernel's stride picks candidate
    ``int(float32(cnt) / nsample * i)`` for slot ``i``.

    Args:
        nsample: int >= 1 (no cap on the candidates).
        max_radius: float, the shell's outer radius (exclusive),
            ``max_radius > min_radius``.
        min_radius: float, the shell's inner radius (inclusive),
            ``0 <= min_radius < max_radius``.
        xyz: ``(n, 3)`` floating coordinates, clouds packed by ``offset``.
        offset: int ``(b,)`` cumulative end offsets of ``xyz`` (``offset[-1] == n``).
        new_xyz: ``(m, 3)`` query coordinates; ``None`` (or ``new_offset=None``)
            queries ``xyz`` itself.
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``.

    Returns:
        ``(idx (m, nsample) int32, dist (m, nsample))``, true Euclidean
        distances (the kernel writes ``sqrt(index)`` on its subsample path).
        No gradient.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [0.5, 0, 0], [1, 0, 0], [3, 0, 0]])
        >>> pointops.ball_query(4, 1.5, 0.75, xyz, torch.tensor([4]))[0][0].tolist()
        [0, 2, -1, -1]
    """
    fn = "ball_query"
    nsample, max_radius, min_radius = _ball_args(fn, nsample, max_radius, min_radius)
    xyz, off, new_xyz, new_off = _query_args(fn, xyz, offset, new_xyz, new_offset)
    V.check_fits(fn, "nsample", nsample, "idx and dist", (new_xyz.shape[0], nsample), 16, xyz.device)
    with torch.no_grad():
        dist2, idx, cnt = _ball_candidates(fn, xyz, off, new_xyz, new_off, nsample, min_radius, max_radius, False)
        ar = torch.arange(nsample, device=xyz.device)
        sep = cnt.to(torch.float32) / torch.tensor(float(nsample), dtype=torch.float32)
        strided = (sep[:, None] * ar.to(torch.float32)[None, :]).long()
        over = (cnt > nsample)[:, None]
        cols = torch.where(over, strided, ar[None, :]).clamp_(max=max(dist2.shape[1] - 1, 0))
        valid = over | (ar[None, :] < cnt[:, None])
        if dist2.shape[1] == 0:
            m = new_xyz.shape[0]
            return (torch.full((m, nsample), -1, dtype=torch.int32, device=xyz.device),
                    torch.full((m, nsample), PAD_DIST, dtype=xyz.dtype, device=xyz.device))
        return _take(dist2, idx, cols, valid)


def random_ball_query(nsample, max_radius, min_radius, xyz, offset, new_xyz=None, new_offset=None):
    """Like :func:`ball_query`, but the first ``nsample`` candidates of a random scan of each cloud.

    Each cloud's points are visited in a random order (one permutation per
    call, drawn from torch's global generator: seed with
    ``torch.manual_seed``); a query keeps the first ``nsample`` candidates it
    meets, in that order, padded with ``-1`` / ``1e5``.

    Args:
        nsample: int >= 1, the candidates kept per query, as in :func:`ball_query`.
        max_radius: float, the shell's outer radius (exclusive), as in
            :func:`ball_query`.
        min_radius: float, the shell's inner radius (inclusive),
            ``0 <= min_radius < max_radius``, as in :func:`ball_query`.
        xyz: ``(n, 3)`` floating coordinates, clouds packed by ``offset``.
        offset: int ``(b,)`` cumulative end offsets of ``xyz`` (``offset[-1] == n``).
        new_xyz: ``(m, 3)`` query coordinates; ``None`` (or ``new_offset=None``)
            queries ``xyz`` itself.
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``.

    Returns:
        ``(idx (m, nsample) int32, dist (m, nsample))``.  No gradient.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [0.5, 0, 0], [3, 0, 0]])
        >>> idx, _ = pointops.random_ball_query(3, 1.0, 0.0, xyz, torch.tensor([3]))
        >>> sorted(idx[0].tolist())
        [-1, 0, 1]
    """
    fn = "random_ball_query"
    nsample, max_radius, min_radius = _ball_args(fn, nsample, max_radius, min_radius)
    xyz, off, new_xyz, new_off = _query_args(fn, xyz, offset, new_xyz, new_offset)
    V.check_fits(fn, "nsample", nsample, "idx and dist", (new_xyz.shape[0], nsample), 16, xyz.device)
    with torch.no_grad():
        batch = offsets_to_batch(off, xyz.shape[0])
        keys = batch.to(torch.float64) + torch.rand(xyz.shape[0], dtype=torch.float64, device=xyz.device)
        order = torch.argsort(keys, stable=True)
        shuffled = xyz.index_select(0, order)
        dist2, pos, cnt = _ball_candidates(fn, shuffled, off, new_xyz, new_off, nsample, min_radius, max_radius, True)
        m = new_xyz.shape[0]
        if dist2.shape[1] < nsample:
            pad = nsample - dist2.shape[1]
            dist2 = torch.cat([dist2, dist2.new_full((m, pad), float("inf"))], 1)
            pos = torch.cat([pos, pos.new_full((m, pad), -1)], 1)
        dist2, pos = dist2[:, :nsample], pos[:, :nsample]
        idx = torch.where(pos >= 0, order[pos.clamp(min=0)], -1)
        return idx.int(), _dist_out(dist2, idx)


def farthest_point_sampling(xyz, offset, new_offset):
    """Farthest point sampling per packed cloud, from each cloud's first point.

    Cloud ``b`` gets ``new_offset[b] - new_offset[b-1]`` samples: its first
    point, then each time the point farthest from the samples so far (squared
    distances, ties to the lowest index).  Once the farthest remaining point
    is at distance 0 (every point taken, or only duplicates of taken points
    left) the kernel -- and this stand-in -- repeats the cloud's first point.

    Args:
        xyz: ``(n, 3)`` floating coordinates.
        offset: int ``(b,)`` cumulative end offsets of ``xyz``.
        new_offset: int ``(b,)`` cumulative end offsets of the samples
            (non-decreasing; a cloud may ask for more samples than it has).

    Returns:
        ``idx (new_offset[-1],)`` int32 global rows of ``xyz``, cloud after
        cloud, in sampling order.  No gradient.

    Raises:
        ValueError: malformed offsets, or samples asked of an empty cloud.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [1, 0, 0], [4, 0, 0]])
        >>> pointops.farthest_point_sampling(xyz, torch.tensor([3]), torch.tensor([4])).tolist()
        [0, 2, 1, 0]
    """
    fn = "farthest_point_sampling"
    _check_xyz(fn, "xyz", xyz)
    off = offsets_arg(fn, "offset", offset, xyz.shape[0], xyz.device)
    if not isinstance(new_offset, torch.Tensor) or new_offset.dtype not in _INT_DTYPES:
        raise TypeError(f"{fn}: new_offset must be an integer tensor of shape ({off.shape[0]},), got "
                        f"{new_offset.dtype if isinstance(new_offset, torch.Tensor) else type(new_offset).__name__}")
    if new_offset.dim() != 1 or new_offset.shape[0] != off.shape[0]:
        raise ValueError(f"{fn}: new_offset must have shape ({off.shape[0]},) like offset, got {V._shape(new_offset)}")
    V.check_host_readable(fn, "new_offset", new_offset, xyz.device)
    new_off = new_offset.to(device=xyz.device, dtype=torch.int64)
    counts = torch.diff(new_off, prepend=new_off.new_zeros(1))
    lengths = torch.diff(off, prepend=off.new_zeros(1))
    bad_step, bad_empty, m = torch.stack([
        (counts < 0).long().argmax() if counts.numel() else counts.new_zeros(()),
        ((lengths == 0) & (counts > 0)).long().argmax(),
        new_off[-1],
    ]).tolist()
    if int(counts[bad_step]) < 0:
        raise ValueError(f"{fn}: new_offset must be non-decreasing cumulative end offsets, "
                         f"got new_offset[{bad_step}]={int(new_off[bad_step])} after "
                         f"{0 if bad_step == 0 else int(new_off[bad_step - 1])}")
    if int(lengths[bad_empty]) == 0 and int(counts[bad_empty]) > 0:
        raise ValueError(f"{fn}: cloud {bad_empty} of xyz is empty (offset) but new_offset asks "
                         f"{int(counts[bad_empty])} samples of it")
    if m == 0:
        return torch.zeros(0, dtype=torch.int32, device=xyz.device)
    with torch.no_grad():
        idx = _pc_fps(xyz, counts, offsets=off)  # (m,) int64, -1 past a cloud's size
        starts = off - lengths
        sb = torch.repeat_interleave(torch.arange(off.shape[0], device=xyz.device), counts, output_size=m)
        # A sample at distance 0 from an earlier one of its cloud (or a -1 slot)
        # means the maximum distance reached 0: from there on the kernel repeats
        # the cloud's first point.
        valid = idx >= 0
        pts = xyz.index_select(0, idx.clamp(min=0)).to(torch.float64)
        key = torch.cat([sb[:, None].to(torch.float64), pts + 0.0], 1)  # + 0.0: -0.0 == 0.0
        _, inv = torch.unique(key, dim=0, return_inverse=True)
        pos = torch.arange(m, device=xyz.device)
        first = torch.full((int(inv.max()) + 1,), m, dtype=torch.int64, device=xyz.device)
        first = first.scatter_reduce(0, inv, pos, reduce="amin")
        zero = (~valid) | (first[inv] < pos)
        csum = torch.cumsum(zero.long(), 0)
        seg_start = torch.cumsum(counts, 0) - counts
        before = torch.where(seg_start > 0, csum[(seg_start - 1).clamp(min=0)], 0)
        repeated = (csum - before[sb]) > 0
        idx = torch.where(repeated, starts[sb], idx)
        return idx.int()


# --------------------------------------------------------------------------- grouping and interpolation


def grouping(idx, feat, xyz, new_xyz=None, with_xyz=False):
    """Gathers the neighbours' features (and relative coordinates): the original's pure-torch helper.

    Args:
        idx: ``(m, nsample)`` int32/int64 rows of ``feat`` / ``xyz`` in ``[-1, n)``.
        feat: ``(n, c)`` floating features.
        xyz: ``(n, 3)`` coordinates.
        new_xyz: ``(m, 3)`` centres (default ``xyz``).
        with_xyz: prepend ``xyz[idx] - new_xyz`` (zeros at ``-1``).

    Returns:
        ``(m, nsample, c)`` or ``(m, nsample, 3 + c)``, zeros at ``idx = -1``;
        differentiable w.r.t. ``feat``, ``xyz`` and ``new_xyz``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [1, 0, 0]])
        >>> feat = torch.tensor([[5.0], [7.0]])
        >>> pointops.grouping(torch.tensor([[1, -1]], dtype=torch.int32), feat, xyz, xyz[:1], with_xyz=True).tolist()
        [[[1.0, 0.0, 0.0, 7.0], [0.0, 0.0, 0.0, 0.0]]]
    """
    fn = "grouping"
    if new_xyz is None:
        new_xyz = xyz
    _check_xyz(fn, "xyz", xyz)
    _check_feat(fn, "feat", feat, xyz.shape[0])
    _same_device(fn, "feat", feat, xyz=xyz)
    if with_xyz:
        _check_xyz(fn, "new_xyz", new_xyz)
        _same_device(fn, "feat", feat, new_xyz=new_xyz)
    idx = _check_idx(fn, "idx", idx, new_xyz.shape[0] if with_xyz else None, feat.shape[0], feat.device)
    if with_xyz:
        return group_packed(feat, idx, points=xyz, centers=new_xyz)
    return group_packed(feat, idx)


def grouping2(input, idx):
    """The autograd-Function form: ``input[idx]`` ``(m, nsample, c)``, zeros at ``idx = -1``.

    Args:
        input: ``(n, c)`` floating features.
        idx: ``(m, nsample)`` int32/int64 rows in ``[-1, n)``.

    Returns:
        ``(m, nsample, c)``, differentiable w.r.t. ``input``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> pointops.grouping2(torch.tensor([[1.0], [2.0]]), torch.tensor([[1, 0]], dtype=torch.int32)).tolist()
        [[[2.0], [1.0]]]
    """
    fn = "grouping2"
    _check_feat(fn, "input", input)
    idx = _check_idx(fn, "idx", idx, None, input.shape[0], input.device)
    return group_packed(input, idx)


def _interp_weights(k, xyz, new_xyz, offset, new_offset, fn):
    k = V.check_int(fn, "k", k, minimum=1)
    idx, dist = knn_query(k, xyz, offset, new_xyz, new_offset)
    recip = 1.0 / (dist + 1e-8)
    return idx.long(), recip / torch.sum(recip, dim=1, keepdim=True)


def _check_interp(fn, xyz, new_xyz, feat, name):
    _check_xyz(fn, "xyz", xyz)
    _check_xyz(fn, "new_xyz", new_xyz)
    _check_feat(fn, name, feat, xyz.shape[0], "(n, c) with the rows of xyz")
    _same_device(fn, "xyz", xyz, new_xyz=new_xyz, **{name: feat})


def interpolation(xyz, new_xyz, feat, offset, new_offset, k=3):
    """Features at ``new_xyz`` from the ``k`` nearest ``xyz`` rows of the same cloud.

    ``w_j = (1/(d_j + 1e-8)) / sum_i 1/(d_i + 1e-8)`` on :func:`knn_query`'s
    Euclidean distances, ``out = sum_j w_j feat[idx_j]`` -- the original's
    pure-torch code, including its reading of Python's ``feat[-1]`` (the last
    row) for an ``idx = -1`` slot, weighted by the ``1e5`` padding distance.

    Args:
        xyz: ``(n, 3)`` coordinates where ``feat`` is known, packed by ``offset``.
        new_xyz: ``(m, 3)`` coordinates where features are wanted, packed by ``new_offset``.
        feat: ``(n, c)`` floating features.
        offset: int ``(b,)`` cumulative end offsets of ``xyz``.
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``.
        k: neighbours to blend (default 3).

    Returns:
        ``(m, c)`` (float32 for float16/bfloat16/float32 features), differentiable
        w.r.t. ``feat``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [2, 0, 0]])
        >>> feat = torch.tensor([[0.0], [10.0]])
        >>> out = pointops.interpolation(xyz, torch.tensor([[0.5, 0, 0]]), feat,
        ...                              torch.tensor([2]), torch.tensor([1]), k=2)
        >>> round(out.item(), 4)
        2.5
    """
    fn = "interpolation"
    _check_interp(fn, xyz, new_xyz, feat, "feat")
    with torch.no_grad():
        idx, weight = _interp_weights(k, xyz, new_xyz, offset, new_offset, fn)
        idx = torch.where(idx < 0, idx + feat.shape[0], idx)  # Python's feat[-1]
    if feat.shape[1] == 0 or new_xyz.shape[0] == 0:
        return feat.new_zeros((new_xyz.shape[0], feat.shape[1]), dtype=torch.promote_types(feat.dtype, torch.float32))
    g = _knn_gather(feat[None], idx[None])[0]
    return (g * weight.unsqueeze(-1)).sum(dim=1)


def interpolation2(xyz, new_xyz, input, offset, new_offset, k=3):
    """The autograd-Function form of :func:`interpolation`; ``idx = -1`` slots contribute 0.

    Args:
        xyz: ``(n, 3)`` coordinates where ``input`` is known, packed by ``offset``.
        new_xyz: ``(m, 3)`` coordinates where features are wanted, packed by ``new_offset``.
        input: ``(n, c)`` floating features.
        offset: int ``(b,)`` cumulative end offsets of ``xyz``.
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``.
        k: neighbours to blend (default 3).

    Returns:
        ``(m, c)``, differentiable w.r.t. ``input`` only (as the original).

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [2, 0, 0]])
        >>> out = pointops.interpolation2(xyz, xyz[:1], torch.tensor([[1.0], [3.0]]),
        ...                               torch.tensor([2]), torch.tensor([1]), 3)
        >>> round(out.item(), 4)   # the third neighbour is missing
        1.0
    """
    fn = "interpolation2"
    _check_interp(fn, xyz, new_xyz, input, "input")
    with torch.no_grad():
        idx, weight = _interp_weights(k, xyz, new_xyz, offset, new_offset, fn)
    if input.shape[1] == 0 or new_xyz.shape[0] == 0:
        return input.new_zeros((new_xyz.shape[0], input.shape[1]), dtype=torch.promote_types(input.dtype, torch.float32))
    g = _knn_gather(input[None], idx[None])[0]
    return (g * weight.unsqueeze(-1)).sum(dim=1)


# --------------------------------------------------------------------------- Point Transformer v1 / attention ops


def subtraction(input1, input2, idx):
    """``out[i, j] = input1[i] - input2[idx[i, j]]``, ``(n, nsample, c)``; zeros at ``idx = -1``.

    Args:
        input1: ``(n, c)`` floating tensor (the centres' values).
        input2: ``(n', c)`` floating tensor (the neighbours' values).
        idx: ``(n, nsample)`` int32/int64 rows of ``input2`` in ``[-1, n')``.

    Returns:
        ``(n, nsample, c)``, differentiable w.r.t. ``input1`` and ``input2``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> x = torch.tensor([[1.0], [4.0]])
        >>> pointops.subtraction(x, x, torch.tensor([[1], [0]], dtype=torch.int32)).tolist()
        [[[-3.0]], [[3.0]]]
    """
    fn = "subtraction"
    _check_feat(fn, "input1", input1)
    _check_feat(fn, "input2", input2)
    if input2.shape[1] != input1.shape[1]:
        raise ValueError(f"{fn}: input2 must have shape (n, {input1.shape[1]}) like input1, got {V._shape(input2)}")
    _same_device(fn, "input1", input1, input2=input2)
    idx = _check_idx(fn, "idx", idx, input1.shape[0], input2.shape[0], input1.device)
    diff = input1.unsqueeze(1) - _knn_gather(input2[None], idx[None])[0]
    return torch.where((idx >= 0).unsqueeze(-1), diff, diff.new_zeros(()))


def aggregation(input, position, weight, idx):
    """Point Transformer v1's aggregation ``sum_j (input[idx_j] + position_j) * weight_j``.

    ``out[i, c] = sum_j (input[idx[i, j], c] + position[i, j, c]) * weight[i, j, c % w_c]``
    (see :func:`pcgeom.aggregate_neighbors`); ``idx = -1`` slots contribute 0.

    Args:
        input: ``(n, c)`` floating values.
        position: ``(n, nsample, c)`` positional encodings.
        weight: ``(n, nsample, w_c)`` attention weights (channels shared ``c % w_c``).
        idx: ``(n, nsample)`` int32/int64 rows of ``input`` in ``[-1, n)``.

    Returns:
        ``(n, c)``, differentiable w.r.t. ``input``, ``position`` and ``weight``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> pos = torch.zeros(2, 2, 2)
        >>> w = torch.full((2, 2, 1), 0.5)
        >>> pointops.aggregation(x, pos, w, torch.tensor([[0, 1], [1, 1]], dtype=torch.int32)).tolist()
        [[2.0, 3.0], [3.0, 4.0]]
    """
    fn = "aggregation"
    _check_feat(fn, "input", input)
    idx = _check_idx(fn, "idx", idx, None, input.shape[0], input.device)
    return aggregate_neighbors(input, idx, weight, position)


def _check_pairs(fn, index_target, index_refer, n_target, n_refer, device):
    it = _check_idx(fn, "index_target", index_target, None, n_target, device, 1, "(m,)", allow_missing=False)
    ir = _check_idx(fn, "index_refer", index_refer, None, n_refer, device, 1, "(m,)", allow_missing=False)
    if it.shape[0] != ir.shape[0]:
        raise ValueError(f"{fn}: index_target and index_refer must have the same length, got {it.shape[0]} and {ir.shape[0]}")
    return it, ir


def attention_relation_step(query, key, weight, index_target, index_refer):
    """``out[r, g] = sum_c query[index_target[r], g, c] * key[index_refer[r], g, c] * weight[c]``.

    Args:
        query: ``(n, g, c)`` floating tensor.
        key: ``(n', g, c)`` floating tensor.
        weight: ``(c,)`` channel weights (all ones for plain scatter attention).
        index_target: ``(m,)`` int rows of ``query``.
        index_refer: ``(m,)`` int rows of ``key``.

    Returns:
        ``(m, g)``, differentiable w.r.t. ``query`` and ``key`` (the original's
        backward returns no gradient for ``weight``).

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> q = torch.ones(2, 1, 2)
        >>> k = torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]]])
        >>> i = torch.tensor([0, 0, 1], dtype=torch.int32)
        >>> j = torch.tensor([0, 1, 1], dtype=torch.int32)
        >>> pointops.attention_relation_step(q, k, torch.ones(2), i, j).tolist()
        [[3.0], [7.0], [7.0]]
    """
    fn = "attention_relation_step"
    V.check_tensor(fn, "query", query, 3, "(n, g, c)")
    V.check_tensor(fn, "key", key, 3, "(n, g, c)")
    if key.shape[1:] != query.shape[1:]:
        raise ValueError(f"{fn}: key must have shape (n, {query.shape[1]}, {query.shape[2]}) like query, got {V._shape(key)}")
    V.check_tensor(fn, "weight", weight, 1, "(c,)")
    if weight.shape[0] != query.shape[2]:
        raise ValueError(f"{fn}: weight must have shape ({query.shape[2]},), got {V._shape(weight)}")
    for name, t in (("query", query), ("key", key), ("weight", weight)):
        if t.dtype not in V.FLOAT_DTYPES:
            raise TypeError(f"{fn}: {name} must be a floating tensor, got {t.dtype}")
    _same_device(fn, "query", query, key=key, weight=weight)
    it, ir = _check_pairs(fn, index_target, index_refer, query.shape[0], key.shape[0], query.device)
    return (query.index_select(0, it) * key.index_select(0, ir) * weight.detach()).sum(-1)


def attention_fusion_step(weight, value, index_target, index_refer):
    """``out[index_target[r], g] += weight[r, g] * value[index_refer[r], g]``, ``(n, g, c)``.

    Args:
        weight: ``(m, g)`` attention weights.
        value: ``(n, g, c)`` floating values; the output has ``n`` rows too.
        index_target: ``(m,)`` int output rows in ``[0, n)``.
        index_refer: ``(m,)`` int rows of ``value``.

    Returns:
        ``(n, g, c)``, differentiable w.r.t. ``weight`` and ``value``.  The sums
        are :func:`pcgeom.group_reduce`'s fixed-order ones: the same bits on
        every device and run (the kernel adds atomically, in no fixed order).

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> v = torch.tensor([[[1.0]], [[10.0]]])
        >>> w = torch.tensor([[0.5], [0.5]])
        >>> i = torch.tensor([0, 0], dtype=torch.int32)
        >>> pointops.attention_fusion_step(w, v, i, torch.tensor([0, 1], dtype=torch.int32)).tolist()
        [[[5.5]], [[0.0]]]
    """
    fn = "attention_fusion_step"
    V.check_tensor(fn, "weight", weight, 2, "(m, g)")
    V.check_tensor(fn, "value", value, 3, "(n, g, c)")
    for name, t in (("weight", weight), ("value", value)):
        if t.dtype not in V.FLOAT_DTYPES:
            raise TypeError(f"{fn}: {name} must be a floating tensor, got {t.dtype}")
    if weight.shape[1] != value.shape[1]:
        raise ValueError(f"{fn}: weight must have shape (m, {value.shape[1]}) like value's groups, got {V._shape(weight)}")
    _same_device(fn, "value", value, weight=weight)
    it, ir = _check_pairs(fn, index_target, index_refer, value.shape[0], value.shape[0], value.device)
    if it.shape[0] != weight.shape[0]:
        raise ValueError(f"{fn}: weight must have shape ({it.shape[0]}, g) like index_target, got {V._shape(weight)}")
    contrib = weight.unsqueeze(-1) * value.index_select(0, ir)
    return group_reduce(contrib, it, value.shape[0], "sum")


# --------------------------------------------------------------------------- helpers of functions/utils.py


def knn_query_and_group(feat, xyz, offset=None, new_xyz=None, new_offset=None, idx=None, nsample=None,
                        with_xyz=False):
    """:func:`knn_query` (unless ``idx`` is given) followed by :func:`grouping`.

    Args:
        feat: ``(n, c)`` features.
        xyz: ``(n, 3)`` coordinates.
        offset: int ``(b,)`` cumulative end offsets of ``xyz`` (``None``: one cloud).
        new_xyz: ``(m, 3)`` query coordinates (default: ``xyz`` itself).
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``
            (default: self-query).
        idx: precomputed ``(m, nsample)`` indices, or ``None``.
        nsample: neighbours to query (required without ``idx``).
        with_xyz: prepend the relative coordinates.

    Returns:
        ``(grouped (m, nsample, [3 +] c), idx (m, nsample) int32)``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [1, 0, 0]])
        >>> g, idx = pointops.knn_query_and_group(torch.tensor([[1.0], [2.0]]), xyz, torch.tensor([2]), nsample=2)
        >>> g[:, :, 0].tolist(), idx.tolist()
        ([[1.0, 2.0], [2.0, 1.0]], [[0, 1], [1, 0]])
    """
    if idx is None:
        if nsample is None:
            raise ValueError("knn_query_and_group: nsample is required when idx is None")
        idx, _ = knn_query(nsample, xyz, offset, new_xyz, new_offset)
    return grouping(idx, feat, xyz, new_xyz, with_xyz), idx


def ball_query_and_group(feat, xyz, offset=None, new_xyz=None, new_offset=None, idx=None, max_radio=None,
                         min_radio=0, nsample=None, with_xyz=False):
    """:func:`ball_query` (unless ``idx`` is given) followed by :func:`grouping`.

    Args:
        feat: ``(n, c)`` features, as in :func:`knn_query_and_group`.
        xyz: ``(n, 3)`` coordinates, as in :func:`knn_query_and_group`.
        offset: int ``(b,)`` cumulative end offsets of ``xyz`` (required
            without ``idx``).
        new_xyz: ``(m, 3)`` query coordinates (default: ``xyz`` itself), as in
            :func:`knn_query_and_group`.
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``
            (default: self-query), as in :func:`knn_query_and_group`.
        idx: precomputed ``(m, nsample)`` indices, or ``None``, as in
            :func:`knn_query_and_group`.
        max_radio: the ball's outer radius, ``max_radius`` of :func:`ball_query`
            (the original's spelling; required without ``idx``).
        min_radio: the ball's inner radius, ``min_radius`` of :func:`ball_query`
            (the original's spelling; default 0).
        nsample: neighbours to keep (required without ``idx``).
        with_xyz: prepend the relative coordinates, as in
            :func:`knn_query_and_group`.

    Returns:
        ``(grouped (m, nsample, [3 +] c), idx (m, nsample) int32)``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [1, 0, 0], [5, 0, 0]])
        >>> _, idx = pointops.ball_query_and_group(torch.ones(3, 1), xyz, torch.tensor([3]), max_radio=2.0, nsample=2)
        >>> idx.tolist()
        [[0, 1], [1, 0], [2, -1]]
    """
    fn = "ball_query_and_group"
    if idx is None:
        if nsample is None or offset is None or max_radio is None or min_radio is None:
            raise ValueError(f"{fn}: nsample, offset, max_radio and min_radio are required when idx is None")
        idx, _ = ball_query(nsample, max_radio, min_radio, xyz, offset, new_xyz, new_offset)
    return grouping(idx, feat, xyz, new_xyz, with_xyz), idx


def query_and_group(nsample, xyz, new_xyz, feat, idx, offset, new_offset, dilation=0, with_feat=True,
                    with_xyz=True):
    """The original's dilated KNN grouping (``functions/utils.py``), without its loop over clouds.

    Without ``idx``, queries ``1 + (nsample - 1) * (dilation + 1)`` neighbours
    and keeps every ``(dilation + 1)``-th; a cloud with fewer points spreads
    its ``nsample`` picks with the original's "soft dilation"
    ``(n_b - 1) / (nsample - 1) - 1`` (column ``int((soft + 1) * i)``).  The
    gathers are the original's plain indexing: an ``idx = -1`` slot reads the
    **last** row of ``xyz`` / ``feat`` (Python's negative index).

    Args:
        nsample: int >= 1.
        xyz: ``(n, 3)`` coordinates.
        new_xyz: ``(m, 3)`` query coordinates, or ``None`` (= ``xyz``).
        feat: ``(n, c)`` features (may be ``None`` with ``with_feat=False``).
        idx: precomputed ``(m, nsample)`` indices, or ``None``.
        offset: int ``(b,)`` cumulative end offsets of ``xyz``.
        new_offset: int ``(b,)`` cumulative end offsets of ``new_xyz``.
        dilation: int >= 0.
        with_feat: ``False`` returns only ``idx``.
        with_xyz: prepend ``xyz[idx] - new_xyz``.

    Returns:
        ``idx`` (with ``with_feat=False``), else ``(grouped (m, nsample, [3 +] c), idx)``;
        differentiable w.r.t. ``xyz``, ``new_xyz`` and ``feat``.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.arange(6.0)[:, None] * torch.tensor([[1.0, 0, 0]])
        >>> off = torch.tensor([6])
        >>> pointops.query_and_group(2, xyz, xyz, None, None, off, off, dilation=1, with_feat=False).tolist()[0]
        [0, 2]
    """
    fn = "query_and_group"
    nsample = _nsample(fn, nsample)
    if new_xyz is None:
        new_xyz = xyz
    dilation = V.check_int(fn, "dilation", dilation, minimum=0)
    if idx is None:
        total = 1 + (nsample - 1) * (dilation + 1)
        idx_nd, _ = knn_query(total, xyz, offset, new_xyz, new_offset)
        with torch.no_grad():
            off = offsets_arg(fn, "offset", offset, xyz.shape[0], xyz.device)
            new_off = offsets_arg(fn, "new_offset", new_offset, new_xyz.shape[0], xyz.device)
            nb = torch.diff(off, prepend=off.new_zeros(1))[offsets_to_batch(new_off, new_xyz.shape[0])]
            i = torch.arange(nsample, device=xyz.device, dtype=torch.float64)
            if nsample == 1:
                cols = torch.zeros((new_xyz.shape[0], 1), dtype=torch.int64, device=xyz.device)
            else:
                soft = (nb.to(torch.float64) - 1) / (nsample - 1) - 1
                step = torch.where(nb < total, soft + 1, torch.full_like(soft, float(dilation + 1)))
                cols = torch.trunc(step[:, None] * i[None, :]).long()
            idx = torch.gather(idx_nd, 1, cols)
    else:
        _check_idx(fn, "idx", idx, new_xyz.shape[0], xyz.shape[0], xyz.device)
    if not with_feat:
        return idx
    _check_xyz(fn, "xyz", xyz)
    _check_xyz(fn, "new_xyz", new_xyz)
    _check_feat(fn, "feat", feat, xyz.shape[0])
    _same_device(fn, "xyz", xyz, new_xyz=new_xyz, feat=feat)
    li = idx.long()
    li = torch.where(li < 0, li + xyz.shape[0], li)  # Python's negative index, as the original
    m = new_xyz.shape[0]
    grouped_xyz = xyz.index_select(0, li.reshape(-1)).view(m, nsample, 3) - new_xyz.unsqueeze(1)
    grouped_feat = feat.index_select(0, li.reshape(-1)).view(m, nsample, feat.shape[1])
    if with_xyz:
        return torch.cat((grouped_xyz, grouped_feat), -1), idx
    return grouped_feat, idx


def offset2batch(offset):
    """Cumulative end offsets ``(b,)`` -> per-row cloud ids ``(n,)`` int64 (:func:`pcgeom.offsets_to_batch`).

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> pointops.offset2batch(torch.tensor([2, 3], dtype=torch.int32)).tolist()
        [0, 0, 1]
    """
    return offsets_to_batch(offset)


def batch2offset(batch):
    """Per-row cloud ids ``(n,)`` -> cumulative end offsets ``(b,)`` **int32**, as the original.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> pointops.batch2offset(torch.tensor([0, 0, 1])).tolist()
        [2, 3]
    """
    return batch_to_offsets(batch).int()
