"""pcgeom.ball_query against float64 brute force."""

import numpy as np
import pytest
import torch

import pcgeom
from pcgeom.ops import reference
from conftest import lattice_cloud, random_cloud
from oracle import assert_knn_close, knn_oracle


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
    ],
)
def test_errors(kwargs, exc, match):
    q = torch.rand(1, 4, 3)
    with pytest.raises(exc, match=match):
        pcgeom.ball_query(q, q, **kwargs)
