"""Voxel-grid subsampling of packed point clouds: :func:`grid_subsample`.

Pure vectorised torch (one stable sort of the points plus one of the kept
voxels), deterministic and bit-identical on every device: voxel coordinates are
computed in float64, every tie is broken by point index, and no reduction
depends on the order of atomic adds (the per-voxel reductions are
:mod:`pcgeom.segment`'s).
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple, Optional

import torch

from pcgeom import _validation as V
from pcgeom.ops.packed import offsets_arg
from pcgeom.segment import extreme_values, grouped_rows

_REDUCE = ("first", "mean", "nearest_to_center")
# The table path (no sort) is used when the box of occupied cells has at most
# max(_DENSE_MIN, _DENSE_PER_POINT * N) and at most _DENSE_MAX cells (8 bytes each).
_DENSE_MIN = 1 << 20
_DENSE_PER_POINT = 32
_DENSE_MAX = 1 << 26


class GridSubsampleResult(NamedTuple):
    """Result of :func:`grid_subsample`; see there for shapes and order."""

    points: torch.Tensor
    cluster: torch.Tensor
    offsets: torch.Tensor
    index: torch.Tensor
    features: Optional[torch.Tensor]


def _per_dim(fn, name, v, D, device, positive):
    if isinstance(v, torch.Tensor):
        t = v.detach().to(device=device, dtype=torch.float64)
    elif isinstance(v, numbers.Real) and not isinstance(v, bool):
        t = torch.tensor(float(v), dtype=torch.float64, device=device)
    else:
        try:
            t = torch.tensor([float(e) for e in v], dtype=torch.float64, device=device)
        except Exception as exc:
            raise TypeError(f"{fn}: {name} must be a float or a sequence/tensor of {D} floats, got {type(v).__name__}") from exc
    return t


def _voxel_size(fn, voxel_size, D, device):
    t = _per_dim(fn, "voxel_size", voxel_size, D, device, True)
    if t.dim() == 0:
        t = t.expand(D)
    if t.shape != (D,):
        raise ValueError(f"{fn}: voxel_size must be a float or have shape ({D},), got {tuple(t.shape)}")
    if not bool(((t > 0) & torch.isfinite(t)).all()):
        raise ValueError(f"{fn}: voxel_size must be finite and > 0, got {t.tolist()}")
    return t


def voxel_coords(fn, points, voxel_size, offsets, start):
    """``(cloud id (N,) or None for one cloud, voxel coords (N, D) as integral
    float64, start (B, D) float64, size (D,) float64)``.  Non-finite points
    make the coordinates non-finite; :func:`_linear_key` reports them."""
    N, D = points.shape
    dev = points.device
    size = _voxel_size(fn, voxel_size, D, dev)
    B = offsets.shape[0]
    # One cloud (the common case) skips the per-point cloud id gathers.
    bid = torch.searchsorted(offsets, torch.arange(N, device=dev), right=True) if B > 1 else None
    p = points.detach()
    if start is None:
        if bid is None:
            # min in the input dtype then widened: the same value, a narrower pass.
            st = p.min(0, keepdim=True).values.to(torch.float64) if N else p.new_zeros((1, D), dtype=torch.float64)
        else:
            # Per-cloud minimum (empty clouds: 0); bid is sorted (clouds are contiguous).
            st = extreme_values(p.to(torch.float64), bid, B, "min")
    else:
        st = _per_dim(fn, "start", start, D, dev, False)
        if st.dim() == 0:
            st = st.expand(D)
        if st.dim() == 1:
            if st.shape[0] != D:
                raise ValueError(f"{fn}: start must be a float, ({D},) or ({B}, {D}), got {tuple(st.shape)}")
            st = st[None].expand(B, D)
        elif st.shape != (B, D):
            raise ValueError(f"{fn}: start must be a float, ({D},) or ({B}, {D}), got {tuple(st.shape)}")
        if not bool(torch.isfinite(st).all()):
            raise ValueError(f"{fn}: start must be finite")
    # Type promotion widens p to float64 exactly inside the subtraction.
    t = torch.sub(p, st if bid is None else st[bid])
    return bid, t.div_(size).floor_(), st, size


_NO_VOXEL = "no voxel holds them: drop them first, e.g. points[torch.isfinite(points).all(1)]"


def _non_finite_voxels(fn, points, bid, t, st, size):
    """The error for non-finite voxel coordinates: non-finite points, or finite
    points whose ``(p - start) / voxel_size`` is past float64's range."""
    err = V.non_finite_points(fn, "points", points, _NO_VOXEL)
    if err is not None:
        return err
    row, axis = (int(i) for i in (~torch.isfinite(t)).nonzero()[0])
    cloud = 0 if bid is None else int(bid[row])
    p = float(points[row, axis])
    return ValueError(
        f"{fn}: the voxel coordinates (points - start) / voxel_size of finite points overflow float64 "
        f"(cloud {cloud}, axis {axis}: point {row} at {p!r}, start {float(st[cloud, axis])!r}, "
        f"voxel_size {float(size[axis])!r}); no voxel index can hold them: use a larger voxel_size "
        f"(or a start nearer the points)"
    )


def _linear_key(fn, bid, t, B, explain=None):
    """A unique key per (cloud, voxel) whose order is (cloud, v_0, v_1, ...), and the number of cells.

    The box of occupied cells is linearised with one float64 matrix-vector
    product (exact: every value is an integer below 2**53); the key is int32
    when the box fits (sorting int32 is about twice as fast), else int64, and
    for boxes beyond 2**53 cells the rows are ranked instead -- as the float64
    values themselves (exact integers; voxel coordinates can lie past 2**63,
    where an int64 cast would merge distinct voxels).  ``explain()`` builds the
    error for non-finite coordinates.
    """
    N, D = t.shape
    lo, hi = torch.aminmax(t, dim=0)
    bounds = torch.cat([lo, hi]).tolist()
    if not all(math.isfinite(b) for b in bounds):
        if explain is not None:
            raise explain()
        raise ValueError(f"{fn}: points must be finite (NaN or inf coordinates: {_NO_VOXEL})")
    lo_l, hi_l = bounds[:D], bounds[D:]
    # Python ints: h - l in float64 could round or overflow past 2**53.
    ext = [int(h) - int(l) + 1 for l, h in zip(lo_l, hi_l)]
    cells = math.prod(ext)
    total = cells * (1 if bid is None else B)
    if total >= 2**53:
        v = t + 0.0  # -0.0 -> +0.0: one voxel, one key
        rows = v if bid is None else torch.cat([bid[:, None].to(torch.float64), v], 1)
        _, key = torch.unique(rows, dim=0, return_inverse=True)
        return key, total
    w = [math.prod(ext[d + 1:]) for d in range(D)]
    bias = torch.tensor(-float(sum(wi * li for wi, li in zip(w, lo_l))), dtype=torch.float64, device=t.device)
    key = torch.addmv(bias, t, torch.tensor(w, dtype=torch.float64, device=t.device))
    if bid is not None:
        key += bid.to(torch.float64) * cells
    return key, total


def grid_subsample(points, voxel_size, *, offsets=None, reduce="first", start=None, features=None) -> GridSubsampleResult:
    """Keep one point (or the mean) per occupied voxel of a regular grid.

    Point ``p`` of cloud ``b`` falls in voxel ``floor((p - start[b]) / voxel_size)``
    (per coordinate, computed in float64; any finite value is a voxel, also
    past 2**63).  Clouds never share a voxel.  Finite points whose voxel
    coordinate overflows float64 (``voxel_size`` tiny next to the cloud) are
    a ``ValueError`` naming the cloud, axis, point, start and voxel size;
    points with NaN or inf coordinates are a ``ValueError`` saying how many
    there are and the first one's index.

    Args:
        points: ``(N_total, D)`` float16/bfloat16/float32/float64 packed points,
            finite.
        voxel_size: float > 0, or ``D`` floats (one per axis).
        offsets: optional int ``(B,)`` cumulative end offsets (Pointcept's
            ``offset``); ``None`` is one cloud.
        reduce: what represents a voxel --

            * ``"first"``: its lowest-index point;
            * ``"mean"``: the mean of its points (summed in float64, rounded
              once to the input dtype);
            * ``"nearest_to_center"``: its point nearest to the voxel centre
              ``start + (v + 0.5) * voxel_size`` (float64 squared distance,
              **ties to the lower index**).
        start: grid origin: ``None`` (default) is each cloud's coordinate-wise
            minimum (torch_cluster's ``grid_cluster`` convention); a float,
            ``(D,)`` or per-cloud ``(B, D)``.  ``start=0`` puts voxel
            boundaries at multiples of ``voxel_size`` (Pointcept's
            ``GridSample``).
        features: optional ``(N_total, C)`` per-point features reduced the same
            way (``"mean"`` needs floating features).

    Returns:
        :class:`GridSubsampleResult` ``(points, cluster, offsets, index, features)``:

        * ``points (V, D)``: the kept points in the input dtype.  **Order**:
            cloud after cloud, and within a cloud the voxels in the order of
            their first (lowest-index) point -- so with ``"first"`` the kept
            points are a subsequence of the input;
        * ``cluster (N_total,)`` int64: the voxel (row of ``points``) of every
            input point;
        * ``offsets (B,)`` int64: cumulative end offsets of the kept points
            per cloud;
        * ``index (V,)`` int64: the input row chosen per voxel (``"mean"``:
            the voxel's first point);
        * ``features (V, C)`` or ``None``.

        ``points`` (``"mean"``) and ``features`` are differentiable; the rest
        is integer.

    Example:
        >>> import torch, pcgeom
        >>> pts = torch.tensor([[0.0, 0], [0.4, 0.1], [1.2, 0], [0.1, 0.3]])
        >>> r = pcgeom.grid_subsample(pts, 1.0)
        >>> r.points.tolist(), r.cluster.tolist()
        ([[0.0, 0.0], [1.2000000476837158, 0.0]], [0, 0, 1, 0])
    """
    fn = "grid_subsample"
    V.check_tensor(fn, "points", points, 2, "(N_total, D)")
    if points.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: points must be float16, bfloat16, float32 or float64, got {points.dtype}")
    if reduce not in _REDUCE:
        raise ValueError(f"{fn}: reduce must be one of {_REDUCE}, got {reduce!r}")
    N, D = points.shape
    dev = points.device
    off = offsets_arg(fn, "offsets", offsets, N, dev)
    B = off.shape[0]
    if features is not None:
        V.check_tensor(fn, "features", features, 2, "(N_total, C)")
        if features.shape[0] != N or features.device != dev:
            raise ValueError(f"{fn}: features must have shape ({N}, C) on {dev}, got {tuple(features.shape)} on {features.device}")
        if reduce == "mean" and not features.is_floating_point():
            raise TypeError(f"{fn}: reduce='mean' needs floating features, got {features.dtype}")
    bid, t, st, size = voxel_coords(fn, points, voxel_size, off, start)
    if N == 0:
        e = torch.zeros(0, dtype=torch.int64, device=dev)
        return GridSubsampleResult(points[:0], e, torch.zeros(B, dtype=torch.int64, device=dev), e,
                                   None if features is None else features[:0])
    key, total = _linear_key(fn, bid, t, B, lambda: _non_finite_voxels(fn, points, bid, t, st, size))
    if total <= max(_DENSE_MIN, _DENSE_PER_POINT * N) and total <= _DENSE_MAX:
        # Few enough cells for a table: the lowest index per voxel by a
        # scatter-min, no sort at all.
        key = key.to(torch.int64)
        ar = torch.arange(N, device=dev)
        table = torch.full((total,), N, dtype=torch.int64, device=dev)
        table.scatter_reduce_(0, key, ar, "amin")
        firstp = table.index_select(0, key)
        del table
        is_first = firstp == ar
        cluster = torch.cumsum(is_first, 0).sub_(1).index_select(0, firstp)
        first = is_first.nonzero()[:, 0]
        order = None
    else:
        # The stable sort puts each voxel's lowest index first.
        key = key.to(torch.int32 if total < 2**31 else torch.int64)
        sk, order = torch.sort(key, stable=True)
        head = torch.ones(N, dtype=torch.bool, device=dev)
        head[1:] = sk[1:] != sk[:-1]
        seg = torch.cumsum(head, 0) - 1  # voxel id in key order, per sorted point
        first = order[head]  # lowest index per voxel, key order
        # Renumber voxels by first appearance with a scan over the input order
        # (clouds are contiguous, so this also groups them by cloud).
        is_first = torch.zeros(N, dtype=torch.bool, device=dev)
        is_first[first] = True
        rank_at = torch.cumsum(is_first, 0) - 1
        cluster = torch.empty(N, dtype=torch.int64, device=dev)
        cluster[order] = rank_at[first][seg]
        first = is_first.nonzero()[:, 0]
    nv = first.shape[0]
    if reduce == "first":
        index = first
    elif reduce == "nearest_to_center":
        p = points.detach().to(torch.float64)
        centre = (st if bid is None else st[bid]) + (t + 0.5) * size
        diff = p - centre
        d = diff[:, 0] * diff[:, 0]
        for c in range(1, D):
            d = d + diff[:, c] * diff[:, c]
        # The lowest point index attaining each voxel's minimum distance.
        _, arg, _ = grouped_rows(fn, d[:, None], cluster, nv, "min", True)
        index = arg[:, 0]
    else:
        index = first
    if reduce == "mean":
        counts = torch.bincount(cluster, minlength=nv).to(torch.float64)[:, None]
        out = _segment_mean(points, cluster, nv, counts)
        feats = None if features is None else _segment_mean(features, cluster, nv, counts)
    else:
        out = points.index_select(0, index)
        feats = None if features is None else features.index_select(0, index)
    if bid is None:
        kept = torch.full((1,), nv, dtype=torch.int64, device=dev)
    else:
        kept = torch.cumsum(torch.bincount(bid[index], minlength=B), 0)
    return GridSubsampleResult(out, cluster, kept, index, feats)


def _segment_mean(x, cluster, nv, counts):
    # Summed in float64 by pcgeom.segment (sorted, one sequential pass per
    # voxel, no atomics): the same bits on every run; float16/bfloat16/float32
    # sums are exact unless one voxel mixes magnitudes more than 2**29 apart.
    acc, _, _ = grouped_rows("grid_subsample", x.to(torch.float64), cluster, nv, "sum", False)
    return (acc / counts).to(x.dtype)
