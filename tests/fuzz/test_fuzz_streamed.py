"""Fuzz: the out-of-core KNN and ball query (``pcgeom.knn_streamed`` / ``knn_blocks`` /
``ball_query_streamed`` / ``ball_query_blocks``) against the in-memory calls they promise to equal.

Clouds of every kind the suite generates (repeated points, lattices with exact ties, collinear and
planar sets, extreme scales, every floating dtype, D = 1..4), with tiny ``block_points`` so that many
tiles, halos thinner than a neighbourhood and the redo path are exercised: the streamed answer must be
``torch.equal`` to ``pcgeom.knn`` / ``pcgeom.ball_query`` (distances and indices, ties to the lower
index, ``-1`` / ``+inf`` padding), every query row must come in exactly one block, and int32 outputs
must hold the same indices.  Non-finite coordinates must be refused with a named error.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hypothesis")
import torch  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import pcgeom  # noqa: E402
from tests.fuzz.strategies import FLOATS, KINDS, fuzz, make_points  # noqa: E402

FINITE_KINDS = [k for k in KINDS if k != "nonfinite"]


def _cloud(kind, n, d, dtype, seed):
    return torch.from_numpy(make_points(kind, n, d, dtype, seed)).to(dtype)


def _rows_once(blocks, m):
    seen = torch.zeros(m, dtype=torch.long)
    for b in blocks:
        assert isinstance(b, pcgeom.StreamedBlock) and b.rows.dtype == torch.int64
        assert bool((b.rows[1:] > b.rows[:-1]).all()), "rows within a block are ascending"
        seen[b.rows] += 1
    assert torch.equal(seen, torch.ones(m, dtype=torch.long)), "a query row is missing or answered twice"


@fuzz(kind=st.sampled_from(FINITE_KINDS), dtype=st.sampled_from(FLOATS), n=st.integers(1, 160),
      m=st.integers(0, 60), d=st.integers(1, 4), k=st.integers(1, 20), block=st.integers(1, 48),
      self_query=st.booleans(), int32=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_knn_streamed_equals_knn(kind, dtype, n, m, d, k, block, self_query, int32, seed):
    points = _cloud(kind, n, d, dtype, seed)
    query = points if self_query else _cloud(kind, m, d, dtype, seed + 1)
    want = pcgeom.knn(query[None], points[None], k)
    dist, idx = want.dist2[0], want.idx[0]
    index_dtype = torch.int32 if int32 else torch.int64
    out_d = torch.empty(query.shape[0], k, dtype=dist.dtype)
    out_i = torch.empty(query.shape[0], k, dtype=index_dtype)
    got = pcgeom.knn_streamed(query, points, k, out_dist2=out_d, out_idx=out_i, index_dtype=index_dtype,
                              block_points=block)
    assert got.dist2.data_ptr() == out_d.data_ptr() and got.idx.data_ptr() == out_i.data_ptr()
    assert torch.equal(out_d, dist), (kind, dtype)
    assert torch.equal(out_i.long(), idx), (kind, dtype)
    blocks = list(pcgeom.knn_blocks(query, points, k, block_points=block))
    _rows_once(blocks, query.shape[0])
    for b in blocks:
        assert torch.equal(b.dist2, dist[b.rows]) and torch.equal(b.idx, idx[b.rows])


@fuzz(weight=0.75, kind=st.sampled_from(FINITE_KINDS), dtype=st.sampled_from(FLOATS), n=st.integers(1, 120),
      m=st.integers(0, 40), d=st.integers(1, 3), k=st.integers(1, 16), block=st.integers(1, 40),
      radius=st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 1e-3, 1e3]), order=st.sampled_from(["distance", "index"]),
      self_query=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_ball_query_streamed_equals_ball_query(kind, dtype, n, m, d, k, block, radius, order, self_query, seed):
    points = _cloud(kind, n, d, dtype, seed)
    query = points if self_query else _cloud(kind, m, d, dtype, seed + 1)
    want = pcgeom.ball_query(query[None], points[None], radius, k, order=order)
    dist, idx = want.dist2[0], want.idx[0]
    got = pcgeom.ball_query_streamed(query, points, radius, k, order=order, block_points=block)
    assert torch.equal(got.dist2, dist) and torch.equal(got.idx, idx), (kind, dtype, radius, order)
    blocks = list(pcgeom.ball_query_blocks(query, points, radius, k, order=order, block_points=block))
    _rows_once(blocks, query.shape[0])
    for b in blocks:
        assert torch.equal(b.dist2, dist[b.rows]) and torch.equal(b.idx, idx[b.rows])


@fuzz(weight=0.25, n=st.integers(1, 40), d=st.integers(1, 3), which=st.sampled_from(["query", "points"]),
      bad=st.sampled_from([float("nan"), float("inf"), float("-inf")]), seed=st.integers(0, 2**32 - 1))
def test_streamed_non_finite_coordinates_are_named(n, d, which, bad, seed):
    rng = np.random.default_rng(seed)
    pts = torch.from_numpy(rng.random((n, d)))
    q = pts.clone()
    (q if which == "query" else pts)[int(rng.integers(0, n)), int(rng.integers(0, d))] = bad
    for call in (lambda: pcgeom.knn_streamed(q, pts, 2), lambda: pcgeom.ball_query_streamed(q, pts, 0.5, 2)):
        with pytest.raises(ValueError, match=which):
            call()
