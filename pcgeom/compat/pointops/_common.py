"""What the pointops stand-in's modules share: argument checks and the kernels' padding distance."""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom._rounding import sqrt_once
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


def dist_out(dist2: torch.Tensor, idx: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Euclidean distances in ``dtype`` (default: that of ``dist2``), ``PAD_DIST`` where ``idx < 0``.

    ``dist2`` should be in the accumulation dtype (:func:`acc_sq_dist`) when
    ``dtype`` is float16/bfloat16, so that the distance is rounded only once.
    """
    dtype = dist2.dtype if dtype is None else dtype
    return torch.where(idx < 0, torch.full((), PAD_DIST, dtype=dtype, device=dist2.device),
                       sqrt_once(dist2.clamp_min(0), dtype))
