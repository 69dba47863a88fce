"""Pure-torch implementations of every pcgeom op: the fallback and the test oracle.

This module *is* the semantic specification.  The native kernels must return
exactly what these functions return (same indices, same distances bit for bit):

* squared distances are ``sum_d (q_d - p_d)**2`` accumulated in coordinate order,
  in float32 for float16/bfloat16/float32 inputs and float64 for float64 inputs;
* neighbours are sorted by distance ascending, NaN after ``+inf``, ties to the
  lower index;
* missing neighbours are ``idx = -1`` with ``dist2 = +inf``;
* FPS follows the rules in :func:`farthest_point_sample_reference`.

Memory is bounded: no intermediate is larger than :data:`BUDGET_BYTES` (plus
the outputs themselves), whatever B, M and N are.
"""

from __future__ import annotations

import torch

from pcgeom._scaling import binary_exponent, times_power_of_two
from pcgeom._validation import acc_dtype, alloc_named

BUDGET_BYTES = 256 * 2**20
_KEY_SENTINEL = torch.iinfo(torch.int64).max




def sq_dist(q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Squared distances ``(m, n)`` between rows of ``q (m, D)`` and ``p (n, D)``.

    Inputs must already be in the accumulation dtype.  The sum runs over
    coordinates in order, exactly like the kernels, so results are bit-identical.
    """
    out = None
    for d in range(q.shape[-1]):
        diff = q[:, d, None] - p[None, :, d]
        sq = diff * diff
        out = sq if out is None else out.add_(sq)
    return out


_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_DTYPE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32",
                torch.float64: "float64", torch.int64: "int64", torch.int32: "int32"}


def _dtype(t: torch.Tensor) -> str:
    return _DTYPE_NAMES.get(t.dtype, str(t.dtype).replace("torch.", ""))


def _shape(t: torch.Tensor) -> str:
    return str(tuple(int(s) for s in t.shape))


# The kernel-boundary checks of csrc/common/checks.h, with the same wording:
# a direct torch.ops.pcgeom.* call with bad arguments is a RuntimeError that
# names the op, the argument, what was expected and what was given.
def _check_rank(op: str, name: str, t, rank: int, layout: str) -> None:
    if not isinstance(t, torch.Tensor) or t.dim() != rank:
        got = _shape(t) if isinstance(t, torch.Tensor) else type(t).__name__
        raise RuntimeError(f"{op}: {name} must have {rank} dimensions {layout}, got shape {got}")


def _check_size(op: str, name: str, t, dim: int, expected: int, layout: str, what: str) -> None:
    if t.shape[dim] != expected:
        raise RuntimeError(
            f"{op}: {name} must have shape {layout} with size {expected} in dimension {dim} "
            f"({what}), got {_shape(t)}"
        )


def _check_float(op: str, name: str, t) -> None:
    if t.dtype not in _FLOATS:
        raise RuntimeError(f"{op}: {name} must be float16, bfloat16, float32 or float64, got {_dtype(t)}")


def _check_same_dtype(op: str, name: str, t, ref_name: str, ref) -> None:
    if t.dtype != ref.dtype:
        raise RuntimeError(f"{op}: {name} must have the dtype of {ref_name} ({_dtype(ref)}), got {_dtype(t)}")


def _check_int64(op: str, name: str, t) -> None:
    if t.dtype != torch.int64:
        raise RuntimeError(f"{op}: {name} must be int64, got {_dtype(t)}")


def _check_vector(op: str, name: str, t, B: int) -> None:
    if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.shape[0] != B:
        got = _shape(t) if isinstance(t, torch.Tensor) else type(t).__name__
        raise RuntimeError(f"{op}: {name} must have shape ({B},), got {got}")
    _check_int64(op, name, t)


def _check_device(op: str, ref, **tensors) -> None:
    for name, t in tensors.items():
        if t.device != ref.device:
            raise RuntimeError(f"{op}: {name} must be on the same device as the other inputs ({ref.device}), got {t.device}")


def _check_index_range(op: str, name: str, idx, n: int) -> None:
    if idx.numel():
        lo, hi = int(idx.min()), int(idx.max())
        if lo < -1 or hi >= n:
            bad = lo if lo < -1 else hi
            raise RuntimeError(f"{op}: {name} values must be in [-1, {n}), got {bad}")


def _check_search_args(op, query, points, k, query_lengths, points_lengths) -> None:
    _check_rank(op, "query", query, 3, "(B, M, D)")
    _check_rank(op, "points", points, 3, "(B, N, D)")
    B = query.shape[0]
    _check_size(op, "points", points, 0, B, "(B, N, D)", "the B of query")
    _check_size(op, "points", points, 2, query.shape[2], "(B, N, D)", "the D of query")
    _check_float(op, "query", query)
    _check_same_dtype(op, "points", points, "query", query)
    if k < 1:
        raise RuntimeError(f"{op}: k must be >= 1, got {k}")
    _check_vector(op, "query_lengths", query_lengths, B)
    _check_vector(op, "points_lengths", points_lengths, B)
    _check_device(op, query, points=points, query_lengths=query_lengths, points_lengths=points_lengths)


def _check_range(op: str, name: str, values, lo: int, hi: int) -> None:
    # Direct torch.ops calls bypass the Python wrappers; like the kernels, the
    # reference refuses out-of-range values instead of reading out of bounds.
    for b, v in enumerate(values):
        if not lo <= v <= hi:
            raise RuntimeError(f"{op}: {name}[{b}]={v} is outside [{lo}, {hi}]")


def _row_chunk(n: int, bytes_per_elem: int) -> int:
    return max(1, BUDGET_BYTES // max(1, n * bytes_per_elem))


def _topk_exact(d: torch.Tensor, valid: torch.Tensor | None, k: int):
    """The k smallest ``(d, index)`` keys of each row of ``d (c, n)``.

    Returns ``(index (c, k), ok (c, k))``; ``ok`` is False where a row had fewer
    than k valid entries.  Exact tie handling: ties go to the lower index, NaN
    sorts after +inf.
    """
    c, n = d.shape
    if d.dtype == torch.float32 and n < 2**31:
        # Non-negative float32 values order like their int32 bit patterns, so
        # (bits << 32 | index) is a unique int64 key whose order is exactly
        # (distance, index).  NaNs are made positive so they sort last.
        d = torch.where(torch.isnan(d), torch.full_like(d, float("nan")), d)
        key = (d.view(torch.int32).to(torch.int64) << 32) | torch.arange(n, device=d.device)
        if valid is not None:
            key = key.masked_fill(~valid, _KEY_SENTINEL)
        key = torch.topk(key, k, dim=1, largest=False, sorted=True).values
        ok = key != _KEY_SENTINEL
        return (key & 0xFFFFFFFF).masked_fill(~ok, 0), ok
    # float64: two stable sorts give the same lexicographic order.
    order = torch.sort(d, dim=1, stable=True).indices
    if valid is not None:
        inval = (~valid).gather(1, order).to(torch.uint8)
        order = order.gather(1, torch.sort(inval, dim=1, stable=True).indices)
        ok = valid.gather(1, order[:, :k])
    else:
        ok = torch.ones((c, k), dtype=torch.bool, device=d.device)
    return order[:, :k], ok


def _first_in_index_order(valid: torch.Tensor, k: int):
    """The first k True entries of each row of ``valid (c, n)``, in index order.

    Returns ``(index (c, k), ok (c, k))`` like :func:`_topk_exact`.
    """
    n = valid.shape[1]
    pos = torch.arange(n, device=valid.device).expand_as(valid)
    key = torch.where(valid, pos, n)
    sel = torch.topk(key, k, dim=1, largest=False, sorted=True).values
    ok = sel < n
    return sel.masked_fill(~ok, 0), ok


def _knn_search(query, points, k, query_lengths, points_lengths, radius2=None, op="knn", index_order=False):
    _check_search_args(op, query, points, k, query_lengths, points_lengths)
    B, M, D = query.shape
    N = points.shape[1]
    ql = query_lengths.tolist()
    pl = points_lengths.tolist()
    _check_range(op, "query_lengths", ql, 0, M)
    _check_range(op, "points_lengths", pl, 0, N)
    acc = acc_dtype(query.dtype)
    per = query.element_size() + 8
    dist_out = alloc_named(op, "k", k, "dist2 and idx", (B, M, k), per,
                      lambda: torch.full((B, M, k), float("inf"), dtype=query.dtype, device=query.device))
    idx_out = alloc_named(op, "k", k, "dist2 and idx", (B, M, k), per,
                     lambda: torch.full((B, M, k), -1, dtype=torch.int64, device=query.device))
    if B * M == 0 or N == 0:
        return dist_out, idx_out
    r2 = None if radius2 is None else torch.tensor(radius2, dtype=acc, device=query.device)
    for b in range(B):
        L, Lq = int(pl[b]), int(ql[b])
        if L == 0 or Lq == 0:
            continue
        kb = min(k, L)
        pb = points[b, :L].to(acc)
        # distance row + int64 key/sort buffers + temporaries
        chunk = _row_chunk(L, 32)
        for s in range(0, Lq, chunk):
            e = min(Lq, s + chunk)
            d = sq_dist(query[b, s:e].to(acc), pb)
            valid = None if r2 is None else d <= r2
            if index_order:
                sel, ok = _first_in_index_order(valid, kb)
            else:
                sel, ok = _topk_exact(d, valid, kb)
            dist_out[b, s:e, :kb] = torch.where(ok, d.gather(1, sel), float("inf")).to(query.dtype)
            idx_out[b, s:e, :kb] = torch.where(ok, sel, -1)
    return dist_out, idx_out


def knn_reference(query, points, k, query_lengths, points_lengths):
    """Exact KNN: see :func:`pcgeom.knn` for the contract."""
    return _knn_search(query, points, k, query_lengths, points_lengths)


def ball_query_reference(query, points, radius, k, query_lengths, points_lengths, index_order=False):
    """The points with ``dist2 <= radius**2`` (radius squared in double, then rounded).

    ``index_order=False``: the k nearest of them (the KNN order).  ``True``: the
    first k of them in index order, each slot keeping its distance.
    """
    if not radius >= 0:  # also NaN
        raise RuntimeError(f"ball_query: radius must be >= 0, got {radius}")
    return _knn_search(
        query, points, k, query_lengths, points_lengths, radius2=radius * radius, op="ball_query",
        index_order=index_order,
    )


def knn_backward_reference(grad_dist2, query, points, idx):
    """Gradients of ``dist2[b,m,j] = |query[b,m] - points[b,idx[b,m,j]]|^2``.

    Padded slots (``idx = -1``) contribute nothing; other values outside
    ``[0, N)`` are an error.
    """
    op = "knn_backward"
    _check_rank(op, "grad_dist2", grad_dist2, 3, "(B, M, k)")
    _check_rank(op, "query", query, 3, "(B, M, D)")
    _check_rank(op, "points", points, 3, "(B, N, D)")
    _check_rank(op, "idx", idx, 3, "(B, M, k)")
    B, M, D = query.shape
    N = points.shape[1]
    K = idx.shape[2]
    _check_size(op, "points", points, 0, B, "(B, N, D)", "the B of query")
    _check_size(op, "points", points, 2, D, "(B, N, D)", "the D of query")
    _check_size(op, "idx", idx, 0, B, "(B, M, k)", "the B of query")
    _check_size(op, "idx", idx, 1, M, "(B, M, k)", "the M of query")
    _check_size(op, "grad_dist2", grad_dist2, 0, B, "(B, M, k)", "the B of query")
    _check_size(op, "grad_dist2", grad_dist2, 1, M, "(B, M, k)", "the M of query")
    _check_size(op, "grad_dist2", grad_dist2, 2, K, "(B, M, k)", "the k of idx")
    _check_float(op, "query", query)
    _check_same_dtype(op, "points", points, "query", query)
    _check_same_dtype(op, "grad_dist2", grad_dist2, "query", query)
    _check_int64(op, "idx", idx)
    _check_device(op, query, points=points, idx=idx, grad_dist2=grad_dist2)
    _check_index_range(op, "idx", idx, N)
    acc = acc_dtype(query.dtype)
    gq = torch.zeros((B, M, D), dtype=acc, device=query.device)
    gp = torch.zeros((B, N, D), dtype=acc, device=query.device)
    if B * M * K == 0 or N == 0:
        return gq.to(query.dtype), gp.to(query.dtype)
    p = points.to(acc)
    chunk = _row_chunk(K * D, 3 * 8)
    for s in range(0, M, chunk):
        e = min(M, s + chunk)
        ib = idx[:, s:e]
        valid = ib >= 0
        safe = ib.clamp_min(0)
        pn = p.gather(1, safe.reshape(B, -1, 1).expand(-1, -1, D)).reshape(B, e - s, K, D)
        diff = query[:, s:e, None, :].to(acc) - pn
        g = (2 * grad_dist2[:, s:e].to(acc))[..., None] * diff
        g = g.masked_fill(~valid[..., None], 0)
        gq[:, s:e] = g.sum(2)
        gp.scatter_add_(1, safe.reshape(B, -1, 1).expand(-1, -1, D), -g.reshape(B, -1, D))
    return gq.to(query.dtype), gp.to(query.dtype)


def knn_gather_reference(x, idx):
    """``out[b,m,j] = x[b, idx[b,m,j]]``, zeros where ``idx == -1``."""
    op = "knn_gather"
    _check_rank(op, "x", x, 3, "(B, N, C)")
    _check_rank(op, "idx", idx, 3, "(B, M, k)")
    _check_float(op, "x", x)
    _check_int64(op, "idx", idx)
    B, N, C = x.shape
    _, M, K = idx.shape
    _check_size(op, "idx", idx, 0, B, "(B, M, k)", "the B of x")
    _check_device(op, x, idx=idx)
    _check_index_range(op, "idx", idx, N)
    valid = idx >= 0
    safe = idx.clamp_min(0).reshape(B, M * K, 1).expand(-1, -1, C)
    if N == 0:
        return x.new_zeros((B, M, K, C))
    out = x.gather(1, safe).reshape(B, M, K, C)
    return out.masked_fill(~valid[..., None], 0)


def knn_gather_backward_reference(grad, idx, n):
    """Scatter-add of ``grad (B,M,k,C)`` back to ``(B,n,C)``; ``-1`` slots are dropped."""
    op = "knn_gather_backward"
    _check_rank(op, "grad", grad, 4, "(B, M, k, C)")
    _check_rank(op, "idx", idx, 3, "(B, M, k)")
    _check_float(op, "grad", grad)
    _check_int64(op, "idx", idx)
    B, M, K, C = grad.shape
    _check_size(op, "idx", idx, 0, B, "(B, M, k)", "the B of grad")
    _check_size(op, "idx", idx, 1, M, "(B, M, k)", "the M of grad")
    _check_size(op, "idx", idx, 2, K, "(B, M, k)", "the k of grad")
    if n < 0:
        raise RuntimeError(f"{op}: n must be >= 0, got {n}")
    _check_device(op, grad, idx=idx)
    _check_index_range(op, "idx", idx, n)
    acc = acc_dtype(grad.dtype)
    out = alloc_named(op, "n", n, "the gradient", (B, n, C), grad.element_size() + (4 if acc != grad.dtype else 0),
                 lambda: torch.zeros((B, n, C), dtype=acc, device=grad.device))
    if n == 0 or grad.numel() == 0:
        return out.to(grad.dtype)
    valid = (idx >= 0)[..., None]
    g = grad.to(acc).masked_fill(~valid, 0).reshape(B, M * K, C)
    out.scatter_add_(1, idx.clamp_min(0).reshape(B, M * K, 1).expand(-1, -1, C), g)
    return out.to(grad.dtype)


def farthest_point_sample_reference(points, n_samples, lengths, start_index):
    """Exact greedy farthest point sampling.

    Rules (identical on every path):

    * sample 0 is ``start_index[b]``; each next sample is the point with the
      largest ``mind`` -- its minimum squared distance to the samples so far --
      and the **lowest index** among equal ones;
    * a chosen point is never chosen again, so for ``n_samples <= lengths[b]``
      the samples are distinct;
    * a NaN distance makes ``mind`` NaN for good, and NaN ranks below every
      number: points with non-finite coordinates are chosen last;
    * slots ``s >= lengths[b]`` are ``-1``.
    """
    op = "farthest_point_sample"
    _check_rank(op, "points", points, 3, "(B, N, D)")
    B, N, D = points.shape
    S = n_samples
    dev = points.device
    if S < 0:
        raise RuntimeError(f"farthest_point_sample: n_samples must be >= 0, got {S}")
    _check_float(op, "points", points)
    _check_vector(op, "lengths", lengths, B)
    _check_vector(op, "start_index", start_index, B)
    _check_device(op, points, lengths=lengths, start_index=start_index)
    lens, starts = lengths.tolist(), start_index.tolist()
    _check_range("farthest_point_sample", "lengths", lens, 0, N)
    for b, (n, st) in enumerate(zip(lens, starts)):
        if n > 0 and not 0 <= st < n:
            raise RuntimeError(f"farthest_point_sample: start_index[{b}]={st} is outside [0, {n})")
    out = alloc_named(op, "n_samples", S, "the indices", (B, S), 8,
                 lambda: torch.full((B, S), -1, dtype=torch.int64, device=dev))
    if B == 0 or N == 0 or S == 0:
        return out
    acc = acc_dtype(points.dtype)
    p = points.to(acc)
    L = lengths.to(dev)
    chosen = torch.tensor(float("-inf"), dtype=acc, device=dev)
    minus_one = torch.tensor(-1.0, dtype=acc, device=dev)
    mind = torch.full((B, N), float("inf"), dtype=acc, device=dev)
    mind = torch.where(torch.arange(N, device=dev)[None] < L[:, None], mind, chosen)
    cur = torch.where(L > 0, start_index.to(dev), 0).clamp(0, N - 1)
    rows = torch.arange(B, device=dev)
    for s in range(min(S, N)):
        out[:, s] = torch.where(s < L, cur, -1)
        if s + 1 == min(S, N):
            break
        mind[rows, cur] = chosen
        last = p[rows, cur][:, None, :]  # (B, 1, D)
        d = None
        for c in range(D):
            diff = p[:, :, c] - last[:, :, c]
            sq = diff * diff
            d = sq if d is None else d + sq
        upd = (torch.isnan(d) | (d < mind)) & (mind != chosen)
        mind = torch.where(upd, d, mind)
        key = torch.where(torch.isnan(mind), minus_one, mind)
        cur = key.argmax(dim=1)
    return out


def pca_neighbourhoods(points, idx, acc):
    """Gathers the valid neighbours of every row: ``(centred (R, k, 3), valid (R, k), count (R,), e (R,))``.

    A neighbour is valid when its index is not -1 and its coordinates are
    finite; the centring is about the mean of the valid ones.  ``R = B * M``.
    As in the kernels, two exact power-of-two scalings keep every scale the
    input dtype holds finite and representable: the coordinates are scaled so
    that their largest magnitude in the row lies in ``[0.5, 1)`` before the
    mean is summed, the centred ones so that theirs does; the centred
    coordinates in the caller's units are ``centred * 2**e`` (int64 ``e``,
    0 for rows whose valid neighbours are all zero or absent).
    """
    B, N, _ = points.shape
    M, K = idx.shape[1], idx.shape[2]
    p = points.to(acc)
    safe = idx.clamp_min(0).reshape(B, M * K, 1).expand(-1, -1, 3)
    nb = p.gather(1, safe).reshape(B * M, K, 3) if N > 0 else p.new_zeros((B * M, K, 3))
    valid = (idx.reshape(B * M, K) >= 0) & torch.isfinite(nb).all(-1)
    nb = torch.where(valid[..., None], nb, 0)
    count = valid.sum(1)
    e1 = binary_exponent(nb.abs().amax(dim=(1, 2)))
    nb = times_power_of_two(nb, -e1[:, None, None])
    mean = nb.sum(1) / count.clamp_min(1)[:, None].to(acc)
    centred = torch.where(valid[..., None], nb - mean[:, None, :], 0)
    e2 = binary_exponent(centred.abs().amax(dim=(1, 2)))
    centred = times_power_of_two(centred, -e2[:, None, None])
    return centred, valid, count, e1 + e2


def pca_normals_reference(points, idx):
    """Normal and surface variation of each neighbourhood; see :func:`pcgeom.ops.pca_normals`.

    The same rules as the kernels (``csrc/pca_normals/pca_normals_common.h``):
    valid neighbours, covariance about their mean, the eigenvector of the
    smallest eigenvalue (here from ``torch.linalg.eigh``, so results agree
    with the kernels' Jacobi solver to rounding, not bit for bit), the fixed
    answers for empty, single-position (exactly equal coordinates) and
    collinear neighbourhoods, and the sign rule (largest-magnitude component
    positive, lowest axis on ties) judged on the normal rounded to the
    output dtype.
    """
    op = "pca_normals"
    _check_rank(op, "points", points, 3, "(B, N, 3)")
    _check_rank(op, "idx", idx, 3, "(B, M, k)")
    B, N, _ = points.shape
    _check_size(op, "points", points, 2, 3, "(B, N, 3)", "3-D coordinates")
    _check_float(op, "points", points)
    _check_int64(op, "idx", idx)
    _check_size(op, "idx", idx, 0, B, "(B, M, k)", "the B of points")
    _check_device(op, points, idx=idx)
    M, K = idx.shape[1], idx.shape[2]
    _check_index_range(op, "idx", idx, N)
    acc = acc_dtype(points.dtype)
    if B * M == 0:
        return points.new_empty((B, M, 3)), points.new_empty((B, M))
    if K == 0:  # no neighbour slots: every row is "no valid neighbour"
        up = torch.tensor([0.0, 0.0, 1.0], dtype=points.dtype, device=points.device)
        return up.expand(B, M, 3).clone(), points.new_zeros((B, M))
    centred, valid, count, _ = pca_neighbourhoods(points, idx, acc)  # scaled: directions and ratios only
    # All valid neighbours at one position, tested on the coordinates themselves:
    # the rounded mean of equal copies can leave them an ulp off centre, all
    # alike, which would read as a line along (1, 1, 1) (the kernels' test too).
    if N > 0:
        nb = points.gather(1, idx.clamp_min(0).reshape(B, M * K, 1).expand(-1, -1, 3)).reshape(B * M, K, 3)
        first = nb.gather(1, valid.to(torch.int8).argmax(1)[:, None, None].expand(-1, 1, 3))
        one_position = ((nb == first).all(-1) | ~valid).all(1)
    else:  # no point, no valid neighbour: count == 0 decides
        one_position = torch.zeros_like(valid[:, 0])
    scale = centred.abs().amax(dim=(1, 2))  # in [0.5, 1) or 0
    ok = (count > 0) & (scale > 0) & ~one_position
    cov = torch.einsum("rki,rkj->rij", centred, centred) / count.clamp_min(1)[:, None, None].to(acc)
    cov = torch.where(ok[:, None, None], cov, torch.eye(3, dtype=acc, device=points.device))
    lam, vec = torch.linalg.eigh(cov)  # ascending
    lam = lam.clamp_min(0)
    eps = torch.finfo(acc).eps
    line = lam[:, 1] <= 64 * eps * lam[:, 2]
    n = vec[:, :, 0].clone()
    d = vec[:, :, 2]
    ax = d.abs().argmin(dim=1)  # first minimum: the lowest axis on ties
    e = torch.nn.functional.one_hot(ax, 3).to(acc)
    perp = torch.linalg.cross(d, e)
    n = torch.where(line[:, None], perp, n)
    n = n / n.norm(dim=1, keepdim=True)
    curv = lam[:, 0] / lam.sum(1)
    up = torch.tensor([0.0, 0.0, 1.0], dtype=acc, device=points.device)
    ok = ok & (lam[:, 2] > 0)
    n = torch.where(ok[:, None], n, up)
    curv = torch.where(ok, curv, 0)
    # The sign rule on the stored values: rounding to float16/bfloat16 can make
    # two components tie (identity for float32/float64; negation is exact).
    n = n.to(points.dtype)
    big = n.abs().argmax(dim=1, keepdim=True)  # first maximum: the lowest axis on ties
    n = torch.where(n.gather(1, big) < 0, -n, n)
    return n.reshape(B, M, 3), curv.reshape(B, M).to(points.dtype)
