"""The raw ``pointops_cuda`` calling convention both families share: int sizes, preallocated outputs, checks.

POSTECH's (:mod:`.postech`) and PointWeb's (:mod:`.pointweb`) extensions take sizes as ints and fill the
caller's tensors; these check the sizes, inputs, indices and outputs and write into the outputs.
"""

from __future__ import annotations

import torch

from pcgeom import _validation as V


def int_arg(fn, name, v, minimum=0):
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise TypeError(f"{fn}: {name} must be an int, got a tensor of shape {V.shape_str(v)}")
        v = int(v)
    return V.check_int(fn, name, v, minimum=minimum)


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def out_arg(fn, name, t, shape, ref_device, dtype=None):
    """A preallocated output: the shape (or that many elements), device and dtype the kernel writes."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a preallocated torch.Tensor of shape {shape}, got {type(t).__name__}")
    # The kernels write through the data pointer, so any tensor of that many
    # elements works there; a non-contiguous one only in the logical shape.
    if tuple(t.shape) != tuple(shape) and (t.numel() != numel(shape) or not t.is_contiguous()):
        raise ValueError(f"{fn}: {name} must have shape {tuple(shape)}, got {V.shape_str(t)}"
                         + ("" if t.is_contiguous() else " (non-contiguous)"))
    if t.device != ref_device:
        raise ValueError(f"{fn}: {name} must be on {ref_device}, got {t.device}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"{fn}: {name} must be {dtype}, got {t.dtype}")
    if dtype is None and t.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be a floating tensor, got {t.dtype}")
    return t.view(shape) if t.is_contiguous() else t


def write(dst, value, accumulate=False):
    """Writes into the caller's tensor (``copy_`` / ``add_``), whatever its memory layout."""
    with torch.no_grad():
        if accumulate:
            dst.add_(value.to(dst.dtype).view(dst.shape))
        else:
            dst.copy_(value.view(dst.shape))


def feat_arg(fn, name, t, shape, device=None):
    """A floating input of ``shape`` (``None``: any size there), on ``device`` when given."""
    V.check_tensor(fn, name, t, len(shape), "(" + ", ".join(str(s) for s in shape) + ")")
    if t.dtype not in V.FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name} must be a floating tensor, got {t.dtype}")
    for i, s in enumerate(shape):
        if s is not None and t.shape[i] != s:
            raise ValueError(f"{fn}: {name} must have shape {tuple(shape)}, got {V.shape_str(t)}")
    if device is not None and t.device != device:
        raise ValueError(f"{fn}: {name} must be on {device}, got {t.device}")


def idx_arg(fn, name, idx, shape, n, device):
    """int32/int64 indices with ``prod(shape)`` elements in ``[0, n)``, as int64 of ``shape`` (one host sync)."""
    if not isinstance(idx, torch.Tensor) or idx.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{fn}: {name} must be an int32 tensor of shape {shape}, got "
                        f"{idx.dtype if isinstance(idx, torch.Tensor) else type(idx).__name__}")
    if idx.numel() != numel(shape):
        raise ValueError(f"{fn}: {name} must have shape {shape}, got {V.shape_str(idx)}")
    if idx.device != device:
        raise ValueError(f"{fn}: {name} must be on {device}, got {idx.device}")
    idx = idx.reshape(shape).long()
    if idx.numel():
        lo, hi = torch.stack([idx.min(), idx.max()]).tolist()
        if lo < 0 or hi >= n:
            raise ValueError(f"{fn}: {name} values must be in [0, {n}) (rows of the input), got min {lo}, max {hi}")
    return idx
