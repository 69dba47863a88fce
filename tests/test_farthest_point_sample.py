"""pcgeom.farthest_point_sample against a float64 greedy oracle."""

import numpy as np
import pytest
import torch

import pcgeom
from pcgeom.ops import reference
from conftest import clustered_cloud, lattice_cloud, random_cloud, surface_cloud
from oracle import fps_oracle

pytestmark = pytest.mark.ops  # the op suite: also run on the pure-torch path


@pytest.mark.parametrize("B,N,D,S", [(1, 1, 3, 1), (2, 7, 3, 7), (3, 50, 3, 12), (2, 100, 2, 30), (2, 64, 8, 64), (1, 300, 3, 50)])
def test_matches_oracle_float64(device, B, N, D, S):
    p = random_cloud(B, N, D, dtype=torch.float64, device=device, seed=N)
    idx = pcgeom.farthest_point_sample(p, S)
    assert idx.shape == (B, S) and idx.dtype == torch.int64
    np.testing.assert_array_equal(idx.cpu().numpy(), fps_oracle(p, S))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_lattice_ties_lowest_index(device, dtype):
    p = lattice_cloud(2, 4, dtype=dtype, device=device)  # 64 points, massive ties
    idx = pcgeom.farthest_point_sample(p, 64, start_index=torch.tensor([0, 17]))
    np.testing.assert_array_equal(idx.cpu().numpy(), fps_oracle(p, 64, start=[0, 17]))
    assert (idx.sort(-1).values == torch.arange(64, device=device)).all()  # a permutation: no repeats


def test_duplicates_are_never_chosen_twice(device):
    base = random_cloud(1, 10, device=device)
    p = torch.cat([base, base, base], 1)
    idx = pcgeom.farthest_point_sample(p, 30)
    assert len(set(idx[0].tolist())) == 30
    assert set(idx[0, :10].tolist()) | set() and max(idx[0, :10].tolist()) < 10  # originals first: lowest index on ties


@pytest.mark.parametrize("factory", [random_cloud, surface_cloud, clustered_cloud])
def test_float32_matches_reference(device, factory):
    p = factory(2, 500, device=device, seed=3) if factory is not random_cloud else factory(2, 500, 3, device=device, seed=3)
    lengths = torch.tensor([500, 321])
    idx = pcgeom.farthest_point_sample(p, 60, lengths=lengths, start_index=torch.tensor([5, 320]))
    ref = reference.farthest_point_sample_reference(p.cpu(), 60, lengths, torch.tensor([5, 320]))
    assert torch.equal(idx.cpu(), ref)
    np.testing.assert_array_equal(idx.cpu().numpy(), fps_oracle(p.double(), 60, lengths, [5, 320]))


def test_lengths_and_padding(device):
    p = random_cloud(3, 20, device=device)
    idx = pcgeom.farthest_point_sample(p, 8, lengths=torch.tensor([20, 5, 0]))
    assert (idx[0] >= 0).all() and idx[1, :5].sort().values.tolist() == list(range(5))
    assert (idx[1, 5:] == -1).all() and (idx[2] == -1).all()
    over = pcgeom.farthest_point_sample(p, 25)
    assert (over[:, 20:] == -1).all() and (over[:, :20].sort(-1).values == torch.arange(20, device=device)).all()


def test_random_start_from_torch_generator(device):
    p = random_cloud(4, 50, device=device)
    g = torch.Generator().manual_seed(0)
    start = torch.randint(0, 50, (4,), generator=g)
    idx = pcgeom.farthest_point_sample(p, 5, start_index=start)
    assert torch.equal(idx[:, 0].cpu(), start)


def test_nan_points_are_taken_last(device):
    p = random_cloud(1, 12, device=device)
    p[0, 4] = float("nan")
    idx = pcgeom.farthest_point_sample(p, 12)
    assert idx[0, -1] == 4 and sorted(idx[0].tolist()) == list(range(12))
    assert torch.equal(idx.cpu(), reference.farthest_point_sample_reference(p.cpu(), 12, torch.tensor([12]), torch.tensor([0])))


def test_empty(device):
    assert pcgeom.farthest_point_sample(torch.zeros(0, 5, 3, device=device), 3).shape == (0, 3)
    assert (pcgeom.farthest_point_sample(torch.zeros(2, 0, 3, device=device), 3) == -1).all()


def test_native_equals_reference():
    if not pcgeom.backend_info()["extension_loaded"]:
        pytest.skip("native library not loaded")
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        p = surface_cloud(3, 2000, dtype=dtype, seed=4)
        p[1, 7] = float("inf")
        lengths, start = torch.tensor([2000, 1500, 3]), torch.tensor([0, 11, 2])
        a = pcgeom.farthest_point_sample(p, 100, lengths=lengths, start_index=start)
        b = reference.farthest_point_sample_reference(p, 100, lengths, start)
        assert torch.equal(a, b)


def test_opcheck(device):
    p = random_cloud(2, 9, device=device)
    torch.library.opcheck(torch.ops.pcgeom.farthest_point_sample.default, (p, 4, torch.tensor([9, 5], device=device), torch.tensor([0, 4], device=device)))


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(n_samples=0), ValueError, r"farthest_point_sample: n_samples must be >= 1, got 0"),
        (dict(n_samples=2.5), TypeError, r"n_samples must be an int"),
        (dict(n_samples=2, start_index=10), ValueError, r"start_index must be in \[0, 10\) for points of shape \(2, 10, 3\), got 10"),
        (dict(n_samples=2, start_index=-1), ValueError, r"start_index must be in \[0, 10\)"),
        (dict(n_samples=2, start_index=torch.tensor([0, 4]), lengths=torch.tensor([10, 4])), ValueError, r"start_index\[1\]=4 is outside \[0, 4\) \(lengths\[1\]=4\)"),
        (dict(n_samples=2, start_index=torch.tensor([0, 1, 2])), ValueError, r"start_index must be an int or have shape \(2,\)"),
        (dict(n_samples=2, start_index=torch.tensor([0.0, 1.0])), TypeError, r"start_index must be an int or an integer tensor"),
        (dict(n_samples=2, lengths=torch.tensor([11, 2])), ValueError, r"lengths values must be in \[0, 10\], got lengths\[0\]=11"),
    ],
)
def test_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        pcgeom.farthest_point_sample(torch.rand(2, 10, 3), **kwargs)


def test_meta_tensors_give_shapes_without_data():
    """Like knn: meta points (no data) give a meta result of the right shape;
    only what must be read (lengths, a start_index tensor) is refused, named."""
    p = torch.empty(2, 100, 3, device="meta")
    for start in (0, 7):
        idx = pcgeom.farthest_point_sample(p, 10, start_index=start)
        assert idx.device.type == "meta" and idx.shape == (2, 10) and idx.dtype == torch.int64
    assert pcgeom.farthest_point_sample(p, 150).shape == (2, 150)
    with pytest.raises(ValueError, match=r"start_index must be in \[0, 100\)"):
        pcgeom.farthest_point_sample(p, 10, start_index=100)
    with pytest.raises(ValueError, match="start_index must hold values on a real device"):
        pcgeom.farthest_point_sample(p, 10, start_index=torch.zeros(2, dtype=torch.long, device="meta"))
    with pytest.raises(ValueError, match="lengths must hold values on a real device"):
        pcgeom.farthest_point_sample(p, 10, lengths=torch.full((2,), 100, device="meta"))
