"""Exact power-of-two rescaling, so float32 math works at every scale float32 holds.

Coordinates near 1e+-20 and beyond are finite in float32 (1e+-160 in
float64), but their squares (distances, covariances) overflow or underflow.  Multiplying by a power of two
is exact (short of the subnormal range) and commutes with rounding, so a
search or a covariance done on a rescaled copy gives the answers of the
unscaled math wherever those were representable, and representable answers
where they were not.  Shared by the outlier filters and the normals
(:mod:`pcgeom.outliers`, :mod:`pcgeom.normals`) and by the PCA reference
(:func:`pcgeom.ops.reference.pca_neighbourhoods`).
"""

from __future__ import annotations

import torch


def binary_exponent(m: torch.Tensor) -> torch.Tensor:
    """int64 ``e`` with ``m * 2**-e`` in ``[0.5, 1)`` for finite ``m > 0`` (``frexp``; 0 where ``m`` is 0)."""
    return torch.frexp(m)[1].to(torch.int64)


def times_power_of_two(x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """``x * 2**e`` (``e`` an int tensor broadcastable to ``x``), exact unless the result is subnormal.

    Applied as two factors, each a power of two of ``x``'s dtype (``2**148``
    is not a float32 and ``2**1074`` not a float64, but half of either is);
    both move the same way, so the intermediate never overflows.
    """
    half = torch.div(e, 2, rounding_mode="floor")
    f1 = torch.pow(2.0, half.to(x.dtype))
    f2 = torch.pow(2.0, (e - half).to(x.dtype))
    return x * f1 * f2


def rescale_clouds(points, real, cloud, n_clouds):
    """Copy of ``points`` with each cloud times ``2**-e``, and the ``e`` per cloud (int64).

    ``points`` is padded ``(B, N, D)`` or packed ``(N_total, D)``; ``real``
    (bool) and ``cloud`` (int64 cloud of each row) are per row of its
    ``(-1, D)`` view.  ``e`` is the binary exponent of the cloud's largest
    finite coordinate magnitude over its real rows (0 for an empty or all-zero
    cloud), so the scaled cloud lies within ``[-1, 1]`` and its squared
    distances are at most ``4 * D``.  The copy is float64 for float64 points
    and float32 otherwise (float16/bfloat16 widen exactly).  No gradient
    flows through the copy.
    """
    p = points.detach().to(torch.float64 if points.dtype == torch.float64 else torch.float32)
    D = p.shape[-1]
    flat = p.reshape(-1, D)
    if flat.shape[0] == 0:
        return p, torch.zeros(n_clouds, dtype=torch.int64, device=p.device)
    ok = torch.isfinite(flat).all(1) & real
    row_max = torch.where(ok, flat.abs().amax(1), 0)
    mag = torch.zeros(n_clouds, dtype=p.dtype, device=p.device).scatter_reduce(0, cloud, row_max, "amax")
    expo = binary_exponent(mag)
    return times_power_of_two(flat, -expo[cloud][:, None]).reshape(p.shape), expo
