"""pcgeom.knn_gather: values, -1 padding, gradients."""

import pytest
import torch

import pcgeom
from pcgeom.ops import reference
from conftest import random_cloud

pytestmark = pytest.mark.ops  # the op suite: also run on the pure-torch path


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_gathers_and_pads_with_zeros(device, dtype):
    x = random_cloud(2, 10, 5, dtype=dtype, device=device)
    idx = torch.randint(-1, 10, (2, 4, 3), generator=torch.Generator().manual_seed(0)).to(device)
    out = pcgeom.knn_gather(x, idx)
    assert out.shape == (2, 4, 3, 5) and out.dtype == dtype
    for b in range(2):
        for m in range(4):
            for j in range(3):
                i = int(idx[b, m, j])
                expected = torch.zeros(5, dtype=dtype, device=device) if i < 0 else x[b, i]
                assert torch.equal(out[b, m, j], expected)


def test_gather_knn_result_gives_neighbour_coordinates(device):
    p = random_cloud(2, 50, device=device)
    res = pcgeom.knn(p[:, :7], p, 4, points_lengths=torch.tensor([50, 3]))
    nn = pcgeom.knn_gather(p, res.idx)
    d = ((nn - p[:, :7, None]) ** 2).sum(-1)
    valid = res.idx >= 0
    torch.testing.assert_close(d[valid], res.dist2[valid])
    assert (nn[~valid] == 0).all()


def test_gradient_scatters_back(device):
    x = random_cloud(2, 6, 3, dtype=torch.float64, device=device).requires_grad_()
    idx = torch.tensor([[[0, 0, -1], [5, 1, 0]], [[2, 2, 2], [-1, -1, 3]]], device=device)
    assert torch.autograd.gradcheck(lambda t: pcgeom.knn_gather(t, idx), (x,))
    pcgeom.knn_gather(x, idx).sum().backward()
    assert x.grad[0, 0].tolist() == [3.0, 3.0, 3.0] and x.grad[1, 2].tolist() == [3.0, 3.0, 3.0]
    assert (x.grad[0, 2] == 0).all()


def test_native_equals_reference_including_backward():
    if not pcgeom.backend_info()["extension_loaded"]:
        pytest.skip("native library not loaded")
    x = random_cloud(3, 40, 6)
    idx = torch.randint(-1, 40, (3, 20, 5), generator=torch.Generator().manual_seed(1))
    assert torch.equal(pcgeom.knn_gather(x, idx), reference.knn_gather_reference(x, idx))
    g = torch.randn(3, 20, 5, 6, dtype=torch.float64)
    a = torch.ops.pcgeom.knn_gather_backward(g, idx, 40)
    b = reference.knn_gather_backward_reference(g, idx, 40)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_opcheck(device):
    x = random_cloud(2, 6, 4, device=device).requires_grad_()
    idx = torch.tensor([[[0, -1]], [[5, 1]]], device=device)
    torch.library.opcheck(torch.ops.pcgeom.knn_gather.default, (x, idx))


@pytest.mark.parametrize(
    "x,idx,exc,match",
    [
        (torch.rand(2, 5), torch.zeros(2, 1, 1, dtype=torch.long), ValueError, r"knn_gather: x must have shape \(B, N, C\), got \(2, 5\)"),
        (torch.rand(2, 5, 3), torch.zeros(2, 1, 1, dtype=torch.int32), TypeError, r"idx must be int64, got torch.int32"),
        (torch.rand(2, 5, 3), torch.zeros(3, 1, 1, dtype=torch.long), ValueError, r"with B=2 of x"),
        (torch.rand(2, 5, 3), torch.full((2, 1, 1), 5), ValueError, r"idx values must be in \[-1, 5\), got min 5, max 5"),
        (torch.rand(2, 5, 3), torch.full((2, 1, 1), -2), ValueError, r"idx values must be in \[-1, 5\)"),
        (torch.randint(0, 3, (2, 5, 3)), torch.zeros(2, 1, 1, dtype=torch.long), TypeError, r"x must be float16"),
    ],
)
def test_errors(x, idx, exc, match):
    with pytest.raises(exc, match=match):
        pcgeom.knn_gather(x, idx)
