"""pcgeom.packed_features against float64 brute-force references written here, loop by loop.

The references never call pcgeom: cloud ids, offsets, neighbourhoods, inverse-distance weights and the
vector-attention sum are rebuilt from the definitions in the docstrings with Python loops in float64, on
ragged packed batches with empty clouds, exact distance ties (integer lattices) and every floating dtype.
Where the op is one rounding of an exact value (gathers, a single subtraction) the comparison is exact against
the float64 reference rounded to the dtype; where it sums several rounded terms the tolerance is a few units in
the last place of the dtype, scaled by the number of terms.
"""

from __future__ import annotations

import math

import pytest
import torch

import pcgeom
from conftest import FLOAT_DTYPES

INT_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]


def ends(sizes):
    """Cumulative end offsets of clouds of the given sizes (the packed layout's ``offsets``)."""
    out, total = [], 0
    for s in sizes:
        total += s
        out.append(total)
    return out


def packed_cloud(sizes, D=3, *, lattice=False, seed=0):
    """``(sum(sizes), D)`` float64 rows; ``lattice=True`` puts them on a small integer grid (many exact ties,
    every coordinate and squared distance exact in float16 and bfloat16 too)."""
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    if lattice:
        return torch.randint(0, 4, (n, D), generator=g).double()
    return torch.rand(n, D, generator=g, dtype=torch.float64)


def cloud_of_rows(sizes):
    """Row r -> the cloud it belongs to, by walking the sizes."""
    return [b for b, s in enumerate(sizes) for _ in range(s)]


def tol(dtype, terms=1):
    """Absolute tolerance for values of magnitude <= ~1 built from ``terms`` rounded operations."""
    return 4 * terms * torch.finfo(dtype).eps


# ----------------------------------------------------------------------------
# offsets_to_batch / batch_to_offsets


@pytest.mark.parametrize("sizes", [[5], [3, 0, 4], [0, 0, 2], [2, 0, 0], [0], [0, 0], [1, 1, 1, 1]])
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_offsets_to_batch_matches_loop(sizes, dtype):
    off = torch.tensor(ends(sizes), dtype=dtype)
    batch = pcgeom.offsets_to_batch(off)
    assert batch.dtype == torch.int64 and batch.tolist() == cloud_of_rows(sizes)
    assert pcgeom.offsets_to_batch(off, n_total=sum(sizes)).tolist() == cloud_of_rows(sizes)


@pytest.mark.parametrize("sizes", [[5], [3, 0, 4], [0, 0, 2], [2, 0, 0], [1, 1, 1, 1]])
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_batch_to_offsets_matches_loop_and_round_trips(sizes, dtype):
    batch = torch.tensor(cloud_of_rows(sizes), dtype=dtype)
    # without n_clouds the trailing empty clouds are unknowable: B = max id + 1
    last = max(b for b, s in enumerate(sizes) if s > 0)
    off = pcgeom.batch_to_offsets(batch)
    assert off.dtype == torch.int64 and off.tolist() == ends(sizes[:last + 1])
    full = pcgeom.batch_to_offsets(batch, n_clouds=len(sizes))
    assert full.tolist() == ends(sizes)
    assert pcgeom.offsets_to_batch(full).tolist() == batch.tolist()


def test_batch_to_offsets_counts_unsorted_ids_and_empty_input():
    # offsets[b] = number of rows with id <= b, whatever their order
    batch = torch.tensor([2, 0, 2, 2, 0])
    assert pcgeom.batch_to_offsets(batch).tolist() == [sum(int(v) <= b for v in batch) for b in range(3)]
    assert pcgeom.batch_to_offsets(torch.tensor([0, 2, 2])).tolist() == [1, 1, 3]
    assert pcgeom.batch_to_offsets(torch.zeros(0, dtype=torch.int64)).tolist() == [0]
    assert pcgeom.batch_to_offsets(torch.zeros(0, dtype=torch.int32), n_clouds=3).tolist() == [0, 0, 0]


@pytest.mark.parametrize("call, exc, match", [
    (lambda: pcgeom.offsets_to_batch(torch.tensor([1.0, 2.0])), TypeError, "offsets_to_batch: offsets must be an integer tensor"),
    (lambda: pcgeom.offsets_to_batch([1, 2]), TypeError, "offsets_to_batch: offsets must be an integer tensor"),
    (lambda: pcgeom.offsets_to_batch(torch.zeros(0, dtype=torch.int64)), ValueError, r"shape \(B,\) with B >= 1"),
    (lambda: pcgeom.offsets_to_batch(torch.tensor([[1, 2]])), ValueError, r"shape \(B,\) with B >= 1"),
    (lambda: pcgeom.offsets_to_batch(torch.tensor([3, 2])), ValueError, "non-decreasing"),
    (lambda: pcgeom.offsets_to_batch(torch.tensor([2, 5]), n_total=4), ValueError, r"offsets\[-1\] must equal"),
    (lambda: pcgeom.batch_to_offsets(torch.tensor([0.0])), TypeError, "batch_to_offsets: batch must be an integer tensor"),
    (lambda: pcgeom.batch_to_offsets(torch.tensor([[0]])), ValueError, r"batch must have shape \(N,\)"),
    (lambda: pcgeom.batch_to_offsets(torch.tensor([0, -1])), ValueError, "batch values must be >= 0, got -1"),
    (lambda: pcgeom.batch_to_offsets(torch.tensor([0, 3]), n_clouds=3), ValueError, "batch values must be < n_clouds=3, got 3"),
])
def test_offsets_and_batch_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# ----------------------------------------------------------------------------
# group_packed


def knn_packed_f64(query, points, q_sizes, p_sizes, k):
    """Brute-force packed KNN in float64: per query row, the k nearest rows of its own cloud, ascending, ties to
    the lower index (a stable sort on the distance), ``-1`` / ``inf`` where the cloud has fewer than k rows."""
    q_cloud, p_cloud = cloud_of_rows(q_sizes), cloud_of_rows(p_sizes)
    idx = torch.full((query.shape[0], k), -1, dtype=torch.int64)
    dist2 = torch.full((query.shape[0], k), math.inf, dtype=torch.float64)
    for m in range(query.shape[0]):
        rows = [n for n in range(points.shape[0]) if p_cloud[n] == q_cloud[m]]
        d = [(sum((float(query[m, c]) - float(points[n, c])) ** 2 for c in range(query.shape[1])), n) for n in rows]
        d.sort()  # (distance, index): ties to the lower index
        for j, (dd, n) in enumerate(d[:k]):
            idx[m, j], dist2[m, j] = n, dd
    return dist2, idx


def group_f64(features, idx, points=None, centers=None):
    """``out[m, j] = concat(points[i] - centers[m], features[i])`` for ``i = idx[m, j] >= 0``, zeros at ``-1``."""
    M, K = idx.shape
    D = 0 if points is None else points.shape[1]
    C = 0 if features is None else features.shape[1]
    out = torch.zeros(M, K, D + C, dtype=torch.float64)
    for m in range(M):
        for j in range(K):
            i = int(idx[m, j])
            if i < 0:
                continue
            for c in range(D):
                out[m, j, c] = float(points[i, c]) - float(centers[m, c])
            for c in range(C):
                out[m, j, D + c] = float(features[i, c])
    return out


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
def test_group_packed_is_the_rounded_float64_reference(device, dtype, idx_dtype):
    sizes = [7, 0, 5, 1]
    pts64 = packed_cloud(sizes, seed=1)
    feat64 = torch.randn(sum(sizes), 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    pts, feat = pts64.to(dtype), feat64.to(dtype)
    _, idx = knn_packed_f64(pts.double(), pts.double(), sizes, sizes, k=3)  # -1 rows where a cloud has < 3 points
    assert (idx == -1).any()
    out = pcgeom.group_packed(feat.to(device), idx.to(device, idx_dtype), points=pts.to(device), centers=pts.to(device))
    assert out.shape == (sum(sizes), 3, 3 + 4) and out.dtype == dtype
    # a gather is exact and the relative coordinate is one subtraction of two `dtype` values: the float64 value of
    # that subtraction, rounded once to `dtype`, is the only right answer
    ref = group_f64(feat.double(), idx, pts.double(), pts.double()).to(dtype)
    assert torch.equal(out.cpu(), ref)
    # features only / coordinates only
    assert torch.equal(pcgeom.group_packed(feat.to(device), idx.to(device)).cpu(), ref[..., 3:])
    coords = pcgeom.group_packed(None, idx.to(device), points=pts.to(device), centers=pts.to(device))
    assert torch.equal(coords.cpu(), ref[..., :3])


def test_group_packed_promotes_like_cat_and_handles_zero_channels(device):
    pts = packed_cloud([4, 3], seed=3).float().to(device)
    idx = torch.tensor([[0, 1], [3, -1], [-1, -1], [6, 5]], device=device)
    feat = torch.randn(7, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64).to(device)
    out = pcgeom.group_packed(feat, idx, points=pts, centers=pts[:4])
    assert out.dtype == torch.float64  # float32 coordinates, float64 features -> float64, as torch.cat
    ref = group_f64(feat.cpu(), idx.cpu(), pts.cpu().double(), pts[:4].cpu().double())
    assert torch.equal(out.cpu()[..., 3:], ref[..., 3:])
    assert torch.equal(out.cpu()[..., :3], ref[..., :3].float().double())
    empty = pcgeom.group_packed(feat[:, :0], idx)
    assert empty.shape == (4, 2, 0)
    assert pcgeom.group_packed(feat[:, :0], idx, points=pts, centers=pts[:4]).shape == (4, 2, 3)


def test_group_packed_gradients_skip_missing_slots():
    pts = packed_cloud([4, 3], seed=5).requires_grad_()
    ctr = pts.detach()[[0, 2, 4]].clone().requires_grad_()
    feat = torch.randn(7, 2, generator=torch.Generator().manual_seed(6), dtype=torch.float64, requires_grad=True)
    idx = torch.tensor([[0, 1, -1], [3, 3, 2], [-1, 6, 5]])
    torch.autograd.gradcheck(lambda f, p, c: pcgeom.group_packed(f, idx, points=p, centers=c), (feat, pts, ctr))
    # d(sum out)/d features[i] = the number of slots that hold i; -1 slots reach nothing
    out = pcgeom.group_packed(feat, idx, points=pts, centers=ctr)
    out.sum().backward()
    counts = torch.tensor([sum(int(v) == i for v in idx.flatten()) for i in range(7)], dtype=torch.float64)
    assert torch.equal(feat.grad, counts[:, None].expand(7, 2))
    # a centre's relative coordinates are subtracted once per valid slot
    valid = torch.tensor([sum(int(v) >= 0 for v in row) for row in idx], dtype=torch.float64)
    assert torch.equal(ctr.grad, -valid[:, None].expand(3, 3))


def test_group_packed_errors():
    f = torch.zeros(5, 2)
    with pytest.raises(ValueError, match="features=None needs points="):
        pcgeom.group_packed(None, torch.zeros(1, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match="points= and centers= go together"):
        pcgeom.group_packed(f, torch.zeros(1, 1, dtype=torch.int64), points=torch.zeros(5, 3))
    with pytest.raises(TypeError, match="idx must be an int32 or int64 tensor"):
        pcgeom.group_packed(f, torch.zeros(1, 1))
    with pytest.raises(ValueError, match=r"idx must have shape \(M, k\)"):
        pcgeom.group_packed(f, torch.zeros(3, dtype=torch.int64))
    with pytest.raises(TypeError, match="features must be float16, bfloat16, float32 or float64"):
        pcgeom.group_packed(f.long(), torch.zeros(1, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"centers must have shape \(M, D\) with 2 rows"):
        pcgeom.group_packed(f, torch.zeros(2, 1, dtype=torch.int64), points=torch.zeros(5, 3), centers=torch.zeros(3, 3))
    with pytest.raises(ValueError):  # an index past the rows is an error, never a read outside the tensor
        pcgeom.group_packed(f, torch.tensor([[5]]))
    with pytest.raises(ValueError):
        pcgeom.group_packed(f, torch.tensor([[-2]]))


# ----------------------------------------------------------------------------
# interpolate_packed


def interpolate_f64(query, points, features, q_sizes, p_sizes, k, eps):
    """``sum_j w_j f[idx_j]`` with ``w_j = (1 / (d_j + eps)) / sum_i 1 / (d_i + eps)`` over the (up to) k nearest
    rows of the same cloud; zeros for a query whose cloud of points is empty."""
    dist2, idx = knn_packed_f64(query, points, q_sizes, p_sizes, k)
    out = torch.zeros(query.shape[0], features.shape[1], dtype=torch.float64)
    for m in range(query.shape[0]):
        recip = [1.0 / (math.sqrt(float(dist2[m, j])) + eps) for j in range(k) if idx[m, j] >= 0]
        total = sum(recip)
        for j, r in enumerate(recip):
            out[m] += (r / total) * features[int(idx[m, j])].double()
    return out, idx


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("lattice", [False, True], ids=["random", "lattice-ties"])
def test_interpolate_packed_matches_float64_reference(device, dtype, lattice):
    q_sizes, p_sizes = [6, 3, 0, 4], [9, 2, 5, 0]  # a cloud with fewer points than k, an empty points cloud
    k = 3
    query = packed_cloud(q_sizes, lattice=lattice, seed=7).to(dtype)
    points = packed_cloud(p_sizes, lattice=lattice, seed=8).to(dtype)
    feat = torch.randn(sum(p_sizes), 5, generator=torch.Generator().manual_seed(9), dtype=torch.float64).to(dtype)
    ref, ref_idx = interpolate_f64(query.double(), points.double(), feat.double(), q_sizes, p_sizes, k, 1e-8)
    if lattice:
        # a lattice puts duplicates and equidistant points in one cloud: the pick at the k-th place is decided by
        # the tie rule, so a wrong tie-break changes the answer
        d2, _ = knn_packed_f64(query.double(), points.double(), q_sizes, p_sizes, k + 1)
        assert (d2[:, k - 1] == d2[:, k]).any()
    out = pcgeom.interpolate_packed(query.to(device), points.to(device), feat.to(device), k,
                                    query_offsets=torch.tensor(ends(q_sizes)), points_offsets=torch.tensor(ends(p_sizes)))
    assert out.shape == (sum(q_sizes), 5) and out.dtype == dtype
    assert torch.equal(out[sum(q_sizes[:3]):].cpu(), torch.zeros(4, 5, dtype=dtype))  # empty cloud of points
    # weights rounded to the dtype, k products and a sum: a few units in the last place per term
    torch.testing.assert_close(out.cpu().double(), ref, rtol=0, atol=tol(dtype, 2 * k) * feat.abs().max().item())


def test_interpolate_packed_one_cloud_eps_and_gradient():
    points = packed_cloud([8], seed=10)
    query = torch.cat([points[:2], packed_cloud([3], seed=11)])  # two queries sit exactly on a point
    feat = torch.randn(8, 2, generator=torch.Generator().manual_seed(12), dtype=torch.float64, requires_grad=True)
    for eps in (1e-8, 0.5):
        ref, idx = interpolate_f64(query, points, feat.detach(), [5], [8], 3, eps)
        out = pcgeom.interpolate_packed(query, points, feat, 3, eps=eps)
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    # the weights are constants of the geometry: d out / d features is the weight matrix
    torch.autograd.gradcheck(lambda f: pcgeom.interpolate_packed(query, points, f, 3), (feat,))
    assert pcgeom.interpolate_packed(query, points, feat[:, :0].detach(), 3).shape == (5, 0)


def test_interpolate_packed_errors():
    q, p, f = torch.zeros(2, 3), torch.zeros(4, 3), torch.zeros(4, 2)
    with pytest.raises(ValueError, match="eps must be > 0"):
        pcgeom.interpolate_packed(q, p, f, eps=0.0)
    with pytest.raises(ValueError, match=r"features must have shape \(N, C\) with 4 rows"):
        pcgeom.interpolate_packed(q, p, f[:3])
    with pytest.raises(ValueError, match=r"points must have shape \(N, D\) with 3 columns"):
        pcgeom.interpolate_packed(q, p[:, :2], f)
    with pytest.raises(ValueError, match="k must be"):
        pcgeom.interpolate_packed(q, p, f, k=0)


# ----------------------------------------------------------------------------
# aggregate_neighbors


def aggregate_f64(features, idx, weight, position=None):
    """``out[m, c] = sum_j (features[idx[m, j], c] + position[m, j, c]) * weight[m, j, c % W]`` over ``idx >= 0``."""
    M, K = idx.shape
    C, W = features.shape[1], weight.shape[2]
    out = torch.zeros(M, C, dtype=torch.float64)
    for m in range(M):
        for c in range(C):
            s = 0.0
            for j in range(K):
                i = int(idx[m, j])
                if i < 0:
                    continue
                v = float(features[i, c]) + (0.0 if position is None else float(position[m, j, c]))
                s += v * float(weight[m, j, c % W])
            out[m, c] = s
    return out


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("C, W", [(6, 6), (6, 2), (6, 1), (5, 2), (2, 4)])
def test_aggregate_neighbors_matches_float64_reference(device, dtype, C, W):
    sizes = [6, 0, 4]
    g = torch.Generator().manual_seed(13)
    pts = packed_cloud(sizes, seed=14)
    _, idx = knn_packed_f64(pts, pts, sizes, sizes, k=5)  # the 4-point cloud leaves a -1 in every row
    feat = torch.randn(10, C, generator=g, dtype=torch.float64).to(dtype)
    weight = torch.rand(10, 5, W, generator=g, dtype=torch.float64).to(dtype)
    pos = torch.randn(10, 5, C, generator=g, dtype=torch.float64).to(dtype)
    for position in (None, pos):
        ref = aggregate_f64(feat.double(), idx, weight.double(), None if position is None else position.double())
        out = pcgeom.aggregate_neighbors(feat.to(device), idx.to(device), weight.to(device),
                                         None if position is None else position.to(device))
        assert out.shape == (10, C) and out.dtype == dtype
        # per slot one add, one product; then a sum of k terms -- each rounded in the dtype
        scale = (feat.double().abs().max() + pos.double().abs().max()).item()
        torch.testing.assert_close(out.cpu().double(), ref, rtol=0, atol=tol(dtype, 3 * 5) * scale)


def test_aggregate_neighbors_gradients_and_missing_slots():
    g = torch.Generator().manual_seed(15)
    feat = torch.randn(4, 4, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(3, 2, 2, generator=g, dtype=torch.float64, requires_grad=True)
    pos = torch.randn(3, 2, 4, generator=g, dtype=torch.float64, requires_grad=True)
    idx = torch.tensor([[0, -1], [3, 1], [-1, -1]], dtype=torch.int32)
    torch.autograd.gradcheck(lambda f, w, p: pcgeom.aggregate_neighbors(f, idx, w, p), (feat, weight, pos))
    out = pcgeom.aggregate_neighbors(feat, idx, weight, pos)
    assert torch.equal(out[2], torch.zeros(4, dtype=torch.float64))  # only -1 slots: nothing, whatever the weights
    out.sum().backward()
    assert torch.equal(pos.grad[idx < 0], torch.zeros(3, 4, dtype=torch.float64))
    assert torch.equal(weight.grad[idx < 0], torch.zeros(3, 2, dtype=torch.float64))


def test_aggregate_neighbors_errors():
    f, idx = torch.zeros(4, 6), torch.zeros(3, 2, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"weight must have shape \(M, k, W\) = \(3, 2, W >= 1\)"):
        pcgeom.aggregate_neighbors(f, idx, torch.zeros(3, 2, 0))
    with pytest.raises(TypeError, match="weight must be a floating tensor"):
        pcgeom.aggregate_neighbors(f, idx, torch.zeros(3, 2, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"position must have shape \(M, k, C\) = \(3, 2, 6\)"):
        pcgeom.aggregate_neighbors(f, idx, torch.zeros(3, 2, 1), torch.zeros(3, 2, 5))
