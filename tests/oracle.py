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
