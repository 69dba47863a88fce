"""``pytorch3d.ops.sample_farthest_points`` (and ``sample_farthest_points_naive``) served by pcgeom.

pytorch3d v0.7.9's rules (``sample_farthest_points_cpu.cpp`` and its Python
wrapper): greedy farthest point sampling from ``start_idxs`` (index 0 unless
``random_start_point``), each next sample the point farthest (squared distance)
from those chosen, ties to the lowest index; ``K`` an int, a list or a tensor of
per-cloud counts; ``min(lengths[n], K[n])`` samples per cloud, the rest padded
with ``idx = -1`` and points 0.  The fast function runs on
:func:`pcgeom.farthest_point_sample`; the naive one is a pure-torch loop with the
same answers, kept as upstream's reference and benchmark baseline.

Where pcgeom differs, on purpose (``docs/guides/pytorch3d.md``):

* points keep their dtype (upstream's fast path casts to float32 and returns
  float32 points); float64 is sampled at float64 accuracy;
* a point is never chosen twice: on a cloud with fewer distinct points than
  ``K`` upstream picks index 0 again once every distance is 0, pcgeom takes the
  next unchosen point (lowest index first);
* an empty cloud (``lengths[n] == 0``) is all padding (upstream writes its start
  index 0 there, past the cloud); an int ``K < 1`` raises (upstream writes out
  of bounds).  ``K[n] == 0`` for one cloud of a list/tensor keeps upstream's
  answer: the start index in slot 0, the rest padding.
"""

from __future__ import annotations

import random

import torch

from pcgeom import _validation as V
from pcgeom.ops import farthest_point_sample as _pc_fps
from pcgeom.ops import knn_gather as _pc_knn_gather

__all__ = ["sample_farthest_points", "sample_farthest_points_naive"]


def _counts(fn, K, N, device) -> tuple[torch.Tensor, int]:
    """``K`` (int, list or tensor) as an int64 ``(N,)`` tensor and its maximum (the output width)."""
    if isinstance(K, bool):
        raise TypeError(f"{fn}: K must be an int, a list or a tensor of ints, got bool {K!r}")
    if isinstance(K, int):
        V.check_int(fn, "K", K, minimum=1)
        return torch.full((N,), K, dtype=torch.int64, device=device), K
    if isinstance(K, (list, tuple)):
        K = torch.tensor(K, dtype=torch.int64, device=device)
    if not isinstance(K, torch.Tensor) or K.dtype not in V.INT_DTYPES:
        raise TypeError(f"{fn}: K must be an int, a list or a tensor of ints, got {type(K).__name__}")
    if K.dim() != 1 or K.shape[0] != N:
        raise ValueError("K and points must have the same batch dimension")
    K = K.to(device=device, dtype=torch.int64)
    if N and int(K.min()) < 0:
        raise ValueError(f"{fn}: K values must be >= 0, got K[{int(K.argmin())}]={int(K.min())}")
    max_k = int(K.max()) if N else 0
    if max_k < 1:
        raise ValueError(f"{fn}: K must ask for at least one sample, got K={K.tolist()}")
    return K, max_k


def _lengths(fn, lengths, N, P, device) -> torch.Tensor:
    if lengths is None:
        return torch.full((N,), P, dtype=torch.int64, device=device)
    if not isinstance(lengths, torch.Tensor) or lengths.dtype not in V.INT_DTYPES:
        raise TypeError(f"{fn}: lengths must be an integer tensor of shape ({N},), got {type(lengths).__name__}")
    if lengths.shape != (N,):
        raise ValueError("points and lengths must have same batch dimension.")
    if N and int(lengths.max()) > P:
        raise ValueError("A value in lengths was too large.")
    return V.lengths_arg(fn, "lengths", lengths, N, P, device)


def _start_indices(random_start_point, lengths, N, P, constant_length, device) -> torch.Tensor:
    # the same draws from torch's generator as upstream, so a seeded run starts at the same points
    if not random_start_point:
        return torch.zeros((N,), dtype=torch.int64, device=device)
    if constant_length:
        return torch.randint(high=P, size=(N,), device=device)
    return (lengths * torch.rand(lengths.size(), device=device)).to(torch.int64)


def _pad_and_gather(points, idx, lengths, K):
    """Upstream's padding on ``idx (N, max_K)``: slot 0 keeps the start, slots ``k >= max(1, min(lengths, K))`` are -1."""
    slot = torch.arange(idx.shape[1], device=idx.device)[None, :]
    keep = torch.minimum(lengths, K).clamp_min(1)[:, None]
    idx = idx.masked_fill((slot >= keep) | (lengths[:, None] == 0), -1)
    return _pc_knn_gather(points, idx[:, None])[:, 0], idx


def sample_farthest_points(points, lengths=None, K=50, random_start_point: bool = False):
    """Farthest point sampling, pytorch3d's ``sample_farthest_points``, on :func:`pcgeom.farthest_point_sample`.

    Args:
        points: ``(N, P, D)`` floating tensor.
        lengths: optional int ``(N,)`` in ``[0, P]``: only ``points[n, :lengths[n]]`` are sampled.
        K: samples per cloud: an int >= 1, or a list / int tensor of ``N`` counts >= 0.
        random_start_point: start each cloud at a random point drawn from torch's
            generator exactly as upstream draws it (``torch.randint(high=P)`` without
            ``lengths``, ``(lengths * torch.rand(N)).long()`` with); else index 0.

    Returns:
        ``(selected_points (N, max_K, D), selected_indices (N, max_K) int64)``: indices in
        selection order, ``-1`` past ``min(lengths[n], K[n])``; points gathered from them,
        in the dtype of ``points``, 0 at padding, differentiable w.r.t. ``points``.

    Raises:
        ValueError: upstream's ``"K and points must have the same batch dimension"``,
            ``"points and lengths must have same batch dimension."``, ``"A value in lengths
            was too large."``; an int ``K < 1``, negative counts.
        TypeError: non-floating points, a non-integer ``K`` or ``lengths``.

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.ops import sample_farthest_points
        >>> pts = torch.tensor([[[0.0, 0], [1, 0], [5, 0], [2, 0]], [[0.0, 0], [0, 3], [0, 1], [9, 9]]])
        >>> sampled, idx = sample_farthest_points(pts, lengths=torch.tensor([4, 3]), K=[3, 2])
        >>> idx.tolist()
        [[0, 2, 3], [0, 1, -1]]
        >>> sampled[1].tolist()
        [[0.0, 0.0], [0.0, 3.0], [0.0, 0.0]]
    """
    fn = "sample_farthest_points"
    V.check_points(fn, "points", points, "(N, P, D)")
    N, P, _ = points.shape
    device = points.device
    constant_length = lengths is None
    lengths = _lengths(fn, lengths, N, P, device)
    K, max_k = _counts(fn, K, N, device)
    start = _start_indices(random_start_point, lengths, N, P, constant_length, device)
    if N == 0 or P == 0:
        idx = torch.full((N, max_k), -1, dtype=torch.int64, device=device)
    else:
        # empty clouds are sampled as one-point clouds and then blanked: pcgeom asks for lengths >= 1
        with torch.no_grad():
            idx = _pc_fps(points.detach(), max_k, lengths=lengths.clamp_min(1),
                          start_index=torch.where(lengths > 0, start, 0))
    return _pad_and_gather(points, idx, lengths, K)


def sample_farthest_points_naive(points, lengths=None, K=50, random_start_point: bool = False):
    """The same sampling as :func:`sample_farthest_points`, as a plain loop over clouds and samples.

    pytorch3d keeps a pure-torch ``sample_farthest_points_naive`` as its reference;
    this one gives the same indices as the fast function (ties to the lowest index,
    no point twice, distances in float32, float64 for float64 points).  The random
    start, when asked for, is Python's ``random.randint(0, lengths[n] - 1)`` per
    cloud, as upstream's naive function draws it.

    Args:
        points: ``(N, P, D)`` floating tensor.
        lengths: optional int ``(N,)`` in ``[0, P]``.
        K: an int >= 1, or a list / int tensor of ``N`` counts >= 0.
        random_start_point: start at a random point of each cloud (see above).

    Returns:
        ``(selected_points (N, max_K, D), selected_indices (N, max_K))`` as
        :func:`sample_farthest_points`.

    Raises:
        ValueError: as :func:`sample_farthest_points` (upstream's naive message for
            lengths too large is ``"Invalid lengths."``).

    Example:
        >>> import torch
        >>> from pcgeom.compat.pytorch3d.ops.sample_farthest_points import sample_farthest_points_naive
        >>> sample_farthest_points_naive(torch.tensor([[[0.0, 0], [1, 0], [5, 0], [2, 0]]]), K=3)[1].tolist()
        [[0, 2, 3]]
    """
    fn = "sample_farthest_points_naive"
    V.check_points(fn, "points", points, "(N, P, D)")
    N, P, _ = points.shape
    device = points.device
    if lengths is not None and isinstance(lengths, torch.Tensor) and lengths.shape == (N,) and N \
            and int(lengths.max()) > P:
        raise ValueError("Invalid lengths.")
    lengths = _lengths(fn, lengths, N, P, device)
    K, max_k = _counts(fn, K, N, device)
    acc = V.acc_dtype(points.dtype)
    rows = []
    for n in range(N):
        row = torch.full((max_k,), -1, dtype=torch.int64, device=device)
        length = int(lengths[n])
        if length > 0:
            cloud = points[n, :length].detach().to(acc)
            last = random.randint(0, length - 1) if random_start_point else 0
            row[0] = last
            closest = torch.full((length,), float("inf"), dtype=acc, device=device)
            chosen = torch.zeros((length,), dtype=torch.bool, device=device)
            chosen[last] = True
            for k in range(1, min(length, int(K[n]))):
                d2 = (cloud - cloud[last]).square().sum(-1)
                closest = torch.minimum(closest, d2)
                # -1 marks chosen points, so none is picked twice; argmax returns the first maximum
                last = int(torch.argmax(closest.masked_fill(chosen, -1.0)))
                row[k] = last
                chosen[last] = True
        rows.append(row)
    idx = torch.stack(rows) if rows else torch.full((0, max_k), -1, dtype=torch.int64, device=device)
    return _pad_and_gather(points, idx, lengths, K)
