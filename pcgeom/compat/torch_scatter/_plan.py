"""What scatter, segment_csr, segment_coo and the composites share: argument checks and the grouped-reduction plan.

Every reduction of the torch_scatter stand-in goes through one :class:`Plan` on :mod:`pcgeom.segment`.
"""

import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from pcgeom import _validation as V
from pcgeom import segment as _seg


REDUCE = ("sum", "add", "mean", "min", "max", "mul")
SEG_REDUCE = ("sum", "add", "mean", "min", "max")


def check_src(fn: str, src) -> None:
    if not isinstance(src, torch.Tensor):
        raise TypeError(f"{fn}: src must be a torch.Tensor, got {type(src).__name__}")
    if src.dtype not in V.FLOAT_DTYPES and src.dtype not in V.INT_DTYPES:
        raise TypeError(f"{fn}: src must be a floating or integer tensor, got {src.dtype}")
    if src.dim() == 0:
        raise ValueError(f"{fn}: src must have at least one dimension, got a 0-d tensor")


def check_index(fn: str, name: str, index, src: Tensor) -> None:
    if not isinstance(index, torch.Tensor) or index.dtype not in V.INT_DTYPES:
        got = index.dtype if isinstance(index, torch.Tensor) else type(index).__name__
        raise TypeError(f"{fn}: {name} must be an integer tensor, got {got}")
    if index.device != src.device:
        raise ValueError(f"{fn}: {name} must be on {src.device} like src, got {index.device}")
    if index.dim() > src.dim() or index.dim() == 0:
        raise ValueError(f"{fn}: {name} must have 1 to src.dim()={src.dim()} dimensions, got shape {tuple(index.shape)}")


def check_out(fn: str, out, src: Tensor, dim: int, size: Optional[int] = None) -> None:
    """``out`` must be ``src``'s shape except along ``dim`` (there ``size``, any size when None)."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{fn}: out must be a torch.Tensor or None, got {type(out).__name__}")
    ok = out.dim() == src.dim() and all(
        o == s for i, (o, s) in enumerate(zip(out.shape, src.shape)) if i != dim) and (
        size is None or out.shape[dim] == size)
    if not ok:
        shown = ["N" if i == dim and size is None else str(size if i == dim else s) for i, s in enumerate(src.shape)]
        raise ValueError(f"{fn}: out must have shape ({', '.join(shown)}), got {tuple(out.shape)}")
    if out.dtype != src.dtype or out.device != src.device:
        raise ValueError(f"{fn}: out must be {src.dtype} on {src.device} like src, got {out.dtype} on {out.device}")


def norm_dim(fn: str, dim, nd: int) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{fn}: dim must be an int, got {type(dim).__name__}")
    if not -nd <= dim < nd:
        raise ValueError(f"{fn}: dim must be in [{-nd}, {nd - 1}] for a {nd}-d src, got {dim}")
    return dim % nd


def broadcast_index(fn: str, name: str, index: Tensor, shape: List[int], dim: int) -> Tensor:
    # torch_scatter's rule: a 1-d index is aligned with `dim`; missing trailing
    # dimensions are appended; then it is expanded to `shape`.
    orig = tuple(index.shape)
    if index.dim() == 1:
        index = index.view([1] * dim + [-1])
    if index.dim() < len(shape):
        index = index.view(list(index.shape) + [1] * (len(shape) - index.dim()))
    try:
        return index.expand(shape)
    except RuntimeError:
        raise ValueError(f"{fn}: {name} of shape {orig} cannot be broadcast to {tuple(shape)} along dim {dim}") from None


def zeros_from(src: Tensor, shape: List[int]) -> Tensor:
    """Zeros of ``shape`` that stay in ``src``'s autograd graph (outputs of an empty ``src``)."""
    z = torch.zeros(shape, dtype=src.dtype, device=src.device)
    return z + src.sum() * 0 if src.requires_grad else z


def range_check(fn: str, name: str, key: Tensor, N: int) -> None:
    if key.numel():
        lo, hi = torch.stack([key.min(), key.max()]).tolist()
        if lo < 0 or hi >= N:
            raise ValueError(f"{fn}: {name} values must be in [0, {N}), got min {lo}, max {hi}")


class Plan:
    """How a broadcast index of ``shape`` (N slots along ``dim``) maps onto row reductions.

    mode 0: the index varies along ``dim`` only (rows = slices along dim);
    mode 1: it does not vary along the trailing dims (rows = (lead, e) pairs);
    mode 2: it varies everywhere (rows = single elements).
    """

    def __init__(self, index: Tensor, dim: int, N: int):
        shape = list(index.shape)
        nd = len(shape)
        self.shape, self.dim, self.N = shape, dim, N
        self.B = math.prod(shape[:dim])
        self.E = shape[dim]
        self.K = math.prod(shape[dim + 1:])
        binv = all(index.stride(i) == 0 or shape[i] == 1 for i in range(dim))
        kinv = all(index.stride(i) == 0 or shape[i] == 1 for i in range(dim + 1, nd))
        dev = index.device
        if index.numel() == 0:  # zero-size dims: the general layout reshapes without ambiguity
            kinv = binv = False
        if kinv and binv:
            self.mode = 0
            self.key = index[(0,) * dim + (slice(None),) + (0,) * (nd - dim - 1)].to(torch.int64)
            self.S = N
        elif kinv:
            self.mode = 1
            idx = index[(Ellipsis,) + (0,) * (nd - dim - 1)].reshape(self.B, self.E).to(torch.int64)
            self.key = (idx + torch.arange(self.B, device=dev)[:, None] * N).reshape(-1)
            self.S = self.B * N
        else:
            self.mode = 2
            idx = index.reshape(self.B, self.E, self.K).to(torch.int64)
            b = torch.arange(self.B, device=dev)[:, None, None]
            k = torch.arange(self.K, device=dev)[None, None, :]
            self.key = ((idx + b * N) * self.K + k).reshape(-1)
            self.S = self.B * N * self.K

    def out_shape(self) -> List[int]:
        s = list(self.shape)
        s[self.dim] = self.N
        return s

    def rows(self, src: Tensor, along: Optional[int] = None) -> Tensor:
        """``src`` (``along`` entries on dim, default ``E``) as the rows the reduction runs over.

        ``rows(out, self.N)`` lays ``out`` out the same way: its row ``s`` is slot ``s``.
        """
        n = self.E if along is None else along
        if self.mode == 0:
            return src.movedim(self.dim, 0).reshape(n, self.B * self.K)
        return src.reshape(self.B * n, self.K) if self.mode == 1 else src.reshape(-1, 1)

    def unrows(self, res: Tensor) -> Tensor:
        s = self.out_shape()
        if self.mode == 0:
            rest = s[: self.dim] + s[self.dim + 1:]
            return res.reshape([self.N] + rest).movedim(0, self.dim)
        return res.reshape(s)

    def arg(self, arg: Tensor) -> Tensor:
        """Row positions -> positions along dim (``E`` for empty slots)."""
        if self.mode == 1:
            M = self.B * self.E
            arg = torch.where(arg == M, self.E, arg % max(self.E, 1))
        elif self.mode == 2:
            M = self.B * self.E * self.K
            arg = torch.where(arg == M, self.E, (arg // max(self.K, 1)) % max(self.E, 1))
        return self.unrows(arg)

    def gather(self, t: Tensor) -> Tensor:
        """``t`` (the out shape, N along dim) read back at every index position (the index shape)."""
        if self.mode == 0:
            r = t.movedim(self.dim, 0).reshape(self.N, self.B * self.K)
            g = _seg.gather_rows(r, self.key)
            rest = self.shape[: self.dim] + self.shape[self.dim + 1:]
            return g.reshape([self.E] + rest).movedim(0, self.dim)
        if self.mode == 1:
            return _seg.gather_rows(t.reshape(self.B * self.N, self.K), self.key).reshape(self.shape)
        return _seg.gather_rows(t.reshape(-1, 1), self.key).reshape(self.shape)


def reduce_plan(fn: str, plan: Plan, src: Tensor, reduce: str, want_arg: bool):
    red = {"add": "sum", "mul": "prod"}.get(reduce, reduce)
    x = plan.rows(src)
    vals, arg, counts = _seg.grouped_rows(fn, x, plan.key, plan.S, red, want_arg)
    return plan.unrows(vals), (plan.arg(arg) if arg is not None else None), counts


def counts_like(plan: Plan, counts: Tensor, like: Tensor) -> Tensor:
    """Per-slot element counts (S,) broadcast to the out shape."""
    if plan.mode == 0:
        s = [1] * len(plan.shape)
        s[plan.dim] = plan.N
        return counts.reshape(s).expand(plan.out_shape())
    if plan.mode == 1:
        return counts.reshape(plan.B, plan.N, 1).expand(plan.B, plan.N, plan.K).reshape(plan.out_shape())
    return counts.reshape(plan.out_shape())


def with_arg(r) -> Tuple[Tensor, Tensor]:
    v, a = r
    return v, (a if a is not None else torch.empty(0, dtype=torch.int64, device=v.device))


def finish(fn: str, plan: Plan, src: Tensor, reduce: str, out: Optional[Tensor], int_div: str):
    """The reduction with torch_scatter's out= semantics; returns (out, arg or None)."""
    mm = reduce in ("min", "max")
    if out is None:
        if reduce == "mean" and not src.is_floating_point() and int_div == "trunc":
            s, _, counts = reduce_plan(fn, plan, src, "sum", False)
            c = counts_like(plan, counts, s).clamp(min=1).to(s.dtype)
            return torch.div(s, c, rounding_mode="trunc"), None
        vals, arg, _ = reduce_plan(fn, plan, src, reduce, mm)
        return vals, arg
    if reduce in ("sum", "add", "mul", "mean"):
        # out's value opens each slot's sequential pass, then the elements in order along dim:
        # ((out + s_1) + s_2) + ..., the additions torch_scatter's CPU kernel (scatter_add_) makes.
        red = "prod" if reduce == "mul" else "sum"
        x = torch.cat([plan.rows(out, plan.N), plan.rows(src)])
        key = torch.cat([torch.arange(plan.S, device=plan.key.device), plan.key])
        vals, _, counts = _seg.grouped_rows(fn, x, key, plan.S, red, False)
        n_src = counts_like(plan, counts - 1, out)  # src elements only, as the original counts
        out.copy_(torch.where(n_src > 0, plan.unrows(vals), out))  # untouched slots keep out's bits (-0.0)
        if reduce != "mean":
            return out, None
        c = n_src.clamp(min=1).to(out.dtype)
        if out.is_floating_point():
            return out.true_divide_(c), None
        return out.div_(c, rounding_mode=int_div), None
    vals, arg, counts = reduce_plan(fn, plan, src, reduce, mm)
    nonempty = counts_like(plan, counts, out) > 0
    better = nonempty & ((vals < out) if reduce == "min" else (vals > out))
    new = torch.where(better, vals, out)
    arg = torch.where(better, arg, plan.E)
    out.copy_(new)
    return out, arg


def plan_for(fn: str, full_index: Tensor, dim: int, index: Tensor, src: Tensor, out: Optional[Tensor],
              dim_size: Optional[int]) -> "Plan":
    """The group count (``out``'s size, else ``dim_size``, else ``index.max() + 1``), the range check, the plan."""
    if out is not None:
        check_out(fn, out, src, dim)
        N = out.shape[dim]
    elif dim_size is not None:
        N = V.check_int(fn, "dim_size", dim_size, 0)
    else:
        N = int(index.max()) + 1 if index.numel() else 0
    range_check(fn, "index", index, N)
    if out is None:
        oshape = list(src.shape)
        oshape[dim] = N
        V.check_fits(fn, "dim_size" if dim_size is not None else "index.max() + 1", N, "the output",
                     oshape, src.element_size(), src.device)
    return Plan(full_index, dim, N)


def scatter_plan(fn: str, src: Tensor, index, dim, out: Optional[Tensor], dim_size: Optional[int]) -> "Plan":
    """The prologue of scatter and of every composite: ``index`` checked, broadcast along ``dim``, planned."""
    check_index(fn, "index", index, src)
    d = norm_dim(fn, dim, src.dim())
    idx = broadcast_index(fn, "index", index, list(src.shape), d)
    return plan_for(fn, idx, d, index, src, out, dim_size)


def check_floating(fn: str, src) -> None:
    if not isinstance(src, torch.Tensor) or not torch.is_floating_point(src):
        got = src.dtype if isinstance(src, torch.Tensor) else type(src).__name__
        raise ValueError(f"`{fn}` can only be computed over tensors with floating point data types, got {got}")
