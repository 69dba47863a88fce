"""``pcgeom.farthest_point_sample``: exact greedy farthest point sampling."""

from __future__ import annotations

import numbers

import torch

from pcgeom import _validation as V
from pcgeom.ops.packed import packed_farthest_point_sample


def farthest_point_sample(points, n_samples, *, lengths=None, start_index=0, offsets=None) -> torch.Tensor:
    """Indices of ``n_samples`` points chosen by greedy farthest point sampling.

    The first sample is ``start_index``; each next one is the point whose
    minimum squared distance to the samples chosen so far is largest, **ties to
    the lowest index** (PointNet++, Qi et al. 2017).  A point is never chosen
    twice, so with ``n_samples <= lengths[b]`` the samples are distinct.  Points
    with NaN coordinates are chosen last.  The sequence is identical on every
    device and on the pure-torch path.

    Args:
        points: ``(B, N, D)`` float16/bfloat16/float32/float64 tensor, any D >= 1.
        n_samples: int >= 1; may exceed ``N`` (the extra slots are ``-1``).
        lengths: optional int ``(B,)``: only ``points[b, :lengths[b]]`` are sampled.
        start_index: int, or an int ``(B,)`` tensor, in ``[0, lengths[b])``.
            For random starts draw them from torch's generator, e.g.
            ``torch.randint(0, N, (B,), generator=g)``.
        offsets: the **packed** layout instead: 2-D ``points (N_total, D)``
            with int ``(B,)`` cumulative end offsets.  ``n_samples`` is then an
            int or an int ``(B,)`` tensor of per-cloud counts, ``start_index``
            is local to each cloud, and the result is ``idx (sum n_samples,)``
            -- cloud after cloud, global into the packed points, ``-1`` where a
            cloud has fewer points than samples.

    Returns:
        ``idx (B, n_samples)`` int64, 0-based, in selection order; slots
        ``s >= lengths[b]`` are ``-1``.  Indices carry no gradient; gather the
        points with ``torch.gather`` or :func:`pcgeom.knn_gather` to get one.

    Raises:
        TypeError, ValueError: bad shapes, dtypes, lengths or start indices.
        RuntimeError: an output ``(B, n_samples)`` that cannot be allocated
            (names ``n_samples`` and the bytes needed), or CPU working buffers
            that do not fit (names the cloud, its size and the bytes needed:
            about ``4 * (D + 1)`` bytes per point; float16/bfloat16 clouds are
            read in place).  See docs/guides/limits.md.

    Example:
        >>> import torch, pcgeom
        >>> pts = torch.tensor([[[0.0, 0], [1, 0], [5, 0], [2, 0]]])
        >>> pcgeom.farthest_point_sample(pts, 3).tolist()
        [[0, 2, 3]]
    """
    fn = "farthest_point_sample"
    if isinstance(points, torch.Tensor) and points.dim() == 2:
        return packed_farthest_point_sample(farthest_point_sample, points, n_samples, offsets, start_index,
                                            lengths is not None)
    V.check_offsets_unused(fn, offsets)
    V.check_points(fn, "points", points, "(B, N, D)")
    n_samples = V.check_int(fn, "n_samples", n_samples, minimum=1)
    B, N, _ = points.shape
    lengths = V.lengths_arg(fn, "lengths", lengths, B, N, points.device)
    if isinstance(start_index, torch.Tensor):
        if start_index.dtype not in V.INT_DTYPES:
            raise TypeError(f"{fn}: start_index must be an int or an integer tensor of shape ({B},), got dtype {start_index.dtype}")
        if start_index.dim() == 0:
            start_index = start_index.expand(B)
        if start_index.dim() != 1 or start_index.shape[0] != B:
            raise ValueError(f"{fn}: start_index must be an int or have shape ({B},), got {tuple(start_index.shape)}")
        if B > 0:
            # Its values are range-checked below (as lengths are): no meta tensor on either side.
            V.check_host_readable(fn, "start_index", start_index, points.device)
        start = start_index.to(device=points.device, dtype=torch.int64)
    else:
        if isinstance(start_index, bool) or not isinstance(start_index, (numbers.Integral, torch.SymInt)):
            raise TypeError(f"{fn}: start_index must be an int or an integer tensor, got {type(start_index).__name__}")
        if not isinstance(start_index, torch.SymInt) and not 0 <= int(start_index) < max(N, 1):
            raise ValueError(f"{fn}: start_index must be in [0, {N}) for points of shape {tuple(points.shape)}, got {start_index}")
        start = torch.full((B,), int(start_index), dtype=torch.int64, device=points.device)
    # Meta points (shapes only, no data): lengths are then all N (meta lengths are
    # refused above) and an int start_index was checked against N, so nothing is left to read.
    if not V.compiling() and B > 0 and points.device.type != "meta":
        bad = ((start < 0) | (start >= lengths)) & (lengths > 0)
        if bool(bad.any()):
            b = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"{fn}: start_index[{b}]={int(start[b])} is outside [0, {int(lengths[b])}) "
                f"(lengths[{b}]={int(lengths[b])})"
            )
    return torch.ops.pcgeom.farthest_point_sample(points, n_samples, lengths, start)


@torch.library.register_fake("pcgeom::farthest_point_sample")
def _fps_fake(points, n_samples, lengths, start_index):
    return points.new_empty((points.shape[0], n_samples), dtype=torch.int64)
