"""Space-filling-curve order of packed point clouds: :func:`serialize`.

The codes are bit-compatible with Point Transformer V3 / Pointcept's
``Point.serialization`` (``serialization/default.py`` ``encode``) for the same
grid coordinates and depth:

* ``order="z"``: Morton code, bit ``i`` of x / y / z goes to bit
  ``3i+2`` / ``3i+1`` / ``3i`` of the code;
* ``order="hilbert"``: Skilling's transposed Hilbert index (x the most
  significant axis of every bit triple), Gray-decoded over all ``3 * depth``
  bits;
* ``"z-trans"`` / ``"hilbert-trans"``: the same with x and y swapped;
* the cloud id sits above the curve: ``code = batch << (3 * depth) | curve``.

Written from the definitions with vectorised integer ops: five masked shifts
for Morton; for Hilbert one table look-up per level (Skilling's transform
written as a 48-state machine), no per-bit tensors.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import torch

from pcgeom import _validation as V
from pcgeom.ops.packed import offsets_arg

ORDERS = ("z", "z-trans", "hilbert", "hilbert-trans")
MAX_DEPTH = 21


class SerializedOrder(NamedTuple):
    """Result of :func:`serialize`.

    ``code``, ``order`` and ``inverse`` are int64, ``(N,)`` for one curve or
    ``(K, N)`` for a sequence of ``K`` curves.  ``points[order]`` is sorted by
    code (stable: equal codes keep the input order) and ``order[inverse] ==
    arange(N)``.  ``depth`` is the number of bits per axis used.
    """

    code: torch.Tensor
    order: torch.Tensor
    inverse: torch.Tensor
    depth: int


def _spread3(x: torch.Tensor) -> torch.Tensor:
    """Bits of x (< 2**21; < 2**10 for int32) moved from position i to 3i."""
    if x.dtype == torch.int32:
        x = x & 0x3FF
        x = (x | (x << 16)) & 0x30000FF
        x = (x | (x << 8)) & 0x300F00F
        x = (x | (x << 4)) & 0x30C30C3
        return (x | (x << 2)) & 0x9249249
    x = x & 0x1FFFFF
    x = (x | (x << 32)) & 0x1F00000000FFFF
    x = (x | (x << 16)) & 0x1F0000FF0000FF
    x = (x | (x << 8)) & 0x100F00F00F00F00F
    x = (x | (x << 4)) & 0x10C30C30C30C30C3
    x = (x | (x << 2)) & 0x1249249249249249
    return x


def morton_code(x, y, z):
    return (_spread3(x) << 2) | (_spread3(y) << 1) | _spread3(z)


def _hilbert_tables():
    """Skilling's per-level update as a state machine.

    Processing the levels from the most significant bit, everything done to
    the lower bits so far is a signed permutation of the three axes (48
    states).  For state ``s`` and the raw bits ``(x_b, y_b, z_b)`` of a level,
    ``GRAY[s, oct]`` is the level's transformed triple (axis 0 high) and
    ``NEXT[s, oct]`` the state for the levels below.
    """
    import itertools

    states = [(p, f) for p in itertools.permutations(range(3)) for f in itertools.product((0, 1), repeat=3)]
    sid = {st: i for i, st in enumerate(states)}
    gray = torch.zeros(len(states) * 8, dtype=torch.int64)
    nxt = torch.zeros(len(states) * 8, dtype=torch.int64)
    for i, (perm, flip) in enumerate(states):
        for octant in range(8):
            raw = ((octant >> 2) & 1, (octant >> 1) & 1, octant & 1)
            t = [raw[perm[a]] ^ flip[a] for a in range(3)]
            perm2, flip2 = list(perm), list(flip)
            for a in range(3):
                if t[a]:
                    flip2[0] ^= 1  # invert axis 0 below this level
                elif a:
                    perm2[0], perm2[a] = perm2[a], perm2[0]  # exchange axes 0 and a below
                    flip2[0], flip2[a] = flip2[a], flip2[0]
            gray[i * 8 + octant] = (t[0] << 2) | (t[1] << 1) | t[2]
            nxt[i * 8 + octant] = sid[(tuple(perm2), tuple(flip2))] * 8  # row offset of the next state
    return gray, nxt, sid[((0, 1, 2), (0, 0, 0))]


_GRAY, _NEXT, _IDENTITY = _hilbert_tables()
_TABLES = {}


def hilbert_code(x, y, z, depth: int):
    """Hilbert index of integer coordinates in ``[0, 2**depth)`` (int32 for depth <= 10)."""
    dev = x.device
    if (dev, x.dtype) not in _TABLES:
        _TABLES[dev, x.dtype] = (_GRAY.to(dev, x.dtype), _NEXT.to(dev, x.dtype))
    gray_t, next_t = _TABLES[dev, x.dtype]
    state = torch.full_like(x, _IDENTITY * 8)
    h = torch.zeros_like(x)
    for b in range(depth - 1, -1, -1):
        octant = (((x >> b) & 1) << 2) | (((y >> b) & 1) << 1) | ((z >> b) & 1)
        key = state + octant
        h = (h << 3) | gray_t[key]
        if b:
            state = next_t[key]
    # h is the Gray code of the index: decode by prefix xor.
    s = 1
    while s < 3 * depth:
        h = h ^ (h >> s)
        s <<= 1
    return h


def _curve(g: torch.Tensor, order: str, depth: int) -> torch.Tensor:
    x, y, z = g[:, 0], g[:, 1], g[:, 2]
    if order.endswith("-trans"):
        x, y = y, x
    if order.startswith("z"):
        return morton_code(x, y, z)
    return hilbert_code(x, y, z, depth)


def grid_coordinates(points: torch.Tensor, voxel_size) -> torch.Tensor:
    """PTv3's grid coordinates: ``trunc((p - p.min(0)) / voxel_size)`` in the
    points' dtype (the minimum is over **all** clouds), as int64."""
    g = torch.div(points - points.min(0).values, voxel_size, rounding_mode="trunc")
    return g.to(torch.int64)


def serialize(points=None, voxel_size=None, *, grid_coord=None, offsets=None, order="z", depth=None) -> SerializedOrder:
    """Space-filling-curve codes of packed 3-D points and the permutation that sorts them.

    Give either ``points`` with ``voxel_size`` (grid coordinates are then
    ``trunc((points - points.min(0)) / voxel_size)`` in the points' dtype, as
    PTv3 computes them when ``grid_coord`` is missing), or integer
    ``grid_coord`` directly (e.g. from Pointcept's ``GridSample``).

    Args:
        points: ``(N, 3)`` floating packed points, or ``None`` with ``grid_coord``.
        voxel_size: float > 0 (PTv3's ``grid_size``).
        grid_coord: ``(N, 3)`` integer voxel coordinates, all in ``[0, 2**depth)``.
        offsets: optional int ``(B,)`` cumulative end offsets; the cloud id
            goes into the high bits, so sorting never mixes clouds.
        order: ``"z"``, ``"z-trans"``, ``"hilbert"``, ``"hilbert-trans"``, or a
            sequence of them (PTv3 serializes with several orders at once).
        depth: bits per axis, ``1..21``; ``None`` is PTv3's adaptive
            ``(grid_coord.max() + 1).bit_length()``.  PTv3 itself allows up
            to 16.  ``3 * depth + bit_length(B)`` must be at most 63.

    Returns:
        :class:`SerializedOrder` ``(code, order, inverse, depth)``.  Unlike
        PTv3 (``torch.argsort``, unstable) points with equal codes stay in
        input order, so the permutation is deterministic on every device.

    Raises:
        ValueError: neither or both of ``points`` with ``voxel_size`` and ``grid_coord``; ``points`` not a finite
            floating ``(N, 3)`` tensor; ``voxel_size <= 0``; ``grid_coord`` not a non-negative integer ``(N, 3)``
            tensor; an unknown ``order``; ``depth`` outside ``[1, 21]`` or too small for the grid; codes that would
            need more than 63 bits; bad ``offsets``.

    Example:
        >>> import torch, pcgeom
        >>> g = torch.tensor([[1, 0, 0], [0, 0, 1], [0, 1, 0]])
        >>> s = pcgeom.serialize(grid_coord=g, order="z", depth=1)
        >>> s.code.tolist(), s.order.tolist()
        ([4, 1, 2], [1, 2, 0])
    """
    fn = "serialize"
    orders = [order] if isinstance(order, str) else list(order)
    if not orders or any(o not in ORDERS for o in orders):
        raise ValueError(f"{fn}: order must be one of {ORDERS} or a sequence of them, got {order!r}")
    if grid_coord is None:
        if points is None or voxel_size is None:
            raise ValueError(f"{fn}: give points and voxel_size, or grid_coord")
        V.check_tensor(fn, "points", points, 2, "(N, 3)")
        if points.dtype not in V.FLOAT_DTYPES or points.shape[1] != 3:
            raise ValueError(f"{fn}: points must be a floating (N, 3) tensor, got {points.dtype} {tuple(points.shape)}")
        vs = V.check_float(fn, "voxel_size", voxel_size, minimum=0.0)
        if vs == 0.0:
            raise ValueError(f"{fn}: voxel_size must be > 0, got 0.0")
        if points.shape[0] and not bool(torch.isfinite(points).all()):
            raise ValueError(f"{fn}: points must be finite")
        if points.shape[0]:
            # Check the extent before the int64 cast: a float past 2**63 casts to garbage (int64's minimum),
            # which used to surface as "grid_coord must be >= 0" for a grid_coord the caller never gave.
            span = torch.div(points - points.min(0).values, vs, rounding_mode="trunc").max().item()
            if not span < 1 << MAX_DEPTH:
                raise ValueError(
                    f"{fn}: points / voxel_size span {span:g} voxels on an axis; depth is at most {MAX_DEPTH} "
                    f"bits (< {1 << MAX_DEPTH} voxels): use a larger voxel_size")
        g = grid_coordinates(points, vs) if points.shape[0] else points.new_zeros((0, 3), dtype=torch.int64)
    else:
        if points is not None or voxel_size is not None:
            raise ValueError(f"{fn}: give grid_coord alone, or points with voxel_size, not both")
        V.check_tensor(fn, "grid_coord", grid_coord, 2, "(N, 3)")
        if grid_coord.is_floating_point() or grid_coord.dtype == torch.bool or grid_coord.shape[1] != 3:
            raise ValueError(f"{fn}: grid_coord must be an integer (N, 3) tensor, got {grid_coord.dtype} {tuple(grid_coord.shape)}")
        g = grid_coord.to(torch.int64)
    N = g.shape[0]
    dev = g.device
    off = offsets_arg(fn, "offsets", offsets, N, dev)
    B = off.shape[0]
    lo, hi = torch.stack([g.min(), g.max()]).tolist() if N else (0, 0)
    if lo < 0:
        raise ValueError(f"{fn}: grid_coord must be >= 0, got min {lo}")
    if depth is None:
        depth = max(1, int(hi + 1).bit_length())
    if isinstance(depth, bool) or not isinstance(depth, numbers.Integral) or not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"{fn}: depth must be an int in [1, {MAX_DEPTH}], got {depth!r}")
    depth = int(depth)
    if hi >= 1 << depth:
        raise ValueError(f"{fn}: grid_coord must be < 2**depth = {1 << depth}, got max {hi}")
    if 3 * depth + int(B).bit_length() > 63:
        raise ValueError(f"{fn}: 3 * depth + bit_length(B) must be <= 63, got depth={depth}, B={B}")
    # Codes that fit in 31 bits are computed and sorted in int32: half the
    # memory traffic, and sorting int32 is about twice as fast.
    small = 3 * depth + int(B - 1).bit_length() <= 31
    gs = g.to(torch.int32) if small else g
    codes = torch.stack([_curve(gs, o, depth) for o in orders])
    if B > 1:
        bid = torch.searchsorted(off, torch.arange(N, device=dev), right=True).to(codes.dtype)
        codes |= bid << (3 * depth)
    perm = torch.sort(codes, dim=1, stable=True).indices
    codes = codes.to(torch.int64)
    inv = torch.empty_like(perm)
    inv.scatter_(1, perm, torch.arange(N, device=dev).expand(len(orders), N))
    if isinstance(order, str):
        codes, perm, inv = codes[0], perm[0], inv[0]
    return SerializedOrder(codes, perm, inv, depth)
