"""The agreement machinery of pcgeom's collectives: process-group resolution, the
metadata exchange that makes every rank raise the same error, checksums, and the
two data exchanges (an all-gather of top-k columns, an all-reduce sum).

Internal: shared by :mod:`pcgeom.distributed` and the sharded
:class:`pcgeom.nn.KNNClassifier`.  Every function that takes a :class:`Group`
is collective: all ranks of the group call it, in the same order.  A
one-process :class:`Group` (:func:`single`) runs the same code with no
communication, so a caller has one path for both.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_DEVICE_TYPES = ("cpu", "cuda", "xpu", "mps", "meta")
# Which collective a rank is in: a rank that called something else is named in
# the error instead of producing garbage.
_OPS = ("pcgeom.distributed.knn", "KNNClassifier", "KNNClassifier.add", "KNNClassifier.save_sharded",
        "KNNClassifier.load_sharded", "KNNClassifier.load_state_dict", "KNNClassifier search")
_FACTS = 12  # length of the metadata vector every rank contributes
_OK, _REJECTED = 0, 1


# --------------------------------------------------------------------- groups
class Group:
    """A process group with this process's rank in it (``handle=None``: one process)."""

    def __init__(self, handle, rank: int, world: int):
        self.handle, self.rank, self.world = handle, rank, world

    @property
    def single(self) -> bool:
        return self.handle is None


def resolve(fn: str, group) -> Group:
    """The default group for ``group=None``; clear errors when there is none."""
    if not dist.is_available():
        raise RuntimeError(f"{fn}: this torch build has no torch.distributed (torch {torch.__version__})")
    if not dist.is_initialized():
        raise RuntimeError(
            f"{fn}: the torch.distributed process group is not initialised; call "
            "torch.distributed.init_process_group(...) first (torchrun sets up the environment for it: "
            "backend='gloo' for CPU tensors, 'nccl' for CUDA tensors)"
        )
    handle = dist.group.WORLD if group is None else group
    rank = dist.get_rank(handle)
    if rank < 0:
        raise ValueError(f"{fn}: this process (global rank {dist.get_rank()}) is not a member of group")
    return Group(handle, rank, dist.get_world_size(handle))


def single() -> Group:
    """The group of one process, without torch.distributed: collectives become local."""
    return Group(None, 0, 1)


def _comm_device(g: Group) -> torch.device:
    """Where this group's collectives take their tensors (gloo/mpi: CPU; nccl: this rank's GPU)."""
    if g.single:
        return torch.device("cpu")
    backend = str(dist.get_backend(g.handle)).lower()
    if "gloo" in backend or "mpi" in backend:
        return torch.device("cpu")
    if "nccl" in backend:
        return torch.device("cuda", torch.cuda.current_device())
    if "xccl" in backend:
        return torch.device("xpu", torch.xpu.current_device())
    return torch.device("cpu")


def bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    """Rows ``[start, stop)`` of ``n`` that ``rank`` holds in the even, in-order split
    across ``world`` ranks (the first ``n % world`` ranks get one row more)."""
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


# ------------------------------------------------------------------- agreement
# Facts travel as int64: devices and dtypes as small codes, decoded by the *_name functions.
def device_code(device: torch.device) -> int:
    return _DEVICE_TYPES.index(device.type) if device.type in _DEVICE_TYPES else len(_DEVICE_TYPES)


def device_name(code: int) -> str:
    return _DEVICE_TYPES[code] if 0 <= code < len(_DEVICE_TYPES) else "other"


def dtype_code(dtype: torch.dtype) -> int:
    return _DTYPES.index(dtype) if dtype in _DTYPES else -1


def dtype_name(code: int) -> str:
    """``str`` of the dtype of :func:`dtype_code` ``code`` (e.g. ``"torch.float32"``)."""
    return str(_DTYPES[code])


def checksum(t: torch.Tensor) -> int:
    """An order-sensitive checksum of a tensor's bits, the same on every rank and
    thread count (integer arithmetic only).  Used to check that ranks pass the
    same queries; not cryptographic."""
    if t.numel() == 0:
        return 0
    flat = t.detach().contiguous().reshape(-1)
    if flat.element_size() >= 4:
        words = flat.view(torch.int32)
    elif flat.element_size() == 2:
        words = flat.view(torch.int16)
    else:
        words = flat.view(torch.int8)
    p = 2_147_483_647
    total, step = 0, 1 << 20
    for s in range(0, words.numel(), step):
        w = words[s:s + step].to(torch.int64)
        pos = torch.arange(s, s + w.numel(), dtype=torch.int64, device=w.device) % 65_521 + 1
        total = (total + int(torch.remainder(w * pos, p).sum())) % (1 << 62)
    return total


def agree(fn: str, g: Group, op: str, local: Callable[[], tuple[object, list[int]]]):
    """Runs this rank's checks (``local()`` -> (value, facts)) and exchanges the facts.

    ``op`` names the collective (one of a fixed list: pcgeom.distributed.knn and
    the KNNClassifier's collectives), so ranks in different calls are named.
    Returns ``(value, facts)`` with ``facts`` a ``(world, _FACTS - 2)`` int64 tensor
    of every rank's facts.  If ``local()`` raised on any rank, every rank raises:
    the rejecting ranks their own exception, the others a RuntimeError naming them.
    """
    err, value, facts = None, None, []
    try:
        value, facts = local()
    except Exception as exc:  # re-raised below, after the other ranks have heard of it
        err = exc
    row = [_OPS.index(op), _REJECTED if err is not None else _OK] + [int(f) for f in facts]
    row += [0] * (_FACTS - len(row))
    mine = torch.tensor(row, dtype=torch.int64)
    if g.single:
        table = mine[None]
    else:
        dev = _comm_device(g)
        parts = [torch.empty(_FACTS, dtype=torch.int64, device=dev) for _ in range(g.world)]
        dist.all_gather(parts, mine.to(dev), group=g.handle)
        table = torch.stack(parts).cpu()
    ops = table[:, 0].tolist()
    if len(set(ops)) > 1:
        where = ", ".join(f"rank {r} in {_OPS[o] if 0 <= o < len(_OPS) else o}" for r, o in enumerate(ops))
        raise RuntimeError(f"{fn}: the ranks are in different pcgeom collectives ({where}); every rank must "
                           "make the same calls in the same order")
    if err is not None:
        raise err
    bad = [r for r, s in enumerate(table[:, 1].tolist()) if s != _OK]
    if bad:
        raise RuntimeError(
            f"{fn}: rank{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))} of {g.world} rejected "
            "their arguments (see the error raised there); nothing was done on any rank"
        )
    return value, table[:, 2:]


def same(fn: str, what: str, values: list, exc=ValueError) -> None:
    """Raises ``exc`` naming every rank's value unless all ranks passed the same ``what``."""
    if len(set(values)) > 1:
        per_rank = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
        raise exc(f"{fn}: every rank must pass the same {what}, got {per_rank}")


# ------------------------------------------------------------------- exchange
def _to_words(t: torch.Tensor, word: torch.dtype) -> torch.Tensor:
    if t.dtype == torch.float32:
        t = t.view(torch.int32)
    elif t.dtype == torch.float64:
        t = t.view(torch.int64)
    return t.to(word)


def _from_words(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.float32:
        return w.to(torch.int32).view(torch.float32)
    if dtype == torch.float64:
        return w.to(torch.int64).view(torch.float64)
    return w.to(dtype)


def all_gather_columns(g: Group, cols: list[torch.Tensor]) -> list[torch.Tensor]:
    """All-gathers same-shaped ``(M, k)`` columns as one packed tensor.

    float32 / int32 columns travel as 32-bit words (float bits unchanged), so a
    float32 search exchanges 8 bytes per candidate; any 64-bit column makes every
    word 64-bit.  Returns each column as ``(world, M, k)``.
    """
    wide = any(c.dtype in (torch.float64, torch.int64) for c in cols)
    word = torch.int64 if wide else torch.int32
    packed = torch.stack([_to_words(c, word) for c in cols], -1)
    if g.single:
        out = packed[None]
    else:
        dev = _comm_device(g)
        packed = packed.to(dev)
        parts = [torch.empty_like(packed) for _ in range(g.world)]
        dist.all_gather(parts, packed, group=g.handle)
        out = torch.stack(parts)
    return [_from_words(out[..., j], c.dtype) for j, c in enumerate(cols)]


def all_reduce_sum(g: Group, t: torch.Tensor) -> torch.Tensor:
    """The sum of ``t`` over the ranks, on ``t``'s device (``t`` itself for one process)."""
    if g.single:
        return t
    dev = _comm_device(g)
    buf = t.to(dev, copy=True)
    dist.all_reduce(buf, group=g.handle)
    return buf.to(t.device)
