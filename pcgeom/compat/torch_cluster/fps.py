"""``torch_cluster.fps``: farthest point sampling (torch_cluster 1.6.3 ``fps.py``)."""

from typing import List, Optional, Union

import torch
from torch import Tensor

from pcgeom.compat.torch_cluster._common import as_2d, as_float
from pcgeom.graph import batch_arg_offsets
from pcgeom.ops import farthest_point_sample as _fps

__all__ = ["fps"]


@torch.jit.ignore
def fps_impl(src: Tensor, batch: Optional[Tensor], ratio: Optional[Union[Tensor, float]], random_start: bool,
              batch_size: Optional[int], ptr: Optional[Union[Tensor, List[int]]]) -> Tensor:
    src = as_float(as_2d(src))
    n = src.shape[0]
    if ptr is not None:
        ptr_t = torch.as_tensor(ptr, dtype=torch.int64, device=src.device)
        if ptr_t.dim() != 1 or ptr_t.shape[0] < 2 or int(ptr_t[0]) != 0:
            raise ValueError(f"fps: ptr must be CSR boundaries [0, ..., {n}], got {ptr_t.tolist()}")
        off = ptr_t[1:]
    elif batch is not None:
        off = batch_arg_offsets("fps", "batch", batch, n, src.device,
                               n_clouds=None if batch_size is None else int(batch_size))
    else:
        off = torch.full((1,), n, dtype=torch.int64, device=src.device)
    if ratio is None:
        ratio_t = torch.tensor(0.5, dtype=torch.float32, device=src.device)
    else:
        ratio_t = torch.as_tensor(ratio, device=src.device).to(torch.float32)
    if not bool(((ratio_t > 0) & (ratio_t <= 1)).all()):  # written so that NaN fails too
        raise ValueError(f"fps: ratio must be in (0, 1], got {ratio_t.tolist()}")
    deg = torch.diff(off, prepend=off.new_zeros(1))
    # float32 product then ceil: the count torch_cluster computes.
    counts = torch.ceil(deg.to(torch.float32) * ratio_t).to(torch.int64)
    if random_start:
        start = (torch.rand(deg.shape[0]) * deg.clamp_min(1).cpu()).long().clamp_max(deg.clamp_min(1).cpu() - 1)
        start = start.to(src.device)
    else:
        start = torch.zeros_like(deg)
    if n == 0:
        return torch.empty(0, dtype=torch.long, device=src.device)
    return _fps(src.contiguous(), counts, offsets=off, start_index=start)


def fps(src: Tensor, batch: Optional[Tensor] = None, ratio: Optional[Union[Tensor, float]] = None,
        random_start: bool = True, batch_size: Optional[int] = None,
        ptr: Optional[Union[Tensor, List[int]]] = None) -> Tensor:
    """Farthest point sampling of ``ceil(ratio * n_b)`` points per cloud.

    Args:
        src: ``(N, F)`` points.
        batch: optional sorted int ``(N,)`` cloud ids.
        ratio: float or ``(B,)`` tensor in ``(0, 1]`` (default 0.5).
        random_start: start each cloud at a point drawn with ``torch.rand``
            (else at its first point).
        batch_size: the number of clouds; computed when None.
        ptr: CSR cloud boundaries ``[0, ..., N]`` instead of ``batch``.

    Returns:
        int64 global indices, cloud after cloud, in selection order.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_cluster import fps
        >>> fps(torch.tensor([[0.0], [1.0], [5.0], [2.0]]), ratio=0.5, random_start=False).tolist()
        [0, 2]
    """
    return fps_impl(src, batch, ratio, random_start, batch_size, ptr)
