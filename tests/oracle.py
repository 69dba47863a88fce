"""Independent float64 brute-force oracles (numpy), written separately from
pcgeom.ops.reference so that the tests do not check the library against itself."""

from __future__ import annotations

import numpy as np
import torch


def _np64(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).numpy()


def acc_np(dtype: torch.dtype):
    """The documented accumulation dtype of the distance math: float64 for float64 input, float32 otherwise."""
    return np.float64 if dtype == torch.float64 else np.float32


def sq_dist_seq(a: np.ndarray, b: np.ndarray, acc=np.float64) -> np.ndarray:
    """sum_d (a_d - b_d)**2 added in coordinate order (numpy's pairwise sum would
    round differently for D > 2), every operation rounded to ``acc`` (numpy's
    float32 arithmetic is IEEE single precision: the contract's float32 math)."""
    diff = a.astype(acc) - b.astype(acc)
    out = np.zeros(diff.shape[:-1], dtype=acc)
    for d in range(diff.shape[-1]):
        out = out + diff[..., d] * diff[..., d]
    return out


def knn_oracle(query, points, k, query_lengths=None, points_lengths=None, radius=None, acc=np.float64):
    """(dist2 (B,M,k) in ``acc``, idx int64 (B,M,k)); ties to lower index, NaN last, -1/inf padding.

    ``acc=np.float32`` is the contract for float16/bfloat16/float32 input: distances
    accumulated in float32 (``radius**2`` formed in float64, then rounded to float32),
    ranked on those float32 values."""
    q, p = _np64(query), _np64(points)
    B, M, _ = q.shape
    N = p.shape[1]
    ql = [M] * B if query_lengths is None else [int(v) for v in query_lengths]
    pl = [N] * B if points_lengths is None else [int(v) for v in points_lengths]
    dist = np.full((B, M, k), np.inf, dtype=acc)
    idx = np.full((B, M, k), -1, dtype=np.int64)
    for b in range(B):
        for m in range(ql[b]):
            d = sq_dist_seq(p[b, : pl[b]], q[b, m], acc)
            cand = np.arange(pl[b])
            if radius is not None:
                keep = d <= acc(radius * radius)
                d, cand = d[keep], cand[keep]
            nan = np.isnan(d)
            order = np.lexsort((cand, np.where(nan, 0, d), nan))  # last key is primary
            take = order[:k]
            dist[b, m, : len(take)] = d[take]
            idx[b, m, : len(take)] = cand[take]
    return dist, idx


def fps_oracle(points, n_samples, lengths=None, start=0):
    """Greedy FPS in float64: max of min-distance, lowest index on ties, no repeats."""
    p = _np64(points)
    B, N, _ = p.shape
    L = [N] * B if lengths is None else [int(v) for v in lengths]
    starts = [start] * B if isinstance(start, int) else [int(v) for v in start]
    out = np.full((B, n_samples), -1, dtype=np.int64)
    for b in range(B):
        if L[b] == 0:
            continue
        pts = p[b, : L[b]]
        mind = np.full(L[b], np.inf)
        chosen = np.zeros(L[b], dtype=bool)
        cur = starts[b]
        for s in range(min(n_samples, L[b])):
            out[b, s] = cur
            chosen[cur] = True
            mind = np.minimum(mind, sq_dist_seq(pts, pts[cur]))
            key = np.where(chosen, -np.inf, mind)
            cur = int(np.argmax(key))
    return out


def assert_knn_close(dist2, idx, query, points, k, query_lengths=None, points_lengths=None, radius=None, rtol=1e-5, atol=1e-6):
    """Checks a KNN answer against the oracle.

    Against the float64 oracle, allowing only float rounding: the returned
    indices must have the oracle's sorted distances (so swaps can only happen
    between neighbours whose true distances agree within rounding).  Against
    the contract, exactly: the indices are those of the oracle run in the
    accumulation dtype (float32 for float16/bfloat16/float32), and ``dist2``
    is that oracle's distance rounded once to the input dtype."""
    od, oi = knn_oracle(query, points, k, query_lengths, points_lengths, radius)
    idx_np = idx.cpu().numpy()
    assert idx.dtype == torch.int64
    assert ((idx_np >= -1) & (idx_np < points.shape[1])).all()
    np.testing.assert_array_equal(idx_np == -1, oi == -1)
    q, p = _np64(query), _np64(points)
    B, M, _ = q.shape
    # true float64 distance of each returned neighbour
    safe = np.where(idx_np < 0, 0, idx_np)
    got = ((p[np.arange(B)[:, None, None], safe] - q[:, :, None, :]) ** 2).sum(-1)
    got = np.where(idx_np < 0, np.inf, got)
    np.testing.assert_allclose(got, od, rtol=rtol, atol=atol)
    acc = acc_np(dist2.dtype)
    ed, ei = knn_oracle(query, points, k, query_lengths, points_lengths, radius, acc)
    np.testing.assert_array_equal(idx_np, ei)
    torch.testing.assert_close(dist2.detach().cpu(), torch.from_numpy(ed).to(dist2.dtype), rtol=0, atol=0, equal_nan=True)
    # each row's indices are distinct
    for row in idx_np.reshape(-1, idx_np.shape[-1]):
        valid = row[row >= 0]
        assert len(np.unique(valid)) == len(valid)


# ---------------------------------------------------------------------------
# Oracles computed the way the docs promise the arithmetic (tests/fuzz).
# pcgeom's ops accumulate squared differences coordinate by coordinate in the
# accumulation dtype (float32 for float16/bfloat16/float32, float64 for float64)
# and round the result once to the input dtype; these oracles do the same in
# numpy, so ties, overflow to +inf and underflow to 0 are predicted exactly.

def acc_np_dtype(dtype: torch.dtype):
    """numpy accumulation dtype of a torch floating dtype (float64 stays float64)."""
    return np.float64 if dtype == torch.float64 else np.float32


def to_acc_np(t: torch.Tensor) -> np.ndarray:
    """The tensor's values exactly, in its accumulation dtype (half/bfloat16 widen exactly)."""
    acc = acc_np_dtype(t.dtype)
    return t.detach().to("cpu", torch.float64).numpy().astype(acc)


def round_to(values: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """Rounds accumulation-dtype values once to ``dtype`` (as the ops' outputs), back as float64."""
    return torch.from_numpy(np.ascontiguousarray(values)).to(dtype).double().numpy()


def sq_dist_acc(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """sum_d (a_d - b_d)**2, each step rounded in the arrays' dtype (no fused multiply-add)."""
    dt = np.result_type(a, b)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        diff = (a - b).astype(dt)
        out = np.zeros(diff.shape[:-1], dtype=dt)
        for d in range(diff.shape[-1]):
            out = (out + (diff[..., d] * diff[..., d]).astype(dt)).astype(dt)
    return out


def rank_order(d: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Ascending distance, NaN after +inf, ties to the lower candidate index."""
    nan = np.isnan(d)
    return np.lexsort((cand, np.where(nan, 0, d), nan))


def knn_oracle_acc(q: np.ndarray, p: np.ndarray, k: int, radius2=None, order="distance"):
    """One cloud: (dist2 acc-dtype (M, k) with +inf padding, idx int64 (M, k) with -1 padding).

    ``radius2`` (already in the accumulation dtype) restricts to ``d <= radius2``;
    ``order="index"`` keeps the first k in-ball points by index."""
    M = q.shape[0]
    dist = np.full((M, k), np.inf, dtype=q.dtype if q.size else np.float64)
    idx = np.full((M, k), -1, dtype=np.int64)
    for m in range(M):
        d = sq_dist_acc(p, q[m]) if p.shape[0] else np.zeros(0, dtype=dist.dtype)
        cand = np.arange(p.shape[0])
        if radius2 is not None:
            with np.errstate(invalid="ignore"):
                keep = d <= radius2
            d, cand = d[keep], cand[keep]
            take = np.arange(len(d))[:k] if order == "index" else rank_order(d, cand)[:k]
        else:
            take = rank_order(d, cand)[:k]
        dist[m, : len(take)] = d[take]
        idx[m, : len(take)] = cand[take]
    return dist, idx


def fps_oracle_acc(p: np.ndarray, n_samples: int, start: int = 0) -> np.ndarray:
    """One cloud, distances in the array's dtype: greedy FPS, lowest index on ties,
    NaN distances (NaN points) chosen last, never a repeat; -1 beyond the cloud."""
    N = p.shape[0]
    out = np.full(n_samples, -1, dtype=np.int64)
    if N == 0:
        return out
    mind = np.full(N, np.inf, dtype=p.dtype)
    chosen = np.zeros(N, dtype=bool)
    cur = start
    for s in range(min(n_samples, N)):
        out[s] = cur
        chosen[cur] = True
        d = sq_dist_acc(p, p[cur])
        with np.errstate(invalid="ignore"):
            # a NaN distance keeps the point's NaN status (it ranks last)
            mind = np.where(np.isnan(mind) | np.isnan(d), np.nan, np.minimum(mind, d))
        cand = np.flatnonzero(~chosen)
        if cand.size == 0:
            break
        dm = mind[cand]
        finite = ~np.isnan(dm)
        if finite.any():
            c2, d2 = cand[finite], dm[finite]
            cur = int(c2[np.flatnonzero(d2 == d2.max())[0]])
        else:
            cur = int(cand[0])
    return out


def segment_reduce_oracle(src: np.ndarray, groups: list, reduce: str, empty_value=0.0):
    """Reduces rows ``src[g]`` (a list of index arrays) along axis 0 in float64, sequentially in row order."""
    out = []
    for rows in groups:
        if len(rows) == 0:
            out.append(np.full(src.shape[1:], 1.0 if reduce == "prod" else empty_value))
            continue
        x = src[rows]
        if reduce == "sum":
            out.append(x.sum(0))
        elif reduce == "mean":
            out.append(x.sum(0) / len(rows))
        elif reduce == "prod":
            out.append(x.prod(0))
        elif reduce == "min":
            out.append(x.min(0))
        elif reduce == "max":
            out.append(x.max(0))
    return np.stack(out) if out else np.zeros((0,) + src.shape[1:])
