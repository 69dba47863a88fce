"""Distances rounded exactly once, as pcgeom's kernels round them.

The kernels sum squared distances in the accumulation dtype (float32, or
float64 for float64 input) in coordinate order and round the result once to
the input dtype.  The stand-ins that return Euclidean distances (pointops,
pointnet2_ops, KNN_CUDA) recompute the sums in that order (:func:`acc_sq_dist`)
and take a root rounded once (:func:`sqrt_once`), so no value is rounded twice
and the CPU, CUDA and pure-torch paths agree bit for bit.
"""

from __future__ import annotations

import torch


def exact_sqrt(x: torch.Tensor) -> torch.Tensor:
    """Correctly rounded square root of a float32 or float64 tensor, in its dtype; no gradient.

    torch's CPU ``sqrt`` (float32 and float64 alike, vectorised) is off by one
    ulp on about 0.7% of inputs (``sqrt(2.0)`` gives ``1.414213562373095``);
    numpy's is the IEEE operation, as is CUDA's, so CPU tensors go through numpy.
    """
    if x.device.type == "cpu" and not torch.compiler.is_compiling():
        import numpy as np

        return torch.from_numpy(np.sqrt(x.detach().contiguous().numpy()))
    return x.sqrt()


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
    (:func:`exact_sqrt`).  For float16/bfloat16 the root is taken in float64 and
    rounded once (:func:`round_once`): a float32 ``sqrt`` followed by a cast
    rounds twice (bfloat16 ``sqrt(18.1875)`` would be 4.28125, not 4.25).  The
    exact root of a float32 value is exact or farther from any half-precision
    midpoint than a float64 rounding, so one more rounding is exact.
    """
    if dtype in (torch.float16, torch.bfloat16):
        return round_once(exact_sqrt(dist2.to(torch.float64)), dtype)
    return exact_sqrt(dist2.to(dtype))


def ordered_sum(x: torch.Tensor) -> torch.Tensor:
    """float64 sum over the last axis, one element after the other in index order, starting from 0.

    A sum in a fixed order gives the same bits wherever that order is kept:
    torch's CPU ``cumsum``, numpy's ``cumsum`` and ONNX ``CumSum`` in
    onnxruntime all add sequentially, so an exported ``chamfer_distance`` (whose
    means this sums) returns the eager value exactly; ``Tensor.sum`` /
    ``mean`` and ``ReduceSum`` / ``ReduceMean`` each pick their own tree.
    float32 values are exact in float64, so only the additions round.  An
    empty axis sums to 0 (the leading 0 also makes the last element exist).
    """
    return torch.cumsum(torch.nn.functional.pad(x.to(torch.float64), (1, 0)), dim=-1)[..., -1]
