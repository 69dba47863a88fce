"""Argument checks shared by every public pcgeom function.

Every message names the function, the argument, what was expected and what was
given, e.g. ``knn: points must have shape (B, N, D) with the B and D of query
(2, *, 3), got (2, 100, 4)``.  Value checks that need the data (lengths within
range, ...) run in eager mode only: under ``torch.compile`` they would force a
graph break, and the kernels re-check them anyway.
"""

from __future__ import annotations

import numbers

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def row_dtype(n: int) -> torch.dtype:
    """The dtype for row numbers ``0 .. n - 1``: int32 while they fit (half the bytes), else int64."""
    return torch.int32 if n - 1 <= torch.iinfo(torch.int32).max else torch.int64


def shape_str(t) -> str:
    """``t``'s shape as ``(2, 3)``, for error messages."""
    return str(tuple(int(s) for s in t.shape))


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The accumulation dtype of pcgeom's distance math: float64 for float64 inputs, float32 otherwise."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def safe_sqrt(x: torch.Tensor) -> torch.Tensor:
    """sqrt whose gradient at an exact 0 is 0 instead of inf (inf * 0 would give NaN).

    Only an exact 0 maps to 0: a NaN stays NaN (pcgeom's rule: NaN propagates)."""
    pos = x > 0
    return torch.where(pos, torch.where(pos, x, torch.ones_like(x)).sqrt(), torch.where(x == 0, torch.zeros_like(x), x))


def non_finite_points(fn: str, name: str, points: torch.Tensor, why: str):
    """A ValueError naming the points of ``points`` with NaN or inf coordinates, or None if all are finite.

    ``points`` is ``(N, D)`` or ``(N,)`` (one coordinate per point); the
    message says how many points, the first one's index and coordinates, and
    ``why`` they cannot be used, e.g. ``grid_cluster: pos must be finite, got
    1 of 10 points with NaN or inf coordinates (the first: pos[4] = [0.2, nan,
    0.7]); a voxel cannot hold them: drop them first``.  Reads the data
    (host sync); callers check in eager mode only.
    """
    rows = points.detach().reshape(points.shape[0], -1) if points.dim() else points.detach().reshape(1, 1)
    bad = ~torch.isfinite(rows).all(1)
    n_bad = int(bad.sum())
    if n_bad == 0:
        return None
    first = int(bad.nonzero()[0, 0])
    return ValueError(f"{fn}: {name} must be finite, got {n_bad} of {rows.shape[0]} points with NaN or inf "
                      f"coordinates (the first: {name}[{first}] = {rows[first].tolist()}); {why}")


def compiling() -> bool:
    return torch.compiler.is_compiling()




def check_tensor(fn: str, name: str, t, ndim: int, layout: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor of shape {layout}, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{fn}: {name} must have shape {layout}, got {shape_str(t)}")


def check_points(fn: str, name: str, t, layout: str = "(B, N, D)") -> None:
    """A floating ``(B, N, D)`` tensor with D >= 1."""
    check_tensor(fn, name, t, 3, layout)
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{fn}: {name} must be float16, bfloat16, float32 or float64, got {t.dtype}"
        )
    if t.shape[2] < 1:
        raise ValueError(f"{fn}: {name} must have at least one coordinate (D >= 1), got shape {shape_str(t)}")


def check_pair(fn: str, qname: str, q: torch.Tensor, pname: str, p: torch.Tensor) -> None:
    """Same batch size, dimension, dtype and device."""
    if p.shape[0] != q.shape[0] or p.shape[2] != q.shape[2]:
        raise ValueError(
            f"{fn}: {pname} must have shape (B, N, D) with the B and D of {qname} "
            f"({q.shape[0]}, *, {q.shape[2]}), got {shape_str(p)}"
        )
    if p.dtype != q.dtype:
        raise TypeError(f"{fn}: {qname} and {pname} must have the same dtype, got {q.dtype} and {p.dtype}")
    if p.device != q.device:
        raise ValueError(f"{fn}: {qname} and {pname} must be on the same device, got {q.device} and {p.device}")


def check_int(fn: str, name: str, v, minimum: int | None = None) -> int:
    """A Python integer (not bool) >= minimum; SymInts pass under torch.compile."""
    if isinstance(v, bool) or not isinstance(v, (numbers.Integral, torch.SymInt)):
        raise TypeError(f"{fn}: {name} must be an int, got {type(v).__name__} {v!r}")
    if isinstance(v, torch.SymInt):
        return v
    v = int(v)
    if minimum is not None and v < minimum:
        raise ValueError(f"{fn}: {name} must be >= {minimum}, got {v}")
    return v


def check_float(fn: str, name: str, v, minimum: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{fn}: {name} must be a float, got {type(v).__name__} {v!r}")
    v = float(v)
    if v != v:
        raise ValueError(f"{fn}: {name} must not be NaN")
    if minimum is not None and v < minimum:
        raise ValueError(f"{fn}: {name} must be >= {minimum}, got {v}")
    return v


def lengths_arg(fn: str, name: str, lengths, B: int, max_len: int, device) -> torch.Tensor:
    """Normalises optional per-cloud lengths to an int64 ``(B,)`` tensor on ``device``.

    ``None`` means "all ``max_len`` entries are valid".  Values must lie in
    ``[0, max_len]``.
    """
    if lengths is None:
        return torch.full((B,), max_len, dtype=torch.int64, device=device)
    if not isinstance(lengths, torch.Tensor):
        try:
            lengths = torch.as_tensor(lengths)
        except Exception as exc:
            raise TypeError(f"{fn}: {name} must be an integer tensor of shape ({B},), got {type(lengths).__name__}") from exc
    if lengths.dtype not in INT_DTYPES:
        raise TypeError(f"{fn}: {name} must be an integer tensor of shape ({B},), got dtype {lengths.dtype}")
    if lengths.dim() != 1 or lengths.shape[0] != B:
        raise ValueError(f"{fn}: {name} must have shape ({B},), got {shape_str(lengths)}")
    if B > 0:
        check_host_readable(fn, name, lengths, device)
    lengths = lengths.to(device=device, dtype=torch.int64)
    if not compiling() and B > 0:
        lo, hi = int(lengths.min()), int(lengths.max())
        if lo < 0 or hi > max_len:
            bad = int(lengths.argmin()) if lo < 0 else int(lengths.argmax())
            raise ValueError(
                f"{fn}: {name} values must be in [0, {max_len}], got {name}[{bad}]={int(lengths[bad])}"
            )
    return lengths


def check_index_tensor(fn: str, name: str, idx, ndim: int, layout: str) -> None:
    check_tensor(fn, name, idx, ndim, layout)
    if idx.dtype != torch.int64:
        raise TypeError(f"{fn}: {name} must be int64, got {idx.dtype}")


def check_offsets_unused(fn: str, *offsets) -> None:
    """Offsets belong to the packed (2-D) layout; with padded inputs they are a mistake."""
    if any(o is not None for o in offsets):
        raise ValueError(
            f"{fn}: *offsets= are for packed (N_total, D) inputs; padded (B, N, D) inputs take *lengths="
        )


def bytes_str(n: float) -> str:
    """``1.5 GiB``-style sizes for the size errors (the kernels' ``bytes_str`` in csrc/common/checks.h)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n:.1f} {unit}"
        n /= 1024


def alloc_named(fn: str, arg: str, value, what: str, shape, bytes_per_elem: int, make):
    """Runs ``make()`` (an allocation sized by ``arg``), naming ``arg``, the shape and the bytes if it fails.

    The Python twin of the kernels' ``alloc_output``: a size no address space
    holds is refused before ``make`` runs; an allocation that fails becomes
    ``<fn>: <arg>=<value> needs <what> of shape (...), <bytes>, and allocating
    it failed on the input's device``.
    """
    need = float(bytes_per_elem)
    for s in shape:
        need *= float(s)
    dims = ", ".join(str(int(s)) for s in shape)
    if need >= 2.0 ** 63:
        raise RuntimeError(f"{fn}: {arg}={value} is too large: {what} of shape ({dims}) would need "
                           f"{bytes_str(need)}, more than any address space holds")
    try:
        return make()
    except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        raise RuntimeError(f"{fn}: {arg}={value} needs {what} of shape ({dims}), {bytes_str(need)}, "
                           f"and allocating it failed on the input's device") from exc


def check_fits(fn: str, arg: str, value, what: str, shape, bytes_per_elem: int, device) -> None:
    """:func:`alloc_named` for outputs that Python code allocates piecemeal later (no single ``make``).

    From 1 GiB up it reserves the bytes once and frees them (a CUDA caching
    allocator keeps them for the real outputs); smaller sizes cost nothing.
    """
    if compiling():
        return
    need = float(bytes_per_elem)
    for s in shape:
        need *= float(s)
    if need < 2.0 ** 30:
        return
    alloc_named(fn, arg, value, what, shape, bytes_per_elem,
                lambda: torch.empty(int(need), dtype=torch.uint8, device=device))

def check_host_readable(fn: str, name: str, t: torch.Tensor, device) -> None:
    """Offsets / lengths are read on the host: a meta tensor (no data) on either side is named."""
    if compiling():
        return
    if t.device.type == "meta" or torch.device(device).type == "meta":
        where = name if t.device.type == "meta" else "the tensor it describes"
        raise ValueError(f"{fn}: {name} must hold values on a real device (its values are checked), "
                         f"got {where} on the meta device")
