"""The pointnet2 CUDA kernels' decisions, transcribed in pure torch: FPS order and ties, ball-query strictness.

Shared by :func:`pcgeom.grouping.pointnet2_fps` and the stand-ins whose upstream kernels are pointnet2's
(:mod:`pcgeom.compat.pointnet2_ops`, :mod:`pcgeom.compat.point_mae`, PointWeb's ``pointops_cuda``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from einops import rearrange

# pointnet2 compares a float32 squared norm against the *double* literal 1e-3.
# float32(1e-3) is slightly above 1e-3, so the equivalent float32 test is
# ``mag <= largest float32 that is <= 1e-3``.
NEAR_ORIGIN = float(np.float32(1e-3))
if NEAR_ORIGIN > 1e-3:
    NEAR_ORIGIN = float(np.nextafter(np.float32(1e-3), np.float32(0)))
TEMP_INIT = 1e10  # the kernel's initial "distance to the sample set"
MAX_THREADS = 512


def _bit_reverse(t: torch.Tensor, n_bits: int) -> torch.Tensor:
    out = torch.zeros_like(t)
    for b in range(n_bits):
        out = out | (((t >> b) & 1) << (n_bits - 1 - b))
    return out


def priority(n: int, device, max_threads: int = MAX_THREADS) -> torch.Tensor:
    """Permutation of ``range(n)`` in which "first maximum" equals the kernel's winner.

    The kernel runs one block of ``bs = 2**floor(log2 n)`` (at most
    ``max_threads``: 512 in pointnet2, 1024 in PointWeb's copy) threads;
    thread ``t`` scans ``k = t, t + bs, ...`` keeping its first maximum (strict
    ``>``), then a shared-memory tree ``(t, t + s)`` for ``s = bs/2 .. 1`` keeps
    the left operand on ties.  The tree therefore prefers threads by their
    bit-reversed id, and the winner among equal maxima is the smallest
    ``(bitrev(k mod bs), k div bs)``.  Sorting the points by that key once lets
    a plain first-index ``argmax`` reproduce the reduction exactly.
    """
    bs = max(1, min(1 << (n.bit_length() - 1), max_threads))
    n_bits = bs.bit_length() - 1
    rounds = -(-n // bs)
    k = torch.arange(n, device=device)
    key = _bit_reverse(k % bs, n_bits) * rounds + k // bs
    return torch.argsort(key)


def fps(points: torch.Tensor, n_samples: int) -> torch.Tensor:
    return _fps_op(points.detach(), n_samples)


# The two sequential loops below run as opaque custom ops: traced inline,
# torch.compile would unroll them n_samples times (minutes of compilation at
# Point-MAE sizes); as ops they compile instantly and still fullgraph-capture.
@torch.library.custom_op("pcgeom_grouping::pointnet2_fps", mutates_args=())
def _fps_op(points: torch.Tensor, n_samples: int) -> torch.Tensor:
    B, N, _ = points.shape
    perm = priority(N, points.device)
    # (3, B, N) coordinate planes in priority order: contiguous rows are ~3x
    # faster to stream than the strided x/y/z views of (B, N, 3).
    planes = rearrange(points.to(torch.float32)[:, perm], "b n c -> c b n").contiguous()
    x, y, z = planes[0], planes[1], planes[2]
    eligible = (x * x + y * y + z * z) > NEAR_ORIGIN
    # Ineligible points hold -1: fmin(d >= 0 or NaN, -1) keeps them at -1, so
    # they lose every argmax to an eligible point, as in the kernel (best = -1).
    temp = torch.where(eligible, TEMP_INIT, -1.0).to(torch.float32)
    # Original index 0 has priority key 0, so it sits at position 0 of ``perm``.
    return perm[kernel_fps_steps(planes, temp, n_samples)[0]]


def kernel_fps_steps(planes: torch.Tensor, temp: torch.Tensor, n_samples: int):
    """The FPS kernel's steps from position 0 on ``(3, B, N)`` float32 planes in priority order.

    ``temp (B, N)`` holds the running distances the kernel starts from.
    Returns ``(positions (B, n_samples) int64, the final temp)``; shared with
    PointWeb's copy of the kernel (``compat/pointops_cuda/pointweb.py``).
    """
    x, y, z = planes[0], planes[1], planes[2]
    pos = torch.zeros(x.shape[0], 1, dtype=torch.int64, device=x.device)
    chosen = [pos]
    for _ in range(1, n_samples):
        # d = dx*dx + dy*dy + dz*dz, rounded after every operation like the kernel
        d = x - x.gather(1, pos)
        d.mul_(d)
        t = y - y.gather(1, pos)
        d.add_(t.mul_(t))
        t = z - z.gather(1, pos)
        d.add_(t.mul_(t))
        temp = torch.fmin(d, temp)  # CUDA min() on floats is fminf: a NaN d keeps temp
        pos = temp.argmax(dim=1, keepdim=True)  # first maximum in priority order
        chosen.append(pos)
    return torch.cat(chosen, dim=1), temp


@_fps_op.register_fake
def _fps_fake(points, n_samples):
    return points.new_empty((points.shape[0], n_samples), dtype=torch.int64)


def strict_radius(radius: float, dtype: torch.dtype) -> float | None:
    """A radius whose inclusive ball ``d2 <= r**2`` (pcgeom) is pointnet2's ``d2 < radius**2``.

    The kernel squares the float32 radius in float32 and compares strictly;
    the largest accumulation-dtype value below that square is the inclusive
    threshold, and its square root (in double) rounds back to it exactly when
    pcgeom squares and rounds it.  None: no distance qualifies.
    """
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    r = torch.tensor(radius, dtype=acc)
    r2 = r * r
    if not bool(r2 > 0):
        return None
    below = torch.nextafter(r2, torch.tensor(0.0, dtype=acc))
    return math.sqrt(float(below)) if bool(below > 0) else 0.0
