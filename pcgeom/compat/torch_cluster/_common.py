"""What the torch_cluster stand-in's modules share: input coercion, batch / CSR offsets, index checks."""

import os
from typing import Optional, Tuple

import torch
from torch import Tensor

from pcgeom import _validation as V
from pcgeom.graph import batch_arg_offsets


ORDERS = ("index", "distance")
INT_DTYPES = V.INT_DTYPES


def as_2d(x: Tensor) -> Tensor:
    return x.view(-1, 1) if x.dim() == 1 else x


def count_clouds(batch_x, batch_y, batch_size):
    if batch_size is not None:
        return int(batch_size)
    b = 1
    for bt in (batch_x, batch_y):
        if bt is not None and bt.numel():
            b = max(b, int(bt.max()) + 1)
    return b


def cloud_offsets(fn, name, batch, n, device, B):
    if isinstance(batch, torch.Tensor):
        batch = batch.contiguous()
    return batch_arg_offsets(fn, name, batch, n, device, n_clouds=B)


def ptr_offsets(fn: str, name: str, ptr: Optional[Tensor], n: int, device) -> Tensor:
    """torch_cluster's CSR ``ptr (B + 1,)`` -> pcgeom's cumulative end offsets ``(B,)``."""
    if ptr is None:
        return torch.full((1,), n, dtype=torch.int64, device=device)
    if not isinstance(ptr, torch.Tensor) or ptr.dtype not in INT_DTYPES or ptr.dim() != 1 or ptr.shape[0] < 2:
        raise ValueError(f"{fn}: {name} must be an integer tensor of CSR boundaries [0, ..., {n}] with at least "
                         f"2 entries, got {ptr.dtype if isinstance(ptr, torch.Tensor) else type(ptr).__name__} "
                         f"of shape {tuple(ptr.shape) if isinstance(ptr, torch.Tensor) else '?'}")
    ptr = ptr.to(device=device, dtype=torch.int64)
    if int(ptr[0]) != 0:
        raise ValueError(f"{fn}: {name} must start at 0 (CSR boundaries), got {name}[0]={int(ptr[0])}")
    return ptr[1:]


def as_float(x: Tensor) -> Tensor:
    return x if x.is_floating_point() else x.to(torch.get_default_dtype())


def normalise(x: Tensor) -> Tensor:
    return x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)


def empty_edges(device) -> Tensor:
    return torch.empty(2, 0, dtype=torch.long, device=device)

def check_index(fn: str, name: str, t, device=None) -> Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a 1-D int64 tensor, got {type(t).__name__}")
    if t.dtype != torch.int64 or t.dim() != 1:
        raise ValueError(f"{fn}: {name} must be a 1-D int64 tensor, got {t.dtype} of shape {tuple(t.shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{fn}: {name} must be on {device}, got {t.device}")
    return t


def check_rowptr_col(fn: str, rowptr: Tensor, col: Tensor) -> int:
    check_index(fn, "rowptr", rowptr)
    check_index(fn, "col", col, rowptr.device)
    if rowptr.numel() < 1:
        raise ValueError(f"{fn}: rowptr must have num_nodes + 1 >= 1 entries, got 0")
    n = rowptr.numel() - 1
    checks = [int(rowptr[0]), int(rowptr[-1]), int((torch.diff(rowptr) < 0).sum())]
    if checks[0] != 0 or checks[1] != col.numel() or checks[2]:
        raise ValueError(f"{fn}: rowptr must be non-decreasing CSR boundaries from 0 to col.numel()={col.numel()}, "
                         f"got rowptr[0]={checks[0]}, rowptr[-1]={checks[1]}")
    if col.numel() and (int(col.min()) < 0 or int(col.max()) >= n):
        raise ValueError(f"{fn}: col values must be in [0, {n}) (num_nodes = rowptr.numel() - 1), "
                         f"got [{int(col.min())}, {int(col.max())}]")
    return n


def padded_clouds(t: Tensor, starts: Tensor, lengths: Tensor, longest: int) -> Tuple[Tensor, bool]:
    """``(rows, F)`` -> ``(B, longest, F)``, cloud b from row ``starts[b]``, and whether the clouds tile ``t``
    (then the result is a view)."""
    B = starts.shape[0]
    if B * longest == t.shape[0] and bool((lengths == longest).all()):
        return t.view(B, longest, t.shape[1]), True
    slot = torch.arange(longest, device=t.device)
    rows = (starts[:, None] + slot).clamp_(max=max(t.shape[0] - 1, 0)).view(-1)
    return t.index_select(0, rows).view(B, longest, t.shape[1]), False


def device_memory_bytes(device) -> Optional[int]:
    """The device's total memory (physical RAM for the CPU), or None where it cannot be read."""
    device = torch.device(device)
    try:
        if device.type == "cuda":
            return int(torch.cuda.get_device_properties(device).total_memory)
        if device.type == "cpu":
            return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError, RuntimeError):
        pass
    return None


def check_walk_size(fn: str, n_walks: int, walk_length: int, device) -> None:
    """Refuses, before anything is allocated, walks that cannot fit in the device's memory.

    ``n_walks`` walks of ``walk_length`` steps need the ``(n_walks,
    walk_length + 1)`` int64 node sequences and as much again for the edge
    ids (or the random draws): 16 bytes a step.  Past the device's total
    memory (or 2**63 bytes where that cannot be read) the error names
    ``walk_length``, the largest value that could fit and the value given,
    instead of the allocator's own message.
    """
    if n_walks == 0 or walk_length == 0:
        return
    mem = device_memory_bytes(device)
    cap = mem if mem is not None else 2**63
    need = 8 * n_walks * (2 * walk_length + 1)
    if need <= cap:
        return
    most = max(0, (cap // (8 * n_walks) - 1) // 2)
    where = (f"the {V.bytes_str(cap)} of {torch.device(device).type} memory" if mem is not None
             else "any address space")
    raise RuntimeError(f"{fn}: walk_length must be at most {most} for {n_walks} start node(s) on this device "
                     f"(the walks, (S, walk_length + 1) int64, and their edge ids take 16 bytes a step: "
                     f"{V.bytes_str(need)}, more than {where}), got {walk_length}")
