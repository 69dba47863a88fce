"""What the pointops stand-in's modules share: argument checks and the kernels' padding distance."""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom.ops.packed import offsets_arg


PAD_DIST = 1e5  # sqrt of the kernels' 1e10 sentinel, exactly representable in float32
INT_DTYPES = V.INT_DTYPES


def check_xyz(fn: str, name: str, t) -> None:
    V.check_tensor(fn, name, t, 2, "(n, 3)")
    if t.shape[1] != 3:
        raise ValueError(f"{fn}: {name} must have shape (n, 3), got {V.shape_str(t)}")
    if t.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be float16, bfloat16, float32 or float64, got {t.dtype}")


def check_feat(fn: str, name: str, t, n: int | None = None, layout: str = "(n, c)") -> None:
    V.check_tensor(fn, name, t, 2, layout)
    if t.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if n is not None and t.shape[0] != n:
        raise ValueError(f"{fn}: {name} must have shape {layout} with {n} rows, got {V.shape_str(t)}")


def same_device(fn: str, ref_name: str, ref, **others) -> None:
    for name, t in others.items():
        if t is not None and t.device != ref.device:
            raise ValueError(f"{fn}: {name} must be on {ref.device} like {ref_name}, got {t.device}")


def check_idx(fn: str, name: str, idx, rows: int | None, n: int, device, ndim: int = 2,
               layout: str = "(m, nsample)", allow_missing: bool = True) -> torch.Tensor:
    """int32/int64 indices in [-1, n) (or [0, n)); one host sync for the range check."""
    V.check_tensor(fn, name, idx, ndim, layout)
    if idx.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{fn}: {name} must be int32 or int64, got {idx.dtype}")
    if rows is not None and idx.shape[0] != rows:
        raise ValueError(f"{fn}: {name} must have shape {layout} with {rows} rows, got {V.shape_str(idx)}")
    if idx.device != device:
        raise ValueError(f"{fn}: {name} must be on {device}, got {idx.device}")
    if not V.compiling() and idx.numel() > 0:
        lo, hi = torch.stack([idx.min(), idx.max()]).tolist()
        low = -1 if allow_missing else 0
        if lo < low or hi >= n:
            raise ValueError(f"{fn}: {name} values must be in [{low}, {n}), got min {lo}, max {hi}")
    return idx.long()


def check_nsample(fn: str, nsample) -> int:
    return V.check_int(fn, "nsample", nsample, minimum=1)


def query_args(fn, xyz, offset, new_xyz, new_offset):
    """The original's defaults (either query argument None -> self-query) and the offsets checks."""
    if new_xyz is None or new_offset is None:
        new_xyz, new_offset = xyz, offset
    check_xyz(fn, "xyz", xyz)
    check_xyz(fn, "new_xyz", new_xyz)
    same_device(fn, "xyz", xyz, new_xyz=new_xyz)
    if new_xyz.dtype != xyz.dtype:
        raise TypeError(f"{fn}: xyz and new_xyz must have the same dtype, got {xyz.dtype} and {new_xyz.dtype}")
    same = new_xyz is xyz and new_offset is offset
    off = offsets_arg(fn, "offset", offset, xyz.shape[0], xyz.device)
    new_off = off if same else offsets_arg(fn, "new_offset", new_offset, new_xyz.shape[0], xyz.device)
    if new_off.shape[0] != off.shape[0]:
        raise ValueError(f"{fn}: offset and new_offset must list the same number of clouds, "
                         f"got {off.shape[0]} and {new_off.shape[0]}")
    return xyz, off, (xyz if same else new_xyz), new_off


def acc_sq_dist(new_xyz: torch.Tensor, xyz: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``(m, k)`` squared distances from each ``new_xyz`` row to ``xyz[idx]`` in the accumulation dtype.

    float32 for float16/bfloat16/float32 coordinates, float64 for float64, summed
    ``sum_d (q_d - p_d)**2`` in coordinate order as pcgeom's kernels do, so the
    values equal the kernels' own before they round ``dist2`` to the input dtype.
    The half-precision callers need them: a distance taken from the rounded
    ``dist2`` would be rounded twice (18.1875 -> 18.25 -> sqrt 4.28125 where the
    distance 4.2648 rounds to 4.25).  Slots with ``idx < 0`` read row 0.
    """
    acc = torch.float64 if xyz.dtype == torch.float64 else torch.float32
    diff = new_xyz.to(acc)[:, None, :] - xyz.to(acc)[idx.clamp_min(0)]
    d2 = diff[..., 0] * diff[..., 0]
    for j in range(1, diff.shape[-1]):
        d2 = d2 + diff[..., j] * diff[..., j]
    return d2


# float16: 65504 + 32 / 2; bfloat16: (2 - 2**-7) * 2**127 + 2**120 / 2
_OVERFLOW_MID = {torch.float16: 65520.0, torch.bfloat16: 2.0 ** 128 - 2.0 ** 119}


def round_once(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 ``y`` rounded to nearest (ties to even) in ``dtype``, in one rounding.

    torch casts float64 to float16/bfloat16 through float32, which rounds twice
    when the float32 value lands exactly on a midpoint of the half-precision grid
    (``1 + 2**-8 + 2**-40`` becomes bfloat16 ``1.0``, not ``1 + 2**-7``).  There
    the float64 value says on which side of the midpoint the exact one lies.
    """
    if dtype not in (torch.float16, torch.bfloat16):
        return y.to(dtype)
    y32 = y.to(torch.float32).to(torch.float64)
    r = y.to(dtype)
    r64 = r.to(torch.float64)
    other = 2 * y32 - r64  # the grid neighbour across y32 when y32 is a midpoint
    mid = torch.isfinite(r64) & (r64 != y32) & (other.to(dtype).to(torch.float64) == other)
    # the midpoint between the largest finite value and the next power of two rounds to inf
    top = torch.isinf(r64) & (y32.abs() == _OVERFLOW_MID[dtype])
    other = torch.where(top, torch.copysign(torch.full((), torch.finfo(dtype).max, dtype=torch.float64,
                                                       device=y.device), y32), other)
    mid = mid | top
    return torch.where(mid & (y != y32) & ((y > y32) == (other > r64)), other.to(dtype), r)


def sqrt_once(dist2: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``sqrt(dist2)`` correctly rounded to ``dtype`` (``dist2`` float32 or float64).

    float32 and float64 roots are correctly rounded in their own dtype
    (:func:`pcgeom._validation.exact_sqrt`).  For float16/bfloat16 the root is taken in float64 and
    rounded once (:func:`round_once`): a float32 ``sqrt`` followed by a cast
    rounds twice (bfloat16 ``sqrt(18.1875)`` would be 4.28125, not 4.25).  The
    exact root of a float32 value is exact or farther from any half-precision
    midpoint than a float64 rounding, so one more rounding is exact.
    """
    if dtype in (torch.float16, torch.bfloat16):
        return round_once(V.exact_sqrt(dist2.to(torch.float64)), dtype)
    return V.exact_sqrt(dist2.to(dtype))


def dist_out(dist2: torch.Tensor, idx: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Euclidean distances in ``dtype`` (default: that of ``dist2``), ``PAD_DIST`` where ``idx < 0``.

    ``dist2`` should be in the accumulation dtype (:func:`acc_sq_dist`) when
    ``dtype`` is float16/bfloat16, so that the distance is rounded only once.
    """
    dtype = dist2.dtype if dtype is None else dtype
    return torch.where(idx < 0, torch.full((), PAD_DIST, dtype=dtype, device=dist2.device),
                       sqrt_once(dist2.clamp_min(0), dtype))
