"""Fuzz: normals at every scale a dtype holds, and the named errors for non-finite grid input and overlong walks.

* ``estimate_normals`` on float32/bfloat16/float16/float64 clouds scaled by a random power of ten across
  the dtype's whole range (subnormal coordinates included) against a float64 brute force on the stored
  coordinates: where the float64 neighbour set is not a near-tie, the normal is the float64 one;
* ``grid_cluster`` (torch_cluster and pyg_lib stand-ins) and ``grid_subsample`` with NaN/inf points
  injected at random rows: the error names how many points and the first index;
* ``random_walk`` (both stand-ins) with walk lengths past any memory: the error names walk_length, the
  bound and the value.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("hypothesis")
import torch  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import pcgeom  # noqa: E402
from pcgeom.compat import torch_cluster  # noqa: E402
from pcgeom.compat.pyg_lib import ops as pyg_ops  # noqa: E402
from pcgeom.compat.pyg_lib import sampler as pyg_sampler  # noqa: E402
from tests.fuzz.strategies import fuzz  # noqa: E402

# log10 of the scales each dtype holds a unit-sized cloud at (largest finite .. a few bits above its smallest
# subnormal, where a few hundred distinct points still fit).
SCALE_RANGE = {torch.float32: (-41.0, 38.0), torch.bfloat16: (-38.5, 38.0), torch.float16: (-5.0, 4.5),
               torch.float64: (-305.0, 307.0)}


def _brute_normals(p: np.ndarray, k: int):
    """float64 normals (unit eigenvector of the smallest eigenvalue of the biased covariance) and, per row,
    the relative gap between the k-th and (k+1)-th squared distance (a near-tie if tiny)."""
    d = ((p[:, None, :] - p[None, :, :]) ** 2).sum(-1)
    n = len(p)
    order = np.lexsort((np.broadcast_to(np.arange(n), d.shape), d), axis=1)
    ds = np.take_along_axis(d, order, 1)
    gap = np.full(n, np.inf) if k >= n else (ds[:, k] - ds[:, k - 1]) / np.maximum(ds[:, k], 1e-300)
    out, clear = np.zeros((n, 3)), np.zeros(n, dtype=bool)
    for i, nb in enumerate(order[:, :min(k, n)]):
        q = p[nb] - p[nb].mean(0)
        lam, vec = np.linalg.eigh(q.T @ q / len(nb))
        out[i] = vec[:, 0]
        clear[i] = lam[1] - lam[0] > 1e-2 * lam[2] > 0  # a clearly smallest eigenvalue: one normal
    return out, gap, clear


@fuzz(weight=0.5, dtype=st.sampled_from(list(SCALE_RANGE)), shape=st.sampled_from(["sphere", "plane", "noisy"]),
      where=st.floats(0.0, 1.0), n=st.integers(8, 120), k=st.integers(3, 16), seed=st.integers(0, 2**31 - 1))
def test_estimate_normals_at_any_scale(dtype, shape, where, n, k, seed):
    rng = np.random.default_rng(seed)
    if shape == "sphere":
        x = rng.standard_normal((n, 3))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    else:
        xy = rng.random((n, 2)) * 2 - 1
        z = 0.5 * xy[:, 0] - 0.25 * xy[:, 1] + (0.05 * rng.standard_normal(n) if shape == "noisy" else 0)
        x = np.column_stack([xy, z])
    lo, hi = SCALE_RANGE[dtype]
    scale = 10.0 ** (lo + where * (hi - lo))
    p = torch.from_numpy(x * scale).to(dtype)
    if not bool(torch.isfinite(p).all()):
        return  # the scale's top end rounds a coordinate up past the dtype's largest value
    normals, curv = pcgeom.estimate_normals(p, k)
    assert normals.dtype == dtype and torch.isfinite(normals).all() and torch.isfinite(curv).all()
    p64 = p.double().numpy()
    if len(np.unique(p64, axis=0)) < n:
        return  # rounding merged points (the smallest subnormal scales): exact duplicates, ties by index
    # The brute force on the stored coordinates times a power of two (exact), so float64 squares stay in range.
    e = int(np.frexp(np.abs(p64).max())[1])
    want, gap, clear = _brute_normals(np.ldexp(p64, -e), k)
    got = normals.double().numpy()
    got = got / np.linalg.norm(got, axis=1, keepdims=True)
    cos = np.abs((got * want).sum(1))
    # The neighbour sets agree unless float32 rounding can swap the k-th and (k+1)-th (dtype eps ~1e-7, the
    # distances of half-precision coordinates computed in float32); the normals then agree to the dtype.
    tol = {torch.float64: 1e-9, torch.float32: 1e-4}.get(dtype, 5e-3)
    sure = clear & (gap > 1e-5)
    bad = np.flatnonzero(sure & (cos < 1 - tol))
    assert len(bad) == 0, (scale, bad[:5], cos[bad[:5]])


_NAMED = re.compile(r"must be finite, got (\d+) of (\d+) points with NaN or inf coordinates \(the first: \w+\[(\d+)\]")


@fuzz(n=st.integers(1, 30), d=st.integers(1, 3), n_bad=st.integers(1, 4), bad=st.sampled_from([np.nan, np.inf, -np.inf]),
      size=st.floats(1e-3, 10.0), which=st.sampled_from(["torch_cluster", "pyg_lib", "grid_subsample"]),
      seed=st.integers(0, 2**31 - 1))
def test_grid_non_finite_points_are_named(n, d, n_bad, bad, size, which, seed):
    rng = np.random.default_rng(seed)
    x = rng.random((n, d))
    rows = np.sort(rng.choice(n, size=min(n_bad, n), replace=False))
    x[rows, rng.integers(0, d, len(rows))] = bad
    pos = torch.from_numpy(x)
    with pytest.raises(ValueError) as err:
        if which == "torch_cluster":
            torch_cluster.grid_cluster(pos, torch.full((d,), size, dtype=torch.float64))
        elif which == "pyg_lib":
            pyg_ops.grid_cluster(pos, torch.full((d,), size, dtype=torch.float64))
        else:
            pcgeom.grid_subsample(pos, size)
    m = _NAMED.search(str(err.value))
    assert m is not None, str(err.value)
    assert (int(m[1]), int(m[2]), int(m[3])) == (len(rows), n, int(rows[0]))


@fuzz(n_seeds=st.integers(1, 5), log2_len=st.integers(40, 62), p=st.sampled_from([1.0, 2.0]),
      which=st.sampled_from(["torch_cluster", "pyg_lib"]))
def test_random_walk_past_memory_is_named(n_seeds, log2_len, p, which):
    rowptr, col = torch.tensor([0, 1, 2]), torch.tensor([1, 0])
    seeds = torch.zeros(n_seeds, dtype=torch.long)
    L = 2**log2_len
    with pytest.raises(RuntimeError) as err:
        if which == "torch_cluster":
            torch_cluster.random_walk(torch.tensor([0, 1]), col, seeds, L, p=p)
        else:
            pyg_sampler.random_walk(rowptr, col, seeds, L, p, 1.0)
    msg = str(err.value)
    m = re.match(rf"random_walk: walk_length must be at most (\d+) for {n_seeds} start node\(s\) .* got {L}$", msg)
    assert m is not None, msg
    assert 8 * n_seeds * (2 * int(m[1]) + 1) <= 2**63 and int(m[1]) < L
