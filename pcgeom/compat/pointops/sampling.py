"""``pointops.sampling``: ``farthest_point_sampling`` (Pointcept ``libs/pointops/functions/sampling.py``)."""

from __future__ import annotations

import torch

from pcgeom import _validation as V
from pcgeom.compat.pointops._common import check_xyz, INT_DTYPES
from pcgeom.ops import farthest_point_sample as _pc_fps
from pcgeom.ops.packed import offsets_arg

__all__ = ["farthest_point_sampling"]


def farthest_point_sampling(xyz, offset, new_offset):
    """Farthest point sampling per packed cloud, from each cloud's first point.

    Cloud ``b`` gets ``new_offset[b] - new_offset[b-1]`` samples: its first
    point, then each time the point farthest from the samples so far (squared
    distances, ties to the lowest index).  Once the farthest remaining point
    is at distance 0 (every point taken, or only duplicates of taken points
    left) the kernel -- and this stand-in -- repeats the cloud's first point.

    Args:
        xyz: ``(n, 3)`` floating coordinates.
        offset: int ``(b,)`` cumulative end offsets of ``xyz``.
        new_offset: int ``(b,)`` cumulative end offsets of the samples
            (non-decreasing; a cloud may ask for more samples than it has).

    Returns:
        ``idx (new_offset[-1],)`` int32 global rows of ``xyz``, cloud after
        cloud, in sampling order.  No gradient.

    Raises:
        ValueError: malformed offsets, or samples asked of an empty cloud.

    Example:
        >>> import torch
        >>> from pcgeom.compat import pointops
        >>> xyz = torch.tensor([[0.0, 0, 0], [1, 0, 0], [4, 0, 0]])
        >>> pointops.farthest_point_sampling(xyz, torch.tensor([3]), torch.tensor([4])).tolist()
        [0, 2, 1, 0]
    """
    fn = "farthest_point_sampling"
    check_xyz(fn, "xyz", xyz)
    off = offsets_arg(fn, "offset", offset, xyz.shape[0], xyz.device)
    if not isinstance(new_offset, torch.Tensor) or new_offset.dtype not in INT_DTYPES:
        raise TypeError(f"{fn}: new_offset must be an integer tensor of shape ({off.shape[0]},), got "
                        f"{new_offset.dtype if isinstance(new_offset, torch.Tensor) else type(new_offset).__name__}")
    if new_offset.dim() != 1 or new_offset.shape[0] != off.shape[0]:
        raise ValueError(f"{fn}: new_offset must have shape ({off.shape[0]},) like offset, got {V.shape_str(new_offset)}")
    V.check_host_readable(fn, "new_offset", new_offset, xyz.device)
    new_off = new_offset.to(device=xyz.device, dtype=torch.int64)
    counts = torch.diff(new_off, prepend=new_off.new_zeros(1))
    lengths = torch.diff(off, prepend=off.new_zeros(1))
    bad_step, bad_empty, m = torch.stack([
        (counts < 0).long().argmax() if counts.numel() else counts.new_zeros(()),
        ((lengths == 0) & (counts > 0)).long().argmax(),
        new_off[-1],
    ]).tolist()
    if int(counts[bad_step]) < 0:
        raise ValueError(f"{fn}: new_offset must be non-decreasing cumulative end offsets, "
                         f"got new_offset[{bad_step}]={int(new_off[bad_step])} after "
                         f"{0 if bad_step == 0 else int(new_off[bad_step - 1])}")
    if int(lengths[bad_empty]) == 0 and int(counts[bad_empty]) > 0:
        raise ValueError(f"{fn}: cloud {bad_empty} of xyz is empty (offset) but new_offset asks "
                         f"{int(counts[bad_empty])} samples of it")
    if m == 0:
        return torch.zeros(0, dtype=torch.int32, device=xyz.device)
    # The packed FPS pads every cloud to the largest count: size it by the caller's argument, not the inner op's.
    V.check_fits(fn, "new_offset", f"[..., {m}] (up to {int(counts.max())} samples per cloud)",
                 "the per-cloud sample table", (off.shape[0], int(counts.max())), 8, xyz.device)
    with torch.no_grad():
        idx = _pc_fps(xyz, counts, offsets=off)  # (m,) int64, -1 past a cloud's size
        starts = off - lengths
        sb = torch.repeat_interleave(torch.arange(off.shape[0], device=xyz.device), counts, output_size=m)
        # A sample at distance 0 from an earlier one of its cloud (or a -1 slot)
        # means the maximum distance reached 0: from there on the kernel repeats
        # the cloud's first point.
        valid = idx >= 0
        pts = xyz.index_select(0, idx.clamp(min=0)).to(torch.float64)
        key = torch.cat([sb[:, None].to(torch.float64), pts + 0.0], 1)  # + 0.0: -0.0 == 0.0
        _, inv = torch.unique(key, dim=0, return_inverse=True)
        pos = torch.arange(m, device=xyz.device)
        first = torch.full((int(inv.max()) + 1,), m, dtype=torch.int64, device=xyz.device)
        first = first.scatter_reduce(0, inv, pos, reduce="amin")
        zero = (~valid) | (first[inv] < pos)
        csum = torch.cumsum(zero.long(), 0)
        seg_start = torch.cumsum(counts, 0) - counts
        before = torch.where(seg_start > 0, csum[(seg_start - 1).clamp(min=0)], 0)
        repeated = (csum - before[sb]) > 0
        idx = torch.where(repeated, starts[sb], idx)
        return idx.int()
