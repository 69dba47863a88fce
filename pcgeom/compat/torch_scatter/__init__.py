"""``torch_scatter`` served by pcgeom: every public name of torch_scatter 2.1.2
(``scatter`` and ``scatter_sum/add/mean/min/max/mul``, ``segment_csr`` /
``segment_coo`` and their ``segment_<reduce>_csr/coo`` forms, ``gather_csr`` /
``gather_coo``, ``scatter_std``, ``scatter_logsumexp``, ``scatter_softmax``,
``scatter_log_softmax``, ``__version__``) with the original signatures,
broadcasting, ``out=`` / ``dim_size=`` rules, ``(values, arg)`` outputs and
gradients, so PyG / Pointcept (PTv2, PTv3) code that does ``import
torch_scatter`` runs unmodified and without a compiled extension.

The functions are TorchScript-scriptable like the originals
(``torch.jit.script(scatter_max)`` works; the reduction itself runs in Python
through ``torch.jit.ignore``, so scripted code calling them cannot be saved).

Every reduction goes through :mod:`pcgeom.segment` (stable sort by index, then
one sequential pass per output element in index order; no atomics): the
values **and gradients** are the same on every run.  Where torch_scatter differs:

* ``scatter`` / ``segment_coo`` sums, means and products use atomics on CUDA
  (the original documents them as non-deterministic); pcgeom adds each slot's
  elements in their order along ``dim`` -- the order of torch_scatter's CPU
  kernel -- with float16/bfloat16 accumulated in float32 and rounded once
  (the original's ``scatter`` accumulates them in their own precision).
* ``min`` / ``max``: ties give the **lowest** position (torch_scatter's CPU
  rule; its CUDA ``arg`` is whichever thread won), and the gradient flows to
  that element only.  NaN propagates (torch's ``minimum`` / ``maximum``);
  ``+-inf`` are values like any other (the original's "slot still holds the
  dtype's limit -> 0" fill also hit genuine ``+-inf`` / ``finfo.max``).
  With ``out=``, ``arg`` is set only where a ``src`` element is strictly
  better than ``out``'s old value, else ``src.size(dim)`` (the original CPU
  ``segment_coo`` could leave another slot's position there).
* ``segment_csr`` / ``gather_csr`` / ``segment_coo`` / ``gather_coo`` check
  their index arguments (sorted pointers within range, indices in range) and
  raise :class:`ValueError` naming the argument, where the original reads out
  of bounds; ``gather_csr`` fills output rows outside ``indptr``'s range with
  0 instead of leaving them uninitialised.  ``segment_coo`` with an unsorted
  ``index`` returns the per-index reduction (the original's is undefined).
* The ``torch.ops.torch_scatter.*`` operators are not registered (no
  compiled library); call the Python functions.

Usage::

    import pcgeom.compat
    pcgeom.compat.enable_shims()          # or, once per environment: pcgeom compat enable
    from torch_scatter import scatter, segment_csr
"""

import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from pcgeom import _validation as V
from pcgeom import segment as _seg

__version__ = "2.1.2"

__all__ = [
    "scatter_sum", "scatter_add", "scatter_mul", "scatter_mean", "scatter_min", "scatter_max", "scatter",
    "segment_sum_csr", "segment_add_csr", "segment_mean_csr", "segment_min_csr", "segment_max_csr", "segment_csr",
    "gather_csr",
    "segment_sum_coo", "segment_add_coo", "segment_mean_coo", "segment_min_coo", "segment_max_coo", "segment_coo",
    "gather_coo",
    "scatter_std", "scatter_logsumexp", "scatter_softmax", "scatter_log_softmax",
    "__version__",
]

_REDUCE = ("sum", "add", "mean", "min", "max", "mul")
_SEG_REDUCE = ("sum", "add", "mean", "min", "max")


# --------------------------------------------------------------------------- helpers


def _check_src(fn: str, src) -> None:
    if not isinstance(src, torch.Tensor):
        raise TypeError(f"{fn}: src must be a torch.Tensor, got {type(src).__name__}")
    if src.dtype not in V.FLOAT_DTYPES and src.dtype not in _seg._INT:
        raise TypeError(f"{fn}: src must be a floating or integer tensor, got {src.dtype}")
    if src.dim() == 0:
        raise ValueError(f"{fn}: src must have at least one dimension, got a 0-d tensor")


def _check_index(fn: str, name: str, index, src: Tensor) -> None:
    if not isinstance(index, torch.Tensor) or index.dtype not in _seg._INT:
        got = index.dtype if isinstance(index, torch.Tensor) else type(index).__name__
        raise TypeError(f"{fn}: {name} must be an integer tensor, got {got}")
    if index.device != src.device:
        raise ValueError(f"{fn}: {name} must be on {src.device} like src, got {index.device}")
    if index.dim() > src.dim() or index.dim() == 0:
        raise ValueError(f"{fn}: {name} must have 1 to src.dim()={src.dim()} dimensions, got shape {tuple(index.shape)}")


def _check_out(fn: str, out, src: Tensor, dim: int, size: Optional[int] = None) -> None:
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


def _norm_dim(fn: str, dim, nd: int) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{fn}: dim must be an int, got {type(dim).__name__}")
    if not -nd <= dim < nd:
        raise ValueError(f"{fn}: dim must be in [{-nd}, {nd - 1}] for a {nd}-d src, got {dim}")
    return dim % nd


def _broadcast(fn: str, name: str, index: Tensor, shape: List[int], dim: int) -> Tensor:
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


def _zeros_from(src: Tensor, shape: List[int]) -> Tensor:
    """Zeros of ``shape`` that stay in ``src``'s autograd graph (outputs of an empty ``src``)."""
    z = torch.zeros(shape, dtype=src.dtype, device=src.device)
    return z + src.sum() * 0 if src.requires_grad else z


def _range_check(fn: str, name: str, key: Tensor, N: int) -> None:
    if key.numel():
        lo, hi = torch.stack([key.min(), key.max()]).tolist()
        if lo < 0 or hi >= N:
            raise ValueError(f"{fn}: {name} values must be in [0, {N}), got min {lo}, max {hi}")


class _Plan:
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

    def rows(self, src: Tensor) -> Tensor:
        if self.mode == 0:
            return src.movedim(self.dim, 0).reshape(self.E, self.B * self.K)
        if self.mode == 1:
            return src.reshape(self.B * self.E, self.K)
        return src.reshape(-1, 1)

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


def _reduce_plan(fn: str, plan: _Plan, src: Tensor, reduce: str, want_arg: bool):
    red = {"add": "sum", "mul": "prod"}.get(reduce, reduce)
    x = plan.rows(src)
    vals, arg, counts = _seg._grouped(fn, x, plan.key, plan.S, red, want_arg)
    return plan.unrows(vals), (plan.arg(arg) if arg is not None else None), counts


def _counts_like(plan: _Plan, counts: Tensor, like: Tensor) -> Tensor:
    """Per-slot element counts (S,) broadcast to the out shape."""
    if plan.mode == 0:
        s = [1] * len(plan.shape)
        s[plan.dim] = plan.N
        return counts.reshape(s).expand(plan.out_shape())
    if plan.mode == 1:
        return counts.reshape(plan.B, plan.N, 1).expand(plan.B, plan.N, plan.K).reshape(plan.out_shape())
    return counts.reshape(plan.out_shape())


def _with_arg(r) -> Tuple[Tensor, Tensor]:
    v, a = r
    return v, (a if a is not None else torch.empty(0, dtype=torch.int64, device=v.device))


def _finish(fn: str, plan: _Plan, src: Tensor, reduce: str, out: Optional[Tensor], int_div: str):
    """The reduction with torch_scatter's out= semantics; returns (out, arg or None)."""
    mm = reduce in ("min", "max")
    if out is None:
        if reduce == "mean" and not src.is_floating_point() and int_div == "trunc":
            s, _, counts = _reduce_plan(fn, plan, src, "sum", False)
            c = _counts_like(plan, counts, s).clamp(min=1).to(s.dtype)
            return torch.div(s, c, rounding_mode="trunc"), None
        vals, arg, _ = _reduce_plan(fn, plan, src, reduce, mm)
        return vals, arg
    vals, arg, counts = _reduce_plan(fn, plan, src, "sum" if reduce == "mean" else reduce, mm)
    if reduce in ("sum", "add"):
        return out.add_(vals), None
    if reduce == "mul":
        return out.mul_(vals), None
    if reduce == "mean":
        out.add_(vals)
        c = _counts_like(plan, counts, out).clamp(min=1).to(out.dtype)
        if out.is_floating_point():
            return out.true_divide_(c), None
        return out.div_(c, rounding_mode=int_div), None
    nonempty = _counts_like(plan, counts, out) > 0
    better = nonempty & ((vals < out) if reduce == "min" else (vals > out))
    new = torch.where(better, vals, out)
    arg = torch.where(better, arg, plan.E)
    out.copy_(new)
    return out, arg


def _plan_for(fn: str, full_index: Tensor, dim: int, index: Tensor, src: Tensor, out: Optional[Tensor],
              dim_size: Optional[int]) -> "_Plan":
    """The group count (``out``'s size, else ``dim_size``, else ``index.max() + 1``), the range check, the plan."""
    if out is not None:
        _check_out(fn, out, src, dim)
        N = out.shape[dim]
    elif dim_size is not None:
        N = V.check_int(fn, "dim_size", dim_size, 0)
    else:
        N = int(index.max()) + 1 if index.numel() else 0
    _range_check(fn, "index", index, N)
    if out is None:
        oshape = list(src.shape)
        oshape[dim] = N
        V.check_fits(fn, "dim_size" if dim_size is not None else "index.max() + 1", N, "the output",
                     oshape, src.element_size(), src.device)
    return _Plan(full_index, dim, N)


@torch.jit.ignore
def _scatter(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
             reduce: str) -> Tuple[Tensor, Tensor]:
    fn = "scatter" if reduce not in _REDUCE else f"scatter_{reduce}"
    _check_src(fn, src)
    if reduce not in _REDUCE:
        raise ValueError(f"scatter: reduce must be one of {_REDUCE}, got {reduce!r}")
    _check_index(fn, "index", index, src)
    d = _norm_dim(fn, dim, src.dim())
    idx = _broadcast(fn, "index", index, list(src.shape), d)
    plan = _plan_for(fn, idx, d, index, src, out, dim_size)
    return _with_arg(_finish(fn, plan, src, reduce, out, "floor"))


# --------------------------------------------------------------------------- scatter


def scatter_sum(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
    """Sums ``src`` into the slots named by ``index`` along ``dim`` (see :func:`scatter`)."""
    return _scatter(src, index, dim, out, dim_size, "sum")[0]


def scatter_add(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
    """Alias of :func:`scatter_sum`."""
    return _scatter(src, index, dim, out, dim_size, "sum")[0]


def scatter_mul(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
    """Multiplies ``src`` into the slots named by ``index`` (empty slots: 1, as torch_scatter)."""
    return _scatter(src, index, dim, out, dim_size, "mul")[0]


def scatter_mean(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                 dim_size: Optional[int] = None) -> Tensor:
    """Mean per slot (count clamped to 1, so empty slots are 0; integers: floor division).

    With ``out``, the sums are added to ``out`` and the result divided by the
    count, as torch_scatter does.
    """
    return _scatter(src, index, dim, out, dim_size, "mean")[0]


def scatter_min(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """Minimum per slot and its position along ``dim`` (``src.size(dim)`` for empty slots; ties: lowest)."""
    return _scatter(src, index, dim, out, dim_size, "min")


def scatter_max(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """Maximum per slot and its position along ``dim`` (``src.size(dim)`` for empty slots; ties: lowest)."""
    return _scatter(src, index, dim, out, dim_size, "max")


def scatter(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
            dim_size: Optional[int] = None, reduce: str = "sum") -> Tensor:
    """Reduces ``src`` into ``out`` at the positions ``index`` names along ``dim``.

    ``out[..., index[..., j, ...], ...] = reduce(src[..., j, ...])`` -- torch_scatter's
    ``scatter`` with its broadcasting (a 1-d ``index`` runs along ``dim``;
    missing trailing dimensions are broadcast) and output size
    (``out.size(dim)``, else ``dim_size``, else ``index.max() + 1``).
    Deterministic (no atomics; see the module docstring).

    Args:
        src: the source tensor (floating or integer).
        index: int64 (any integer dtype) indices into ``out`` along ``dim``,
            broadcastable to ``src`` as above; values in ``[0, out.size(dim))``.
        dim: the axis along which to index (default -1).
        out: optional destination, ``src``'s shape except along ``dim``;
            the reduction includes its values (``sum``: added, ``mul``:
            multiplied, ``mean``: added then divided by the count, ``min`` /
            ``max``: compared) and it is modified in place and returned.
        dim_size: size of ``out`` along ``dim`` when ``out`` is not given.
        reduce: ``"sum"`` / ``"add"``, ``"mul"``, ``"mean"``, ``"min"`` or ``"max"``.

    Returns:
        The reduced tensor.  Slots no index names are 0 (``mul``: 1) when
        ``out`` is not given.

    Raises:
        TypeError: wrong argument types or dtypes.
        ValueError: unknown ``reduce``, ``index`` not broadcastable or out of
            range, ``out`` of the wrong shape / dtype / device.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import scatter
        >>> src = torch.tensor([[1.0, 2], [3, 4], [5, 6]])
        >>> scatter(src, torch.tensor([0, 1, 0]), dim=0, reduce="mean").tolist()
        [[3.0, 4.0], [3.0, 4.0]]
    """
    if reduce == "sum" or reduce == "add":
        return _scatter(src, index, dim, out, dim_size, "sum")[0]
    if reduce == "mul":
        return _scatter(src, index, dim, out, dim_size, "mul")[0]
    if reduce == "mean":
        return _scatter(src, index, dim, out, dim_size, "mean")[0]
    if reduce == "min":
        return _scatter(src, index, dim, out, dim_size, "min")[0]
    if reduce == "max":
        return _scatter(src, index, dim, out, dim_size, "max")[0]
    raise ValueError("scatter: reduce must be one of 'sum', 'add', 'mul', 'mean', 'min', 'max', got " + str(reduce))


# --------------------------------------------------------------------------- segment_csr / gather_csr


def _indptr(fn: str, indptr, src: Tensor) -> Tuple[Tensor, int]:
    _check_index(fn, "indptr", indptr, src)
    if indptr.shape[-1] < 1 and src.numel() > 0:  # an empty src takes an empty indptr (0 segments)
        raise ValueError(f"{fn}: indptr must have at least one entry along its last dimension "
                         f"(S + 1 for S segments), got shape {tuple(indptr.shape)}")
    dim = indptr.dim() - 1
    lead = list(src.shape[:dim])
    try:
        ptr = indptr.expand(lead + [indptr.shape[-1]])
    except RuntimeError:
        raise ValueError(f"{fn}: indptr of shape {tuple(indptr.shape)} cannot be broadcast to "
                         f"{tuple(lead) + (indptr.shape[-1],)} (src's leading dimensions)") from None
    return ptr.to(torch.int64), dim


def _check_ptr(fn: str, ptr: Tensor, E: int, what: str) -> None:
    if ptr.numel() == 0:
        return
    steps = ptr[..., 1:] - ptr[..., :-1]
    bad, lo, hi = torch.stack([(steps < 0).any().long() if steps.numel() else ptr.new_zeros(()),
                               ptr.min(), ptr.max()]).tolist()
    if bad:
        raise ValueError(f"{fn}: indptr must be non-decreasing along its last dimension")
    if lo < 0 or hi > E:
        raise ValueError(f"{fn}: indptr values must be in [0, {E}] ({what}), got min {lo}, max {hi}")


def _csr_index(ptr: Tensor, E: int) -> Tensor:
    """Per-position segment slot for rows 0..E-1 of every leading row: 0 before ptr[0], s + 1 inside
    segment s, S + 1 after ptr[S] (sorted, so no sort is needed)."""
    flat = ptr.reshape(-1, ptr.shape[-1])
    e = torch.arange(E, device=ptr.device).expand(flat.shape[0], E).contiguous()
    s = torch.searchsorted(flat.contiguous(), e, right=True)  # 0 before ptr[0], S+1 from ptr[S] on
    return s.reshape(list(ptr.shape[:-1]) + [E])


def _csr_plan(idx: Tensor, shape: List[int], dim: int, N: int, binv: bool) -> _Plan:
    nd = len(shape)
    if binv:
        row = idx.reshape(-1, idx.shape[-1])[0]
        full = row.view([1] * dim + [-1] + [1] * (nd - dim - 1)).expand(shape)
    else:
        full = idx.view(list(idx.shape) + [1] * (nd - dim - 1)).expand(shape)
    return _Plan(full, dim, N)


@torch.jit.ignore
def _segment_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor], reduce: str,
                 want_arg: bool) -> Tuple[Tensor, Tensor]:
    fn = "segment_csr" if reduce not in _SEG_REDUCE else f"segment_{reduce}_csr"
    _check_src(fn, src)
    if reduce not in _SEG_REDUCE:
        raise ValueError(f"segment_csr: reduce must be one of {_SEG_REDUCE}, got {reduce!r}")
    ptr, dim = _indptr(fn, indptr, src)
    S = max(ptr.shape[-1] - 1, 0)
    E = src.shape[dim]
    shape = list(src.shape)
    oshape = list(shape)
    oshape[dim] = S
    if out is not None:
        _check_out(fn, out, src, dim, S)
    if src.numel() == 0:
        res = _zeros_from(src, oshape) if out is None else out
        arg = torch.full(oshape, E, dtype=torch.int64, device=src.device)
        return res, arg
    _check_ptr(fn, ptr, E, f"src.size({dim})")
    binv = all(ptr.stride(i) == 0 or ptr.shape[i] == 1 for i in range(dim))
    if binv and reduce in ("sum", "add", "mean") and src.is_floating_point():
        # One pointer row shared by all leading rows (PTv2's pooling): a
        # sequential pass per output element along dim, no sort, no copy.
        p = ptr[(0,) * dim]
        lo, hi = p[0], p[-1]
        lengths = p[1:] - p[:-1]
        acc = _seg._ACC.get(src.dtype, src.dtype)
        body = src.narrow(dim, int(lo), int(hi - lo)) if (int(lo), int(hi)) != (0, E) else src
        lens = lengths.expand(list(src.shape[:dim]) + [S]).contiguous() if dim else lengths
        vals = torch.segment_reduce(body.to(acc), "sum", lengths=lens, axis=dim, unsafe=True, initial=0)
        if reduce == "mean":
            shape1 = [1] * src.dim()
            shape1[dim] = S
            vals = vals / lengths.clamp(min=1).to(acc).view(shape1)
        vals = vals.to(src.dtype)
        empty_arg = torch.empty(0, dtype=torch.int64, device=src.device)
        if out is not None:
            return out.copy_(vals), empty_arg
        return vals, empty_arg
    if binv and reduce in ("min", "max") and src.is_floating_point():
        vals, arg = _csr_extreme(src, ptr[(0,) * dim], dim, E, S, reduce, want_arg)
        if out is not None:
            return out.copy_(vals), arg
        return vals, arg
    slot = _csr_index(ptr[(0,) * dim] if binv and dim else ptr, E)
    plan = _csr_plan(slot, shape, dim, S + 2, binv)
    vals, arg = _with_arg(_finish(fn, plan, src, "sum" if reduce == "add" else reduce, None, "trunc"))
    vals = vals.narrow(dim, 1, S)
    if arg.numel() or reduce in ("min", "max"):
        arg = arg.narrow(dim, 1, S)
    if out is not None:
        out.copy_(vals)
        return out, arg
    return vals, arg


def _csr_extreme(src: Tensor, p: Tensor, dim: int, E: int, S: int, reduce: str, want_arg: bool) -> Tuple[Tensor, Tensor]:
    """min / max over the segments of one shared 1-d ``indptr`` ``p`` along ``dim`` (PTv2 / PTv3 grid pooling).

    Values by one sequential ``segment_reduce`` pass; where an ``arg`` is
    wanted, or a gradient (which goes to the ``arg`` element only, as
    torch_scatter's), the lowest position equal to the extreme.
    """
    lo, hi = int(p[0]), int(p[-1])
    lengths = p[1:] - p[:-1]
    lens = lengths.expand(list(src.shape[:dim]) + [S]).contiguous() if dim else lengths
    body = src.narrow(dim, lo, hi - lo) if (lo, hi) != (0, E) else src
    shape1 = [1] * src.dim()
    shape1[dim] = S
    empty = (lengths == 0).view(shape1)
    with torch.no_grad():
        vals = torch.segment_reduce(body.detach(), reduce, lengths=lens, axis=dim, unsafe=True)
        vals = vals.masked_fill(empty, 0)
    need = want_arg or (src.requires_grad and torch.is_grad_enabled())
    if not need:
        return vals, torch.empty(0, dtype=torch.int64, device=src.device)
    with torch.no_grad():
        seg = torch.searchsorted(p, torch.arange(lo, hi, device=src.device), right=True) - 1
        at = vals.index_select(dim, seg)
        hit = body.detach() == at
        if bool(torch.isnan(vals).any()):
            hit |= torch.isnan(body.detach()) & torch.isnan(at)
        pos_shape = [1] * src.dim()
        pos_shape[dim] = hi - lo
        # Positions relative to lo, as float32 while exact (< 2**24 rows), else float64.
        pdt = torch.float32 if hi - lo < 2**24 else torch.float64
        pos = torch.arange(0, hi - lo, device=src.device, dtype=pdt).view(pos_shape)
        cand = torch.where(hit, pos, torch.tensor(float(hi - lo), dtype=pdt, device=src.device))
        arg = torch.segment_reduce(cand, "min", lengths=lens, axis=dim, unsafe=True).to(torch.int64) + lo
        arg = arg.masked_fill(empty, E)
    if src.requires_grad and torch.is_grad_enabled():
        vals = torch.gather(src, dim, arg.clamp(max=max(E - 1, 0))).masked_fill(empty, 0)
    return vals, arg


def segment_sum_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Sum over each CSR segment (see :func:`segment_csr`)."""
    return _segment_csr(src, indptr, out, "sum", True)[0]


def segment_add_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Alias of :func:`segment_sum_csr`."""
    return _segment_csr(src, indptr, out, "sum", True)[0]


def segment_mean_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Mean over each CSR segment (empty segments 0; integers: truncating division, as torch_scatter)."""
    return _segment_csr(src, indptr, out, "mean", True)[0]


def segment_min_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Minimum over each CSR segment and its absolute position along the segment dim (``src.size(dim)`` if empty)."""
    return _segment_csr(src, indptr, out, "min", True)


def segment_max_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Maximum over each CSR segment and its absolute position along the segment dim (``src.size(dim)`` if empty)."""
    return _segment_csr(src, indptr, out, "max", True)


def segment_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None, reduce: str = "sum") -> Tensor:
    """Reduces ``src`` over the ranges ``[indptr[i], indptr[i+1])`` along dim ``indptr.dim() - 1``.

    torch_scatter's ``segment_csr``: with ``src`` of shape ``(x_0, ..., x_{m-1},
    x_m, ...)`` and ``indptr`` of shape ``(x_0, ..., x_{m-2}, S + 1)`` (leading
    dimensions broadcast), the output is ``(x_0, ..., x_{m-2}, S, x_m, ...)``.
    Elements outside ``[indptr[0], indptr[-1])`` are ignored.

    Args:
        src: the source tensor (floating or integer).
        indptr: integer index pointers, non-decreasing along the last
            dimension, values in ``[0, src.size(dim)]``.
        out: optional destination of the output shape; it is **overwritten**
            (as torch_scatter's ``segment_csr`` does) and returned.
        reduce: ``"sum"`` / ``"add"``, ``"mean"``, ``"min"`` or ``"max"``.

    Returns:
        The reduced tensor; empty segments are 0.

    Raises:
        TypeError: wrong argument types or dtypes.
        ValueError: unknown ``reduce``; ``indptr`` unsorted, out of range or
            not broadcastable; ``out`` of the wrong shape.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import segment_csr
        >>> segment_csr(torch.tensor([1.0, 2, 3, 4, 5, 6]), torch.tensor([0, 2, 5, 5, 6])).tolist()
        [3.0, 12.0, 0.0, 6.0]
    """
    if reduce == "sum" or reduce == "add":
        return _segment_csr(src, indptr, out, "sum", True)[0]
    if reduce == "mean":
        return _segment_csr(src, indptr, out, "mean", True)[0]
    if reduce == "min":
        return _segment_csr(src, indptr, out, "min", False)[0]
    if reduce == "max":
        return _segment_csr(src, indptr, out, "max", False)[0]
    raise ValueError("segment_csr: reduce must be one of 'sum', 'add', 'mean', 'min', 'max', got " + str(reduce))


@torch.jit.ignore
def _gather_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor]) -> Tensor:
    fn = "gather_csr"
    _check_src(fn, src)
    ptr, dim = _indptr(fn, indptr, src)
    S = max(ptr.shape[-1] - 1, 0)
    if src.shape[dim] != S and src.shape[dim] != 0:
        raise ValueError(f"{fn}: src.size({dim}) must be indptr.size(-1) - 1 = {S}, got {src.shape[dim]}")
    shape = list(src.shape)
    if out is not None:
        if not isinstance(out, torch.Tensor) or out.dim() != src.dim():
            raise ValueError(f"{fn}: out must be a tensor with {src.dim()} dimensions like src, got "
                             f"{tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}")
        E = out.shape[dim]
        _check_out(fn, out, src, dim, E)
    else:
        E = int(ptr.reshape(-1)[-1]) if src.numel() > 0 and ptr.numel() else 0
    oshape = list(shape)
    oshape[dim] = E
    if out is None:
        V.check_fits(fn, "indptr[..., -1]", E, "the output", oshape, src.element_size(), src.device)
    if src.numel() == 0:
        return _zeros_from(src, oshape) if out is None else out
    _check_ptr(fn, ptr, E, f"the output size {E} along dim {dim}")
    if E == 0:  # every range empty: nothing to gather
        return _zeros_from(src, oshape) if out is None else out
    binv = all(ptr.stride(i) == 0 or ptr.shape[i] == 1 for i in range(dim))
    slot = _csr_index(ptr[(0,) * dim] if binv and dim else ptr, E)
    tshape = list(oshape)
    plan = _csr_plan(slot, tshape, dim, S + 2, binv)
    z = torch.zeros_like(src.narrow(dim, 0, 1))
    g = plan.gather(torch.cat([z, src, z], dim))  # slot 0 / S + 1: outside every range -> 0
    if out is None:
        return g
    return out.copy_(torch.where(_inside(slot, tshape, dim, binv, S), g, out))


def _inside(slot: Tensor, shape: List[int], dim: int, binv: bool, S: int) -> Tensor:
    m = (slot > 0) & (slot <= S)
    nd = len(shape)
    if binv:
        m = m.reshape(-1, m.shape[-1])[0].view([1] * dim + [-1] + [1] * (nd - dim - 1))
    else:
        m = m.view(list(m.shape) + [1] * (nd - dim - 1))
    return m.expand(shape)


def gather_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Repeats segment values back over their ranges: the inverse of :func:`segment_csr`.

    ``out[..., e, ...] = src[..., i, ...]`` for ``indptr[i] <= e < indptr[i+1]``.

    Args:
        src: ``(x_0, ..., x_{m-2}, S, ...)`` tensor, one value per segment.
        indptr: ``(x_0, ..., x_{m-2}, S + 1)`` integer index pointers
            (non-decreasing; leading dimensions broadcast).
        out: optional destination ``(..., E, ...)``; only rows inside
            ``indptr``'s ranges are written.

    Returns:
        ``(..., E, ...)`` with ``E = out.size(dim)`` or ``indptr[..., -1]``
        (last row); rows outside the ranges are 0 when ``out`` is not given.
        The gradient w.r.t. ``src`` is a deterministic segment sum.

    Raises:
        TypeError: as :func:`segment_csr`.
        ValueError: as :func:`segment_csr`; ``src.size(dim)`` must be
            ``indptr.size(-1) - 1``.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import gather_csr
        >>> gather_csr(torch.tensor([1.0, 2, 3]), torch.tensor([0, 2, 2, 3])).tolist()
        [1.0, 1.0, 3.0]
    """
    return _gather_csr(src, indptr, out)


# --------------------------------------------------------------------------- segment_coo / gather_coo


def _coo_index(fn: str, index, src: Tensor) -> Tuple[Tensor, int]:
    _check_index(fn, "index", index, src)
    dim = index.dim() - 1
    try:
        idx = index.expand(list(src.shape[: index.dim()]))
    except RuntimeError:
        raise ValueError(f"{fn}: index of shape {tuple(index.shape)} cannot be broadcast to "
                         f"{tuple(src.shape[: index.dim()])} (src's leading dimensions)") from None
    nd = src.dim()
    full = idx.view(list(idx.shape) + [1] * (nd - dim - 1)).expand(list(src.shape))
    return full, dim


@torch.jit.ignore
def _segment_coo(src: Tensor, index: Tensor, out: Optional[Tensor], dim_size: Optional[int],
                 reduce: str) -> Tuple[Tensor, Tensor]:
    fn = "segment_coo" if reduce not in _SEG_REDUCE else f"segment_{reduce}_coo"
    _check_src(fn, src)
    if reduce not in _SEG_REDUCE:
        raise ValueError(f"segment_coo: reduce must be one of {_SEG_REDUCE}, got {reduce!r}")
    full, dim = _coo_index(fn, index, src)
    plan = _plan_for(fn, full, dim, index, src, out, dim_size)
    return _with_arg(_finish(fn, plan, src, "sum" if reduce == "add" else reduce, out, "trunc"))


def segment_sum_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tensor:
    """Sum per sorted index (see :func:`segment_coo`)."""
    return _segment_coo(src, index, out, dim_size, "sum")[0]


def segment_add_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tensor:
    """Alias of :func:`segment_sum_coo`."""
    return _segment_coo(src, index, out, dim_size, "sum")[0]


def segment_mean_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                     dim_size: Optional[int] = None) -> Tensor:
    """Mean per sorted index (empty slots 0; integers: truncating division)."""
    return _segment_coo(src, index, out, dim_size, "mean")[0]


def segment_min_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """Minimum per sorted index and its position along the index dim (``src.size(dim)`` if empty)."""
    return _segment_coo(src, index, out, dim_size, "min")


def segment_max_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """Maximum per sorted index and its position along the index dim (``src.size(dim)`` if empty)."""
    return _segment_coo(src, index, out, dim_size, "max")


def segment_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None, dim_size: Optional[int] = None,
                reduce: str = "sum") -> Tensor:
    """Reduces ``src`` by the sorted ``index`` along dim ``index.dim() - 1``.

    torch_scatter's ``segment_coo``: ``index`` of shape ``(x_0, ..., x_m)``
    (leading dimensions broadcast to ``src``'s) names the output slot of each
    element along dim ``m``; the output is ``src``'s shape with ``N`` there
    (``out.size(m)``, else ``dim_size``, else ``index.max() + 1``).

    Args:
        src: the source tensor (floating or integer).
        index: integer slot ids, sorted along the last dimension (an unsorted
            index is reduced per id all the same).
        out: optional destination; the reduction includes its values as in
            :func:`scatter`, slots no index names are left unchanged.
        dim_size: output size along the index dim when ``out`` is not given.
        reduce: ``"sum"`` / ``"add"``, ``"mean"``, ``"min"`` or ``"max"``.

    Returns:
        The reduced tensor; slots no index names are 0 when ``out`` is not given.

    Raises:
        TypeError: wrong types.
        ValueError: unknown ``reduce``, ``index`` out of range or not
            broadcastable, ``out`` of the wrong shape.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import segment_coo
        >>> segment_coo(torch.tensor([1.0, 2, 3, 4]), torch.tensor([0, 0, 2, 2]), reduce="max").tolist()
        [2.0, 0.0, 4.0]
    """
    if reduce == "sum" or reduce == "add":
        return _segment_coo(src, index, out, dim_size, "sum")[0]
    if reduce == "mean":
        return _segment_coo(src, index, out, dim_size, "mean")[0]
    if reduce == "min":
        return _segment_coo(src, index, out, dim_size, "min")[0]
    if reduce == "max":
        return _segment_coo(src, index, out, dim_size, "max")[0]
    raise ValueError("segment_coo: reduce must be one of 'sum', 'add', 'mean', 'min', 'max', got " + str(reduce))


@torch.jit.ignore
def _gather_coo(src: Tensor, index: Tensor, out: Optional[Tensor]) -> Tensor:
    fn = "gather_coo"
    _check_src(fn, src)
    _check_index(fn, "index", index, src)
    dim = index.dim() - 1
    lead = list(src.shape[:dim])
    try:
        idx = index.expand(lead + [index.shape[-1]])
    except RuntimeError:
        raise ValueError(f"{fn}: index of shape {tuple(index.shape)} cannot be broadcast to src's leading "
                         f"dimensions {tuple(lead)}") from None
    E = idx.shape[-1]
    oshape = list(src.shape)
    oshape[dim] = E
    if out is not None:
        _check_out(fn, out, src, dim, E)
    if src.numel() == 0:
        return _zeros_from(src, oshape) if out is None else out
    N = src.shape[dim]
    _range_check(fn, "index", index, N)
    full = idx.view(list(idx.shape) + [1] * (src.dim() - dim - 1)).expand(oshape)
    g = _Plan(full, dim, N).gather(src)
    if out is None:
        return g
    return out.copy_(g)


def gather_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Reads ``src`` back at ``index``: the inverse of :func:`segment_coo`.

    ``out[..., e, ...] = src[..., index[..., e], ...]`` along dim ``index.dim() - 1``.

    Args:
        src: ``(x_0, ..., x_{m-1}, N, ...)`` tensor.
        index: ``(x_0, ..., x_{m-1}, E)`` integer indices in ``[0, N)``
            (leading dimensions broadcast).
        out: optional destination ``(..., E, ...)``, overwritten and returned.

    Returns:
        ``(..., E, ...)`` tensor; the gradient w.r.t. ``src`` is a deterministic sum.

    Raises:
        TypeError: wrong types.
        ValueError: ``index`` out of range or not broadcastable, ``out`` of
            the wrong shape.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import gather_coo
        >>> gather_coo(torch.tensor([1.0, 2, 3]), torch.tensor([0, 0, 2])).tolist()
        [1.0, 1.0, 3.0]
    """
    return _gather_coo(src, index, out)


# --------------------------------------------------------------------------- composites


def _floating(fn: str, src) -> None:
    if not isinstance(src, torch.Tensor) or not torch.is_floating_point(src):
        got = src.dtype if isinstance(src, torch.Tensor) else type(src).__name__
        raise ValueError(f"`{fn}` can only be computed over tensors with floating point data types, got {got}")


@torch.jit.ignore
def _softmax(src: Tensor, index: Tensor, dim: int, dim_size: Optional[int], log: bool, eps: float) -> Tensor:
    fn = "scatter_log_softmax" if log else "scatter_softmax"
    _floating(fn, src)
    eps = V.check_float(fn, "eps", eps)
    _check_index(fn, "index", index, src)
    d = _norm_dim(fn, dim, src.dim())
    idx = _broadcast(fn, "index", index, list(src.shape), d)
    plan = _plan_for(fn, idx, d, index, src, None, dim_size)
    # Only the values of the maxima matter here (a shift by -0.0 or +0.0 is the same shift).
    mx = plan.unrows(_seg._extreme_values(plan.rows(src).detach(), plan.key, plan.S, "max"))
    shifted = src - plan.gather(mx)
    ex = shifted.exp()
    tot, _, _ = _reduce_plan(fn, plan, ex, "sum", False)
    if log:
        return shifted - plan.gather(tot.add(eps).log())
    return ex / plan.gather(tot)


def scatter_softmax(src: Tensor, index: Tensor, dim: int = -1, dim_size: Optional[int] = None) -> Tensor:
    """Softmax of ``src`` within each group of equal ``index`` along ``dim``.

    ``exp(src - max_g) / sum_g exp(src - max_g)`` per group ``g`` (torch_scatter's
    formula), with deterministic max / sum / gather.

    Args:
        src: floating tensor.
        index: group ids, broadcast as in :func:`scatter`.
        dim: the axis (default -1).
        dim_size: number of groups (default ``index.max() + 1``).

    Returns:
        Tensor of ``src``'s shape.

    Raises:
        ValueError: ``src`` not floating (as torch_scatter), bad ``index``.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import scatter_softmax
        >>> scatter_softmax(torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0, 0, 1])).tolist()
        [0.5, 0.5, 1.0]
    """
    return _softmax(src, index, dim, dim_size, False, 0.0)


def scatter_log_softmax(src: Tensor, index: Tensor, dim: int = -1, eps: float = 1e-12,
                        dim_size: Optional[int] = None) -> Tensor:
    """Log-softmax within each group: ``src - max_g - log(sum_g exp(src - max_g) + eps)``.

    Args:
        src: floating tensor.
        index: group ids, broadcast as in :func:`scatter`.
        dim: the axis (default -1).
        eps: added to the sum before the log (default 1e-12, as torch_scatter).
        dim_size: number of groups (default ``index.max() + 1``).

    Returns:
        Tensor of ``src``'s shape.

    Raises:
        ValueError: ``src`` not floating, bad ``index``.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import scatter_log_softmax
        >>> scatter_log_softmax(torch.tensor([0.0, 0.0]), torch.tensor([0, 0])).exp().tolist()
        [0.5, 0.5]
    """
    return _softmax(src, index, dim, dim_size, True, eps)


@torch.jit.ignore
def _logsumexp(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
               eps: float) -> Tensor:
    fn = "scatter_logsumexp"
    _floating(fn, src)
    eps = V.check_float(fn, "eps", eps)
    _check_index(fn, "index", index, src)
    d = _norm_dim(fn, dim, src.dim())
    idx = _broadcast(fn, "index", index, list(src.shape), d)
    plan = _plan_for(fn, idx, d, index, src, out, dim_size)
    shape = plan.out_shape()
    mx = torch.full(shape, float("-inf"), dtype=src.dtype, device=src.device)
    mx, _ = _finish(fn, plan, src, "max", mx, "floor")
    shifted = src - plan.gather(mx)
    shifted = shifted.masked_fill(torch.isnan(shifted), float("-inf"))
    sums, _, _ = _reduce_plan(fn, plan, shifted.exp(), "sum", False)
    if out is None:
        res = sums.add(eps).log().add(mx)
        return res.nan_to_num(neginf=0.0)
    old = out.clone()
    res = (out - mx).exp().add(sums).add(eps).log().add(mx)
    res = torch.where(torch.isfinite(res), res, old)
    return out.copy_(res)


def scatter_logsumexp(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                      dim_size: Optional[int] = None, eps: float = 1e-12) -> Tensor:
    """``log(sum exp(src))`` per group, computed stably around the group maximum.

    torch_scatter's formula: ``log(sum_g exp(src - max_g) + eps) + max_g``;
    empty groups are 0.  With ``out``, ``exp(out - max_g)`` joins the sum and
    slots whose result is not finite keep ``out``'s old value; ``out`` is
    modified in place and returned.

    Args:
        src: floating tensor.
        index: group ids, broadcast as in :func:`scatter`.
        dim: the axis (default -1).
        out: optional destination (see above).
        dim_size: number of groups when ``out`` is not given.
        eps: added inside the log (default 1e-12).

    Returns:
        Tensor of ``src``'s shape with ``N`` along ``dim``.

    Raises:
        ValueError: ``src`` not floating, bad ``index`` / ``out``.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import scatter_logsumexp
        >>> round(scatter_logsumexp(torch.tensor([0.0, 0.0]), torch.tensor([0, 0]))[0].item(), 4)
        0.6931
    """
    return _logsumexp(src, index, dim, out, dim_size, eps)


@torch.jit.ignore
def _std(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
         unbiased: bool) -> Tensor:
    fn = "scatter_std"
    _check_src(fn, src)
    _check_index(fn, "index", index, src)
    d = _norm_dim(fn, dim, src.dim())
    idx = _broadcast(fn, "index", index, list(src.shape), d)
    plan = _plan_for(fn, idx, d, index, src, out, dim_size)
    tot, _, counts = _reduce_plan(fn, plan, src, "sum", False)
    count = _counts_like(plan, counts, tot).to(src.dtype).clamp(min=1)
    mean = tot / count
    diff = src - plan.gather(mean)
    var, _, _ = _reduce_plan(fn, plan, diff * diff, "sum", False)
    if out is not None:
        var = out.add_(var)
    if unbiased:
        count = (count - 1).clamp(min=1)
    return (var / (count + 1e-6)).sqrt()


def scatter_std(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None, unbiased: bool = True) -> Tensor:
    """Standard deviation per group: ``sqrt(sum_g (src - mean_g)^2 / (n_g - 1 + 1e-6))``.

    torch_scatter's formula: counts are clamped to 1 (and, with ``unbiased``,
    ``n - 1`` clamped to 1), ``1e-6`` is added to the divisor; empty groups
    and single-element groups are 0.  With ``out``, the squared deviations
    are added to ``out`` in place and the standard deviation is returned as a
    new tensor (as the original).

    Args:
        src: floating tensor.
        index: group ids, broadcast as in :func:`scatter`.
        dim: the axis (default -1).
        out: optional accumulator (see above).
        dim_size: number of groups when ``out`` is not given.
        unbiased: divide by ``n - 1`` (default) instead of ``n``.

    Returns:
        Tensor of ``src``'s shape with ``N`` along ``dim``.

    Raises:
        TypeError / ValueError: wrong types or bad ``index`` / ``out``.

    Example:
        >>> import torch
        >>> from pcgeom.compat.torch_scatter import scatter_std
        >>> round(scatter_std(torch.tensor([1.0, 3.0]), torch.tensor([0, 0]))[0].item(), 4)
        1.4142
    """
    return _std(src, index, dim, out, dim_size, unbiased)
