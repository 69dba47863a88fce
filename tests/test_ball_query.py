"""pcgeom.ball_query against float64 brute force."""

import numpy as np
import pytest
import torch

import pcgeom
from pcgeom.ops import reference
from conftest import lattice_cloud, random_cloud
from oracle import assert_knn_close, knn_oracle

pytestmark = pytest.mark.ops  # the op suite: also run on the pure-torch path


@pytest.mark.parametrize("radius,k", [(0.1, 8), (0.3, 32), (0.0, 4), (10.0, 5)])
def test_matches_bruteforce(device, radius, k):
    q = random_cloud(2, 30, dtype=torch.float64, device=device, seed=1)
    p = random_cloud(2, 120, dtype=torch.float64, device=device, seed=2)
    dist2, idx = pcgeom.ball_query(q, p, radius, k)
    od, oi = knn_oracle(q, p, k, radius=radius)
    np.testing.assert_array_equal(idx.cpu().numpy(), oi)
    np.testing.assert_array_equal(dist2.cpu().numpy(), od)
    assert (dist2[idx >= 0] <= radius**2).all()


def test_float32_ragged(device):
    q = random_cloud(3, 20, device=device, seed=3)
    p = random_cloud(3, 60, device=device, seed=4)
    ql, pl = torch.tensor([20, 3, 0]), torch.tensor([60, 0, 10])
    dist2, idx = pcgeom.ball_query(q, p, 0.25, 10, query_lengths=ql, points_lengths=pl)
    assert_knn_close(dist2, idx, q, p, 10, ql, pl, radius=0.25)


def test_radius_is_inclusive_on_the_lattice(device):
    p = lattice_cloud(1, 4, device=device)
    q = p[:, :5]
    dist2, idx = pcgeom.ball_query(q, p, 1.0, 10)
    od, oi = knn_oracle(q, p, 10, radius=1.0)
    np.testing.assert_array_equal(idx.cpu().numpy(), oi)
    assert (dist2[idx >= 0] <= 1.0).all() and ((dist2 == 1.0).sum(-1) >= 2).all()


def test_gradients(device):
    q = random_cloud(1, 5, dtype=torch.float64, device=device, seed=5).requires_grad_()
    p = random_cloud(1, 30, dtype=torch.float64, device=device, seed=6).requires_grad_()
    fn = lambda a, b: torch.nan_to_num(pcgeom.ball_query(a, b, 0.5, 4).dist2, posinf=0.0)
    assert torch.autograd.gradcheck(fn, (q, p))


def test_native_equals_reference():
    if not pcgeom.backend_info()["extension_loaded"]:
        pytest.skip("native library not loaded")
    q = random_cloud(2, 50, dtype=torch.float32, seed=7)
    p = random_cloud(2, 300, dtype=torch.float32, seed=8)
    ql, pl = torch.tensor([50, 9]), torch.tensor([300, 120])
    for r, k in ((0.05, 4), (0.2, 16), (0.5, 100)):
        a = pcgeom.ball_query(q, p, r, k, query_lengths=ql, points_lengths=pl)
        b = reference.ball_query_reference(q, p, r, k, ql, pl)
        assert torch.equal(a.idx, b[1]) and torch.equal(a.dist2, b[0])


def test_opcheck(device):
    q = random_cloud(2, 5, device=device).requires_grad_()
    p = random_cloud(2, 9, device=device).requires_grad_()
    full = torch.tensor([9, 9], device=device)
    torch.library.opcheck(torch.ops.pcgeom.ball_query.default, (q, p, 0.4, 3, torch.tensor([5, 5], device=device), full))


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(radius=-0.1, k=2), ValueError, r"ball_query: radius must be >= 0(\.0)?, got -0.1"),
        (dict(radius=float("nan"), k=2), ValueError, r"radius must not be NaN"),
        (dict(radius="1", k=2), TypeError, r"radius must be a float"),
        (dict(radius=0.1, k=0), ValueError, r"ball_query: k must be >= 1"),
        (dict(radius=0.1, k=2, order="nearest"), ValueError, r"ball_query: order must be one of \('distance', 'index'\), got 'nearest'"),
    ],
)
def test_errors(kwargs, exc, match):
    q = torch.rand(1, 4, 3)
    with pytest.raises(exc, match=match):
        pcgeom.ball_query(q, q, **kwargs)


# ---------------------------------------------------------------------------
# order="index": PointNet++'s selection (the first k points inside the ball in index order).


def _index_order_oracle(q, p, radius, k, ql=None, pl=None, acc=np.float64):
    """numpy brute force of the index-order ball query, pcgeom padding, every operation rounded to ``acc``
    (float32: the contract for float16/bfloat16/float32 input; ``radius**2`` formed in float64, then rounded)."""
    qn, pn = q.detach().cpu().double().numpy().astype(acc), p.detach().cpu().double().numpy().astype(acc)
    B, M, N = qn.shape[0], qn.shape[1], pn.shape[1]
    ql = [M] * B if ql is None else ql.tolist()
    pl = [N] * B if pl is None else pl.tolist()
    r2 = acc(radius * radius)
    od = np.full((B, M, k), np.inf, dtype=acc)
    oi = np.full((B, M, k), -1, dtype=np.int64)
    for b in range(B):
        for m in range(ql[b]):
            diff = pn[b, : pl[b]] - qn[b, m]
            d2 = np.zeros(pl[b], dtype=acc)
            for c in range(diff.shape[1]):  # coordinate order, as the contract sums
                d2 = d2 + diff[:, c] * diff[:, c]
            hits = np.nonzero(d2 <= r2)[0][:k]
            oi[b, m, : len(hits)] = hits
            od[b, m, : len(hits)] = d2[hits]
    return od, oi


@pytest.mark.parametrize("radius,k", [(0.15, 8), (0.3, 64), (0.0, 3), (10.0, 5)])
def test_index_order_matches_bruteforce(device, radius, k):
    q = random_cloud(2, 30, dtype=torch.float64, device=device, seed=11)
    p = random_cloud(2, 150, dtype=torch.float64, device=device, seed=12)
    dist2, idx = pcgeom.ball_query(q, p, radius, k, order="index")
    od, oi = _index_order_oracle(q, p, radius, k)
    np.testing.assert_array_equal(idx.cpu().numpy(), oi)
    np.testing.assert_array_equal(dist2.cpu().numpy(), od)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_index_order_ragged_low_precision(device, dtype):
    q = random_cloud(3, 20, dtype=dtype, device=device, seed=13)
    p = random_cloud(3, 80, dtype=dtype, device=device, seed=14)
    ql, pl = torch.tensor([20, 4, 0]), torch.tensor([80, 0, 9])
    dist2, idx = pcgeom.ball_query(q, p, 0.3, 12, query_lengths=ql, points_lengths=pl, order="index")
    od, oi = _index_order_oracle(q, p, 0.3, 12, ql, pl, acc=np.float32)  # the contract's float32 math
    np.testing.assert_array_equal(idx.cpu().numpy(), oi)
    # the float32 distance, rounded once to the dtype: exactly
    assert torch.equal(dist2.cpu(), torch.from_numpy(od).to(dtype))
    assert dist2.dtype == dtype
    assert (idx[1] == -1).all() and (idx[2] == -1).all() and torch.isinf(dist2[1]).all()


def test_index_order_is_not_nearest_when_full():
    # Four points in the ball, k=2: index order keeps 0 and 1, distance order the two nearest.
    p = torch.tensor([[[0.9, 0, 0], [0.8, 0, 0], [0.1, 0, 0], [0.0, 0, 0], [5.0, 0, 0]]], dtype=torch.float64)
    q = torch.zeros(1, 1, 3, dtype=torch.float64)
    assert pcgeom.ball_query(q, p, 1.0, 2, order="index").idx.tolist() == [[[0, 1]]]
    assert pcgeom.ball_query(q, p, 1.0, 2).idx.tolist() == [[[3, 2]]]
    # inclusive radius, NaN never inside
    p2 = torch.tensor([[[1.0, 0, 0], [float("nan"), 0, 0], [0.5, 0, 0]]], dtype=torch.float64)
    assert pcgeom.ball_query(q, p2, 1.0, 3, order="index").idx.tolist() == [[[0, 2, -1]]]


def test_index_order_gradients(device):
    q = random_cloud(1, 5, dtype=torch.float64, device=device, seed=15).requires_grad_()
    p = random_cloud(1, 40, dtype=torch.float64, device=device, seed=16).requires_grad_()
    fn = lambda a, b: torch.nan_to_num(pcgeom.ball_query(a, b, 0.5, 6, order="index").dist2, posinf=0.0)
    assert torch.autograd.gradcheck(fn, (q, p))


def test_index_order_native_equals_reference():
    q = random_cloud(2, 60, dtype=torch.float32, seed=17)
    p = random_cloud(2, 400, dtype=torch.float32, seed=18)
    ql, pl = torch.tensor([60, 7]), torch.tensor([400, 33])
    for r, k in ((0.05, 4), (0.2, 32), (0.6, 200)):
        a = pcgeom.ball_query(q, p, r, k, query_lengths=ql, points_lengths=pl, order="index")
        b = reference.ball_query_reference(q, p, r, k, ql, pl, True)
        assert torch.equal(a.idx, b[1]) and torch.equal(a.dist2, b[0])


@pytest.mark.parametrize("path", ["auto", "tree"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_index_order_through_the_tree(monkeypatch, path, dtype):
    # Where the CPU plan picks the KD-tree, order="index" collects each
    # query's whole ball in a tree and sorts it by index (balls past 16 k
    # points: the scan): every route must give the scan's answer.  Sparse balls
    # (fewer than k points), full ones, a pile of duplicates, NaN points,
    # ragged lengths; the points themselves as queries (grouped by tree leaf)
    # and other queries (grouped by home leaf).
    if not pcgeom.backend_info()["extension_loaded"]:
        pytest.skip("native library not loaded")
    monkeypatch.setenv("PCGEOM_CPU_KNN_PATH", path)
    g = torch.Generator().manual_seed(19)
    p = torch.rand(2, 3000, 3, generator=g, dtype=torch.float64)
    p[0, 100:400] = p[0, 7]
    p[1, 2900:] = p[1, 2899] * 0.5
    p[:, 50:60] = float("nan")
    p = p.to(dtype)
    acc = np.float32 if dtype == torch.float32 else np.float64
    for q, ql in ((p[:, :600].contiguous(), torch.tensor([600, 450])), (p, torch.tensor([3000, 800]))):
        pl = torch.tensor([3000, 2950])
        code = torch.ops.pcgeom._knn_cpu_plan(q, p, 8, ql, pl)
        assert code.tolist() == [1, 1]  # the tree serves both clouds
        for r, k in ((0.04, 8), (0.1, 12), (0.15, 40)):
            dist2, idx = pcgeom.ball_query(q, p, r, k, query_lengths=ql, points_lengths=pl, order="index")
            od, oi = _index_order_oracle(q, p, r, k, ql, pl, acc=acc)
            np.testing.assert_array_equal(idx.numpy(), oi)
            np.testing.assert_array_equal(dist2.numpy(), od)


@pytest.mark.slow
def test_index_order_opcheck_and_compile(device):
    q = random_cloud(2, 5, device=device).requires_grad_()
    p = random_cloud(2, 9, device=device).requires_grad_()
    lens = (torch.tensor([5, 5], device=device), torch.tensor([9, 9], device=device))
    torch.library.opcheck(torch.ops.pcgeom.ball_query.default, (q, p, 0.4, 3, *lens, True))
    fn = torch.compile(lambda a, b: pcgeom.ball_query(a, b, 0.4, 3, order="index"), fullgraph=True)
    got, want = fn(q, p), pcgeom.ball_query(q, p, 0.4, 3, order="index")
    assert torch.equal(got.idx, want.idx) and torch.equal(got.dist2, want.dist2)
