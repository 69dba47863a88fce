"""pcgeom.knn against independent float64 brute force, on whichever path is active
(native kernels, or the pure-torch path when PCGEOM_DISABLE_EXT=1)."""

import numpy as np
import pytest
import torch

import pcgeom
from pcgeom.ops import reference
from conftest import lattice_cloud, random_cloud
from oracle import assert_knn_close, knn_oracle

pytestmark = pytest.mark.ops  # the op suite: also run on the pure-torch path

NATIVE = pcgeom.backend_info()["extension_loaded"]

SHAPES = [  # B, M, N, D, k
    (1, 1, 1, 3, 1),  # N = 1
    (2, 5, 7, 3, 3),
    (2, 17, 8, 3, 8),  # k = N
    (3, 9, 5, 2, 7),  # k > N: padded
    (2, 33, 100, 1, 4),
    (1, 20, 50, 8, 16),
    (2, 10, 64, 64, 5),  # feature space
    (1, 7, 300, 3, 100),  # large k
]


@pytest.mark.parametrize("B,M,N,D,k", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_bruteforce(device, B, M, N, D, k, dtype):
    q = random_cloud(B, M, D, dtype=dtype, device=device, seed=1)
    p = random_cloud(B, N, D, dtype=dtype, device=device, seed=2)
    dist2, idx = pcgeom.knn(q, p, k)
    assert dist2.shape == (B, M, k) and idx.shape == (B, M, k)
    assert dist2.dtype == dtype and idx.dtype == torch.int64
    if dtype == torch.float64:
        # float64 distances are computed exactly like the oracle: identical answers.
        od, oi = knn_oracle(q, p, k)
        np.testing.assert_array_equal(idx.cpu().numpy(), oi)
        np.testing.assert_array_equal(dist2.cpu().numpy(), od)
    else:
        assert_knn_close(dist2, idx, q, p, k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_lattice_ties_go_to_lower_index(device, dtype):
    p = lattice_cloud(2, 5, dtype=dtype, device=device)  # 125 points, many equal distances
    q = torch.cat([p[:, :20], p[:, :10] + 0.5], dim=1)
    for k in (1, 6, 27, 125, 130):
        dist2, idx = pcgeom.knn(q, p, k)
        od, oi = knn_oracle(q, p, k)
        np.testing.assert_array_equal(idx.cpu().numpy(), oi)
        np.testing.assert_array_equal(dist2.cpu().double().numpy(), od)


def test_self_is_first_with_zero_distance(device):
    p = random_cloud(2, 200, dtype=torch.float32, device=device)
    dist2, idx = pcgeom.knn(p, p, 4)
    assert torch.equal(idx[..., 0].cpu(), torch.arange(200).expand(2, -1))
    assert (dist2[..., 0] == 0).all()


def test_duplicates_lower_index_first(device):
    base = random_cloud(1, 10, device=device)
    p = torch.cat([base, base, base[:, :3]], dim=1)  # point j duplicated at j+10 (and j+20)
    dist2, idx = pcgeom.knn(base, p, 3)
    for j in range(10):
        expected = [j, j + 10] + ([j + 20] if j < 3 else [])
        assert idx[0, j, : len(expected)].tolist() == expected
        assert (dist2[0, j, : len(expected)] == 0).all()


def test_ragged_lengths(device):
    q = random_cloud(4, 12, device=device, seed=3)
    p = random_cloud(4, 30, device=device, seed=4)
    ql = torch.tensor([12, 0, 5, 7])
    pl = torch.tensor([30, 10, 0, 2])
    dist2, idx = pcgeom.knn(q, p, 4, query_lengths=ql, points_lengths=pl)
    assert_knn_close(dist2, idx, q, p, 4, ql, pl)
    assert (idx[1] == -1).all() and torch.isinf(dist2[1]).all()  # no valid queries
    assert (idx[2] == -1).all()  # no valid points
    assert (idx[3, :7, 2:] == -1).all() and (idx[3, :7, :2] >= 0).all()
    assert (idx[3, 7:] == -1).all()
    assert int(idx[0].max()) < 30 and int(idx[3].max()) < 2


def test_lengths_accepts_int32_and_lists(device):
    q = random_cloud(2, 5, device=device)
    a = pcgeom.knn(q, q, 2, points_lengths=torch.tensor([5, 3], dtype=torch.int32, device=device))
    b = pcgeom.knn(q, q, 2, points_lengths=[5, 3])
    assert torch.equal(a.idx, b.idx)


def test_non_contiguous_inputs(device):
    q = random_cloud(3, 16, dtype=torch.float64, device=device, seed=5)
    p = random_cloud(3, 40, dtype=torch.float64, device=device, seed=6)
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)
    pt = torch.cat([p, p], dim=2)[:, :, ::2]
    assert not qt.is_contiguous() and not pt.is_contiguous()
    a = pcgeom.knn(qt, pt, 5)
    b = pcgeom.knn(q.contiguous(), p[:, :, :].contiguous(), 5)
    od, oi = knn_oracle(q, pt, 5)
    np.testing.assert_array_equal(a.idx.cpu().numpy(), oi)
    assert torch.equal(a.idx, pcgeom.knn(q, pt.contiguous(), 5).idx)
    assert b.idx.shape == (3, 16, 5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_accumulates_in_float32(device, dtype):
    q = random_cloud(2, 20, dtype=dtype, device=device, seed=7)
    p = random_cloud(2, 50, dtype=dtype, device=device, seed=8)
    dist2, idx = pcgeom.knn(q, p, 6)
    assert dist2.dtype == dtype
    # Same ranking as float32 math on the same (rounded) coordinates.
    d32, i32 = pcgeom.knn(q.float(), p.float(), 6)
    assert torch.equal(idx, i32)
    assert torch.equal(dist2, d32.to(dtype))


def test_nan_and_inf_rank_last_and_stay_in_range(device):
    p = random_cloud(1, 20, device=device, seed=9)
    p[0, 3] = float("nan")
    p[0, 7, 1] = float("inf")
    q = torch.cat([p[:, :5], torch.full((1, 1, 3), float("nan"), device=device)], dim=1)
    dist2, idx = pcgeom.knn(q, p, 20)
    od, oi = knn_oracle(q, p, 20)
    np.testing.assert_array_equal(idx.cpu().numpy(), oi)
    assert ((idx >= 0) & (idx < 20)).all()
    assert idx[0, 0, -1] == 3 and torch.isnan(dist2[0, 0, -1])  # NaN after +inf
    assert idx[0, 0, -2] == 7 and torch.isinf(dist2[0, 0, -2])
    assert idx[0, 5].tolist() == list(range(20))  # all NaN: index order


def test_empty_inputs(device):
    e = pcgeom.knn(torch.zeros(0, 5, 3, device=device), torch.zeros(0, 7, 3, device=device), 2)
    assert e.dist2.shape == (0, 5, 2) and e.idx.shape == (0, 5, 2)
    e = pcgeom.knn(torch.zeros(2, 0, 3, device=device), torch.rand(2, 7, 3, device=device), 2)
    assert e.idx.shape == (2, 0, 2)
    e = pcgeom.knn(torch.rand(2, 3, 3, device=device), torch.zeros(2, 0, 3, device=device), 2)
    assert (e.idx == -1).all() and torch.isinf(e.dist2).all()


def test_gradients_match_autograd_of_bruteforce(device):
    q = random_cloud(2, 6, dtype=torch.float64, device=device, seed=10).requires_grad_()
    p = random_cloud(2, 9, dtype=torch.float64, device=device, seed=11).requires_grad_()
    pl = torch.tensor([9, 4])
    dist2, idx = pcgeom.knn(q, p, 5, points_lengths=pl)
    w = torch.randn(dist2.shape, dtype=torch.float64, device=device)
    (torch.where(idx >= 0, dist2, 0) * w).sum().backward()
    gq, gp = q.grad.clone(), p.grad.clone()
    q2, p2 = q.detach().clone().requires_grad_(), p.detach().clone().requires_grad_()
    nn = torch.gather(p2, 1, idx.clamp_min(0).reshape(2, -1, 1).expand(-1, -1, 3)).reshape(2, 6, 5, 3)
    d = ((q2[:, :, None] - nn) ** 2).sum(-1)
    (torch.where(idx >= 0, d, 0) * w).sum().backward()
    torch.testing.assert_close(gq, q2.grad)
    torch.testing.assert_close(gp, p2.grad)
    assert (gp[1, 4:] == 0).all()  # padded points get no gradient


def test_gradcheck(device):
    q = random_cloud(2, 4, dtype=torch.float64, device=device, seed=12).requires_grad_()
    p = random_cloud(2, 6, dtype=torch.float64, device=device, seed=13).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: pcgeom.knn(a, b, 3).dist2, (q, p))


def test_opcheck(device):
    q = random_cloud(2, 5, dtype=torch.float32, device=device).requires_grad_()
    p = random_cloud(2, 8, dtype=torch.float32, device=device).requires_grad_()
    lengths = torch.tensor([5, 3], device=device)
    torch.library.opcheck(torch.ops.pcgeom.knn.default, (q, p, 3, lengths, torch.tensor([8, 6], device=device)))


def test_native_equals_reference_exactly():
    if not NATIVE:
        pytest.skip("native library not loaded")
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        q = random_cloud(2, 40, 3, dtype=dtype, seed=14)
        p = torch.cat([random_cloud(2, 200, 3, dtype=dtype, seed=15), lattice_cloud(2, 4, dtype=dtype) / 4], 1)
        p[0, 5] = float("nan")
        ql, pl = torch.tensor([40, 13]), torch.tensor([264, 100])
        for k in (1, 7, 70, 300):
            a = pcgeom.knn(q, p, k, query_lengths=ql, points_lengths=pl)
            b = reference.knn_reference(q, p, k, ql, pl)
            assert torch.equal(a.idx, b[1])
            assert torch.equal(torch.nan_to_num(a.dist2, nan=-1.0), torch.nan_to_num(b[0], nan=-1.0))


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda q, p: pcgeom.knn(q[0], p, 2), ValueError, r"knn: query must have shape \(B, M, D\), got \(5, 3\)"),
        (lambda q, p: pcgeom.knn(q, p[:1], 2), ValueError, r"knn: points must have shape \(B, N, D\) with the B and D of query \(2, \*, 3\), got \(1, 7, 3\)"),
        (lambda q, p: pcgeom.knn(q, p[..., :2], 2), ValueError, r"B and D of query"),
        (lambda q, p: pcgeom.knn(q, p.double(), 2), TypeError, r"same dtype, got torch.float32 and torch.float64"),
        (lambda q, p: pcgeom.knn(q.long(), p.long(), 2), TypeError, r"query must be float16, bfloat16, float32 or float64, got torch.int64"),
        (lambda q, p: pcgeom.knn(q, p, 0), ValueError, r"knn: k must be >= 1, got 0"),
        (lambda q, p: pcgeom.knn(q, p, 2.0), TypeError, r"knn: k must be an int, got float"),
        (lambda q, p: pcgeom.knn(q, p, True), TypeError, r"k must be an int"),
        (lambda q, p: pcgeom.knn(q, p, 2, points_lengths=torch.tensor([7])), ValueError, r"points_lengths must have shape \(2,\), got \(1,\)"),
        (lambda q, p: pcgeom.knn(q, p, 2, points_lengths=torch.tensor([7, 8])), ValueError, r"points_lengths values must be in \[0, 7\], got points_lengths\[1\]=8"),
        (lambda q, p: pcgeom.knn(q, p, 2, query_lengths=torch.tensor([-1, 2])), ValueError, r"query_lengths values must be in \[0, 5\], got query_lengths\[0\]=-1"),
        (lambda q, p: pcgeom.knn(q, p, 2, query_lengths=torch.tensor([1.0, 2.0])), TypeError, r"query_lengths must be an integer tensor"),
        (lambda q, p: pcgeom.knn("q", p, 2), TypeError, r"knn: query must be a torch.Tensor"),
        (lambda q, p: pcgeom.knn(q[:, :, :0], p[:, :, :0], 2), ValueError, r"at least one coordinate"),
    ],
)
def test_errors(call, exc, match):
    q, p = torch.rand(2, 5, 3), torch.rand(2, 7, 3)
    with pytest.raises(exc, match=match):
        call(q, p)


def test_direct_op_call_with_bad_lengths_is_an_error_not_a_crash():
    q = torch.rand(2, 5, 3)
    with pytest.raises(RuntimeError, match="points_lengths"):
        torch.ops.pcgeom.knn(q, q, 2, torch.tensor([5, 5]), torch.tensor([5, 99]))
